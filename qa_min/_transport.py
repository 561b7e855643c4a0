"""One HTTP attempt, and the one place where standard-library errors become qa_min's.

``Transport.attempt`` checks a connection out of the pool (or opens one), writes the prepared
request, reads the response, and gives the connection back only if it was read to the end.
Every ``OSError``, ``ssl.SSLError``, ``http.client.HTTPException`` and deadline expiry that
the network can raise is caught in ``attempt`` and nowhere else, and leaves as:

* ``Canceled``, when the call's token was cancelled, its deadline passed, or the client closed;
* ``ConnectionFailed``, with ``retryable`` telling the retry loop whether trying again can help.

A reused connection that fails before a single response byte arrived was most likely closed by
the server while idle; the request goes out again once on a fresh connection, invisibly.
"""

from __future__ import annotations

import _thread
import socket
import time
from http.client import HTTPException

from ._connection import (
    Connection,
    Expired,
    Oversized,
    Pool,
    PoolClosed,
    Stopped,
    connect_tcp,
    open_tunnel,
    start_tls,
)
from ._errors import Canceled, ConnectionFailed, Diagnostics, InvalidResponse

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl
    from http.client import HTTPMessage
    from typing import Optional

    from ._client import CancelToken
    from ._config import Origin

_NETWORK_ERRORS = (OSError, HTTPException, Expired, Stopped)


class CallState:
    """What one call carries through its attempts, and what it tells its ``Diagnostics``."""

    __slots__ = (
        "attempts",
        "body",
        "deadline",
        "diagnostics",
        "rate_limit_wait",
        "status",
        "timeout",
        "token",
        "transport_error",
    )

    def __init__(
        self,
        token: Optional[CancelToken],
        timeout: Optional[float],
        diagnostics: Optional[Diagnostics] = None,
    ) -> None:
        self.token = token
        self.timeout = timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.diagnostics = diagnostics
        self.attempts = 0
        self.status: Optional[int] = None
        self.body: Optional[str] = None
        self.transport_error: Optional[BaseException] = None
        self.rate_limit_wait = 0.0  # seconds the rate limiter held the call back

    def fill(self) -> Diagnostics:
        """The caller's ``Diagnostics`` (or a new one), filled with what the call did."""
        diag = self.diagnostics if self.diagnostics is not None else Diagnostics()
        diag.status = self.status
        diag.body = self.body
        diag.attempts = self.attempts
        diag.transport_error = self.transport_error
        diag.rate_limit_wait = self.rate_limit_wait
        return diag


class Transport:
    """Connections to one origin, directly or through an HTTP proxy."""

    def __init__(
        self,
        origin: Origin,
        proxy: Optional[Origin],
        pool: Pool,
        ssl_context: Optional[ssl.SSLContext],
        max_body: int,
    ) -> None:
        self.origin = origin
        self.proxy = proxy
        self.pool = pool
        self.max_body = max_body
        self._ssl_context = ssl_context
        self._key = (
            origin.scheme,
            origin.host,
            origin.port,
            None if proxy is None else (proxy.host, proxy.port),
        )
        auth = None if proxy is None else proxy.basic_auth()
        self.proxy_headers = b"" if auth is None else f"Proxy-Authorization: {auth}\r\n".encode()

    def stop_reason(self, call: CallState) -> Optional[str]:
        """Why the call must stop now, or None to go on."""
        if call.token is not None and call.token.cancelled:
            return "the call was cancelled"
        if self.pool.closed:
            return "the client was closed"
        if call.deadline is not None and time.monotonic() >= call.deadline:
            return f"the call's timeout of {call.timeout:g} s expired"
        return None

    def check(self, call: CallState) -> None:
        """Raise ``Canceled`` if the call must stop."""
        reason = self.stop_reason(call)
        if reason is not None:
            raise Canceled(reason)

    def attempt(self, request: bytes, method: str, call: CallState) -> tuple[int, HTTPMessage, bytes]:
        """One HTTP attempt: (status, headers, body). Raises ``Canceled`` or ``ConnectionFailed``."""
        try:
            conn = self.pool.checkout(self._key)
        except PoolClosed:
            raise Canceled("the client was closed") from None
        call.attempts += 1
        if conn is not None:
            try:
                return self._exchange(conn, request, method, call)
            except _Stale:
                pass  # resend once on a fresh connection: not a retry, not an attempt
        return self._exchange(None, request, method, call)

    def _exchange(
        self, conn: Optional[Connection], request: bytes, method: str, call: CallState
    ) -> tuple[int, HTTPMessage, bytes]:
        token = call.token
        lease: Optional[_Lease] = None
        try:
            if conn is None:
                conn = self._open(call)
            if token is not None:
                lease = _Lease(conn)
                if not token._add_hook(lease.abort):
                    lease = None
                    raise Stopped
            status, headers, body, reusable = conn.exchange(request, method, call.deadline, self.max_body)
        except _NETWORK_ERRORS as exc:
            if conn is not None:
                self.pool.discard(conn)
            raise self._translate(exc, conn, call) from exc
        except Oversized as exc:
            self.pool.discard(conn)  # type: ignore[arg-type]
            call.status = exc.status
            raise InvalidResponse(str(exc)) from None
        except BaseException:
            if conn is not None:
                self.pool.discard(conn)
            raise
        finally:
            if lease is not None:
                token._remove_hook(lease.abort)  # type: ignore[union-attr]
                if not lease.end():
                    reusable = False  # the cancel lost the race with the answer, but shut the socket
        if reusable:
            self.pool.release(conn)
        else:
            self.pool.discard(conn)
        return status, headers, body

    def _translate(self, exc: BaseException, conn: Optional[Connection], call: CallState) -> BaseException:
        reason = self.stop_reason(call)
        if reason is None and isinstance(exc, (Expired, socket.timeout)) and call.deadline is not None:
            reason = f"the call's timeout of {call.timeout:g} s expired"
        if reason is not None or isinstance(exc, Stopped):
            return Canceled(reason or "the call was cancelled")
        if conn is not None and conn.idle_since and conn.received == 0:
            return _Stale()
        failure = ConnectionFailed(f"{self.origin.url()}: {_describe(exc)}")
        failure.diagnostics.transport_error = exc
        failure.retryable = not _is_certificate_error(exc)
        return failure

    def _open(self, call: CallState) -> Connection:
        target = self.proxy or self.origin
        sock = connect_tcp(
            target.host, target.port, call.deadline, lambda: self.stop_reason(call) is not None
        )
        conn = Connection(sock, self._key)
        try:
            self.pool.track(conn)
        except PoolClosed:
            raise Stopped from None
        if self.origin.scheme == "https":
            self._secure(conn, call)
        return conn

    def _secure(self, conn: Connection, call: CallState) -> None:
        """TLS over ``conn``, through the proxy's CONNECT tunnel if any; cancellable."""
        token = call.token
        hooked = token is not None and token._add_hook(conn.abort)
        try:
            if token is not None and not hooked:
                raise Stopped
            if self.proxy is not None:
                target = f"{self.origin.host}:{self.origin.port}"
                open_tunnel(conn, target, self.proxy_headers, call.deadline)
            start_tls(
                conn,
                self.ssl_context(),
                self.origin.host,
                call.deadline,
                lambda: self.stop_reason(call) is not None,
            )
        except BaseException:
            self.pool.discard(conn)
            raise
        finally:
            if hooked:
                token._remove_hook(conn.abort)  # type: ignore[union-attr]

    def ssl_context(self) -> ssl.SSLContext:
        """The caller's context, or a default one: system trust store, ``SSL_CERT_FILE``/``DIR``."""
        if self._ssl_context is None:
            import ssl

            self._ssl_context = ssl.create_default_context()
        return self._ssl_context


class _Lease:
    """A call's hold on a connection, so that a cancel arriving late cannot hit the next call.

    ``cancel()`` runs hooks outside its lock; by then the call may have finished and its
    connection may serve another call. ``end()`` closes the window: an abort after it does
    nothing, and an abort before it makes the connection unfit for the pool.
    """

    __slots__ = ("_conn", "_lock", "_state")

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = _thread.allocate_lock()
        self._state = 0  # 0 in use, 1 ended, 2 aborted

    def abort(self) -> None:
        with self._lock:
            if self._state:
                return
            self._state = 2
        self._conn.abort()

    def end(self) -> bool:
        """Stop honouring aborts; False if one already happened."""
        with self._lock:
            aborted = self._state == 2
            self._state = 1
        return not aborted


class _Stale(Exception):
    """A reused connection failed before any response byte: resend on a fresh one."""


def _is_certificate_error(exc: BaseException) -> bool:
    # Retrying cannot fix a certificate the client does not trust.
    import ssl

    return isinstance(exc, ssl.SSLCertVerificationError)


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text

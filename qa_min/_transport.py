"""One HTTP attempt, and the one place where standard-library errors become qa_min's.

``Transport.attempt`` checks a connection out of the pool (or opens one), writes the prepared
request, reads the response, and gives the connection back only if it was read to the end.
Every ``OSError``, ``ssl.SSLError``, ``ProtocolError`` and deadline expiry that the network can
raise is caught in ``attempt`` and nowhere else, and leaves as ``_failure.failure`` translates
it (``Canceled``, ``InvalidResponse`` or ``ConnectionFailed``), naming the proxy when the proxy
is what failed.

A reused connection that fails before a single response byte arrived was most likely closed by
the server while idle; the request goes out again once on a fresh connection: here, when it had
not gone out whole; through the retry loop (``Resend``), which counts it, when it had.
"""

from __future__ import annotations

import _thread
import os

from ._connection import (
    Connection,
    Expired,
    Pool,
    PoolClosed,
    Stopped,
    connect_tcp,
    open_tunnel,
    start_tls,
)
from ._diagnostics import ResponseHeaders
from ._errors import (
    Canceled,
    IncompleteMessage,
    InvalidResponse,
    ProtocolError,
    ProxyError,
)
from ._failure import failure, named
from ._http import Resend, TunnelBroken, TunnelRefused, encode

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl
    from typing import Optional

    from ._call import CallState
    from ._http import Outgoing
    from ._origin import Origin

if TYPE_CHECKING:
    from typing import Protocol

    class TransportLike(Protocol):
        """What the retry loop and the client need of a transport: this module's, or a mock."""

        origin: Origin

        def attempt(
            self, request: Outgoing, call: CallState, fresh: bool = False
        ) -> tuple[int, ResponseHeaders, bytes]: ...
        def close(self) -> None: ...
        def forget(self) -> None: ...


_NETWORK_ERRORS = (OSError, ProtocolError, Expired, Stopped, TunnelBroken)


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
        self.built_context = ssl_context  # the caller's, or the default once built
        self._key = (
            origin.scheme,
            origin.host,
            origin.port,
            None if proxy is None else (proxy.host, proxy.port),
        )
        self._plain_proxy = proxy is not None and origin.scheme == "http"
        auth = None if proxy is None else proxy.basic_auth()
        self.proxy_headers = b"" if auth is None else f"Proxy-Authorization: {auth}\r\n".encode()
        # Forms of the proxy credentials a proxy's error page might echo; never shown.
        self._proxy_secrets = () if proxy is None else proxy.secrets()
        self._proxy_name = "" if proxy is None else named(proxy)  # as messages name it

    def close(self) -> None:
        """Abort every connection in use and close the idle ones (the client is closing)."""
        self.pool.close()

    def forget(self) -> None:
        """In a forked child: drop the parent's connections without touching its sockets."""
        self.pool.forget()

    def attempt(
        self, request: Outgoing, call: CallState, fresh: bool = False
    ) -> tuple[int, ResponseHeaders, bytes]:
        """One HTTP attempt: (status, headers, body). Raises ``Canceled`` or ``ConnectionFailed``,
        or ``Resend`` when a reused connection failed after the request went out whole.

        ``fresh``: on a new connection, not a pooled one (the re-send after ``Resend``).
        """
        try:
            conn = None if fresh else self.pool.checkout(self._key)
        except PoolClosed:
            raise Canceled("the client was closed") from None
        data = encode(request)
        result = None
        if conn is not None:
            try:
                result = self._exchange(conn, data, request.method, call)
            except _Stale as stale:
                if stale.written:
                    # It may have reached the server: the retry loop counts it and sends again.
                    raise Resend(stale.error) from None
        if result is None:
            result = self._exchange(None, data, request.method, call)
        if result[0] in (401, 407) and self._plain_proxy:
            self._check_plain_proxy(result[0], result[1], result[2], request)
        return result

    def _exchange(
        self, conn: Optional[Connection], request: bytes, method: str, call: CallState
    ) -> tuple[int, ResponseHeaders, bytes]:
        try:
            if conn is None:
                conn = self._open(call)
                if self.origin.scheme == "https":
                    self._secure(conn, call)
            status, headers, body, reusable = self._leased(conn, request, method, call)
            if status in (401, 407) and self._plain_proxy:
                # A proxy that refused may leave the request body unread and the connection
                # dead while calling it keep-alive (squid does): never reuse it.
                reusable = False
        except (*_NETWORK_ERRORS, TunnelRefused) as exc:
            if conn is not None:
                self.pool.discard(conn)
            error, cause = self.failed(exc, conn, call)
            raise error from cause
        except BaseException:
            if conn is not None:
                self.pool.discard(conn)
            raise
        if reusable:
            self.pool.release(conn)
        else:
            self.pool.discard(conn)
        return status, headers, body

    def _leased(
        self, conn: Connection, request: bytes, method: str, call: CallState
    ) -> tuple[int, ResponseHeaders, bytes, bool]:
        """``conn.exchange``, during which cancelling the call's token shuts the socket down."""
        token = call.token
        if token is None:
            return conn.exchange(request, method, call.deadline, self.max_body)
        lease = _Lease(conn)
        with token.hooked(lease.abort) as armed:
            if not armed:
                raise Stopped
            try:
                status, headers, body, reusable = conn.exchange(request, method, call.deadline, self.max_body)
            finally:
                untouched = lease.end()
        # A cancel that lost the race with the answer still shut the socket: never pool it.
        return status, headers, body, reusable and untouched

    def _check_plain_proxy(
        self, status: int, headers: ResponseHeaders, body: bytes, request: Outgoing
    ) -> None:
        """Raise ``ProxyError`` if a 401/407 to a plain-http request came from the proxy itself."""
        # 407 is the proxy's by definition. A 401 is the proxy's when it challenges for proxy
        # credentials, or when it lacks the Via header that RFC 9110 §7.6.3 makes a proxy add to
        # every response it forwards (tinyproxy answers a wrong password so).
        if status == 407 or "proxy-authenticate" in headers or (self.proxy_headers and "via" not in headers):
            raise self._proxy_error(status, body, f"{request.method} {self.origin.url()}{request.path}")

    def _proxy_error(self, status: int, body: bytes, what: str) -> ProxyError:
        """The error for a proxy's refusal: its status and page, the proxy named without password."""
        from http.client import responses

        text = body.decode("utf-8", "replace")
        for secret in self._proxy_secrets:
            text = text.replace(secret, "[redacted]")
        hint = "; check the proxy user name and password" if status in (401, 407) else ""
        reason = f"HTTP {status} {responses.get(status, '')}".rstrip()
        error = ProxyError(f"proxy {self._proxy_name} refused {what}: {reason}{hint}", status=status)
        # A wrong or missing proxy password cannot succeed on retry; the retry loop decides others.
        error.retryable = status not in (401, 407)
        error.diagnostics.status = status
        error.diagnostics.body = text
        return error

    def failed(
        self, exc: BaseException, conn: Optional[Connection], call: CallState
    ) -> tuple[BaseException, Optional[BaseException]]:
        """What an exchange that raised ``exc`` (a network or protocol error, a tunnel refused or
        broken) becomes: (the error to raise, its cause). Both clients' transports raise what it says."""
        target = f"CONNECT to {self.origin.host}:{self.origin.port}"
        if isinstance(exc, TunnelRefused):
            return self._proxy_error(exc.status, exc.body, target), None
        where = None
        if isinstance(exc, TunnelBroken):
            # The proxy's failure, as its refusal is, though retried as any dropped connection
            # (urllib3 does too). Its closing is told as the proxy's, not as "the server's".
            exc, where = exc.error, f"proxy {self._proxy_name} failed {target}"
            if isinstance(exc, IncompleteMessage) and conn is not None and conn.received == 0:
                exc = IncompleteMessage("the proxy closed the connection before answering the CONNECT")
        error = self._translate(exc, conn, call, where)
        # A refused 2xx body: the refusal's text is the message, no cause shown.
        return error, (None if isinstance(error, InvalidResponse) else exc)

    def _translate(
        self, exc: BaseException, conn: Optional[Connection], call: CallState, where: Optional[str]
    ) -> BaseException:
        if conn is None and self.proxy is not None:
            # Connecting failed: through a proxy, the proxy is the host not reached.
            where = f"cannot reach proxy {self._proxy_name} (for {self.origin.url()})"
        error = failure(exc, self.origin, call, where, head=None if conn is None else conn.head)
        if not isinstance(error, Canceled) and conn is not None and conn.idle_since and conn.received == 0:
            return _Stale(conn.sent, exc)
        return error

    def _open(self, call: CallState) -> Connection:
        target = self.proxy or self.origin
        sock = connect_tcp(target.host, target.port, call.deadline, lambda: call.stop_reason() is not None)
        conn = Connection(sock, self._key)
        try:
            self.pool.track(conn)
        except PoolClosed:
            raise Stopped from None
        return conn

    def _secure(self, conn: Connection, call: CallState) -> None:
        """TLS over ``conn``, through the proxy's CONNECT tunnel if any; cancellable."""
        token = call.token
        if token is None:
            self._handshake(conn, call)
            return
        with token.hooked(conn.abort) as armed:
            if not armed:
                self.pool.discard(conn)
                raise Stopped
            self._handshake(conn, call)

    def _handshake(self, conn: Connection, call: CallState) -> None:
        try:
            if self.proxy is not None:
                target = f"{self.origin.host}:{self.origin.port}"
                open_tunnel(conn, target, self.proxy_headers, call.deadline, self.max_body)
            start_tls(
                conn,
                self.ssl_context(),
                self.origin.host,
                call.deadline,
                lambda: call.stop_reason() is not None,
            )
        except BaseException:
            self.pool.discard(conn)
            raise

    def ssl_context(self) -> ssl.SSLContext:
        """The caller's context, or a default one: system trust store, ``SSL_CERT_FILE``/``DIR``."""
        if self.built_context is None:
            self.built_context = default_context()
        return self.built_context


def default_context() -> ssl.SSLContext:
    """``ssl.create_default_context()``, a blank ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` read as unset.

    OpenSSL reads the two variables itself and takes one that is set, even empty or only
    whitespace, as the place to look instead of its default: a blank ``SSL_CERT_FILE`` left the
    system's CA bundle unread. The default place of each blank variable is loaded here as well.
    """
    import ssl

    context = ssl.create_default_context()
    blank_file, blank_dir = _blank("SSL_CERT_FILE"), _blank("SSL_CERT_DIR")
    if blank_file or blank_dir:
        paths = ssl.get_default_verify_paths()
        if blank_dir:
            context.load_verify_locations(capath=paths.openssl_capath)
        if blank_file:
            try:
                context.load_verify_locations(cafile=paths.openssl_cafile)
            except OSError:
                pass  # no bundle there: OpenSSL's own default loading skips it too
    return context


def _blank(name: str) -> bool:
    value = os.environ.get(name)
    return value is not None and not value.strip()


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

    def __init__(self, written: bool, error: BaseException) -> None:
        super().__init__()
        self.written = written  # the request went out whole
        self.error = error

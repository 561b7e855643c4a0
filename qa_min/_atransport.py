"""One HTTP attempt on asyncio: ``_transport``'s decisions, ``_aio``'s connections.

``AioTransport.attempt`` does what ``Transport.attempt`` does (check out or open, exchange,
release or discard, the stale-connection resend) with the same translation of every network
error into ``Canceled`` or ``ConnectionFailed``, the same proxy checks and messages: those are
the threaded transport's methods, called on the instance the client built. Only the waiting
differs. A ``CancelledError`` that qa_min caused (its ``Scope``) becomes ``Canceled``; any
other propagates. Either way the connection is aborted, never pooled.

``AioMock`` is ``MockTransport`` for the asyncio client: the handler runs on the loop's thread,
as a plain function; its ``delay``/``hang`` steps wait without blocking the loop.
"""

from __future__ import annotations

import asyncio
import os

from ._aio import AioConnection, AioPool, connect, open_tunnel, start_tls
from ._connection import PoolClosed, Stopped, _tune
from ._errors import Canceled, InvalidResponse, ProtocolError
from ._failure import failure, heard_head
from ._http import Resend, TunnelRefused, encode
from ._transport import _NETWORK_ERRORS, _Stale

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Awaitable
    from typing import Optional

    from ._ascope import Scope
    from ._call import CallState
    from ._connection import Connection
    from ._diagnostics import ResponseHeaders
    from ._http import Outgoing
    from ._mock import _Bound
    from ._transport import Transport

    Result = tuple[int, ResponseHeaders, bytes]


class AioTransport:
    """Connections to one origin on the running loop, directly or through an HTTP proxy."""

    def __init__(self, sync: Transport, pool: AioPool) -> None:
        self.sync = sync  # the decisions: origin, proxy, error translation, proxy refusals
        self.origin = sync.origin
        self.pool = pool

    def close(self) -> None:
        self.pool.close()

    def attempt(
        self, request: Outgoing, call: CallState, scope: Scope, fresh: bool = False
    ) -> Awaitable[Result]:
        """One HTTP attempt, to await: (status, headers, body). Raises ``Canceled`` or
        ``ConnectionFailed``, or ``Resend`` when a reused connection failed after the request
        went out whole. Not a coroutine itself: a call in flight keeps one frame less."""
        try:
            conn = None if fresh else self.pool.checkout(self.sync._key)
        except PoolClosed:  # pragma: no cover - aclose() stops a call before it gets here
            raise Canceled("the client was closed") from None
        if conn is None:
            return self._exchange(None, encode(request), request, call, scope)
        return self._reused(conn, encode(request), request, call, scope)

    async def _reused(
        self, conn: AioConnection, data: bytes, request: Outgoing, call: CallState, scope: Scope
    ) -> Result:
        try:
            return await self._exchange(conn, data, request, call, scope)
        except _Stale as stale:
            # Handed to the transport, so it may have reached the server (the loop writes at
            # once): as in Transport.attempt, the retry decisions count it and send it again.
            raise Resend(stale.error) from None

    async def _exchange(
        self, conn: Optional[AioConnection], data: bytes, request: Outgoing, call: CallState, scope: Scope
    ) -> Result:
        sync, pool = self.sync, self.pool
        try:
            if conn is None:
                # Opened here, not in a coroutine of its own: one frame less per call in flight.
                fresh = AioConnection(sync._key)
                peer = sync.proxy or sync.origin
                # The loop resolves the name (loop.getaddrinfo) unless it is an IP address. Until
                # it is connected, conn stays None: Transport.failed then names the peer unreached.
                try:
                    await connect(fresh, peer.host, peer.port)
                except OSError as exc:
                    raise _worded_as_socket(exc) from None
                conn = fresh
                self._opened(conn)
                if sync.origin.scheme == "https":
                    await self._secure(conn)
            status, headers, body, reusable = await conn.send(data, request.method, sync.max_body)
            if status in (401, 407) and sync._plain_proxy:
                reusable = False  # a refusing proxy may leave the body unread: never reuse
                sync._check_plain_proxy(status, headers, body, request)
        except asyncio.CancelledError as exc:
            if conn is not None:
                pool.discard(conn)
            # A deadline or a cancel after the head: the head goes with the Canceled, as
            # ``failure`` gives it to the threaded transport's.
            heard = heard_head(exc, None if conn is None else conn.head, call.redact)
            raise scope.absorb(exc, heard) from None
        except (*_NETWORK_ERRORS, TunnelRefused) as exc:
            if conn is not None:
                pool.discard(conn)
            error, cause = sync.failed(exc, _as_connection(conn), call)
            raise error from cause
        except BaseException:
            if conn is not None:
                pool.discard(conn)
            raise
        if reusable:
            pool.release(conn)
        else:
            pool.discard(conn)
        return status, headers, body

    def _opened(self, conn: AioConnection) -> None:
        sock = conn.transport.get_extra_info("socket") if conn.transport is not None else None
        if sock is not None:
            _tune(sock)
        try:
            self.pool.track(conn)
        except PoolClosed:  # pragma: no cover - aclose() cancels a connecting call's task first
            raise Stopped from None

    async def _secure(self, conn: AioConnection) -> None:
        """TLS over ``conn``, through the proxy's CONNECT tunnel if any."""
        sync = self.sync
        if sync.proxy is not None:
            where = f"{sync.origin.host}:{sync.origin.port}"
            await open_tunnel(conn, where, sync.proxy_headers, sync.max_body)
        context = sync.built_context
        if context is None:
            # The default context loads the trust store (tens of ms): off the loop, as asyncio
            # resolves names (SPEC 7b: no blocking call on the loop).
            context = await asyncio.get_running_loop().run_in_executor(None, sync.ssl_context)
        await start_tls(conn, context, sync.origin.host)


def _worded_as_socket(exc: OSError) -> OSError:
    """asyncio's failed connect as the socket module words it (``[Errno 111] Connection refused``,
    not ``Connect call failed ('10.0.0.1', 443)``): the same ``ConnectionFailed`` text and
    ``transport_error`` in both clients, which callers match on."""
    if exc.errno is None or not str(exc.strerror).startswith("Connect call failed"):
        return exc
    return OSError(exc.errno, os.strerror(exc.errno))  # the errno's own subclass, as connect_ex's


def _as_connection(conn: Optional[AioConnection]) -> Optional[Connection]:
    # ``Transport._translate`` reads what both connection classes have: ``idle_since``,
    # ``received``, ``sent`` and ``head``.
    return conn  # type: ignore[return-value]


class AioMock:
    """A ``MockTransport`` serving an ``AsyncClient``: ``_mock``'s decisions, waiting on the loop."""

    def __init__(self, bound: _Bound) -> None:
        self.bound = bound
        self.origin = bound.origin

    def close(self) -> None:
        """Nothing to release: no socket was opened."""

    async def attempt(self, request: Outgoing, call: CallState, scope: Scope, fresh: bool = False) -> Result:
        bound = self.bound
        mock = bound.mock
        recorded = bound.recorded(request)
        try:
            step = mock._take(recorded)
            if step is not None and step.kind in ("hang", "delay"):
                try:
                    # Until the step's time, or until the call's scope stops it (its timeout,
                    # its token, aclose()).
                    await asyncio.sleep(step.seconds if step.kind == "delay" else _FOREVER)
                except asyncio.CancelledError as exc:
                    raise scope.absorb(exc) from None
            status, body, headers = mock._answer(step, recorded, bound.origin.path)
            return bound.delivered(status, body, headers, call)
        except (OSError, ProtocolError) as exc:
            error = failure(exc, bound.origin, call, mocked=True)
            raise error from (None if isinstance(error, InvalidResponse) else exc)


_FOREVER = 1e9  # seconds: a hung mock waits until the call is stopped

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
import json

from ._aio import AioConnection, AioPool, open_tunnel, start_tls
from ._connection import BadBody, PoolClosed, Stopped, TunnelRefused, _tune
from ._diagnostics import ResponseHeaders
from ._errors import Canceled, ConnectionFailed, InvalidResponse
from ._response import HTTPException
from ._transport import _NETWORK_ERRORS, _Stale

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

    from ._ascope import Scope
    from ._call import CallState
    from ._connection import Connection
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

    async def attempt(self, request: bytes, method: str, call: CallState, scope: Scope) -> Result:
        """One HTTP attempt: (status, headers, body). Raises ``Canceled`` or ``ConnectionFailed``."""
        sync = self.sync
        try:
            conn = self.pool.checkout(sync._key)
        except PoolClosed:
            raise Canceled("the client was closed") from None
        call.attempts += 1
        result = None
        if conn is not None:
            try:
                result = await self._exchange(conn, request, method, call, scope)
            except _Stale as stale:
                # As in Transport.attempt: resent once on a fresh connection, counted if it
                # went out whole.
                call.attempts += stale.written
        if result is None:
            result = await self._exchange(None, request, method, call, scope)
        if result[0] in (401, 407) and sync._plain_proxy:
            sync._check_plain_proxy(result[0], result[1], result[2], method)
        return result

    async def _exchange(
        self, conn: Optional[AioConnection], request: bytes, method: str, call: CallState, scope: Scope
    ) -> Result:
        sync, pool = self.sync, self.pool
        try:
            if conn is None:
                # Opened here, not in a coroutine of its own: one frame less per call in flight.
                conn = AioConnection(sync._key)
                peer = sync.proxy or sync.origin
                # The loop resolves the name (loop.getaddrinfo) unless it is an IP address.
                await asyncio.get_running_loop().create_connection(conn.itself, peer.host, peer.port)
                self._opened(conn)
                if sync.origin.scheme == "https":
                    await self._secure(conn)
            status, headers, body, reusable = await conn.send(request, sync.max_body)
            if status in (401, 407) and sync._plain_proxy:
                reusable = False  # a refusing proxy may leave the body unread: never reuse
        except asyncio.CancelledError as exc:
            if conn is not None:
                pool.discard(conn)
            raise scope.absorb(exc) from None
        except _NETWORK_ERRORS as exc:
            if conn is not None:
                pool.discard(conn)
            raise sync._translate(exc, _as_connection(conn), call) from exc
        except BadBody as exc:
            pool.discard(conn)  # type: ignore[arg-type]
            call.status = exc.status
            raise InvalidResponse(str(exc)) from None
        except TunnelRefused as exc:
            pool.discard(conn)  # type: ignore[arg-type]
            target = f"CONNECT to {self.origin.host}:{self.origin.port}"
            raise sync._proxy_error(exc.status, exc.body, target) from None
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
        except PoolClosed:
            raise Stopped from None

    async def _secure(self, conn: AioConnection) -> None:
        """TLS over ``conn``, through the proxy's CONNECT tunnel if any."""
        sync = self.sync
        if sync.proxy is not None:
            where = f"{sync.origin.host}:{sync.origin.port}"
            await open_tunnel(conn, where, sync.proxy_headers, sync.max_body)
        await start_tls(conn, sync.ssl_context(), sync.origin.host)


def _as_connection(conn: Optional[AioConnection]) -> Optional[Connection]:
    # ``Transport._translate`` reads what both connection classes have: ``idle_since``,
    # ``received`` and ``sent``.
    return conn  # type: ignore[return-value]


class AioMock:
    """A ``MockTransport`` serving an ``AsyncClient``: as ``_mock._Bound``, waiting on the loop."""

    def __init__(self, bound: _Bound) -> None:
        self.bound = bound
        self.origin = bound.origin

    def close(self) -> None:
        """Nothing to release: no socket was opened."""

    async def attempt(self, request: bytes, method: str, call: CallState, scope: Scope) -> Result:
        from ._mock import _parse

        call.attempts += 1
        bound = self.bound
        recorded = _parse(request)
        try:
            status, body, headers = await self._serve(recorded, call, scope)
        except (OSError, HTTPException) as exc:
            failure = ConnectionFailed(f"{self.origin.url()}: {type(exc).__name__}: {exc}")
            failure.diagnostics.transport_error = exc
            raise failure from exc
        reason = call.stop_reason()
        if reason is not None:
            raise Canceled(reason)
        fields = list(headers)
        if not any(name.lower() == "content-length" for name, _ in fields):
            fields.append(("Content-Length", str(len(body))))
        if len(body) > bound.max_body:
            if 200 <= status < 300:
                call.status = status
                raise InvalidResponse(
                    f"the response body has {len(body)} bytes, over the {bound.max_body}-byte limit"
                )
            body = body[: bound.max_body]
        return status, ResponseHeaders(fields), body

    async def _serve(
        self, recorded: object, call: CallState, scope: Scope
    ) -> tuple[int, bytes, tuple[tuple[str, str], ...]]:
        from ._fakerules import Step, apply_rules
        from ._mock import _failure

        mock = self.bound.mock
        with mock._lock:
            mock._requests.append(recorded)  # type: ignore[arg-type]
        step = None if mock._handler is None else mock._handler(recorded)  # type: ignore[arg-type]
        if step is not None and not isinstance(step, Step):
            raise TypeError(f"a MockTransport handler returns a Step (reply(...)) or None, got {step!r}")
        kind = "normal" if step is None else step.kind
        failure = _failure(kind)
        if failure is not None:
            raise failure
        if kind in ("hang", "delay"):
            try:
                # Until the step's time, or until the scope stops the call.
                await asyncio.sleep(step.seconds if kind == "delay" else 1e9)  # type: ignore[union-attr]
            except asyncio.CancelledError as exc:
                raise scope.absorb(exc) from None
        if step is not None and kind == "reply":
            return step.status, step.body, tuple(step.headers)
        status, payload, headers = apply_rules(
            recorded,  # type: ignore[arg-type]
            {},
            api_key=mock._api_key,
            prefix=self.bound.origin.path,
            models=mock._models,
        )
        return status, json.dumps(payload).encode(), (*headers, ("Content-Type", "application/json"))

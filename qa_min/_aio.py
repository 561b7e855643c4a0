"""The asyncio connection layer: one keep-alive connection as an ``asyncio.Protocol``, and its pool.

The threaded client blocks a thread in ``recv``; here the event loop calls ``data_received``
and the bytes go to a response reader that does no I/O. A call awaits one future per exchange,
which the protocol resolves with the response or fails with what broke. No task is created per
call and no thread is started: name resolution is the loop's (``loop.create_connection``), TLS
and CONNECT tunnels go through ``loop.start_tls``.

States of an ``AioConnection`` (as ``_connection``'s)::

    open_connection() ──> busy ──exchange ok, reusable──> idle (in the pool) ──checkout──> busy
                           │                                  │
                           └─error, cancel, not reusable──────┴─peer closed / too old──> closed

While idle, the loop keeps reading the socket: a server that closes an idle connection is seen
at once (``lost``), and bytes it sends unasked make it unfit (``dirty``). That replaces the
zero-timeout poll the threaded pool makes before reuse.

Deadlines and cancellation are not handled here: the call's task is cancelled (see
``_ascope``) and every ``except BaseException`` below aborts the connection, so an interrupted
exchange never reaches the pool.
"""

from __future__ import annotations

import asyncio
import io

from ._connection import PoolClosed, Stopped, TunnelRefused, idle_clock
from ._response import MAX_HEADERS, MAX_LINE, IncompleteRead, MalformedHead, _framing, read_body, read_head

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl
    from collections.abc import Hashable
    from typing import Optional

    from ._diagnostics import ResponseHeaders

    Result = tuple[int, ResponseHeaders, bytes, bool]

_HEAD_LIMIT = MAX_LINE * (MAX_HEADERS + 2)  # bytes without a complete head before it is refused


class _Feed:
    """Bytes in, one response out: ``receive(data)`` gives None until the response is complete.

    It frames the response (head, then Content-Length, chunked or until close) to know when it
    is whole, then reads it with ``_response``'s reader, so that both clients refuse the same
    responses for the same reasons. ``receive_eof()`` ends it: the response, or the reader's error.
    """

    __slots__ = ("_buf", "_limit", "_searched", "_start", "_tunnel", "extra")

    def __init__(self, limit: int, tunnel: bool = False) -> None:
        self._buf = bytearray()
        self._limit = limit
        self._tunnel = tunnel  # a CONNECT: a 2xx head ends the response, whatever follows
        self.extra = False  # bytes came after the response: the connection is not reused
        self._start = self._searched = 0  # where the final head may start; how far it was sought

    def receive(self, data: bytes) -> Optional[Result]:
        self._buf += data
        return self._parse(False)

    def receive_eof(self) -> Result:
        result = self._parse(True)
        assert result is not None
        return result

    def _parse(self, eof: bool) -> Optional[Result]:
        buf = self._buf
        if not eof and not self._head_complete(buf):
            return None
        fp = io.BufferedReader(io.BytesIO(bytes(buf)))
        head = read_head(fp)
        if self._tunnel and 200 <= head.status < 300:
            self.extra = len(buf) > head.consumed
            return head.status, head.headers, b"", True
        if not eof and not self._body_complete(head.status, head.headers, len(buf) - head.consumed):
            return None
        try:
            body, reusable = read_body(fp, head, self._limit)
        except IncompleteRead:
            if eof:
                raise
            return None  # a chunked body whose end only looked near
        chunked = head.headers.get("transfer-encoding") is not None
        if not eof and not reusable and chunked and len(buf) - head.consumed <= self._limit:
            return None  # a chunked body cut short reads as "not reusable": the rest may come
        self.extra = fp.tell() < len(buf)
        return head.status, head.headers, body, reusable

    def _head_complete(self, buf: bytearray) -> bool:
        """Whether the final head (after any interim 1xx) has arrived, or enough to refuse it."""
        start = self._start
        while True:
            # From where the last look ended: a head that trickles in is not searched again.
            base = max(start, self._searched - 2)
            end = buf.find(b"\n\r\n", base)
            if end < 0 or b"\n\n" in buf[base:end]:  # a head may end in bare line feeds
                bare = buf.find(b"\n\n", base)
                end = bare if end < 0 or 0 <= bare < end else end
            if end < 0:
                self._searched = len(buf)
                if len(buf) - start > _HEAD_LIMIT:
                    raise MalformedHead(f"a response head over {_HEAD_LIMIT} bytes")
                return False
            code = bytes(buf[start + 9 : start + 12])
            if not (code[:1] == b"1" and code != b"101"):
                return True
            start = self._start = end + (3 if buf[end + 1 : end + 2] == b"\r" else 2)

    def _body_complete(self, status: int, headers: ResponseHeaders, have: int) -> bool:
        if have > self._limit:
            return True  # over the cap: the reader refuses or cuts it now
        try:
            kind, length = _framing(headers, status)
        except Exception:
            return True  # badly framed: the reader says why
        if kind == 0:  # no body
            return True
        if kind == 1:  # Content-Length; a 2xx over the limit is refused unread, another status cut
            if length > self._limit:
                return 200 <= status < 300 or have >= self._limit
            return have >= length
        if kind == 2:  # chunked: the last chunk and the trailers end in an empty line
            return self._buf.endswith((b"\n\r\n", b"\n\n"))
        return False  # until the server closes


class AioConnection(asyncio.Protocol):
    """A connection to one origin (or proxy), serving one request at a time."""

    __slots__ = (
        "_feed",
        "_waiter",
        "aborted",
        "dirty",
        "idle_since",
        "key",
        "lost",
        "received",
        "sent",
        "transport",
    )

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.transport: Optional[asyncio.Transport] = None
        self.idle_since = 0.0
        self.received = 0  # response bytes received in the current exchange
        self.sent = False  # the current exchange's request was handed to the socket
        self.lost = False  # the connection is closed, by either side
        self.dirty = False  # bytes arrived while no exchange wanted them
        self.aborted = False
        self._feed: Optional[_Feed] = None
        self._waiter: Optional[asyncio.Future[Result]] = None

    def itself(self) -> AioConnection:
        """The protocol factory of ``loop.create_connection``: this connection."""
        return self

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        feed, waiter = self._feed, self._waiter
        if feed is None or waiter is None or waiter.done():
            self.dirty = True
            return
        self.received += len(data)
        try:
            result = feed.receive(data)
        except Exception as exc:
            waiter.set_exception(exc)
            return
        if result is not None:
            self._resolve(waiter, feed, result)

    def eof_received(self) -> bool:
        self._ended(None)
        return False  # let the transport close itself

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.lost = True
        self._ended(exc)

    def _ended(self, exc: Optional[BaseException]) -> None:
        feed, waiter = self._feed, self._waiter
        if feed is None or waiter is None or waiter.done():
            return
        if self.aborted:
            waiter.set_exception(Stopped())
        elif exc is not None and self.received == 0:
            waiter.set_exception(exc)  # a reset before any byte says more than "no response"
        else:
            try:
                result = feed.receive_eof()
            except Exception as error:
                waiter.set_exception(error)
            else:
                self._resolve(waiter, feed, result)

    def _resolve(self, waiter: asyncio.Future[Result], feed: _Feed, result: Result) -> None:
        status, headers, body, reusable = result
        self._waiter = self._feed = None  # bytes from now on are unasked for
        waiter.set_result((status, headers, body, reusable and not (feed.extra or self.dirty or self.lost)))

    # -- used by the transport --------------------------------------------------------------

    def send(self, request: bytes, max_body: int, tunnel: bool = False) -> asyncio.Future[Result]:
        """Send ``request``; the future is the response: (status, headers, body, reusable).

        It fails with what the reader raises, the ``OSError`` that closed the connection, or
        ``Stopped`` after ``abort()``. A response that arrived before the connection broke (an
        early 401 or 413) is the result, not reusable. A plain method, not a coroutine: the
        caller's frame is the only one a call in flight keeps.
        """
        transport = self.transport
        assert transport is not None
        self._waiter = waiter = asyncio.get_running_loop().create_future()
        self._feed = _Feed(max_body, tunnel)
        self.received = 0
        self.sent = not self.lost
        if self.lost:
            waiter.set_exception(ConnectionResetError("the connection was closed"))
        else:
            transport.write(request)
        return waiter

    def abort(self) -> None:
        """Close at once, without waiting for buffered writes; a waiting exchange gets ``Stopped``."""
        self.aborted = True
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        """Close without ceremony: over TLS, waiting for the peer's close_notify could outlive
        the loop (and leave the socket open); the HTTP framing already told where data ended."""
        if self.transport is not None:
            self.transport.abort()


async def start_tls(conn: AioConnection, context: ssl.SSLContext, host: str) -> None:
    """TLS over ``conn``, the certificate checked against ``host``."""
    assert conn.transport is not None
    loop = asyncio.get_running_loop()
    secured = await loop.start_tls(conn.transport, conn, context, server_hostname=host)
    if secured is None:  # pragma: no cover - the loop closed the connection under us
        raise ConnectionResetError("the connection closed during the TLS handshake")
    conn.transport = secured


async def open_tunnel(conn: AioConnection, target: str, headers: bytes, max_body: int) -> None:
    """Ask the HTTP proxy behind ``conn`` for a CONNECT tunnel to ``target`` ("host:port")."""
    host = target.encode("ascii")
    request = b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (host, host, headers)
    conn.idle_since = 0.0  # a fresh connection: its failures are never "stale"
    status, _, body, clean = await conn.send(request, max_body, tunnel=True)
    if 200 <= status < 300:
        # A 2xx to CONNECT has no body (RFC 9110 §9.3.6) and the origin speaks only after our
        # TLS hello: bytes already here would be lost.
        if not clean:
            raise MalformedHead("the proxy sent data before the TLS handshake")
        return
    raise TunnelRefused(status, body)


class AioPool:
    """Idle connections by key, bounded to ``max_idle`` per key; the busy ones, for ``close()``.

    Only the loop's thread touches it, so it needs no lock.
    """

    def __init__(self, max_idle: int, idle_timeout: float) -> None:
        self.max_idle = max_idle
        self.idle_timeout = idle_timeout
        self.closed = False
        self._idle: dict[Hashable, list[AioConnection]] = {}
        self._busy: set[AioConnection] = set()

    def checkout(self, key: Hashable) -> Optional[AioConnection]:
        """A live idle connection for ``key``, now busy (the most recent first); None if none."""
        if self.closed:
            raise PoolClosed
        stack = self._idle.get(key)
        while stack:
            conn = stack.pop()
            age = idle_clock() - conn.idle_since
            if 0 <= age <= self.idle_timeout and not (conn.lost or conn.dirty):
                self._busy.add(conn)
                return conn
            conn.close()
        return None

    def track(self, conn: AioConnection) -> None:
        """Mark a new connection busy, so that ``close()`` can abort it."""
        if self.closed:
            conn.abort()
            raise PoolClosed
        self._busy.add(conn)

    def release(self, conn: AioConnection) -> None:
        """Keep a connection whose response was read whole, if there is room."""
        self._busy.discard(conn)
        stack = self._idle.setdefault(conn.key, [])
        if self.closed or conn.lost or conn.dirty or len(stack) >= self.max_idle:
            conn.close()
            return
        conn.idle_since = idle_clock()
        stack.append(conn)

    def discard(self, conn: AioConnection) -> None:
        """Close a connection that failed, was interrupted or must not be reused."""
        self._busy.discard(conn)
        conn.abort()

    def idle_count(self) -> int:
        return sum(len(stack) for stack in self._idle.values())

    def busy_count(self) -> int:
        return len(self._busy)

    def close(self) -> None:
        """Close the idle connections and abort the busy ones. Idempotent."""
        self.closed = True
        idle = [conn for stack in self._idle.values() for conn in stack]
        self._idle.clear()
        busy, self._busy = self._busy, set()
        for conn in idle:
            conn.close()
        for conn in busy:
            conn.abort()

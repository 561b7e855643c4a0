"""The asyncio connection layer: one keep-alive connection as an ``asyncio.Protocol``, and its pool.

The threaded client blocks a thread in ``recv``; here the event loop calls ``data_received``
and the bytes go to a response reader that does no I/O. A call awaits one future per exchange,
which the protocol resolves with the response or fails with what broke. No task is created per
call and no thread is started: name resolution is the loop's (``loop.getaddrinfo``, on its
executor), each address is tried in turn as the threaded client tries them (``connect``), TLS
and CONNECT tunnels go through ``loop.start_tls``.

States of an ``AioConnection`` (as ``_connection``'s)::

    open_connection() ──> busy ──exchange ok, reusable──> idle (in the pool) ──checkout──> busy
                           │                                  │
                           └─error, cancel, not reusable──────┴─peer closed / too old──> closed

While idle, the loop keeps reading the socket: a server that closes an idle connection is seen
at once (``lost``), and bytes it sends unasked make it unfit (``dirty``). A loop that was not
running meanwhile (stopped between calls, a Lambda frozen) has not read them yet, so checkout
also makes the threaded pool's zero-timeout poll (``peer_closed``).

A transport closes its socket on the loop's next turn, which a closed loop never takes: a pool
left behind by a loop that ended is closed with ``AioPool.close_orphaned`` instead.

Deadlines and cancellation are not handled here: the call's task is cancelled (see
``_ascope``) and every ``except BaseException`` below aborts the connection, so an interrupted
exchange never reaches the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

from ._connection import PoolClosed, Stopped, _wait, idle_clock
from ._errors import MalformedHead, ProtocolError
from ._http import TunnelBroken, TunnelRefused, connect_request
from ._protocol import NEED_DATA, Data, Head, ResponseReader

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl
    from collections.abc import Hashable
    from typing import Optional

    from ._diagnostics import ResponseHeaders

    Result = tuple[int, ResponseHeaders, bytes, bool]


class AioConnection(asyncio.Protocol):
    """A connection to one origin (or proxy), serving one request at a time."""

    __slots__ = (
        "_parts",
        "_reader",
        "_waiter",
        "aborted",
        "dirty",
        "head",
        "idle_since",
        "key",
        "lost",
        "raw",
        "received",
        "sent",
        "transport",
    )

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.transport: Optional[asyncio.Transport] = None
        self.raw: Optional[asyncio.Transport] = None  # the socket's, under any TLS layer
        self.idle_since = 0.0
        self.received = 0  # response bytes received in the current exchange
        self.sent = False  # the current exchange's request was handed to the socket
        self.lost = False  # the connection is closed, by either side
        self.dirty = False  # bytes arrived while no exchange wanted them
        self.aborted = False
        self._reader: Optional[ResponseReader] = None
        # The current exchange's response head, once read: an error after it still reports it.
        self.head: Optional[Head] = None
        self._parts: list[bytes] = []
        self._waiter: Optional[asyncio.Future[Result]] = None

    def itself(self) -> AioConnection:
        """The protocol factory of ``loop.create_connection``: this connection."""
        return self

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = self.raw = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        reader, waiter = self._reader, self._waiter
        if reader is None or waiter is None or waiter.done():
            self.dirty = True
            return
        self.received += len(data)
        reader.receive(data)
        self._advance(reader, waiter)

    def eof_received(self) -> bool:
        self._ended(None)
        return False  # let the transport close itself

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.lost = True
        self._ended(exc)

    def _ended(self, exc: Optional[BaseException]) -> None:
        reader, waiter = self._reader, self._waiter
        if reader is None or waiter is None or waiter.done():
            return
        if self.aborted:
            waiter.set_exception(Stopped())
        elif exc is not None:
            # A reset before any byte says more than "no response"; after a non-2xx head the
            # status is the answer, whatever of its body came (as the threaded connection).
            self._failed(waiter, exc)
        else:
            reader.receive(b"")
            self._advance(reader, waiter)

    def _advance(self, reader: ResponseReader, waiter: asyncio.Future[Result]) -> None:
        """Read the events the bytes so far make; resolve the exchange at its end or error."""
        try:
            while True:
                event = reader.next_event()
                if event is NEED_DATA:
                    return
                if type(event) is Data:
                    self._parts.append(event.data)
                elif type(event) is Head:
                    self.head = event
                else:
                    self._resolve(waiter, event.reusable)  # type: ignore[union-attr]
                    return
        except ProtocolError as exc:
            self._failed(waiter, exc)

    def _failed(self, waiter: asyncio.Future[Result], exc: BaseException) -> None:
        head = self.head
        if head is None or 200 <= head.status < 300:
            waiter.set_exception(exc)
        else:
            self._resolve(waiter, False)

    def _resolve(self, waiter: asyncio.Future[Result], reusable: bool) -> None:
        head, parts = self.head, self._parts
        assert head is not None
        self._reader = self._waiter = self.head = None  # bytes from now on are unasked for
        self._parts = []
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        waiter.set_result((head.status, head.headers, body, reusable and not (self.dirty or self.lost)))

    # -- used by the transport --------------------------------------------------------------

    def peer_closed(self) -> bool:
        """True if the socket has bytes to read while idle: the server closed it, reset it or
        wrote to it, and the loop has not run since to tell (``lost``, ``dirty``)."""
        # A loop stopped between calls (run_until_complete in a Lambda handler, frozen and thawed)
        # runs the next call's checkout before it reads the socket: the zero-timeout poll the
        # threaded pool makes keeps a request from going out on a connection already closed.
        sock = None if self.raw is None else self.raw.get_extra_info("socket")
        if sock is None:
            return False
        try:
            return _wait(sock, False, 0.0)
        except (OSError, ValueError):
            return True

    def send(self, request: bytes, method: str, max_body: int) -> asyncio.Future[Result]:
        """Send ``request``; the future is the response: (status, headers, body, reusable).

        It fails with what the reader raises, the ``OSError`` that closed the connection, or
        ``Stopped`` after ``abort()``. A response that arrived before the connection broke (an
        early 401 or 413) is the result, not reusable. A plain method, not a coroutine: the
        caller's frame is the only one a call in flight keeps.
        """
        transport = self.transport
        assert transport is not None
        self._waiter = waiter = asyncio.get_running_loop().create_future()
        self._reader = ResponseReader(method, max_body)
        self.head, self._parts = None, []
        self.received = 0
        # A connection found closed is never checked out, and nothing runs between the
        # checkout and this write: the request goes out (or fails in connection_lost).
        transport.write(request)
        self.sent = True
        return waiter

    def abort(self) -> None:
        """Close at once, without waiting for buffered writes; a waiting exchange gets ``Stopped``."""
        self.aborted = True
        self.close()

    def close(self) -> None:
        """Close without ceremony: over TLS, waiting for the peer's close_notify could outlive
        the loop (and leave the socket open); the HTTP framing already told where data ended."""
        if self.transport is None:
            return
        try:
            self.transport.abort()
        except RuntimeError:
            # The loop is closed: a call's task of that loop finalized by the garbage collector
            # ends here. That loop will never close the socket.
            self.close_orphaned()

    def close_orphaned(self) -> None:
        """Close at once a connection whose event loop is closed: its socket too, here and now.

        ``abort()`` leaves the socket's closing to the loop's next turn, which a closed loop never
        takes (scheduling it raises ``RuntimeError``): the socket would stay open until garbage
        collection. asyncio has no public call for this, so the socket transport's own last step
        (``_call_connection_lost``, which closes the socket) is run here, as the loop would have.
        """
        self.lost = self.aborted = True
        self._reader = self._waiter = None  # a future of the closed loop: nothing may resolve it
        raw, tls = self.raw, self.transport
        # Each step may raise "Event loop is closed" where it would schedule the next on the loop.
        with contextlib.suppress(RuntimeError):
            if raw is not None:
                raw.abort()  # marks it closing
        finish = getattr(raw, "_call_connection_lost", None)
        if finish is not None and getattr(raw, "_sock", None) is not None:
            with contextlib.suppress(RuntimeError):
                finish(None)  # closes the socket, whatever the protocol's connection_lost raises
        if tls is not None and tls is not raw:
            with contextlib.suppress(RuntimeError):
                tls.abort()  # last: its socket closed, it now marks itself closed on any Python


async def connect(conn: AioConnection, host: str, port: int) -> None:
    """Connect ``conn`` to the first of ``host``'s addresses that accepts, in the resolver's
    order; if none does, raise the last one's ``OSError``: ``_connection.connect_tcp``'s rule."""
    # Not loop.create_connection(host, port): given several addresses that all fail, it raises
    # one OSError worded "Multiple exceptions: ..." with no errno (3.12's all_errors= aside),
    # where the threaded client reports the last address's "Connection refused".
    loop = asyncio.get_running_loop()
    if _numeric(host):  # no resolver to ask, so no executor thread (as create_connection)
        found = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    else:
        found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    last: Optional[OSError] = None
    for family, kind, proto, _, address in found:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
            await loop.create_connection(conn.itself, sock=sock)
            return
        except OSError as exc:
            sock.close()
            last = exc
        except BaseException:
            sock.close()
            raise
    raise last if last is not None else OSError(f"no address found for {host}")


def _numeric(host: str) -> bool:
    """True for an IPv4 or IPv6 address (a zone after "%" aside)."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host.partition("%")[0])
        except OSError:
            continue
        return True
    return False


async def start_tls(conn: AioConnection, context: ssl.SSLContext, host: str) -> None:
    """TLS over ``conn``, the certificate checked against ``host``."""
    assert conn.transport is not None
    loop = asyncio.get_running_loop()
    try:
        secured = await loop.start_tls(conn.transport, conn, context, server_hostname=host)
    except ConnectionResetError as exc:
        if exc.args:  # a reset, worded by the socket as the threaded client's
            raise
        # The peer closed during the handshake: asyncio's TLS layer says so with the bare class.
        raise _closed_in_handshake(context, host) from None
    if secured is None:  # pragma: no cover - the loop closed the connection under us
        raise ConnectionResetError("the connection closed during the TLS handshake")
    conn.transport = secured


def _closed_in_handshake(context: ssl.SSLContext, host: str) -> Exception:
    """What OpenSSL says of a peer that closed during the handshake, which the threaded client
    reports (``SSLEOFError: [SSL: UNEXPECTED_EOF_WHILE_READING] EOF occurred ...`` on OpenSSL 3):
    the same handshake, started on a memory BIO that holds only the end of the stream."""
    import ssl  # loaded already: ``context`` is one of its objects

    incoming = ssl.MemoryBIO()
    incoming.write_eof()
    try:
        context.wrap_bio(incoming, ssl.MemoryBIO(), server_hostname=host).do_handshake()
    except ssl.SSLError as exc:
        return exc
    return ConnectionResetError("the connection closed during the TLS handshake")  # pragma: no cover


async def open_tunnel(conn: AioConnection, target: str, headers: bytes, max_body: int) -> None:
    """Ask the HTTP proxy behind ``conn`` for a CONNECT tunnel to ``target`` ("host:port");
    ``TunnelRefused`` if it says no, ``TunnelBroken`` if its connection fails before it answers."""
    conn.idle_since = 0.0  # a fresh connection: its failures are never "stale"
    try:
        status, _, body, clean = await conn.send(connect_request(target, headers), "CONNECT", max_body)
        if 200 <= status < 300:
            # A 2xx to CONNECT has no body (RFC 9110 §9.3.6) and the origin speaks only after our
            # TLS hello: bytes already here would be lost.
            if not clean:
                raise MalformedHead("the proxy sent data before the TLS handshake")
            return
    except (OSError, ProtocolError) as exc:
        # Only the proxy has been spoken to: what broke is its failure, not the origin's.
        raise TunnelBroken(exc) from None
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
            if 0 <= age <= self.idle_timeout and not (conn.lost or conn.dirty or conn.peer_closed()):
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

    def close_orphaned(self) -> None:
        """``close()`` once the loop that served the connections is closed: each socket closed
        here, nothing scheduled on that loop (see ``AioConnection.close_orphaned``). Idempotent."""
        self.closed = True
        conns = [conn for stack in self._idle.values() for conn in stack]
        conns.extend(self._busy)
        self._idle.clear()
        self._busy = set()
        for conn in conns:
            conn.close_orphaned()

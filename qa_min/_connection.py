"""One keep-alive connection and one HTTP exchange over it.

Requests go out as bytes prepared by the client; ``_protocol.ResponseReader`` (no I/O) is fed
what each ``recv`` returns, under the call's deadline, and the bytes received are counted: that
tells a stale keep-alive connection (nothing came back) from a dropped response.

States of a ``Connection``::

    open_connection() ──> busy ──exchange ok, reusable──> idle (in the pool) ──checkout──> busy
                           │                                  │
                           └─error, cancel, not reusable──────┴─peer closed / too old──> closed

Cancellation from another thread calls ``abort()``, which shuts the socket down: a blocked
``recv``/``send`` returns at once, and the connection is never pooled again.
"""

from __future__ import annotations

import _thread
import errno
import os
import select
import socket
import sys
import time

from ._errors import MalformedHead, ProtocolError
from ._http import TunnelBroken, TunnelRefused, connect_request
from ._protocol import NEED_DATA, Data, End, Head, ResponseReader

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl
    from collections.abc import Hashable
    from typing import Callable, Optional

    from ._call import CancelToken
    from ._diagnostics import ResponseHeaders

_PIECE = 65536  # bytes asked of one recv
_CONNECT_SLICE = 0.05  # how often a connect in progress looks at its cancel token, in seconds
_IN_PROGRESS = {
    errno.EINPROGRESS,
    errno.EWOULDBLOCK,
    errno.EAGAIN,
    getattr(errno, "WSAEWOULDBLOCK", errno.EWOULDBLOCK),
}
_poll = getattr(select, "poll", None)

if hasattr(time, "CLOCK_BOOTTIME"):

    def idle_clock() -> float:
        """Seconds on a clock that keeps running while the process or machine is suspended."""
        # A Lambda frozen for minutes must find its idle connections old, not fresh.
        return time.clock_gettime(time.CLOCK_BOOTTIME)
else:  # pragma: no cover - macOS and Windows
    idle_clock = time.monotonic


class Expired(Exception):
    """The call's deadline passed during network I/O."""


class Stopped(Exception):
    """The call was cancelled (``abort()``, or while connecting)."""


def _wait(sock: socket.socket, for_write: bool, timeout: float) -> bool:
    """True when ``sock`` is writable (or readable), False after ``timeout`` seconds."""
    if _poll is not None:
        poller = _poll()
        poller.register(sock, select.POLLOUT if for_write else select.POLLIN)
        return bool(poller.poll(max(0.0, timeout) * 1000.0))
    want = ([], [sock], [sock]) if for_write else ([sock], [], [])  # pragma: no cover
    return any(select.select(*want, max(0.0, timeout)))  # pragma: no cover


def _remaining(deadline: Optional[float]) -> Optional[float]:
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise Expired
    return left


def _tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # Keep-alive probes notice a peer that vanished (a NAT that forgot us, a dead host) during
    # a long wait, instead of hanging until the kernel's retransmission gives up (~15 min).
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


def connect_tcp(
    host: str, port: int, deadline: Optional[float], stopped: Callable[[], bool]
) -> socket.socket:
    """A connected, tuned, blocking TCP socket; raises ``OSError``, ``Expired`` or ``Stopped``."""
    last: Optional[OSError] = None
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            # Non-blocking, so that a connect stuck on a full accept backlog or a black-holed
            # address still looks at its cancel token and deadline.
            sock.setblocking(False)
            code = sock.connect_ex(address)
            while code in _IN_PROGRESS:
                if stopped():
                    raise Stopped
                left = _remaining(deadline)
                if _wait(sock, True, _CONNECT_SLICE if left is None else min(left, _CONNECT_SLICE)):
                    code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                raise OSError(code, os.strerror(code))
            sock.setblocking(True)
            _tune(sock)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
        except BaseException:
            sock.close()
            raise
    raise last if last is not None else OSError(f"no address found for {host}")


class Connection:
    """A socket to one origin (or a proxy), used by one request at a time."""

    __slots__ = ("aborted", "deadline", "head", "idle_since", "key", "received", "sent", "sock")

    def __init__(self, sock: socket.socket, key: tuple[object, ...]) -> None:
        self.sock = sock
        self.key = key
        self.deadline: Optional[float] = None
        self.received = 0  # response bytes received in the current exchange
        self.sent = False  # the current exchange's request was written whole
        self.head: Optional[Head] = None  # the current exchange's response head, once read
        self.aborted = False
        self.idle_since = 0.0

    def peer_closed(self) -> bool:
        """True if the server closed (or wrote to) this idle connection: it must not be reused."""
        # An idle HTTP connection has nothing to read; readable means EOF, RST or garbage.
        try:
            return _wait(self.sock, False, 0.0)
        except (OSError, ValueError):
            return True

    def abort(self) -> None:
        """Shut the socket down from any thread, waking a blocked send or recv."""
        self.aborted = True
        try:
            # The plain socket's shutdown, not SSLSocket's, which would unset its SSL object
            # under the feet of the thread reading from it.
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:  # pragma: no cover - close() of a broken SSL socket
            pass

    def exchange(
        self, request: bytes, method: str, deadline: Optional[float], max_body: int
    ) -> tuple[int, ResponseHeaders, bytes, bool]:
        """Send ``request`` and read one response: (status, headers, body, reusable).

        A 2xx body over ``max_body`` bytes or badly framed raises ``ProtocolError`` with its
        ``status``; other statuses come back with what of their body could be read. A response
        sent before the send failed (a 401 before reading a large body) is returned. Raises
        ``OSError``/``ProtocolError``, ``Expired`` (deadline) and ``Stopped`` (``abort()``).
        """
        self.deadline = deadline
        self.received, self.sent, self.head = 0, False, None
        self.sock.settimeout(_remaining(deadline))
        reader = ResponseReader(method, max_body)
        try:
            self.sock.sendall(request)
        except OSError as exc:
            if self.aborted:
                raise Stopped from None
            if not _peer_gone(exc):
                raise
            # The peer is gone, so the receive buffer holds all it will ever get: reading cannot
            # block. A server that answers before reading the whole request (401, 413) and then
            # closes makes the send fail; its answer is still the answer.
            try:
                return (*self.read_response(reader)[:3], False)
            except (OSError, ProtocolError):
                if self.received == 0:
                    raise exc from None
                raise
        self.sent = True
        return self.read_response(reader)

    def recv(self) -> bytes:
        """The next bytes from the socket (``b""`` at its end), within the call's deadline."""
        if self.deadline is not None:
            self.sock.settimeout(_remaining(self.deadline))
        try:
            data = self.sock.recv(_PIECE)
        except OSError:
            if self.aborted:
                raise Stopped from None
            raise
        if not data and self.aborted:
            # The end of the stream came from abort(), not from the server: the call was
            # cancelled, whatever part of a response had arrived.
            raise Stopped
        self.received += len(data)
        return data

    def read_head(self, reader: ResponseReader) -> Head:
        """Feed ``reader`` until the final response's head."""
        while True:
            event = reader.next_event()
            if event is NEED_DATA:
                reader.receive(self.recv())
            elif type(event) is Head:
                return event

    def read_response(
        self, reader: ResponseReader, head: Optional[Head] = None
    ) -> tuple[int, ResponseHeaders, bytes, bool]:
        """Feed ``reader`` until the end of one response: (status, headers, body, reusable)."""
        # Kept, so that an error after the head (a reset, a timeout) still reports it.
        self.head = head = self.read_head(reader) if head is None else head
        parts: list[bytes] = []
        try:
            while True:
                event = reader.next_event()
                if event is NEED_DATA:
                    reader.receive(self.recv())
                elif type(event) is Data:
                    parts.append(event.data)
                elif type(event) is End:
                    break
        except (ProtocolError, OSError) as exc:
            # A 2xx needs its body, and a timeout is the call's deadline; for another status the
            # status is the answer, and what of its body arrived only explains it.
            if 200 <= head.status < 300 or isinstance(exc, socket.timeout):
                raise
            return head.status, head.headers, b"".join(parts), False
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        return head.status, head.headers, body, event.reusable


def _peer_gone(exc: OSError) -> bool:
    """True for a send that failed because the server closed or reset the connection."""
    if isinstance(exc, ConnectionError):  # EPIPE, ECONNRESET, ECONNABORTED
        return True
    ssl = sys.modules.get("ssl")
    return ssl is not None and isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError))


def start_tls(
    conn: Connection,
    context: ssl.SSLContext,
    host: str,
    deadline: Optional[float],
    stopped: Callable[[], bool],
) -> None:
    """TLS over ``conn``, the certificate checked against ``host``."""
    # The TLS socket replaces the plain one before the handshake starts, so that abort() from
    # another thread reaches the socket the handshake is blocked on.
    conn.sock = context.wrap_socket(conn.sock, server_hostname=host, do_handshake_on_connect=False)
    if stopped():
        raise Stopped
    conn.sock.settimeout(_remaining(deadline))
    conn.sock.do_handshake()


def open_tunnel(
    conn: Connection, target: str, headers: bytes, deadline: Optional[float], max_body: int
) -> None:
    """A CONNECT tunnel to ``target`` ("host:port"); ``TunnelRefused`` if the proxy says no,
    ``TunnelBroken`` if its connection fails before it answers."""
    conn.deadline = deadline
    conn.received, conn.head = 0, None
    reader = ResponseReader("CONNECT", max_body)
    try:
        conn.sock.settimeout(_remaining(deadline))
        conn.sock.sendall(connect_request(target, headers))
        head = conn.read_head(reader)
        if 200 <= head.status < 300:
            # A 2xx to CONNECT has no body (RFC 9110 §9.3.6): the tunnel starts after the head,
            # and the origin speaks only after our TLS hello. Bytes already here would be lost.
            if reader.buffered:
                raise MalformedHead("the proxy sent data before the TLS handshake")
            return
    except (OSError, ProtocolError) as exc:
        # Only the proxy has been spoken to: what broke is its failure, not the origin's.
        raise TunnelBroken(exc) from None
    status, _, body, _ = conn.read_response(reader, head)
    raise TunnelRefused(status, body)


# -- the pool: idle keep-alive connections per (scheme, host, port[, proxy]), each key a LIFO
# stack (the most recently used is the most likely alive; the rest age out). Busy ones are known
# too, so ``close()`` can abort requests in flight. An idle connection is handed out only if its
# idle age, on a clock that counts a frozen process's pause, is under ``idle_timeout`` (a NAT may
# have forgotten it) and a zero-timeout poll finds nothing to read (the server closed it). The
# closing token is read under the pool's lock, so nothing is pooled after ``close()``.
class PoolClosed(Exception):
    """The client was closed; no connection can be checked out."""


class Pool:
    """Idle connections by key, bounded to ``max_idle`` per key."""

    def __init__(self, max_idle: int, idle_timeout: float, closing: CancelToken) -> None:
        self.max_idle = max_idle
        self.idle_timeout = idle_timeout
        self._closing = closing
        self._lock = _thread.allocate_lock()
        self._idle: dict[Hashable, list[Connection]] = {}
        self._busy: set[Connection] = set()

    def __del__(self) -> None:
        # Collected unclosed (a client shipped to a worker and left open, as docs/engines.md
        # says): its idle sockets are closed here, quietly, not reported by Python as leaked.
        for conn in [c for stack in self._idle.values() for c in stack]:
            conn.close()

    def forget(self) -> None:
        """In a forked child: drop the parent's connections without touching its sockets."""
        # The parent's lock may have been held by another thread at fork time: make new state.
        old = [c for stack in self._idle.values() for c in stack] + list(self._busy)
        self._lock = _thread.allocate_lock()
        self._idle, self._busy = {}, set()
        for conn in old:
            conn.close()  # closes the child's descriptor only; the parent's socket lives on

    def checkout(self, key: Hashable) -> Connection | None:
        """A live idle connection for ``key``, now marked busy; None if there is none."""
        while True:
            with self._lock:
                if self._closing.cancelled:
                    raise PoolClosed
                stack = self._idle.get(key)
                if not stack:
                    return None
                conn = stack.pop()
                self._busy.add(conn)
            age = idle_clock() - conn.idle_since
            if 0 <= age <= self.idle_timeout and not conn.peer_closed():
                return conn
            self.discard(conn)

    def track(self, conn: Connection) -> None:
        """Mark a new connection busy, so ``close()`` can abort it."""
        with self._lock:
            closed = self._closing.cancelled
            if not closed:
                self._busy.add(conn)
        if closed:
            conn.close()
            raise PoolClosed

    def release(self, conn: Connection) -> None:
        """Return a connection whose response was read to the end and which may be reused."""
        conn.idle_since = idle_clock()
        with self._lock:
            self._busy.discard(conn)
            if not self._closing.cancelled:
                stack = self._idle.setdefault(conn.key, [])
                if len(stack) < self.max_idle:
                    stack.append(conn)
                    return
        conn.close()

    def discard(self, conn: Connection) -> None:
        """Close a connection that failed, was interrupted, or must not be reused."""
        with self._lock:
            self._busy.discard(conn)
        conn.close()

    def idle_count(self) -> int:
        """Idle connections held now, all keys together."""
        with self._lock:
            return sum(len(stack) for stack in self._idle.values())

    def close(self) -> None:
        """Close every idle connection and abort every busy one; after the closing token is set."""
        with self._lock:
            idle = [c for stack in self._idle.values() for c in stack]
            busy = list(self._busy)
            self._idle.clear()
        for conn in idle:
            conn.close()
        for conn in busy:
            # The thread using it wakes with an error and discards it; closing the descriptor
            # here could hand its number to another socket under that thread's feet.
            conn.abort()

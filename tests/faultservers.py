"""Raw-socket HTTP servers that misbehave in ways ``http.server`` cannot.

Every server binds 127.0.0.1 on an ephemeral port and is a context manager
whose ``__exit__`` closes every socket it opened and joins every thread it
started, so tests can check that nothing leaks.

A handler is ``handler(conn, stop)``: it owns ``conn`` until it returns, after
which the server closes ``conn``.  Handlers must not close ``conn``
themselves; they return instead.  ``stop`` is set when the server exits, so a
handler that waits must wait on it.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable
from types import TracebackType

__all__ = [
    "HTML_502_RESPONSE",
    "OK_BODY",
    "OK_RESPONSE",
    "FullBacklogServer",
    "Handler",
    "RawServer",
    "answer_early",
    "answer_once",
    "answer_then_reset",
    "close_before_status",
    "garbage_status_line",
    "hang_then_close",
    "html_502",
    "never_accept",
    "ok_response",
    "read_head",
    "read_request",
    "reset_after_request",
    "respond_sequence",
    "send_stream",
    "slow_bytes",
    "stream_body",
    "truncated_body",
]

Handler = Callable[[socket.socket, threading.Event], None]

HOST = "127.0.0.1"
# Generous so a slow CI box never trips it, bounded so a buggy handler fails
# the test instead of hanging it.
JOIN_TIMEOUT = 10.0

OK_BODY = b'{"answers": {"toxic": true}, "usage": {}}'


def ok_response(body: bytes = OK_BODY, extra_headers: bytes = b"") -> bytes:
    """A complete ``200 OK`` JSON response; each extra header must end in CRLF."""
    return (
        b"HTTP/1.1 200 OK\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode("ascii") + b"\r\n" + extra_headers + b"\r\n"
    ) + body


OK_RESPONSE = ok_response()

_HTML_502_BODY = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n"
    b"<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n"
    b"<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)
HTML_502_RESPONSE = (
    b"HTTP/1.1 502 Bad Gateway\r\n"
    b"Server: nginx\r\n"
    b"Content-Type: text/html\r\n"
    b"Content-Length: " + str(len(_HTML_502_BODY)).encode("ascii") + b"\r\n"
    b"Connection: keep-alive\r\n"
    b"\r\n"
) + _HTML_502_BODY


def _recv_exact(conn: socket.socket, n: int) -> bytes | None:
    chunks: list[bytes] = []
    while n > 0:
        chunk = conn.recv(min(n, 65536))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_head(conn: socket.socket) -> bytes:
    """Read one request head, up to and including its blank line; ``b""`` if the peer closes first.

    Not a byte more: the body stays unread on the socket.
    """
    head = b""
    while True:
        # Peeking lets us consume only up to the end of the head, so a keep-alive
        # peer's next request stays on the socket and unread data never turns
        # our close into a RST.
        peeked = conn.recv(65536, socket.MSG_PEEK)
        if not peeked:
            return b""
        tail = head[-3:]
        end = (tail + peeked).find(b"\r\n\r\n")
        got = _recv_exact(conn, len(peeked)) if end == -1 else _recv_exact(conn, end + 4 - len(tail))
        if got is None:
            return b""
        head += got
        if end != -1:
            return head


def read_request(conn: socket.socket) -> bytes:
    """Read exactly one request (head plus Content-Length body) from ``conn``.

    Returns ``b""`` if the peer closes before the request is complete.  Bytes
    of a following pipelined request are left unread on the socket.
    Chunked request bodies are not supported.
    """
    head = read_head(conn)
    if not head:
        return b""
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep and name.strip().lower() == b"content-length":
            length = int(value.strip())
    body = _recv_exact(conn, length)
    if body is None:
        return b""
    return head + body


class Recorder:
    """A raw handler that records each request's exact bytes and answers with ``response``."""

    def __init__(self, response: bytes) -> None:
        self.response = response
        self.requests: list[bytes] = []
        self._lock = threading.Lock()

    def __call__(self, conn: socket.socket, stop: threading.Event) -> None:
        while True:
            request = read_request(conn)
            if not request:
                return
            with self._lock:
                self.requests.append(request)
            conn.sendall(self.response)


class Holds:
    """Reads a request and never answers; ``heard`` once the request is in, ``gone`` once the
    client closed the connection."""

    def __init__(self) -> None:
        self.heard = threading.Event()
        self.gone = threading.Event()

    def __call__(self, conn: socket.socket, stop: threading.Event) -> None:
        if not read_request(conn):
            return
        self.heard.set()
        conn.settimeout(0.02)
        while not stop.is_set():
            try:
                if not conn.recv(1024):
                    self.gone.set()
                    return
            except socket.timeout:
                continue
            except OSError:
                self.gone.set()
                return


class RawServer:
    """Accepts connections in a thread; runs ``handler(conn, stop_event)`` for
    each in its own thread."""

    host: str
    port: int
    stop_event: threading.Event

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self.host = HOST
        self.port = 0
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._connections = 0
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._errors: list[BaseException] = []
        self._listener: socket.socket | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def connections(self) -> int:
        with self._lock:
            return self._connections

    def __enter__(self) -> RawServer:
        try:
            self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._listener.bind((self.host, 0))
            self._listener.listen(64)
            # Non-blocking so a readiness report that goes stale (peer gave up
            # before accept) cannot block the loop and delay shutdown.
            self._listener.setblocking(False)
            self.port = self._listener.getsockname()[1]
            # A socketpair wakes the selector portably; closing a socket another
            # thread is blocked on does not reliably wake it.
            self._wake_r, self._wake_w = socket.socketpair()
            self._accept_thread = threading.Thread(
                target=self._accept_loop,
                args=(self._listener, self._wake_r),
                name=f"RawServer-accept-{self.port}",
                daemon=True,
            )
            self._accept_thread.start()
        except BaseException:
            self._close_own_sockets()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_event.set()
        if self._wake_w is not None:
            self._wake_w.send(b"\0")
        if self._accept_thread is not None:
            # Joined first so no connection can be added after the snapshot below.
            self._accept_thread.join(JOIN_TIMEOUT)
        with self._lock:
            conns = list(self._conns)
            threads = list(self._threads)
            for conn in conns:
                # shutdown, unlike close, wakes a handler blocked in recv/send.
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join(JOIN_TIMEOUT)
        with self._lock:
            for conn in conns:
                conn.close()
        self._close_own_sockets()
        if exc_type is not None:
            return
        alive = [t.name for t in [*threads, self._accept_thread] if t is not None and t.is_alive()]
        if alive:
            raise RuntimeError(f"threads still running after {JOIN_TIMEOUT}s: {alive}")
        if self._errors:
            raise RuntimeError("a RawServer handler raised") from self._errors[0]

    def _close_own_sockets(self) -> None:
        for sock in (self._listener, self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()

    def _accept_loop(self, listener: socket.socket, wake: socket.socket) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(listener, selectors.EVENT_READ)
            sel.register(wake, selectors.EVENT_READ)
            while not self.stop_event.is_set():
                for key, _ in sel.select():
                    if key.fileobj is listener and not self.stop_event.is_set():
                        self._accept_one(listener)

    def _accept_one(self, listener: socket.socket) -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            # Spurious wakeup or a peer that aborted before we accepted it.
            return
        # On some platforms the accepted socket inherits the listener's
        # non-blocking mode; handlers expect plain blocking I/O.
        conn.setblocking(True)
        with self._lock:
            self._connections += 1
            self._conns.append(conn)
            thread = threading.Thread(
                target=self._run_handler,
                args=(conn,),
                name=f"RawServer-handler-{self.port}-{self._connections}",
                daemon=True,
            )
            self._threads.append(thread)
            thread.start()

    def _run_handler(self, conn: socket.socket) -> None:
        try:
            self._handler(conn, self.stop_event)
        except OSError:
            # Clients of a fault server hang up at arbitrary points, and __exit__
            # shuts sockets down under running handlers.
            pass
        except BaseException as exc:
            with self._lock:
                self._errors.append(exc)
        finally:
            # Under the lock so __exit__ never shuts down a descriptor number
            # that was closed here and reused by another socket.
            with self._lock:
                conn.close()


def reset_after_request() -> Handler:
    """Read the request, then abort the connection so the client gets ECONNRESET."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        if read_request(conn):
            # Zero linger makes the server's close send RST instead of FIN.
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    return handler


def answer_once(response: bytes, stall: float = 0.0) -> Handler:
    """Read one request, send ``response``, then close, after ``stall`` seconds of silence
    (cut short when the server stops) if asked: a response that does not end by itself then
    stays unfinished for that long."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        if read_request(conn):
            conn.sendall(response)
            if stall:
                stop.wait(stall)

    return handler


def close_unanswered(nth: int, served: list[bytes]) -> Handler:
    """Answer every request OK but the ``nth`` of all connections: read it, then close its
    connection without an answer (a kept-alive one whose idle timer fired just then). Every
    request read is appended to ``served``."""
    lock = threading.Lock()

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        while request := read_request(conn):
            with lock:
                served.append(request)
                if len(served) == nth:
                    return
            conn.sendall(OK_RESPONSE)

    return handler


def answer_then_reset(response: bytes) -> Handler:
    """Read one request, send ``response`` (a head and part of its body, say), then reset the
    connection: the client reads what was sent, then gets ECONNRESET."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        if read_request(conn):
            conn.sendall(response)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    return handler


def answer_early(response: bytes, reset: bool = False) -> Handler:
    """Read only the request head, send ``response`` and close without reading the body.

    The unread body makes the close a reset (RST) and the client's send fail, as a server that
    refuses a request by its head (401, 413) does. ``reset`` resets at once, even when the
    body was small enough to have arrived already.
    """

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        if read_head(conn):
            conn.sendall(response)
            if reset:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    return handler


def stream_body(head: bytes, piece: bytes, total: int | None = None) -> Handler:
    """Read one request, then ``send_stream`` the response."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        if read_request(conn):
            send_stream(conn, stop, head, piece, total)

    return handler


def send_stream(
    conn: socket.socket, stop: threading.Event, head: bytes, piece: bytes, total: int | None
) -> None:
    """Send ``head``, then ``piece`` again and again: ``total`` bytes of pieces in all, or,
    with ``total`` None, until the client goes away (an OSError ends the handler) or the
    server stops."""
    conn.sendall(head)
    sent = 0
    while not stop.is_set() and (total is None or sent < total):
        chunk = piece if total is None else piece[: total - sent]
        conn.sendall(chunk)
        sent += len(chunk)


def close_before_status() -> Handler:
    """Read the request, then close cleanly without sending a byte."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)

    return handler


def truncated_body() -> Handler:
    """Promise a 100-byte body, send 10 bytes, close."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        if read_request(conn):
            conn.sendall(
                b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"answers"'
            )

    return handler


def garbage_status_line() -> Handler:
    """Answer with something that is not an HTTP status line, then close."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        if read_request(conn):
            conn.sendall(b"HELLO WORLD\r\n\r\n")

    return handler


def hang_then_close(seconds: float = 5.0) -> Handler:
    """Read the request, send nothing for ``seconds`` (or until the server
    stops), then close."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        if read_request(conn):
            stop.wait(seconds)

    return handler


def html_502() -> Handler:
    """Answer every request on the connection with a proxy-style HTML 502."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        while read_request(conn):
            conn.sendall(HTML_502_RESPONSE)

    return handler


def slow_bytes(response: bytes = OK_RESPONSE, interval: float = 0.2) -> Handler:
    """Read the request, then send ``response`` one byte per ``interval``."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        if not read_request(conn):
            return
        for i in range(len(response)):
            conn.sendall(response[i : i + 1])
            if i + 1 < len(response) and stop.wait(interval):
                return

    return handler


def respond_sequence(*responses: bytes | Handler) -> Handler:
    """Serve requests, across all connections, with ``responses`` in order.

    A ``bytes`` item is sent verbatim and the connection stays open for the
    next request; a handler item takes over the connection (it is called before
    the request is read, like any handler) and the connection closes when it
    returns.  Once the items run out every request gets ``OK_RESPONSE``.
    """
    pending: deque[bytes | Handler] = deque(responses)
    lock = threading.Lock()

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        while True:
            # Peek so the item is chosen when a request arrives (that is the
            # order the client observes) without consuming it, which a handler
            # item must still be able to read.
            if not conn.recv(1, socket.MSG_PEEK):
                return
            with lock:
                item = pending.popleft() if pending else OK_RESPONSE
            if not isinstance(item, bytes):
                item(conn, stop)
                return
            if not read_request(conn):
                return
            conn.sendall(item)

    return handler


class FullBacklogServer:
    """A listening socket whose accept queue is full and which never accepts:
    a new connect() to it hangs because the kernel drops the SYN.

    ``saturated`` is False if the platform kept completing connects (up to
    ``max_fillers``), in which case connects will not hang.
    """

    host: str
    port: int
    saturated: bool

    def __init__(self, max_fillers: int = 64, settle: float = 0.2) -> None:
        self.host = HOST
        self.port = 0
        self.saturated = False
        self._max_fillers = max_fillers
        self._settle = settle
        self._listener: socket.socket | None = None
        self._fillers: list[socket.socket] = []

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> FullBacklogServer:
        try:
            self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._listener.bind((self.host, 0))
            self._listener.listen(0)
            self.port = self._listener.getsockname()[1]
            self.saturated = self._fill()
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._close()

    def _fill(self) -> bool:
        addr = (self.host, self.port)
        for _ in range(self._max_fillers):
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._fillers.append(filler)
            filler.setblocking(False)
            if filler.connect_ex(addr) == 0:
                continue
            with selectors.DefaultSelector() as sel:
                sel.register(filler, selectors.EVENT_WRITE)
                if not sel.select(self._settle):
                    # This connect is stuck in SYN retransmission: the queue is full.
                    return True
            if filler.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                # Refused rather than ignored: connects fail fast, never hang.
                return False
        return False

    def _close(self) -> None:
        for filler in self._fillers:
            filler.close()
        self._fillers.clear()
        if self._listener is not None:
            self._listener.close()


def never_accept(max_fillers: int = 64, settle: float = 0.2) -> FullBacklogServer:
    """A server to which connect() hangs; see ``FullBacklogServer``."""
    return FullBacklogServer(max_fillers=max_fillers, settle=settle)

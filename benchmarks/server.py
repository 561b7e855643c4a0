"""The benchmark's own server: HTTP/1.1 keep-alive, fixed JSON replies, in a process of its own.

Used when nginx is not installed (``benchmarks.nginx``), and next to it to show that the two
agree; ``benchmarks.servers.start_own`` starts it. On its own::

    python -m benchmarks.server [--host 127.0.0.1] [--port 0] [--wrong-answer]
                                [--tls-cert FILE --tls-key FILE] [--exit-on-stdin-eof]

It prints ``READY <base url> [<https base url>]`` on stdout once it listens, serves until
SIGINT/SIGTERM (or, with ``--exit-on-stdin-eof``, until its stdin closes, so it cannot outlive
the process that started it), then prints ``STATS requests=<n> cpu_s=<seconds>``.

Routes: ``POST /v1/core`` answers ``CORE_BODY`` (with ``--wrong-answer``, ``WRONG_BODY``: the same
shape with ``toxic`` false, which every client must reject), ``GET /v1/models`` answers a model
list, ``GET /_stats`` the counters ``{"requests": n, "reads": n}`` (reads: ``recv()`` calls that
returned data, so reads per request show how a client's requests arrive), anything else 404/405.

Why a selector loop and not asyncio: whatever a server spends per read, a client that splits
its requests pays twice. ``http.client`` (so urllib3 and requests too) and httpx send the head
and the body in two ``send()`` calls; ``TCP_NODELAY`` keeps Nagle and delayed ACKs out of it,
but when client and server share a core the server is woken between the two and reads the head
alone (``GET /_stats`` counts it: on a busy machine 1.9 reads per request for those clients,
1.00 for qa_min, which sends one). So a read costs one ``select`` and one ``recv``, no event
loop machinery; a head is parsed once (``Parser`` keeps it while its body arrives); each reply
goes out in one ``send()``. ``benchmarks/RESULTS.md`` compares the figures with nginx's.
"""

from __future__ import annotations

import argparse
import os
import selectors
import signal
import socket
import ssl
import sys
import time
from typing import Optional

from .common import CORE_BODY, MODELS_BODY, NOT_ALLOWED_BODY, NOT_FOUND_BODY, WRONG_BODY

MAX_HEAD = 64 * 1024
STATS_PATH = b"/_stats"


def response(status: str, body: bytes, close: bool = False) -> bytes:
    """A complete HTTP/1.1 response with a JSON body."""
    return b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        status.encode(),
        len(body),
        b"Connection: close\r\n" if close else b"",
        body,
    )


class BadRequest(Exception):
    """A request this server cannot frame; answered with ``reply`` and the connection closed."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(detail)
        self.reply = response(status, b'{"detail": "%s"}' % detail.encode(), close=True)


class Parser:
    """Splits a byte stream into requests: (method, target, keep_alive) each, bodies skipped.

    A head whose body has not all arrived is parsed once and kept (``_pending``, with the
    offset where its body ends), so a request split over several reads costs one parse.
    """

    __slots__ = ("_buffer", "_pending")

    def __init__(self) -> None:
        self._buffer = b""
        self._pending: Optional[tuple[bytes, bytes, bool, int]] = None

    def feed(self, data: bytes) -> list[tuple[bytes, bytes, bool]]:
        """The requests completed by ``data``; an incomplete tail waits for the next call.

        Raises:
            BadRequest: The stream is not HTTP/1.x this server can frame.
        """
        buffer = self._buffer + data if self._buffer else data
        requests: list[tuple[bytes, bytes, bool]] = []
        start = 0
        pending = self._pending
        if pending is not None:
            if len(buffer) < pending[3]:
                self._buffer = buffer
                return requests
            requests.append(pending[:3])
            start = pending[3]
            self._pending = None
        while True:
            # RFC 9112 2.2: a server should ignore empty lines before a request line.
            while buffer.startswith(b"\r\n", start):
                start += 2
            end = buffer.find(b"\r\n\r\n", start)
            if end < 0:
                if len(buffer) - start > MAX_HEAD:
                    raise BadRequest("431 Request Header Fields Too Large", "head too large")
                break
            method, target, keep_alive, length = _head(buffer[start:end])
            stop = end + 4 + length
            if len(buffer) < stop:
                self._pending = (method, target, keep_alive, stop - start)
                break
            requests.append((method, target, keep_alive))
            start = stop
        self._buffer = buffer[start:]
        return requests


def _head(head: bytes) -> tuple[bytes, bytes, bool, int]:
    # Searching the lowercased head for the three fields that matter costs a few C-level
    # scans; splitting it into fields would cost a Python loop per header line.
    line_end = head.find(b"\r\n")
    parts = (head if line_end < 0 else head[:line_end]).split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise BadRequest("400 Bad Request", "bad request line")
    method, target, version = parts
    lower = head.lower()
    if b"\r\ntransfer-encoding:" in lower:
        raise BadRequest("501 Not Implemented", "chunked bodies are not supported")
    length = 0
    at = lower.find(b"\r\ncontent-length:")
    if at >= 0:
        value = _field(lower, at + 17)
        if not value.strip().isdigit():
            raise BadRequest("400 Bad Request", "bad content-length")
        length = int(value)
    keep_alive = version != b"HTTP/1.0"
    at = lower.find(b"\r\nconnection:")
    if at >= 0:
        tokens = _field(lower, at + 13)
        if b"close" in tokens:
            keep_alive = False
        elif b"keep-alive" in tokens:
            keep_alive = True
    return method, target, keep_alive, length


def _field(head: bytes, start: int) -> bytes:
    end = head.find(b"\r\n", start)
    return head[start:] if end < 0 else head[start:end]


class Routes:
    """The prepared response for each (method, path), keep-alive or closing."""

    def __init__(self, wrong_answer: bool = False) -> None:
        core = WRONG_BODY if wrong_answer else CORE_BODY
        self._known = {(b"POST", b"/v1/core"): core, (b"GET", b"/v1/models"): MODELS_BODY}
        self._paths = {path for _, path in self._known}
        self._cache: dict[tuple[bytes, bytes, bool], bytes] = {}

    def reply(self, method: bytes, target: bytes, keep_alive: bool) -> bytes:
        key = (method, target, keep_alive)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        path = target.partition(b"?")[0]
        body = self._known.get((method, path))
        if body is not None:
            reply = response("200 OK", body, close=not keep_alive)
        elif path in self._paths:
            reply = response("405 Method Not Allowed", NOT_ALLOWED_BODY, close=not keep_alive)
        else:
            reply = response("404 Not Found", NOT_FOUND_BODY, close=not keep_alive)
        if len(self._cache) < 64:  # bounded: a scan of random paths must not grow it forever
            self._cache[key] = reply
        return reply


class _Connection:
    """One client connection: its parser, unsent bytes, and whether it ends once they are sent."""

    __slots__ = ("closing", "handshaking", "out", "parser", "sock", "writing")

    def __init__(self, sock: socket.socket, tls: bool) -> None:
        self.sock = sock
        self.parser = Parser()
        self.out = b""
        self.closing = False
        self.handshaking = tls
        self.writing = False  # registered for EVENT_WRITE (and not EVENT_READ)


class _Stop(Exception):
    """Raised by the signal handler to leave the loop."""


class Loop:
    """The single-threaded server loop over one ``selectors`` selector."""

    def __init__(self, routes: Routes, tls: Optional[ssl.SSLContext] = None) -> None:
        self.routes = routes
        self.tls = tls
        self.requests = 0
        self.reads = 0
        self.selector = selectors.DefaultSelector()

    def listen(self, sock: socket.socket, tls: bool) -> None:
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ, tls)

    def run(self, stdin_fd: Optional[int] = None) -> None:
        """Serve until ``stdin_fd`` reaches end of file (a stop signal raises ``_Stop``)."""
        if stdin_fd is not None:
            self.selector.register(stdin_fd, selectors.EVENT_READ, "stdin")
        while True:
            for key, events in self.selector.select():
                data = key.data
                if isinstance(data, _Connection):
                    self._ready(data, events)
                elif data == "stdin":
                    if not os.read(key.fd, 4096):
                        return
                else:
                    self._accept(key.fileobj, bool(data))  # type: ignore[arg-type]

    def _accept(self, listener: socket.socket, tls: bool) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # out of descriptors, a connection reset before accept: keep serving
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls and self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ, _Connection(sock, tls))

    def _ready(self, conn: _Connection, events: int) -> None:
        try:
            if conn.handshaking:
                conn.sock.do_handshake()  # type: ignore[attr-defined]
                conn.handshaking = False
            if events & selectors.EVENT_WRITE:
                self._flush(conn)
            elif events & selectors.EVENT_READ:
                self._read(conn)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
            pass
        except ssl.SSLWantWriteError:
            self._want_write(conn, True)
        except OSError:
            self._close(conn)

    def _read(self, conn: _Connection) -> None:
        data = conn.sock.recv(65536)
        pending = getattr(conn.sock, "pending", None)  # TLS: records already decrypted
        while pending is not None and pending():
            data += conn.sock.recv(65536)
        if not data:
            self._close(conn)
            return
        self.reads += 1
        try:
            requests = conn.parser.feed(data)
        except BadRequest as exc:
            conn.out += exc.reply
            conn.closing = True
            self._flush(conn)
            return
        if not requests or conn.closing:
            return
        replies = []
        for method, target, keep_alive in requests:
            if target == STATS_PATH:
                counters = b'{"requests": %d, "reads": %d}' % (self.requests, self.reads)
                replies.append(response("200 OK", counters, close=not keep_alive))
            else:
                replies.append(self.routes.reply(method, target, keep_alive))
                self.requests += 1
            if not keep_alive:
                conn.closing = True
                break
        # One send() for all the replies a read completed (pipelined requests).
        conn.out += replies[0] if len(replies) == 1 else b"".join(replies)
        self._flush(conn)

    def _flush(self, conn: _Connection) -> None:
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
            sent = 0
        conn.out = conn.out[sent:]
        if conn.out:
            # Stop reading until the client takes what it was sent: bounded memory per client.
            self._want_write(conn, True)
        elif conn.closing:
            self._close(conn)
        else:
            self._want_write(conn, False)

    def _want_write(self, conn: _Connection, writing: bool) -> None:
        # Only on a change: an epoll_ctl per reply would be a system call per request.
        if conn.writing != writing:
            conn.writing = writing
            self.selector.modify(conn.sock, selectors.EVENT_WRITE if writing else selectors.EVENT_READ, conn)

    def _close(self, conn: _Connection) -> None:
        try:
            self.selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()


def _listener(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    return sock


def _url(scheme: str, sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.server",
        description="The benchmark's keep-alive HTTP server; prints READY <url> once listening.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 (default) picks a free port")
    parser.add_argument(
        "--wrong-answer", action="store_true", help="answer toxic=false: every benchmark client must fail"
    )
    parser.add_argument("--tls-cert", help="also listen for HTTPS (on a free port) with this certificate")
    parser.add_argument("--tls-key", help="the private key of --tls-cert")
    parser.add_argument(
        "--exit-on-stdin-eof", action="store_true", help="stop when stdin closes (used by the runner)"
    )
    args = parser.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    context = None
    if args.tls_cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
    loop = Loop(Routes(args.wrong_answer), context)
    plain = _listener(args.host, args.port)
    loop.listen(plain, tls=False)
    urls = [_url("http", plain)]
    if context is not None:
        secure = _listener(args.host, 0)
        loop.listen(secure, tls=True)
        urls.append(_url("https", secure))
    started = time.process_time()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _raise_stop)
    try:  # from here on a stop signal ends the loop, wherever it lands
        print("READY " + " ".join(urls), flush=True)
        loop.run(sys.stdin.fileno() if args.exit_on_stdin_eof else None)
    except _Stop:
        pass
    print(f"STATS requests={loop.requests} cpu_s={time.process_time() - started:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The fake service's HTTP plumbing: sockets, threads and the bytes of each exchange.

``accept_loop`` accepts connections for a ``Server``, which serves each on its own daemon
thread with a ``Handler``. The handler reads a request and asks its *host* (the service state
that owns every counter, script and lock, ``qa_min._fake.ServiceState``) what to do: the host
records the request and hands out the next scripted step or the rules' answer, which the
handler plays. The handler keeps no state between requests and holds no lock itself; the
``Host`` protocol below is everything it asks of its host.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import selectors
import socket
import socketserver
import struct
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, Literal, Protocol, cast

from ._fakerules import RecordedRequest, Reply, Step

_TRUNCATED_BODY: Final = b'{"answers": {}, "usage": {"input_tokens": 0, "output_tokens": 0}}'
TRUNCATED_SENT: Final = len(_TRUNCATED_BODY) // 2
"""How much of its announced body a ``truncate`` step sends (``MockTransport`` reports the rest)."""
TRUNCATED_MISSING: Final = len(_TRUNCATED_BODY) - TRUNCATED_SENT
JSON: Final = ("Content-Type", "application/json")
TRUNCATED_HEAD: Final = (JSON, ("Content-Length", str(len(_TRUNCATED_BODY))))
"""The fields of a ``truncate`` step's 200 head (``MockTransport`` reports the same head)."""

ConnState = Literal["idle", "busy", "writing"]


class Host(Protocol):
    """What the server and its handlers ask of the service state; each call takes its lock."""

    def track(self, sock: socket.socket, thread: threading.Thread) -> None:
        """Count a new connection and start the thread that serves it."""

    def untrack(self, sock: socket.socket) -> None:
        """Forget a connection whose thread is ending."""

    def set_state(self, sock: socket.socket, state: ConnState) -> None:
        """Note that a connection went idle, busy, or is writing a response."""

    def record(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[RecordedRequest, Step | None, int]:
        """Record a request; return it, its scripted step (or None) and the release generation."""

    def hold(self, generation: int) -> None:
        """Block a `hang` step until released (a new generation) or closed."""

    def pause(self, seconds: float) -> bool:
        """Wait for a `delay` step; True if closing cut the wait short."""

    def respond(self, recorded: RecordedRequest) -> Reply:
        """The answer to an unscripted request: a 429 from the rate limit, or the rules'."""


_CREDENTIALS = frozenset(("authorization", "proxy-authorization"))


class Headers(Mapping[str, str]):
    """Read-only header mapping; names are stored lowercased and looked up in any case."""

    __slots__ = ("_items",)

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        items: dict[str, str] = {}
        for name, value in pairs:
            key = name.lower()
            # Repeated headers fold into one value, as RFC 9110 section 5.3 allows.
            items[key] = f"{items[key]}, {value}" if key in items else value
        self._items = items

    def __getitem__(self, name: str) -> str:
        return self._items[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        # Credentials stay readable by key (a test may assert them) but out of reprs, which
        # land in test reports and logs: the scheme shown, the rest hidden, as httpx does.
        shown = {
            name: f"{value.partition(' ')[0]} [redacted]" if name in _CREDENTIALS else value
            for name, value in self._items.items()
        }
        return f"Headers({shown!r})"


def accept_loop(server: Server, wake: socket.socket) -> None:
    """Hand each new connection to ``server`` until ``wake`` becomes readable."""
    with selectors.DefaultSelector() as selector:
        selector.register(server.socket, selectors.EVENT_READ)
        selector.register(wake, selectors.EVENT_READ)
        while True:
            ready = [key.fileobj for key, _ in selector.select()]
            if wake in ready:
                return
            try:
                request, client_address = server.get_request()
            except OSError:  # pragma: no cover - the client gave up before accept()
                continue
            server.process_request(request, client_address)


def json_bytes(payload: object) -> bytes:
    """``payload`` as JSON; a NaN or an infinity is ``ValueError``, never sent: RFC 8259 has none."""
    return json.dumps(payload, allow_nan=False).encode()


def shutdown(sock: socket.socket) -> None:
    # The peer, or reset(), may have closed the socket already; that is the goal anyway.
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class Server(socketserver.TCPServer):
    """Accepts connections for a ``Host``; one tracked daemon thread per connection."""

    allow_reuse_address = True
    # Tests open many connections at once (1,000 concurrent calls): a connect past the accept
    # queue waits for the kernel's SYN retransmits (1 s, then 3 s, ...). socketserver's 5, or the
    # 128 this was, made such a burst take seconds; the kernel caps it at net.core.somaxconn.
    request_queue_size = socket.SOMAXCONN

    def __init__(self, host: Host, address: tuple[str, int]) -> None:
        self.host = host
        if ":" in address[0]:
            # An IPv6 literal such as "::1": the class's AF_INET cannot bind it.
            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._serve_connection,
            args=(request, client_address),
            name=f"qa_min-fake-conn-{client_address}",
            daemon=True,
        )
        self.host.track(request, thread)

    def _serve_connection(self, request: socket.socket, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.host.untrack(request)
            self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients vanish mid-request and close() shuts sockets under live handlers: both are
        # normal for this server and not worth a traceback.
        if not isinstance(sys.exc_info()[1], OSError):  # pragma: no cover - a bug in the fake
            super().handle_error(request, client_address)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "qa_min-fake/1"
    # A response's head and body go out in one write (the buffer is flushed once per response):
    # a write per part cost a second send, and a second wake-up of the client, on every request.
    wbufsize = 1 << 16
    # A part written alone (a truncated body after its head) must not wait for a delayed ACK.
    disable_nagle_algorithm = True

    @property
    def _host(self) -> Host:
        return cast(Server, self.server).host

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        """Stay silent: a test run has no use for one stderr line per request."""

    def parse_request(self) -> bool:
        self._host.set_state(self.request, "busy")
        return super().parse_request()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        if self.request_version == "HTTP/0.9":
            # parse_request() keeps this default when it cannot read a version, and 0.9 would
            # suppress the status line; real servers answer garbage with a full HTTP/1.1 reply.
            self.request_version = self.protocol_version
        # Protocol errors leave the byte stream in an unknown state: never keep it alive.
        detail = message or self.responses.get(code, ("Error",))[0]
        self._send(code, json_bytes({"detail": detail}), (JSON, ("Connection", "close")))

    def _dispatch(self) -> None:
        if "Transfer-Encoding" in self.headers:
            self.send_error(501, "request bodies must be sent with Content-Length")
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if length < 0:
            self.send_error(400, "invalid Content-Length")
            return
        body = self.rfile.read(length)
        # Without the SP and HTAB around a value, as a server reads it (RFC 9110 5.5) and as
        # MockTransport hands it over; http.server keeps the trailing ones.
        headers = Headers((name, str(value).strip(" \t")) for name, value in self.headers.items())
        recorded, step, generation = self._host.record(self.command, self.path, headers, body)
        if step is None:
            self._serve(recorded)
        else:
            self._play(step, recorded, generation)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _dispatch

    def _serve(self, recorded: RecordedRequest) -> None:
        status, payload, headers = self._host.respond(recorded)
        self._send(status, json_bytes(payload), (JSON, *headers))

    def _play(self, step: Step, recorded: RecordedRequest, generation: int) -> None:
        if step.kind == "reply":
            self._send(step.status, step.body, step.headers)
            return
        if step.kind == "delay":
            if not self._host.pause(step.seconds):
                self._serve(recorded)
                return
        elif step.kind == "hang":
            self._host.hold(generation)
        elif step.kind == "reset":
            self._abort()
        elif step.kind == "truncate":
            self._truncate()
        # Every other outcome ends the exchange without a complete response.
        self.close_connection = True

    def _send(self, status: int, body: bytes, headers: Iterable[tuple[str, str]]) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        # "writing" lets close_idle_connections() wait for a response a client may already hold.
        self._host.set_state(self.request, "writing")
        try:
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            self.wfile.flush()  # sent before the connection counts as idle again
        finally:
            self._host.set_state(self.request, "idle")

    def _abort(self) -> None:
        linger = struct.pack("hh" if sys.platform == "win32" else "ii", 1, 0)
        self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        # The buffered reader holds a reference that would postpone the real close, and the
        # shutdown() that normally follows a handler would send a FIN ahead of the reset.
        self.rfile.close()
        self.request.close()

    def _truncate(self) -> None:
        self.send_response(200)
        for name, value in TRUNCATED_HEAD:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(_TRUNCATED_BODY[:TRUNCATED_SENT])

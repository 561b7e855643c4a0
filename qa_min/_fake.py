"""The machinery behind `qa_min.testing.FakeService`: its request rules and its HTTP server.

`qa_min.testing` is the public face (the service object, the steps, `expected_answer`); this
module is what it runs on, in two parts:

* The request rules, pure functions of one request and the service's settings: `_apply_rules`
  checks the API key, the route and the method, and `_core` validates a ``/v1/core`` body
  (`_parse_core`, `_classify`) and answers it by the hash rule (`_answer`), the rule
  `expected_answer` exposes. The `testing` module docstring is their specification.
* The server plumbing: `_accept_loop` accepts connections for `_Server`, which serves each on
  its own tracked daemon thread with a `_Handler`. The handler reads a request, has the service
  record it and hand out the next scripted step, then plays that step or sends what the rules
  answer.

The service owns every piece of shared state and the one lock that guards it; the server
reaches it only through the ``FakeService`` hooks named in `_Server`'s docstring. This module
never imports `testing` at run time (the names it takes from there are for type checking
only), so `testing` imports it at load without a cycle, and ``import qa_min`` loads neither.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import re
import selectors
import socket
import socketserver
import struct
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, cast

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .testing import FakeService, RecordedRequest, Step

# fullmatch, not `$`: `$` would also accept a trailing newline.
_VERSIONED: Final = re.compile(r"([a-z][a-z0-9-]*?)-\d+(?:\.\d+)+")
_TRUNCATED_BODY: Final = b'{"answers": {}, "usage": {"input_tokens": 0, "output_tokens": 0}}'
_JSON: Final = ("Content-Type", "application/json")

_HeaderPairs = tuple[tuple[str, str], ...]
_Reply = tuple[int, object, _HeaderPairs]
_ConnState = Literal["idle", "busy", "writing"]
_Parsed = tuple[str, str, dict[str, tuple[str, tuple[str, ...]]]]


# The request rules: pure functions of the request and the settings; no sockets, no locks.


def _classify(criteria: object) -> tuple[str, tuple[str, ...]] | None:
    """Return ``(kind, option keys or levels)`` for valid criteria, else None."""
    if (
        isinstance(criteria, list)
        and len(criteria) >= 2
        and all(isinstance(level, str) for level in criteria)
    ):
        return "score", tuple(criteria)
    if (
        isinstance(criteria, dict)
        and len(criteria) >= 2
        and all(isinstance(key, str) and isinstance(text, str) for key, text in criteria.items())
    ):
        return ("yesno" if set(criteria) == {"true", "false"} else "choice"), tuple(criteria)
    return None


def _answer(model: str, state: str, question_id: str, kind: str, options: tuple[str, ...]) -> object:
    # surrogatepass: JSON may carry lone surrogates, which plain UTF-8 encoding rejects.
    key = f"{model}\0{state}\0{question_id}".encode("utf-8", "surrogatepass")
    h = hashlib.sha256(key).digest()[0]
    if kind == "yesno":
        return h % 2 == 0
    if kind == "choice":
        return options[h % len(options)]
    return h % len(options)


def _parse_core(doc: object) -> _Parsed | str:
    """Return ``(state, model, {id: (kind, options)})``, or the 422 detail."""
    if not isinstance(doc, dict):
        return "request body must be a JSON object"
    state = doc.get("state")
    if not isinstance(state, str) or not state:
        return "'state' must be a non-empty string"
    questions = doc.get("questions")
    if not isinstance(questions, dict) or not questions:
        return "'questions' must be a non-empty object"
    parsed: dict[str, tuple[str, tuple[str, ...]]] = {}
    for question_id, question in questions.items():
        criteria = question.get("criteria") if isinstance(question, dict) else None
        classified = _classify(criteria)
        if classified is None:
            return f"question {question_id!r} has no valid 'criteria'"
        parsed[question_id] = classified
    model = doc.get("model")
    if not isinstance(model, str):
        return "'model' must be a string"
    return state, model, parsed


def _family(model: str) -> str:
    if model.endswith("-latest"):
        return model[: -len("-latest")]
    versioned = _VERSIONED.fullmatch(model)
    return versioned.group(1) if versioned else model


def _apply_rules(
    recorded: RecordedRequest,
    overrides: Mapping[str, object],
    *,
    api_key: str | None,
    prefix: str,
    models: tuple[str, ...],
) -> _Reply:
    """Return ``(status, JSON payload, extra headers)`` for a request the rules serve."""
    expected = None if api_key is None else f"Bearer {api_key}"
    if expected is not None and recorded.headers.get("authorization") != expected:
        return 401, {"detail": "missing or invalid API key"}, (("WWW-Authenticate", "Bearer"),)
    path = recorded.path.split("?", 1)[0]
    routes = {f"{prefix}/v1/core": "POST", f"{prefix}/v1/models": "GET"}
    allowed = routes.get(path)
    if allowed is None:
        return 404, {"detail": f"no route for {path}"}, ()
    if recorded.method != allowed:
        detail = f"method {recorded.method} not allowed on {path}"
        return 405, {"detail": detail}, (("Allow", allowed),)
    if allowed == "GET":
        listed = [{"name": name, "family": _family(name)} for name in models]
        return 200, {"models": listed}, ()
    return _core(recorded.body, overrides, models)


def _core(body: bytes, overrides: Mapping[str, object], models: tuple[str, ...]) -> _Reply:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return 422, {"detail": "request body is not valid JSON"}, ()
    parsed = _parse_core(doc)
    if isinstance(parsed, str):
        return 422, {"detail": parsed}, ()
    state, model, questions = parsed
    if model not in models and not _VERSIONED.fullmatch(model):
        return 404, {"detail": f"model {model!r} not found"}, ()
    answers = {
        question_id: (
            overrides[question_id]
            if question_id in overrides
            else _answer(model, state, question_id, *question)
        )
        for question_id, question in questions.items()
    }
    usage = {"input_tokens": len(state.split()), "output_tokens": len(questions)}
    return 200, {"answers": answers, "usage": usage, "model": model}, ()


# The server plumbing: sockets, threads and the bytes of each exchange.


class _Headers(Mapping[str, str]):
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
        return f"Headers({self._items!r})"


def _accept_loop(server: _Server, wake: socket.socket) -> None:
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


def _json_bytes(payload: object) -> bytes:
    return json.dumps(payload).encode()


def _shutdown(sock: socket.socket) -> None:
    # The peer, or reset(), may have closed the socket already; that is the goal anyway.
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    thread: threading.Thread
    state: _ConnState = "idle"


@dataclass(frozen=True)
class _Running:
    server: _Server
    accept_thread: threading.Thread
    wake_r: socket.socket
    wake_w: socket.socket


class _Server(socketserver.TCPServer):
    """Accepts connections for a `FakeService`; one tracked daemon thread per connection.

    The server and its handlers call these ``FakeService`` hooks, each taking the service's lock:
    ``_track``/``_untrack`` (a connection and its thread), ``_set_state`` (idle, busy or
    writing, for ``close_idle_connections``), ``_record`` (builds the `RecordedRequest`, returns
    it with the next scripted step and the current release generation), ``_hold`` (a `hang`),
    ``_sleep`` (a `delay`) and ``_respond`` (the rules' answer, with the current overrides).
    """

    allow_reuse_address = True
    # Tests open many connections at once; the default backlog of 5 would refuse some.
    request_queue_size = 128

    def __init__(self, service: FakeService, address: tuple[str, int]) -> None:
        self.service = service
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._serve_connection,
            args=(request, client_address),
            name=f"qa_min-fake-conn-{client_address}",
            daemon=True,
        )
        self.service._track(request, thread)

    def _serve_connection(self, request: socket.socket, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.service._untrack(request)
            self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients vanish mid-request and close() shuts sockets under live handlers: both are
        # normal for this server and not worth a traceback.
        if not isinstance(sys.exc_info()[1], OSError):  # pragma: no cover - a bug in the fake
            super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "qa_min-fake/1"
    # Headers and body go out in two writes; Nagle plus delayed ACKs would stall the second.
    disable_nagle_algorithm = True

    @property
    def _svc(self) -> FakeService:
        return cast(_Server, self.server).service

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        """Stay silent: a test run has no use for one stderr line per request."""

    def parse_request(self) -> bool:
        self._svc._set_state(self.request, "busy")
        return super().parse_request()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        if self.request_version == "HTTP/0.9":
            # parse_request() keeps this default when it cannot read a version, and 0.9 would
            # suppress the status line; real servers answer garbage with a full HTTP/1.1 reply.
            self.request_version = self.protocol_version
        # Protocol errors leave the byte stream in an unknown state: never keep it alive.
        detail = message or self.responses.get(code, ("Error",))[0]
        self._send(code, _json_bytes({"detail": detail}), (_JSON, ("Connection", "close")))

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
        headers = _Headers((name, str(value)) for name, value in self.headers.items())
        recorded, step, generation = self._svc._record(self.command, self.path, headers, body)
        if step is None:
            self._serve(recorded)
        else:
            self._play(step, recorded, generation)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _dispatch

    def _serve(self, recorded: RecordedRequest) -> None:
        status, payload, headers = self._svc._respond(recorded)
        self._send(status, _json_bytes(payload), (_JSON, *headers))

    def _play(self, step: Step, recorded: RecordedRequest, generation: int) -> None:
        if step.kind == "reply":
            self._send(step.status, step.body, step.headers)
            return
        if step.kind == "delay":
            if not self._svc._sleep(step.seconds):
                self._serve(recorded)
                return
        elif step.kind == "hang":
            self._svc._hold(generation)
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
        self._svc._set_state(self.request, "writing")
        try:
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        finally:
            self._svc._set_state(self.request, "idle")

    def _abort(self) -> None:
        linger = struct.pack("hh" if sys.platform == "win32" else "ii", 1, 0)
        self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        # The buffered reader holds a reference that would postpone the real close, and the
        # shutdown() that normally follows a handler would send a FIN ahead of the reset.
        self.rfile.close()
        self.request.close()

    def _truncate(self) -> None:
        self.send_response(200)
        self.send_header(*_JSON)
        self.send_header("Content-Length", str(len(_TRUNCATED_BODY)))
        self.end_headers()
        self.wfile.write(_TRUNCATED_BODY[: len(_TRUNCATED_BODY) // 2])

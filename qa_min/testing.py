"""A deterministic, scriptable fake of the question-answering service, for tests.

`FakeService` is a real HTTP/1.1 server (``http.server`` based, keep-alive, JSON bodies with
``Content-Length``) that runs in background daemon threads on an ephemeral port. It speaks the
service's wire protocol, so any client, this library's included, can be pointed at
``FakeService.url``. It checks requests the way the real service does:

* With ``api_key`` set, a request whose ``Authorization`` header is not exactly
  ``Bearer <api_key>`` gets 401.
* A malformed ``/v1/core`` body gets 422 (not JSON, not an object, ``state`` not a non-empty
  string, ``questions`` not a non-empty object, a question without valid criteria, ``model``
  missing or not a string).
* A model that is neither listed nor versioned (``judge-2.1``, ``judge-mini-1.0.3``: a family name,
  a dash and a dotted version number) gets 404.
* An unknown path gets 404 and a wrong method on a known path 405.

Every error body is ``{"detail": "<what is wrong>"}``.

Deterministic answers:
    For question ``id`` asked about ``state`` with ``model``, let
    ``h = hashlib.sha256(f"{model}\\0{state}\\0{id}".encode()).digest()[0]`` (an int 0-255):

    * yes/no (criteria ``{"true": ..., "false": ...}``) answers ``h % 2 == 0``;
    * choice (criteria ``{option: description, ...}``) answers the option at index ``h % n``,
      options counted in the order they were sent;
    * score (criteria ``[level 0, level 1, ...]``) answers the integer ``h % n``.

    `expected_answer` computes the same value. `FakeService.set_answers` replaces the answer of
    chosen ids with a raw wire value, sent unvalidated so that tests can make the service
    misbehave. ``usage`` is ``{"input_tokens": <words in state>, "output_tokens": <questions>}``
    and ``model`` echoes the model asked for.

Scripting:
    `FakeService.script` queues `Step` objects; each incoming request, on any path, takes the next
    one, and requests arriving while the queue is empty are served normally. Steps are built by
    `reply` (a canned response), `delay` (serve normally, late), `hang` (never answer until
    `FakeService.release` or `FakeService.close`), `drop` (close without a response), `reset`
    (close with a TCP reset) and `truncate` (a 200 whose body stops short of its
    ``Content-Length``). Every request, scripted or not, is recorded first, in
    `FakeService.requests`.

Example:
    ::

        import qa_min as qa
        from qa_min.testing import FakeService, expected_answer, reply

        YES_NO = {"true": "The text insults someone", "false": "The text insults no one"}

        class Review(qa.Questions):
            toxic = qa.YesNo(YES_NO["true"], YES_NO["false"])

        with FakeService(api_key="sk-test") as svc:
            svc.script(reply(503, {"detail": "busy"}))  # the first attempt fails...
            with qa.Client(base_url=svc.url, api_key="sk-test") as client:
                r = client.ask("Some text", Review)     # ...and the retry gets the rule's answer
            assert r.answers.toxic == expected_answer("judge-latest", "Some text", "toxic", YES_NO)
            assert len(svc.requests) == 2
"""

from __future__ import annotations

import json
import socket
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from ._fake import (
    _accept_loop,
    _answer,
    _apply_rules,
    _classify,
    _Conn,
    _ConnState,
    _HeaderPairs,
    _Reply,
    _Running,
    _Server,
    _shutdown,
)

__all__ = [
    "DEFAULT_MODELS",
    "FakeService",
    "RecordedRequest",
    "Step",
    "delay",
    "drop",
    "expected_answer",
    "hang",
    "reply",
    "reset",
    "truncate",
]

DEFAULT_MODELS: Final[tuple[str, ...]] = (
    "judge-latest",
    "judge-mini-latest",
    "judge-2.1",
    "judge-mini-1.3",
)
"""Model names `FakeService` lists on ``GET /v1/models`` unless told otherwise."""

# Bounds every join so that a bug in a handler cannot hang the test run that owns the fake.
_JOIN_TIMEOUT: Final = 10.0

_Kind = Literal["reply", "delay", "hang", "drop", "reset", "truncate"]


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake received it.

    Attributes:
        method: The HTTP method, e.g. ``"POST"``.
        path: The request target as sent, prefix and query string included.
        headers: The request headers; names are lowercased and lookups ignore case.
        body: The raw request body (empty when there was none).
    """

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """Return the body parsed as JSON; raises ``ValueError`` when it is not JSON."""
        return json.loads(self.body)


@dataclass(frozen=True)
class Step:
    """One scripted behaviour of a `FakeService`.

    Build steps with `reply`, `delay`, `hang`, `drop`, `reset` or `truncate` rather than directly.
    """

    kind: _Kind
    status: int = 200
    body: bytes = b""
    headers: _HeaderPairs = ()
    seconds: float = 0.0


def reply(status: int, body: bytes | str | object = None, *, headers: Sequence[tuple[str, str]] = ()) -> Step:
    """Answer the request with a canned response instead of the normal one.

    Args:
        status: The HTTP status, 200-599.
        body: ``bytes`` or ``str`` are sent as is (``str`` UTF-8 encoded) as ``text/plain``;
            ``None`` sends an empty body; anything else is sent JSON-encoded as
            ``application/json``.
        headers: Extra response headers. A ``Content-Type`` here replaces the default one; a
            ``Content-Length`` is ignored because the fake always sends the correct one.

    Raises:
        ValueError: ``status`` is outside 200-599.
        TypeError: ``body`` cannot be encoded as JSON.
    """
    if not 200 <= status <= 599:
        # A 1xx would make http.client wait for a final response that never comes.
        raise ValueError(f"status must be within 200-599, not {status}")
    content_type: str | None = "text/plain; charset=utf-8"
    if body is None:
        data, content_type = b"", None
    elif isinstance(body, bytes):
        data = body
    elif isinstance(body, str):
        data = body.encode()
    else:
        data, content_type = json.dumps(body).encode(), "application/json"
    names = {name.lower() for name, _ in headers}
    kept = tuple((name, value) for name, value in headers if name.lower() != "content-length")
    if content_type is not None and "content-type" not in names:
        kept += (("Content-Type", content_type),)
    return Step("reply", status=status, body=data, headers=kept)


def delay(seconds: float) -> Step:
    """Wait ``seconds``, then serve the request normally.

    `FakeService.close` cuts the wait short and drops the connection instead.

    Raises:
        ValueError: ``seconds`` is negative.
    """
    if seconds < 0:
        raise ValueError(f"seconds must not be negative, not {seconds}")
    return Step("delay", seconds=seconds)


def hang() -> Step:
    """Read the request and never answer it.

    After `FakeService.release` or `FakeService.close` the connection is closed without a response.
    """
    return Step("hang")


def drop() -> Step:
    """Read the request, then close without sending a byte (``RemoteDisconnected``)."""
    return Step("drop")


def reset() -> Step:
    """Read the request, then abort the connection with a TCP reset (``ConnectionResetError``).

    The socket is closed with ``SO_LINGER`` 0, so no FIN precedes the reset.
    """
    return Step("reset")


def truncate() -> Step:
    """Send a 200 announcing a JSON body of N bytes, send part of it, close (``IncompleteRead``)."""
    return Step("truncate")


def expected_answer(model: str, state: str, question_id: str, criteria: object) -> object:
    """Return the answer the fake gives by its rules (overrides aside).

    Raises:
        ValueError: ``criteria`` is not valid yes/no, choice or score criteria.
    """
    classified = _classify(criteria)
    if classified is None:
        raise ValueError(f"invalid criteria: {criteria!r}")
    return _answer(model, state, question_id, *classified)


class FakeService:
    """An in-process fake of the service, served over real HTTP on ``host`` and a free port.

    Use it as a context manager (or call `start` and `close`). All methods are thread-safe.

    Args:
        api_key: When set, requests must carry ``Authorization: Bearer <api_key>``.
        models: The model names listed by ``GET /v1/models`` and accepted by ``/v1/core``
            (versioned names are accepted whether listed or not).
        prefix: A path prefix the service lives under, e.g. ``"/api"``.
        host: The address to listen on.
        port: The port to listen on; 0 picks a free one.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        models: Sequence[str] = DEFAULT_MODELS,
        prefix: str = "",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if isinstance(models, str):
            raise TypeError("models must be a sequence of names, not a str")
        self._api_key = api_key
        self._models = tuple(models)
        stripped = prefix.strip("/")
        self._prefix = f"/{stripped}" if stripped else ""
        self._address = (host, port)
        self._url: str | None = None
        # One condition guards all mutable state below and wakes every kind of waiter.
        self._cond = threading.Condition()
        self._closed = False
        self._running: _Running | None = None
        self._requests: list[RecordedRequest] = []
        self._steps: deque[Step] = deque()
        self._overrides: dict[str, object] = {}
        self._release_generation = 0
        self._connections = 0
        self._conns: dict[socket.socket, _Conn] = {}
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        """The base URL, ``http://<host>:<port><prefix>``; it stays readable after `close`.

        Raises:
            RuntimeError: The service was never started.
        """
        if self._url is None:
            raise RuntimeError("FakeService.url is known only after start()")
        return self._url

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        with self._cond:
            return list(self._requests)

    @property
    def connections(self) -> int:
        """How many TCP connections the service has accepted so far."""
        with self._cond:
            return self._connections

    def start(self) -> FakeService:
        """Bind, start serving from a background daemon thread, and return ``self``.

        Raises:
            RuntimeError: The service was already started or closed.
        """
        with self._cond:
            if self._running is not None or self._closed:
                raise RuntimeError("a FakeService can be started only once")
            server = _Server(self, self._address)
            server.socket.setblocking(False)
            wake_r, wake_w = socket.socketpair()
            thread = threading.Thread(
                target=_accept_loop,
                args=(server, wake_r),
                name="qa_min-fake-accept",
                daemon=True,
            )
            self._running = _Running(server, thread, wake_r, wake_w)
            self._url = f"http://{self._address[0]}:{server.socket.getsockname()[1]}{self._prefix}"
        thread.start()
        return self

    def close(self) -> None:
        """Stop serving and end every connection, hung or idle, joining all threads; idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()  # wakes hang() and delay() steps
            running = self._running
        if running is None:
            return
        running.wake_w.send(b"\0")
        running.accept_thread.join(_JOIN_TIMEOUT)
        running.server.server_close()
        with self._cond:
            for conn in self._conns.values():
                _shutdown(conn.sock)
            threads = list(self._threads)
        for thread in threads:
            thread.join(_JOIN_TIMEOUT)
        running.wake_r.close()
        running.wake_w.close()

    def __enter__(self) -> FakeService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_answers(self, answers: Mapping[str, object]) -> None:
        """Make the listed question ids answer these raw wire values from now on.

        The values are sent as given, unchecked against the question, so a test can make the
        service answer with a wrong type or an unknown option. Ids not listed here follow the
        deterministic rules; only ids a request asks about are answered. Each call replaces the
        previous overrides; ``set_answers({})`` clears them.

        Raises:
            TypeError: A value cannot be encoded as JSON.
        """
        overrides = dict(answers)
        json.dumps(overrides)  # fail here, in the test, rather than inside a handler thread
        with self._cond:
            self._overrides = overrides

    def script(self, *steps: Step) -> None:
        """Queue ``steps``; each following request, on any path, consumes one in order."""
        with self._cond:
            self._steps.extend(steps)

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> bool:
        """Block until at least ``n`` requests were recorded; return False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._requests) >= n, timeout)

    def release(self) -> None:
        """Wake every request held by a `hang` step so far; each one's connection is closed.

        A request counts as held from the moment it is recorded, so
        ``wait_for_requests(n)`` followed by ``release()`` cannot miss it.
        """
        with self._cond:
            self._release_generation += 1
            self._cond.notify_all()

    def close_idle_connections(self) -> None:
        """Close, server side, every keep-alive connection waiting for its next request.

        This is what a server's keep-alive timeout does; a client that sends its next request
        on such a connection finds it closed. Returns once those connections are gone.
        """
        with self._cond:
            # A client may already hold a response whose handler has not yet turned idle.
            self._cond.wait_for(
                lambda: all(conn.state != "writing" for conn in self._conns.values()),
                _JOIN_TIMEOUT,
            )
            idle = [conn for conn in self._conns.values() if conn.state == "idle"]
            for conn in idle:
                _shutdown(conn.sock)
        for conn in idle:
            conn.thread.join(_JOIN_TIMEOUT)

    # Below: the hooks the server's threads call (listed in `_fake._Server`).

    def _track(self, sock: socket.socket, thread: threading.Thread) -> None:
        with self._cond:
            self._connections += 1
            self._conns[sock] = _Conn(sock, thread)
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
            # Started under the lock so close_idle_connections() never joins an unstarted thread.
            thread.start()

    def _untrack(self, sock: socket.socket) -> None:
        with self._cond:
            del self._conns[sock]
            self._cond.notify_all()

    def _set_state(self, sock: socket.socket, state: _ConnState) -> None:
        with self._cond:
            self._conns[sock].state = state
            self._cond.notify_all()

    def _record(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[RecordedRequest, Step | None, int]:
        # Built here, not by the handler: `_fake` must not import this module at run time.
        recorded = RecordedRequest(method, path, headers, body)
        with self._cond:
            self._requests.append(recorded)
            step = self._steps.popleft() if self._steps else None
            self._cond.notify_all()
            return recorded, step, self._release_generation

    def _hold(self, generation: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._release_generation != generation)

    def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; return True if `close` interrupted the wait."""
        with self._cond:
            return self._cond.wait_for(lambda: self._closed, seconds)

    def _respond(self, recorded: RecordedRequest) -> _Reply:
        with self._cond:
            overrides = self._overrides
        return _apply_rules(
            recorded, overrides, api_key=self._api_key, prefix=self._prefix, models=self._models
        )

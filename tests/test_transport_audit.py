"""An outside audit of SPEC §7 (transport, threads, cancellation) through both clients, aimed at
what the other tests leave out: each case runs through ``Client`` and ``AsyncClient`` alike.

  busy callers reuse their own connections; the idle pool keeps at most max_idle_per_host
      test_busy_callers_reuse_their_connections, test_the_idle_pool_is_bounded
  close() and the context manager release every socket, client's and server's side
      test_close_releases_every_socket
  a reused connection the server closed, half-closed or reset, before or after reading the
  next request: answered, with Diagnostics.attempts equal to the requests the server counted
      test_a_reused_connection_the_server_dropped_is_replaced
  1xx interim responses (100, 102, 103, several) skipped
      test_interim_responses_are_skipped
  a token cancelled during connect (full backlog), while waiting for the response, and in a
  60 s backoff sleep: Canceled in under 1 s, the interrupted connection not pooled
      test_cancel_during_connect, test_cancel_while_waiting_closes_the_connection,
      test_cancel_during_a_backoff_sleep
  Call.cancel() of a running ask, core or list_models
      test_cancelling_a_submitted_running_call
  301/302/307/308 reported, the Location never contacted
      test_redirects_are_reported_not_followed
  a body over max_response_bytes refused before it is all sent
      test_a_body_over_the_cap_is_refused_before_it_ends
  errors and results from real calls of both clients survive pickle and deepcopy
      test_real_outcomes_survive_pickle_and_deepcopy
"""

from __future__ import annotations

import asyncio
import copy
import os
import pickle
import socket
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional, TypeVar

import pytest
from faultservers import FullBacklogServer, Holds, RawServer, never_accept, ok_response, read_request
from rawhttp import Toxic, interim, response
from support import open_sockets

import qa_min as qa
from qa_min.testing import FakeService, reply

BOUND = 5.0  # seconds: bounds waits for what happens at once, so a bug fails instead of hanging
PROMPT = 1.0  # seconds within which a cancelled call must have ended
KINDS = ["sync", "async"]
T = TypeVar("T")


class Driver:
    """One client of either kind behind one synchronous face; an AsyncClient runs on a loop of
    its own, kept for the driver's life (a client belongs to one open loop at a time)."""

    def __init__(self, kind: str, url: str, **options: Any) -> None:
        self.kind = kind
        options.setdefault("retry", qa.RetryPolicy.none)
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        if kind == "sync":
            self.sync: Optional[qa.Client] = qa.Client(base_url=url, trust_env=False, **options)
            self.aio: Optional[qa.AsyncClient] = None
        else:
            self.sync = None
            self.loop = asyncio.new_event_loop()
            self.aio = qa.AsyncClient(base_url=url, trust_env=False, **options)

    def run(self, make: Callable[[], Awaitable[T]]) -> T:
        assert self.loop is not None
        return self.loop.run_until_complete(make())

    def ask(self, **options: Any) -> tuple[Optional[bool], Optional[qa.QAError], qa.Diagnostics]:
        diag = qa.Diagnostics()
        try:
            if self.sync is not None:
                result = self.sync.ask("some text", Toxic, diagnostics=diag, **options)
            else:
                aio = self.aio
                assert aio is not None
                result = self.run(lambda: aio.ask("some text", Toxic, diagnostics=diag, **options))
        except qa.QAError as exc:
            error: qa.QAError = exc
        else:
            return result.answers.toxic, None, diag
        assert error.diagnostics is diag
        return None, error, diag

    def ask_concurrently(self, callers: int, rounds: int) -> list[Optional[bool]]:
        """``callers`` concurrent callers (threads, or tasks), each making ``rounds`` calls in turn."""
        answers: list[Optional[bool]] = []
        if self.sync is not None:
            client = self.sync
            barrier = threading.Barrier(callers, timeout=BOUND)
            lock = threading.Lock()

            def caller() -> None:
                barrier.wait()
                for _ in range(rounds):
                    got = client.ask("some text", Toxic).answers.toxic
                    with lock:
                        answers.append(got)

            threads = [threading.Thread(target=caller) for _ in range(callers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(BOUND)
            return answers
        aio = self.aio
        assert aio is not None

        async def task() -> None:
            for _ in range(rounds):
                answers.append((await aio.ask("some text", Toxic)).answers.toxic)

        async def all_callers() -> None:
            await asyncio.gather(*(task() for _ in range(callers)))

        self.run(all_callers)
        return answers

    def idle(self) -> int:
        if self.sync is not None:
            return self.sync._transport.pool.idle_count()
        assert self.aio is not None
        pool = self.aio._pool
        return 0 if pool is None else pool.idle_count()

    def close(self) -> None:
        if self.sync is not None:
            self.sync.close()
            return
        aio, loop = self.aio, self.loop
        assert aio is not None
        assert loop is not None
        self.run(aio.aclose)
        loop.close()


@contextmanager
def driving(kind: str, url: str, **options: Any) -> Iterator[Driver]:
    driver = Driver(kind, url, **options)
    try:
        yield driver
    finally:
        driver.close()


def settles(count: Callable[[], int], target: int) -> int:
    """``count()`` once it equals ``target`` (bounded polling: the server's thread closes its side
    when its handler sees the client's close), or its last value."""
    deadline = time.monotonic() + BOUND
    value = count()
    while value != target and time.monotonic() < deadline:
        time.sleep(0.005)
        value = count()
    return value


def later(seconds: float, action: Callable[[], object]) -> threading.Timer:
    # Only for a stage no event can mark (a connect the kernel holds): the delay proves nothing,
    # the bound on the call's end does.
    timer = threading.Timer(seconds, action)
    timer.start()
    return timer


def cancel_on(event: threading.Event, token: qa.CancelToken) -> None:
    if event.wait(BOUND):
        token.cancel()


# -- the keep-alive pool


@pytest.mark.parametrize("kind", KINDS)
def test_busy_callers_reuse_their_connections(kind: str) -> None:
    with FakeService() as svc, driving(kind, svc.url) as d:
        answers = d.ask_concurrently(callers=8, rounds=4)
        assert len(answers) == 32
        # 8 callers at most 8 at a time: the default pool (10 idle) keeps every one of theirs.
        assert 1 <= svc.connections <= 8
        assert d.idle() == svc.connections


class Gate:
    """Holds every answer until ``n`` requests are in, so ``n`` connections are busy at once."""

    def __init__(self, n: int) -> None:
        self.barrier = threading.Barrier(n, timeout=BOUND)

    def __call__(self, conn: socket.socket, stop: threading.Event) -> None:
        first = True
        while read_request(conn):
            if first:
                self.barrier.wait()
                first = False
            conn.sendall(ok_response())


@pytest.mark.parametrize("kind", KINDS)
def test_the_idle_pool_is_bounded(kind: str) -> None:
    with RawServer(Gate(5)) as server, driving(kind, server.url, max_idle_per_host=2) as d:
        d.ask_concurrently(callers=5, rounds=1)
        assert server.connections == 5
        assert d.idle() == 2
        d.ask_concurrently(callers=2, rounds=1)
        assert server.connections == 5  # the two kept ones served the next two


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts sockets in /proc")
@pytest.mark.parametrize("how", ["close", "with"])
@pytest.mark.parametrize("kind", KINDS)
def test_close_releases_every_socket(kind: str, how: str) -> None:
    # The first three answers wait until all three are asked, so that the three callers hold
    # three connections at once: answered at once, a caller's first call may end before
    # another's begins, and the two share one connection.
    with RawServer(Gate(3)) as svc:
        before = open_sockets()
        d = Driver(kind, svc.url)
        if how == "with" and d.sync is not None:
            with d.sync:
                d.ask_concurrently(callers=3, rounds=2)
        elif how == "with":
            aio = d.aio
            assert aio is not None

            async def scoped() -> None:
                async with aio:
                    await asyncio.gather(*(aio.ask("some text", Toxic) for _ in range(3)))

            d.run(scoped)
            assert d.loop is not None
            d.loop.close()
        else:
            d.ask_concurrently(callers=3, rounds=2)
            assert d.idle() == 3
            d.close()
        assert svc.connections == 3
        # Each of the client's sockets and the server's side of each are gone.
        assert settles(open_sockets, before) == before


class DropsFirst:
    """Answers the first request of the first connection (keep-alive), then drops that
    connection as ``mode`` says; later connections answer every request. Counts requests."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.requests = 0
        self.connections = 0
        self.dropped = threading.Event()
        self._lock = threading.Lock()

    def _count(self) -> None:
        with self._lock:
            self.requests += 1

    def __call__(self, conn: socket.socket, stop: threading.Event) -> None:
        with self._lock:
            self.connections += 1
            first = self.connections == 1
        if not first:
            while read_request(conn):
                self._count()
                conn.sendall(ok_response())
            return
        if not read_request(conn):
            return
        self._count()
        conn.sendall(ok_response())
        if self.mode in ("close", "reset", "half-close"):
            self._drop(conn, self.mode)
            if self.mode == "half-close" and read_request(conn):
                self._count()  # written to a half-closed connection: it reached the server
            return
        # "read-then-close", "read-then-reset": the keep-alive timeout racing the next request.
        self.dropped.set()
        if read_request(conn):
            self._count()
            self._drop(conn, self.mode.removeprefix("read-then-"))

    def _drop(self, conn: socket.socket, how: str) -> None:
        if how == "half-close":
            conn.shutdown(socket.SHUT_WR)
        else:
            if how == "reset":
                # Zero linger makes close send RST instead of FIN.
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            # Closed here, not by the server after return, so ``dropped`` is set once it is.
            conn.close()
        self.dropped.set()


@pytest.mark.parametrize(
    ("mode", "attempts"),
    [("close", 1), ("reset", 1), ("half-close", 1), ("read-then-close", 2), ("read-then-reset", 2)],
)
@pytest.mark.parametrize("kind", KINDS)
def test_a_reused_connection_the_server_dropped_is_replaced(kind: str, mode: str, attempts: int) -> None:
    handler = DropsFirst(mode)
    with RawServer(handler) as server, driving(kind, server.url) as d:
        assert d.ask()[0] is True
        assert handler.dropped.wait(BOUND)
        before = handler.requests
        # RetryPolicy.none: the re-send is not a retry the caller would have to allow.
        answer, error, diag = d.ask()
        assert error is None, f"{type(error).__name__}: {error}"
        assert answer is True
        assert diag.attempts == handler.requests - before == attempts
        assert server.connections == 2
        assert d.idle() == 1


@pytest.mark.parametrize(
    "heads",
    [
        [interim()],
        [interim("102 Processing")],
        [interim("103 Early Hints", ["Link: </style.css>; rel=preload"])],
        [interim(), interim("102 Processing"), interim("103 Early Hints", ["Link: </a>"])],
    ],
    ids=["100", "102", "103", "several"],
)
@pytest.mark.parametrize("kind", KINDS)
def test_interim_responses_are_skipped(kind: str, heads: list[bytes]) -> None:
    data = b"".join(heads) + response()

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        while read_request(conn):
            conn.sendall(data)

    with RawServer(handler) as server, driving(kind, server.url) as d:
        for _ in range(2):
            answer, error, diag = d.ask()
            assert error is None, f"{type(error).__name__}: {error}"
            assert answer is True
            assert diag.status == 200
            assert diag.attempts == 1
        assert server.connections == 1  # the connection stayed usable after them


# -- cancellation


@pytest.fixture(scope="module")
def full_backlog() -> Iterator[FullBacklogServer]:
    with never_accept() as server:
        yield server


@pytest.mark.parametrize("kind", KINDS)
def test_cancel_during_connect(kind: str, full_backlog: FullBacklogServer) -> None:
    token = qa.CancelToken()
    with driving(kind, full_backlog.url) as d:
        later(0.05, token.cancel)
        started = time.monotonic()
        _, error, diag = d.ask(cancel=token)
        elapsed = time.monotonic() - started
        assert isinstance(error, qa.Canceled), repr(error)
        assert "cancel" in str(error).lower()
        assert elapsed < PROMPT
        assert diag.status is None
        assert d.idle() == 0


@pytest.mark.parametrize("kind", KINDS)
def test_cancel_while_waiting_closes_the_connection(kind: str) -> None:
    holds = Holds()
    token = qa.CancelToken()
    with RawServer(holds) as server, driving(kind, server.url) as d:
        threading.Thread(target=lambda: cancel_on(holds.heard, token)).start()
        started = time.monotonic()
        _, error, diag = d.ask(cancel=token)
        assert isinstance(error, qa.Canceled), repr(error)
        assert time.monotonic() - started < PROMPT
        assert diag.attempts == 1
        assert d.idle() == 0
        assert holds.gone.wait(BOUND), "the interrupted connection was kept open"


@pytest.mark.parametrize("kind", KINDS)
def test_cancel_during_a_backoff_sleep(kind: str) -> None:
    answered = threading.Event()
    busy = response("503 Service Unavailable", body=b'{"detail": "busy"}')

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        while read_request(conn):
            conn.sendall(busy)

    def after(event: qa.HookEvent) -> None:
        # The 503 is read and judged: what follows is the backoff sleep.
        if event.status == 503:
            answered.set()

    token = qa.CancelToken()
    policy = qa.RetryPolicy(max_retries=3, backoff_initial_ms=60_000, backoff_max_ms=60_000, backoff_jitter=0)
    hooks = {"after_attempt": [after]}
    with RawServer(handler) as server, driving(kind, server.url, retry=policy, hooks=hooks) as d:
        threading.Thread(target=lambda: cancel_on(answered, token)).start()
        started = time.monotonic()
        _, error, diag = d.ask(cancel=token)
        assert isinstance(error, qa.Canceled), repr(error)
        assert time.monotonic() - started < PROMPT
        assert diag.attempts == 1
        assert diag.status == 503


@pytest.mark.parametrize("operation", ["ask", "core", "list_models"])
def test_cancelling_a_submitted_running_call(operation: str) -> None:
    holds = Holds()
    with RawServer(holds) as server, qa.Client(base_url=server.url, trust_env=False) as client:
        if operation == "ask":
            call: Any = client.submit(client.ask, "some text", Toxic)
        elif operation == "core":
            request = qa.Request(state="x", questions=[qa.NamedQuestion("toxic", Toxic.toxic)])
            call = client.submit(client.core, request)
        else:
            call = client.submit(client.list_models)
        assert holds.heard.wait(BOUND)
        started = time.monotonic()
        assert call.cancel() is True
        with pytest.raises(qa.Canceled) as caught:
            call.result(timeout=BOUND)
        assert time.monotonic() - started < PROMPT
        assert "cancel" in str(caught.value).lower()
        assert caught.value.diagnostics.attempts == 1
        assert holds.gone.wait(BOUND)
        assert client._transport.pool.idle_count() == 0


# -- what a response may not make the client do


@pytest.mark.parametrize(
    "status", ["301 Moved Permanently", "302 Found", "307 Temporary Redirect", "308 Permanent Redirect"]
)
@pytest.mark.parametrize("kind", KINDS)
def test_redirects_are_reported_not_followed(kind: str, status: str) -> None:
    elsewhere = threading.Event()

    def target(conn: socket.socket, stop: threading.Event) -> None:
        elsewhere.set()

    with RawServer(target) as other:
        moved = response(status, [f"Location: {other.url}/v1/core"], body=b"")

        def handler(conn: socket.socket, stop: threading.Event) -> None:
            while read_request(conn):
                conn.sendall(moved)

        with RawServer(handler) as server, driving(kind, server.url, api_key="k-secret") as d:
            _, error, diag = d.ask()
            assert isinstance(error, qa.UnexpectedStatus), repr(error)
            code = int(status.split(maxsplit=1)[0])
            assert error.status == diag.status == code
            assert str(code) in str(error)
            assert diag.attempts == 1
        assert other.connections == 0
        assert not elsewhere.is_set()


@pytest.mark.parametrize("framing", ["length", "chunked"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_body_over_the_cap_is_refused_before_it_ends(kind: str, framing: str) -> None:
    piece = b" " * 4096
    cap = 10_000

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        if not read_request(conn):
            return
        if framing == "length":
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n"
            )
        else:
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
        sent = 0
        # Never ends on its own: only a client that stops reading ends the call.
        while not stop.is_set() and sent < 100 * cap:
            conn.sendall(piece if framing == "length" else b"%x\r\n%s\r\n" % (len(piece), piece))
            sent += len(piece)
        stop.wait(BOUND)

    with RawServer(handler) as server, driving(kind, server.url, max_response_bytes=cap) as d:
        started = time.monotonic()
        _, error, diag = d.ask()
        assert time.monotonic() - started < PROMPT
        assert isinstance(error, qa.InvalidResponse), repr(error)
        assert str(cap) in str(error).replace(",", "").replace("_", "") or "large" in str(error).lower()
        assert diag.status == 200
        assert d.idle() == 0


# -- pickle and deepcopy of what real calls give


@pytest.mark.parametrize("kind", KINDS)
def test_real_outcomes_survive_pickle_and_deepcopy(kind: str) -> None:
    token = qa.CancelToken()
    token.cancel()
    with FakeService() as svc, driving(kind, svc.url) as d:
        svc.script(reply(503, {"detail": "down for a minute"}))
        _, server_error, _ = d.ask()
        _, canceled, _ = d.ask(cancel=token)
        with driving(kind, "http://127.0.0.1:1") as nowhere:
            _, refused, _ = nowhere.ask()
        if d.sync is not None:
            result: Any = d.sync.ask("some text", Toxic)
        else:
            aio = d.aio
            assert aio is not None
            result = d.run(lambda: aio.ask("some text", Toxic))
    assert isinstance(server_error, qa.ServerError)
    assert isinstance(canceled, qa.Canceled)
    assert isinstance(refused, qa.ConnectionFailed)
    for error in (server_error, canceled, refused):
        for copied in (pickle.loads(pickle.dumps(error)), copy.deepcopy(error)):
            assert type(copied) is type(error)
            assert str(copied) == str(error)
            assert getattr(copied, "status", None) == getattr(error, "status", None)
            for field in ("status", "body", "attempts"):
                assert getattr(copied.diagnostics, field) == getattr(error.diagnostics, field)
            assert (copied.diagnostics.transport_error is None) == (error.diagnostics.transport_error is None)
    assert server_error.diagnostics.status == 503
    assert "down for a minute" in (server_error.diagnostics.body or "")
    for copied in (pickle.loads(pickle.dumps(result)), copy.deepcopy(result)):
        assert copied.answers.toxic == result.answers.toxic
        assert dict(copied.usage) == dict(result.usage)

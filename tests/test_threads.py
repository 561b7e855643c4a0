"""One client shared by many threads: no lost call, no cross-talk, a bounded pool, and fork.

The stress test runs calls from 32 threads while another thread cancels calls at random: 800 in
the main suite, 3,200 in its larger run (``pytest -m benchmarks``); every call must end as an
answer (its own, checked against the fake's rules) or ``Canceled``, and closing the client must
leave no socket and no thread behind.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Optional

import pytest
from faultservers import OK_RESPONSE, RawServer, read_request
from support import BOUND, executor_threads, make_client, wait_until

import qa_min as qa
from qa_min._connection import Connection, Pool
from qa_min.testing import FakeService, delay, expected_answer

TOXIC = ("The text insults someone", "The text insults no one")
LANGUAGES = {"en": "English", "fr": "French", "de": "German"}
LEVELS = ["poor", "fair", "good", "excellent"]


class Review(qa.Questions):
    toxic = qa.YesNo(*TOXIC)
    lang = qa.Choice(LANGUAGES)
    quality = qa.Score(LEVELS)


def expected(state: str) -> tuple[object, object, object]:
    """The fake's answers for ``state``: any mix-up between two calls' responses shows here."""
    model = qa.DEFAULT_MODEL
    return (
        expected_answer(model, state, "toxic", {"true": TOXIC[0], "false": TOXIC[1]}),
        expected_answer(model, state, "lang", LANGUAGES),
        expected_answer(model, state, "quality", LEVELS),
    )


def answers_of(response: qa.AskResponse[Review]) -> tuple[object, object, object]:
    return response.answers.toxic, response.answers.lang, response.answers.quality


def open_fds() -> Optional[int]:
    """Descriptors open in this process, or None where /proc/self/fd does not exist."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


# -- stress ------------------------------------------------------------------------------------

THREADS = 32


@pytest.mark.parametrize("calls", [25, pytest.param(100, marks=pytest.mark.benchmarks)], ids=["800", "3200"])
def test_many_threads_with_random_cancellations_account_for_every_call_and_leak_nothing(calls: int) -> None:
    fds_before = open_fds()
    threads_before = set(threading.enumerate())
    rng = random.Random(20240501)
    started = time.monotonic()
    outcomes: dict[int, str] = {}
    unexpected: list[tuple[int, BaseException]] = []
    wrong: list[int] = []
    in_flight: dict[int, qa.CancelToken] = {}
    lock = threading.Lock()
    with FakeService() as svc:
        # Late answers here and there widen the windows in which a cancel lands mid-call.
        svc.script(
            *[
                delay(rng.uniform(0.005, 0.03)) if rng.random() < 0.1 else delay(0)
                for _ in range(THREADS * calls)
            ]
        )
        client = make_client(svc.url)
        stop = threading.Event()

        def worker(n: int) -> None:
            for i in range(calls):
                key = n * calls + i
                state = f"thread {n} call {i}: some text to judge"
                token = qa.CancelToken()
                with lock:
                    in_flight[key] = token
                try:
                    response = client.ask(state, Review, cancel=token)
                except qa.Canceled:
                    outcome = "canceled"
                except BaseException as exc:
                    outcome = "unexpected"
                    with lock:
                        unexpected.append((key, exc))
                else:
                    outcome = "answered"
                    if answers_of(response) != expected(state):
                        with lock:
                            wrong.append(key)
                finally:
                    with lock:
                        del in_flight[key]
                        outcomes[key] = outcome

        def canceller() -> None:
            choose = random.Random(7)
            while not stop.wait(0.002):
                with lock:
                    keys = sorted(in_flight)
                    token = in_flight[choose.choice(keys)] if keys else None
                if token is not None:
                    token.cancel()

        cancelling = threading.Thread(target=canceller, name="test-canceller")
        workers = [
            threading.Thread(target=worker, args=(n,), name=f"test-worker-{n}") for n in range(THREADS)
        ]
        cancelling.start()
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join(25)
        stop.set()
        cancelling.join(BOUND)
        assert not any(thread.is_alive() for thread in [*workers, cancelling])
        closing = time.monotonic()
        client.close()
        assert time.monotonic() - closing < 1.0
    elapsed = time.monotonic() - started

    assert unexpected == []
    assert wrong == []
    assert len(outcomes) == THREADS * calls
    counts = {kind: list(outcomes.values()).count(kind) for kind in ("answered", "canceled")}
    assert sum(counts.values()) == THREADS * calls
    assert counts["answered"] > 0
    assert counts["canceled"] > 0
    assert elapsed < 20
    # Server threads end a moment after their sockets close; the wait is bounded.
    assert wait_until(lambda: set(threading.enumerate()) <= threads_before), [
        t.name for t in set(threading.enumerate()) - threads_before
    ]
    if fds_before is not None:
        assert open_fds() == fds_before


def test_pool_serves_one_request_per_connection_without_cross_talk() -> None:
    threads, calls = 8, 40
    wrong: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    with FakeService() as svc, make_client(svc.url) as client:
        gate = threading.Barrier(threads)

        def worker(n: int) -> None:
            try:
                gate.wait(BOUND)
                for i in range(calls):
                    state = f"worker {n} asks call {i}"
                    if answers_of(client.ask(state, Review)) != expected(state):
                        with lock:
                            wrong.append(state)
            except BaseException as exc:
                with lock:
                    errors.append(exc)

        workers = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join(20)
        assert not any(thread.is_alive() for thread in workers)
        assert errors == []
        assert wrong == []
        assert len(svc.requests) == threads * calls
        # A connection serves one request at a time and the default pool keeps more than 8
        # idle: each thread reuses one, and no thread ever needs a ninth.
        assert svc.connections <= threads
        assert client._transport.pool.idle_count() == svc.connections


class GatedServer:
    """Holds every response until ``open()``; keeps connections alive; counts what it sees."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.cond = threading.Condition()
        self.waiting = 0
        self.hung_up = 0
        self.server = RawServer(self._handle)

    def _handle(self, conn: socket.socket, stop: threading.Event) -> None:
        while read_request(conn):
            with self.cond:
                self.waiting += 1
                self.cond.notify_all()
            if not self.gate.wait(BOUND):
                return
            conn.sendall(OK_RESPONSE)
        with self.cond:
            self.hung_up += 1
            self.cond.notify_all()

    def wait(self, predicate: Callable[[], bool]) -> bool:
        with self.cond:
            return self.cond.wait_for(predicate, BOUND)

    def __enter__(self) -> GatedServer:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.gate.set()
        self.server.__exit__(None, None, None)


class Toxic(qa.Questions):
    toxic = qa.YesNo(*TOXIC)


@pytest.mark.parametrize("max_idle", [0, 3, 10], ids=lambda n: f"max_idle_per_host={n}")
def test_idle_connections_are_bounded_by_max_idle_per_host(max_idle: int) -> None:
    threads = 8
    with GatedServer() as gated, make_client(gated.server.url, max_idle_per_host=max_idle) as client:
        results: list[object] = []
        lock = threading.Lock()

        def call() -> None:
            try:
                outcome: object = client.ask("text", Toxic).answers.toxic
            except BaseException as exc:
                outcome = exc
            with lock:
                results.append(outcome)

        workers = [threading.Thread(target=call) for _ in range(threads)]
        for thread in workers:
            thread.start()
        # All 8 requests are in, each alone on its own connection: none was written to a
        # connection another request was still using.
        assert gated.wait(lambda: gated.waiting == threads)
        assert gated.server.connections == threads
        gated.gate.set()
        for thread in workers:
            thread.join(BOUND)
        assert results == [True] * threads
        kept = min(max_idle, threads)
        assert client._transport.pool.idle_count() == kept
        # The connections the pool could not keep were closed, not leaked.
        assert gated.wait(lambda: gated.hung_up == threads - kept)
        # The kept ones are reused.
        for _ in range(3):
            assert client.ask("text", Toxic).answers.toxic is True
        assert gated.server.connections == threads + (3 if kept == 0 else 0)


# -- fork --------------------------------------------------------------------------------------


def _child(client: qa.Client, state: str) -> int:
    """The child's exit code: 0 if its client works, both directly and through submit."""
    want = expected(state)
    try:
        if answers_of(client.ask(state, Review, timeout=BOUND)) != want:
            return 1
        call = client.submit(client.ask, state, Review, timeout=BOUND)
        if answers_of(call.result(timeout=BOUND)) != want:
            return 2
        return 0
    except BaseException:
        return 3


def _wait_child(pid: int) -> int:
    """The child's exit code; a child still running after ``BOUND`` s is killed."""
    deadline = time.monotonic() + BOUND
    pause = threading.Event()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -1
        pause.wait(0.01)


def _in_child(run: Callable[[], int]) -> int:
    """Fork; the child's exit code is ``run()``'s (4 if it raised), and the parent's result."""
    with warnings.catch_warnings():
        # 3.12+ warns that forking a process with threads (the fake's) may deadlock; the
        # child only uses the client, whose pool and executor start afresh there.
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit code only
        code = 4
        try:
            code = run()
        finally:
            os._exit(code)
    return _wait_child(pid)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is not available")
def test_forked_child_uses_a_fresh_pool_and_executor_and_never_the_parents_socket() -> None:
    with FakeService() as svc, make_client(svc.url) as client:
        # Through submit, so that the parent has executor threads the child will not have.
        first = client.submit(client.ask, "parent, first", Review).result(timeout=BOUND)
        assert answers_of(first) == expected("parent, first")
        assert client._transport.pool.idle_count() == 1
        assert svc.connections == 1
        assert _in_child(lambda: _child(client, "child")) == 0
        # The child's two calls went over one new connection of its own.
        assert svc.connections == 2
        assert len(svc.requests) == 3
        # The parent's pooled connection was not disturbed: it is reused, no new connection.
        assert answers_of(client.ask("parent, again", Review)) == expected("parent, again")
        assert answers_of(client.submit(client.ask, "parent, submit", Review).result(timeout=BOUND)) == (
            expected("parent, submit")
        )
        assert svc.connections == 2
        assert len(svc.requests) == 5


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is not available")
def test_a_forked_childs_first_call_through_submit_is_fresh_though_the_parent_held_the_lock() -> None:
    # A parent thread inside submit() or close() at fork time leaves the lifecycle lock held in
    # the child, where no thread will release it: the child's first submit must start afresh
    # (its own lock, executor and connection), not block on that lock or use the parent's pool.
    with FakeService() as svc, make_client(svc.url) as client:
        first = client.submit(client.ask, "parent", Review).result(timeout=BOUND)
        assert answers_of(first) == expected("parent")

        def submit_first() -> int:
            call = client.submit(client.ask, "child", Review, timeout=BOUND)
            return 0 if answers_of(call.result(timeout=BOUND)) == expected("child") else 1

        lock = client._life._lock
        assert lock.acquire(timeout=BOUND)  # as a parent thread in submit() would hold it
        try:
            assert _in_child(submit_first) == 0
        finally:
            lock.release()
        assert svc.connections == 2  # the child's own; the parent's pooled one was left alone


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is not available")
def test_close_in_a_forked_child_leaves_the_parents_calls_in_flight_alone() -> None:
    # A child that inherited a module-level client and closes it (at exit, leaving a with block)
    # before making a call must not shut down the sockets the parent's calls are using.
    gate, arrived = threading.Event(), threading.Semaphore(0)

    def answer_when_let(conn: socket.socket, stop: threading.Event) -> None:
        if read_request(conn):
            arrived.release()
            gate.wait(BOUND)
            conn.sendall(OK_RESPONSE)

    outcomes: list[object] = []

    def call(client: qa.Client, kind: str) -> None:
        diag = qa.Diagnostics()
        try:
            if kind == "thread":
                client.ask("parent", Toxic, diagnostics=diag)
            else:
                client.submit(client.ask, "parent", Toxic, diagnostics=diag).result(timeout=BOUND)
            outcomes.append(("ok", diag.attempts))
        except qa.QAError as exc:
            outcomes.append((repr(exc), diag.attempts))

    with RawServer(answer_when_let) as server, make_client(server.url, retry=qa.RetryPolicy.none) as client:
        threads = [threading.Thread(target=call, args=(client, kind)) for kind in ("thread", "submit")]
        for thread in threads:
            thread.start()
        assert arrived.acquire(timeout=BOUND)
        assert arrived.acquire(timeout=BOUND)

        def close_in_child() -> int:
            client.close()
            return 0

        assert _in_child(close_in_child) == 0
        gate.set()
        for thread in threads:
            thread.join(BOUND)
        assert outcomes == [("ok", 1), ("ok", 1)]
        assert server.connections == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is not available")
def test_a_forked_child_does_not_wait_behind_the_parents_limiter_slots() -> None:
    # At 0.5 calls/s, three parent calls waiting in the limiter hold its slots 2, 4 and 6 s
    # ahead. Those threads do not exist in a child: its first call must not queue behind them.
    stop = qa.CancelToken()
    outcomes: list[object] = []

    def waiting_call(client: qa.Client, state: str) -> None:
        try:
            outcomes.append(client.ask(state, Review, cancel=stop))
        except qa.Canceled as exc:
            outcomes.append(exc)

    with FakeService() as svc, make_client(svc.url, rate_limit=qa.RateLimit(0.5)) as client:
        assert answers_of(client.ask("parent, first", Review)) == expected("parent, first")
        limiter = client._sender.limiter
        assert limiter is not None
        threads = [threading.Thread(target=waiting_call, args=(client, f"parent {i}")) for i in range(3)]
        for thread in threads:
            thread.start()
        assert wait_until(lambda: limiter.pacer.inflight == 3)

        def ask_in_child() -> int:
            try:
                # Behind the parent's slots, the call would wait about 8 s and end at its timeout.
                child = client.ask("child", Review, timeout=1.5)
            except qa.Canceled:
                return 2
            return 0 if answers_of(child) == expected("child") else 1

        assert _in_child(ask_in_child) == 0
        # The parent's schedule is its own still: its calls wait on, until cancelled.
        assert limiter.pacer.inflight == 3
        stop.cancel()
        for thread in threads:
            thread.join(BOUND)
        assert [type(one) for one in outcomes] == [qa.Canceled] * 3, outcomes


def test_executor_threads_end_with_close() -> None:
    with FakeService() as svc:
        client = make_client(svc.url, max_workers=4)
        calls = [client.submit(client.ask, f"text {i}", Review) for i in range(8)]
        for i, call in enumerate(calls):
            assert answers_of(call.result(timeout=BOUND)) == expected(f"text {i}")
        assert 1 <= len(executor_threads()) <= 4
        client.close()
        assert executor_threads() == []


@pytest.fixture(autouse=True)
def _no_stray_threads() -> Iterator[None]:
    yield
    assert wait_until(lambda: executor_threads() == [])


def test_forget_gives_the_pool_a_lock_of_its_own_when_the_parents_was_held() -> None:
    # At fork time another thread of the parent may hold the pool's lock: the child's copy of it
    # would stay held forever, and its first call would hang.
    pool = Pool(max_idle=1, idle_timeout=5.0, closing=qa.CancelToken())
    pool._lock.acquire()
    pool.forget()
    assert not pool._lock.locked()
    assert pool.idle_count() == 0


def test_forget_closes_the_childs_copies_of_the_idle_and_busy_sockets() -> None:
    pool = Pool(max_idle=1, idle_timeout=5.0, closing=qa.CancelToken())
    pairs = [socket.socketpair() for _ in range(2)]
    try:
        idle, busy = (Connection(ours, ("k",)) for ours, _ in pairs)
        pool.track(idle)
        pool.release(idle)
        pool.track(busy)
        pool.forget()
        assert [ours.fileno() for ours, _ in pairs] == [-1, -1]
        assert pool.checkout(("k",)) is None
    finally:
        for ours, theirs in pairs:
            ours.close()
            theirs.close()

"""``qa.AsyncClient``'s lifecycle at the edges of asyncio's: what happens to a client and its
calls when the event loop they ran on goes away without them.

  a call left pending on a loop closed under it is finalized by the garbage collector without
  an error of qa_min's ("Event loop is closed"), its socket closed
      test_a_call_left_pending_on_a_closed_loop_is_finalized_quietly
  one client, one asyncio.run after another (AWS Lambda, a CLI, a test suite): once its loop is
  closed it follows the next, keep-alive within each, the old loop's socket closed
      test_a_client_follows_each_new_loop_once_the_last_is_closed
  ...keeping a pause the server asked for, and no slot of the old loop's calls
      test_a_pause_in_force_when_the_loop_closed_holds_the_next_loops_first_call,
      test_calls_left_queued_in_the_limiter_by_a_closed_loop_do_not_delay_the_next_loop
  ...even once the throttled call the closed loop left waiting out that pause is collected
      test_a_throttled_call_left_waiting_by_a_closed_loop_keeps_the_pause_when_collected
  ...loops of several threads racing for it: one at a time, nothing leaked
      test_loops_racing_for_a_client_whose_loop_closed_take_it_one_at_a_time,
      test_a_loop_arriving_while_another_takes_the_client_waits_and_is_refused
"""

from __future__ import annotations

import asyncio
import gc
import socket
import sys
import threading
import time
import warnings
import weakref
from typing import Any

import pytest
from faultservers import Holds, RawServer
from support import resource_warnings_now, until_true, wait_until

import qa_min as qa
from qa_min import _aio
from qa_min._aio import AioConnection, AioPool
from qa_min._ascope import WrongLoop
from qa_min._connection import PoolClosed
from qa_min.testing import FakeService, hang, reply

BOUND = 5.0  # seconds: bounds waits for what happens at once, so a bug fails instead of hanging


class Toxic(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


def test_a_call_left_pending_on_a_closed_loop_is_finalized_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    # A loop run by hand and closed while a call's task still waits for its answer (a
    # fire-and-forget task, a test runner that closes its loop): asyncio reports the pending task
    # when it is collected; the call's own cleanup must not fail on the closed loop ("Exception
    # ignored in: <coroutine ...> RuntimeError: Event loop is closed"), and closes its socket.
    unraisable: list[str] = []
    monkeypatch.setattr(
        sys, "unraisablehook", lambda u: unraisable.append(f"{u.exc_type.__name__}: {u.exc_value}")
    )
    handler = Holds()
    with RawServer(handler) as server:
        loop = asyncio.new_event_loop()
        client = qa.AsyncClient(base_url=server.url, trust_env=False, retry=qa.RetryPolicy.none)
        task: Any = loop.create_task(client.ask("s", Toxic))
        assert loop.run_until_complete(until_true(handler.heard.is_set))
        loop.close()
        task._log_destroy_pending = False  # asyncio's own report of the pending task: not ours
        del task, client
        with warnings.catch_warnings():
            # Python 3.9 and 3.10 may collect the transport before the task: it warns, then
            # closes its socket itself.
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        assert unraisable == []
        assert handler.gone.wait(BOUND)


# -- a client following the next loop once its own is closed ------------------------------------


def idle_socket(client: qa.AsyncClient) -> Any:
    """The socket (asyncio's ``TransportSocket``) of the client's one idle connection."""
    pool = client._transport.pool  # type: ignore[union-attr]
    [conn] = [c for stack in pool._idle.values() for c in stack]
    assert conn.transport is not None
    return conn.transport.get_extra_info("socket")


def service_sees_open(svc: FakeService, count: int) -> bool:
    """Wait (bounded) until the fake service holds exactly ``count`` connections open."""
    state = svc._state
    with state._cond:
        return state._cond.wait_for(lambda: len(state._conns) == count, BOUND)


def test_a_client_follows_each_new_loop_once_the_last_is_closed(svc: FakeService) -> None:
    # The AWS Lambda pattern: the client made once at cold start, each invocation its own
    # asyncio.run, whose loop is closed when it returns.
    client = qa.AsyncClient(base_url=svc.url, trust_env=False)

    async def invocation() -> list[bool]:
        first = await client.ask("You idiot", Toxic)
        second = await client.ask("Have a nice day", Toxic)
        return [first.answers.toxic, second.answers.toxic]

    sockets, answers = [], []
    for number in (1, 2, 3):
        answers.append(asyncio.run(invocation()))
        assert answers[-1] == answers[0]  # the fake's rules
        assert all(type(a) is bool for a in answers[0])
        assert svc.connections == number  # one connection per loop, kept alive within it
        sockets.append(idle_socket(client))
        # The previous loop's socket was closed by the client (that loop never will), before
        # this loop's first request: the service saw it go.
        assert [sock.fileno() == -1 for sock in sockets] == [True] * (number - 1) + [False]
        assert service_sees_open(svc, 1)
    assert resource_warnings_now() == []
    asyncio.run(client.aclose())
    assert sockets[-1].fileno() == -1
    assert service_sees_open(svc, 0)
    with pytest.raises(qa.ClientClosed, match="the client is closed"):
        asyncio.run(invocation())


def test_an_explicit_ceiling_holds_across_invocations_each_on_its_own_loop(svc: FakeService) -> None:
    # One call per asyncio.run, as a Lambda handler makes: at 4 a second, one at a time, the
    # second call goes 0.25 s after the first, not as soon as its loop starts.
    sent: list[float] = []  # when each attempt starts, the limiter passed
    hooks = {"before_attempt": [lambda event: sent.append(time.monotonic())]}
    limit = qa.RateLimit(4, burst=1)
    client = qa.AsyncClient(base_url=svc.url, trust_env=False, rate_limit=limit, hooks=hooks)
    try:
        for _ in range(2):
            asyncio.run(client.ask("Have a nice day", Toxic))
    finally:
        asyncio.run(client.aclose())
    assert len(sent) == 2
    assert sent[1] - sent[0] >= 0.2, sent[1] - sent[0]


def test_a_client_dropped_after_its_loop_closed_closes_its_sockets_quietly(svc: FakeService) -> None:
    # A Lambda handler's module-level client at exit, or a test's client never closed: its
    # loop is closed, so the client closes its sockets itself when collected.
    client = qa.AsyncClient(base_url=svc.url, trust_env=False)
    asyncio.run(client.ask("Have a nice day", Toxic))
    sock = idle_socket(client)
    assert service_sees_open(svc, 1)
    del client
    assert resource_warnings_now() == []
    assert sock.fileno() == -1
    assert service_sees_open(svc, 0)


def test_a_pause_in_force_when_the_loop_closed_holds_the_next_loops_first_call(svc: FakeService) -> None:
    client = qa.AsyncClient(base_url=svc.url, trust_env=False, retry=qa.RetryPolicy.none)
    svc.script(reply(429, {"detail": "slow down"}, headers=[("retry-after-ms", "1500")]))
    with pytest.raises(qa.RateLimited, match="429"):
        asyncio.run(client.ask("s", Toxic))  # the server asked the client to pause 1.5 s
    state = client.rate_limit
    assert state is not None
    assert state.state == "paused"
    left = state.paused_for
    assert 0.3 < left <= 1.5  # a loaded machine may take a while to get here
    diagnostics = qa.Diagnostics()
    started = time.monotonic()
    assert isinstance(asyncio.run(client.ask("s", Toxic, diagnostics=diagnostics)).answers.toxic, bool)
    # The next loop's first call waited out what was left of the pause, as the limiter's (a
    # forgotten pause: 0.0). Bounds only: starting a loop on a loaded machine takes some of it.
    assert 0.1 < diagnostics.rate_limit_wait <= left + 0.25
    assert time.monotonic() - started >= diagnostics.rate_limit_wait - 0.05
    assert svc.request_count == 2
    after = client.rate_limit
    assert after is not None
    assert after.throttles == 1
    assert after.paused_for == 0.0
    asyncio.run(client.aclose())


def test_calls_left_queued_in_the_limiter_by_a_closed_loop_do_not_delay_the_next_loop(
    svc: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    unraisable: list[str] = []
    monkeypatch.setattr(
        sys, "unraisablehook", lambda u: unraisable.append(f"{u.exc_type.__name__}: {u.exc_value}")
    )
    # 2 per second, a burst of 1: of five calls made at once, the first goes (its request held
    # unanswered: its attempt stays out), the others are given slots 0.5, 1.0, 1.5 and 2.0 s on,
    # and wait for them in the limiter.
    svc.script(hang())
    client = qa.AsyncClient(base_url=svc.url, trust_env=False, rate_limit=qa.RateLimit(2.0, burst=1))
    limiter = client._core._sender.limiter
    assert limiter is not None
    loop = asyncio.new_event_loop()
    tasks: list[Any] = [loop.create_task(client.ask(f"text {n}", Toxic)) for n in range(5)]
    assert loop.run_until_complete(until_true(lambda: svc.request_count == 1))
    held = client._transport.pool._busy  # type: ignore[union-attr]
    [conn] = held
    assert conn.transport is not None
    sock = conn.transport.get_extra_info("socket")
    assert (limiter.pacer.inflight, limiter.pacer.out) == (5, 1)
    loop.close()  # with the five calls in it: they will never run
    diagnostics = qa.Diagnostics()
    asyncio.run(client.ask("the next invocation", Toxic, diagnostics=diagnostics))
    # Not queued behind the four (2.0 s or more): an interval at most, for the attempt out.
    assert diagnostics.rate_limit_wait < 1.0
    assert limiter.pacer.inflight == 0
    assert svc.request_count == 2
    assert sock.fileno() == -1  # the held call's socket, closed with the old loop's pool
    # The five collected now: their cleanup (an abandoned wait, an attempt out that fails) does
    # not touch the new loop's schedule.
    refs = [weakref.ref(task) for task in tasks]
    for task in tasks:
        task._log_destroy_pending = False  # asyncio's own report of a pending task: not ours
    del task, tasks
    gc.collect()
    assert [ref() for ref in refs] == [None] * 5
    assert (limiter.pacer.inflight, limiter.pacer.out, limiter.pacer.waiters) == (0, 0, {})
    assert unraisable == []
    diagnostics = qa.Diagnostics()
    asyncio.run(client.ask("and the one after", Toxic, diagnostics=diagnostics))
    assert diagnostics.rate_limit_wait < 1.0  # the ceiling's interval after the one before at most
    assert limiter.pacer.inflight == 0
    asyncio.run(client.aclose())
    svc.release()


def test_a_throttled_call_left_waiting_by_a_closed_loop_keeps_the_pause_when_collected(
    svc: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A call got a 429 asking for a 1.5 s pause and waits it out before its retry when its loop,
    # run by hand, is closed. The next loop's first call takes the client and waits out the rest
    # of the pause; the garbage collector finalizes the old call meanwhile (it can only once the
    # client has let go of it): it gives back no slot, reports no answer and cuts no pause.
    gc.collect()  # the earlier tests' garbage, collected before this test watches for errors
    unraisable: list[str] = []
    monkeypatch.setattr(
        sys, "unraisablehook", lambda u: unraisable.append(f"{u.exc_type.__name__}: {u.exc_value}")
    )
    attempted = threading.Event()
    client = qa.AsyncClient(
        base_url=svc.url, trust_env=False, hooks={"after_attempt": [lambda event: attempted.set()]}
    )
    limiter = client._core._sender.limiter
    assert limiter is not None
    svc.script(reply(429, {"detail": "slow down"}, headers=[("retry-after-ms", "1500")]))
    loop = asyncio.new_event_loop()
    task: Any = loop.create_task(client.ask("left behind", Toxic))
    # The hook runs as the 429's attempt ends; the call then waits in the limiter for its retry.
    assert loop.run_until_complete(until_true(attempted.is_set))
    assert not task.done()
    assert (limiter.pacer.inflight, limiter.pacer.out) == (1, 0)
    loop.close()  # with the throttled call in it
    ref = weakref.ref(task)
    task._log_destroy_pending = False  # asyncio's own report of a pending task: not ours
    del task
    paused = client.rate_limit
    assert paused is not None
    assert paused.state == "paused"
    left = paused.paused_for
    assert 0.3 < left <= 1.5  # a loaded machine may take a while to get here
    diagnostics = qa.Diagnostics()
    seen: list[Any] = []

    async def invocation() -> bool:
        call = asyncio.ensure_future(client.ask("s", Toxic, diagnostics=diagnostics))
        await asyncio.sleep(0)  # its first step: it took the client, and waits out the pause
        assert ref() is not None  # let go of by the client, but garbage in a cycle: the collector's
        gc.collect()
        seen.append(ref())
        seen.append(client.rate_limit)
        return (await call).answers.toxic

    started = time.monotonic()
    assert isinstance(asyncio.run(invocation()), bool)
    took = time.monotonic() - started
    collected, during = seen
    assert collected is None
    assert during is not None
    assert during.state == "paused"  # the pause, uncut by the old call's end
    assert during.paused_for > 0.0
    # The call waited out the rest of the pause, as the limiter's (a cut pause: 0.0), then went
    # at once. Bounds only: the collection and a loaded machine take some of what was left.
    assert 0.1 < diagnostics.rate_limit_wait <= left + 0.25
    assert took >= diagnostics.rate_limit_wait - 0.05
    assert svc.request_count == 2
    after = client.rate_limit
    assert after is not None
    assert (after.throttles, after.paused_for) == (1, 0.0)
    assert (limiter.pacer.inflight, limiter.pacer.out, limiter.pacer.waiters) == (0, 0, {})
    assert unraisable == []
    asyncio.run(client.aclose())


def test_loops_racing_for_a_client_whose_loop_closed_take_it_one_at_a_time(svc: FakeService) -> None:
    client = qa.AsyncClient(base_url=svc.url, trust_env=False)
    asyncio.run(client.list_models())  # the client's loop, closed now
    racers = 4
    barrier = threading.Barrier(racers, timeout=BOUND)
    outcomes: list[str] = []

    async def call() -> str:
        barrier.wait()  # every thread's loop running, then all call at once
        try:
            return f"{len((await client.list_models()).models)} models"
        except WrongLoop as exc:
            return str(exc)

    threads = [threading.Thread(target=lambda: outcomes.append(asyncio.run(call()))) for _ in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND)
    assert len(outcomes) == racers
    served = [o for o in outcomes if o.endswith(" models")]
    assert served, outcomes
    # The others found a loop holding the client, open: running, or done and not yet closed.
    for refused in set(outcomes) - set(served):
        assert "belongs to another event loop (" in refused
        assert "it follows a new loop only once its own is closed" in refused
    assert asyncio.run(client.list_models()).models  # the last loop closed too: this one follows
    asyncio.run(client.aclose())
    assert service_sees_open(svc, 0)
    assert resource_warnings_now() == []


class Gate:
    """Stands for a client's lock (``_binding``), telling when the thread named ``name`` finds it
    held (``blocked``, then waits for it) or gets through it (``through``)."""

    def __init__(self, inner: Any, name: str) -> None:
        self.inner = inner
        self.name = name
        self.blocked = threading.Event()
        self.through = threading.Event()

    def __enter__(self) -> None:
        acquire = getattr(self.inner, "acquire", None)
        if threading.current_thread().name != self.name or acquire is None:
            self.inner.__enter__()
        elif not acquire(False):
            self.blocked.set()
            acquire()

    def __exit__(self, *exc: object) -> None:
        self.inner.__exit__(*exc)
        if threading.current_thread().name == self.name:
            self.through.set()


def test_a_loop_arriving_while_another_takes_the_client_waits_and_is_refused(
    svc: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race made certain: the first thread's loop is held inside the client's change of loops
    # (in the old pool's closing) until the second thread's loop has come for the client too.
    # The second waits for the first to finish taking it, then finds it that loop's, running.
    client = qa.AsyncClient(base_url=svc.url, trust_env=False)
    asyncio.run(client.list_models())  # the client's loop, closed now, its connection idle
    old_socket = idle_socket(client)
    inside, proceed, second_done = threading.Event(), threading.Event(), threading.Event()
    closed: list[str] = []
    close_orphaned = AioPool.close_orphaned

    def closing(pool: AioPool) -> None:
        closed.append(threading.current_thread().name)
        if len(closed) == 1:
            inside.set()
            assert proceed.wait(BOUND)
        close_orphaned(pool)

    monkeypatch.setattr(AioPool, "close_orphaned", closing)
    restarts: list[str] = []
    limiter = client._core._sender.limiter
    assert limiter is not None
    restart = limiter.restart

    def restarting() -> None:
        restarts.append(threading.current_thread().name)
        restart()

    monkeypatch.setattr(limiter, "restart", restarting)

    gate = client._binding = Gate(client._binding, "second")  # type: ignore[assignment]
    loops: dict[str, asyncio.AbstractEventLoop] = {}
    outcomes: dict[str, str] = {}

    async def call(name: str) -> str:
        loops[name] = asyncio.get_running_loop()
        try:
            listed = f"{len((await client.list_models()).models)} models"
        except qa.QAError as exc:
            return f"{type(exc).__name__}: {exc}"
        if name == "first":  # its loop stays open (running) until the second is done
            assert await until_true(second_done.is_set)
        return listed

    def run(name: str) -> None:
        try:
            outcomes[name] = asyncio.run(call(name))
        finally:
            if name == "second":
                second_done.set()

    first = threading.Thread(target=run, args=("first",), name="first")
    second = threading.Thread(target=run, args=("second",), name="second")
    first.start()
    assert inside.wait(BOUND)
    second.start()
    # The second loop is at the lock, held by the first; or, were nothing to hold it there,
    # through the change of loops before the first has finished its own.
    assert wait_until(lambda: gate.blocked.is_set() or gate.through.is_set())
    proceed.set()
    first.join(BOUND)
    second.join(BOUND)
    assert not first.is_alive()
    assert not second.is_alive()
    assert outcomes["first"].endswith(" models"), outcomes
    refused = outcomes["second"]
    assert refused.startswith("WrongLoop: this AsyncClient belongs to another event loop (still running)")
    assert "it follows a new loop only once its own is closed: create one client per event loop" in refused
    assert gate.blocked.is_set()
    assert client._loop is loops["first"]
    # The old loop's pool closed once, the limiter restarted once: by the first loop alone.
    assert (closed, restarts) == (["first"], ["first"])
    assert old_socket.fileno() == -1
    assert asyncio.run(client.list_models()).models  # the first's loop closed too: this one follows
    asyncio.run(client.aclose())
    assert service_sees_open(svc, 0)
    assert resource_warnings_now() == []


# -- the pool itself, unit level: connections never connected (no transport, no loop needed) --


@pytest.mark.parametrize(("age", "reused"), [(0.0, True), (5.0, True), (5.001, False), (-0.001, False)])
def test_an_idle_connection_is_reused_from_age_0_to_exactly_idle_timeout(
    age: float, reused: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]
    monkeypatch.setattr(_aio, "idle_clock", lambda: now[0])
    pool = AioPool(max_idle=1, idle_timeout=5.0)
    conn = AioConnection("k")
    pool.release(conn)  # idle since now
    now[0] += age
    assert (pool.checkout("k") is conn) is reused


def _busy_and_idle() -> tuple[AioPool, AioConnection, AioConnection]:
    """A pool holding one connection in use and one idle."""
    pool = AioPool(max_idle=2, idle_timeout=5.0)
    busy, idle = AioConnection("k"), AioConnection("k")
    pool.track(busy)
    pool.release(idle)
    return pool, busy, idle


def test_a_closed_pool_hands_out_nothing_pools_nothing_and_aborts_what_it_tracks() -> None:
    pool, busy, idle = _busy_and_idle()
    pool.close()
    assert (busy.aborted, idle.aborted, pool.busy_count(), pool.idle_count()) == (True, False, 0, 0)
    with pytest.raises(PoolClosed):
        pool.checkout("k")
    late = AioConnection("k")
    with pytest.raises(PoolClosed):
        pool.track(late)
    assert late.aborted
    pool.release(busy)  # a call that ends after the close: its connection is not kept
    assert pool.idle_count() == 0


def test_close_orphaned_closes_the_busy_connections_and_the_idle_ones() -> None:
    pool, busy, idle = _busy_and_idle()
    pool.close_orphaned()
    assert (busy.lost, idle.lost, pool.busy_count(), pool.idle_count()) == (True, True, 0, 0)
    with pytest.raises(PoolClosed):
        pool.checkout("k")


def test_close_orphaned_of_a_connection_its_loop_already_closed_is_quiet() -> None:
    # A pool left behind by a loop that ended may hold a connection the server closed while the
    # loop still ran: its transport closed its socket then, and there is nothing left to close.
    loop = asyncio.new_event_loop()
    ours, theirs = socket.socketpair()
    conn = AioConnection("k")
    try:
        loop.run_until_complete(loop.create_connection(conn.itself, sock=ours))
        theirs.close()
        for _ in range(100):
            if conn.lost:
                break
            loop.run_until_complete(asyncio.sleep(0.001))
        assert conn.lost
    finally:
        loop.close()
    assert ours.fileno() == -1
    conn.close_orphaned()  # nothing raised
    assert conn.aborted

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
  ...loops of several threads racing for it: one at a time, nothing leaked
      test_loops_racing_for_a_client_whose_loop_closed_take_it_one_at_a_time
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
import warnings
import weakref
from typing import Any

import pytest
from faultservers import Holds, RawServer
from support import until_true

import qa_min as qa
from qa_min._ascope import WrongLoop
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


def resource_warnings_now() -> list[str]:
    """The ``ResourceWarning``s (unclosed transports) that collecting the garbage now gives."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


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


def test_a_pause_in_force_when_the_loop_closed_holds_the_next_loops_first_call(svc: FakeService) -> None:
    client = qa.AsyncClient(base_url=svc.url, trust_env=False, retry=qa.RetryPolicy.none)
    svc.script(reply(429, {"detail": "slow down"}, headers=[("retry-after-ms", "600")]))
    with pytest.raises(qa.RateLimited, match="429"):
        asyncio.run(client.ask("s", Toxic))  # the server asked the client to pause 0.6 s
    state = client.rate_limit
    assert state is not None
    assert state.state == "paused"
    left = state.paused_for
    assert 0.3 < left <= 0.6
    diagnostics = qa.Diagnostics()
    started = time.monotonic()
    assert isinstance(asyncio.run(client.ask("s", Toxic, diagnostics=diagnostics)).answers.toxic, bool)
    # The next loop's first call waited out what was left of the pause, as the limiter's.
    assert time.monotonic() - started >= left - 0.05
    assert left - 0.1 <= diagnostics.rate_limit_wait <= left + 0.05
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
    tasks = [loop.create_task(client.ask(f"text {n}", Toxic)) for n in range(5)]
    assert loop.run_until_complete(until_true(lambda: svc.request_count == 1))
    held = client._transport.pool._busy  # type: ignore[union-attr]
    [conn] = held
    sock = conn.transport.get_extra_info("socket")
    assert (limiter.pacer.inflight, limiter.pacer.out) == (5, 1)
    loop.close()  # with the five calls in it: they will never run
    diagnostics = qa.Diagnostics()
    asyncio.run(client.ask("the next invocation", Toxic, diagnostics=diagnostics))
    assert diagnostics.rate_limit_wait == 0.0  # not queued behind the four (2.5 s)
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
    assert diagnostics.rate_limit_wait == 0.0
    assert limiter.pacer.inflight == 0
    asyncio.run(client.aclose())
    svc.release()


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

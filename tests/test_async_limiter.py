"""The rate limiter's waits on asyncio (SPEC §7a, §7b): a task waiting for a slot or a pause does
not block the loop, and wakes when the slot comes, when it is cancelled, or when the client closes.

A server delay (a 429 with ``retry-after-ms``) pauses the whole client from the first one; the
calls started during the pause wait in the limiter (``Diagnostics.rate_limit_wait``), with the
loop free: a ticker task keeps running; a call sleeping its own backoff then waits for the pause
too. The same decisions as the threaded client's limiter (``begin``/``step``/``abandon``),
awaited; an attempt's record sums every nap it waited.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Optional, cast

import pytest
from support import until_true

import qa_min as qa
from qa_min.testing import MockTransport, RecordedRequest, Step, delay, reply

PAUSE_MS = 200  # what the first 429 asks for; every test here waits it out
PROMPT = 2.0


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


class Throttle:
    """A mock handler: the first request gets a 429 asking for a pause, the rest the normal answer."""

    def __init__(self) -> None:
        self.seen: list[float] = []

    def __call__(self, request: RecordedRequest) -> Optional[Step]:
        self.seen.append(time.monotonic())
        if len(self.seen) == 1:
            return reply(429, {"detail": "slow down"}, headers=[("retry-after-ms", str(PAUSE_MS))])
        return None


async def _paused(client: qa.AsyncClient, throttle: Throttle) -> asyncio.Future[Any]:
    """Start a call that meets the 429, and wait until the client is paused."""
    first = asyncio.ensure_future(client.ask("first", Review))
    while not throttle.seen:
        await asyncio.sleep(0.001)
    await asyncio.sleep(0)  # the 429 is reported: the client is paused now
    return first


def test_a_call_started_during_a_pause_waits_without_blocking_the_loop() -> None:
    throttle = Throttle()

    async def main() -> tuple[qa.Diagnostics, int, int]:
        async with qa.AsyncClient(base_url="http://h", transport=MockTransport(throttle)) as client:
            first = await _paused(client, throttle)
            state = client.rate_limit
            assert state is not None
            assert state.state == "paused"
            diagnostics = qa.Diagnostics()
            second = asyncio.ensure_future(client.ask("second", Review, diagnostics=diagnostics))
            ticks = 0
            while not second.done():
                ticks += 1
                await asyncio.sleep(0.01)
            await second
            await first
            return diagnostics, ticks, len(throttle.seen)

    diagnostics, ticks, requests = asyncio.run(main())
    assert diagnostics.attempts == 1
    assert diagnostics.rate_limit_wait > 0.1  # it waited for the pause, in the limiter
    assert ticks >= 5  # the loop ran the ticker all along (a blocked loop: 1 or 2)
    assert requests == 3  # the 429, its retry, the second call: none sent during the pause


def test_a_task_waiting_for_the_limiter_is_cancelled_at_once() -> None:
    throttle = Throttle()

    async def main() -> tuple[float, int]:
        async with qa.AsyncClient(base_url="http://h", transport=MockTransport(throttle)) as client:
            first = await _paused(client, throttle)
            second = asyncio.ensure_future(client.ask("second", Review))
            await asyncio.sleep(0.02)  # waiting in the limiter now
            started = time.monotonic()
            second.cancel()
            with pytest.raises(asyncio.CancelledError):
                await second
            took = time.monotonic() - started
            await first
            return took, len(throttle.seen)

    took, requests = asyncio.run(main())
    assert took < PROMPT
    assert requests == 2  # the 429 and its retry; the cancelled call never went out


def test_aclose_ends_a_wait_for_the_limiter() -> None:
    throttle = Throttle()

    async def main() -> tuple[list[BaseException], float]:
        client = qa.AsyncClient(base_url="http://h", transport=MockTransport(throttle))
        first = await _paused(client, throttle)
        second = asyncio.ensure_future(client.ask("second", Review))
        await asyncio.sleep(0.02)
        started = time.monotonic()
        await client.aclose()
        results = await asyncio.gather(first, second, return_exceptions=True)
        return [r for r in results if isinstance(r, BaseException)], time.monotonic() - started

    errors, took = asyncio.run(main())
    assert len(errors) == 2
    assert all(isinstance(e, qa.Canceled) and "closed" in str(e) for e in errors)
    assert took < PROMPT


def test_a_token_cancelled_from_a_thread_ends_a_wait_for_the_limiter() -> None:
    throttle = Throttle()
    token = qa.CancelToken()

    diagnostics = qa.Diagnostics()

    async def main() -> tuple[BaseException, float, float]:
        async with qa.AsyncClient(base_url="http://h", transport=MockTransport(throttle)) as client:
            first = await _paused(client, throttle)
            began = time.monotonic()
            asked = client.ask("second", Review, cancel=token, diagnostics=diagnostics)
            second = asyncio.ensure_future(asked)
            await asyncio.sleep(0.02)
            started = time.monotonic()
            threading.Thread(target=token.cancel).start()
            with pytest.raises(qa.Canceled) as caught:
                await second
            ended = time.monotonic()
            await first
            return caught.value, ended - started, ended - began

    error, took, lasted = asyncio.run(main())
    assert "cancelled" in str(error)
    assert took < PROMPT
    # The wait it reports is the one it had, not the pause's whole length (PAUSE_MS).
    assert 0.0 < diagnostics.rate_limit_wait <= lasted


def test_a_wait_held_for_an_answer_ends_when_the_answer_comes() -> None:
    # The pacer holds a throttled call's last attempt until every attempt out has answered
    # (a last chance goes alone): the asyncio shell waits on a future the answer wakes.
    from qa_min._ascope import Scope
    from qa_min._asender import AioSender
    from qa_min._call import CallState
    from qa_min._limiter import Limiter
    from qa_min._pacer import Priority

    limiter = Limiter(100, None, True)
    shell = AioSender(cast(Any, None), cast(Any, None), None)

    async def scenario() -> tuple[float, float, float, bool]:
        loop = asyncio.get_running_loop()
        call = CallState(None, None)
        scope = Scope(loop, call)
        first = await shell._acquire(limiter, None, Priority.NEW, call, scope)
        limiter.report(first, 429, 0.005)  # a short pause
        second = await shell._acquire(limiter, None, Priority.NEW, call, scope)  # out, not answered
        last = asyncio.ensure_future(
            shell._acquire(limiter, 0.005, Priority.LAST, CallState(None, None), scope)
        )
        for _ in range(5):
            await asyncio.sleep(0.01)
        waited = not last.done()  # held: the second attempt has not answered
        started = time.monotonic()
        limiter.report(second, 200, None)  # the answer wakes it
        ticket = await asyncio.wait_for(last, PROMPT)
        return first, second, time.monotonic() - started, waited and ticket >= second

    first, second, took, held = asyncio.run(scenario())
    assert held
    assert second >= first
    assert took < PROMPT  # woken by the answer, not after the 10 s a held wait may last


def test_a_wait_held_for_an_answer_is_not_a_sleep_seams_and_ends_when_the_answer_comes() -> None:
    # An injected sleep that returns at once stands for time passing; an answer it cannot bring
    # sooner. The held call awaits the answer's wake-up: through the seam it asked the limiter at
    # every turn of the loop until the answer came (1,000 gathered calls against an in-process
    # rate-limited fake stalled for minutes, the loop starving the fake's threads).
    from qa_min._ascope import Scope
    from qa_min._asender import AioSender
    from qa_min._call import CallState
    from qa_min._limiter import Limiter
    from qa_min._pacer import Priority

    naps: list[float] = []

    async def at_once(seconds: float) -> None:
        naps.append(seconds)

    limiter = Limiter(100, None, True)
    shell = AioSender(cast(Any, None), cast(Any, None), at_once)

    async def scenario() -> tuple[bool, float]:
        loop = asyncio.get_running_loop()
        call = CallState(None, None)
        scope = Scope(loop, call)
        first = await shell._acquire(limiter, None, Priority.NEW, call, scope)
        limiter.report(first, 429, 0.005)
        second = await shell._acquire(limiter, None, Priority.NEW, call, scope)  # out, not answered
        last = asyncio.ensure_future(
            shell._acquire(limiter, 0.005, Priority.LAST, CallState(None, None), scope)
        )
        for _ in range(50):  # turns of the loop, in which a held call asking again would ask
            await asyncio.sleep(0)
        held = not last.done()
        started = time.monotonic()
        limiter.report(second, 200, None)
        await asyncio.wait_for(last, PROMPT)
        return held, time.monotonic() - started

    held, took = asyncio.run(scenario())
    assert held
    assert took < PROMPT  # woken by the answer
    # The seam slept the second call's wait for the pause and the last chance's own delay, and
    # nothing of the wait held for the answer.
    assert len(naps) <= 3, naps


def test_a_deadline_cuts_a_wait_for_the_limiter() -> None:
    throttle = Throttle()

    async def main() -> tuple[BaseException, float]:
        async with qa.AsyncClient(base_url="http://h", transport=MockTransport(throttle)) as client:
            first = await _paused(client, throttle)
            started = time.monotonic()
            with pytest.raises(qa.Canceled) as caught:
                await client.ask("second", Review, timeout=0.1)
            took = time.monotonic() - started
            await first
            return caught.value, took

    error, took = asyncio.run(main())
    assert "timeout of 0.1 s" in str(error)
    assert took < PROMPT


def test_a_wait_in_several_naps_is_summed_in_the_attempts_record() -> None:
    # As on Client: an announced pace wakes a waiting call every 50 ms to look again; the
    # attempt's record sums those naps (it said only the last one).
    announced = [
        ("x-ratelimit-limit-requests", "10"),
        ("x-ratelimit-remaining-requests", "5"),
        ("x-ratelimit-reset-requests", "300ms"),
    ]
    script = [reply(200, {"answers": {"toxic": True}}, headers=announced), delay(0.3)]
    transport = MockTransport(lambda request: script.pop(0) if script else None)

    async def main() -> qa.Diagnostics:
        async with qa.AsyncClient(base_url="http://qa.test", transport=transport) as client:
            await client.ask("warm", Review)  # paces by the announcement from now on
            out = asyncio.ensure_future(client.ask("late", Review))  # out while the next waits
            for _ in range(1000):
                if len(transport.requests) == 2:
                    break
                await asyncio.sleep(0.001)
            diag = qa.Diagnostics()
            await client.ask("waits", Review, diagnostics=diag)
            await out
            return diag

    diag = asyncio.run(main())
    assert diag.rate_limit_wait > 0.1  # several naps: one is at most 0.05 s
    assert diag.history[-1].rate_limit_wait == pytest.approx(diag.rate_limit_wait)
    assert diag.history[-1].delay == 0.0


def test_a_call_in_its_backoff_waits_for_a_pause_another_call_met() -> None:
    # As on Client: B sleeps its own 100 ms while the limiter is still disengaged, A's 429
    # then pauses the client for 300 ms; B's retry went out in the middle of the pause.
    seen: list[tuple[str, float]] = []

    def handler(request: RecordedRequest) -> Optional[Step]:
        name = request.json()["state"]
        seen.append((name, time.monotonic()))
        if len(seen) == 1:
            return reply(503, {"detail": "busy"}, headers=[("retry-after-ms", "100")])
        if name == "A" and len(seen) == 2:
            return reply(429, {"detail": "slow down"}, headers=[("retry-after-ms", "300")])
        return None

    async def main() -> qa.Diagnostics:
        napping = asyncio.Event()
        clients: list[qa.AsyncClient] = []

        def paused() -> bool:
            state = clients[0].rate_limit
            return state is not None and state.throttles > 0

        async def sleep(seconds: float) -> None:
            # B's 100 ms start once the client has taken in A's 429 (as on Client: a busy machine
            # could otherwise spend them before A's 429 was read, and B would go first).
            napping.set()
            assert await until_true(paused)
            await asyncio.sleep(seconds)

        transport = MockTransport(handler)
        async with qa.AsyncClient(base_url="http://qa.test", transport=transport, sleep=sleep) as client:
            clients.append(client)
            diag = qa.Diagnostics()
            b = asyncio.ensure_future(client.ask("B", Review, diagnostics=diag))
            await asyncio.wait_for(napping.wait(), PROMPT)  # B is in its backoff
            await client.ask("A", Review)
            await b
            return diag

    diag = asyncio.run(main())
    # Both retries wait for the end of A's pause, then go together, in either order (as on Client).
    names = [name for name, _ in seen]
    assert names[:2] == ["B", "A"]
    assert sorted(names[2:]) == ["A", "B"]
    b_retry = next(when for name, when in seen[2:] if name == "B")
    assert b_retry - seen[1][1] >= 0.3 - 0.02
    assert diag.history[-1].delay == pytest.approx(0.1, abs=0.05)
    assert diag.history[-1].rate_limit_wait > 0.1  # the rest of A's pause (0.2 s), half of it (none, unfixed)

"""The rate limiter inside a ``Client``, over real sockets to the fake service.

Spec line -> tests (SPEC.md 7a, 6; the rate-limit issue):

  Client(rate_limit=...): RateLimit() by default, None turns it off; client.rate_limit shows it
      test_default_client_shows_an_unlimited_adaptive_limiter, test_rate_limit_none_turns_it_off,
      test_rate_limit_option_must_be_a_rate_limit, test_rate_limit_shows_a_pause_and_its_ceiling
  a client never throttled pays one attribute check per attempt
      test_never_throttled_client_only_reads_engaged_and_notes_successes
  one call at a time waits for nothing beyond the server's delay; an explicit ceiling binds
      test_one_call_at_a_time_waits_only_for_the_delay_asked,
      test_explicit_ceiling_binds_even_one_call_at_a_time
  a 429/529 pauses the client: the throttled call sleeps once; others wait, counted in Diagnostics
      test_throttled_call_sleeps_once_for_the_delay_asked,
      test_other_calls_wait_out_the_pause_and_diagnostics_say_how_long
  waiting for the limiter honours cancel=, timeout= and close(), and counts no attempt; a wait
  cut short reports what it lasted
      test_wait_for_the_limiter_ends_at_once_on_cancel_timeout_and_close,
      test_a_wait_cut_short_splits_what_it_lasted_into_delay_then_limiter
  an attempt's record sums every nap it waited (Attempt.delay, Attempt.rate_limit_wait)
      test_a_wait_in_several_naps_is_summed_in_the_attempts_record,
      test_waits_before_one_attempt_add_up
  client.rate_limit is a snapshot that pickles and copies
      test_a_rate_limit_snapshot_survives_pickle_and_copy
  a throttled call retried after the server's delay spends no retry budget; max_retries holds
      test_throttled_retry_after_the_servers_delay_spends_no_budget,
      test_throttled_call_without_a_delay_or_a_pace_or_retries_still_obeys_max_retries
  a 429 with a delay met while paced is absorbed, ABSORBED of them at most beyond max_retries
      test_throttled_call_absorbs_a_bounded_number_of_429s_with_a_delay
  retry-after-ms: 0 asks for no client-wide pause
      test_zero_retry_after_ms_pauses_nobody_but_the_call_still_waits
  the first 429 pauses the whole client, before any pace is learned (SPEC 7a)
      test_the_first_429_pauses_the_whole_default_client,
      test_a_call_in_its_backoff_waits_for_a_pause_another_call_met
  INFO log lines when the ceiling drops
      test_lowered_ceiling_is_logged_at_info
"""

from __future__ import annotations

import copy
import logging
import pickle
import threading
import time
from collections.abc import Iterator
from typing import Any, Callable, Optional

import pytest
from support import BOUND, SleepRecorder, make_recording_client, wait_until

import qa_min as qa
from qa_min._call import CallState
from qa_min._limiter import ABSORBED
from qa_min.testing import FakeService, MockTransport, delay, reply

STATE = "Some text"
PROMPT = 1.0


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


def busy(*headers: tuple[str, str]) -> Any:
    return reply(429, {"detail": "slow down"}, headers=list(headers))


def test_default_client_shows_an_unlimited_adaptive_limiter(svc: FakeService) -> None:
    with make_recording_client(svc.url) as client:
        state = client.rate_limit
        assert state is not None
        assert state.limit == qa.RateLimit()
        assert (state.state, state.per_second, state.paused_for, state.throttles) == (
            "unlimited",
            None,
            0.0,
            0,
        )
        assert repr(state) == "RateLimitState(unlimited, throttles=0)"
        with pytest.raises(AttributeError, match="read-only"):
            state.throttles = 3


def test_rate_limit_none_turns_it_off(svc: FakeService) -> None:
    svc.script(busy(("Retry-After", "30")))
    sleep = SleepRecorder()
    with make_recording_client(svc.url, sleep, rate_limit=None) as client:
        assert client.rate_limit is None
        assert client._sender.limiter is None
        with pytest.raises(qa.RateLimited):
            client.ask(STATE, Review, retry=qa.RetryPolicy.none)
        client.ask(STATE, Review)  # no pause held it
    assert sleep.seconds == []


@pytest.mark.parametrize(
    "value", [190, "RateLimit()", qa.RetryPolicy(), False], ids=["int", "str", "retry-policy", "false"]
)
def test_rate_limit_option_must_be_a_rate_limit(svc: FakeService, value: object) -> None:
    with pytest.raises(qa.InvalidOption, match="rate_limit must be a RateLimit or None"):
        qa.Client(base_url=svc.url, trust_env=False, rate_limit=value)  # type: ignore[arg-type]


def test_rate_limit_shows_a_pause_and_its_ceiling(svc: FakeService) -> None:
    svc.script(busy(("Retry-After", "30")))
    with make_recording_client(svc.url, rate_limit=qa.RateLimit(50)) as client:
        state = client.rate_limit
        assert state is not None
        assert (state.state, state.per_second) == ("paced", 50.0)
        with pytest.raises(qa.RateLimited):
            client.ask(STATE, Review, retry=qa.RetryPolicy.none)
        state = client.rate_limit
        assert state is not None
        assert state.state == "paused"
        assert 29.0 < state.paused_for <= 30.0
        assert state.throttles == 1
        assert repr(state).startswith("RateLimitState(paused for ")
        assert repr(state).endswith(", then paced at 50.0/s, throttles=1)")


class Spy:
    """Stands in for the limiter: anything but reading ``engaged`` and noting a success fails."""

    engaged = False

    def __init__(self) -> None:
        self.succeeded: list[float] = []
        self.heard: list[object] = []

    def hear(self, headers: object) -> None:
        self.heard.append(headers)  # the headers, for an announced limit; none here

    def acquire(self, *args: object) -> float:
        raise AssertionError("acquire() on the fast path")

    def report(self, *args: object) -> None:
        raise AssertionError("report() on the fast path")


def test_never_throttled_client_only_reads_engaged_and_notes_successes(svc: FakeService) -> None:
    with make_recording_client(svc.url) as client:
        spy = Spy()
        client._sender.rules.limiter = spy  # type: ignore[assignment]
        for _ in range(5):
            client.ask(STATE, Review)
        client.list_models()
    assert len(spy.succeeded) == 6
    assert len(spy.heard) == 6
    assert spy.succeeded == sorted(spy.succeeded)


def test_one_call_at_a_time_waits_only_for_the_delay_asked(svc: FakeService) -> None:
    sleep = SleepRecorder()
    with make_recording_client(svc.url, sleep) as client:
        for _ in range(8):  # successes to measure a pace from
            client.ask(STATE, Review)
        svc.script(busy(("retry-after-ms", "3")), busy(("retry-after-ms", "3")))
        client.ask(STATE, Review)
        state = client.rate_limit
        assert state is not None
        assert state.per_second is not None  # the limiter has a ceiling now...
        # The injected sleep returned at once: let the 3 ms pause end in real time.
        assert wait_until(lambda: client.rate_limit is not None and client.rate_limit.paused_for == 0)
        for _ in range(30):  # ...and one call at a time, as fast as it goes, never meets it
            diag = qa.Diagnostics()
            client.ask(STATE, Review, diagnostics=diag)
            assert diag.rate_limit_wait == 0.0
    assert sleep.seconds == [pytest.approx(0.003), pytest.approx(0.003)]


def test_explicit_ceiling_binds_even_one_call_at_a_time(svc: FakeService) -> None:
    sleep = SleepRecorder()
    with make_recording_client(svc.url, sleep, rate_limit=qa.RateLimit(0.1)) as client:
        client.ask(STATE, Review)
        diag = qa.Diagnostics()
        client.ask(STATE, Review, diagnostics=diag)
    # One slot every 10 s: the second call waits what is left of its interval, all of it
    # the limiter's (the injected sleep returns at once, so the clock barely moved).
    assert len(sleep.seconds) == 1
    assert 5.0 < sleep.seconds[0] <= 10.0
    assert diag.rate_limit_wait == sleep.seconds[0]
    assert diag.attempts == 1


def test_throttled_call_sleeps_once_for_the_delay_asked(svc: FakeService) -> None:
    svc.script(busy(("retry-after-ms", "1500")))
    sleep = SleepRecorder()
    with make_recording_client(svc.url, sleep, rate_limit=qa.RateLimit(1000)) as client:
        diag = qa.Diagnostics()
        client.ask(STATE, Review, diagnostics=diag)
    assert sleep.seconds == [pytest.approx(1.5)]  # its backoff is the pause: one sleep
    assert diag.attempts == 2
    assert diag.rate_limit_wait == 0.0  # its own delay, not the limiter's


def test_other_calls_wait_out_the_pause_and_diagnostics_say_how_long(svc: FakeService) -> None:
    svc.script(busy(("Retry-After", "30")))
    sleep = SleepRecorder()
    with make_recording_client(svc.url, sleep, rate_limit=qa.RateLimit(1000)) as client:
        with pytest.raises(qa.RateLimited):
            client.ask(STATE, Review, retry=qa.RetryPolicy.none)
        diag = qa.Diagnostics()
        client.ask(STATE, Review, diagnostics=diag)  # another call: held by the pause
    # After the pause, one slot (1 ms) for a throttled call to go first.
    assert len(sleep.seconds) == 1
    assert 29.0 < sleep.seconds[0] <= 30.001
    assert diag.rate_limit_wait == sleep.seconds[0]
    assert diag.attempts == 1


class BlockingSleep:
    """An injected sleep that really waits on ``wake``, and says when a wait began."""

    def __init__(self) -> None:
        self.waiting = threading.Event()

    def __call__(self, seconds: float, wake: threading.Event) -> None:
        self.waiting.set()
        wake.wait(seconds)


@pytest.fixture
def paused() -> Iterator[tuple[qa.Client, FakeService, BlockingSleep]]:
    """A client whose service asked for 30 s of quiet; every call now waits for the limiter."""
    with FakeService() as svc:
        svc.script(busy(("Retry-After", "30")))
        sleep = BlockingSleep()
        client = make_recording_client(svc.url, sleep, rate_limit=qa.RateLimit(1000))  # type: ignore[arg-type]
        try:
            with pytest.raises(qa.RateLimited):
                client.ask(STATE, Review, retry=qa.RetryPolicy.none)
            yield client, svc, sleep
        finally:
            client.close()


def blocked_call(
    client: qa.Client, **options: Any
) -> tuple[threading.Thread, list[BaseException], qa.Diagnostics]:
    diag = qa.Diagnostics()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            client.ask(STATE, Review, diagnostics=diag, **options)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors, diag


@pytest.mark.parametrize("way", ["cancel", "timeout", "close"])
def test_wait_for_the_limiter_ends_at_once_on_cancel_timeout_and_close(
    paused: tuple[qa.Client, FakeService, BlockingSleep], way: str
) -> None:
    client, svc, sleep = paused
    token = qa.CancelToken()
    # The timeout leaves room for the call's thread to start and reach the limiter.
    options: dict[str, Any] = {"cancel": token} if way != "timeout" else {"timeout": 0.5}
    began = time.monotonic()
    thread, errors, diag = blocked_call(client, **options)
    assert sleep.waiting.wait(BOUND)
    fired = time.monotonic()
    stop: Callable[[], object] = {"cancel": token.cancel, "close": client.close}.get(way, lambda: None)
    stop()
    thread.join(BOUND)
    assert not thread.is_alive()
    assert time.monotonic() - fired < PROMPT + (0.5 if way == "timeout" else 0)
    [error] = errors
    assert isinstance(error, qa.Canceled)
    words = {"cancel": "cancelled", "timeout": "timeout of 0.5 s expired", "close": "client was closed"}
    assert words[way] in str(error)
    assert diag.attempts == 0  # waiting for the limiter is no attempt
    assert len(svc.requests) == 1
    # The wait it reports is the one it had, not the 30 s pause it was cut out of.
    assert 0.0 < diag.rate_limit_wait <= time.monotonic() - began


def test_throttled_retry_after_the_servers_delay_spends_no_budget(svc: FakeService) -> None:
    empty = qa.RetryBudget(capacity=0)
    with make_recording_client(svc.url, retry_budget=empty) as client:
        svc.script(reply(503))
        assert ask_error(client).diagnostics.attempts == 1  # the budget forbids this retry...
        svc.script(busy(("retry-after-ms", "2")))
        diag = qa.Diagnostics()
        client.ask(STATE, Review, diagnostics=diag)  # ...not this one: the server set the pace
        assert diag.attempts == 2
        svc.script(busy())
        assert ask_error(client).diagnostics.attempts == 1  # a 429 without a delay still pays


def ask_error(client: qa.Client, **options: Any) -> qa.QAError:
    with pytest.raises(qa.QAError) as caught:
        client.ask(STATE, Review, **options)
    return caught.value


@pytest.mark.parametrize(("throttles", "answered"), [(2 + ABSORBED, True), (3 + ABSORBED, False)])
def test_throttled_call_absorbs_a_bounded_number_of_429s_with_a_delay(
    svc: FakeService, throttles: int, answered: bool
) -> None:
    # max_retries (2) plus ABSORBED 429s that carried a delay: a fleet converging loses no call,
    # and a service answering 429 forever still ends it.
    sleep = SleepRecorder()
    with make_recording_client(svc.url, sleep) as client:
        for _ in range(8):  # successes to learn a pace from at the first 429
            client.ask(STATE, Review)
        svc.script(*[busy(("retry-after-ms", "2"))] * throttles)
        diag = qa.Diagnostics()
        if answered:
            client.ask(STATE, Review, diagnostics=diag)
        else:
            diag = ask_error(client).diagnostics
    assert diag.attempts == 3 + ABSORBED
    assert [a.status for a in diag.history].count(429) == throttles if answered else 3 + ABSORBED
    assert sleep.seconds == [pytest.approx(0.002)] * (2 + ABSORBED)


def test_throttled_call_without_a_delay_or_a_pace_or_retries_still_obeys_max_retries(
    svc: FakeService,
) -> None:
    with make_recording_client(svc.url) as client:
        for _ in range(8):
            client.ask(STATE, Review)
        svc.script(busy(("retry-after-ms", "2")), *[busy()] * 5)
        error = ask_error(client)  # one absorbed with its delay, then none without one
    assert isinstance(error, qa.RateLimited)
    assert error.diagnostics.attempts == 4
    for limit in (qa.RateLimit(), qa.RateLimit(1000)):
        svc.script(*[busy(("retry-after-ms", "2"))] * 5)
        with make_recording_client(svc.url, rate_limit=limit) as client:  # no pace learned: none absorbed
            assert ask_error(client).diagnostics.attempts == 3
    svc.script(busy(("retry-after-ms", "2")))
    with make_recording_client(svc.url) as client:
        assert ask_error(client, retry=qa.RetryPolicy.none).diagnostics.attempts == 1


def test_zero_retry_after_ms_pauses_nobody_but_the_call_still_waits(svc: FakeService) -> None:
    svc.script(busy(("retry-after-ms", "0"), ("Retry-After", "1")))
    sleep = SleepRecorder()
    with make_recording_client(svc.url, sleep, rate_limit=qa.RateLimit(1000)) as client:
        client.ask(STATE, Review)
        state = client.rate_limit
        assert state is not None
        assert state.throttles == 1
        assert state.paused_for == 0.0
    assert sleep.seconds == [1.0]  # as it always did: Retry-After, since the 0 is no delay


def test_lowered_ceiling_is_logged_at_info(svc: FakeService, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="qa_min")
    with make_recording_client(svc.url) as client:
        for _ in range(8):
            client.ask(STATE, Review)
        svc.script(busy(("retry-after-ms", "1")))
        client.ask(STATE, Review)
    lowered = [r for r in caplog.records if "rate limit lowered" in r.getMessage()]
    assert len(lowered) == 1
    assert lowered[0].levelno == logging.INFO
    assert lowered[0].getMessage().startswith(f"{svc.url}: rate limit lowered to ")
    assert "(was no ceiling)" in lowered[0].getMessage()


def test_threads_of_one_client_share_the_pause(svc: FakeService) -> None:
    """Eight threads; one 429 asks for 30 s: every other call waits it out (the sleep is
    injected and returns at once), none of them is sent during it."""
    sleep = SleepRecorder()
    with make_recording_client(svc.url, sleep, rate_limit=qa.RateLimit(1000)) as client:
        svc.script(busy(("Retry-After", "30")))
        with pytest.raises(qa.RateLimited):
            client.ask(STATE, Review, retry=qa.RetryPolicy.none)
        start = threading.Barrier(8)
        done: list[Optional[qa.Diagnostics]] = []

        def work() -> None:
            start.wait(BOUND)
            diag = qa.Diagnostics()
            client.ask(STATE, Review, diagnostics=diag)
            done.append(diag)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(BOUND)
        assert wait_until(lambda: len(done) == 8)
    # The first slot after the pause is kept for a throttled call; then one a millisecond.
    assert len(sleep.seconds) == 8
    assert all(29.0 < seconds <= 30.01 for seconds in sleep.seconds)


def test_the_first_429_pauses_the_whole_default_client(svc: FakeService) -> None:
    """SPEC 7a, from the first one: a default client that has learned nothing yet still holds
    every other call until the delay the service asked for has passed (the injected sleep
    returns at once; each call's sleep is the limiter's wait for the pause)."""
    sleep = SleepRecorder()
    with make_recording_client(svc.url, sleep) as client:
        svc.script(busy(("Retry-After", "30")))
        with pytest.raises(qa.RateLimited):
            client.ask(STATE, Review, retry=qa.RetryPolicy.none)
        state = client.rate_limit
        assert state is not None
        assert state.per_second is None  # no pace learned: nothing measured before the 429
        assert 29.0 < state.paused_for <= 30.0
        diags = [qa.Diagnostics() for _ in range(4)]
        threads = [
            threading.Thread(target=client.ask, args=(STATE, Review), kwargs={"diagnostics": d})
            for d in diags
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(BOUND)
    assert len(svc.requests) == 5
    assert len(sleep.seconds) == 4
    assert all(29.0 < seconds <= 30.0 for seconds in sleep.seconds)
    assert all(29.0 < d.rate_limit_wait <= 30.0 for d in diags)


@pytest.mark.parametrize(
    ("taken", "delay", "held"),
    [
        (5.0, 2.0, 3.0),  # the whole wait: the backoff, then the limiter's part
        (9.0, 2.0, 3.0),  # a sleep that overran counts what was planned
        (2.5, 2.0, 0.5),  # cut short in the limiter's part
        (2.0, 2.0, 0.0),  # exactly at the end of the backoff
        (1.0, 1.0, 0.0),  # cut short in the backoff: nothing of the limiter's
        (-1.0, 0.0, 0.0),  # a clock that went back
    ],
)
def test_a_wait_cut_short_splits_what_it_lasted_into_delay_then_limiter(
    taken: float, delay: float, held: float
) -> None:
    call = CallState(None, None)
    call.rate_limit_total = 1.0  # an earlier wait of the same call
    call.waited(5.0, 3.0, taken)
    assert (call.delay, call.rate_limit_wait) == pytest.approx((delay, held))
    assert call.rate_limit_total == pytest.approx(1.0 + held)


def test_a_rate_limit_snapshot_survives_pickle_and_copy() -> None:
    svc = FakeService(rate_limit=(100, 5), announce="openai")
    with svc, qa.Client(base_url=svc.url, api_key="k-snapshot") as client:
        client.list_models()
        state = client.rate_limit
    assert state is not None
    assert state.announced is not None
    assert state.announced["style"] == "openai"
    for twin in (
        pickle.loads(pickle.dumps(state)),
        copy.copy(state),
        copy.deepcopy(state),
    ):
        assert type(twin) is type(state)
        assert repr(twin) == repr(state)
        assert (twin.limit, twin.state, twin.per_second, twin.paused_for, twin.throttles, twin.announced) == (
            state.limit,
            state.state,
            state.per_second,
            state.paused_for,
            state.throttles,
            state.announced,
        )


@pytest.mark.parametrize("seam", [False, True], ids=["default-sleep", "instant-seam"])
def test_a_wait_held_for_an_answer_ends_when_the_answer_comes(seam: bool) -> None:
    # The pacer holds a throttled call's last attempt until every attempt out has answered (a
    # last chance goes alone): the threaded shell's sleep is armed for the limiter to wake, as the
    # asyncio shell's future is (test_async_limiter.py), not left to its cap of seconds. A sleep=
    # seam returning at once stands for time passing, not for an answer it cannot bring sooner:
    # the held call waits on its event all the same (through the seam it asked the limiter again
    # and again, a thread spinning until the answer came).
    from qa_min._pacer import Priority

    token, naps = qa.CancelToken(), []
    options: dict[str, Any] = {"sleep": lambda seconds, wake: naps.append(seconds)} if seam else {}
    with qa.Client(
        base_url="http://qa.test", transport=MockTransport(lambda request: None), **options
    ) as client:
        sender = client._sender
        limiter = sender.limiter
        assert limiter is not None

        def acquire(wait: Optional[float], priority: Priority) -> float:
            call = CallState(token, None)

            def nap(seconds: float, held: float, waiter: Any = None) -> None:
                sender._nap(seconds, call, held, waiter)

            return limiter.acquire(wait, priority, nap)

        first = acquire(None, Priority.NEW)
        limiter.report(first, 429, 0.005)  # a short pause
        second = acquire(None, Priority.NEW)  # out, not answered
        tickets: list[float] = []
        last = threading.Thread(target=lambda: tickets.append(acquire(0.005, Priority.LAST)))
        last.start()
        try:
            armed = wait_until(lambda: any(w.wake is not None for w in limiter.pacer.waiters), PROMPT)
            if seam:
                last.join(0.05)  # a window in which a wait spinning through the seam would call it
            held, asked = last.is_alive(), len(naps)  # asleep, armed: the second has not answered
            started = time.monotonic()
            limiter.report(second, 200, None)  # the answer wakes it
            last.join(PROMPT)
            took = time.monotonic() - started
        finally:
            token.cancel()  # ends a wait nothing woke
            last.join(BOUND)
    assert armed
    assert held
    assert took < PROMPT
    assert len(tickets) == 1
    if seam:
        assert asked <= 3, naps  # the second call's wait for the pause, the last chance's own delay
    else:
        assert tickets[0] >= second


def test_a_wait_in_several_naps_is_summed_in_the_attempts_record() -> None:
    # An announced pace lets a waiting call sleep at most LOOK (50 ms) before it looks again:
    # its wait of about 0.4 s is many naps. The attempt's record said only the last one.
    announced = [
        ("x-ratelimit-limit-requests", "10"),
        ("x-ratelimit-remaining-requests", "5"),
        ("x-ratelimit-reset-requests", "300ms"),
    ]
    script = [reply(200, {"answers": {"toxic": True}}, headers=announced), delay(0.3)]
    transport = MockTransport(lambda request: script.pop(0) if script else None)
    with qa.Client(base_url="http://qa.test", transport=transport) as client:
        client.ask(STATE, Review)  # paces by the announcement from now on
        out = client.submit(client.ask, STATE, Review)  # answered late: out while the next waits
        assert wait_until(lambda: len(transport.requests) == 2)
        diag = qa.Diagnostics()
        client.ask(STATE, Review, diagnostics=diag)
        out.result(BOUND)
    assert diag.rate_limit_wait > 0.1  # several naps: one is at most 0.05 s
    assert diag.history[-1].rate_limit_wait == pytest.approx(diag.rate_limit_wait)
    assert diag.history[-1].delay == 0.0


def test_waits_before_one_attempt_add_up() -> None:
    call = CallState(None, None)
    call.waited(1.0, 0.4, 1.0)  # its own 0.6 s, then 0.4 s of the limiter's
    call.waited(0.05, 0.05, 0.05)  # the limiter looks again
    call.record(200, None, 0.01)
    assert (call.history[0].delay, call.history[0].rate_limit_wait) == pytest.approx((0.6, 0.45))
    assert call.rate_limit_total == pytest.approx(0.45)
    assert (call.delay, call.rate_limit_wait) == (0.0, 0.0)  # the next attempt starts afresh


NAP_B, PAUSE_A = 0.1, 0.3  # B's backoff, then the client-wide pause A's 429 asks for


class PauseDuringBackoff:
    """A mock handler: call "B" first gets a 503 asking for NAP_B, call "A" a 429 asking for
    PAUSE_A; every request's state and arrival time is kept."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float]] = []
        self.throttled = threading.Event()  # A's 429 is answered

    def __call__(self, request: Any) -> Any:
        name = request.json()["state"]
        self.seen.append((name, time.monotonic()))
        if len(self.seen) == 1:
            return reply(503, {"detail": "busy"}, headers=[("retry-after-ms", f"{NAP_B * 1000:.0f}")])
        if name == "A" and len(self.seen) == 2:
            self.throttled.set()
            return busy(("retry-after-ms", f"{PAUSE_A * 1000:.0f}"))
        return None


def test_a_call_in_its_backoff_waits_for_a_pause_another_call_met() -> None:
    # B sleeps its own 100 ms while the limiter is still disengaged; A's 429 then pauses the
    # client for 300 ms. B's retry went out after its 100 ms, in the middle of the pause.
    handler = PauseDuringBackoff()
    napping = threading.Event()
    clients: list[qa.Client] = []

    def paused() -> bool:
        state = clients[0].rate_limit
        return state is not None and state.throttles > 0

    def sleep(seconds: float, wake: threading.Event) -> None:
        # B's 100 ms start once the client has taken in A's 429 (its pause and its count are set
        # together), whatever the machine's load: they end inside A's pause, as they would had
        # A's request come at once.
        napping.set()
        assert handler.throttled.wait(BOUND)
        assert wait_until(paused)
        wake.wait(seconds)

    with qa.Client(base_url="http://qa.test", transport=MockTransport(handler), sleep=sleep) as client:
        clients.append(client)
        diag = qa.Diagnostics()
        b = client.submit(client.ask, "B", Review, diagnostics=diag)
        assert napping.wait(BOUND)  # B is in its backoff
        client.ask("A", Review)
        b.result(BOUND)
    # Both retries wait for the end of A's pause, then go together (no ceiling spaces them yet),
    # in either order: a timer's millisecond decides.
    names = [name for name, _ in handler.seen]
    assert names[:2] == ["B", "A"]
    assert sorted(names[2:]) == ["A", "B"]
    paused_at = handler.seen[1][1]
    b_retry = next(when for name, when in handler.seen[2:] if name == "B")
    assert b_retry - paused_at >= PAUSE_A - 0.02
    assert diag.history[-1].delay == pytest.approx(NAP_B, abs=0.05)
    assert diag.history[-1].rate_limit_wait > 0.1  # the rest of A's pause, about 0.2 s (none, unfixed)

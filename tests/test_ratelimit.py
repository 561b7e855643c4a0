"""``qa.RateLimit`` and the limiter behind it, on an injected clock.

Spec line -> tests (SPEC.md 7a; the rate-limit issue):

  RateLimit(per_second=None, *, burst=None, adaptive=True), validated, immutable, picklable
      test_rate_limit_accepts_values_at_the_limits, test_rate_limit_refuses_bad_values,
      test_rate_limit_is_an_immutable_value, test_rate_limit_repr_reads_as_code
  RateLimit.split(n) gives each of n workers its share
      test_split_shares_the_rate_and_the_burst, test_split_refuses_a_bad_count
  one schedule: an explicit ceiling always binds, an adaptive one only with company
      test_explicit_ceiling_paces_from_the_first_call_with_its_burst,
      test_adaptive_ceiling_binds_only_when_more_than_one_attempt_is_out
  a 429/529 delay pauses the whole client; promised slots stay; the throttled call goes first
      test_pause_holds_every_caller_once_there_is_a_pace,
      test_pause_holds_every_call_from_the_first_429_even_without_a_pace,
      test_pause_only_limiter_holds_everyone, test_slots_promised_after_a_pause_stay_valid,
      test_sleeper_whose_slot_a_new_pause_covers_waits_once_more,
      test_throttled_call_overtakes_and_moves_the_sleepers_back
  giving up: the slot goes back, and a pause nobody waits for ends
      test_a_stopped_wait_gives_the_slot_back_and_lifts_an_orphan_pause
  cuts: first a guess, then measured; cooldown; jitter; the 30% bound; stretches
      test_first_ceiling_is_half_the_pace_of_the_latest_successes,
      test_a_guess_is_halved_by_a_fresh_throttle_and_doubles_each_second,
      test_throttle_of_an_attempt_sent_before_the_cut_does_not_cut,
      test_a_last_chance_waits_for_the_pace_to_settle,
      test_measured_cut_is_95_percent_of_what_got_through,
      test_throttle_while_the_ceiling_gets_through_is_jitter,
      test_measured_cut_keeps_at_least_70_percent,
      test_long_stretches_measure_once_then_each_throttle_cuts_the_same_share,
      test_a_measured_ceiling_is_cut_by_the_same_share_whatever_the_stretch,
      test_short_stretches_make_no_estimate
  the limits of a guess and of a ceiling, each at the limit and one past it
      test_a_first_ceiling_counts_only_the_successes_of_the_last_second,
      test_a_guess_halved_by_a_fresh_throttle_stays_at_5_calls_a_second_at_least,
      test_a_guess_grows_to_32_times_itself_at_most,
      test_no_adaptive_ceiling_is_below_half_a_call_a_second
  regrowth and recovery, with log lines
      test_measured_ceiling_regrows_slowly_then_cubically,
      test_after_a_short_pause_regrowth_is_linear_for_2_s_then_adds_0_3_times_the_cube,
      test_explicit_ceiling_is_regained_and_told,
      test_adaptive_ceiling_is_lifted_after_a_quiet_minute,
      test_engaging_again_starts_from_the_last_ceiling_measured
  thread safety
      test_threads_sharing_a_limiter_get_distinct_evenly_spaced_slots
  which 429s the limiter absorbs (beyond max_retries, ABSORBED at most)
      test_the_limiter_absorbs_429s_only_for_a_busy_or_paced_client
  the shell: what a report counts, who is woken, how long a wait lasts, what a restart keeps
      test_only_a_2xx_answer_counts_as_a_success,
      test_429_and_529_pause_the_client_and_count_as_throttles_their_neighbours_do_not,
      test_a_last_chance_that_stops_waiting_wakes_the_calls_held_for_it_and_no_other_stop_does,
      test_arm_ends_the_wait_at_once_when_no_answer_is_awaited_any_more,
      test_a_sleeper_far_from_its_slot_under_a_learned_ceiling_looks_again_every_look_far,
      test_a_restart_keeps_the_pause_the_server_asked_for
"""

from __future__ import annotations

import copy
import math
import pickle
import re
import sys
import threading
from typing import Any, Callable, Optional

import pytest

import qa_min as qa
from qa_min import _policy
from qa_min._announced import Announcement
from qa_min._limiter import ABSORBED, Limiter
from qa_min._pacer import AFTER, ALONE, EARLY, JUMPS, LOOK, LOOK_FAR, RISEN, Pace, Pacer, Priority, Waiter
from qa_min._policy import (
    CUBE,
    CUBE_SHORT,
    CUT,
    CUT_SHORT,
    FIRST_GUESS,
    FLOOR,
    GROW_SHORT,
    MIN_GUESS,
    PLATEAU,
    PLATEAU_SHORT,
    REGROW_MIN,
    REGROW_SHORT,
    SAMPLE,
    WINDOW,
    Policy,
)
from qa_min._ratelimit import RateLimitState
from qa_min.testing import MockTransport

# -- RateLimit, the value ------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({}, id="default"),
        pytest.param({"per_second": sys.float_info.min}, id="per_second-smallest-positive"),
        pytest.param({"per_second": 1}, id="per_second-int"),
        pytest.param({"per_second": sys.float_info.max}, id="per_second-largest-finite"),
        pytest.param({"per_second": int(sys.float_info.max)}, id="per_second-largest-int-a-float-holds"),
        pytest.param(
            {"per_second": 5, "burst": int(sys.float_info.max)}, id="burst-largest-int-a-float-holds"
        ),
        pytest.param({"per_second": 5, "burst": 1}, id="burst-exactly-1"),
        pytest.param({"burst": 10}, id="burst-for-the-adaptive-ceiling"),
        pytest.param({"per_second": 5, "adaptive": False}, id="fixed-ceiling"),
        pytest.param({"adaptive": False}, id="pauses-only"),
    ],
)
def test_rate_limit_accepts_values_at_the_limits(kwargs: dict[str, Any]) -> None:
    limit = qa.RateLimit(**kwargs)
    assert limit.per_second == kwargs.get("per_second")
    assert limit.burst == kwargs.get("burst")
    assert limit.adaptive is kwargs.get("adaptive", True)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        pytest.param({"per_second": 0}, "per_second must be a finite number > 0", id="per_second-0"),
        pytest.param({"per_second": -1}, "per_second must be a finite number > 0", id="per_second-negative"),
        pytest.param({"per_second": math.inf}, "finite number", id="per_second-inf"),
        pytest.param({"per_second": math.nan}, "finite number", id="per_second-nan"),
        pytest.param({"per_second": True}, "finite number", id="per_second-bool"),
        pytest.param({"per_second": "10"}, "finite number", id="per_second-str"),
        pytest.param(
            {"per_second": int(sys.float_info.max) + 1},
            "per_second must be a finite number > 0 and at most 1.79769e[+]308, got an int too large",
            id="per_second-one-past-the-largest-float",
        ),
        pytest.param({"per_second": 10**400}, "got an int too large for a float", id="per_second-10**400"),
        pytest.param({"per_second": 5, "burst": 0}, "burst must be a whole number >= 1", id="burst-0"),
        pytest.param(
            {"per_second": 5, "burst": int(sys.float_info.max) + 1},
            "burst must be a whole number >= 1 and at most 1.79769e[+]308, got an int too large for a float",
            id="burst-one-past-the-largest-float",
        ),
        pytest.param({"per_second": 5, "burst": 1.0}, "whole number", id="burst-float"),
        pytest.param({"per_second": 5, "burst": True}, "whole number", id="burst-bool"),
        pytest.param({"adaptive": 1}, "adaptive must be True or False", id="adaptive-int"),
        pytest.param(
            {"burst": 5, "adaptive": False}, "burst needs a ceiling", id="burst-with-nothing-to-pace"
        ),
    ],
)
def test_rate_limit_refuses_bad_values(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(qa.InvalidOption, match=words):
        qa.RateLimit(**kwargs)


def _slowest(burst: int) -> float:
    """The least per_second whose ``burst / per_second`` is still a float."""
    rate = burst / sys.float_info.max
    while burst / rate > sys.float_info.max:
        rate = math.nextafter(rate, math.inf)
    while burst / math.nextafter(rate, 0.0) <= sys.float_info.max:
        rate = math.nextafter(rate, 0.0)
    return rate


@pytest.mark.parametrize("burst", [None, 1, 2, 3])
def test_rate_limit_slower_than_a_float_of_seconds_is_refused_and_the_slowest_binds(
    burst: Optional[int],
) -> None:
    # 1 / per_second (and a burst's refill, burst / per_second) overflowed to inf in the pacer:
    # RateLimit(1e-320, burst=1) let every call through, RateLimit(5e-324) held the first one.
    slowest = _slowest(burst or 1)
    one_past = math.nextafter(slowest, 0.0)
    refused = (
        r"^RateLimit burst / per_second \(1 / per_second with no burst\), the seconds a full burst "
        rf"takes to refill, must be at most 1.79769e\+308, the largest float; got {burst or 1} / "
    )
    with pytest.raises(qa.InvalidOption, match=refused + re.escape(repr(one_past)) + "$"):
        qa.RateLimit(one_past, burst=burst)
    limit = qa.RateLimit(slowest, burst=burst)
    with qa.Client(base_url="http://qa.test", transport=MockTransport(), rate_limit=limit) as client:
        for _ in range(burst or 1):  # the burst goes at once...
            client.list_models(timeout=5.0)
        with pytest.raises(qa.Canceled, match="timeout"):  # ...and the next waits its slot
            client.list_models(timeout=0.05)


def test_rate_limit_is_an_immutable_value() -> None:
    limit = qa.RateLimit(190, burst=10, adaptive=False)
    with pytest.raises(AttributeError, match="read-only"):
        limit.per_second = 5
    with pytest.raises(AttributeError, match="read-only"):
        del limit.burst
    for twin in (pickle.loads(pickle.dumps(limit)), copy.deepcopy(limit), copy.copy(limit)):
        assert twin == limit
        assert hash(twin) == hash(limit)
        assert type(twin) is qa.RateLimit
    assert limit != qa.RateLimit(190, burst=10)
    assert limit != (190, 10, False)
    assert len({qa.RateLimit(), qa.RateLimit(), qa.RateLimit(1)}) == 2
    assert not hasattr(limit, "__dict__")  # its __slots__ hold, as for every read-only value here
    assert not hasattr(RateLimitState(limit, None, 0.0, 0), "__dict__")


@pytest.mark.parametrize(
    ("paused_for", "state", "text"),
    [
        (0.0, "unlimited", "RateLimitState(unlimited, throttles=1)"),
        (0.25, "paused", "RateLimitState(paused for 0.25 s, then unlimited, throttles=1)"),
        (1e-9, "paused", "RateLimitState(paused for 0.00 s, then unlimited, throttles=1)"),
    ],
)
def test_a_state_with_any_pause_left_is_paused(paused_for: float, state: str, text: str) -> None:
    # Under a second left is still a pause: "paused" and its repr say so until it is over.
    snapshot = RateLimitState(qa.RateLimit(), None, paused_for, 1)
    assert snapshot.state == state
    assert repr(snapshot) == text


@pytest.mark.parametrize(
    ("limit", "text"),
    [
        (qa.RateLimit(), "RateLimit()"),
        (qa.RateLimit(190), "RateLimit(190)"),
        (qa.RateLimit(2.5, burst=3), "RateLimit(2.5, burst=3)"),
        (qa.RateLimit(adaptive=False), "RateLimit(adaptive=False)"),
    ],
)
def test_rate_limit_repr_reads_as_code(limit: qa.RateLimit, text: str) -> None:
    assert repr(limit) == text
    assert eval(text, {"RateLimit": qa.RateLimit}) == limit


@pytest.mark.parametrize(
    ("limit", "n", "share"),
    [
        (qa.RateLimit(190, burst=50), 8, qa.RateLimit(23.75, burst=6)),
        (qa.RateLimit(190, burst=50), 1, qa.RateLimit(190, burst=50)),
        (qa.RateLimit(190, burst=50), 50, qa.RateLimit(3.8, burst=1)),
        (qa.RateLimit(190, burst=50), 51, qa.RateLimit(190 / 51, burst=1)),
        (qa.RateLimit(), 4, qa.RateLimit()),
        (qa.RateLimit(10, adaptive=False), 2, qa.RateLimit(5, adaptive=False)),
    ],
)
def test_split_shares_the_rate_and_the_burst(limit: qa.RateLimit, n: int, share: qa.RateLimit) -> None:
    assert limit.split(n) == share


@pytest.mark.parametrize("n", [0, -1, 2.0, True, "2"])
def test_split_refuses_a_bad_count(n: Any) -> None:
    with pytest.raises(qa.InvalidOption, match="split n must be a whole number >= 1"):
        qa.RateLimit(10).split(n)


def test_split_counts_up_to_the_largest_float() -> None:
    # The share is per_second / n in floats: a larger int raised OverflowError there.
    most = int(sys.float_info.max)
    assert qa.RateLimit(sys.float_info.max).split(most) == qa.RateLimit(1.0)
    # A share one a float of seconds cannot space (1 / share is inf) is refused as such.
    with pytest.raises(qa.InvalidOption, match=r"^RateLimit burst / per_second .* got 1 / 5\.56"):
        qa.RateLimit(1).split(most)
    for n in (int(sys.float_info.max) + 1, 10**400):
        with pytest.raises(
            qa.InvalidOption, match=r"split n must be a whole number >= 1 and at most .*too large for a float"
        ):
            qa.RateLimit(1).split(n)


# -- the limiter on an injected clock --------------------------------------------------------


class Clock:
    """A clock that moves only when told, or when a nap sleeps on it."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Naps:
    """An injected ``nap``: records (seconds, held), optionally sleeps on the clock, then runs
    ``during`` once (what other threads do while this one sleeps)."""

    def __init__(self, clock: Clock, advance: bool = True) -> None:
        self.clock = clock
        self.advance = advance
        self.calls: list[tuple[float, float]] = []
        self.during: Optional[Callable[[], object]] = None

    def __call__(self, seconds: float, held: float, waiter: Optional[Waiter] = None) -> None:
        self.calls.append((seconds, held))
        during, self.during = self.during, None
        if during is not None:
            during()
        if self.advance and not (waiter is not None and waiter.woken):
            self.clock.now += seconds  # a wait an answer ended took no time


def near(actual: list[tuple[float, float]], expected: list[tuple[float, float]], rel: float = 1e-6) -> bool:
    """The naps taken are the ones expected, to a rounding error (or ``rel``)."""
    return len(actual) == len(expected) and all(
        math.isclose(a, e, rel_tol=rel, abs_tol=1e-9)
        for pair, want in zip(actual, expected)
        for a, e in zip(pair, want)
    )


def limiter(
    per_second: Optional[float] = None,
    burst: Optional[int] = None,
    adaptive: bool = True,
    clock: Optional[Clock] = None,
    news: Optional[list[str]] = None,
) -> tuple[Limiter, Clock]:
    clock = clock or Clock()
    notes = news if news is not None else []
    return Limiter(per_second, burst, adaptive, clock, notes.append), clock


def engaged_at(rate: float, clock: Clock, pause: Optional[float] = 0.005) -> Limiter:
    """An adaptive limiter whose first throttle came after successes at ``rate`` a second, with
    a first guess of half that however high (``FIRST_GUESS`` lifted: the later rules are what
    these tests are about)."""
    lim, _ = limiter(clock=clock)
    for i in range(8):
        lim.succeeded.append(clock.now - (8 - i) / rate)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_policy, "FIRST_GUESS", math.inf)
        lim.report(None, 429, pause)
    return lim


def ceiling(lim: Limiter) -> Optional[float]:
    return lim.snapshot()[0]


def test_explicit_ceiling_paces_from_the_first_call_with_its_burst() -> None:
    lim, clock = limiter(100)  # 10 ms apart; the default burst is 50 ms worth: 6 at once
    assert lim.engaged
    naps = Naps(clock, advance=False)
    slots = [lim.acquire(None, Priority.NEW, naps) for _ in range(8)]
    assert slots[:6] == [pytest.approx(100.0)] * 6
    assert slots[6:] == [pytest.approx(100.01), pytest.approx(100.02)]
    assert near(naps.calls, [(0.01, 0.01), (0.02, 0.02)])

    lim, clock = limiter(10, burst=1)  # one at a time, 100 ms apart, even alone
    naps = Naps(clock)
    for k in range(3):
        assert lim.acquire(None, Priority.NEW, naps) == pytest.approx(100 + 0.1 * k)
        lim.report(clock.now, 200, None)
    assert near(naps.calls, [(0.1, 0.1)] * 2)


def test_adaptive_ceiling_binds_only_when_more_than_one_attempt_is_out() -> None:
    clock = Clock()
    lim = engaged_at(20, clock)  # half of 20/s: 10/s, 100 ms apart
    assert ceiling(lim) == pytest.approx(10)
    clock.now += 0.01  # after the 429's pause
    naps = Naps(clock, advance=False)
    for _ in range(5):  # one at a time, far faster than the ceiling: never paced
        ticket = lim.acquire(None, Priority.NEW, naps)
        lim.report(ticket, 200, None)
    assert naps.calls == []
    first = lim.acquire(None, Priority.NEW, naps)  # two out at once: the second waits its slot
    second = lim.acquire(None, Priority.NEW, naps)
    assert second - first == pytest.approx(0.1, rel=0.01)  # the guess has grown 0.35%
    assert near(naps.calls, [(0.1, 0.1)], rel=0.01)


def test_pause_holds_every_caller_once_there_is_a_pace() -> None:
    clock = Clock()
    lim = engaged_at(400, clock, pause=2.0)
    naps = Naps(clock, advance=False)
    clock.now += 0.5
    assert lim.acquire(None, Priority.NEW, naps) == pytest.approx(102.0)  # a first attempt waits too
    assert near(naps.calls, [(1.5, 1.5)])
    # The throttled call's retry: one sleep of its own delay, none of it the limiter's.
    other = Naps(clock, advance=False)
    clock.now = 100.0
    assert lim.acquire(2.0, Priority.RETRY, other) == pytest.approx(102.0)
    assert other.calls == [(2.0, 0.0)]


def test_pause_holds_every_call_from_the_first_429_even_without_a_pace() -> None:
    # SPEC.md 7a: the server asked the client to wait; the whole client waits, from the first 429.
    lim, clock = limiter()
    lim.report(None, 429, 30.0)  # nothing measured before: no pace
    assert lim.engaged
    assert ceiling(lim) is None
    naps = Naps(clock, advance=False)
    assert lim.acquire(None, Priority.NEW, naps) == pytest.approx(130.0)
    assert near(naps.calls, [(30.0, 30.0)])  # all of it the limiter's: the call had no delay
    naps.calls.clear()
    assert lim.acquire(30.0, Priority.RETRY, naps) == pytest.approx(130.0)
    assert naps.calls == [(30.0, 0.0)]  # the throttled call: exactly its own delay


def test_with_no_ceiling_a_new_call_goes_after_the_pauses_throttled_call() -> None:
    # Both would be due at the pause's end, and race: the throttled call goes first, AFTER ahead.
    lim, clock = limiter()
    lim.report(None, 429, 30.0)
    retry_naps, new_naps = Naps(clock, advance=False), Naps(clock, advance=False)
    slots: list[float] = []
    retry_naps.during = lambda: slots.append(lim.acquire(None, Priority.NEW, new_naps))
    assert lim.acquire(30.0, Priority.RETRY, retry_naps) == pytest.approx(130.0)
    assert slots == [pytest.approx(130.0 + AFTER)]
    assert lim.pacer.retrying == 0
    # With no throttled call waiting, the pause alone holds a new call (SPEC.md 7a).
    assert lim.acquire(None, Priority.NEW, new_naps) == pytest.approx(130.0)


def test_a_throttled_call_that_stops_waiting_holds_no_new_call_back() -> None:
    lim, clock = limiter()
    lim.report(None, 429, 30.0)
    naps = Naps(clock, advance=False)
    waiting = lim.acquire(None, Priority.NEW, naps)  # keeps the pause from being an orphan

    def stop(seconds: float, held: float, waiter: Optional[Waiter] = None) -> None:
        raise qa.Canceled("the call was cancelled")

    with pytest.raises(qa.Canceled):
        lim.acquire(30.0, Priority.RETRY, stop)
    assert lim.pacer.retrying == 0
    assert lim.acquire(None, Priority.NEW, naps) == pytest.approx(130.0)
    lim.report(waiting, 200, None)


@pytest.mark.parametrize("others", [0, 1])
def test_a_pause_whose_call_was_dropped_holds_no_one_when_nothing_else_is_out(others: int) -> None:
    lim, clock = limiter()
    lim.report(None, 429, 30.0)
    naps = Naps(clock, advance=False)
    if others:
        lim.begin(None, Priority.NEW)  # another call of the client waits for the pause
    lim.dropped()  # the throttled call was cancelled before its retry asked for a slot
    expected = 130.0 if others else 100.0
    assert lim.acquire(None, Priority.NEW, naps) == pytest.approx(expected)


def test_pause_only_limiter_holds_everyone() -> None:
    lim, clock = limiter(adaptive=False)
    assert not lim.engaged
    lim.report(None, 429, 3.0)
    assert lim.engaged
    assert ceiling(lim) is None
    naps = Naps(clock)
    assert lim.acquire(None, Priority.NEW, naps) == pytest.approx(103.0)
    assert near(naps.calls, [(3.0, 3.0)])
    lim.report(103.0, 200, None)
    clock.now += 1
    assert lim.acquire(None, Priority.NEW, naps) == pytest.approx(104.0)  # the pause is over: fast path again
    assert not lim.engaged


def test_slots_promised_after_a_pause_stay_valid() -> None:
    lim, clock = limiter(10, burst=1)
    naps = Naps(clock, advance=False)
    promised = [lim.acquire(None, Priority.NEW, naps) for _ in range(6)]
    assert promised == [pytest.approx(100 + 0.1 * k) for k in range(6)]
    lim.report(promised[0], 429, 0.25)
    # Slots after the pause stay; a new caller queues behind them; the throttled call, first.
    assert lim.acquire(None, Priority.NEW, naps) == pytest.approx(100.6)
    assert lim.acquire(0.25, Priority.RETRY, naps) == pytest.approx(100.25)


def test_sleeper_whose_slot_a_new_pause_covers_waits_once_more() -> None:
    lim, clock = limiter(10, burst=1)
    naps = Naps(clock)
    lim.acquire(None, Priority.NEW, naps)
    naps.during = lambda: lim.report(100.0, 429, 0.5)  # while it sleeps, a 429 asks for 0.5 s
    ticket = lim.acquire(None, Priority.NEW, naps)
    assert ticket >= 100.6
    assert len(naps.calls) == 2
    assert near(naps.calls[:1], [(0.1, 0.1)])


def test_throttled_call_overtakes_and_moves_the_sleepers_back() -> None:
    lim, clock = limiter(10, burst=1)
    other = Naps(clock, advance=False)
    promised = [lim.acquire(None, Priority.NEW, other) for _ in range(3)]
    assert promised == [pytest.approx(100 + k / 10) for k in range(3)]
    naps = Naps(clock)
    # While this caller sleeps towards 100.3, a throttled call takes the slot at 100.1.
    naps.during = lambda: lim.acquire(0.1, Priority.RETRY, other)
    assert lim.acquire(None, Priority.NEW, naps) == pytest.approx(100.4)
    assert near(naps.calls, [(0.3, 0.3), (0.1, 0.1)])


def test_a_restart_keeps_the_ceiling_for_the_attempts_that_went_and_lets_the_dropped_slots_go() -> None:
    # 2 a second, one at a time: the next attempt after one sent at 100.0 goes at 100.5.
    lim, clock = limiter(2, burst=1)
    assert lim.acquire(None, Priority.NEW, Naps(clock)) == pytest.approx(100.0)
    lim.report(clock.now, 200, None)
    clock.now = 100.1
    lim.restart()  # an asyncio client's next loop: the attempt sent still counts
    assert lim.acquire(None, Priority.NEW, Naps(clock)) == pytest.approx(100.5)
    # Four calls took the slots 101.0 ... 102.5 and were dropped with their loop: the next
    # loop's first call waits an interval at most, not behind them.
    lim.report(clock.now, 200, None)
    for _ in range(4):
        lim.pacer.reserve(clock.now, None, Waiter(Priority.NEW), Pace(2.0))
    assert lim.pacer.tat == pytest.approx(103.0)
    lim.restart()
    assert lim.acquire(None, Priority.NEW, Naps(clock)) == pytest.approx(101.0)
    # A forked child's first call goes at once: the attempts that went are the parent's.
    lim.report(clock.now, 200, None)
    lim.forget()
    assert lim.acquire(None, Priority.NEW, Naps(clock)) == pytest.approx(101.0)


def test_a_stopped_wait_gives_the_slot_back_and_lifts_an_orphan_pause() -> None:
    lim, clock = limiter(10, burst=1)
    lim.report(None, 429, 30.0)

    def stop(seconds: float, held: float, waiter: Optional[Waiter] = None) -> None:
        raise qa.Canceled("the call was cancelled")

    with pytest.raises(qa.Canceled):
        lim.acquire(30.0, Priority.RETRY, stop)
    assert lim.snapshot()[1] == 0.0  # nobody waited for that pause any more
    assert lim.pacer.inflight == 0

    lim.report(None, 429, 30.0)
    naps = Naps(clock, advance=False)
    waiting = lim.acquire(None, Priority.NEW, naps)  # someone else still waits for it...
    with pytest.raises(qa.Canceled):
        lim.acquire(30.0, Priority.RETRY, stop)
    assert lim.snapshot()[1] == pytest.approx(30.0)  # ...so the pause stays
    lim.report(waiting, 200, None)
    assert lim.pacer.inflight == 0


def test_a_slot_goes_back_when_its_call_stops_waiting_the_last_or_an_earlier_one() -> None:
    lim, clock = limiter(1, burst=1)  # one a second, even alone

    def stop(seconds: float, held: float, waiter: Optional[Waiter] = None) -> None:
        raise qa.Canceled("the call was cancelled")

    naps = Naps(clock, advance=False)
    assert lim.acquire(None, Priority.NEW, naps) == pytest.approx(100.0)
    for _ in range(3):  # each waits for 101 and stops: the slot goes back each time
        with pytest.raises(qa.Canceled):
            lim.acquire(None, Priority.NEW, stop)
    assert lim.acquire(None, Priority.NEW, naps) == pytest.approx(101.0)
    # An earlier slot, with a later one taken since, is the next new call's.
    later = Naps(clock, advance=False)
    stopped: list[float] = []

    def stop_after_another(seconds: float, held: float, waiter: Optional[Waiter] = None) -> None:
        stopped.append(lim.acquire(None, Priority.NEW, later))  # 103, taken while this one waits
        raise qa.Canceled("the call was cancelled")

    with pytest.raises(qa.Canceled):
        lim.acquire(None, Priority.NEW, stop_after_another)  # 102
    assert stopped == [pytest.approx(103.0)]
    assert lim.acquire(None, Priority.NEW, naps) == pytest.approx(102.0)
    assert lim.acquire(None, Priority.NEW, naps) == pytest.approx(104.0)


def test_first_ceiling_is_half_the_pace_of_the_latest_successes() -> None:
    news: list[str] = []
    lim, clock = limiter(news=news)
    for i in range(10):  # ten successes sent 25 ms apart, the last 25 ms ago
        lim.succeeded.append(clock.now - 0.25 + 0.025 * i)
    lim.report(None, 429, 0.005)
    assert ceiling(lim) == pytest.approx(20.0)  # 10 in 0.25 s, halved
    assert news == ["rate limit lowered to 20.0 calls/s after 429/529 responses (was no ceiling)"]

    for pause in (0.005, 1.0):  # a guess doubles each second, whatever the pause
        lim, clock = limiter()
        for i in range(10):
            lim.succeeded.append(clock.now - 0.25 + 0.025 * i)
        lim.report(None, 429, pause)
        clock.now += pause + 0.5
        assert ceiling(lim) == pytest.approx(20.0 * GROW_SHORT**0.5)


@pytest.mark.parametrize("successes", [0, 3])
def test_a_newcomer_with_too_few_successes_guesses_the_same_first_ceiling(successes: int) -> None:
    # Too few successes to tell a pace (a newcomer to a bucket its peers keep empty): not "no
    # ceiling" (another burst after the pause), but the first guess every client may make.
    news: list[str] = []
    lim, clock = limiter(news=news)
    for i in range(successes):  # 10/s: a pace, if COUNTED allowed, well under FIRST_GUESS
        lim.succeeded.append(clock.now - 0.1 * (successes - i))
    lim.report(None, 429, 1.0)  # one call at a time: still no ceiling (and no absorbed 429s)
    assert ceiling(lim) is None
    assert not lim.absorbs()

    lim, clock = limiter(news=news)
    for i in range(successes):
        lim.succeeded.append(clock.now - 0.1 * (successes - i))
    lim.pacer.inflight = 1  # another call of the client is out
    lim.report(None, 429, 1.0)
    assert ceiling(lim) == pytest.approx(FIRST_GUESS)
    assert news == [
        f"rate limit lowered to {FIRST_GUESS:.1f} calls/s after 429/529 responses (was no ceiling)"
    ]
    assert lim.policy._guess == GROW_SHORT  # a guess: it grows until throttled
    clock.now += 1.0 + 1.0  # the pause, then a second
    assert ceiling(lim) == pytest.approx(FIRST_GUESS * GROW_SHORT)


def test_a_later_429_while_others_wait_sets_the_newcomers_first_ceiling() -> None:
    # The usual order: the first 429 comes while the client's other calls are out, sent before
    # it engaged (so not counted); the next 429 comes while they wait: the first ceiling then.
    lim, clock = limiter()
    lim.report(None, 429, 1.0)
    assert ceiling(lim) is None
    ticket = lim.acquire(None, Priority.NEW, Naps(clock, advance=False))  # out, counted
    lim.report(None, 429, 1.0)  # another call sent before engaging, throttled
    assert ceiling(lim) == pytest.approx(FIRST_GUESS)
    lim.report(ticket, 429, 1.0)  # sent before that cut: says nothing new
    assert ceiling(lim) == pytest.approx(FIRST_GUESS)


def test_four_successes_tell_a_pace() -> None:
    lim, clock = limiter()
    for i in range(4):  # COUNTED: enough to tell a pace (10/s, 0.1 s apart)
        lim.succeeded.append(clock.now - 0.4 + 0.1 * i)
    lim.report(None, 429, 0.005)
    assert ceiling(lim) == pytest.approx(0.5 * 4 / 0.4)


def test_a_first_ceiling_counts_only_the_successes_of_the_last_second() -> None:
    # Pins RECENT (1 s): a success sent exactly a second before the 429 counts, one sent 10 ms
    # earlier does not.
    lim, _ = limiter(clock=Clock(100.0))  # the 429 comes at 100.0
    for sent in (98.99, 99.0, 99.25, 99.5, 99.75):
        lim.succeeded.append(sent)
    lim.report(None, 429, 0.005)
    assert ceiling(lim) == pytest.approx(2.0)  # 4 in the last second: 4/s, halved


@pytest.mark.parametrize(("successes", "guess"), [(64, 32.0), (65, FIRST_GUESS)])
def test_a_first_ceiling_reads_the_latest_64_successes(successes: int, guess: float) -> None:
    # One success sent a second before the 429 (99.0), then the latest 63 within 62 ms of it.
    # With exactly 64 kept the oldest counts: 64 in 1 s, halved to 32/s. One more sent between
    # (99.5) pushes it out: 64 in 0.5 s, halved past FIRST_GUESS.
    lim, _ = limiter(clock=Clock(100.0))
    for sent in [99.0] + [99.5] * (successes - 64) + [99.9 + 0.001 * i for i in range(63)]:
        lim.succeeded.append(sent)
    lim.report(None, 429, 0.005)
    assert ceiling(lim) == pytest.approx(guess)


@pytest.mark.parametrize("rate", [2 * FIRST_GUESS, 2 * FIRST_GUESS + 2, 5000.0])
def test_a_first_guess_is_the_same_for_every_client_past_a_pace(rate: float) -> None:
    # Which client of a fleet got most of a burst is luck: none guesses more than FIRST_GUESS.
    lim, clock = limiter()
    for i in range(32):  # 32 successes at ``rate`` a second
        lim.succeeded.append(clock.now - (32 - i) / rate)
    lim.report(None, 429, 0.005)
    assert ceiling(lim) == pytest.approx(min(0.5 * rate * 32 / 32, FIRST_GUESS))


def test_a_guess_halved_again_and_again_stays_at_min_guess_and_then_regrows() -> None:
    # Retries of a client that got no token keep being throttled: its guess halves to MIN_GUESS
    # and no lower, so the slots promised to its waiting calls stay near; a guess that grew as
    # far as it may with no throttle becomes a measured ceiling, never stuck at a low level.
    clock = Clock()
    lim = engaged_at(40, clock)  # a guess of 20/s
    naps = Naps(clock, advance=False)
    for _ in range(6):
        clock.now += 0.01
        ticket = lim.acquire(None, Priority.RETRY, naps)
        lim.report(ticket, 429, 0.005)
    assert ceiling(lim) == pytest.approx(MIN_GUESS, rel=0.05)
    assert lim.policy._guess == GROW_SHORT
    clock.now += 0.005 + 20.0  # long after, no throttle: as far as a guess may grow, and no further
    lim.acquire(None, Priority.NEW, naps)
    assert ceiling(lim) == pytest.approx(40.0)  # never past the pace first throttled
    assert not lim.policy._guess  # ...and from there it regrows as a measured ceiling
    clock.now += PLATEAU_SHORT
    assert ceiling(lim) == pytest.approx(40.0 + REGROW_SHORT * PLATEAU_SHORT)


def test_a_sleeper_looks_again_and_its_slot_comes_nearer_once_the_pace_has_doubled() -> None:
    # Three calls at 1/s: the third's slot is 1.95 s ahead. Under an announced pace it sleeps
    # LOOK at most, under a learned one LOOK_FAR, under neither until its slot.
    pacer, waiters = Pacer(None, False), [Waiter(Priority.NEW) for _ in range(3)]
    for waiter in waiters:
        pacer.reserve(100.0, None, waiter, Pace(1.0, follow=True))
    third = waiters[2]
    assert third.slot == pytest.approx(101.95)
    assert pacer.nap(100.0, third, Pace(1.0, follow=True)) == LOOK
    assert pacer.nap(100.0, third, Pace(1.0, rising=True)) == LOOK_FAR
    assert pacer.nap(100.0, third, Pace(1.0)) == pytest.approx(1.95)
    # At its look the pace is just under RISEN-fold: the slot holds...
    third.look_at = 100.05
    assert pacer.next(100.05, third, Pace(1.99, follow=True)) == pytest.approx(1.9)
    assert third.slot == pytest.approx(101.95)
    # ...and exactly RISEN-fold: the time left to it shrinks by as much.
    assert RISEN == 2.0
    third.look_at = 100.1
    assert pacer.next(100.1, third, Pace(2.0, follow=True)) == pytest.approx(0.925)
    assert third.slot == pytest.approx(101.025)


def test_a_sleeper_a_pause_moved_looks_again_against_the_pace_of_its_fresh_slot() -> None:
    # Three calls at 1/s; a pause to 103.0 covers the third's slot (101.95), and the pace is
    # 4/s when it wakes: a fresh slot behind the pause, taken at 4/s.
    pacer, waiters = Pacer(None, False), [Waiter(Priority.NEW) for _ in range(3)]
    for waiter in waiters:
        pacer.reserve(100.0, None, waiter, Pace(1.0, follow=True))
    third = waiters[2]
    pacer.pause(100.0, 103.0, Pace(4.0, follow=True))
    assert pacer.next(100.5, third, Pace(4.0, follow=True)) == pytest.approx(2.75)
    assert third.slot == pytest.approx(103.25)
    # At its look the pace is still 4/s, the pace its fresh slot was taken at, not RISEN-fold
    # the 1/s of the slot it lost: the slot holds (not drawn to the pause's end).
    third.look_at = 100.55
    assert pacer.next(100.55, third, Pace(4.0, follow=True)) == pytest.approx(2.7)
    assert third.slot == pytest.approx(103.25)


def test_a_pause_with_no_ceiling_leaves_the_schedule_alone_once_lifted() -> None:
    # A throttled call pauses the client to 105.0 with no ceiling, then gives up: the pause ends.
    pacer, throttled = Pacer(None, False), Waiter(Priority.RETRY)
    pacer.reserve(100.0, 5.0, throttled, Pace(math.inf))
    pacer.pause(100.0, 105.0, Pace(math.inf))
    pacer.gave_up(100.5, throttled)
    # Calls at 1/s then go from now, a burst (0.05 s) less an interval apart, not from 105.0.
    first, second = Waiter(Priority.NEW), Waiter(Priority.NEW)
    assert pacer.reserve(101.0, None, first, Pace(1.0)) == pytest.approx(101.0)
    assert pacer.reserve(101.0, None, second, Pace(1.0)) == pytest.approx(101.95)


def test_a_ceiling_neither_announced_nor_regrowing_keeps_the_slots_promised_when_it_doubles() -> None:
    # Four calls at 1/s hold slots to 102.95 (the schedule ends at 104.0); at 2/s the next goes
    # after them, the slots beyond LOOK_FAR not shrunk as a regrowing ceiling's are.
    pacer = Pacer(None, False)
    for _ in range(4):
        pacer.reserve(100.0, None, Waiter(Priority.NEW), Pace(1.0))
    assert pacer.reserve(100.0, None, Waiter(Priority.NEW), Pace(2.0)) == pytest.approx(103.95)


def test_a_last_chance_with_others_waiting_goes_two_intervals_after_the_latest_success() -> None:
    # At 10/s one call is out, another waits; a last chance is due once the first answers
    # (at 100.0, a success): two intervals (0.2 s) after it, at 100.2, not at once.
    pacer, pace = Pacer(None, False), Pace(10.0)
    first, other, last = Waiter(Priority.NEW), Waiter(Priority.NEW), Waiter(Priority.LAST)
    pacer.reserve(100.0, None, first, pace)
    first.due = True
    assert pacer.next(100.0, first, pace) is None  # out
    pacer.reserve(100.0, None, other, pace)
    assert pacer.reserve(100.0, 0.0, last, pace) == pytest.approx(100.0)
    assert pacer.answered(100.0, True, pace) is False
    last.due = True
    assert pacer.next(100.05, last, pace) == pytest.approx(0.15)
    assert pacer.next(100.2, last, pace) is None


def test_a_lone_call_that_gives_up_gives_its_schedule_back() -> None:
    # Alone at 10/s, a call uses up an interval of schedule; given up, it is back: the next
    # lone call and then a second one go as if it had never been (at 100.0 and 100.05, where
    # the kept interval would have put the second at 100.1).
    pacer, pace = Pacer(None, False), Pace(10.0)
    gone, lone, second = Waiter(Priority.NEW), Waiter(Priority.NEW), Waiter(Priority.NEW)
    assert pacer.reserve(100.0, None, gone, pace) == pytest.approx(100.0)
    pacer.gave_up(100.0, gone)
    assert pacer.tat == -math.inf
    assert pacer.reserve(100.0, None, lone, pace) == pytest.approx(100.0)
    assert pacer.reserve(100.0, None, second, pace) == pytest.approx(100.05)


def test_cells_given_back_go_to_the_next_new_calls_earliest_first_unless_past() -> None:
    # At 10/s (50 ms of burst) four calls take the cells 100.0 to 100.3; the second and third
    # give theirs back: the next new call takes the earliest (100.1, going at 100.05), the one
    # after the other; a cell whose time passed goes to nobody, the schedule's next instead.
    pacer, pace = Pacer(None, True), Pace(10.0)
    waiters = [Waiter(Priority.NEW) for _ in range(4)]
    slots = [pacer.reserve(100.0, None, waiter, pace) for waiter in waiters]
    assert slots == pytest.approx([100.0, 100.05, 100.15, 100.25])
    pacer.gave_up(100.0, waiters[1])
    pacer.gave_up(100.0, waiters[2])
    assert pacer.reserve(100.0, None, Waiter(Priority.NEW), pace) == pytest.approx(100.05)
    assert pacer.reserve(100.0, None, Waiter(Priority.NEW), pace) == pytest.approx(100.15)
    pacer.gave_up(100.0, waiters[3])  # the schedule's last: its end comes back to 100.3
    pacer.gave_up(100.0, waiters[0])  # a hole at 100.0
    assert pacer.reserve(100.01, None, Waiter(Priority.NEW), pace) == pytest.approx(100.25)


def test_a_cell_given_back_before_a_pause_is_nobodys_after_it() -> None:
    # A pause until 100.5 moves the schedule (no burst at its end: its next cell is 100.65); the
    # cell at 100.1 given back before it is gone, not the next call's at the pause's end.
    pacer, pace = Pacer(None, True), Pace(10.0)
    waiters = [Waiter(Priority.NEW) for _ in range(3)]
    for waiter in waiters:
        pacer.reserve(100.0, None, waiter, pace)
    pacer.gave_up(100.0, waiters[1])
    pacer.pause(100.0, 100.5, pace)
    assert pacer.reserve(100.0, None, Waiter(Priority.NEW), pace) == pytest.approx(100.6)


@pytest.mark.parametrize(("token", "held"), [(0.0, 0.15), (0.15, 0.25)])
def test_a_last_chance_waits_the_longer_of_two_intervals_and_two_short_delays(
    token: float, held: float
) -> None:
    # At 10/s two intervals are 0.2 s; twice the short server delay asked for (0.3 s) if longer.
    pacer, pace = Pacer(None, False), Pace(10.0)
    pacer.token = token
    first, last = Waiter(Priority.NEW), Waiter(Priority.LAST)
    pacer.reserve(100.0, None, first, pace)
    first.due = True
    assert pacer.next(100.0, first, pace) is None
    pacer.reserve(100.0, None, Waiter(Priority.NEW), pace)
    pacer.reserve(100.0, 0.0, last, pace)
    pacer.answered(100.0, True, pace)
    last.due = True
    assert pacer.next(100.05, last, pace) == pytest.approx(held)


def test_with_no_ceiling_throttled_calls_with_exact_delays_go_a_short_delay_apart() -> None:
    # No ceiling yet; the short delay asked for (20 ms) frees about one request: two throttled
    # calls retry 20 ms apart, from the end of their own delay, not together.
    pacer, pace = Pacer(None, False), Pace(math.inf, spacing=0.02)
    first, second = Waiter(Priority.RETRY), Waiter(Priority.RETRY)
    pacer.inflight = 1  # another call is out
    assert pacer.reserve(100.0, 0.01, first, pace) == pytest.approx(100.01)
    assert pacer.reserve(100.0, 0.01, second, pace) == pytest.approx(100.03)
    assert pacer.front == pytest.approx(100.05)


def test_a_learned_ceiling_that_doubled_brings_the_throttled_calls_far_slots_nearer() -> None:
    # At 1/s three throttled calls took 100, 101, 102 (the next at 103). The ceiling doubles:
    # beyond LOOK_FAR (101) their schedule shrinks by half, so the next goes at 102, not 103.
    pacer = Pacer(None, True)
    slots = [pacer.reserve(100.0, 0.0, Waiter(Priority.RETRY), Pace(1.0, rising=True)) for _ in range(3)]
    assert slots == pytest.approx([100.0, 101.0, 102.0])
    assert pacer.reserve(100.0, 0.0, Waiter(Priority.RETRY), Pace(2.0, rising=True)) == pytest.approx(102.0)


@pytest.mark.parametrize(("others", "slot"), [(0, 100.01), (1, 100.03)])
def test_with_no_ceiling_a_throttled_call_alone_goes_at_its_delays_end_not_a_short_delay_after_the_last(
    others: int, slot: float
) -> None:
    # No ceiling; with another call out a throttled call went at the end of its delay (100.01).
    # The next, with another call out, goes the short delay asked for (20 ms) after it; alone
    # (nothing else waiting or out), at the end of its own delay.
    pacer, pace = Pacer(None, False), Pace(math.inf, spacing=0.02)
    pacer.inflight = 1  # another call is out
    assert pacer.reserve(100.0, 0.01, Waiter(Priority.RETRY), pace) == pytest.approx(100.01)
    pacer.inflight = others  # the first went and answered; ``others`` still out
    assert pacer.reserve(100.0, 0.01, Waiter(Priority.RETRY), pace) == pytest.approx(slot)


@pytest.mark.parametrize(("rate", "slot"), [(1.99, 103.95), (2.0, 102.45)])
def test_a_learned_ceiling_that_doubled_brings_the_new_calls_far_schedule_nearer(
    rate: float, slot: float
) -> None:
    # Four calls at 1/s hold slots to 102.95 (the schedule ends at 104.0). A learned ceiling
    # RISEN-fold (2/s) shrinks the schedule beyond LOOK_FAR (101.0) by half, to end at 102.5:
    # the next new call goes at 102.45; just under RISEN-fold it goes after them (103.95).
    pacer = Pacer(None, False)
    for _ in range(4):
        pacer.reserve(100.0, None, Waiter(Priority.NEW), Pace(1.0, rising=True))
    assert pacer.reserve(100.0, None, Waiter(Priority.NEW), Pace(rate, rising=True)) == pytest.approx(slot)


@pytest.mark.parametrize(("rate", "slot"), [(2.0, 101.45), (0.5, 105.95)])
def test_an_announced_ceiling_that_moves_stretches_or_shrinks_the_slots_promised_to_it(
    rate: float, slot: float
) -> None:
    # Three calls at an announced 1/s hold slots to 101.95 (the schedule ends at 103.0). The
    # announced ceiling doubles: the 3 s promised after now shrink to 1.5 s and the next call
    # goes at 101.45; it halves: they stretch to 6 s, and the next goes at 105.95.
    pacer = Pacer(None, True)
    for _ in range(3):
        pacer.reserve(100.0, None, Waiter(Priority.NEW), Pace(1.0, follow=True))
    assert pacer.reserve(100.0, None, Waiter(Priority.NEW), Pace(rate, follow=True)) == pytest.approx(slot)


@pytest.mark.parametrize(("now", "apart"), [(100.99, 0.5), (101.0, 0.1)])
def test_throttled_calls_go_no_faster_than_the_short_delay_until_the_guess_settles(
    now: float, apart: float
) -> None:
    # A guess of 10/s, unsettled until 101.0, with a short delay of 0.5 s asked for: two
    # throttled calls go 0.5 s apart while it is unsettled, an interval (0.1 s) apart from 101.0.
    pacer, pace = Pacer(None, True), Pace(10.0, settles=101.0, spacing=0.5)
    first = pacer.reserve(now, 0.0, Waiter(Priority.RETRY), pace)
    second = pacer.reserve(now, 0.0, Waiter(Priority.RETRY), pace)
    assert (first, second) == pytest.approx((now, now + apart))


def test_a_sleeper_moves_back_only_for_the_throttled_calls_that_jumped_after_its_slot_was_taken() -> None:
    # At 1/s with no burst: a throttled call takes 100.0, then a new call 101.0, then another
    # throttled call 101.0, ahead of it: the sleeper moves back one interval (to 102.0), not
    # two (the first throttled call was ahead of it when it took its slot).
    pacer, pace = Pacer(1, True), Pace(1.0)
    sleeper = Waiter(Priority.NEW)
    assert pacer.reserve(100.0, 0.0, Waiter(Priority.RETRY), pace) == pytest.approx(100.0)
    assert pacer.reserve(100.0, None, sleeper, pace) == pytest.approx(101.0)
    assert pacer.reserve(100.0, 0.0, Waiter(Priority.RETRY), pace) == pytest.approx(101.0)
    sleeper.due = True  # its wait ran to its slot
    assert pacer.next(101.0, sleeper, pace) == pytest.approx(1.0)
    assert sleeper.slot == pytest.approx(102.0)


@pytest.mark.parametrize(("jumps", "wait"), [(256, 256.0), (257, None)])
def test_the_latest_256_throttled_calls_move_the_sleepers_back_and_the_257th_forgets_the_oldest_half(
    jumps: int, wait: Optional[float]
) -> None:
    # At 1/s with no burst a sleeper holds 101.0; throttled calls jump ahead from 100.0 on, one
    # a second. Up to JUMPS (256) remembered, at its slot it moves behind them all (to 357.0);
    # the 257th forgets the oldest 128, among them the two that overtook it (100.0 and 101.0),
    # and it goes at its slot.
    assert JUMPS == 256
    pacer, pace = Pacer(1, True), Pace(1.0)
    sleeper = Waiter(Priority.NEW)
    pacer.reserve(100.0, None, Waiter(Priority.NEW), pace)
    assert pacer.reserve(100.0, None, sleeper, pace) == pytest.approx(101.0)
    for _ in range(jumps):
        pacer.reserve(100.0, 0.0, Waiter(Priority.RETRY), pace)
    sleeper.due = True  # its wait ran to its slot
    assert pacer.next(101.0, sleeper, pace) == (None if wait is None else pytest.approx(wait))


@pytest.mark.parametrize(("gives_up", "slot"), [(100.25, 100.25), (100.26, 101.0)])
def test_a_cell_given_back_at_its_very_time_is_the_next_new_calls_and_a_moment_later_nobodys(
    gives_up: float, slot: float
) -> None:
    # At 4/s with no burst four calls hold 100.0 to 100.75; the second gives up at exactly its
    # cell's time (100.25): a call that comes then takes it. A moment past it, the cell has
    # passed unused and the next call takes the schedule's next (101.0).
    pacer, pace = Pacer(1, True), Pace(4.0)
    waiters = [Waiter(Priority.NEW) for _ in range(4)]
    assert [pacer.reserve(100.0, None, waiter, pace) for waiter in waiters] == pytest.approx(
        [100.0, 100.25, 100.5, 100.75]
    )
    pacer.gave_up(gives_up, waiters[1])
    assert pacer.reserve(gives_up, None, Waiter(Priority.NEW), pace) == pytest.approx(slot)


def test_the_calls_held_for_a_last_chance_go_on_an_interval_apart_from_its_answer() -> None:
    # At 10/s a last chance goes alone at 100.0; two calls due at 100.1 and 100.2 are held for
    # its answer, which comes at 105.0: they go an interval apart from it (105.1, 105.2), not
    # a burst's worth at once from the schedule left behind.
    pacer, pace = Pacer(None, True), Pace(10.0)
    last, held = Waiter(Priority.LAST), [Waiter(Priority.NEW), Waiter(Priority.NEW)]
    assert pacer.reserve(100.0, 0.0, last, pace) == pytest.approx(100.0)
    last.due = True
    assert pacer.next(100.0, last, pace) is None  # out alone
    for when, waiter in zip((100.1, 100.2), held):
        assert pacer.reserve(100.0, None, waiter, pace) == pytest.approx(when)
        waiter.due = True
        assert pacer.next(when, waiter, pace) == math.inf
    assert pacer.answered(105.0, True, pace) is True
    for waiter in held:
        waiter.woken = True
    assert [pacer.next(105.0, waiter, pace) for waiter in held] == pytest.approx([0.1, 0.2])


@pytest.mark.parametrize(("after", "wait"), [(1e-9, None), (2e-9, 2e-9)])
def test_a_sleeper_whose_fresh_slot_is_a_nanosecond_ahead_goes_now_and_two_nanoseconds_ahead_waits(
    after: float, wait: Optional[float]
) -> None:
    # No ceiling: a call waits for a pause to end at 100.5; a new pause moves its end ``after``
    # past that. A slot up to EPSILON (1 ns) ahead is now (sums of intervals round): it goes at
    # once; one past it, it waits the 2 ns.
    pacer, pace = Pacer(None, False), Pace(math.inf)
    sleeper = Waiter(Priority.NEW)
    pacer.pause(100.0, 100.5, pace)
    assert pacer.reserve(100.0, None, sleeper, pace) == pytest.approx(100.5)
    pacer.pause(100.2, 100.5 + after, pace)
    sleeper.due = True  # its wait ran to its slot
    assert pacer.next(100.5, sleeper, pace) == (None if wait is None else pytest.approx(wait, rel=0.01))


def test_a_call_let_go_after_a_last_chance_looks_again_before_its_fresh_slot_and_waits_for_it() -> None:
    # At an announced 10/s a last chance goes alone at 100.0; a call due at 100.1 is held for
    # it. The answer (105.0) wakes it: a fresh slot at 105.1, and the wake-up ends that one
    # wait only. At its look (LOOK, 50 ms later) the slot is still 50 ms ahead: it waits on.
    pacer, pace = Pacer(None, True), Pace(10.0, follow=True)
    last, held = Waiter(Priority.LAST), Waiter(Priority.NEW)
    assert pacer.reserve(100.0, 0.0, last, pace) == pytest.approx(100.0)
    last.due = True
    assert pacer.next(100.0, last, pace) is None  # out alone
    assert pacer.reserve(100.0, None, held, pace) == pytest.approx(100.1)
    held.due = True
    assert pacer.next(100.1, held, pace) == math.inf
    assert pacer.answered(105.0, True, pace) is True
    held.woken = True
    assert pacer.next(105.0, held, pace) == pytest.approx(0.1)
    assert pacer.nap(105.0, held, pace) == LOOK
    held.look_at, held.due = 105.05, True
    assert pacer.next(105.05, held, pace) == pytest.approx(0.05)
    assert held.slot == pytest.approx(105.1)


def test_a_last_chance_that_waited_for_the_attempts_out_holds_nobody_once_it_has_answered() -> None:
    # At 10/s a call is out; a last chance due waits for its answer, then goes alone and
    # answers. From then on a new call due goes (no last chance is waiting any more), and an
    # answer wakes nobody.
    pacer, pace = Pacer(None, True), Pace(10.0)
    first, last = Waiter(Priority.NEW), Waiter(Priority.LAST)
    pacer.reserve(100.0, None, first, pace)
    first.due = True
    assert pacer.next(100.0, first, pace) is None  # out
    pacer.reserve(100.0, 0.0, last, pace)
    last.due = True
    assert pacer.next(100.0, last, pace) == math.inf  # waits for ``first``'s answer
    assert pacer.answered(100.5, True, pace) is True  # which wakes it
    last.woken = True
    assert pacer.next(100.5, last, pace) is None  # out alone
    assert pacer.answered(101.0, True, pace) is True  # the others go on
    new, other = Waiter(Priority.NEW), Waiter(Priority.NEW)
    slot = pacer.reserve(101.0, None, new, pace)
    new.due = True
    assert pacer.next(slot, new, pace) is None
    pacer.reserve(slot, None, other, pace)
    assert pacer.answered(slot + 0.5, True, pace) is False


def test_the_schedules_last_cell_given_back_takes_the_end_back_over_the_holes_before_it() -> None:
    # At 1/s with no burst three calls hold 100.0, 101.0 and 102.0. The second gives its cell
    # back, then the third, the schedule's last: the end comes back over both, to 101.0. Once
    # 101.0 has passed, a new call goes at once (101.5), not at the third's cell (102.0).
    pacer, pace = Pacer(1, True), Pace(1.0)
    waiters = [Waiter(Priority.NEW) for _ in range(3)]
    assert [pacer.reserve(100.0, None, waiter, pace) for waiter in waiters] == pytest.approx(
        [100.0, 101.0, 102.0]
    )
    pacer.gave_up(100.5, waiters[1])
    pacer.gave_up(100.5, waiters[2])
    assert pacer.tat == pytest.approx(101.0)
    assert pacer.reserve(101.5, None, Waiter(Priority.NEW), pace) == pytest.approx(101.5)


def _five_calls_at_4_per_second() -> tuple[Pacer, Pace, list[Waiter]]:
    """At 4/s with no burst, five calls hold the slots from 100.0 to 101.0."""
    pacer, pace = Pacer(1, True), Pace(4.0)
    waiters = [Waiter(Priority.NEW) for _ in range(5)]
    assert [pacer.reserve(100.0, None, w, pace) for w in waiters] == pytest.approx(
        [100.0, 100.25, 100.5, 100.75, 101.0]
    )
    return pacer, pace, waiters


def test_cells_given_back_latest_first_still_go_to_the_next_new_calls_earliest_first() -> None:
    # At 4/s with no burst five calls hold 100.0 to 101.0; the third gives its cell back, then
    # the second: the next new call takes the earlier (100.25), the one after it the later.
    pacer, pace, waiters = _five_calls_at_4_per_second()
    pacer.gave_up(100.0, waiters[2])
    pacer.gave_up(100.0, waiters[1])
    slots = [pacer.reserve(100.0, None, Waiter(Priority.NEW), pace) for _ in range(3)]
    assert slots == pytest.approx([100.25, 100.5, 101.25])


def test_a_learned_ceiling_that_doubled_shrinks_the_far_schedule_once_not_at_every_call() -> None:
    # Four calls at 1/s hold slots to 102.95 (the schedule ends at 104.0); at 2/s the far part
    # shrinks by half once: the next calls at 2/s go an interval apart (102.45, 102.95), the
    # second not drawn nearer by a second shrink.
    pacer = Pacer(None, False)
    for _ in range(4):
        pacer.reserve(100.0, None, Waiter(Priority.NEW), Pace(1.0, rising=True))
    slots = [pacer.reserve(100.0, None, Waiter(Priority.NEW), Pace(2.0, rising=True)) for _ in range(3)]
    assert slots == pytest.approx([102.45, 102.95, 103.45])


@pytest.mark.parametrize(("early", "wait"), [(0.0, 0.95), (1e-9, 0.95)])
def test_a_look_up_to_a_nanosecond_before_its_time_is_a_look(early: float, wait: float) -> None:
    # Three calls at an announced 1/s: the third's slot is 101.95, its nap ends at 100.05. The
    # clock reads then, or up to EPSILON (1 ns) before (sums round): it looks, and the pace,
    # doubled, halves the time to its slot.
    pacer, waiters = Pacer(None, False), [Waiter(Priority.NEW) for _ in range(3)]
    for waiter in waiters:
        pacer.reserve(100.0, None, waiter, Pace(1.0, follow=True))
    third = waiters[2]
    third.look_at, third.due = 100.05, True
    assert pacer.next(100.05 - early, third, Pace(2.0, follow=True)) == pytest.approx(wait, rel=1e-6)


def _napping_third() -> tuple[Pacer, Waiter]:
    """Three calls at a learned 1/s from 100.0: the third's slot is 101.95; its nap (LOOK_FAR)
    ends at 101.0, where the shell's ``step`` calls ``next`` with the waiter due."""
    pacer, waiters = Pacer(None, False), [Waiter(Priority.NEW) for _ in range(3)]
    for waiter in waiters:
        pacer.reserve(100.0, None, waiter, Pace(1.0, rising=True))
    third = waiters[2]
    assert (third.slot, pacer.nap(100.0, third, Pace(1.0, rising=True))) == pytest.approx((101.95, LOOK_FAR))
    third.look_at, third.due = 100.0 + LOOK_FAR, True
    return pacer, third


@pytest.mark.parametrize(("early", "look"), [(EARLY, True), (EARLY + 0.001, False)])
def test_a_nap_that_ends_up_to_early_before_its_time_is_a_look(early: float, look: bool) -> None:
    # asyncio fires a timer up to its clock's resolution early (15.6 ms on Windows before 3.13):
    # such a nap is still a look, and the call waits on for its slot instead of going 0.95 s
    # ahead of it. A nap ended sooner than that is a ``sleep=`` seam returning at once, which
    # stands for the whole wait: the call goes, as after any wait a seam cut short.
    assert EARLY < LOOK  # no nap is that short: a seam's instant return is never taken for a look
    pacer, third = _napping_third()
    now = 100.0 + LOOK_FAR - early
    got = pacer.next(now, third, Pace(1.0, rising=True))
    assert got == (pytest.approx(101.95 - now) if look else None)
    assert pacer.out == (0 if look else 1)


@pytest.mark.parametrize(
    ("pace", "wait"),
    [(Pace(1.0), 0.95), (Pace(3.0), 0.95 / 3), (Pace(0.5), 0.95), (Pace(math.inf), None)],
    ids=["same-pace", "risen-3-fold", "lower", "no-ceiling"],
)
def test_a_look_under_a_pace_that_neither_follows_nor_rises_any_more_still_waits_for_its_slot(
    pace: Pace, wait: Optional[float]
) -> None:
    # At the look the pace is no longer a learned one regrowing nor an announced one (a learned
    # ceiling back at the explicit one, an announcement gone stale): the call waits on for its
    # slot, nearer if the pace has risen RISEN-fold; with no ceiling left it goes. It went at
    # once: every call napping toward a slot far ahead went within one LOOK_FAR.
    pacer, third = _napping_third()
    got = pacer.next(100.0 + LOOK_FAR, third, pace)
    assert got == (None if wait is None else pytest.approx(wait))
    assert pacer.out == (1 if wait is None else 0)


@pytest.mark.parametrize(("interval", "wait"), [(2e-9, None), (4e-9, 2e-9)])
def test_a_slot_a_look_brings_to_a_nanosecond_ahead_is_now(interval: float, wait: Optional[float]) -> None:
    # Two calls at an announced pace of one per ``interval``: the second's slot is that far
    # ahead. At a look at once the pace has doubled: the slot comes half as far. A nanosecond
    # ahead (EPSILON) it is now: it goes; two nanoseconds ahead it waits them.
    pace = Pace(1.0 / interval, follow=True)
    pacer, first, second = Pacer(1, True), Waiter(Priority.NEW), Waiter(Priority.NEW)
    assert pacer.reserve(0.0, None, first, pace) == pytest.approx(0.0)
    assert pacer.reserve(0.0, None, second, pace) == pytest.approx(interval)
    second.look_at, second.due = 0.0, True
    got = pacer.next(0.0, second, Pace(2.0 / interval, follow=True))
    assert got == (None if wait is None else pytest.approx(wait, rel=1e-6))


def test_calls_let_go_after_a_last_chance_look_again_against_the_pace_of_their_fresh_slots() -> None:
    # At an announced 10/s a last chance goes alone at 100.0; three calls due from 100.1 on are
    # held for it. Its answer comes at 105.0 with the pace at 20/s: fresh slots at that pace,
    # 105.0, 105.05 and 105.1. At the third's look (LOOK later) the pace is still 20/s: RISEN-fold
    # the 10/s it was first given a slot at, but not the pace of its fresh slot, which holds.
    pacer, ten, twenty = Pacer(None, True), Pace(10.0, follow=True), Pace(20.0, follow=True)
    last, held = Waiter(Priority.LAST), [Waiter(Priority.NEW) for _ in range(3)]
    assert pacer.reserve(100.0, 0.0, last, ten) == pytest.approx(100.0)
    last.due = True
    assert pacer.next(100.0, last, ten) is None  # out alone
    for waiter in held:
        slot = pacer.reserve(100.0, None, waiter, ten)
        waiter.due = True
        assert pacer.next(slot, waiter, ten) == math.inf
    assert pacer.answered(105.0, True, twenty) is True
    for waiter in held:
        waiter.woken = True
    waits = [pacer.next(105.0, waiter, twenty) for waiter in held]
    assert waits == [None, pytest.approx(0.05), pytest.approx(0.1)]
    third = held[2]
    third.look_at, third.due = 105.0 + LOOK, True
    assert pacer.next(105.0 + LOOK, third, twenty) == pytest.approx(0.05)
    assert third.slot == pytest.approx(105.1)


@pytest.mark.parametrize(("jumps", "wait"), [(256, 256.0), (257, 129.0)])
def test_the_257th_throttled_call_forgets_the_oldest_half_and_keeps_the_latest_129(
    jumps: int, wait: float
) -> None:
    # At 1/s with no burst 200 calls hold 100.0 to 299.0, a sleeper 300.0; throttled calls jump
    # ahead from 100.0 on, one a second. Up to JUMPS (256) remembered, at its slot the sleeper
    # moves behind them all (to 556.0); the 257th forgets the oldest 128, and it moves behind
    # the 129 kept (to 429.0), not behind the latest alone.
    pacer, pace = Pacer(1, True), Pace(1.0)
    for _ in range(200):
        pacer.reserve(100.0, None, Waiter(Priority.NEW), pace)
    sleeper = Waiter(Priority.NEW)
    assert pacer.reserve(100.0, None, sleeper, pace) == pytest.approx(300.0)
    for _ in range(jumps):
        pacer.reserve(100.0, 0.0, Waiter(Priority.RETRY), pace)
    sleeper.due = True  # its wait ran to its slot
    assert pacer.next(300.0, sleeper, pace) == pytest.approx(wait)


def test_a_new_call_skips_every_cell_given_back_whose_time_passed_for_the_first_still_ahead() -> None:
    # At 4/s with no burst five calls hold 100.0 to 101.0; the second and fourth give their
    # cells back (100.25, 100.75). A new call at 100.3 finds the first passed: it takes the
    # second (100.75), not the passed one (going at once).
    pacer, pace, waiters = _five_calls_at_4_per_second()
    pacer.gave_up(100.0, waiters[1])
    pacer.gave_up(100.0, waiters[3])
    assert pacer.reserve(100.3, None, Waiter(Priority.NEW), pace) == pytest.approx(100.75)


@pytest.mark.parametrize(("after", "slot"), [(0.001, 130.002), (0.002, 130.002), (0.003, 130.003)])
def test_with_no_ceiling_a_new_call_goes_two_milliseconds_after_the_throttled_calls_slot(
    after: float, slot: float
) -> None:
    # With no ceiling, a pause to 130.0 and a throttled call waiting for it: a new call due up
    # to 2 ms (AFTER) after the pause's end goes 2 ms after it, not in a race with the retry;
    # one due later goes when due.
    assert AFTER == 0.002
    pacer, pace = Pacer(None, False), Pace(math.inf)
    pacer.pause(100.0, 130.0, pace)
    assert pacer.reserve(100.0, 30.0, Waiter(Priority.RETRY), pace) == pytest.approx(130.0)
    assert pacer.reserve(100.0, 30.0 + after, Waiter(Priority.NEW), pace) == pytest.approx(slot)


def test_a_policy_engaged_by_a_429_with_no_ceiling_disengages_silently() -> None:
    policy = Policy(None, True)
    assert policy.throttled(0.0, None, 0.005, 0.005, ()) is None  # a lone call: no ceiling
    assert policy.engaged
    assert policy.tick(59.9, 0.005)[0] is None
    assert policy.engaged
    assert policy.tick(60.0, 0.005)[0] is None  # nothing was cut: nothing to tell
    assert not policy.engaged
    assert policy.tick(61.0, 0.005)[0] is None


def test_a_quiet_policy_disengages_once_the_pause_has_ended_at_its_very_end() -> None:
    # Quiet for a minute but paused to 60.5: still engaged at 60.49, back on the fast path at
    # exactly 60.5 (a pause until t is over at t).
    policy = Policy(None, True)
    policy.throttled(0.0, None, 0.005, 0.005, ())
    assert policy.tick(60.49, 60.5)[0] is None
    assert policy.engaged
    assert policy.tick(60.5, 60.5)[0] is None
    assert not policy.engaged


def test_engaging_again_forgets_the_short_pauses_of_the_last_spell() -> None:
    # A short pause (20 ms) within WINDOW of engaging spaced the throttled calls; a quiet minute
    # later the policy disengages. Engaged again by a 429, its throttled calls are not spaced
    # by the last spell's pause.
    policy = Policy(None, True)
    policy.throttled(0.0, None, 0.005, 0.005, (), busy=True)  # engages: a first guess
    policy.throttled(0.1, 0.0, 0.02, 0.12, ())
    assert policy.pace(0.1).spacing == pytest.approx(0.02)
    assert policy.tick(60.1, 0.12)[0] is not None
    assert not policy.engaged
    policy.throttled(61.0, None, 0.005, 61.005, (), busy=True)
    assert policy.engaged
    assert policy.pace(61.0).spacing == pytest.approx(0.0)


@pytest.mark.parametrize(("when", "engaged"), [(4.999, True), (5.0, False)])  # STALE: 5 s
def test_an_announcement_paces_no_more_at_exactly_stale_s_and_the_quiet_policy_disengages(
    when: float, engaged: bool
) -> None:
    # Engaged by an announced limit at 0.0 and never throttled: just under STALE later it still
    # paces; at exactly STALE it paces no more, and the policy is back on the fast path.
    policy = Policy(None, True)
    policy.heard(0.0, Announcement(100.0, 50.0, 10.0, 10.0, "ietf"))
    assert policy.engaged
    assert policy.tick(when, -math.inf)[0] is None
    assert policy.engaged is engaged
    assert policy.steered(when) is engaged


def test_engaging_again_forgets_the_estimate_of_the_last_spell() -> None:
    # A stretch of 3 s at 10/s ended by a 1 s pause left an estimate (10/s) and a measured
    # 9.5/s; a quiet minute later the policy disengages. Engaged again by a 429 after 10 calls
    # in 0.25 s (a guess of 20/s), a stretch that drained at once (8 successes in 0.5 s) is
    # measured afresh, SHARE of its 16/s, not cut by CUT as if measured before in this spell.
    policy = Policy(None, True)
    policy.paused(0.0, 1.0)
    policy.throttled(0.0, None, 1.0, 1.0, ())
    for i in range(30):
        policy.succeeded(1.1 + 0.1 * i, 1.0 + 0.1 * i)
    policy.paused(4.0, 5.0)
    policy.throttled(4.0, 3.9, 1.0, 5.0, ())
    assert policy.rate(5.0) == pytest.approx(9.5)
    assert policy.tick(64.0, 5.0)[0] is not None
    assert not policy.engaged
    policy.paused(65.0, 66.0)
    sent = [64.75 + 0.025 * i for i in range(10)]
    policy.throttled(65.0, None, 1.0, 66.0, sent)
    assert policy.rate(66.0) == pytest.approx(20.0)
    for i in range(8):
        policy.succeeded(66.05 + 0.05 * i, 66.0 + 0.05 * i)
    policy.paused(66.5, 67.5)
    policy.throttled(66.5, 66.4, 1.0, 67.5, ())
    assert policy.rate(67.5) == pytest.approx(0.95 * 16)


def test_the_longest_short_pause_of_the_first_window_spaces_throttled_calls() -> None:
    policy = Policy(None, True)
    policy.throttled(0.0, None, 0.005, 0.005, (), busy=True)  # engages: a first guess
    assert policy.pace(0.0).spacing == 0.0
    policy.throttled(0.1, 0.0, 0.02, 0.12, ())
    policy.throttled(0.2, 0.0, 0.01, 0.21, ())
    assert policy.pace(0.2).spacing == 0.02  # the longest, not the latest
    policy.throttled(0.3, 0.0, 0.05, 0.35, ())  # WINDOW after engaging: no longer counted
    assert WINDOW == 0.3
    assert policy.pace(0.3).spacing == 0.02
    policy.throttled(0.31, 0.0, 0.2, 0.51, ())  # a long pause is not a request's worth either
    assert policy.pace(0.31).spacing == 0.02


@pytest.mark.parametrize(("pause", "spacing"), [(0.199, 0.199), (0.2, 0.0)])  # LONG_PAUSE: 0.2 s
def test_a_pause_of_exactly_long_pause_does_not_space_throttled_calls(pause: float, spacing: float) -> None:
    # Within WINDOW of engaging, a short pause spaces the throttled calls while a first guess
    # settles; a pause of LONG_PAUSE is a refilled bucket, not a request's worth.
    policy = Policy(None, True)
    policy.throttled(0.0, None, 0.005, 0.005, (), busy=True)  # engages: a first guess
    policy.throttled(0.1, 0.0, pause, 0.1 + pause, ())
    assert policy.pace(0.1).spacing == pytest.approx(spacing)


@pytest.mark.parametrize(("successes", "ceiling"), [(3, None), (4, 32.0)])
def test_with_no_ceiling_a_throttle_soon_after_engaging_guesses_twice_what_gets_through(
    successes: int, ceiling: Optional[float]
) -> None:
    # A lone call's 429 engaged with no ceiling; within WINDOW another, after COUNTED successes
    # (4 in 0.25 s: 16/s): a guess of twice that, growing GROW_SHORT-fold a second. Fewer: none.
    policy = Policy(None, True)
    policy.throttled(0.0, None, 0.005, 0.005, ())
    for i in range(successes):
        policy.succeeded(0.05 * (i + 1), 0.01)
    policy.throttled(0.25, 0.2, 0.005, 0.255, ())
    if ceiling is None:
        assert policy.rate(0.25) == math.inf
        return
    assert policy.rate(0.255) == pytest.approx(ceiling)
    assert policy.rate(1.255) == pytest.approx(ceiling * GROW_SHORT)


@pytest.mark.parametrize(("when", "ceiling"), [(0.0, math.inf), (0.125, 64.0)])
def test_successes_counted_at_the_instant_of_engaging_tell_no_pace_at_that_instant(
    when: float, ceiling: float
) -> None:
    # A lone call's 429 engaged with no ceiling; four attempts sent and answered at that same
    # instant, then a 429 there: no time has passed, so no pace (not a division by it). An
    # eighth of a second later the same four are 32/s: a guess of twice that.
    policy = Policy(None, True)
    policy.throttled(0.0, None, None, 0.0, ())
    for _ in range(4):
        policy.succeeded(0.0, 0.0)
    policy.throttled(when, 0.0, None, when, ())
    assert policy.rate(when) == pytest.approx(ceiling)


def test_the_success_count_is_sampled_at_exactly_sample_s_apart() -> None:
    # Successes at 0.0 and at exactly SAMPLE later are both samples; from the second on, four
    # more at 0.45 are 4 in 0.45 s, not 5 in 0.5 s.
    policy = Policy(None, True)
    policy.throttled(0.0, None, 0.005, 0.005, ())
    for when in (0.0, SAMPLE, 0.45, 0.45, 0.45, 0.45):
        policy.succeeded(when, when)
    assert policy.seen(0.5, SAMPLE) == pytest.approx(4 / 0.45)


def test_a_first_guess_reads_the_pace_of_successes_sent_up_to_the_throttles_instant() -> None:
    # 4 sends in the 0.1 s before a 429 at 1.0, three of them at 1.0 itself: 40/s, a guess of 20.
    policy = Policy(None, True)
    news = policy.throttled(1.0, None, 0.005, 1.005, [0.9, 1.0, 1.0, 1.0])
    assert news == "rate limit lowered to 20.0 calls/s after 429/529 responses (was no ceiling)"


@pytest.mark.parametrize(("busy", "rate"), [(False, math.inf), (True, FIRST_GUESS)])
def test_successes_all_sent_at_the_throttles_instant_tell_no_pace(busy: bool, rate: float) -> None:
    # COUNTED sends, all at the instant of the 429: no time to tell a pace by (nothing divides by
    # zero); a lone call stays unpaced, a busy client guesses FIRST_GUESS as a newcomer does.
    policy = Policy(None, True)
    news = policy.throttled(1.0, None, 0.005, 1.005, [1.0] * 4, busy=busy)
    assert (news is None) is not busy
    assert policy.rate(1.005) == rate


def test_a_newcomers_first_guess_grows_past_a_pace_guessed_from_in_an_earlier_spell() -> None:
    # A first spell guessed from a pace of 10/s (5, growing to 10 at most), and ended; a busy
    # newcomer's guess in a second spell (FIRST_GUESS) grows GROW_SHORT-fold, not capped at 10.
    policy = Policy(None, True)
    policy.throttled(1.0, None, 0.005, 1.005, [0.6, 0.7, 0.8, 0.9])
    assert policy.rate(1.005) == pytest.approx(5.0)
    assert policy.rate(100.0) == pytest.approx(10.0)
    policy.tick(100.0, 1.005)
    assert not policy.engaged
    policy.throttled(200.0, None, 0.005, 200.005, (), busy=True)
    assert policy.rate(200.005) == FIRST_GUESS
    assert policy.rate(201.005) == pytest.approx(FIRST_GUESS * GROW_SHORT)


@pytest.mark.parametrize(("sends", "ceiling", "grown"), [(5, 20.0, 20.0 + REGROW_SHORT), (6, 24.0, 48.0)])
def test_a_first_guess_no_higher_than_the_last_ceiling_measured_is_that_ceiling(
    sends: int, ceiling: float, grown: float
) -> None:
    # A measured 20/s (half a first guess of 40/s, too little got through), then a quiet spell.
    # Engaged again by sends at exactly 40/s (5 in 0.125 s): half is the measured 20/s, which
    # comes back as measured, regrowing by calls/s; at 48/s (6 sends) a guess of 24/s, growing
    # GROW_SHORT-fold a second up to the 48/s first throttled.
    policy = Policy(None, True)
    policy.throttled(0.0, None, 0.5, 0.5, (), busy=True)  # a guess of FIRST_GUESS from 0.5
    for i in range(4):
        policy.succeeded(0.1 * (i + 1), 0.1 * i)
    policy.throttled(0.5, 0.45, 0.005, 0.505, ())  # 4 in 0.5 s got through: half the guess
    assert policy.rate(0.5) == 20.0
    assert not policy._guess
    policy.tick(100.0, 0.505)
    assert not policy.engaged
    sent = [199.875] + [200.0] * (sends - 1)
    news = policy.throttled(200.0, None, 0.005, 200.005, sent)
    assert news == f"rate limit lowered to {ceiling:.1f} calls/s after 429/529 responses (was no ceiling)"
    assert policy.rate(201.005) == pytest.approx(grown)


@pytest.mark.parametrize(("cap", "news"), [(40.0, None), (41.0, "lowered to 40.0 calls/s")])
def test_a_cut_to_the_ceiling_in_force_is_no_cut(cap: float, news: Optional[str]) -> None:
    # A busy newcomer's first guess is FIRST_GUESS: under a ceiling of exactly that, nothing.
    policy = Policy(cap, True)
    said = policy.throttled(0.0, None, 0.005, 0.005, (), busy=True)
    assert said is None if news is None else news in str(said)
    assert policy.cuts == (0 if news is None else 1)


@pytest.mark.parametrize(("when", "halved"), [(0.29, True), (0.3, False)])
def test_a_throttle_halves_a_guess_within_window_of_it_not_at_window(when: float, halved: bool) -> None:
    # A first guess (40) at 0; a throttle for an attempt sent since, no successes: within WINDOW
    # it halves the guess; at exactly WINDOW it is measured, and too few successes cut nothing.
    policy = Policy(None, True)
    policy.throttled(0.0, None, 0.005, 0.005, (), busy=True)
    grown = policy.rate(when)  # growing GROW_SHORT-fold a second since 0.005
    news = policy.throttled(when, 0.1, 0.005, when + 0.005, ())
    assert WINDOW == 0.3
    if halved:
        assert news is not None
        assert f"lowered to {grown / 2:.1f} calls/s" in news
        assert policy.rate(when) == pytest.approx(grown / 2)
    else:
        assert news is None
        assert (policy.cuts, policy.rate(when)) == (1, grown)


def test_a_short_pause_measures_what_got_through_from_window_after_the_start_not_before() -> None:
    # An explicit 100/s engaged at 0; 24 successes by 0.24 s. A throttle at 0.29 is too soon
    # to measure (nothing cut); at exactly WINDOW it is 80/s got through: 95% of it.
    policy = Policy(100.0, True)
    policy.engage(0.0)
    for i in range(24):
        policy.succeeded(0.01 * (i + 1), 0.01 * i)
    assert policy.throttled(0.29, 0.2, 0.005, 0.295, ()) is None
    assert policy.rate(0.29) == 100.0
    news = policy.throttled(0.3, 0.2, 0.005, 0.305, ())
    assert news == "rate limit lowered to 76.0 calls/s after 429/529 responses (was 100.0/s)"
    assert policy.rate(0.3) == pytest.approx(0.95 * 80)


@pytest.mark.parametrize(("guess", "halved"), [(9.0, 5.0), (10.0, 5.0), (11.0, 5.5)])
def test_a_guess_halved_by_a_fresh_throttle_stays_at_5_calls_a_second_at_least(
    guess: float, halved: float
) -> None:
    # Pins MIN_GUESS (5 calls/s): halving 10/s lands on it exactly, 9/s is raised to it, 11/s
    # halves to 5.5/s.
    clock = Clock()
    start = clock.now
    lim = engaged_at(2 * guess, clock, pause=0.1)  # a first guess of ``guess``, paused 0.1 s
    assert ceiling(lim) == pytest.approx(guess)
    clock.now += 0.05
    lim.report(start, 429, 0.1)  # sent with the first, throttled within its pause: halve the guess
    assert ceiling(lim) == pytest.approx(halved)
    assert lim.policy._guess  # still a guess


def test_a_guess_is_halved_by_a_fresh_throttle_and_doubles_each_second() -> None:
    clock = Clock()
    lim = engaged_at(400, clock)  # a guess of 200/s
    naps = Naps(clock, advance=False)
    clock.now += 0.05
    ticket = lim.acquire(None, Priority.NEW, naps)
    lim.report(ticket, 429, 0.005)  # still throttled soon after the guess: halve it
    halved = 0.5 * 200 * GROW_SHORT**0.045  # the guess had grown for 45 ms since its pause ended
    assert ceiling(lim) == pytest.approx(halved)
    clock.now += 0.005 + 1.0  # a second after the pause: a guess doubles
    assert ceiling(lim) == pytest.approx(GROW_SHORT * halved)
    clock.now += 1.0
    # ...but never past the pace that was throttled first (400/s here), nor GUESS_SPAN times itself
    assert ceiling(lim) == pytest.approx(400)
    clock.now += 10.0
    assert ceiling(lim) == pytest.approx(400)


def test_a_guess_grows_to_32_times_itself_at_most() -> None:
    # Pins GUESS_SPAN (32): a burst at 5000/s, a first guess of 40/s tripling each second, up to
    # 1280/s (32 times 40) and no further, never to the 5000/s first throttled.
    lim, clock = limiter()
    for i in range(32):
        lim.succeeded.append(clock.now - (32 - i) / 5000)
    lim.report(None, 429, 0.005)
    assert ceiling(lim) == pytest.approx(40.0)
    clock.now += 0.005 + 3.0
    assert ceiling(lim) == pytest.approx(1080.0)  # 40 * 3**3: still growing
    clock.now += 0.2
    assert ceiling(lim) == pytest.approx(1280.0)  # 40 * 3**3.2 would be 1346
    clock.now += 10.0
    assert ceiling(lim) == pytest.approx(1280.0)


def test_throttle_of_an_attempt_sent_before_the_cut_does_not_cut() -> None:
    clock = Clock()
    lim = engaged_at(400, clock)
    clock.now += 0.01
    lim.report(99.99, 429, 0.005)  # sent before the cut at 100.0
    lim.report(None, 429, 0.005)  # sent while disengaged
    assert ceiling(lim) == pytest.approx(200.0 * GROW_SHORT**0.005, rel=1e-3)


def measured(clock: Clock, lim: Limiter, successes_per_second: float, seconds: float) -> None:
    """Report successes of attempts sent engaged, evenly over ``seconds`` of the clock."""
    count = round(successes_per_second * seconds)
    for _ in range(count):
        clock.now += 1 / successes_per_second
        lim.report(clock.now - 0.001, 200, None)


def test_measured_cut_is_95_percent_of_what_got_through() -> None:
    lim, clock = limiter(210)
    clock.now += 0.5
    measured(clock, lim, 200, 1.0)  # 200/s of 210 got through
    ticket = clock.now - 0.002
    news: list[str] = []
    lim._notify = news.append
    lim.report(ticket, 429, 0.005)
    assert ceiling(lim) == pytest.approx(0.95 * 200, rel=0.01)
    assert news == ["rate limit lowered to 190.0 calls/s after 429/529 responses (was 210.0/s)"]


def test_short_pauses_measure_once_then_each_throttle_cuts_the_same_share() -> None:
    # In a fleet what gets through is this client's share: once measured, every throttle keeps
    # CUT_SHORT of the ceiling, whatever got through, so unequal shares meet.
    lim, clock = limiter(1000)
    clock.now += 0.5
    measured(clock, lim, 800, 1.0)
    lim.report(clock.now - 0.002, 429, 0.005)
    assert ceiling(lim) == pytest.approx(0.95 * 800, rel=0.01)  # the first: 95% of the measure
    for share in (0.9, 0.5, 0.01):  # less than its ceiling got through, then far less
        clock.now += 0.005
        start = ceiling(lim)
        assert start is not None
        measured(clock, lim, share * start, 1.0)
        before = ceiling(lim)
        assert before is not None
        lim.report(clock.now - 0.002, 429, 0.005)
        assert ceiling(lim) == pytest.approx(CUT_SHORT * before, rel=1e-6)
    before = ceiling(lim)
    assert before is not None
    clock.now += 0.005
    measured(clock, lim, before, 1.0)  # all of its ceiling gets through: jitter, no cut
    grown = ceiling(lim)
    lim.report(clock.now - 0.002, 429, 0.005)
    assert ceiling(lim) == grown


def test_throttle_while_the_ceiling_gets_through_is_jitter() -> None:
    lim, clock = limiter(200)  # an explicit 200/s that all gets through
    clock.now += 0.5
    measured(clock, lim, 198, 1.0)
    lim.report(clock.now - 0.002, 429, 0.005)
    assert ceiling(lim) == 200.0


@pytest.mark.parametrize(("successes", "cut"), [(49, None), (48, 0.95 * 48)])
def test_a_throttle_while_exactly_98_percent_of_the_ceiling_gets_through_is_jitter(
    successes: int, cut: Optional[float]
) -> None:
    # Pins JITTER (0.98) at its limit: under an explicit 50/s, 49 successes in the second before
    # a short pause's 429 are exactly 98% of it: no cut; one fewer cuts to SHARE of what got through.
    policy = Policy(50.0, True)
    policy.engage(0.0)
    for i in range(successes):
        policy.succeeded(0.02 * (i + 1), 0.02 * i)
    news = policy.throttled(1.0, 0.99, 0.005, 1.005, ())
    assert (news is None) == (cut is None)
    assert policy.rate(1.0) == pytest.approx(50.0 if cut is None else cut)


def test_measured_cut_keeps_at_least_70_percent() -> None:
    lim, clock = limiter(1000)
    clock.now += 0.5
    measured(clock, lim, 100, 1.0)  # a stalled client: 100/s of its 1000
    lim.report(clock.now - 0.002, 429, 0.005)
    assert ceiling(lim) == pytest.approx(700.0)


def test_a_guess_drained_at_once_is_measured_by_what_got_through() -> None:
    """A server at 200/s with a bucket of 50: a stretch at rate c drains it in 50/(c - 200) s.
    The guess becomes 95% of the pace that got through, a measured ceiling: not half the guess,
    regrown as a guess, which left a fleet's members that drained the bucket together at a half
    or a quarter of a peer that escaped (benchmarks/RESULTS.md, fleets run 11)."""
    clock = Clock()
    lim = engaged_at(2000, clock, pause=1.0)  # a guess of 1000/s; paused until 101
    assert ceiling(lim) == pytest.approx(1000.0)

    def stretch(rate: float) -> float:
        clock.now = lim.pacer.paused_until
        length = 50 / (rate - 200)
        measured(clock, lim, rate, length)
        before = ceiling(lim)
        assert before is not None
        lim.report(clock.now - 0.001, 429, 1.0)
        return before

    stretch(1000)  # drained at once: 1000/s got through (its ceiling had grown to 1070/s)
    assert ceiling(lim) == pytest.approx(0.95 * 1000, rel=1e-3)
    assert lim.policy._guess == 0.0
    before = stretch(500)  # measured: the same share off, whatever this stretch tells
    assert ceiling(lim) == pytest.approx(CUT * before, rel=1e-3)


def test_a_guess_throttled_with_less_than_half_through_is_measured_by_that() -> None:
    # The other side of the rule it replaced (the lower of half the guess and 95% of the pace).
    clock = Clock()
    lim = engaged_at(2000, clock, pause=1.0)
    clock.now = lim.pacer.paused_until
    measured(clock, lim, 300, 1.0)
    lim.report(clock.now - 0.001, 429, 1.0)
    assert ceiling(lim) == pytest.approx(0.95 * 300, rel=0.01)
    assert lim.policy._guess == 0.0


@pytest.mark.parametrize(("seconds", "lowest"), [(10.0, 0.5), (7.6, 0.5), (6.4, 0.59375)])
def test_no_adaptive_ceiling_is_below_half_a_call_a_second(seconds: float, lowest: float) -> None:
    # Pins MIN_RATE (0.5 calls/s): four calls got through in ``seconds`` before a 429 asking for
    # 10 s; 95% of that pace is 0.38/s (raised to 0.5/s), exactly 0.5/s, or 0.59375/s (kept).
    news: list[str] = []
    clock = Clock()
    lim = engaged_at(2000, clock, pause=1.0)
    lim._notify = news.append
    clock.now = lim.pacer.paused_until
    measured(clock, lim, 4 / seconds, seconds)
    lim.report(clock.now - 0.001, 429, 10.0)
    assert ceiling(lim) == pytest.approx(lowest)
    assert len(news) == 1
    assert news[0].startswith(f"rate limit lowered to {lowest:.1f} calls/s after 429/529 responses")


@pytest.mark.parametrize(
    ("pause", "plateau", "cube"), [(0.005, PLATEAU_SHORT, CUBE_SHORT), (1.0, PLATEAU, CUBE)]
)
def test_measured_ceiling_regrows_slowly_then_cubically(pause: float, plateau: float, cube: float) -> None:
    # Sooner and steeper where a throttle costs only a short pause (probing is cheap there).
    lim, clock = limiter(2000)
    clock.now += 0.5
    measured(clock, lim, 200, 1.0)
    lim.report(clock.now - 0.002, 429, pause)
    low = ceiling(lim)  # then 0.5% a second for ``plateau`` seconds
    assert low is not None
    clock.now += pause + plateau
    assert ceiling(lim) == pytest.approx(low * (1 + 0.005 * plateau))
    clock.now += 4.0  # then a cube of the time beyond, the same in calls/s for every client
    assert ceiling(lim) == pytest.approx(low * (1 + 0.005 * (plateau + 4)) + cube * 4**3)
    clock.now += 30.0  # peers gone: their share is back within tens of seconds
    assert ceiling(lim) == pytest.approx(2000)


def test_after_a_short_pause_regrowth_is_linear_for_2_s_then_adds_0_3_times_the_cube() -> None:
    # Pins PLATEAU_SHORT (2 s) and CUBE_SHORT (0.3 calls/s per s**3): beyond 4 calls/s each
    # second (REGROW_SHORT), nothing for 2 s, then 0.3 times the cube of the seconds beyond.
    lim, clock = limiter()
    lim.report(None, 429, 0.005)  # engaged, no pace yet
    clock.now += 0.5
    measured(clock, lim, 200, 1.0)
    lim.report(clock.now - 0.002, 429, 0.005)  # a millisecond pause: 95% of 200/s, measured
    low = ceiling(lim)
    assert low is not None
    assert low == pytest.approx(190, rel=0.01)
    regrown = clock.now + 0.005  # the pause's end
    for seconds, cube in [(1.0, 0.0), (1.9, 0.0), (2.0, 0.0), (3.0, 0.3), (4.0, 2.4)]:
        clock.now = regrown + seconds
        grown = ceiling(lim)
        assert grown is not None
        assert grown - (low + 4.0 * seconds) == pytest.approx(cube, abs=1e-6), seconds


@pytest.mark.parametrize(("pause", "least"), [(0.005, REGROW_SHORT), (1.0, REGROW_MIN)])
def test_a_low_ceiling_regrows_by_whole_calls_a_second(pause: float, least: float) -> None:
    # The same number of calls/s for every client (fleets' shares meet); faster where a
    # throttle costs only a short pause (exact delays), slower where it costs a second.
    lim, clock = limiter(10)
    clock.now += 0.5
    measured(clock, lim, 5, 1.0)
    lim.report(clock.now - 0.002, 429, pause)
    low = ceiling(lim)
    assert low is not None
    clock.now += pause + 1.0
    assert ceiling(lim) == pytest.approx(min(10.0, low + least))


def test_explicit_ceiling_is_regained_and_told() -> None:
    news: list[str] = []
    lim, clock = limiter(1000, news=news)
    clock.now += 0.5
    measured(clock, lim, 100, 1.0)
    lim.report(clock.now - 0.002, 429, 0.005)
    clock.now += 0.005 + (1000 - 700) / 3.5 + 1  # 0.5% of 700: 3.5 calls/s more each second
    lim.acquire(None, Priority.NEW, Naps(clock))
    assert ceiling(lim) == 1000.0
    assert news[-1] == "rate limit recovered: back to 1000 calls/s"
    clock.now += 1.0  # told once: the cap in force, nothing learned below it any more
    lim.acquire(None, Priority.NEW, Naps(clock))
    assert news.count("rate limit recovered: back to 1000 calls/s") == 1
    assert not lim.policy.learned(clock.now)


def test_adaptive_ceiling_is_lifted_after_a_quiet_minute() -> None:
    news: list[str] = []
    clock = Clock()
    lim = engaged_at(400, clock)
    lim._notify = news.append
    clock.now += 59.9
    lim.acquire(None, Priority.NEW, Naps(clock, advance=False))
    assert lim.engaged
    clock.now += 0.2
    lim.acquire(None, Priority.NEW, Naps(clock, advance=False))
    assert not lim.engaged
    assert ceiling(lim) is None
    assert news == ["rate limit recovered: no 429/529 for 60 s, no ceiling any more"]


@pytest.mark.timeout(30)
def test_threads_sharing_a_limiter_get_distinct_evenly_spaced_slots() -> None:
    lim, clock = limiter(1000, burst=1)
    threads, rounds = 8, 50
    start = threading.Barrier(threads)
    tickets: list[float] = []
    lock = threading.Lock()

    def work() -> None:
        naps = Naps(clock, advance=False)
        start.wait(5)
        for _ in range(rounds):
            ticket = lim.acquire(None, Priority.NEW, naps)
            with lock:
                tickets.append(ticket)
            lim.report(ticket, 200, None)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(10)
    assert not any(worker.is_alive() for worker in workers)
    assert sorted(tickets) == [pytest.approx(100 + k / 1000) for k in range(threads * rounds)]
    assert lim.pacer.inflight == 0


def test_long_stretches_measure_once_then_each_throttle_cuts_the_same_share() -> None:
    clock = Clock()
    lim = engaged_at(2000, clock, pause=1.0)

    def stretch(rate: float, length: float) -> float:
        """A stretch of successes ended by a 429 asking for 1 s; the ceiling it cut."""
        clock.now = lim.pacer.paused_until
        measured(clock, lim, rate, length)
        before = ceiling(lim)
        assert before is not None
        lim.report(clock.now - 0.001, 429, 1.0)
        return before

    stretch(250, 20.0)  # a guess, long, nothing to compare with: 95% of the last second's successes
    assert ceiling(lim) == pytest.approx(0.95 * 250, rel=0.01)
    # Measured: now every throttle keeps CUT of the ceiling (the same share for every client of
    # a fleet), whatever the stretches tell; they still update the estimate.
    before = stretch(1000, 50 / 800)  # drained at once: the estimate is still the long one's
    assert lim.policy._estimate == pytest.approx(250, rel=0.01)
    assert ceiling(lim) == pytest.approx(CUT * before, rel=0.01)
    before = stretch(200, 19.0)  # long: its last second
    assert lim.policy._estimate == pytest.approx(200, rel=0.01)
    assert ceiling(lim) == pytest.approx(CUT * before, rel=0.01)


def test_a_measured_ceiling_is_cut_by_the_same_share_whatever_the_stretch() -> None:
    clock = Clock()
    lim = engaged_at(2000, clock, pause=1.0)

    def stretch(rate: float, length: float) -> float:
        clock.now = lim.pacer.paused_until
        measured(clock, lim, rate, length)
        before = ceiling(lim)
        assert before is not None
        lim.report(clock.now - 0.001, 429, 1.0)
        return before

    stretch(250, 20.0)  # measured: 95% of 250/s
    assert ceiling(lim) == pytest.approx(0.95 * 250, rel=0.01)
    # Drained at once: no halving, CUT; whether the client got more than its ceiling through or
    # less.
    for rate in (1000, 1000, 100):
        before = stretch(rate, 0.5)
        assert ceiling(lim) == pytest.approx(CUT * before, rel=0.01)
        assert lim.policy._guess == 0.0  # a measured ceiling: it regrows by calls/s, not a share


@pytest.mark.parametrize(("pause", "share"), [(0.2, CUT), (0.199, CUT_SHORT)])  # LONG_PAUSE: 0.2 s
def test_a_pause_of_long_pause_or_more_refilled_the_bucket(pause: float, share: float) -> None:
    clock = Clock()
    lim = engaged_at(2000, clock, pause=1.0)
    clock.now = lim.pacer.paused_until
    measured(clock, lim, 250, 20.0)
    lim.report(clock.now - 0.001, 429, 1.0)  # a measured ceiling
    clock.now = lim.pacer.paused_until
    measured(clock, lim, 100, 1.0)  # less than the ceiling got through
    before = ceiling(lim)
    assert before is not None
    lim.report(clock.now - 0.001, 429, pause)
    assert ceiling(lim) == pytest.approx(share * before, rel=0.01)


def test_short_stretches_make_no_estimate() -> None:
    clock = Clock()
    lim = engaged_at(2000, clock, pause=1.0)

    def stretch(rate: float, length: float) -> None:
        clock.now = lim.pacer.paused_until
        measured(clock, lim, rate, length)
        lim.report(clock.now - 0.001, 429, 1.0)

    stretch(800, 0.2)  # drained at once: 95% of what got through
    assert ceiling(lim) == pytest.approx(0.95 * 800, rel=0.01)
    stretch(100, 1.2)  # longer, with fewer successes, but under two pauses: no estimate...
    assert lim.policy._estimate is None
    # ...and the measured ceiling keeps CUT of itself, as after any throttle once measured.
    assert ceiling(lim) == pytest.approx(CUT * 0.95 * 800, rel=0.01)


@pytest.mark.parametrize(("successes", "cut"), [(3, False), (4, True)])
def test_a_stretch_with_too_few_successes_to_measure_cuts_nothing(successes: int, cut: bool) -> None:
    # Measured at 95% of 800/s; the next stretch, ended by a long pause, counts its own
    # successes only (not the last stretch's too): 3 cut nothing, COUNTED (4) keep CUT.
    clock = Clock()
    lim = engaged_at(2000, clock, pause=1.0)
    clock.now = lim.pacer.paused_until
    measured(clock, lim, 800, 0.2)
    lim.report(clock.now - 0.001, 429, 1.0)
    assert ceiling(lim) == pytest.approx(0.95 * 800, rel=0.01)
    clock.now = lim.pacer.paused_until
    measured(clock, lim, successes / 0.2, 0.2)
    before = ceiling(lim)
    assert before is not None
    lim.report(clock.now - 0.001, 429, 1.0)
    assert ceiling(lim) == pytest.approx(CUT * before if cut else before)


def test_a_long_stretch_quiet_in_its_last_second_cuts_by_the_estimate_it_had() -> None:
    # Measured by a long stretch (an estimate of 250/s); the next one lasts three 1 s pauses but
    # its 6 successes all came in its first second: the last second tells nothing, the estimate
    # stands, and the measured ceiling keeps CUT of itself.
    clock = Clock()
    lim = engaged_at(2000, clock, pause=1.0)
    clock.now = lim.pacer.paused_until
    measured(clock, lim, 250, 20.0)
    lim.report(clock.now - 0.001, 429, 1.0)
    assert lim.policy._estimate == pytest.approx(250, rel=0.01)
    clock.now = lim.pacer.paused_until
    measured(clock, lim, 6, 1.0)
    clock.now += 2.0
    before = ceiling(lim)
    assert before is not None
    lim.report(clock.now - 0.001, 429, 1.0)
    assert ceiling(lim) == pytest.approx(CUT * before)
    assert lim.policy._estimate == pytest.approx(250, rel=0.01)


@pytest.mark.parametrize(("pause", "least"), [(0.2, REGROW_MIN), (0.199, REGROW_SHORT)])
def test_a_pause_of_exactly_long_pause_regrows_as_a_long_ones_does(pause: float, least: float) -> None:
    # Under an explicit 100/s, 5/s got through; a 429 asking for LONG_PAUSE (0.2 s) keeps CUT of
    # the ceiling and regrows it by REGROW_MIN calls/s a second; 0.199 s is a short pause:
    # FLOOR of it, regrown by REGROW_SHORT.
    lim, clock = limiter(100)
    clock.now += 0.5
    measured(clock, lim, 5, 1.0)
    lim.report(clock.now - 0.002, 429, pause)
    low = ceiling(lim)
    assert low is not None
    assert low == pytest.approx(100 * (CUT if pause >= 0.2 else FLOOR))
    clock.now += pause + 1.0
    assert ceiling(lim) == pytest.approx(low + least)


def test_a_long_pause_with_no_ceiling_yet_measures_what_got_through() -> None:
    # A lone call's 429 engaged with no ceiling; 10 successes in the second after its pause,
    # then a 429 asking for 1 s: 95% of those 10/s, a first ceiling (not CUT of none).
    policy = Policy(None, True)
    policy.paused(0.0, 1.0)
    assert policy.throttled(0.0, None, 1.0, 1.0, ()) is None
    for i in range(10):
        policy.succeeded(1.0 + 0.1 * (i + 1), 1.0 + 0.1 * i)
    policy.paused(2.0, 3.0)
    news = policy.throttled(2.0, 1.95, 1.0, 3.0, ())
    assert news == "rate limit lowered to 9.5 calls/s after 429/529 responses (was no ceiling)"
    assert policy.rate(3.0) == pytest.approx(9.5)


@pytest.mark.parametrize(("answered", "ceiling"), [(1.0, 0.95 * 4), (1.5, 0.95 * 4)])
def test_a_success_answered_at_the_very_end_of_a_pause_counts_in_the_stretch_after_it(
    answered: float, ceiling: float
) -> None:
    # The pause ends at 1.0 s: four attempts sent then and answered at that same instant belong
    # to the stretch that ends with the next long pause, as four answered later do.
    policy = Policy(None, True)
    policy.paused(0.0, 1.0)
    policy.throttled(0.0, None, 1.0, 1.0, ())
    for _ in range(4):
        policy.succeeded(answered, 1.0)
    policy.paused(2.0, 3.0)
    policy.throttled(2.0, 1.0, 1.0, 3.0, ())
    assert policy.rate(3.0) == pytest.approx(ceiling)


@pytest.mark.parametrize(("throttled", "ceiling"), [(1.0, math.inf), (1.25, 0.95 * 4 / 0.25)])
def test_a_stretch_ended_at_its_very_start_measures_nothing(throttled: float, ceiling: float) -> None:
    # Four successes answered at the pause's very end, then a 429 asking for 1 s at that same
    # instant: a stretch of no time tells no pace (not a division by it). A quarter of a second
    # later, the same four are 16/s: 95% of it.
    policy = Policy(None, True)
    policy.paused(0.0, 1.0)
    policy.throttled(0.0, None, 1.0, 1.0, ())
    for _ in range(4):
        policy.succeeded(1.0, 1.0)
    policy.paused(throttled, throttled + 1.0)
    policy.throttled(throttled, 1.0, 1.0, throttled + 1.0, ())
    assert policy.rate(throttled + 1.0) == pytest.approx(ceiling)


@pytest.mark.parametrize("throttled", [1.625, 1.75])
def test_a_pause_from_the_very_end_of_the_last_ends_an_empty_stretch_not_the_one_before(
    throttled: float,
) -> None:
    # 10/s got through after the first pause; a short pause's 429 measured it (9.5/s) and ended
    # that stretch at 1.625 s. A 429 asking for 1 s at that very instant, or later with nothing
    # through since, ends a stretch with no success in it: it cuts nothing (the stretch before
    # is not measured again).
    policy = Policy(None, True)
    policy.paused(0.0, 1.0)
    policy.throttled(0.0, None, 1.0, 1.0, ())
    for i in range(10):
        policy.succeeded(1.05 + 0.05 * i, 1.0 + 0.05 * i)
    policy.paused(1.5, 1.625)
    policy.throttled(1.5, 1.45, 0.125, 1.625, ())
    assert policy.rate(1.625) == pytest.approx(9.5)
    assert policy.cuts == 1
    policy.paused(throttled, throttled + 1.0)
    assert policy.throttled(throttled, throttled, 1.0, throttled + 1.0, ()) is None
    assert policy.cuts == 1
    assert policy.rate(throttled) == pytest.approx(9.5 + REGROW_MIN * (throttled - 1.625))


def test_failed_attempts_give_their_slot_back_and_few_throttled_slots_are_remembered() -> None:
    lim, clock = limiter(1000, burst=1)
    naps = Naps(clock, advance=False)
    ticket = lim.acquire(None, Priority.NEW, naps)
    lim.report(ticket, None, None)  # the connection failed: no response, nothing measured
    assert lim.pacer.inflight == 0
    lim.report(None, 429, 0.001)
    for _ in range(300):
        lim.report(lim.acquire(0.001, Priority.RETRY, naps), 200, None)
    assert len(lim.pacer._jumps) <= 256
    assert lim.pacer._jumped == 300


def test_engaging_again_starts_from_the_last_ceiling_measured() -> None:
    lim, clock = limiter()
    lim.report(None, 429, 0.005)  # engaged, no pace yet
    clock.now += 0.5
    measured(clock, lim, 200, 1.0)
    lim.report(clock.now - 0.002, 429, 0.005)  # measured: 95% of 200/s
    assert ceiling(lim) == pytest.approx(190, rel=0.01)
    clock.now += 61
    lim.acquire(None, Priority.NEW, Naps(clock, advance=False))
    assert not lim.engaged  # a quiet minute: no ceiling
    lim.report(None, 429, 0.005)  # the successes since were too few to tell a pace
    assert ceiling(lim) == pytest.approx(190, rel=0.01)


def test_a_last_chance_waits_for_the_pace_to_settle() -> None:
    clock = Clock()
    lim = engaged_at(400, clock)  # a guess, cut at 100.0
    naps = Naps(clock, advance=False)
    first = lim.acquire(0.005, Priority.RETRY, naps)
    assert first == pytest.approx(100.005)  # a throttled call: the pause's end
    naps.during = lambda: lim.report(first, 200, None)  # it answers while the next one waits
    last = lim.acquire(0.005, Priority.LAST, naps)
    assert last == pytest.approx(100.3)  # its last attempt: after 0.3 s
    lim.report(last, 200, None)
    clock.now = 100.4
    assert lim.acquire(0.005, Priority.LAST, naps) == pytest.approx(100.405)  # the guess has settled by now


def on_naps(naps: Naps, *actions: Callable[[], object]) -> None:
    """Run ``actions`` one per nap, in order, from ``naps``' next nap on."""
    todo = list(actions)

    def step() -> None:
        todo.pop(0)()
        if todo:
            naps.during = step

    naps.during = step


def test_a_last_chance_goes_once_every_attempt_out_has_answered() -> None:
    lim, clock = limiter(100)  # 10 ms apart, 50 ms of burst
    naps = Naps(clock)
    first, second = lim.acquire(None, Priority.NEW, naps), lim.acquire(None, Priority.NEW, naps)
    lim.report(first, 429, 0.005)  # paused until 100.005; ``second`` is still out
    on_naps(naps, lambda: None, lambda: lim.report(second, 200, None))
    last = lim.acquire(0.005, Priority.LAST, naps)
    assert last == pytest.approx(100.005)  # woken by ``second``'s answer: no polling
    assert near(naps.calls, [(0.005, 0.0), (ALONE, ALONE)])  # a wait the answer ended


def test_others_wait_for_a_last_chance_then_go_on_without_a_burst() -> None:
    lim, clock = limiter(100)
    naps = Naps(clock)
    first, second = lim.acquire(None, Priority.NEW, naps), lim.acquire(None, Priority.NEW, naps)
    lim.report(second, 200, None)
    lim.report(first, 429, 0.005)
    last = lim.acquire(0.005, Priority.LAST, naps)  # out alone at 100.005
    assert last == pytest.approx(100.005)
    naps = Naps(clock)
    on_naps(naps, lambda: None, lambda: lim.report(last, 200, None))
    other = lim.acquire(None, Priority.NEW, naps)
    # Its slot (100.025) comes while the last chance is out: held until its answer wakes it (at
    # most ALONE), then a fresh slot one interval after the answer, not a burst's worth at once.
    assert other == pytest.approx(100.035)
    assert near(naps.calls, [(0.02, 0.02), (9.98, 9.98), (0.01, 0.01)])


def test_a_lone_callers_last_chance_waits_only_the_servers_delay() -> None:
    lim, clock = limiter(100)
    naps = Naps(clock)
    ok = lim.acquire(None, Priority.NEW, naps)
    lim.report(ok, 200, None)
    throttled = lim.acquire(None, Priority.NEW, naps)
    lim.report(throttled, 429, 0.001)
    assert lim.acquire(0.001, Priority.LAST, naps) == pytest.approx(100.001)  # no gap after the success
    assert near(naps.calls, [(0.001, 0.0)])


def test_a_stopped_last_chance_holds_nobody_back() -> None:
    lim, clock = limiter(100)
    naps = Naps(clock)
    first, _out = lim.acquire(None, Priority.NEW, naps), lim.acquire(None, Priority.NEW, naps)
    lim.report(first, 429, 0.005)

    def stop() -> None:
        raise qa.Canceled("canceled")

    on_naps(naps, lambda: None, stop)  # it waits for ``second`` to answer, and is canceled
    with pytest.raises(qa.Canceled):
        lim.acquire(0.005, Priority.LAST, naps)
    naps = Naps(clock)
    assert lim.acquire(None, Priority.NEW, naps) == pytest.approx(100.025)  # its slot; no look, no hold
    assert near(naps.calls, [(0.02, 0.02)])


def test_a_last_chance_that_never_answers_holds_the_others_ten_seconds_at_most() -> None:
    lim, clock = limiter(100)
    naps = Naps(clock)
    first = lim.acquire(None, Priority.NEW, naps)
    lim.report(first, 429, 0.005)
    last = lim.acquire(0.005, Priority.LAST, naps)
    assert last == pytest.approx(100.005)
    other = lim.acquire(None, Priority.NEW, Naps(clock))
    assert 110.005 <= other <= 110.005 + 0.1


def test_a_second_last_chance_at_the_very_end_of_the_firsts_time_alone_waits_alone_again() -> None:
    # A last chance went alone at 100.005 and never answers: another, due while it is out,
    # waits for it. A second before its ALONE ends, the rest of it; at exactly its end, no
    # zero-length wait (a spin) but ALONE again, an answer ending it sooner.
    lim, clock = limiter(100)
    first = lim.acquire(None, Priority.NEW, Naps(clock))
    lim.report(first, 429, 0.005)
    assert lim.acquire(0.005, Priority.LAST, Naps(clock)) == pytest.approx(100.005)
    again, _ = lim.begin(0.0, Priority.LAST)
    clock.now = lim.pacer.alone_until - 1.0
    assert lim.step(again) == pytest.approx((1.0, True))
    clock.now = lim.pacer.alone_until
    assert lim.step(again) == (ALONE, True)


def _last_chance_waiting() -> tuple[Limiter, Clock, Waiter, float]:
    """A last chance due, waiting for the one attempt still out (returned) to answer."""
    lim, clock = limiter(100)
    naps = Naps(clock)
    first, out = lim.acquire(None, Priority.NEW, naps), lim.acquire(None, Priority.NEW, naps)
    lim.report(first, 429, 0.005)
    last, wait = lim.begin(0.005, Priority.LAST)
    clock.now += wait[0] if wait else 0.0
    assert lim.step(last) == (ALONE, True)  # it waits for the attempt out to answer
    return lim, clock, last, out


def test_a_last_chance_that_stops_waiting_wakes_the_calls_held_for_it_and_no_other_stop_does() -> None:
    lim, clock, last, _ = _last_chance_waiting()
    held, _ = lim.begin(None, Priority.NEW)
    clock.now = held.slot
    assert lim.step(held) == (ALONE, True)  # due, and held back for the last chance
    woken: list[str] = []
    lim.arm(held, lambda: woken.append("held"))
    stopped, _ = lim.begin(None, Priority.NEW)
    lim.abandon(stopped)  # a new call that stops waiting holds no one: nobody is woken
    assert woken == []
    lim.abandon(last)  # the last chance stops: the call held for it goes on
    assert woken == ["held"]
    assert held.woken


def test_arm_ends_the_wait_at_once_when_no_answer_is_awaited_any_more() -> None:
    lim, _, last, out = _last_chance_waiting()
    lim.report(out, 200, None)  # the answer comes between ``step`` and ``arm``
    woken: list[str] = []
    lim.arm(last, lambda: woken.append("last"))
    assert woken == ["last"]
    # A waiter no answer is awaited for (a plain wait for its slot): armed, it is woken at once
    # rather than left waiting on a wake-up nothing would send.
    plain, _ = lim.begin(None, Priority.NEW)
    lim.arm(plain, lambda: woken.append("plain"))
    assert woken == ["last", "plain"]


def test_a_sleeper_far_from_its_slot_under_a_learned_ceiling_looks_again_every_look_far() -> None:
    # 40 calls at a learned guess of 10/s: the last one's slot is 3.8 s ahead. Each of its waits
    # lasts LOOK_FAR at most, and no answer ends it (it is not held for one).
    clock = Clock()
    lim = engaged_at(20, clock)
    clock.now += 0.01
    sleepers = [lim.begin(None, Priority.NEW) for _ in range(40)]
    far, first = sleepers[-1]
    assert far.slot == pytest.approx(103.84, abs=0.01)
    assert first == (LOOK_FAR, LOOK_FAR)
    clock.now += LOOK_FAR
    assert lim.step(far) == pytest.approx((LOOK_FAR, False))
    assert far.look_at == pytest.approx(clock.now + LOOK_FAR)
    assert far not in lim.pacer.waiters


@pytest.mark.parametrize(
    ("status", "success"), [(199, False), (200, True), (299, True), (300, False), (500, False), (None, False)]
)
def test_only_a_2xx_answer_counts_as_a_success(status: Optional[int], success: bool) -> None:
    # The pace measured (``Policy.succeeded``) and the latest success a last chance is spaced
    # after (``Pacer.last_ok``) take 200 to 299 only; a failure sent engaged counts nothing.
    lim, clock = limiter(10)
    ticket = lim.acquire(None, Priority.NEW, Naps(clock))
    clock.now += 0.5
    lim.report(ticket, status, None)
    assert lim.policy._ok == (1 if success else 0)
    assert lim.pacer.last_ok == (clock.now if success else -math.inf)
    lim.report(None, 200, None)  # a success sent disengaged has no ticket: it counts nothing
    assert lim.policy._ok == (1 if success else 0)


@pytest.mark.parametrize(
    ("status", "throttle"), [(428, False), (429, True), (528, False), (529, True), (530, False)]
)
def test_429_and_529_pause_the_client_and_count_as_throttles_their_neighbours_do_not(
    status: int, throttle: bool
) -> None:
    lim, _ = limiter()
    lim.report(None, status, 1.5)
    assert lim.snapshot()[1:3] == ((1.5, 1) if throttle else (0.0, 0))


@pytest.mark.parametrize(("pause", "token"), [(0.19, 0.19), (0.2, 0.0)])
def test_a_delay_under_0_2_s_is_a_requests_worth_and_0_2_s_is_not(pause: float, token: float) -> None:
    # A short server delay is about the time to free one request (it spaces a last chance);
    # LONG_PAUSE (0.2 s) and more refill a bucket instead.
    assert _policy.LONG_PAUSE == 0.2
    lim, _ = limiter(100)
    lim.report(None, 429, pause)
    assert lim.pacer.token == token


def test_a_first_ceiling_with_no_delay_spreads_the_retries_sent_with_no_ceiling() -> None:
    # Two throttled calls took the same slot (100.5) with no ceiling; a 429 with no delay sets
    # the first one before they wake: the second takes a slot at that ceiling, after the first.
    lim, clock = limiter()
    lim.report(None, 429, None)
    lim.begin(None, Priority.NEW)  # another call is out
    one, _ = lim.begin(0.5, Priority.RETRY)
    two, _ = lim.begin(0.5, Priority.RETRY)
    assert one.slot == two.slot == 100.5
    for i in range(10):
        lim.succeeded.append(clock.now - 0.25 + 0.025 * i)
    lim.report(None, 429, None)
    assert ceiling(lim) == pytest.approx(20.0)
    clock.now = 100.5
    assert lim.step(one) is None
    wait = lim.step(two)
    assert wait is not None
    assert wait[0] > 0.01
    assert two.slot > 100.51


def test_a_restart_keeps_the_pause_the_server_asked_for() -> None:
    lim, clock = limiter()
    lim.report(None, 429, 30.0)
    lim.restart()
    assert lim.snapshot()[1] == pytest.approx(30.0)
    lim.forget()
    assert lim.snapshot()[1] == pytest.approx(30.0)
    assert lim.acquire(None, Priority.NEW, Naps(clock)) == pytest.approx(130.0)


def test_the_limiter_absorbs_429s_only_for_a_busy_or_paced_client() -> None:
    lim, clock = limiter()
    assert not lim.absorbs()  # a fresh client: its 429s count against max_retries
    lim.report(None, 429, 0.005)  # nothing learned from one 429 without successes before
    assert lim.engaged
    assert not lim.absorbs()  # a lone call: still not
    naps = Naps(clock)
    ticket = lim.acquire(None, Priority.NEW, naps)  # another attempt of the client is out
    assert lim.absorbs()  # a busy client finding its share
    lim.report(ticket, 200, None)
    assert not lim.absorbs()
    paced = engaged_at(400, clock)  # a ceiling learned from the latest successes
    assert paced.absorbs()


def test_a_learned_ceiling_takes_no_draw_from_the_clients_random_seam() -> None:
    # ``random=`` is the backoff jitter's seam (``lambda: 0.0`` is the documented recipe for
    # full-length delays): the limiter's slots neither draw from it nor depend on it.
    seam: list[float] = []

    def random() -> float:
        seam.append(0.0)
        return 0.0

    with qa.Client(api_key="sk-x", base_url="http://127.0.0.1:9", random=random, trust_env=False) as client:
        limiter = client._sender.limiter
        assert limiter is not None
        pacer = limiter.pacer
        pacer.inflight = 2
        slots = [pacer.reserve(10.0, None, Waiter(Priority.NEW), Pace(20.0)) for _ in range(400)]
        assert seam == []
        gaps = [b - a for a, b in zip(slots[10:], slots[11:])]  # past the first 50 ms of burst
        assert gaps == [pytest.approx(0.05)] * len(gaps)  # 20/s, evenly


def test_the_figures_the_docs_give_are_the_policys() -> None:
    """docs/rate-limits.md states the policy's figures (and the limiter's ABSORBED) in words; each must
    be the constant's."""
    from pathlib import Path

    from qa_min import _steer

    text = " ".join((Path(__file__).parent.parent / "docs" / "rate-limits.md").read_text().split())
    words = {3.0: "tripling", 10.0: "tenfold", 0.125: "an eighth"}.get
    cut, cut_short = f"{_policy.CUT:.0%}", f"{_policy.CUT_SHORT:.0%}"
    figures = [
        f"at least {_policy.REGROW_MIN:g} calls/s each second ({_policy.REGROW_SHORT:g} after millisecond",
        f"none above {_policy.FIRST_GUESS:g} calls/s, {words(_policy.GROW_SHORT)} each second",
        f"becomes {_policy.SHARE:.0%} of the pace that got through",
        f"({cut} where 429s ask for a second, {cut_short} where they ask for milliseconds)",
        f"{_policy.PLATEAU:g} s after a cut, it adds {_policy.CUBE:g} calls/s times the cube",
        f"{words(_steer.START)} of the refill rate, growing {words(_steer.RAMP)} a second",
        f"**up to {ABSORBED} per call** (`qa_min._limiter.ABSORBED`). So with the default "
        f"`max_retries=2`, a call makes at most 2 + {ABSORBED} + 1 = {2 + ABSORBED + 1} attempts",
    ]
    for figure in figures:
        assert figure in text, figure

"""The limiter under load, simulated: 8 and 32 threads of one client against a token bucket.

``ratelimit_sim`` runs the real ``Limiter`` on a virtual clock, one simulated thread at a time,
so each run below is deterministic and takes a fraction of a second for minutes of virtual
time. The service allows 200 requests a second with a burst of 50 and answers 429 with its
exact delay (``retry-after-ms``) or that delay in whole seconds (``Retry-After: 1``). The
benchmark (``python -m benchmarks.ratelimit``) measures the same over real sockets.

Spec line -> tests (the rate-limit issue's acceptance, in simulation):

  RateLimit(190): >= 90% of the allowed rate, no 429, no failed call
      test_explicit_ceiling_under_the_service_rate_loses_nothing
  default (adaptive): >= 85% of the rate (here, a 20 s job: 80%), < 5% answered 429, no failed call
      test_adaptive_limiter_finds_the_rate_and_loses_no_call
  without a limiter: the "before"
      test_without_a_limiter_calls_are_lost
"""

from __future__ import annotations

import pytest
from ratelimit_sim import simulate

import qa_min as qa

HEADERS = {"retry-after-ms": False, "Retry-After: 1": True}


@pytest.mark.parametrize("workers", [8, 32])
@pytest.mark.parametrize("header", list(HEADERS))
def test_explicit_ceiling_under_the_service_rate_loses_nothing(header: str, workers: int) -> None:
    result = simulate(2000, workers, qa.RateLimit(190), whole_seconds=HEADERS[header])
    assert result.failed == 0
    assert result.throttled == 0
    assert result.share_of_rate / 200 >= 0.90
    assert result.share_of_rate <= 190 * 1.01  # 50 ms of burst at the start, then the pace


@pytest.mark.parametrize("seed", [1, 2, 7])
@pytest.mark.parametrize("workers", [8, 32])
@pytest.mark.parametrize("header", list(HEADERS))
def test_adaptive_limiter_finds_the_rate_and_loses_no_call(header: str, workers: int, seed: int) -> None:
    # Seed 7 is a run in which, while the first ceilings were still guesses, throttled calls met
    # two more 429s and were lost (3 of 4,000 at 8 threads, 7 at 32) before a last chance went alone.
    result = simulate(4000, workers, qa.RateLimit(), whole_seconds=HEADERS[header], seed=seed)
    assert result.failed == 0
    assert result.share_429 < 0.05
    # Each early throttle with Retry-After: 1 pauses everything for a second: a 20 s job
    # loses more to them than the 100 s job of the benchmark's acceptance line. With exact
    # delays a first guess no higher than a fleet's (FIRST_GUESS) costs it a second of ramp,
    # and each measured cut keeps CUT_SHORT (fair fleets cost a lone client a deeper saw).
    assert result.share_of_rate / 200 >= (0.80 if HEADERS[header] else 0.88)


@pytest.mark.parametrize("workers", [8, 32])
def test_without_a_limiter_calls_are_lost(workers: int) -> None:
    result = simulate(2000, workers, None)
    assert result.failed > 100
    assert result.share_429 > 0.5

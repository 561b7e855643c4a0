"""``python -m benchmarks.ratelimit`` runs end to end on a tiny job (its figures are not checked)."""

from __future__ import annotations

import pytest

from benchmarks import ratelimit


@pytest.mark.timeout(60)
def test_a_tiny_job_runs_against_a_service_process_and_is_reported() -> None:
    outcome = ratelimit.run_job("retry-after-ms", 4, "RateLimit(190)", 120)
    assert outcome.answered + sum(outcome.failed.values()) == 120
    assert outcome.requests >= 120
    assert 0 <= outcome.throttled <= outcome.requests
    [header, _, row] = ratelimit.table([outcome])
    assert header.startswith("| header | in flight | rate_limit |")
    assert row.startswith("| retry-after-ms | 4 | RateLimit(190) | 120 |")
    [verdict] = ratelimit.verdicts([outcome])
    assert verdict.startswith("- RateLimit(190), 120 calls, 4 in flight, retry-after-ms: ")


def test_verdicts_name_what_was_not_met() -> None:
    slow = ratelimit.Outcome(
        "Retry-After: 1", 32, "RateLimit()", 20_000, 200.0, 19_990, {"RateLimited": 10}, 21_000, 1_200
    )
    [verdict] = ratelimit.verdicts([slow])
    assert verdict.endswith("10 failed: NOT MET")
    assert ratelimit.verdicts([ratelimit.Outcome("x", 8, "none", 10, 1.0, 10, {}, 10, 0)]) == []


# ``python -m benchmarks fleet``: a tiny fleet end to end, and its arithmetic on made-up reports.


@pytest.mark.timeout(60)
def test_a_tiny_fleet_runs_and_is_reported() -> None:
    from benchmarks import fleet

    outcome = fleet.run_row(fleet.Row("announced", 2, "retry-after-ms", 60, announce="openai"))
    assert outcome.answered + outcome.lost == 60
    assert outcome.requests >= 60
    assert fleet.line(outcome).startswith("| announced (openai) | 2 | retry-after-ms | 60 |")


def test_fleet_figures_from_reports() -> None:
    from benchmarks import fleet

    row = fleet.Row("exiting", 2, "Retry-After: 1", 40, exit_after=1.0)
    first = {"started": 0.0, "answered": [0.5 + 0.1 * i for i in range(10)], "errors": {}}
    second = {"started": 0.0, "answered": [0.1 * i for i in range(1, 31)], "errors": {"RateLimited": 1}}
    outcome = fleet._outcome(row, [first, second], {"requests": 50, "throttled": 5})
    assert outcome.seconds == pytest.approx(3.0)
    assert outcome.answered == 40
    assert outcome.lost == 1
    assert outcome.share_429 == pytest.approx(0.1)
    assert outcome.fairness is None  # all ran together for less than 2 s: no fairness to tell
    # After the first one's last answer (1.4 s) plus 1 s, until the other's end (3.0 s): 6 answers.
    assert outcome.after_exit == pytest.approx(6 / 0.6 / fleet.RATE)

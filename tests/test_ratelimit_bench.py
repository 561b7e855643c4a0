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

"""The retry loop of ``Client`` and ``AsyncClient`` held to one outcome for one script.

Each test runs the same ``MockTransport`` script through both clients, the backoff recorded by
the ``sleep=`` seam (which returns at once) and ``random=`` fixed, and compares what the call
raised, its ``Diagnostics`` and the waits asked for with the documented figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import pytest
from test_retry_audit import KINDS, Outcome, call

import qa_min as qa
from qa_min.testing import MockTransport, RecordedRequest, Step, drop, reply


def scripted(
    kind: str,
    steps: Sequence[Step],
    diagnostics: Optional[qa.Diagnostics] = None,
    client_options: Optional[dict[str, Any]] = None,
    **call_options: Any,
) -> Outcome:
    """One ``ask`` through the ``kind`` client, answered by ``steps`` and then by the fake's answer;
    ``diagnostics`` filled (a new one when None); ``client_options`` add to the client's options."""
    left = list(steps)

    def handler(request: RecordedRequest) -> Optional[Step]:
        return left.pop(0) if left else None

    transport = MockTransport(handler)
    options = {"transport": transport, **(client_options or {})}
    return call(kind, "http://qa.test", diagnostics=diagnostics, call_options=call_options, **options)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("headers", [[("Retry-After", "30")], []], ids=["server-delay-30s", "backoff-20s"])
def test_a_wait_cut_by_the_deadline_is_recorded_as_the_wait_slept(
    kind: str, headers: list[tuple[str, str]]
) -> None:
    # The deadline is 5 s away: the wait before the retry is cut to what is left of it, and
    # the retry's record says so (the seam returns at once, so the retry is still made).
    policy = qa.RetryPolicy(max_retries=1, backoff_initial_ms=20_000, backoff_max_ms=20_000, backoff_jitter=0)
    outcome = scripted(kind, [reply(503, headers=headers)] * 2, retry=policy, timeout=5.0)
    assert isinstance(outcome.error, qa.ServerError)
    assert outcome.diagnostics.attempts == 2
    assert len(outcome.sleeps) == 1
    assert 0.0 < outcome.sleeps[0] <= 5.0
    delays = [attempt.delay for attempt in outcome.diagnostics.history]
    assert delays[0] < 0.001
    assert delays[1] == pytest.approx(outcome.sleeps[0]), "history records a wait the deadline cut"


@pytest.mark.parametrize("kind", KINDS)
def test_a_diagnostics_filled_again_shows_no_headers_when_no_response_came(kind: str) -> None:
    # One Diagnostics passed to two calls: the second got no response, so nothing of the first
    # call's response may remain (its headers would lend the failure the first's request id).
    diagnostics = qa.Diagnostics()
    scripted(kind, [reply(503, headers=[("x-request-id", "req_1")])], diagnostics, retry=qa.RetryPolicy.none)
    assert diagnostics.request_id == "req_1"
    assert diagnostics.headers is not None
    second = scripted(kind, [drop()], diagnostics, retry=qa.RetryPolicy.none)
    assert isinstance(second.error, qa.ConnectionFailed)
    assert diagnostics.attempts == 1
    assert diagnostics.status is None
    assert diagnostics.request_id is None
    assert diagnostics.headers is None, "a response of an earlier call is shown as this call's"


@pytest.mark.parametrize("kind", KINDS)
def test_a_deadline_cuts_the_rate_limiters_part_of_a_wait_not_the_backoff(kind: str) -> None:
    # At one attempt a second, the retry's slot is 1 s after the first attempt: 0.2 s of
    # backoff, then 0.8 s the limiter's. The deadline, 0.7 s away, cuts the end of that wait,
    # which is the limiter's: 0.2 s of delay and about 0.5 s of rate_limit_wait were slept.
    policy = qa.RetryPolicy(max_retries=1, backoff_initial_ms=200, backoff_jitter=0)
    outcome = scripted(
        kind, [reply(503)], retry=policy, timeout=0.7, client_options={"rate_limit": qa.RateLimit(1, burst=1)}
    )
    assert outcome.error is None
    retry = outcome.diagnostics.history[1]
    assert len(outcome.sleeps) == 1
    assert outcome.sleeps[0] <= 0.7
    assert retry.delay == pytest.approx(0.2), "the backoff counted as the limiter's wait"
    assert 0.0 < retry.rate_limit_wait <= 0.5
    assert retry.delay + retry.rate_limit_wait == pytest.approx(outcome.sleeps[0])
    assert outcome.diagnostics.rate_limit_wait == pytest.approx(retry.rate_limit_wait)

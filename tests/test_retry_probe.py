"""The retry loop of ``Client`` and ``AsyncClient`` held to one outcome for one script.

Each test runs the same ``MockTransport`` script through both clients, the backoff recorded by
the ``sleep=`` seam (which returns at once) and ``random=`` fixed, and compares what the call
raised, its ``Diagnostics`` and the waits asked for with the documented figures.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest

import qa_min as qa
from qa_min.testing import MockTransport, RecordedRequest, Step, drop, reply

KINDS = ["sync", "async"]


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


@dataclass
class Outcome:
    error: Optional[BaseException]
    diagnostics: qa.Diagnostics
    sleeps: list[float] = field(default_factory=list)


def scripted(
    kind: str, steps: Sequence[Step], diagnostics: Optional[qa.Diagnostics] = None, **call_options: Any
) -> Outcome:
    """One ``ask`` through the ``kind`` client, answered by ``steps`` and then by the fake's answer;
    ``diagnostics`` filled (a new one when None)."""
    left = list(steps)

    def handler(request: RecordedRequest) -> Optional[Step]:
        return left.pop(0) if left else None

    sleeps: list[float] = []
    diagnostics = qa.Diagnostics() if diagnostics is None else diagnostics
    options: dict[str, Any] = {"base_url": "http://qa.test", "transport": MockTransport(handler)}
    options["random"] = lambda: 0.0
    if kind == "sync":

        def record(seconds: float, wake: threading.Event) -> None:
            sleeps.append(seconds)

        with qa.Client(sleep=record, **options) as client:
            try:
                client.ask("some text", Review, diagnostics=diagnostics, **call_options)
            except qa.QAError as exc:
                return Outcome(exc, diagnostics, sleeps)
        return Outcome(None, diagnostics, sleeps)

    async def arecord(seconds: float) -> None:
        sleeps.append(seconds)

    async def main() -> Optional[BaseException]:
        async with qa.AsyncClient(sleep=arecord, **options) as client:
            try:
                await client.ask("some text", Review, diagnostics=diagnostics, **call_options)
            except qa.QAError as exc:
                return exc
        return None

    return Outcome(asyncio.run(main()), diagnostics, sleeps)


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

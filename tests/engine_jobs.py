"""What the engine tests run in their workers, and how they check it: a plain module.

Workers of every engine (process pools, Dask, Ray, Spark) import this module by name, so it
imports only ``qa_min`` and the standard library: a worker never loads pytest. The engine test
modules put ``tests/`` on the workers' ``PYTHONPATH`` (``worker_pythonpath``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Optional, Union

import qa_min as qa
from qa_min.testing import FakeService, expected_answer, reply

ROOT = Path(__file__).resolve().parent.parent
WORKERS = 2
PARTITIONS = 8
STATES = [
    f"State {i}: the parcel came {('late', 'early', 'on time')[i % 3]} and {i % 7} items" for i in range(2000)
]
# One limit for the whole job, each of the WORKERS workers' clients holding its share: high
# enough never to slow a test down, and visible in a worker (``limit_in_worker``).
LIMIT = qa.RateLimit(40_000)
SHARE = LIMIT.split(WORKERS)
# A busy service gives up quickly: one retry, 1 ms apart.
IMPATIENT = qa.RetryPolicy(max_retries=1, backoff_initial_ms=1, backoff_max_ms=1)
BUSY_DETAIL = "slow down, please"


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")
    tone = qa.Choice(
        {"formal": "Written formally", "casual": "Written casually", "angry": "Written in anger"}
    )
    quality = qa.Score(["poor", "fair", "good", "great"])


Outcome = Union["qa.AskResponse[Review]", qa.QAError]


def worker_pythonpath() -> str:
    """A ``PYTHONPATH`` under which a worker imports this tree's ``qa_min`` and this module."""
    inherited = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join(p for p in (str(ROOT), str(ROOT / "tests"), inherited) if p)


def partitions(items: Sequence[str], n: int = PARTITIONS) -> list[list[str]]:
    """``items`` cut into ``n`` contiguous parts of nearly equal size, in order."""
    size, extra = divmod(len(items), n)
    parts, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        parts.append(list(items[start:end]))
        start = end
    return parts


def make_client(url: str, retry: Optional[qa.RetryPolicy] = None) -> qa.Client:
    """A client for the driver to ship: its workers' share of the limit, no environment."""
    return qa.Client(base_url=url, trust_env=False, rate_limit=SHARE, retry=retry)


def judge(states: Iterable[str], client: qa.Client) -> list[qa.AskResponse[Review]]:
    """A partition with a shipped client: the task's copy is left open (see README)."""
    return [client.ask(state, Review) for state in states]


def judge_with_own_client(states: Iterable[str], url: str) -> list[qa.AskResponse[Review]]:
    """A partition with a client built for it, in the worker."""
    with make_client(url) as client:
        return [client.ask(state, Review) for state in states]


def judge_or_error(states: Iterable[str], client: qa.Client) -> Iterator[tuple[str, Outcome]]:
    """Each state with its response or its error: for engines that lose an exception's class."""
    for state in states:
        try:
            yield state, client.ask(state, Review)
        except qa.QAError as exc:
            yield state, exc


def limit_in_worker(client: qa.Client) -> tuple[int, Optional[qa.RateLimit]]:
    """The worker's process id and the limit its copy of ``client`` holds."""
    state = client.rate_limit
    return os.getpid(), None if state is None else state.limit


def pid(_: object = None) -> int:
    return os.getpid()


def check(states: Sequence[str], responses: Sequence[qa.AskResponse[Review]]) -> None:
    """Every response is the fake's answer to its state, in order; raises AssertionError."""
    assert len(responses) == len(states), (len(responses), len(states))
    criteria = {name: getattr(Review, name).criteria for name in ("toxic", "tone", "quality")}
    for state, response in zip(states, responses):
        assert isinstance(response, qa.AskResponse), response
        got = {
            "toxic": response.answers.toxic,
            "tone": response.answers.tone,
            "quality": response.answers.quality,
        }
        want = {name: expected_answer(qa.DEFAULT_MODEL, state, name, c) for name, c in criteria.items()}
        assert got == want, (state, got, want)
        assert response.diagnostics is not None
        assert response.diagnostics.status == 200


def flatten(parts: Iterable[Iterable[qa.AskResponse[Review]]]) -> list[qa.AskResponse[Review]]:
    return [response for part in parts for response in part]


def storm(service: FakeService, replies: int = 200) -> None:
    """Script ``replies`` 429s: more than every attempt of a storm job, so each call fails."""
    busy = reply(429, {"detail": BUSY_DETAIL}, headers=[("retry-after-ms", "1")])
    service.script(*[busy] * replies)


def check_busy(exc: BaseException) -> None:
    """``exc`` is the RateLimited a worker raised, with its status and diagnostics intact."""
    assert isinstance(exc, qa.ServiceBusy), repr(exc)
    assert isinstance(exc, qa.RateLimited)
    assert exc.status == 429
    assert "HTTP 429" in str(exc)
    assert BUSY_DETAIL in str(exc)
    diagnostics = exc.diagnostics
    assert diagnostics.status == 429
    assert diagnostics.attempts == 2  # IMPATIENT: the first attempt and one retry
    assert diagnostics.body is not None
    assert BUSY_DETAIL in diagnostics.body
    assert [a.status for a in diagnostics.history] == [429, 429]
    assert [a.error for a in diagnostics.history] == ["RateLimited", "RateLimited"]

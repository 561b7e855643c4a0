"""``client.rate_limit`` shows what a service announced and what the client learned from it, on
both clients (SPEC 7a: "``client.rate_limit`` shows what it learned"), over real sockets.

* each style ``FakeService`` announces, and GitHub's: the announced limit, what is left, when it
  is back and its refill, beside the ceiling read off them;
* odd announcements (a count of millions, numbers of 1e299, a ceiling of 0.01/s, garbage):
  no crash, every number readable and the text short.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest

import qa_min as qa
from qa_min._fakerules import ANNOUNCE_STYLES
from qa_min._ratelimit import RateLimitState
from qa_min.testing import FakeService, Step, reply


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


ANSWER = {"answers": {"toxic": True}}
CALLS = 2  # per client: the second call's response is the one shown


def shown(url: str, calls: int = CALLS, **options: Any) -> tuple[RateLimitState, RateLimitState]:
    """``client.rate_limit`` after ``calls`` calls, of a ``Client`` and of an ``AsyncClient``."""
    with qa.Client(base_url=url, trust_env=False, **options) as client:
        for i in range(calls):
            client.ask(f"text {i}", Review)
        threaded = client.rate_limit

    async def main() -> RateLimitState | None:
        async with qa.AsyncClient(base_url=url, trust_env=False, **options) as client:
            for i in range(calls):
                await client.ask(f"text {i}", Review)
            return client.rate_limit

    on_loop = asyncio.run(main())
    assert threaded is not None
    assert on_loop is not None
    return threaded, on_loop


def scripted(headers: list[tuple[str, str]]) -> tuple[Step, ...]:
    """Every call of both clients answered with ``headers``."""
    return tuple(reply(200, ANSWER, headers=headers) for _ in range(2 * CALLS))


def whole(value: object) -> str:
    assert isinstance(value, float)
    assert value.is_integer()
    return str(int(value))


def check_shows(state: RateLimitState, style: str) -> None:
    told = state.announced
    assert told is not None
    assert told["style"] == style
    text = repr(state)
    assert f"announced {whole(told['remaining'])} of {whole(told['limit'])} left" in text
    assert text.endswith(f" ({style}), throttles=0)")
    assert state.per_second is not None  # an adaptive client paces by the announcement
    assert f"paced at {state.per_second:.1f}/s" in text
    assert str(state) == text


@pytest.mark.parametrize("style", [s for s in ANNOUNCE_STYLES if s != "none"])
def test_both_clients_show_each_announced_style(style: str) -> None:
    # The fake's bucket: 10 calls refilled at 100/s. Draft-11 tells the quota per second (q=100;
    # w=1), the others the bucket (10); each tells a refill of about 100/s, directly or by its reset.
    with FakeService(rate_limit=(100, 10), announce=style) as svc:
        for state in shown(svc.url):
            check_shows(state, style)
            told = state.announced
            assert told is not None
            assert told["limit"] == (100.0 if style == "ietf" else 10.0)
            refill, reset = told["refill"], told["reset"]
            assert isinstance(refill, float)
            assert isinstance(reset, float)
            assert 50 < refill < 1000  # about 100/s: a bucket's estimate rounds what is left down
            assert f", refill {refill:.6g}/s" in repr(state)
            assert f", back in {reset:.6g} s" in repr(state)


def test_both_clients_show_a_github_announcement() -> None:
    # GitHub's fixed window: no refill told, the reset an epoch time an hour ahead.
    with FakeService() as svc:
        reset = str(int(time.time()) + 3600)
        github = [
            ("X-RateLimit-Limit", "5000"),
            ("X-RateLimit-Remaining", "4999"),
            ("X-RateLimit-Reset", reset),
        ]
        svc.script(*scripted(github))
        for state in shown(svc.url):
            check_shows(state, "github")
            assert "refill" not in repr(state)
            assert re.search(r", back in 3[56]\d\d(\.\d+)? s \(github\)", repr(state)), repr(state)


@pytest.mark.parametrize(
    ("headers", "words"),
    [
        # A daily quota of millions: counts whole, not 1.23457e+06 of 2e+06.
        (
            [("x-ratelimit-limit", "2000000"), ("x-ratelimit-remaining", "1234567")],
            "announced 1234567 of 2000000 left (github)",
        ),
        # 1e299 calls back in a nanosecond: the ceiling read off it is huge, not 300 digits long.
        (
            [
                ("x-ratelimit-limit-requests", "1e299"),
                ("x-ratelimit-remaining-requests", "1e299"),
                ("x-ratelimit-reset-requests", "1ns"),
            ],
            "announced 1e+299 of 1e+299 left, back in 1e-09 s (openai)",
        ),
        # Nothing usable: nothing announced, nothing paced.
        (
            [("RateLimit", "garbage"), ("x-ratelimit-remaining", "nan")],
            "RateLimitState(unlimited, throttles=0)",
        ),
        ([("RateLimit", "limit=0, remaining=0, reset=0")], "announced 0 of 0 left (ietf-draft)"),
    ],
)
def test_odd_announcements_show_readably(headers: list[tuple[str, str]], words: str) -> None:
    with FakeService() as svc:
        svc.script(*scripted(headers))
        for state in shown(svc.url):
            text = repr(state)
            assert words in text
            assert len(text) < 160, text
            if state.per_second is not None:
                shown_pace = re.search(r"paced at (\S+)/s", text)
                assert shown_pace is not None
                assert float(shown_pace[1]) == pytest.approx(state.per_second, rel=0.01)


def test_a_slow_fixed_ceiling_is_not_shown_as_zero() -> None:
    # One decimal showed RateLimit(0.01) as "paced at 0.0/s". No call: the first would wait.
    with FakeService() as svc:
        for state in shown(svc.url, calls=0, rate_limit=qa.RateLimit(0.01, adaptive=False)):
            assert repr(state) == "RateLimitState(paced at 0.01/s, throttles=0)"

"""Numbers in the retry policy and in server headers: nothing absurd is accepted or slept.

``RetryPolicy`` refuses a delay that is not a finite number from 0 to one day, and
``max_retries`` above 1000, with ``InvalidOption`` naming the field. A server header asking for
an absurd delay (``retry-after: 1e308``, ``retry-after-ms: inf``, an HTTP-date in the year
99999) never raises ``OverflowError`` and never makes the client sleep for it: the header is
ignored and the backoff used. Every delay is clamped to one day, so the most patient legal
policy still sleeps a finite, bounded time. Sleeps are recorded, never waited for.

  test_delay_fields_at_the_limits_are_accepted, test_delay_fields_one_past_the_limits_are_refused,
  test_max_retries_at_the_limit_and_one_past, test_jitter_at_the_limits_and_one_past,
  test_absurd_server_delays_fall_back_to_the_backoff,
  test_bad_retry_after_ms_falls_through_to_retry_after, test_largest_policy_sleeps_at_most_a_day,
  test_server_delay_of_exactly_a_day_is_honoured_and_a_second_more_is_not,
  test_an_int_too_long_to_print_is_refused_as_the_option_it_is (an int past Python's 4300
  printable digits is named by its size in the message, not quoted)
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from support import SleepRecorder, make_recording_client

import qa_min as qa
from qa_min.testing import FakeService, MockTransport, reply

DAY_MS = 86_400_000


class Review(qa.Questions):
    toxic = qa.YesNo("insults someone", "insults no one")


@pytest.mark.parametrize("field", ["backoff_initial_ms", "backoff_max_ms", "max_retry_after_ms"])
@pytest.mark.parametrize("value", [0, 0.0, 1e-9, DAY_MS, float(DAY_MS)], ids=repr)
def test_delay_fields_at_the_limits_are_accepted(field: str, value: float) -> None:
    options: dict[str, Any] = {field: value}
    assert getattr(qa.RetryPolicy(**options), field) == value


@pytest.mark.parametrize("field", ["backoff_initial_ms", "backoff_max_ms", "max_retry_after_ms"])
@pytest.mark.parametrize(
    "value",
    [
        DAY_MS + 1,
        math.nextafter(DAY_MS, math.inf),
        -1,
        -1e-9,
        math.inf,
        -math.inf,
        math.nan,
        1e308,
        True,
        False,
        "5",
        None,
    ],
    ids=repr,
)
def test_delay_fields_one_past_the_limits_are_refused(field: str, value: Any) -> None:
    with pytest.raises(qa.InvalidOption, match=f"{field} must be a number of ms from 0 to one day"):
        qa.RetryPolicy(**{field: value})


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (0, True),
        (1000, True),
        (1001, False),
        (-1, False),
        (10**100, False),
        (True, False),
        (2.0, False),
        (math.inf, False),
    ],
    ids=repr,
)
def test_max_retries_at_the_limit_and_one_past(value: Any, ok: bool) -> None:
    if ok:
        assert qa.RetryPolicy(max_retries=value).max_retries == value
    else:
        with pytest.raises(qa.InvalidOption, match="max_retries must be an int from 0 to 1000"):
            qa.RetryPolicy(max_retries=value)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (0, True),
        (1, True),
        (0.5, True),
        (math.nextafter(1.0, 2.0), False),
        (-1e-12, False),
        (math.nan, False),
        (math.inf, False),
        (True, False),
    ],
    ids=repr,
)
def test_jitter_at_the_limits_and_one_past(value: Any, ok: bool) -> None:
    if ok:
        assert qa.RetryPolicy(backoff_jitter=value).backoff_jitter == value
    else:
        with pytest.raises(qa.InvalidOption, match="backoff_jitter must be between 0 and 1"):
            qa.RetryPolicy(backoff_jitter=value)


POLICY = qa.RetryPolicy(max_retries=2, backoff_initial_ms=100, backoff_max_ms=1000)
ABSURD = [
    [("retry-after", "1e308")],
    [("retry-after", "-1e308")],
    [("retry-after", "1" + "0" * 400)],
    [("retry-after", "99999999999999999999999")],
    [("retry-after", "nan")],
    [("retry-after", "inf")],
    [("retry-after-ms", "inf")],
    [("retry-after-ms", "-inf")],
    [("retry-after-ms", "1e400")],
    [("retry-after-ms", "nan")],
    [("retry-after-ms", "9" * 5000)],
    [("retry-after", "Fri, 31 Dec 99999 23:59:59 GMT")],
    [("retry-after", "Mon, 01 Jan 9999999999999999999999 00:00:00 GMT")],
    [("retry-after", "Mon, 01 Jan 2999 00:00:00 +9999")],
    [("retry-after", "Thu, 01 Jan 1970 00:00:00 GMT")],
    [("retry-after-ms", "1e308"), ("retry-after", "1e308")],
]


@pytest.mark.parametrize("headers", ABSURD, ids=lambda h: "; ".join(f"{k}: {v[:30]}" for k, v in h))
@pytest.mark.parametrize("status", [429, 503])
def test_absurd_server_delays_fall_back_to_the_backoff(
    svc: FakeService, headers: list[tuple[str, str]], status: int
) -> None:
    svc.script(*[reply(status, {"detail": "busy"}, headers=headers)] * 3)
    sleeps = SleepRecorder()
    with (
        make_recording_client(svc.url, sleep=sleeps, retry=POLICY) as client,
        pytest.raises(qa.APIStatusError) as caught,
    ):
        client.ask("x", Review)
    assert caught.value.status == status
    assert caught.value.diagnostics.attempts == 3
    assert sleeps.seconds == pytest.approx([0.1, 0.2], abs=1e-6)  # the backoff: 100 ms, then 200 ms


@pytest.mark.parametrize("bad", ["inf", "nan", "1e400", "-5", "soon"])
def test_bad_retry_after_ms_falls_through_to_retry_after(svc: FakeService, bad: str) -> None:
    headers = [("retry-after-ms", bad), ("retry-after", "2")]
    svc.script(*[reply(503, None, headers=headers)] * 2)
    sleeps = SleepRecorder()
    with make_recording_client(svc.url, sleep=sleeps, retry=POLICY) as client:
        assert client.ask("x", Review).answers.toxic in (True, False)
    assert sleeps.seconds == [2.0, 2.0]


@pytest.mark.timeout(60)
def test_largest_policy_sleeps_at_most_a_day(svc: FakeService) -> None:
    # 1000 retries, a one-day first delay and cap, every server delay allowed up to a day.
    policy = qa.RetryPolicy(
        max_retries=1000,
        backoff_initial_ms=DAY_MS,
        backoff_max_ms=DAY_MS,
        max_retry_after_ms=DAY_MS,
        backoff_jitter=0,
    )
    headers = [("retry-after", "86401")]  # a second over the day: ignored
    svc.script(*[reply(503, None, headers=headers)] * 1001)
    sleeps = SleepRecorder()
    client = make_recording_client(svc.url, sleep=sleeps, retry=policy, retry_budget=None)
    with client, pytest.raises(qa.ServerError) as caught:
        client.list_models()
    assert caught.value.diagnostics.attempts == 1001
    assert len(sleeps.seconds) == 1000
    assert set(sleeps.seconds) == {86_400.0}


def test_server_delay_of_exactly_a_day_is_honoured_and_a_second_more_is_not(svc: FakeService) -> None:
    policy = qa.RetryPolicy(max_retries=2, backoff_initial_ms=100, max_retry_after_ms=DAY_MS)
    svc.script(
        reply(503, None, headers=[("retry-after", "86400")]),
        reply(503, None, headers=[("retry-after", "86400.001")]),
    )
    sleeps = SleepRecorder()
    with make_recording_client(svc.url, sleep=sleeps, retry=policy) as client:
        client.list_models()
    assert sleeps.seconds == [86_400.0, pytest.approx(0.2)]  # the day asked for; the backoff, computed


# Python prints an int of at most sys.get_int_max_str_digits() digits (4300 by default); a
# message that quoted a longer one raised ValueError in place of the error it was building.
def _entry_points(client: qa.Client) -> dict[str, tuple[type[qa.QAError], str, Any]]:
    ask = client.ask
    return {
        "Client(timeout=)": (qa.InvalidOption, "timeout", lambda v: qa.Client(timeout=v)),
        "Client(max_workers=)": (qa.InvalidOption, "max_workers", lambda v: qa.Client(max_workers=-v)),
        "Client(hooks=)": (qa.InvalidOption, "hooks: unknown stage", lambda v: qa.Client(hooks={v: []})),
        "RetryPolicy": (qa.InvalidOption, "max_retries", lambda v: qa.RetryPolicy(max_retries=v)),
        "RetryBudget": (qa.InvalidOption, "RetryBudget capacity", lambda v: qa.RetryBudget(capacity=v)),
        "RateLimit": (qa.InvalidOption, "RateLimit adaptive", lambda v: qa.RateLimit(adaptive=v)),
        "YesNo": (qa.InvalidQuestion, "the yes text", lambda v: qa.YesNo(v, "no")),
        "Score": (qa.InvalidQuestion, "a score takes", qa.Score),
        "ask(timeout=)": (qa.InvalidOption, "timeout", lambda v: ask("x", Review, timeout=v)),
        "ask(model=)": (qa.InvalidModel, "model", lambda v: ask("x", Review, model=v)),
        "ask(questions)": (qa.InvalidQuestion, "Questions subclass", lambda v: ask("x", v)),
        "submit(cancel=)": (qa.InvalidOption, "cancel", lambda v: client.submit(ask, "x", Review, cancel=v)),
    }


ENTRY_POINTS = [
    "Client(timeout=)",
    "Client(max_workers=)",
    "Client(hooks=)",
    "RetryPolicy",
    "RetryBudget",
    "RateLimit",
    "YesNo",
    "Score",
    "ask(timeout=)",
    "ask(model=)",
    "ask(questions)",
    "submit(cancel=)",
]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_an_int_too_long_to_print_is_refused_as_the_option_it_is(monkeypatch: Any, entry: str) -> None:
    import sys

    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    if not limit:
        pytest.skip("this Python prints every int")
    monkeypatch.delenv("SERVICE_API_KEY", raising=False)
    monkeypatch.setenv("SERVICE_BASE_URL", "http://qa.test")
    with qa.Client(transport=MockTransport()) as client:
        error, name, call = _entry_points(client)[entry]
        at_the_limit = 10 ** (limit - 1)  # `limit` digits: printed, and cut to 60 characters
        with pytest.raises(error, match=f"{name}.* -?10000000000+\\.\\.\\."):
            call(at_the_limit)
        one_past = 10**limit
        bits = one_past.bit_length()
        with pytest.raises(error, match=f"{name}.* an int of {bits} bits, too long to print"):
            call(one_past)

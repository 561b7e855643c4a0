"""Retries: the backoff formula, server-requested delays, status handling and the retry budget.

Every test injects ``sleep`` (recording the seconds asked for, returning at once) and, where the
jitter matters, ``random``, so that no test waits for a real backoff; one test keeps the real
sleep with a 1 ms backoff to prove the default path works too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import math
import pickle
import random
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, Optional

import pytest
from support import InProcessService, SleepRecorder, make_client, make_recording_client

import qa_min as qa
from qa_min._backoff import backoff_ms, server_delay_ms
from qa_min.testing import FakeService, Step, delay, reply


@pytest.fixture
def svc() -> Iterator[InProcessService]:
    """The service in-process (MockTransport): these tests are about the layers above the socket."""
    with InProcessService() as service:
        yield service


# A fixed "now" for HTTP-date parsing: 2023-11-14 22:13:20 GMT.
NOW = 1_700_000_000.0
# The largest float below 1: the supremum of U, which random() never reaches.
ALMOST_ONE = math.nextafter(1.0, 0.0)
ANSWER_BODY = {"answers": {"toxic": True}, "usage": {}}


class Toxic(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


def ask(client: qa.Client, **options: Any) -> qa.Diagnostics:
    """One call that must succeed; returns its diagnostics."""
    diag = qa.Diagnostics()
    client.ask("some text", Toxic, diagnostics=diag, **options)
    return diag


def ask_error(client: qa.Client, **options: Any) -> qa.QAError:
    """One call that must fail; returns its error (whose diagnostics were passed in)."""
    diag = qa.Diagnostics()
    with pytest.raises(qa.QAError) as info:
        client.ask("some text", Toxic, diagnostics=diag, **options)
    assert info.value.diagnostics is diag
    return info.value


# -- backoff_ms ------------------------------------------------------------------------------

DEFAULT_BASES_MS = [500.0, 1000.0, 2000.0, 4000.0, 5000.0, 5000.0, 5000.0]


@pytest.mark.parametrize(("k", "base"), list(enumerate(DEFAULT_BASES_MS)), ids=str)
def test_backoff_without_jitter_draw_is_initial_doubled_and_capped(k: int, base: float) -> None:
    assert backoff_ms(qa.RetryPolicy(), k, 0.0) == base


@pytest.mark.parametrize(("k", "base"), list(enumerate(DEFAULT_BASES_MS)), ids=str)
def test_backoff_with_jitter_draw_near_one_takes_off_at_most_a_quarter(k: int, base: float) -> None:
    value = backoff_ms(qa.RetryPolicy(), k, ALMOST_ONE)
    assert base * 0.75 <= value < base
    assert value == pytest.approx(base * 0.75)


@pytest.mark.parametrize(
    ("initial", "maximum", "k", "expected"),
    [
        pytest.param(100, 1000, 0, 100, id="below-cap"),
        pytest.param(100, 1000, 3, 800, id="still-below-cap"),
        pytest.param(100, 1000, 4, 1000, id="capped"),
        pytest.param(100, 1000, 50, 1000, id="capped-far-out"),
        pytest.param(100, 1000, 10_000, 1000, id="huge-retry-index-no-overflow"),
        pytest.param(300, 200, 0, 200, id="cap-below-initial"),
        pytest.param(0, 1000, 5, 0, id="zero-initial"),
        # The formula holds for every retry max_retries allows, however small the first delay.
        pytest.param(1e-15, 86_400_000, 64, 1e-15 * 2**64, id="tiny-initial-at-2**64"),
        pytest.param(1e-15, 86_400_000, 65, 1e-15 * 2**65, id="tiny-initial-past-2**64"),
        pytest.param(5e-324, 86_400_000, 999, 5e-324 * 2**999, id="smallest-initial-at-max-retries"),
        pytest.param(1e-15, 86_400_000, 10_000, 86_400_000, id="tiny-initial-huge-index-capped"),
    ],
)
def test_backoff_cap(initial: float, maximum: float, k: int, expected: float) -> None:
    policy = qa.RetryPolicy(backoff_initial_ms=initial, backoff_max_ms=maximum, backoff_jitter=0)
    assert backoff_ms(policy, k, 0.5) == expected


@pytest.mark.parametrize("uniform", [0.0, 0.3, ALMOST_ONE])
def test_backoff_with_zero_jitter_ignores_the_random_draw(uniform: float) -> None:
    policy = qa.RetryPolicy(backoff_jitter=0)
    assert [backoff_ms(policy, k, uniform) for k in range(7)] == DEFAULT_BASES_MS


def test_backoff_with_full_jitter_can_reach_almost_zero() -> None:
    policy = qa.RetryPolicy(backoff_jitter=1)
    assert backoff_ms(policy, 0, 0.0) == 500
    assert 0 < backoff_ms(policy, 0, ALMOST_ONE) < 1e-9


# -- RetryPolicy -----------------------------------------------------------------------------


def test_retry_policy_is_a_frozen_dataclass() -> None:
    policy = qa.RetryPolicy()
    assert dataclasses.is_dataclass(policy)
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.max_retries = 5  # type: ignore[misc]
    changed = dataclasses.replace(policy, max_retries=5)
    assert changed.max_retries == 5
    assert policy.max_retries == 2
    assert changed == qa.RetryPolicy(max_retries=5)


def test_retry_policy_defaults_match_spec() -> None:
    policy = qa.RetryPolicy()
    assert policy.max_retries == 2
    assert policy.backoff_initial_ms == 500
    assert policy.backoff_max_ms == 5000
    assert policy.backoff_jitter == 0.25
    assert policy.respect_retry_after is True
    assert policy.max_retry_after_ms == 60000
    assert policy.retry_connection_errors is True


@pytest.mark.parametrize(
    ("status", "retried"),
    [(s, True) for s in (408, 429, 500, 502, 503, 504, 529, 599)]
    + [(s, False) for s in (200, 302, 400, 401, 403, 404, 409, 418, 422, 499, 600)],
    ids=str,
)
def test_default_retry_status_is_408_429_and_5xx(status: int, retried: bool) -> None:
    assert qa.RetryPolicy().retry_status(status) is retried


def test_retry_policy_none_never_retries() -> None:
    assert isinstance(qa.RetryPolicy.none, qa.RetryPolicy)
    assert qa.RetryPolicy.none.max_retries == 0


def test_a_policy_pickles_as_the_public_class_and_loads_as_the_dataclass_in_a_fresh_process() -> None:
    # RetryPolicy becomes a frozen dataclass on first public use: a pickle names qa_min.RetryPolicy,
    # so loading it where nothing touched qa.RetryPolicy yet makes it the dataclass first.
    assert qa.RetryPolicy.__module__ == "qa_min"
    script = """
import dataclasses, pickle, sys
policy = pickle.loads(sys.stdin.buffer.read())
print(dataclasses.is_dataclass(policy), policy.max_retries, policy.backoff_jitter)
try:
    policy.max_retries = 1
except dataclasses.FrozenInstanceError:
    print("frozen")
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=pickle.dumps(qa.RetryPolicy(max_retries=5, backoff_jitter=0.5)),
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().split() == ["True", "5", "0.5", "frozen"]


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"max_retries": -1}, id="max_retries-negative"),
        pytest.param({"max_retries": 1.5}, id="max_retries-float"),
        pytest.param({"max_retries": True}, id="max_retries-bool"),
        pytest.param({"max_retries": "2"}, id="max_retries-str"),
        pytest.param({"backoff_initial_ms": -1}, id="backoff_initial_ms-negative"),
        pytest.param({"backoff_initial_ms": math.nan}, id="backoff_initial_ms-nan"),
        pytest.param({"backoff_initial_ms": "500"}, id="backoff_initial_ms-str"),
        pytest.param({"backoff_max_ms": -0.5}, id="backoff_max_ms-negative"),
        pytest.param({"backoff_max_ms": None}, id="backoff_max_ms-none"),
        pytest.param({"max_retry_after_ms": -1}, id="max_retry_after_ms-negative"),
        pytest.param({"max_retry_after_ms": False}, id="max_retry_after_ms-bool"),
        pytest.param({"backoff_jitter": -0.1}, id="jitter-negative"),
        pytest.param({"backoff_jitter": 1.1}, id="jitter-over-one"),
        pytest.param({"backoff_jitter": math.nan}, id="jitter-nan"),
        pytest.param({"retry_status": 503}, id="retry_status-not-callable"),
    ],
)
def test_invalid_retry_policy_raises_invalid_option(fields: dict[str, Any]) -> None:
    with pytest.raises(qa.InvalidOption):
        qa.RetryPolicy(**fields)


def test_replace_with_an_invalid_value_raises_invalid_option() -> None:
    with pytest.raises(qa.InvalidOption):
        dataclasses.replace(qa.RetryPolicy(), backoff_jitter=2)


def test_retry_option_that_is_not_a_policy_raises_invalid_option(svc: InProcessService) -> None:
    with pytest.raises(qa.InvalidOption):
        make_client(svc.url, retry={"max_retries": 1})
    with make_recording_client(svc.url) as client, pytest.raises(qa.InvalidOption):
        client.ask("text", Toxic, retry=3)  # type: ignore[arg-type]
    assert svc.requests == []


# -- server_delay_ms -------------------------------------------------------------------------


def http_date(timestamp: float) -> str:
    return email.utils.formatdate(timestamp, usegmt=True)


CAP = 60000.0


@pytest.mark.parametrize(
    ("ms", "seconds", "expected"),
    [
        pytest.param(None, None, None, id="no-header"),
        pytest.param("1500", None, 1500.0, id="ms"),
        pytest.param("1.5", None, 1.5, id="ms-fraction"),
        pytest.param("1", None, 1.0, id="ms-one"),
        pytest.param("0.5", None, 0.5, id="ms-below-one"),
        pytest.param(" 250 ", None, 250.0, id="ms-padded"),
        pytest.param(None, "2", 2000.0, id="seconds"),
        pytest.param(None, "0.5", 500.0, id="seconds-fraction"),
        pytest.param("1500", "2", 1500.0, id="ms-wins-over-seconds"),
        pytest.param("0", None, None, id="ms-zero"),
        pytest.param("-5", None, None, id="ms-negative"),
        pytest.param("abc", None, None, id="ms-garbage"),
        pytest.param("", None, None, id="ms-empty"),
        pytest.param("inf", None, None, id="ms-inf"),
        pytest.param("nan", None, None, id="ms-nan"),
        pytest.param("1e400", None, None, id="ms-overflows-to-inf"),
        pytest.param(None, "0", None, id="seconds-zero"),
        pytest.param(None, "-1", None, id="seconds-negative"),
        pytest.param(None, "soon", None, id="seconds-garbage"),
        pytest.param(None, "", None, id="seconds-empty"),
        pytest.param(None, "inf", None, id="seconds-inf"),
        pytest.param(None, "-inf", None, id="seconds-minus-inf"),
        pytest.param(None, "NaN", None, id="seconds-nan"),
        pytest.param(None, "1e308", None, id="seconds-overflow-when-scaled"),
        pytest.param("0", "2", 2000.0, id="ms-zero-ignored-seconds-used"),
        pytest.param("junk", "2", 2000.0, id="ms-garbage-ignored-seconds-used"),
        pytest.param("nan", "3", 3000.0, id="ms-nan-ignored-seconds-used"),
        pytest.param("60000", None, 60000.0, id="ms-exactly-cap"),
        pytest.param("60001", None, None, id="ms-cap-plus-one"),
        pytest.param("60000.001", None, None, id="ms-just-over-cap"),
        pytest.param(None, "60", 60000.0, id="seconds-exactly-cap"),
        pytest.param(None, "61", None, id="seconds-over-cap"),
        pytest.param("70000", "1", 1000.0, id="ms-over-cap-ignored-seconds-used"),
        pytest.param(http_date(NOW + 30), None, None, id="date-in-ms-header-is-garbage"),
        pytest.param(None, http_date(NOW + 30), 30000.0, id="date-future"),
        pytest.param(None, http_date(NOW + 60), 60000.0, id="date-exactly-cap"),
        pytest.param(None, http_date(NOW + 61), None, id="date-over-cap"),
        pytest.param(None, http_date(NOW), None, id="date-now"),
        pytest.param(None, http_date(NOW - 30), None, id="date-past"),
        pytest.param(None, "Tue, 14 Nov 2023 22:13:50 +0100", None, id="date-other-zone-in-past"),
        pytest.param(None, "Tue, 14 Nov 2023 21:14:00 -0100", 40000.0, id="date-other-zone-future"),
        pytest.param(None, "Fri, 01 Jan 99999 00:00:00 GMT", None, id="date-year-99999"),
        pytest.param(None, "Sat, 01 Jan 0 00:00:00 GMT", None, id="date-year-0"),
        pytest.param(None, "Sat, 01 Jan 0000 00:00:00 GMT", None, id="date-year-0000"),
        pytest.param(None, "Mon, 32 Foo 2023 25:61:61 GMT", None, id="date-mangled"),
        pytest.param(None, "Tue, 14 Nov 2023", None, id="date-without-time"),
        pytest.param("1500", http_date(NOW + 5), 1500.0, id="ms-wins-over-date"),
    ],
)
def test_server_delay_ms(ms: Optional[str], seconds: Optional[str], expected: Optional[float]) -> None:
    assert server_delay_ms(ms, seconds, CAP, NOW) == expected


@pytest.mark.parametrize(
    "text",
    [
        "14 Nov 2023 22:13:50 GMT",
        "1, 14 Nov 2023 22:13:50 GMT",
        "-1, 14 Nov 2023 22:13:50 GMT",
        "+1, 14 Nov 2023 22:13:50 GMT",
        ".5, 14 Nov 2023 22:13:50 GMT",
        "Inf, 14 Nov 2023 22:13:50 GMT",
        "NaN, 14 Nov 2023 22:13:50 GMT",
    ],
)
def test_a_retry_after_that_begins_as_a_number_is_a_bad_number_not_a_date(text: str) -> None:
    # Each is NOW + 30 s to email's lenient date parser (which skips a leading "day name"), but a
    # Retry-After that starts with a digit, a sign, a point, nan or inf is a number the server got
    # wrong: ignored as if absent, the backoff used. The same date with its day name is read.
    assert server_delay_ms(None, text, CAP, NOW) is None
    assert server_delay_ms(None, "Tue, " + text.rpartition(", ")[2].lstrip("+-"), CAP, NOW) == 30000.0


@pytest.mark.parametrize(
    "text",
    [
        "Fri, 01 Jan 99999 00:00:00 GMT",
        "Sat, 01 Jan -1 00:00:00 GMT",
        "Sun, 31 Dec 9999 23:59:59 -9999",
        "Mon, 01 Jan 1 00:00:00 +9999",
        "Mon, 99 Jan 2023 99:99:99 GMT",
        "\x00\xff",
        "9" * 400,
    ],
    ids=[
        "year-99999",
        "year-minus-1",
        "max-date-odd-zone",
        "year-1-odd-zone",
        "out-of-range-fields",
        "control-bytes",
        "huge-number",
    ],
)
def test_server_delay_ms_never_raises_on_hostile_dates(text: str) -> None:
    assert server_delay_ms(None, text, CAP, NOW) is None


def test_server_delay_ms_reads_dates_against_the_real_clock_by_default() -> None:
    value = server_delay_ms(None, http_date(time.time() + 30), CAP)
    assert value is not None
    assert 25000 < value <= 30000


# -- server-requested delays, end to end -----------------------------------------------------


@pytest.mark.parametrize(
    ("first", "policy", "expected_sleep"),
    [
        pytest.param(
            reply(429, headers=[("retry-after-ms", "1500")]), None, 1.5, id="429-retry-after-ms-honoured"
        ),
        pytest.param(reply(503, headers=[("Retry-After", "2")]), None, 2.0, id="503-retry-after-honoured"),
        pytest.param(
            reply(529, headers=[("retry-after-ms", "250"), ("Retry-After", "7")]),
            None,
            0.25,
            id="529-ms-header-wins",
        ),
        pytest.param(
            reply(429, headers=[("retry-after-ms", "120000")]), None, 0.5, id="429-too-long-backoff-used"
        ),
        pytest.param(
            reply(503, headers=[("Retry-After", "3600")]), None, 0.5, id="503-too-long-backoff-used"
        ),
        pytest.param(
            reply(429, headers=[("retry-after-ms", "garbage")]), None, 0.5, id="429-garbage-backoff-used"
        ),
        pytest.param(
            reply(429, headers=[("retry-after-ms", "1500")]),
            qa.RetryPolicy(respect_retry_after=False),
            0.5,
            id="429-not-respected-backoff-used",
        ),
        pytest.param(
            reply(429, headers=[("retry-after-ms", "90000")]),
            qa.RetryPolicy(max_retry_after_ms=100000),
            90.0,
            id="429-larger-cap-honoured",
        ),
        pytest.param(
            reply(400, headers=[("x-should-retry", "true"), ("retry-after-ms", "20")]),
            None,
            0.02,
            id="400-should-retry-honours-delay",
        ),
    ],
)
def test_server_requested_delay(
    svc: InProcessService, first: Step, policy: Optional[qa.RetryPolicy], expected_sleep: float
) -> None:
    svc.script(first)
    sleep = SleepRecorder()
    with make_recording_client(svc.url, sleep) as client:
        diag = ask(client, retry=policy)
    assert sleep.seconds == [pytest.approx(expected_sleep)]
    assert diag.attempts == 2
    assert len(svc.requests) == 2


def test_retry_after_http_date_is_honoured(svc: InProcessService) -> None:
    svc.script(reply(503, headers=[("Retry-After", http_date(time.time() + 3))]))
    sleep = SleepRecorder()
    with make_recording_client(svc.url, sleep) as client:
        assert ask(client).attempts == 2
    # The date has whole seconds, so up to one second of it has already passed.
    assert len(sleep.seconds) == 1
    assert 1.0 < sleep.seconds[0] <= 3.0


@pytest.mark.parametrize(
    ("status", "header", "error", "attempts"),
    [
        pytest.param(400, "true", qa.BadRequest, 3, id="400-should-retry-true-retried"),
        pytest.param(404, "TRUE", qa.NotFound, 3, id="404-should-retry-case-insensitive"),
        pytest.param(503, "false", qa.ServerError, 1, id="503-should-retry-false-not-retried"),
        pytest.param(429, "false", qa.RateLimited, 1, id="429-should-retry-false-not-retried"),
        pytest.param(503, "maybe", qa.ServerError, 3, id="503-should-retry-garbage-ignored"),
        pytest.param(400, "maybe", qa.BadRequest, 1, id="400-should-retry-garbage-ignored"),
    ],
)
def test_x_should_retry_overrides_retry_status(
    svc: InProcessService, status: int, header: str, error: type[qa.QAError], attempts: int
) -> None:
    svc.script(*[reply(status, {"detail": "x"}, headers=[("x-should-retry", header)])] * 5)
    with make_recording_client(svc.url) as client:
        exc = ask_error(client)
    assert type(exc) is error
    assert exc.diagnostics.attempts == attempts
    assert len(svc.requests) == attempts


def test_x_should_retry_true_on_400_then_success(svc: InProcessService) -> None:
    svc.script(reply(400, {"detail": "try again"}, headers=[("x-should-retry", "true")]))
    with make_recording_client(svc.url) as client:
        diag = ask(client)
    assert diag.attempts == 2
    assert diag.status == 200


def test_x_should_retry_true_does_not_exceed_max_retries(svc: InProcessService) -> None:
    svc.script(reply(400, {"detail": "x"}, headers=[("x-should-retry", "true")]))
    with make_recording_client(svc.url) as client:
        exc = ask_error(client, retry=qa.RetryPolicy.none)
    assert isinstance(exc, qa.BadRequest)
    assert exc.diagnostics.attempts == 1


# -- every status of SPEC section 5 ----------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error", "attempts"),
    [
        pytest.param(400, qa.BadRequest, 1, id="400-BadRequest-1-attempt"),
        pytest.param(401, qa.Unauthorized, 1, id="401-Unauthorized-1-attempt"),
        pytest.param(403, qa.PermissionDenied, 1, id="403-PermissionDenied-1-attempt"),
        pytest.param(404, qa.NotFound, 1, id="404-NotFound-1-attempt"),
        pytest.param(422, qa.UnprocessableEntity, 1, id="422-UnprocessableEntity-1-attempt"),
        pytest.param(408, qa.RequestTimeout, 3, id="408-RequestTimeout-3-attempts"),
        pytest.param(429, qa.RateLimited, 3, id="429-RateLimited-3-attempts"),
        pytest.param(529, qa.Overloaded, 3, id="529-Overloaded-3-attempts"),
        pytest.param(500, qa.ServerError, 3, id="500-ServerError-3-attempts"),
        pytest.param(502, qa.ServerError, 3, id="502-ServerError-3-attempts"),
        pytest.param(503, qa.ServerError, 3, id="503-ServerError-3-attempts"),
        pytest.param(504, qa.ServerError, 3, id="504-ServerError-3-attempts"),
        pytest.param(599, qa.ServerError, 3, id="599-ServerError-3-attempts"),
        pytest.param(409, qa.UnexpectedStatus, 1, id="409-UnexpectedStatus-1-attempt"),
        pytest.param(418, qa.UnexpectedStatus, 1, id="418-UnexpectedStatus-1-attempt"),
        pytest.param(300, qa.UnexpectedStatus, 1, id="300-UnexpectedStatus-1-attempt"),
        pytest.param(304, qa.UnexpectedStatus, 1, id="304-UnexpectedStatus-1-attempt"),
    ],
)
def test_status_maps_to_error_after_attempts(
    svc: InProcessService, status: int, error: type[qa.APIStatusError], attempts: int
) -> None:
    body = {"detail": f"the detail of {status}"}
    svc.script(*[reply(status, body)] * 5)
    sleep = SleepRecorder()
    with make_recording_client(svc.url, sleep) as client:
        exc = ask_error(client)
    assert type(exc) is error
    assert isinstance(exc, qa.APIStatusError)
    assert exc.status == status
    assert str(status) in str(exc)
    if status != 304:  # a 304 has no body by definition; http.client reads none
        assert f"the detail of {status}" in str(exc)
        assert exc.diagnostics.body is not None
        assert f"the detail of {status}" in exc.diagnostics.body
    assert exc.diagnostics.status == status
    assert exc.diagnostics.attempts == attempts
    assert exc.diagnostics.transport_error is None
    assert len(svc.requests) == attempts
    assert len(sleep.seconds) == attempts - 1


@pytest.mark.parametrize("status", [429, 529])
def test_rate_limited_and_overloaded_share_service_busy(svc: InProcessService, status: int) -> None:
    svc.script(reply(status))
    with make_recording_client(svc.url) as client:
        exc = ask_error(client, retry=qa.RetryPolicy.none)
    assert isinstance(exc, qa.ServiceBusy)


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirect_is_unexpected_status_and_not_followed(svc: InProcessService, status: int) -> None:
    with FakeService() as elsewhere:
        svc.script(reply(status, headers=[("Location", f"{elsewhere.url}/v1/core")]))
        with make_recording_client(svc.url, api_key="sk-secret") as client:
            exc = ask_error(client)
        assert elsewhere.requests == []
    assert isinstance(exc, qa.UnexpectedStatus)
    assert exc.status == status
    assert exc.diagnostics.attempts == 1
    assert exc.diagnostics.status == status
    assert len(svc.requests) == 1


@pytest.mark.parametrize("status", [200, 201, 203, 299])
def test_any_2xx_is_success(svc: InProcessService, status: int) -> None:
    svc.script(reply(status, ANSWER_BODY))
    with make_recording_client(svc.url) as client:
        diag = ask(client)
    assert diag.status == status
    assert diag.attempts == 1


def test_success_after_retry_fills_diagnostics(svc: InProcessService) -> None:
    svc.script(reply(503, "busy now"))
    with make_recording_client(svc.url) as client:
        diag = ask(client)
    assert diag.status == 200
    assert diag.attempts == 2
    # SPEC: body is the last non-2xx body.
    assert diag.body == "busy now"


def test_custom_retry_status_decides_which_statuses_are_retried(svc: InProcessService) -> None:
    policy = qa.RetryPolicy(retry_status=lambda status: status == 409)
    svc.script(reply(409), reply(503))
    with make_recording_client(svc.url) as client:
        exc = ask_error(client, retry=policy)
    assert isinstance(exc, qa.ServerError)
    assert exc.diagnostics.attempts == 2


@pytest.mark.parametrize(
    ("policy", "attempts"),
    [
        pytest.param(qa.RetryPolicy.none, 1, id="none-1-attempt"),
        pytest.param(qa.RetryPolicy(max_retries=1), 2, id="max1-2-attempts"),
        pytest.param(qa.RetryPolicy(max_retries=5), 6, id="max5-6-attempts"),
    ],
)
def test_max_retries_bounds_attempts(svc: InProcessService, policy: qa.RetryPolicy, attempts: int) -> None:
    svc.script(*[reply(503)] * 10)
    with make_recording_client(svc.url, retry_budget=None) as client:
        exc = ask_error(client, retry=policy)
    assert isinstance(exc, qa.ServerError)
    assert exc.diagnostics.attempts == attempts
    assert len(svc.requests) == attempts


def test_client_wide_policy_is_used_unless_the_call_passes_one(svc: InProcessService) -> None:
    svc.script(*[reply(503)] * 10)
    with make_recording_client(svc.url, retry=qa.RetryPolicy.none) as client:
        assert ask_error(client).diagnostics.attempts == 1
        assert ask_error(client, retry=qa.RetryPolicy(max_retries=1)).diagnostics.attempts == 2


class RetryStatusBug(Exception):
    """A caller's own bug, raised by their ``retry_status``."""


def _retry_status_raising_after(judged: int) -> Any:
    """A ``retry_status`` that retries ``judged`` statuses, then raises on the next one."""
    seen: list[int] = []

    def retry_status(status: int) -> bool:
        seen.append(status)
        if len(seen) > judged:
            raise RetryStatusBug(f"no rule for {status}")
        return True

    return retry_status


def _ask_with_a_broken_retry_status(
    kind: str, url: str, options: dict[str, Any], diag: qa.Diagnostics
) -> tuple[BaseException, qa.AskResponse[Toxic]]:
    """The call that raises, then a call that succeeds on the same client; both returned."""
    if kind == "Client":
        with qa.Client(base_url=url, trust_env=False, sleep=lambda s, wake: None, **options) as client:
            with pytest.raises(RetryStatusBug) as caught:
                client.ask("some text", Toxic, diagnostics=diag)
            return caught.value, client.ask("some text", Toxic)

    async def nap(seconds: float) -> None:
        pass

    async def main() -> tuple[BaseException, qa.AskResponse[Toxic]]:
        async with qa.AsyncClient(base_url=url, trust_env=False, sleep=nap, **options) as client:
            with pytest.raises(RetryStatusBug) as caught:
                await client.ask("some text", Toxic, diagnostics=diag)
            return caught.value, await client.ask("some text", Toxic)

    return asyncio.run(main())


@pytest.mark.parametrize("judged", [0, 1], ids=["raises-on-the-first", "raises-after-one-retry"])
@pytest.mark.parametrize("kind", ["Client", "AsyncClient"])
def test_a_retry_status_that_raises_ends_the_call_with_its_exception(kind: str, judged: int) -> None:
    # The caller's bug: their exception, unchanged, once the call has ended as any other does.
    events: list[tuple[int, Optional[int], str]] = []
    hooks = {"after_attempt": [lambda e: events.append((e.attempt, e.status, type(e.error).__name__))]}
    policy = qa.RetryPolicy(retry_status=_retry_status_raising_after(judged))
    diag = qa.Diagnostics()
    with FakeService() as service:
        service.script(*[reply(503, {"detail": "busy"})] * (judged + 1))
        options = {"retry": policy, "hooks": hooks, "rate_limit": None}
        raised, after = _ask_with_a_broken_retry_status(kind, service.url, options, diag)
        connections = service.connections
    assert type(raised) is RetryStatusBug
    assert str(raised) == "no rule for 503"
    assert diag.attempts == judged + 1
    assert diag.status == 503
    assert diag.body == '{"detail": "busy"}'
    assert [(a.number, a.status, a.error) for a in diag.history] == [
        *[(n + 1, 503, "ServerError") for n in range(judged)],
        (judged + 1, 503, "RetryStatusBug"),
    ]
    # The after-attempt hooks saw each attempt as the history has it, then the next call's.
    assert events == [*((a.number, a.status, a.error) for a in diag.history), (1, 200, "NoneType")]
    # The response was read whole: its connection went back to the pool and served the next call.
    assert after.diagnostics.attempts == 1
    assert connections == 1


def test_a_random_that_raises_ends_the_call_with_its_exception(svc: InProcessService) -> None:
    def draw() -> float:
        raise RetryStatusBug("no draw")

    svc.script(reply(503))
    diag = qa.Diagnostics()
    budget = qa.RetryBudget(capacity=10, retry_cost=5)
    with (
        make_recording_client(svc.url, rand=draw, retry_budget=budget) as client,
        pytest.raises(RetryStatusBug, match=r"^no draw$"),
    ):
        client.ask("some text", Toxic, diagnostics=diag)
    assert (diag.attempts, diag.status) == (1, 503)
    assert [(a.status, a.error) for a in diag.history] == [(503, "RetryStatusBug")]
    assert budget.tokens == 10  # no retry was made, so none was paid for


# -- the acceptance line: a server that always answers 503 -----------------------------------
# -- the acceptance line: a server that always answers 503 -----------------------------------


def bounds_s(policy: qa.RetryPolicy, retries: int) -> tuple[float, float]:
    """(lowest, highest) total backoff in seconds the formula allows for ``retries`` retries."""
    low = sum(backoff_ms(policy, k, ALMOST_ONE) for k in range(retries)) / 1000
    high = sum(backoff_ms(policy, k, 0.0) for k in range(retries)) / 1000
    return low, high


@pytest.mark.parametrize("seed", [0, 1, 2, 12345])
def test_always_503_makes_3_attempts_and_sleeps_within_formula_bounds(
    svc: InProcessService, seed: int
) -> None:
    svc.script(*[reply(503, {"detail": "unavailable"})] * 10)
    sleep = SleepRecorder()
    with make_recording_client(svc.url, sleep, rand=random.Random(seed).random) as client:
        exc = ask_error(client)
    assert isinstance(exc, qa.ServerError)
    assert exc.diagnostics.attempts == 3
    assert exc.diagnostics.status == 503
    assert len(svc.requests) == 3
    low, high = bounds_s(qa.RetryPolicy(), 2)
    assert low <= sum(sleep.seconds) <= high
    # Each sleep is exactly the formula fed with the injected draws, in order.
    draws = random.Random(seed)
    expected = [backoff_ms(qa.RetryPolicy(), k, draws.random()) / 1000 for k in range(2)]
    assert sleep.seconds == pytest.approx(expected)


@pytest.mark.parametrize(
    ("draw", "total"), [pytest.param(0.0, 1.5, id="U-0"), pytest.param(ALMOST_ONE, 1.125, id="U-to-1")]
)
def test_always_503_total_sleep_at_the_formula_extremes(
    svc: InProcessService, draw: float, total: float
) -> None:
    svc.script(*[reply(503)] * 10)
    sleep = SleepRecorder()
    with make_recording_client(svc.url, sleep, rand=lambda: draw) as client:
        ask_error(client)
    assert sum(sleep.seconds) == pytest.approx(total)


def test_always_503_with_real_sleep_and_tiny_backoff(svc: InProcessService) -> None:
    svc.script(*[reply(503)] * 10)
    policy = qa.RetryPolicy(backoff_initial_ms=1)
    with make_client(svc.url, retry=policy) as client:
        started = time.monotonic()
        with pytest.raises(qa.ServerError) as info:
            client.ask("text", Toxic)
        elapsed = time.monotonic() - started
    assert info.value.diagnostics.attempts == 3
    assert len(svc.requests) == 3
    assert elapsed < 2.0


# -- the retry budget ------------------------------------------------------------------------


def test_retry_budget_validation() -> None:
    for bad in (-1, math.nan, "5", True, None):
        with pytest.raises(qa.InvalidOption):
            qa.RetryBudget(capacity=bad)  # type: ignore[arg-type]
        with pytest.raises(qa.InvalidOption):
            qa.RetryBudget(retry_cost=bad)  # type: ignore[arg-type]
        with pytest.raises(qa.InvalidOption):
            qa.RetryBudget(success_refund=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["capacity", "retry_cost", "success_refund"])
def test_retry_budget_numbers_at_their_limits_and_one_past(name: str) -> None:
    # 1e15 was refused as "must be a finite number >= 0, got 1e+15", which it is.
    for good in (0, 0.0, math.nextafter(1e15, 0.0), 10**15 - 1):
        assert getattr(qa.RetryBudget(**{name: good}), name) == float(good)
    for bad in (1e15, 10**15, math.nextafter(0.0, -1.0), -1, math.inf):
        refused = f"^RetryBudget {name} must be a number from 0 to below 1e15, got {re.escape(repr(bad))}$"
        with pytest.raises(qa.InvalidOption, match=refused):
            qa.RetryBudget(**{name: bad})


def test_retry_budget_option_must_be_a_budget_or_none(svc: InProcessService) -> None:
    with pytest.raises(qa.InvalidOption):
        make_client(svc.url, retry_budget=10)


def attempts_of(client: qa.Client) -> int:
    """Attempts of one call, whatever its outcome."""
    diag = qa.Diagnostics()
    try:
        client.ask("some text", Toxic, diagnostics=diag)
    except qa.ServerError:
        pass
    return diag.attempts


def test_the_default_budget_pays_for_exactly_100_retries(svc: InProcessService) -> None:
    # retries.md: RetryBudget(capacity=500, retry_cost=5, success_refund=1), "its 500 tokens pay
    # for 100 retries, after which each call makes one attempt". The client makes that budget.
    budget = qa.RetryBudget()
    assert (budget.capacity, budget.retry_cost, budget.success_refund) == (500.0, 5.0, 1.0)
    svc.script(*[reply(503)] * 102)
    with make_recording_client(svc.url, retry=qa.RetryPolicy(max_retries=1000)) as client:
        assert attempts_of(client) == 101  # the first attempt and the 100 retries paid for
        assert attempts_of(client) == 1
    assert len(svc.requests) == 102


def test_a_retry_is_paid_while_the_tokens_left_reach_its_cost() -> None:
    budget = qa.RetryBudget(capacity=10, retry_cost=5)
    assert budget.try_spend() is True
    assert budget.try_spend() is True  # exactly the cost left
    assert budget.tokens == 0.0
    assert budget.try_spend() is False  # refused, taking nothing
    assert budget.tokens == 0.0
    short = qa.RetryBudget(capacity=math.nextafter(5.0, 0.0), retry_cost=5)
    assert short.try_spend() is False


def test_drained_budget_allows_one_attempt_per_call_until_successes_refill_it(svc: InProcessService) -> None:
    budget = qa.RetryBudget(capacity=10, retry_cost=5, success_refund=5)
    with make_recording_client(svc.url, retry_budget=budget) as client:
        # A dead server: the first call spends the whole bucket on its two retries.
        svc.script(*[reply(503)] * 5)
        assert [attempts_of(client) for _ in range(3)] == [3, 1, 1]
        assert budget.tokens == 0
        assert len(svc.requests) == 5

        # One success refills one retry's worth; the next failing call gets exactly one retry.
        svc.script(delay(0), reply(503), reply(503))
        assert attempts_of(client) == 1  # the success
        assert budget.tokens == 5
        assert attempts_of(client) == 2
        assert budget.tokens == 0

        # Two successes fill the bucket: a failing call gets its full two retries again.
        svc.script(delay(0), delay(0), *[reply(503)] * 3)
        assert [attempts_of(client) for _ in range(3)] == [1, 1, 3]
        assert budget.tokens == 0


def test_drained_budget_raises_the_attempts_own_error(svc: InProcessService) -> None:
    budget = qa.RetryBudget(capacity=5, retry_cost=5, success_refund=5)
    svc.script(*[reply(503, {"detail": "down"})] * 3)
    with make_recording_client(svc.url, retry_budget=budget) as client:
        assert attempts_of(client) == 2
        exc = ask_error(client)
    assert isinstance(exc, qa.ServerError)
    assert exc.diagnostics.attempts == 1
    assert exc.diagnostics.status == 503


def free_port() -> int:
    """A port nobody listens on: bound then released, so a connect is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_server_drains_the_budget_too() -> None:
    budget = qa.RetryBudget(capacity=10, retry_cost=5, success_refund=5)
    with make_recording_client(f"http://127.0.0.1:{free_port()}", retry_budget=budget) as client:
        attempts = []
        for _ in range(3):
            diag = qa.Diagnostics()
            with pytest.raises(qa.ConnectionFailed):
                client.ask("text", Toxic, diagnostics=diag)
            attempts.append(diag.attempts)
    assert attempts == [3, 1, 1]


def test_no_retry_budget_never_limits_retries(svc: InProcessService) -> None:
    svc.script(*[reply(503)] * 30)
    with make_recording_client(svc.url, retry_budget=None) as client:
        assert [attempts_of(client) for _ in range(10)] == [3] * 10
    assert len(svc.requests) == 30


def test_default_budget_never_engages_in_normal_operation(svc: InProcessService) -> None:
    # 200 calls, every tenth meeting one 503: each of those must still get its retry.
    steps: list[Step] = []
    for i in range(200):
        if i % 10 == 0:
            steps.append(reply(503))
        steps.append(delay(0))
    svc.script(*steps)
    with make_recording_client(svc.url) as client:
        attempts = [ask(client).attempts for _ in range(200)]
    assert attempts == [2 if i % 10 == 0 else 1 for i in range(200)]
    assert len(svc.requests) == 220


def test_retry_budget_is_shared_by_the_clients_threads(svc: InProcessService) -> None:
    budget = qa.RetryBudget(capacity=10, retry_cost=5, success_refund=0)
    svc.script(*[reply(503)] * 40)
    outcomes: list[int] = []
    lock = threading.Lock()
    with make_recording_client(svc.url, retry_budget=budget) as client:

        def worker() -> None:
            for _ in range(3):
                n = attempts_of(client)
                with lock:
                    outcomes.append(n)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    # Twelve failing calls across four threads could pay for only two retries in total.
    assert len(outcomes) == 12
    assert sum(outcomes) == 12 + 2


@pytest.mark.skipif(sys.platform == "win32", reason="needs resource.setrlimit")
def test_the_default_jitter_needs_no_file_when_descriptors_run_out() -> None:
    # A connect that ran out of file descriptors is retried; drawing that retry's jitter
    # imported ``random`` (an import opens files), which raised a raw OSError instead.
    script = """
import os, resource, sys
import qa_min as qa
from qa_min.testing import MockTransport, reply
sys.modules.pop("random", None)
answers = iter([reply(503), reply(200, {"answers": {"ok": True}})])
class Q(qa.Questions):
    ok = qa.YesNo("y", "n")
with qa.Client(api_key="k", base_url="http://qa.test", trust_env=False,
               transport=MockTransport(lambda request: next(answers)),
               sleep=lambda seconds, wake: None) as client:
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    held = []
    try:
        while True:
            held.append(os.dup(0))
    except OSError:
        pass
    print(client.ask("x", Q).answers.ok, "random" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]

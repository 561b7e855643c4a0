"""Announced rate limits: parsing every form (``_announced``), the fake announcing them, and the
client pacing by them and showing them.

Spec line -> tests (SPEC.md 7a; the rate-limit and fleet issue):

  IETF draft-11 RateLimit/RateLimit-Policy; several policies: the most restrictive
      test_ietf_structured_fields, test_several_policies_take_the_most_restrictive,
      test_a_field_sent_as_several_lines_is_one_list, test_a_quota_of_another_unit_is_not_a_rate_of_calls,
      test_the_singular_quota_unit_of_an_intermediate_draft_is_requests,
      test_a_quoted_name_may_hold_commas_and_semicolons, test_a_policy_without_a_window_tells_no_rate,
      test_a_quota_back_now_is_compared_as_if_back_in_a_millisecond
  older drafts: RateLimit: limit=, remaining=, reset=; RateLimit-Limit/-Remaining/-Reset
      test_older_draft_forms
  OpenAI x-ratelimit-*-requests (reset a duration); Anthropic (reset an RFC 3339 time);
  GitHub x-ratelimit-* (reset epoch seconds)
      test_openai_durations, test_anthropic_rfc3339_reset, test_github_epoch_reset,
      test_each_family_as_servers_write_it (real servers' shapes, exact numbers),
      test_an_rfc3339_reset_at_each_fields_limit_is_read (and one past: no reset)
  a malformed field is ignored, never an error
      test_malformed_fields_are_ignored, test_a_reset_at_a_time_that_does_not_exist_is_no_reset,
      test_a_rate_past_the_largest_float_is_no_rate, test_a_duration_is_never_a_time,
      test_a_number_from_1e300_up_is_ignored,
      tests/test_fuzz_announced.py (hypothesis: any fields, and each family well formed)
  the fake announces in each style; qa-min fake --announce; bad values refused
      test_fake_announces_its_bucket_in_each_style, test_fake_refuses_a_bad_announce_style,
      test_cli_fake_accepts_announce
  client.rate_limit shows the announced limit; a client paces by it before any 429
      test_client_shows_the_announced_limit_and_paces_by_it, tests/test_ratelimit_shown.py (both
      clients, each style, odd announcements)
"""

from __future__ import annotations

import math
import threading
import time

import pytest

import qa_min as qa
from qa_min._announced import Announcement, parse
from qa_min._fakerules import ANNOUNCE_STYLES, announce_headers
from qa_min._policy import BETA, STALE, Policy
from qa_min._steer import BASE, RAMP, SILENT, START, TOP, Steer
from qa_min.testing import FakeService

WALL = 1_764_000_000.0  # 2025-11-24T16:00:00Z


def one(*fields: tuple[str, str]) -> Announcement:
    found = parse(fields, WALL)
    assert found is not None
    return found


def test_ietf_structured_fields() -> None:
    found = one(("RateLimit-Policy", '"default";q=100;w=10'), ("RateLimit", '"default";r=50;t=30'))
    assert (found.style, found.limit, found.remaining, found.reset) == ("ietf", 100, 50, 30)
    assert found.refill == pytest.approx(10.0)
    # Without the policy: remaining and reset alone, no refill told.
    bare = one(("ratelimit", '"default";r=5;t=2'))
    assert (bare.remaining, bare.reset, bare.refill) == (5, 2, 0.0)


def test_several_policies_take_the_most_restrictive() -> None:
    found = one(
        ("RateLimit-Policy", '"burst";q=100;w=1, "daily";q=1000;w=86400'),
        ("RateLimit", '"burst";r=99;t=1, "daily";r=900;t=40000'),
    )
    assert found.refill == pytest.approx(1000 / 86400)
    assert found.remaining == 900
    older = one(
        ("RateLimit-Limit", "100"), ("RateLimit-Remaining", "7"), ("RateLimit-Policy", "100;w=10, 50;w=60")
    )
    assert older.refill == pytest.approx(50 / 60)


def test_a_quota_back_now_is_compared_as_if_back_in_a_millisecond() -> None:
    # With no refill told, policies are compared by what is left per second of reset; a reset of 0
    # counts as 1 ms: 1 left now allows 1000/s, just more than 1.8 left in 2 ms (900/s).
    tighter = one(("RateLimit", '"now";r=1;t=0, "soon";r=1.8;t=0.002'))
    assert (tighter.remaining, tighter.reset) == (1.8, 0.002)
    # ...and just less than 2.2 left in 2 ms (1100/s).
    looser = one(("RateLimit", '"now";r=1;t=0, "soon";r=2.2;t=0.002'))
    assert (looser.remaining, looser.reset) == (1, 0.0)


def test_a_field_sent_as_several_lines_is_one_list() -> None:
    # RFC 9110 5.3: repeated lines of a list field are one field; the tighter policy "b" is on
    # the second line of each, and must not be missed.
    lines = one(
        ("RateLimit-Policy", '"a";q=100;w=10'),
        ("RateLimit-Policy", '"b";q=10;w=10'),
        ("RateLimit", '"a";r=50;t=3'),
        ("ratelimit", '"b";r=5;t=3'),
    )
    assert (lines.limit, lines.remaining) == (10, 5)
    assert lines.refill == pytest.approx(1.0)
    # A field that holds one number is not a list: its first line counts, as before.
    first = one(("x-ratelimit-remaining-requests", "7"), ("x-ratelimit-remaining-requests", "3"))
    assert first.remaining == 7


def test_a_quota_of_another_unit_is_not_a_rate_of_calls() -> None:
    # Draft-11's qu: a quota of content-bytes (here the smallest number) says nothing of calls.
    found = one(
        ("RateLimit-Policy", '"bytes";q=5;qu="content-bytes";w=1, "calls";q=100;w=10'),
        ("RateLimit", '"bytes";r=1;t=1, "calls";r=50;t=3'),
    )
    assert (found.limit, found.remaining) == (100, 50)
    assert found.refill == pytest.approx(10.0)
    explicit = one(("RateLimit-Policy", '"c";q=30;qu="requests";w=3'), ("RateLimit", '"c";r=3;t=1'))
    assert explicit.refill == pytest.approx(10.0)
    assert (
        parse([("RateLimit-Policy", '"n";q=4;qu="concurrent-requests"'), ("RateLimit", '"n";r=1')], WALL)
        is None
    )


@pytest.mark.parametrize(
    ("unit", "refill"),
    [("requests", 10.0), ("request", 10.0), ("content-bytes", None), ("Request", None), ("requestss", None)],
)
def test_the_singular_quota_unit_of_an_intermediate_draft_is_requests(
    unit: str, refill: float | None
) -> None:
    # qu="request" (as some servers write it) was read as another unit: the policy left out,
    # its RateLimit item with it, so parse() found nothing at all.
    found = parse([("RateLimit-Policy", f'"p";q=100;w=10;qu="{unit}"'), ("RateLimit", '"p";r=50;t=5')], WALL)
    if refill is None:
        assert found is None
        return
    assert found is not None
    assert (found.style, found.limit, found.remaining, found.reset) == ("ietf", 100, 50, 5)
    assert found.refill == pytest.approx(refill)


def test_a_policy_without_a_window_tells_no_rate() -> None:
    # Draft-11 (3.1) makes w optional and gives it no default. Read as one second, "daily";q=1000
    # was a refill of 1000/s, and a client with 5 calls left for an hour paced at 125/s.
    found = one(("RateLimit-Policy", '"daily";q=1000'), ("RateLimit", '"daily";r=5;t=3600'))
    assert (found.limit, found.remaining, found.reset, found.refill) == (1000, 5, 3600, 0.0)
    # Beside a windowed policy it is still the most restrictive: 5 left in an hour, not 10/s.
    both = one(
        ("RateLimit-Policy", '"burst";q=100;w=10, "daily";q=1000'),
        ("RateLimit", '"burst";r=90;t=5, "daily";r=5;t=3600'),
    )
    assert (both.limit, both.remaining, both.reset, both.refill) == (1000, 5, 3600, 0.0)


def test_a_quoted_name_may_hold_commas_and_semicolons() -> None:
    # RFC 8941 3.3.3: a policy's name is a quoted string, which may hold "," and ";" (the list's
    # and the parameters' separators) and escaped quotes. Split at every comma, "x,y" would read
    # as a second "y" and its tight quota would be lost.
    found = one(
        ("RateLimit-Policy", '"x,y";q=10;w=10, "y";q=100;w=10'),
        ("RateLimit", '"x,y";r=5;t=3, "y";r=50;t=3'),
    )
    assert (found.limit, found.remaining, found.reset) == (10, 5, 3)
    assert found.refill == pytest.approx(1.0)
    # An escaped quote does not end the name: its ";q=1;w=1" is part of it, not parameters.
    escaped = one(
        ("RateLimit-Policy", r'"a\";q=1;w=1";q=6;w=2, "b";q=100;w=1'),
        ("RateLimit", r'"a\";q=1;w=1";r=4;t=1, "b";r=90;t=1'),
    )
    assert (escaped.limit, escaped.remaining) == (6, 4)
    assert escaped.refill == pytest.approx(3.0)


def test_older_draft_forms() -> None:
    found = one(("RateLimit", "limit=100, remaining=50, reset=5"))
    assert (found.style, found.limit, found.remaining, found.reset, found.refill) == (
        "ietf-draft",
        100,
        50,
        5,
        0.0,
    )
    split = one(("RateLimit-Limit", "100"), ("RateLimit-Remaining", "0"), ("RateLimit-Reset", "12"))
    assert (split.limit, split.remaining, split.reset) == (100, 0, 12)
    stamped = one(("RateLimit-Limit", "10"), ("RateLimit-Remaining", "3"), ("RateLimit-Reset", str(WALL + 7)))
    assert stamped.reset == pytest.approx(7.0)
    # An older draft named the window in the limit itself; a RateLimit-Policy still wins.
    windowed = one(
        ("RateLimit-Limit", "100, 100;w=10"), ("RateLimit-Remaining", "42"), ("RateLimit-Reset", "3")
    )
    assert windowed.limit == 100
    assert windowed.refill == pytest.approx(10.0)
    told = one(
        ("RateLimit-Limit", "100, 100;w=10"), ("RateLimit-Remaining", "4"), ("RateLimit-Policy", "100;w=50")
    )
    assert told.refill == pytest.approx(2.0)
    # The limit field as one policy with its window: the number before the parameters.
    own = one(("RateLimit-Limit", "10;w=1"), ("RateLimit-Remaining", "4"), ("RateLimit-Reset", "2"))
    assert (own.limit, own.remaining, own.reset) == (10, 4, 2)
    assert own.refill == pytest.approx(10.0)
    # The limit is the list's first number, not a policy's quota after it.
    listed = one(("RateLimit-Limit", "10, 1000;w=3600, 10;w=1"), ("RateLimit-Remaining", "4"))
    assert (listed.limit, listed.remaining) == (10, 4)
    assert listed.refill == pytest.approx(1000 / 3600)


@pytest.mark.parametrize(
    ("reset", "seconds"),
    [
        ("12ms", 0.012),
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("1h2m3.5s", 3723.5),
        ("0.5", 0.5),
        ("20ms", 0.02),
        ("500\u00b5s", 0.0005),  # below a millisecond Go writes micro as U+00B5...
        ("1.5\u03bcs", 1.5e-6),  # ...and its parser takes U+03BC...
        ("750us", 0.00075),  # ...and us
        ("2\xc2\xb5s", 2e-6),  # U+00B5 in UTF-8, as a header value read as ISO-8859-1 holds it
        ("3\xce\xbcs", 3e-6),  # U+03BC likewise
        ("900ns", 9e-7),
        ("1m0.5s250ms", 60.75),
    ],
)
def test_openai_durations(reset: str, seconds: float) -> None:
    found = one(
        ("x-ratelimit-limit-requests", "60"),
        ("x-ratelimit-remaining-requests", "59"),
        ("x-ratelimit-reset-requests", reset),
    )
    assert found.style == "openai"
    assert found.reset == pytest.approx(seconds)
    assert found.refill == pytest.approx(1 / seconds)  # a bucket: what it lacks, back by then


def test_anthropic_rfc3339_reset() -> None:
    found = one(
        ("anthropic-ratelimit-requests-limit", "50"),
        ("anthropic-ratelimit-requests-remaining", "40"),
        ("anthropic-ratelimit-requests-reset", "2025-11-24T16:00:02.5Z"),
    )
    assert (found.style, found.remaining) == ("anthropic", 40)
    assert found.reset == pytest.approx(2.5)
    assert found.refill == pytest.approx(10 / 2.5)
    offset = one(
        ("anthropic-ratelimit-requests-limit", "50"),
        ("anthropic-ratelimit-requests-remaining", "40"),
        ("anthropic-ratelimit-requests-reset", "2025-11-24T17:00:04+01:00"),
    )
    assert offset.reset == pytest.approx(4.0)


def test_github_epoch_reset() -> None:
    found = one(
        ("X-RateLimit-Limit", "5000"),
        ("X-RateLimit-Remaining", "4999"),
        ("X-RateLimit-Reset", str(int(WALL) + 60)),
    )
    assert (found.style, found.remaining, found.reset, found.refill) == ("github", 4999, 60.0, 0.0)


def test_an_epoch_reset_in_milliseconds_is_read_as_one() -> None:
    def reset(value: str) -> float:
        fields = (("X-RateLimit-Limit", "50"), ("X-RateLimit-Remaining", "49"), ("X-RateLimit-Reset", value))
        return one(*fields).reset

    assert reset(str(int(WALL * 1000) + 60_000)) == pytest.approx(60.0, abs=1e-3)  # as some services send
    assert reset("1000000000000") == pytest.approx(0.0)  # exactly 1e12: milliseconds (2001), long past
    assert reset("999999999999") > 1e11  # one below: epoch seconds (the year 33658), far ahead


OPENAI = ("x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests")
ANTHROPIC = tuple(f"anthropic-ratelimit-requests-{part}" for part in ("limit", "remaining", "reset"))


def family(names: tuple[str, ...], *values: str) -> list[tuple[str, str]]:
    return list(zip(names, values))


# Each family as real servers write it: (fields, (style, limit, remaining, reset, refill)).
SHAPES = {
    # draft-11's own example of two policies; the hourly one, second, refills slower (0.28/s).
    "ietf two policies, the second tighter": (
        [
            ("RateLimit-Policy", '"permin";q=50;w=60,"perhr";q=1000;w=3600'),
            ("RateLimit", '"permin";r=49;t=60,"perhr";r=999;t=3600'),
        ],
        ("ietf", 1000, 999, 3600, 1000 / 3600),
    ),
    # draft-11's quota of content bytes with a partition key: its smaller numbers are no calls.
    "ietf content-bytes left out": (
        [
            ("RateLimit-Policy", '"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:'),
            ("RateLimit-Policy", '"default";q=100;w=60'),
            ("RateLimit", '"peruser";r=300;t=10;pk=:sdfjLJUOUH==:, "default";r=50;t=30'),
        ],
        ("ietf", 100, 50, 30, 100 / 60),
    ),
    "ietf t=0: the quota is back now": (
        [("RateLimit-Policy", '"default";q=100;w=10'), ("RateLimit", '"default";r=100;t=0')],
        ("ietf", 100, 100, 0, 10),
    ),
    # The drafts say delta-seconds; an HTTP-date is ignored (reset 0), not misread as 21 or 2015.
    "draft reset an HTTP-date": (
        [
            ("RateLimit-Limit", "100"),
            ("RateLimit-Remaining", "5"),
            ("RateLimit-Reset", "Mon, 24 Nov 2025 16:00:30 GMT"),
        ],
        ("ietf-draft", 100, 5, 0, 0),
    ),
    "draft dictionary reset an HTTP-date": (
        [("RateLimit", "limit=100, remaining=5, reset=Mon, 24 Nov 2025 16:00:30 GMT")],
        ("ietf-draft", 100, 5, 0, 0),
    ),
    "openai 0s": (family(OPENAI, "60", "60", "0s"), ("openai", 60, 60, 0, 0)),
    "openai 1m": (family(OPENAI, "60", "59", "1m"), ("openai", 60, 59, 60, 1 / 60)),
    "openai 59.999s": (family(OPENAI, "60", "0", "59.999s"), ("openai", 60, 0, 59.999, 60 / 59.999)),
    "openai 1h": (family(OPENAI, "10000", "9000", "1h"), ("openai", 10000, 9000, 3600, 1000 / 3600)),
    "anthropic +05:30": (
        family(ANTHROPIC, "50", "40", "2025-11-24T21:30:04+05:30"),
        ("anthropic", 50, 40, 4, 10 / 4),
    ),
    "anthropic fraction": (
        family(ANTHROPIC, "50", "45", "2025-11-24T16:00:02.123456789Z"),
        ("anthropic", 50, 45, 2.123456789, 5 / 2.123456789),
    ),
    "anthropic fraction and offset": (
        family(ANTHROPIC, "4000", "3999", "2025-11-24T08:00:00.25-08:00"),
        ("anthropic", 4000, 3999, 0.25, 4),
    ),
    # A GitHub reset already past: the window is over, no reset left and no refill told.
    "github epoch past": (
        [
            ("x-ratelimit-limit", "5000"),
            ("x-ratelimit-remaining", "4987"),
            ("x-ratelimit-used", "13"),
            ("x-ratelimit-reset", str(int(WALL) - 90)),
            ("x-ratelimit-resource", "core"),
        ],
        ("github", 5000, 4987, 0, 0),
    ),
}


@pytest.mark.parametrize(("fields", "expected"), SHAPES.values(), ids=SHAPES.keys())
def test_each_family_as_servers_write_it(
    fields: list[tuple[str, str]], expected: tuple[str, float, float, float, float]
) -> None:
    found = one(*fields)
    style, limit, remaining, reset, refill = expected
    assert (found.style, found.limit, found.remaining) == (style, limit, remaining)
    assert found.reset == pytest.approx(reset, abs=1e-6)
    assert found.refill == pytest.approx(refill, rel=1e-6)


@pytest.mark.parametrize(
    "fields",
    [
        [],
        [("Content-Type", "application/json")],
        [("RateLimit", "garbage")],
        [("RateLimit", '"default";r=-1;t=2')],
        [("RateLimit", "limit=x, remaining=y")],
        [("x-ratelimit-remaining-requests", "nan")],
        [("x-ratelimit-remaining-requests", "1e999")],
        [("anthropic-ratelimit-requests-remaining", "")],
        [("x-ratelimit-tokens-remaining", "5")],  # tokens, not requests: not a request limit
        # float() reads these, the fields' grammar does not: digits are ASCII, no "_" or sign
        [("x-ratelimit-remaining-requests", "1_0")],
        [("x-ratelimit-remaining-requests", "\u0661\u0662")],  # Arabic-Indic 12
        [("x-ratelimit-remaining-requests", "+5")],
        [("x-ratelimit-remaining-requests", "infinity")],
        # str.strip() takes NBSP and NEL (obs-text a value may hold); HTTP's whitespace is SP, HTAB
        [("x-ratelimit-remaining-requests", "5\xa0")],
        [("x-ratelimit-remaining-requests", "\x855")],
        [("RateLimit", "limit=100, remaining=\xa05, reset=5")],
        [("RateLimit-Policy", '"p";q=100;w=10'), ("RateLimit", '"p";r=5\xa0;t=1')],
        [("RateLimit", '"p";r="50')],  # a quote left open: runs to the end, no number
        [("RateLimit", '"p";r=150"')],  # quoted at its end only: no number (not 50)
    ],
)
def test_malformed_fields_are_ignored(fields: list[tuple[str, str]]) -> None:
    assert parse(fields, WALL) is None


@pytest.mark.parametrize(
    ("text", "read"), [("9.999999999999999e299", 9.999999999999999e299), ("1e300", None), ("2e300", None)]
)
def test_a_number_from_1e300_up_is_ignored(text: str, read: float | None) -> None:
    # The fields' numbers are read below 1e300, far enough from the largest float that no sum or
    # product made of them becomes an infinity; from 1e300 up a field is malformed.
    found = parse([("x-ratelimit-remaining-requests", text)], WALL)
    assert (None if found is None else found.remaining) == read


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        # A policy's q / w past the largest float: the policy is malformed, r stands alone.
        ([("RateLimit-Policy", '"a";q=1e299;w=1e-299'), ("RateLimit", '"a";r=5;t=1')], (5, 5, 1, 0)),
        (
            [("RateLimit-Limit", "100"), ("RateLimit-Remaining", "5"), ("RateLimit-Policy", "1e299;w=1e-99")],
            (100, 5, 0, 0),
        ),
        # What a bucket lacks over its reset: 1e299 calls in 1e-300 s.
        (
            [
                ("x-ratelimit-limit-requests", "1e299"),
                ("x-ratelimit-remaining-requests", "0"),
                ("x-ratelimit-reset-requests", "1e-300"),
            ],
            (1e299, 0, 1e-300, 0),
        ),
    ],
)
def test_a_rate_past_the_largest_float_is_no_rate(
    fields: list[tuple[str, str]], expected: tuple[float, float, float, float]
) -> None:
    # Each was an infinite refill, which unpaced the client ("unlimited" in client.rate_limit).
    found = one(*fields)
    assert (found.limit, found.remaining, found.reset, found.refill) == expected


def test_a_duration_is_never_a_time() -> None:
    # 300000h is 1.08e9 s: past EPOCH, it was read as epoch seconds (in 2004), a reset long past.
    fields = [("x-ratelimit-limit-requests", "10"), ("x-ratelimit-remaining-requests", "0")]
    found = one(*fields, ("x-ratelimit-reset-requests", "300000h"))
    assert found.reset == 300000 * 3600.0
    assert found.refill == pytest.approx(10 / 1.08e9)
    # One too long for a float tells nothing: no reset, no refill.
    endless = one(*fields, ("x-ratelimit-reset-requests", "9" * 310 + "h"))
    assert (endless.reset, endless.refill) == (0.0, 0.0)


def test_spaces_and_tabs_around_a_number_are_http_whitespace() -> None:
    found = one(("x-ratelimit-remaining-requests", " \t5\t "), ("x-ratelimit-reset-requests", "\t2s "))
    assert (found.remaining, found.reset) == (5, 2.0)
    padded = one(("RateLimit", "limit= 100 , remaining=\t5, reset= 3"))
    assert (padded.limit, padded.remaining, padded.reset) == (100, 5, 3.0)
    # A reset with NBSP is malformed: no reset, the rest stands.
    nbsp = one(("x-ratelimit-remaining-requests", "5"), ("x-ratelimit-reset-requests", "2s\xa0"))
    assert (nbsp.remaining, nbsp.reset) == (5, 0.0)


def test_a_malformed_reset_is_no_reset() -> None:
    found = one(("x-ratelimit-remaining-requests", "5"), ("x-ratelimit-reset-requests", "soon"))
    assert (found.remaining, found.reset) == (5, 0.0)
    bad_date = one(
        ("anthropic-ratelimit-requests-remaining", "5"),
        ("anthropic-ratelimit-requests-reset", "2025-13-40T99:00:00Z"),
    )
    assert bad_date.reset == 0.0


@pytest.mark.parametrize(
    "fields",
    [
        [("x-ratelimit-remaining", "5"), ("x-ratelimit-reset", "0000-01-01T00:00:00Z")],
        [
            ("anthropic-ratelimit-requests-remaining", "5"),
            ("anthropic-ratelimit-requests-reset", "0000-01-01T00:00:00Z"),
        ],
        [("x-ratelimit-remaining-requests", "5"), ("x-ratelimit-reset-requests", "0000-01-01T00:00:00Z")],
        [("RateLimit-Remaining", "5"), ("RateLimit-Reset", "0000-01-01T00:00:00Z")],
        [("RateLimit", "limit=10, remaining=5, reset=0000-01-01T00:00:00Z")],
        [("x-ratelimit-remaining", "5"), ("x-ratelimit-reset", "2026-01-01T00:00:00Z\u0661")],
    ],
)
def test_a_reset_in_year_0_or_with_other_digits_is_no_reset(fields: list[tuple[str, str]]) -> None:
    # calendar.timegm raises for year 0: the field is malformed, the rest of the response stands.
    found = parse(fields, WALL)
    assert found is not None
    assert (found.remaining, found.reset) == (5, 0.0)


@pytest.mark.parametrize(
    "stamp",
    [
        "2025-11-31T16:00:05Z",  # November has 30 days: read as December 1, a week away
        "2026-02-29T00:00:00Z",  # 2026 is no leap year: read as March 1
        "2025-11-24T16:00:05-24:00",  # an offset's hour is 00-23: read as a day away
        "2025-11-24T16:00:05-05:60",  # ...and its minute 00-59: read as six hours away
    ],
)
def test_a_reset_at_a_time_that_does_not_exist_is_no_reset(stamp: str) -> None:
    # RFC 3339 5.7: such a time is malformed; calendar.timegm rolled it over into a real one.
    found = one(
        ("anthropic-ratelimit-requests-remaining", "5"), ("anthropic-ratelimit-requests-reset", stamp)
    )
    assert (found.remaining, found.reset) == (5, 0.0)
    leap = one(
        ("anthropic-ratelimit-requests-remaining", "5"),
        ("anthropic-ratelimit-requests-reset", "2028-02-29T00:00:00Z"),
    )
    assert leap.reset == pytest.approx(1_835_395_200 - WALL)  # a real leap day still reads


@pytest.mark.parametrize(
    ("stamp", "epoch"),
    [
        ("2026-01-01T00:00:00Z", 1_767_225_600),  # the first month, day and hour
        ("2026-12-31T23:59:59Z", 1_798_761_599),  # the last month, day, hour, minute and second
        ("2026-12-31T23:59:60Z", 1_798_761_600),  # a leap second: second 60 is allowed
        ("2026-11-30T12:00:00Z", 1_796_040_000),  # the last day of a 30-day month
        ("2026-06-30T12:00:00+23:59", 1_782_734_460),  # the widest offsets
        ("2026-06-30T12:00:00-23:59", 1_782_907_140),
    ],
)
def test_an_rfc3339_reset_at_each_fields_limit_is_read(stamp: str, epoch: int) -> None:
    found = one(
        ("anthropic-ratelimit-requests-remaining", "5"), ("anthropic-ratelimit-requests-reset", stamp)
    )
    assert found.reset == epoch - WALL


@pytest.mark.parametrize(
    "stamp",
    [
        "2026-00-10T12:00:00Z",
        "2026-13-10T12:00:00Z",
        "2026-06-00T12:00:00Z",
        "2026-12-32T12:00:00Z",
        "2026-06-10T24:00:00Z",
        "2026-06-10T12:60:00Z",
        "2026-06-10T12:00:61Z",
        "2026-06-10T12:00:00+24:00",
        "2026-06-10T12:00:00+00:60",
    ],
)
def test_an_rfc3339_reset_one_past_a_fields_limit_is_no_reset(stamp: str) -> None:
    found = one(
        ("anthropic-ratelimit-requests-remaining", "5"), ("anthropic-ratelimit-requests-reset", stamp)
    )
    assert (found.remaining, found.reset) == (5, 0.0)


def test_an_announcement_shows_its_numbers() -> None:
    found = one(
        ("x-ratelimit-limit-requests", "10"),
        ("x-ratelimit-remaining-requests", "5"),
        ("x-ratelimit-reset-requests", "2s"),
    )
    assert repr(found) == "Announcement(openai: 5 of 10 left, back in 2 s, refill 2.5/s)"


def test_year_1_is_a_reset_long_past() -> None:
    found = one(("x-ratelimit-remaining", "5"), ("x-ratelimit-reset", "0001-01-01T00:00:00Z"))
    assert found.reset == 0.0
    # Read as a time (year 0 is not): five seconds away on a clock five seconds before it.
    year_1 = -62_135_596_800.0
    early = parse([("x-ratelimit-remaining", "5"), ("x-ratelimit-reset", "0001-01-01T00:00:00Z")], year_1 - 5)
    assert early is not None
    assert early.reset == 5.0


def test_an_announcement_keeps_to_its_slots() -> None:
    found = one(("x-ratelimit-remaining-requests", "5"))
    assert not hasattr(found, "__dict__")


@pytest.mark.parametrize("style", [s for s in ANNOUNCE_STYLES if s != "none"])
def test_fake_announces_its_bucket_in_each_style(style: str) -> None:
    # The fake's fields parse back into its bucket: 20.6 of 50 tokens, refilled at 200/s.
    found = parse(announce_headers(style, 20.6, 200.0, 50.0, WALL), WALL)
    assert found is not None
    assert found.style == style
    assert found.remaining == 20
    assert found.refill == pytest.approx(200.0, rel=0.05)
    assert announce_headers("none", 20.6, 200.0, 50.0, WALL) == ()


@pytest.mark.parametrize("fraction", [0.0, 0.5, 0.9999993, 0.9999998])
def test_fake_anthropic_reset_carries_a_rounded_up_second(fraction: float) -> None:
    # The reset is printed to the microsecond: a fraction that rounds up to a whole second
    # must carry into the seconds, not print seven digits (".1000000" read as 0.1 s).
    wall = 1_764_000_000.0 + fraction - 0.25  # an empty bucket of 50 at 200/s: full in 0.25 s
    stamp = dict(announce_headers("anthropic", 0.0, 200.0, 50.0, wall))["anthropic-ratelimit-requests-reset"]
    assert len(stamp.rsplit(".", 1)[1]) == len("000000Z")
    found = parse(
        [("anthropic-ratelimit-requests-remaining", "0"), ("anthropic-ratelimit-requests-reset", stamp)], wall
    )
    assert found is not None
    assert found.reset == pytest.approx(0.25, abs=2e-6)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"rate_limit": (10, 5), "announce": "loud"}, "announce must be one of none, ietf"),
        ({"announce": "openai"}, "needs a rate_limit"),
    ],
)
def test_fake_refuses_a_bad_announce_style(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        FakeService(**kwargs)  # type: ignore[arg-type]


def test_cli_fake_accepts_announce() -> None:
    from qa_min._cli._parser import build_parser

    args = build_parser().parse_args(["fake", "--rate-limit", "200", "50", "--announce", "anthropic"])
    assert args.announce == "anthropic"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["fake", "--announce", "loud"])


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


def test_client_shows_the_announced_limit_and_paces_by_it() -> None:
    # 40 calls on 8 threads against 100/s with a burst of 10, announced OpenAI-style: the
    # client paces before any 429 (it starts low and grows), and shows what it was told.
    with FakeService(rate_limit=(100, 10), announce="openai") as svc:
        with qa.Client(base_url=svc.url, trust_env=False, max_workers=8) as client:
            assert client.rate_limit is not None
            assert client.rate_limit.announced is None
            started = time.monotonic()
            calls = [client.submit(client.ask, f"text {i}", Review) for i in range(40)]
            for call in calls:
                call.result(timeout=30)
            state = client.rate_limit
            assert state is not None
            assert state.announced is not None
            assert state.announced["style"] == "openai"
            assert state.announced["limit"] == 10.0
            assert 0 <= float(state.announced["remaining"]) <= 10  # type: ignore[arg-type]
            assert state.per_second is not None  # paced by the announcement
            assert "announced" in repr(state)
            assert "(openai)" in repr(state)
            assert time.monotonic() - started < 30
        assert svc.rate_limited_count <= 4  # paced before 429s: at most the first burst's


def test_hear_is_thread_safe_and_cheap_without_fields() -> None:
    from qa_min._limiter import Limiter

    lim = Limiter(None, None, True)
    plain = (("Content-Type", "application/json"), ("request-id", "r1"), ("Content-Length", "42"))
    assert lim.hear(plain) is None
    assert not lim.engaged  # nothing announced: the fast path stays
    errors: list[BaseException] = []

    def hear() -> None:
        try:
            for _ in range(200):
                lim.hear(announce_headers("openai", 5.0, 100.0, 10.0, time.time()))
        except BaseException as exc:  # pragma: no cover - a failure shows in the assert
            errors.append(exc)

    threads = [threading.Thread(target=hear) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not errors
    assert lim.engaged


@pytest.mark.parametrize("style", ["openai", "ietf-draft"])
def test_hear_returns_what_was_announced_the_policy_keeps_it(style: str) -> None:
    from qa_min._limiter import Limiter

    wall = 1_800_000_000.0
    lim = Limiter(None, None, True, clock=lambda: 5.0, wall=lambda: wall)
    heard = lim.hear(announce_headers(style, 0.0, 10.0, 20.0, wall))  # none of 20 left, 10 a second
    assert heard is not None
    assert (heard.style, heard.limit, heard.remaining, heard.reset) == (style, 20.0, 0.0, 2.0)
    assert lim.engaged
    assert lim.snapshot()[3] is heard


# -- the pace announcements set (``_steer``, through ``_policy``), on an injected clock ------


def told(remaining: float, refill: float = 1000.0, reset: float = 1.0) -> Announcement:
    """An OpenAI-style announcement of a bucket of 1000 (its limit less this request)."""
    return Announcement(1001.0, remaining, reset, refill, "openai")


def test_an_announced_pace_ramps_up_then_reads_the_level_from_top_to_base_times_less() -> None:
    policy = Policy(None, True)
    policy.heard(0.0, told(1000))
    assert policy.rate(0.0) == pytest.approx(1000 * START)  # a first pace: START of the refill
    policy.heard(1.0, told(1000))
    assert policy.rate(1.0) == pytest.approx(1000 * START * RAMP)  # RAMP-fold a second
    policy.heard(4.0, told(1000))
    assert policy.rate(4.0) == pytest.approx(1000 * TOP) == pytest.approx(1500.0)  # a full bucket
    policy.heard(4.5, told(0))
    assert policy.rate(4.5) == pytest.approx(1500.0 / BASE) == pytest.approx(11.71875)  # an empty one
    policy.heard(5.0, told(500))
    assert policy.rate(5.0) == pytest.approx(1500.0 / BASE**0.5)  # geometric in between
    # Heard again after STALE seconds of nothing: a fresh start, ramping from START again.
    policy.heard(10.0, told(1000))
    assert policy.rate(10.0) == pytest.approx(1000 * START)
    # Between announcements (less than SILENT s) the pace is the last one's, ramp and all.
    assert policy.rate(11.9) == pytest.approx(1000 * START)


def test_after_silent_seconds_the_level_is_read_as_refilled_since_the_last_announcement() -> None:
    policy = Policy(None, True)
    policy.heard(0.0, told(1000))
    policy.heard(4.0, told(1000))
    policy.heard(4.5, told(0))
    assert policy.rate(6.5) == pytest.approx(1500.0 / BASE)  # exactly SILENT s: as announced
    # A quarter of a second past it: 250 of 1000 back, the pace of a bucket a quarter full.
    assert policy.rate(6.75) == pytest.approx(1500.0 / BASE**0.75)
    assert policy.rate(6.75) > policy.rate(6.5)
    assert SILENT == 2.0


def test_a_429_with_no_announced_pace_yet_cuts_to_beta_of_what_gets_through() -> None:
    # No refill told and no reset: the announcement sets no pace; a 429 then paces at BETA of
    # the successes of the last second (here 10 in 0.5 s: 20/s), not at none.
    policy = Policy(None, True)
    policy.heard(0.0, told(5, refill=0.0, reset=0.0))
    assert policy.rate(0.0) == math.inf
    for i in range(10):
        policy.succeeded(0.05 * (i + 1), 0.05 * i)
    news = policy.throttled(0.5, 0.45, 0.1, 0.6, ())
    assert news == "rate limit lowered to 18.0 calls/s after 429/529 responses (was no ceiling)"
    assert policy.rate(0.5) == pytest.approx(BETA * 20)


@pytest.mark.parametrize(("when", "share"), [(4.99, BETA), (5.0, 0.95)])
def test_a_429_is_read_under_the_announcement_only_within_stale_s_of_it(when: float, share: float) -> None:
    # An announcement with no pace at 0, then 10 successes in the second before a 429: within
    # STALE s it cuts to BETA of those 10/s, as announced paces are cut; at exactly STALE the
    # announcement is old, and the 429 teaches as one with none does (95% of them).
    policy = Policy(None, True)
    policy.heard(0.0, told(5, refill=0.0, reset=0.0))
    for i in range(10):
        policy.succeeded(when - 0.5 + 0.05 * (i + 1), when - 0.5 + 0.05 * i)
    news = policy.throttled(when, when - 0.05, 0.1, when + 0.1, ())
    assert news is not None
    assert policy.rate(when) == pytest.approx(share * 10)
    assert STALE == 5.0


def test_what_gets_through_after_engaging_again_is_counted_from_then_not_from_before() -> None:
    # Engaged by a 429 at 0 with 10 successes, disengaged at 60; engaged again at 100 by an
    # announcement that sets no pace: a 429 at 100.5 after 10 successes paces at BETA of 20/s,
    # counted since 100, not over the 100 s since the first engagement's successes.
    policy = Policy(None, True)
    policy.throttled(0.0, None, 0.005, 0.005, ())
    for i in range(10):
        policy.succeeded(0.05 * (i + 1), 0.05 * i)
    policy.tick(60.0, 0.005)
    assert not policy.engaged
    policy.heard(100.0, told(5, refill=0.0, reset=0.0))
    for i in range(10):
        policy.succeeded(100.0 + 0.05 * (i + 1), 100.0 + 0.05 * i)
    news = policy.throttled(100.5, 100.45, 0.1, 100.6, ())
    assert news == "rate limit lowered to 18.0 calls/s after 429/529 responses (was no ceiling)"
    assert policy.rate(100.5) == pytest.approx(BETA * 20)


def test_heard_smooths_the_refill_keeps_the_fullest_level_and_restarts_the_ramp_when_first() -> None:
    steer = Steer()
    # First: the refill as told, the ramp starts now (START of it), the bucket full at limit - 1.
    assert steer.heard(10.0, Announcement(1001.0, 1000.0, 1.0, 100.0, "openai"), True) == pytest.approx(12.5)
    assert (steer.started, steer.refill, steer.capacity) == (10.0, 100.0, 1000.0)
    # Later: the refill smoothed (0.8 old, 0.2 new); half full: TOP * BASE ** -0.5 of it.
    paced = steer.heard(11.0, Announcement(1001.0, 500.0, 1.0, 200.0, "openai"), False)
    assert steer.started == 10.0
    assert steer.refill == pytest.approx(120.0)
    assert paced == pytest.approx(120.0 * TOP / math.sqrt(BASE))
    # No refill told: the smoothed one stays; the fullest level seen stays the bucket's.
    assert steer.heard(12.0, Announcement(501.0, 250.0, 1.0, 0.0, "openai"), False) == pytest.approx(
        120.0 * TOP / BASE**0.75
    )
    assert steer.refill == pytest.approx(120.0)
    assert steer.capacity == 1000.0
    # First again (after a silence): the refill as told, not smoothed, and a fresh ramp.
    assert steer.heard(30.0, Announcement(1001.0, 1000.0, 1.0, 300.0, "openai"), True) == pytest.approx(
        300.0 * START
    )
    assert (steer.started, steer.refill) == (30.0, 300.0)
    # The bucket is the limit less the request answered, even when first heard half full; a
    # bucket of 1 (a limit of 2) at 1 is full.
    half = Steer()
    half.heard(0.0, Announcement(1001.0, 500.0, 1.0, 100.0, "openai"), True)
    assert half.capacity == 1000.0
    assert half.heard(4.0, Announcement(1001.0, 500.0, 1.0, 100.0, "openai"), False) == pytest.approx(
        100.0 * TOP / math.sqrt(BASE)
    )
    one = Steer()
    assert one.heard(4.0, Announcement(2.0, 1.0, 2.0, 0.5, "openai"), False) == pytest.approx(0.5 * TOP)


def test_heard_reads_an_ietf_limit_as_a_quota_and_a_fixed_window_by_what_is_left() -> None:
    # An IETF draft limit is a quota, not the bucket: the level is read off the fullest seen. An
    # empty bucket never seen fuller is empty, BASE times below TOP; once seen at 50, 50 is full.
    steer = Steer()
    assert steer.heard(0.0, Announcement(100.0, 0.0, 1.0, 10.0, "ietf"), True) == pytest.approx(
        10.0 * TOP / BASE
    )
    assert steer.capacity == 0.0
    assert steer.heard(9.0, Announcement(100.0, 50.0, 1.0, 10.0, "ietf"), False) == pytest.approx(10.0 * TOP)
    assert steer.capacity == 50.0
    # A fixed window (no refill told): what is left over what is left of it; none at its end.
    window = Steer()
    assert window.heard(0.0, Announcement(100.0, 40.0, 2.0, 0.0, "openai"), True) == pytest.approx(
        20.0 * START
    )
    assert window.capacity == 40.0
    assert Steer().heard(0.0, Announcement(100.0, 40.0, 0.5, 0.0, "openai"), True) == pytest.approx(
        80.0 * START
    )
    assert window.heard(1.0, Announcement(100.0, 40.0, 0.0, 0.0, "openai"), False) is None
    assert window.heard(2.0, Announcement(100.0, 0.0, 1.0, 0.0, "openai"), False) is None


def test_the_level_is_read_as_refilled_only_past_silent_s_and_only_off_a_known_bucket() -> None:
    # A 429 cut the pace to BETA of it: at exactly SILENT s after the announcement the cut holds.
    policy = Policy(None, True)
    policy.heard(1.0, told(1000))
    assert policy.rate(1.0) == pytest.approx(1000 * START)
    policy.throttled(1.5, 1.4, 0.1, 1.6, ())
    assert policy.rate(3.0) == pytest.approx(BETA * 1000 * START)
    assert policy.rate(3.5) == pytest.approx(1000 * TOP)  # refilled: the bucket full
    # A slow refill (0.5/s) of a bucket of 1 is a refill too: empty at 0, full 2 s later.
    slow = Policy(None, True)
    slow.heard(0.0, Announcement(2.0, 0.0, 2.0, 0.5, "openai"))
    assert slow.rate(0.0) == 0.5  # the lowest adaptive ceiling
    assert slow.rate(4.0) == pytest.approx(0.5 * TOP)
    # A bucket never seen with anything in it (IETF quota): its size unknown, the pace holds.
    empty = Policy(None, True)
    empty.heard(0.0, Announcement(100.0, 0.0, 1.0, 100.0, "ietf"))
    assert empty.rate(4.0) == pytest.approx(100.0 * TOP / BASE)


def test_successes_counted_at_the_instant_of_engaging_tell_no_pace_yet() -> None:
    # Five successes and a 429 all at the instant an announcement engaged the policy: no time
    # has passed to tell a pace by, so nothing is cut (and nothing divides by zero).
    policy = Policy(None, True)
    policy.heard(0.0, told(5, refill=0.0, reset=0.0))
    for _ in range(5):
        policy.succeeded(0.0, 0.0)
    assert policy.seen(0.0, -1.0) is None
    assert policy.throttled(0.0, 0.0, 0.1, 0.1, ()) is None
    assert policy.rate(0.0) == math.inf


def test_a_steer_keeps_to_its_slots() -> None:
    # One per client, read on every attempt: no __dict__, as an Announcement has none.
    steer = Steer()
    assert not hasattr(steer, "__dict__")
    assert (steer.paced, steer.capacity, steer.refill, steer.started) == (math.inf, 0.0, 0.0, 0.0)

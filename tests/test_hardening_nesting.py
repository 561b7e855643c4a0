"""Bodies nested thousands of levels deep, or holding numbers json refuses, end as qa_min errors.

A 2xx body like that is ``InvalidResponse``; an error body like that is still the status error
with its status, and is retried as that status. No ``RecursionError``, ``ValueError`` or
``OverflowError`` leaves a call, on the calling thread or on a worker of ``submit``, and a
worker whose stack is small (or an interpreter whose recursion limit was raised) does not
crash: JSON nesting is refused past ``MAX_NESTING`` levels before ``json`` runs.

  nesting: test_deep_success_body_is_invalid_response, test_deep_success_body_on_a_submit_worker,
      test_deep_answer_or_models_is_invalid_response,
      test_nesting_at_the_limit_is_accepted_and_one_past_is_refused (arrays, objects, mixed),
      test_a_body_that_is_all_nesting_from_its_first_byte_is_read_at_the_limit,
      test_brackets_inside_strings_do_not_count,
      test_brackets_inside_every_string_between_arrays_do_not_count,
      test_nesting_of_a_utf16_or_utf32_body_is_checked_too,
      test_characters_whose_utf16_bytes_are_brackets_and_quotes_are_text,
      test_deep_error_body_is_the_status_error_retried_as_that_status,
      test_deep_error_body_not_retried_when_its_status_is_not,
      test_small_worker_stack_and_high_recursion_limit_do_not_crash (a subprocess: a crash
      there fails the test instead of the run)
  numbers: test_integer_digits_at_the_limit_and_one_past,
      test_interpreter_int_limit_set_lower_is_still_invalid_response (3.11+),
      test_numbers_json_refuses_are_invalid_response, test_numbers_json_takes_as_floats_are_answers,
      test_error_body_with_a_refused_number_is_the_status_error
  NaN, Infinity, -Infinity (json reads them, RFC 8259 does not): in usage, in an answer, in
  list_models, nested, the message naming the literal; inside a string they are text:
      test_nan_and_infinity_anywhere_are_invalid_response,
      test_nan_and_infinity_are_named_in_the_message, test_nan_and_infinity_inside_strings_are_text,
      test_error_body_with_nan_is_the_status_error_showing_the_body
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import BOUND, SleepRecorder, make_client, make_recording_client

import qa_min as qa
from qa_min.testing import FakeService, reply

ROOT = Path(__file__).resolve().parent.parent
JSON = [("Content-Type", "application/json")]
LIMIT = 128  # README: "nested deeper than 128 levels"
DIGITS = 4300  # README: "an integer longer than 4300 digits"


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


Shape = Callable[[int], bytes]


def deep_arrays(depth: int, inner: bytes = b"") -> bytes:
    return b"[" * depth + inner + b"]" * depth


def deep_objects(depth: int, inner: bytes = b"1") -> bytes:
    return b'{"a":' * depth + inner + b"}" * depth


def with_usage(usage: bytes) -> bytes:
    """A well-formed answer to ``Review`` whose usage is ``usage``: two levels above it."""
    return b'{"answers": {"toxic": true}, "usage": {"x": ' + usage + b"}}"


@pytest.fixture
def plain(svc: FakeService) -> Iterator[qa.Client]:
    with make_client(svc.url, retry=qa.RetryPolicy.none) as client:
        yield client


# -- nesting ---------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [10_000, 100_000])
@pytest.mark.parametrize("shape", [deep_arrays, deep_objects], ids=["arrays", "objects"])
def test_deep_success_body_is_invalid_response(
    svc: FakeService, plain: qa.Client, shape: Shape, depth: int
) -> None:
    svc.script(reply(200, shape(depth), headers=JSON))
    with pytest.raises(qa.InvalidResponse) as caught:
        plain.ask("x", Review)
    assert f"deeper than {LIMIT} levels" in str(caught.value)
    assert caught.value.diagnostics.status == 200
    assert caught.value.__context__ is None
    assert caught.value.__cause__ is None


@pytest.mark.parametrize("shape", [deep_arrays, deep_objects], ids=["arrays", "objects"])
def test_deep_success_body_on_a_submit_worker(svc: FakeService, plain: qa.Client, shape: Shape) -> None:
    svc.script(reply(200, shape(100_000), headers=JSON), reply(200, shape(100_000), headers=JSON))
    for call in (plain.submit(plain.ask, "x", Review), plain.submit(plain.list_models)):
        with pytest.raises(qa.InvalidResponse, match=f"deeper than {LIMIT} levels"):
            call.result(timeout=BOUND)


@pytest.mark.parametrize(
    "body",
    [
        b'{"answers": {"toxic": ' + deep_arrays(50_000, b"true") + b"}}",
        b'{"answers": {"toxic": true}, "usage": ' + deep_objects(50_000) + b"}",
        b'{"models": [' + deep_arrays(50_000) + b"]}",
    ],
    ids=["in-an-answer", "in-usage", "in-models"],
)
def test_deep_answer_or_models_is_invalid_response(svc: FakeService, plain: qa.Client, body: bytes) -> None:
    svc.script(reply(200, body, headers=JSON))
    call = plain.list_models if b"models" in body[:12] else (lambda: plain.ask("x", Review))
    with pytest.raises(qa.InvalidResponse, match="deeper than"):
        call()


@pytest.mark.parametrize(
    "nest",
    [
        lambda depth: deep_arrays(depth, b"7"),
        lambda depth: deep_objects(depth, b"7"),
        # Alternating arrays and objects: each level counts once, whichever kind it is.
        lambda depth: (
            b"".join(b'{"a":' if i % 2 else b"[" for i in range(depth))
            + b"7"
            + b"".join(b"}" if i % 2 else b"]" for i in reversed(range(depth)))
        ),
    ],
    ids=["arrays", "objects", "mixed"],
)
def test_nesting_at_the_limit_is_accepted_and_one_past_is_refused(
    svc: FakeService, plain: qa.Client, nest: Shape
) -> None:
    svc.script(reply(200, with_usage(nest(LIMIT - 2)), headers=JSON))
    usage = plain.ask("x", Review).usage["x"]
    for _ in range(LIMIT - 2):
        usage = usage[0] if isinstance(usage, list) else usage["a"]
    assert usage == 7
    svc.script(reply(200, with_usage(nest(LIMIT - 1)), headers=JSON))
    with pytest.raises(qa.InvalidResponse, match=f"deeper than {LIMIT} levels"):
        plain.ask("x", Review)


@pytest.mark.parametrize(
    ("shape", "sibling"), [(deep_arrays, b",[]]"), (deep_objects, b',"b":{}}')], ids=["arrays", "objects"]
)
def test_a_body_that_is_all_nesting_from_its_first_byte_is_read_at_the_limit(
    shape: Shape, sibling: bytes
) -> None:
    # LIMIT openers in one run from the first byte, and a sibling after them (so more openers in
    # all than the limit): the limit itself, not one past it.
    from qa_min._responses import BadShape, load_json

    value = load_json(shape(LIMIT)[:-1] + sibling)
    assert len(value) == 2
    for _ in range(LIMIT - 1):
        value = value[0] if isinstance(value, list) else value["a"]
    assert value in ([], {"a": 1})
    with pytest.raises(BadShape, match=f"deeper than {LIMIT} levels"):
        load_json(shape(LIMIT + 1)[:-1] + sibling)


def test_brackets_inside_strings_do_not_count(svc: FakeService, plain: qa.Client) -> None:
    # Thousands of brackets, all inside strings, some after escaped quotes and backslashes.
    text = '[{ \\" [[ \\\\" ]] }' * 1000
    body = with_usage(json.dumps([text, '\\"[[[[', "\\\\"]).encode())
    assert body.count(b"[") > 10 * LIMIT
    svc.script(reply(200, body, headers=JSON))
    assert plain.ask("x", Review).usage["x"][0] == text


def test_brackets_inside_every_string_between_arrays_do_not_count(svc: FakeService, plain: qa.Client) -> None:
    # Strings one after another, arrays between them: each string's brackets are text, not only the first's.
    usage = [["[" * (LIMIT + 1)]] * 3
    svc.script(reply(200, with_usage(json.dumps(usage).encode()), headers=JSON))
    assert plain.ask("x", Review).usage["x"] == usage


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32-le"])
def test_characters_whose_utf16_bytes_are_brackets_and_quotes_are_text(
    svc: FakeService, plain: qa.Client, encoding: str
) -> None:
    # U+225B is the bytes 0x22 0x5B, a quote and a bracket, in UTF-16: the check reads characters.
    text = "\u225b" * 4 * LIMIT
    body = with_usage(json.dumps(text, ensure_ascii=False).encode()).decode()
    svc.script(reply(200, body.encode(encoding), headers=JSON))
    assert plain.ask("x", Review).usage["x"] == text


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32-le"])
def test_nesting_of_a_utf16_or_utf32_body_is_checked_too(
    svc: FakeService, plain: qa.Client, encoding: str
) -> None:
    # json reads UTF-16 and UTF-32 bodies; the check reads the same characters, not the bytes.
    deep = with_usage(deep_arrays(LIMIT - 1)).decode()
    svc.script(reply(200, deep.encode(encoding), headers=JSON))
    with pytest.raises(qa.InvalidResponse, match="deeper than"):
        plain.ask("x", Review)
    shallow = with_usage(json.dumps(["[{" * LIMIT, deep_arrays(LIMIT - 2).decode()]).encode()).decode()
    svc.script(reply(200, shallow.encode(encoding), headers=JSON))
    assert plain.ask("x", Review).usage["x"][0] == "[{" * LIMIT


@pytest.mark.parametrize(
    ("status", "error"),
    [(500, qa.ServerError), (429, qa.RateLimited), (503, qa.ServerError)],
)
@pytest.mark.parametrize("shape", [deep_arrays, deep_objects], ids=["arrays", "objects"])
def test_deep_error_body_is_the_status_error_retried_as_that_status(
    svc: FakeService, status: int, error: type[qa.APIStatusError], shape: Shape
) -> None:
    body = b'{"detail": ' + shape(100_000) + b"}"
    svc.script(*[reply(status, body, headers=JSON)] * 3)
    sleeps = SleepRecorder()
    policy = qa.RetryPolicy(max_retries=2, backoff_initial_ms=100)
    with make_recording_client(svc.url, sleep=sleeps, retry=policy) as client:
        with pytest.raises(error) as caught:
            client.ask("x", Review)
        again = client.submit(client.ask, "x", Review)  # the script ran out: a normal answer
        assert isinstance(again.result(timeout=BOUND).answers.toxic, bool)
    assert caught.value.status == status
    assert caught.value.diagnostics.attempts == 3
    assert caught.value.diagnostics.status == status
    assert sleeps.seconds == pytest.approx([0.1, 0.2], abs=1e-6)
    # The detail falls back to the start of the body, as for any body that is not JSON.
    assert str(caught.value).startswith(f"HTTP {status} from POST ")
    assert ': {"detail": ' in str(caught.value)


def test_deep_error_body_not_retried_when_its_status_is_not(svc: FakeService, plain: qa.Client) -> None:
    svc.script(reply(400, deep_arrays(100_000), headers=JSON))
    with pytest.raises(qa.BadRequest) as caught:
        plain.submit(plain.ask, "x", Review).result(timeout=BOUND)
    assert caught.value.status == 400
    assert caught.value.diagnostics.attempts == 1


SMALL_STACK = """
import sys, threading
sys.setrecursionlimit(1_000_000)      # an application that raised it: json would recurse
threading.stack_size(256 * 1024)      # a small thread stack, as on musl or macOS workers
import qa_min as qa
from qa_min.testing import FakeService, reply

class Review(qa.Questions):
    toxic = qa.YesNo("yes", "no")

depth = 300_000
bodies = [b"[" * depth + b"]" * depth, b'{"a":' * depth + b"1" + b"}" * depth]
json_type = [("Content-Type", "application/json")]
with FakeService() as svc, qa.Client(base_url=svc.url, trust_env=False, retry=qa.RetryPolicy.none) as c:
    for body in bodies:
        for status in (200, 500):
            for how in ("worker", "caller"):
                svc.script(reply(status, body, headers=json_type))
                try:
                    if how == "worker":
                        c.submit(c.ask, "x", Review).result(timeout=20)
                    else:
                        c.ask("x", Review)
                except qa.QAError as exc:
                    print(how, type(exc).__name__, exc.diagnostics.status, flush=True)
"""


@pytest.mark.timeout(60)
def test_small_worker_stack_and_high_recursion_limit_do_not_crash() -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SMALL_STACK)],
        capture_output=True,
        text=True,
        timeout=50,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    lines = done.stdout.split("\n")[:-1]
    assert (
        lines
        == [
            "worker InvalidResponse 200",
            "caller InvalidResponse 200",
            "worker ServerError 500",
            "caller ServerError 500",
        ]
        * 2
    )


# -- numbers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sign", ["", "-"])
def test_integer_digits_at_the_limit_and_one_past(svc: FakeService, plain: qa.Client, sign: str) -> None:
    at_limit = sign + "9" * DIGITS
    svc.script(reply(200, with_usage(at_limit.encode()), headers=JSON))
    assert plain.ask("x", Review).usage["x"] == int(at_limit)
    svc.script(reply(200, with_usage((at_limit + "9").encode()), headers=JSON))
    with pytest.raises(qa.InvalidResponse) as caught:
        plain.ask("x", Review)
    assert f"{DIGITS + 1 + len(sign)} digits" in str(caught.value)
    assert f"limit of {DIGITS}" in str(caught.value)


@pytest.mark.skipif(not hasattr(sys, "set_int_max_str_digits"), reason="Python 3.11+")
def test_interpreter_int_limit_set_lower_is_still_invalid_response(
    svc: FakeService, plain: qa.Client
) -> None:
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        svc.script(reply(200, with_usage(b"7" * 641), headers=JSON))
        with pytest.raises(qa.InvalidResponse, match="not JSON"):
            plain.ask("x", Review)
    finally:
        sys.set_int_max_str_digits(before)


@pytest.mark.parametrize(
    "number",
    [b"01", b"1.", b".5", b"-", b"+1", b"0x1F", b"1e", b"--1", b"1e+", b"Infinityx", b"9" * 100_000],
)
def test_numbers_json_refuses_are_invalid_response(svc: FakeService, plain: qa.Client, number: bytes) -> None:
    svc.script(reply(200, with_usage(number), headers=JSON))
    with pytest.raises(qa.InvalidResponse, match="not JSON") as caught:
        plain.ask("x", Review)
    assert caught.value.diagnostics.status == 200


@pytest.mark.parametrize("number", [b"1e400", b"-1e400", b"1" + b"0" * 5000 + b".5", b"1e-400"])
def test_numbers_json_takes_as_floats_are_answers(svc: FakeService, plain: qa.Client, number: bytes) -> None:
    svc.script(reply(200, with_usage(number), headers=JSON))
    assert plain.ask("x", Review).usage["x"] == float(number)


NOT_JSON = [b"NaN", b"Infinity", b"-Infinity"]
"""What Python's ``json`` reads as numbers and RFC 8259 has no place for."""

PLACES: dict[str, Callable[[bytes], bytes]] = {
    "usage": lambda literal: b'{"answers": {"toxic": true}, "usage": {"cost": ' + literal + b"}}",
    "answer": lambda literal: b'{"answers": {"toxic": ' + literal + b"}}",
    "extra-answer": lambda literal: b'{"answers": {"toxic": true, "other": ' + literal + b"}}",
    "list-models": lambda literal: b'{"models": [{"name": "judge", "context": ' + literal + b"}]}",
    "nested": lambda literal: with_usage(b'[1, {"a": [{"b": [' + literal + b"]}]}]"),
}


@pytest.mark.parametrize("place", sorted(PLACES))
@pytest.mark.parametrize("literal", NOT_JSON)
def test_nan_and_infinity_anywhere_are_invalid_response(
    svc: FakeService, plain: qa.Client, literal: bytes, place: str
) -> None:
    svc.script(reply(200, PLACES[place](literal), headers=JSON))
    call: Callable[[], object] = (
        plain.list_models if place == "list-models" else (lambda: plain.ask("x", Review))
    )
    with pytest.raises(
        qa.InvalidResponse, match=f"ValueError: {literal.decode()} is not a JSON value"
    ) as caught:
        call()
    assert caught.value.diagnostics.status == 200


def test_nan_and_infinity_are_named_in_the_message(svc: FakeService, plain: qa.Client) -> None:
    svc.script(reply(200, with_usage(b"-Infinity"), headers=JSON))
    with pytest.raises(qa.InvalidResponse) as caught:
        plain.ask("x", Review)
    message = str(caught.value)
    assert message.startswith(f"HTTP 200 from POST {svc.url}/v1/")
    assert "the response is not JSON (ValueError: -Infinity is not a JSON value" in message
    assert "RFC 8259 has no NaN or Infinity" in message
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None


def test_nan_and_infinity_inside_strings_are_text(svc: FakeService, plain: qa.Client) -> None:
    svc.script(reply(200, with_usage(b'["NaN", "Infinity", "-Infinity"]'), headers=JSON))
    assert list(plain.ask("x", Review).usage["x"]) == ["NaN", "Infinity", "-Infinity"]


@pytest.mark.parametrize("literal", NOT_JSON)
def test_error_body_with_nan_is_the_status_error_showing_the_body(svc: FakeService, literal: bytes) -> None:
    # Its detail is not read from a body that is not JSON (it read "nan"): the message shows the body.
    body = b'{"detail": ' + literal + b"}"
    svc.script(reply(422, body, headers=JSON))
    with make_recording_client(svc.url) as client, pytest.raises(qa.UnprocessableEntity) as caught:
        client.ask("x", Review)
    assert caught.value.status == 422
    assert str(caught.value).endswith(f": {body.decode()}")
    assert caught.value.diagnostics.body == body.decode()


@pytest.mark.parametrize(
    ("status", "error", "attempts"), [(429, qa.RateLimited, 3), (422, qa.UnprocessableEntity, 1)]
)
def test_error_body_with_a_refused_number_is_the_status_error(
    svc: FakeService, status: int, error: type[qa.APIStatusError], attempts: int
) -> None:
    body = b'{"detail": ' + b"9" * 50_000 + b"}"
    svc.script(*[reply(status, body, headers=JSON)] * 3)
    with make_recording_client(svc.url) as client, pytest.raises(error) as caught:
        client.ask("x", Review)
    assert caught.value.status == status
    assert caught.value.diagnostics.attempts == attempts
    assert caught.value.diagnostics.body == body.decode()

"""Outside audit of SPEC.md sections 1-5 through both clients, ``Client`` and ``AsyncClient``.

What the other modules already hold for the threaded client is held here for both at once, with
each limit SPEC names tried at the limit and one past it:

* section 2: the exact bytes of each operation's request (request line, header order, JSON body),
  identical from the two clients;
* section 1: the answer of each question kind at the edges of what it accepts (score 0 and n-1,
  not -1, n, a bool or a float; a choice by option key, not by its text);
* section 5: each status to its error class, with ``.status``, the detail in the message and the
  ``Diagnostics`` filled;
* section 4: client-side validation of states, questions, model names and per-call options,
  each refused with a ``ValidationError`` subclass naming what is wrong, and nothing sent.
"""

from __future__ import annotations

import asyncio
import enum
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, Optional

import pytest
from faultservers import RawServer, Recorder

import qa_min as qa

KEY = "sk-audit-0123456789"
KINDS = ["sync", "async"]
loose: Any = qa  # the API without its types, to pass what mypy would refuse


class Tone(enum.Enum):
    formal = "Written in a formal register"
    casual = "Written casually"


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")
    tone = qa.Choice(Tone)
    quality = qa.Score(["poor", "fair", "good"])


GOOD = {"toxic": True, "tone": "formal", "quality": 2}


def http(status: str, body: bytes, headers: bytes = b"Content-Type: application/json\r\n") -> bytes:
    return b"HTTP/1.1 %s\r\n%sContent-Length: %d\r\n\r\n%s" % (status.encode(), headers, len(body), body)


def ok(body: object) -> bytes:
    return http("200 OK", json.dumps(body).encode())


@contextmanager
def recording(response: bytes) -> Iterator[tuple[RawServer, Recorder]]:
    recorder = Recorder(response)
    with RawServer(recorder) as server:
        yield server, recorder


def run(kind: str, url: str, call: Callable[[Any], Any], **options: Any) -> Any:
    """``call(client)`` on a fresh client of ``kind``; awaited when the client is an AsyncClient."""
    options.setdefault("retry", qa.RetryPolicy.none)
    options.setdefault("trust_env", False)
    if kind == "sync":
        with qa.Client(base_url=url, **options) as client:
            return call(client)

    async def main() -> Any:
        async with qa.AsyncClient(base_url=url, **options) as client:
            return await call(client)

    return asyncio.run(main())


def outcome(
    kind: str, response: bytes, call: Callable[[Any], Any], **options: Any
) -> tuple[Any, list[bytes]]:
    """(result or the QAError raised, the requests the server saw)."""
    with recording(response) as (server, recorder):
        try:
            result = run(kind, server.url, call, **options)
        except qa.QAError as exc:
            result = exc
    return result, recorder.requests


def ask(client: Any, **options: Any) -> Any:
    return client.ask("some text", Review, **options)


# -- section 2: the bytes on the wire ------------------------------------------------------------

STATE = 'h\u00e9llo "q"\n\u20ac'
REQUEST_BODY = (
    '{"state":"h\u00e9llo \\"q\\"\\n\u20ac","questions":{'
    '"toxic":{"criteria":{"true":"The text insults someone","false":"The text insults no one"}},'
    '"tone":{"criteria":{"formal":"Written in a formal register","casual":"Written casually"}},'
    '"quality":{"criteria":["poor","fair","good"]}},"model":"judge-2.1"}'
).encode()


def expected_request(method: str, path: str, port: int, key: Optional[str], body: bytes) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    lines += ["Content-Type: application/json"] if method == "POST" else []
    lines += ["Accept: application/json", f"User-Agent: qa_min/{qa.__version__}"]
    lines += [f"Authorization: Bearer {key}"] if key else []
    lines += ["X-Trace: abc"]
    lines += [f"Content-Length: {len(body)}"] if method == "POST" else []
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def as_request(state: str) -> qa.Request:
    return qa.Request(state, [qa.NamedQuestion(n, q) for n, q in Review._qa_fields], model="judge-2.1")


OPERATIONS: dict[str, tuple[str, str, Callable[[Any], Any], dict[str, object]]] = {
    "ask": ("POST", "/v1/core", lambda c: c.ask(STATE, Review, model="judge-2.1"), {"answers": GOOD}),
    "core": ("POST", "/v1/core", lambda c: c.core(as_request(STATE)), {"answers": GOOD}),
    "list_models": ("GET", "/v1/models", lambda c: c.list_models(), {"models": [{"name": "m"}]}),
}


@pytest.mark.parametrize("key", [KEY, None], ids=["key", "no-key"])
@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_each_operation_sends_the_same_exact_bytes_from_both_clients(
    operation: str, key: Optional[str]
) -> None:
    method, path, call, reply = OPERATIONS[operation]
    body = REQUEST_BODY if method == "POST" else b""
    for kind in KINDS:
        with recording(ok(reply)) as (server, recorder):
            run(kind, server.url + "/pre/", call, api_key=key, extra_headers=[("X-Trace", "abc")])
        port = int(server.url.rsplit(":", 1)[1])
        assert recorder.requests == [expected_request(method, "/pre" + path, port, key, body)], kind
    if body:
        assert json.loads(body) == {
            "state": STATE,
            "questions": {n: {"criteria": q.criteria} for n, q in Review._qa_fields},
            "model": "judge-2.1",
        }


@pytest.mark.parametrize("kind", KINDS)
def test_the_clients_model_from_the_environment_is_sent_and_a_call_model_wins(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # trust_env=True reads SERVICE_*; the proxy variables it also reads must not reroute 127.0.0.1.
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SERVICE_DEFAULT_MODEL", "  judge-9.0  ")
    models = []
    for model in (None, "judge-1.2.3"):

        def call(client: Any, model: Optional[str] = model) -> Any:
            return ask(client, model=model)

        _, requests = outcome(kind, ok({"answers": GOOD}), call, trust_env=True)
        models.append(json.loads(requests[0].partition(b"\r\n\r\n")[2])["model"])
    assert models == ["judge-9.0", "judge-1.2.3"]


# -- section 1: the answer of each kind at the edges ---------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("quality", "expected"), [(0, 0), (2, 2)])
def test_a_score_answer_at_either_end_of_the_scale_is_accepted(
    kind: str, quality: int, expected: int
) -> None:
    result, _ = outcome(kind, ok({"answers": {**GOOD, "quality": quality}, "usage": {"n": 1}}), ask)
    assert isinstance(result, qa.AskResponse)
    assert (result.answers.quality, result.answers.toxic, result.answers.tone) == (
        expected,
        True,
        Tone.formal,
    )
    assert dict(result.usage) == {"n": 1}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("question", "value", "words"),
    [
        ("quality", -1, "from 0 to 2, got -1"),
        ("quality", 3, "from 0 to 2, got 3"),
        ("quality", True, "from 0 to 2, got True"),  # a bool is not an index, whatever Python says
        ("quality", 1.0, "from 0 to 2, got 1.0"),
        ("quality", "1", "from 0 to 2, got '1'"),
        ("tone", "Written casually", "expected one of ['casual', 'formal']"),  # the text, not the key
        ("tone", "Formal", "expected one of ['casual', 'formal']"),
        ("toxic", 1, "expected true or false, got 1"),
        ("toxic", "true", "expected true or false, got 'true'"),
        ("toxic", None, "expected true or false, got None"),
    ],
)
def test_an_answer_that_does_not_fit_its_question_is_invalid_response_naming_it(
    kind: str, question: str, value: object, words: str
) -> None:
    diag = qa.Diagnostics()
    result, _ = outcome(kind, ok({"answers": {**GOOD, question: value}}), lambda c: ask(c, diagnostics=diag))
    assert type(result) is qa.InvalidResponse
    assert f"answer to {question!r}" in str(result)
    assert words in str(result)
    assert result.diagnostics is diag
    assert (diag.status, diag.attempts) == (200, 1)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"usage": {}}, "answers"),
        ({"answers": {"toxic": True, "tone": "formal"}}, "no answer for question 'quality'"),
        ({"answers": [True, "formal", 2]}, '"answers" must be an object'),
        ({"answers": GOOD, "usage": None}, '"usage" must be an object, got None'),
        ({"answers": GOOD, "usage": []}, '"usage" must be an object, got []'),
    ],
)
def test_a_success_body_of_the_wrong_shape_is_invalid_response(
    kind: str, body: dict[str, object], words: str
) -> None:
    result, _ = outcome(kind, ok(body), ask)
    assert type(result) is qa.InvalidResponse
    assert words in str(result)


@pytest.mark.parametrize("kind", KINDS)
def test_core_answers_by_id_extra_ids_and_fields_ignored_usage_absent_is_empty(kind: str) -> None:
    body = {"answers": {**GOOD, "extra": 7}, "id": "r-1"}
    result, _ = outcome(kind, ok(body), lambda c: c.core(as_request("s")))
    assert isinstance(result, qa.CoreResponse)
    assert dict(result.answers) == {"toxic": True, "tone": Tone.formal, "quality": 2}
    assert (result.get("tone"), result.get("extra"), result.get("nope", "d")) == (Tone.formal, None, "d")
    assert dict(result.usage) == {}


@pytest.mark.parametrize("kind", KINDS)
def test_any_2xx_is_success_and_a_3xx_is_unexpected_status(kind: str) -> None:
    body = json.dumps({"answers": GOOD}).encode()
    edge, _ = outcome(kind, http("299 Odd", body), ask)
    assert edge.answers.quality == 2
    redirect, requests = outcome(
        kind, http("300 Multiple Choices", body, b"Location: http://elsewhere/\r\n"), ask
    )
    assert type(redirect) is qa.UnexpectedStatus
    assert redirect.status == 300
    assert len(requests) == 1


# -- section 5: statuses to errors ----------------------------------------------------------------

STATUSES = [
    (400, qa.BadRequest),
    (401, qa.Unauthorized),
    (403, qa.PermissionDenied),
    (404, qa.NotFound),
    (408, qa.RequestTimeout),
    (409, qa.UnexpectedStatus),
    (418, qa.UnexpectedStatus),
    (422, qa.UnprocessableEntity),
    (429, qa.RateLimited),
    (499, qa.UnexpectedStatus),
    (500, qa.ServerError),
    (528, qa.ServerError),
    (529, qa.Overloaded),
    (530, qa.ServerError),
    (599, qa.ServerError),
    (600, qa.UnexpectedStatus),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("status", "cls"), STATUSES)
def test_each_status_maps_to_its_error_with_status_detail_and_diagnostics(
    kind: str, status: int, cls: type[qa.APIStatusError]
) -> None:
    diag = qa.Diagnostics()
    body = b'{"detail": "the reason %d"}' % status
    result, requests = outcome(kind, http(f"{status} Whatever", body), lambda c: ask(c, diagnostics=diag))
    assert type(result) is cls
    assert isinstance(result, qa.APIStatusError)
    assert result.status == status
    assert f"HTTP {status}" in str(result)
    assert f"the reason {status}" in str(result)
    assert result.diagnostics is diag
    assert (diag.status, diag.body, diag.attempts, diag.transport_error) == (status, body.decode(), 1, None)
    assert len(requests) == 1
    assert isinstance(result, qa.ServiceBusy) == (status in (429, 529))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"", "(empty body)"),
        (b"<html><h1>Forbidden by proxy</h1></html>", "Forbidden by proxy"),
        (b'{"detail": [{"loc": ["body", "state"], "msg": "field required"}]}', "field required"),
        (b'{"detail": "cut', '{"detail": "cut'),
    ],
)
def test_a_non_2xx_body_of_any_shape_still_gives_the_status_error_and_a_readable_detail(
    kind: str, body: bytes, words: str
) -> None:
    result, _ = outcome(
        kind, http("403 Forbidden", body, b"Content-Type: text/html\r\n"), lambda c: c.list_models()
    )
    assert type(result) is qa.PermissionDenied
    assert "HTTP 403" in str(result)
    assert words in str(result)


# -- section 2: list_models -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_list_models_keeps_order_duplicates_and_extra_fields(kind: str) -> None:
    body = {"models": [{"name": "b", "ctx": 8}, {"name": "a"}, {"name": "b"}], "next": None}
    result, _ = outcome(kind, ok(body), lambda c: c.list_models())
    assert [m.name for m in result.models] == ["b", "a", "b"]
    assert result.models[0].info["ctx"] == 8
    assert len(result) == 3


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({}, 'no "models"'),
        ({"models": None}, '"models" must be a list'),
        ({"models": {"name": "a"}}, '"models" must be a list'),
        ({"models": [{"name": "a"}, "b"]}, "a model must be an object with a name"),
        ({"models": [{"name": 3}]}, "a model must be an object with a name"),
        ({"models": [{"id": "a"}]}, "a model must be an object with a name"),
    ],
)
def test_a_models_body_of_the_wrong_shape_is_invalid_response(kind: str, body: object, words: str) -> None:
    result, _ = outcome(kind, ok(body), lambda c: c.list_models())
    assert type(result) is qa.InvalidResponse
    assert words in str(result)


# -- sections 1 and 4: the limits of what a question takes -----------------------------------------


class Two(enum.Enum):
    a = "first"
    b = "second"


class One(enum.Enum):
    a = "only"


@pytest.mark.parametrize(
    ("make", "criteria", "answer", "expected"),
    [
        (lambda: qa.Score(["low", "high"]), ["low", "high"], 1, 1),
        (lambda: qa.Score(("low", "high")), ["low", "high"], 0, 0),
        (lambda: qa.Score(Two), ["first", "second"], 1, Two.b),
        (lambda: qa.Choice({"a": "x", "b": "y"}), {"a": "x", "b": "y"}, "b", "b"),
        (lambda: qa.Choice(Two), {"a": "first", "b": "second"}, "a", Two.a),
        (lambda: qa.YesNo("y", "n"), {"true": "y", "false": "n"}, False, False),
    ],
)
@pytest.mark.parametrize("kind", KINDS)
def test_a_question_at_its_smallest_is_sent_and_answered(
    kind: str, make: Callable[[], Any], criteria: object, answer: object, expected: object
) -> None:
    request = qa.Request("s", [qa.NamedQuestion("q", make())])
    result, requests = outcome(kind, ok({"answers": {"q": answer}}), lambda c: c.core(request))
    sent = json.loads(requests[0].partition(b"\r\n\r\n")[2])
    assert sent["questions"] == {"q": {"criteria": criteria}}
    assert result.get("q") == expected
    assert type(result.get("q")) is type(expected)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: qa.Score(["only"]), "at least 2 levels, got 1"),
        (lambda: qa.Score([]), "at least 2 levels, got 0"),
        (lambda: qa.Score(One), "at least 2 members, One has 1"),
        (lambda: qa.Choice({"a": "x"}), "at least 2 options, got 1"),
        (lambda: qa.Choice({}), "at least 2 options, got 0"),
        (lambda: qa.Choice(One), "at least 2 members, One has 1"),
        (lambda: qa.YesNo("", "n"), "the yes text must be a non-empty string"),
        (lambda: qa.YesNo("y", " \t"), "the no text must be a non-empty string"),
        (lambda: loose.YesNo(1, "n"), "the yes text must be a non-empty string, got 1"),
        (lambda: loose.Score(["a", 2]), "level 1 must be a non-empty string, got 2"),
        (lambda: qa.Score("ab"), "a list of level texts or an Enum class"),
        (lambda: loose.Score({"a", "b"}), "a list of level texts or an Enum class"),
        (lambda: loose.Choice([("a", "x"), ("b", "y")]), "a dict or an Enum class"),
        (lambda: qa.Choice({"a": "x", "b": ""}), "the text of option 'b' must be a non-empty string"),
    ],
)
def test_a_question_one_short_of_its_limit_or_of_the_wrong_type_is_invalid_question(
    make: Callable[[], object], words: str
) -> None:
    with pytest.raises(qa.InvalidQuestion) as caught:
        make()
    assert words in str(caught.value)
    assert isinstance(caught.value, qa.ValidationError)


# -- section 4: what a call refuses before any byte is sent ----------------------------------------

BAD_CALLS: list[tuple[str, Callable[[Any], Any], type[qa.ValidationError], str]] = [
    ("state-empty", lambda c: c.ask("", Review), qa.InvalidState, "state must be a non-empty string"),
    ("state-blank", lambda c: c.ask(" \n", Review), qa.InvalidState, "state must be a non-empty string"),
    ("state-bytes", lambda c: c.ask(b"x", Review), qa.InvalidState, "state must be a non-empty string"),
    ("state-none", lambda c: c.ask(None, Review), qa.InvalidState, "got None"),
    ("model-empty", lambda c: ask(c, model=""), qa.InvalidModel, "model must be a non-empty string"),
    ("model-int", lambda c: ask(c, model=3), qa.InvalidModel, "got 3"),
    ("model-newline", lambda c: ask(c, model="judge\n"), qa.InvalidModel, "a model name has none"),
    ("core-model", lambda c: c.core(as_request("s"), model=" "), qa.InvalidModel, "non-empty string"),
    ("timeout-0", lambda c: ask(c, timeout=0), qa.InvalidOption, "timeout must be a finite number > 0"),
    ("timeout-neg", lambda c: ask(c, timeout=-1), qa.InvalidOption, "timeout"),
    ("timeout-nan", lambda c: ask(c, timeout=float("nan")), qa.InvalidOption, "timeout"),
    ("timeout-bool", lambda c: ask(c, timeout=True), qa.InvalidOption, "timeout"),
    ("retry", lambda c: ask(c, retry=3), qa.InvalidOption, "retry must be a RetryPolicy"),
    ("diagnostics", lambda c: ask(c, diagnostics={}), qa.InvalidOption, "diagnostics must be a Diagnostics"),
    ("cancel", lambda c: ask(c, cancel=True), qa.InvalidOption, "cancel must be a CancelToken"),
    ("models-timeout", lambda c: c.list_models(timeout=0), qa.InvalidOption, "timeout"),
    ("ask-instance", lambda c: c.ask("s", Review(**GOOD)), qa.InvalidQuestion, "takes a Questions subclass"),
    ("core-dict", lambda c: c.core({"state": "s"}), qa.InvalidOption, "core() takes a qa_min.Request"),
]


class NoneAsked(qa.Questions):
    pass


BAD_CALLS.append(("no-questions", lambda c: c.ask("s", NoneAsked), qa.NoQuestions, "at least one question"))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("call", "cls", "words"), [b[1:] for b in BAD_CALLS], ids=[b[0] for b in BAD_CALLS])
def test_a_bad_call_is_refused_naming_the_problem_and_sends_nothing(
    kind: str, call: Callable[[Any], Any], cls: type[qa.ValidationError], words: str
) -> None:
    result, requests = outcome(kind, ok({"answers": GOOD}), call)
    assert type(result) is cls
    assert isinstance(result, qa.ValidationError)
    assert words in str(result)
    assert requests == []


@pytest.mark.parametrize(
    ("make", "cls", "words"),
    [
        (lambda: loose.Request("s", []), qa.NoQuestions, "at least one question"),
        (lambda: loose.Request("s", None), qa.InvalidQuestion, "a sequence of NamedQuestion"),
        (
            lambda: loose.Request("s", [("a", qa.YesNo("y", "n"), 3)]),
            qa.InvalidQuestion,
            "expected a NamedQuestion",
        ),
        (
            lambda: loose.Request("s", [loose.NamedQuestion(3, qa.YesNo("y", "n"))]),
            qa.InvalidName,
            "question name",
        ),
        (
            lambda: loose.Request("s", [qa.NamedQuestion("", qa.YesNo("y", "n"))]),
            qa.InvalidName,
            "question name",
        ),
        (lambda: loose.Request("s", [("a", "yes?")]), qa.InvalidQuestion, "must be a YesNo, Choice or Score"),
        (
            lambda: loose.Request("s", [("a", qa.YesNo("y", "n")), ("a", qa.Score(["l", "h"]))]),
            qa.DuplicateQuestionName,
            "two questions are named 'a'",
        ),
        (lambda: loose.Request("", [("a", qa.YesNo("y", "n"))]), qa.InvalidState, "state must be"),
        (lambda: loose.Request("s", [("a", qa.YesNo("y", "n"))], model=""), qa.InvalidModel, "model must be"),
        (lambda: Review(toxic=True), qa.InvalidName, "takes exactly the answers"),
    ],
)
def test_a_bad_request_is_refused_where_it_is_built(
    make: Callable[[], object], cls: type[qa.ValidationError], words: str
) -> None:
    with pytest.raises(qa.ValidationError) as caught:
        make()
    assert type(caught.value) is cls
    assert words in str(caught.value)


# -- what the audit found, fixed ----------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["Authorization", "authorization", "Accept", "User-Agent"])
def test_an_extra_header_naming_a_standard_one_replaces_it(kind: str, name: str) -> None:
    # Before, both went out: two Authorization fields leave servers and proxies to pick one.
    result, requests = outcome(kind, ok({"answers": GOOD}), ask, extra_headers=[(name, "x")], api_key=KEY)
    assert not isinstance(result, Exception), result
    head = requests[0].split(b"\r\n\r\n")[0].decode().split("\r\n")
    named = [line for line in head if line.lower().startswith(name.lower() + ":")]
    assert named == [f"{name}: x"], head


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["Content-Type", "content-type"])
def test_an_extra_content_type_is_refused_as_qa_min_sets_it(kind: str, name: str) -> None:
    result, requests = outcome(kind, ok({"answers": GOOD}), ask, extra_headers=[(name, "text/plain")])
    assert isinstance(result, qa.InvalidOption), result
    assert f"extra_headers must not set {name!r}: qa_min sets it" in str(result)
    assert requests == []


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "body", [b'{"detail": null}', b'{"detail": ""}', b'{"detail": " "}', b'{"detail": []}']
)
def test_a_detail_that_says_nothing_gives_way_to_the_body(kind: str, body: bytes) -> None:
    # Before: "HTTP 400 ...: None", or "(empty body)" for a body that was not empty.
    result, _ = outcome(kind, http("400 Bad Request", body), ask)
    assert type(result) is qa.BadRequest
    assert str(result).endswith(": " + body.decode()), str(result)

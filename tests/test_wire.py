"""SPEC.md section 2, the wire protocol: what goes out, and which responses count as success.

Spec line -> tests:

  POST {base_url}/v1/core, body {"state", "questions": {id: {"criteria"}}, "model"}
      test_ask_posts_state_questions_and_model_to_v1_core
      test_core_posts_the_same_body_shape_as_ask
      test_post_body_is_exactly_the_three_spec_fields
      test_non_ascii_state_round_trips_through_the_body
  GET {base_url}/v1/models, no body, success {"models": [{"name": str, ...}]}
      test_list_models_sends_get_v1_models_without_a_body
      test_list_models_returns_names_in_order_and_keeps_extra_fields
      test_list_models_rejects_a_malformed_body
  base_url may carry a path prefix; a trailing slash is ignored
      test_path_prefix_is_kept_and_trailing_slash_ignored
      test_fake_service_with_prefix_is_reached_through_base_url
  Content-Type (POST), Accept, User-Agent naming library and version, Authorization when
  a key is configured, then extra_headers
      test_post_header_set_and_order
      test_get_header_set_and_order
      test_user_agent_names_library_and_version
      test_no_authorization_header_without_a_key
  Any 2xx is success
      test_any_2xx_with_a_good_body_is_success
      test_204_without_a_body_is_invalid_response
  answers required; a well-shaped answer for every question; extra ids ignored
      test_extra_answer_ids_are_ignored
      test_missing_or_malformed_answers_is_invalid_response
  usage is an object when present; absent: empty
      test_absent_usage_is_an_empty_mapping
      test_usage_is_returned_as_sent
      test_non_object_usage_is_invalid_response
  Unknown extra fields are ignored
      test_unknown_top_level_fields_are_ignored
  Anything else is InvalidResponse
      test_non_json_or_non_object_2xx_body_is_invalid_response (non-JSON, HTML, truncated
      JSON inside a complete frame, arrays, scalars)
      test_body_cut_short_of_content_length_is_connection_failed (a dropped connection,
      not a shape problem)
  A non-2xx body may be JSON {"detail"}, an HTML page, empty, or truncated
      test_non_2xx_body_of_any_shape_maps_by_status
  Redirects are not followed (3xx is UnexpectedStatus); the key never travels to another host
      test_redirect_is_not_followed_and_raises_unexpected_status
      test_redirect_is_not_retried
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from faultservers import RawServer, Recorder, ok_response
from support import no_sleep

import qa_min as qa
from qa_min.testing import FakeService, reply

KEY = "sk-wire-test-0123456789"


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")
    quality = qa.Score(["poor", "fair", "good"])


GOOD_BODY = {"answers": {"toxic": True, "quality": 2}, "usage": {"input_tokens": 3}}


def split_request(raw: bytes) -> tuple[str, list[tuple[str, str]], bytes]:
    """(request line, header (name, value) pairs in wire order, body)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.append((name, value.strip()))
    return lines[0], headers, body


def raw_response(status_line: str, body: bytes = b"", headers: str = "") -> bytes:
    return f"HTTP/1.1 {status_line}\r\n{headers}Content-Length: {len(body)}\r\n\r\n".encode("latin-1") + body


# -- what goes out -----------------------------------------------------------------------


def test_ask_posts_state_questions_and_model_to_v1_core(svc: FakeService, client: qa.Client) -> None:
    client.ask("Some text", Review)
    (request,) = svc.requests
    assert (request.method, request.path) == ("POST", "/v1/core")
    assert request.json() == {
        "state": "Some text",
        "questions": {
            "toxic": {"criteria": {"true": "The text insults someone", "false": "The text insults no one"}},
            "quality": {"criteria": ["poor", "fair", "good"]},
        },
        "model": qa.DEFAULT_MODEL,
    }


def test_core_posts_the_same_body_shape_as_ask(svc: FakeService, client: qa.Client) -> None:
    request = qa.Request(
        state="Some text",
        questions=[
            qa.NamedQuestion("toxic", qa.YesNo("The text insults someone", "The text insults no one")),
            qa.NamedQuestion("quality", qa.Score(["poor", "fair", "good"])),
        ],
    )
    client.core(request)
    client.ask("Some text", Review)
    core_request, ask_request = svc.requests
    assert core_request.path == "/v1/core"
    assert core_request.json() == ask_request.json()


def test_post_body_is_exactly_the_three_spec_fields(svc: FakeService, client: qa.Client) -> None:
    client.ask("x", Review)
    body = svc.requests[0]
    assert set(body.json()) == {"state", "questions", "model"}
    assert int(body.headers["content-length"]) == len(body.body)
    for question in body.json()["questions"].values():
        assert set(question) == {"criteria"}


@pytest.mark.parametrize(
    "state",
    ["héllo wörld", "日本語のテキスト", 'quotes " and \\ backslashes', "line\nbreak\ttab", "emoji 🙂"],
    ids=["latin1", "cjk", "escapes", "control-chars", "astral"],
)
def test_non_ascii_state_round_trips_through_the_body(
    svc: FakeService, client: qa.Client, state: str
) -> None:
    client.ask(state, Review)
    assert svc.requests[0].json()["state"] == state


def test_list_models_sends_get_v1_models_without_a_body(svc: FakeService, client: qa.Client) -> None:
    client.list_models()
    (request,) = svc.requests
    assert (request.method, request.path, request.body) == ("GET", "/v1/models", b"")
    assert "content-type" not in request.headers
    assert request.headers.get("content-length", "0") == "0"


def test_list_models_returns_names_in_order_and_keeps_extra_fields(
    svc: FakeService, client: qa.Client
) -> None:
    models = [{"name": "b-model", "family": "b", "context": 8}, {"name": "a-model"}]
    svc.script(reply(200, {"models": models, "next": None}))
    result = client.list_models()
    assert [m.name for m in result.models] == ["b-model", "a-model"]
    assert dict(result.models[0].info) == models[0]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"models": None},
        {"models": {"name": "x"}},
        {"models": [{"family": "no name"}]},
        {"models": [{"name": 7}]},
        {"models": ["judge-latest"]},
        [],
    ],
    ids=["no-models", "null", "object", "entry-without-name", "non-str-name", "bare-string", "array"],
)
def test_list_models_rejects_a_malformed_body(svc: FakeService, client: qa.Client, body: object) -> None:
    svc.script(reply(200, body))
    with pytest.raises(qa.InvalidResponse):
        client.list_models()


@pytest.mark.parametrize(
    ("suffix", "core_path", "models_path"),
    [
        ("", "/v1/core", "/v1/models"),
        ("/", "/v1/core", "/v1/models"),
        ("/prefix", "/prefix/v1/core", "/prefix/v1/models"),
        ("/prefix/", "/prefix/v1/core", "/prefix/v1/models"),
        ("/a/b", "/a/b/v1/core", "/a/b/v1/models"),
    ],
    ids=["bare", "bare-slash", "prefix", "prefix-slash", "deep-prefix"],
)
def test_path_prefix_is_kept_and_trailing_slash_ignored(
    suffix: str, core_path: str, models_path: str
) -> None:
    recorder = Recorder(ok_response(json.dumps({"answers": {"toxic": True, "quality": 0}}).encode()))
    with RawServer(recorder) as server, qa.Client(base_url=server.url + suffix) as client:
        client.ask("x", Review, retry=qa.RetryPolicy.none)
        with pytest.raises(qa.InvalidResponse):  # the canned body has no "models"
            client.list_models(retry=qa.RetryPolicy.none)
    lines = [split_request(raw)[0] for raw in recorder.requests]
    assert lines == [f"POST {core_path} HTTP/1.1", f"GET {models_path} HTTP/1.1"]


def test_fake_service_with_prefix_is_reached_through_base_url() -> None:
    with FakeService(prefix="/api/qa") as service, qa.Client(base_url=service.url + "/") as client:
        client.ask("x", Review)
        assert [m.name for m in client.list_models().models]
    assert [r.path for r in service.requests] == ["/api/qa/v1/core", "/api/qa/v1/models"]


# -- headers -------------------------------------------------------------------------------

EXTRA = [("X-Trace", "abc"), ("x-tenant", "t1")]


def recorded_headers(method: str, api_key: str | None, extra: list[tuple[str, str]]) -> list[tuple[str, str]]:
    body = {"answers": {"toxic": True, "quality": 0}, "models": [{"name": "m"}]}
    recorder = Recorder(ok_response(json.dumps(body).encode()))
    with (
        RawServer(recorder) as server,
        qa.Client(
            base_url=server.url, api_key=api_key, extra_headers=extra, retry=qa.RetryPolicy.none
        ) as client,
    ):
        if method == "POST":
            client.ask("x", Review)
        else:
            client.list_models()
    (raw,) = recorder.requests
    return split_request(raw)[1]


# Host and Content-Length frame the request; SPEC.md orders the others.
FRAMING = {"host", "content-length"}


@pytest.mark.parametrize("api_key", [KEY, None], ids=["with-key", "without-key"])
def test_post_header_set_and_order(api_key: str | None) -> None:
    headers = recorded_headers("POST", api_key, EXTRA)
    names = [name for name, _ in headers if name.lower() not in FRAMING]
    expected = ["Content-Type", "Accept", "User-Agent"]
    expected += ["Authorization"] if api_key else []
    assert names == [*expected, "X-Trace", "x-tenant"]
    assert {name.lower() for name, _ in headers} - {n.lower() for n in names} == FRAMING
    values = dict(headers)
    assert values["Content-Type"] == "application/json"
    assert values["Accept"] == "application/json"
    assert (values["X-Trace"], values["x-tenant"]) == ("abc", "t1")
    if api_key:
        assert values["Authorization"] == f"Bearer {api_key}"


@pytest.mark.parametrize("api_key", [KEY, None], ids=["with-key", "without-key"])
def test_get_header_set_and_order(api_key: str | None) -> None:
    headers = recorded_headers("GET", api_key, EXTRA)
    names = [name for name, _ in headers if name.lower() not in FRAMING]
    expected = ["Accept", "User-Agent"] + (["Authorization"] if api_key else [])
    assert names == [*expected, "X-Trace", "x-tenant"]
    assert "host" in {name.lower() for name, _ in headers}


def test_user_agent_names_library_and_version(svc: FakeService, client: qa.Client) -> None:
    client.ask("x", Review)
    agent = svc.requests[0].headers["user-agent"]
    assert "qa_min" in agent
    assert qa.__version__ in agent


def test_no_authorization_header_without_a_key(svc: FakeService, client: qa.Client) -> None:
    client.ask("x", Review)
    client.list_models()
    assert all("authorization" not in r.headers for r in svc.requests)


# -- which responses succeed ---------------------------------------------------------------


@pytest.mark.parametrize("status", [200, 201, 202, 203, 206, 299])
def test_any_2xx_with_a_good_body_is_success(svc: FakeService, client: qa.Client, status: int) -> None:
    svc.script(reply(status, GOOD_BODY))
    result = client.ask("x", Review)
    assert (result.answers.toxic, result.answers.quality) == (True, 2)


def test_204_without_a_body_is_invalid_response() -> None:
    # A 204 carries no body, hence no "answers": success status, unusable response.
    recorder = Recorder(b"HTTP/1.1 204 No Content\r\n\r\n")
    with RawServer(recorder) as server, qa.Client(base_url=server.url) as client:
        diagnostics = qa.Diagnostics()
        with pytest.raises(qa.InvalidResponse):
            client.ask("x", Review, diagnostics=diagnostics)
    assert (diagnostics.status, diagnostics.attempts) == (204, 1)


def test_extra_answer_ids_are_ignored(svc: FakeService, client: qa.Client) -> None:
    body = {"answers": {"toxic": False, "quality": 1, "unasked": "whatever", "other": [1]}, "usage": {}}
    svc.script(reply(200, body))
    result = client.ask("x", Review)
    assert (result.answers.toxic, result.answers.quality) == (False, 1)
    assert not hasattr(result.answers, "unasked")


@pytest.mark.parametrize(
    "body",
    [
        {"usage": {}},
        {"answers": None},
        {"answers": []},
        {"answers": "toxic"},
        {"answers": {}},
        {"answers": {"toxic": True}},
        {"answers": {"quality": 1}},
        {"answers": {"toxic": None, "quality": 1}},
    ],
    ids=["absent", "null", "array", "string", "empty", "one-missing", "other-missing", "null-answer"],
)
def test_missing_or_malformed_answers_is_invalid_response(
    svc: FakeService, client: qa.Client, body: object
) -> None:
    svc.script(reply(200, body))
    with pytest.raises(qa.InvalidResponse):
        client.ask("x", Review)


def test_absent_usage_is_an_empty_mapping(svc: FakeService, client: qa.Client) -> None:
    svc.script(reply(200, {"answers": {"toxic": True, "quality": 0}}))
    assert dict(client.ask("x", Review).usage) == {}


def test_usage_is_returned_as_sent(svc: FakeService, client: qa.Client) -> None:
    usage: dict[str, Any] = {"input_tokens": 3, "output_tokens": 2, "nested": {"cached": [1, 2]}}
    svc.script(reply(200, {"answers": {"toxic": True, "quality": 0}, "usage": usage}))
    assert dict(client.ask("x", Review).usage) == usage


@pytest.mark.parametrize(
    "usage", [None, [], "lots", 12, True], ids=["null", "array", "string", "int", "bool"]
)
def test_non_object_usage_is_invalid_response(svc: FakeService, client: qa.Client, usage: object) -> None:
    svc.script(reply(200, {"answers": {"toxic": True, "quality": 0}, "usage": usage}))
    with pytest.raises(qa.InvalidResponse):
        client.ask("x", Review)


def test_unknown_top_level_fields_are_ignored(svc: FakeService, client: qa.Client) -> None:
    body = {**GOOD_BODY, "model": "judge-9", "id": "r-1", "warnings": [{"code": 1}], "trace": None}
    svc.script(reply(200, body))
    result = client.ask("x", Review)
    assert result.answers.quality == 2


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"not json at all", "text/plain"),
        (b"<html><body><h1>Welcome to nginx!</h1></body></html>", "text/html"),
        (b'{"answers": {"toxic": tr', "application/json"),
        (b"[]", "application/json"),
        (b'"answers"', "application/json"),
        (b"null", "application/json"),
        (b"42", "application/json"),
        (b"", "application/json"),
        (b"\xff\xfe\x00garbage", "application/json"),
    ],
    ids=["text", "html", "truncated-json", "array", "string", "null", "number", "empty", "binary"],
)
def test_non_json_or_non_object_2xx_body_is_invalid_response(body: bytes, content_type: str) -> None:
    response = ok_response(body).replace(b"application/json", content_type.encode())
    with RawServer(Recorder(response)) as server, qa.Client(base_url=server.url) as client:
        with pytest.raises(qa.InvalidResponse):
            client.ask("x", Review, retry=qa.RetryPolicy.none)
        with pytest.raises(qa.InvalidResponse):
            client.list_models(retry=qa.RetryPolicy.none)


def test_body_cut_short_of_content_length_is_connection_failed(svc: FakeService, client: qa.Client) -> None:
    from qa_min.testing import truncate

    svc.script(truncate())
    with pytest.raises(qa.ConnectionFailed):
        client.ask("x", Review)


@pytest.mark.parametrize(
    ("status", "body", "content_type", "error", "detail"),
    [
        (400, b'{"detail": "state is too long"}', "application/json", qa.BadRequest, "state is too long"),
        (
            502,
            b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>",
            "text/html",
            qa.ServerError,
            "502 Bad Gateway",
        ),
        (404, b"", "text/plain", qa.NotFound, "404"),
        (422, b'{"detail": "questions mu', "application/json", qa.UnprocessableEntity, "questions mu"),
        (403, b"plain words, no JSON", "text/plain", qa.PermissionDenied, "plain words, no JSON"),
    ],
    ids=["json-detail", "html-page", "empty", "truncated-json", "plain-text"],
)
def test_non_2xx_body_of_any_shape_maps_by_status(
    svc: FakeService,
    client: qa.Client,
    status: int,
    body: bytes,
    content_type: str,
    error: type[qa.APIStatusError],
    detail: str,
) -> None:
    svc.script(reply(status, body, headers=[("Content-Type", content_type)]))
    diagnostics = qa.Diagnostics()
    with pytest.raises(error) as caught:
        client.ask("x", Review, diagnostics=diagnostics)
    assert caught.value.status == status
    assert str(status) in str(caught.value)
    assert detail in str(caught.value)
    assert diagnostics.body == body.decode()


# -- redirects -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("operation", ["ask", "list_models"])
def test_redirect_is_not_followed_and_raises_unexpected_status(status: int, operation: str) -> None:
    elsewhere = Recorder(ok_response(json.dumps(GOOD_BODY).encode()))
    with RawServer(elsewhere) as other:
        location = f"{other.url}/v1/{'core' if operation == 'ask' else 'models'}"
        redirect = raw_response(f"{status} Moved", headers=f"Location: {location}\r\n")
        with RawServer(Recorder(redirect)) as server, qa.Client(base_url=server.url, api_key=KEY) as client:
            diagnostics = qa.Diagnostics()
            call = (
                client.list_models
                if operation == "list_models"
                else lambda **kw: client.ask("x", Review, **kw)
            )
            with pytest.raises(qa.UnexpectedStatus) as caught:
                call(diagnostics=diagnostics)
        assert other.connections == 0
    assert elsewhere.requests == []
    assert caught.value.status == status
    assert KEY not in str(caught.value)


def test_redirect_is_not_retried() -> None:
    recorder = Recorder(raw_response("307 Temporary Redirect", headers="Location: http://127.0.0.1:9/\r\n"))
    with RawServer(recorder) as server, qa.Client(base_url=server.url, sleep=no_sleep) as client:
        diagnostics = qa.Diagnostics()
        with pytest.raises(qa.UnexpectedStatus):
            client.ask("x", Review, diagnostics=diagnostics)
    assert diagnostics.attempts == 1
    assert len(recorder.requests) == 1

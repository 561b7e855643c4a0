"""Tests of the public fake service, driven with raw ``http.client`` only."""

from __future__ import annotations

import _thread
import hashlib
import http.client
import inspect
import json
import math
import os
import pickle
import select
import socket
import struct
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
from support import wait_until

import qa_min as qa
from qa_min._fakecheck import StepKind
from qa_min.testing import (
    DEFAULT_MODELS,
    FakeService,
    MockTransport,
    RecordedRequest,
    Step,
    delay,
    drop,
    expected_answer,
    hang,
    reply,
    reset,
    truncate,
)

Connect = Callable[..., http.client.HTTPConnection]

YESNO = {"true": "it is", "false": "it is not"}
CHOICE = {"red": "Red", "green": "Green", "blue": "Blue", "cyan": "Cyan", "grey": "Grey"}
SCORE = ["zero", "one", "two", "three", "four", "five", "six"]


def rule(model: str, state: str, question_id: str, criteria: object) -> object:
    """The documented answer rule, written independently of the fake."""
    h = hashlib.sha256(f"{model}\0{state}\0{question_id}".encode()).digest()[0]
    if isinstance(criteria, list):
        return h % len(criteria)
    assert isinstance(criteria, dict)
    if set(criteria) == {"true", "false"}:
        return h % 2 == 0
    return list(criteria)[h % len(criteria)]


def core_body(
    state: str = "one two  three",
    questions: Mapping[str, object] | None = None,
    model: object = "judge-latest",
) -> dict[str, Any]:
    if questions is None:
        questions = {"q": {"criteria": YESNO}}
    return {"state": state, "questions": questions, "model": model}


def post(
    conn: http.client.HTTPConnection,
    body: object,
    path: str = "/v1/core",
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", path, data, {"Content-Type": "application/json", **(headers or {})})
    return read(conn)


def get(conn: http.client.HTTPConnection, path: str = "/v1/models", method: str = "GET") -> tuple[int, Any]:
    conn.request(method, path)
    return read(conn)


def read(conn: http.client.HTTPConnection) -> tuple[int, Any]:
    response = conn.getresponse()
    raw = response.read()
    assert response.getheader("Content-Length") == str(len(raw))
    assert response.getheader("Content-Type") == "application/json"
    return response.status, json.loads(raw)


@pytest.fixture
def connect() -> Iterator[Connect]:
    opened: list[http.client.HTTPConnection] = []

    def factory(service: FakeService) -> http.client.HTTPConnection:
        conn = http.client.HTTPConnection(*address(service), timeout=10)
        opened.append(conn)
        return conn

    yield factory
    for conn in opened:
        conn.close()


def address(service: FakeService) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(service.url)
    assert parts.hostname is not None
    assert parts.port is not None
    return parts.hostname, parts.port


def request_models(conn: http.client.HTTPConnection) -> http.client.HTTPResponse:
    conn.request("GET", "/v1/models")
    return conn.getresponse()


def raw_exchange(service: FakeService, data: bytes) -> bytes:
    """Send raw bytes and return everything the server sends before closing."""
    with socket.create_connection(address(service), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


# --- answers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["judge-latest", "judge-mini-1.3", "judge-7.0.1"])
@pytest.mark.parametrize("state", ["short", "A somewhat  longer\ttext\nwith lines", "é ✓"])
def test_answers_follow_the_hash_rule(svc: FakeService, connect: Connect, model: str, state: str) -> None:
    ids = [f"{kind}{i}" for kind in ("yn", "ch", "sc") for i in range(6)]
    criteria: dict[str, object] = {}
    for question_id in ids:
        kind = question_id[:2]
        criteria[question_id] = YESNO if kind == "yn" else CHOICE if kind == "ch" else SCORE
    questions = {qid: {"criteria": c, "extra": 1} for qid, c in criteria.items()}
    status, body = post(connect(svc), {**core_body(state, questions, model), "unknown": True})
    assert status == 200
    assert body["answers"] == {qid: rule(model, state, qid, c) for qid, c in criteria.items()}
    assert list(body["answers"]) == ids
    assert body["usage"] == {"input_tokens": len(state.split()), "output_tokens": len(ids)}
    assert body["model"] == model
    for qid, c in criteria.items():
        assert expected_answer(model, state, qid, c) == body["answers"][qid]


def test_answer_kinds_and_types(svc: FakeService, connect: Connect) -> None:
    questions = {
        "yn": {"criteria": YESNO},
        "three": {"criteria": {"true": "a", "false": "b", "maybe": "c"}},
        "two": {"criteria": {"yes": "a", "no": "b"}},
        "sc": {"criteria": ["low", "high"]},
    }
    _, body = post(connect(svc), core_body(questions=questions))
    answers = body["answers"]
    assert isinstance(answers["yn"], bool)
    assert answers["three"] in ("true", "false", "maybe")
    assert answers["two"] in ("yes", "no")
    assert type(answers["sc"]) is int
    assert answers["sc"] in (0, 1)


def test_both_yes_and_no_and_every_choice_occur(svc: FakeService, connect: Connect) -> None:
    questions: dict[str, object] = {f"q{i}": {"criteria": YESNO} for i in range(40)}
    questions.update({f"c{i}": {"criteria": ["a", "b", "c"]} for i in range(40)})
    _, body = post(connect(svc), core_body(questions=questions))
    values = list(body["answers"].values())
    assert {True, False} <= set(values)
    assert {0, 1, 2} <= set(values)


def test_expected_answer_rejects_invalid_criteria() -> None:
    with pytest.raises(ValueError, match="invalid criteria"):
        expected_answer("judge-latest", "s", "q", ["only one"])


# --- overrides ----------------------------------------------------------------------------------


def test_overrides_send_raw_values_and_others_follow_the_rule(svc: FakeService, connect: Connect) -> None:
    conn = connect(svc)
    criteria: dict[str, object] = {"a": YESNO, "b": CHOICE, "c": SCORE}
    questions = {question_id: {"criteria": c} for question_id, c in criteria.items()}
    svc.set_answers({"a": "not a bool", "b": "purple", "absent": 1})
    _, body = post(conn, core_body("s", questions))
    assert body["answers"] == {"a": "not a bool", "b": "purple", "c": rule("judge-latest", "s", "c", SCORE)}

    svc.set_answers({"c": True})
    _, body = post(conn, core_body("s", questions))
    assert body["answers"]["a"] == rule("judge-latest", "s", "a", YESNO)
    assert body["answers"]["c"] is True

    svc.set_answers({})
    _, body = post(conn, core_body("s", questions))
    assert body["answers"] == {q: rule("judge-latest", "s", q, c) for q, c in criteria.items()}


def test_set_answers_rejects_values_json_cannot_encode(svc: FakeService) -> None:
    with pytest.raises(TypeError):
        svc.set_answers({"a": object()})


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=repr)
def test_the_fake_never_sends_nan_or_an_infinity(svc: FakeService, connect: Connect, value: float) -> None:
    # json.dumps writes them as NaN, Infinity, -Infinity: not JSON (RFC 8259), so the fake would
    # have sent a body the client refuses. A test that means to send one scripts bytes.
    with pytest.raises(TypeError, match="Out of range float"):
        svc.set_answers({"toxic": value})
    with pytest.raises(TypeError, match="Out of range float"):
        reply(200, {"answers": {"toxic": True}, "usage": {"x": [value]}})
    conn = connect(svc)
    _, body = post(conn, core_body("s", {"toxic": {"criteria": YESNO}}))
    assert type(body["answers"]["toxic"]) is bool  # the overrides refused were never kept


# --- models -------------------------------------------------------------------------------------


@pytest.mark.parametrize("answers", [[("q", True)], None, {1: True}, {b"q": True}])
def test_set_answers_refuses_what_is_not_a_mapping_of_str_ids(svc: FakeService, answers: Any) -> None:
    # A list failed in dict() with "cannot convert dictionary update sequence element #0"; a key
    # that was not a str was accepted and matched no question id.
    with pytest.raises(TypeError, match=r"set_answers\(\) takes a mapping of question id \(str\)"):
        svc.set_answers(answers)


@pytest.mark.parametrize(
    ("n", "timeout", "words"), [("1", 0.1, "n must be an int"), (1, "0.1", "timeout must be")]
)
def test_wait_for_requests_checks_its_arguments(svc: FakeService, n: Any, timeout: Any, words: str) -> None:
    # Both failed on an operator inside the wait: '>=' between int and str, '+' of float and str.
    with pytest.raises(TypeError, match=words):
        svc.wait_for_requests(n, timeout)


def test_wait_for_requests_waits_5_seconds_by_default() -> None:
    # Its public signature: a test that forgets the timeout fails after 5 s rather than hanging.
    assert inspect.signature(FakeService.wait_for_requests).parameters["timeout"].default == 5.0


def test_wait_for_requests_takes_the_longest_wait_and_refuses_one_past(svc: FakeService) -> None:
    # A NaN timeout waited for ever; inf, 1e300 or 2**63 raised OverflowError from the lock.
    most = _thread.TIMEOUT_MAX
    assert svc.wait_for_requests(0, most)
    with qa.Client(base_url=svc.url) as client:
        client.list_models()
    assert svc.wait_for_requests(1, most)
    for past in (math.inf, 10**400, math.nextafter(most, math.inf), math.nan):
        with pytest.raises(ValueError, match=f"^timeout must be finite and at most {int(most)}, not "):
            svc.wait_for_requests(2, past)


def test_wait_for_requests_refuses_minus_infinity_and_takes_any_finite_negative(svc: FakeService) -> None:
    # -inf passed the check ("not finite" is a ValueError) and returned False; a negative int
    # past the largest float raised OverflowError from the lock.
    most = int(_thread.TIMEOUT_MAX)
    with pytest.raises(ValueError, match=f"^timeout must be finite and at most {most}, not -inf"):
        svc.wait_for_requests(1, -math.inf)
    for negative in (-1, -1e300, -(10**400)):
        assert svc.wait_for_requests(0, negative)
        assert not svc.wait_for_requests(1, negative)


@pytest.mark.parametrize("name", ["prefix", "host"])
def test_a_prefix_or_host_that_is_not_utf8_is_a_value_error(name: str) -> None:
    # Undecodable bytes (argv, os.environ) are surrogates: the prefix raised UnicodeEncodeError
    # when percent-encoded, the host TypeError("encoding of hostname failed") from bind().
    for char, refused in (
        (chr(0xD7FF), False),
        (chr(0xD800), True),
        (chr(0xDFFF), True),
        (chr(0xE000), False),
    ):
        value = "/p" + char if name == "prefix" else "localhost" + char
        if refused:
            with pytest.raises(ValueError, match=f"^{name} is not UTF-8: it holds the surrogate .* at index"):
                FakeService(prefix=value) if name == "prefix" else FakeService(host=value)
        elif name == "prefix":
            with FakeService(prefix=value) as service:
                assert service.url.endswith("/p" + urllib.parse.quote(char))


def test_default_models(svc: FakeService, connect: Connect) -> None:
    status, body = get(connect(svc))
    assert status == 200
    assert DEFAULT_MODELS == ("judge-latest", "judge-mini-latest", "judge-2.1", "judge-mini-1.3")
    assert body == {
        "models": [
            {"name": "judge-latest", "family": "judge"},
            {"name": "judge-mini-latest", "family": "judge-mini"},
            {"name": "judge-2.1", "family": "judge"},
            {"name": "judge-mini-1.3", "family": "judge-mini"},
        ]
    }


def test_custom_models_are_listed_and_accepted(connect: Connect) -> None:
    with FakeService(models=["alpha", "beta-latest"]) as svc:
        conn = connect(svc)
        _, body = get(conn, "/v1/models?verbose=1")
        assert body["models"] == [
            {"name": "alpha", "family": "alpha"},
            {"name": "beta-latest", "family": "beta"},
        ]
        assert post(conn, core_body(model="alpha"))[0] == 200
        assert post(conn, core_body(model="judge-latest"))[0] == 404


def test_models_must_not_be_a_single_string() -> None:
    with pytest.raises(TypeError):
        FakeService(models="judge-latest")


@pytest.mark.parametrize("models", [["judge-latest", 1], [None], [b"judge-latest"], 5])
def test_models_must_be_str_names(models: Any) -> None:
    # Accepted, a name that is not a str crashed every GET /v1/models' handler thread.
    with pytest.raises(TypeError, match="models must"):
        FakeService(models=models)


@pytest.mark.parametrize("model", ["judge-2.1", "judge-9.9", "judge-mini-1.0.3", "x-0.0"])
def test_versioned_and_listed_models_are_accepted(svc: FakeService, connect: Connect, model: str) -> None:
    status, body = post(connect(svc), core_body(model=model))
    assert status == 200
    assert body["model"] == model


@pytest.mark.parametrize("model", ["judge", "judge-2", "Judge-2.1", "judge-2.1\n", "2-1.0", "judge-2.x", ""])
def test_unknown_models_get_404(svc: FakeService, connect: Connect, model: str) -> None:
    status, body = post(connect(svc), core_body(model=model))
    assert status == 404
    assert body == {"detail": f"model {model!r} not found"}


# --- authentication -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "bearer sk-1"}, {"Authorization": "sk-1"}],
)
def test_wrong_or_missing_key_gets_401(connect: Connect, headers: dict[str, str]) -> None:
    with FakeService(api_key="sk-1") as svc:
        conn = connect(svc)
        for path in ("/v1/core", "/v1/models", "/nowhere"):
            conn.request("POST", path, json.dumps(core_body()), headers)
            response = conn.getresponse()
            body = json.loads(response.read())
            assert response.status == 401
            assert response.getheader("WWW-Authenticate") == "Bearer"
            assert "detail" in body
            assert "sk-1" not in json.dumps(body)


def test_right_key_is_accepted(connect: Connect) -> None:
    with FakeService(api_key="sk-1") as svc:
        conn = connect(svc)
        auth = {"Authorization": "Bearer sk-1"}
        assert post(conn, core_body(), headers=auth)[0] == 200
        conn.request("GET", "/v1/models", headers=auth)
        assert read(conn)[0] == 200
        assert svc.requests[0].headers["AUTHORIZATION"] == "Bearer sk-1"


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"", "not valid JSON"),
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe\x00", "not valid JSON"),
        (b"[" * 100_000, "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'"text"', "JSON object"),
        ({"questions": {"q": {"criteria": YESNO}}, "model": "judge-latest"}, "'state'"),
        (core_body(state=""), "'state'"),
        ({**core_body(), "state": 3}, "'state'"),
        ({"state": "s", "model": "judge-latest"}, "'questions'"),
        (core_body(questions={}), "'questions'"),
        ({**core_body(), "questions": [{"criteria": YESNO}]}, "'questions'"),
        (core_body(questions={"q": YESNO}), "question 'q'"),
        (core_body(questions={"q": {}}), "question 'q'"),
        (core_body(questions={"q": {"criteria": "yes"}}), "question 'q'"),
        (core_body(questions={"q": {"criteria": ["one"]}}), "question 'q'"),
        (core_body(questions={"q": {"criteria": ["one", 2]}}), "question 'q'"),
        (core_body(questions={"q": {"criteria": {"only": "one"}}}), "question 'q'"),
        (core_body(questions={"q": {"criteria": {"true": 1, "false": 0}}}), "question 'q'"),
        (core_body(questions={"q": {"criteria": {"a": "x", "b": None}}}), "question 'q'"),
        (
            core_body(questions={"ok": {"criteria": YESNO}, "bad": {"criteria": []}}),
            "question 'bad'",
        ),
        ({"state": "s", "questions": {"q": {"criteria": YESNO}}}, "'model'"),
        (core_body(model=None), "'model'"),
        (core_body(model=["judge-latest"]), "'model'"),
    ],
)
def test_malformed_core_bodies_get_422(svc: FakeService, connect: Connect, body: object, detail: str) -> None:
    conn = connect(svc)
    status, answer = post(conn, body)
    assert status == 422
    assert detail in answer["detail"]
    # The connection stays usable after a 422: the whole body was consumed.
    assert post(conn, core_body())[0] == 200


def test_post_without_content_length_has_an_empty_body(svc: FakeService) -> None:
    raw = raw_exchange(svc, b"POST /v1/core HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert raw.startswith(b"HTTP/1.1 422 ")
    assert svc.requests[0].body == b""


# --- routing ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/v1", "/v1/core/", "/v2/core", "/v1/models/x", "/api/v1/core"])
def test_unknown_paths_get_404(svc: FakeService, connect: Connect, path: str) -> None:
    status, body = post(connect(svc), core_body(), path=path)
    assert status == 404
    assert "detail" in body


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "/v1/core", "POST"),
        ("PUT", "/v1/core", "POST"),
        ("POST", "/v1/models", "GET"),
        ("DELETE", "/v1/models", "GET"),
        ("PATCH", "/v1/models", "GET"),
        ("OPTIONS", "/v1/core", "POST"),
    ],
)
def test_wrong_methods_get_405(
    svc: FakeService, connect: Connect, method: str, path: str, allowed: str
) -> None:
    conn = connect(svc)
    conn.request(method, path, b"{}" if method != "GET" else None)
    response = conn.getresponse()
    body = json.loads(response.read())
    assert response.status == 405
    assert response.getheader("Allow") == allowed
    assert method in body["detail"]


def test_head_gets_405_without_a_body_and_keeps_the_connection(svc: FakeService, connect: Connect) -> None:
    conn = connect(svc)
    conn.request("HEAD", "/v1/models")
    response = conn.getresponse()
    assert response.status == 405
    assert int(response.getheader("Content-Length", "0")) > 0
    assert response.read() == b""
    assert get(conn)[0] == 200
    assert svc.connections == 1


@pytest.mark.parametrize("prefix", ["/api", "api/", "/api/"])
def test_prefix_routing(connect: Connect, prefix: str) -> None:
    with FakeService(prefix=prefix) as svc:
        assert svc.url.endswith("/api")
        conn = connect(svc)
        assert post(conn, core_body(), path="/api/v1/core")[0] == 200
        assert get(conn, "/api/v1/models")[0] == 200
        assert post(conn, core_body(), path="/v1/core")[0] == 404
        assert get(conn, "/v1/models")[0] == 404
        assert [r.path for r in svc.requests] == [
            "/api/v1/core",
            "/api/v1/models",
            "/v1/core",
            "/v1/models",
        ]


def test_url_and_prefix_defaults(svc: FakeService) -> None:
    parts = urllib.parse.urlsplit(svc.url)
    assert parts.scheme == "http"
    assert parts.hostname == "127.0.0.1"
    assert parts.port is not None
    assert parts.port > 0
    assert parts.path == ""


# --- protocol errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_bytes", "status", "words"),
    [
        (b"POST /v1/core HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400, "invalid Content-Length"),
        (b"POST /v1/core HTTP/1.1\r\nContent-Length: -5\r\n\r\n", 400, "invalid Content-Length"),
        (
            b"POST /v1/core HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            501,
            "request bodies must be sent with Content-Length",
        ),
        (b"BREW /v1/core HTTP/1.1\r\n\r\n", 501, "BREW"),
        (b"GET /v1/models HTTP/9.9\r\n\r\n", 505, "9.9"),
        (b"THIS IS NOT HTTP AT ALL\r\n\r\n", 400, "Bad request"),
        # Exactly one byte over the limit and no newline, so nothing is left unread (which
        # would turn the server's close into a reset). http.server gives this one no message:
        # the detail is the status's reason phrase ("URI Too Long" from Python 3.13 on).
        (b"GET /" + b"x" * (65_537 - 5), 414, HTTPStatus(414).phrase),
    ],
)
def test_protocol_errors_get_json_and_close(
    svc: FakeService, request_bytes: bytes, status: int, words: str
) -> None:
    raw = raw_exchange(svc, request_bytes)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode())
    assert b"\r\nConnection: close" in head
    assert b"\r\nContent-Type: application/json" in head
    assert f"\r\nContent-Length: {len(body)}".encode() in head
    assert words in json.loads(body)["detail"]


def test_every_response_names_the_fake_in_its_server_header_without_pythons_version(
    svc: FakeService, connect: Connect
) -> None:
    # http.server's own version string adds "Python/3.x": the fake names itself alone, on an
    # answer, on a 404 and on a protocol error alike.
    conn = connect(svc)
    for path in ("/v1/models", "/nowhere"):
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        assert (response.status, response.getheader("Server")) == (
            200 if path == "/v1/models" else 404,
            "qa_min-fake/1",
        )
    head = raw_exchange(svc, b"THIS IS NOT HTTP AT ALL\r\n\r\n").partition(b"\r\n\r\n")[0]
    assert b"\r\nServer: qa_min-fake/1\r\n" in head


# --- scripted steps -----------------------------------------------------------------------------


def test_reply_steps_are_consumed_in_order_on_any_path(svc: FakeService, connect: Connect) -> None:
    conn = connect(svc)
    svc.script(reply(503, {"detail": "busy"}), reply(529, {"detail": "overloaded"}))
    svc.script(reply(200, {"models": []}))
    assert post(conn, core_body()) == (503, {"detail": "busy"})
    assert get(conn) == (529, {"detail": "overloaded"})
    assert post(conn, core_body(), path="/whatever") == (200, {"models": []})
    assert post(conn, core_body())[0] == 200
    assert svc.connections == 1


@pytest.mark.parametrize(
    ("body", "headers", "sent", "content_type"),
    [
        (None, (), b"", None),
        (b"\x00raw", (), b"\x00raw", "text/plain; charset=utf-8"),
        ("<html>é</html>", (("content-type", "text/html"),), "<html>é</html>".encode(), "text/html"),
        ([1, "two"], (), b'[1, "two"]', "application/json"),
        ("", (("Content-Length", "999"),), b"", "text/plain; charset=utf-8"),
    ],
)
def test_reply_bodies(
    svc: FakeService,
    connect: Connect,
    body: object,
    headers: tuple[tuple[str, str], ...],
    sent: bytes,
    content_type: str | None,
) -> None:
    conn = connect(svc)
    svc.script(reply(302, body, headers=(*headers, ("Location", "http://elsewhere/"))))
    conn.request("GET", "/v1/models")
    response = conn.getresponse()
    assert response.status == 302
    assert response.read() == sent
    assert response.getheader("Content-Length") == str(len(sent))
    assert response.getheader("Content-Type") == content_type
    assert response.getheader("Location") == "http://elsewhere/"
    assert get(conn)[0] == 200


def test_reply_connection_close_header_closes(svc: FakeService, connect: Connect) -> None:
    conn = connect(svc)
    svc.script(reply(500, "oops", headers=[("Connection", "close")]))
    conn.request("GET", "/v1/models")
    response = conn.getresponse()
    assert response.read() == b"oops"
    assert response.will_close
    assert get(conn)[0] == 200
    assert svc.connections == 2


@pytest.mark.parametrize("status", [100, 199, 600])
def test_reply_rejects_statuses_outside_200_599(status: int) -> None:
    with pytest.raises(ValueError, match="status"):
        reply(status)


@pytest.mark.parametrize(
    ("status", "error", "words"),
    [(600, ValueError, "status must be within 200-599, not 600"), ("200", TypeError, "must be an int")],
)
def test_reply_tells_a_bad_status_before_a_body_json_cannot_encode(
    status: Any, error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        reply(status, float("nan"))


@pytest.mark.parametrize("status", ["200", 200.5, None, True])
def test_reply_refuses_a_status_that_is_not_an_int(status: Any) -> None:
    # "200" failed on a comparison of int and str; 200.5 was accepted and sent as 200.
    with pytest.raises(TypeError, match="status must be an int"):
        reply(status)


@pytest.mark.parametrize("headers", ["x-a: b", [("x-a",)], [("x-a", 1)], [(b"x-a", b"b")], [None], None, 5])
def test_reply_refuses_headers_that_are_not_pairs_of_str(headers: Any) -> None:
    # A value that was not a str was accepted; a pair of the wrong length failed on unpacking.
    with pytest.raises(TypeError, match=r"headers must be a sequence of \(name, value\) pairs of str"):
        reply(200, headers=headers)


@pytest.mark.parametrize(
    "pair", [("x-a", "b\r\nx-injected: 1"), ("x-a", "b\nc"), ("x-a\r", "b"), ("x-a", "b\0")]
)
def test_reply_refuses_a_header_that_would_break_its_line(pair: tuple[str, str]) -> None:
    # Written as given, the line break ended the field and started another one in the response.
    with pytest.raises(ValueError, match="must not hold CR, LF or NUL"):
        reply(200, headers=[pair])


@pytest.mark.parametrize("pair", [("x-a", "5 \u20ac"), ("x-\u00e9\u4e2d", "b")])
def test_reply_refuses_a_header_outside_latin1(pair: tuple[str, str]) -> None:
    # The fake's server failed to encode it while answering: a traceback on stderr and a dropped
    # connection (ConnectionFailed), while a MockTransport delivered the same reply whole.
    with pytest.raises(ValueError, match="must be Latin-1 text"):
        reply(200, headers=[pair])


# Every character a token may hold besides letters and digits (RFC 9110 section 5.6.2).
TOKEN_PUNCTUATION = "!#$%&'*+-.^_`|~"
# What a token may not hold: the delimiters, blanks, other controls, a Latin-1 letter.
NOT_IN_A_TOKEN = ['"', *"(),/:;<=>?@[\\]{}", " ", "\t", "\x01", "\x7f", "\u00e9"]


def headers_over_both(svc: FakeService, step: Step) -> list[qa.ResponseHeaders]:
    """The headers a client read of ``step``, scripted on ``svc`` and answered by a MockTransport."""
    seen = []
    for client in (
        qa.Client(base_url=svc.url),
        qa.Client(base_url="http://mock.test", transport=MockTransport(lambda request: step)),
    ):
        svc.script(step)
        diag = qa.Diagnostics()
        with client:
            client.list_models(retry=qa.RetryPolicy.none, diagnostics=diag)
        assert diag.headers is not None
        seen.append(diag.headers)
    return seen


def test_reply_takes_a_header_name_of_every_token_character_alike_over_a_socket_and_the_mock(
    svc: FakeService,
) -> None:
    name = f"Az09{TOKEN_PUNCTUATION}"
    seen = headers_over_both(svc, reply(200, {"models": []}, headers=[(name, "v")]))
    assert [[pair for pair in headers.items() if pair[0] == name] for headers in seen] == [[(name, "v")]] * 2


@pytest.mark.parametrize(
    "name",
    ["", *(f"x{char}y" for char in NOT_IN_A_TOKEN), " x-a", "x-a ", "x-a:"],
    ids=repr,
)
def test_reply_refuses_a_header_name_that_is_not_a_token(name: str) -> None:
    # Over a socket the client refused the head (MalformedHead: a ConnectionFailed), or read
    # "x:y: v" as the field "x", while a MockTransport delivered the same reply as given.
    with pytest.raises(ValueError, match="is not an RFC 9110 token") as caught:
        reply(200, headers=[(name, "v")])
    assert f"header name {name!r} " in str(caught.value)


def test_reply_sends_a_latin1_header_value_alike_over_a_socket_and_the_mock(svc: FakeService) -> None:
    seen = headers_over_both(svc, reply(200, {"models": []}, headers=[("x-a", "caf\u00e9 \u00ff")]))
    assert [headers["x-a"] for headers in seen] == ["caf\u00e9 \u00ff"] * 2


def test_reply_sends_a_header_value_with_a_tab_as_given() -> None:
    with FakeService() as svc:
        svc.script(reply(200, {"models": [{"name": "m"}]}, headers=[("x-a", "b\tc")]))
        with qa.Client(base_url=svc.url, api_key="k-tab") as client:
            models = client.list_models()
    assert models.diagnostics.headers is not None
    assert models.diagnostics.headers.get("x-a") == "b\tc"


def test_reply_takes_header_pairs_as_lists_or_tuples() -> None:
    headers: Any = [["x-a", "1"], ("x-b", "2")]
    assert reply(204, headers=headers).headers == (("x-a", "1"), ("x-b", "2"))


def test_reply_rejects_bodies_json_cannot_encode() -> None:
    with pytest.raises(TypeError):
        reply(200, {1, 2})


@pytest.mark.parametrize("step", ["drop", None, 503, (503, "busy")])
def test_script_refuses_what_is_not_a_step(svc: FakeService, connect: Connect, step: object) -> None:
    # Queued, it would crash the handler thread that took it, and the client saw a dropped connection.
    with pytest.raises(TypeError, match=r"script\(\) takes steps built by reply"):
        svc.script(reply(503), step)  # type: ignore[arg-type]
    assert get(connect(svc))[0] == 200  # nothing of the call was queued
    assert len(svc.requests) == 1


def test_drop_closes_without_a_response(svc: FakeService, connect: Connect) -> None:
    svc.script(drop())
    conn = connect(svc)
    conn.request("POST", "/v1/core", json.dumps(core_body()))
    with pytest.raises(http.client.RemoteDisconnected):
        conn.getresponse()
    conn.close()
    assert post(conn, core_body())[0] == 200
    assert svc.connections == 2
    assert len(svc.requests) == 2


def test_reset_sends_a_tcp_reset(svc: FakeService, connect: Connect) -> None:
    svc.script(reset())
    conn = connect(svc)
    conn.request("POST", "/v1/core", json.dumps(core_body()))
    with pytest.raises(ConnectionResetError) as caught:
        conn.getresponse()
    # RemoteDisconnected is a ConnectionResetError too, but means an orderly close.
    assert not isinstance(caught.value, http.client.RemoteDisconnected)
    assert svc.requests[0].json() == core_body()


def test_truncate_sends_part_of_the_body(svc: FakeService, connect: Connect) -> None:
    svc.script(truncate())
    conn = connect(svc)
    conn.request("GET", "/v1/models")
    response = conn.getresponse()
    assert response.status == 200
    assert response.getheader("Content-Type") == "application/json"
    with pytest.raises(http.client.IncompleteRead) as caught:
        response.read()
    expected = int(response.getheader("Content-Length", "0"))
    assert 0 < len(caught.value.partial) < expected


def test_hang_holds_the_request_until_release(svc: FakeService, connect: Connect) -> None:
    svc.script(hang(), hang())
    first, second = connect(svc), connect(svc)
    first.request("POST", "/v1/core", json.dumps(core_body()))
    assert svc.wait_for_requests(1)
    second.request("GET", "/v1/models")
    assert svc.wait_for_requests(2)
    # Both are held from the moment they are recorded, even if release() wins the race.
    svc.release()
    with pytest.raises(http.client.RemoteDisconnected):
        first.getresponse()
    with pytest.raises(http.client.RemoteDisconnected):
        second.getresponse()
    assert post(connect(svc), core_body())[0] == 200


def test_release_wakes_a_request_already_waiting_in_its_hang(svc: FakeService, connect: Connect) -> None:
    svc.script(hang())
    held = connect(svc)
    held.request("GET", "/v1/models")
    assert svc.wait_for_requests(1)
    # A whole exchange on another connection after it, that connection then closed and its thread
    # gone: the held request is waiting by now, and nothing but release() itself can wake it.
    assert get(connect(svc))[0] == 200
    svc.close_idle_connections()
    svc.release()
    with pytest.raises(http.client.RemoteDisconnected):
        held.getresponse()


def assert_a_new_hang_holds(svc: FakeService, connect: Connect) -> None:
    """A `hang` scripted now holds the next request (its service, with no request recorded yet,
    is closed at the end)."""
    svc.script(hang())
    conn = connect(svc)
    conn.request("GET", "/v1/models")
    assert svc.wait_for_requests(1)
    conn.sock.settimeout(0.2)
    with pytest.raises(socket.timeout):
        conn.getresponse()
    svc.close()


def test_release_does_not_free_later_hangs(svc: FakeService, connect: Connect) -> None:
    svc.release()
    assert_a_new_hang_holds(svc, connect)


def test_clear_forgets_the_script_the_answers_the_requests_and_the_counts(
    svc: FakeService, connect: Connect
) -> None:
    svc.script(reply(503, {"detail": "busy"}), reply(503, {"detail": "busy"}))
    svc.set_answers({"q": "overridden"})
    conn = connect(svc)
    assert post(conn, core_body())[0] == 503  # one step taken, one left
    assert (svc.request_count, svc.connections) == (1, 1)
    svc.clear()
    assert (svc.requests, svc.request_count, svc.connections, svc.rate_limited_count) == ([], 0, 0, 0)
    # The open connection stays, and the next request gets the rule's answer: no step, no override.
    status, body = post(conn, core_body())
    assert status == 200
    assert body["answers"]["q"] == rule("judge-latest", "one two  three", "q", YESNO)
    assert [r.path for r in svc.requests] == ["/v1/core"]
    assert (svc.request_count, svc.connections) == (1, 0)
    assert not svc.wait_for_requests(2, timeout=0)  # counted from the clear


def test_clear_releases_a_held_request_and_later_hangs_still_hold(svc: FakeService, connect: Connect) -> None:
    svc.script(hang())
    held = connect(svc)
    held.request("GET", "/v1/models")
    assert svc.wait_for_requests(1)
    svc.clear()
    with pytest.raises(http.client.RemoteDisconnected):
        held.getresponse()
    assert_a_new_hang_holds(svc, connect)  # counted from the clear


def test_clear_refills_the_rate_limits_bucket_and_restarts_its_count(connect: Connect) -> None:
    with FakeService(rate_limit=(0.01, 2), retry_after="ms") as svc:  # no refill within the test
        conn = connect(svc)
        assert [get(conn)[0] for _ in range(3)] == [200, 200, 429]
        assert svc.rate_limited_count == 1
        svc.clear()
        assert svc.rate_limited_count == 0
        assert [get(conn)[0] for _ in range(3)] == [200, 200, 429]
        assert (svc.request_count, svc.rate_limited_count) == (3, 1)


def test_delay_serves_normally_after_the_delay(svc: FakeService, connect: Connect) -> None:
    svc.script(delay(0.1), delay(0))
    conn = connect(svc)
    started = time.monotonic()
    status, body = post(conn, core_body())
    assert time.monotonic() - started >= 0.1
    assert status == 200
    assert body["answers"]["q"] == rule("judge-latest", "one two  three", "q", YESNO)
    assert get(conn)[0] == 200


def test_delay_rejects_negative_seconds() -> None:
    with pytest.raises(ValueError, match="negative"):
        delay(-1)


@pytest.mark.parametrize("seconds", [math.nan, math.inf])
def test_delay_refuses_seconds_that_are_not_finite(seconds: float) -> None:
    # A NaN delay held its request until close(), as hang() does, instead of serving it late.
    with pytest.raises(ValueError, match="finite"):
        delay(seconds)


def test_delay_of_the_longest_wait_holds_the_request_and_one_past_is_refused(svc: FakeService) -> None:
    # delay(1e300) was taken, and the thread serving it raised OverflowError (a longer wait than a
    # lock takes) and dropped the connection: the client saw a failure, not a slow answer.
    most = _thread.TIMEOUT_MAX
    for past in (math.nextafter(most, math.inf), 1e300, 10**400):
        with pytest.raises(ValueError, match=f"^seconds must be finite and at most {int(most)} .*not "):
            delay(past)
    svc.script(delay(most))
    with (
        qa.Client(base_url=svc.url, retry=qa.RetryPolicy.none) as client,
        pytest.raises(qa.Canceled, match="timeout"),
    ):
        client.list_models(timeout=0.1)
    assert svc.request_count == 1


@pytest.mark.parametrize("seconds", ["1", None, True])
def test_delay_refuses_seconds_that_are_not_a_number(seconds: Any) -> None:
    with pytest.raises(TypeError, match="seconds must be a number"):
        delay(seconds)


def _built(field: str, value: Any) -> Step:
    """The step the builder of ``field`` makes of ``value``."""
    if field == "seconds":
        return delay(value)
    if field == "status":
        return reply(value)
    return reply(200, headers=value)


MOST = _thread.TIMEOUT_MAX


@pytest.mark.parametrize(
    ("field", "at_limit", "past", "words"),
    [
        ("status", 200, 199, "status must be within 200-599, not 199"),
        ("status", 599, 600, "status must be within 200-599, not 600"),
        ("status", 599, True, "status must be an int within 200-599"),
        ("headers", (("x-a", "\xff"),), (("x-a", "\u0100"),), "must be Latin-1 text"),
        ("headers", ((f"Az09{TOKEN_PUNCTUATION}", "v"),), (("x y", "v"),), "'x y' is not an RFC 9110 token"),
        ("headers", (("x-a", "b\tc"),), (("x-a", "b\rc"),), "must not hold CR, LF or NUL"),
        ("headers", (("x-a", "b"),), (("x-a",),), "headers must be a sequence of (name, value) pairs of str"),
        ("seconds", 0.0, math.nextafter(0.0, -1.0), "seconds must not be negative"),
        ("seconds", MOST, math.nextafter(MOST, math.inf), f"seconds must be finite and at most {int(MOST)} "),
        ("seconds", MOST, math.nan, "seconds must be finite"),
        ("seconds", 0, "0", "seconds must be a number"),
    ],
    ids=repr,
)
def test_a_step_built_directly_refuses_what_its_builder_refuses(
    field: str, at_limit: Any, past: Any, words: str
) -> None:
    # Step("reply", status=999, headers=(("bad name", "x"),)) was taken as given: FakeService's
    # thread then failed on it or sent it, while MockTransport delivered it, unchecked.
    kind: StepKind = "delay" if field == "seconds" else "reply"
    assert getattr(Step(kind, **{field: at_limit}), field) == at_limit
    _built(field, at_limit)  # the builder takes it too
    with pytest.raises((TypeError, ValueError)) as by_builder:
        _built(field, past)
    with pytest.raises((TypeError, ValueError)) as direct:
        Step(kind, **{field: past})
    assert words in str(direct.value)
    assert (type(direct.value), str(direct.value)) == (type(by_builder.value), str(by_builder.value))


def test_a_reply_step_built_directly_without_a_status_answers_200(svc: FakeService, connect: Connect) -> None:
    step = Step("reply", body=b"{}", headers=(("Content-Type", "application/json"),))
    assert step.status == 200
    svc.script(step)
    assert get(connect(svc)) == (200, {})


@pytest.mark.parametrize("kind", ["reply", "delay", "hang", "drop", "reset", "truncate"])
def test_a_step_of_each_kind_is_taken(kind: Any) -> None:
    assert Step(kind).kind == kind


@pytest.mark.parametrize(
    ("kind", "error", "words"),
    [
        (
            "truncated",
            ValueError,
            "kind must be one of reply, delay, hang, drop, reset, truncate, not 'truncated'",
        ),
        ("Reply", ValueError, "kind must be one of reply, delay, hang, drop, reset, truncate, not 'Reply'"),
        (None, TypeError, "kind must be a str, one of reply, delay, hang, drop, reset, truncate, not None"),
    ],
)
def test_a_step_of_another_kind_is_refused(kind: Any, error: type[Exception], words: str) -> None:
    # FakeService played an unknown kind as a dropped connection, MockTransport as the normal answer.
    with pytest.raises(error) as caught:
        Step(kind)
    assert str(caught.value) == words


def test_a_step_built_directly_needs_a_bytes_body_and_keeps_its_headers_as_pairs() -> None:
    with pytest.raises(
        TypeError, match=r"^a Step's body must be bytes \(reply\(\) encodes str and JSON\), not 'x'$"
    ):
        Step("reply", body="x")  # type: ignore[arg-type]
    headers: Any = [["x-a", "1"]]
    step = Step("reply", body=b"", headers=headers)
    assert step.headers == (("x-a", "1"),)
    assert hash(step) == hash(Step("reply", headers=(("x-a", "1"),)))


def test_a_step_keeps_the_plain_value_of_a_bytes_or_number_subclass_so_none_of_its_overrides_runs(
    svc: FakeService, connect: Connect
) -> None:
    # The step kept the caller's object: over a socket a float subclass's own __radd__ ran in the
    # thread serving a delay (the connection dropped, with a traceback), while MockTransport
    # served the request; an int subclass's own __eq__ ran where MockTransport read the status.
    class Seconds(float):
        def __radd__(self, other: object) -> float:
            raise AssertionError("__radd__ ran")

    class Status(int):
        def __eq__(self, other: object) -> bool:
            raise AssertionError("__eq__ ran")

        __hash__ = int.__hash__

    class Body(bytes):
        def __len__(self) -> int:
            raise AssertionError("__len__ ran")

    steps = [
        delay(Seconds(0.0)),
        Step("reply", status=Status(503), body=Body(b"{}"), headers=(("Content-Type", "application/json"),)),
    ]
    assert [(type(step.seconds), type(step.status)) for step in steps] == [(float, int), (float, int)]
    assert type(steps[1].body) is bytes
    assert bytes.__eq__(steps[1].body, b"{}")
    svc.script(*steps)
    conn = connect(svc)
    assert get(conn)[0] == 200
    assert get(conn) == (503, {})
    transport = MockTransport(lambda request: steps[0])
    with qa.Client(base_url="http://qa.test", transport=transport) as client:
        assert len(client.list_models()) == len(DEFAULT_MODELS)


def test_a_step_built_directly_at_its_limits_plays_alike_over_a_socket_and_the_mock(svc: FakeService) -> None:
    step = Step("reply", status=200, body=b'{"models": []}', headers=((f"Az09{TOKEN_PUNCTUATION}", "\xff"),))
    seen = headers_over_both(svc, step)
    assert [headers[f"Az09{TOKEN_PUNCTUATION}"] for headers in seen] == ["\xff"] * 2


def test_close_interrupts_a_delay(connect: Connect) -> None:
    svc = FakeService().start()
    svc.script(delay(60))
    conn = connect(svc)
    conn.request("GET", "/v1/models")
    assert svc.wait_for_requests(1)
    started = time.monotonic()
    svc.close()
    assert time.monotonic() - started < 5
    with pytest.raises(http.client.RemoteDisconnected):
        conn.getresponse()


# --- recording ----------------------------------------------------------------------------------


def test_requests_are_recorded_in_order(svc: FakeService, connect: Connect) -> None:
    conn = connect(svc)
    svc.script(reply(500, {"detail": "scripted"}))
    # Scripted requests are recorded too.
    assert post(conn, b'{"a": 1}', headers={"X-Test": "1"})[0] == 500
    get(conn, "/v1/models?x=1")
    requests = svc.requests
    assert [(r.method, r.path) for r in requests] == [
        ("POST", "/v1/core"),
        ("GET", "/v1/models?x=1"),
    ]
    first = requests[0]
    assert isinstance(first, RecordedRequest)
    assert first.body == b'{"a": 1}'
    assert first.json() == {"a": 1}
    assert first.headers["x-test"] == first.headers["X-TEST"] == "1"
    assert "x-test" in first.headers
    assert first.headers.get("missing") is None
    assert len(first.headers) == len(list(first.headers))
    assert "Headers(" in repr(first.headers)
    assert "'x-test': '1'" in repr(first.headers)
    assert requests[1].body == b""
    requests.clear()
    assert len(svc.requests) == 2


def test_repeated_headers_are_folded(svc: FakeService, connect: Connect) -> None:
    conn = connect(svc)
    conn.putrequest("GET", "/v1/models")
    conn.putheader("X-Many", "a")
    conn.putheader("x-many", "b")
    conn.endheaders()
    read(conn)
    assert svc.requests[0].headers["X-Many"] == "a, b"


def test_wait_for_requests(svc: FakeService, connect: Connect) -> None:
    assert svc.wait_for_requests(0, timeout=0)
    assert not svc.wait_for_requests(1, timeout=0.05)
    conn = connect(svc)
    svc.script(hang())
    conn.request("GET", "/v1/models")
    assert svc.wait_for_requests(1, timeout=5)
    svc.release()


def test_wait_for_requests_wakes_when_a_request_a_hang_holds_is_recorded(
    svc: FakeService, connect: Connect
) -> None:
    # A held request wakes no one after it is recorded: the recording itself must wake a waiter.
    # The head goes first (the service marks the connection busy, which wakes waiters too), the
    # body once the service's lock is held, so that the request is recorded while the waiter waits.
    svc.script(hang())
    state = svc._state
    conn = connect(svc)
    conn.putrequest("POST", "/v1/core")
    conn.putheader("Content-Length", "2")
    conn.endheaders()
    assert wait_until(lambda: any(each.state == "busy" for each in list(state._conns.values())))
    started = time.monotonic()
    with state._cond:
        conn.send(b"{}")
        # True at its timeout too: the request is recorded by then. Woken, it returns at once.
        assert svc.wait_for_requests(1, timeout=5)
    assert time.monotonic() - started < 4
    svc.release()
    with pytest.raises(http.client.RemoteDisconnected):
        conn.getresponse()


def test_wait_for_requests_wakes_on_arrival(svc: FakeService, connect: Connect) -> None:
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(svc.wait_for_requests(2, 10)))
    waiter.start()
    conn = connect(svc)
    get(conn)
    get(conn)
    waiter.join()
    assert result == [True]


# --- connections --------------------------------------------------------------------------------


def test_keep_alive_reuses_one_connection(svc: FakeService, connect: Connect) -> None:
    conn = connect(svc)
    assert svc.connections == 0
    for _ in range(3):
        assert post(conn, core_body())[0] == 200
    assert svc.connections == 1


def test_close_idle_connections_closes_kept_alive_ones(svc: FakeService, connect: Connect) -> None:
    idle, busy = connect(svc), connect(svc)
    assert get(idle)[0] == 200
    svc.script(hang())
    busy.request("GET", "/v1/models")
    assert svc.wait_for_requests(2)

    svc.close_idle_connections()

    with pytest.raises(ConnectionError):
        request_models(idle)
    idle.close()
    assert get(idle)[0] == 200
    assert svc.connections == 3
    # The busy connection was left alone: it is still held by its hang step, its socket open.
    assert busy.sock is not None
    assert select.select([busy.sock], [], [], 0)[0] == []
    svc.release()
    with pytest.raises(http.client.RemoteDisconnected):
        busy.getresponse()


def test_close_idle_connections_closes_one_that_never_sent_a_request(svc: FakeService) -> None:
    # A connection opened and left silent is idle too, as a keep-alive timeout sees it.
    before = threading.active_count()
    with socket.create_connection(address(svc), timeout=10) as sock:
        assert wait_until(lambda: svc.connections == 1)
        assert threading.active_count() == before + 1
        svc.close_idle_connections()
        assert threading.active_count() == before  # it returns once the connection's thread is gone
        assert sock.recv(1) == b""


def test_close_idle_connections_right_after_each_response(svc: FakeService, connect: Connect) -> None:
    for _ in range(20):
        conn = connect(svc)
        assert get(conn)[0] == 200
        svc.close_idle_connections()
        with pytest.raises(ConnectionError):
            request_models(conn)
        conn.close()


def test_a_client_vanishing_mid_response_is_harmless(
    connect: Connect, capsys: pytest.CaptureFixture[str]
) -> None:
    before = threading.active_count()
    with FakeService() as svc:
        # Far more than the socket buffers hold, so the server is still writing at the reset.
        svc.script(reply(200, b"x" * 32_000_000))
        with socket.create_connection(address(svc), timeout=10) as sock:
            sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            assert svc.wait_for_requests(1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        assert get(connect(svc))[0] == 200
    assert threading.active_count() == before
    # Silent too: no traceback of the broken pipe on stderr (close() joined the thread writing).
    assert capsys.readouterr().err == ""


def test_a_failure_of_the_fakes_own_code_is_printed_not_swallowed(
    svc: FakeService, connect: Connect, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A vanished client is silent (above); an error that is no socket's shows its traceback.
    def broken(recorded: RecordedRequest) -> Any:
        raise RuntimeError("a bug in the fake")

    monkeypatch.setattr(svc._state, "respond", broken)
    with pytest.raises(http.client.RemoteDisconnected):
        get(connect(svc))  # the connection is closed after the traceback is written
    err = capsys.readouterr().err
    assert "Exception occurred during processing of request" in err
    assert "RuntimeError: a bug in the fake" in err


def test_a_response_goes_out_in_one_write(
    svc: FakeService, connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Head and body written apart cost a second send, and a second wake-up of the client.
    writes: list[str] = []
    for name in ("send", "sendall"):
        original = getattr(socket.socket, name)

        def counted(
            self: socket.socket, data: Any, *args: Any, _original: Any = original, _name: str = name
        ) -> Any:
            if threading.current_thread().name.startswith("qa_min-fake-conn-"):
                writes.append(_name)
            return _original(self, data, *args)

        monkeypatch.setattr(socket.socket, name, counted)
    conn = connect(svc)
    assert get(conn)[0] == 200
    assert post(conn, core_body())[0] == 200
    assert get(conn, "/nowhere")[0] == 404
    assert len(writes) == 3


def test_concurrent_connections(svc: FakeService, connect: Connect) -> None:
    conns = [connect(svc) for _ in range(20)]
    for conn in conns:
        conn.request("POST", "/v1/core", json.dumps(core_body()))
    assert all(read(conn)[0] == 200 for conn in conns)
    assert svc.connections == 20


def test_a_finished_connection_leaves_neither_its_socket_nor_its_thread_behind(
    svc: FakeService, connect: Connect
) -> None:
    # A fake on a port ("qa-min fake") serves for hours: it forgets a connection once its
    # thread ends, and lets that thread go when the next connection comes.
    state = svc._state
    first = connect(svc)
    assert get(first)[0] == 200
    first.close()
    assert wait_until(lambda: not state._conns)
    assert wait_until(lambda: not any(thread.is_alive() for thread in state._threads))
    assert get(connect(svc))[0] == 200
    assert len(state._conns) == len(state._threads) == 1


def _somaxconn() -> int:
    """The kernel's cap on a listen backlog (Linux), 0 where it cannot be read."""
    try:
        with open("/proc/sys/net/core/somaxconn") as f:
            return int(f.read())
    except OSError:
        return 0


def test_the_accept_queue_holds_a_burst_of_a_thousand_connects() -> None:
    # A connect past the accept queue is dropped and waits for SYN retransmits (1 s, 3 s, ...):
    # 1,000 concurrent calls against a backlog of 128 took 8 s instead of 1.
    burst = 1000
    if _somaxconn() < burst:
        pytest.skip("the kernel caps a listen backlog below the burst (or is not Linux)")
    with FakeService() as svc:
        running = svc._state._running
        assert running is not None
        server = running.server
        holding, go = threading.Event(), threading.Event()
        serve = server.process_request

        def held(request: Any, client_address: Any) -> None:
            holding.set()  # the accept thread waits here: nothing leaves the queue meanwhile
            go.wait(10)
            serve(request, client_address)

        server.process_request = held  # type: ignore[method-assign]
        first = socket.create_connection(address(svc), timeout=10)
        socks: list[socket.socket] = []
        try:
            assert holding.wait(10)
            for _ in range(burst):
                sock = socket.socket()
                socks.append(sock)
                sock.setblocking(False)
                sock.connect_ex(address(svc))
            # Connected = writable with no error; the queue takes each at once, or drops it.
            pending = {sock.fileno(): sock for sock in socks}
            poller = select.poll()  # not select(): these descriptors may be over FD_SETSIZE
            for fd in pending:
                poller.register(fd, select.POLLOUT)
            deadline = time.monotonic() + 2.0
            while pending and time.monotonic() < deadline:
                for fd, _ in poller.poll(50):
                    poller.unregister(fd)
                    error = pending.pop(fd).getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    assert error == 0, f"a connect to the fake failed: {os.strerror(error)}"
        finally:
            for sock in socks:
                sock.close()
            first.close()
            go.set()
    assert len(pending) == 0, f"{burst - len(pending)} of {burst} connects got into the accept queue"


# --- lifecycle ----------------------------------------------------------------------------------


def test_close_ends_every_thread_including_hung_requests(connect: Connect) -> None:
    before = threading.active_count()
    svc = FakeService()
    with svc:
        assert threading.active_count() == before + 1
        hung, idle = connect(svc), connect(svc)
        assert get(idle)[0] == 200
        svc.script(hang())
        hung.request("GET", "/v1/models")
        assert svc.wait_for_requests(2)
        assert threading.active_count() == before + 3
    assert threading.active_count() == before
    with pytest.raises(http.client.RemoteDisconnected):
        hung.getresponse()
    with pytest.raises(ConnectionError):
        request_models(idle)
    svc.close()  # idempotent
    assert threading.active_count() == before


class _WatchedLock:
    """An RLock that sets ``contended`` when a thread finds it held by another."""

    def __init__(self, contended: threading.Event) -> None:
        self._lock = threading.RLock()
        self._contended = contended
        # What threading.Condition takes from an RLock to wait on it.
        self._is_owned = self._lock._is_owned  # type: ignore[attr-defined]
        self._release_save = self._lock._release_save  # type: ignore[attr-defined]
        self._acquire_restore = self._lock._acquire_restore  # type: ignore[attr-defined]

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        self._contended.set()
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_close_from_another_thread_while_start_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # start() let go of its lock before starting the accept thread: a close() in that window
    # raised RuntimeError ("cannot join thread before it is started") and left the listening
    # socket open, and the accept thread then started on a closed service.
    before = threading.active_count()
    svc = FakeService()
    turn = threading.Event()  # the closer is done, or waits for the lock start() holds
    svc._state._cond = threading.Condition(_WatchedLock(turn))  # type: ignore[arg-type]
    errors: list[BaseException] = []

    def close() -> None:
        try:
            svc.close()
        except BaseException as exc:
            errors.append(exc)
        finally:
            turn.set()

    closer = threading.Thread(target=close)
    original = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        if thread.name == "qa_min-fake-accept":
            original(closer)
            assert turn.wait(10)
        original(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    svc.start()
    closer.join(10)
    assert errors == []
    assert threading.active_count() == before
    parts = urllib.parse.urlsplit(svc.url)
    assert parts.hostname is not None
    assert parts.port is not None
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((parts.hostname, parts.port), timeout=5).close()


def test_closed_service_refuses_connections(connect: Connect) -> None:
    with FakeService() as svc:
        url = svc.url
    assert svc.url == url
    conn = connect(svc)
    with pytest.raises(ConnectionRefusedError):
        conn.request("GET", "/v1/models")


def test_lifecycle_errors() -> None:
    svc = FakeService()
    with pytest.raises(RuntimeError, match="start"):
        _ = svc.url
    svc.start()
    with pytest.raises(RuntimeError, match="once"):
        svc.start()
    svc.close()
    with pytest.raises(RuntimeError, match="once"):
        svc.start()

    never_started = FakeService()
    never_started.close()
    never_started.close()
    with pytest.raises(RuntimeError, match="once"):
        never_started.start()


def test_host_and_explicit_port(connect: Connect) -> None:
    with FakeService(host="localhost") as first:
        port = urllib.parse.urlsplit(first.url).port
        assert first.url == f"http://localhost:{port}"
        assert get(connect(first))[0] == 200
    assert port is not None
    # The port is free again at once: nothing is left listening, and SO_REUSEADDR is set.
    with FakeService(port=port) as second:
        assert second.url == f"http://127.0.0.1:{port}"
        assert get(connect(second))[0] == 200


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"api_key": 5}, TypeError, "api_key must be a str or None"),
        ({"api_key": b"sk-test"}, TypeError, "api_key must be a str or None"),
        ({"prefix": None}, TypeError, "prefix must be a str"),
        ({"host": None}, TypeError, "host must be a str"),
        ({"port": "8080"}, TypeError, "port must be an int"),
        ({"port": 8080.0}, TypeError, "port must be an int"),
        ({"port": True}, TypeError, "port must be an int"),
        ({"port": -1}, ValueError, "port must be within 0-65535"),
        ({"port": 65536}, ValueError, "port must be within 0-65535"),
    ],
)
def test_key_prefix_host_and_port_are_checked(
    options: dict[str, Any], error: type[Exception], words: str
) -> None:
    # These failed later, or never: api_key=5 answered every request 401, prefix=None raised
    # AttributeError, port="8080" and port=-1 raised TypeError or OverflowError from start().
    with pytest.raises(error, match=words):
        FakeService(**options)


def test_a_str_subclass_given_as_key_prefix_or_host_is_read_as_its_plain_value() -> None:
    # The port is read as a plain int; key, prefix and host as plain str likewise, so that none of
    # a subclass's own methods runs when the service percent-encodes its prefix, binds its host
    # or checks a request's key.
    class Loud(str):
        def strip(self, chars: str | None = None) -> str:
            raise AssertionError("strip ran")

        def __contains__(self, item: object) -> bool:
            raise AssertionError("__contains__ ran")

        def __str__(self) -> str:
            raise AssertionError("__str__ ran")

        def __format__(self, spec: str) -> str:
            raise AssertionError("__format__ ran")

    with FakeService(api_key=Loud("sk-test"), prefix=Loud("/api"), host=Loud("127.0.0.1")) as svc:
        port = urllib.parse.urlsplit(svc.url).port
        assert svc.url == f"http://127.0.0.1:{port}/api"
        with qa.Client(base_url=svc.url, api_key="sk-test", retry=qa.RetryPolicy.none) as client:
            assert len(client.list_models()) == len(DEFAULT_MODELS)
        with (
            qa.Client(base_url=svc.url, api_key="sk-other", retry=qa.RetryPolicy.none) as client,
            pytest.raises(qa.Unauthorized, match="invalid API key"),
        ):
            client.list_models()


@pytest.mark.parametrize("port", [0, 1, 65535])
def test_ports_0_to_65535_are_taken(port: int) -> None:
    # Checked when made, bound only by start(): -1 and 65536 are refused above.
    svc = FakeService(port=port)
    svc.close()


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback")
def test_an_ipv6_host_is_served_and_bracketed_in_the_url() -> None:
    # "::1" failed to bind (gaierror: the server was AF_INET only), and its URL had no brackets.
    with FakeService(host="::1") as svc:
        split = urllib.parse.urlsplit(svc.url)
        assert svc.url == f"http://[::1]:{split.port}"
        assert split.hostname == "::1"
        conn = http.client.HTTPConnection("::1", split.port, timeout=5)
        try:
            assert get(conn)[0] == 200
        finally:
            conn.close()


# --- a rate-limited service --------------------------------------------------------------------


def exchange(conn: http.client.HTTPConnection) -> http.client.HTTPResponse:
    conn.request("GET", "/v1/models")
    response = conn.getresponse()
    response.read()
    return response


@pytest.mark.parametrize(
    ("style", "sent"),
    [
        ("seconds", {"retry-after"}),
        ("ms", {"retry-after-ms"}),
        ("both", {"retry-after", "retry-after-ms"}),
        ("none", set()),
    ],
)
def test_rate_limit_answers_429_once_the_bucket_is_empty(
    connect: Connect, style: str, sent: set[str]
) -> None:
    # Half a token a second, three saved up: three answers, then 429 for about two seconds.
    with FakeService(rate_limit=(0.5, 3), retry_after=style) as service:
        conn = connect(service)
        assert [exchange(conn).status for _ in range(3)] == [200, 200, 200]
        throttled = exchange(conn)
        assert throttled.status == 429
        names = {name.lower() for name, _ in throttled.getheaders()}
        assert names & {"retry-after", "retry-after-ms"} == sent
        if "retry-after" in sent:
            assert throttled.getheader("Retry-After") == "2"  # 2 s at most, rounded up
        if "retry-after-ms" in sent:
            millis = float(throttled.getheader("retry-after-ms") or "nan")
            assert 1000.0 < millis <= 2000.0
        conn.request("POST", "/v1/core", json.dumps(core_body()), {"Content-Type": "application/json"})
        assert read(conn) == (429, {"detail": "rate limit exceeded"})
        assert service.request_count == 5
        assert service.rate_limited_count == 2
        assert len(service.requests) == 5  # refused requests are recorded too


def test_rate_limit_refills_and_leaves_scripted_steps_alone(connect: Connect) -> None:
    with FakeService(rate_limit=(50, 1)) as service:
        conn = connect(service)
        service.script(reply(503, {"detail": "down"}))
        assert exchange(conn).status == 503  # a scripted step is played whatever the bucket holds
        assert exchange(conn).status == 200  # the one token
        statuses = [exchange(conn).status]
        deadline = time.monotonic() + 5
        while statuses[-1] != 200 and time.monotonic() < deadline:
            statuses.append(exchange(conn).status)  # polling: a token comes every 20 ms
        assert statuses[-1] == 200
        assert service.rate_limited_count == statuses.count(429)


def test_counts_are_zero_without_a_rate_limit(svc: FakeService, connect: Connect) -> None:
    assert (svc.request_count, svc.rate_limited_count) == (0, 0)
    exchange(connect(svc))
    assert (svc.request_count, svc.rate_limited_count) == (1, 0)


@pytest.mark.parametrize(
    ("rate_limit", "error", "words"),
    [
        ((1, 1), None, ""),
        ((0.001, 1.0), None, ""),
        ((1, 1e10), None, ""),
        ((1e-10, 1), None, ""),
        ((int(sys.float_info.max), 1), None, ""),
        ((0, 1), ValueError, "rate > 0"),
        ((1, 0.99), ValueError, "burst >= 1"),
        (
            (1, 1e10 + 1),
            ValueError,
            r"burst / rate, the seconds its bucket takes to fill, to be at most 1e\+10",
        ),
        (
            (1e-310, 1),
            ValueError,
            r"burst / rate, the seconds its bucket takes to fill, to be at most 1e\+10",
        ),
        ((int(sys.float_info.max) + 1, 1), ValueError, r"must be at most 1.79769e\+308, the largest float"),
        ((10**400, 5), ValueError, r"must be at most 1.79769e\+308, the largest float"),
        ((5, 10**400), ValueError, r"must be at most 1.79769e\+308, the largest float"),
        ((1, math.inf), TypeError, "pair of finite numbers"),
        ((True, 1), TypeError, "pair of finite numbers"),
        ((1, 2, 3), TypeError, "pair of finite numbers"),
        ("fast", TypeError, "pair of finite numbers"),
    ],
)
def test_rate_limit_is_checked(rate_limit: Any, error: type[Exception] | None, words: str) -> None:
    if error is None:
        FakeService(rate_limit=rate_limit).close()
        return
    with pytest.raises(error, match=words):
        FakeService(rate_limit=rate_limit)


@pytest.mark.parametrize("announce", ["none", "ietf", "ietf-draft", "openai", "anthropic"])
def test_rate_limit_at_the_longest_refill_still_answers_its_429(connect: Connect, announce: str) -> None:
    # A bucket filling in 1e10 s tells delays and resets that long; a longer one (a rate of
    # 1e-310) made them infinite and crashed the handler on every 429.
    with FakeService(rate_limit=(1e-10, 1), retry_after="both", announce=announce) as service:
        conn = connect(service)
        assert exchange(conn).status == 200
        throttled = exchange(conn)
        assert throttled.status == 429
        assert throttled.getheader("Retry-After") == "10000000000"
        assert 9_999_999_000_000.0 < float(throttled.getheader("retry-after-ms") or "nan") <= 1e13
        if announce == "anthropic":
            reset = throttled.getheader("anthropic-ratelimit-requests-reset") or ""
            assert 2300 < int(reset[:4]) < 3000


def test_retry_after_style_is_checked() -> None:
    with pytest.raises(ValueError, match="retry_after must be one of seconds, ms, both, none"):
        FakeService(retry_after="minutes")


def test_recorded_requests_and_steps_are_public_values_of_this_module(
    svc: FakeService, connect: Connect
) -> None:
    exchange(connect(svc))
    [recorded] = svc.requests
    assert type(recorded).__module__ == "qa_min.testing"
    assert pickle.loads(pickle.dumps(recorded)) == recorded
    step = reply(503)
    assert pickle.loads(pickle.dumps(step)) == step


TESTING_NAMES = {
    "DEFAULT_MODELS", "FakeService", "MockTransport", "RecordedRequest", "Step", "delay", "drop",
    "expected_answer", "hang", "reply", "reset", "truncate",
}  # fmt: skip


def test_the_testing_module_exports_its_public_names_and_only_them() -> None:
    # docs/testing.md names what `qa_min.testing` offers; `import *` takes exactly that, none of
    # the helpers it imports from the fake's private modules.
    import qa_min.testing

    names: dict[str, object] = {}
    exec("from qa_min.testing import *", names)
    assert set(names) - {"__builtins__"} == TESTING_NAMES == set(qa_min.testing.__all__)
    documented = TESTING_NAMES - {"DEFAULT_MODELS", "RecordedRequest"}  # met as `svc.requests`' items
    guide = (Path(__file__).parent.parent / "docs" / "testing.md").read_text()
    assert all(f"`{name}" in guide for name in documented)


@pytest.mark.parametrize(
    ("prefix", "path"), [("/a b", "/a%20b"), ("/ä", "/%C3%A4"), ("/a?b", "/a%3Fb"), ("api/", "/api")]
)
def test_a_prefix_is_served_at_the_url_a_client_takes(prefix: str, path: str) -> None:
    # The URL held the prefix raw: a client refused it ("without spaces", "a query") or sent
    # the percent-encoded path, which got 404 "no route".
    with FakeService(prefix=prefix) as svc, qa.Client(base_url=svc.url) as client:
        assert svc.url.endswith(path)
        assert client.list_models().models
        assert svc.requests[0].path == f"{path}/v1/models"

"""SPEC.md section 5: the error tree, the status -> class table, messages, and Diagnostics.

Spec line -> tests:

  Every error is a subclass of qa.QAError
      test_every_exported_exception_is_a_qa_error
  HTTP ones also of qa.APIStatusError (with .status)
      test_http_error_classes_are_api_status_errors, test_status_maps_to_its_class
  client-side validation ones of qa.ValidationError
      test_validation_error_classes
  Each error carries its Diagnostics as .diagnostics
      test_every_raised_error_carries_diagnostics
  ... and has a message a person can act on (status, short detail; never the key)
      test_status_error_message_names_status_and_detail
      test_status_error_message_stays_short_for_a_huge_body,
      test_status_error_message_ends_with_a_detail_of_at_most_200_characters,
      test_status_error_detail_is_read_from_json_when_labelled_or_brace_led_else_the_text
      test_messages_of_other_errors_say_what_is_wrong
      test_status_error_message_never_shows_the_key (more key cases live in test_config.py)
  Table: 400 BadRequest, 401 Unauthorized, 403 PermissionDenied, 404 NotFound,
  422 UnprocessableEntity, any other non-2xx (3xx included) UnexpectedStatus
      test_status_maps_to_its_class, test_status_outside_1xx_to_5xx_is_unexpected_status
  408 RequestTimeout, 429 RateLimited, 529 Overloaded, other 5xx ServerError - after retries
      test_status_maps_to_its_class, test_retried_statuses_raise_only_after_retries,
      test_retried_status_then_success_raises_nothing, test_other_statuses_raise_at_once
  ConnectionFailed: could not connect, or the connection dropped (after retries)
      test_connection_refused_is_connection_failed, test_dropped_connection_is_connection_failed
  InvalidBaseUrl, InvalidResponse, ValidationError subclasses, MissingApiKey
      test_every_raised_error_carries_diagnostics (one case each; details in test_config,
      test_wire and test_questions)
  Canceled: cancelled from outside, or its timeout expired
      test_cancel_from_another_thread_is_canceled, test_timeout_is_canceled
  RateLimited and Overloaded share qa.ServiceBusy
      test_service_busy_catches_rate_limited_and_overloaded_only
  Diagnostics: filled on success and on failure; status (last HTTP status or None), body
  (last non-2xx body as text or None), attempts (first included), transport_error
      test_fresh_diagnostics_are_empty, test_diagnostics_on_success,
      test_diagnostics_on_success_after_a_retry, test_diagnostics_on_status_failure,
      test_diagnostics_on_connection_failure, test_diagnostics_on_invalid_response,
      test_error_diagnostics_is_the_callers_object, test_diagnostics_are_refilled_by_each_call
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from faultservers import RawServer, ok_response, read_request
from support import InProcessService, make_client, no_sleep

import qa_min as qa
from qa_min.testing import FakeService, drop, hang, reply


@pytest.fixture
def svc() -> Iterator[InProcessService]:
    """The service in-process (MockTransport): these tests are about the layers above the socket."""
    with InProcessService() as service:
        yield service


KEY = "sk-errors-test-SECRET-77"


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


@pytest.fixture
def refused_url() -> Iterator[str]:
    # A bound socket that never listens: connecting to it is refused, with no race on the port.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


# -- the tree -----------------------------------------------------------------------------


def exported_exceptions() -> list[type[BaseException]]:
    found = []
    for name in qa.__all__:
        value = getattr(qa, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            found.append(value)
    return found


def test_every_exported_exception_is_a_qa_error() -> None:
    exceptions = exported_exceptions()
    assert len(exceptions) >= 20
    for cls in exceptions:
        assert issubclass(cls, qa.QAError), cls


STATUS_CLASSES: list[type[qa.APIStatusError]] = [
    qa.BadRequest,
    qa.Unauthorized,
    qa.PermissionDenied,
    qa.NotFound,
    qa.RequestTimeout,
    qa.UnprocessableEntity,
    qa.RateLimited,
    qa.Overloaded,
    qa.ServerError,
    qa.UnexpectedStatus,
    qa.ServiceBusy,
]


def test_http_error_classes_are_api_status_errors() -> None:
    for cls in STATUS_CLASSES:
        assert issubclass(cls, qa.APIStatusError), cls
    others: list[type[qa.QAError]] = [
        qa.ConnectionFailed,
        qa.InvalidResponse,
        qa.Canceled,
        qa.MissingApiKey,
        qa.InvalidBaseUrl,
    ]
    for other in others:
        assert issubclass(other, qa.QAError)
        assert not issubclass(other, qa.APIStatusError), other
        assert not issubclass(other, qa.ValidationError), other


def test_validation_error_classes() -> None:
    assert issubclass(qa.ValidationError, qa.QAError)
    validation: list[type[qa.QAError]] = [qa.NoQuestions, qa.DuplicateQuestionName, qa.InvalidOption]
    for cls in validation:
        assert issubclass(cls, qa.ValidationError), cls
    for status_cls in STATUS_CLASSES:
        assert not issubclass(status_cls, qa.ValidationError), status_cls


def test_service_busy_catches_rate_limited_and_overloaded_only(
    svc: InProcessService, client: qa.Client
) -> None:
    assert issubclass(qa.RateLimited, qa.ServiceBusy)
    assert issubclass(qa.Overloaded, qa.ServiceBusy)
    caught = []
    for status in (429, 529, 503):
        svc.script(reply(status, {"detail": "busy"}))
        try:
            client.ask("x", Review)
        except qa.ServiceBusy as exc:
            caught.append(exc.status)
        except qa.ServerError as exc:
            caught.append(-exc.status)
    assert caught == [429, 529, -503]


# -- the status table -------------------------------------------------------------------------

TABLE: list[tuple[int, type[qa.APIStatusError]]] = [
    (400, qa.BadRequest),
    (401, qa.Unauthorized),
    (403, qa.PermissionDenied),
    (404, qa.NotFound),
    (408, qa.RequestTimeout),
    (422, qa.UnprocessableEntity),
    (429, qa.RateLimited),
    (529, qa.Overloaded),
    (500, qa.ServerError),
    (501, qa.ServerError),
    (502, qa.ServerError),
    (503, qa.ServerError),
    (504, qa.ServerError),
    (530, qa.ServerError),
    (599, qa.ServerError),
    (300, qa.UnexpectedStatus),
    (301, qa.UnexpectedStatus),
    (304, qa.UnexpectedStatus),
    (307, qa.UnexpectedStatus),
    (402, qa.UnexpectedStatus),
    (405, qa.UnexpectedStatus),
    (409, qa.UnexpectedStatus),
    (410, qa.UnexpectedStatus),
    (413, qa.UnexpectedStatus),
    (418, qa.UnexpectedStatus),
    (451, qa.UnexpectedStatus),
    (499, qa.UnexpectedStatus),  # one below the 5xx: not a ServerError (500 is)
]


@pytest.mark.parametrize(("status", "error"), TABLE, ids=[str(s) for s, _ in TABLE])
def test_status_maps_to_its_class(
    svc: InProcessService, client: qa.Client, status: int, error: type[qa.APIStatusError]
) -> None:
    svc.script(reply(status, {"detail": "nope"}))
    with pytest.raises(qa.APIStatusError) as caught:
        client.ask("x", Review)
    assert type(caught.value) is error
    assert caught.value.status == status
    assert caught.value.diagnostics.status == status


@pytest.mark.parametrize("status", [600, 799, 999])
def test_status_outside_1xx_to_5xx_is_unexpected_status(status: int) -> None:
    body = b'{"detail": "odd"}'
    response = f"HTTP/1.1 {status} Odd\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        while read_request(conn):
            conn.sendall(response)

    with (
        RawServer(handler) as server,
        qa.Client(base_url=server.url, sleep=no_sleep) as client,
        pytest.raises(qa.UnexpectedStatus) as caught,
    ):
        client.ask("x", Review)
    assert caught.value.status == status


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (408, qa.RequestTimeout),
        (429, qa.RateLimited),
        (529, qa.Overloaded),
        (500, qa.ServerError),
        (503, qa.ServerError),
    ],
)
def test_retried_statuses_raise_only_after_retries(
    svc: InProcessService, status: int, error: type[qa.APIStatusError]
) -> None:
    svc.script(*[reply(status, {"detail": "try later"})] * 3)
    diagnostics = qa.Diagnostics()
    with make_client(svc.url, sleep=no_sleep) as client, pytest.raises(error):
        client.ask("x", Review, retry=qa.RetryPolicy(max_retries=2), diagnostics=diagnostics)
    assert diagnostics.attempts == 3
    assert len(svc.requests) == 3


@pytest.mark.parametrize("status", [408, 429, 529, 502])
def test_retried_status_then_success_raises_nothing(svc: InProcessService, status: int) -> None:
    svc.script(reply(status, {"detail": "try later"}))
    with make_client(svc.url, sleep=no_sleep) as client:
        assert isinstance(client.ask("x", Review).answers.toxic, bool)
    assert len(svc.requests) == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422, 418, 302])
def test_other_statuses_raise_at_once(svc: InProcessService, status: int) -> None:
    svc.script(*[reply(status, {"detail": "no"})] * 3)
    diagnostics = qa.Diagnostics()
    with make_client(svc.url, sleep=no_sleep) as client, pytest.raises(qa.APIStatusError):
        client.ask("x", Review, diagnostics=diagnostics)
    assert diagnostics.attempts == 1
    assert len(svc.requests) == 1


def test_connection_refused_is_connection_failed(refused_url: str) -> None:
    diagnostics = qa.Diagnostics()
    with (
        qa.Client(base_url=refused_url, sleep=no_sleep) as client,
        pytest.raises(qa.ConnectionFailed) as caught,
    ):
        client.ask("x", Review, diagnostics=diagnostics)
    assert diagnostics.attempts == 3  # retried, then raised
    assert isinstance(diagnostics.transport_error, OSError)
    assert diagnostics.status is None
    assert caught.value.diagnostics is diagnostics


def test_dropped_connection_is_connection_failed(svc: InProcessService) -> None:
    svc.script(drop(), drop(), drop())
    diagnostics = qa.Diagnostics()
    with make_client(svc.url, sleep=no_sleep) as client, pytest.raises(qa.ConnectionFailed):
        client.ask("x", Review, diagnostics=diagnostics)
    assert diagnostics.attempts == 3
    assert diagnostics.transport_error is not None
    assert len(svc.requests) == 3


def test_cancel_from_another_thread_is_canceled(svc: InProcessService, client: qa.Client) -> None:
    svc.script(hang())
    token = qa.CancelToken()

    def cancel_once_sent() -> None:
        if svc.wait_for_requests(1):
            token.cancel()

    canceller = threading.Thread(target=cancel_once_sent)
    canceller.start()
    started = time.monotonic()
    try:
        with pytest.raises(qa.Canceled) as caught:
            client.ask("x", Review, cancel=token)
    finally:
        canceller.join(5)
    assert time.monotonic() - started < 2.0
    assert caught.value.diagnostics.attempts == 1


def test_timeout_is_canceled(svc: InProcessService, client: qa.Client) -> None:
    svc.script(hang())
    started = time.monotonic()
    with pytest.raises(qa.Canceled) as caught:
        client.ask("x", Review, timeout=0.02)
    assert time.monotonic() - started < 1.0
    assert "timeout" in str(caught.value)


# -- .diagnostics on every error ---------------------------------------------------------------


def _raise_each(svc: InProcessService, refused_url: str) -> dict[str, Callable[[], object]]:
    def status(code: int) -> Callable[[], object]:
        def run() -> object:
            svc.script(reply(code, {"detail": "x"}))
            with make_client(svc.url, retry=qa.RetryPolicy.none) as c:
                return c.ask("x", Review)

        return run

    def invalid_response() -> object:
        svc.script(reply(200, {"answers": {"toxic": "maybe"}}))
        with make_client(svc.url) as c:
            return c.ask("x", Review)

    def connection_failed() -> object:
        with qa.Client(base_url=refused_url, retry=qa.RetryPolicy.none) as c:
            return c.ask("x", Review)

    def canceled() -> object:
        token = qa.CancelToken()
        token.cancel()
        with make_client(svc.url) as c:
            return c.ask("x", Review, cancel=token)

    def closed() -> object:
        c = make_client(svc.url)
        c.close()
        return c.ask("x", Review)

    def in_client(fn: Callable[[qa.Client], object]) -> Callable[[], object]:
        def run() -> object:
            with make_client(svc.url) as c:
                return fn(c)

        return run

    cases: dict[str, Callable[[], object]] = {f"status-{code}": status(code) for code, _ in TABLE[:10]}
    cases.update(
        {
            "invalid-response": invalid_response,
            "connection-failed": connection_failed,
            "canceled": canceled,
            "client-closed": closed,
            "missing-api-key": lambda: qa.Client(base_url=qa.PUBLIC_BASE_URL),
            "invalid-base-url": lambda: qa.Client(base_url="ftp://example.com"),
            "invalid-option": lambda: make_client(svc.url, timeout=-1),
            "no-questions": lambda: qa.Request(state="x", questions=[]),
            "duplicate-name": lambda: qa.Request(
                state="x",
                questions=[
                    qa.NamedQuestion("a", qa.YesNo("y", "n")),
                    qa.NamedQuestion("a", qa.YesNo("y", "n")),
                ],
            ),
            "invalid-state": in_client(lambda c: c.ask("", Review)),
            "invalid-question": lambda: qa.YesNo("", "n"),
            "invalid-model": in_client(lambda c: c.ask("x", Review, model="")),
        }
    )
    return cases


CASE_IDS = [f"status-{code}" for code, _ in TABLE[:10]] + [
    "invalid-response",
    "connection-failed",
    "canceled",
    "client-closed",
    "missing-api-key",
    "invalid-base-url",
    "invalid-option",
    "no-questions",
    "duplicate-name",
    "invalid-state",
    "invalid-question",
    "invalid-model",
]


@pytest.mark.parametrize("case", CASE_IDS)
def test_every_raised_error_carries_diagnostics(
    svc: InProcessService, refused_url: str, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    monkeypatch.delenv("SERVICE_API_KEY", raising=False)
    with pytest.raises(qa.QAError) as caught:
        _raise_each(svc, refused_url)[case]()
    diagnostics = caught.value.diagnostics
    assert isinstance(diagnostics, qa.Diagnostics)
    assert str(caught.value).strip()
    if case.startswith("status-"):
        assert diagnostics.status == int(case.split("-")[1])
        assert diagnostics.attempts == 1
    if case == "connection-failed":
        assert diagnostics.transport_error is not None


# -- messages ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"detail": "model 'judge-x' not found"}, "model 'judge-x' not found"),
        (
            {"detail": [{"loc": ["body", "state"], "msg": "field required", "type": "missing"}]},
            "field required",
        ),
        ("upstream connect error", "upstream connect error"),
    ],
    ids=["json-detail", "fastapi-list", "text"],
)
def test_status_error_message_names_status_and_detail(
    svc: InProcessService, client: qa.Client, body: object, detail: str
) -> None:
    svc.script(reply(404, body))
    with pytest.raises(qa.NotFound) as caught:
        client.ask("x", Review)
    message = str(caught.value)
    assert "404" in message
    assert detail in message


def test_status_error_message_stays_short_for_a_huge_body(svc: InProcessService, client: qa.Client) -> None:
    huge = {"detail": "bad " * 5000}
    svc.script(reply(400, huge))
    diagnostics = qa.Diagnostics()
    with pytest.raises(qa.BadRequest) as caught:
        client.ask("x", Review, diagnostics=diagnostics)
    assert "400" in str(caught.value)
    assert len(str(caught.value)) < 500
    assert diagnostics.body == json.dumps(huge)  # the whole body stays available


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ("x" * 200, "x" * 200),
        ("x" * 201, "x" * 197 + "..."),
        (" " * 1998 + "xyz", "xy"),  # read from the first 2000 characters, whitespace folded
        ("<title>Bad Gateway</title><p>nginx</p>", "Bad Gateway"),
        ("<p>no page title</title>", "<p>no page title</title>"),
        (None, "(empty body)"),
        ("  \n\t ", "(empty body)"),
    ],
    ids=["200-kept", "201-cut", "first-2000", "title-first", "title-end-only", "empty", "blank"],
)
def test_status_error_message_ends_with_a_detail_of_at_most_200_characters(
    svc: InProcessService, client: qa.Client, body: object, detail: str
) -> None:
    svc.script(reply(404, body))
    with pytest.raises(qa.NotFound) as caught:
        client.ask("x", Review)
    assert str(caught.value).endswith(f"/v1/core: {detail}"), str(caught.value)


@pytest.mark.parametrize(
    ("body", "content_type", "detail"),
    [
        ('{"detail": "gone"}', "text/plain", "gone"),  # starts with "{": read as JSON
        (' {"detail": "gone"}', "application/json", "gone"),  # labelled JSON: read as JSON
        ("not json at all", "application/json", "not json at all"),
        ('{"error": "gone"}', "application/json", '{"error": "gone"}'),
        ('["detail"]', "application/json", '["detail"]'),
        ('{"detail": [{"msg": "field required"}, "state too long"]}', "", "field required; state too long"),
    ],
    ids=["brace-as-text", "labelled-json", "unparsable-json", "no-detail", "json-list", "fastapi-joined"],
)
def test_status_error_detail_is_read_from_json_when_labelled_or_brace_led_else_the_text(
    svc: InProcessService, client: qa.Client, body: str, content_type: str, detail: str
) -> None:
    svc.script(reply(404, body.encode(), headers=[("Content-Type", content_type)] if content_type else []))
    with pytest.raises(qa.NotFound) as caught:
        client.ask("x", Review)
    assert str(caught.value).endswith(f"/v1/core: {detail}"), str(caught.value)


def test_status_error_message_never_shows_the_key(svc: InProcessService) -> None:
    svc.script(reply(403, {"detail": f"key {KEY} may not use this model"}))
    with make_client(svc.url, api_key=KEY) as client, pytest.raises(qa.PermissionDenied) as caught:
        client.ask("x", Review)
    assert KEY not in str(caught.value)
    assert "may not use this model" in str(caught.value)


def test_messages_of_other_errors_say_what_is_wrong(
    svc: InProcessService, refused_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SERVICE_API_KEY", raising=False)
    port = refused_url.rsplit(":", 1)[1]
    checks: list[tuple[Callable[[], object], tuple[str, ...]]] = [
        (lambda: qa.Client(base_url=refused_url, retry=qa.RetryPolicy.none).ask("x", Review), (port,)),
        (lambda: qa.Client(base_url="ftp://example.com"), ("ftp://example.com",)),
        (lambda: qa.Client(base_url=qa.PUBLIC_BASE_URL), ("SERVICE_API_KEY",)),
        (lambda: qa.Request(state="x", questions=[qa.NamedQuestion("a", qa.YesNo("y", "n"))] * 2), ("'a'",)),
        (lambda: qa.Choice({"a": "A"}), ("2",)),
        (lambda: qa.Score(["only"]), ("2",)),
    ]
    for run, words in checks:
        with pytest.raises(qa.QAError) as caught:
            run()
        for word in words:
            assert word in str(caught.value), (str(caught.value), word)
    svc.script(reply(200, {"answers": {"toxic": 1}}))
    with make_client(svc.url) as client, pytest.raises(qa.InvalidResponse) as invalid:
        client.ask("x", Review)
    assert "toxic" in str(invalid.value)


# -- Diagnostics ------------------------------------------------------------------------------


def test_fresh_diagnostics_are_empty() -> None:
    diagnostics = qa.Diagnostics()
    assert (diagnostics.status, diagnostics.body, diagnostics.attempts, diagnostics.transport_error) == (
        None,
        None,
        0,
        None,
    )


@pytest.mark.parametrize("operation", ["ask", "core", "list_models"])
def test_diagnostics_on_success(client: qa.Client, operation: str) -> None:
    diagnostics = qa.Diagnostics()
    if operation == "ask":
        client.ask("x", Review, diagnostics=diagnostics)
    elif operation == "core":
        request = qa.Request(state="x", questions=[qa.NamedQuestion("a", qa.YesNo("y", "n"))])
        client.core(request, diagnostics=diagnostics)
    else:
        client.list_models(diagnostics=diagnostics)
    assert (diagnostics.status, diagnostics.body, diagnostics.attempts, diagnostics.transport_error) == (
        200,
        None,
        1,
        None,
    )


def test_diagnostics_on_success_after_a_retry(svc: InProcessService) -> None:
    svc.script(reply(503, "overloaded, come back later"))
    diagnostics = qa.Diagnostics()
    with make_client(svc.url, sleep=no_sleep) as client:
        client.ask("x", Review, diagnostics=diagnostics)
    assert diagnostics.status == 200
    assert diagnostics.attempts == 2
    assert diagnostics.body == "overloaded, come back later"  # the last non-2xx body


def test_diagnostics_on_status_failure(svc: InProcessService) -> None:
    svc.script(reply(503, "first"), reply(502, "second"), reply(500, "third"))
    diagnostics = qa.Diagnostics()
    with make_client(svc.url, sleep=no_sleep) as client, pytest.raises(qa.ServerError):
        client.ask("x", Review, diagnostics=diagnostics)
    assert (diagnostics.status, diagnostics.body, diagnostics.attempts) == (500, "third", 3)
    assert diagnostics.transport_error is None


def test_diagnostics_on_connection_failure() -> None:
    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)  # then close without a byte

    diagnostics = qa.Diagnostics()
    with (
        RawServer(handler) as server,
        qa.Client(base_url=server.url, retry=qa.RetryPolicy.none) as client,
        pytest.raises(qa.ConnectionFailed) as caught,
    ):
        client.ask("x", Review, diagnostics=diagnostics)
    assert diagnostics.status is None
    assert diagnostics.attempts == 1
    assert isinstance(diagnostics.transport_error, BaseException)
    assert caught.value.diagnostics.transport_error is diagnostics.transport_error


def test_diagnostics_on_invalid_response() -> None:
    def handler(conn: socket.socket, stop: threading.Event) -> None:
        if read_request(conn):
            conn.sendall(ok_response(b"<html>not json</html>"))

    diagnostics = qa.Diagnostics()
    with (
        RawServer(handler) as server,
        qa.Client(base_url=server.url, retry=qa.RetryPolicy.none) as client,
        pytest.raises(qa.InvalidResponse),
    ):
        client.ask("x", Review, diagnostics=diagnostics)
    assert (diagnostics.status, diagnostics.attempts, diagnostics.transport_error) == (200, 1, None)


@pytest.mark.parametrize(
    "script",
    [reply(404, {"detail": "x"}), reply(200, {"answers": {}}), drop()],
    ids=["status", "invalid-response", "connection-failed"],
)
def test_error_diagnostics_is_the_callers_object(
    svc: InProcessService, client: qa.Client, script: Any
) -> None:
    svc.script(script)
    diagnostics = qa.Diagnostics()
    with pytest.raises(qa.QAError) as caught:
        client.ask("x", Review, diagnostics=diagnostics)
    assert caught.value.diagnostics is diagnostics
    assert diagnostics.attempts == 1


def test_diagnostics_are_refilled_by_each_call(svc: InProcessService, client: qa.Client) -> None:
    diagnostics = qa.Diagnostics()
    svc.script(reply(404, {"detail": "x"}))
    with pytest.raises(qa.NotFound):
        client.ask("x", Review, diagnostics=diagnostics)
    client.ask("x", Review, diagnostics=diagnostics)
    assert (diagnostics.status, diagnostics.body, diagnostics.attempts) == (200, None, 1)


# -- a 2xx refused for its shape is named as a status error is --------------------------------

SHAPES = [
    ("list_models", {"nope": 1}, 'GET {url}/v1/models: the response has no "models"'),
    ("ask", {"usage": {}}, 'POST {url}/v1/core: the response has no "answers"'),
    ("ask", {"answers": {"toxic": "maybe"}}, "POST {url}/v1/core: the service's answers do not fit: "),
    # Refused by the transport, before any decoding: over max_response_bytes (100 below).
    ("list_models", {"models": [{"name": "x" * 200}]}, "GET {url}/v1/models: the response body has 2"),
]


@pytest.mark.parametrize("kind", ["Client", "AsyncClient"])
@pytest.mark.parametrize(
    ("operation", "body", "words"), SHAPES, ids=["models", "no-answers", "misfit", "over-the-cap"]
)
def test_an_invalid_response_names_its_status_method_and_url(
    kind: str, operation: str, body: object, words: str
) -> None:
    # A base URL that reaches some other server answering 200 shows at once in the message.
    with FakeService(prefix="/api") as service:
        service.script(reply(203, body, headers=[("request-id", "req_7")]))

        def call(client: Any) -> Any:
            return client.list_models() if operation == "list_models" else client.ask("x", Review)

        if kind == "Client":
            client = qa.Client(base_url=service.url, retry=qa.RetryPolicy.none, max_response_bytes=100)
            with client, pytest.raises(qa.InvalidResponse) as caught:
                call(client)
        else:

            async def run() -> None:
                options: dict[str, Any] = {"retry": qa.RetryPolicy.none, "max_response_bytes": 100}
                async with qa.AsyncClient(base_url=service.url, **options) as client:
                    await call(client)

            with pytest.raises(qa.InvalidResponse) as caught:
                asyncio.run(run())
    message = str(caught.value)
    assert message.startswith(f"HTTP 203 from {words.format(url=service.url)}"), message
    assert message.endswith(" (request id req_7)"), message
    assert caught.value.diagnostics.status == 203

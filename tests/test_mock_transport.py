"""``qa_min.testing.MockTransport``: calls answered in-process, with no socket and no thread.

What must hold (issue: "an in-memory transport for libraries that embed qa_min"): the retry loop,
errors, diagnostics and cancellation behave exactly as over a socket. Each test here runs the same
scenario the socket tests run against ``FakeService``, and checks the same observable results.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import inspect
import socket
import threading
import warnings
from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any, Optional

import pytest
from support import BOUND, SleepRecorder

import qa_min as qa
from qa_min._fakehttp import TRUNCATED_MISSING, TRUNCATED_SENT
from qa_min._limiter import Limiter
from qa_min.testing import (
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

URL = "http://mock.test/api"
YES_NO = {"true": "insults someone", "false": "insults no one"}


class Review(qa.Questions):
    toxic = qa.YesNo(YES_NO["true"], YES_NO["false"])


REQUEST = qa.Request(state="Some text", questions=[qa.NamedQuestion("toxic", qa.YesNo("a", "b"))])


class Script:
    """A handler that plays steps in order, then the normal answer; records what it saw."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.seen: list[RecordedRequest] = []

    def __call__(self, request: RecordedRequest) -> Step | None:
        self.seen.append(request)
        return self.steps.pop(0) if self.steps else None


def mock_client(handler: Any = None, **options: Any) -> qa.Client:
    options.setdefault("sleep", SleepRecorder())
    options.setdefault("random", lambda: 0.0)
    return qa.Client(base_url=URL, trust_env=False, transport=MockTransport(handler), **options)


@pytest.fixture
def no_sockets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fails the test if anything opens a socket or starts a thread while it runs."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a MockTransport call opened a socket")

    before = threading.active_count()
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    yield
    assert threading.active_count() == before


def test_normal_answers_follow_the_fake_services_rules(no_sockets: None) -> None:
    with mock_client() as client:
        result = client.ask("Some text", Review)
        models = client.list_models()
    assert result.answers.toxic == expected_answer("judge-latest", "Some text", "toxic", YES_NO)
    assert result.usage == {"input_tokens": 2, "output_tokens": 1}
    assert "judge-latest" in [m.name for m in models]


def test_the_handler_sees_the_request_as_sent(no_sockets: None) -> None:
    script = Script()
    with mock_client(script, api_key="sk-mock-key", extra_headers=[("X-Team", "a")]) as client:
        client.core(REQUEST, model="judge-2.1")
    seen = script.seen[0]
    assert (seen.method, seen.path) == ("POST", "/api/v1/core")
    assert seen.headers["authorization"] == "Bearer sk-mock-key"
    assert seen.headers["X-TEAM"] == "a"
    assert seen.headers["content-type"] == "application/json"
    assert seen.json()["model"] == "judge-2.1"
    assert seen.json()["state"] == "Some text"


def test_a_scripted_429_then_200_is_retried_after_the_servers_delay(no_sockets: None) -> None:
    sleep = SleepRecorder()
    script = Script(reply(429, {"detail": "slow down"}, headers=[("retry-after-ms", "25")]))
    with mock_client(script, sleep=sleep) as client:
        result = client.core(REQUEST)
    assert result.diagnostics.attempts == 2
    assert [a.status for a in result.diagnostics.history] == [429, 200]
    assert sleep.seconds == [0.025]  # exact: the server's number, passed on, not computed
    assert len(script.seen) == 2


@pytest.mark.parametrize("binade", range(-2, 31))
def test_the_servers_delay_reaches_sleep_unchanged_whatever_the_clock_reads(binade: int) -> None:
    """The property behind the test above, pinned for every clock reading: after a 429 asking for
    25 ms, its retry, with nothing else in flight, naps exactly 0.025 s, none of it held for the
    limiter. (A slot computed as ``clock + delay`` and napped as ``slot - clock`` is 0.025 off by
    the clock's last bit, in one binade of two: 0.025000000000005684 on a machine up ~40 s.)"""
    now = [1.37 * 2.0**binade]
    limiter = Limiter(None, None, True, clock=lambda: now[0])
    limiter.report(None, 429, 0.025)
    assert limiter.engaged
    now[0] += 0.000137  # the retry loop's own work between the report and the retry's slot
    naps: list[tuple[float, float]] = []
    limiter.acquire(0.025, 1, lambda seconds, held: naps.append((seconds, held)))
    assert naps == [(0.025, 0.0)]


def test_errors_and_diagnostics_match_the_socket_path(no_sockets: None) -> None:
    script = Script(*[reply(503, {"detail": "busy"}, headers=[("request-id", "r9")])] * 3)
    with mock_client(script) as client, pytest.raises(qa.ServerError) as caught:
        client.core(REQUEST)
    error = caught.value
    assert error.status == 503
    assert error.diagnostics.attempts == 3
    assert error.diagnostics.body == '{"detail": "busy"}'
    assert error.diagnostics.request_id == "r9"
    assert str(error).startswith(f"HTTP 503 from POST {URL}/v1/core: busy (request id r9) (after 3 attempts)")


def test_the_same_scenario_over_a_socket_gives_the_same_error() -> None:
    with FakeService(prefix="/api") as svc:
        svc.script(*[reply(503, {"detail": "busy"}, headers=[("request-id", "r9")])] * 3)
        client = qa.Client(base_url=svc.url, trust_env=False, sleep=SleepRecorder(), random=lambda: 0.0)
        with client, pytest.raises(qa.ServerError) as over_socket:
            client.core(REQUEST)
    busy = [reply(503, {"detail": "busy"}, headers=[("request-id", "r9")])] * 3
    with mock_client(Script(*busy)) as mocked, pytest.raises(qa.ServerError) as in_process:
        mocked.core(REQUEST)
    assert str(over_socket.value).replace(svc.url, URL) == str(in_process.value)
    socket_diag, mock_diag = over_socket.value.diagnostics, in_process.value.diagnostics
    assert (socket_diag.status, socket_diag.attempts, socket_diag.body) == (
        mock_diag.status,
        mock_diag.attempts,
        mock_diag.body,
    )


@pytest.mark.parametrize("step", [drop(), reset(), truncate()], ids=["drop", "reset", "truncate"])
def test_a_broken_connection_reads_the_same_over_a_socket_and_the_mock(step: Step) -> None:
    # A truncate() said "10 bytes of the body missing" in process, "33" over a socket.
    none = qa.RetryPolicy.none
    with FakeService(prefix="/api") as svc, qa.Client(base_url=svc.url, trust_env=False) as client:
        svc.script(step)
        with pytest.raises(qa.ConnectionFailed) as over_socket:
            client.core(REQUEST, retry=none)
    with mock_client(Script(step)) as mocked, pytest.raises(qa.ConnectionFailed) as in_process:
        mocked.core(REQUEST, retry=none)
    assert str(over_socket.value).replace(svc.url, URL) == str(in_process.value)
    assert over_socket.value.diagnostics.status == in_process.value.diagnostics.status


def _truncated_call(transport: str, flavour: str) -> qa.Diagnostics:
    """One ``list_models`` answered by ``truncate()``: its Diagnostics, checked on the error too."""
    diag = qa.Diagnostics()
    options: dict[str, Any] = {"trust_env": False, "retry": qa.RetryPolicy.none}
    with FakeService(prefix="/api") as svc:
        if transport == "socket":
            svc.script(truncate())
            options["base_url"] = svc.url
        else:
            options.update(base_url=URL, transport=MockTransport(Script(truncate())))
        if flavour == "sync":
            with qa.Client(**options) as client, pytest.raises(qa.ConnectionFailed) as caught:
                client.list_models(diagnostics=diag)
        else:

            async def main() -> None:
                async with qa.AsyncClient(**options) as client:
                    await client.list_models(diagnostics=diag)

            with pytest.raises(qa.ConnectionFailed) as caught:
                asyncio.run(main())
    assert f"{TRUNCATED_MISSING} bytes of the body missing" in str(caught.value)
    assert caught.value.diagnostics.headers == diag.headers
    return diag


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("transport", ["socket", "mock"])
def test_a_truncated_bodys_head_reads_the_same_over_a_socket_and_the_mock(
    transport: str, flavour: str
) -> None:
    # Under the mock the 200 head came with no header at all: Content-Type and Content-Length
    # were None where a socket showed the head FakeService's truncate() sends.
    diag = _truncated_call(transport, flavour)
    assert diag.status == 200
    assert [(a.status, a.error) for a in diag.history] == [(200, "ConnectionFailed")]
    assert diag.headers is not None
    announced = str(TRUNCATED_SENT + TRUNCATED_MISSING)
    assert (diag.headers.get("Content-Type"), diag.headers.get("Content-Length")) == (
        "application/json",
        announced,
    )


@pytest.mark.parametrize("step", [drop(), reset(), truncate()], ids=["drop", "reset", "truncate"])
def test_broken_connections_are_connection_failed_and_retried(no_sockets: None, step: Step) -> None:
    script = Script(step, step)
    once = qa.RetryPolicy(max_retries=1)
    with mock_client(script, retry=once) as client, pytest.raises(qa.ConnectionFailed) as caught:
        client.list_models()
    assert caught.value.diagnostics.attempts == 2
    assert caught.value.diagnostics.transport_error is not None
    assert "after 2 attempts" in str(caught.value)


def test_an_oserror_from_the_handler_is_a_dropped_connection(no_sockets: None) -> None:
    def handler(request: RecordedRequest) -> Step | None:
        raise ConnectionRefusedError(111, "Connection refused")

    with (
        mock_client(handler, retry=qa.RetryPolicy.none) as client,
        pytest.raises(qa.ConnectionFailed) as caught,
    ):
        client.list_models()
    assert "Connection refused" in str(caught.value)
    assert isinstance(caught.value.diagnostics.transport_error, ConnectionRefusedError)


@pytest.mark.parametrize("error", [TimeoutError("timed out"), socket.timeout("timed out")])
def test_a_timeout_error_from_the_handler_is_a_dropped_connection_before_the_deadline(
    no_sockets: None, error: OSError
) -> None:
    # With a call timeout set, it was Canceled "the call's timeout of 60 s expired" at once, and
    # not retried: read as a socket's timeout, which only the deadline sets.
    def handler(request: RecordedRequest) -> Step | None:
        raise error

    diag = qa.Diagnostics()
    with mock_client(handler, timeout=60) as client, pytest.raises(qa.ConnectionFailed) as caught:
        client.list_models(diagnostics=diag)
    assert "timed out" in str(caught.value)
    assert caught.value.diagnostics.transport_error is error
    assert [a.error for a in diag.history] == ["ConnectionFailed"] * 3  # retried as a dropped one


def test_a_timeout_error_from_the_handler_is_a_dropped_connection_on_the_loop() -> None:
    def handler(request: RecordedRequest) -> Step | None:
        raise TimeoutError("timed out")

    async def main() -> None:
        transport = MockTransport(handler)
        client = qa.AsyncClient(base_url=URL, trust_env=False, transport=transport, timeout=60)
        async with client:
            with pytest.raises(qa.ConnectionFailed, match="timed out"):
                await client.list_models(retry=qa.RetryPolicy.none)

    asyncio.run(main())


def test_a_handler_bug_reaches_the_test_unchanged() -> None:
    def handler(request: RecordedRequest) -> Step | None:
        raise KeyError("the test's own bug")

    with mock_client(handler) as client, pytest.raises(KeyError, match="the test's own bug"):
        client.list_models()


def list_models_with(
    kind: str, transport: MockTransport, diagnostics: Optional[qa.Diagnostics] = None
) -> None:
    """``list_models()`` on a ``kind`` ("threaded" or "asyncio") client answered by ``transport``."""
    options: dict[str, Any] = {"base_url": URL, "trust_env": False, "transport": transport}
    if kind == "threaded":
        with qa.Client(**options) as client:
            client.list_models(diagnostics=diagnostics)
        return

    async def on_asyncio() -> None:
        async with qa.AsyncClient(**options) as client:
            await client.list_models(diagnostics=diagnostics)

    asyncio.run(on_asyncio())


@pytest.mark.parametrize(
    "returned", [{"status": 200}, "ok", 200, reply], ids=["dict", "str", "int", "the builder, not called"]
)
@pytest.mark.parametrize("kind", ["threaded", "asyncio"])
def test_a_handler_returning_something_else_is_told_so_by_both_clients(returned: object, kind: str) -> None:
    diagnostics = qa.Diagnostics()

    def handler(request: RecordedRequest) -> Any:  # Any: it breaks the handler's type on purpose
        return returned

    with pytest.raises(qa.ConfigurationError) as caught:
        list_models_with(kind, MockTransport(handler), diagnostics)
    message = str(caught.value)
    # What the handler returned, and what it must return instead.
    assert f"returned {returned!r} (a {type(returned).__name__})" in message
    assert "must return a Step" in message
    assert "reply()" in message
    assert "or None" in message
    assert diagnostics.attempts == 1  # not retried: the next call would return the same
    assert [a.error for a in diagnostics.history] == ["ConfigurationError"]


def test_an_answer_that_does_not_fit_is_invalid_response(no_sockets: None) -> None:
    wrong = Script(reply(200, {"answers": {"toxic": "maybe"}}))
    with mock_client(wrong) as client, pytest.raises(qa.InvalidResponse, match="do not fit"):
        client.core(REQUEST)


def test_the_size_cap_holds(no_sockets: None) -> None:
    with (
        mock_client(Script(reply(200, b"x" * 101)), max_response_bytes=100) as client,
        pytest.raises(qa.InvalidResponse, match="over the 100-byte limit"),
    ):
        client.list_models()
    with mock_client(Script(reply(200, {"models": []}))) as client:
        assert len(client.list_models()) == 0


def test_a_hung_call_is_cancelled_by_its_token() -> None:
    entered = threading.Event()

    def handler(request: RecordedRequest) -> Step | None:
        entered.set()
        return hang()

    token = qa.CancelToken()
    with mock_client(handler) as client:
        call = client.submit(client.core, REQUEST, cancel=token)
        assert entered.wait(BOUND)
        token.cancel()
        with pytest.raises(qa.Canceled, match="cancelled"):
            call.result(BOUND)


def test_a_hung_call_ends_at_its_timeout() -> None:
    with (
        mock_client(Script(hang())) as client,
        pytest.raises(qa.Canceled, match=r"timeout of 0\.05 s expired"),
    ):
        client.core(REQUEST, timeout=0.05)


def test_close_ends_a_hung_call() -> None:
    entered = threading.Event()

    def handler(request: RecordedRequest) -> Step | None:
        entered.set()
        return hang()

    client = mock_client(handler)
    call = client.submit(client.core, REQUEST)
    assert entered.wait(BOUND)
    client.close()
    with pytest.raises(qa.Canceled):
        call.result(BOUND)


def test_a_delayed_answer_arrives(no_sockets: None) -> None:
    with mock_client(Script(delay(0.01))) as client:
        assert client.core(REQUEST).diagnostics.status == 200


def test_the_api_key_rule_of_the_fake_applies() -> None:
    transport = MockTransport(api_key="sk-right")
    client = qa.Client(base_url=URL, api_key="sk-wrong", transport=transport, retry=qa.RetryPolicy.none)
    with client, pytest.raises(qa.Unauthorized):
        client.list_models()
    assert len(transport.requests) == 1


def test_hooks_run_over_the_mock(no_sockets: None) -> None:
    stages: list[tuple[str, int]] = []
    hooks = {"before_attempt": [lambda e: stages.append((e.stage, e.attempt))]}
    with mock_client(Script(reply(503)), hooks=hooks) as client:
        client.list_models()
    assert stages == [("before_attempt", 1), ("before_attempt", 2)]


def test_anything_else_as_transport_is_refused() -> None:
    with pytest.raises(qa.InvalidOption, match=r"must be a qa_min\.testing\.MockTransport"):
        qa.Client(base_url=URL, transport=object())  # type: ignore[arg-type]


@pytest.mark.parametrize("models", ["judge-latest", ["judge-latest", 1], [None], 5])
def test_models_must_be_a_sequence_of_str_names(models: Any) -> None:
    # A str was read as the names of its letters; a name not a str crashed the normal answer.
    with pytest.raises(TypeError, match="models must"):
        MockTransport(models=models)


@pytest.mark.parametrize("api_key", [5, b"sk-test"])
def test_the_api_key_must_be_a_str(api_key: Any) -> None:
    # Accepted, it made every normal answer a 401, whatever key the client sent.
    with pytest.raises(TypeError, match="api_key must be a str or None"):
        MockTransport(api_key=api_key)


def test_a_handler_must_be_callable() -> None:
    with pytest.raises(TypeError, match="handler must be a function"):
        MockTransport(42)  # type: ignore[arg-type]


async def _async_handler(request: RecordedRequest) -> Step | None:
    raise AssertionError("never runs")


async def _async_generator_handler(request: RecordedRequest) -> AsyncIterator[None]:
    yield


class _AsyncHandler:
    async def __call__(self, request: RecordedRequest) -> Step | None:
        raise AssertionError("never runs")

    async def method(self, request: RecordedRequest) -> Step | None:
        raise AssertionError("never runs")


@pytest.mark.parametrize(
    "handler",
    [
        _async_handler,
        functools.partial(_async_handler),
        functools.partial(functools.partial(_AsyncHandler())),
        _AsyncHandler(),
        _AsyncHandler().method,
        _async_generator_handler,
    ],
    ids=["async-def", "partial", "partial-of-object", "object", "bound-method", "async-generator"],
)
def test_an_async_def_handler_is_refused_when_the_mock_is_made(handler: Any) -> None:
    # Nothing awaits a handler, on AsyncClient either: its coroutine was dropped, its body never run.
    with pytest.raises(TypeError) as caught:
        MockTransport(handler)
    message = str(caught.value)
    assert "async def" in message
    assert "handlers are plain functions, for AsyncClient too" in message


def _generator_handler(request: RecordedRequest) -> Iterator[Step]:
    raise AssertionError("never runs")
    yield


class _GeneratorHandler:
    def __call__(self, request: RecordedRequest) -> Iterator[Step]:
        raise AssertionError("never runs")
        yield


@pytest.mark.parametrize(
    "handler",
    [_generator_handler, functools.partial(_generator_handler), _GeneratorHandler()],
    ids=["generator", "partial", "object"],
)
def test_a_generator_handler_is_refused_when_the_mock_is_made(handler: Any) -> None:
    # Its call only makes a generator: every call failed, and its body never ran.
    with pytest.raises(TypeError) as caught:
        MockTransport(handler)
    message = str(caught.value)
    assert "handler is a generator function" in message
    assert "makes a generator, which nothing iterates, so its body would never run" in message
    assert "handlers are plain functions, for AsyncClient too" in message


@pytest.mark.parametrize("kind", ["threaded", "asyncio"])
def test_a_generator_a_handler_returns_is_closed_before_the_call_fails(kind: str) -> None:
    ran: list[str] = []
    returned: list[Generator[Step, None, None]] = []

    def body() -> Generator[Step, None, None]:
        ran.append("ran")
        yield reply(200, {})

    def handler(request: RecordedRequest) -> Any:
        returned.append(body())
        return returned[-1]

    with pytest.raises(qa.ConfigurationError, match=r"\(a generator\); it must return a Step"):
        list_models_with(kind, MockTransport(handler))
    assert ran == []
    assert [inspect.getgeneratorstate(g) for g in returned] == [inspect.GEN_CLOSED]


@pytest.mark.parametrize("kind", ["threaded", "asyncio"])
def test_a_coroutine_a_handler_returns_is_closed_before_the_call_fails(kind: str) -> None:
    # A plain function handing back a coroutine: not refused when the mock is made. The call fails
    # as for any other wrong return, and the coroutine is closed: its body never runs, and Python
    # never warns, later and elsewhere, that it was not awaited.
    ran: list[str] = []

    async def body() -> None:
        ran.append("ran")

    def handler(request: RecordedRequest) -> Any:
        return body()

    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        with pytest.raises(qa.ConfigurationError) as caught:
            list_models_with(kind, MockTransport(handler))
        message = str(caught.value)
        del caught  # its traceback holds the handler's frame, and so the coroutine
        gc.collect()
    assert "(a coroutine)" in message
    assert "must return a Step" in message
    assert ran == []
    assert [str(w.message) for w in warned if "never awaited" in str(w.message)] == []


def test_the_handler_sees_what_the_socket_transport_writes() -> None:
    # The same client configuration over a socket (the fake parses the bytes it receives) and
    # over the mock (built from the request value): the same method, target, fields and body.
    options: dict[str, Any] = {
        "api_key": "sk-same-0123456789",
        "extra_headers": [("X-Team", "blue"), ("X-Trace", "a b")],
        "retry": qa.RetryPolicy.none,
    }
    script = Script()
    with FakeService() as svc:
        base = svc.url
        with qa.Client(base_url=base, trust_env=False, **options) as client:
            client.core(REQUEST)
            client.list_models()
        with qa.Client(base_url=base, trust_env=False, transport=MockTransport(script), **options) as client:
            client.core(REQUEST)
            client.list_models()
        over_socket = svc.requests
    assert len(over_socket) == len(script.seen) == 2
    for wire, mocked in zip(over_socket, script.seen):
        assert (mocked.method, mocked.path, mocked.body) == (wire.method, wire.path, wire.body)
        assert dict(mocked.headers) == dict(wire.headers)
    assert script.seen[0].headers["content-length"] == str(len(script.seen[0].body))
    assert script.seen[0].headers["x-team"] == "blue"
    assert "content-length" not in script.seen[1].headers


@pytest.mark.parametrize(("size", "refused"), [(100, False), (101, True)])
def test_the_size_cap_at_the_limit_and_one_past(no_sockets: None, size: int, refused: bool) -> None:
    body = b'{"models": [], "pad": "' + b"x" * (size - 25) + b'"}'
    assert len(body) == size
    with mock_client(Script(reply(200, body)), max_response_bytes=100) as client:
        if not refused:
            assert len(client.list_models()) == 0
            return
        with pytest.raises(qa.InvalidResponse) as caught:
            client.list_models()
    # The socket reader's own refusal, word for word, and the status recorded as there.
    refusal = "the response body has 101 bytes, over the 100-byte limit"
    assert str(caught.value).startswith(f"HTTP 200 from GET http://mock.test/api/v1/models: {refusal}")
    assert caught.value.diagnostics.status == 200
    assert caught.value.__cause__ is None


def test_an_error_body_over_the_cap_keeps_its_first_bytes(no_sockets: None) -> None:
    script = Script(reply(503, b"e" * 150))
    with (
        mock_client(script, max_response_bytes=100, retry=qa.RetryPolicy.none) as client,
        pytest.raises(qa.ServerError) as caught,
    ):
        client.list_models()
    assert caught.value.diagnostics.body == "e" * 100


def test_a_handler_failing_after_a_cancel_is_a_cancel_as_over_a_socket(no_sockets: None) -> None:
    token = qa.CancelToken()

    def handler(request: RecordedRequest) -> Step | None:
        token.cancel()  # the cancel lands while the "connection" fails
        raise ConnectionResetError(104, "Connection reset by peer")

    with mock_client(handler) as client, pytest.raises(qa.Canceled, match="cancelled") as caught:
        client.list_models(cancel=token)
    assert caught.value.diagnostics.attempts == 1

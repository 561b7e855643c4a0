"""Debugging a call: request ids, response headers, timings, per-attempt records and event hooks.

Traced to the spec (SPEC.md section 7a, "Diagnostics also carries ..."):
  request_id from request-id / x-request-id ........ test_request_id_is_read_from_either_spelling,
                                                      test_error_message_names_the_request_id
  headers, read-only, as received .................. test_headers_are_the_last_responses_as_received
  elapsed and one record per attempt ............... test_history_records_429_then_503_then_200
  results carry the same information ............... test_every_result_carries_its_diagnostics
  hooks before/after each attempt .................. test_hooks_run_in_order_on_success_and_retries,
                                                      test_hooks_see_a_final_failure,
                                                      test_hooks_see_a_cancellation
  a hook that raises does not break the call ....... test_a_raising_hook_is_logged_and_ignored
  hooks are plain functions: async def is refused .. test_plain_callables_are_accepted_as_hooks,
                                     test_an_async_def_hook_is_refused_when_the_client_is_made,
                                     test_a_generator_hook_is_refused_when_the_client_is_made
  never the key .................................... test_the_key_reaches_no_hook_and_no_diagnostics
"""

from __future__ import annotations

import copy
import functools
import logging
import pickle
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from support import BOUND, InProcessService, SleepRecorder, make_recording_client, wait_until

import qa_min as qa
from qa_min.testing import FakeService, hang, reply


@pytest.fixture
def svc() -> Iterator[InProcessService]:
    """The service in-process (MockTransport): these tests are about the layers above the socket."""
    with InProcessService() as service:
        yield service


KEY = "sk-debug-0123456789abcdef"
PIECES = [KEY[i : i + 8] for i in range(len(KEY) - 7)]  # every piece the redactor hides


class Review(qa.Questions):
    toxic = qa.YesNo("insults someone", "insults no one")


REQUEST = qa.Request(state="Some text", questions=[qa.NamedQuestion("toxic", qa.YesNo("yes", "no"))])


class Recorder:
    """A hook for both stages that keeps every event."""

    def __init__(self) -> None:
        self.events: list[qa.HookEvent] = []

    def __call__(self, event: qa.HookEvent) -> None:
        self.events.append(event)

    def summary(self) -> list[tuple[str, int, Any, Any]]:
        return [
            (e.stage, e.attempt, e.status, None if e.error is None else type(e.error).__name__)
            for e in self.events
        ]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def hooked(svc: InProcessService, recorder: Recorder) -> Iterator[qa.Client]:
    hooks = {"before_attempt": [recorder], "after_attempt": [recorder]}
    with make_recording_client(svc.url, hooks=hooks) as client:
        yield client


@pytest.mark.parametrize("header", ["request-id", "x-request-id", "Request-Id", "X-Request-ID"])
def test_request_id_is_read_from_either_spelling(svc: InProcessService, header: str) -> None:
    svc.script(reply(200, {"answers": {"toxic": True}}, headers=[(header, "req_123")]))
    with make_recording_client(svc.url) as client:
        result = client.core(REQUEST)
    assert result.diagnostics.request_id == "req_123"
    assert [a.request_id for a in result.diagnostics.history] == ["req_123"]


def test_request_id_wins_over_x_request_id(svc: InProcessService) -> None:
    svc.script(reply(200, {"answers": {"toxic": True}}, headers=[("x-request-id", "x"), ("request-id", "r")]))
    with make_recording_client(svc.url) as client:
        assert client.core(REQUEST).diagnostics.request_id == "r"


def test_no_request_id_header_gives_none(svc: InProcessService) -> None:
    with make_recording_client(svc.url) as client:
        diagnostics = client.core(REQUEST).diagnostics
    assert diagnostics.request_id is None
    assert diagnostics.status == 200
    assert diagnostics.attempts == 1


def test_error_message_names_the_request_id(svc: InProcessService) -> None:
    svc.script(reply(400, {"detail": "bad state"}, headers=[("request-id", "req_bad_1")]))
    with make_recording_client(svc.url) as client, pytest.raises(qa.BadRequest) as caught:
        client.core(REQUEST)
    assert "request id req_bad_1" in str(caught.value)
    assert "bad state" in str(caught.value)
    assert caught.value.diagnostics.request_id == "req_bad_1"


def test_error_message_without_request_id_does_not_mention_one(svc: InProcessService) -> None:
    svc.script(reply(400, {"detail": "bad state"}))
    with make_recording_client(svc.url) as client, pytest.raises(qa.BadRequest) as caught:
        client.core(REQUEST)
    assert "request id" not in str(caught.value)


def test_headers_are_the_last_responses_as_received(svc: InProcessService) -> None:
    svc.script(
        reply(503, {"detail": "busy"}, headers=[("X-RateLimit-Remaining", "0")]),
        reply(200, {"answers": {"toxic": True}}, headers=[("X-RateLimit-Remaining", "41"), ("X-Multi", "a")]),
    )
    with make_recording_client(svc.url) as client:
        headers = client.core(REQUEST).diagnostics.headers
    assert headers is not None
    assert headers["x-ratelimit-remaining"] == "41"  # the last response's, any case
    assert ("X-RateLimit-Remaining", "41") in headers.items()  # spelled as received
    assert "X-MULTI" in headers
    assert headers.get("absent") is None
    with pytest.raises(KeyError):
        headers["absent"]
    with pytest.raises((AttributeError, TypeError)):
        headers["x-multi"] = "b"  # type: ignore[index]


def test_history_records_429_then_503_then_200(svc: InProcessService) -> None:
    svc.script(
        reply(429, {"detail": "slow down"}, headers=[("retry-after-ms", "20"), ("request-id", "r1")]),
        reply(503, {"detail": "busy"}, headers=[("request-id", "r2")]),
        reply(200, {"answers": {"toxic": False}}, headers=[("request-id", "r3")]),
    )
    sleep = SleepRecorder()
    with make_recording_client(svc.url, sleep=sleep) as client:
        result = client.core(REQUEST)
    history = result.diagnostics.history
    assert [(a.number, a.status, a.error) for a in history] == [
        (1, 429, "RateLimited"),
        (2, 503, "ServerError"),
        (3, 200, None),
    ]
    # Slept before attempt 2: the server's 20 ms; before attempt 3: the second backoff, 1 s.
    assert [a.delay for a in history] == pytest.approx([0.0, 0.02, 1.0], abs=1e-6)
    assert sleep.seconds == pytest.approx([0.02, 1.0], abs=1e-6)
    assert [a.request_id for a in history] == ["r1", "r2", "r3"]
    assert all(0 <= a.duration < BOUND for a in history)
    assert [a.rate_limit_wait for a in history] == pytest.approx([0.0, 0.0, 0.0], abs=1e-3)
    assert result.diagnostics.attempts == 3
    assert result.diagnostics.elapsed >= sum(a.duration for a in history)


def test_history_records_a_connection_failure_by_its_error() -> None:
    with FakeService() as gone:  # a real socket that no longer listens
        url = gone.url
    with (
        make_recording_client(url, retry=qa.RetryPolicy(max_retries=1)) as client,
        pytest.raises(qa.ConnectionFailed) as caught,
    ):
        client.list_models()
    history = caught.value.diagnostics.history
    assert [(a.number, a.status, a.error) for a in history] == [
        (1, None, "ConnectionFailed"),
        (2, None, "ConnectionFailed"),
    ]
    assert caught.value.diagnostics.headers is None


def test_an_attempt_record_is_read_only_and_survives_pickle() -> None:
    record = qa.Attempt(2, 429, "RateLimited", 0.5, 1.0, 0.25, "req")
    with pytest.raises(AttributeError, match="read-only"):
        record.status = 200
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(record, protocol)) == record
    assert copy.deepcopy(record) == record
    assert "RateLimited" in repr(record)
    headers = qa.ResponseHeaders([("A", "1")])
    assert pickle.loads(pickle.dumps(headers)) == headers


def test_a_hook_event_s_repr_names_the_outcome_only_after_the_attempt() -> None:
    before = qa.HookEvent("before_attempt", "POST", "http://h/v1/core", 1, b"{}")
    after = qa.HookEvent("after_attempt", "POST", "http://h/v1/core", 1, b"{}", 200, None, 0.5)
    assert repr(before) == "HookEvent(before_attempt #1 POST http://h/v1/core)"
    assert repr(after) == "HookEvent(after_attempt #1 POST http://h/v1/core, status=200, error=None)"


def test_attempt_records_equal_only_field_for_field_and_show_milliseconds() -> None:
    record = qa.Attempt(2, 429, "RateLimited", 0.5, 1.0, 0.25, "req")
    assert record == qa.Attempt(2, 429, "RateLimited", 0.5, 1.0, 0.25, "req")
    assert record != qa.Attempt(3, 429, "RateLimited", 0.5, 1.0, 0.25, "req")
    assert record != (2, 429, "RateLimited", 0.5, 1.0, 0.25, "req")
    assert "#2: 429 RateLimited, 500.0 ms, delay=1.000, rate_limit_wait=0.250" in repr(record)


def test_a_stand_in_for_an_exception_that_cannot_travel_travels_itself() -> None:
    from qa_min._diagnostics import _StandIn

    stand_in = _StandIn("SSLError", "[SSL] certificate verify failed")
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        copied = pickle.loads(pickle.dumps(stand_in, protocol))
        assert (type(copied), repr(copied), str(copied)) == (
            _StandIn,
            "SSLError('[SSL] certificate verify failed')",
            "[SSL] certificate verify failed",
        )


def test_response_headers_read_as_a_read_only_mapping() -> None:
    headers = qa.ResponseHeaders([("X-Multi", "a"), ("Content-Type", "text/plain"), ("x-multi", "b")])
    assert headers.get("absent", "fallback") == "fallback"
    assert headers.get("X-MULTI") == "a"  # the first value
    assert headers.get_all("x-multi") == ["a", "b"]  # every value, in order
    assert headers.keys() == ["X-Multi", "Content-Type", "x-multi"] == list(headers)
    assert len(headers) == 3
    assert 1 not in headers  # a name is a str: anything else is absent, no error
    assert headers == qa.ResponseHeaders(headers.items())
    assert headers != qa.ResponseHeaders([("X-Multi", "a")])
    assert headers != headers.items()  # a tuple of the same pairs is no ResponseHeaders
    with pytest.raises(TypeError):
        hash(headers)  # equal by content, which a dict key or a set member must not change


@pytest.mark.parametrize(("length", "shown"), [(80, 80), (81, 77)])
def test_diagnostics_repr_shows_a_body_of_80_characters_whole_and_cuts_a_longer_one(
    length: int, shown: int
) -> None:
    diag = qa.Diagnostics()
    diag.body = "b" * length
    cut = "..." if length > 80 else ""
    assert f"body={'b' * shown + cut!r}" in repr(diag)


def test_every_result_carries_its_diagnostics(svc: InProcessService) -> None:
    svc.script(
        reply(200, {"answers": {"toxic": True}}, headers=[("request-id", "a")]),
        reply(200, {"answers": {"toxic": True}}, headers=[("request-id", "c")]),
        reply(200, {"models": [{"name": "judge-latest"}]}, headers=[("request-id", "m")]),
    )
    given = qa.Diagnostics()
    with make_recording_client(svc.url) as client:
        asked = client.ask("Some text", Review, diagnostics=given)
        core = client.core(REQUEST)
        models = client.list_models()
    assert asked.diagnostics is given  # the one passed in, filled
    assert (asked.diagnostics.request_id, core.diagnostics.request_id, models.diagnostics.request_id) == (
        "a",
        "c",
        "m",
    )


def test_hooks_run_in_order_on_success_and_retries(
    svc: InProcessService, hooked: qa.Client, recorder: Recorder
) -> None:
    svc.script(reply(429, headers=[("retry-after-ms", "1")]), reply(503))
    hooked.core(REQUEST)
    assert recorder.summary() == [
        ("before_attempt", 1, None, None),
        ("after_attempt", 1, 429, "RateLimited"),
        ("before_attempt", 2, None, None),
        ("after_attempt", 2, 503, "ServerError"),
        ("before_attempt", 3, None, None),
        ("after_attempt", 3, 200, None),
    ]
    after = recorder.events[-1]
    assert after.method == "POST"
    assert after.url == f"{svc.url}/v1/core"
    assert after.duration is not None
    assert 0 <= after.duration < BOUND
    assert recorder.events[0].duration is None


def test_hooks_see_a_final_failure(svc: InProcessService, hooked: qa.Client, recorder: Recorder) -> None:
    svc.script(reply(401, {"detail": "no"}))
    with pytest.raises(qa.Unauthorized):
        hooked.list_models()
    assert recorder.summary() == [
        ("before_attempt", 1, None, None),
        ("after_attempt", 1, 401, "Unauthorized"),
    ]
    assert recorder.events[1].url == f"{svc.url}/v1/models"
    assert recorder.events[1].request_body() == b""


def test_hooks_see_a_cancellation(svc: InProcessService, hooked: qa.Client, recorder: Recorder) -> None:
    svc.script(hang())
    token = qa.CancelToken()
    call = hooked.submit(hooked.core, REQUEST, cancel=token)
    assert svc.wait_for_requests(1, BOUND)
    token.cancel()
    with pytest.raises(qa.Canceled):
        call.result(BOUND)
    assert wait_until(lambda: len(recorder.events) == 2)
    assert recorder.summary() == [("before_attempt", 1, None, None), ("after_attempt", 1, None, "Canceled")]


def test_a_hook_sees_the_request_body_only_when_it_asks(
    svc: InProcessService, hooked: qa.Client, recorder: Recorder
) -> None:
    hooked.core(REQUEST)
    body = recorder.events[0].request_body()
    assert b'"state": "Some text"' in body or b'"state":"Some text"' in body
    assert b"Authorization" not in body
    assert "Some text" not in repr(recorder.events[0])


def test_a_raising_hook_is_logged_and_ignored(
    svc: InProcessService, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[int] = []

    def broken(event: qa.HookEvent) -> None:
        raise RuntimeError("the metrics backend is down")

    def counting(event: qa.HookEvent) -> None:
        seen.append(event.attempt)

    hooks = {"before_attempt": [broken, counting], "after_attempt": [broken]}
    with (
        caplog.at_level(logging.WARNING, logger="qa_min"),
        make_recording_client(svc.url, hooks=hooks) as client,
    ):
        result = client.core(REQUEST)
    assert result.answers["toxic"] in (True, False)
    assert seen == [1]  # the hook after the broken one still ran
    messages = [r.getMessage() for r in caplog.records if r.name == "qa_min"]
    assert sum("the metrics backend is down" in m for m in messages) == 2
    assert all("RuntimeError" in m for m in messages)


@pytest.mark.parametrize(
    ("hooks", "reason"),
    [
        ({"before": [print]}, "unknown stage 'before'"),
        ({"after_attempt": print}, "must be a list of functions"),
        ({"after_attempt": 5}, "must be a list of functions, got 5"),  # neither a function nor a list
        ({"after_attempt": [1]}, "not a function"),
        ([print], "must be a mapping"),
    ],
)
def test_malformed_hooks_are_refused(hooks: Any, reason: str) -> None:
    with pytest.raises(qa.InvalidOption, match=reason):
        qa.Client(base_url="http://127.0.0.1:9", hooks=hooks)


async def _async_hook(event: qa.HookEvent) -> None:
    raise AssertionError("never runs")


async def _async_generator_hook(event: qa.HookEvent) -> AsyncIterator[None]:
    yield


class _AsyncCallable:
    async def __call__(self, event: qa.HookEvent) -> None:
        raise AssertionError("never runs")

    async def method(self, event: qa.HookEvent) -> None:
        raise AssertionError("never runs")


def _plain_hook(event: qa.HookEvent) -> None:
    pass


@pytest.mark.parametrize("client_class", [qa.Client, qa.AsyncClient])
@pytest.mark.parametrize(
    "hook",
    [
        _async_hook,
        functools.partial(_async_hook),
        functools.partial(functools.partial(_AsyncCallable())),
        _AsyncCallable(),
        _AsyncCallable().method,
        _async_generator_hook,
    ],
    ids=["async-def", "partial", "partial-of-object", "object", "bound-method", "async-generator"],
)
def test_an_async_def_hook_is_refused_when_the_client_is_made(hook: Any, client_class: Any) -> None:
    # Nothing awaits a hook: its coroutine would be dropped, its body never run.
    with pytest.raises(qa.InvalidOption) as caught:
        client_class(base_url="http://127.0.0.1:9", hooks={"after_attempt": [_plain_hook, hook]})
    message = str(caught.value)
    assert "hooks['after_attempt']" in message
    assert "async def" in message
    assert "hooks must be plain functions" in message


def _generator_hook(event: qa.HookEvent) -> Iterator[None]:
    raise AssertionError("never runs")
    yield


class _GeneratorCallable:
    def __call__(self, event: qa.HookEvent) -> Iterator[None]:
        raise AssertionError("never runs")
        yield

    def method(self, event: qa.HookEvent) -> Iterator[None]:
        raise AssertionError("never runs")
        yield


@pytest.mark.parametrize("client_class", [qa.Client, qa.AsyncClient])
@pytest.mark.parametrize(
    "hook",
    [
        _generator_hook,
        functools.partial(_generator_hook),
        _GeneratorCallable(),
        _GeneratorCallable().method,
    ],
    ids=["generator", "partial", "object", "bound-method"],
)
def test_a_generator_hook_is_refused_when_the_client_is_made(hook: Any, client_class: Any) -> None:
    # Calling it only makes a generator, which nothing iterates: its body would never run, silently.
    with pytest.raises(qa.InvalidOption) as caught:
        client_class(base_url="http://127.0.0.1:9", hooks={"before_attempt": [_plain_hook, hook]})
    message = str(caught.value)
    assert "hooks['before_attempt'] holds a generator function" in message
    assert "makes a generator, which nothing iterates, so its body would never run" in message
    assert "hooks must be plain functions" in message


@pytest.mark.parametrize("client_class", [qa.Client, qa.AsyncClient])
def test_plain_callables_are_accepted_as_hooks(client_class: Any) -> None:
    hooks = [
        _plain_hook,
        functools.partial(_plain_hook),
        Recorder(),
        print,
        Recorder().summary,
        lambda e: None,
    ]
    client_class(base_url="http://127.0.0.1:9", hooks={"before_attempt": hooks})


def test_empty_hooks_are_no_hooks() -> None:
    with qa.Client(
        base_url="http://127.0.0.1:9", hooks={"before_attempt": [], "after_attempt": ()}
    ) as client:
        assert client._sender.messages.hooks is None


def test_the_key_reaches_no_hook_and_no_diagnostics(svc: InProcessService, recorder: Recorder) -> None:
    # A server that echoes the key in its request id, in another header and in the error body.
    svc.script(
        reply(429, {"detail": f"key {KEY}"}, headers=[("request-id", KEY), ("x-echo", f"Bearer {KEY}")])
    )
    hooks = {"before_attempt": [recorder], "after_attempt": [recorder]}
    with (
        make_recording_client(svc.url, api_key=KEY, hooks=hooks, retry=qa.RetryPolicy.none) as client,
        pytest.raises(qa.RateLimited) as caught,
    ):
        client.core(REQUEST)
    diagnostics = caught.value.diagnostics
    seen = [repr(diagnostics), str(caught.value), repr(diagnostics.headers), str(diagnostics.request_id)]
    seen += [repr(a) for a in diagnostics.history]
    for event in recorder.events:
        seen += [repr(event), event.url, str(event.error), str(event.request_id), repr(event.request_body())]
    assert diagnostics.headers is not None
    seen += [value for _, value in diagnostics.headers.items()]
    leaked = [text for text in seen if KEY in text]
    assert not leaked
    assert diagnostics.request_id == "[redacted]"


def _walk(root: object) -> Iterator[object]:
    """``root`` and everything reachable through its attributes, slots and containers."""
    todo, seen = [root], set()
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        if isinstance(node, (str, bytes, int, float, type(None))):
            continue
        if isinstance(node, dict):
            todo += [*node.keys(), *node.values()]
        elif isinstance(node, (list, tuple, set, frozenset)):
            todo += list(node)
        todo += list(getattr(node, "__dict__", {}).values())
        for cls in type(node).__mro__:
            for name in cls.__dict__.get("__slots__", ()):
                todo.append(getattr(node, name, None))


def test_a_hook_that_pickles_or_walks_its_event_finds_no_piece_of_the_key(svc: InProcessService) -> None:
    pickles: list[bytes] = []
    found: list[str] = []

    def inspect(event: qa.HookEvent) -> None:
        pickles.append(pickle.dumps(event))
        for value in _walk(event):
            text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
            found.extend(piece for piece in PIECES if piece in text)

    hooks = {"before_attempt": [inspect], "after_attempt": [inspect]}
    with make_recording_client(svc.url, api_key=KEY, hooks=hooks) as client:
        client.core(REQUEST)
        client.list_models()
    assert len(pickles) == 4
    assert not found
    assert not [piece for data in pickles for piece in PIECES if piece.encode() in data]
    body = pickle.loads(pickles[0]).request_body()
    assert b'"state"' in body  # the body is still there for the hook that asks for it


def test_hooks_are_called_from_the_calling_thread(svc: InProcessService) -> None:
    threads: list[str] = []
    hooks = {"before_attempt": [lambda e: threads.append(threading.current_thread().name)]}
    with make_recording_client(svc.url, hooks=hooks) as client:
        client.core(REQUEST)
    assert threads == [threading.current_thread().name]

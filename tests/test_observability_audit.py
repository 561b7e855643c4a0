"""Outside audit of observability (SPEC 5 "Diagnostics", the last bullet of 7a) through both clients.

Every Diagnostics field after a success and after each error class, over a socket
(FakeService, or a RawServer for what FakeService will not send); request-id against
x-request-id; the timings' arithmetic; hooks (order, fields, thread or loop, raising, slow,
re-entrant); the ``qa_min`` logger's levels and that the key reaches no record.
test_debugging.py covers much of this for ``Client`` in-process; here it goes over sockets and
through ``AsyncClient`` too.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any, Optional

import pytest
from faultservers import RawServer, close_unanswered, read_request, reset_after_request
from rawhttp import response
from support import BOUND

import qa_min as qa
from qa_min.testing import FakeService, hang, reply, reset

KEY = "sk-observe-0123456789abcdef"
OK = {"answers": {"toxic": True}, "usage": {}}
KINDS = ["sync", "async"]


class Toxic(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


Outcome = tuple[Optional[qa.QAError], qa.Diagnostics]


def options(url: str, **extra: Any) -> dict[str, Any]:
    """A client's options: no proxy from the environment, a small policy.

    Backoff is really slept (1 ms, then 2): a ``sleep=`` seam would count delays that never
    passed, and the timings could not be checked against ``elapsed``.
    """
    base: dict[str, Any] = {
        "base_url": url,
        "trust_env": False,
        "retry": qa.RetryPolicy(max_retries=2, backoff_initial_ms=1),
    }
    base.update(extra)
    return base


def ask(kind: str, url: str, calls: int = 1, call: Optional[dict[str, Any]] = None, **extra: Any) -> Outcome:
    """``calls`` asks on one client of ``kind``; the last one's error (or None) and Diagnostics."""
    call = call or {}
    if kind == "sync":
        with qa.Client(**options(url, **extra)) as client:
            return _sync_calls(client, calls, call)

    async def run() -> Outcome:
        async with qa.AsyncClient(**options(url, **extra)) as client:
            outcome: Outcome = (None, qa.Diagnostics())
            for _ in range(calls):
                diag = qa.Diagnostics()
                try:
                    await client.ask("some text", Toxic, diagnostics=diag, **call)
                    outcome = (None, diag)
                except qa.QAError as exc:
                    outcome = (exc, diag)
            return outcome

    return asyncio.run(run())


def _sync_calls(client: qa.Client, calls: int, call: dict[str, Any]) -> Outcome:
    outcome: Outcome = (None, qa.Diagnostics())
    for _ in range(calls):
        diag = qa.Diagnostics()
        try:
            client.ask("some text", Toxic, diagnostics=diag, **call)
            outcome = (None, diag)
        except qa.QAError as exc:
            outcome = (exc, diag)
    return outcome


def records(diag: qa.Diagnostics) -> list[tuple[int, Optional[int], Optional[str], Optional[str]]]:
    return [(a.number, a.status, a.error, a.request_id) for a in diag.history]


def assert_timings_sane(diag: qa.Diagnostics) -> None:
    """Never negative; each attempt's duration, delay and limiter wait fit in the call's elapsed."""
    assert diag.elapsed > 0.0
    assert diag.elapsed < BOUND
    assert diag.rate_limit_wait >= 0.0
    spent = 0.0
    for attempt in diag.history:
        assert attempt.duration >= 0.0, attempt
        assert attempt.delay >= 0.0, attempt
        assert attempt.rate_limit_wait >= 0.0, attempt
        spent += attempt.duration + attempt.delay + attempt.rate_limit_wait
    # Small slack: the parts are measured by separate clock reads.
    assert spent <= diag.elapsed + 0.005, (spent, diag.elapsed, diag.history)


@pytest.fixture
def svc() -> Iterator[FakeService]:
    with FakeService() as service:
        yield service


# -- every field after a success and after each error class ------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_success_fills_every_field_over_a_socket(svc: FakeService, kind: str) -> None:
    svc.script(
        reply(200, OK, headers=[("X-Request-Id", "req_x"), ("Request-Id", "req_ok"), ("X-Extra", "1")])
    )
    error, diag = ask(kind, svc.url)
    assert error is None
    assert (diag.status, diag.body, diag.attempts, diag.transport_error) == (200, None, 1, None)
    # docs/errors.md and test_debugging: request-id wins over x-request-id, whatever the order.
    assert diag.request_id == "req_ok"
    assert diag.headers is not None
    assert diag.headers["x-extra"] == "1"
    assert ("X-Request-Id", "req_x") in diag.headers.items()
    assert records(diag) == [(1, 200, None, "req_ok")]
    assert diag.history[0].delay == 0.0
    assert_timings_sane(diag)


@pytest.mark.parametrize("kind", KINDS)
def test_x_request_id_alone_is_the_request_id(svc: FakeService, kind: str) -> None:
    svc.script(reply(200, OK, headers=[("x-request-id", "req_only_x")]))
    error, diag = ask(kind, svc.url)
    assert error is None
    assert diag.request_id == "req_only_x"
    assert records(diag) == [(1, 200, None, "req_only_x")]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("status", "cls", "attempts"),
    [
        (400, qa.BadRequest, 1),
        (404, qa.NotFound, 1),
        (422, qa.UnprocessableEntity, 1),
        (500, qa.ServerError, 3),
        (503, qa.ServerError, 3),
        (429, qa.RateLimited, 3),
        (529, qa.Overloaded, 3),
    ],
)
def test_status_error_fills_every_field_and_names_the_last_request_id(
    svc: FakeService, kind: str, status: int, cls: type[qa.QAError], attempts: int
) -> None:
    svc.script(
        *[
            reply(status, {"detail": f"no luck {n}"}, headers=[("request-id", f"req_{n}"), ("X-Try", str(n))])
            for n in range(1, attempts + 1)
        ]
    )
    error, diag = ask(kind, svc.url, rate_limit=None)
    assert type(error) is cls
    assert isinstance(error, qa.APIStatusError)
    assert error.status == status
    last = f"req_{attempts}"
    assert f"(request id {last})" in str(error)
    assert f"no luck {attempts}" in str(error)
    assert (diag.status, diag.attempts, diag.transport_error, diag.request_id) == (
        status,
        attempts,
        None,
        last,
    )
    assert diag.body is not None
    assert f"no luck {attempts}" in diag.body
    assert diag.headers is not None
    assert diag.headers["x-try"] == str(attempts)
    assert records(diag) == [(n, status, cls.__name__, f"req_{n}") for n in range(1, attempts + 1)]
    assert_timings_sane(diag)


@pytest.mark.parametrize("kind", KINDS)
def test_a_retried_status_then_success_keeps_only_the_last_responses_fields(
    svc: FakeService, kind: str
) -> None:
    svc.script(
        reply(503, {"detail": "busy"}, headers=[("request-id", "req_1"), ("X-Only-First", "1")]),
        reply(200, OK, headers=[("request-id", "req_2")]),
    )
    error, diag = ask(kind, svc.url)
    assert error is None
    assert (diag.status, diag.request_id, diag.attempts) == (200, "req_2", 2)
    # body is the last non-2xx body (SPEC 5), the 503's; headers are the last response's.
    assert diag.body is not None
    assert "busy" in diag.body
    assert diag.headers is not None
    assert "X-Only-First" not in diag.headers
    assert records(diag) == [(1, 503, "ServerError", "req_1"), (2, 200, None, "req_2")]
    assert_timings_sane(diag)


@pytest.mark.parametrize("kind", KINDS)
def test_connection_failed_has_no_response_fields_and_its_transport_error(kind: str) -> None:
    with RawServer(reset_after_request()) as server:
        error, diag = ask(kind, server.url, retry=qa.RetryPolicy(max_retries=1, backoff_initial_ms=1))
    assert isinstance(error, qa.ConnectionFailed)
    assert "request id" not in str(error)
    assert (diag.status, diag.body, diag.request_id, diag.headers, diag.attempts) == (
        None,
        None,
        None,
        None,
        2,
    )
    assert isinstance(diag.transport_error, (OSError, qa.ProtocolError))
    assert records(diag) == [(1, None, "ConnectionFailed", None), (2, None, "ConnectionFailed", None)]
    assert_timings_sane(diag)


@pytest.mark.parametrize("kind", KINDS)
def test_invalid_response_names_its_request_id(svc: FakeService, kind: str) -> None:
    svc.script(reply(200, {"unexpected": 1}, headers=[("request-id", "req_shape")]))
    error, diag = ask(kind, svc.url)
    assert isinstance(error, qa.InvalidResponse)
    assert "request id req_shape" in str(error)
    assert (diag.status, diag.request_id, diag.attempts) == (200, "req_shape", 1)
    # Attempt.error is None for a 2xx (its docstring): the HTTP attempt succeeded, decoding failed.
    assert records(diag) == [(1, 200, None, "req_shape")]
    assert_timings_sane(diag)


@pytest.mark.parametrize("kind", KINDS)
def test_timeout_is_canceled_with_its_attempt_recorded(svc: FakeService, kind: str) -> None:
    svc.script(hang())
    error, diag = ask(kind, svc.url, call={"timeout": 0.1})
    svc.release()
    assert isinstance(error, qa.Canceled)
    assert "timeout" in str(error).lower() or "0.1" in str(error), str(error)
    assert (diag.status, diag.request_id, diag.attempts) == (None, None, 1)
    assert records(diag) == [(1, None, "Canceled", None)]
    # It waited its timeout, not the BOUND.
    assert 0.09 <= diag.elapsed < BOUND
    assert_timings_sane(diag)


@pytest.mark.parametrize("kind", KINDS)
def test_cancel_from_another_thread_records_a_canceled_attempt(svc: FakeService, kind: str) -> None:
    svc.script(hang())
    token = qa.CancelToken()

    def cancel_once_in() -> None:
        if svc.wait_for_requests(1, timeout=BOUND):
            token.cancel()

    canceller = threading.Thread(target=cancel_once_in)
    canceller.start()
    try:
        error, diag = ask(kind, svc.url, call={"cancel": token})
    finally:
        canceller.join(BOUND)
        svc.release()
    assert isinstance(error, qa.Canceled)
    assert "cancel" in str(error).lower()
    assert records(diag) == [(1, None, "Canceled", None)]
    assert diag.attempts == 1
    assert_timings_sane(diag)


def _refusing_proxy(conn: socket.socket, stop: threading.Event) -> None:
    if read_request(conn):
        conn.sendall(
            response(
                "407 Proxy Authentication Required",
                ["Proxy-Authenticate: Basic", "request-id: req_proxy", "Content-Type: text/html"],
                b"<html><head><title>Access Denied</title></head></html>",
            )
        )


@pytest.mark.parametrize("kind", KINDS)
def test_proxy_refusal_records_the_proxys_status_and_no_request_id(kind: str) -> None:
    with RawServer(_refusing_proxy) as proxy:
        error, diag = ask(kind, "http://service.invalid", proxy=proxy.url)
    assert isinstance(error, qa.ProxyError)
    assert "407" in str(error)
    assert "proxy" in str(error).lower()
    # docs/configuration.md: request_id and headers are None (the service never answered).
    assert (diag.status, diag.attempts, diag.request_id, diag.headers) == (407, 1, None, None)
    assert diag.body is not None
    assert "Access Denied" in diag.body
    assert records(diag) == [(1, 407, "ProxyError", None)]
    assert_timings_sane(diag)


@pytest.mark.parametrize("kind", KINDS)
def test_a_retry_that_succeeds_keeps_the_transport_error_and_the_body_it_followed(kind: str) -> None:
    # docs/errors.md: both are the last met, kept when a retry then succeeds; history says where.
    with FakeService() as svc:
        svc.script(reset(), reply(503, {"detail": "warming up"}))
        error, diag = ask(kind, svc.url)
    assert error is None
    assert records(diag) == [
        (1, None, "ConnectionFailed", None),
        (2, 503, "ServerError", None),
        (3, 200, None, None),
    ]
    assert isinstance(diag.transport_error, ConnectionResetError), repr(diag.transport_error)
    assert diag.body == '{"detail": "warming up"}'
    assert diag.status == 200


@pytest.mark.parametrize("kind", KINDS)
def test_resend_on_a_dead_pooled_connection_is_an_attempt_with_no_delay(kind: str) -> None:
    seen: list[tuple[str, int, Optional[int], Optional[str]]] = []

    def hook(event: qa.HookEvent) -> None:
        seen.append(
            (
                event.stage,
                event.attempt,
                event.status,
                None if event.error is None else type(event.error).__name__,
            )
        )

    hooks = {"before_attempt": [hook], "after_attempt": [hook]}
    with RawServer(close_unanswered(2, [])) as server:
        error, diag = ask(kind, server.url, calls=2, hooks=hooks)
        assert server.connections == 2
    assert error is None
    assert diag.attempts == 2
    assert records(diag) == [(1, None, "ConnectionFailed", None), (2, 200, None, None)]
    # Not a retry: nothing slept before the re-send.
    assert [a.delay for a in diag.history] == [0.0, 0.0]
    assert diag.transport_error is None  # the call succeeded
    assert seen[2:] == [
        ("before_attempt", 1, None, None),
        ("after_attempt", 1, None, "ConnectionFailed"),
        ("before_attempt", 2, None, None),
        ("after_attempt", 2, 200, None),
    ]
    assert_timings_sane(diag)


@pytest.mark.parametrize("kind", KINDS)
def test_a_limiter_pause_is_counted_in_the_attempt_and_the_call(svc: FakeService, kind: str) -> None:
    # 2 a second, a burst of 1, calls one after the other: each call's slot is 0.5 s after the
    # one before went out, so the last call waits unless the call before it took 0.5 s to answer.
    # (Three calls: the first one loads the transport, which under coverage on a loaded machine
    # once took a whole slot's time; at 4 a second, a slow answer could take the 0.25 s.)
    error, diag = ask(kind, svc.url, calls=3, rate_limit=qa.RateLimit(2, burst=1))
    assert error is None
    assert diag.rate_limit_wait > 0.0, diag.history
    assert diag.history[0].rate_limit_wait > 0.0
    assert diag.history[0].rate_limit_wait == pytest.approx(diag.rate_limit_wait, abs=0.005)
    assert diag.elapsed >= diag.rate_limit_wait
    assert_timings_sane(diag)


def test_an_attempt_and_the_headers_are_read_only(svc: FakeService) -> None:
    svc.script(reply(200, OK, headers=[("request-id", "req_ro")]))
    error, diag = ask("sync", svc.url)
    assert error is None
    attempt = diag.history[0]
    for name, value in [("status", 500), ("request_id", "forged"), ("duration", -1.0), ("new", 1)]:
        with pytest.raises(AttributeError, match="read-only"):
            setattr(attempt, name, value)
    assert (attempt.status, attempt.request_id) == (200, "req_ro")
    assert isinstance(diag.history, tuple)
    assert diag.headers is not None
    with pytest.raises(TypeError):
        diag.headers["request-id"] = "forged"  # type: ignore[index]
    assert diag.headers["request-id"] == "req_ro"


# -- hooks ---------------------------------------------------------------------------------------


Where = tuple[str, int, Optional[int], Optional[str], Optional[str], bool, Optional[int]]


@pytest.mark.parametrize("kind", KINDS)
def test_hooks_get_the_documented_fields_in_order_on_the_callers_thread_or_loop(
    svc: FakeService, kind: str
) -> None:
    svc.script(
        reply(503, {"detail": "busy"}, headers=[("request-id", "req_a")]),
        reply(200, OK, headers=[("request-id", "req_b")]),
    )
    seen: list[Where] = []
    body_seen: list[bytes] = []

    def hook(event: qa.HookEvent) -> None:
        try:
            loop: Optional[int] = id(asyncio.get_running_loop())
        except RuntimeError:
            loop = None
        error = None if event.error is None else type(event.error).__name__
        after = event.stage == "after_attempt"
        assert (event.duration is not None) == after
        assert event.method == "POST"
        assert event.url == f"{svc.url}/v1/core"
        body_seen.append(event.request_body())
        seen.append(
            (
                event.stage,
                event.attempt,
                event.status,
                error,
                event.request_id,
                threading.current_thread() is caller,
                loop,
            )
        )

    caller = threading.current_thread()
    error, _diag = ask(kind, svc.url, hooks={"before_attempt": [hook], "after_attempt": [hook]})
    assert error is None
    assert [row[:5] for row in seen] == [
        ("before_attempt", 1, None, None, None),
        ("after_attempt", 1, 503, "ServerError", "req_a"),
        ("before_attempt", 2, None, None, None),
        ("after_attempt", 2, 200, None, "req_b"),
    ]
    assert all(row[5] for row in seen), "a hook ran on another thread"
    loops = {row[6] for row in seen}
    # Client: no loop; AsyncClient: on its one running loop, never an executor thread.
    assert loops == {None} if kind == "sync" else (len(loops) == 1 and None not in loops)
    assert all(b"some text" in body for body in body_seen)


@pytest.mark.parametrize("kind", KINDS)
def test_a_hook_that_raises_is_logged_at_warning_and_the_call_goes_on(
    svc: FakeService, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(event: qa.HookEvent) -> None:
        raise RuntimeError(f"hook failed holding {KEY}")

    calls: list[str] = []
    with caplog.at_level(logging.DEBUG, logger="qa_min"):
        error, diag = ask(
            kind,
            svc.url,
            api_key=KEY,
            hooks={"before_attempt": [boom, lambda e: calls.append(e.stage)], "after_attempt": [boom]},
        )
    assert error is None
    assert diag.status == 200
    assert calls == ["before_attempt"]  # the next hook still ran
    warnings = [r for r in caplog.records if r.name == "qa_min" and r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert all("RuntimeError" in r.getMessage() and "hook" in r.getMessage() for r in warnings)
    assert {"before_attempt", "after_attempt"} == {
        str(r.args[0]) for r in warnings if isinstance(r.args, tuple)
    }
    assert_no_key(caplog.records)


@pytest.mark.parametrize("kind", KINDS)
def test_a_slow_hook_counts_in_elapsed_not_in_the_attempts_duration(svc: FakeService, kind: str) -> None:
    pause = threading.Event()

    def slow(event: qa.HookEvent) -> None:
        pause.wait(0.2)  # never set: a hook that takes its time

    error, diag = ask(kind, svc.url, hooks={"before_attempt": [slow]})
    assert error is None
    assert diag.elapsed >= 0.2
    # docs: duration runs from sending the request; the hook ran before it.
    assert diag.history[0].duration < 0.19
    assert_timings_sane(diag)


def test_a_hook_may_call_the_client_again(svc: FakeService) -> None:
    inner: list[qa.Diagnostics] = []
    outcome: list[Outcome] = []
    done = threading.Event()
    clients: list[qa.Client] = []

    def reenter(event: qa.HookEvent) -> None:
        if not inner:  # once: the inner call's own hook must not recurse
            diag = qa.Diagnostics()
            inner.append(diag)
            clients[0].ask("inner text", Toxic, diagnostics=diag)

    def run() -> None:
        outcome.append(_sync_calls(clients[0], 1, {}))
        done.set()

    with qa.Client(**options(svc.url, hooks={"after_attempt": [reenter]})) as client:
        clients.append(client)
        # On a thread: a deadlock fails the test at the bound instead of hanging it.
        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        assert done.wait(BOUND), "a hook calling the client again hung the call"
        worker.join(BOUND)
    error, diag = outcome[0]
    assert error is None
    assert records(diag) == [(1, 200, None, None)]
    assert inner[0].status == 200
    assert inner[0].attempts == 1
    assert svc.request_count == 2


# -- logging -------------------------------------------------------------------------------------


def assert_no_key(found: list[logging.LogRecord]) -> None:
    for record in found:
        shown = [record.getMessage(), str(record.msg), repr(record.args)]
        assert not any(KEY[i : i + 8] in text for text in shown for i in range(len(KEY) - 7)), shown


def qa_records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("qa_min") and r.levelno == level]


@pytest.mark.parametrize("kind", KINDS)
def test_a_success_logs_one_debug_line_and_nothing_at_warning_even_when_the_key_is_echoed(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeService(api_key=KEY) as keyed:
        keyed.script(reply(200, {**OK, "echo": KEY}, headers=[("X-Echo", KEY), (f"X-{KEY}", "1")]))
        with caplog.at_level(logging.DEBUG, logger="qa_min"):
            error, diag = ask(kind, keyed.url, api_key=KEY)
    assert error is None
    debug = qa_records(caplog, logging.DEBUG)
    assert len(debug) == 1
    assert "POST" in debug[0].getMessage()
    assert "200" in debug[0].getMessage()
    assert "attempt 1" in debug[0].getMessage()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert_no_key(caplog.records)
    assert diag.headers is not None
    assert KEY not in repr(diag.headers.items())


@pytest.mark.parametrize("kind", KINDS)
def test_failures_log_each_attempt_at_debug_and_each_retry_at_info_never_the_key(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    echo = [("request-id", "req_log"), ("X-Echo", KEY)]
    with FakeService(api_key=KEY) as keyed:
        keyed.script(
            reply(503, {"detail": f"busy {KEY}"}, headers=echo),
            reply(429, {"detail": f"slow down {KEY}"}, headers=echo),
            reply(401, {"detail": f"bad key {KEY}"}, headers=echo),
        )
        with caplog.at_level(logging.DEBUG, logger="qa_min"):
            error, diag = ask(kind, keyed.url, api_key=KEY, rate_limit=None)
    assert isinstance(error, qa.Unauthorized)
    assert "request id req_log" in str(error)
    assert KEY[:8] not in str(error)
    assert diag.body is not None
    assert KEY[:8] not in diag.body
    debug = [r.getMessage() for r in qa_records(caplog, logging.DEBUG)]
    assert len(debug) == 3
    assert "503 ServerError" in debug[0], debug
    assert "429 RateLimited" in debug[1], debug
    assert "401 Unauthorized" in debug[2], debug
    info = [r.getMessage() for r in qa_records(caplog, logging.INFO)]
    assert len(info) == 2, info
    assert all(m.startswith("retrying") for m in info), info
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert_no_key(caplog.records)


@pytest.mark.parametrize("kind", KINDS)
def test_a_hook_event_is_read_only_as_its_docstring_says(svc: FakeService, kind: str) -> None:
    # Every hook of an attempt gets the same event: one must not change what the next sees.
    seen: list[Optional[int]] = []

    def meddle(event: qa.HookEvent) -> None:
        for name in ("status", "attempt", "url", "error", "new_name"):
            with pytest.raises(AttributeError, match=f"HookEvent is read-only; cannot set '{name}'"):
                setattr(event, name, 500)
        seen.append(event.status)

    error, _ = ask(kind, svc.url, hooks={"after_attempt": [meddle, lambda event: seen.append(event.status)]})
    assert error is None
    assert seen == [200, 200]


def _metrics(event: qa.HookEvent, token: str) -> None:
    raise RuntimeError("metrics backend down")


class _Unnameable:
    def __call__(self, event: qa.HookEvent) -> None:
        raise RuntimeError("down")

    def __repr__(self) -> str:
        raise ValueError("no name")


@pytest.mark.parametrize("kind", KINDS)
def test_a_raising_hook_is_named_in_the_log_without_the_key_it_holds(
    svc: FakeService, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    # A hook bound to the key (a partial) put it in the warning's message and args.
    hooks = {"after_attempt": [functools.partial(_metrics, token=KEY), _Unnameable()]}
    with caplog.at_level(logging.DEBUG, logger="qa_min"):
        error, _ = ask(kind, svc.url, api_key=KEY, hooks=hooks)
    assert error is None
    assert_no_key(caplog.records)
    warned = [record.getMessage() for record in qa_records(caplog, logging.WARNING)]
    assert len(warned) == 2, warned
    assert "functools.partial(<function _metrics" in warned[0], warned
    assert "[redacted]" in warned[0], warned
    assert "raised RuntimeError: metrics backend down" in warned[0], warned
    assert "the after_attempt hook <_Unnameable whose repr() raised> raised RuntimeError: down" in warned[1]

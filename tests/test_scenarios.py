"""Every behaviour through both clients: ``qa.Client`` and ``qa.AsyncClient`` on the same script.

SPEC §7b: the asyncio client has "the same arguments, per-call options, results, errors,
Diagnostics, hooks, MockTransport, rate limiter and retry budget as Client, behaving identically
on the same server script". Each ``Case`` below runs once through each client against the same
server (or the same ``MockTransport`` handler), and the two ``Outcome``s must be equal: the
result or the error (class, status, message), every ``Diagnostics`` field but the timings, the
history, the sleeps asked for between attempts, the hooks' events in order, the requests the
server saw, and the rate limiter's state afterwards. Each case also checks what it is about.
"""

from __future__ import annotations

import asyncio
import copy
import errno
import select
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

import pytest
from faultservers import OK_RESPONSE, Handler, RawServer, read_request, respond_sequence

import qa_min as qa
from qa_min.testing import (
    FakeService,
    MockTransport,
    RecordedRequest,
    Step,
    drop,
    hang,
    reply,
    reset,
    truncate,
)

BOUND = 10.0  # seconds: a generous bound on anything awaited here


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")
    quality = qa.Score(["poor", "fair", "good"])


class Toxic(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


@dataclass
class Case:
    name: str
    steps: tuple[Step, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    op: str = "ask"
    call: dict[str, Any] = field(default_factory=dict)
    during: Optional[str] = None  # "cancel" (the token, from a thread) or "close", once a request is in
    mock: bool = False  # served by a MockTransport handler instead of a FakeService


@dataclass
class Outcome:
    result: tuple[Any, ...]
    diagnostics: tuple[Any, ...]
    history: list[tuple[Any, ...]]
    sleeps: list[float]
    hooks: list[tuple[Any, ...]]
    requests: list[tuple[str, str]]
    rate_limit: Optional[tuple[Any, ...]]


def _result(value: object) -> tuple[Any, ...]:
    if isinstance(value, qa.QAError):
        return ("error", type(value).__name__, getattr(value, "status", None), str(value))
    if isinstance(value, qa.AskResponse):
        return ("ask", value.answers.toxic, value.answers.quality, dict(value.usage))
    if isinstance(value, qa.CoreResponse):
        return ("core", dict(value.answers), dict(value.usage))
    assert isinstance(value, qa.ModelList)
    return ("models", [m.name for m in value.models])


def _outcome(
    value: object,
    diagnostics: qa.Diagnostics,
    sleeps: list[float],
    hooks: list[tuple[Any, ...]],
    requests: Sequence[RecordedRequest],
    state: Optional[Any],
) -> Outcome:
    d = diagnostics
    headers = None if d.headers is None else [(k, v) for k, v in d.headers.items() if k.lower() != "date"]
    error = d.transport_error
    return Outcome(
        _result(value),
        (
            d.status,
            d.body,
            d.attempts,
            None if error is None else type(error).__name__,
            d.request_id,
            headers,
        ),
        [(a.number, a.status, a.error, round(a.delay, 3), a.request_id) for a in d.history],
        sleeps,
        hooks,
        [(r.method, r.path) for r in requests],
        None if state is None else (state.state, state.per_second, state.throttles),
    )


class Harness:
    """One case, run through a client of either kind against the same service."""

    def __init__(self, case: Case, svc: Optional[FakeService]) -> None:
        self.case = case
        self.svc = svc
        self.mock: Optional[MockTransport] = None

    def prepare(self) -> dict[str, Any]:
        """Script the service (or a fresh mock) for one run; the client options to use."""
        steps = list(self.case.steps)
        # A fresh copy for each run: a RetryBudget is spent by the run it serves.
        options: dict[str, Any] = {
            "random": lambda: 0.0,
            "trust_env": False,
            **copy.deepcopy(self.case.options),
        }
        if self.case.mock:

            def handler(request: RecordedRequest) -> Optional[Step]:
                return steps.pop(0) if steps else None

            self.mock = MockTransport(handler)
            options.update(base_url="http://mock.invalid/p", transport=self.mock)
        else:
            assert self.svc is not None
            self.svc.release()
            self.start = self.svc.request_count
            self.svc.script(*steps)  # each case scripts what one run consumes, no more
            options["base_url"] = self.svc.url
        return options

    def requests(self) -> list[RecordedRequest]:
        if self.mock is not None:
            return self.mock.requests
        assert self.svc is not None
        return self.svc.requests[self.start :]

    def arrived(self) -> bool:
        return bool(self.requests())

    def arguments(self) -> tuple[Any, ...]:
        if self.case.op == "ask":
            return ("Some text", Review)
        if self.case.op == "core":
            return (qa.Request(state="s", questions=[qa.NamedQuestion("q", qa.YesNo("a", "b"))]),)
        return ()


def _hooks(events: list[tuple[Any, ...]]) -> dict[str, list[Callable[[qa.HookEvent], None]]]:
    def record(event: qa.HookEvent) -> None:
        error = None if event.error is None else type(event.error).__name__
        events.append((event.stage, event.attempt, event.method, event.url, event.status, error))

    return {"before_attempt": [record], "after_attempt": [record]}


def _when_arrived(harness: Harness, action: Callable[[], object]) -> threading.Thread:
    def wait_then_act() -> None:
        deadline = time.monotonic() + BOUND
        while not harness.arrived() and time.monotonic() < deadline:
            time.sleep(0.002)
        action()

    thread = threading.Thread(target=wait_then_act)
    thread.start()
    return thread


def run_sync(harness: Harness) -> Outcome:
    sleeps: list[float] = []
    events: list[tuple[Any, ...]] = []
    options = harness.prepare()

    def sleep(seconds: float, wake: threading.Event) -> None:
        sleeps.append(round(seconds, 3))

    client = qa.Client(sleep=sleep, hooks=_hooks(events), **options)
    diagnostics, token = qa.Diagnostics(), qa.CancelToken()
    thread = None
    if harness.case.during is not None:
        thread = _when_arrived(harness, token.cancel if harness.case.during == "cancel" else client.close)
    value: object
    try:
        value = getattr(client, harness.case.op)(
            *harness.arguments(), diagnostics=diagnostics, cancel=token, **harness.case.call
        )
    except qa.QAError as exc:
        value = exc
    finally:
        if thread is not None:
            thread.join(BOUND)
        state = client.rate_limit
        client.close()
    return _outcome(value, diagnostics, sleeps, events, harness.requests(), state)


def run_async(harness: Harness) -> Outcome:
    sleeps: list[float] = []
    events: list[tuple[Any, ...]] = []
    options = harness.prepare()

    async def sleep(seconds: float) -> None:
        sleeps.append(round(seconds, 3))

    async def main() -> tuple[object, qa.Diagnostics, Any]:
        client = qa.AsyncClient(sleep=sleep, hooks=_hooks(events), **options)
        diagnostics, token = qa.Diagnostics(), qa.CancelToken()
        thread, closer = None, None
        if harness.case.during == "cancel":
            thread = _when_arrived(harness, token.cancel)
        elif harness.case.during == "close":

            async def close_when_arrived() -> None:
                while not harness.arrived():
                    await asyncio.sleep(0.002)
                await client.aclose()

            closer = asyncio.ensure_future(close_when_arrived())
        value: object
        try:
            value = await getattr(client, harness.case.op)(
                *harness.arguments(), diagnostics=diagnostics, cancel=token, **harness.case.call
            )
        except qa.QAError as exc:
            value = exc
        if thread is not None:
            thread.join(BOUND)
        if closer is not None:
            await asyncio.wait_for(closer, BOUND)
        state = client.rate_limit
        await client.aclose()
        return value, diagnostics, state

    value, diagnostics, state = asyncio.run(main())
    return _outcome(value, diagnostics, sleeps, events, harness.requests(), state)


NO_RETRY = {"retry": qa.RetryPolicy.none}
STATUSES = [400, 401, 403, 404, 408, 409, 422, 429, 500, 502, 503, 529, 302]

CASES = [
    Case("success"),
    Case("core", op="core", call={"model": "judge-2.1"}),
    Case("list_models", op="list_models"),
    *(
        Case(
            f"status {s}",
            (reply(s, {"detail": f"status {s}"}, headers=[("x-request-id", "req_9")]),)
            * (3 if s in (408, 429) or s >= 500 else 1),
        )
        for s in STATUSES
    ),
    Case("html error page", (reply(502, "<html><title>Bad gateway</title></html>"),), NO_RETRY),
    Case("retry-after then ok", (reply(429, {"detail": "slow"}, headers=[("Retry-After", "2")]),)),
    Case("retry-after-ms then ok", (reply(503, None, headers=[("retry-after-ms", "120")]),)),
    Case("x-should-retry false", (reply(500, {"detail": "no"}, headers=[("x-should-retry", "false")]),)),
    Case(
        "x-should-retry true on 400", (reply(400, {"detail": "yes"}, headers=[("x-should-retry", "true")]),)
    ),
    Case(
        "budget exhausted",
        (reply(500),) * 2,
        {"retry_budget": qa.RetryBudget(capacity=5, retry_cost=5)},
    ),
    Case("drop then ok", (drop(),)),
    Case("reset then ok", (reset(),)),
    Case("truncated then ok", (truncate(),)),
    Case("drops exhaust retries", (drop(),) * 3),
    Case(
        "no retry of connection errors", (drop(),), {"retry": qa.RetryPolicy(retry_connection_errors=False)}
    ),
    Case("timeout", (hang(),), call={"timeout": 0.15}),
    Case("cancel token", (hang(),), during="cancel"),
    Case("close in flight", (hang(),), during="close"),
    Case("oversized body", options={"max_response_bytes": 60}),
    Case("oversized error body", (reply(500, "x" * 500),), {"max_response_bytes": 60, **NO_RETRY}),
    Case("invalid JSON", (reply(200, "not json"),)),
    Case("answers of the wrong shape", (reply(200, {"answers": {"toxic": "maybe", "quality": 1}}),)),
    Case("rate limiter pause", (reply(429, None, headers=[("retry-after-ms", "5000")]),)),
    Case("rate limiter off", (reply(429, None, headers=[("retry-after-ms", "30")]),), {"rate_limit": None}),
    Case("mock success", mock=True),
    Case("mock statuses", (reply(503), reply(429, None, headers=[("Retry-After", "1")])), mock=True),
    Case("mock drop", (drop(), drop()), mock=True),
    Case("mock timeout", (hang(),), call={"timeout": 0.1}, mock=True),
    Case("mock cancel", (hang(),), during="cancel", mock=True),
    Case("mock close", (hang(),), during="close", mock=True),
    Case("mock oversized", options={"max_response_bytes": 60}, mock=True),
]


@pytest.fixture
def service() -> Any:
    with FakeService() as svc:
        yield svc


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_both_clients_behave_the_same(case: Case, service: FakeService) -> None:
    harness = Harness(case, None if case.mock else service)
    threaded = run_sync(harness)
    on_asyncio = run_async(harness)
    assert on_asyncio == threaded
    check_what_the_case_is_about(case, threaded)


def check_what_the_case_is_about(case: Case, outcome: Outcome) -> None:
    kind, *rest = outcome.result
    attempts = outcome.diagnostics[2]
    name = case.name
    if name in ("success", "mock success"):
        assert kind == "ask"
        assert attempts == 1
        assert [e[0] for e in outcome.hooks] == ["before_attempt", "after_attempt"]
    elif name.startswith("status "):
        status = int(name.split()[1])
        retried = status in (408, 429) or status >= 500
        assert rest[:2] == [qa._errors.status_error_class(status).__name__, status]
        assert attempts == (3 if retried else 1)
        assert "req_9" in rest[2]
        assert outcome.diagnostics[4] == "req_9"
    elif name.startswith("retry-after"):
        assert kind == "ask"
        assert outcome.sleeps == ([2.0] if "ms" not in name else [0.12])
    elif name == "x-should-retry false":
        assert attempts == 1
    elif name == "x-should-retry true on 400":
        assert (kind, attempts) == ("ask", 2)
    elif name == "budget exhausted":
        assert rest[0] == "ServerError"
        assert attempts == 2  # one retry paid for, then the bucket is empty
    elif name in ("drop then ok", "reset then ok", "truncated then ok"):
        assert (kind, attempts) == ("ask", 2)
        assert outcome.history[0][2] == "ConnectionFailed"
    elif name in ("timeout", "mock timeout"):
        assert rest[0] == "Canceled"
        assert "timeout" in rest[2]
    elif name in ("cancel token", "mock cancel"):
        assert rest[0] == "Canceled"
        assert "cancelled" in rest[2]
    elif name in ("close in flight", "mock close"):
        assert rest[0] in ("Canceled", "ClientClosed")
        assert "closed" in rest[2]
    elif name.startswith(("oversized body", "mock oversized")):
        assert rest[0] == "InvalidResponse"
        assert "limit" in rest[2]
    elif name == "rate limiter pause":
        # The sleeps are injected, so the retry goes at once; the 5 s pause is still on when the
        # state is read. (A 30 ms pause could end first on a loaded machine in one run only.)
        assert outcome.rate_limit is not None
        assert outcome.rate_limit[0] == "paused"
        assert outcome.rate_limit[2] == 1  # one throttle seen


def test_a_stale_keep_alive_connection_is_resent_once_by_both() -> None:
    def drop_it(conn: Any, stop: threading.Event) -> None:
        read_request(conn)  # a keep-alive connection the server closed as the request came

    def run(kind: str) -> tuple[int, int, Union[bool, int]]:
        with RawServer(respond_sequence(OK_RESPONSE, drop_it)) as server:
            diagnostics = qa.Diagnostics()
            if kind == "threaded":
                with qa.Client(base_url=server.url, trust_env=False) as client:
                    client.ask("s", Toxic)
                    client.ask("s", Toxic, diagnostics=diagnostics)
            else:

                async def main() -> None:
                    async with qa.AsyncClient(base_url=server.url, trust_env=False) as client:
                        await client.ask("s", Toxic)
                        await client.ask("s", Toxic, diagnostics=diagnostics)

                asyncio.run(main())
            return diagnostics.attempts, len(diagnostics.history), server.connections

    assert run("asyncio") == run("threaded") == (2, 2, 2)


def test_a_connection_closed_while_the_caller_was_frozen_is_replaced_without_an_attempt_by_both() -> None:
    # A Lambda handler keeps its client (and, on asyncio, its loop: run_until_complete per
    # invocation) between invocations; the server closes the idle connection while the process
    # is frozen, and the close is waiting on the socket when the next call checks it out.
    def close_when_told(go: threading.Event) -> Handler:
        def handler(conn: socket.socket, stop: threading.Event) -> None:
            if read_request(conn):
                conn.sendall(OK_RESPONSE)
                go.wait(BOUND)

        return handler

    def pooled_socket(client: Union[qa.Client, qa.AsyncClient]) -> Any:
        pool: Any = client._transport.pool  # type: ignore[union-attr]
        [conn] = [c for stack in pool._idle.values() for c in stack]
        return conn.raw.get_extra_info("socket") if isinstance(client, qa.AsyncClient) else conn.sock

    def run(kind: str) -> tuple[Any, ...]:
        go = threading.Event()
        with RawServer(close_when_told(go)) as server:
            diagnostics = qa.Diagnostics()
            options: dict[str, Any] = {"base_url": server.url, "trust_env": False}
            options["retry"] = qa.RetryPolicy.none  # a failure on the way would show, not be retried
            if kind == "threaded":
                with qa.Client(**options) as client:
                    client.ask("s", Toxic)
                    go.set()
                    assert select.select([pooled_socket(client)], [], [], BOUND)[0]  # the close is in
                    answer = client.ask("s", Toxic, diagnostics=diagnostics)
            else:
                loop = asyncio.new_event_loop()
                try:
                    aclient = qa.AsyncClient(**options)
                    loop.run_until_complete(aclient.ask("s", Toxic))
                    go.set()  # the loop is not running: nothing reads the socket
                    assert select.select([pooled_socket(aclient)], [], [], BOUND)[0]
                    answer = loop.run_until_complete(aclient.ask("s", Toxic, diagnostics=diagnostics))
                    loop.run_until_complete(aclient.aclose())
                finally:
                    loop.close()
            history = [(a.status, a.error) for a in diagnostics.history]
            return answer.answers.toxic, diagnostics.attempts, history, server.connections

    # One attempt each, as the server counted: the closed connection was never written to.
    assert run("asyncio") == run("threaded") == (True, 1, [(200, None)], 2)


@pytest.mark.parametrize("via", ["direct", "proxy"])
def test_a_refused_connection_is_worded_the_same_by_both(via: str) -> None:
    closed = socket.socket()  # bound, never listening: a connect to it is refused
    closed.bind(("127.0.0.1", 0))
    refused = f"http://127.0.0.1:{closed.getsockname()[1]}"
    options: dict[str, Any] = {"trust_env": False, "retry": qa.RetryPolicy.none}
    options.update(
        {"base_url": refused} if via == "direct" else {"base_url": "http://a.invalid", "proxy": refused}
    )

    def run(kind: str) -> tuple[Any, ...]:
        diagnostics = qa.Diagnostics()
        try:
            if kind == "threaded":
                with qa.Client(**options) as client:
                    client.list_models(diagnostics=diagnostics)
            else:

                async def main() -> None:
                    async with qa.AsyncClient(**options) as client:
                        await client.list_models(diagnostics=diagnostics)

                asyncio.run(main())
        except qa.ConnectionFailed as exc:
            cause = diagnostics.transport_error
            history = [(a.status, a.error) for a in diagnostics.history]
            return (
                str(exc),
                type(cause).__name__,
                getattr(cause, "errno", None),
                diagnostics.attempts,
                history,
            )
        raise AssertionError("no ConnectionFailed")

    try:
        threaded, on_asyncio = run("threaded"), run("asyncio")
    finally:
        closed.close()
    assert on_asyncio == threaded
    assert "ConnectionRefusedError: [Errno" in threaded[0]
    assert "Connection refused" in threaded[0]
    assert threaded[1:] == ("ConnectionRefusedError", errno.ECONNREFUSED, 1, [(None, "ConnectionFailed")])


def test_a_proxy_refusing_a_plain_request_is_a_proxy_error_in_both() -> None:
    refusal = (
        b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n"
        b"Content-Length: 4\r\n\r\ndeny"
    )

    def run(kind: str, proxy: RawServer) -> tuple[Any, ...]:
        options: dict[str, Any] = {"base_url": "http://127.0.0.1:9/p", "proxy": proxy.url, "trust_env": False}
        try:
            if kind == "threaded":
                with qa.Client(**options) as client:
                    client.list_models()
            else:

                async def main() -> None:
                    async with qa.AsyncClient(**options) as client:
                        await client.list_models()

                asyncio.run(main())
        except qa.ProxyError as exc:
            d = exc.diagnostics
            return type(exc).__name__, exc.status, str(exc), d.status, d.body, d.attempts
        raise AssertionError("no ProxyError")

    with RawServer(respond_sequence(refusal, refusal)) as proxy:
        threaded, on_asyncio = run("threaded", proxy), run("asyncio", proxy)
    assert on_asyncio == threaded
    assert threaded[1] == 407
    assert threaded[5] == 1

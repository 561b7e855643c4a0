"""An outside audit of ``qa_min.testing``, as a library that embeds qa_min would test with it.

What docs/testing.md and the module's docstrings promise, checked through both clients:
every kind of step reads the same over ``FakeService`` and ``MockTransport``, a script is
consumed in order, what the fake records, its counters under concurrency, its lifecycle
(threads and file descriptors counted), two fakes at once, a fake reused after a failing test,
and ``python -m qa_min fake`` as a process. What test_testing.py and test_mock_transport.py
already pin (each option's limits, each step's bytes on the wire) is not repeated here.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import pytest
from support import BOUND

import qa_min as qa
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

ROOT = Path(__file__).resolve().parent.parent
MOCK_URL = "http://mock.test/api"
YES_NO = {"true": "insults someone", "false": "insults no one"}
REQUEST = qa.Request(
    state="Some text", questions=[qa.NamedQuestion("toxic", qa.YesNo(YES_NO["true"], YES_NO["false"]))]
)


async def no_async_sleep(seconds: float) -> None:
    """The asyncio client's sleep seam: retries without waiting."""


def no_sleep(seconds: float, wake: threading.Event) -> None:
    """The threaded client's sleep seam: retries without waiting."""


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


linux_fds = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")


class Script:
    """A MockTransport handler that plays steps in order, then the normal answer (None)."""

    def __init__(self, *steps: Optional[Step]) -> None:
        self.steps = list(steps)
        self.threads: list[threading.Thread] = []

    def __call__(self, request: RecordedRequest) -> Optional[Step]:
        self.threads.append(threading.current_thread())
        return self.steps.pop(0) if self.steps else None


def call(flavour: str, options: dict[str, Any], diagnostics: qa.Diagnostics, **per_call: Any) -> Any:
    """One ``list_models`` by the threaded or the asyncio client; the result or the QAError."""
    if flavour == "sync":
        try:
            with qa.Client(trust_env=False, sleep=no_sleep, **options) as client:
                return client.list_models(diagnostics=diagnostics, **per_call)
        except qa.QAError as exc:
            return exc

    async def main() -> Any:
        async with qa.AsyncClient(trust_env=False, sleep=no_async_sleep, **options) as client:
            return await client.list_models(diagnostics=diagnostics, **per_call)

    try:
        return asyncio.run(main())
    except qa.QAError as exc:
        return exc


def observed(outcome: Any, diag: qa.Diagnostics, url: str) -> tuple[object, ...]:
    """Everything a test can see of a call, the socket's own Server and Date fields aside."""
    error = outcome if isinstance(outcome, qa.QAError) else None
    headers = None
    if diag.headers is not None:
        headers = [(n, v) for n, v in diag.headers.items() if n.lower() not in ("server", "date")]
    return (
        type(error).__name__ if error else None,
        str(error).replace(url, MOCK_URL) if error else None,
        None if error else [m.name for m in outcome],
        diag.status,
        diag.attempts,
        diag.body,
        diag.request_id,
        headers,
        [(a.number, a.status, a.error, a.request_id) for a in diag.history],
        type(diag.transport_error).__name__ if diag.transport_error else None,
    )


def run_step(step: Optional[Step], transport: str, flavour: str, **per_call: Any) -> tuple[object, ...]:
    diag = qa.Diagnostics()
    options: dict[str, Any] = {"retry": qa.RetryPolicy.none}
    with FakeService(prefix="/api") as svc:
        if transport == "socket":
            if step is not None:
                svc.script(step)
            options["base_url"] = svc.url
        else:
            options.update(base_url=MOCK_URL, transport=MockTransport(Script(step)))
        outcome = call(flavour, options, diag, **per_call)
    return observed(outcome, diag, svc.url)


STEPS: dict[str, Callable[[], Optional[Step]]] = {
    "reply-200": lambda: reply(
        200, {"models": [{"name": "m-1.0", "family": "m"}]}, headers=[("request-id", "r1"), ("X-Extra", "v")]
    ),
    "reply-429": lambda: reply(429, {"detail": "slow down"}, headers=[("retry-after-ms", "5")]),
    "reply-503-text": lambda: reply(503, "busy text"),
    "reply-200-not-json": lambda: reply(200, "not json"),
    "drop": drop,
    "reset": reset,
    "truncate": truncate,
    "delay": lambda: delay(0.001),
    "none": lambda: None,
}
EXPECTED = {
    "reply-200": (None, 200, ["m-1.0"], [(1, 200, None, "r1")]),
    "reply-429": ("RateLimited", 429, None, [(1, 429, "RateLimited", None)]),
    "reply-503-text": ("ServerError", 503, None, [(1, 503, "ServerError", None)]),
    # The attempt got its 2xx; the body is what the call refused.
    "reply-200-not-json": ("InvalidResponse", 200, None, [(1, 200, None, None)]),
    "drop": ("ConnectionFailed", None, None, [(1, None, "ConnectionFailed", None)]),
    "reset": ("ConnectionFailed", None, None, [(1, None, "ConnectionFailed", None)]),
    "truncate": ("ConnectionFailed", 200, None, [(1, 200, "ConnectionFailed", None)]),
    "delay": (
        None,
        200,
        ["judge-latest", "judge-mini-latest", "judge-2.1", "judge-mini-1.3"],
        [(1, 200, None, None)],
    ),
    "none": (
        None,
        200,
        ["judge-latest", "judge-mini-latest", "judge-2.1", "judge-mini-1.3"],
        [(1, 200, None, None)],
    ),
}


@pytest.mark.parametrize("kind", list(STEPS))
def test_each_step_reads_the_same_to_both_clients_over_a_socket_and_the_mock(kind: str) -> None:
    seen = {
        (transport, flavour): run_step(STEPS[kind](), transport, flavour)
        for transport in ("socket", "mock")
        for flavour in ("sync", "async")
    }
    first = seen["socket", "sync"]
    for where, what in seen.items():
        assert what == first, f"{where} differs from a threaded client over a socket"
    error, status, names, history = EXPECTED[kind]
    assert (first[0], first[3], first[2]) == (error, status, names)
    assert first[8] == history


def test_a_replys_headers_reach_diagnostics_as_given_in_order_and_spelling() -> None:
    headers = [("request-id", "r1"), ("X-Extra", "v")]
    in_process = run_step(reply(200, {"models": []}, headers=headers), "mock", "async")[7]
    assert in_process == [*headers, ("Content-Type", "application/json"), ("Content-Length", "14")]
    assert run_step(reply(200, {"models": []}, headers=headers), "socket", "sync")[7] == in_process


@pytest.mark.parametrize("kind", ["delay", "hang"])
def test_a_slow_step_ends_at_the_calls_timeout_alike_everywhere(kind: str) -> None:
    seen = {
        (transport, flavour): run_step(
            delay(30) if kind == "delay" else hang(), transport, flavour, timeout=0.02
        )
        for transport in ("socket", "mock")
        for flavour in ("sync", "async")
    }
    for what in seen.values():
        assert what[0] == "Canceled"
        assert "timeout of 0.02 s expired" in str(what[1])
        assert what[8] == [(1, None, "Canceled", None)]


def test_a_script_is_consumed_in_order_by_a_client_then_an_async_client() -> None:
    # Fresh keep-alive connections each time, so no drop() met on a reused one is re-sent.
    steps = (
        reply(503, {"detail": "a"}, headers=[("Connection", "close")]),
        drop(),
        reply(429, {"detail": "c"}),
    )
    retry = qa.RetryPolicy(max_retries=3)
    histories = []
    with FakeService() as svc:
        for flavour in ("sync", "async"):
            svc.script(*steps)
            diag = qa.Diagnostics()
            models = call(flavour, {"base_url": svc.url, "retry": retry}, diag)
            assert not isinstance(models, qa.QAError), models
            histories.append([(a.status, a.error) for a in diag.history])
        assert svc.request_count == 8
        assert [r.path for r in svc.requests] == ["/v1/models"] * 8
    for flavour in ("sync", "async"):
        diag = qa.Diagnostics()
        mocked = MockTransport(Script(*steps))
        call(flavour, {"base_url": MOCK_URL, "transport": mocked, "retry": retry}, diag)
        histories.append([(a.status, a.error) for a in diag.history])
        assert len(mocked.requests) == 4
    expected = [(503, "ServerError"), (None, "ConnectionFailed"), (429, "RateLimited"), (200, None)]
    assert histories == [expected] * 4


# --- what the handler and the fake record -------------------------------------------------


def core_once(flavour: str, options: dict[str, Any]) -> None:
    if flavour == "sync":
        with qa.Client(trust_env=False, **options) as client:
            client.core(REQUEST, model="judge-2.1")
        return

    async def main() -> None:
        async with qa.AsyncClient(trust_env=False, **options) as client:
            await client.core(REQUEST, model="judge-2.1")

    asyncio.run(main())


def test_the_mock_handler_and_the_fake_record_the_same_request_from_both_clients() -> None:
    recorded: list[RecordedRequest] = []
    extra = [("X-Team", "a b")]
    for flavour in ("sync", "async"):
        with FakeService(prefix="/api", api_key="sk-k") as svc:
            options: dict[str, Any] = {"base_url": svc.url, "api_key": "sk-k", "extra_headers": extra}
            core_once(flavour, options)
            recorded.extend(svc.requests)
        mock = MockTransport(api_key="sk-k")
        core_once(flavour, {**options, "base_url": MOCK_URL, "transport": mock})
        recorded.extend(mock.requests)
    assert len(recorded) == 4
    for request in recorded:
        assert (request.method, request.path) == ("POST", "/api/v1/core")
        assert request.json() == {
            "state": "Some text",
            "questions": {"toxic": {"criteria": YES_NO}},
            "model": "judge-2.1",
        }
        assert request.headers["AUTHORIZATION"] == "Bearer sk-k"
        assert request.headers["x-team"] == "a b"
        assert request.headers["Content-Length"] == str(len(request.body))
    first = {k: v for k, v in recorded[0].headers.items() if k != "host"}
    for request in recorded[1:]:
        assert {k: v for k, v in request.headers.items() if k != "host"} == first
        assert request.body == recorded[0].body


def test_the_handler_runs_on_the_calling_thread_and_on_the_loops_thread() -> None:
    script = Script()
    with qa.Client(base_url=MOCK_URL, trust_env=False, transport=MockTransport(script)) as client:
        client.list_models()
        worker = client.submit(client.list_models)
        worker.result(BOUND)
    assert script.threads[0] is threading.current_thread()
    assert script.threads[1] is not threading.current_thread()  # the submitted call's worker

    async def main() -> threading.Thread:
        async with qa.AsyncClient(
            base_url=MOCK_URL, trust_env=False, transport=MockTransport(script)
        ) as aclient:
            await aclient.list_models()
        return threading.current_thread()

    loop_thread = asyncio.run(main())
    assert script.threads[2] is loop_thread


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_qa_error_the_handler_raises_reaches_the_caller_unchanged_and_not_retried(flavour: str) -> None:
    raised = qa.InvalidResponse("the handler refused this request")

    def handler(request: RecordedRequest) -> Optional[Step]:
        raise raised

    diag = qa.Diagnostics()
    mock = MockTransport(handler)
    outcome = call(
        flavour, {"base_url": MOCK_URL, "transport": mock, "retry": qa.RetryPolicy(max_retries=3)}, diag
    )
    assert outcome is raised
    assert str(outcome) == "the handler refused this request"
    assert [(a.status, a.error) for a in diag.history] == [(None, "InvalidResponse")]
    assert len(mock.requests) == 1


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_any_other_exception_the_handler_raises_reaches_the_caller_unchanged(flavour: str) -> None:
    raised = LookupError("the embedding library's own bug")

    def handler(request: RecordedRequest) -> Optional[Step]:
        raise raised

    options: dict[str, Any] = {"base_url": MOCK_URL, "transport": MockTransport(handler)}
    with pytest.raises(LookupError) as caught:
        call(flavour, options, qa.Diagnostics())
    assert caught.value is raised


def test_requests_of_a_rule_refused_by_the_limit_are_recorded_before_any_rule() -> None:
    # 429 comes before the key check, and every answer of the rules announces the bucket, while
    # a scripted reply is played as given and not counted as the limit's.
    with FakeService(rate_limit=(0.001, 2), api_key="sk-k", announce="openai") as svc:
        conn = http.client.HTTPConnection(*address(svc), timeout=BOUND)
        seen = []
        svc_script_at = 4
        for number, (path, key) in enumerate(
            [
                ("/v1/models", None),
                ("/nowhere", "sk-k"),
                ("/v1/models", None),
                ("/v1/models", "sk-k"),
                ("/v1/models", "sk-k"),
            ]
        ):
            if number == svc_script_at:
                svc.script(reply(429, {"detail": "scripted"}))
            conn.request("GET", path, headers={"Authorization": f"Bearer {key}"} if key else {})
            response = conn.getresponse()
            body = json.loads(response.read())
            seen.append(
                (response.status, body["detail"], response.getheader("x-ratelimit-remaining-requests"))
            )
        conn.close()
        assert seen == [
            (401, "missing or invalid API key", "1"),
            (404, "no route for /nowhere", "0"),
            (429, "rate limit exceeded", "0"),
            (429, "rate limit exceeded", "0"),
            (429, "scripted", None),
        ]
        assert (svc.request_count, svc.rate_limited_count) == (5, 2)
        assert [r.headers.get("authorization") for r in svc.requests] == [None, "Bearer sk-k", None] + [
            "Bearer sk-k"
        ] * 2


def address(svc: FakeService) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(svc.url)
    assert parts.hostname is not None
    assert parts.port is not None
    return parts.hostname, parts.port


# --- counters under concurrency -----------------------------------------------------------


def test_counters_are_exact_with_8_threads_making_200_calls() -> None:
    # A bucket of 100 refilling one token in 1,000 s: exactly 100 answers and 100 refusals.
    outcomes: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(8)
    with FakeService(rate_limit=(0.001, 100), retry_after="ms") as svc:
        client = qa.Client(base_url=svc.url, trust_env=False, retry=qa.RetryPolicy.none, rate_limit=None)

        def work() -> None:
            start.wait(BOUND)
            for _ in range(25):
                try:
                    client.list_models()
                    outcome = "ok"
                except qa.RateLimited as exc:
                    outcome = "429" if exc.status == 429 and "rate limit exceeded" in str(exc) else repr(exc)
                with lock:
                    outcomes.append(outcome)

        with client:
            threads = [threading.Thread(target=work) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(BOUND * 4)
        assert sorted(set(outcomes)) == ["429", "ok"]
        assert (outcomes.count("ok"), outcomes.count("429")) == (100, 100)
        assert (svc.request_count, svc.rate_limited_count, len(svc.requests)) == (200, 100, 200)
        assert 1 <= svc.connections <= 8  # one client's pool, one connection per thread at most


def test_counters_are_exact_with_60_concurrent_asyncio_calls() -> None:
    async def main(url: str) -> list[object]:
        async with qa.AsyncClient(
            base_url=url, trust_env=False, retry=qa.RetryPolicy.none, rate_limit=None
        ) as c:
            return await asyncio.gather(*(c.list_models() for _ in range(60)), return_exceptions=True)

    with FakeService(rate_limit=(0.001, 20), retry_after="none") as svc:
        results = asyncio.run(main(svc.url))
        refused = [r for r in results if isinstance(r, qa.RateLimited) and "rate limit exceeded" in str(r)]
        assert len(refused) == 40
        assert sum(isinstance(r, qa.ModelList) for r in results) == 20
        assert (svc.request_count, svc.rate_limited_count) == (60, 40)


# --- lifecycle -----------------------------------------------------------------------------


@linux_fds
def test_close_leaves_no_thread_and_no_socket_whatever_was_in_flight() -> None:
    threads, fds = threading.active_count(), open_fds()
    svc = FakeService().start()
    idle = http.client.HTTPConnection(*address(svc), timeout=BOUND)
    idle.request("GET", "/v1/models")
    assert idle.getresponse().read()
    held = [http.client.HTTPConnection(*address(svc), timeout=BOUND) for _ in range(2)]
    svc.script(hang(), delay(3600))
    for conn in held:
        conn.request("GET", "/v1/models")
    assert svc.wait_for_requests(3)
    assert threading.active_count() == threads + 4  # accept loop, three connections
    svc.close()
    assert threading.active_count() == threads
    for conn in (idle, *held):
        conn.close()
    assert open_fds() == fds
    assert svc.url.startswith("http://127.0.0.1:")  # still readable after close


@linux_fds
def test_a_with_block_left_by_an_exception_closes_everything() -> None:
    def failing_test() -> None:
        with FakeService() as svc:
            with qa.Client(base_url=svc.url, trust_env=False) as client:
                client.list_models()
            svc.script(hang())
            raise AssertionError("the test failed while a step was queued")

    threads, fds = threading.active_count(), open_fds()
    with pytest.raises(AssertionError, match="the test failed"):
        failing_test()
    assert threading.active_count() == threads
    assert open_fds() == fds


@linux_fds
def test_a_mock_transport_opens_no_socket_and_starts_no_thread() -> None:
    threads, fds = threading.active_count(), open_fds()
    mock = MockTransport(Script(reply(503, "busy"), drop()))
    with qa.Client(base_url=MOCK_URL, trust_env=False, transport=mock, sleep=no_sleep) as client:
        assert len(client.list_models()) == 4
        assert (threading.active_count(), open_fds()) == (threads, fds)
    assert len(mock.requests) == 3


def test_two_fake_services_at_once_are_independent() -> None:
    with (
        FakeService(api_key="sk-one", rate_limit=(0.001, 1)) as one,
        FakeService(models=["own-1.0"]) as two,
    ):
        assert one.url != two.url
        one.script(reply(503, "one's step"))
        one.set_answers({"toxic": "one's answer"})
        with (
            qa.Client(
                base_url=one.url,
                api_key="sk-one",
                trust_env=False,
                retry=qa.RetryPolicy.none,
                rate_limit=None,
            ) as first,
            qa.Client(
                base_url=two.url, trust_env=False, retry=qa.RetryPolicy.none, rate_limit=None
            ) as second,
        ):
            assert [m.name for m in second.list_models()] == ["own-1.0"]  # not one's scripted 503
            answer = second.core(REQUEST, model="own-1.0").answers["toxic"]
            assert answer == expected_answer("own-1.0", "Some text", "toxic", YES_NO)  # not one's
            for _ in range(3):
                second.list_models()  # two has no limit, and one's bucket is untouched
            with pytest.raises(qa.ServerError, match="one's step"):
                first.list_models()
            with pytest.raises(qa.InvalidResponse, match="one's answer"):
                first.core(REQUEST)  # the one token: the overridden answer does not fit
            with pytest.raises(qa.RateLimited):
                first.list_models()
        assert (one.request_count, one.rate_limited_count, one.connections) == (3, 1, 1)
        assert (two.request_count, two.rate_limited_count, two.connections) == (5, 0, 1)
        assert all("authorization" not in r.headers for r in two.requests)


def test_the_same_fake_serves_on_after_a_test_that_failed_in_it() -> None:
    # A module-scoped fake: one test's call timed out against a hang and the test failed with a
    # step still queued. The next test finds the fake serving, the queued step played first.
    with FakeService() as svc:
        with qa.Client(base_url=svc.url, trust_env=False, retry=qa.RetryPolicy.none) as client:
            svc.script(hang(), reply(418, "left over"))
            svc.set_answers({"toxic": "broken"})
            with pytest.raises(qa.Canceled, match="timeout"):
                client.list_models(timeout=0.02)
        held = svc.connections
        svc.release()
        svc.set_answers({})
        with qa.Client(base_url=svc.url, trust_env=False, retry=qa.RetryPolicy.none) as client:
            with pytest.raises(qa.UnexpectedStatus, match=r"HTTP 418 .*left over"):
                client.list_models()
            answer = client.core(REQUEST).answers["toxic"]
        assert answer == expected_answer("judge-latest", "Some text", "toxic", YES_NO)
        assert svc.request_count == 3
        assert svc.connections == held + 1


# --- the command line ----------------------------------------------------------------------


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_python_m_qa_min_fake_serves_its_rate_limit_at_the_printed_url_and_ends_on_sigint() -> None:
    # SIGINT reset first: a shell that started the run in the background may have ignored it,
    # and Python keeps an ignored SIGINT ignored (a terminal's Ctrl-C is what this plays).
    code = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv[0] = 'qa_min'; runpy.run_module('qa_min', run_name='__main__')"
    )
    argv = ["--json", "fake", "--port", "0", "--rate-limit", "0.001", "2", "--retry-after", "both"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        assert proc.stdout is not None
        url = json.loads(proc.stdout.readline())["url"]
        statuses = []
        with qa.Client(base_url=url, trust_env=False, retry=qa.RetryPolicy.none, rate_limit=None) as client:
            for _ in range(3):
                diag = qa.Diagnostics()
                try:
                    client.list_models(diagnostics=diag)
                except qa.RateLimited:
                    pass
                assert diag.headers is not None
                statuses.append((diag.status, diag.headers.get("Retry-After") is not None))
            proc.send_signal(signal.SIGINT)  # with the client's connection still open, idle
            out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert statuses == [(200, False), (200, False), (429, True)]
    assert (proc.returncode, out, err) == (130, "", "interrupted\n")  # command-line.md: Ctrl-C is 130


@pytest.mark.parametrize("value", ["a ", "a\t", "a \t"])
def test_the_fake_and_the_mock_record_a_header_value_alike(value: str) -> None:
    # MockTransport hands a value over without the SP/HTAB around it (RFC 9110 section 5.5, as a
    # server reads it); FakeService's record kept the trailing whitespace the client sent.
    with FakeService() as svc:
        with qa.Client(base_url=svc.url, trust_env=False, extra_headers=[("X-Team", value)]) as client:
            client.list_models()
        over_socket = svc.requests[0].headers["x-team"]
    mock = MockTransport()
    with qa.Client(
        base_url=MOCK_URL, trust_env=False, transport=mock, extra_headers=[("X-Team", value)]
    ) as c:
        c.list_models()
    assert mock.requests[0].headers["x-team"] == "a"
    assert over_socket == "a"


def test_an_empty_api_key_is_refused_as_the_client_refuses_it() -> None:
    # FakeService(api_key="") started a service no qa_min client could authenticate to: the
    # client refuses api_key="" and sends no key, which gets 401 "missing or invalid API key".
    with pytest.raises(qa.InvalidOption, match="api_key must be a non-empty string"):
        qa.Client(base_url="http://x.test", api_key="")
    with pytest.raises(ValueError, match="api_key must be a non-empty string or None"):
        FakeService(api_key="")
    with pytest.raises(ValueError, match="api_key must be a non-empty string or None"):
        MockTransport(api_key="")
    FakeService(api_key="k").close()
    MockTransport(api_key="k")

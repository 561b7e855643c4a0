"""An outside audit of ``qa.AsyncClient`` (SPEC §7b, docs/asyncio.md), aimed at what the other
asyncio tests leave out.

  cancelling the awaiting task while connecting, in the TLS handshake, while waiting for the
  head and while reading the body: CancelledError, the socket closed, nothing pooled or leaked
      test_cancelling_the_task_at_each_stage_closes_the_socket
  a timeout= in each of those stages: the same Canceled and Diagnostics as Client's
      test_a_timeout_at_each_stage_is_the_same_in_both_clients
  faults only raw sockets make (garbage, a close before the status, a cut body, an early 401):
  the same error and Diagnostics as Client's
      test_raw_faults_are_the_same_in_both_clients
  a name that does not resolve, one whose every address refuses, and a server resetting or
  closing the TLS handshake: as Client words them
      test_a_name_that_does_not_resolve_is_worded_the_same_by_both,
      test_a_dual_stack_name_refused_on_every_address_is_worded_the_same_by_both,
      test_a_server_ending_the_tls_handshake_is_the_same_in_both
  name resolution on the loop's executor: a slow resolver blocks no other task, and a call
  stuck in it is cancelled at once
      test_a_slow_resolver_blocks_no_other_task, test_a_call_stuck_resolving_is_cancelled_at_once
  asyncio.timeout and asyncio.wait_for around a call, with and without the call's own timeout
      test_asyncio_timeout_around_a_call_closes_its_connection,
      test_wait_for_and_the_calls_timeout_each_win_when_first
  aclose() with calls in every stage at once; after aclose every operation raises ClientClosed
      test_aclose_ends_calls_in_every_stage_and_leaks_nothing,
      test_every_operation_after_aclose_raises_client_closed
  a hook or a MockTransport handler that raises: as in Client
      test_a_hook_that_raises_is_logged_and_the_call_goes_on_in_both,
      test_a_hook_returning_a_coroutine_is_closed_and_logged_in_both,
      test_a_hook_s_other_awaitable_is_named_and_a_plain_value_is_not,
      test_a_mock_handler_that_raises_is_the_same_in_both_clients
  a used client pickles as its configuration and the copy runs on another loop; a call from
  another loop while the client's own is stopped but open names it so
      test_a_used_client_pickles_and_its_copy_runs_on_another_loop,
      test_wrong_loop_error_tells_a_stopped_loop_from_a_running_one
  1,000 concurrent calls against FakeService, and keep-alive connections the server closes
  between rounds of concurrent calls
      test_a_thousand_concurrent_calls_are_all_answered,
      test_connections_the_server_closed_between_rounds_are_replaced
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import os
import pickle
import socket
import struct
import threading
import time
import warnings
from collections.abc import Awaitable, Generator
from typing import Any, Callable, Optional

import pytest
from faultservers import (
    OK_RESPONSE,
    Handler,
    RawServer,
    answer_early,
    answer_then_reset,
    close_before_status,
    garbage_status_line,
    never_accept,
    ok_response,
    read_request,
    respond_sequence,
    truncated_body,
)
from support import open_sockets, until_true

import qa_min as qa
from qa_min.testing import FakeService, MockTransport, RecordedRequest, Step, expected_answer

BOUND = 5.0  # seconds: bounds waits for what happens at once, so a bug fails instead of hanging
PROMPT = 1.0  # seconds within which a cancelled call must have ended


class Toxic(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts fds in /proc")


async def settled(count: Callable[[], int], target: int) -> int:
    """``count()`` once it is ``target`` (bounded polling: sockets close on a later loop turn and
    the server's thread closes its side when its handler returns), or its last value."""
    deadline = time.monotonic() + BOUND
    value = count()
    while value != target and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
        value = count()
    return value


class Silent:
    """A handler that accepts, reads whatever comes (a request, a TLS hello) and never answers,
    or sends ``head`` first; ``accepted`` once the connection is in (after ``head`` is sent),
    ``heard`` once bytes came after that, ``gone`` once the client closed it."""

    def __init__(self, head: bytes = b"", after_request: bool = False) -> None:
        self.head = head
        self.after_request = after_request
        self.accepted = threading.Event()
        self.heard = threading.Event()  # bytes came after the request, if any was awaited
        self.gone = threading.Event()

    def __call__(self, conn: socket.socket, stop: threading.Event) -> None:
        if self.after_request and not read_request(conn):
            return
        if self.head:
            conn.sendall(self.head)
        self.accepted.set()
        conn.settimeout(0.05)
        while not stop.is_set():
            try:
                if not conn.recv(4096):
                    break
                self.heard.set()
            except socket.timeout:
                continue
            except OSError:
                break
        self.gone.set()


async def until(event: threading.Event) -> bool:
    """Wait for a thread's event without blocking the loop (bounded polling)."""
    return await until_true(event.is_set)


def has_head(client: qa.AsyncClient) -> bool:
    """One of the client's busy connections has read its response's head."""
    pool = client._pool
    return pool is not None and any(conn.head is not None for conn in pool._busy)


def pool_counts(client: qa.AsyncClient) -> tuple[int, int]:
    pool = client._pool
    assert pool is not None
    return pool.busy_count(), pool.idle_count()


def shape(error: BaseException, diagnostics: qa.Diagnostics, url: str = "") -> tuple[Any, ...]:
    """What both clients must agree on: the error and the Diagnostics, timings aside (the URL,
    which differs from one server to the next, as "URL")."""
    history = [(a.number, a.status, a.error) for a in diagnostics.history]
    transport = diagnostics.transport_error
    return (
        type(error).__name__,
        str(error).replace(url, "URL") if url else str(error),
        diagnostics.status,
        diagnostics.attempts,
        history,
        None if transport is None else type(transport).__name__,
    )


def sync_outcome(url: str, **call: Any) -> tuple[Any, ...]:
    diagnostics = qa.Diagnostics()
    with qa.Client(base_url=url, trust_env=False, retry=qa.RetryPolicy.none) as client:
        with pytest.raises(qa.QAError) as caught:
            client.ask("s", Toxic, diagnostics=diagnostics, **call)
        idle = client._transport.pool.idle_count()
    return (*shape(caught.value, diagnostics, url), idle)


def async_outcome(url: str, **call: Any) -> tuple[Any, ...]:
    async def main() -> tuple[Any, ...]:
        diagnostics = qa.Diagnostics()
        async with qa.AsyncClient(base_url=url, trust_env=False, retry=qa.RetryPolicy.none) as client:
            with pytest.raises(qa.QAError) as caught:
                await client.ask("s", Toxic, diagnostics=diagnostics, **call)
            busy, idle = pool_counts(client)
            assert busy == 0
        return (*shape(caught.value, diagnostics, url), idle)

    return asyncio.run(main())


# -- cancellation and timeouts at every stage ----------------------------------------------------

STAGES = ["connecting", "tls handshake", "waiting for the head", "reading the body"]
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"


def stage_server(stage: str) -> tuple[Any, str, Optional[Silent]]:
    """A server that leaves a call in ``stage``, its URL, and its handler (None when connecting)."""
    if stage == "connecting":
        server: Any = never_accept(settle=0.1)
        return server, "", None
    silent = Silent(HEAD if stage == "reading the body" else b"", after_request=stage != "tls handshake")
    return RawServer(silent), "", silent


def url_of(server: Any, stage: str) -> str:
    url: str = server.url
    return url.replace("http://", "https://") if stage == "tls handshake" else url


@needs_proc
@pytest.mark.parametrize("stage", STAGES)
def test_cancelling_the_task_at_each_stage_closes_the_socket(stage: str) -> None:
    server, _, silent = stage_server(stage)
    with server:
        if stage == "connecting" and not server.saturated:
            pytest.skip("this platform completes every connect")
        url = url_of(server, stage)

        async def main() -> tuple[float, qa.Diagnostics, tuple[int, int], int, int]:
            client = qa.AsyncClient(base_url=url, trust_env=False, retry=qa.RetryPolicy.none)
            diagnostics = qa.Diagnostics()
            baseline = open_sockets()
            task = asyncio.ensure_future(client.ask("s", Toxic, diagnostics=diagnostics))
            if silent is not None:
                assert await until(silent.accepted)
                # The call is in its stage: its TLS hello sent, or the head it reads received.
                if stage == "tls handshake":
                    assert await until(silent.heard)
                elif stage == "reading the body":
                    assert await until_true(lambda: has_head(client))
            else:
                # Its socket is open: the connect is under way, stuck in SYN retransmission.
                assert await until_true(lambda: open_sockets() > baseline)
            assert not task.done()
            fired = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            took = time.monotonic() - fired
            counts = pool_counts(client)
            if silent is not None:
                assert await until(silent.gone), "the client never closed its socket"
            fds = await settled(open_sockets, baseline)
            await client.aclose()
            return took, diagnostics, counts, fds, baseline

        took, diagnostics, counts, fds, baseline = asyncio.run(main())
    assert took < PROMPT
    assert counts == (0, 0)
    assert fds == baseline
    assert diagnostics.attempts == 1
    assert [a.error for a in diagnostics.history] == ["Canceled"]
    assert diagnostics.status == (200 if stage == "reading the body" else None)


@pytest.mark.parametrize("stage", STAGES)
def test_a_timeout_at_each_stage_is_the_same_in_both_clients(stage: str) -> None:
    outcomes = []
    for run in (sync_outcome, async_outcome):
        server, _, _ = stage_server(stage)
        with server:
            if stage == "connecting" and not server.saturated:
                pytest.skip("this platform completes every connect")
            # Reading the body, the head must come within the timeout, in both runs.
            outcomes.append(run(url_of(server, stage), timeout=0.3 if stage == "reading the body" else 0.1))
    threaded, on_asyncio = outcomes
    assert on_asyncio == threaded
    assert threaded[0] == "Canceled"
    assert "timeout" in threaded[1]


# -- faults only raw sockets make -----------------------------------------------------------------

FAULTS: dict[str, Callable[[], Handler]] = {
    "garbage status line": garbage_status_line,
    "close before the status": close_before_status,
    "truncated body": truncated_body,
    "early 401, then reset": lambda: answer_early(
        b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: 20\r\n"
        b'\r\n{"detail": "no key"}',
        reset=True,
    ),
    "503 head, part of its body, then reset": lambda: answer_then_reset(
        b'HTTP/1.1 503 Service Unavailable\r\nContent-Length: 50\r\n\r\n{"detail": '
    ),
    "204 to ask": lambda: respond_sequence(b"HTTP/1.1 204 No Content\r\n\r\n"),
    "body not JSON": lambda: respond_sequence(ok_response(b"not json")),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_raw_faults_are_the_same_in_both_clients(fault: str) -> None:
    outcomes = []
    for run in (sync_outcome, async_outcome):
        with RawServer(FAULTS[fault]()) as server:
            outcomes.append(run(server.url))
    threaded, on_asyncio = outcomes
    assert on_asyncio == threaded
    assert threaded[0] in ("InvalidResponse", "ConnectionFailed", "Unauthorized", "ServerError"), threaded


# -- name resolution -----------------------------------------------------------------------------


class SlowResolver:
    """``socket.getaddrinfo`` for ``slow.example``: blocked until ``release``, then 127.0.0.1."""

    def __init__(self, real: Callable[..., Any]) -> None:
        self.real = real
        self.asked = threading.Event()
        self.release = threading.Event()

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "nowhere.example":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if host == "dual.example":  # an IPv6 address first, then an IPv4 one, as localhost often is
            return [*self.real("::1", port, *args, **kwargs), *self.real("127.0.0.1", port, *args, **kwargs)]
        if host == "slow.example":
            self.asked.set()
            self.release.wait(BOUND)
            host = "127.0.0.1"
        return self.real(host, port, *args, **kwargs)


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> Any:
    slow = SlowResolver(socket.getaddrinfo)
    monkeypatch.setattr(socket, "getaddrinfo", slow)
    yield slow
    slow.release.set()


def test_a_slow_resolver_blocks_no_other_task(resolver: SlowResolver) -> None:
    with FakeService() as svc:
        url = svc.url.replace("127.0.0.1", "slow.example")

        async def main() -> tuple[int, bool]:
            async with qa.AsyncClient(base_url=url, trust_env=False) as client:
                task = asyncio.ensure_future(client.ask("You idiot", Toxic))
                assert await until(resolver.asked)
                ticks = 0
                for _ in range(10):  # the loop runs other tasks while the name resolves
                    await asyncio.sleep(0.001)
                    ticks += 1
                assert not task.done()
                resolver.release.set()
                answer = await asyncio.wait_for(task, BOUND)
                return ticks, answer.answers.toxic

        assert asyncio.run(main()) == (10, True)


def test_a_call_stuck_resolving_is_cancelled_at_once(resolver: SlowResolver) -> None:
    async def main() -> tuple[float, str, float]:
        async with qa.AsyncClient(base_url="http://slow.example:9", trust_env=False) as client:
            task = asyncio.ensure_future(client.ask("s", Toxic))
            assert await until(resolver.asked)
            fired = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            cancelled = time.monotonic() - fired
            started = time.monotonic()
            with pytest.raises(qa.Canceled) as caught:
                await client.ask("s", Toxic, timeout=0.1)
            timed_out = time.monotonic() - started
        resolver.release.set()  # asyncio.run waits for the executor's threads
        return cancelled, str(caught.value), timed_out

    cancelled, message, timed_out = asyncio.run(main())
    assert cancelled < PROMPT
    assert "timeout" in message
    assert timed_out < PROMPT


# -- asyncio.timeout and wait_for ----------------------------------------------------------------


asyncio_timeout: Any = getattr(asyncio, "timeout", None)  # Python 3.11+


@needs_proc
@pytest.mark.skipif(asyncio_timeout is None, reason="asyncio.timeout is Python 3.11+")
def test_asyncio_timeout_around_a_call_closes_its_connection() -> None:
    silent = Silent(after_request=True)
    with RawServer(respond_sequence(OK_RESPONSE, silent)) as server:

        async def main() -> tuple[tuple[int, int], bool, int, int, bool]:
            async with qa.AsyncClient(base_url=server.url, trust_env=False) as client:
                await client.ask("s", Toxic)  # a connection in the pool, reused by the next call
                baseline = open_sockets()
                with pytest.raises(TimeoutError):
                    async with asyncio_timeout(0.15):
                        await client.ask("s", Toxic)
                counts = pool_counts(client)
                gone = await until(silent.gone)
                # The pooled socket the call took is closed, and the server's end of it.
                fds = await settled(open_sockets, baseline - 2)
                after = (await client.ask("s", Toxic)).answers.toxic
                return counts, gone, fds, baseline - 2, after

        counts, gone, fds, expected, after = asyncio.run(main())
        assert counts == (0, 0)
        assert gone
        assert fds == expected
        assert after is True
        assert server.connections == 2


def test_wait_for_and_the_calls_timeout_each_win_when_first() -> None:
    silent = Silent(after_request=True)
    with RawServer(silent) as server:

        async def main() -> tuple[str, str]:
            async with qa.AsyncClient(base_url=server.url, trust_env=False) as client:
                with pytest.raises(qa.Canceled) as caught:
                    await asyncio.wait_for(client.ask("s", Toxic, timeout=0.1), BOUND)
                with pytest.raises(asyncio.TimeoutError) as outer:
                    await asyncio.wait_for(client.ask("s", Toxic, timeout=BOUND), 0.1)
                assert pool_counts(client) == (0, 0)
                return str(caught.value), type(outer.value).__name__

        message, outer = asyncio.run(main())
        assert "timeout of 0.1 s" in message
        assert outer == "TimeoutError"


# -- aclose --------------------------------------------------------------------------------------


@needs_proc
def test_aclose_ends_calls_in_every_stage_and_leaks_nothing() -> None:
    waiting = Silent(after_request=True)
    reading = Silent(HEAD, after_request=True)
    stuck, w, r = never_accept(settle=0.1), RawServer(waiting), RawServer(reading)
    with stuck, w, r, FakeService() as svc:
        svc.script(qa.testing.reply(503, headers=[("retry-after-ms", "30000")]))

        async def main() -> tuple[list[str], float, int, int]:
            baseline = open_sockets()
            urls = [w.url, r.url, svc.url] + ([stuck.url] if stuck.saturated else [])
            clients = [qa.AsyncClient(base_url=u, trust_env=False) for u in urls]
            # One client per server, each closed from its own aclose(); the 503 asks for 30 s.
            tasks = [asyncio.ensure_future(c.ask("s", Toxic)) for c in clients]
            assert await until(waiting.accepted)
            assert await until(reading.accepted)
            for _ in range(20):
                await asyncio.sleep(0.005)
            fired = time.monotonic()
            await asyncio.gather(*(c.aclose() for c in clients))
            took = time.monotonic() - fired
            results = await asyncio.gather(*tasks, return_exceptions=True)
            kinds = [type(x).__name__ for x in results]
            assert all(pool_counts(c) == (0, 0) for c in clients)
            assert await until(waiting.gone)
            assert await until(reading.gone)
            fds = await settled(open_sockets, baseline)
            return kinds, took, fds, baseline

        kinds, took, fds, baseline = asyncio.run(main())
        assert set(kinds) <= {"Canceled", "ClientClosed"}, kinds
        assert took < PROMPT
        assert fds == baseline


def test_every_operation_after_aclose_raises_client_closed() -> None:
    request = qa.Request("s", [qa.NamedQuestion("toxic", Toxic.toxic)])

    async def main(client: qa.AsyncClient) -> list[str]:
        await client.aclose()
        await client.aclose()  # idempotent
        errors = []
        calls: list[Awaitable[object]] = [client.ask("s", Toxic), client.list_models(), client.core(request)]
        for call in calls:
            try:
                await call
            except qa.QAError as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
        return errors

    client = qa.AsyncClient(base_url="http://127.0.0.1:9", trust_env=False)
    errors = asyncio.run(main(client))
    assert len(errors) == 3
    assert all(e.startswith("ClientClosed") and "closed" in e for e in errors), errors

    # Closed in a loop now gone, a call from the next loop is ClientClosed, not WrongLoop.
    async def again() -> None:
        await client.ask("s", Toxic)

    with pytest.raises(qa.ClientClosed, match="closed"):
        asyncio.run(again())


# -- hooks and MockTransport handlers ------------------------------------------------------------


def test_a_hook_that_raises_is_logged_and_the_call_goes_on_in_both(caplog: pytest.LogCaptureFixture) -> None:
    threads: list[int] = []

    def hook(event: qa.HookEvent) -> None:
        threads.append(threading.get_ident())
        raise ValueError(f"hook broke at {event.stage}")

    hooks = {"before_attempt": [hook], "after_attempt": [hook]}
    caplog.set_level(logging.WARNING, logger="qa_min")
    with FakeService() as svc:
        with qa.Client(base_url=svc.url, trust_env=False, hooks=hooks) as client:
            threaded = client.ask("You idiot", Toxic).answers.toxic
        sync_logs = [r.getMessage() for r in caplog.records]
        caplog.clear()

        async def main() -> tuple[bool, int]:
            async with qa.AsyncClient(base_url=svc.url, trust_env=False, hooks=hooks) as client:
                return (await client.ask("You idiot", Toxic)).answers.toxic, threading.get_ident()

        threads.clear()
        on_asyncio, loop_thread = asyncio.run(main())
        async_logs = [r.getMessage() for r in caplog.records]
    assert on_asyncio is threaded is True
    assert threads == [loop_thread, loop_thread]
    assert len(async_logs) == len(sync_logs) == 2
    assert all("hook broke" in m and "ValueError" in m for m in async_logs)


def assert_each_hook_logged_twice(caplog: pytest.LogCaptureFixture, what: str) -> None:
    """Both hooks warned of, once per client: each warning says ``what`` the hook returned."""
    logs = [r.getMessage() for r in caplog.records if r.name == "qa_min"]
    assert len(logs) == 4, logs
    stages = [m.split(" hook ")[0] for m in logs]
    assert sorted(stages) == ["the after_attempt"] * 2 + ["the before_attempt"] * 2, logs
    assert all(f"{what}: hooks must be plain functions" in m for m in logs), logs


def test_a_hook_returning_a_coroutine_is_closed_and_logged_in_both(caplog: pytest.LogCaptureFixture) -> None:
    # A plain function (so not refused when the client is made) handing back a coroutine: nothing
    # awaits it. It is closed (its body never runs, Python never warns it was not awaited) and
    # logged as a raising hook is; the call goes on.
    ran: list[str] = []

    async def body(stage: str) -> None:
        ran.append(stage)

    def hook(event: qa.HookEvent) -> Awaitable[None]:
        return body(event.stage)

    hooks = {"before_attempt": [hook], "after_attempt": [hook]}
    caplog.set_level(logging.WARNING, logger="qa_min")

    async def main(url: str) -> bool:
        async with qa.AsyncClient(base_url=url, trust_env=False, hooks=hooks) as client:
            return (await client.ask("You idiot", Toxic)).answers.toxic

    with warnings.catch_warnings(record=True) as warned, FakeService() as svc:
        warnings.simplefilter("always")
        with qa.Client(base_url=svc.url, trust_env=False, hooks=hooks) as client:
            threaded = client.ask("You idiot", Toxic).answers.toxic
        on_asyncio = asyncio.run(main(svc.url))
        gc.collect()
    assert threaded is on_asyncio is True
    assert ran == []
    assert [str(w.message) for w in warned if "never awaited" in str(w.message)] == []
    assert_each_hook_logged_twice(caplog, "returned coroutine (an awaitable), which nothing awaits")


def test_a_hook_returning_a_generator_is_closed_and_logged_in_both(caplog: pytest.LogCaptureFixture) -> None:
    # A plain function (so not refused when the client is made) handing back a generator: nothing
    # iterates it, its body would never run. It is closed and logged as a raising hook is; the
    # call goes on.
    ran: list[str] = []
    returned: list[Generator[None, None, None]] = []

    def body(stage: str) -> Generator[None, None, None]:
        ran.append(stage)
        yield

    def hook(event: qa.HookEvent) -> Generator[None, None, None]:
        returned.append(body(event.stage))
        return returned[-1]

    hooks = {"before_attempt": [hook], "after_attempt": [hook]}
    caplog.set_level(logging.WARNING, logger="qa_min")

    async def main(url: str) -> bool:
        async with qa.AsyncClient(base_url=url, trust_env=False, hooks=hooks) as client:
            return (await client.ask("You idiot", Toxic)).answers.toxic

    with FakeService() as svc:
        with qa.Client(base_url=svc.url, trust_env=False, hooks=hooks) as client:
            threaded = client.ask("You idiot", Toxic).answers.toxic
        on_asyncio = asyncio.run(main(svc.url))
    assert threaded is on_asyncio is True
    assert ran == []
    assert len(returned) == 4
    assert all(inspect.getgeneratorstate(g) == inspect.GEN_CLOSED for g in returned)
    assert_each_hook_logged_twice(caplog, "returned generator (a generator), which nothing iterates")


def test_a_hook_s_other_awaitable_is_named_and_a_plain_value_is_not() -> None:
    # Any object with __await__, not only a coroutine, is what nothing awaits; a value is just a
    # value a hook happened to return (say, list.append's None or a logger's result), and says nothing.
    from qa_min._messages import unawaited

    class Later:
        def __await__(self) -> Generator[None, None, None]:
            yield

    assert unawaited(Later()) == "(an awaitable), which nothing awaits"
    for value in (0, True, "done", [], object()):
        assert unawaited(value) is None, value


def _broken_handler(exc: BaseException) -> Callable[[RecordedRequest], Optional[Step]]:
    def handler(request: RecordedRequest) -> Optional[Step]:
        raise exc

    return handler


@pytest.mark.parametrize(
    "exc", [ConnectionResetError(104, "Connection reset by peer"), ValueError("handler bug")], ids=repr
)
def test_a_mock_handler_that_raises_is_the_same_in_both_clients(exc: BaseException) -> None:
    def outcome(kind: str) -> tuple[Any, ...]:
        diagnostics = qa.Diagnostics()
        mock = MockTransport(_broken_handler(exc))
        options: dict[str, Any] = {"transport": mock, "api_key": "sk-test", "retry": qa.RetryPolicy.none}
        options["trust_env"] = False
        try:
            if kind == "threaded":
                with qa.Client(**options) as client:
                    client.ask("s", Toxic, diagnostics=diagnostics)
            else:

                async def main() -> None:
                    async with qa.AsyncClient(**options) as client:
                        await client.ask("s", Toxic, diagnostics=diagnostics)

                asyncio.run(main())
        except Exception as error:
            return shape(error, diagnostics)
        raise AssertionError("the call succeeded")

    threaded = outcome("threaded")
    assert outcome("asyncio") == threaded
    if isinstance(exc, OSError):
        assert threaded[0] == "ConnectionFailed"
        assert "reset" in threaded[1].lower()


# -- pickling ------------------------------------------------------------------------------------


async def module_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def test_a_used_client_pickles_and_its_copy_runs_on_another_loop() -> None:
    with FakeService() as svc:
        client = qa.AsyncClient(base_url=svc.url, trust_env=False, sleep=module_sleep, timeout=7.0)

        async def use(c: qa.AsyncClient, close: bool = True) -> bool:
            answer = await c.ask("You idiot", Toxic)
            if close:
                await c.aclose()
            return answer.answers.toxic

        loop = asyncio.new_event_loop()
        try:
            assert loop.run_until_complete(use(client, close=False)) is True
            copy = pickle.loads(pickle.dumps(client))  # bound to a loop and holding a socket
            assert asyncio.run(use(copy)) is True  # a fresh client: bound to no loop
            loop.run_until_complete(client.aclose())
            closed_copy = pickle.loads(pickle.dumps(client))  # a closed client's copy is open
            assert asyncio.run(use(closed_copy)) is True
        finally:
            loop.close()
        assert copy._options == client._options


# -- many calls, and servers that close keep-alive connections -----------------------------------


def test_a_thousand_concurrent_calls_are_all_answered() -> None:
    texts = [f"text {i}" for i in range(1000)]
    yes_no = {"true": "The text insults someone", "false": "The text insults no one"}
    expected = [expected_answer(qa.DEFAULT_MODEL, t, "toxic", yes_no) for t in texts]
    with FakeService() as svc:  # its accept queue takes the burst (test_testing checks it)

        async def main() -> tuple[list[bool], tuple[int, int]]:
            async with qa.AsyncClient(base_url=svc.url, trust_env=False, rate_limit=None) as client:
                answers = await asyncio.wait_for(asyncio.gather(*(client.ask(t, Toxic) for t in texts)), 60)
                return [a.answers.toxic for a in answers], pool_counts(client)

        toxic, (busy, idle) = asyncio.run(main())
    assert toxic == expected
    assert busy == 0
    assert idle <= 10


def test_connections_the_server_closed_between_rounds_are_replaced() -> None:
    # Each connection answers once, keep-alive as far as the client can tell, then closes as the
    # next request arrives on it: every reused connection fails after the request went out.
    def once_then_close(conn: socket.socket, stop: threading.Event) -> None:
        if read_request(conn):
            conn.sendall(OK_RESPONSE)
            read_request(conn)

    with RawServer(once_then_close) as server:

        async def main() -> tuple[list[bool], list[int], tuple[int, int]]:
            async with qa.AsyncClient(base_url=server.url, trust_env=False, max_idle_per_host=20) as client:
                await asyncio.gather(*(client.ask("s", Toxic) for _ in range(20)))
                diagnostics = [qa.Diagnostics() for _ in range(20)]
                answers = await asyncio.gather(*(client.ask("s", Toxic, diagnostics=d) for d in diagnostics))
                return (
                    [a.answers.toxic for a in answers],
                    [d.attempts for d in diagnostics],
                    pool_counts(client),
                )

        toxic, attempts, (busy, _) = asyncio.run(main())
    assert toxic == [True] * 20
    assert all(n in (1, 2) for n in attempts), attempts  # a resend at most
    assert busy == 0


def test_a_name_that_does_not_resolve_is_worded_the_same_by_both(resolver: SlowResolver) -> None:
    url = "http://nowhere.example:9"
    threaded, on_asyncio = sync_outcome(url), async_outcome(url)
    assert on_asyncio == threaded
    assert threaded[0] == "ConnectionFailed"
    assert "Name or service not known" in threaded[1]


def _hello_then(reset: bool) -> Handler:
    """Read the TLS client hello, then close (a FIN) or reset the connection, answering nothing."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        conn.recv(4096)
        if reset:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    return handler


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "closed"])
def test_a_server_ending_the_tls_handshake_is_the_same_in_both(reset: bool) -> None:
    outcomes = []
    for run in (sync_outcome, async_outcome):
        with RawServer(_hello_then(reset=reset)) as server:
            outcomes.append(run(server.url.replace("http://", "https://")))
    threaded, on_asyncio = outcomes
    assert on_asyncio == threaded
    assert threaded[0] == "ConnectionFailed"
    # What happened, in OpenSSL's words for a close ("SSLEOFError: ... EOF occurred in violation
    # of protocol" on OpenSSL 3; "TLS/SSL connection has been closed (EOF)" on Python 3.9).
    assert ("reset" if reset else "EOF") in threaded[1], threaded[1]


def test_a_dual_stack_name_refused_on_every_address_is_worded_the_same_by_both(
    resolver: SlowResolver,
) -> None:
    # A name resolving to ::1 and 127.0.0.1 (localhost, often) with nothing listening: Client
    # reports the last address's refusal; asyncio's create_connection joined both into one
    # "Multiple exceptions" OSError with no errno.
    closed = socket.socket()  # bound, never listening: a connect to it is refused
    closed.bind(("127.0.0.1", 0))
    try:
        url = f"http://dual.example:{closed.getsockname()[1]}"
        threaded, on_asyncio = sync_outcome(url), async_outcome(url)
    finally:
        closed.close()
    assert on_asyncio == threaded
    assert threaded[0] == "ConnectionFailed"
    assert threaded[1].startswith("URL: ConnectionRefusedError: ")
    assert "Connection refused" in threaded[1]
    assert threaded[5] == "ConnectionRefusedError"  # diagnostics.transport_error


def test_wrong_loop_error_tells_a_stopped_loop_from_a_running_one() -> None:
    with FakeService() as svc:
        client = qa.AsyncClient(base_url=svc.url, trust_env=False)
        first = asyncio.new_event_loop()
        try:
            first.run_until_complete(client.ask("s", Toxic))  # the loop stops; it stays open

            async def elsewhere() -> None:
                await client.ask("s", Toxic)

            with pytest.raises(qa.QAError) as caught:
                asyncio.run(elsewhere())
            assert isinstance(caught.value, RuntimeError)
            message = str(caught.value)
            assert "(stopped, not closed)" in message
            assert "still running" not in message
            assert "create one client per event loop" in message
        finally:
            first.run_until_complete(client.aclose())
            first.close()

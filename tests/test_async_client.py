"""``qa.AsyncClient`` on asyncio (SPEC §7b): what only the asyncio client has to show.

The behaviours both clients share (statuses, retries, Diagnostics, hooks, ...) are compared
side by side in ``test_scenarios.py``. Here:

  no thread started, the loop never blocked (a server on the same loop, so no thread at all)
      test_no_thread_is_started_and_the_loop_keeps_ticking
  cancelling the awaiting task: CancelledError at once, the connection closed, never pooled
      test_cancelling_the_task_raises_cancelled_error_and_closes_the_connection,
      test_cancelling_a_task_during_the_backoff_sleep
  ...and the call still ends as a Canceled would: Diagnostics filled, after_attempt run
      test_cancelling_the_task_fills_diagnostics_and_runs_after_attempt,
      test_cancelling_the_task_during_the_backoff_fills_diagnostics
  timeout= and cancel= raise Canceled (a token cancelled from another thread too)
      test_timeout_raises_canceled_and_drops_the_connection, test_token_cancelled_from_another_thread,
      test_token_cancelled_before_the_call
  aclose(): calls in flight end promptly with Canceled, no socket leaks, later calls ClientClosed
      test_aclose_ends_calls_in_flight_and_leaks_no_socket, test_call_after_aclose_raises_client_closed
  ...the sockets of calls still connecting closed too, before aclose() returns
      test_aclose_closes_the_sockets_of_calls_still_connecting
  a client belongs to one open loop at a time (it follows a new one once its loop is closed:
  test_asyncio_lifecycle.py); once that loop ended, aclose() from any loop closes every socket
  (plain and TLS), and a loop still running keeps its client
      test_a_call_from_another_loop_raises_a_clear_error_until_its_loop_is_closed,
      test_aclose_after_the_clients_loop_ended_closes_it_from_another_loop,
      test_a_loop_still_running_keeps_its_client_until_it_closes,
      test_aclose_after_the_loop_ended_closes_a_tls_connection_too
  keep-alive pool per host, bounded
      test_connections_are_reused_and_the_idle_pool_is_bounded
  pickles as its configuration; rate_limit as Client's; MockTransport handler on the loop's thread
      test_pickles_as_its_configuration, test_rate_limit_is_the_clients,
      test_a_client_with_an_ssl_context_refuses_to_pickle_naming_the_async_client,
      test_mock_transport_handler_runs_on_the_loop_thread, test_mock_hang_times_out
  TLS through loop.start_tls, and a CONNECT tunnel through an HTTP proxy: test_async_tls.py
"""

from __future__ import annotations

import asyncio
import copy
import os
import pickle
import socket
import ssl
import threading
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Optional, TypeVar

import pytest
from support import open_sockets, resource_warnings_now

import qa_min as qa
from qa_min._ascope import WrongLoop
from qa_min._fakehttp import Headers
from qa_min._fakerules import DEFAULT_MODELS, RecordedRequest, apply_rules
from qa_min.testing import FakeService, MockTransport, hang, reply

if TYPE_CHECKING:
    from tlshelpers import Certs

T = TypeVar("T")
PROMPT = 2.0  # seconds within which a cancelled call must have ended (generous: a shared CI box)
BOUND = 5.0  # bounds waits for things that happen at once, so a bug fails instead of hanging


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


class LoopServer(asyncio.Protocol):
    """The fake service's rules served on the test's own event loop: no thread anywhere.

    ``hold`` makes it read requests and never answer them; ``connections`` counts the ones
    accepted and ``open`` the ones still open.
    """

    connections = 0
    open: set[LoopServer] = set()  # noqa: RUF012 - reset per server by ``serve``
    hold = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buffer = b""
        type(self).connections += 1
        type(self).open.add(self)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        type(self).open.discard(self)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        head, found, rest = self.buffer.partition(b"\r\n\r\n")
        if not found:
            return
        lines = head.decode("latin-1").split("\r\n")
        pairs = [tuple(part.strip() for part in line.split(":", 1)) for line in lines[1:]]
        headers = Headers((name, value) for name, value in pairs)
        length = int(headers.get("content-length", "0"))
        if len(rest) < length:
            return
        self.buffer = rest[length:]
        if type(self).hold:
            return
        method, path, _ = lines[0].split(" ", 2)
        recorded = RecordedRequest(method, path, headers, rest[:length])
        status, payload, extra = apply_rules(recorded, {}, api_key=None, prefix="", models=DEFAULT_MODELS)
        import json

        body = json.dumps(payload).encode()
        fields = "".join(f"{k}: {v}\r\n" for k, v in extra)
        self.transport.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{fields}"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )


async def serve(hold: bool = False) -> tuple[asyncio.AbstractServer, type[LoopServer], str]:
    kind = type("Server", (LoopServer,), {"connections": 0, "open": set(), "hold": hold})
    server = await asyncio.get_running_loop().create_server(kind, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, kind, f"http://127.0.0.1:{port}"


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


# -- no thread, no blocking --------------------------------------------------------------------


def test_no_thread_is_started_and_the_loop_keeps_ticking() -> None:
    async def main() -> tuple[int, int, list[bool], int, int]:
        before = threading.active_count()
        server, _, url = await serve()
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0)

        tick = asyncio.ensure_future(ticker())
        async with qa.AsyncClient(base_url=url, trust_env=False) as client:
            answers = [
                r.answers.toxic
                for r in await asyncio.gather(*(client.ask(f"t{i}", Review) for i in range(30)))
            ]
            models = await client.list_models()
        stop.set()
        await tick
        server.close()
        await server.wait_closed()
        return before, threading.active_count(), answers, len(models.models), ticks

    before, after, answers, models, ticks = run(main())
    assert after == before
    assert len(answers) == 30
    assert models == len(DEFAULT_MODELS)
    assert all(isinstance(a, bool) for a in answers)
    assert ticks > 0


def test_a_slow_answer_does_not_block_the_loop() -> None:
    async def main() -> int:
        server, _, url = await serve(hold=True)
        ticks = 0
        async with qa.AsyncClient(base_url=url, trust_env=False, retry=qa.RetryPolicy.none) as client:
            task = asyncio.ensure_future(client.ask("x", Review, timeout=0.3))
            while not task.done():
                ticks += 1
                await asyncio.sleep(0.01)
            with pytest.raises(qa.Canceled):
                task.result()
        server.close()
        return ticks

    # 30 ticks of 10 ms fit in the 0.3 s (5 even with each tick three times late on a loaded
    # machine); a blocked loop would give 1 or 2.
    assert run(main()) >= 5


# -- cancellation ------------------------------------------------------------------------------


def test_cancelling_the_task_raises_cancelled_error_and_closes_the_connection() -> None:
    async def main() -> tuple[float, int, int, int]:
        server, kind, url = await serve(hold=True)
        client = qa.AsyncClient(base_url=url, trust_env=False)
        task = asyncio.ensure_future(client.ask("x", Review))
        while not kind.open or client._transport.pool.busy_count() == 0:  # type: ignore[union-attr]
            await asyncio.sleep(0.005)
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        took = time.monotonic() - started
        for _ in range(200):  # the server sees the close within a few loop turns
            if not kind.open:
                break
            await asyncio.sleep(0.005)
        pool = client._transport.pool  # type: ignore[union-attr]
        await client.aclose()
        server.close()
        return took, len(kind.open), pool.idle_count(), pool.busy_count()

    took, still_open, idle, busy = run(main())
    assert took < PROMPT
    assert still_open == 0  # the connection was closed...
    assert (idle, busy) == (0, 0)  # ...and never pooled


def test_cancelling_a_task_during_the_backoff_sleep() -> None:
    slept: list[float] = []

    async def long_sleep(seconds: float) -> None:
        slept.append(seconds)
        await asyncio.sleep(30)

    mock = MockTransport(lambda request: reply(503, {"detail": "busy"}))

    async def main() -> float:
        client = qa.AsyncClient(base_url="http://h", transport=mock, sleep=long_sleep)
        task = asyncio.ensure_future(client.ask("x", Review))
        while not slept:
            await asyncio.sleep(0.005)
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - started

    assert run(main()) < PROMPT
    assert len(mock.requests) == 1


async def _cancel_from_outside(how: str, call: Coroutine[Any, Any, object], started: asyncio.Event) -> None:
    """Await ``call`` and cancel its task ``how``, once ``started`` is set (the request is out)."""

    async def cancel_when_started(task: asyncio.Task[object]) -> None:
        await asyncio.wait_for(started.wait(), BOUND)
        task.cancel()

    if how == "task.cancel()":
        task = asyncio.ensure_future(call)
        canceller = asyncio.ensure_future(cancel_when_started(task))
        with pytest.raises(asyncio.CancelledError):
            await task
        await canceller
    elif how == "wait_for":
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(call, 0.1)
    else:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):  # type: ignore[attr-defined]
                await call


@pytest.mark.parametrize("how", ["task.cancel()", "wait_for", "asyncio.timeout"])
def test_cancelling_the_task_fills_diagnostics_and_runs_after_attempt(how: str) -> None:
    if how == "asyncio.timeout" and not hasattr(asyncio, "timeout"):
        pytest.skip("asyncio.timeout is Python 3.11+")
    diagnostics = qa.Diagnostics()
    events: list[qa.HookEvent] = []

    async def main() -> None:
        server, _, url = await serve(hold=True)
        started = asyncio.Event()
        hooks = {"before_attempt": [lambda e: started.set()], "after_attempt": [events.append]}
        async with qa.AsyncClient(base_url=url, trust_env=False, hooks=hooks) as client:
            await _cancel_from_outside(how, client.ask("x", Review, diagnostics=diagnostics), started)
        server.close()

    run(main())
    # As for a Canceled: the request was written, so it is an attempt, shown to the hooks.
    assert diagnostics.attempts == 1
    assert [(a.number, a.status, a.error) for a in diagnostics.history] == [(1, None, "Canceled")]
    assert diagnostics.elapsed > 0.0
    assert [(e.stage, e.attempt, e.status) for e in events] == [("after_attempt", 1, None)]
    assert isinstance(events[0].error, qa.Canceled)
    assert "task was cancelled" in str(events[0].error)


def test_cancelling_the_task_during_the_backoff_fills_diagnostics() -> None:
    mock = MockTransport(lambda request: reply(503, {"detail": "busy"}))
    diagnostics = qa.Diagnostics()

    events: list[asyncio.Event] = []  # made on the loop: on 3.9 an Event binds a loop when made

    async def nap(seconds: float) -> None:
        events[0].set()
        await asyncio.sleep(30)

    async def main() -> None:
        napping = asyncio.Event()
        events.append(napping)
        async with qa.AsyncClient(base_url="http://h", transport=mock, sleep=nap) as client:
            task = asyncio.ensure_future(client.ask("x", Review, diagnostics=diagnostics))
            await asyncio.wait_for(napping.wait(), BOUND)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    run(main())
    assert diagnostics.attempts == 1  # the 503, then the wait before the retry
    assert diagnostics.status == 503
    assert diagnostics.body is not None
    assert "busy" in diagnostics.body
    assert diagnostics.elapsed > 0.0


def test_timeout_raises_canceled_and_drops_the_connection() -> None:
    async def main() -> tuple[qa.Canceled, float, int, int]:
        server, _, url = await serve(hold=True)
        diagnostics = qa.Diagnostics()
        async with qa.AsyncClient(base_url=url, trust_env=False) as client:
            started = time.monotonic()
            with pytest.raises(qa.Canceled) as caught:
                await client.ask("x", Review, timeout=0.1, diagnostics=diagnostics)
            took = time.monotonic() - started
            pool = client._transport.pool  # type: ignore[union-attr]
            counts = pool.idle_count() + pool.busy_count(), diagnostics.attempts
        server.close()
        return caught.value, took, *counts

    error, took, pooled, attempts = run(main())
    assert "timeout of 0.1 s expired" in str(error)
    assert 0.05 < took < PROMPT  # not before the deadline, but for a socket's slack
    assert pooled == 0
    assert attempts == 1


def test_token_cancelled_from_another_thread() -> None:
    token = qa.CancelToken()

    async def main() -> tuple[qa.Canceled, float]:
        server, kind, url = await serve(hold=True)
        async with qa.AsyncClient(base_url=url, trust_env=False) as client:
            task = asyncio.ensure_future(client.ask("x", Review, cancel=token))
            while not kind.open:
                await asyncio.sleep(0.005)
            started = time.monotonic()
            threading.Thread(target=token.cancel).start()
            with pytest.raises(qa.Canceled) as caught:
                await task
            took = time.monotonic() - started
        server.close()
        return caught.value, took

    error, took = run(main())
    assert "cancelled" in str(error)
    assert took < PROMPT


def test_token_cancelled_before_the_call() -> None:
    token = qa.CancelToken()
    token.cancel()
    mock = MockTransport()

    async def main() -> None:
        async with qa.AsyncClient(base_url="http://h", transport=mock) as client:
            with pytest.raises(qa.Canceled):
                await client.ask("x", Review, cancel=token)

    run(main())
    assert mock.requests == []


def test_aclose_ends_calls_in_flight_and_leaks_no_socket() -> None:
    async def main() -> tuple[list[object], float, int, int]:
        server, kind, url = await serve(hold=True)
        fds = open_fds()
        client = qa.AsyncClient(base_url=url, trust_env=False)
        tasks = [asyncio.ensure_future(client.ask(f"t{i}", Review)) for i in range(5)]
        while len(kind.open) < 5:
            await asyncio.sleep(0.005)
        started = time.monotonic()
        await client.aclose()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        took = time.monotonic() - started
        for _ in range(200):
            if not kind.open:
                break
            await asyncio.sleep(0.005)
        server.close()
        await server.wait_closed()
        await asyncio.sleep(0)
        return list(results), took, len(kind.open), open_fds() - fds

    results, took, still_open, leaked = run(main())
    assert all(isinstance(r, qa.Canceled) and "closed" in str(r) for r in results), results
    assert took < PROMPT
    assert still_open == 0
    assert leaked <= 0


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts sockets in /proc/self/fd")
def test_aclose_closes_the_sockets_of_calls_still_connecting() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)  # the kernel completes the connects; nobody accepts: no socket of its own
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"

    async def aclose_after(turns: int) -> tuple[int, int, int, list[object]]:
        base = open_sockets()
        client = qa.AsyncClient(base_url=url, trust_env=False)
        tasks = [asyncio.ensure_future(client.ask(f"t{i}", Review)) for i in range(5)]
        for _ in range(turns):  # each call somewhere between its socket() and its request
            await asyncio.sleep(0)
        pool = client._transport.pool  # type: ignore[union-attr]
        untracked = open_sockets() - base - pool.busy_count()  # connecting: not in the pool yet
        await client.aclose()
        left = open_sockets() - base
        results = await asyncio.gather(*tasks, return_exceptions=True)
        return untracked, left, open_sockets() - base, list(results)

    try:
        runs = [run(aclose_after(turns)) for turns in range(1, 16)]  # 0: no call started yet
    finally:
        listener.close()
    assert any(untracked > 0 for untracked, _, _, _ in runs)  # some aclose() met calls connecting
    for turns, (_, left, later, results) in enumerate(runs, 1):
        assert (turns, left, later) == (turns, 0, 0)  # closed before aclose() returned
        assert all(isinstance(r, qa.Canceled) and "closed" in str(r) for r in results), results


def test_call_after_aclose_raises_client_closed() -> None:
    async def main() -> None:
        client = qa.AsyncClient(base_url="http://h", transport=MockTransport())
        await client.aclose()
        await client.aclose()  # idempotent
        with pytest.raises(qa.ClientClosed):
            await client.ask("x", Review)
        with pytest.raises(qa.ClientClosed):
            await client.list_models()

    run(main())


# -- loops, pool, pickling, options ------------------------------------------------------------


def test_a_call_from_another_loop_raises_a_clear_error_until_its_loop_is_closed() -> None:
    client = qa.AsyncClient(base_url="http://h", transport=MockTransport())

    async def once() -> bool:
        return (await client.ask("x", Review)).answers.toxic in (True, False)

    first = asyncio.new_event_loop()
    try:
        assert first.run_until_complete(once())  # the loop stops; it stays open, it may run again
        started = time.monotonic()
        with pytest.raises(RuntimeError, match=r"another event loop \(stopped, not closed\)") as caught:
            run(once())
        assert isinstance(caught.value, qa.QAError)
        assert "only once its own is closed" in str(caught.value)
        assert time.monotonic() - started < PROMPT
    finally:
        first.close()
    assert run(once())  # its loop closed: the client follows this one
    assert run(once())  # and the next


def idle_socket(client: qa.AsyncClient) -> Any:
    """The socket (asyncio's ``TransportSocket``) of the client's one idle connection."""
    pool = client._transport.pool  # type: ignore[union-attr]
    [conn] = [c for stack in pool._idle.values() for c in stack]
    assert conn.transport is not None
    return conn.transport.get_extra_info("socket")


def service_sees_no_connection(svc: FakeService) -> bool:
    """Wait (bounded) until the fake service has seen every connection closed by the client."""
    state = svc._state
    with state._cond:
        return state._cond.wait_for(lambda: not state._conns, BOUND)


@pytest.mark.parametrize("how", ["aclose", "async with"])
def test_aclose_after_the_clients_loop_ended_closes_it_from_another_loop(svc: FakeService, how: str) -> None:
    # The pytest pattern: a long-lived client, a fresh loop per test, the cleanup in another one.
    client = qa.AsyncClient(base_url=svc.url, trust_env=False)

    async def use() -> int:
        return len((await client.list_models()).models)

    async def close() -> None:
        if how == "aclose":
            await client.aclose()
        else:
            async with client:
                pass

    assert run(use()) == len(DEFAULT_MODELS)  # that loop is closed now; its connection idles
    sock = idle_socket(client)
    assert sock.fileno() != -1
    run(close())  # no WrongLoop: the client's loop is gone, nothing can run on it
    assert sock.fileno() == -1  # closed before aclose() returned
    pool = client._transport.pool  # type: ignore[union-attr]
    assert (pool.idle_count(), pool.busy_count()) == (0, 0)
    assert service_sees_no_connection(svc)
    assert resource_warnings_now() == []
    run(client.aclose())  # idempotent, from yet another loop
    with pytest.raises(qa.ClientClosed):
        run(use())
    assert svc.connections == 1


def test_a_loop_still_running_keeps_its_client_until_it_closes(svc: FakeService) -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    client = qa.AsyncClient(base_url=svc.url, trust_env=False)

    def on_its_loop(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(BOUND)

    try:
        on_its_loop(client.list_models())
        sock = idle_socket(client)
        with pytest.raises(WrongLoop, match="still running"):
            run(client.list_models())
        with pytest.raises(WrongLoop, match="still running"):
            run(client.aclose())
        assert sock.fileno() != -1  # nothing was closed: the client still works on its loop
        on_its_loop(client.list_models())
        assert svc.connections == 1
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(BOUND)
        loop.close()
    run(client.aclose())  # its loop ended: closed from this one
    assert sock.fileno() == -1
    assert service_sees_no_connection(svc)
    with pytest.raises(qa.ClientClosed):
        run(client.list_models())


def test_aclose_after_the_loop_ended_closes_a_tls_connection_too(certs: Certs) -> None:
    from tlshelpers import TLSService

    with TLSService(certs.server_cert, certs.server_key) as service:
        context = ssl.create_default_context(cafile=str(certs.ca))
        client = qa.AsyncClient(base_url=service.url, trust_env=False, ssl_context=context)

        async def use() -> int:
            return len((await client.list_models()).models)

        assert run(use()) > 0
        sock = idle_socket(client)
        [conn] = [c for stack in client._transport.pool._idle.values() for c in stack]  # type: ignore[union-attr]
        tls = conn.transport
        assert tls is not None
        assert tls is not conn.raw  # the TLS layer's transport, over the socket's
        run(client.aclose())
        assert sock.fileno() == -1
        assert tls.is_closing()  # the TLS layer marked closed too, not only the socket under it
        assert resource_warnings_now() == []  # neither the TLS transport nor the socket's
        assert service.handshakes == 1


def test_connections_are_reused_and_the_idle_pool_is_bounded() -> None:
    async def main() -> tuple[int, int, int]:
        server, kind, url = await serve()
        async with qa.AsyncClient(base_url=url, trust_env=False, max_idle_per_host=3) as client:
            for i in range(5):
                await client.ask(f"one at a time {i}", Review)
            sequential = kind.connections
            await asyncio.gather(*(client.ask(f"t{i}", Review) for i in range(8)))
            idle = client._transport.pool.idle_count()  # type: ignore[union-attr]
        server.close()
        return sequential, idle, kind.connections

    sequential, idle, total = run(main())
    assert sequential == 1
    assert idle == 3
    assert total <= 1 + 8


def test_sockets_have_tcp_keepalive_and_nodelay_as_the_threaded_clients() -> None:
    # docs/retries.md: probes after 30 s idle, 3 of them 10 s apart; requests go out unbuffered.
    async def main() -> dict[str, int]:
        server, _, url = await serve()
        async with qa.AsyncClient(base_url=url, trust_env=False) as client:
            await client.ask("one", Review)
            sock = idle_socket(client)
            probes = ("TCP_KEEPIDLE", "TCP_KEEPINTVL", "TCP_KEEPCNT")
            names = [name for name in probes if hasattr(socket, name)]
            seen = {name: sock.getsockopt(socket.IPPROTO_TCP, getattr(socket, name)) for name in names}
            seen["SO_KEEPALIVE"] = sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
            seen["TCP_NODELAY"] = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        server.close()
        return seen

    seen = run(main())
    assert seen.pop("SO_KEEPALIVE") != 0
    assert seen.pop("TCP_NODELAY") != 0
    expected = {"TCP_KEEPIDLE": 30, "TCP_KEEPINTVL": 10, "TCP_KEEPCNT": 3}
    assert seen == {name: value for name, value in expected.items() if hasattr(socket, name)}


def test_pickles_as_its_configuration() -> None:
    client = qa.AsyncClient(
        base_url="http://h:1/p", api_key="sk-abcdefgh12345678", model="judge-2.1", timeout=5
    )
    copy = pickle.loads(pickle.dumps(client))
    assert isinstance(copy, qa.AsyncClient)
    assert (copy.base_url, copy.model) == ("http://h:1/p", "judge-2.1")
    assert copy._core._key == "sk-abcdefgh12345678"
    assert "sk-abcdefgh" not in repr(copy)


def test_a_client_with_an_ssl_context_refuses_to_pickle_naming_the_async_client() -> None:
    client = qa.AsyncClient(base_url="https://h:1", ssl_context=ssl.create_default_context())
    for way in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(qa.ConfigurationError) as caught:
            way(client)
        assert str(caught.value) == (
            "an AsyncClient with an ssl_context cannot be pickled (an SSLContext cannot be); "
            "build the client where it is used instead"
        )


def test_rate_limit_is_the_clients() -> None:
    client = qa.AsyncClient(base_url="http://h", rate_limit=qa.RateLimit(5))
    state = client.rate_limit
    assert state is not None
    assert qa.AsyncClient(base_url="http://h", rate_limit=None).rate_limit is None


def test_max_workers_is_not_an_option() -> None:
    with pytest.raises(TypeError):
        qa.AsyncClient(base_url="http://h", max_workers=2)  # type: ignore[call-arg]


@pytest.mark.parametrize("sleep", [time.sleep, "soon"])
def test_sleep_must_be_an_async_function(sleep: Any) -> None:
    with pytest.raises(qa.InvalidOption, match="async function"):
        qa.AsyncClient(base_url="http://h", sleep=sleep)


def test_options_are_checked_as_client_checks_them() -> None:
    with pytest.raises(qa.InvalidBaseUrl):
        qa.AsyncClient(base_url="ftp://h")
    with pytest.raises(qa.InvalidOption):
        qa.AsyncClient(base_url="http://h", timeout=-1)
    with pytest.raises(qa.MissingApiKey):
        qa.AsyncClient(base_url=qa.PUBLIC_BASE_URL, api_key=None, trust_env=False)


def test_mock_transport_handler_runs_on_the_loop_thread() -> None:
    seen: list[int] = []

    def handler(request: RecordedRequest) -> None:
        seen.append(threading.get_ident())

    async def main() -> int:
        async with qa.AsyncClient(base_url="http://h", transport=MockTransport(handler)) as client:
            await client.ask("x", Review)
        return threading.get_ident()

    assert seen == [run(main())]


def test_mock_hang_times_out() -> None:
    async def main() -> float:
        async with qa.AsyncClient(base_url="http://h", transport=MockTransport(lambda r: hang())) as client:
            started = time.monotonic()
            with pytest.raises(qa.Canceled, match="timeout"):
                await client.ask("x", Review, timeout=0.1)
            return time.monotonic() - started

    assert run(main()) < PROMPT


def test_against_the_fake_service_over_a_socket(svc: FakeService) -> None:
    async def main() -> tuple[bool, list[str]]:
        async with qa.AsyncClient(base_url=svc.url, trust_env=False) as client:
            response = await client.ask("Some text", Review)
            request = qa.Request(state="s", questions=[qa.NamedQuestion("q", qa.YesNo("a", "b"))])
            core = await client.core(request, model="judge-2.1")
            models = await client.list_models()
        return isinstance(response.answers.toxic, bool) and "q" in core.answers, [
            m.name for m in models.models
        ]

    ok, names = run(main())
    assert ok
    assert "judge-latest" in names


def test_a_call_outside_a_running_loop_raises_a_clear_error() -> None:
    client = qa.AsyncClient(base_url="http://h", transport=MockTransport())
    coro = client.list_models()
    with pytest.raises(RuntimeError, match="running event loop"):
        coro.send(None)


def test_a_cancel_of_the_task_that_comes_with_ours_propagates_on_3_11() -> None:
    import sys

    from qa_min._ascope import Scope
    from qa_min._call import CallState

    async def main() -> tuple[object, bool, object]:
        loop = asyncio.get_running_loop()
        scope = Scope(loop, CallState(None, None))
        scope.stop("the call was cancelled")  # ours...
        task = asyncio.current_task()
        assert task is not None
        task.cancel()  # ...and the caller's, before the task reaches its next await
        absorbed: object = None
        propagates = False
        try:
            await loop.create_future()
        except asyncio.CancelledError as exc:
            absorbed = scope.absorb(exc)
            # The driver raises what ``foreign`` holds once the call has ended.
            propagates = scope.foreign is exc
        scope.close()
        scope.stop("later")  # the call is over: nothing happens
        return absorbed, propagates, scope.reason

    absorbed, propagates, reason = run(main())
    assert isinstance(absorbed, qa.Canceled)
    assert propagates == (sys.version_info >= (3, 11))
    assert reason == "the call was cancelled"


async def cancelled_at_next_turn() -> bool:
    """Whether the current task was cancelled: its next await raises ``CancelledError``."""
    try:
        await asyncio.sleep(0)
    except asyncio.CancelledError:
        return True
    return False


def test_a_scope_stops_for_its_first_reason_only_and_not_at_all_once_its_call_ended() -> None:
    from qa_min._ascope import Scope
    from qa_min._call import CallState

    async def main() -> tuple[Optional[str], bool, Optional[str], bool]:
        loop = asyncio.get_running_loop()
        scope = Scope(loop, CallState(None, None))
        scope.stop("the call's timeout of 1 s expired")
        scope.stop("the client was closed")  # the first reason stands
        stopped = await cancelled_at_next_turn()
        scope.close()
        over = Scope(loop, CallState(None, None))
        over.close()
        over.stop("the client was closed")  # the call is over: its task is left alone
        return scope.reason, stopped, over.reason, await cancelled_at_next_turn()

    assert run(main()) == ("the call's timeout of 1 s expired", True, None, False)


def test_a_cancellation_after_ours_was_absorbed_is_the_caller_s() -> None:
    from qa_min._ascope import Scope
    from qa_min._call import CallState

    async def main() -> tuple[str, bool, str, bool]:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        scope = Scope(loop, CallState(None, None))
        scope.stop("the call was cancelled")
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError as exc:
            ours = scope.absorb(exc)
        kept = scope.foreign is None
        task.cancel()  # the caller's, later: not ours again
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError as exc:
            theirs = scope.absorb(exc)
            propagates = scope.foreign is exc
        scope.close()
        return str(ours), kept, str(theirs), propagates

    assert run(main()) == ("the call was cancelled", True, "the call's task was cancelled", True)


def test_a_scopes_ended_future_is_done_once_its_call_is_over_whenever_it_was_asked_for() -> None:
    # aclose() waits on it for each call in flight: one never done would hold aclose() a second.
    from qa_min._ascope import Scope
    from qa_min._call import CallState

    async def main() -> tuple[bool, bool, bool]:
        loop = asyncio.get_running_loop()
        early = Scope(loop, CallState(None, None))
        waiting = early.ended()
        before = waiting.done()
        early.close()
        late = Scope(loop, CallState(None, None))
        late.close()
        return before, waiting.done(), late.ended().done()

    assert run(main()) == (False, True, True)


def test_a_scopes_deadline_timer_is_cancelled_when_its_call_ends() -> None:
    # A call over must not leave its timer in the loop until its deadline (one per call).
    from qa_min._ascope import Scope
    from qa_min._call import CallState

    async def main() -> tuple[bool, bool]:
        scope = Scope(asyncio.get_running_loop(), CallState(None, 60.0))
        timer = scope._timer
        assert timer is not None
        armed = not timer.cancelled()
        scope.close()
        return armed, timer.cancelled()

    assert run(main()) == (True, True)


def test_a_scope_unhooks_itself_from_its_calls_token_when_the_call_ends() -> None:
    # A token used for many calls would otherwise keep a hook, and its scope, per call.
    from qa_min._ascope import Scope
    from qa_min._call import CallState

    token = qa.CancelToken()

    async def main() -> tuple[int, int]:
        scope = Scope(asyncio.get_running_loop(), CallState(token, None))
        during = len(token._hooks)
        scope.close()
        return during, len(token._hooks)

    assert run(main()) == (1, 0)


def test_a_token_cancelled_after_the_loop_closed_is_harmless() -> None:
    token = qa.CancelToken()

    async def main() -> None:
        async with qa.AsyncClient(base_url="http://h", transport=MockTransport()) as client:
            await client.ask("x", Review, cancel=token)

    run(main())
    token.cancel()  # its hook was removed when the call ended; nothing to wake
    assert token.cancelled


def test_a_connection_the_server_closed_while_idle_is_replaced_silently(svc: FakeService) -> None:
    async def main() -> tuple[int, int]:
        async with qa.AsyncClient(base_url=svc.url, trust_env=False) as client:
            await client.ask("first", Review)
            svc.close_idle_connections()
            pool = client._transport.pool  # type: ignore[union-attr]
            [conn] = [c for stack in pool._idle.values() for c in stack]
            for _ in range(400):  # the loop sees the close while the connection idles
                if conn.lost:
                    break
                await asyncio.sleep(0.005)
            diagnostics = qa.Diagnostics()
            await client.ask("second", Review, diagnostics=diagnostics)
            return diagnostics.attempts, svc.connections

    attempts, connections = run(main())
    assert attempts == 1  # nothing was written to the closed one: not an attempt
    assert connections == 2


def test_an_idle_connection_past_idle_timeout_is_not_reused() -> None:
    async def main() -> tuple[int, int]:
        server, kind, url = await serve()
        # 0.3 s: the third call must come within it of the second, on a loop a loaded machine
        # may starve for tenths of a second.
        async with qa.AsyncClient(base_url=url, trust_env=False, idle_timeout=0.3) as client:
            await client.ask("first", Review)
            await asyncio.sleep(0.4)
            await client.ask("second", Review)
            first = kind.connections
            await client.ask("third", Review)  # right after: reused
        server.close()
        return first, kind.connections

    assert run(main()) == (2, 2)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n{}", ("InvalidResponse", "NoneType")),
        (b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70000 + b"\r\n\r\n", ("ConnectionFailed", "LimitExceeded")),
        (b"HTTPX 200 OK\r\n\r\n", ("ConnectionFailed", "MalformedHead")),
    ],
    ids=["framing after the head", "cap in the head", "not a status line"],
)
def test_a_refused_response_is_the_same_error_in_both_clients(
    answer: bytes, expected: tuple[str, str]
) -> None:
    from faultservers import RawServer, respond_sequence

    def threaded(url: str) -> tuple[str, str]:
        with qa.Client(base_url=url, trust_env=False, retry=qa.RetryPolicy.none) as client:
            try:
                client.list_models()
            except qa.QAError as exc:
                return type(exc).__name__, type(exc.diagnostics.transport_error).__name__
        raise AssertionError("no error")

    async def on_asyncio(url: str) -> tuple[str, str]:
        async with qa.AsyncClient(base_url=url, trust_env=False, retry=qa.RetryPolicy.none) as client:
            try:
                await client.list_models()
            except qa.QAError as exc:
                return type(exc).__name__, type(exc.diagnostics.transport_error).__name__
        raise AssertionError("no error")

    with RawServer(respond_sequence(answer, answer)) as server:
        assert threaded(server.url) == expected
        assert run(on_asyncio(server.url)) == expected


def test_a_scope_outside_a_task_and_a_stop_after_the_loop_closed() -> None:
    from qa_min._ascope import Scope, WrongLoop
    from qa_min._call import CallState

    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(WrongLoop, match="inside an asyncio task"):
            Scope(loop, CallState(None, None))  # no task runs on it

        async def made() -> Scope:
            return Scope(asyncio.get_running_loop(), CallState(None, None))

        scope = loop.run_until_complete(made())
    finally:
        loop.close()
    scope.stop_soon()  # a token cancelled after the loop closed: nothing to wake, no error
    assert scope.reason is None

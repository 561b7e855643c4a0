"""``close()`` from anywhere returns, without raising or deadlocking.

From another thread while a call is in flight, from a done-callback of a ``Call`` running on
the client's own executor (a worker must not wait for itself), from a done-callback that
``close()`` itself triggers, from the call's own thread (an injected ``sleep``), and from two
threads at once. Every wait is bounded by an Event, so a deadlock fails the test.

  test_close_from_another_thread_mid_call, test_close_from_a_done_callback_on_a_worker,
  test_close_from_a_done_callback_while_another_call_runs,
  test_close_from_a_callback_that_close_itself_triggers, test_close_from_the_calls_own_thread,
  test_close_twice_concurrently,
  test_close_ends_queued_and_running_calls_saying_the_client_was_closed

A client dropped without ``close()`` closes its sockets as soon as the last reference goes,
without waiting for the garbage collector, and quietly (no ``ResourceWarning``):

  test_a_dropped_client_closes_its_sockets_without_the_garbage_collector
"""

from __future__ import annotations

import gc
import socket
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest
from faultservers import RawServer, ok_response, read_request
from support import BOUND, executor_threads, make_client, wait_until

import qa_min as qa
from qa_min.testing import FakeService, hang, reply


class Review(qa.Questions):
    toxic = qa.YesNo("insults someone", "insults no one")


def in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[BaseException], threading.Event]:
    """Run ``fn`` in a thread; return it, the exceptions it raised, and an Event set when it ends."""
    errors: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors, done


def closing_callback(
    client: qa.Client, done: threading.Event, errors: list[BaseException], where: list[str]
) -> Callable[[Future[Any]], None]:
    def callback(_: Future[Any]) -> None:
        try:
            where.append(threading.current_thread().name)
            client.close()
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    return callback


def test_close_from_another_thread_mid_call(svc: FakeService) -> None:
    svc.script(hang())
    client = make_client(svc.url, retry=qa.RetryPolicy.none)
    call_thread, call_errors, call_done = in_thread(lambda: client.ask("x", Review))
    assert svc.wait_for_requests(1)
    closer, close_errors, closed = in_thread(client.close)
    assert closed.wait(BOUND), "close() did not return"
    assert call_done.wait(BOUND), "the call did not end"
    closer.join(BOUND)
    call_thread.join(BOUND)
    assert close_errors == []
    assert [type(e) for e in call_errors] == [qa.Canceled]
    assert "closed" in str(call_errors[0])
    with pytest.raises(qa.ClientClosed):
        client.list_models()


def test_close_from_a_done_callback_on_a_worker(svc: FakeService) -> None:
    # The call waits in its backoff until the callback is in place, so it ends on the worker.
    go = threading.Event()
    svc.script(reply(503, None))
    client = make_client(svc.url, sleep=lambda seconds, wake: go.wait(BOUND))
    done, errors, where = threading.Event(), list[BaseException](), list[str]()
    call = client.submit(client.list_models)
    assert svc.wait_for_requests(1)
    call.add_done_callback(closing_callback(client, done, errors, where))
    go.set()
    assert done.wait(BOUND), "close() from the callback did not return"
    assert errors == []
    assert where[0].startswith("qa_min"), where  # it ran on the client's own worker thread
    assert isinstance(call.result(timeout=BOUND), qa.ModelList)
    assert wait_until(lambda: not executor_threads())
    with pytest.raises(qa.ClientClosed):
        client.submit(client.list_models)


def test_close_from_a_done_callback_while_another_call_runs(svc: FakeService) -> None:
    svc.script(hang(), reply(200, {"models": []}))
    client = make_client(svc.url, retry=qa.RetryPolicy.none)
    stuck = client.submit(client.ask, "x", Review)
    assert svc.wait_for_requests(1)
    done, errors, where = threading.Event(), list[BaseException](), list[str]()
    quick = client.submit(client.list_models)
    quick.add_done_callback(closing_callback(client, done, errors, where))
    assert done.wait(BOUND), "close() from the callback did not return"
    assert errors == []
    assert list(quick.result(timeout=BOUND)) == []
    with pytest.raises(qa.Canceled):
        stuck.result(timeout=BOUND)
    assert wait_until(lambda: not executor_threads())


def test_close_from_a_callback_that_close_itself_triggers(svc: FakeService) -> None:
    # One worker, busy: the second call is queued. close() cancels it on this thread, which runs
    # its done-callback here, inside close(); that callback closes the client again.
    svc.script(hang())
    client = make_client(svc.url, retry=qa.RetryPolicy.none, max_workers=1)
    running = client.submit(client.ask, "x", Review)
    assert svc.wait_for_requests(1)
    queued = client.submit(client.list_models)
    done, errors, where = threading.Event(), list[BaseException](), list[str]()
    queued.add_done_callback(closing_callback(client, done, errors, where))
    closer, close_errors, closed = in_thread(client.close)
    assert closed.wait(BOUND), "close() did not return"
    assert done.is_set()
    assert errors == close_errors == []
    assert where == [closer.name]
    for call in (running, queued):
        with pytest.raises(qa.Canceled):
            call.result(timeout=BOUND)


def test_close_from_the_calls_own_thread(svc: FakeService) -> None:
    # A backoff sleep is a place user code runs on the calling thread.
    svc.script(reply(503, None), reply(503, None))
    holder: list[qa.Client] = []

    def sleep(seconds: float, wake: threading.Event) -> None:
        holder[0].close()
        assert wake.is_set()  # the close woke this very sleep

    client = make_client(svc.url, sleep=sleep)
    holder.append(client)
    with pytest.raises(qa.Canceled, match="closed"):
        client.list_models()
    assert len(svc.requests) == 1


def test_close_ends_queued_and_running_calls_saying_the_client_was_closed(svc: FakeService) -> None:
    # Nobody cancelled these calls: close() ended them, and each says so, started or not.
    svc.script(hang(), hang())
    client = make_client(svc.url, max_workers=2)
    calls = [client.submit(client.list_models) for _ in range(4)]
    assert svc.wait_for_requests(2)
    client.close()
    errors = [call.exception(timeout=BOUND) for call in calls]
    assert [type(e) for e in errors] == [qa.Canceled] * 4
    assert all("the client was closed" in str(e) for e in errors), [str(e) for e in errors]
    assert [e.diagnostics.attempts for e in errors if isinstance(e, qa.Canceled)] == [1, 1, 0, 0]


@pytest.mark.parametrize("round_", range(5))
def test_close_twice_concurrently(svc: FakeService, round_: int) -> None:
    svc.script(hang(), hang())
    client = make_client(svc.url, retry=qa.RetryPolicy.none)
    submitted = client.submit(client.ask, "x", Review)
    direct_thread, direct_errors, direct_done = in_thread(client.list_models)
    assert svc.wait_for_requests(2)
    barrier = threading.Barrier(2, timeout=BOUND)

    def close_together() -> None:
        barrier.wait()
        client.close()

    closers = [in_thread(close_together) for _ in range(2)]
    for thread, errors, closed in closers:
        assert closed.wait(BOUND), "a concurrent close() did not return"
        thread.join(BOUND)
        assert errors == []
    assert direct_done.wait(BOUND)
    direct_thread.join(BOUND)
    assert [type(e) for e in direct_errors] == [qa.Canceled]
    with pytest.raises(qa.Canceled):
        submitted.result(timeout=BOUND)
    assert wait_until(lambda: not executor_threads())
    client.close()  # and once more, after the fact


def test_a_dropped_client_closes_its_sockets_without_the_garbage_collector() -> None:
    # Nothing of a client refers back to it or to its sender (the rate limiter's log line
    # is a plain function), so dropping the last reference frees the pool and its sockets
    # at once; the garbage collector is off to prove it is not needed.
    closed = threading.Event()

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        if read_request(conn):
            conn.sendall(ok_response(b'{"answers": {"toxic": true}, "usage": {}}'))
            if conn.recv(1) == b"":  # blocks while the client keeps the connection
                closed.set()

    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        with RawServer(handler) as server, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            client = make_client(server.url, api_key="k-0123456789")
            client.ask("some text", Review)
            assert not closed.is_set()
            del client
            assert closed.wait(BOUND), "the dropped client's socket stayed open"
        # Closed by its pool, not left to the socket's own finalizer, which warns "unclosed".
        assert [str(w.message) for w in caught] == []
    finally:
        if was_enabled:
            gc.enable()

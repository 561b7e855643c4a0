"""``Diagnostics.attempts`` counts every time the request was written to the wire.

The quiet resend after a reused keep-alive connection failed is not a retry (no backoff, no
retry budget, whatever the policy) but it is an attempt: the request that went out on the dead
connection may have been read by the server, and then the server counted two.
"""

from __future__ import annotations

import socket
import threading
from typing import Any, Callable

import pytest
from faultservers import OK_RESPONSE, RawServer, close_unanswered, read_request
from rawhttp import ask
from support import BOUND, SleepRecorder, make_recording_client

import qa_min as qa
from qa_min.testing import FakeService, drop, reply, reset


def call_attempts(client: qa.Client, **options: Any) -> tuple[bool, int]:
    _, error, diag = ask(client, **options)
    return error is None, diag.attempts


@pytest.mark.parametrize("fault", [drop, reset], ids=["dropped", "reset"])
def test_request_read_then_dropped_on_a_reused_connection_counts_with_its_resend(
    fault: Callable[[], Any],
) -> None:
    sleep = SleepRecorder()
    with FakeService() as svc, make_recording_client(svc.url, sleep, retry=qa.RetryPolicy.none) as client:
        assert call_attempts(client) == (True, 1)
        svc.script(fault())
        before = len(svc.requests)
        ok, attempts = call_attempts(client)
        assert ok
        assert attempts == len(svc.requests) - before == 2
    assert sleep.seconds == []  # a resend, not a retry


def test_connection_closed_while_idle_is_not_written_to_and_not_counted() -> None:
    with FakeService() as svc, make_recording_client(svc.url) as client:
        call_attempts(client)
        for _ in range(5):
            svc.close_idle_connections()
            before = len(svc.requests)
            assert call_attempts(client) == (True, 1)
            assert len(svc.requests) - before == 1


def test_attempts_add_up_over_resends_and_retries() -> None:
    # Reused connection dropped (1), its resend dropped too (2): a connection failure, retried
    # once by the policy (3), which gets the 503, retried again (4), then the answer.
    with FakeService() as svc, make_recording_client(svc.url) as client:
        call_attempts(client)
        svc.script(drop(), drop(), reply(503, {"detail": "busy"}))
        before = len(svc.requests)
        ok, attempts = call_attempts(client, retry=qa.RetryPolicy(max_retries=3))
        assert ok
        assert attempts == len(svc.requests) - before == 4


def test_exhausted_retries_report_every_request_written() -> None:
    with FakeService() as svc, make_recording_client(svc.url) as client:
        call_attempts(client)
        svc.script(drop(), drop(), drop())
        before = len(svc.requests)
        _, error, diag = ask(client, retry=qa.RetryPolicy(max_retries=1))
        assert type(error) is qa.ConnectionFailed
        assert diag.attempts == len(svc.requests) - before == 3
        assert "(after 3 attempts)" in str(error)


def test_raw_server_closing_a_reused_connection_after_reading_counts_both_requests() -> None:
    counted: list[bytes] = []
    # The second read, then closed without an answer.
    with RawServer(close_unanswered(2, counted)) as server, make_recording_client(server.url) as client:
        assert call_attempts(client) == (True, 1)
        assert call_attempts(client) == (True, 2)
        assert server.connections == 2
    assert len(counted) == 3


def test_the_resend_goes_on_a_fresh_connection_not_on_another_pooled_one() -> None:
    # Two connections kept alive (two calls answered together); the server closes either unanswered
    # at its second request. The resend after the first of them failed opens a new connection
    # (docs/retries.md: "once on a fresh connection"), leaving the other idle one alone.
    both = threading.Barrier(2)
    opened: list[int] = []
    served: list[int] = []
    lock = threading.Lock()

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        with lock:
            index = len(opened)
            opened.append(index)
        if not read_request(conn):
            return
        served.append(index)
        if index < 2:
            both.wait(BOUND)  # the first two connections answer together: both end up pooled
        conn.sendall(OK_RESPONSE)
        if read_request(conn):
            served.append(index)  # a second request on one connection: closed unanswered

    with RawServer(handler) as server, make_recording_client(server.url) as client:
        callers = [threading.Thread(target=ask, args=(client,)) for _ in range(2)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(BOUND)
        assert client._transport.pool.idle_count() == 2
        _, error, diag = ask(client)
        idle = client._transport.pool.idle_count()
    assert error is None
    assert diag.attempts == 2
    assert len(opened) == 3  # the resend's own
    assert served[2] in (0, 1)  # a pooled one read the request, unanswered
    assert served[3:] == [2]  # the new one read it again and answered
    assert idle == 2  # the new one, and the pooled one the resend left alone


def test_one_count_for_diagnostics_history_and_hooks_over_a_resend() -> None:
    # The server reads the second request on the kept-alive connection, then closes it without
    # an answer (as one whose idle timer fired just then): the client writes it again on a
    # fresh connection. Two writes: two attempts for Diagnostics, the history and the hooks.
    served: list[bytes] = []
    handler = close_unanswered(2, served)
    seen: list[tuple[str, int, object]] = []
    hooks = {
        "before_attempt": [lambda event: seen.append((event.stage, event.attempt, None))],
        "after_attempt": [lambda event: seen.append((event.stage, event.attempt, event.status))],
    }
    with RawServer(handler) as server, make_recording_client(server.url, hooks=hooks) as client:
        ask(client)
        seen.clear()
        _, error, diag = ask(client)
        assert error is None
        assert server.connections == 2
    assert len(served) == 3
    assert diag.attempts == len(diag.history) == 2
    assert [(record.number, record.status, record.error) for record in diag.history] == [
        (1, None, "ConnectionFailed"),
        (2, 200, None),
    ]
    assert seen == [
        ("before_attempt", 1, None),
        ("after_attempt", 1, None),
        ("before_attempt", 2, None),
        ("after_attempt", 2, 200),
    ]

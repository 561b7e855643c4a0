"""A bad network, over real sockets: every fault against every retry setting.

The matrix runs one call per (fault, policy) row against either the public ``FakeService`` (its
scripted ``drop``/``reset``/``truncate``/``hang``/``reply`` steps) or a raw-socket server from
``faultservers`` (byte-exact misbehaviour ``http.server`` cannot produce). A fault is followed
by a good answer, so "retried" shows as success on attempt 2 and "not retried" as the fault's
own error after attempt 1.

Faults marked ``warm`` hit a pooled keep-alive connection (one good call comes first): a
reused connection that fails before any response byte is resent once on a fresh connection,
invisibly, which no retry setting may turn into an error or a backoff sleep. The request that
went out on the dead connection is an attempt all the same (the server may have counted it).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import pytest
from faultservers import (
    HTML_502_RESPONSE,
    OK_RESPONSE,
    Handler,
    RawServer,
    answer_then_reset,
    close_before_status,
    garbage_status_line,
    hang_then_close,
    read_request,
    reset_after_request,
    respond_sequence,
    slow_bytes,
    truncated_body,
)
from support import SleepRecorder, make_recording_client

import qa_min as qa
from qa_min import _connection
from qa_min._call import CallState
from qa_min._connection import Connection, Pool, idle_clock
from qa_min._failure import failure
from qa_min._origin import Origin
from qa_min.testing import FakeService, Step, delay, drop, hang, reply, reset, truncate


class Toxic(qa.Questions):
    # faultservers.OK_BODY answers exactly this question.
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


POLICIES: dict[str, Optional[qa.RetryPolicy]] = {
    "retry": None,  # the client's default, RetryPolicy()
    "none": qa.RetryPolicy.none,
    "no-conn-retry": qa.RetryPolicy(retry_connection_errors=False),
}


# -- servers ---------------------------------------------------------------------------------


class Served:
    """A running fault server: its URL, its accepted-connection count, and the fault's trigger."""

    def __init__(
        self, url: str, connections: Callable[[], int], arm: Callable[[], None] = lambda: None
    ) -> None:
        self.url = url
        self.connections = connections
        self.arm = arm


@contextmanager
def fake_service(steps: tuple[Step, ...] = (), close_idle: bool = False) -> Iterator[Served]:
    """A FakeService whose fault is scripted only when armed, after any warm-up call."""
    with FakeService() as svc:

        def arm() -> None:
            if close_idle:
                svc.close_idle_connections()
            svc.script(*steps)

        yield Served(svc.url, lambda: svc.connections, arm)


@contextmanager
def raw_server(handler: Handler) -> Iterator[Served]:
    with RawServer(handler) as server:
        yield Served(server.url, lambda: server.connections)


def ok_then_close(closed: Optional[threading.Event] = None) -> Handler:
    """Answer one request completely, then close: a server whose keep-alive timeout is zero."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        if read_request(conn):
            conn.sendall(OK_RESPONSE)
            if closed is not None:
                # FIN now, so the client's next checkout finds the connection closed.
                conn.shutdown(socket.SHUT_RDWR)
                closed.set()

    return handler


@contextmanager
def closes_after_answering() -> Iterator[Served]:
    """``ok_then_close``, armed once the server has closed the connection it answered on."""
    closed = threading.Event()

    def arm() -> None:
        assert closed.wait(5), "the server did not close the connection it answered on"

    with RawServer(ok_then_close(closed)) as server:
        yield Served(server.url, lambda: server.connections, arm)


def chunked_response(body: bytes) -> bytes:
    """A keep-alive 200 whose body is one chunk: its size is unknown until read."""
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n" % len(body)
        + body
        + b"\r\n0\r\n\r\n"
    )


# -- the fault matrix ------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """One way the network or server misbehaves, and how to set it up."""

    name: str
    serve: Callable[[], Any]  # () -> context manager of Served
    warm: bool = False  # one good call first, so the fault meets a pooled connection
    timeout: Optional[float] = None  # the measured call's timeout


@dataclass(frozen=True)
class Expect:
    """The outcome of the measured call."""

    name: str
    error: Optional[type[qa.QAError]]  # None: it returns an answer
    attempts: int
    transport_error: bool = False
    status: Optional[int] = None
    resent: int = 0  # invisible resends after a reused connection failed: attempts, not retries


OK_AFTER_RETRY = Expect("succeeds-after-retry", None, 2, status=200)
OK_NO_RETRY = Expect("succeeds-without-retry", None, 1, status=200)
OK_RESENT = Expect("succeeds-resent-without-retry", None, 2, status=200, resent=1)
OK_RESENT_AFTER_RETRY = Expect("succeeds-resent-after-retry", None, 3, status=200, resent=1)
CONN_FAILED_RESENT = Expect(
    "connection-failed-resent", qa.ConnectionFailed, 2, transport_error=True, resent=1
)
CONN_FAILED = Expect("connection-failed", qa.ConnectionFailed, 1, transport_error=True)
# A body cut short after its head: the head's status is the last one received.
CONN_FAILED_AFTER_HEAD = Expect(
    "connection-failed-after-head", qa.ConnectionFailed, 1, transport_error=True, status=200
)
CANCELED = Expect("canceled-by-timeout", qa.Canceled, 1)


def _fake(*steps: Step, close_idle: bool = False) -> Callable[[], Any]:
    return lambda: fake_service(steps, close_idle)


def _raw(*items: Union[bytes, Callable[[], Handler]]) -> Callable[[], Any]:
    """A raw server answering requests in order; handler factories are called per server."""
    return lambda: raw_server(
        respond_sequence(*[item if isinstance(item, bytes) else item() for item in items])
    )


FAKE_DROP = Fault("fake-drop", _fake(drop()))
FAKE_RESET = Fault("fake-reset", _fake(reset()))
FAKE_TRUNCATE = Fault("fake-truncate", _fake(truncate()))
FAKE_503 = Fault("fake-503-then-ok", _fake(reply(503, {"detail": "busy"})))
FAKE_HANG = Fault("fake-hang", _fake(hang()), timeout=0.1)  # it never answers: any deadline ends it
FAKE_SLOW = Fault("fake-delay-50ms", _fake(delay(0.05)))
FAKE_IDLE_CLOSED = Fault("fake-idle-conn-closed-by-server", _fake(close_idle=True), warm=True)
FAKE_IDLE_CLOSED_THEN_DROP = Fault(
    "fake-idle-conn-closed-then-fresh-conn-dropped", _fake(drop(), close_idle=True), warm=True
)
FAKE_REUSED_DROP = Fault("fake-reused-conn-dropped-before-response", _fake(drop()), warm=True)
FAKE_REUSED_RESET = Fault("fake-reused-conn-reset-before-response", _fake(reset()), warm=True)
FAKE_REUSED_DROP_TWICE = Fault(
    "fake-reused-conn-dropped-then-fresh-conn-dropped", _fake(drop(), drop()), warm=True
)
FAKE_REUSED_TRUNCATE = Fault("fake-reused-conn-truncated", _fake(truncate()), warm=True)

RAW_RESET = Fault("raw-reset-after-request", _raw(reset_after_request, OK_RESPONSE))
RAW_CLOSE = Fault("raw-close-before-status-line", _raw(close_before_status, OK_RESPONSE))
RAW_TRUNCATED = Fault("raw-truncated-body", _raw(truncated_body, OK_RESPONSE))
RAW_GARBAGE = Fault("raw-garbage-status-line", _raw(garbage_status_line, OK_RESPONSE))
RAW_HANG_CLOSE = Fault("raw-hang-then-close", _raw(lambda: hang_then_close(0.05), OK_RESPONSE))
RAW_HANG = Fault("raw-hang", _raw(lambda: hang_then_close(10.0), OK_RESPONSE), timeout=0.1)
RAW_HTML_502 = Fault("raw-html-502", _raw(HTML_502_RESPONSE, OK_RESPONSE))
RAW_IDLE_CLOSED = Fault("raw-idle-conn-closed-by-server", closes_after_answering, warm=True)
RAW_REUSED_CLOSE = Fault(
    "raw-reused-conn-closed-before-status-line", _raw(OK_RESPONSE, close_before_status), warm=True
)
RAW_REUSED_TRUNCATED = Fault("raw-reused-conn-truncated-body", _raw(OK_RESPONSE, truncated_body), warm=True)
# The head and part of the body, then a reset: a failure after the head, never a stale resend.
RAW_RESET_MID_BODY = Fault(
    "raw-reset-mid-body", _raw(lambda: answer_then_reset(OK_RESPONSE[:-10]), OK_RESPONSE)
)
RAW_REUSED_RESET_MID_BODY = Fault(
    "raw-reused-conn-reset-mid-body",
    _raw(OK_RESPONSE, lambda: answer_then_reset(OK_RESPONSE[:-10])),
    warm=True,
)

SERVER_ERROR_502 = Expect("server-error", qa.ServerError, 1, status=502)
SERVER_ERROR_503 = Expect("server-error", qa.ServerError, 1, status=503)

BODY_CUT_SHORT = (
    FAKE_TRUNCATE,
    FAKE_REUSED_TRUNCATE,
    RAW_TRUNCATED,
    RAW_REUSED_TRUNCATED,
    RAW_RESET_MID_BODY,
    RAW_REUSED_RESET_MID_BODY,
)

MATRIX: list[tuple[Fault, str, Expect]] = [
    # Connection faults: retried by default, fatal without retries or without connection retries.
    *[
        (
            fault,
            policy,
            OK_AFTER_RETRY
            if policy == "retry"
            else CONN_FAILED_AFTER_HEAD
            if fault in BODY_CUT_SHORT
            else CONN_FAILED,
        )
        for fault in (
            FAKE_DROP,
            FAKE_RESET,
            FAKE_TRUNCATE,
            FAKE_IDLE_CLOSED_THEN_DROP,
            FAKE_REUSED_TRUNCATE,
            RAW_RESET,
            RAW_CLOSE,
            RAW_TRUNCATED,
            RAW_GARBAGE,
            RAW_HANG_CLOSE,
            RAW_REUSED_TRUNCATED,
            RAW_RESET_MID_BODY,
            RAW_REUSED_RESET_MID_BODY,
        )
        for policy in POLICIES
    ],
    # Retryable statuses: retry_connection_errors=False does not concern them.
    (FAKE_503, "retry", OK_AFTER_RETRY),
    (FAKE_503, "none", SERVER_ERROR_503),
    (FAKE_503, "no-conn-retry", OK_AFTER_RETRY),
    (RAW_HTML_502, "retry", OK_AFTER_RETRY),
    (RAW_HTML_502, "none", SERVER_ERROR_502),
    (RAW_HTML_502, "no-conn-retry", OK_AFTER_RETRY),
    # A call's timeout covers its retries: a hang is cancelled, never retried.
    (FAKE_HANG, "retry", CANCELED),
    (FAKE_HANG, "none", CANCELED),
    (RAW_HANG, "retry", CANCELED),
    (RAW_HANG, "none", CANCELED),
    # A slow answer is an answer.
    (FAKE_SLOW, "none", OK_NO_RETRY),
    # A pooled connection the server closed while idle is noticed before reuse: one attempt.
    *[(fault, policy, OK_NO_RETRY) for fault in (FAKE_IDLE_CLOSED, RAW_IDLE_CLOSED) for policy in POLICIES],
    # One the server closed after reading the request is resent invisibly, whatever the policy,
    # and the request it read counts as an attempt.
    *[
        (fault, policy, OK_RESENT)
        for fault in (FAKE_REUSED_DROP, FAKE_REUSED_RESET, RAW_REUSED_CLOSE)
        for policy in POLICIES
    ],
    (FAKE_REUSED_DROP_TWICE, "retry", OK_RESENT_AFTER_RETRY),
    (FAKE_REUSED_DROP_TWICE, "none", CONN_FAILED_RESENT),
    (FAKE_REUSED_DROP_TWICE, "no-conn-retry", CONN_FAILED_RESENT),
]


def call(client: qa.Client, **options: Any) -> tuple[Optional[qa.QAError], qa.Diagnostics]:
    diag = qa.Diagnostics()
    try:
        response = client.ask("some text", Toxic, diagnostics=diag, **options)
    except qa.QAError as exc:
        error: qa.QAError = exc
    else:
        assert isinstance(response.answers.toxic, bool)
        return None, diag
    assert error.diagnostics is diag
    return error, diag


@pytest.mark.parametrize(
    ("fault", "policy", "expect"),
    [pytest.param(*row, id=f"{row[0].name}-{row[1]}-{row[2].name}") for row in MATRIX],
)
def test_fault_matrix(fault: Fault, policy: str, expect: Expect) -> None:
    sleep = SleepRecorder()
    with fault.serve() as served, make_recording_client(served.url, sleep) as client:
        if fault.warm:
            warm_error, _ = call(client)
            assert warm_error is None
        served.arm()
        started = time.monotonic()
        error, diag = call(client, retry=POLICIES[policy], timeout=fault.timeout)
        elapsed = time.monotonic() - started
    if expect.error is None:
        assert error is None, f"unexpected {error!r}"
    else:
        assert type(error) is expect.error, f"expected {expect.error.__name__}, got {error!r}"
    assert diag.attempts == expect.attempts
    assert diag.status == expect.status
    if expect.transport_error:
        assert isinstance(diag.transport_error, (OSError, qa.ProtocolError))
        assert error is not None
        assert error.__cause__ is diag.transport_error
    elif expect.error is not None:
        assert diag.transport_error is None
    if expect.error is not qa.Canceled:
        # Exactly one backoff sleep per policy retry; an invisible resend sleeps not.
        assert len(sleep.seconds) == expect.attempts - 1 - expect.resent
    if expect.status == 502:
        assert diag.body is not None
        assert "502 Bad Gateway" in diag.body
        assert "502 Bad Gateway" in str(error)
    if fault.timeout is not None:
        assert elapsed < fault.timeout + 2.0


# -- stale keep-alive connections ------------------------------------------------------------


def test_pooled_connection_closed_by_server_while_idle_succeeds_with_no_error_and_no_retry() -> None:
    sleep = SleepRecorder()
    rounds = 10
    with FakeService() as svc, make_recording_client(svc.url, sleep, retry=qa.RetryPolicy.none) as client:
        assert call(client)[0] is None
        for _ in range(rounds):
            svc.close_idle_connections()
            error, diag = call(client)
            assert error is None
            assert diag.attempts == 1
        assert svc.connections == rounds + 1
        # A request sent on a dead connection never reached the server: no duplicates.
        assert len(svc.requests) == rounds + 1
    assert sleep.seconds == []


@pytest.mark.parametrize(
    ("policy", "expect"),
    [
        pytest.param("none", CONN_FAILED, id="none-connection-failed"),
        pytest.param("no-conn-retry", CONN_FAILED, id="no-conn-retry-connection-failed"),
        pytest.param("retry", OK_AFTER_RETRY, id="retry-succeeds-after-retry"),
    ],
)
def test_failure_of_a_fresh_connection_follows_the_policy(policy: str, expect: Expect) -> None:
    with FakeService() as svc, make_recording_client(svc.url) as client:
        svc.script(drop())
        error, diag = call(client, retry=POLICIES[policy])
        assert svc.connections == expect.attempts
    assert (error is None) == (expect.error is None)
    assert diag.attempts == expect.attempts


@pytest.mark.parametrize("value", [0, 0.0, -1, "1", True, None, float("nan")])
def test_idle_timeout_must_be_a_positive_number(value: object) -> None:
    with pytest.raises(qa.InvalidOption):
        qa.Client(base_url="http://127.0.0.1:9", trust_env=False, idle_timeout=value)  # type: ignore[arg-type]


def wait_for_idle_clock(since: float, seconds: float) -> None:
    """Wait until the pool's clock is ``seconds`` past ``since`` (a clock wait, not a thread wait)."""
    deadline = time.monotonic() + 5.0
    while idle_clock() - since <= seconds:
        assert time.monotonic() < deadline, "the idle clock did not advance"
        time.sleep(0.001)


def test_connection_idle_longer_than_idle_timeout_is_not_reused() -> None:
    idle_timeout = 0.005
    with FakeService() as svc, make_recording_client(svc.url, idle_timeout=idle_timeout) as client:
        for n in range(1, 4):
            assert call(client)[0] is None
            released = idle_clock()  # the connection went back to the pool before the call returned
            assert svc.connections == n
            wait_for_idle_clock(released, idle_timeout)
        assert client._transport.pool.idle_count() == 1
        error, diag = call(client, retry=qa.RetryPolicy.none)
        assert error is None
        assert diag.attempts == 1
        assert svc.connections == 4


def test_connection_idle_within_idle_timeout_is_reused() -> None:
    with FakeService() as svc, make_recording_client(svc.url) as client:
        for _ in range(5):
            assert call(client)[0] is None
        assert svc.connections == 1
        assert client._transport.pool.idle_count() == 1


@pytest.mark.parametrize(("age", "reused"), [(0.0, True), (5.0, True), (5.001, False), (-0.001, False)])
def test_an_idle_connection_is_reused_from_age_0_to_exactly_idle_timeout(
    age: float, reused: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]
    monkeypatch.setattr(_connection, "idle_clock", lambda: now[0])
    pool = Pool(max_idle=1, idle_timeout=5.0, closing=qa.CancelToken())
    ours, theirs = socket.socketpair()
    with ours, theirs:
        conn = Connection(ours, ("k",))
        pool.release(conn)  # idle since now
        now[0] += age
        assert (pool.checkout(("k",)) is conn) is reused


def test_client_sockets_have_tcp_keepalive_enabled() -> None:
    with FakeService() as svc, make_recording_client(svc.url) as client:
        assert call(client)[0] is None
        idle = [conn for stack in client._transport.pool._idle.values() for conn in stack]
        assert len(idle) == 1
        sock = idle[0].sock
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0
        # docs/retries.md: probes after 30 s idle, 3 of them 10 s apart; requests go out unbuffered.
        probes = {"TCP_KEEPIDLE": 30, "TCP_KEEPINTVL": 10, "TCP_KEEPCNT": 3}
        for name, value in probes.items():
            if hasattr(socket, name):
                assert sock.getsockopt(socket.IPPROTO_TCP, getattr(socket, name)) == value, name
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def test_an_idle_connection_whose_socket_is_closed_counts_as_closed_by_the_peer() -> None:
    ours, theirs = socket.socketpair()
    with theirs:
        conn = Connection(ours, ("http", "h", 80, None))
        assert conn.peer_closed() is False  # idle, nothing to read
        ours.close()  # a closed descriptor: polling it raises, and it must not be reused
        assert conn.peer_closed() is True


def test_a_wait_is_given_to_poll_in_milliseconds_never_negative(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[float] = []

    class Poller:
        def register(self, sock: socket.socket, events: int) -> None:
            pass

        def poll(self, timeout: float) -> list[tuple[int, int]]:
            asked.append(timeout)
            return []

    monkeypatch.setattr(_connection, "_poll", Poller)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        assert _connection._wait(ours, True, 0.05) is False
        assert _connection._wait(ours, False, -1.0) is False
    assert asked == [50.0, 0.0]


def test_a_name_with_no_address_is_an_os_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args: [])
    with pytest.raises(OSError, match=r"^no address found for nowhere\.test$"):
        _connection.connect_tcp("nowhere.test", 80, None, lambda: False)


# -- a failed or interrupted response never goes back to the pool ----------------------------

BIG_BODY = b'{"answers": {"toxic": true}, "usage": {}, "padding": "' + b"x" * 2000 + b'"}'
CAP = 500


@dataclass(frozen=True)
class Interruption:
    name: str
    serve: Callable[[], Any]
    error: type[qa.QAError]
    options: tuple[tuple[str, Any], ...] = ()


INTERRUPTIONS = [
    Interruption("truncated-body", _fake(truncate()), qa.ConnectionFailed),
    Interruption("body-over-cap-with-length", _fake(reply(200, BIG_BODY)), qa.InvalidResponse),
    Interruption("body-over-cap-chunked", _raw(OK_RESPONSE, chunked_response(BIG_BODY)), qa.InvalidResponse),
    Interruption(
        "slow-body-timeout",
        _raw(OK_RESPONSE, lambda: slow_bytes(OK_RESPONSE, 0.02)),
        qa.Canceled,
        (("timeout", 0.15),),
    ),
]


@pytest.mark.parametrize("case", INTERRUPTIONS, ids=lambda case: f"{case.name}-not-pooled")
def test_failed_response_is_not_returned_to_the_pool(case: Interruption) -> None:
    with case.serve() as served, make_recording_client(served.url, max_response_bytes=CAP) as client:
        pool = client._transport.pool
        assert call(client)[0] is None
        assert pool.idle_count() == 1
        served.arm()
        error, diag = call(client, retry=qa.RetryPolicy.none, **dict(case.options))
        assert type(error) is case.error
        assert diag.attempts == 1
        assert pool.idle_count() == 0
        assert pool._busy == set()
        # The next call cannot have found the failed connection: it opens a second one.
        assert call(client, retry=qa.RetryPolicy.none)[0] is None
        assert served.connections() == 2
        assert pool.idle_count() == 1


def test_cancelled_read_is_not_returned_to_the_pool() -> None:
    with FakeService() as svc, make_recording_client(svc.url) as client:
        pool = client._transport.pool
        assert call(client)[0] is None
        svc.script(hang())
        token = qa.CancelToken()
        running = client.submit(client.ask, "some text", Toxic, cancel=token, retry=qa.RetryPolicy.none)
        assert svc.wait_for_requests(2)
        token.cancel()
        with pytest.raises(qa.Canceled):
            running.result(timeout=5)
        assert pool.idle_count() == 0
        assert pool._busy == set()
        assert call(client, retry=qa.RetryPolicy.none)[0] is None
        assert svc.connections == 2


def test_response_under_the_cap_is_read_and_pooled() -> None:
    with raw_server(respond_sequence(*[chunked_response(b'{"answers": {"toxic": false}}')] * 3)) as served:
        with make_recording_client(served.url, max_response_bytes=CAP) as client:
            for _ in range(3):
                assert call(client)[0] is None
            assert client._transport.pool.idle_count() == 1
        assert served.connections() == 1


def test_request_dropped_on_a_reused_connection_is_resent_once_without_spending_budget() -> None:
    budget = qa.RetryBudget(capacity=5, retry_cost=5, success_refund=0)
    sleep = SleepRecorder()
    with FakeService() as svc, make_recording_client(svc.url, sleep, retry_budget=budget) as client:
        assert call(client)[0] is None
        svc.script(drop())
        error, diag = call(client)
        assert error is None
        # warm-up, the dropped request, its resend on a second connection: the server counted
        # both of this call's requests, and so does the call.
        assert len(svc.requests) == 3
        assert diag.attempts == 2
        assert svc.connections == 2
    assert budget.tokens == 5
    assert sleep.seconds == []


BIG_503 = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n"
    % len(BIG_BODY)
    + BIG_BODY
)


@pytest.mark.parametrize(
    ("policy", "expect"),
    [
        pytest.param("retry", OK_AFTER_RETRY, id="retry-succeeds-after-retry"),
        pytest.param("none", SERVER_ERROR_503, id="none-server-error"),
    ],
)
def test_error_status_with_body_over_cap_is_handled_as_its_status(policy: str, expect: Expect) -> None:
    # The cap protects memory, not the status: a proxy's oversized 503 page is still a 503.
    with raw_server(respond_sequence(BIG_503, OK_RESPONSE)) as served:
        with make_recording_client(served.url, max_response_bytes=CAP) as client:
            error, diag = call(client, retry=POLICIES[policy])
            assert client._transport.pool._busy == set()
        if expect.error is None:
            assert error is None, repr(error)
        else:
            assert type(error) is expect.error, repr(error)
        assert diag.attempts == expect.attempts
        assert diag.status == expect.status
        assert served.connections() == expect.attempts


@pytest.mark.parametrize(
    "cut", [20, 57, -4], ids=["in-status-line-headers", "mid-headers", "before-blank-line"]
)
def test_response_cut_inside_headers_is_a_dropped_connection_not_an_empty_200(cut: int) -> None:
    # http.client reads end-of-stream as the end of the headers; without a check, a cut header
    # block would pass for a complete 200 with an empty body.
    head_end = OK_RESPONSE.index(b"\r\n\r\n") + 4
    partial = OK_RESPONSE[: head_end + cut] if cut < 0 else OK_RESPONSE[:cut]

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        if read_request(conn):
            conn.sendall(partial)

    with RawServer(handler) as server, make_recording_client(server.url) as client:
        diagnostics = qa.Diagnostics()
        with pytest.raises(qa.ConnectionFailed):
            client.list_models(retry=qa.RetryPolicy.none, diagnostics=diagnostics)
        assert diagnostics.attempts == 1
        assert diagnostics.transport_error is not None


# -- a socket's timeout is the call's deadline -----------------------------------------------


def test_a_socket_timeout_just_short_of_the_deadline_is_the_calls_timeout() -> None:
    # Only the deadline sets a socket's timeout, and the socket's clock may fire a hair before
    # time.monotonic() reaches it: the call has expired all the same. Canceled naming the
    # call's timeout, never a dropped connection to retry (no real socket can time that).
    error = socket.timeout("timed out")  # TimeoutError itself since Python 3.10
    origin = Origin("http://127.0.0.1:9")
    got = failure(error, origin, CallState(None, 60.0))
    assert type(got) is qa.Canceled
    assert str(got) == "the call's timeout of 60 s expired"
    # A MockTransport handler's TimeoutError is its dropped connection; a call with no deadline
    # set no socket timeout, so one is a dropped connection too.
    for mocked, timeout in ((True, 60.0), (False, None)):
        dropped = failure(error, origin, CallState(None, timeout), mocked=mocked)
        assert type(dropped) is qa.ConnectionFailed, (mocked, timeout)
        assert dropped.retryable
        assert dropped.diagnostics.transport_error is error


def test_a_connected_socket_is_handed_over_blocking() -> None:
    # connect_tcp connects without blocking (to look at the cancel token) and hands over blocking.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        sock = _connection.connect_tcp("127.0.0.1", server.getsockname()[1], None, lambda: False)
        with sock:
            assert sock.gettimeout() is None


def test_an_exchange_past_its_deadline_sends_nothing() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        conn = Connection(ours, ("http", "h", 80, None))
        with pytest.raises(_connection.Expired):
            conn.exchange(b"GET / HTTP/1.1\r\n\r\n", "GET", time.monotonic() - 1.0, 64)
        assert conn.sent is False
        theirs.setblocking(False)
        with pytest.raises(BlockingIOError):
            theirs.recv(1)


def test_a_request_the_server_does_not_read_ends_at_the_deadline() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        conn = Connection(ours, ("http", "h", 80, None))
        started = time.monotonic()
        with pytest.raises(socket.timeout):  # more than the socket buffers hold, never read
            conn.exchange(b"POST / HTTP/1.1\r\n\r\n" + b"x" * 4_000_000, "POST", started + 0.02, 64)
        assert conn.sent is False
        assert time.monotonic() - started < 5.0

from __future__ import annotations

import http.client
import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from faultservers import (
    HTML_502_RESPONSE,
    OK_BODY,
    OK_RESPONSE,
    FullBacklogServer,
    RawServer,
    close_before_status,
    garbage_status_line,
    hang_then_close,
    html_502,
    never_accept,
    ok_response,
    read_request,
    reset_after_request,
    respond_sequence,
    slow_bytes,
    truncated_body,
)

REQUEST_BODY = b'{"question": "toxic?"}'


@contextmanager
def client(server: RawServer, timeout: float = 5.0) -> Iterator[http.client.HTTPConnection]:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    try:
        yield conn
    finally:
        conn.close()


def post(conn: http.client.HTTPConnection) -> http.client.HTTPResponse:
    conn.request("POST", "/v1/answers", body=REQUEST_BODY)
    return conn.getresponse()


def test_ok_response_is_well_formed() -> None:
    response = ok_response(b"{}", extra_headers=b"X-Request-Id: 7\r\n")
    assert response == (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nX-Request-Id: 7\r\n\r\n{}"
    )
    assert OK_RESPONSE.endswith(b"\r\n\r\n" + OK_BODY)


def test_read_request_reads_exactly_one_request() -> None:
    first = b"POST / HTTP/1.1\r\nHost: x\r\ncontent-length: 5\r\n\r\nhello"
    second = b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n"
    a, b = socket.socketpair()
    with a, b:
        a.sendall(first + second)
        assert read_request(b) == first
        assert read_request(b) == second
        a.sendall(b"GET / HTTP/1.1\r\n")
        a.shutdown(socket.SHUT_WR)
        assert read_request(b) == b""


def test_read_request_finds_terminator_split_across_reads() -> None:
    request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    a, b = socket.socketpair()
    with a, b:
        result: list[bytes] = []
        reader = threading.Thread(target=lambda: result.append(read_request(b)))
        reader.start()
        a.sendall(request[:-2])
        # Wait until the reader has consumed the first part, so the terminator
        # really straddles two reads.
        deadline = time.monotonic() + 5
        while select.select([b], [], [], 0)[0]:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        a.sendall(request[-2:])
        reader.join(5)
        assert result == [request]


def test_reset_after_request() -> None:
    with RawServer(reset_after_request()) as server, client(server) as conn:
        with pytest.raises(ConnectionResetError) as excinfo:
            post(conn)
        assert not isinstance(excinfo.value, http.client.RemoteDisconnected)


def test_close_before_status() -> None:
    server = RawServer(close_before_status())
    with server, client(server) as conn, pytest.raises(http.client.RemoteDisconnected):
        post(conn)


def test_truncated_body() -> None:
    with RawServer(truncated_body()) as server, client(server) as conn:
        response = post(conn)
        assert response.status == 200
        with pytest.raises(http.client.IncompleteRead) as excinfo:
            response.read()
        assert excinfo.value.partial == b'{"answers"'
        assert excinfo.value.expected == 90


def test_garbage_status_line() -> None:
    with RawServer(garbage_status_line()) as server, client(server) as conn:
        with pytest.raises(http.client.BadStatusLine, match="HELLO WORLD") as excinfo:
            post(conn)
        assert not isinstance(excinfo.value, http.client.RemoteDisconnected)


def test_hang_then_close() -> None:
    with RawServer(hang_then_close(seconds=0.1)) as server, client(server) as conn:
        started = time.monotonic()
        with pytest.raises(http.client.RemoteDisconnected):
            post(conn)
        assert time.monotonic() - started >= 0.05


def test_html_502_keeps_connection_alive() -> None:
    with RawServer(html_502()) as server, client(server) as conn:
        for _ in range(2):
            response = post(conn)
            assert response.status == 502
            assert response.getheader("Content-Type") == "text/html"
            assert b"<h1>502 Bad Gateway</h1>" in response.read()
        assert server.connections == 1


def test_slow_bytes_delivers_whole_response() -> None:
    interval = 0.001
    with RawServer(slow_bytes(interval=interval)) as server, client(server) as conn:
        started = time.monotonic()
        response = post(conn)
        assert response.status == 200
        assert response.read() == OK_BODY
        assert time.monotonic() - started >= (len(OK_RESPONSE) - 1) * interval


def test_respond_sequence_over_keep_alive() -> None:
    custom = ok_response(b'{"n": 2}')
    with RawServer(respond_sequence(HTML_502_RESPONSE, custom)) as server, client(server) as conn:
        first = post(conn)
        assert first.status == 502
        first.read()
        second = post(conn)
        assert second.read() == b'{"n": 2}'
        third = post(conn)
        assert third.read() == OK_BODY
        assert server.connections == 1


def test_respond_sequence_handler_item_takes_over_connection() -> None:
    handler = respond_sequence(close_before_status(), HTML_502_RESPONSE)
    with RawServer(handler) as server, client(server) as conn:
        with pytest.raises(http.client.RemoteDisconnected):
            post(conn)
        # http.client reconnects by itself; the sequence continues on the new connection.
        second = post(conn)
        assert second.status == 502
        second.read()
        assert post(conn).read() == OK_BODY
        assert server.connections == 2


def test_exit_wakes_blocked_handlers_and_joins_threads() -> None:
    before = threading.active_count()
    entered = threading.Event()
    waiter = hang_then_close(seconds=60)

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        entered.set()
        waiter(conn, stop)

    with socket.socket() as idle, socket.socket() as hanging:
        started = time.monotonic()
        with RawServer(handler) as server:
            idle.connect((server.host, server.port))
            assert entered.wait(5)
            entered.clear()
            hanging.connect((server.host, server.port))
            hanging.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert entered.wait(5)
            assert server.connections == 2
            # Accept thread plus one per connection.
            assert threading.active_count() == before + 3
        assert time.monotonic() - started < 5
        assert threading.active_count() == before
        # The server closed its ends, so both clients see EOF.
        assert idle.recv(1) == b""
        assert hanging.recv(1) == b""


def test_exit_interrupts_slow_bytes() -> None:
    server = RawServer(slow_bytes(interval=60)).__enter__()
    with socket.create_connection((server.host, server.port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(100) == b"H"
        started = time.monotonic()
        server.__exit__(None, None, None)
        assert time.monotonic() - started < 5
        assert sock.recv(100) == b""


def test_handler_error_is_reported_at_exit() -> None:
    def broken(conn: socket.socket, stop: threading.Event) -> None:
        raise ValueError("boom")

    server = RawServer(broken).__enter__()
    with socket.create_connection((server.host, server.port), timeout=5) as sock:
        assert sock.recv(1) == b""
    with pytest.raises(RuntimeError, match="handler raised") as excinfo:
        server.__exit__(None, None, None)
    assert isinstance(excinfo.value.__cause__, ValueError)


def test_full_backlog_connect_hangs() -> None:
    before = threading.active_count()
    with never_accept() as server:
        assert isinstance(server, FullBacklogServer)
        if not server.saturated:
            pytest.skip("platform keeps completing connects to a full accept queue")
        try:
            # The wait after which never_accept() judged a filler's connect stuck (its settle).
            sock = socket.create_connection((server.host, server.port), timeout=0.2)
        except socket.timeout:
            pass
        else:
            sock.close()
            pytest.skip("platform completed a connect to a full accept queue")
    assert threading.active_count() == before

"""A response sent before the request body was read is that response, whatever the timing.

The server reads only the request head, answers (a 401, a 413) and closes without reading the
body. A small body has already arrived, so the close resets a connection the client is reading
from; a large one fills the socket buffers, so the client's send fails first (EPIPE or
ECONNRESET) with the answer waiting in its receive buffer. Both must give the answer. Only when
no byte of a response can be read is it a connection failure.
"""

from __future__ import annotations

import socket
import ssl
import threading
from typing import Optional

import pytest
from faultservers import OK_RESPONSE, RawServer, answer_early, respond_sequence
from rawhttp import Toxic, ask, response, serving
from support import no_sleep
from tlshelpers import Certs

import qa_min as qa

SIZES = [10, 2_000, 65_536, 262_144, 1_048_576]
RUNS = 20
DETAIL = '{"detail": "invalid API key"}'
# A server that closes after answering says so; without it see the last test of this group.
UNAUTHORIZED = response("401 Unauthorized", ["Connection: close"], DETAIL.encode())


@pytest.mark.parametrize("reset", [False, True], ids=["close", "reset"])
@pytest.mark.parametrize("size", SIZES, ids=[f"{s}B" for s in SIZES])
def test_early_401_is_read_for_every_body_size_on_every_run(size: int, reset: bool) -> None:
    state = "x" * size
    with serving(answer_early(UNAUTHORIZED, reset=reset), retry=None) as (server, client):
        outcomes = [outcome(client, state) for _ in range(RUNS)]
    assert outcomes == [("Unauthorized", 401, DETAIL, 1)] * RUNS
    assert server.connections == RUNS  # never retried


def test_early_401_that_does_not_announce_the_close_is_read_too() -> None:
    # Its connection looks reusable, so the next call may write to it while the server is
    # closing it: that request is resent on a fresh connection (and counted), never lost.
    data = response("401 Unauthorized", body=DETAIL.encode())
    with serving(answer_early(data), retry=None) as (_, client):
        outcomes = [outcome(client, "x" * size)[:3] for size in SIZES for _ in range(4)]
    assert outcomes == [("Unauthorized", 401, DETAIL)] * len(outcomes)


def outcome(client: qa.Client, state: str) -> tuple[str, Optional[int], Optional[str], int]:
    diag = qa.Diagnostics()
    try:
        client.ask(state, Toxic, diagnostics=diag)
    except qa.QAError as exc:
        return type(exc).__name__, diag.status, diag.body, diag.attempts
    return "answer", diag.status, diag.body, diag.attempts


@pytest.mark.parametrize("size", [10, 1_048_576], ids=["10B", "1MB"])
def test_early_413_without_content_length_is_read_to_the_close(size: int) -> None:
    page = b"<html><title>413 Request Entity Too Large</title></html>"
    data = response(
        "413 Payload Too Large", ["Connection: close", "Content-Type: text/html"], page, length=None
    )
    with serving(answer_early(data)) as (_, client):
        diag = qa.Diagnostics()
        with pytest.raises(qa.UnexpectedStatus) as caught:
            client.ask("x" * size, Toxic, diagnostics=diag)
    assert caught.value.status == 413
    assert "413 Request Entity Too Large" in str(caught.value)
    assert diag.body == page.decode()


def test_early_answer_on_a_reused_connection_is_that_answer() -> None:
    # One call keeps the connection alive; the next, with a large body, is refused by its head.
    with serving(respond_sequence(OK_RESPONSE, answer_early(UNAUTHORIZED))) as (server, client):
        assert ask(client)[0] is True
        with pytest.raises(qa.Unauthorized):
            client.ask("x" * 1_048_576, Toxic)
    assert server.connections == 1


@pytest.mark.parametrize("size", [10, 1_048_576], ids=["10B", "1MB"])
def test_no_answer_at_all_is_a_connection_failure(size: int) -> None:
    with serving(answer_early(b"", reset=True)) as (_, client):
        diag = qa.Diagnostics()
        with pytest.raises(qa.ConnectionFailed) as caught:
            client.ask("x" * size, Toxic, diagnostics=diag)
    assert diag.status is None
    assert isinstance(diag.transport_error, OSError)
    assert caught.value.__cause__ is diag.transport_error


def test_no_answer_while_a_large_body_is_still_being_sent_is_a_connection_failure() -> None:
    # 16 MiB cannot fit in the socket buffers: the reset reaches the client while it sends.
    with serving(answer_early(b"", reset=True)) as (_, client):
        diag = qa.Diagnostics()
        with pytest.raises(qa.ConnectionFailed):
            client.ask("x" * 16 * 2**20, Toxic, diagnostics=diag)
    assert isinstance(diag.transport_error, ConnectionError)


def test_half_an_early_answer_is_a_connection_failure() -> None:
    with serving(answer_early(b"HTTP/1.1 401 Unauthorized\r\nContent-Ty", reset=True)) as (_, client):
        diag = qa.Diagnostics()
        with pytest.raises(qa.ConnectionFailed) as caught:
            client.ask("x" * 16 * 2**20, Toxic, diagnostics=diag)
    assert diag.status is None
    assert "headers" in str(caught.value)


def test_cancel_while_a_large_body_is_being_sent_is_canceled_not_an_answer() -> None:
    # The server reads nothing: the client's send blocks until the cancel shuts the socket.
    reading = threading.Event()

    def silent(conn: socket.socket, stop: threading.Event) -> None:
        reading.set()
        stop.wait(10)

    with serving(silent) as (_, client):
        token = qa.CancelToken()

        def cancel_once_connected() -> None:
            if reading.wait(5):
                token.cancel()

        canceller = threading.Thread(target=cancel_once_connected)
        canceller.start()
        try:
            with pytest.raises(qa.Canceled):
                client.ask("x" * 64 * 2**20, Toxic, cancel=token)
        finally:
            canceller.join(5)
        assert client._transport.pool.idle_count() == 0


@pytest.mark.parametrize(
    ("size", "runs"), [(10, RUNS), (1_048_576, RUNS), (16 * 2**20, 5)], ids=["10B", "1MB", "16MB"]
)
def test_early_401_over_tls_is_read(certs: Certs, size: int, runs: int) -> None:
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(certs.server_cert, certs.server_key)

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        # Without NODELAY the answer could wait behind Nagle's algorithm for an ACK and then be
        # thrown away by the reset in the server's own kernel: no client could read it.
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with server_context.wrap_socket(conn, server_side=True) as tls:
            head = b""
            while b"\r\n\r\n" not in head:
                data = tls.recv(4096)
                if not data:
                    return
                head += data
            tls.sendall(UNAUTHORIZED)

    context = ssl.create_default_context(cafile=str(certs.ca))
    with RawServer(handler) as server:
        url = f"https://127.0.0.1:{server.port}"
        with qa.Client(base_url=url, ssl_context=context, trust_env=False, sleep=no_sleep) as client:
            outcomes = [outcome(client, "x" * size) for _ in range(runs)]
    assert outcomes == [("Unauthorized", 401, DETAIL, 1)] * runs

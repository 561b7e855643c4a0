"""The asyncio connection reads responses as the threaded one does: the same reader, two drivers.

``_aio.AioConnection`` feeds ``_protocol``'s reader from ``data_received``; ``_connection.Connection``
feeds it from ``recv``. For each case the same bytes go to both: to the threaded connection over
a socket pair (then closed), to the asyncio one in memory, whole and one byte at a time, then
the end of the stream. Both must give the same (status, fields, body, reusable) or fail with
the same error class, and the asyncio one never before the response is complete.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any, Optional, Union

import pytest

from qa_min._aio import AioConnection
from qa_min._connection import Connection

LIMIT = 64
OK = b'{"answers": {}}'
CASES: dict[str, bytes] = {
    "content-length": b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n" + OK,
    "bare line feeds": b"HTTP/1.1 200 OK\nContent-Length: 15\n\n" + OK,
    "interim 100 and 103": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early\r\nLink: x\r\n\r\n"
    b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n" + OK,
    "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n"
    + OK[:5]
    + b"\r\na\r\n"
    + OK[5:]
    + b"\r\n0\r\n\r\n",
    "until close": b"HTTP/1.1 200 OK\r\n\r\n" + OK,
    "no body 204": b"HTTP/1.1 204 No Content\r\n\r\n",
    "connection close": b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 15\r\n\r\n" + OK,
    "error with body": b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy",
    "error over the cap": b"HTTP/1.1 500 X\r\nContent-Length: 100\r\n\r\n" + b"e" * 100,
    "error cut short": b"HTTP/1.1 500 X\r\nContent-Length: 10\r\n\r\nbus",
    "299 cut short": b"HTTP/1.1 299 X\r\nContent-Length: 10\r\n\r\nbus",  # a 2xx: fails
    "300 cut short": b"HTTP/1.1 300 X\r\nContent-Length: 10\r\n\r\nbus",  # not a 2xx: answered
    "error badly framed": b"HTTP/1.1 500 X\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "2xx over the cap": b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 100,
    "2xx until close over the cap": b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 100,
    "truncated body": b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n" + OK[:7],
    "truncated head": b"HTTP/1.1 200 OK\r\nContent-Len",
    "nothing": b"",
    "garbage status line": b"HTTPX 200 OK\r\n\r\n",
    "bad chunk size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "extra bytes after": b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n" + OK + b"HTTP/1.1",
}

Outcome = Union[tuple[Any, ...], str]
# At the edges of 2xx, a body cut short fails the call (299) or only explains the status (300).
EDGES: dict[str, Outcome] = {
    "299 cut short": "IncompleteMessage",
    "300 cut short": (300, [("Content-Length", "10")], b"bus", False),
}


def threaded(data: bytes) -> Outcome:
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(data)
        theirs.shutdown(socket.SHUT_WR)  # the end of the stream, the request still accepted
        conn = Connection(ours, ("http", "h", 80, None))
        try:
            status, headers, body, reusable = conn.exchange(b"GET / HTTP/1.1\r\n\r\n", "GET", None, LIMIT)
        except Exception as exc:
            return type(exc).__name__
        return status, list(headers.items()), body, reusable
    finally:
        ours.close()
        theirs.close()


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""

    def write(self, data: Any) -> None:
        self.written += bytes(data)

    def is_closing(self) -> bool:
        return False

    def abort(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


def on_asyncio(pieces: list[bytes]) -> tuple[Outcome, bool]:
    """The outcome, and whether it came before the last piece."""

    async def main() -> tuple[Outcome, bool]:
        conn = AioConnection(("http", "h", 80, None))
        conn.connection_made(FakeTransport())
        future = conn.send(b"GET / HTTP/1.1\r\n\r\n", "GET", LIMIT)
        early = False
        for number, piece in enumerate(pieces):
            conn.data_received(piece)  # the loop delivers what comes, answered or not
            early = early or (future.done() and any(pieces[number + 1 :]))
        if not future.done():
            conn.eof_received()
            conn.connection_lost(None)
        try:
            status, headers, body, reusable = await future
        except Exception as exc:
            return type(exc).__name__, early
        return (status, list(headers.items()), body, reusable and not conn.dirty), early

    return asyncio.run(main())


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("split", ["whole", "bytewise"])
def test_both_connections_read_the_same(name: str, split: str) -> None:
    data = CASES[name]
    pieces = [data] if split == "whole" else [data[i : i + 1] for i in range(len(data))]
    outcome, early = on_asyncio(pieces or [b""])
    expected = threaded(data)
    assert outcome == expected
    assert EDGES.get(name, expected) == expected
    # Only a refusal, or a body cut at the cap or at its first bad byte, ends before the bytes do.
    assert not early or isinstance(outcome, str) or outcome[3] is False


def test_bytes_after_the_response_make_the_connection_unfit() -> None:
    async def main() -> tuple[bool, bool]:
        conn = AioConnection(("http", "h", 80, None))
        conn.connection_made(FakeTransport())
        future = conn.send(b"GET / HTTP/1.1\r\n\r\n", "GET", LIMIT)
        conn.data_received(CASES["content-length"])
        reusable = (await future)[3]
        conn.data_received(b"HTTP/1.1 200 OK\r\n")  # nobody asked
        return reusable, conn.dirty

    assert asyncio.run(main()) == (True, True)


def test_a_tunnel_refuses_bytes_before_the_tls_handshake() -> None:
    from qa_min._aio import open_tunnel
    from qa_min._http import TunnelBroken

    async def main(answer: bytes, unasked: bytes = b"") -> Optional[str]:
        conn = AioConnection(("https", "h", 443, ("p", 8080)))
        conn.connection_made(FakeTransport())
        if unasked:
            conn.data_received(unasked)  # the proxy spoke before it was asked
        loop = asyncio.get_running_loop()
        loop.call_soon(conn.data_received, answer)
        try:
            await open_tunnel(conn, "h:443", b"", LIMIT)
        except TunnelBroken as exc:  # the proxy's failure: the transport names the proxy
            return f"{type(exc.error).__name__}: {exc.error}"
        return None

    assert asyncio.run(main(b"HTTP/1.1 200 Connection established\r\n\r\n")) is None
    refused = asyncio.run(main(b"HTTP/1.1 200 OK\r\n\r\n\x16\x03\x01"))
    assert refused == "MalformedHead: the proxy sent data before the TLS handshake"
    spoke_first = asyncio.run(main(b"HTTP/1.1 200 Connection established\r\n\r\n", b"\x16\x03\x01"))
    assert spoke_first == "MalformedHead: the proxy sent data before the TLS handshake"


def test_an_idle_connection_whose_socket_is_closed_counts_as_closed_by_the_peer() -> None:
    ours, theirs = socket.socketpair()

    class SocketTransport(FakeTransport):
        def get_extra_info(self, name: str, default: Any = None) -> Any:
            return ours if name == "socket" else default

    with theirs:
        conn = AioConnection(("http", "h", 80, None))
        assert conn.peer_closed() is False  # not connected yet: no socket to look at
        conn.connection_made(SocketTransport())
        assert conn.peer_closed() is False  # idle, nothing to read
        ours.close()  # a closed descriptor: polling it raises, and it must not be reused
        assert conn.peer_closed() is True


@pytest.mark.parametrize("status", [299, 300])
def test_a_connect_answered_with_a_2xx_opens_the_tunnel_and_a_300_refuses_it(status: int) -> None:
    from qa_min._aio import open_tunnel
    from qa_min._http import TunnelRefused

    async def main() -> Optional[int]:
        conn = AioConnection(("https", "h", 443, ("p", 8080)))
        conn.connection_made(FakeTransport())
        answer = f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n".encode()
        asyncio.get_running_loop().call_soon(conn.data_received, answer)
        try:
            await open_tunnel(conn, "h:443", b"", LIMIT)
        except TunnelRefused as exc:
            return exc.status
        return None

    assert asyncio.run(main()) == (None if status == 299 else 300)


def test_an_exchange_waiting_on_an_aborted_connection_fails_with_stopped() -> None:
    async def main() -> str:
        conn = AioConnection(("http", "h", 80, None))
        conn.connection_made(FakeTransport())
        future = conn.send(b"GET / HTTP/1.1\r\n\r\n", "GET", LIMIT)
        conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n{")
        conn.abort()
        conn.connection_lost(None)  # the end the abort makes, not the server's
        try:
            await future
        except Exception as exc:
            return type(exc).__name__
        return "answered"

    assert asyncio.run(main()) == "Stopped"


def test_an_answered_connection_keeps_no_part_of_the_body_it_handed_over() -> None:
    # An idle connection in the pool holds nothing of its last answer (up to max_body bytes each).
    async def main() -> list[bytes]:
        conn = AioConnection(("http", "h", 80, None))
        conn.connection_made(FakeTransport())
        future = conn.send(b"GET / HTTP/1.1\r\n\r\n", "GET", LIMIT)
        conn.data_received(CASES["content-length"])
        assert (await future)[2] == OK
        return conn._parts

    assert asyncio.run(main()) == []

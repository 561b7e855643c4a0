"""The asyncio client's response feed (``_aio._Feed``) reads as the threaded client's reader does.

The feed gets bytes as the loop delivers them and must know when a response is whole; it then
reads it with ``_response``'s reader. Each case is fed whole and one byte at a time, then the
end of the stream, and must give what ``read_response`` gives for the same bytes from a stream
(the same status, fields, body and reusability, or the same error class), and never an answer
before the response is complete.
"""

from __future__ import annotations

import io
from typing import Any, Union

import pytest

from qa_min._aio import _Feed
from qa_min._response import read_response

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
    "chunked with trailers": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nf\r\n"
    + OK
    + b"\r\n0\r\nX-T: 1\r\n\r\n",
    "until close": b"HTTP/1.1 200 OK\r\n\r\n" + OK,
    "no body 204": b"HTTP/1.1 204 No Content\r\n\r\n",
    "connection close": b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 15\r\n\r\n" + OK,
    "http/1.0": b"HTTP/1.0 200 OK\r\nContent-Length: 15\r\n\r\n" + OK,
    "error with body": b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy",
    "error over the cap": b"HTTP/1.1 500 X\r\nContent-Length: 100\r\n\r\n" + b"e" * 100,
    "error until close over the cap": b"HTTP/1.1 500 X\r\n\r\n" + b"e" * 100,
    "error chunked cut": b"HTTP/1.1 500 X\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbusy",
    "2xx over the cap": b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 100,
    "2xx chunked over the cap": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n"
    + b"x" * 100
    + b"\r\n0\r\n\r\n",
    "2xx until close over the cap": b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 100,
    "truncated body": b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n" + OK[:7],
    "truncated head": b"HTTP/1.1 200 OK\r\nContent-Len",
    "nothing": b"",
    "garbage status line": b"HTTPX 200 OK\r\n\r\n",
    "bad content-length": b"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n" + OK,
    "bad chunk size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "extra bytes after": b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n" + OK + b"HTTP/1.1",
}

Outcome = Union[tuple[Any, ...], str]


def by_reader(data: bytes) -> Outcome:
    try:
        status, headers, body, reusable = read_response(io.BufferedReader(io.BytesIO(data)), LIMIT)
    except Exception as exc:
        return type(exc).__name__
    return status, list(headers.items()), body, reusable


def by_feed(pieces: list[bytes]) -> tuple[Outcome, bool]:
    """The feed's outcome, and whether it answered before it had every byte."""
    feed = _Feed(LIMIT)
    try:
        for number, piece in enumerate(pieces):
            result = feed.receive(piece)
            if result is not None:
                early = number < len(pieces) - 1 and sum(map(len, pieces[number + 1 :])) > 0
                return _shown(result, feed.extra), early
        return _shown(feed.receive_eof(), feed.extra), False
    except Exception as exc:
        return type(exc).__name__, False


def _shown(result: tuple[Any, ...], extra: bool) -> Outcome:
    status, headers, body, reusable = result
    return status, list(headers.items()), body, reusable and not extra


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("split", ["whole", "bytewise"])
def test_the_feed_reads_as_the_stream_reader_does(name: str, split: str) -> None:
    data = CASES[name]
    pieces = [data] if split == "whole" else [data[i : i + 1] for i in range(len(data))]
    outcome, early = by_feed(pieces or [b""])
    expected = by_reader(data)
    if name == "extra bytes after":
        # The reader leaves them on the stream; the feed notes them when they came with the
        # response, and the connection (``dirty``) when they come after it.
        assert isinstance(expected, tuple)
        assert isinstance(outcome, tuple)
        assert outcome[:3] == expected[:3]
        assert outcome[3] is (split == "bytewise")
        return
    if name.startswith(
        ("2xx over the cap", "2xx chunked over", "error over the cap", "error until close over")
    ):
        # Refused or cut as soon as the cap is passed: the rest need not arrive.
        assert outcome == expected
        return
    assert outcome == expected
    assert not early


def test_a_tunnel_head_ends_the_response_and_notes_early_bytes() -> None:
    feed = _Feed(LIMIT, tunnel=True)
    assert feed.receive(b"HTTP/1.1 200 Connection established\r\n") is None
    result = feed.receive(b"\r\n")
    assert result is not None
    assert result[0] == 200
    assert feed.extra is False
    early = _Feed(LIMIT, tunnel=True)
    assert early.receive(b"HTTP/1.1 200 OK\r\n\r\n\x16\x03") is not None
    assert early.extra is True
    refused = _Feed(LIMIT, tunnel=True)
    assert refused.receive(b"HTTP/1.1 407 Auth\r\nContent-Length: 2\r\n\r\n") is None
    assert refused.receive(b"no") == (407, refused_headers(), b"no", True)


def refused_headers() -> Any:
    from qa_min._diagnostics import ResponseHeaders

    return ResponseHeaders([("Content-Length", "2")])


def test_a_head_that_never_ends_is_refused_at_its_limit() -> None:
    from qa_min._aio import _HEAD_LIMIT
    from qa_min._response import MalformedHead

    feed = _Feed(LIMIT)
    feed.receive(b"HTTP/1.1 200 OK\r\n")
    line = b"X-Long: " + b"a" * 1000 + b"\r\n"
    for _ in range(_HEAD_LIMIT // len(line)):
        assert feed.receive(line) is None
    with pytest.raises(MalformedHead):
        feed.receive(line * 2)

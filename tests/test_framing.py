"""``max_response_bytes`` holds for every framing, and bad framing ends a call at once.

Content-Length, chunked (sizes, extensions, trailers) and close-delimited bodies, each at
exactly the limit and one past it; chunk-size lines that are negative, not hex, overflowing or
too long, refused as soon as they arrive while the server keeps the connection open; error
statuses whose body cannot be read whole; peak memory of a refused 200 MB or endless body,
measured in a child process.

A 2xx body that is over the limit or badly framed is ``InvalidResponse`` (not retried); one the
server cut short is ``ConnectionFailed`` (retried). For any other status the status wins and
the body comes back as far as it could be read, cut at the limit.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import pytest
from faultservers import RawServer, read_request, send_stream, stream_body
from rawhttp import BODY_FALSE, BODY_TRUE, ask, call_once, chunked, chunked_response, response, serving

import qa_min as qa

CAP = 1000
STALL = 5.0  # a server that keeps a broken response open this long; a refusal must not wait for it
PROMPT = 2.0  # "at once", generously: the refusal needs no more than a few reads on loopback
ALLOWANCE = 65536  # chunk framing allowed on top of the cap (README, "bad servers")
MAX_SIZE_LINE = 4096
ROOT = Path(__file__).resolve().parent.parent


def padded(size: int, answer: bool = True) -> bytes:
    """A valid answer body of exactly ``size`` bytes (JSON whitespace as padding)."""
    body = BODY_TRUE if answer else BODY_FALSE
    assert size >= len(body)
    return body[:-1] + b" " * (size - len(body)) + b"}"


def assert_refused(outcome_error: object, *words: str) -> None:
    assert type(outcome_error) is qa.InvalidResponse, repr(outcome_error)
    for word in words:
        assert word in str(outcome_error)


# -- Content-Length ---------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "accepted"), [(CAP, True), (CAP + 1, False)])
def test_content_length_body_at_the_cap_is_read_and_one_past_is_refused(size: int, accepted: bool) -> None:
    outcome = call_once(response(body=padded(size)), max_response_bytes=CAP)
    if accepted:
        assert outcome.error is None, repr(outcome.error)
        assert outcome.answer is True
    else:
        assert_refused(outcome.error, f"has {size} bytes", f"{CAP}-byte limit")
        assert outcome.diagnostics.status == 200
    assert outcome.diagnostics.attempts == 1


@pytest.mark.parametrize(
    "value",
    ["-1", "abc", "1e3", "+41", "0x29", "41.0", "41, 42", "", "9" * 5000],
    ids=[
        "negative",
        "letters",
        "exponent",
        "plus",
        "hex",
        "decimal",
        "conflicting-list",
        "empty",
        "5000-digits",
    ],
)
def test_invalid_content_length_of_a_2xx_is_invalid_response(value: str) -> None:
    outcome = call_once(response(body=BODY_TRUE, length=value), stall=STALL, max_response_bytes=CAP)
    if value == "9" * 5000:
        assert_refused(outcome.error, f"{CAP}-byte limit")  # a valid number, only a huge one
    else:
        assert_refused(outcome.error, "Content-Length")
    assert outcome.elapsed < PROMPT
    assert outcome.diagnostics.status == 200


def test_two_different_content_length_headers_are_refused() -> None:
    data = response(headers=["Content-Length: 41", "Content-Length: 40"], length=None)
    outcome = call_once(data, stall=STALL)
    assert_refused(outcome.error, "Content-Length")
    assert outcome.elapsed < PROMPT


@pytest.mark.parametrize(
    "headers", [["Content-Length: 41, 41"], ["Content-Length: 41", "Content-Length: 41"]]
)
def test_repeated_equal_content_lengths_are_one_length(headers: list[str]) -> None:
    assert len(BODY_TRUE) == 41
    outcome = call_once(response(headers=headers, length=None))
    assert outcome.error is None, repr(outcome.error)
    assert outcome.answer is True


def test_error_status_with_invalid_content_length_is_that_status() -> None:
    outcome = call_once(response("503 Service Unavailable", body=b"busy", length="-5"), stall=STALL)
    assert type(outcome.error) is qa.ServerError
    assert outcome.diagnostics.status == 503
    assert outcome.diagnostics.body == ""  # nothing is read past a framing error
    assert outcome.elapsed < PROMPT


# -- chunked ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "framing",
    [
        chunked(BODY_FALSE),
        chunked(BODY_FALSE, sizes=[1] * 10),
        chunked(BODY_FALSE, sizes=[7, 3], extension=b";name=value"),
        chunked(BODY_FALSE, sizes=[7], extension=b' ; q="a;b" ;flag'),
        chunked(BODY_FALSE, trailers=[b"X-Checksum: abc", b"X-Other: 1"]),
        b"%X\r\n%s\r\n0\r\n\r\n" % (len(BODY_FALSE), BODY_FALSE),
        b"000000000000%04x\r\n%s\r\n0000\r\n\r\n" % (len(BODY_FALSE), BODY_FALSE),
    ],
    ids=[
        "one-chunk",
        "byte-chunks",
        "extensions",
        "quoted-extension",
        "trailers",
        "upper-hex",
        "16-digits",
    ],
)
def test_valid_chunked_body_is_read_and_the_connection_reused(framing: bytes) -> None:
    outcome = call_once(chunked_response(framing))
    assert outcome.error is None, repr(outcome.error)
    assert outcome.answer is False
    assert outcome.idle == 1


@pytest.mark.parametrize(("size", "accepted"), [(CAP, True), (CAP + 1, False)])
def test_chunked_body_at_the_cap_is_read_and_one_past_is_refused(size: int, accepted: bool) -> None:
    framing = chunked(padded(size), sizes=[300, 300, 300])
    outcome = call_once(chunked_response(framing), stall=STALL, max_response_bytes=CAP)
    if accepted:
        assert outcome.error is None, repr(outcome.error)
        assert outcome.answer is True
    else:
        assert_refused(outcome.error, f"{CAP}-byte limit")
        assert outcome.elapsed < PROMPT
    assert outcome.diagnostics.status == 200


def test_one_huge_chunk_is_refused_before_its_data_is_read() -> None:
    # The server announces 200 MB and sends none of it: refusing must not wait for the data.
    outcome = call_once(chunked_response(b"BEBC200\r\n"), stall=STALL, max_response_bytes=CAP)
    assert_refused(outcome.error, f"{CAP}-byte limit")
    assert outcome.elapsed < PROMPT


BAD_SIZE_LINES = {
    "negative": b"-1\r\n",
    "negative-zero": b"-0\r\n",
    "plus": b"+29\r\n",
    "hex-prefix": b"0x29\r\n",
    "not-hex": b"zz\r\n",
    "hex-then-letter": b"2g\r\n",
    "inner-space": b"2 9\r\n",
    "leading-space": b" 29\r\n",
    "empty": b"\r\n",
    "extension-only": b";ext=1\r\n",
    "17-digits": b"0" * 16 + b"1\r\n",
    "overflowing": b"f" * 40 + b"\r\n",
    "cr-then-garbage": b"29\rX\n",
}


@pytest.mark.parametrize("line", list(BAD_SIZE_LINES.values()), ids=list(BAD_SIZE_LINES))
def test_bad_chunk_size_is_refused_at_once(line: bytes) -> None:
    # The server then keeps the connection open and silent, and the call has no timeout: only
    # a refusal on the line itself ends it promptly.
    outcome = call_once(chunked_response(line + b"x" * 100_000), stall=STALL, max_response_bytes=CAP)
    assert_refused(outcome.error, "chunk size")
    assert outcome.elapsed < PROMPT
    assert outcome.diagnostics.status == 200
    assert outcome.diagnostics.attempts == 1


@pytest.mark.parametrize(
    "line", [b"-1", b"zz", b"0x29", b"f" * 40], ids=["negative", "not-hex", "0x", "overflow"]
)
def test_bad_chunk_size_is_refused_before_its_line_ends(line: bytes) -> None:
    # No end of line at all: the bytes that arrived are enough to refuse.
    outcome = call_once(chunked_response(line), stall=STALL, max_response_bytes=CAP)
    assert_refused(outcome.error, "chunk size")
    assert outcome.elapsed < PROMPT


@pytest.mark.parametrize(("length", "accepted"), [(MAX_SIZE_LINE, True), (MAX_SIZE_LINE + 1, False)])
def test_chunk_size_line_with_extensions_is_limited(length: int, accepted: bool) -> None:
    size = b"%x" % len(BODY_FALSE)
    line = size + b";e=" + b"v" * (length - len(size) - 5) + b"\r\n"
    assert len(line) == length
    outcome = call_once(chunked_response(line + BODY_FALSE + b"\r\n0\r\n\r\n"), stall=STALL)
    if accepted:
        assert outcome.error is None, repr(outcome.error)
        assert outcome.answer is False
    else:
        assert_refused(outcome.error, "chunk size line over")
        assert outcome.elapsed < PROMPT


def framing_of(lines: list[bytes]) -> int:
    """Framing bytes of chunks with these size lines: each line plus the CRLF after its data."""
    return sum(len(line) + 2 for line in lines)


@pytest.mark.parametrize(("extra", "accepted"), [(0, True), (1, False)])
def test_chunk_framing_is_limited_to_the_cap_plus_an_allowance(extra: int, accepted: bool) -> None:
    # Endless small chunks with long extensions must not stream on forever: the framing around
    # the data (size lines, CRLFs) may take at most the cap plus 64 KiB.
    body = padded(100)
    budget = CAP + ALLOWANCE + extra
    lines = [b"5;" + b"e" * 3300 + b"\r\n"] * 19
    last = budget - framing_of(lines) - 2  # the length the 20th line must have
    lines.append(b"5;" + b"e" * (last - 4) + b"\r\n")
    assert framing_of(lines) == budget
    data = b"".join(line + body[5 * i : 5 * i + 5] + b"\r\n" for i, line in enumerate(lines)) + b"0\r\n\r\n"
    outcome = call_once(chunked_response(data), stall=STALL, max_response_bytes=CAP)
    if accepted:
        assert outcome.error is None, repr(outcome.error)
        assert outcome.answer is True
    else:
        assert_refused(outcome.error, "chunk framing over")
        assert outcome.elapsed < PROMPT


@pytest.mark.parametrize(("count", "accepted"), [(100, True), (101, False)])
def test_trailer_fields_are_limited(count: int, accepted: bool) -> None:
    trailers = [b"X-T%d: v" % i for i in range(count)]
    outcome = call_once(chunked_response(chunked(BODY_FALSE, trailers=trailers)), stall=STALL)
    if accepted:
        assert outcome.error is None, repr(outcome.error)
    else:
        assert_refused(outcome.error, "trailer")
        assert outcome.elapsed < PROMPT


def test_trailer_line_over_64_kib_is_refused() -> None:
    trailer = b"X-Big: " + b"v" * 65536
    outcome = call_once(chunked_response(chunked(BODY_FALSE, trailers=[trailer])), stall=STALL)
    assert_refused(outcome.error, "trailer")
    assert outcome.elapsed < PROMPT


@pytest.mark.parametrize(
    "data",
    [
        b"%x\r\n%sXY0\r\n\r\n" % (len(BODY_FALSE), BODY_FALSE),
        b"%x\r\n%s\n0\r\n\r\n" % (len(BODY_FALSE), BODY_FALSE),  # a bare LF (RFC 9112 §7.1)
        b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY_FALSE) + 1, BODY_FALSE),  # a size that swallows the CR
    ],
    ids=["other-bytes", "bare-lf", "size-swallows-cr"],
)
def test_chunk_data_not_followed_by_crlf_is_refused(data: bytes) -> None:
    outcome = call_once(chunked_response(data), stall=STALL)
    assert_refused(outcome.error, "CRLF")
    assert outcome.elapsed < PROMPT


@pytest.mark.parametrize(
    "framing",
    [b"29\r\n" + BODY_TRUE[:20], b"29\r\n" + BODY_TRUE + b"\r\n", b"29\r\n" + BODY_TRUE, b"2"],
    ids=["inside-data", "before-last-chunk", "before-crlf", "inside-size"],
)
def test_chunked_body_cut_short_by_the_server_is_a_connection_failure(framing: bytes) -> None:
    outcome = call_once(chunked_response(framing))
    assert type(outcome.error) is qa.ConnectionFailed
    assert outcome.diagnostics.transport_error is not None


def test_stream_ending_inside_the_trailers_still_gives_the_answer() -> None:
    # Every byte of the body arrived; only the end of an optional section is missing.
    outcome = call_once(chunked_response(b"29\r\n" + BODY_TRUE + b"\r\n0\r\n"))
    assert outcome.error is None, repr(outcome.error)
    assert outcome.idle == 0


@pytest.mark.parametrize(
    "coding", ["gzip", "gzip, chunked", "chunked, gzip", "identity", "chunked, chunked"], ids=str
)
def test_unsupported_transfer_coding_is_refused(coding: str) -> None:
    data = response(headers=[f"Transfer-Encoding: {coding}"], body=chunked(BODY_TRUE), length=None)
    outcome = call_once(data, stall=STALL)
    assert_refused(outcome.error, "Transfer-Encoding")
    assert outcome.elapsed < PROMPT


def test_chunked_wins_over_content_length_and_the_connection_is_not_reused() -> None:
    data = chunked_response(chunked(BODY_FALSE, sizes=[5]), headers=["Content-Length: 3"])
    outcome = call_once(data)
    assert outcome.error is None, repr(outcome.error)
    assert outcome.answer is False
    assert outcome.idle == 0  # a response framed two ways may be a smuggling attempt


# -- close-delimited --------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "accepted"), [(CAP, True), (CAP + 1, False)])
def test_close_delimited_body_at_the_cap_is_read_and_one_past_is_refused(size: int, accepted: bool) -> None:
    outcome = call_once(response(body=padded(size), length=None), max_response_bytes=CAP)
    if accepted:
        assert outcome.error is None, repr(outcome.error)
        assert outcome.answer is True
    else:
        assert_refused(outcome.error, f"{CAP}-byte limit")
    assert outcome.idle == 0


def test_endless_close_delimited_body_is_refused_at_the_cap() -> None:
    head = response(body=b"", length=None)
    with serving(stream_body(head, b"[" * 4096), max_response_bytes=CAP) as (_, client):
        started = time.monotonic()
        _, error, diag = ask(client)
        assert time.monotonic() - started < PROMPT
    assert_refused(error, f"{CAP}-byte limit")
    assert diag.status == 200


# -- error statuses: the status is the answer, the body as far as it goes ---------------------


@pytest.mark.parametrize(
    ("data", "body"),
    [
        (response("503 Service Unavailable", body=b"", length=None), b"busy " * 1000),
        (chunked_response(b"", "503 Service Unavailable"), b"%x\r\n%s\r\n" % (4096, b"b" * 4096) * 1000),
    ],
    ids=["close-delimited", "chunked"],
)
def test_endless_error_body_is_cut_at_the_cap(data: bytes, body: bytes) -> None:
    with serving(stream_body(data, body), max_response_bytes=CAP) as (_, client):
        _, error, diag = ask(client)
    assert type(error) is qa.ServerError
    assert diag.status == 503
    assert diag.body is not None
    assert len(diag.body) == CAP


@pytest.mark.parametrize(
    "framing",
    [b"4\r\nbusy\r\n-1\r\n", b"4\r\nbusyXX", b"4\r\nbusy\r\nzz"],
    ids=["negative-size", "missing-crlf", "not-hex-without-end-of-line"],
)
def test_error_body_with_bad_chunking_keeps_its_status_and_what_came_before(framing: bytes) -> None:
    outcome = call_once(chunked_response(framing, "401 Unauthorized"), stall=STALL)
    assert type(outcome.error) is qa.Unauthorized
    assert outcome.diagnostics.body == "busy"
    assert outcome.elapsed < PROMPT
    assert outcome.idle == 0


def test_timeout_while_reading_an_error_body_is_canceled_not_the_status() -> None:
    # The deadline ends the call; a body the server is still sending is not "what it sent".
    data = response("401 Unauthorized", body=b"partial", length="100")
    outcome = call_once(data, stall=STALL, timeout=0.15)
    assert type(outcome.error) is qa.Canceled
    assert "timeout" in str(outcome.error)
    assert outcome.elapsed < 0.15 + PROMPT


def test_error_body_cut_short_by_the_server_keeps_its_status() -> None:
    outcome = call_once(response("401 Unauthorized", body=b'{"detail": "bad key"}', length="100"))
    assert type(outcome.error) is qa.Unauthorized
    assert outcome.diagnostics.body == '{"detail": "bad key"}'
    assert outcome.idle == 0


# -- the head ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    ["No colon here", "Bad Name: value", "Name\t: value", ": no name"],
    ids=["no-colon", "space-in-name", "tab-before-colon", "empty-name"],
)
def test_header_line_that_is_not_a_field_is_refused(line: str) -> None:
    # The email parser behind http.client would take such a line for the body's start and
    # silently drop every header after it, Content-Length included.
    outcome = call_once(response(headers=[line]))
    assert type(outcome.error) is qa.ConnectionFailed
    assert "not a header field" in str(outcome.error)


def test_continuation_as_the_first_header_line_is_refused() -> None:
    outcome = call_once(b"HTTP/1.1 200 OK\r\n folded: x\r\nContent-Length: 41\r\n\r\n" + BODY_TRUE)
    assert type(outcome.error) is qa.ConnectionFailed
    assert "continuation" in str(outcome.error)


@pytest.mark.parametrize(("length", "accepted"), [(65536, True), (65537, False)])
def test_status_line_length_is_limited(length: int, accepted: bool) -> None:
    reason = "R" * (length - len("HTTP/1.1 200 ") - 2)
    outcome = call_once(response(f"200 {reason}"))
    assert (outcome.error is None) is accepted, repr(outcome.error)
    if not accepted:
        assert type(outcome.error) is qa.ConnectionFailed
        assert "status line" in str(outcome.error)


def test_continuation_line_is_part_of_the_header_before_it() -> None:
    outcome = call_once(response(headers=["X-Long: first", " second"]))
    assert outcome.error is None, repr(outcome.error)


@pytest.mark.parametrize(("count", "accepted"), [(100, True), (101, False)])
def test_header_count_is_limited(count: int, accepted: bool) -> None:
    # Content-Length is one of the fields counted.
    outcome = call_once(response(headers=[f"X-H{i}: v" for i in range(count - 1)]))
    assert (outcome.error is None) is accepted, repr(outcome.error)
    if not accepted:
        assert type(outcome.error) is qa.ConnectionFailed
        assert "more than 100 headers" in str(outcome.error)


@pytest.mark.parametrize(("length", "accepted"), [(65536, True), (65537, False)])
def test_header_line_length_is_limited(length: int, accepted: bool) -> None:
    line = "X-Big: " + "v" * (length - len("X-Big: ") - 2)
    outcome = call_once(response(headers=[line]))
    assert (outcome.error is None) is accepted, repr(outcome.error)
    if not accepted:
        assert type(outcome.error) is qa.ConnectionFailed
        assert "header line" in str(outcome.error)


@pytest.mark.parametrize(
    ("version", "headers", "reused"),
    [
        ("HTTP/1.1", [], True),
        ("HTTP/1.1", ["Connection: close"], False),
        ("HTTP/1.0", [], False),
        ("HTTP/1.0", ["Connection: keep-alive"], True),
    ],
)
def test_keep_alive_follows_the_version_and_connection_header(
    version: str, headers: list[str], reused: bool
) -> None:
    outcome = call_once(response(version=version, headers=headers))
    assert outcome.error is None, repr(outcome.error)
    assert outcome.idle == int(reused)


# -- peak memory ------------------------------------------------------------------------------

RAW = b"a" * 65536
CHUNK = b"%x\r\n%s\r\n" % (len(RAW), RAW)
CASES: dict[str, tuple[bytes, bytes, Optional[int]]] = {  # head, piece sent over and over, total
    "close-delimited-200MB": (response(body=b"", length=None), RAW, 200_000_000),
    "close-delimited-endless": (response(body=b"", length=None), RAW, None),
    "one-200MB-chunk": (chunked_response(b"BEBC200\r\n"), RAW, 200_000_000),
    "endless-chunks": (chunked_response(b""), CHUNK, None),
    "negative-chunk-then-200MB": (chunked_response(b"-1\r\n"), RAW, 200_000_000),
    "content-length-200MB": (response(body=b"", length="200000000"), RAW, 200_000_000),
    "error-close-delimited-endless": (response("503 Service Unavailable", body=b"", length=None), RAW, None),
    "error-endless-chunks": (chunked_response(b"", "503 Service Unavailable"), CHUNK, None),
}

CHILD = """
import json, resource, sys
import qa_min as qa

class Toxic(qa.Questions):
    toxic = qa.YesNo("yes", "no")

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))

# A runaway read then fails with MemoryError instead of exhausting the machine.
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
url, names = sys.argv[1], sys.argv[2:]
qa.Client(base_url=url, trust_env=False).close()  # the transport modules load before measuring
results = {}
for name in names:
    options = dict(trust_env=False, retry=qa.RetryPolicy.none, extra_headers=[("X-Case", name)])
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets the peak (VmHWM) to the current size: each case is measured alone
    before = status("VmRSS")
    try:
        with qa.Client(base_url=url, **options) as client:
            client.ask("x", Toxic, timeout=60)
        outcome = "answer"
    except qa.QAError as exc:
        outcome = type(exc).__name__ + ": " + str(exc)[:200]
    except MemoryError:
        outcome = "MemoryError"
    results[name] = [outcome, status("VmHWM") - before]
print(json.dumps(results))
"""


def serve_case(conn: socket.socket, stop: threading.Event) -> None:
    """Stream the case the request names in its X-Case header; the client hanging up ends it."""
    request = read_request(conn).decode("latin-1")
    name = request.partition("X-Case: ")[2].partition("\r\n")[0]
    if name not in CASES:
        return
    head, piece, total = CASES[name]
    send_stream(conn, stop, head, piece, total)


@pytest.mark.timeout(180)
@pytest.mark.skipif(
    not os.path.exists("/proc/self/clear_refs"), reason="measures the peak through /proc (Linux)"
)
def test_peak_memory_of_a_refused_huge_or_endless_body_stays_under_cap_plus_50_mb() -> None:
    cap = qa.Client(base_url="http://127.0.0.1:9", trust_env=False)._transport.max_body
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with RawServer(serve_case) as server:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, server.url, *CASES],
            capture_output=True,
            text=True,
            timeout=150,
            env=env,
            cwd=ROOT,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout)
    assert list(results) == list(CASES)
    for name, (outcome, growth) in results.items():
        expected = "ServerError" if name.startswith("error") else "InvalidResponse"
        assert outcome.startswith(expected), f"{name}: {outcome}"
        assert growth < cap + 50 * 2**20, f"{name}: peak grew by {growth / 2**20:.0f} MiB"

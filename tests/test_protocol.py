"""The HTTP/1.1 reader in memory: bytes in, events out, no socket.

Every case is fed whole, one byte at a time, and at random split points (as h11's tests do),
and must give the same result each way: (status, fields, body, reusable) or the same error.

  framing ........................ test_valid_responses_are_read, test_no_body_statuses_and_methods
                                   test_only_a_2xx_to_connect_has_no_body,
                                   test_a_body_arriving_with_the_bare_lf_that_ends_the_head_leaves_that_lf_out
  the four classes of issue 21 ... test_transfer_encoding_is_trimmed_of_sp_and_htab_only,
                                   test_chunk_data_must_end_in_crlf, test_field_names_must_be_tokens,
                                   test_http10_with_transfer_encoding_is_refused
  obs-fold ....................... test_obs_fold_becomes_one_sp
  Python's generous functions .... test_content_length_is_ascii_digits_only,
                                   test_a_huge_content_length_is_refused_with_its_true_size,
                                   test_content_length_reads_40_digits_exactly_and_41_as_10_to_the_40,
                                   test_leading_zeros_of_a_content_length_weigh_nothing,
                                   test_chunk_size_is_hex_digits_only, test_status_line_is_strict,
                                   test_field_values_refuse_controls, test_connection_tokens_are_exact
  the head's reason and version .. test_the_head_holds_the_reason_after_one_sp_and_the_version
  what a message shows of a line . test_a_refused_line_shows_its_first_40_bytes_controls_as_question_marks,
                                   test_a_refused_status_line_is_the_line_shown_not_the_last_line_of_the_head
  ambiguous framing .............. test_ambiguous_framing_is_refused,
                                   test_te_with_cl_is_read_as_chunked_and_not_reused
  caps, at and past the limit .... test_line_cap, test_header_count_cap, test_interim_cap,
                                   test_trailer_cap_counts_lines_folds_included,
                                   test_trailers_count_toward_the_chunk_framing_allowance,
                                   test_body_cap_for_2xx, test_body_cap_for_other_statuses,
                                   test_a_reader_made_without_a_limit_caps_2xx_bodies_at_2_to_the_62,
                                   test_a_cut_body_ends_with_the_bytes_received_no_more_asked,
                                   test_chunk_size_digits_cap, test_chunk_size_line_cap
  caps as the bytes arrive ....... test_caps_are_checked_before_the_line_ends
  head and buffered .............. test_the_reader_holds_the_final_head_and_counts_the_bytes_past_it,
                                   test_a_head_arriving_in_pieces_keeps_at_most_64_kib_of_the_bytes_already_read
  the end of the stream .......... test_no_byte_at_all_is_told_apart, test_end_of_stream_inside,
                                   test_a_whole_chunked_message_ends_without_asking_for_more_bytes,
                                   test_a_finished_reader_stays_finished_and_never_says_reusable
  errors ......................... test_protocol_errors_pickle_at_every_protocol
  requests ....................... test_write_request, test_write_request_refuses_injection,
                                   test_has_length_says_whether_the_request_is_written_with_a_content_length
  no I/O ......................... test_the_protocol_modules_import_no_io
"""

from __future__ import annotations

import ast
import copy
import pickle
import random
import time
import tracemalloc
from collections import deque
from pathlib import Path
from typing import Any, Optional

import pytest

import qa_min as qa
from qa_min import _wire
from qa_min._protocol import (
    FRAMING_ALLOWANCE,
    MAX_HEADERS,
    MAX_INTERIM,
    MAX_LINE,
    MAX_SIZE_DIGITS,
    MAX_SIZE_LINE,
    NEED_DATA,
    Data,
    End,
    Head,
    ResponseReader,
    write_request,
)

Outcome = tuple[Any, ...]  # a Result, or (error type, message)
BIG = 1 << 40


def feed(pieces: list[bytes], method: str = "GET", limit: int = BIG, eof: bool = True) -> Outcome:
    """Feed ``pieces`` one by one (then the end of the stream): the result or (error type, text)."""
    reader = ResponseReader(method, limit)
    # A deque: a list's pop(0) made feeding a 64 KiB line byte by byte quadratic in this helper
    # (85% of that test's time), blurring the reader's own linear cost it measures.
    todo = deque(pieces)
    if eof:
        todo.append(b"")
    head: Optional[Head] = None
    body: list[bytes] = []
    try:
        while True:
            event = reader.next_event()
            if event is NEED_DATA:
                if not todo:
                    return (type(NEED_DATA), "NEED_DATA")
                reader.receive(todo.popleft())
            elif type(event) is Head:
                head = event
            elif type(event) is Data:
                body.append(event.data)
            else:
                assert type(event) is End
                assert head is not None
                return head.status, list(head.headers.items()), b"".join(body), event.reusable
    except qa.ProtocolError as exc:
        return type(exc), str(exc)


def splits(data: bytes, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    cuts = (
        sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 6))))
        if len(data) > 1
        else []
    )
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


def read(data: bytes, method: str = "GET", limit: int = BIG, eof: bool = True) -> Outcome:
    """The outcome of ``data``, checked to be the same fed whole, byte by byte and split at random."""
    whole = feed([data], method, limit, eof)
    assert feed([data[i : i + 1] for i in range(len(data))], method, limit, eof) == whole, "byte by byte"
    for seed in range(3):
        assert feed(splits(data, seed), method, limit, eof) == whole, f"split {seed}"
    return whole


def refused(outcome: Outcome, error: type, *words: str) -> None:
    assert outcome[0] is error, outcome
    for word in words:
        assert word in str(outcome[1]), outcome


def ok(head: bytes, body: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\n" + head + b"\r\n" + body


CHUNKED = b"Transfer-Encoding: chunked\r\n"


@pytest.mark.parametrize(
    ("data", "want"),
    [
        (ok(b"Content-Length: 5\r\n", b"hello"), (200, [("Content-Length", "5")], b"hello", True)),
        (ok(CHUNKED, b"5\r\nhello\r\n0\r\n\r\n"), (200, [("Transfer-Encoding", "chunked")], b"hello", True)),
        (ok(CHUNKED, b'2;a=b;c="d;e"\r\nhe\r\n3 \r\nllo\r\n0\r\nX: 1\r\n\r\n'), (200, None, b"hello", True)),
        (ok(CHUNKED, b"000005\r\nhello\r\n0000\r\n\r\n"), (200, None, b"hello", True)),
        (ok(b"", b"until the close"), (200, [], b"until the close", False)),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", (200, None, b"hi", False)),
        (b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nhi",
         (200, None, b"hi", True)),
        (ok(b"Connection: close\r\nContent-Length: 2\r\n", b"hi"), (200, None, b"hi", False)),
        (b"HTTP/1.1 200 OK\nContent-Length: 2\n\nhi", (200, None, b"hi", True)),  # bare LF in the head
        (b"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", (200, None, b"", True)),  # no reason
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early\r\nLink: </a>\r\n\r\n"
         + ok(b"Content-Length: 0\r\n"),
         (200, [("Content-Length", "0")], b"", True)),
        (b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nno!", (404, None, b"no!", True)),
    ],
)  # fmt: skip
def test_valid_responses_are_read(
    data: bytes, want: tuple[int, Optional[list[tuple[str, str]]], bytes, bool]
) -> None:
    got = read(data)
    assert not isinstance(got[0], type), got
    assert got[0] == want[0]
    assert got[2:] == want[2:]
    if want[1] is not None:
        assert got[1] == want[1]


def test_bytes_after_the_message_make_it_not_reusable() -> None:
    # Once they arrived, that is: bytes the server sends later are the pool's check to find.
    assert feed([ok(b"Content-Length: 2\r\n", b"hiX")]) == (200, [("Content-Length", "2")], b"hi", False)


@pytest.mark.parametrize(
    ("name", "value", "reusable"), [("Content-Length", "5", True), ("Connection", "close", False)]
)
def test_a_body_arriving_with_the_bare_lf_that_ends_the_head_leaves_that_lf_out(
    name: str, value: str, reusable: bool
) -> None:
    # The head's last line, a bare LF, opens the piece that brings the first body bytes: the
    # body starts one byte into that piece, without the LF already read as the head's end
    # (a length-framed body, and one that ends at the close).
    pieces = [f"HTTP/1.1 200 OK\n{name}: {value}\n".encode(), b"\nabc", b"de"]
    assert feed(pieces) == (200, [(name, value)], b"abcde", reusable)


@pytest.mark.parametrize(
    ("status", "method"), [(204, "GET"), (304, "GET"), (200, "HEAD"), (200, "CONNECT"), (101, "GET")]
)
def test_no_body_statuses_and_methods(status: int, method: str) -> None:
    data = b"HTTP/1.1 %d X\r\nContent-Length: 5\r\n\r\n" % status
    assert read(data, method) == (status, [("Content-Length", "5")], b"", status != 101)


@pytest.mark.parametrize(("status", "body"), [(299, b""), (300, b"hello")])
def test_only_a_2xx_to_connect_has_no_body(status: int, body: bytes) -> None:
    data = b"HTTP/1.1 %d X\r\nContent-Length: 5\r\n\r\n" % status + body
    assert read(data, "CONNECT")[2:] == (body, True)


# -- the four classes, each failing on the reader before _protocol (see the closing note) ----------


@pytest.mark.parametrize("blank", [b"\x0b", b"\x0c", b"\xa0", b"\x1c", b"\x85"], ids=repr)
@pytest.mark.parametrize("where", ["before", "after"])
def test_transfer_encoding_is_trimmed_of_sp_and_htab_only(blank: bytes, where: str) -> None:
    coding = blank + b"chunked" if where == "before" else b"chunked" + blank
    outcome = read(ok(b"Transfer-Encoding: " + coding + b"\r\n", b"5\r\nhello\r\n0\r\n\r\n"))
    assert outcome[0] in (qa.MalformedHead, qa.BadFraming), outcome  # never read as chunked
    # SP and HTAB are the whitespace around a value (RFC 9110 §5.5), and are trimmed.
    assert read(ok(b"Transfer-Encoding: \t chunked \t\r\n", b"5\r\nhello\r\n0\r\n\r\n"))[2:] == (
        b"hello",
        True,
    )


@pytest.mark.parametrize(
    "body",
    [
        b"5\r\nhello\n0\r\n\r\n",
        b"6\r\nhello\r\n0\r\n\r\n",
        b"5\r\nhelloXY0\r\n\r\n",
        b"5\r\nhello\r0\r\n\r\n",
    ],
    ids=["bare-lf", "size-swallows-cr", "other-bytes", "bare-cr"],
)
def test_chunk_data_must_end_in_crlf(body: bytes) -> None:
    refused(read(ok(CHUNKED, body)), qa.BadFraming, "chunk data not followed by CRLF")


@pytest.mark.parametrize(
    "name", [b"X\x00A", b"X-\xe9", b"X A", b" X", b"", b"X\x0bA", b'X"A', b"X(A)", b"X-A "], ids=repr
)
def test_field_names_must_be_tokens(name: bytes) -> None:
    data = ok(name + b": 1\r\nContent-Length: 2\r\n", b"hi")
    refused(read(data), qa.MalformedHead, "header")


@pytest.mark.parametrize("length", [b"", b"Content-Length: 5\r\n"])
def test_http10_with_transfer_encoding_is_refused(length: bytes) -> None:
    data = b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n" + length + b"\r\n5\r\nhello\r\n0\r\n\r\n"
    refused(read(data), qa.BadFraming, "Transfer-Encoding in an HTTP/1.0 response")


def test_obs_fold_becomes_one_sp() -> None:
    data = ok(b"X-F: a\r\n  b\r\n\tc \r\nContent-Length: 0\r\n")
    assert read(data)[1] == [("X-F", "a b c"), ("Content-Length", "0")]
    # A fold continues the field just before it, not the first one.
    data = ok(b"X-A: 1\r\nX-F: a\r\n b\r\nContent-Length: 0\r\n")
    assert read(data)[1] == [("X-A", "1"), ("X-F", "a b"), ("Content-Length", "0")]
    refused(read(b"HTTP/1.1 200 OK\r\n folded: first\r\n\r\n"), qa.MalformedHead, "continuation")


# -- everywhere Python's string functions are more generous than the grammar --------------------


@pytest.mark.parametrize(
    "value",
    [b"+5", b"-5", b"5_0", b"\xb2", b"0x5", b"5.0", b"5e0", b"5 5", b"5\x0b", b"\x0c5", b"\xa05", b""],
    ids=repr,
)
def test_content_length_is_ascii_digits_only(value: bytes) -> None:
    # int() takes a sign, "_" and blanks; str.isdigit() takes "²"; strip() takes VT, FF, NBSP.
    outcome = read(ok(b"Content-Length: " + value + b"\r\n", b"hello"))
    assert outcome[0] in (qa.BadFraming, qa.MalformedHead), outcome


@pytest.mark.parametrize(
    "size",
    [
        b"+5",
        b"-5",
        b"0_5",
        b"\xb2",
        b"0x5",
        b"5.0",
        b" 5",
        b"\x0b5",
        b"\xa05",
        b"5\x0c",
        b"\xef\xbc\x95",
        b"",
    ],
    ids=repr,
)
def test_chunk_size_is_hex_digits_only(size: bytes) -> None:
    refused(read(ok(CHUNKED, size + b"\r\nhello\r\n0\r\n\r\n")), qa.BadFraming, "bad chunk size line")


@pytest.mark.parametrize(
    ("size", "accepted"),
    [(b"5;a", True), (b"5;a=b", True), (b'5;a="b;c"', True), (b"5 ;a = b", True), (b"5;a;b=c", True),
     (b"5;", False), (b"5;=b", False), (b"5;a=", False), (b"5;a=b;", False), (b'5;a="b', False),
     (b"5\n", False), (b"5;a\n", False), (b"5\r\r", False)],
    ids=repr,
)  # fmt: skip
def test_chunk_extensions_and_the_size_lines_end_follow_rfc_9112(size: bytes, accepted: bool) -> None:
    # RFC 9112 7.1.1: an extension is ";" name ["=" token / quoted-string], a name a token, and
    # the line ends in CRLF. h11 and http.client both read "5;" and a bare LF; the reader does not.
    line = size if size.endswith((b"\n", b"\r\r")) else size + b"\r\n"
    outcome = read(ok(CHUNKED, line + b"hello\r\n0\r\n\r\n"))
    if accepted:
        assert outcome[2] == b"hello", outcome
    else:
        refused(outcome, qa.BadFraming, "bad chunk size line")


@pytest.mark.parametrize(
    "line",
    [b"HTTP/1.1  200 OK", b"HTTP/1.1\t200 OK", b"HTTP/1.1 200\tOK", b"HTTP/2.0 200 OK", b"http/1.1 200 OK",
     b"HTTP/1.1 099 X", b"HTTP/1.1 2000 X", b"HTTP/1.1 20 X", b"HTTP/1.1 \xb200 X", b" HTTP/1.1 200 OK",
     b"HTTP/1.1 200 O\x00K", b"HTTP/1.1 200 O\x0bK", b"HTTP/1.1 200 OK\r", b"", b"ICY 200 OK",
     b"HTTP/1.1 200 \x00OK", b"HTTP/1.1 200 O\x1fK", b"HTTP/1.1 200 O\x7fK"],
    ids=repr,
)  # fmt: skip
def test_status_line_is_strict(line: bytes) -> None:
    refused(read(line + b"\r\nContent-Length: 0\r\n\r\n"), qa.MalformedHead, "status line")


def head_of(data: bytes) -> Head:
    reader = ResponseReader()
    reader.receive(data)
    event = reader.next_event()
    assert type(event) is Head, event
    return event


@pytest.mark.parametrize(
    ("line", "reason", "http11"),
    [(b"HTTP/1.1 200 OK", "OK", True), (b"HTTP/1.0 200 OK", "OK", False), (b"HTTP/1.9 200 OK", "OK", True),
     (b"HTTP/1.1 200  two", " two", True), (b"HTTP/1.1 200 \t~ !\x80\xff", "\t~ !\x80\xff", True),
     (b"HTTP/1.1 200 ", "", True), (b"HTTP/1.1 200", "", True)],
    ids=repr,
)  # fmt: skip
@pytest.mark.parametrize("end", [b"\r\n", b"\n"], ids=["crlf", "lf"])
def test_the_head_holds_the_reason_after_one_sp_and_the_version(
    line: bytes, reason: str, http11: bool, end: bytes
) -> None:
    # The reason is every octet after the one SP (HTAB, SP, VCHAR, obs-text: "~" and 0xFF included),
    # up to the line's end, CRLF or a bare LF.
    head = head_of(line + end + b"Content-Length: 0\r\n\r\n")
    assert (head.status, head.reason, head.http11) == (200, reason, http11)


def test_a_refused_line_shows_its_first_40_bytes_controls_as_question_marks() -> None:
    # C0 controls, DEL, the C1 controls and NBSP (0x7F-0xA0) show as "?"; SP, "~" and 0xA1 as themselves.
    line = b"ICY \x00\x1f~\x7f\x80\x9f\xa0\xa1\xff" + b"x" * 27 + b"y"
    with pytest.raises(qa.MalformedHead) as caught:
        head_of(line + b"\r\n\r\n")
    assert str(caught.value) == "not an HTTP/1.x status line: 'ICY ??~????\xa1\xff" + "x" * 27 + "'"


def test_a_refused_status_line_is_the_line_shown_not_the_last_line_of_the_head() -> None:
    with pytest.raises(qa.MalformedHead) as caught:
        head_of(b"ICY 200 OK\r\nX-Last: 1\r\n\r\n")
    assert str(caught.value) == "not an HTTP/1.x status line: 'ICY 200 OK'"


@pytest.mark.parametrize("control", [b"\x00", b"\x01", b"\x0b", b"\x0c", b"\r", b"\x1f", b"\x7f"], ids=repr)
def test_field_values_refuse_controls(control: bytes) -> None:
    refused(read(ok(b"X-A: a" + control + b"b\r\nContent-Length: 0\r\n")), qa.MalformedHead, "header field")


def test_connection_tokens_are_exact() -> None:
    keep = b"HTTP/1.0 200 OK\r\nConnection: %s\r\nContent-Length: 0\r\n\r\n"
    assert read(keep % b"x-keep-alive-not")[3] is False
    assert read(keep % b"foo, KEEP-ALIVE")[3] is True
    assert read(ok(b"Connection: upgrade, Close\r\nContent-Length: 0\r\n"))[3] is False
    assert read(ok(b"Connection: closed\r\nContent-Length: 0\r\n"))[3] is True  # not the token "close"


# -- ambiguous framing ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [b"Content-Length: 5\r\nContent-Length: 6\r\n", b"Content-Length: 5, 6\r\n", b"Content-Length: 5,\r\n",
     b"Transfer-Encoding: gzip, chunked\r\n", b"Transfer-Encoding: chunked, chunked\r\n",
     b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", b"Transfer-Encoding: identity\r\n",
     b"Transfer-Encoding: chunked;q=1\r\n", b"Transfer-Encoding: chunked\r\nContent-Length: x\r\n"],
    ids=repr,
)  # fmt: skip
def test_ambiguous_framing_is_refused(fields: bytes) -> None:
    refused(read(ok(fields, b"5\r\nhello\r\n0\r\n\r\n")), qa.BadFraming)


def test_same_content_length_twice_is_one_length() -> None:
    assert read(ok(b"Content-Length: 5\r\ncontent-length: 5, 5\r\n", b"hello"))[2:] == (b"hello", True)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (b"99999999999999999999999999", "has 99999999999999999999999999 bytes, over the 20-byte limit"),
        (b"9" * 40, f"has {'9' * 40} bytes, over the 20-byte limit"),
        (b"0" * 30 + b"9" * 40, f"has {'9' * 40} bytes, over the 20-byte limit"),
        (b"1" + b"0" * 40, "has at least 10**40 bytes, over the 20-byte limit"),
        (b"9" * 5000, "has at least 10**40 bytes, over the 20-byte limit"),
    ],
    ids=["26-digits", "40-digits", "40-digits-after-zeros", "41-digits", "5000-digits"],
)
def test_a_huge_content_length_is_refused_with_its_true_size(value: bytes, words: str) -> None:
    # Past 18 digits it was reported as 4611686018427387904 bytes, whatever it said.
    refused(read(ok(b"Content-Length: " + value + b"\r\n", b"{}"), limit=20), qa.LimitExceeded, words)


def test_content_length_reads_40_digits_exactly_and_41_as_10_to_the_40() -> None:
    assert _wire.content_length([b"9" * 40]) == 10**40 - 1
    assert _wire.content_length([b"0" * 30 + b"9" * 40]) == 10**40 - 1
    assert _wire.content_length([b"1" + b"0" * 40]) == 10**40
    assert _wire.content_length([b"9" * 5000]) == 10**40


def test_leading_zeros_of_a_content_length_weigh_nothing() -> None:
    # 1*DIGIT: twenty zeros and a 5 is 5 (it was read as a 19-digit number, over any limit).
    assert read(ok(b"Content-Length: " + b"0" * 20 + b"5\r\n", b"hello"), limit=20)[2:] == (b"hello", True)


def test_te_with_cl_is_read_as_chunked_and_not_reused() -> None:
    assert read(ok(CHUNKED + b"Content-Length: 3\r\n", b"5\r\nhello\r\n0\r\n\r\n"))[2:] == (b"hello", False)


def test_non_2xx_framing_errors_carry_the_status() -> None:
    outcome = feed([b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: gzip\r\n\r\nxx"])
    refused(outcome, qa.BadFraming, "gzip")
    reader = ResponseReader()
    reader.receive(b"HTTP/1.1 502 Bad\r\nTransfer-Encoding: gzip\r\n\r\n")
    assert type(reader.next_event()) is Head  # the head first: its status is the answer
    with pytest.raises(qa.BadFraming) as caught:
        reader.next_event()
    assert caught.value.status == 502


# -- caps: at the limit and one past it ---------------------------------------------------------


@pytest.mark.parametrize(("extra", "accepted"), [(0, True), (1, False)])
def test_line_cap(extra: int, accepted: bool) -> None:
    line = b"X-Big: " + b"v" * (MAX_LINE - 9 + extra) + b"\r\n"
    assert len(line) == MAX_LINE + extra
    outcome = feed([ok(line + b"Content-Length: 0\r\n")])
    if accepted:
        assert outcome[0] == 200
    else:
        refused(outcome, qa.LimitExceeded, f"more than {MAX_LINE} bytes", "header line")


@pytest.mark.parametrize(("extra", "waits"), [(-1, True), (0, False)])
def test_a_line_with_no_end_is_refused_once_it_reaches_the_cap(extra: int, waits: bool) -> None:
    # MAX_LINE bytes with no line end can only become a line of more than MAX_LINE bytes: refused
    # there, without waiting for another byte (and not taken for a cut-short head when the stream ends).
    line = b"X-Big: " + b"v" * (MAX_LINE - 7 + extra)
    assert len(line) == MAX_LINE + extra
    head = b"HTTP/1.1 200 OK\r\n" + line
    if waits:
        assert read(head, eof=False)[0] is type(NEED_DATA)
        refused(feed([head]), qa.IncompleteMessage)
    else:
        refused(read(head, eof=False), qa.LimitExceeded, f"more than {MAX_LINE} bytes", "header line")
        refused(feed([head]), qa.LimitExceeded, f"more than {MAX_LINE} bytes")


@pytest.mark.parametrize(("extra", "accepted"), [(0, True), (1, False)])
def test_header_count_cap(extra: int, accepted: bool) -> None:
    fields = b"X-A: 1\r\n" * (MAX_HEADERS - 1 + extra) + b"Content-Length: 0\r\n"
    outcome = read(ok(fields))
    if accepted:
        assert outcome[0] == 200
        assert len(outcome[1]) == MAX_HEADERS
    else:
        refused(outcome, qa.LimitExceeded, f"more than {MAX_HEADERS} headers")


@pytest.mark.parametrize(("extra", "accepted"), [(0, True), (1, False)])
def test_trailer_cap_counts_lines_folds_included(extra: int, accepted: bool) -> None:
    # Lines, not fields: a fold flood (the trailers may take the limit plus 64 KiB) must not
    # reach parse_fields, whose joining of folds grows with the square of their number.
    fields = b"".join(b"X-T%d: v\r\n" % i for i in range(MAX_HEADERS - 2 + extra))
    outcome = read(ok(CHUNKED, b"5\r\nhello\r\n0\r\n" + fields + b"X-F: a\r\n b\r\n\r\n"))
    if accepted:
        assert outcome[2:] == (b"hello", True)
    else:
        refused(outcome, qa.BadFraming, "trailer section is too large")


@pytest.mark.parametrize(("extra", "accepted"), [(0, True), (1, False)])
def test_trailers_count_toward_the_chunk_framing_allowance(extra: int, accepted: bool) -> None:
    # Framing is the size lines, the CRLFs after the data and the trailer lines: with a 20-byte
    # limit, at most 20 + FRAMING_ALLOWANCE of it. Here "5\r\n" and "\r\n" (5), then two trailer lines
    # (the zero-size line and the closing empty line carry nothing and count nothing).
    allowed = 20 + FRAMING_ALLOWANCE + extra - 5
    first = b"X-A: " + b"a" * 40_000 + b"\r\n"
    second = b"X-B: " + b"b" * (allowed - len(first) - 7) + b"\r\n"
    assert len(first) + len(second) == allowed
    data = ok(CHUNKED, b"5\r\nhello\r\n0\r\n" + first + second + b"\r\n")
    outcome = feed([data], limit=20)
    assert feed(splits(data, 0), limit=20) == outcome
    if accepted:
        assert outcome[2:] == (b"hello", True)
    else:
        refused(outcome, qa.BadFraming, f"chunk framing over {20 + FRAMING_ALLOWANCE} bytes")


@pytest.mark.parametrize(("extra", "accepted"), [(0, True), (1, False)])
def test_interim_cap(extra: int, accepted: bool) -> None:
    outcome = feed([b"HTTP/1.1 100 Continue\r\n\r\n" * (MAX_INTERIM + extra) + ok(b"Content-Length: 0\r\n")])
    if accepted:
        assert outcome[0] == 200
    else:
        refused(outcome, qa.LimitExceeded, f"more than {MAX_INTERIM} interim responses")


BODIES = {
    "length": lambda n: ok(b"Content-Length: %d\r\n" % n, b"x" * n),
    "chunked": lambda n: ok(CHUNKED, b"%x\r\n%s\r\n0\r\n\r\n" % (n, b"x" * n)),
    "close": lambda n: ok(b"", b"x" * n),
}


@pytest.mark.parametrize("status", [200, 299])
@pytest.mark.parametrize("framing", sorted(BODIES))
@pytest.mark.parametrize(("extra", "accepted"), [(0, True), (1, False)])
def test_body_cap_for_2xx(status: int, framing: str, extra: int, accepted: bool) -> None:
    outcome = read(BODIES[framing](20 + extra).replace(b"200 OK", b"%d OK" % status), limit=20)
    if accepted:
        assert outcome[2] == b"x" * 20
    else:
        refused(outcome, qa.LimitExceeded, "20-byte limit")


@pytest.mark.parametrize(("extra", "accepted"), [(0, True), (1, False)])
def test_a_reader_made_without_a_limit_caps_2xx_bodies_at_2_to_the_62(extra: int, accepted: bool) -> None:
    reader = ResponseReader()
    reader.receive(ok(b"Content-Length: %d\r\n" % ((1 << 62) + extra)))
    assert type(reader.next_event()) is Head
    if accepted:
        assert reader.next_event() is NEED_DATA
    else:
        with pytest.raises(qa.LimitExceeded, match=f"over the {1 << 62}-byte limit"):
            reader.next_event()


@pytest.mark.parametrize("status", [300, 503])
@pytest.mark.parametrize("framing", sorted(BODIES))
def test_body_cap_for_other_statuses(status: int, framing: str) -> None:
    data = BODIES[framing](25).replace(b"200 OK", b"%d Busy" % status)
    assert read(data, limit=20) == (status, read(data)[1], b"x" * 20, False)  # cut, not refused


@pytest.mark.parametrize(
    "body",
    [*(BODIES[framing](21) for framing in sorted(BODIES)),
     ok(CHUNKED, b"a\r\n%s\r\nf\r\n%s\r\n0\r\n\r\n" % (b"x" * 10, b"x" * 15)),
     ok(CHUNKED, b"14\r\n%s\r\n5\r\nxxxxx\r\n0\r\n\r\n" % (b"x" * 20))],
    ids=["chunked", "close", "length", "cut-in-the-second-chunk", "cut-at-a-chunk-boundary"],
)  # fmt: skip
def test_a_cut_body_ends_with_the_bytes_received_no_more_asked(body: bytes) -> None:
    # The server may hold the connection open after the rest: the reader, having the bytes up to
    # the limit, must end the message with them rather than ask for data (a recv that would wait).
    data = body.replace(b"200 OK", b"503 Busy")
    assert read(data, limit=20, eof=False)[2:] == (b"x" * 20, False)


@pytest.mark.parametrize(("digits", "accepted"), [(MAX_SIZE_DIGITS, True), (MAX_SIZE_DIGITS + 1, False)])
def test_chunk_size_digits_cap(digits: int, accepted: bool) -> None:
    outcome = read(ok(CHUNKED, b"5".rjust(digits, b"0") + b"\r\nhello\r\n0\r\n\r\n"))
    if accepted:
        assert outcome[2] == b"hello"
    else:
        refused(outcome, qa.BadFraming, "chunk size line")


@pytest.mark.parametrize(("length", "accepted"), [(MAX_SIZE_LINE, True), (MAX_SIZE_LINE + 1, False)])
def test_chunk_size_line_cap(length: int, accepted: bool) -> None:
    line = b"5;e=" + b"v" * (length - 6) + b"\r\n"
    assert len(line) == length
    outcome = read(ok(CHUNKED, line + b"hello\r\n0\r\n\r\n"))
    if accepted:
        assert outcome[2] == b"hello"
    else:
        refused(outcome, qa.BadFraming, f"chunk size line over {MAX_SIZE_LINE} bytes")


@pytest.mark.parametrize(
    ("data", "error"),
    [(b"HTTP/1.1 200 OK\r\nX: " + b"v" * MAX_LINE, qa.LimitExceeded),
     (b"H" * (MAX_LINE + 1), qa.LimitExceeded),
     (ok(CHUNKED, b"0" * (MAX_SIZE_DIGITS + 1)), qa.BadFraming),
     (ok(CHUNKED, b"5x"), qa.BadFraming),
     (ok(CHUNKED, b";e=v"), qa.BadFraming),
     (ok(CHUNKED, b"5;" + b"e" * MAX_SIZE_LINE), qa.BadFraming),
     (ok(CHUNKED, b"5\r\nhello\n"), qa.BadFraming),
     (ok(b"Content-Length: 30\r\n", b"x" * 10), qa.LimitExceeded),
     (ok(CHUNKED, b"1e\r\n"), qa.LimitExceeded),
     (ok(b"", b"x" * 21), qa.LimitExceeded)],
    ids=["field-line", "status-line", "size-digits", "size-char", "size-no-digit", "size-line", "chunk-crlf",
         "length", "chunk-size", "until-close"],
)  # fmt: skip
def test_caps_are_checked_before_the_line_ends(data: bytes, error: type) -> None:
    # No end of stream, no line end: the reader refuses from what it has, without waiting.
    refused(read(data, limit=20, eof=False), error)


@pytest.mark.parametrize(
    ("size", "quoted"),
    [(b"5x", "'5x'"), (b"x", "'x'"), (b";e=v", "';'"),
     (b"1" * MAX_SIZE_DIGITS + b"x", repr("1" * MAX_SIZE_DIGITS + "x")),
     (b"1" * (MAX_SIZE_DIGITS + 1), repr("1" * (MAX_SIZE_DIGITS + 1)))],
    ids=["after-digit", "no-digit", "no-digit-extension", "after-max-digits", "one-digit-past-max"],
)  # fmt: skip
def test_a_bad_chunk_size_line_is_quoted_up_to_its_first_wrong_byte(size: bytes, quoted: str) -> None:
    # The digits read and the byte that cannot follow them, not the digits alone.
    outcome = read(ok(CHUNKED, size), eof=False)
    assert outcome == (qa.BadFraming, f"bad chunk size line {quoted}")


def test_the_reader_holds_the_final_head_and_counts_the_bytes_past_it() -> None:
    # ``head`` is None until the final head (an interim one is skipped); ``buffered`` counts the
    # bytes received and not read: none at first, the tunnel's first bytes after a 2xx to CONNECT.
    reader = ResponseReader("CONNECT")
    assert (reader.head, reader.buffered) == (None, 0)
    reader.receive(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert reader.next_event() is NEED_DATA
    assert (reader.head, reader.buffered) == (None, 0)
    data = b"HTTP/1.1 200 Connection established\r\n\r\n\x16\x03"
    reader.receive(data)
    assert reader.buffered == len(data)
    assert reader.next_event() is reader.head is not None
    assert (reader.head.status, reader.head.reason, reader.buffered) == (200, "Connection established", 2)
    end = reader.next_event()
    assert type(end) is End
    assert end.reusable is False  # bytes after it: not reusable


def test_a_whole_chunked_message_ends_without_asking_for_more_bytes() -> None:
    # The empty line closing the trailers ends the message: asking for more would leave the
    # connection waiting on a server that has nothing more to send.
    for trailers in (b"", b"X-T: 1\r\n"):
        data = ok(CHUNKED, b"5\r\nhello\r\n0\r\n" + trailers + b"\r\n")
        assert read(data, eof=False)[2:] == (b"hello", True)


def test_a_finished_reader_stays_finished_and_never_says_reusable() -> None:
    # A body read until the close: its end, asked for again, is still not reusable.
    reader = ResponseReader()
    reader.receive(ok(b"", b"abc"))
    reader.receive(b"")
    assert [type(reader.next_event()) for _ in range(2)] == [Head, Data]
    ends = [reader.next_event() for _ in range(2)]
    assert [(type(end), getattr(end, "reusable", None)) for end in ends] == [(End, False)] * 2
    # A refused 2xx chunk (10 bytes over a 5-byte limit), then bytes that would end the body well:
    # the reader is done with the error; it does not read on to an end it calls reusable.
    reader = ResponseReader(limit=5)
    reader.receive(ok(CHUNKED, b"a\r\n0\r\n\r\n"))
    assert type(reader.next_event()) is Head
    with pytest.raises(qa.LimitExceeded, match="5-byte limit"):
        reader.next_event()
    end = reader.next_event()
    assert type(end) is End
    assert end.reusable is False


def test_a_head_arriving_in_pieces_keeps_at_most_64_kib_of_the_bytes_already_read() -> None:
    # The buffer is appended in place and drops what was read once that passes 64 KiB: a 1 MB
    # head in 999-byte pieces (no piece ending with a line) must not be copied whole per piece.
    lines = [b"X-%02d: " % i + b"v" * 9_990 + b"\r\n" for i in range(MAX_HEADERS)]
    head = b"HTTP/1.1 200 OK\r\n" + b"".join(lines)
    pieces = [head[i : i + 999] for i in range(0, len(head), 999)]
    reader = ResponseReader()
    started = not tracemalloc.is_tracing()  # (or already traced, as with PYTHONTRACEMALLOC)
    if started:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        for piece in pieces:
            reader.receive(piece)
            assert reader.next_event() is NEED_DATA
        grown = tracemalloc.get_traced_memory()[1] - before
    finally:
        if started:
            tracemalloc.stop()
    # The lines read (kept for the head) and at most 64 KiB more; copied whole, about three times the head.
    assert grown < len(head) + 256 * 1024, grown
    reader.receive(b"\r\n")
    event = reader.next_event()
    assert type(event) is Head
    assert len(event.headers) == MAX_HEADERS


def test_no_byte_at_all_is_told_apart() -> None:
    refused(read(b""), qa.IncompleteMessage, "without a response")
    refused(read(b"HTTP/1.1 200 OK\r\n"), qa.IncompleteMessage, "inside the response headers")
    refused(read(b"HTTP/1.1 100 Continue\r\n\r\n"), qa.IncompleteMessage, "after an interim response")


@pytest.mark.parametrize(
    ("data", "words"),
    [(ok(b"Content-Length: 10\r\n", b"abc"), "7 bytes of the body missing"),
     (ok(CHUNKED, b"5\r\nhel"), "inside the chunked body"),
     (ok(CHUNKED, b"5\r\nhello\r\n"), "inside the chunked body")],
)  # fmt: skip
def test_end_of_stream_inside(data: bytes, words: str) -> None:
    refused(read(data), qa.IncompleteMessage, words)


def test_end_of_stream_inside_the_trailers_keeps_the_whole_body() -> None:
    # The zero-size chunk arrived: the body is whole (RFC 9112 §8); only the trailers' end is not.
    assert read(ok(CHUNKED, b"5\r\nhello\r\n0\r\nX-T: 1\r\n"))[2:] == (b"hello", False)


@pytest.mark.parametrize(
    "cls", [qa.ProtocolError, qa.MalformedHead, qa.BadFraming, qa.LimitExceeded, qa.IncompleteMessage]
)
def test_protocol_errors_pickle_at_every_protocol(cls: type[qa.ProtocolError]) -> None:
    error = cls("chunk data not followed by CRLF", status=200)
    assert isinstance(error, qa.ProtocolError)
    assert isinstance(error, qa.QAError)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        copied = pickle.loads(pickle.dumps(error, protocol))
        assert (type(copied), str(copied), copied.status) == (cls, str(error), 200)
    assert copy.deepcopy(error).status == 200
    assert cls.__name__ not in {
        "BadStatusLine",
        "IncompleteRead",
        "RemoteDisconnected",
        "LineTooLong",
        "HTTPException",
    }


def test_write_request() -> None:
    fields = (("Host", "example.com"), ("Accept", "application/json"))
    assert write_request("GET", "/v1/models", fields) == (
        b"GET /v1/models HTTP/1.1\r\nHost: example.com\r\nAccept: application/json\r\n\r\n"
    )
    post = write_request("POST", "/v1/core", fields, b'{"a": 1}')
    assert post.endswith(b'Accept: application/json\r\nContent-Length: 8\r\n\r\n{"a": 1}')
    assert write_request("POST", "/x", list(fields)).endswith(b"Content-Length: 0\r\n\r\n")
    # A client writes each request's head once and finishes it per call, with the same bytes.
    head = _wire.request_head("POST", "/v1/core", fields)
    assert _wire.finish_request(head, "POST", b'{"a": 1}') == post


@pytest.mark.parametrize(
    "field",
    [
        ("X-A", "a\r\nInjected: 1"),
        ("X A", "1"),
        ("X-A", "a\x00"),
        ("", "1"),
        ("X:A", "1"),
        ("X-\u20ac", "1"),
        ("X-A", "\u20ac"),
    ],
    ids=repr,
)
def test_write_request_refuses_injection(field: tuple[str, str]) -> None:
    with pytest.raises(qa.ProtocolError, match=r"not a valid HTTP/1\.1 field"):
        write_request("GET", "/", (("Host", "h"), field))


@pytest.mark.parametrize("method", ["GET", "HEAD", "DELETE", "POST", "PUT", "PATCH"])
@pytest.mark.parametrize("body", [b"", b"x"], ids=["no-body", "body"])
def test_has_length_says_whether_the_request_is_written_with_a_content_length(
    method: str, body: bytes
) -> None:
    # The fields the mock transport shows (_http.wire_fields) must be those a socket sends.
    written = b"\r\nContent-Length: " in write_request(method, "/", (("Host", "h"),), body)
    assert _wire.has_length(method, body) is written
    assert written is (bool(body) or method in ("POST", "PUT", "PATCH"))


def test_the_protocol_modules_import_no_io() -> None:
    package = Path(qa.__file__).parent
    for module in ("_protocol", "_wire"):
        tree = ast.parse((package / f"{module}.py").read_text(encoding="utf-8"))
        names = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        names |= {
            node.module.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and not node.level
        }
        assert not names & {"socket", "ssl", "select", "asyncio", "selectors"}, (module, names)


def test_a_line_trickled_byte_by_byte_costs_linear_time() -> None:
    # Appended in place and searched from where the last search stopped: a server sending a
    # 64 KiB line one byte per packet must not cost the client quadratic CPU.
    data = ok(b"X: " + b"v" * (MAX_LINE - 6) + b"\r\nContent-Length: 0\r\n")
    started = time.process_time()
    assert feed([data[i : i + 1] for i in range(len(data))])[0] == 200
    assert time.process_time() - started < 2.0  # about 0.05 s; quadratic, several times this


def test_need_data_names_itself() -> None:
    assert repr(NEED_DATA) == "NEED_DATA"

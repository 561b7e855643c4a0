"""qa_min's reader against h11 on generated responses, valid and adversarial.

For every response, qa_min's reader either agrees with h11 on the status, the fields (names
as sent, values) and the body, or refuses it (a ``ProtocolError``). It never reads a response
h11 refuses, except where RFC 9112 says the response is whole (below). Valid responses are
never refused: the generator knows which ones it made valid. Derandomized, as the suite's other
properties: the same 300 examples every run of the suite, and 2,700 others in the benchmarks'
step (``pytest -m "benchmarks and not engines"``, which CI runs too); 20,000 random ones found no
disagreement either.

Where qa_min refuses what h11 (0.16) reads, on purpose (each also in ``_protocol``'s docstring):

* a control other than HTAB in a field value or reason (h11 takes all but NUL and the ASCII
  blanks; RFC 9110 §5.5 makes them invalid, and a bare CR or VT is a desync vector);
* ``Transfer-Encoding`` in an HTTP/1.0 response (RFC 9112 §6.1: the framing is faulty);
* a chunk extension outside the chunk-ext grammar, e.g. ``5;`` or ``5;a b`` (h11 takes any
  text after ``;``); a chunk size of more than 16 hex digits (h11: 20);
* a status line of another HTTP major version, e.g. ``HTTP/2.0`` (not an HTTP/1 response);
* differently spelled equal Content-Length members (``5, 05``; h11 refuses them too).

Where qa_min reads what h11 refuses: none generated here. (A stream that ends inside the
trailers, after the zero-size chunk, keeps its body in qa_min: RFC 9112 §8 calls such a body
complete; test_protocol.py covers it. Heads over h11's 16 KiB default are not generated.)
"""

from __future__ import annotations

from typing import Any, Optional

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qa_min as qa
from qa_min._protocol import NEED_DATA, Data, End, Head, ResponseReader

pytestmark = pytest.mark.timeout(120)

Parsed = Optional[tuple[int, list[tuple[str, str]], bytes]]


def ours(data: bytes, cuts: list[int]) -> Parsed:
    """qa_min's reading, fed at ``cuts`` and then the end of the stream; None if refused."""
    reader = ResponseReader("GET")
    bounds = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    pieces = [data[a:b] for a, b in zip(bounds, bounds[1:])] + [b""]
    head: Optional[Head] = None
    body: list[bytes] = []
    try:
        while True:
            event = reader.next_event()
            if event is NEED_DATA:
                if not pieces:
                    return None
                reader.receive(pieces.pop(0))
            elif type(event) is Head:
                head = event
            elif type(event) is Data:
                body.append(event.data)
            elif type(event) is End:
                assert head is not None
                return head.status, list(head.headers.items()), b"".join(body)
    except qa.ProtocolError:
        return None


def theirs(data: bytes) -> Parsed:
    """h11's reading of the same bytes; None if it refuses them."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="GET", target="/", headers=[("Host", "example")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(data)
    conn.receive_data(b"")
    final: Any = None
    body: list[bytes] = []
    try:
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Response):
                final = event
            elif isinstance(event, h11.Data):
                body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                fields = [(n.decode("ascii"), v.decode("iso-8859-1")) for n, v in final.headers.raw_items()]
                return final.status_code, fields, b"".join(body)
            elif event is h11.NEED_DATA or event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                return None
    except h11.RemoteProtocolError:
        return None


# -- the generator: valid parts, and adversarial variants of each --------------------------------

NAMES = ["Server", "X-A", "set-cookie", "Retry-After", "Via", "Content-Type", "request-id", "Connection"]
BAD_NAMES = [b"X\x00A", b"X-\xe9", b"X A", b"X\tA", b"", b"X\x0bA", b"X(A)"]
# Whitespace Python's str.strip() takes and RFC 9110 does not: VT, FF, NBSP, NEL, FS..US.
BLANKS = [b" ", b"\t", b"  ", b"\x0b", b"\x0c", b"\xa0", b"\x85", b"\x1c", b"\x00", b"\r"]
VALUE_TEXT = st.binary(max_size=12).map(lambda b: bytes(c for c in b if c not in b"\r\n"))
NICE_VALUE = st.text(alphabet="abcXYZ019 =;,./-_\xe9", max_size=12).map(lambda t: t.encode("latin-1"))
LENGTH_SPELLINGS = ["{n}", "0{n}", "{n}, {n}", " {n} ", "+{n}", "-{n}", "{n}_0", "\xb2", "{n}.0",
                    "{n}\x0b", "\x0c{n}", "\xa0{n}", "{n}, {m}", "{n},", "0x{n}", ""]  # fmt: skip
SIZE_SPELLINGS = ["{x}", "{X}", "000{x}", "{x} ", "{x};a=b", '{x};a="q;\\""', "{x};", "{x};a b", "+{x}",
                  "0x{x}", " {x}", "{x}\x0b", "{x}_", "\xb2"]  # fmt: skip
CODINGS = [b"chunked", b"Chunked", b" chunked\t", b"chunked\x0b", b"\x0cchunked", b"chunked\xa0",
           b"gzip, chunked", b"chunked, chunked", b"identity", b"chunked;q=1", b"chunked,"]  # fmt: skip


def pick(*options: Any) -> st.SearchStrategy[Any]:
    return st.sampled_from(options)


ODD = st.integers(0, 11).map(lambda n: n == 0)  # an adversarial variant one time in twelve
BAD_NAME = pick(*BAD_NAMES)
BLANK = pick(*BLANKS)
BEFORE = pick(b"", b" ", b"\t", b" \t ")
AFTER = pick(b"", b" ", b"\t")
FOLD = pick(b"\r\n ", b"\r\n\t", b"\r\n  ")
NAME = pick(*(name.encode() for name in NAMES))
KIND = pick("length", "length", "chunked", "chunked", "close", "length-odd", "dup-length", "te-odd", "both")
LENGTH_SPELLING = pick(*LENGTH_SPELLINGS)
SIZE_SPELLING = pick(*SIZE_SPELLINGS)
CODING = pick(*CODINGS)
CHUNK_END = pick(b"\n", b"\r", b"", b"X\r\n", b"\r\n\r\n")
SIZE_END = pick(b"\n", b"\r", b"\r\r\n")
TRAILER = pick(b"", b"", b"", b"X-T: 1\r\n", b"X-T: 1\r\n \tmore\r\n", b"Bad Name: 1\r\n")
INTERIM = pick(100, 102, 103)
VERSION = pick(*([b"HTTP/1.1"] * 8), b"HTTP/1.0", b"HTTP/1.0", b"HTTP/1.2", b"HTTP/2.0", b"http/1.1")
STATUS = pick(200, 200, 200, 201, 204, 304, 404, 500, 599, 999)
SEPARATOR = pick(*([b" "] * 12), b"  ", b"\t")
REASON = pick(*([b" OK"] * 6), b"", b" ", b" Some\tReason", b" caf\xe9", b" O\x0bK", b" O\x00K")
NEWLINE = pick(b"\r\n", b"\r\n", b"\r\n", b"\n")
GOOD_SIZES = ("{x}", "{X}", "000{x}", "{x} ", "{x};a=b", '{x};a="q;\\""')


@st.composite
def field_line(draw: st.DrawFn) -> tuple[bytes, Optional[bool]]:
    """A field line (without its line end), and whether it is valid (None: h11 and RFC decide)."""
    if draw(ODD):
        return draw(BAD_NAME) + b": x", False
    name = draw(NAME)
    if draw(ODD):
        blank = draw(BLANK)
        return name + b":" + draw(BEFORE) + blank + draw(VALUE_TEXT) + draw(pick(b"", blank)), None
    line = name + b":" + draw(BEFORE) + draw(NICE_VALUE).strip(b" ") + draw(AFTER)
    if draw(ODD):  # an obs-fold
        line += draw(FOLD) + draw(NICE_VALUE).strip(b" ")
    return line, True


@st.composite
def framing(draw: st.DrawFn, body: bytes, http10: bool) -> tuple[list[bytes], bytes, bool]:
    """(framing field lines, body bytes as sent, valid)."""
    kind = draw(KIND)
    n = len(body)
    if kind == "length":
        return [b"Content-Length: %d" % n], body, True
    if kind == "length-odd":
        spelling = draw(LENGTH_SPELLING).format(n=n, m=n + 1)
        return (
            [b"Content-Length: " + spelling.encode("latin-1")],
            body,
            spelling in (str(n), f"{n}, {n}", f" {n} "),
        )
    if kind == "dup-length":
        other = draw(pick(n, n + 1))
        return [b"Content-Length: %d" % n, b"content-length: %d" % other], body, other == n
    if kind == "close":
        return [], body, True
    chunks, valid = draw(chunked_body(body))
    if kind == "te-odd":
        coding = draw(CODING)
        ok = coding.strip(b" \t").lower() == b"chunked"
        return [b"Transfer-Encoding: " + coding], chunks, valid and ok and not http10
    lines = [b"Transfer-Encoding: chunked"] + ([b"Content-Length: %d" % (n + 3)] if kind == "both" else [])
    return lines, chunks, valid and not http10


@st.composite
def chunked_body(draw: st.DrawFn, body: bytes) -> tuple[bytes, bool]:
    pieces, valid = [], True
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(body) - 1)), max_size=2))))
    for start, stop in zip([0, *cuts], [*cuts, len(body)]):
        data = body[start:stop]
        if not data:
            continue
        spelling = draw(SIZE_SPELLING) if draw(ODD) else "{x}"
        end = draw(CHUNK_END) if draw(ODD) else b"\r\n"
        size_end = draw(SIZE_END) if draw(ODD) else b"\r\n"
        valid = valid and spelling in GOOD_SIZES and end == b"\r\n" and size_end == b"\r\n"
        line = spelling.format(x=f"{len(data):x}", X=f"{len(data):X}").encode("latin-1")
        pieces.append(line + size_end + data + end)
    trailer = draw(TRAILER)
    valid = valid and b"Bad" not in trailer
    return b"".join(pieces) + b"0\r\n" + trailer + b"\r\n", valid


@st.composite
def responses(draw: st.DrawFn) -> tuple[bytes, bool, list[int]]:
    """(bytes, valid, where to split them)."""
    head: list[bytes] = []
    for _ in range(draw(st.integers(0, 2))):
        head += [b"HTTP/1.1 %d Wait" % draw(INTERIM), b""]
    version, separator, reason = draw(VERSION), draw(SEPARATOR), draw(REASON)
    valid = version in (b"HTTP/1.1", b"HTTP/1.0", b"HTTP/1.2") and separator == b" "
    valid = valid and reason not in (b" O\x0bK", b" O\x00K")
    head.append(version + separator + b"%d" % draw(STATUS) + reason)
    for _ in range(draw(st.integers(0, 4))):
        line, line_valid = draw(field_line())
        head.append(line)
        valid = valid and line_valid is True
    body = draw(st.binary(max_size=40))
    lines, sent, framing_valid = draw(framing(body, version == b"HTTP/1.0"))
    head += lines
    newline = draw(NEWLINE)
    data = newline.join([*head, b""]) + newline + sent
    return data, valid and framing_valid, draw(st.lists(st.integers(0, 1000), max_size=4))


def normal(parsed: Parsed) -> Parsed:
    """Fields as h11 keeps them: one Content-Length of its list's one member, TE lowercased."""
    if parsed is None:
        return None
    status, fields, body = parsed
    kept: list[tuple[str, str]] = []
    seen_length = False
    for name, value in fields:
        if name.lower() == "content-length":
            if not seen_length:
                kept.append((name, value.split(",")[0].strip(" \t")))
            seen_length = True
        else:
            kept.append((name, value.lower() if name.lower() == "transfer-encoding" else value))
    return status, kept, body


SETTINGS = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# 300 examples, about 1 s (nine tenths of it Hypothesis drawing them), so that the suite stays
# under its aim; its seed is its code's (decorators aside). 2,700 others run in the benchmarks'
# step below, which CI runs too. Mutations of the reader these 300 catch: an interim status read
# as final, an obs-fold joined without its SP, a Content-Length of 0 not ending the body.
@settings(SETTINGS, max_examples=300)
@given(responses())
def test_qa_min_agrees_with_h11_or_refuses(example: tuple[bytes, bool, list[int]]) -> None:
    data, valid, cuts = example
    mine, reference = normal(ours(data, cuts)), normal(theirs(data))
    if mine is not None:
        assert mine == reference, f"qa_min read {mine!r}, h11 {reference!r}"
    if valid:
        assert mine is not None, "a valid response was refused"
        assert mine == reference


# 2,700 more in each run of CI, from another derandomized sequence.
@pytest.mark.benchmarks
@settings(SETTINGS, max_examples=2700)
@given(responses())
def test_qa_min_agrees_with_h11_or_refuses_on_2700_more_examples(
    example: tuple[bytes, bool, list[int]],
) -> None:
    # The same property, undecorated (Hypothesis keeps it as inner_test, untyped).
    test_qa_min_agrees_with_h11_or_refuses.hypothesis.inner_test(example)  # type: ignore[attr-defined]

"""Reading one HTTP/1.1 response from a buffered stream, every size bounded.

``http.client.HTTPResponse`` (which qa_min does not use) skips only ``100 Continue``, reads a
negative chunk size as "read to the end of the stream", and trusts what a server claims. This
reader:

* skips every interim 1xx response before the final one (RFC 9110 §15.2), at most
  ``MAX_INTERIM`` of them; ``101 Switching Protocols`` is final (qa_min never asks to switch);
* takes a head of at most ``MAX_HEADERS`` lines of ``MAX_LINE`` bytes, each line a ``name:
  value`` field or a continuation, or refuses it;
* frames the body as RFC 9112 §6.3 says: ``Transfer-Encoding: chunked``, else
  ``Content-Length``, else until the server closes; no body for 1xx, 204 and 304;
* holds at most ``limit`` bytes of body, whatever the framing, and checks a chunk size as its
  bytes arrive, so a sign, a non-hex digit or a 17th digit is refused before the line even ends.

What a body that cannot be read whole becomes depends on the status. For a 2xx the body *is* the
answer: over the limit (``Oversized``) or badly framed (``Malformed``) it is refused, and cut short
by the server closing it is ``IncompleteRead``. For any other status the status is the answer and
the body only explains it: whatever could be read, cut at the limit, comes back, and the
connection is not reused.
"""

from __future__ import annotations

import socket

from ._diagnostics import ResponseHeaders

TYPE_CHECKING = False
if TYPE_CHECKING:
    import io
    from typing import Any, Optional

    Stream = io.BufferedReader[Any]

MAX_LINE = 65536  # bytes in a status, header, chunk-size or trailer line (as http.client)
MAX_HEADERS = 100  # lines in a head or a trailer section (as http.client)
MAX_INTERIM = 32  # interim 1xx responses before the final one
MAX_SIZE_LINE = 4096  # a chunk-size line with its extensions
MAX_SIZE_DIGITS = 16  # hex digits of a chunk size: 2**64 - 1 is already far past any limit
FRAMING_ALLOWANCE = 65536  # chunk framing (size lines, CRLFs, trailers) allowed on top of the limit
_PIECE = 65536
_HEX = b"0123456789abcdefABCDEF"
_NO_BODY, _LENGTH, _CHUNKED, _UNTIL_CLOSE = range(4)

# The protocol errors, named and worded as ``http.client``'s (which this module replaces, so
# that a cold start need not load it and the ``email`` package behind it).


class HTTPException(Exception):
    """The response is not HTTP/1.1 as qa_min reads it."""


class BadStatusLine(HTTPException):
    """The first line of the response is not an HTTP/1.x status line."""

    def __init__(self, line: str) -> None:
        super().__init__(line or repr(line))
        self.line = line


class LineTooLong(HTTPException):
    """A line of the head is longer than ``MAX_LINE``."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what

    def __str__(self) -> str:
        return f"got more than {MAX_LINE} bytes when reading {self.what}"


class RemoteDisconnected(ConnectionResetError, BadStatusLine):
    """The server closed the connection before the status line."""

    def __init__(self, *args: object) -> None:
        BadStatusLine.__init__(self, "")
        ConnectionResetError.__init__(self, *args)


class IncompleteRead(HTTPException):
    """The stream ended inside a body: ``partial`` arrived, ``expected`` more bytes did not."""

    def __init__(self, partial: bytes, expected: Optional[int] = None) -> None:
        super().__init__(partial, expected)
        self.partial = partial
        self.expected = expected

    def __str__(self) -> str:
        more = "" if self.expected is None else f", {self.expected} more expected"
        return f"{type(self).__name__}({len(self.partial)} bytes read{more})"

    __repr__ = __str__


class IncompleteHeaders(HTTPException):
    """The connection closed before the response headers were complete."""


class MalformedHead(HTTPException):
    """The status line or the header block is not HTTP/1.1."""


class BadBody(Exception):
    """A 2xx response whose body is refused; ``status`` is the response's status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Oversized(BadBody):
    """A 2xx response body over the size limit; refused rather than buffered."""

    def __init__(self, status: int, length: Optional[int], limit: int) -> None:
        size = "" if length is None else f" has {length} bytes,"
        super().__init__(f"the response body{size} over the {limit}-byte limit", status)


class Malformed(BadBody):
    """A 2xx response body whose framing breaks HTTP/1.1."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"the response body is malformed: {reason}", status)


class Head:
    """The status line and header fields of a final response."""

    __slots__ = ("consumed", "headers", "http11", "reason", "status")

    def __init__(
        self, status: int, reason: str, http11: bool, headers: ResponseHeaders, consumed: int
    ) -> None:
        self.status = status
        self.reason = reason
        self.http11 = http11
        self.headers = headers
        self.consumed = consumed  # bytes taken from the stream, interim responses included


def read_response(fp: Stream, limit: int) -> tuple[int, ResponseHeaders, bytes, bool]:
    """Read one response: (status, headers, body, reusable)."""
    head = read_head(fp)
    body, reusable = read_body(fp, head, limit)
    return head.status, head.headers, body, reusable


def read_head(fp: Stream) -> Head:
    """The final response's head, interim 1xx responses skipped.

    Raises:
        RemoteDisconnected: The stream ended before a status line.
        IncompleteHeaders: The stream ended inside the head.
        MalformedHead, BadStatusLine, LineTooLong, HTTPException: Not an HTTP/1.x head.
    """
    consumed = 0
    for _ in range(MAX_INTERIM + 1):
        line = fp.readline(MAX_LINE + 1)
        if not line:
            if consumed:
                raise IncompleteHeaders("the connection closed after an interim response")
            raise RemoteDisconnected("the server closed the connection without a response")
        if len(line) > MAX_LINE:
            raise LineTooLong("status line")
        status, reason, http11 = _status_line(line)
        lines, used = _header_lines(fp)
        consumed += len(line) + used
        if status >= 200 or status == 101:
            return Head(status, reason, http11, _fields(lines), consumed)
    raise MalformedHead(f"more than {MAX_INTERIM} interim responses")


def _status_line(line: bytes) -> tuple[int, str, bool]:
    parts = line.decode("iso-8859-1").split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise BadStatusLine(line[:80].decode("iso-8859-1").rstrip("\r\n"))
    code = parts[1]
    if len(code) != 3 or not (code.isascii() and code.isdigit()) or code[0] == "0":
        raise BadStatusLine(line[:80].decode("iso-8859-1").rstrip("\r\n"))
    return int(code), (parts[2].strip() if len(parts) > 2 else ""), parts[0] != "HTTP/1.0"


def _header_lines(fp: Stream) -> tuple[list[bytes], int]:
    """The field lines of a head up to its blank line, checked: (lines, bytes consumed)."""
    lines: list[bytes] = []
    used = 0
    while True:
        line = fp.readline(MAX_LINE + 1)
        used += len(line)
        if len(line) > MAX_LINE:
            raise LineTooLong("header line")
        if line in (b"\r\n", b"\n"):
            return lines, used
        if not line or line[-1:] != b"\n":
            raise IncompleteHeaders("the connection closed inside the response headers")
        if line[:1] in (b" ", b"\t"):
            if not lines:
                raise MalformedHead("the first header line is a continuation")
        else:
            # The email parser would take a line without a field name for the start of the body
            # and silently drop every field after it, Content-Length included.
            colon = line.find(b":")
            if colon <= 0 or b" " in line[:colon] or b"\t" in line[:colon]:
                raise MalformedHead(f"not a header field: {line[:80]!r}")
        lines.append(line)
        if len(lines) > MAX_HEADERS:
            raise HTTPException(f"got more than {MAX_HEADERS} headers")


def _fields(lines: list[bytes]) -> ResponseHeaders:
    """The checked field lines as (name, value) pairs, as ``http.client`` gives them: a value
    without its leading blanks and final line break, a continuation line kept in the value
    before it, line break and all."""
    items: list[tuple[str, str]] = []
    for line in lines:
        text = line.decode("iso-8859-1")
        if text[0] in " \t":
            name, value = items[-1]
            items[-1] = (name, value + text)
        else:
            name, _, value = text.partition(":")
            items.append((name, value.lstrip(" \t")))
    return ResponseHeaders([(name, value.rstrip("\r\n")) for name, value in items])


def read_body(fp: Stream, head: Head, limit: int) -> tuple[bytes, bool]:
    """The body ``head`` announces, and whether the connection may serve another request."""
    status, headers = head.status, head.headers
    if not 200 <= status < 300:
        return _error_body(fp, head, limit)
    kind, length = _framing(headers, status)
    if kind == _LENGTH and length <= limit:  # the hot path
        data = fp.read(length) if length else b""
        if len(data) != length:
            raise IncompleteRead(data, length - len(data))
        return data, _keep_alive(headers, head.http11)
    if kind == _LENGTH:
        raise Oversized(status, length, limit)
    if kind == _NO_BODY:
        return b"", _keep_alive(headers, head.http11)
    parts: list[bytes] = []
    if kind == _UNTIL_CLOSE:
        _until_close(fp, status, limit, parts, strict=True)
        return b"".join(parts), False
    complete = _chunked(fp, status, limit, parts, strict=True)
    reusable = complete and _keep_alive(headers, head.http11) and "content-length" not in headers
    return b"".join(parts), reusable


def _error_body(fp: Stream, head: Head, limit: int) -> tuple[bytes, bool]:
    """A non-2xx body, best effort: what could be read, cut at ``limit``."""
    status, headers = head.status, head.headers
    parts: list[bytes] = []
    try:
        kind, length = _framing(headers, status)
        if kind == _NO_BODY:
            return b"", status != 101 and _keep_alive(headers, head.http11)
        if kind == _LENGTH:
            _fixed(fp, min(length, limit), parts)
            return b"".join(parts), length <= limit and _keep_alive(headers, head.http11)
        if kind == _UNTIL_CLOSE:
            _until_close(fp, status, limit, parts, strict=False)
            return b"".join(parts), False
        complete = _chunked(fp, status, limit, parts, strict=False)
        reusable = complete and _keep_alive(headers, head.http11) and "content-length" not in headers
        return b"".join(parts), reusable
    except (HTTPException, BadBody):
        pass
    except OSError as exc:
        if isinstance(exc, socket.timeout):
            raise  # the call's deadline, not the server's answer
    return b"".join(parts)[:limit], False


def _framing(headers: ResponseHeaders, status: int) -> tuple[int, int]:
    """How the body is delimited (RFC 9112 §6.3): (kind, length)."""
    if status < 200 or status in (204, 304):
        return _NO_BODY, 0
    codings = headers.get_all("transfer-encoding")
    if codings:
        names = [c.strip().lower() for value in codings for c in value.split(",") if c.strip()]
        if names != ["chunked"]:
            raise Malformed(status, f"unsupported Transfer-Encoding {', '.join(codings)!r}")
        return _CHUNKED, -1
    lengths = headers.get_all("content-length")
    if not lengths:
        return _UNTIL_CLOSE, -1
    if len(lengths) == 1 and lengths[0].isdigit() and lengths[0].isascii() and len(lengths[0]) < 19:
        return _LENGTH, int(lengths[0])
    values = {v.strip() for value in lengths for v in value.split(",")}
    text = values.pop() if len(values) == 1 else ""
    if not (text.isdigit() and text.isascii()):
        raise Malformed(status, f"invalid Content-Length {', '.join(lengths)[:80]!r}")
    # Past 18 digits the value only matters as "more than any limit"; int() would also refuse
    # a few thousand digits with a ValueError of its own.
    return _LENGTH, int(text) if len(text) < 19 else 1 << 62


def _keep_alive(headers: ResponseHeaders, http11: bool) -> bool:
    tokens = headers.get_all("connection")
    if not tokens:
        return http11
    words = ",".join(tokens).lower()
    if "close" in words:
        return False
    return http11 or "keep-alive" in words


def _fixed(fp: Stream, length: int, parts: list[bytes]) -> None:
    """Read ``length`` bytes in pieces, so that what arrived is kept if the stream fails."""
    while length > 0:
        data = fp.read1(min(length, _PIECE))
        if not data:
            raise IncompleteRead(b"", length)
        parts.append(data)
        length -= len(data)


def _until_close(fp: Stream, status: int, limit: int, parts: list[bytes], strict: bool) -> None:
    total = 0
    while True:
        data = fp.read1(_PIECE)
        if not data:
            return
        if total + len(data) > limit:
            if strict:
                raise Oversized(status, None, limit)
            parts.append(data[: limit - total])
            raise Oversized(status, None, limit)
        parts.append(data)
        total += len(data)


def _chunked(fp: Stream, status: int, limit: int, parts: list[bytes], strict: bool) -> bool:
    """Read a chunked body into ``parts``; False if the stream ended inside the trailers."""
    total = 0
    framing = 0
    while True:
        size, used = _chunk_size(fp, status)
        framing += used
        if size == 0:
            break
        if total + size > limit:
            if not strict:
                _fixed(fp, limit - total, parts)
            raise Oversized(status, None, limit)
        _fixed(fp, size, parts)
        total += size
        # Byte by byte, so that a wrong byte is refused without waiting for the next one.
        end = fp.read(1)
        if end == b"\r":
            end += fp.read(1)
        if end not in (b"\r\n", b"\n"):
            if end in (b"", b"\r"):
                raise IncompleteRead(b"", 2)
            raise Malformed(status, "chunk data is not followed by CRLF")
        framing += len(end)
        if framing > limit + FRAMING_ALLOWANCE:
            raise Malformed(status, f"chunk framing over {limit + FRAMING_ALLOWANCE} bytes")
    for _ in range(MAX_HEADERS + 1):
        line = fp.readline(MAX_LINE + 1)
        framing += len(line)
        if not line:
            return False  # the body is whole; only the end of the trailers is missing
        if line in (b"\r\n", b"\n"):
            return True
        if len(line) > MAX_LINE or framing > limit + FRAMING_ALLOWANCE:
            break
    raise Malformed(status, "the trailer section is too large")


def _chunk_size(fp: Stream, status: int) -> tuple[int, int]:
    """The next chunk size and the length of its line, checked as the line arrives."""
    line = b""
    while True:
        data = fp.peek(1)
        if not data:
            raise IncompleteRead(b"", 1)
        end = data.find(b"\n")
        line += fp.read(len(data) if end < 0 else end + 1)
        digits = len(line) - len(line.lstrip(_HEX))
        # After the digits: optional blanks, then a chunk extension (";...") or the line end.
        rest = line[digits:].lstrip(b" \t")
        if digits == 0 or digits > MAX_SIZE_DIGITS or not _size_rest_ok(rest):
            raise Malformed(status, f"bad chunk size line {line[:40]!r}")
        if len(line) > MAX_SIZE_LINE:
            raise Malformed(status, f"chunk size line over {MAX_SIZE_LINE} bytes")
        if end >= 0:
            return int(line[:digits], 16), len(line)


def _size_rest_ok(rest: bytes) -> bool:
    return not rest or rest[:1] == b";" or rest in (b"\r", b"\r\n", b"\n")

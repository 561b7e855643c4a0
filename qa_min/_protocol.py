"""HTTP/1.1 for a client, with no I/O: bytes in, events out, and the bytes of a request.

``ResponseReader`` is fed what the socket delivers (``receive(data)``, ``b""`` at the end of
the stream) and asked ``next_event()``, which returns ``NEED_DATA``, a ``Head``, ``Data`` or
``End``, or raises a ``ProtocolError`` (see ``_errors``). The threaded connection drives it
with ``recv``; an asyncio one can drive the same object. States::

    HEAD ──interim 1xx (at most MAX_INTERIM, skipped)──> HEAD
      │
      └─final head──> Head event ──> BODY (length | chunked | until close) ──> End(reusable)
                                       └──no body (1xx, 204, 304, HEAD, 2xx to CONNECT)──> End

Every cap is checked as the bytes arrive, not once a line or a body is whole: a line over
``MAX_LINE``, more than ``MAX_HEADERS`` field lines, a chunk size line over ``MAX_SIZE_LINE``
or with a 17th digit, chunk framing past ``FRAMING_ALLOWANCE``, a body past ``limit``.

Refused (``MalformedHead``), per RFC 9112 and RFC 9110 §5:

* a status line other than ``HTTP/1.<digit> SP <3 digits, 100-999> [SP reason]``, one SP each
  (``str.split()`` would also take tabs, VT, FF and runs of blanks); a reason with a control;
* a field name that is not a token (NUL, non-ASCII, blanks, an empty name, a blank before the
  colon); a field value with a control other than HTAB (NUL, bare CR, VT, FF, DEL);
* a bare CR anywhere in the head; a continuation (obs-fold) line first in a block.

Field values lose leading and trailing SP and HTAB and nothing else (``str.strip()`` would also
take VT, FF, NBSP and the other characters Python calls blank). An obs-fold (a line break and
the blanks after it) becomes one SP, as h11 reads it. Lines of the head and trailers may end in
a bare LF (RFC 9112 §2.2 allows recipients that); chunk size lines and chunk data may not.

Framing (RFC 9112 §6.3). A response whose framing is ambiguous is refused (``BadFraming``),
never guessed: a Transfer-Encoding other than one field saying ``chunked`` (case aside), any
Transfer-Encoding in an HTTP/1.0 response (§6.1: its framing is faulty), a Content-Length that
is not 1*DIGIT or whose list holds differing or empty members, a chunk size line that is not
``1*16HEXDIG [chunk-ext] [blanks] CRLF``, chunk data not followed by exactly CRLF (a bare LF,
or a size that swallowed the CR), a trailer field that is not a field. Numbers are matched by
ASCII-only byte patterns before ``int()`` sees them (``int`` would take a sign, ``_``, blanks
and non-ASCII digits). Transfer-Encoding with Content-Length is read as chunked and the
connection is not reused (SPEC §7); neither is one whose body ends at the close, whose
``Connection`` field says ``close`` (or, for HTTP/1.0, lacks ``keep-alive``), a ``101``, or
one with bytes left over after the message.

Framing fields are checked whatever the status, and errors found with the head are raised after
the ``Head`` event, carrying its ``status`` and ``headers`` (as do all errors after it), so the
caller has the head whatever follows. A 2xx body over ``limit`` is refused (``LimitExceeded``);
the body of another status is cut at ``limit`` and ends the message, not reusable. (What the
connection makes of an error after a non-2xx head, the status being the answer, is its call.)

Stricter than h11 (0.16), on purpose: a status line other than HTTP/1.x; controls other than
HTAB in field values and reasons (h11 takes all but NUL and ASCII blanks; RFC 9110 §5.5 makes
them invalid); a chunk size of more than 16 hex digits (h11: 20; 16 already exceeds any cap);
a chunk extension that breaks the chunk-ext grammar (h11 takes anything after ``;``); a bare
LF ending a chunk size line (h11 waits for a CRLF); Transfer-Encoding in HTTP/1.0 (h11 reads
it); more than ``MAX_INTERIM`` interim responses. More lenient, on purpose: a stream ending in
the trailers, after the zero-size chunk, keeps its body (RFC 9112 §8 calls the body complete;
not reusable); a head may exceed h11's default 16 KiB (up to the caps above).
"""

from __future__ import annotations

import re

from ._diagnostics import ResponseHeaders
from ._errors import BadFraming, IncompleteMessage, LimitExceeded, MalformedHead, ProtocolError
from ._wire import HEX, SIZE_LINE, byte_count, content_length, members, parse_fields, shown, status_line
from ._wire import NEED_DATA as NEED_DATA
from ._wire import Data as Data
from ._wire import End as End
from ._wire import Head as Head
from ._wire import write_request as write_request

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional, Union

    from ._wire import _NeedData

    Event = Union[Head, Data, End, _NeedData]

MAX_LINE = 65536  # bytes in a status, field, or trailer line (as http.client)
MAX_HEADERS = 100  # field lines in a head or a trailer section (as http.client)
MAX_INTERIM = 32  # interim 1xx responses before the final one
MAX_SIZE_LINE = 4096  # a chunk size line with its extensions
MAX_SIZE_DIGITS = 16  # hex digits of a chunk size: 2**64 - 1 is already far past any limit
FRAMING_ALLOWANCE = 65536  # chunk framing (size lines, CRLFs, trailers) allowed on top of the limit

_PIECE = 65536  # consumed bytes a growing buffer may keep before it is compacted
_NO_BODY, _LENGTH, _CHUNKED, _UNTIL_CLOSE = range(4)
# Where a chunked body is: a size line, chunk data, the CRLF after it, the trailers, done.
_SIZE, _DATA, _CRLF, _TRAILER, _DONE = range(5)


class ResponseReader:
    """Reads one response to a request made with ``method``; 2xx bodies capped at ``limit``.

    A body of another status is cut at ``limit`` and ends the message (not reusable). After the
    ``Head``, an error carries its status and headers; the events before it hold what could be read.
    """

    def __init__(self, method: str = "POST", limit: int = 1 << 62) -> None:
        self.method = method
        self.limit = limit
        self.head: Optional[Head] = None
        self._buf: bytes | bytearray = b""
        self._pos = 0  # bytes of _buf already read
        self._scan = 0  # where the search for the next line end resumes
        self._eof = False
        self._interim = 0
        self._lines: list[bytes] = []  # the head's (or the trailers') lines so far
        self._kind = -1  # the body's framing, once the head is read
        self._state = _SIZE
        self._left = 0  # body (or chunk) bytes still expected
        self._body = 0  # body bytes handed out
        self._framing = 0  # chunk framing bytes seen
        self._reusable = False
        self._pending: Optional[ProtocolError] = None  # found with the head, raised after it

    @property
    def buffered(self) -> int:
        """Bytes received and not yet read as part of the response."""
        return len(self._buf) - self._pos

    def receive(self, data: bytes) -> None:
        """Bytes from the connection; ``b""`` when it reached its end."""
        if not data:
            self._eof = True
        elif self._pos < len(self._buf):
            # A line or a chunk arriving in many pieces: appended in place, so that a server
            # trickling a long line byte by byte costs linear time, not quadratic.
            if type(self._buf) is bytes or self._pos > _PIECE:
                self._scan -= self._pos
                self._buf, self._pos = bytearray(self._buf[self._pos :]), 0
            self._buf += data
        else:
            self._buf, self._pos, self._scan = data, 0, 0

    def next_event(self) -> Event:
        """The next event, or ``NEED_DATA``; raises ``ProtocolError``."""
        if self._kind < 0:
            return self._read_head()
        try:
            if self._pending is not None:
                raise self._pending
            if self._state == _DONE:
                return End(self._reusable and self._pos == len(self._buf))
            if self._kind == _LENGTH:
                return self._read_length()
            if self._kind == _CHUNKED:
                return self._read_chunked()
            return self._read_until_close()
        except ProtocolError as exc:
            exc.status, exc.headers = (head.status, head.headers) if (head := self.head) else (None, None)
            self._state, self._reusable = _DONE, False
            raise

    def _line(self, what: str) -> Optional[bytes]:
        """The next whole line, or None; raises once the line can no longer end within MAX_LINE bytes."""
        buf, pos = self._buf, self._pos
        end = buf.find(b"\n", pos if pos >= self._scan else self._scan)
        if end < 0 or end - pos >= MAX_LINE:
            if end < 0:
                self._scan = len(buf)
            # MAX_LINE bytes with no line end among them can only grow into a longer line.
            if len(buf) - pos >= MAX_LINE or end >= 0:
                raise LimitExceeded(f"a line of more than {MAX_LINE} bytes when reading {what}")
            return None
        self._pos = end + 1
        return buf[pos : end + 1] if type(buf) is bytes else bytes(buf[pos : end + 1])

    # -- the head ---------------------------------------------------------------------

    def _read_head(self) -> Event:
        lines = self._lines
        while True:
            line = self._line("a header line" if lines else "the status line")
            if line is None:
                if self._eof:
                    raise self._closed_in_head()
                return NEED_DATA
            if len(line) > 2 or not lines or line not in (b"\r\n", b"\n"):
                lines.append(line)
                if len(lines) > MAX_HEADERS + 1:
                    raise LimitExceeded(f"got more than {MAX_HEADERS} headers")
                continue
            head = self._parse_head()
            if head is not None:
                return head
            lines = self._lines

    def _closed_in_head(self) -> IncompleteMessage:
        if self._lines or self._pos < len(self._buf):
            return IncompleteMessage("the connection closed inside the response headers")
        if self._interim:
            return IncompleteMessage("the connection closed after an interim response")
        return IncompleteMessage("the server closed the connection without a response")

    def _parse_head(self) -> Optional[Head]:
        lines, self._lines = self._lines, []
        parsed = status_line(lines[0])
        if parsed is None:
            raise MalformedHead(f"not an HTTP/1.x status line: {shown(lines[0])}")
        http11, status, reason = parsed
        fields = parse_fields(lines[1:], MalformedHead)
        if status < 200 and status != 101:  # qa_min never asks to switch: 101 is final
            self._interim += 1
            if self._interim > MAX_INTERIM:
                raise LimitExceeded(f"more than {MAX_INTERIM} interim responses")
            return None
        headers = ResponseHeaders([(n.decode("ascii"), v.decode("iso-8859-1")) for n, v in fields])
        self.head = Head(status, reason.decode("iso-8859-1"), http11, headers)
        try:
            self._frame(status, http11, fields)
        except ProtocolError as exc:
            self._pending = exc
        return self.head

    def _frame(self, status: int, http11: bool, fields: list[tuple[bytes, bytes]]) -> None:
        """Choose the body's framing and reuse (RFC 9112 §6.3, §9.3) from the head's fields."""
        codings: list[bytes] = []
        lengths: list[bytes] = []
        options: list[bytes] = []
        for name, value in fields:
            lower = name.lower()
            if lower == b"transfer-encoding":
                codings.append(value)
            elif lower == b"content-length":
                lengths.append(value)
            elif lower == b"connection":
                options.append(value)
        if options:
            options = members(options)
        self._reusable = b"close" not in options and (http11 or b"keep-alive" in options) and status != 101
        self._kind, self._state = _UNTIL_CLOSE, _SIZE
        # Checked whatever the status, so that no response with such fields is ever reused.
        length = content_length(lengths) if lengths else -1
        if codings and not http11:
            raise BadFraming("Transfer-Encoding in an HTTP/1.0 response")
        if codings and (len(codings) != 1 or codings[0].lower() != b"chunked"):
            raise BadFraming(f"unsupported Transfer-Encoding {shown(b', '.join(codings))}")
        if (
            status < 200
            or status in (204, 304)
            or self.method == "HEAD"
            or (self.method == "CONNECT" and status < 300)
        ):
            self._kind, self._state = _NO_BODY, _DONE
        elif codings:
            self._kind = _CHUNKED
            self._reusable = self._reusable and not lengths
        elif length >= 0:
            self._kind, self._left = _LENGTH, length
            if length > self.limit:
                if 200 <= status < 300:
                    raise LimitExceeded(
                        f"the response body has {byte_count(length)}, over the {self.limit}-byte limit"
                    )
                self._left, self._reusable = self.limit, False
            if not self._left:
                self._state = _DONE
        else:
            self._reusable = False

    # -- the body ---------------------------------------------------------------------

    def _take(self, count: int) -> bytes:
        pos = self._pos
        if pos == 0 and len(self._buf) <= count:  # the common case: no copy
            data, self._buf = self._buf, b""
            return bytes(data)
        data = bytes(self._buf[pos : pos + count])
        self._pos = pos + len(data)
        return data

    def _read_length(self) -> Event:
        if self._pos == len(self._buf):
            if self._eof:
                raise IncompleteMessage(f"the connection closed with {self._left} bytes of the body missing")
            return NEED_DATA
        data = self._take(self._left)
        self._left -= len(data)
        if not self._left:
            self._state = _DONE
        return Data(data)

    def _read_until_close(self) -> Event:
        if self._pos < len(self._buf):
            data = self._take(self.limit - self._body + 1)
            self._body += len(data)
            if self._body > self.limit:
                self._over_limit()
                return Data(data[:-1])
            return Data(data)
        if self._eof:
            self._state = _DONE
            return End(False)
        return NEED_DATA

    def _over_limit(self) -> None:
        if self.head is not None and 200 <= self.head.status < 300:
            raise LimitExceeded(f"the response body over the {self.limit}-byte limit")
        self._state, self._reusable = _DONE, False

    def _read_chunked(self) -> Event:
        while self._kind == _CHUNKED:
            state = self._state
            if state == _DATA:
                if self._pos == len(self._buf):
                    break
                data = self._take(self._left)
                self._left -= len(data)
                self._body += len(data)
                if not self._left:
                    self._state = _CRLF
                return Data(data)
            if state == _DONE:
                return End(self._reusable and self._pos == len(self._buf))
            step = (
                self._size_line
                if state == _SIZE
                else self._chunk_end
                if state == _CRLF
                else self._trailer_line
            )
            if not step():
                break
        else:
            return self.next_event()  # cut at the limit: the rest is read as a fixed length
        if self._eof:
            if self._state == _TRAILER:
                # The zero-size chunk came: the body is whole (RFC 9112 §8), only the end of the
                # optional trailers is missing. Not reusable.
                self._state, self._reusable = _DONE, False
                return End(False)
            raise IncompleteMessage("the connection closed inside the chunked body")
        return NEED_DATA

    def _size_line(self) -> bool:
        buf, pos = self._buf, self._pos
        end = buf.find(b"\n", pos, pos + MAX_SIZE_LINE + 1)
        lead = bytes(buf[pos : pos + MAX_SIZE_DIGITS + 1])
        digits = len(lead) - len(lead.lstrip(HEX))
        after = buf[pos + digits : pos + digits + 1]
        if (digits == 0 and after) or digits > MAX_SIZE_DIGITS or after not in b" \t;\r":
            raise BadFraming(f"bad chunk size line {shown(bytes(buf[pos : pos + digits + 1]))}")
        if end < 0 or end - pos >= MAX_SIZE_LINE:
            if len(buf) - pos > MAX_SIZE_LINE:
                raise BadFraming(f"chunk size line over {MAX_SIZE_LINE} bytes")
            return False
        line = bytes(buf[pos : end + 1])
        match = re.match(SIZE_LINE, line)
        if match is None:
            raise BadFraming(f"bad chunk size line {shown(line)}")
        self._pos = end + 1
        size = int(match.group(1), 16)
        if size:
            self._count_framing(len(line))
        if self._body + size > self.limit:
            self._over_limit()  # a 2xx is refused; another status keeps what fits
            self._kind, self._left = _LENGTH, self.limit - self._body
            self._state = _SIZE if self._left else _DONE
            return True
        self._left = size
        self._state = _DATA if size else _TRAILER
        return True

    def _chunk_end(self) -> bool:
        # Byte by byte, so that a wrong byte is refused without waiting for the next one.
        two = self._buf[self._pos : self._pos + 2]
        if two[:1] != b"\r" or two[1:] not in (b"\n", b""):
            if two:
                raise BadFraming("chunk data not followed by CRLF")
            return False
        if len(two) < 2:
            return False
        self._pos += 2
        self._count_framing(2)
        self._state = _SIZE
        return True

    def _trailer_line(self) -> bool:
        try:
            line = self._line("a trailer line")
        except LimitExceeded as exc:
            raise BadFraming(f"the trailer section is too large: {exc}") from None
        if line is None:
            return False
        if line in (b"\r\n", b"\n"):
            parse_fields(self._lines, BadFraming)
            self._lines = []
            self._state = _DONE
            return True
        self._count_framing(len(line))
        self._lines.append(line)
        if len(self._lines) > MAX_HEADERS:
            raise BadFraming("the trailer section is too large")
        return True

    def _count_framing(self, count: int) -> None:
        self._framing += count
        if self._framing > self.limit + FRAMING_ALLOWANCE:
            raise BadFraming(f"chunk framing over {self.limit + FRAMING_ALLOWANCE} bytes")

"""HTTP/1.1 on the wire: the grammar of its lines, the events of a response, a request's bytes.

The ABNF of RFC 9112 and RFC 9110 §5 as byte patterns, matched before any number is converted
or any text decoded: a bytes pattern's ``[0-9]`` is ASCII, where ``int()`` and ``str.isdigit``
would also take a sign, ``_``, blanks and other scripts' digits, and ``str.strip``/``split``
would take VT, FF, NBSP and more for blanks. ``_protocol`` reads responses with them.
"""

from __future__ import annotations

import re

from ._errors import BadFraming, ProtocolError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Optional

    from ._diagnostics import ResponseHeaders

TOKEN = rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+"
QUOTED = rb'"(?:[\t !#-\[\]-~\x80-\xff]|\\[\t -~\x80-\xff])*"'
# One greedy class per free-text part, so that a failed match backtracks in linear time.
FIELD_LINE = re.compile(rb"(" + TOKEN + rb"):([\t\x20-\x7e\x80-\xff]*)\r?\n\Z")
FOLD_LINE = rb"[ \t]([\t\x20-\x7e\x80-\xff]*)\r?\n\Z"  # compiled on first use (re's cache), as is:
EXT = rb"[ \t]*;[ \t]*" + TOKEN + rb"(?:[ \t]*=[ \t]*(?:" + TOKEN + rb"|" + QUOTED + rb"))?"
SIZE_LINE = rb"([0-9A-Fa-f]{1,16})(?:" + EXT + rb")*[ \t]*\r\n\Z"
HEX = b"0123456789abcdefABCDEF"
TEXT = bytes([9, *range(0x20, 0x7F), *range(0x80, 0x100)])  # HTAB, VCHAR, SP, obs-text


def status_line(line: bytes) -> Optional[tuple[bool, int, bytes]]:
    """(HTTP/1.1 or later, status, reason) of ``HTTP/1.<digit> SP 3DIGIT [SP reason] [CR]LF``.

    By hand, not by pattern: this one runs on every response, and a pattern costs a cold
    start its compilation. ``bytes.isdigit()`` is ASCII-only; ``translate`` deletes the octets
    a reason may hold, so anything left over is a control.
    """
    text = line[:-2] if line[-2:] == b"\r\n" else line[:-1]
    code, rest = text[9:12], text[12:]
    if (
        text[:7] != b"HTTP/1."
        or not text[7:8].isdigit()
        or text[8:9] != b" "
        or len(code) != 3
        or not code.isdigit()
        or code[:1] == b"0"
        or (rest and (rest[:1] != b" " or rest[1:].translate(None, TEXT)))
    ):
        return None
    return text[7:8] != b"0", int(code), rest[1:]


BLANK = b" \t"  # the only whitespace around a field value (RFC 9110 §5.5)


class Head:
    """The final response's status line and fields."""

    __slots__ = ("headers", "http11", "reason", "status")

    def __init__(self, status: int, reason: str, http11: bool, headers: ResponseHeaders) -> None:
        self.status = status
        self.reason = reason
        self.http11 = http11  # HTTP/1.1 or a later 1.x minor version
        self.headers = headers


class Data:
    """A piece of the body."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class End:
    """The end of the response; ``reusable`` says whether the connection may serve another."""

    __slots__ = ("reusable",)

    def __init__(self, reusable: bool) -> None:
        self.reusable = reusable


class _NeedData:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedData()


def parse_fields(lines: Sequence[bytes], error: type[ProtocolError]) -> list[tuple[bytes, bytes]]:
    """The (name, value) pairs of field lines, each checked, every obs-fold replaced by one SP.

    The fold is its line break and the blanks after it; blanks before it stay, to be trimmed
    with the value's own (as h11 reads folds: RFC 9112 §5.2 allows one or more SP).
    """
    fields: list[tuple[bytes, bytes]] = []
    for line in lines:
        match = FIELD_LINE.match(line)
        if match is not None:
            fields.append((match.group(1), match.group(2)))
            continue
        fold = re.match(FOLD_LINE, line)
        if fold is None:
            raise error(f"not a header field: {shown(line)}")
        if not fields:
            raise error("the first header line is a continuation")
        name, value = fields[-1]
        fields[-1] = (name, value + b" " + fold.group(1).lstrip(BLANK))
    return [(name, value.strip(BLANK)) for name, value in fields]


_UNPRINTABLE = dict.fromkeys([*range(32), *range(127, 161)], "?")


def shown(line: bytes) -> str:
    """At most 40 bytes of a line, for a message: Latin-1 text, controls as ``?``.

    Not ``repr()``: its escapes (a doubled backslash, ``\\xe9``) would hide an echoed key from
    the redaction that the retry loop applies to every message.
    """
    text = line[:40].rstrip(b"\r\n").decode("iso-8859-1").translate(_UNPRINTABLE)
    return f"'{text}'"


def members(values: list[bytes]) -> list[bytes]:
    """The members of comma-separated list fields, trimmed of SP/HTAB, ASCII-lowercased."""
    return [m.strip(BLANK).lower() for value in values for m in value.split(b",") if m.strip(BLANK)]


LENGTH_DIGITS = 40
"""The significant digits of a Content-Length read exactly; a longer one reads as 10**40."""


def content_length(values: list[bytes]) -> int:
    members = {m.strip(BLANK) for value in values for m in value.split(b",")}
    text = members.pop() if len(members) == 1 else b""
    if not text.isdigit():  # bytes.isdigit() is ASCII-only, unlike str.isdigit()
        raise BadFraming(f"invalid Content-Length {shown(b', '.join(values))}")
    # Leading zeros are allowed (1*DIGIT) and weigh nothing. Past 40 digits the value only
    # matters as "more than any limit"; int() would refuse a few thousand with a ValueError.
    digits = text.lstrip(b"0") or b"0"
    return int(digits) if len(digits) <= LENGTH_DIGITS else 10**LENGTH_DIGITS


def byte_count(length: int) -> str:
    """A ``content_length`` for a message: exact, or a true bound for one too long to read."""
    return f"{length} bytes" if length < 10**LENGTH_DIGITS else f"at least 10**{LENGTH_DIGITS} bytes"


_SENDS_BODY = ("POST", "PUT", "PATCH")


def request_head(method: str, target: str, fields: Sequence[tuple[str, str]]) -> bytes:
    """The request line and the fields, each ended by CRLF (the blank line is not included);
    ``ProtocolError`` for a field that would not be read back as written. A client builds the
    head of each of its requests once (``_http.Outgoing``) and finishes it per call."""
    return f"{method} {target} HTTP/1.1\r\n".encode("ascii") + _field_block(tuple(fields))


def has_length(method: str, body: bytes) -> bool:
    """Whether a request says ``Content-Length``: with a body, or for a method that sends one."""
    return bool(body) or method in _SENDS_BODY


def finish_request(head: bytes, method: str, body: bytes) -> bytes:
    """The bytes of a request whose head ``request_head`` wrote: one piece, for one ``send``."""
    if body or method in _SENDS_BODY:
        return b"%sContent-Length: %d\r\n\r\n%s" % (head, len(body), body)
    return head + b"\r\n"


def write_request(method: str, target: str, fields: Sequence[tuple[str, str]], body: bytes = b"") -> bytes:
    """The bytes of a request; Content-Length is added for a body (or any POST/PUT/PATCH)."""
    return finish_request(request_head(method, target, fields), method, body)


def _field_block(fields: tuple[tuple[str, str], ...]) -> bytes:
    lines = []
    for name, value in fields:
        try:
            line = f"{name}: {value}\r\n".encode("latin-1")
            match = FIELD_LINE.match(line)
            valid = match is not None and match.group(1) == name.encode("ascii") and line.count(b"\n") == 1
        except UnicodeEncodeError:
            valid = False
        if not valid:
            raise ProtocolError(f"the request field {name!r} is not a valid HTTP/1.1 field")
        lines.append(line)
    return b"".join(lines)

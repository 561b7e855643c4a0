"""The checks of a scripted step's fields: its kind, status, headers and seconds.

One implementation, run by ``_fakerules.Step`` itself (a step built directly) and by the
builders of ``qa_min.testing`` (``reply``, ``delay``, ...), so that both refuse the same values
with the same messages, in the test that builds the step rather than in the thread serving it.
"""

from __future__ import annotations

import _thread
import re
from collections.abc import Iterable
from typing import Final, Literal, get_args

from ._errors import ConfigurationError
from ._typing import plain, read, short
from ._wire import TOKEN

HeaderPairs = tuple[tuple[str, str], ...]
StepKind = Literal["reply", "delay", "hang", "drop", "reset", "truncate"]
STEP_KINDS: Final[tuple[str, ...]] = get_args(StepKind)
# The client's own grammar for a field name (RFC 9110 section 5.1: a token).
_FIELD_NAME: Final = re.compile(TOKEN)


def step_kind(kind: object) -> str:
    """A step's kind, checked: one of ``STEP_KINDS``."""
    if not isinstance(kind, str):
        raise TypeError(f"kind must be a str, one of {', '.join(STEP_KINDS)}, not {short(kind)}")
    if kind not in STEP_KINDS:
        # An unknown kind was played as a dropped connection by FakeService and as the normal
        # answer by MockTransport: one script, two outcomes.
        raise ValueError(f"kind must be one of {', '.join(STEP_KINDS)}, not {kind!r}")
    return kind


def step_status(status: object) -> int:
    """``reply``'s status, checked: an int within 200-599."""
    status = plain(status)  # an int subclass's own __le__ is never called
    if isinstance(status, bool) or not isinstance(status, int):
        raise TypeError(f"status must be an int within 200-599, not {short(status)}")
    if not 200 <= status <= 599:
        # A 1xx would make http.client wait for a final response that never comes.
        raise ValueError(f"status must be within 200-599, not {short(status)}")
    return status


def step_body(body: object) -> bytes:
    """A step's body, checked: bytes (``reply`` encodes a str or a JSON value into them)."""
    if not isinstance(body, bytes):
        # FakeService's handler thread failed writing a str, while MockTransport delivered it.
        raise TypeError(f"a Step's body must be bytes (reply() encodes str and JSON), not {short(body)}")
    # A subclass is copied by bytes' own slicing, so that none of its overrides (__len__) runs later.
    return body if type(body) is bytes else bytes.__getitem__(body, slice(None))


def header_pairs(headers: object) -> HeaderPairs:
    """``reply``'s headers checked: a sequence of ``(name, value)`` pairs of str."""
    pairs: list[tuple[str, str]] = []
    items: Iterable[object] = [None]  # a str or a number is no sequence of pairs
    if isinstance(headers, Iterable) and not isinstance(headers, (str, bytes)):
        items = headers
        if type(headers) not in (tuple, list):  # the caller's own object: reading it runs its code
            items = read(list, headers, "headers", "iterating it", TypeError)
    for given in items:
        item = given
        if type(given) not in (tuple, list) and isinstance(given, (tuple, list)):
            item = read(tuple, given, "headers", "iterating an item", TypeError)
        # Each text as str's own: a subclass's encode(), __iter__ or __contains__ never runs.
        pair = tuple(map(plain, item)) if isinstance(item, (tuple, list)) else None
        if not (pair is not None and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise TypeError(f"headers must be a sequence of (name, value) pairs of str, not {short(headers)}")
        if any(ch in text for text in pair for ch in "\r\n\0"):
            # Written as given, a line break would end the field and start another one.
            raise ValueError(f"a header name or value must not hold CR, LF or NUL, got {pair!r}")
        if not all(text.isascii() or max(text) <= "\xff" for text in pair):
            # The fake's server writes fields as Latin-1: it dropped the connection instead.
            raise ValueError(f"a header name or value must be Latin-1 text, got {pair!r}")
        if not _FIELD_NAME.fullmatch(pair[0].encode("latin-1")):
            # Over a socket the client refuses such a head (MalformedHead), or reads "x:y: v" as
            # the field "x", while MockTransport handed it on as given: one script, two outcomes.
            raise ValueError(
                f"header name {pair[0]!r} is not an RFC 9110 token: one or more letters, digits "
                "or any of !#$%&'*+-.^_`|~"
            )
        pairs.append((pair[0], pair[1]))
    return tuple(pairs)


def step_headers(headers: object) -> HeaderPairs:
    """A step's headers: checked as ``header_pairs`` checks them, without a Content-Length (the
    fake always sends the body's own); a Transfer-Encoding refused."""
    pairs = header_pairs(headers)
    if any(name.lower() == "transfer-encoding" for name, _ in pairs):
        # Sent with the fake's Content-Length, the client read a chunked body's JSON as chunk
        # sizes, while MockTransport delivered it: one script, two outcomes.
        raise ValueError(
            "a step cannot set Transfer-Encoding: the fake frames every body by its Content-Length"
        )
    # One kept, the fake sent two ("5, 38": refused), while MockTransport delivered the body.
    return tuple(pair for pair in pairs if pair[0].lower() != "content-length")


def delay_seconds(seconds: object) -> float:
    """``delay``'s seconds, checked: a number from 0 to ``_thread.TIMEOUT_MAX``."""
    seconds = plain(seconds)  # a subclass's own __lt__ or __le__ never runs
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"seconds must be a number, not {short(seconds)}")
    if seconds < 0:
        raise ValueError(f"seconds must not be negative, not {short(seconds)}")
    if not seconds <= _thread.TIMEOUT_MAX:  # NaN too
        # NaN and infinity would hold the request for ever, as hang() does; a longer finite
        # wait raised OverflowError in the thread serving it, which then dropped the request.
        most = int(_thread.TIMEOUT_MAX)
        raise ValueError(
            f"seconds must be finite and at most {most} (hang() never answers), not {short(seconds)}"
        )
    return seconds


def not_a_step(returned: object) -> ConfigurationError:
    """The error of a call whose ``MockTransport`` handler returned ``returned``, which is
    neither a ``Step`` nor None: what it returned, and what it must return."""
    # A TypeError from inside the client said neither, and was no QAError the caller catches.
    return ConfigurationError(
        f"the MockTransport handler returned {short(returned)} (a {type(returned).__name__}); it must "
        "return a Step, built by reply(), delay(), hang(), drop(), reset() or truncate(), or None "
        "for the service's normal answer"
    )

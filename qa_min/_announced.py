"""Announced rate limits: the response fields that say what the limit is, parsed. A leaf, pure.

``parse(headers, wall)`` reads, in this order, the first family a response carries:

* IETF draft-11 structured fields: ``RateLimit-Policy: "default";q=100;w=10`` and
  ``RateLimit: "default";r=50;t=30`` (quota ``q`` per ``w`` seconds; ``r`` remaining, ``t``
  seconds until the quota is back);
* the older drafts: ``RateLimit: limit=100, remaining=50, reset=5``, or ``RateLimit-Limit``,
  ``RateLimit-Remaining``, ``RateLimit-Reset`` (with ``RateLimit-Policy: 100;w=10`` when sent);
* OpenAI's ``x-ratelimit-{limit,remaining,reset}-requests`` (reset a duration as Go writes one:
  ``12ms``, ``1s``, ``6m0s``, ``1h2m3.5s``, ``500µs``);
* Anthropic's ``anthropic-ratelimit-requests-{limit,remaining,reset}`` (reset an RFC 3339 time);
* GitHub's ``x-ratelimit-{limit,remaining,reset}`` (reset in epoch seconds).

A reset may be seconds, a duration, epoch seconds (or milliseconds) or an RFC 3339 time. Several
policies in one field: the most restrictive (the lowest refill rate, else the least remaining
per second); a list field sent as several lines is one list (RFC 9110, section 5.3), a quoted
name may hold the list's separators (RFC 8941, section 3.3.3), a draft-11 policy whose quota
unit (``qu``) is not requests (``"request"``, an intermediate draft's spelling, is requests too)
is left out, and one with no window (``w``) tells its quota but no rate. A malformed field is
ignored: ``parse`` never raises; it returns None when nothing usable is there.
"""

from __future__ import annotations

import math
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Optional

# Draft-11's quota unit of calls, and its singular, which servers built on an intermediate draft send.
_CALLS = ("requests", "request")
EPOCH = 1e9  # a reset this large is a time (epoch seconds), not a delay...
EPOCH_MS = 1e12  # ...and this large, epoch milliseconds (as seconds: the year 33658)
# ASCII digits only: ``\d`` would also match other scripts' digits, which ``float()`` reads.
# Go's ``time.Duration`` text, its units in order; below a millisecond Go writes ``µs`` (U+00B5)
# and ``ns``, and its parser also takes ``us`` and ``μs`` (U+03BC). Header values are read as
# ISO-8859-1, so a micro sign sent in UTF-8 arrives as two characters (``\xc2\xb5``, ``\xce\xbc``).
_DURATION = (
    r"(?:([0-9]+(?:\.[0-9]*)?)h)?(?:([0-9]+(?:\.[0-9]*)?)m(?!s))?"
    r"(?:([0-9]+(?:\.[0-9]*)?)s)?(?:([0-9]+(?:\.[0-9]*)?)ms)?"
    r"(?:([0-9]+(?:\.[0-9]*)?)(?:u|\xb5|\u03bc|\xc2\xb5|\xce\xbc)s)?(?:([0-9]+(?:\.[0-9]*)?)ns)?"
)
_UNITS = (3600.0, 60.0, 1.0, 1e-3, 1e-6, 1e-9)  # seconds in each of _DURATION's groups
_RFC3339 = (
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?"
    r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))"
)
# HTTP's whitespace (RFC 9110 5.6.3): str.strip() would also take NBSP and NEL (obs-text, which a
# value may hold), so "\xa05" would read as 5.
_OWS = " \t"
# A number as the fields write one: no sign, no ``_``, no ``inf``/``nan`` (all of which ``float()`` takes).
_DECIMAL = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_OPENAI = ("x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests")
_ANTHROPIC = tuple(f"anthropic-ratelimit-requests-{part}" for part in ("limit", "remaining", "reset"))
_GITHUB = ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset")
_DRAFT = ("ratelimit-limit", "ratelimit-remaining", "ratelimit-reset")
_LISTS = frozenset(("ratelimit", "ratelimit-policy", "ratelimit-limit"))  # the fields that hold lists
# A list's members and a member's parameters: runs outside quoted strings (RFC 8941 3.3.3, with
# backslash escapes), so a quoted name may hold the separators; an unclosed quote runs to the end.
# Compiled at first use and cached by re, as the other patterns (no cost at import).
_PARTS = {sep: rf'(?:"(?:[^"\\]|\\.)*"?|[^{sep}"])+' for sep in ",;"}


class Announcement:
    """One response's announced limit: ``limit`` requests, ``remaining`` of them now, ``reset``
    seconds until the quota is back (0 when it is), ``refill`` requests/s (0: not told), and
    the ``style`` it came in."""

    __slots__ = ("limit", "refill", "remaining", "reset", "style")

    def __init__(self, limit: float, remaining: float, reset: float, refill: float, style: str) -> None:
        self.limit, self.remaining, self.reset, self.refill, self.style = (
            limit,
            remaining,
            reset,
            refill,
            style,
        )

    def __repr__(self) -> str:
        return (
            f"Announcement({self.style}: {self.remaining:g} of {self.limit:g} left, back in "
            f"{self.reset:g} s, refill {self.refill:g}/s)"
        )


def parse(headers: Iterable[tuple[str, str]], wall: float) -> Optional[Announcement]:
    """The limit ``headers`` announce, or None; ``wall`` is the time now in epoch seconds."""
    fields: dict[str, str] = {}
    for name, value in headers:
        lower = name.lower()
        if "ratelimit" not in lower:
            continue
        if lower not in fields:
            fields[lower] = value
        elif lower in _LISTS:  # one field sent as several lines is one list (RFC 9110 5.3)
            fields[lower] += ", " + value
    if not fields:
        return None
    if "ratelimit" in fields and "=" in fields["ratelimit"]:
        found = _structured(fields) or _older(fields["ratelimit"], fields.get("ratelimit-policy"), wall)
        if found is not None:
            return found
    for names, style, bucket in (
        (_DRAFT, "ietf-draft", False),
        (_OPENAI, "openai", True),
        (_ANTHROPIC, "anthropic", True),
        (_GITHUB, "github", False),
    ):
        if names[1] in fields:
            limit, remaining, reset = (fields.get(name) for name in names)
            window = None
            if style == "ietf-draft":  # the policy, or the limit's own ``100, 100;w=10``
                window = _policy_rate(fields.get("ratelimit-policy")) or _policy_rate(limit)
            found = _made(_leading(limit), _number(remaining), _reset(reset, wall), window, style, bucket)
            if found is not None:
                return found
    return None


def _made(
    limit: Optional[float],
    remaining: Optional[float],
    reset: Optional[float],
    refill: Optional[float],
    style: str,
    bucket: bool,
) -> Optional[Announcement]:
    if remaining is None:
        return None
    limit = remaining if limit is None or limit < remaining else limit
    reset = 0.0 if reset is None else reset
    if refill is None:
        # A bucket's reset is the time until it is full again: what it lacks, refilled by then.
        refill = (_rate(limit - remaining, reset) if bucket and limit > remaining else None) or 0.0
    return Announcement(limit, remaining, reset, refill, style)


def _rate(amount: float, seconds: Optional[float]) -> Optional[float]:
    """``amount`` per ``seconds``, or None: no seconds, or a rate past the largest float (a
    quota of 1e299 over 1e-299 s is no rate a client can pace by, only an infinity)."""
    if not seconds:
        return None
    rate = amount / seconds
    return rate if rate < math.inf else None


def _number(text: Optional[str]) -> Optional[float]:
    """A finite number >= 0, or None."""
    if text is None:
        return None
    text = text.strip(_OWS)
    if re.fullmatch(_DECIMAL, text) is None:
        return None
    value = float(text)
    return value if value < 1e300 else None


def _leading(text: Optional[str]) -> Optional[float]:
    """The first number of a list such as ``100, 100;w=10``."""
    return None if text is None else _number(text.split(",", 1)[0].split(";", 1)[0])


def _reset(text: Optional[str], wall: float) -> Optional[float]:
    """Seconds from now: seconds, a duration, epoch seconds or an RFC 3339 time."""
    if text is None:
        return None
    text = text.strip(_OWS)
    seconds = _number(text)
    if seconds is not None:
        if seconds >= EPOCH_MS:  # some services send milliseconds
            seconds /= 1000
        return _until(seconds, wall) if seconds >= EPOCH else seconds
    seconds = _duration(text)
    if seconds is not None:  # never epoch seconds, however long; past the largest float, nothing
        return seconds if seconds < math.inf else None
    stamp = _timestamp(text)
    return None if stamp is None else _until(stamp, wall)


def _until(stamp: float, wall: float) -> Optional[float]:
    """Seconds from ``wall`` until the epoch time ``stamp``, at least 0; None when a clock that
    is not finite cannot tell."""
    left = stamp - wall
    return max(0.0, left) if math.isfinite(left) else None


def _duration(text: str) -> Optional[float]:
    """``12ms``, ``1s``, ``6m0s``, ``1h2m3.5s``, ``500µs``, in seconds; None for anything else."""
    match = re.fullmatch(_DURATION, text)  # compiled once, cached by re
    if match is None or not text:
        return None
    return sum(float(part) * unit for part, unit in zip(match.groups(), _UNITS) if part)


def _timestamp(text: str) -> Optional[float]:
    """An RFC 3339 time in epoch seconds; None if malformed."""
    import calendar

    match = re.fullmatch(_RFC3339, text)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    if not (year >= 1 and 1 <= month <= 12 and hour < 24 and minute < 60 and second < 61):
        return None  # year 0 too: calendar.timegm raises for it
    # calendar.timegm rolls a day the month lacks (November 31) and an offset past 23:59 over
    # into a real time, days away: RFC 3339 (5.7) calls such a time malformed.
    if day < 1 or day > calendar.monthrange(year, month)[1]:
        return None
    stamp = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)) + float(match[7] or 0)
    if match[9]:
        hours, minutes = int(match[10]), int(match[11])
        if hours > 23 or minutes > 59:
            return None
        offset = hours * 3600 + minutes * 60
        stamp -= offset if match[9] == "+" else -offset
    return stamp


def _items(text: str) -> list[tuple[str, dict[str, str]]]:
    """A structured-field list, loosely: (item, {parameter: value}) for each member."""
    members = []
    for member in re.findall(_PARTS[","], text):
        item, *params = re.findall(_PARTS[";"], member) or [""]
        values = {}
        for param in params:
            key, _, value = param.partition("=")
            values[key.strip(_OWS).lower()] = _unquoted(value)
        members.append((_unquoted(item), values))
    return members


def _unquoted(text: str) -> str:
    """A quoted string's content (escapes kept: names are only compared with each other)."""
    text = text.strip(_OWS)
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


def _structured(fields: dict[str, str]) -> Optional[Announcement]:
    """Draft-11: ``RateLimit: "p";r=50;t=30`` with ``RateLimit-Policy: "p";q=100;w=10``."""
    policies: dict[str, tuple[float, Optional[float]]] = {}
    other: set[str] = set()  # policies of another unit (``qu``): their ``RateLimit`` items are not calls
    for name, params in _items(fields.get("ratelimit-policy", "")):
        if params.get("qu", "requests") not in _CALLS:
            other.add(name)  # a quota of bytes or of concurrent requests: not a rate of calls
            continue
        quota = _number(params.get("q"))
        if quota is None:
            continue
        if "w" not in params:  # ``w`` is optional: a quota over no window told is no rate
            policies[name] = (quota, None)
            continue
        refill = _rate(quota, _number(params["w"]))
        if refill is not None:
            policies[name] = (quota, refill)
    found = []
    for name, params in _items(fields["ratelimit"]):
        remaining = _number(params.get("r"))
        if remaining is None or name in other:
            continue
        quota, refill = policies.get(name, (None, None))
        made = _made(quota, remaining, _number(params.get("t")), refill, "ietf", False)
        if made is not None:
            found.append(made)
    return _tightest(found)


def _older(text: str, policy: Optional[str], wall: float) -> Optional[Announcement]:
    """Older drafts: ``RateLimit: limit=100, remaining=50, reset=5``."""
    values = {}
    for part in text.split(","):
        key, _, value = part.strip(_OWS).partition("=")
        values[key.strip(_OWS).lower()] = value.strip(_OWS)
    limit, remaining = _leading(values.get("limit")), _number(values.get("remaining"))
    return _made(
        limit, remaining, _reset(values.get("reset"), wall), _policy_rate(policy), "ietf-draft", False
    )


def _policy_rate(policy: Optional[str]) -> Optional[float]:
    """The lowest quota per second an older ``RateLimit-Policy: 100;w=10, 1000;w=3600`` names."""
    if policy is None:
        return None
    rates = []
    for item, params in _items(policy):
        quota = _number(item)
        rate = None if quota is None else _rate(quota, _number(params.get("w")))
        if rate is not None:
            rates.append(rate)
    return min(rates) if rates else None


def _tightest(found: list[Announcement]) -> Optional[Announcement]:
    """The most restrictive: the lowest refill rate, else the least remaining per second."""
    if not found:
        return None

    def allows(one: Announcement) -> float:
        return one.refill if one.refill else one.remaining / max(one.reset, 1e-3)

    return min(found, key=allows)

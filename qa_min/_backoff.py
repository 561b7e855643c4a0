"""Backoff arithmetic: the retry policy's fields, the delay formula, server delays, should-retry.

Pure functions of their arguments and a leaf below the retry loop. ``RetryPolicy``'s fields
are declared here, once. The class becomes a frozen dataclass on first public use (``_retry``
applies the decorator, in place), because ``dataclasses`` costs a cold start more than the
rest of the package; until then the retry loop reads the defaults through ``DEFAULTS``, an
instance made without ``__init__`` whose attributes fall through to the class defaults.
"""

from __future__ import annotations

import math
import re
import time

from ._errors import InvalidOption
from ._typing import plain, short

TYPE_CHECKING = False
if TYPE_CHECKING:
    from dataclasses import dataclass
    from typing import Callable, ClassVar, Optional

    from ._diagnostics import ResponseHeaders
else:

    def dataclass(**_options):
        # The real decorator is applied by ``_retry`` when ``qa_min.RetryPolicy`` is first used.
        return lambda cls: cls


# A server delay as written: ASCII digits (``[0-9]``, not ``\d``, which takes other scripts'), a fraction.
_DELAY = re.compile(r"[0-9]+(?:\.[0-9]+)?")

MAX_DELAY_MS = 86_400_000.0
"""One day: no delay of the policy, and none a server asks for, is longer."""


def default_retry_status(status: int) -> bool:
    """True for 408, 429 and every 5xx (529 included): the statuses worth another try."""
    return status in (408, 429) or 500 <= status <= 599


@dataclass(frozen=True)
class RetryPolicy:
    """When and how a call is retried. ``RetryPolicy.none`` never retries.

    Attributes:
        max_retries: Retries after the first attempt; 0 disables retries.
        backoff_initial_ms: The first backoff delay, doubled on each retry.
        backoff_max_ms: The cap on a backoff delay.
        backoff_jitter: The fraction of each delay randomly taken off (0 to 1).
        respect_retry_after: Honour ``retry-after-ms`` and ``Retry-After``.
        max_retry_after_ms: A longer server-requested delay is ignored (backoff is used).
        retry_connection_errors: Retry when the service cannot be reached or the connection drops.
        retry_status: Decides which HTTP statuses are retried (408, 429 and 5xx by default). An
            ``x-should-retry: true|false`` response header overrides it. An exception it raises
            ends the call unchanged, once the attempt is recorded (docs/retries.md).

    Raises:
        InvalidOption: A field has the wrong type, is not finite, or is over one day (delays)
            or 1000 (``max_retries``).
    """

    if TYPE_CHECKING:
        none: ClassVar[RetryPolicy]

    max_retries: int = 2
    backoff_initial_ms: float = 500.0
    backoff_max_ms: float = 5000.0
    backoff_jitter: float = 0.25
    respect_retry_after: bool = True
    max_retry_after_ms: float = 60000.0
    retry_connection_errors: bool = True
    retry_status: Callable[[int], bool] = default_retry_status

    def __post_init__(self) -> None:
        for name in _NUMBERS:
            # A subclass's value, read as int or float: its own __le__ or __float__ may raise,
            # and the backoff's arithmetic would call them on every retry.
            object.__setattr__(self, name, plain(getattr(self, name)))
        retries = self.max_retries
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 1000:
            raise InvalidOption(f"max_retries must be an int from 0 to 1000, got {short(retries)}")
        for name in ("backoff_initial_ms", "backoff_max_ms", "max_retry_after_ms"):
            value = getattr(self, name)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not (number and 0 <= value <= MAX_DELAY_MS):
                raise InvalidOption(f"{name} must be a number of ms from 0 to one day, got {short(value)}")
        jitter = self.backoff_jitter
        if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not 0 <= jitter <= 1:
            raise InvalidOption(f"backoff_jitter must be between 0 and 1, got {short(jitter)}")
        for name in ("respect_retry_after", "retry_connection_errors"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidOption(f"{name} must be True or False, got {short(getattr(self, name))}")
        if not callable(self.retry_status):
            raise InvalidOption(
                f"retry_status must be a function int -> bool, got {short(self.retry_status)}"
            )


_NUMBERS = ("max_retries", "backoff_initial_ms", "backoff_max_ms", "backoff_jitter", "max_retry_after_ms")

# Pickles and reprs as the public name, which loads ``_retry`` (and so the dataclass) first.
RetryPolicy.__module__ = __name__.rpartition(".")[0]

DEFAULTS = object.__new__(RetryPolicy)
# A function stored on the class would bind as a method; the instance keeps it plain.
object.__setattr__(DEFAULTS, "retry_status", default_retry_status)


def backoff_ms(policy: RetryPolicy, retry_index: int, uniform: float) -> float:
    """The delay before retry ``retry_index`` (0 for the first retry), in milliseconds.

    ``min(initial * 2**k, max) * (1 - jitter * U)``, ``uniform`` being U in [0, 1).
    """
    # 2.0**1024 raises OverflowError; 2.0**1023 times a delay is at worst inf, which the cap
    # brings down. Every retry max_retries allows (up to 999) doubles the delay exactly.
    base = policy.backoff_initial_ms * (2.0 ** min(retry_index, 1023))
    return min(base, policy.backoff_max_ms) * (1.0 - policy.backoff_jitter * uniform)


def delay_number(text: str) -> Optional[float]:
    """A ``retry-after-ms`` or ``Retry-After`` number (>= 0, maybe inf), or None if ``text`` is none.

    RFC 9110's delay-seconds is ``1*DIGIT``; a decimal fraction is read too, as the docs promise
    ("float seconds", "float milliseconds"). Not ``float()``'s grammar: it takes ``1_0`` (10),
    ``nan``, ``inf``, a sign, an exponent and other scripts' digits (U+0661), none of which a
    server means as a delay. Only HTTP's whitespace (SP, HTAB) may surround it.
    """
    text = text.strip(" \t")
    return float(text) if _DELAY.fullmatch(text) else None


def _positive_finite(text: str, scale: float) -> Optional[float]:
    number = delay_number(text)
    if number is None:
        return None
    value = number * scale  # a few hundred digits make inf: over any cap
    return value if math.isfinite(value) and value > 0 else None


def _http_date_ms(text: str, now: float) -> Optional[float]:
    from email.utils import mktime_tz, parsedate_tz

    try:
        parsed = parsedate_tz(text)
        if parsed is None:
            return None
        return (mktime_tz(parsed) - now) * 1000.0
    except (ValueError, OverflowError, TypeError, IndexError):
        # A year like 99999 or a mangled date must never break the retry loop.
        return None


def server_delay_ms(
    retry_after_ms: Optional[str],
    retry_after: Optional[str],
    max_ms: float,
    now: Optional[float] = None,
) -> Optional[float]:
    """The delay the server asked for, in ms, or None to fall back to the backoff.

    ``retry-after-ms`` (decimal milliseconds) wins over ``Retry-After`` (decimal seconds or an
    HTTP-date), numbers as ``delay_number`` reads them. A header that is unparseable, not
    finite, zero or negative, or above ``max_ms`` is ignored as if absent.
    """
    candidates = []
    if retry_after_ms is not None:
        candidates.append(_positive_finite(retry_after_ms, 1.0))
    if retry_after is not None:
        seconds = _positive_finite(retry_after, 1000.0)
        if seconds is None and not _looks_numeric(retry_after):
            seconds = _http_date_ms(retry_after, time.time() if now is None else now)
        candidates.append(seconds)
    for value in candidates:
        if value is not None and 0 < value <= min(max_ms, MAX_DELAY_MS):
            return value
    return None


def _looks_numeric(text: str) -> bool:
    # "-5" or "nan" are numbers the server got wrong, not dates to parse.
    stripped = text.strip().lstrip("+-")
    return bool(stripped) and (
        stripped[0].isdigit() or stripped[0] == "." or stripped.lower()[:3] in ("nan", "inf")
    )


def should_retry(policy: RetryPolicy, status: int, headers: ResponseHeaders) -> bool:
    """Whether a response with ``status`` is worth another attempt: ``x-should-retry`` first."""
    override = headers.get("x-should-retry")
    if override is not None:
        flag = override.strip().lower()
        if flag == "true":
            return True
        if flag == "false":
            return False
    return bool(policy.retry_status(status))

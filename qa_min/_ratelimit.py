"""Client-side rate limiting, the public values: ``RateLimit`` and ``RateLimitState``.

``RateLimit`` is what a client is given (``Client(rate_limit=...)``); ``RateLimitState`` is what
``client.rate_limit`` shows of it. The engine that applies a ``RateLimit``, one per client, is
``_limiter.Limiter``; the algorithm is told once, in ``_policy``'s docstring.
"""

from __future__ import annotations

import math
import sys

from ._errors import InvalidOption
from ._typing import plain, short

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional

    from ._announced import Announcement

_FLOAT_MAX = sys.float_info.max


def _check(name: str, value: object, whole: bool) -> Any:
    """``value`` as a plain int or float, if it is one the limiter can use; else InvalidOption."""
    value = plain(value)  # a subclass's own __lt__, __abs__ or __float__ is never called
    kind = "a whole number >= 1" if whole else "a finite number > 0"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _FLOAT_MAX:
        # The limiter computes in floats; such an int would raise OverflowError there, and its
        # repr may be too long to format.
        too_large = f"and at most {_FLOAT_MAX:g}, got an int too large for a float"
        raise InvalidOption(f"{name} must be {kind} {too_large}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        good = False
    else:
        good = isinstance(value, int) and value >= 1 if whole else value > 0
    if not good:
        raise InvalidOption(f"{name} must be {kind}, got {short(value)}")
    return value


class _ReadOnly:
    __slots__ = ()

    def __setattr__(self, name: str, value: object = None) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only; cannot change {name!r}")

    __delattr__ = __setattr__

    def _set(self, **values: object) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)


class RateLimit(_ReadOnly):
    """How fast a client may send: passed as ``Client(rate_limit=...)``; immutable.

    The default ``RateLimit()`` sets no ceiling and adapts: it engages at the first 429 or 529
    and measures the rate the service lets through. ``RateLimit(190)`` paces every attempt at
    190 per second from the first call (and still adapts below that). ``Client(rate_limit=None)``
    turns limiting off, server-requested pauses of the whole client included.

    Args:
        per_second: The ceiling in attempts per second, retries included; None for none.
        burst: Attempts that may start at once after a quiet spell (default: as many as the
            ceiling allows in 50 ms, at least 1).
        adaptive: Lower the ceiling after a 429/529 and regrow it while calls succeed, and pace
            by the limit a service announces. False keeps ``per_second`` fixed: announcements
            are still shown in ``client.rate_limit``.

    Raises:
        InvalidOption: ``per_second`` is not a finite number > 0, ``burst`` not a whole
            number >= 1 (either one larger than the largest float), ``burst / per_second`` (or
            ``1 / per_second``) larger than the largest float, ``adaptive`` not a bool, or a
            burst is given with nothing to pace.
    """

    __slots__ = ("adaptive", "burst", "per_second")

    per_second: Optional[float]
    burst: Optional[int]
    adaptive: bool

    def __init__(
        self, per_second: Optional[float] = None, *, burst: Optional[int] = None, adaptive: bool = True
    ) -> None:
        if per_second is not None:
            per_second = _check("RateLimit per_second", per_second, whole=False)
        if burst is not None:
            burst = _check("RateLimit burst", burst, whole=True)
        if not isinstance(adaptive, bool):
            raise InvalidOption(f"RateLimit adaptive must be True or False, got {short(adaptive)}")
        if burst is not None and per_second is None and not adaptive:
            raise InvalidOption("RateLimit burst needs a ceiling: give per_second or adaptive=True")
        if per_second is not None and (burst or 1) / per_second > _FLOAT_MAX:
            # The limiter spaces attempts 1 / per_second apart and lets a burst take (burst - 1)
            # such spaces: as infinities they became NaN slots, and the ceiling no ceiling.
            raise InvalidOption(
                "RateLimit burst / per_second (1 / per_second with no burst), the seconds a full "
                f"burst takes to refill, must be at most {_FLOAT_MAX:g}, the largest float; "
                f"got {short(burst or 1)} / {short(per_second)}"
            )
        self._set(per_second=per_second, burst=burst, adaptive=adaptive)

    def split(self, n: int) -> RateLimit:
        """Each of ``n`` workers' share: ``per_second / n``, and ``burst // n`` (at least 1).

        Each share adapts on its own when this limit is adaptive. The bursts are rounded down
        so that together they never exceed this one's, unless ``n`` is larger than it.

        Raises:
            InvalidOption: ``n`` is not a whole number >= 1, or is larger than the largest float,
                or the share ``per_second / n`` is too small for a ``RateLimit``.
        """
        n = _check("RateLimit.split n", n, whole=True)
        per_second = None if self.per_second is None else self.per_second / n
        burst = None if self.burst is None else max(1, self.burst // n)
        return RateLimit(per_second, burst=burst, adaptive=self.adaptive)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (self.per_second, self.burst, self.adaptive))

    def __eq__(self, other: object) -> bool:
        return self.__reduce__() == other.__reduce__() if isinstance(other, RateLimit) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.__reduce__())

    def __repr__(self) -> str:
        parts = [] if self.per_second is None else [f"{self.per_second!r}"]
        if self.burst is not None:
            parts.append(f"burst={self.burst!r}")
        if not self.adaptive:
            parts.append("adaptive=False")
        return f"RateLimit({', '.join(parts)})"


def _rebuild(per_second: Optional[float], burst: Optional[int], adaptive: bool) -> RateLimit:
    return RateLimit(per_second, burst=burst, adaptive=adaptive)


class RateLimitState(_ReadOnly):
    """A read-only snapshot of a client's limiter, as ``client.rate_limit`` returns it.

    Attributes:
        limit: The ``RateLimit`` the client was given.
        state: ``"unlimited"`` (nothing gates calls), ``"paced"`` (a ceiling is in force) or
            ``"paused"`` (waiting out a delay a 429/529 asked for).
        per_second: The ceiling in force now (given, learned from 429s, or set by the
            announced limit), or None for none.
        paused_for: Seconds left of the pause (0.0 when not paused).
        throttles: 429 and 529 responses seen so far.
        announced: The limit the service announced on its latest response, or None: a dict
            with ``style`` (``"ietf"``, ``"ietf-draft"``, ``"openai"``, ``"anthropic"`` or
            ``"github"``), ``limit``, ``remaining``, ``reset`` (seconds until the quota is
            back) and ``refill`` (requests per second; 0.0 when not told).
    """

    __slots__ = ("announced", "limit", "paused_for", "per_second", "state", "throttles")

    limit: RateLimit
    state: str
    per_second: Optional[float]
    paused_for: float
    throttles: int
    announced: Optional[dict[str, object]]

    def __init__(
        self,
        limit: RateLimit,
        per_second: Optional[float],
        paused_for: float,
        throttles: int,
        announced: Optional[Announcement] = None,
    ) -> None:
        state = "paused" if paused_for > 0 else "unlimited" if per_second is None else "paced"
        told = None
        if announced is not None:
            told = {
                "style": announced.style,
                "limit": announced.limit,
                "remaining": announced.remaining,
                "reset": announced.reset,
                "refill": announced.refill,
            }
        self._set(
            limit=limit,
            state=state,
            per_second=per_second,
            paused_for=paused_for,
            throttles=throttles,
            announced=told,
        )

    def __reduce__(self) -> tuple[object, ...]:
        # A snapshot travels as the values it was made of (pickle, copy, deepcopy).
        from ._announced import Announcement

        told = self.announced
        announced = None if told is None else Announcement(**told)  # type: ignore[arg-type]
        return (RateLimitState, (self.limit, self.per_second, self.paused_for, self.throttles, announced))

    def __repr__(self) -> str:
        pace = "unlimited" if self.per_second is None else f"paced at {_pace(self.per_second)}/s"
        text = f"paused for {self.paused_for:.2f} s, then {pace}" if self.paused_for > 0 else pace
        told = self.announced
        if told is not None:
            text += f", announced {_figure(told['remaining'])} of {_figure(told['limit'])} left"
            if told["reset"]:
                text += f", back in {_figure(told['reset'])} s"
            if told["refill"]:
                text += f", refill {_figure(told['refill'])}/s"
            text += f" ({told['style']})"
        return f"RateLimitState({text}, throttles={self.throttles})"


def _pace(per_second: float) -> str:
    """A ceiling to one decimal (``12.1``); one a decimal would show as 0.0, or in hundreds of
    digits (a ceiling read off an announcement of 1e299 calls), to three significant digits."""
    return f"{per_second:.1f}" if 0.1 <= per_second < 1e9 else f"{per_second:.3g}"


def _figure(value: object) -> str:
    """An announced number: a count whole (``1234567``, which ``:g`` showed as ``1.23457e+06``),
    anything else to six significant digits (``59.999``)."""
    if not isinstance(value, float):
        return str(value)
    return f"{value:.0f}" if value.is_integer() and value < 1e15 else f"{value:.6g}"

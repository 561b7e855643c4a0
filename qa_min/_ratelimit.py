"""Client-side rate limiting: the public ``RateLimit`` value and each client's ``Limiter``.

One ``Limiter`` per client gates every attempt of its threads, retries included. An adaptive
limiter without a ceiling stays *disengaged* until the first 429 or 529: the retry loop reads
``engaged`` and goes on, so a client that is never throttled pays nothing. Once engaged:

* **One schedule** (the generic cell rate algorithm, 50 ms of burst unless ``burst`` is
  given). A caller computes its wait once and sleeps once. An adaptive ceiling binds only when
  more than one attempt is in flight or waiting: one call at a time is never paced by it.
* **Shared pauses.** A 429/529's server-requested delay pauses every thread. Slots promised
  for after it stay valid; a sleeper whose slot a newer pause covers moves behind it. The
  throttled call takes the first slot after the pause, so no call absorbs repeated 429s; if
  it gives up while nobody else waits, the pause ends with it.
* **Measured cuts**, only for attempts sent after the latest cut. A long pause (>= 0.2 s)
  refills the server's bucket, so its rate is the slope between two throttled stretches
  (extra successes over extra time); the ceiling becomes 95% of it, or half until two
  stretches differ enough. After a short pause the ceiling becomes 95% of the successes per
  second of the last second, at most every 0.3 s; a throttle while 95% of the ceiling gets
  through is jitter. A cut keeps at least half of the ceiling it replaces.
* **Regrowth** of 0.5% a second (at least 1 call/s each second) after the pause; an explicit
  ceiling is regained in full, an adaptive one lifted after 60 s without a throttle.
"""

from __future__ import annotations

import _thread
import math
import time

from ._errors import InvalidOption

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional

    Nap = Callable[[float, float], object]
    Clock = Callable[[], float]
    Notify = Callable[[str], object]

_INF = math.inf
_BURST_SECONDS = 0.05  # burst tolerance unless ``burst`` is given: calls at the ceiling in 50 ms
_LONG_PAUSE = 0.2  # s: a pause this long refills a server's bucket while the client waits
_WINDOW = 0.3  # s: the least measuring time between two cuts after short pauses
_RECENT = 1.0  # s: successes per second are measured over at most the last second
_JITTER = 0.95  # a throttle while this share of the ceiling gets through cuts nothing
_SHARE = 0.95  # a cut sets the ceiling to this share of the measured rate
_FLOOR = 0.5  # a cut keeps at least this share of the ceiling it replaces
_MIN_RATE = 0.5  # calls/s: the lowest adaptive ceiling
_REGROW, _REGROW_MIN = 0.005, 1.0  # regrowth each second: this share, or at least 1 call/s
_QUIET = 60.0  # s without a throttle after which an adaptive ceiling is lifted
_SAMPLE, _SAMPLES = 0.05, 40  # the success count is sampled every 50 ms, for two seconds


def _check(name: str, value: object, whole: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        good = False
    else:
        good = isinstance(value, int) and value >= 1 if whole else value > 0
    if not good:
        kind = "a whole number >= 1" if whole else "a finite number > 0"
        raise InvalidOption(f"{name} must be {kind}, got {value!r}")


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
        adaptive: Lower the ceiling after a 429/529 and regrow it while calls succeed.

    Raises:
        InvalidOption: ``per_second`` is not a finite number > 0, ``burst`` not a whole
            number >= 1, ``adaptive`` not a bool, or a burst is given with nothing to pace.
    """

    __slots__ = ("adaptive", "burst", "per_second")

    per_second: Optional[float]
    burst: Optional[int]
    adaptive: bool

    def __init__(
        self, per_second: Optional[float] = None, *, burst: Optional[int] = None, adaptive: bool = True
    ) -> None:
        if per_second is not None:
            _check("RateLimit per_second", per_second, whole=False)
        if burst is not None:
            _check("RateLimit burst", burst, whole=True)
        if not isinstance(adaptive, bool):
            raise InvalidOption(f"RateLimit adaptive must be True or False, got {adaptive!r}")
        if burst is not None and per_second is None and not adaptive:
            raise InvalidOption("RateLimit burst needs a ceiling: give per_second or adaptive=True")
        self._set(per_second=per_second, burst=burst, adaptive=adaptive)

    def split(self, n: int) -> RateLimit:
        """Each of ``n`` workers' share: ``per_second / n``, and ``burst // n`` (at least 1).

        Each share adapts on its own when this limit is adaptive. The bursts are rounded down
        so that together they never exceed this one's, unless ``n`` is larger than it.

        Raises:
            InvalidOption: ``n`` is not a whole number >= 1.
        """
        _check("RateLimit.split n", n, whole=True)
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
        per_second: The ceiling in force now, or None for none.
        paused_for: Seconds left of the pause (0.0 when not paused).
        throttles: 429 and 529 responses seen so far.
    """

    __slots__ = ("limit", "paused_for", "per_second", "state", "throttles")

    limit: RateLimit
    state: str
    per_second: Optional[float]
    paused_for: float
    throttles: int

    def __init__(
        self, limit: RateLimit, per_second: Optional[float], paused_for: float, throttles: int
    ) -> None:
        state = "paused" if paused_for > 0 else "unlimited" if per_second is None else "paced"
        self._set(limit=limit, state=state, per_second=per_second, paused_for=paused_for, throttles=throttles)

    def __repr__(self) -> str:
        pace = "unlimited" if self.per_second is None else f"paced at {self.per_second:.1f}/s"
        text = f"paused for {self.paused_for:.2f} s, then {pace}" if self.paused_for > 0 else pace
        return f"RateLimitState({text}, throttles={self.throttles})"


class Limiter:
    """The limiter of one client, shared by its threads; see the module docstring.

    ``notify(message)`` is told, outside the lock, when the ceiling drops or recovers.
    """

    def __init__(
        self, limit: RateLimit, clock: Clock = time.monotonic, notify: Optional[Notify] = None
    ) -> None:
        self.limit = limit
        self._clock, self._notify = clock, notify
        self._lock = _thread.allocate_lock()
        self._cap = _INF if limit.per_second is None else float(limit.per_second)
        self._base = _INF  # the adaptive ceiling at its last cut; inf: none below the cap
        self._tat = self._paused_until = -_INF  # the schedule's theoretical arrival time; a pause
        self._epoch = self._inflight = self._throttles = 0  # pauses; attempts holding a slot; 429s
        self._grow_from = self._since = self._last_cut = self._last_throttle = -_INF
        self._ok = self._ok_since = 0  # successes counted while engaged
        self._samples: list[tuple[float, int]] = []  # (time, successes), one per 50 ms
        self._stretch_start = -_INF  # the end of the last pause...
        self._stretch_ok: Optional[int] = None  # ...and the successes counted by then
        self._prev: Optional[tuple[float, int]] = None  # (length, successes) of stretches
        self._ended: Optional[tuple[float, int]] = None
        self._estimate: Optional[float] = None
        self.engaged = False
        if self._cap < _INF:
            self._engage(clock())

    def acquire(self, delay: Optional[float], front: bool, nap: Nap) -> float:
        """Wait for this attempt's slot; return its ticket (the time it was let go).

        ``delay``: the call's own wait before a retry (None before a first attempt); ``front``:
        the call was throttled. ``nap(seconds, held)`` sleeps once (``held`` of it for the
        limiter) and raises to stop, which gives the slot back.
        """
        with self._lock:
            now = self._clock()
            self._inflight += 1
            news = self._tick(now)
            slot = self._slot(now, delay, front)
            epoch = self._epoch
        if news is not None and self._notify is not None:
            self._notify(news)
        own = 0.0 if delay is None else delay
        try:
            if delay is not None or slot > now:
                nap(max(slot - now, own), max(0.0, slot - now - own))
            while True:
                with self._lock:
                    if self._epoch == epoch or self._paused_until <= slot:
                        return slot
                    # A pause declared while this caller slept covers its slot.
                    now = self._clock()
                    slot = self._slot(now, None, front)
                    epoch = self._epoch
                if slot <= now:
                    return slot
                nap(slot - now, slot - now)
        except BaseException:
            with self._lock:
                self._inflight -= 1
                if front and self._inflight == 0:
                    # Nobody waits for this pause any more; the next call probes afresh.
                    self._paused_until = min(self._paused_until, self._clock())
            raise

    def report(self, ticket: Optional[float], status: Optional[int], pause: Optional[float]) -> None:
        """An attempt ended: ``status`` None for no response; ``pause`` the server's delay in s.

        ``ticket`` is what ``acquire`` returned, or None for an attempt sent disengaged.
        """
        with self._lock:
            now = self._clock()
            if ticket is not None:
                self._inflight -= 1
            news = None
            if status in (429, 529):
                news = self._throttled(now, ticket, pause, status)
            elif self.engaged and status is not None and 200 <= status < 300:
                self._success(now)
        if news is not None and self._notify is not None:
            self._notify(news)

    def state(self) -> RateLimitState:
        """A snapshot of the ceiling and the pause now."""
        with self._lock:
            now = self._clock()
            rate = self._rate(now) if self.engaged else self._cap
            paused_for = max(0.0, self._paused_until - now)
            return RateLimitState(self.limit, None if rate == _INF else rate, paused_for, self._throttles)

    def _rate(self, now: float) -> float:
        base = self._base
        if base == _INF:
            return self._cap
        grown = base + max(_REGROW_MIN, base * _REGROW) * max(0.0, now - self._grow_from)
        return grown if grown < self._cap else self._cap

    def _slot(self, now: float, delay: Optional[float], front: bool) -> float:
        """The time this attempt may go, its slot taken from the schedule."""
        earliest = now if delay is None else now + delay
        earliest = max(earliest, self._paused_until)
        rate = self._rate(now)
        if rate == _INF:
            return earliest
        interval = 1.0 / rate
        burst = self.limit.burst
        tolerance = _BURST_SECONDS if burst is None else (burst - 1) * interval
        if self._cap == _INF and self._inflight <= 1:
            # Alone, a caller is not paced by an adaptive ceiling; it still uses up schedule,
            # but never more than a burst's worth ahead of itself.
            self._tat = min(max(self._tat, earliest) + interval, earliest + tolerance + interval)
            return earliest
        slot = earliest if front else max(earliest, self._tat - tolerance)
        self._tat = max(self._tat, slot) + interval
        return slot

    def _tick(self, now: float) -> Optional[str]:
        """Regain the cap, or disengage after a quiet spell; the news, if any."""
        if self._base < _INF and self._rate(now) >= self._cap:
            self._base = _INF
            return f"rate limit recovered: back to {self._cap:g} calls/s"
        quiet = not self.limit.adaptive or now - self._last_throttle >= _QUIET
        if self._cap == _INF and quiet and now >= self._paused_until:
            # Nothing to pace and no pause: back to the fast path until the next throttle.
            cut = self._base < _INF
            self.engaged = False
            self._base = _INF
            self._prev = self._ended = self._estimate = None
            if cut:
                return f"rate limit recovered: no 429/529 for {_QUIET:g} s, no ceiling any more"
        return None

    def _engage(self, now: float) -> None:
        self.engaged = True
        self._since = self._last_cut = now
        self._ok_since = self._ok
        self._samples = []

    def _success(self, now: float) -> None:
        self._ok += 1
        if self._stretch_ok is None and now >= self._stretch_start:
            self._stretch_ok = self._ok - 1
        samples = self._samples
        if not samples or now - samples[-1][0] >= _SAMPLE:
            samples.append((now, self._ok))
            if len(samples) > _SAMPLES:
                del samples[0]

    def _throttled(
        self, now: float, ticket: Optional[float], pause: Optional[float], status: int
    ) -> Optional[str]:
        self._throttles += 1
        if pause is not None and now + pause > self._paused_until:
            if now >= self._stretch_start:
                # The stretch since the last pause ended with this throttle; keep its measure.
                ok = self._ok if self._stretch_ok is None else self._stretch_ok
                self._ended = (now - self._stretch_start, self._ok - ok)
            self._paused_until = self._stretch_start = until = now + pause
            self._stretch_ok = None
            self._epoch += 1
            self._tat = max(self._tat, until)
        if not self.limit.adaptive:
            self.engaged = self.engaged or pause is not None
            return None
        self._last_throttle = now
        if not self.engaged:
            self._engage(now)  # nothing was measured before: the next throttle cuts
            return None
        if ticket is None or ticket < self._last_cut:
            return None  # sent before the latest cut: it says nothing new
        current = self._rate(now)
        if pause is not None and pause >= _LONG_PAUSE:
            new = self._by_stretches(pause, current)
        else:
            new = self._by_recent(now, current)
        if new is None or new >= current:
            return None
        if current < _INF:
            new = max(new, _FLOOR * current)
        self._base = max(new, _MIN_RATE)
        self._grow_from = max(now, self._paused_until)
        self._last_cut = now
        was = "no ceiling" if current == _INF else f"{current:.1f}/s"
        return f"rate limit lowered to {self._base:.1f} calls/s after HTTP {status} (was {was})"

    def _by_recent(self, now: float, current: float) -> Optional[float]:
        """Short pauses: the successes per second actually seen since the cut, at most 1 s back."""
        start = max(self._last_cut, self._since)
        if current < _INF and now - start < _WINDOW:
            return None
        base_t, base_ok = self._since, self._ok_since
        for t, ok in self._samples:
            if t > max(start, now - _RECENT):
                break
            base_t, base_ok = t, ok
        span = now - base_t
        if current == _INF:
            # The first cut, right after engaging: a generous rough guess, refined 0.3 s later.
            return (self._ok - base_ok + 1) / max(span, 0.005)
        seen = (self._ok - base_ok) / span
        return None if seen >= _JITTER * current else _SHARE * seen

    def _by_stretches(self, pause: float, current: float) -> Optional[float]:
        """Long pauses: the slope of successes against the length of throttled stretches."""
        ended, self._ended = self._ended, None
        if ended is None or ended[0] <= 0:
            return None
        length, successes = ended
        prev, self._prev = self._prev, ended
        if prev is not None and abs(length - prev[0]) >= 0.25 * max(length, prev[0]):
            slope = (successes - prev[1]) / (length - prev[0])
            if slope > 0:
                self._estimate = min(slope, successes / length)
                return _SHARE * self._estimate
        if self._estimate is not None and length >= 5 * pause:
            return _SHARE * self._estimate  # a steady cycle: the server's rate has not moved
        return 0.5 * min(current, successes / length)

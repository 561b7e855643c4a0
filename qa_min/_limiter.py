"""Each client's rate limiter, the engine behind ``RateLimit``; it imports only ``_schedule``.

One ``Limiter`` per client gates every attempt of its threads, retries included: its
``Schedule`` (``_schedule``) says who goes when, and it adds what 429s teach. An adaptive
limiter without a ceiling stays *disengaged* until the first 429 or 529: the retry loop reads
``engaged`` and notes each success's send time in a bounded deque (an atomic append). Engaged:

* **Cuts**, only for attempts sent after the latest cut. The first ceiling is a guess, half
  the pace of the latest successes (or the last measured ceiling, if higher); a guess is halved
  by a throttle within 0.3 s (a throttled call's last attempt waits those 0.3 s) and grows fast
  until throttled (doubling each second after short pauses, 10% after long ones). After a long
  pause (>= 0.2 s) the bucket refilled: the rate is the slope between two stretches (extra
  successes over extra time), or the last second of a long stretch if more, and the ceiling 95%
  of it (half, if the bucket drained at once). After a short pause it becomes 95% of the
  successes per second of the last second, at most every 0.3 s, by at most 30% (half, of a
  guess); a throttle while 98% of the ceiling gets through is jitter.
* **Regrowth** of a measured ceiling: 0.5% a second (at least 1 call/s each second); an
  explicit ceiling is regained in full, an adaptive one lifted after 60 s without a throttle.
"""

from __future__ import annotations

import time
from collections import deque

from ._schedule import INF, WINDOW, Schedule

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

    from ._schedule import Clock, Notify

_LONG_PAUSE = 0.2  # s: a pause this long refills a server's bucket while the client waits
_COUNTED = 4  # successes needed before their pace means anything
_RECENT = 1.0  # s: successes per second are measured over at most the last second
_JITTER = 0.98  # a throttle while this share of the ceiling gets through cuts nothing
_SHARE = 0.95  # a cut sets the ceiling to this share of the measured rate
_FLOOR = 0.7  # a cut after a short pause keeps at least this share of the ceiling
_MIN_RATE = 0.5  # calls/s: the lowest adaptive ceiling
_GROW_SHORT, _GROW_LONG = 2.0, 1.1  # a guess grows a second: fast, or slower where throttles cost 1 s
_SUCCEEDED = 32  # send times of the latest successes kept before engaging
_QUIET = 60.0  # s without a throttle after which an adaptive ceiling is lifted
_SAMPLE, _SAMPLES = 0.05, 40  # the success count is sampled every 50 ms, for two seconds


class Limiter(Schedule):
    """The limiter of one client, shared by its threads; see the module docstring. Its
    arguments are ``Schedule``'s."""

    def __init__(
        self,
        per_second: Optional[float],
        burst: Optional[int],
        adaptive: bool,
        clock: Clock = time.monotonic,
        notify: Optional[Notify] = None,
    ) -> None:
        super().__init__(per_second, burst, adaptive, clock, notify)
        self._throttles = 0  # 429/529 responses seen
        self._since = self._last_throttle = -INF
        self._ok = self._ok_since = 0  # successes counted while engaged
        self._samples: list[tuple[float, int]] = []  # (time, successes), one per 50 ms
        self._stretch_start = -INF  # the end of the last pause...
        self._stretch_ok: Optional[int] = None  # ...and the successes counted by then
        self._prev: Optional[tuple[float, int]] = None  # (length, successes) of stretches
        self._ended: Optional[tuple[float, int]] = None
        self._estimate: Optional[float] = None
        self.engaged = False
        self._known = 0.0  # the last ceiling measured, not guessed
        # Send times of the latest successes, kept while disengaged (an atomic append, no lock).
        self.succeeded: deque[float] = deque(maxlen=_SUCCEEDED)
        if self._cap < INF:
            self._engage(clock())

    def report(self, ticket: Optional[float], status: Optional[int], pause: Optional[float]) -> None:
        """An attempt ended: ``status`` None for no response; ``pause`` the server's delay in s.

        ``ticket`` is what ``acquire`` returned, or None for an attempt sent disengaged.
        """
        with self._lock:
            now = self._clock()
            if ticket is not None:
                self._inflight -= 1
                self._out -= 1
                if status is not None and 200 <= status < 300:
                    self._last_ok = now
                if self._out == 0 and self._alone_until > now:
                    self._release(now)
            news = None
            if status in (429, 529):
                news = self._throttled(now, ticket, pause)
            elif ticket is not None and ticket >= self._since and status is not None and 200 <= status < 300:
                self._success(now)  # only what was sent engaged tells the pace
        self._tell(news)

    def snapshot(self) -> tuple[Optional[float], float, int]:
        """(the ceiling now or None, seconds left of the pause, 429/529 responses seen)."""
        with self._lock:
            now = self._clock()
            rate = self._rate(now) if self.engaged else self._cap
            return None if rate == INF else rate, max(0.0, self._paused_until - now), self._throttles

    def _tick(self, now: float) -> Optional[str]:
        """Regaining the cap, or disengaging after a quiet spell; the news, if any."""
        if self._base < INF and self._rate(now) >= self._cap:
            self._base = INF
            return f"rate limit recovered: back to {self._cap:g} calls/s"
        quiet = not self._adaptive or now - self._last_throttle >= _QUIET
        if self._cap == INF and quiet and now >= self._paused_until:
            # Nothing to pace and no pause: back to the fast path until the next throttle.
            cut = self._base < INF
            self.engaged = False
            self._base = INF
            self._prev = self._ended = self._estimate = None
            if cut:
                return f"rate limit recovered: no 429/529 for {_QUIET:g} s, no ceiling any more"
        return None

    def _engage(self, now: float) -> None:
        self.engaged = True
        self._since = self._last_cut = now
        self._ok_since = self._ok
        self._samples = []
        self._stretch_start = max(self._stretch_start, now)
        self._ended = None
        self._longest = 0.0

    def _success(self, now: float) -> None:
        self._ok += 1
        if self._stretch_ok is None and now >= self._stretch_start:
            self._stretch_ok = self._ok - 1
        samples = self._samples
        if not samples or now - samples[-1][0] >= _SAMPLE:
            samples.append((now, self._ok))
            if len(samples) > _SAMPLES:
                del samples[0]

    def _throttled(self, now: float, ticket: Optional[float], pause: Optional[float]) -> Optional[str]:
        self._throttles += 1
        if pause is not None and now + pause > self._paused_until:
            self._pause(now, now + pause)
        if pause is not None and pause < _LONG_PAUSE:
            self._token = max(self._token, pause)
            if now - self._since < WINDOW:
                self._longest = max(self._longest, pause)
        if not self._adaptive:
            self.engaged = self.engaged or pause is not None
            return None
        self._last_throttle = now
        if not self.engaged:
            self._engage(now)
            return self._first_ceiling(now, pause)
        if ticket is None or ticket < self._last_cut:
            return None  # sent before the latest cut: it says nothing new
        current = self._rate(now)
        if pause is not None and pause >= _LONG_PAUSE:
            new = self._by_stretches(now, pause, current)
        else:
            new = self._by_recent(now, current)
        return None if new is None else self._cut(now, *new)

    def _first_ceiling(self, now: float, pause: Optional[float]) -> Optional[str]:
        """Half the pace of the latest successes, or the last ceiling measured if higher."""
        recent = [sent for sent in self.succeeded if sent >= now - _RECENT]
        if len(recent) >= _COUNTED and now > recent[0]:
            half = 0.5 * len(recent) / (now - recent[0])
            if half > self._known:
                return self._cut(now, half, _GROW_LONG if (pause or 0) >= _LONG_PAUSE else _GROW_SHORT)
        return self._cut(now, self._known) if self._known else None

    def _pause(self, now: float, until: float) -> None:
        if now >= self._stretch_start:
            # The stretch since the last pause ended with this throttle; keep its measure.
            ok = self._ok if self._stretch_ok is None else self._stretch_ok
            self._ended = (now - self._stretch_start, self._ok - ok)
        self._paused_until = self._stretch_start = until
        self._stretch_ok = None
        self._epoch += 1
        self._front = max(self._front, until)
        rate = self._rate(now)
        if rate < INF:
            # No burst at the end of a pause: the first slot is a throttled call's.
            interval, tolerance = self._spacing(rate)
            self._tat = max(self._tat, until + tolerance + interval)

    def _cut(self, now: float, new: float, guess: float = 0.0) -> Optional[str]:
        current = self._rate(now)
        if new >= current:
            return None
        self._base = max(new, _MIN_RATE)
        self._guess = guess
        if not guess:
            self._known = self._base
        self._grow_from = max(now, self._paused_until)
        self._last_cut = now
        self._epoch += 1
        was = "no ceiling" if current == INF else f"{current:.1f}/s"
        return f"rate limit lowered to {self._base:.1f} calls/s after 429/529 responses (was {was})"

    def _by_recent(self, now: float, current: float) -> Optional[tuple[float, float]]:
        """Short pauses: the successes per second seen over the last second, 95% of it; or,
        while the ceiling is still a guess, half of it again. (The new ceiling, a guess?)"""
        if now - self._last_cut < WINDOW and (self._guess or current == INF):
            # Still throttled soon after a guess: halve it (or, with none, guess twice what
            # gets through), though never below what gets through since engaging.
            count, span = self._ok - self._ok_since, now - self._since
            through = count / span if count >= _COUNTED and span > 0 else 0.0
            if current == INF:
                return (2 * through, _GROW_SHORT) if through else None
            return max(0.5 * current, _SHARE * through), _GROW_SHORT
        # The guesses of the first 0.3 s do not restart the measuring window.
        start = self._since if self._last_cut < self._since + WINDOW else self._last_cut
        if now - start < WINDOW:
            return None
        seen = self._seen(now, start)
        if seen is None or seen >= _JITTER * current:
            return None
        # A stalled client (a busy machine) sees less than the service allows.
        floor = 0.0 if current == INF else current * (0.5 if self._guess else _FLOOR)
        return max(_SHARE * seen, floor), 0.0

    def _seen(self, now: float, start: float) -> Optional[float]:
        """Successes per second since ``start``, or over the last second if that is shorter;
        None when too few to tell."""
        # Samples are taken at successes, so before the first one the count was ``_ok_since``.
        start = max(start, now - _RECENT, self._since)
        base_t, base_ok = start, self._ok_since
        for t, ok in self._samples:
            if t > start:
                break
            base_t, base_ok = t, ok
        count = self._ok - base_ok
        return count / (now - base_t) if count >= _COUNTED and now > base_t else None

    def _by_stretches(self, now: float, pause: float, current: float) -> Optional[tuple[float, float]]:
        """Long pauses: the service's rate from the stretches between them. (The new ceiling,
        and how fast it grows if it is a guess.)"""
        ended, self._ended = self._ended, None
        if ended is None or ended[0] <= 0 or ended[1] < _COUNTED:
            return None  # nothing got through: nothing measured (the pauses still hold)
        length, successes = ended
        prev, self._prev = self._prev, ended
        pace, estimate = successes / length, 0.0
        # Two stretches that differ enough, by enough successes that one more or less matters
        # little: a stretch holds the bucket the pause refilled plus the rate times its length.
        if (
            prev is not None
            and abs(length - prev[0]) >= 0.25 * max(length, prev[0])
            and abs(successes - prev[1]) >= 16
        ):
            slope = (successes - prev[1]) / (length - prev[0])
            estimate = slope if 0 < slope <= pace else 0.0
        if length >= 2 * pause:
            # Long enough that its last second shows what gets through once the bucket is
            # empty; a client that was not always faster than the service makes the slope low.
            estimate = max(estimate, self._seen(now, now - _RECENT) or 0.0)
        if estimate:
            self._estimate = estimate
            return _SHARE * estimate, 0.0
        if length < 2 * pause:
            # Drained at once: half the ceiling, or less than the pace that got through (which
            # holds the service's rate) when the client could not keep up with its ceiling.
            return (0.5 * current, _GROW_LONG) if 0.5 * current < _SHARE * pace else (_SHARE * pace, 0.0)
        return None if self._estimate is None else (_SHARE * self._estimate, 0.0)

"""The schedule behind each client's rate limiter: who goes when. A leaf, importing nothing of qa_min.

``Schedule`` holds the slots of one client's attempts; ``_limiter.Limiter`` adds what it learns
from 429s (the adaptive ceiling) and what the retry loop calls. Engaged:

* **One schedule** (the generic cell rate algorithm, 50 ms of burst unless ``burst`` says
  otherwise). A caller sleeps once for its slot, unless an event below moved the slot while it
  slept. An adaptive ceiling binds only when more than one attempt is in flight or waiting.
* **Shared pauses.** A 429/529's server-requested delay pauses every thread (only the calls it
  throttled, until an adaptive limiter has a pace), with no burst at its end. Slots promised
  for after it stay; a sleeper whose slot a newer pause covers moves behind it. A throttled call
  takes the next slot, and those promised move back one each, so no call absorbs repeated
  429s. If it gives up while nobody else waits, the pause ends with it.
* **A last chance goes alone.** A throttled call's last attempt waits until every attempt out
  has answered, for the latest pause and, when others wait, two intervals after the latest
  success; it then goes while the others wait for its answer (10 s at most), and they go on
  from there without a burst. The service has a request's worth free for it, unless another
  client took it: a limit the server announced loses no call.
"""

from __future__ import annotations

import _thread
import math
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional

    Nap = Callable[[float, float], object]
    Clock = Callable[[], float]
    Notify = Callable[[str], object]
    Slot = tuple[float, bool]

INF = math.inf
EPSILON = 1e-9  # s: a slot this close is now (sums of intervals round)
WINDOW = 0.3  # s: how long a fresh guess of the ceiling is unsettled
_BURST_SECONDS = 0.05  # burst tolerance unless ``burst`` is given: calls at the ceiling in 50 ms
_REGROW, _REGROW_MIN = 0.005, 1.0  # regrowth each second: this share, or at least 1 call/s
_JUMPS = 256  # throttled calls' slots remembered, to move back the sleepers they overtook
_POLL = 0.002  # s: how often a caller held back by a last chance looks again
_ALONE = 10.0  # s: the longest a last chance holds the others back (its report ends it sooner)


class Schedule:
    """The slots of one client's attempts, shared by its threads; see the module docstring.

    ``per_second``, ``burst`` and ``adaptive`` are a ``RateLimit``'s, checked. ``clock`` is a
    monotonic clock in seconds; ``notify(message)`` is told, outside the lock, when the
    ceiling drops or recovers.
    """

    def __init__(
        self,
        per_second: Optional[float],
        burst: Optional[int],
        adaptive: bool,
        clock: Clock = time.monotonic,
        notify: Optional[Notify] = None,
    ) -> None:
        self._burst, self._adaptive = burst, adaptive
        self._clock, self._notify = clock, notify
        self._lock = _thread.allocate_lock()
        self._cap = INF if per_second is None else float(per_second)
        self._base = INF  # the adaptive ceiling at its last cut; inf: none below the cap
        self._guess = 0.0  # for a ceiling that is a guess, not a measurement: its growth a second
        self._grow_from = self._last_cut = -INF  # when the ceiling last changed
        self._tat = -INF  # the schedule's theoretical arrival time
        self._front = self._paused_until = -INF  # the throttled calls' next slot; a pause
        self._epoch = self._inflight = 0  # pauses and cuts; attempts waiting or out
        self._out = self._solo = 0  # attempts sent and not reported; last chances waiting
        self._alone_until = self._last_ok = -INF  # a last chance out alone; the latest success
        self._token = 0.0  # the longest short server delay asked for: about a request's worth
        self._longest = 0.0  # the longest short pause asked for since engaging
        self._jumped = 0  # throttled calls that took a slot ahead of the schedule...
        self._jumps: list[tuple[int, float]] = []  # ...and, for the latest, (number, slot)

    def _tick(self, now: float) -> Optional[str]:
        """What changes with time alone (in ``Limiter``); the news, if any."""
        return None

    def acquire(self, delay: Optional[float], front: int, nap: Nap) -> float:
        """Wait for this attempt's slot; return its ticket (the time it was let go).

        ``delay``: the call's own wait before a retry (None before a first attempt); ``front``:
        1 for a throttled call's retry, 2 for its last one, else 0. ``nap(seconds, held)`` sleeps
        once (``held`` of it for the limiter) and raises to stop, which gives the slot back.
        """
        with self._lock:
            now = self._clock()
            self._inflight += 1
            news = self._tick(now)
            slot, loose = self._slot(now, delay, front)
            seen = (self._epoch, self._jumped)
        self._tell(news)
        own = 0.0 if delay is None else delay
        held = queued = False  # held back by a last chance; counted among the last chances
        try:
            if delay is not None or slot > now + EPSILON:
                # No later than its own delay: that delay as given (slot - now rounds).
                extra = 0.0 if slot <= now + own + EPSILON else slot - now - own
                nap(own + extra, extra)
            due = True  # a nap lasts until the slot it was for
            while True:
                with self._lock:
                    now = self._clock()
                    news = self._tick(now)
                    moved = self._moved(now, slot, loose, front, seen)
                    seen = (self._epoch, self._jumped)
                    if moved is not None:
                        (slot, loose), due = moved, moved[0] <= now + EPSILON
                    if due:  # the clock may read a little before the slot the nap was for
                        now = max(now, slot)
                    hold = self._hold(now, front) if due else slot - now
                    if hold is None and held:  # let go after a last chance: a fresh slot
                        slot, loose = self._slot(now, None, front)
                        held, due = False, slot <= now + EPSILON
                        hold = None if due else slot - now
                    if hold is None:
                        self._out += 1
                        self._solo -= queued
                        if front > 1:
                            self._alone_until = now + _ALONE
                        break
                    if due:
                        held, slot = front < 2, now + hold
                        if front > 1 and not queued:
                            queued, self._solo = True, self._solo + 1
                self._tell(news)
                nap(hold, hold)
                due = True
        except BaseException:
            with self._lock:
                self._inflight -= 1
                self._solo -= queued
                if front and self._inflight == 0:
                    # Nobody waits for this pause any more; the next call probes afresh.
                    self._paused_until = min(self._paused_until, self._clock())
            raise
        self._tell(news)
        return slot

    def _hold(self, now: float, front: int) -> Optional[float]:
        """How long an attempt due now is held back for a last chance; None: it goes.

        A throttled call's last attempt goes alone: once every attempt out has answered, after
        the latest pause and, with others waiting, two intervals after the latest success (or
        twice the longest short delay asked for), while the others wait for its answer. The
        service then has a request's worth free for it, unless someone else's client took it.
        """
        if now < self._alone_until:
            return _POLL
        if front < 2:
            return _POLL if self._solo else None
        if self._out:
            return _POLL
        ready = self._paused_until
        if self._inflight > 1:
            rate = self._rate(now)
            ready = max(ready, self._last_ok + max(2 * self._token, 2.0 / rate))
        return ready - now if ready > now + EPSILON else None

    def _release(self, now: float) -> None:
        """A last chance answered: the others go on from now, without a burst."""
        self._alone_until = -INF
        rate = self._rate(now)
        if rate < INF:
            interval, tolerance = self._spacing(rate)
            self._tat = max(self._tat, now + tolerance + interval)

    def _tell(self, news: Optional[str]) -> None:
        if news is not None and self._notify is not None:
            self._notify(news)

    def _rate(self, now: float) -> float:
        base = self._base
        if base == INF:
            return self._cap
        elapsed = max(0.0, now - self._grow_from)
        if self._guess:  # a halving may have gone too far: grow fast until throttled again
            grown = base * self._guess ** min(elapsed, 64.0)
        else:
            grown = base + max(_REGROW_MIN, base * _REGROW) * elapsed
        return grown if grown < self._cap else self._cap

    def _spacing(self, rate: float) -> tuple[float, float]:
        """The interval between slots at ``rate``, and the burst tolerance."""
        interval = 1.0 / rate
        return interval, _BURST_SECONDS if self._burst is None else (self._burst - 1) * interval

    def _slot(self, now: float, delay: Optional[float], front: int) -> Slot:
        """The time this attempt may go, taken from the schedule, and whether it was taken
        without a ceiling (so that a first ceiling moves it)."""
        earliest = now if delay is None else now + delay
        rate = self._rate(now)
        if front or rate < INF or not self._adaptive:
            # Until an adaptive limiter has measured a pace, a lone 429 may say as much about
            # one request as about the client: a pause holds only the calls it throttled.
            earliest = max(earliest, self._paused_until)
        if rate == INF:
            return earliest, True
        interval, tolerance = self._spacing(rate)
        if self._cap == INF and self._inflight <= 1:
            # Alone, a caller is not paced by an adaptive ceiling; it still uses up schedule,
            # but never more than a burst's worth ahead of itself.
            self._tat = min(max(self._tat, earliest) + interval, earliest + tolerance + interval)
            return earliest, False
        if not front:
            slot = max(earliest, self._tat - tolerance)
            self._tat = max(self._tat, slot) + interval
            return slot, False
        # Throttled calls go first, one slot apart, and the slots promised behind them move
        # back one each (``_moved``). While the ceiling is a fresh guess, no faster than the
        # longest short pause asked for (with exact delays, about the time to free a slot),
        guessing = self._guess > 0 and now - self._last_cut < WINDOW
        if guessing:  # and a call's last chance waits for the pace to settle, then moves
            interval = max(interval, self._longest)
            earliest = max(earliest, self._last_cut + WINDOW) if front > 1 else earliest
        slot = max(earliest, self._front)
        self._front = slot + interval
        self._tat = max(self._tat + interval, self._front + tolerance)
        self._jumped += 1
        self._jumps.append((self._jumped, slot))
        if len(self._jumps) > _JUMPS:
            del self._jumps[: _JUMPS // 2]
        return slot, guessing and front > 1

    def _moved(
        self, now: float, slot: float, loose: bool, front: int, seen: tuple[int, int]
    ) -> Optional[Slot]:
        """Where a sleeper's slot went while it slept, or None if it still holds."""
        epoch, jumped = seen
        if self._epoch != epoch and (loose or self._paused_until > slot):
            return self._slot(now, None, front)  # a pause covers it, or a first ceiling came
        rate = self._rate(now)
        if front or loose or rate == INF or self._jumped == jumped:
            return None
        jumps = [when for number, when in self._jumps if number > jumped]
        ahead, moved = 0, slot
        while True:  # each jump it is moved past may bring another into its way
            count = sum(1 for when in jumps if when <= moved)
            if count == ahead:
                return (moved, False) if ahead else None
            ahead, moved = count, slot + count / rate

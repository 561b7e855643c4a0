"""Each client's rate limiter: the ``_policy`` (the ceiling) and the ``_pacer`` (who goes when),
composed under one lock, and the threaded shell that waits for the pacer's decisions.

The retry loop (``_retrying``) reads ``engaged`` and, while it is False, only notes each
success's send time in ``succeeded`` (an atomic append, no lock) and hands each response's
headers to ``hear``, which returns at once when no rate-limit field is there. Engaged, every
attempt calls ``acquire`` and then ``report``.

Waiting is a small shell over decisions that never block: ``begin(delay, priority)`` takes a
slot and says how long to wait first, ``step(waiter)`` says after each wait whether to go or how
long to wait again, ``abandon(waiter)`` gives the slot back, and ``arm(waiter, wake)`` registers
what ends a wait early when an answer the waiter is held for comes (no polling). ``acquire`` is
the threaded shell: it sleeps through the retry loop's ``nap(seconds, held[, waiter])``, which
sleeps on the client's ``sleep`` (so cancel, timeout and close end it) and arms its event. An
asyncio shell runs the same loop with ``await``: sleep the first wait; then, while ``step``
returns ``(seconds, wakeable)``, await ``asyncio.sleep(seconds)``, or, when wakeable, a future
armed with ``arm(waiter, lambda: loop.call_soon_threadsafe(set_result_if_not_done, future))``
under ``asyncio.wait_for(..., seconds)`` (a timeout is not an error); on cancellation call
``abandon`` and re-raise. ``report`` and ``hear`` take the lock only briefly and never wait.
"""

from __future__ import annotations

import _thread
import time
from collections import deque

from ._announced import parse
from ._pacer import ALONE, EPSILON, INF, Pacer, Waiter
from ._policy import LONG_PAUSE, Policy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Callable, Optional

    from ._announced import Announcement
    from ._pacer import Pace

    # nap(seconds, held), or nap(seconds, held, waiter) for a wait an answer may end early
    Nap = Callable[..., object]
    Clock = Callable[[], float]
    Notify = Callable[[str], object]

SUCCEEDED = 64  # send times of the latest successes kept before engaging
# 429/529s with a delay a busy or paced call may meet beyond its max_retries. In a fleet's first
# seconds a call's retries, a slot apart, can meet an empty bucket several times before the
# limiter's next cut (at most every 0.3 s): 8 in a row were seen (RESULTS.md, fleets).
ABSORBED = 10


class Limiter:
    """The limiter of one client, shared by its threads.

    ``per_second``, ``burst`` and ``adaptive`` are a ``RateLimit``'s, checked. ``clock`` is a
    monotonic clock in seconds, ``wall`` the time in epoch seconds (for announced resets given
    as times); ``notify(message)`` is told, outside the lock, when the ceiling drops or recovers.
    """

    def __init__(
        self,
        per_second: Optional[float],
        burst: Optional[int],
        adaptive: bool,
        clock: Clock = time.monotonic,
        notify: Optional[Notify] = None,
        wall: Clock = time.time,
    ) -> None:
        self._lock = _thread.allocate_lock()
        self._clock, self._wall, self._notify = clock, wall, notify
        self.policy = Policy(per_second, adaptive)
        self._pacing = (burst, per_second is not None)  # how a fresh Pacer is made (``forget``)
        self.pacer = Pacer(*self._pacing)
        # Send times of the latest successes, kept while disengaged (an atomic append, no lock).
        self.succeeded: deque[float] = deque(maxlen=SUCCEEDED)
        if per_second is not None:
            self.policy.engage(clock())
        self.engaged = self.policy.engaged

    def acquire(self, delay: Optional[float], priority: int, nap: Nap) -> float:
        """Wait for this attempt's slot; return its ticket (the time it was let go).

        ``delay``: the call's own wait before a retry (None before a first attempt).
        ``nap(seconds, held)`` sleeps once (``held`` of it for the limiter) and raises to stop,
        which gives the slot back; ``nap(seconds, held, waiter)`` when an answer may end the
        wait early (see ``arm``). The threaded shell over ``begin``, ``step`` and ``abandon``.
        """
        waiter, first = self.begin(delay, priority)
        try:
            if first is not None:
                nap(first[0], first[1])
            while True:
                wait = self.step(waiter)
                if wait is None:
                    return waiter.slot
                if wait[1]:
                    nap(wait[0], wait[0], waiter)
                else:
                    nap(wait[0], wait[0])
        except BaseException:
            self.abandon(waiter)
            raise

    def begin(self, delay: Optional[float], priority: int) -> tuple[Waiter, Optional[tuple[float, float]]]:
        """Take a slot: the attempt's ``Waiter``, and its first wait ``(seconds, held by the
        limiter)`` or None for none. Then ``step`` after each wait, until it says go."""
        waiter = Waiter(priority)
        with self._lock:
            now = self._clock()
            news, pace = self._tick(now)
            slot = self.pacer.reserve(now, delay, waiter, pace)
            nap = self.pacer.nap(now, waiter, pace)
        self._tell(news)
        if delay is None and slot <= now + EPSILON:
            return waiter, None
        own = 0.0 if delay is None else delay
        # Exactly the server's number when nothing else holds the call back.
        wait = own if slot <= now + own + EPSILON else max(own, nap)
        waiter.look_at = now + wait if now + wait < slot - EPSILON else -INF
        return waiter, (wait, wait - own)

    def step(self, waiter: Waiter) -> Optional[tuple[float, bool]]:
        """After a wait: None, the attempt goes now (its ticket is ``waiter.slot``); else how long
        to wait again and whether an answer may end that wait early (then ``arm`` it)."""
        pacer = self.pacer
        waiter.due = True  # a wait lasts until the slot it was for
        with self._lock:
            now = self._clock()
            news, pace = self._tick(now)
            hold = pacer.next(now, waiter, pace)
            # Held for an answer: the answer wakes the waiter, which need not poll.
            wakeable = hold is not None and (hold == INF or waiter.held)
            waiter.look_at = -INF
            if hold is not None and not wakeable:
                hold = min(hold, pacer.nap(now, waiter, pace))
                if now + hold < waiter.slot - EPSILON:
                    waiter.look_at = now + hold
            if wakeable:
                pacer.waiters[waiter] = None
            else:
                pacer.waiters.pop(waiter, None)
            waiter.answer = hold == INF  # no ``sleep=`` seam brings an answer sooner
            if hold == INF:  # at most until a last chance out alone is given up
                hold = max(EPSILON, (pacer.alone_until if pacer.alone_until > now else now + ALONE) - now)
        self._tell(news)
        return None if hold is None else (hold, wakeable)

    def abandon(self, waiter: Waiter) -> None:
        """The attempt stopped waiting (cancelled, timed out, closed): its slot goes back."""
        with self._lock:
            self.pacer.waiters.pop(waiter, None)
            if self.pacer.gave_up(self._clock(), waiter):
                self._wake()

    def dropped(self) -> None:
        """A throttled call stopped (cancelled, timed out, closed) before its retry asked for a
        slot: with no other attempt waiting or out, its pause holds no one back, as when it
        ``abandon``s that wait."""
        with self._lock:
            pacer = self.pacer
            if pacer.inflight == 0:
                pacer.paused_until = min(pacer.paused_until, self._clock())

    def arm(self, waiter: Waiter, wake: Callable[[], object]) -> None:
        """``wake()`` ends ``waiter``'s current wait; at once if what it waits for came already."""
        with self._lock:
            woken = waiter.woken or waiter not in self.pacer.waiters
            waiter.wake = None if woken else wake
        if woken:
            wake()

    def _wake(self) -> None:
        """Wake every waiter held for an answer (under the lock)."""
        for waiter in self.pacer.waiters:
            waiter.woken = True
            if waiter.wake is not None:
                waiter.wake()
                waiter.wake = None
        self.pacer.waiters.clear()

    def report(self, ticket: Optional[float], status: Optional[int], pause: Optional[float]) -> None:
        """An attempt ended: ``status`` None for no response; ``pause`` the server's delay in s.

        ``ticket`` is what ``acquire`` returned, or None for an attempt sent disengaged.
        """
        ok = status is not None and 200 <= status < 300
        with self._lock:
            now = self._clock()
            policy, pacer = self.policy, self.pacer
            cuts = policy.cuts
            if ticket is not None and pacer.answered(now, ok, policy.pace(now)):
                self._wake()
            news = None
            if status in (429, 529):
                if pause is not None and now + pause > pacer.paused_until:
                    policy.paused(now, now + pause)
                    pacer.pause(now, now + pause, policy.pace(now))
                if pause is not None and pause < LONG_PAUSE:  # a short delay: about a request's worth
                    pacer.token = max(pacer.token, pause)
                news = policy.throttled(
                    now, ticket, pause, pacer.paused_until, tuple(self.succeeded), pacer.inflight > 0
                )
            elif ok and ticket is not None:
                policy.succeeded(now, ticket)
            if policy.cuts != cuts:
                pacer.epoch += 1
            self.engaged = policy.engaged
        self._tell(news)

    def hear(self, headers: Iterable[tuple[str, str]]) -> Optional[Announcement]:
        """A response's headers: an announced limit paces from now on. What was announced."""
        news = parse(headers, self._wall())
        if news is not None:
            with self._lock:
                self.policy.heard(self._clock(), news)
                self.engaged = True
        return news

    def absorbs(self) -> bool:
        """Whether this client's 429s with a delay are the limiter's to absorb (``ABSORBED``):
        while a ceiling learned from 429s or announced paces it, or while other attempts of
        the client wait or are out (a busy client finding its share), not for a lone call."""
        with self._lock:
            policy = self.policy
            return policy.learned(self._clock()) or (policy.engaged and self.pacer.inflight > 0)

    def forget(self) -> None:
        """In a forked child: the slots taken, the attempts out and the waits are the parent's
        threads', none of which runs here, and the attempts that went are the parent's, whose
        client paces on there. A fresh schedule (``restart``), from now."""
        # The parent's lock may have been held by another of its threads at fork time.
        self._lock = _thread.allocate_lock()
        self.restart(carry=False)

    def restart(self, carry: bool = True) -> None:
        """A fresh schedule, for calls that will never run again (a forked child's parent
        threads, an asyncio client's loop once closed): their slots, attempts out and waits are
        forgotten; what was learned or announced stays, and any pause the server asked for (the
        same account's). The callers see to it that none of those calls reports here later.

        ``carry``: the schedule's end stays, up to an interval from now. The attempts that went
        count against the ceiling still (one call per ``asyncio.run``, each on a new loop, would
        otherwise go at once every time); the slots of the calls dropped are let go."""
        with self._lock:
            old, now, policy = self.pacer, self._clock(), self.policy
            self.pacer = Pacer(*self._pacing)
            self.pacer.paused_until = old.paused_until
            rate = policy.rate(now) if policy.engaged else policy.cap
            if carry and rate < INF:
                self.pacer.tat = min(old.tat, now + 1.0 / rate)

    def snapshot(self) -> tuple[Optional[float], float, int, Optional[Announcement]]:
        """(the ceiling now or None, seconds left of the pause, 429/529s seen, the latest
        announcement)."""
        with self._lock:
            now = self._clock()
            policy = self.policy
            rate = policy.rate(now) if policy.engaged else policy.cap
            paused = max(0.0, self.pacer.paused_until - now)
            return None if rate == INF else rate, paused, policy.throttles, policy.announced

    def _tick(self, now: float) -> tuple[Optional[str], Pace]:
        """The policy's news, if any, and its pace now (under the lock)."""
        news, pace = self.policy.tick(now, self.pacer.paused_until)
        self.engaged = self.policy.engaged
        return news, pace

    def _tell(self, news: Optional[str]) -> None:
        if news is not None and self._notify is not None:
            self._notify(news)

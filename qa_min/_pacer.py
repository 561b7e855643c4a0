"""The rate limiter's pacer: slots, pauses and who goes next. Pure decisions, no lock, no clock.

Every method takes ``now`` and the ceiling in force (a ``Pace``, from ``_policy``) and answers
with a time: "go at t", "wait until woken", or "go now". Waiting is not done here: the limiter
(``_limiter``) owns the lock and blocks a thread on its ``Waiter``; the asyncio shell
(``_asender``) awaits a future per ``Waiter`` instead, over the same decisions. What the rules are:

* **One schedule** (the generic cell rate algorithm, 50 ms of burst unless ``burst`` says
  otherwise), its slots evenly spaced: spread at random around the same mean, they cost a fleet
  more 429s (benchmarks/RESULTS.md, fleets run 8). A ceiling the policy learned binds only
  when more than one attempt is in flight or waiting; an explicit one always. A new call that
  stops waiting (cancelled, timed out, closed) gives its slot back: the schedule's last
  shortens it, an earlier one is the next new call's (kept while no pause, cut or throttled
  call has moved the schedule since). Kept spent, the slots of calls that timed out waiting
  pushed every later call as far out, and those timed out too.
* **Shared pauses** (SPEC.md 7a): a 429/529's delay pauses every attempt of the client, from
  the first one, with no burst at its end. Slots promised for after it stay; a sleeper whose
  slot a newer pause covers moves behind it.
* **Sleepers look again while the ceiling moves**: any call but a last chance sleeps at most
  ``LOOK`` toward its slot under an announced pace (``Pace.follow``); under a learned one, which
  regrows (``Pace.rising``), one whose slot lies more than ``LOOK_FAR`` beyond any pause sleeps
  ``LOOK_FAR``. Slots taken while the bucket was empty, or at a first guess, lie far ahead when
  many calls wait (an asyncio client that sent thousands at once, most of them throttled), and
  those calls slept on at the old pace. At each look the slot comes nearer if the pace, whatever
  it is by then, has risen ``RISEN``-fold since it was taken; else the call sleeps on. A nap
  ended up to ``EARLY`` before its time (a coarse timer) is a look; sooner (a ``sleep=`` seam
  returning at once) it stands for the whole wait, as any wait a seam cuts short.
* **Throttled calls first.** A throttled call's retry takes the next slot (``Priority.RETRY``)
  and the slots promised behind it move back one each, so no call absorbs repeated 429s. With
  no ceiling yet, a new call goes ``AFTER`` the throttled calls' slots, not with them.
* **A last chance goes alone** (``Priority.LAST``): it waits until every attempt out has
  answered, for the latest pause and, with others waiting, two intervals after the latest
  success; then it goes while the others wait for its answer (``ALONE`` at most).
"""

from __future__ import annotations

import enum
import math

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional

INF = math.inf
EPSILON = 1e-9  # s: a slot this close is now (sums of intervals round)
BURST_SECONDS = 0.05  # burst tolerance unless ``burst`` is given: attempts at the ceiling in 50 ms
JUMPS = 256  # throttled calls' slots remembered, to move back the sleepers they overtook
ALONE = 10.0  # s: the longest a last chance holds the others back (its answer ends it sooner)
LOOK = 0.05  # s: under an announced pace, the longest a call sleeps before it looks again...
RISEN = 2.0  # ...and how much the pace must have risen since its slot was taken to bring it nearer
LOOK_FAR = 1.0  # s: under a learned ceiling, the longest a call sleeps before it looks again
AFTER = 0.002  # s: with no ceiling, how long after a pause's throttled calls a new call goes
EARLY = 0.02  # s: a nap ended this early is a look (asyncio's timers: 15.6 ms on Windows < 3.13)


class Priority(enum.IntEnum):
    """Who goes next: a throttled call's retry before new work, its last attempt alone."""

    NEW = 0
    RETRY = 1
    LAST = 2


class Pace:
    """The ceiling the policy has in force: ``rate`` attempts/s (inf: none), and until when a
    fresh guess of it is unsettled (then throttled calls go no faster than ``spacing``);
    ``follow``: the ceiling moves often (announced limits), and the slots promised follow it;
    ``rising``: a learned ceiling, which regrows with time, and the slots promised follow it up."""

    __slots__ = ("follow", "rate", "rising", "settles", "spacing")

    def __init__(
        self,
        rate: float,
        settles: float = -INF,
        spacing: float = 0.0,
        follow: bool = False,
        rising: bool = False,
    ) -> None:
        self.rate, self.settles, self.spacing, self.follow = rate, settles, spacing, follow
        self.rising = rising


class Waiter:
    """One attempt waiting for its slot; the limiter's shell and the pacer share it.

    ``wake`` is what ends its current wait early (set by the shell, e.g. an event's ``set`` or a
    future's ``set_result``); ``woken`` says an event it waited for came before ``wake`` was set.
    """

    __slots__ = (
        "answer",
        "cell",
        "due",
        "held",
        "look_at",
        "loose",
        "priority",
        "queued",
        "rate",
        "seen",
        "slot",
        "wake",
        "woken",
    )

    def __init__(self, priority: int) -> None:
        self.priority = priority if type(priority) is Priority else Priority(priority)  # or 0, 1, 2
        self.slot, self.loose = -INF, False
        # Its place in the schedule, and the schedule's state then (``Pacer._state``); None when
        # its slot was not taken from the schedule (no ceiling, a lone caller, a throttled call).
        self.cell: Optional[tuple[float, tuple[int, int, float]]] = None
        self.rate = INF  # the ceiling its slot was taken at
        self.seen = (0, 0)  # (pauses and cuts, throttled jumps) when the slot was last checked
        self.due = False  # its wait lasted until its slot
        self.look_at = -INF  # where a wait shorter than its slot ends (-inf: it lasts until it)
        self.held = self.queued = False  # held back by a last chance; counted among them
        self.answer = False  # its wait is for an answer only (set by the shell's ``step``)
        self.wake: Optional[Callable[[], object]] = None
        self.woken = False


class Pacer:
    """The slots of one client's attempts; see the module docstring. Not thread-safe: its
    owner holds a lock around every call. ``capped``: the ceiling is explicit, so it binds
    even a lone caller."""

    def __init__(self, burst: Optional[int], capped: bool) -> None:
        self._burst, self._capped = burst, capped
        self.tat = -INF  # the schedule's theoretical arrival time...
        self._rate = INF  # ...at this ceiling
        self._spaced = INF  # the lowest learned ceiling the slots promised were spaced for
        self.front = self.paused_until = -INF  # the throttled calls' next slot; a pause
        self.epoch = self.inflight = 0  # pauses and cuts; attempts waiting or out
        self.out = self._solo = 0  # attempts sent and not answered; last chances waiting
        self.retrying = 0  # throttled calls waiting for their slot
        # The latest slot taken: (whose, the schedule's end before it, after it).
        self._latest: Optional[tuple[Waiter, float, float]] = None
        self.alone_until = self.last_ok = -INF  # a last chance out alone; the latest success
        self.token = 0.0  # the longest short server delay asked for: about a request's worth
        self._jumped = 0  # throttled calls that took a slot ahead of the schedule...
        self._jumps: list[tuple[int, float]] = []  # ...and, for the latest, (number, slot)
        self.waiters: dict[Waiter, None] = {}  # those waiting to be woken by an answer, in order
        self._holes: list[float] = []  # cells given back, sorted, valid in state ``_holes_in``
        self._holes_in = (0, 0, INF)

    def spacing(self, rate: float) -> tuple[float, float]:
        """The interval between slots at ``rate``, and the burst tolerance."""
        interval = 1.0 / rate
        return interval, BURST_SECONDS if self._burst is None else (self._burst - 1) * interval

    def reserve(self, now: float, delay: Optional[float], waiter: Waiter, pace: Pace) -> float:
        """Take a slot for ``waiter`` (``delay``: the call's own wait, None before a first
        attempt); the time it may go."""
        self.inflight += 1
        self.retrying += waiter.priority is not Priority.NEW
        before = self.tat
        waiter.slot, waiter.loose = self._slot(now, delay, waiter, pace)
        self._latest = (waiter, before, self.tat)
        waiter.seen, waiter.rate = (self.epoch, self._jumped), pace.rate
        return waiter.slot

    def nap(self, now: float, waiter: Waiter, pace: Pace) -> float:
        """How long ``waiter`` may sleep toward its slot before it looks again (``next``), so
        that a call whose slot was taken at a low pace does not sleep on while the pace has
        risen: every ``LOOK`` under an announced ceiling, which moves often; every ``LOOK_FAR``
        under a learned one, which regrows steadily. The shell records where a wait shorter
        than the slot ends (``Waiter.look_at``), so that a look happens only after it."""
        wait = waiter.slot - now
        if waiter.priority is Priority.LAST or not (pace.follow or pace.rising):
            return wait  # a last chance, or a fixed ceiling: no slot it holds will come nearer
        if pace.follow:
            return min(wait, LOOK)
        # No slot comes before a pause ends: only one more than LOOK_FAR beyond it may move.
        return min(wait, max(0.0, self.paused_until - now) + LOOK_FAR)

    def next(self, now: float, waiter: Waiter, pace: Pace) -> Optional[float]:
        """After a wait: None, it goes now (counted out); else how long to wait again (inf:
        until woken by an answer)."""
        looking = waiter.look_at > -INF and now >= waiter.look_at - EARLY  # a nap ran its course
        if not waiter.woken and waiter.slot > now + EPSILON and looking:
            # A look before its slot (``nap``), whatever the pace is now: nearer if it has risen.
            if pace.rate >= RISEN * waiter.rate:  # never before a pause ends (SPEC.md 7a)
                nearer = now + (waiter.slot - now) * waiter.rate / pace.rate
                waiter.slot, waiter.rate = max(nearer, self.paused_until), pace.rate
            if waiter.slot > now + EPSILON:
                waiter.due = False
                return waiter.slot - now
        if waiter.woken:  # an answer ended the wait early: look again from now
            waiter.woken, waiter.due = False, True
            waiter.slot = min(waiter.slot, now)
        moved = self._moved(now, waiter, pace)
        waiter.seen = (self.epoch, self._jumped)
        if moved is not None:
            (waiter.slot, waiter.loose), waiter.due = moved, moved[0] <= now + EPSILON
        if waiter.due:  # the clock may read a little before the slot the wait was for
            now = max(now, waiter.slot)
        hold = self._hold(now, waiter.priority, pace) if waiter.due else waiter.slot - now
        if hold is None and waiter.held:  # let go after a last chance: a fresh slot
            waiter.slot, waiter.loose = self._slot(now, None, waiter, pace)
            waiter.rate = pace.rate
            waiter.held, waiter.due = False, waiter.slot <= now + EPSILON
            hold = None if waiter.due else waiter.slot - now
        if hold is None:
            self.out += 1
            self.retrying -= waiter.priority is not Priority.NEW
            self._solo -= waiter.queued
            waiter.queued = False
            if waiter.priority is Priority.LAST:
                self.alone_until = now + ALONE
            return None
        if waiter.due:
            waiter.held = waiter.priority is not Priority.LAST
            waiter.slot = now + hold if hold < INF else now
            if waiter.priority is Priority.LAST and not waiter.queued:
                waiter.queued, self._solo = True, self._solo + 1
        return hold

    def gave_up(self, now: float, waiter: Waiter) -> bool:
        """``waiter`` stopped waiting (cancelled, timed out, closed); whether to wake the others."""
        self.inflight -= 1
        self.retrying -= waiter.priority is not Priority.NEW
        self._solo -= waiter.queued
        latest, cell, waiter.cell = self._latest, waiter.cell, None
        if (
            latest is not None
            and latest[0] is waiter
            and latest[2] == self.tat
            and latest[1] < self.tat
            and not waiter.priority
        ):
            # A new call's slot, the schedule's last and untouched since: it goes back.
            self.tat, self._latest = latest[1], None
            self._give_back(None)
        elif cell is not None and cell[1] == self._state() and cell[0] >= now:
            self._give_back(cell[0])
        if waiter.priority and self.inflight == 0:
            # Nobody waits for this pause any more; the next call probes afresh.
            self.paused_until = min(self.paused_until, now)
        return waiter.queued

    def answered(self, now: float, ok: bool, pace: Pace) -> bool:
        """An attempt out answered (or failed); whether the waiters held for it may go."""
        self.inflight -= 1
        self.out -= 1
        if ok:
            self.last_ok = now
        if self.out == 0 and self.alone_until > now:
            # A last chance answered: the others go on from now, without a burst.
            self.alone_until = -INF
            if pace.rate < INF:
                interval, tolerance = self.spacing(pace.rate)
                self.tat = max(self.tat, now + tolerance + interval)
            return True
        return self.out == 0 and bool(self._solo)

    def pause(self, now: float, until: float, pace: Pace) -> None:
        """A server delay: nothing goes before ``until``, and then no burst."""
        self.paused_until = until
        self.epoch += 1
        self.front = max(self.front, until)
        if pace.rate < INF:
            # No burst at the end of a pause: the first slot is a throttled call's.
            interval, tolerance = self.spacing(pace.rate)
            self.tat = max(self.tat, until + tolerance + interval)

    def _state(self) -> tuple[int, int, float]:
        """What a cell's place depends on: pauses and cuts, throttled calls' jumps, the ceiling."""
        return self.epoch, self._jumped, self._rate

    def _current_holes(self) -> list[float]:
        """The holes, none if the schedule moved since they were given back."""
        if self._holes_in != self._state():
            self._holes.clear()
            self._holes_in = self._state()
        return self._holes

    def _give_back(self, cell: Optional[float]) -> None:
        """A new call's cell, unused: the schedule's end comes back to it if it was the last,
        and over the holes before it that the end reaches; else it is a hole."""
        holes = self._current_holes()
        if cell is not None:
            holes.append(cell)
            holes.sort()  # sorted but for the new one: a linear pass, and no ``bisect`` to import
        interval = 1.0 / self._rate
        while holes and abs(holes[-1] + interval - self.tat) <= 1e-6 * interval:
            self.tat = holes.pop()

    def _hold(self, now: float, priority: Priority, pace: Pace) -> Optional[float]:
        """How long an attempt due now is held back for a last chance; None: it goes; inf:
        until an answer wakes it."""
        if now < self.alone_until:
            return INF  # until its answer (ALONE at most)
        if priority is not Priority.LAST:
            return INF if self._solo else None
        if self.out:
            return INF
        ready = self.paused_until
        if self.inflight > 1:
            spacing = 2.0 / pace.rate if pace.rate < INF else 0.0
            ready = max(ready, self.last_ok + max(2 * self.token, spacing))
        return ready - now if ready > now + EPSILON else None

    def _slot(self, now: float, delay: Optional[float], waiter: Waiter, pace: Pace) -> tuple[float, bool]:
        """The time an attempt may go, taken from the schedule, and whether it was taken
        without a ceiling (so that a first ceiling moves it); a new call's cell noted."""
        priority, waiter.cell = waiter.priority, None
        # SPEC.md 7a: a server's delay holds every attempt of the client, from the first 429.
        earliest = max(now if delay is None else now + delay, self.paused_until)
        rate = pace.rate
        if rate == INF and pace.settles == -INF and pace.spacing and priority and self.inflight > 1:
            # No ceiling yet, just throttled with exact delays: a delay is about the time to
            # free one request, so throttled calls go that far apart, not all at once.
            slot = max(earliest, self.front)
            self.front = slot + pace.spacing
            return slot, True
        if rate == INF:
            if priority is Priority.NEW and self.retrying and earliest < self.front + AFTER:
                # With no ceiling yet, the pause's end would be a race: throttled calls first.
                earliest = self.front + AFTER
            return earliest, True
        interval, tolerance = self.spacing(rate)
        start = max(now, self.paused_until + tolerance + interval)
        if pace.follow and rate != self._rate and self.tat > start and self._rate < INF:
            # A new ceiling: the slots promised after now (and any pause) are stretched or
            # shrunk to it, so that a client whose ceiling rose is not held back by slots spaced
            # for the old one.
            self.tat = start + (self.tat - start) * self._rate / rate
        elif pace.rising and rate >= RISEN * self._spaced:
            # A learned ceiling RISEN-fold what the slots promised were spaced for (a first guess
            # growing): the schedule beyond LOOK_FAR shrinks to it, the throttled calls' too, as
            # the sleepers there do when they look. Nearer slots hold: their sleepers do not look.
            far, shrink = start + LOOK_FAR, self._spaced / rate
            self.tat = far + (self.tat - far) * shrink if self.tat > far else self.tat
            self.front = far + (self.front - far) * shrink if self.front > far else self.front
            self._spaced = rate
        self._rate = rate
        self._spaced = min(self._spaced, rate)
        if not self._capped and self.inflight <= 1:
            # Alone, a caller is not paced by a learned ceiling; it still uses up schedule,
            # but never more than a burst's worth ahead of itself.
            self.tat = min(max(self.tat, earliest) + interval, earliest + tolerance + interval)
            return earliest, False
        if priority is Priority.NEW:
            return self._new_slot(now, earliest, waiter, interval, tolerance), False
        # Throttled calls go first, one slot apart, and the slots promised behind them move
        # back one each (``_moved``). While the ceiling is a fresh guess, no faster than the
        # longest short pause asked for (with exact delays, about the time to free a slot),
        guessing = now < pace.settles
        if guessing:  # and a call's last chance waits for the pace to settle, then moves
            interval = max(interval, pace.spacing)
            if priority is Priority.LAST:
                earliest = max(earliest, pace.settles)
        slot = max(earliest, self.front)
        self.front = slot + interval
        self.tat = max(self.tat + interval, self.front + tolerance)
        self._jumped += 1
        self._jumps.append((self._jumped, slot))
        if len(self._jumps) > JUMPS:
            del self._jumps[: JUMPS // 2]
        return slot, guessing and priority is Priority.LAST

    def _new_slot(
        self, now: float, earliest: float, waiter: Waiter, interval: float, tolerance: float
    ) -> float:
        """A new call's slot: the earliest cell given back that is not past, else the
        schedule's next; its cell noted."""
        holes = self._current_holes()
        while holes and holes[0] < now:
            del holes[0]  # its time passed unused, as any slot not taken
        if holes:
            cell = holes.pop(0)
            slot = max(earliest, cell - tolerance)
        else:
            slot = max(earliest, self.tat - tolerance)
            self.tat = max(self.tat, slot) + interval
            cell = self.tat - interval
        waiter.cell = cell, self._state()
        return slot

    def _moved(self, now: float, waiter: Waiter, pace: Pace) -> Optional[tuple[float, bool]]:
        """Where a sleeper's slot went while it slept, or None if it still holds."""
        epoch, jumped = waiter.seen
        slot, loose = waiter.slot, waiter.loose
        if self.epoch != epoch and (loose or self.paused_until > slot):
            waiter.rate = pace.rate  # a fresh slot, at today's pace
            return self._slot(now, None, waiter, pace)  # a pause covers it, or a first ceiling
        rate = pace.rate
        if waiter.priority or loose or rate == INF or self._jumped == jumped:
            return None
        jumps = [when for number, when in self._jumps if number > jumped]
        ahead, moved = 0, slot
        while True:  # each jump it is moved past may bring another into its way
            count = sum(1 for when in jumps if when <= moved)
            if count == ahead:
                return (moved, False) if ahead else None
            ahead, moved = count, slot + count / rate

"""The rate limiter's policy: what 429/529s, successes and announced limits teach. Pure: no
lock, no clock of its own (``now`` is passed in), no I/O. The algorithm, written once:

**Disengaged** until the first 429/529 or the first announced limit (an explicit ceiling
engages it at once): nothing is paced, and the retry loop only notes each success's send time.

**Announced limits** (``_announced`` parses them; ``_steer`` reads the pace off them and holds
their constants) pace an adaptive limit before any 429 (a fixed one, ``adaptive=False``, only
shows them). Each response tells the bucket's level (``remaining``) and, from the policy or the
reset, its refill rate R (smoothed). The ceiling is a function of the level alone: ``TOP`` * R
at a full bucket (its limit told, less the request answered, or the fullest the client has
seen), ``BASE`` times less at an empty one, geometric in between: R * TOP * BASE ** (full - 1).
Every client that sees the same level paces the same, so a fleet is fair once each member's
first pace has ramped up, whenever it started; and the bucket itself settles the fleet: N
clients drain it until N paces make R (full = 1 - log(TOP * N) / log(BASE): 0.92 for one, 0.49
for eight, empty for about 85), with no estimate of N, of the fleet's rate or of the level's
slope, whose lag made a fleet of stepping controllers swing between a full bucket and 429s. The
first announced pace is ``START`` of R and grows ``RAMP``-fold a second until the level binds it
(a fleet starting together would otherwise drain the bucket at once). The pacer lets a call (but
a last chance) sleep at most ``LOOK`` toward a slot taken under an announced pace, and brings
the slot nearer when the pace has risen ``RISEN``-fold since: after a drained bucket, slots
taken at its slow pace lie seconds ahead, and a fleet sleeping on them left the bucket full.
After ``SILENT`` seconds with no announcement the level is read as refilled at R since the last
one (a client whose own burst drained the bucket hears nothing while its calls sleep). A 429
meanwhile cuts by ``BETA`` until the next announcement. An announcement older than ``STALE`` no
longer paces. With no refill told (a fixed window), R is what is left over what is left of the
window.

**Without announcements, 429s teach** ("measured", notes/rate-limiting.md):

* The first ceiling is a guess: half the pace of the latest successes, at most ``FIRST_GUESS``
  (that pace is luck: a burst that drained the bucket, or one client's share of a fleet's, so
  every client guesses no more than the same), or the last measured ceiling if higher;
  ``FIRST_GUESS`` itself for a busy client with too few successes to tell a pace (a newcomer). A
  guess is halved by a throttle within ``WINDOW`` (to ``MIN_GUESS`` at least: the slots
  promised to waiting calls stay near) and grows ``GROW_SHORT``-fold a second until throttled, though never
  past the pace first throttled nor ``GUESS_SPAN`` times itself; one that grew that far with no
  throttle becomes a measured ceiling and regrows as one.
* A **long pause** (>= ``LONG_PAUSE``) refilled the server's bucket. A guessed ceiling becomes
  ``SHARE`` of what got through since the last pause: of its last second if that stretch lasted
  two pauses or more, else of its whole pace (halving a guess below that pace left a fleet's
  members that drained the bucket together at a half or a quarter of a peer that escaped).
  Once measured, each such throttle keeps ``CUT`` of the ceiling, whatever got through: in a
  fleet a client measures only its own share, noisily, and cutting every client by the same
  fraction while all regrow by the same calls/s makes unequal shares meet (additive increase,
  multiplicative decrease). A stretch with too few successes to measure cuts nothing.
* A **short pause**: ``SHARE`` of the successes per second of the last second, by at most
  1 - ``FLOOR`` (half, of a guess); once a ceiling is measured, each such throttle keeps
  ``CUT_SHORT`` of it, for the same reason as ``CUT`` (cutting each client of a fleet to its own
  measure kept unequal shares apart). At most every ``WINDOW``; a throttle while ``JITTER`` of
  the ceiling gets through is jitter. Only attempts sent after the latest cut can cut again.
* **Regrowth** of a measured ceiling: 0.5%/s, or at least ``REGROW_MIN`` calls/s each second
  (``REGROW_SHORT`` where the latest throttle cost only a short pause, so probing is cheap), for
  ``PLATEAU`` seconds, then faster and faster: ``CUBE`` times the cube of the time beyond, in
  calls/s, the same for every client (``PLATEAU_SHORT`` and ``CUBE_SHORT`` after a short
  pause). A client whose peers stopped takes their share back in tens of seconds, while a lone
  client probes above the service's rate only every ~``PLATEAU`` + a few seconds. An explicit
  ceiling is regained in full; an adaptive one is lifted after ``QUIET`` s without a throttle.

The pacer (``_pacer``) applies the ceiling, its slots evenly spaced; a 429/529's delay pauses
the whole client there.
"""

from __future__ import annotations

from ._pacer import INF, Pace
from ._steer import Steer

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Optional

    from ._announced import Announcement

WINDOW = 0.3  # s: how long a fresh guess of the ceiling is unsettled
LONG_PAUSE = 0.2  # s: a pause this long refills a server's bucket while the client waits
COUNTED = 4  # successes needed before their pace means anything
RECENT = 1.0  # s: successes per second are measured over at most the last second
JITTER = 0.98  # a throttle while this share of the ceiling gets through cuts nothing
SHARE = 0.95  # a cut sets the ceiling to this share of the measured rate
CUT = 0.85  # once measured, a throttle after a long pause keeps this share of the ceiling
FLOOR = 0.7  # a cut after a short pause keeps at least this share of the ceiling...
CUT_SHORT = 0.7  # ...and, once measured, this share, whatever got through
MIN_RATE = 0.5  # calls/s: the lowest adaptive ceiling
GROW_SHORT = 3.0  # a guess grows this much a second until throttled
GUESS_SPAN = 32.0  # a guess grows to this multiple of itself at most (nor past the pace first throttled)
FIRST_GUESS = 40.0  # calls/s: the most a first guess may be (the same for every client)
MIN_GUESS = 5.0  # calls/s: a guess halved again stays at least this (slots promised stay near)
REGROW, REGROW_MIN = 0.005, 3.0  # regrowth each second: this share, or at least 3 calls/s
REGROW_SHORT = 4.0  # calls/s each second at least, where a throttle costs a short pause only
PLATEAU = 6.0  # s after a cut when regrowth turns from linear to cubic
CUBE = 0.05  # calls/s per s**3 beyond the plateau: the same for every client (so they grow equal)
PLATEAU_SHORT, CUBE_SHORT = 2.0, 0.3  # the same where the latest throttle cost a short pause
QUIET = 60.0  # s without a throttle after which an adaptive ceiling is lifted
SAMPLE, SAMPLES = 0.05, 40  # the success count is sampled every 50 ms, for two seconds
# Announced limits (the rest are ``_steer``'s).
BETA = 0.9  # a 429 while paced by announcements keeps this share of the ceiling
STALE = 5.0  # s: an announcement older than this paces no more


class Policy:
    """The ceiling of one client; see the module docstring. Not thread-safe (the limiter locks)."""

    def __init__(self, per_second: Optional[float], adaptive: bool) -> None:
        self.cap = INF if per_second is None else float(per_second)
        self.adaptive = adaptive
        self.engaged = False
        self.cuts = self.throttles = 0  # ceilings set; 429/529 responses seen
        self._base = INF  # the adaptive ceiling at its last cut; inf: none below the cap
        self._guess = 0.0  # for a ceiling that is a guess, not a measurement: its growth a second
        self._grow_from = self._last_cut = self._since = self._last_throttle = -INF
        self._known = 0.0  # the last ceiling measured, not guessed
        self._first = INF  # the pace of the successes before the first throttle
        self._short = False  # the latest throttle asked for a short pause
        self._longest = 0.0  # the longest short pause asked for since engaging
        self._ok = self._ok_since = 0  # successes counted while engaged
        self._samples: list[tuple[float, int]] = []  # (time, successes), one per SAMPLE
        self._stretch_start = -INF  # the end of the last pause...
        self._stretch_ok: Optional[int] = None  # ...and the successes counted by then
        self._ended: Optional[tuple[float, int]] = None
        self._estimate: Optional[float] = None
        self.announced: Optional[Announcement] = None  # the latest announcement...
        self._heard = -INF  # ...and when
        self.steer = Steer()  # the ceiling announcements set

    def steered(self, now: float) -> bool:
        """Whether announcements pace now: a fresh one, and an adaptive limit (a fixed ceiling,
        ``adaptive=False``, is what the caller chose; the announcement is only shown)."""
        return self.adaptive and now - self._heard < STALE

    def rate(self, now: float) -> float:
        """The ceiling in force: attempts per second, inf for none."""
        return self._rate(now, self.steered(now))

    def _rate(self, now: float, steered: bool) -> float:
        """``rate``, with ``steered(now)`` known (``pace`` needs it too: once, not twice a step)."""
        if steered:
            return min(self.steer.at(now, self.announced, self._heard), self.cap)
        base = self._base
        if base == INF:
            return self.cap
        elapsed = max(0.0, now - self._grow_from)
        if self._guess:  # a halving may have gone too far: grow fast until throttled again,
            # though never past the pace that was throttled first
            grown = min(
                base * self._guess ** min(elapsed, 64.0), max(base, min(self._first, GUESS_SPAN * base))
            )
        else:
            if self._short:  # probing is cheap: the cube comes sooner and steeper
                least, plateau, cube = REGROW_SHORT, PLATEAU_SHORT, CUBE_SHORT
            else:
                least, plateau, cube = REGROW_MIN, PLATEAU, CUBE
            beyond = max(0.0, elapsed - plateau)
            grown = base + max(least, base * REGROW) * elapsed + cube * beyond**3
        return grown if grown < self.cap else self.cap

    def learned(self, now: float) -> bool:
        """Whether a ceiling learned from 429s, or announced, is in force."""
        return self.engaged and (self._base < INF or self.steered(now))

    def pace(self, now: float, rate: Optional[float] = None) -> Pace:
        """The ceiling in force and how the pacer applies it; ``rate``: ``rate(now)`` if known."""
        settles = self._last_cut + WINDOW if self._guess else -INF
        announced = self.steered(now)
        rising = not announced and self.adaptive and self._base < INF  # a learned ceiling regrows
        if rate is None:
            rate = self._rate(now, announced)
        return Pace(rate, settles, self._longest, announced, rising)

    def engage(self, now: float) -> None:
        self.engaged = True
        self._since = self._last_cut = now
        self._ok_since = self._ok
        self._samples = []
        self._stretch_start = max(self._stretch_start, now)
        self._ended = None
        self._longest = 0.0

    def tick(self, now: float, paused_until: float) -> tuple[Optional[str], Pace]:
        """Regaining the cap, or disengaging after a quiet spell: the news, if any, and the pace
        after it (``pace(now)``). A learned ceiling is computed once a step, not twice: the
        limiter ticks before every decision (most of a fleet simulation's time)."""
        rate = None  # rate(now), while nothing here has changed it
        if self._base < INF:
            rate = self.rate(now)
            if rate >= self.cap:
                self._base = INF
                return f"rate limit recovered: back to {self.cap:g} calls/s", self.pace(now)
        if self._guess and now - self._heard >= STALE:
            grown = self.rate(now) if rate is None else rate
            if grown < self._base * self._guess ** min(now - self._grow_from, 64.0):
                # Grown as far as a guess may with no throttle: a measured ceiling from there.
                self._base, self._guess, self._grow_from = grown, 0.0, now
                rate = None
        quiet = not self.adaptive or now - self._last_throttle >= QUIET
        if self.cap == INF and quiet and now >= paused_until and now - self._heard >= STALE:
            # Nothing to pace and no pause: back to the fast path until the next throttle.
            cut = self._base < INF
            self.engaged = False
            self._base = INF
            self._ended = self._estimate = None
            rate = None
            if cut:
                recovered = f"rate limit recovered: no 429/529 for {QUIET:g} s, no ceiling any more"
                return recovered, self.pace(now)
        return None, self.pace(now, rate)

    def succeeded(self, now: float, ticket: float) -> None:
        """A 2xx for an attempt sent at ``ticket`` while engaged."""
        if ticket < self._since:
            return  # only what was sent engaged tells the pace
        self._ok += 1
        if self._stretch_ok is None and now >= self._stretch_start:
            self._stretch_ok = self._ok - 1
        samples = self._samples
        if not samples or now - samples[-1][0] >= SAMPLE:
            samples.append((now, self._ok))
            if len(samples) > SAMPLES:
                del samples[0]

    def paused(self, now: float, until: float) -> None:
        """A server delay until ``until``: the stretch since the last pause ended with it."""
        if now >= self._stretch_start:
            ok = self._ok if self._stretch_ok is None else self._stretch_ok
            self._ended = (now - self._stretch_start, self._ok - ok)
        self._stretch_start = until
        self._stretch_ok = None

    def throttled(
        self,
        now: float,
        ticket: Optional[float],
        pause: Optional[float],
        until: float,
        sent: Iterable[float],
        busy: bool = False,
    ) -> Optional[str]:
        """A 429/529 for an attempt sent at ``ticket`` (None: disengaged); ``pause`` its delay,
        ``until`` the client's pause now, ``sent`` the latest successes' send times, ``busy``:
        other attempts of the client wait or are out. The news."""
        self.throttles += 1
        if pause is not None and pause < LONG_PAUSE and now - self._since < WINDOW:
            self._longest = max(self._longest, pause)
        if not self.adaptive:
            self.engaged = True
            return None
        self._last_throttle = now
        self._short = pause is not None and pause < LONG_PAUSE
        if now - self._heard < STALE:
            self.engaged = True
            current = self.rate(now)
            if current == INF:  # not paced yet: start from what gets through
                current = self.seen(now, now - RECENT) or INF
            return self._cut(now, BETA * current, until) if ticket is not None else None
        if not self.engaged:
            self.engage(now)
            return self._first_ceiling(now, until, sent, busy)
        if busy and self._base == INF and self.cap == INF:
            # Still no ceiling while other calls wait (the first 429 came while they were out,
            # before any of them was counted): the first ceiling now.
            return self._first_ceiling(now, until, sent, busy)
        if ticket is None or ticket < self._last_cut:
            return None  # sent before the latest cut: it says nothing new
        current = self.rate(now)
        if pause is not None and pause >= LONG_PAUSE:
            measured = self._by_stretches(now, pause, current)
            if measured is None:
                return None
            if current < INF and not self._guess:
                # In a fleet what a client measures is its own share, and noisy: the same
                # fraction off every client's ceiling (and the same calls/s back) makes unequal
                # shares meet, where cutting to each one's measure kept them apart.
                measured = CUT * current
            return self._cut(now, measured, until)
        new = self._by_recent(now, current)
        return None if new is None else self._cut(now, new[0], until, new[1])

    def _first_ceiling(self, now: float, until: float, sent: Iterable[float], busy: bool) -> Optional[str]:
        """Half the pace of the latest successes, at most ``FIRST_GUESS``, or the last ceiling
        measured if higher."""
        recent = [t for t in sent if t >= now - RECENT]
        if len(recent) >= COUNTED and now > recent[0]:
            pace = len(recent) / (now - recent[0])
            # The pace is luck (a burst, or a share of a fleet's): none guesses more than the
            # same, and each grows as fast: equal shares from the start.
            half = min(0.5 * pace, FIRST_GUESS)
            if half > self._known:
                self._first = pace
                return self._cut(now, half, until, GROW_SHORT)
        if self._known:
            return self._cut(now, self._known, until)
        if not busy:
            return None
        # A busy client with too few successes to tell a pace (a newcomer to a bucket others
        # keep empty): the same first guess as any client's, not another burst after the pause.
        # One call at a time stays unpaced (and its 429s count against its retries).
        self._first = INF
        return self._cut(now, FIRST_GUESS, until, GROW_SHORT)

    def _cut(self, now: float, new: float, until: float, guess: float = 0.0) -> Optional[str]:
        current = self.rate(now)
        if new >= current:
            return None
        if now - self._heard < STALE:
            self.steer.paced = max(new, MIN_RATE)
        else:
            self._base = max(new, MIN_RATE)
            self._guess = guess
            if not guess:
                self._known = self._base
            self._grow_from = max(now, until)
        self._last_cut = now
        self.cuts += 1
        was = "no ceiling" if current == INF else f"{current:.1f}/s"
        return f"rate limit lowered to {max(new, MIN_RATE):.1f} calls/s after 429/529 responses (was {was})"

    def _by_recent(self, now: float, current: float) -> Optional[tuple[float, float]]:
        """Short pauses: the successes per second seen over the last second, SHARE of it; or,
        while the ceiling is still a guess, half of it again. (The new ceiling, a guess?)"""
        if now - self._last_cut < WINDOW and (self._guess or current == INF):
            # Still throttled soon after a guess: halve it (or, with none, guess twice what
            # gets through), though never below what gets through since engaging.
            count, span = self._ok - self._ok_since, now - self._since
            through = count / span if count >= COUNTED and span > 0 else 0.0
            if current == INF:
                return (2 * through, GROW_SHORT) if through else None
            return max(0.5 * current, SHARE * through, MIN_GUESS), GROW_SHORT
        # The guesses of the first WINDOW do not restart the measuring window.
        start = self._since if self._last_cut < self._since + WINDOW else self._last_cut
        if now - start < WINDOW:
            return None
        seen = self.seen(now, start)
        if seen is None or seen >= JITTER * current:
            return None
        if self._known and not self._guess and current < INF:
            # Measured before: in a fleet, what got through is this client's share (see CUT).
            return CUT_SHORT * current, 0.0
        # A stalled client (a busy machine) sees less than the service allows.
        floor = 0.0 if current == INF else current * (0.5 if self._guess else FLOOR)
        return max(SHARE * seen, floor), 0.0

    def seen(self, now: float, start: float) -> Optional[float]:
        """Successes per second since ``start``, or over the last second if that is shorter;
        None when too few to tell."""
        # Samples are taken at successes, so before the first one the count was ``_ok_since``.
        start = max(start, now - RECENT, self._since)
        base_t, base_ok = start, self._ok_since
        for t, ok in self._samples:
            if t > start:
                break
            base_t, base_ok = t, ok
        count = self._ok - base_ok
        return count / (now - base_t) if count >= COUNTED and now > base_t else None

    def _by_stretches(self, now: float, pause: float, current: float) -> Optional[float]:
        """Long pauses: what got through in the stretch since the last one; the new ceiling, a
        measured one, or None for nothing measured."""
        ended, self._ended = self._ended, None
        if ended is None or ended[0] <= 0 or ended[1] < COUNTED:
            return None  # nothing got through: nothing measured (the pauses still hold)
        length, successes = ended
        if length >= 2 * pause:
            # Long enough that its last second shows what gets through once the bucket is empty.
            estimate = self.seen(now, now - RECENT)
            if estimate:
                self._estimate = estimate
                return SHARE * estimate
            return None if self._estimate is None else SHARE * self._estimate
        # Drained at once: a measured ceiling, SHARE of the pace that got through (it holds the
        # service's rate, or this client's share of it). Halving a guess instead (to regrow it
        # as a guess) fell below that pace, and in a fleet a member throttled twice early on was
        # left at a quarter while a peer that escaped kept its guess.
        if self._estimate is not None:  # measured before: a peer may have drained it
            return CUT * current
        return SHARE * successes / length

    def heard(self, now: float, news: Announcement) -> None:
        """An announced limit: move the ceiling toward the fleet's share of it (module docstring)."""
        if not self.engaged:
            self.engage(now)
        first = now - self._heard >= STALE
        self.announced, self._heard = news, now
        paced = self.steer.heard(now, news, first)
        if paced is not None:
            self.steer.paced = max(paced, MIN_RATE)

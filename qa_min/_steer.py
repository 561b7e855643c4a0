"""The part of the rate limiter's policy that announced limits drive: one client's ceiling,
steered toward its share of a bucket it may share with a whole fleet. Pure: no lock, no clock
of its own, no I/O. The algorithm is written once, in ``_policy``'s docstring ("Announced
limits"); the constants it names are here.
"""

from __future__ import annotations

from ._pacer import INF

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional

    from ._announced import Announcement

STEP = 0.1  # s between two control steps
MAX_SCALE = 2.0  # a step after a long silence counts for this many steps at most
SLOPE_SPAN = 0.3  # s of levels the slope is measured over
FIRST_SLOPE = 0.05  # s of levels enough for a first slope
HORIZON = 0.3  # s: the level is judged this far ahead, on its slope
LEVEL, LEVEL_GAIN = 0.6, 0.5  # the fleet's target: R * (1 + LEVEL_GAIN * (level / capacity - LEVEL))
HEADROOM = 1.25  # an announced ceiling stays within this multiple of the client's own pace
START_SHARE = 0.125  # of the refill rate: the most a client's first announced pace may be
SLOW_START = 1.25  # a first announced pace grows this much a step, until its first step down
ADD_SHARE, CUT_SHARE = 0.13, 0.5  # of the gap to the target closed at each step
SHARE_POWER = 0.25  # a step up is ADD_SHARE times the client's share of the fleet's rate to this power


class Steer:
    """The ceiling announcements set for one client (``paced``, inf: none yet) and what it
    steers by. Not thread-safe (the limiter locks)."""

    __slots__ = ("capacity", "levels", "paced", "refill", "slow_start", "stepped")

    def __init__(self) -> None:
        self.paced = INF
        self.levels: list[tuple[float, float]] = []  # (time, remaining) over SLOPE_SPAN
        self.capacity = 0.0  # the fullest the bucket was seen
        self.stepped = -INF
        self.refill = 0.0  # the bucket's refill rate, told or estimated
        self.slow_start = True  # a first announced pace grows fast until a step down

    def heard(
        self, now: float, news: Announcement, first: bool, seen: Callable[[], Optional[float]]
    ) -> Optional[float]:
        """An announcement at ``now`` (``first``: none heard lately); ``seen()``: this client's
        successes per second lately, None when too few to tell, asked only when a step is due.
        The new ceiling, or None."""
        if news.refill > 0:  # an estimate from a reset is noisy: smoothed
            self.refill = news.refill if first or not self.refill else 0.8 * self.refill + 0.2 * news.refill
        levels = self.levels
        levels.append((now, news.remaining))
        while len(levels) > 2 and now - levels[1][0] >= SLOPE_SPAN:
            del levels[0]
        self.capacity = max(self.capacity, news.remaining)
        if first:
            # A first pace: low, as for a newcomer to a bucket others share; the equal steps
            # up then bring it to its share (a lone client's within a second or so).
            self.slow_start = True
            self.stepped = now
            return START_SHARE * self.refill if self.refill > 0 else INF
        # A fixed window without a policy: what is left, spread over what is left of it.
        refill = self.refill or (news.remaining / news.reset if news.reset > 0 else 0.0)
        if refill <= 0 or now - self.stepped < STEP or now - levels[0][0] < FIRST_SLOPE:
            return None
        dt, self.stepped = now - self.stepped, now
        slope = (news.remaining - levels[0][1]) / (now - levels[0][0])
        fleet = max(refill - slope, 1e-9)
        # The level a little ahead (the slope lags by half its span): act before it is empty.
        ahead = news.remaining + slope * HORIZON
        full = min(1.0, max(0.0, ahead / self.capacity)) if self.capacity else 0.5
        target = refill * (1.0 + LEVEL_GAIN * (full - LEVEL))
        # From what this client sends, not a ceiling it does not use: a ceiling far above its
        # pace would let it jump when it has more to send.
        sent = seen()
        own = self.paced if sent is None else min(self.paced, HEADROOM * sent)
        if own == INF:
            own = START_SHARE * refill
        scale = min(MAX_SCALE, dt / STEP)  # a slow client steps less often, by as much a second
        # Up by the same amount as every other client, down by the same fraction: unequal
        # shares meet (additive increase, multiplicative decrease).
        paced: float
        if target >= fleet and self.slow_start:  # until the first step down: grow fast
            paced = own * SLOW_START**scale
        elif target >= fleet:
            # Nearly the same amount for every client, damped by a small power of its share:
            # eight clients each closing ADD_SHARE of the gap overshot together (a fleet's step
            # grows as N ** (1 - SHARE_POWER) here, not as N).
            share = 1.0 if sent is None else min(1.0, sent / fleet)
            paced = own + ADD_SHARE * scale * (target - fleet) * share**SHARE_POWER
        else:
            self.slow_start = False
            paced = own * (1.0 - CUT_SHARE * (1.0 - target / fleet)) ** scale
        return paced

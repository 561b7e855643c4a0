"""The part of the rate limiter's policy that announced limits drive: one client's ceiling,
read off the level of a bucket it may share with a whole fleet. Pure: no lock, no clock, no
I/O. The algorithm is written once, in ``_policy``'s docstring ("Announced limits"); the
constants it names are here.
"""

from __future__ import annotations

import math

from ._pacer import INF

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

    from ._announced import Announcement

TOP = 1.5  # at a full bucket a client goes this many times the refill rate...
BASE = 128.0  # ...and this many times slower at an empty one: TOP * BASE ** (full - 1)
START, RAMP = 0.125, 10.0  # the first announced pace: this share of the refill, growing this much a second
RAMPED = 4.0  # s after which the ramp is far past TOP (and RAMP ** s stays finite)
SILENT = 2.0  # s with no announcement after which the level is read as refilled since the last


class Steer:
    """The ceiling announcements set for one client (``paced``, inf: none yet) and what it
    reads them by. Not thread-safe (the limiter locks)."""

    __slots__ = ("capacity", "paced", "refill", "started")

    def __init__(self) -> None:
        self.paced = INF
        self.capacity = 0.0  # the bucket full: as told, or the fullest seen
        self.refill = 0.0  # the bucket's refill rate, told or estimated
        self.started = 0.0  # when the announcements began

    def at(self, now: float, latest: Optional[Announcement], told_at: float) -> float:
        """The ceiling in force at ``now``, ``latest`` being the last announcement, heard at
        ``told_at``: ``paced``, or after ``SILENT`` seconds with no announcement, the pace of
        the level the bucket has refilled to since the last one if that is more. A client that
        drained the bucket itself (an asyncio burst of hundreds of calls) takes its calls' slots
        at the empty bucket's pace, up to minutes ahead; hearing nothing while they sleep, it
        would never learn that the bucket filled again."""
        silent = now - told_at - SILENT
        if latest is None or silent <= 0 or self.refill <= 0 or self.capacity <= 0:
            return self.paced
        level = min(1.0, (latest.remaining + self.refill * silent) / self.capacity)
        return max(self.paced, self._read(now, self.refill, level))

    def _read(self, now: float, refill: float, full: float) -> float:
        paced = refill * TOP * math.pow(BASE, full - 1.0)
        # A fleet starting together would drain the bucket at once, each client at TOP times
        # the refill rate: the pace starts at START of it and grows RAMP-fold a second.
        ramped = refill * START * math.pow(RAMP, min(now - self.started, RAMPED))
        return min(paced, ramped)

    def heard(self, now: float, news: Announcement, first: bool) -> Optional[float]:
        """An announcement at ``now`` (``first``: none heard lately); the new ceiling, or None."""
        if first:
            self.started = now
        if news.refill > 0:  # an estimate from a reset is noisy: smoothed
            self.refill = news.refill if first or not self.refill else 0.8 * self.refill + 0.2 * news.refill
        # The full level: the limit told, less the request this response answers, or the fullest
        # seen if more. A client joining a fleet that keeps the bucket half empty never sees it
        # full: read off the fullest it saw, its level was higher than its peers' and it went
        # faster (4 clients at 50/s, burst 50: the first one a quarter of the last one's rate).
        # Draft-11's ``q`` is a quota per window, which the bucket behind it need not hold at once;
        # and in a fixed window (no refill told), what is left already sets the pace.
        told = news.limit - 1 if self.refill and news.style != "ietf" else 0.0
        self.capacity = max(self.capacity, news.remaining, told)
        # A fixed window without a policy: what is left, over what is left of it.
        refill = self.refill or (news.remaining / news.reset if news.reset > 0 else 0.0)
        if refill <= 0:
            return None
        full = min(1.0, news.remaining / self.capacity) if self.capacity > 0 else 0.0
        return self._read(now, refill, full)

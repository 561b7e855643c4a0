"""batch's progress on stderr: one redrawn line on a terminal, a plain line now and then otherwise.

``12,000/~1,000,000 lines (1.2%) | 2,310/s | 3 failed | 41 retries | ETA 7m8s``, plus the
429/529 replies and the rate limiter's ceiling when there are any. The total is
exact once the input is read to its end, and estimated from the file size until then (``~``);
it is unknown (``?``) for a pipe. The rate is that of the last ten seconds.
"""

from __future__ import annotations

import time
from collections import deque

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional, TextIO

REDRAW_EVERY = 0.1
"""Seconds between redraws on a terminal."""
PLAIN_EVERY = 5.0
"""Seconds between lines when stderr is not a terminal."""
RATE_WINDOW = 10.0
"""The rate is measured over this many seconds."""


class Tally:
    """What became of the input's lines so far."""

    __slots__ = ("answered", "busy", "done", "failed", "retries", "skipped")

    def __init__(self) -> None:
        self.done = 0  # input lines dealt with, blank and skipped ones included
        self.answered = 0
        self.failed = 0
        self.skipped = 0  # answered by an earlier run
        self.retries = 0  # attempts beyond each call's first
        self.busy = 0  # 429 and 529 replies, retried or not


def duration(seconds: float) -> str:
    """``45s``, ``7m8s``, ``2h5m``."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60}s"
    return f"{whole // 3600}h{whole % 3600 // 60}m"


class Progress:
    """Draws the `Tally` on ``stream``; ``total`` says how many lines the input holds, if known."""

    def __init__(
        self,
        stream: TextIO,
        tally: Tally,
        total: Callable[[], Optional[tuple[int, bool]]],
        quiet: bool,
        clock: Callable[[], float] = time.monotonic,
        ceiling: Callable[[], Optional[float]] = lambda: None,
    ) -> None:
        self._stream = stream
        self.tally = tally
        self._total = total
        self._quiet = quiet
        self._clock = clock
        self._ceiling = ceiling  # the rate limiter's requests per second, when it has one
        self.tty = stream.isatty()
        self._start = clock()
        self._last = self._start
        self._samples: deque[tuple[float, int]] = deque([(self._start, 0)])

    def line(self) -> str:
        """The progress line as it stands now."""
        tally, now = self.tally, self._clock()
        rate = self._rate(now)
        total = self._total()
        if total is None:
            shown, left = f"{tally.done:,}/? lines", None
        else:
            count, exact = total
            percent = f" ({100 * tally.done / count:.1f}%)" if count else ""
            shown = f"{tally.done:,}/{'' if exact else '~'}{count:,} lines{percent}"
            left = max(count - tally.done, 0)
        parts = [shown, f"{rate:,.0f}/s"]
        if tally.skipped:
            parts.append(f"{tally.skipped:,} done before")
        parts.append(f"{tally.failed:,} failed")
        if tally.retries:
            parts.append(f"{tally.retries:,} retries")
        if tally.busy:
            parts.append(f"{tally.busy:,} busy replies")
        ceiling = self._ceiling()
        if ceiling is not None:
            parts.append(f"limit {ceiling:,.0f}/s")
        if left is not None and rate > 0:
            parts.append(f"ETA {duration(left / rate)}")
        return " | ".join(parts)

    def _rate(self, now: float) -> float:
        done = self.tally.done - self.tally.skipped
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[1][0] >= RATE_WINDOW:
            self._samples.popleft()
        then, before = self._samples[0]
        return (done - before) / (now - then) if now > then else 0.0

    def tick(self) -> None:
        """Redraw if it is time to."""
        if self._quiet:
            return
        now = self._clock()
        if now - self._last < (REDRAW_EVERY if self.tty else PLAIN_EVERY):
            return
        self._last = now
        self._draw()

    def _draw(self) -> None:
        if self.tty:
            self._stream.write(f"\r{self.line()}\x1b[K")
        else:
            self._stream.write(f"{self.line()}\n")
        self._stream.flush()

    def clear(self) -> None:
        """Make room for a message: on a terminal, wipe the line (the next tick redraws it)."""
        if self.tty and not self._quiet:
            self._stream.write("\r\x1b[K")
            self._stream.flush()

    def finish(self) -> None:
        """The last state, then a summary line."""
        if self._quiet:
            return
        tally = self.tally
        if self.tty:
            self._draw()
            self._stream.write("\n")
        took = duration(self._clock() - self._start)
        # Not "answered": with --skip-failed, and for a bad line written once, it may be a failure.
        before = f", {tally.skipped:,} done before" if tally.skipped else ""
        self._stream.write(
            f"batch: {tally.done:,} lines in {took}: {tally.answered:,} answered, "
            f"{tally.failed:,} failed{before}\n"
        )
        self._stream.flush()

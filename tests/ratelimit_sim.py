"""A deterministic simulation of one client's threads against a rate-limited service.

The real ``Limiter`` runs on a virtual clock. Each simulated worker is a real thread, but only
one runs at a time: a worker runs until it waits (for its slot, the network, a backoff), and
then the scheduler wakes the worker whose wait ends first (ties by worker number). So a run
is the same every time, takes milliseconds of real time, and can span minutes of virtual time.

Each worker follows the retry loop's rules (``Sender.send``): acquire a slot when the limiter
is engaged, report every response, wait the server's delay before retrying a 429, at most
``max_retries`` retries. The service is a token bucket answering 429 with the exact time until
a token is free (``retry-after-ms``) or that time rounded up to whole seconds (``Retry-After``).
"""

from __future__ import annotations

import heapq
import math
import random
import threading
from dataclasses import dataclass, field
from typing import Callable, Optional

from qa_min import RateLimit
from qa_min._limiter import Limiter

BOUND = 10.0  # real seconds any handover may take before the simulation is declared stuck


class Stuck(Exception):
    """A simulated worker did not hand over in time: a bug in the limiter or the simulation."""


class VirtualTime:
    """A clock that jumps from one wait's end to the next; one participant runs at a time."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, int, threading.Event]] = []
        self._seq = 0
        self._lock = threading.Lock()
        self._handover = threading.Event()

    def clock(self) -> float:
        return self.now

    def wait_until(self, when: float, worker: int) -> None:
        """Block the calling participant until the virtual clock reaches ``when``."""
        wake = threading.Event()
        with self._lock:
            self._seq += 1
            heapq.heappush(self._heap, (max(when, self.now), worker, self._seq, wake))
        self._handover.set()
        if not wake.wait(BOUND):
            raise Stuck(f"worker {worker} was never woken")

    def done(self) -> None:
        self._handover.set()

    def run(self, workers: list[threading.Thread]) -> None:
        """Start ``workers`` one at a time, then wake waiters in time order until all end."""
        for thread in workers:
            self._handover.clear()
            thread.start()
            if not self._handover.wait(BOUND):
                raise Stuck("a worker neither waited nor ended")
        while True:
            with self._lock:
                if not self._heap:
                    return
                when, _, _, wake = heapq.heappop(self._heap)
                self.now = when
            self._handover.clear()
            wake.set()
            if not self._handover.wait(BOUND):
                raise Stuck("a woken worker neither waited again nor ended")


@dataclass
class Bucket:
    """The service: ``rate`` tokens a second, ``burst`` at most, full at first."""

    rate: float
    burst: float
    tokens: float = -1.0
    updated: float = 0.0

    def take(self, now: float) -> Optional[float]:
        if self.tokens < 0:
            self.tokens = self.burst
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return None
        return (1 - self.tokens) / self.rate


@dataclass
class Result:
    calls: int
    seconds: float
    answered: int = 0
    failed: int = 0
    requests: int = 0
    throttled: int = 0
    most_waited: float = 0.0  # the longest a call waited for the limiter, in virtual seconds
    ceilings: list[Optional[float]] = field(default_factory=list)
    failed_at: list[float] = field(default_factory=list)  # virtual times of the failures
    failed_calls: list[int] = field(default_factory=list)
    trace: dict[int, list[tuple[float, Optional[float], bool, int]]] = field(default_factory=dict)

    @property
    def share_of_rate(self) -> float:
        return self.answered / self.seconds

    @property
    def share_429(self) -> float:
        return self.throttled / self.requests


def simulate(
    calls: int,
    workers: int,
    limit: Optional[RateLimit],
    *,
    rate: float = 200.0,
    burst: float = 50.0,
    whole_seconds: bool = False,
    latency: float = 0.004,
    max_retries: int = 2,
    seed: int = 1,
    notify: Optional[Callable[[str], object]] = None,
) -> Result:
    """Run ``calls`` calls on ``workers`` threads; the service's 429s say when to retry."""
    time = VirtualTime()
    bucket = Bucket(rate, burst)
    limiter = (
        None if limit is None else Limiter(limit.per_second, limit.burst, limit.adaptive, time.clock, notify)
    )
    rng = random.Random(seed)
    result = Result(calls, 0.0)
    queue = list(range(calls))

    def one_call(worker: int, call: int) -> bool:
        wait: Optional[float] = None
        throttled = False
        held = [0.0]

        def nap(seconds: float, limiter_part: float) -> None:
            held[0] += limiter_part
            time.wait_until(time.now + seconds, worker)

        for retry in range(max_retries + 1):
            ticket = None
            if limiter is not None and limiter.engaged:
                ticket = limiter.acquire(wait, (2 if retry == max_retries else 1) if throttled else 0, nap)
            elif wait is not None:
                time.wait_until(time.now + wait, worker)
            trip = latency * (0.5 + rng.random())
            sent = time.now
            time.wait_until(time.now + trip / 2, worker)
            result.requests += 1
            free_in = bucket.take(time.now)
            result.trace.setdefault(call, []).append(
                (time.now, ticket, throttled, 200 if free_in is None else 429)
            )
            time.wait_until(time.now + trip / 2, worker)
            result.most_waited = max(result.most_waited, held[0])
            if free_in is None:
                if limiter is not None:
                    if ticket is None:
                        limiter.succeeded.append(sent)
                    else:
                        limiter.report(ticket, 200, None)
                return True
            result.throttled += 1
            delay = float(max(1, math.ceil(free_in))) if whole_seconds else free_in
            if limiter is not None:
                limiter.report(ticket, 429, delay)
            if retry == max_retries:
                return False
            wait, throttled = delay, True
        raise AssertionError("unreachable")  # pragma: no cover

    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            while queue:
                call = queue.pop(0)
                if one_call(worker, call):
                    result.answered += 1
                else:
                    result.failed += 1
                    result.failed_at.append(time.now)
                    result.failed_calls.append(call)
                if limiter is not None and len(result.ceilings) < 10_000:
                    result.ceilings.append(limiter.snapshot()[0])
        except BaseException as exc:  # a bug: fail the run instead of a quiet, shorter one
            errors.append(exc)
        finally:
            time.done()

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(workers)]
    time.run(threads)
    for thread in threads:
        thread.join(BOUND)
    if errors:
        raise errors[0]
    result.seconds = time.now
    return result

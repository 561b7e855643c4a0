"""A deterministic simulation of clients' threads against one rate-limited service.

The real ``Limiter`` runs on a virtual clock. Each simulated worker is a real thread, but only
one runs at a time: a worker runs until it waits (for its slot, the network, a backoff), and
then the scheduler wakes the worker whose wait ends first (ties by worker number); a wait the
limiter ends early (``arm``) is rescheduled to now. So a run is the same every time, takes
milliseconds to seconds of real time, and can span minutes of virtual time.

A *fleet* is several clients (``Member``: its own limiter, its own workers, its own calls,
started and stopped when told) sharing the one service: a token bucket answering 429 with the
exact time until a token is free (``retry-after-ms``) or that time rounded up to whole seconds
(``Retry-After``), and announcing its limit on every response in a ``_fakerules`` style.

Each worker follows the retry loop's rules (``Sender.send``): acquire a slot when the limiter is
engaged, hand every response's headers to ``hear`` and report it, wait the server's delay before
retrying a 429, at most ``max_retries`` retries plus ``ABSORBED`` 429s that carried a delay while paced.
"""

from __future__ import annotations

import heapq
import math
import random
import threading
from dataclasses import dataclass, field
from typing import Callable, Optional

from qa_min import RateLimit
from qa_min._fakerules import TokenBucket, announce_headers
from qa_min._limiter import ABSORBED, Limiter
from qa_min._pacer import Priority, Waiter

BOUND = 10.0  # real seconds any handover may take before the simulation is declared stuck
WALL = 1.7e9  # the virtual clock's epoch seconds at 0, for announced resets given as times


class Stuck(Exception):
    """A simulated worker did not hand over in time: a bug in the limiter or the simulation."""


class _Wait:
    __slots__ = ("done", "wake")

    def __init__(self) -> None:
        self.done = False
        self.wake = threading.Lock()  # held until the waiter's turn: the cheapest handover
        self.wake.acquire()


class VirtualTime:
    """A clock that jumps from one wait's end to the next; one participant runs at a time.

    The participant that stops running (it waits, or ends) wakes the next one itself, so a
    handover is one thread switch, or none when its own wait is the next to end."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, int, _Wait]] = []
        self._seq = 0
        self._lock = threading.Lock()
        self._finished = threading.Event()

    def clock(self) -> float:
        return self.now

    def wall(self) -> float:
        return WALL + self.now

    def _push(self, when: float, worker: int, wait: _Wait) -> None:
        with self._lock:
            self._seq += 1
            heapq.heappush(self._heap, (max(when, self.now), worker, self._seq, wait))

    def _next(self) -> None:
        """Wake the participant whose wait ends first (ties by worker number), or finish."""
        with self._lock:
            while self._heap and self._heap[0][3].done:
                heapq.heappop(self._heap)
            if not self._heap:
                self._finished.set()
                return
            when, _, _, wait = heapq.heappop(self._heap)
            wait.done = True
            self.now = when
        wait.wake.release()

    def wait_until(
        self, when: float, worker: int, arm: Optional[Callable[[Callable[[], object]], object]] = None
    ) -> None:
        """Block the calling participant until the virtual clock reaches ``when``, or until the
        wake-up ``arm`` is given is called."""
        wait = _Wait()
        self._push(when, worker, wait)
        if arm is not None:
            arm(lambda: self._push(self.now, worker, wait))
        self._next()
        if not wait.wake.acquire(timeout=BOUND):
            raise Stuck(f"worker {worker} was never woken")

    def done(self) -> None:
        self._next()

    def run(self, workers: list[threading.Thread], starts: list[float]) -> None:
        """Start each worker at its virtual start time; they hand over among themselves."""
        for thread, start in zip(workers, starts):
            wait = _Wait()
            self._push(start, -1, wait)
            threading.Thread(target=self._starter, args=(thread, wait), daemon=True).start()
        self._next()
        # Every waiter gives up after BOUND, so a lost handover ends the run with Stuck.
        if not self._finished.wait(BOUND * 1000):
            raise Stuck("the simulation never finished")

    def _starter(self, thread: threading.Thread, wait: _Wait) -> None:
        if wait.wake.acquire(timeout=BOUND * 100):
            thread.start()  # the started worker hands over when it first waits or ends


@dataclass
class Member:
    """One client of a fleet: ``calls`` calls on ``workers`` threads, from ``start`` until
    ``stop`` (virtual seconds; after ``stop`` it starts no new call)."""

    calls: int
    workers: int = 8
    limit: Optional[RateLimit] = field(default_factory=RateLimit)
    start: float = 0.0
    stop: float = math.inf
    answered: list[float] = field(default_factory=list)  # virtual times of the answers
    failed: int = 0
    requests: int = 0
    throttled: int = 0
    most_waited: float = 0.0  # the longest a call waited for the limiter, in virtual seconds
    ceilings: list[Optional[float]] = field(default_factory=list)
    failed_at: list[float] = field(default_factory=list)
    throttled_at: list[float] = field(default_factory=list)
    limiter: Optional[Limiter] = None

    def rate(self, start: float, end: float) -> float:
        return sum(1 for t in self.answered if start <= t < end) / (end - start) if end > start else 0.0


@dataclass
class Result:
    calls: int
    seconds: float
    answered: int = 0
    failed: int = 0
    requests: int = 0
    throttled: int = 0
    most_waited: float = 0.0
    ceilings: list[Optional[float]] = field(default_factory=list)
    failed_at: list[float] = field(default_factory=list)
    members: list[Member] = field(default_factory=list)

    @property
    def share_of_rate(self) -> float:
        return self.answered / self.seconds

    @property
    def share_429(self) -> float:
        return self.throttled / self.requests

    def fairness(self) -> float:
        """Slowest over fastest member's rate while all of them ran."""
        start = max(m.start for m in self.members)
        end = min(min(m.stop, m.answered[-1] if m.answered else m.start) for m in self.members)
        rates = [m.rate(start, end) for m in self.members]
        return min(rates) / max(rates) if end > start and max(rates) > 0 else 0.0

    def served(self, start: float, end: float) -> float:
        """Answers per second, all members together, between two virtual times."""
        return sum(m.rate(start, end) for m in self.members)


def simulate(
    calls: int,
    workers: int,
    limit: Optional[RateLimit],
    *,
    seed: int = 1,
    notify: Optional[Callable[[str], object]] = None,
    **service: object,
) -> Result:
    """One client: ``calls`` calls on ``workers`` threads (see ``simulate_fleet``)."""
    return simulate_fleet([Member(calls, workers, limit)], seed=seed, notify=notify, **service)  # type: ignore[arg-type]


def simulate_fleet(
    members: list[Member],
    *,
    rate: float = 200.0,
    burst: float = 50.0,
    whole_seconds: bool = False,
    announce: str = "none",
    latency: float = 0.004,
    max_retries: int = 2,
    seed: int = 1,
    notify: Optional[Callable[[str], object]] = None,
) -> Result:
    """Run every member's calls against one token bucket; the service's 429s say when to retry."""
    time = VirtualTime()
    bucket = TokenBucket(rate, burst, 0.0)
    rng = random.Random(seed)
    result = Result(sum(m.calls for m in members), 0.0, members=members)
    for member in members:
        limit = member.limit
        member.limiter = (
            None
            if limit is None
            else Limiter(
                limit.per_second, limit.burst, limit.adaptive, time.clock, notify, time.wall, rng.random
            )
        )

    def one_call(member: Member, worker: int) -> bool:
        limiter = member.limiter
        wait: Optional[float] = None
        throttled = False
        retries = absorbed = 0
        held = [0.0]

        def nap(seconds: float, limiter_part: float, waiter: Optional[Waiter] = None) -> None:
            held[0] += limiter_part
            arm = None
            if waiter is not None and limiter is not None:
                arm = lambda wake: limiter.arm(waiter, wake)  # noqa: E731
            time.wait_until(time.now + seconds, worker, arm)

        while True:
            ticket = None
            if limiter is not None and limiter.engaged:
                last = retries >= max_retries and not (
                    max_retries > 0 and absorbed < ABSORBED and limiter.absorbs()
                )
                priority = (Priority.LAST if last else Priority.RETRY) if throttled else Priority.NEW
                ticket = limiter.acquire(wait, priority, nap)
            elif wait is not None:
                time.wait_until(time.now + wait, worker)
            trip = latency * (0.5 + rng.random())
            sent = time.now
            time.wait_until(time.now + trip / 2, worker)
            member.requests += 1
            free_in = bucket.take(time.now)
            headers = announce_headers(announce, bucket.tokens, rate, burst, time.wall())
            time.wait_until(time.now + trip / 2, worker)
            member.most_waited = max(member.most_waited, held[0])
            if limiter is not None:
                limiter.hear(headers)
            if free_in is None:
                if limiter is not None:
                    if ticket is None:
                        limiter.succeeded.append(sent)
                    else:
                        limiter.report(ticket, 200, None)
                return True
            member.throttled += 1
            member.throttled_at.append(time.now)
            delay = float(max(1, math.ceil(free_in))) if whole_seconds else free_in
            if limiter is not None:
                limiter.report(ticket, 429, delay)
            absorb = limiter is not None and max_retries > 0 and absorbed < ABSORBED and limiter.absorbs()
            if not absorb and retries >= max_retries:
                return False
            absorbed, retries = (absorbed + 1, retries) if absorb else (absorbed, retries + 1)
            wait, throttled = delay, True

    errors: list[BaseException] = []
    queues = [list(range(m.calls)) for m in members]

    def work(index: int, worker: int) -> None:
        member, queue = members[index], queues[index]
        try:
            while queue and time.now < member.stop:
                queue.pop()
                if one_call(member, worker):
                    member.answered.append(time.now)
                else:
                    member.failed += 1
                    member.failed_at.append(time.now)
                if member.limiter is not None and len(member.ceilings) < 10_000:
                    member.ceilings.append(member.limiter.snapshot()[0])
        except BaseException as exc:  # a bug: fail the run instead of a quiet, shorter one
            errors.append(exc)
        finally:
            time.done()

    threads: list[threading.Thread] = []
    starts: list[float] = []
    for index, member in enumerate(members):
        for _ in range(member.workers):
            number = len(threads)
            threads.append(threading.Thread(target=work, args=(index, number), daemon=True))
            starts.append(member.start)
    time.run(threads, starts)
    for thread in threads:
        thread.join(BOUND)
    if errors:
        raise errors[0]
    result.seconds = time.now
    result.answered = sum(len(m.answered) for m in members)
    result.failed = sum(m.failed for m in members)
    result.requests = sum(m.requests for m in members)
    result.throttled = sum(m.throttled for m in members)
    result.most_waited = max(m.most_waited for m in members)
    result.ceilings = members[0].ceilings
    result.failed_at = sorted(t for m in members for t in m.failed_at)
    return result

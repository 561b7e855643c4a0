"""A deterministic simulation of clients' workers against one rate-limited service.

The real ``Limiter`` runs on a virtual clock. Each simulated worker is a generator that yields
whenever it waits (for its slot, the network, a backoff): how long, and the ``Waiter`` an answer
may wake early. One loop resumes the worker whose wait ends first (ties by worker number); a wait
the limiter ends early (``arm``) is rescheduled to now. The workers drive the limiter's
``begin``/``step``/``arm`` exactly as its threaded shell (``Limiter.acquire``) and the asyncio one
do, with no thread at all, so a run is the same every time, takes milliseconds to seconds of real
time, and can span minutes of virtual time.

A *fleet* is several clients (``Member``: its own limiter, its own workers, its own calls,
started and stopped when told) sharing the one service: a token bucket answering 429 with the
exact time until a token is free (``retry-after-ms``) or that time rounded up to whole seconds
(``Retry-After``), and announcing its limit on every response in a ``_fakerules`` style.

Each worker follows the retry loop's rules (``Sender.send``): acquire a slot when the limiter is
engaged, hand every response's headers to ``hear`` and report it, wait the server's delay before
retrying a 429, at most ``max_retries`` retries plus ``ABSORBED`` 429s that carried a delay while paced.

Run as a script (``python tests/ratelimit_sim.py --help``), it prints a seed sweep of fleets
(``sweep``), to weigh a change of the policy's constants before measuring real processes.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Generator
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Optional

from qa_min import RateLimit
from qa_min._fakerules import TokenBucket, announce_headers
from qa_min._limiter import ABSORBED, Limiter
from qa_min._pacer import Priority, Waiter

WALL = 1.7e9  # the virtual clock's epoch seconds at 0, for announced resets given as times

# A worker yields (seconds to wait, the Waiter an answer may wake early or None).
Work = Generator[tuple[float, Optional[Waiter]], None, bool]


class VirtualTime:
    """A clock that jumps from one wait's end to the next, resuming one worker at a time."""

    def __init__(self) -> None:
        self.now = 0.0
        # The limiter reads the clock at every begin, step and report: a C-level getter, not a
        # method with a Python frame a read.
        self.clock: Callable[[], float] = partial(getattr, self, "now")
        # Heap entries: (when, its place among waits ending then (the worker; -1: a start), a
        # sequence number, the worker it resumes, the wait's token). A wait woken early is in
        # the heap twice with one token; ``_current[worker]`` is the token of the worker's
        # pending wait, so whichever entry comes second finds it spent and is skipped.
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._current: list[int] = []
        self._seq = 0

    def wall(self) -> float:
        return WALL + self.now

    def _waking(self, number: int, token: int) -> Callable[[], None]:
        """What ends the worker's wait ``token`` early: it is resumed at the time it is called."""

        def wake() -> None:
            self._seq += 1
            heapq.heappush(self._heap, (self.now, number, self._seq, number, token))

        return wake

    def run(
        self,
        workers: list[Generator[tuple[float, Optional[Waiter]], None, None]],
        starts: list[float],
        arm: Callable[[int, Waiter, Callable[[], object]], object],
    ) -> None:
        """Run every worker from its virtual start until all have ended. ``arm(worker, waiter,
        wake)`` asks the worker's limiter to call ``wake`` when an answer ends the wait early."""
        heap, current = self._heap, self._current
        for number, start in enumerate(starts):  # starts go first among equal times, in order
            self._seq += 1
            current.append(self._seq)
            heapq.heappush(heap, (max(start, self.now), -1, self._seq, number, self._seq))
        # The loop runs once per wait of every simulated call (a fleet's run: about a million):
        # the push inlined, the heap's functions and the heap bound to locals, no object a wait.
        pop, push = heapq.heappop, heapq.heappush
        while heap:
            when, _, _, number, token = pop(heap)
            if current[number] != token:
                continue  # spent: resumed already, by the other entry of a wait woken early
            current[number] = 0
            self.now = when
            try:
                seconds, waiter = next(workers[number])
            except StopIteration:
                continue
            self._seq = token = self._seq + 1
            current[number] = token
            until = when + seconds
            push(heap, (until if until > when else when, number, token, number, token))
            if waiter is not None:
                arm(number, waiter, self._waking(number, token))


@dataclass
class Member:
    """One client of a fleet: ``calls`` calls on ``workers`` workers (its threads), from ``start`` until
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
    most_throttled: int = 0  # the most 429s one call met
    ceilings: list[Optional[float]] = field(default_factory=list)  # after each call, if asked
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
    """One client: ``calls`` calls on ``workers`` workers (see ``simulate_fleet``)."""
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
    ceilings: bool = False,
) -> Result:
    """Run every member's calls against one token bucket; the service's 429s say when to retry.
    ``ceilings``: note each member's ceiling after each of its calls (the first 10,000), a
    ``snapshot`` of its limiter a call, which no test reads."""
    time = VirtualTime()
    bucket = TokenBucket(rate, burst, 0.0)
    rng = random.Random(seed)
    result = Result(sum(m.calls for m in members), 0.0, members=members)
    for member in members:
        limit = member.limit
        member.limiter = (
            None
            if limit is None
            else Limiter(limit.per_second, limit.burst, limit.adaptive, time.clock, notify, time.wall)
        )

    announcing = announce != "none"

    def one_call(member: Member) -> Work:
        limiter = member.limiter
        wait: Optional[float] = None
        throttled = False
        retries = absorbed = 0
        held = 0.0
        while True:
            ticket = None
            if limiter is not None and limiter.engaged:
                last = retries >= max_retries and not (
                    max_retries > 0 and absorbed < ABSORBED and limiter.absorbs()
                )
                priority = (Priority.LAST if last else Priority.RETRY) if throttled else Priority.NEW
                # What Limiter.acquire does, a wait at a time.
                waiter, first = limiter.begin(wait, priority)
                if first is not None:
                    held += first[1]
                    yield first[0], None
                step = limiter.step(waiter)
                while step is not None:
                    held += step[0]
                    yield step[0], waiter if step[1] else None
                    step = limiter.step(waiter)
                ticket = waiter.slot
            elif wait is not None:
                yield wait, None
            trip = latency * (0.5 + rng.random())
            sent = time.now
            yield trip / 2, None
            member.requests += 1
            free_in = bucket.take(time.now)
            # With nothing announced there are no fields, and hearing none does nothing.
            headers = (
                announce_headers(announce, bucket.tokens, rate, burst, time.wall()) if announcing else ()
            )
            yield trip / 2, None
            member.most_waited = max(member.most_waited, held)
            if limiter is not None and announcing:
                limiter.hear(headers)
            if free_in is None:
                if limiter is not None:
                    if ticket is None:
                        limiter.succeeded.append(sent)
                    else:
                        limiter.report(ticket, 200, None)
                member.most_throttled = max(member.most_throttled, retries + absorbed)
                return True
            member.throttled += 1
            member.throttled_at.append(time.now)
            delay = float(max(1, math.ceil(free_in))) if whole_seconds else free_in
            if limiter is not None:
                limiter.report(ticket, 429, delay)
            absorb = limiter is not None and max_retries > 0 and absorbed < ABSORBED and limiter.absorbs()
            if not absorb and retries >= max_retries:
                member.most_throttled = max(member.most_throttled, retries + absorbed + 1)
                return False
            absorbed, retries = (absorbed + 1, retries) if absorb else (absorbed, retries + 1)
            wait, throttled = delay, True

    queues = [list(range(m.calls)) for m in members]

    def work(member: Member, queue: list[int]) -> Generator[tuple[float, Optional[Waiter]], None, None]:
        while queue and time.now < member.stop:
            queue.pop()
            if (yield from one_call(member)):
                member.answered.append(time.now)
            else:
                member.failed += 1
                member.failed_at.append(time.now)
            if ceilings and member.limiter is not None and len(member.ceilings) < 10_000:
                member.ceilings.append(member.limiter.snapshot()[0])

    workers, starts, owners = [], [], []
    for member, queue in zip(members, queues):
        for _ in range(member.workers):
            workers.append(work(member, queue))
            starts.append(member.start)
            owners.append(member)

    def arm(worker: int, waiter: Waiter, wake: Callable[[], object]) -> None:
        limiter = owners[worker].limiter
        assert limiter is not None
        limiter.arm(waiter, wake)

    time.run(workers, starts, arm)
    result.seconds = time.now
    result.answered = sum(len(m.answered) for m in members)
    result.failed = sum(m.failed for m in members)
    result.requests = sum(m.requests for m in members)
    result.throttled = sum(m.throttled for m in members)
    result.most_waited = max(m.most_waited for m in members)
    result.ceilings = members[0].ceilings
    result.failed_at = sorted(t for m in members for t in m.failed_at)
    return result


# -- a seed sweep, for tuning: python tests/ratelimit_sim.py --------------------------------------

# The fleets the sweep runs: name -> (clients, seconds between their starts); 8,000 calls in all.
SWEPT = {"1": (1, 0.0), "2": (2, 0.0), "4": (4, 0.0), "8": (8, 0.0), "staggered": (4, 5.0)}


def lost_seconds(result: Result, rate: float = 200.0) -> tuple[float, float, float]:
    """The seconds a run lost against ``rate`` answers a second: in its first 5 s, between them and
    the first member's last answer, and after it (a tail that fewer members served)."""
    members = result.members
    first_done = min(m.answered[-1] if m.answered else m.start for m in members)
    end = max(m.answered[-1] if m.answered else m.start for m in members)

    def lost(start: float, stop: float) -> float:
        stop = max(start, stop)
        return (stop - start) - result.served(start, stop) * (stop - start) / rate

    return lost(0.0, 5.0), lost(5.0, first_done), lost(max(5.0, first_done), end)


def sweep(seeds: int, whole_seconds: bool, fleets: Optional[list[str]] = None) -> list[str]:
    """A Markdown table: each fleet's share of the rate, fairness and seconds lost over ``seeds``
    seeds (1 to ``seeds``), with ``Retry-After`` in whole seconds or exact delays."""
    lines = [
        "| fleet | % of the rate, mean (min) | fairness, mean (min) | 429, most | lost calls "
        "| seconds lost: start / middle / tail |",
        "|---|--:|--:|--:|--:|---|",
    ]
    for name in fleets or list(SWEPT):
        n, stagger = SWEPT[name]
        shares, fairness, throttled, failed, lost = [], [], [], 0, [0.0, 0.0, 0.0]
        for seed in range(1, seeds + 1):
            members = [Member(8000 // n, 8, RateLimit(), start=i * stagger) for i in range(n)]
            result = simulate_fleet(members, whole_seconds=whole_seconds, seed=seed)
            shares.append(result.share_of_rate / 200)
            fairness.append(result.fairness())
            throttled.append(result.share_429)
            failed += result.failed
            lost = [a + b for a, b in zip(lost, lost_seconds(result))]
        told = "-" if n == 1 else f"{sum(fairness) / seeds:.2f} ({min(fairness):.2f})"
        label = f"N = {name}" if name.isdigit() else name
        lines.append(
            f"| {label} | {100 * sum(shares) / seeds:.1f}% ({100 * min(shares):.1f}%) | {told} | "
            f"{100 * max(throttled):.2f}% | {failed} | " + " / ".join(f"{x / seeds:.1f}" for x in lost) + " |"
        )
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    """Simulated fleets over several seeds; ``--set CUBE=0.4`` tries another value of one of
    ``qa_min._policy``'s constants for this run (given back after it; no file is changed)."""
    import argparse

    from qa_min import _policy

    parser = argparse.ArgumentParser(prog="python tests/ratelimit_sim.py", description=main.__doc__)
    parser.add_argument("--seeds", type=int, default=12, help="seeds 1 to this (12)")
    parser.add_argument(
        "--exact", action="store_true", help="retry-after-ms (default: Retry-After in seconds)"
    )
    parser.add_argument("--fleets", nargs="+", choices=list(SWEPT), help="only these fleets")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a policy constant")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds: at least 1")
    saved: dict[str, float] = {}
    for assignment in args.set:
        name, _, value = assignment.partition("=")
        if not name.isupper() or not isinstance(getattr(_policy, name, None), float):
            parser.error(f"--set: {name!r} is not one of qa_min._policy's float constants")
        try:
            number = float(value)
        except ValueError:
            parser.error(f"--set: {value!r} is not a number")
        saved.setdefault(name, getattr(_policy, name))
        setattr(_policy, name, number)
    try:
        print("\n".join(sweep(args.seeds, not args.exact, args.fleets)))
    finally:
        for name, value in saved.items():
            setattr(_policy, name, value)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m benchmarks ratelimit``: qa_min against a rate-limited service, with and without its limiter.

The service is ``qa_min.testing.FakeService(rate_limit=(200, 50), ...)`` (``--rate``,
``--burst``) in a process of its own (``benchmarks.fake``), answering 429 with
``Retry-After: 1`` or with an exact ``retry-after-ms``. For each header style and each number
of calls in flight (8 and 32, through ``client.submit``), it runs a job of N calls with:

* ``rate_limit=None``: no limiter, the "before";
* ``RateLimit(190)``: a ceiling just under the service's rate (95% of ``--rate``), paced from
  the first call;
* the default ``RateLimit()``: no ceiling, adaptive after the first 429;
* ``gather`` (only when asked for): the default ``RateLimit()`` on an ``AsyncClient`` that
  gathers all N calls at once, as many in flight as there are calls.

``--announce STYLE`` has the service announce its limit on every response. The run reports the
share of the allowed rate achieved (successful calls per second over the rate), the share of
requests the service answered 429, and the calls that failed. Self-contained: of the other
benchmark modules it uses only ``benchmarks.fake``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from .fake import FakeProcess

if TYPE_CHECKING:
    from qa_min import RateLimit

RATE, BURST = 200.0, 50.0
STYLES = {"Retry-After: 1": "seconds", "retry-after-ms": "ms"}


@dataclass(frozen=True)
class Outcome:
    """One job: what the client saw and what the service counted."""

    header: str
    in_flight: int
    mode: str
    calls: int
    seconds: float
    answered: int
    failed: dict[str, int]
    requests: int
    throttled: int
    rate: float = RATE

    @property
    def share_of_rate(self) -> float:
        return self.answered / self.seconds / self.rate

    @property
    def label(self) -> str:
        """The mode as the table shows it: the explicit ceiling is 95% of the service's rate."""
        if self.mode == "gather":
            return "RateLimit(), AsyncClient gathering all"
        return f"RateLimit({0.95 * self.rate:g})" if self.mode == "RateLimit(190)" else self.mode

    @property
    def share_429(self) -> float:
        return self.throttled / self.requests if self.requests else 0.0


def run_job(
    header: str,
    in_flight: int,
    mode: str,
    calls: int,
    rate: float = RATE,
    burst: float = BURST,
    announce: str = "none",
) -> Outcome:
    """One job of ``calls`` calls against a fresh service process."""
    import qa_min as qa

    class Review(qa.Questions):
        toxic = qa.YesNo("The text insults someone", "The text insults no one")

    limits = {"none": None, "RateLimit(190)": qa.RateLimit(0.95 * rate), "RateLimit()": qa.RateLimit()}
    service = FakeProcess((rate, burst), STYLES[header], announce)
    failed: Counter[str] = Counter()
    try:
        if mode == "gather":
            in_flight = calls
            seconds = _gather(service.url, calls, Review, failed)
        else:
            seconds = _submit(service.url, in_flight, limits[mode], calls, Review, failed)
    finally:
        counts = service.close()
    return _outcome(header, in_flight, mode, calls, seconds, failed, counts, rate)


def _submit(
    url: str, in_flight: int, limit: Optional[RateLimit], calls: int, review: type, failed: Counter[str]
) -> float:
    """``calls`` calls through a ``Client``'s ``submit``, ``in_flight`` at a time: the seconds."""
    import qa_min as qa

    with qa.Client(base_url=url, trust_env=False, max_workers=in_flight, rate_limit=limit) as client:
        started = time.monotonic()
        futures: list[Any] = [client.submit(client.ask, f"text {i}", review) for i in range(calls)]
        for future in futures:
            try:
                future.result()
            except qa.QAError as exc:
                failed[type(exc).__name__] += 1
        return time.monotonic() - started


def _outcome(
    header: str,
    in_flight: int,
    mode: str,
    calls: int,
    seconds: float,
    failed: Counter[str],
    counts: dict[str, int],
    rate: float,
) -> Outcome:
    answered = calls - sum(failed.values())
    requests, throttled = counts["requests"], counts["throttled"]
    return Outcome(header, in_flight, mode, calls, seconds, answered, dict(failed), requests, throttled, rate)


def _gather(url: str, calls: int, review: type, failed: Counter[str]) -> float:
    """``calls`` calls gathered at once on an ``AsyncClient``: the seconds they took."""
    import asyncio

    import qa_min as qa

    async def run() -> float:
        async with qa.AsyncClient(base_url=url, trust_env=False) as client:
            started = time.monotonic()
            done: list[object] = await asyncio.gather(
                *(client.ask(f"text {i}", review) for i in range(calls)), return_exceptions=True
            )
            for result in done:
                if isinstance(result, qa.QAError):
                    failed[type(result).__name__] += 1
                elif isinstance(result, BaseException):
                    raise result
            return time.monotonic() - started

    return asyncio.run(run())


def _load(values: Optional[tuple[float, float, float]]) -> str:
    return "unknown" if values is None else " ".join(f"{v:.2f}" for v in values)


def table(outcomes: list[Outcome]) -> list[str]:
    lines = [
        "| header | in flight | rate_limit | calls | seconds | % of allowed rate | % answered 429 "
        "| failed calls |",
        "|---|--:|---|--:|--:|--:|--:|--:|",
    ]
    for o in outcomes:
        failed = ", ".join(f"{n} {name}" for name, n in sorted(o.failed.items())) or "0"
        lines.append(
            f"| {o.header} | {o.in_flight} | {o.label} | {o.calls:,} | {o.seconds:.1f} | "
            f"{100 * o.share_of_rate:.1f}% | {100 * o.share_429:.2f}% | {failed} |"
        )
    return lines


def verdicts(outcomes: list[Outcome]) -> list[str]:
    """The acceptance lines of the jobs that have one."""
    lines = []
    for o in outcomes:
        target: Optional[tuple[float, float]] = None
        if o.mode == "RateLimit(190)":
            target = (0.90, 0.01)
        elif o.mode == "RateLimit()" and o.calls >= 20_000:
            target = (0.85, 0.05)
        if target is None:
            continue
        met = o.share_of_rate >= target[0] and o.share_429 < target[1] and not o.failed
        lines.append(
            f"- {o.label}, {o.calls:,} calls, {o.in_flight} in flight, {o.header}: "
            f"{100 * o.share_of_rate:.1f}% of the rate (>= {100 * target[0]:.0f}%), "
            f"{100 * o.share_429:.2f}% 429 (< {100 * target[1]:.0f}%), "
            f"{sum(o.failed.values())} failed: {'met' if met else 'NOT MET'}"
        )
    return lines


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks ratelimit", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--calls", type=int, default=4000, help="calls per job (4,000)")
    parser.add_argument("--long-calls", type=int, default=20_000, help="calls of the long job (20,000)")
    parser.add_argument("--rounds", type=int, default=1, help="times to run every job (1)")
    parser.add_argument("--rate", type=float, default=RATE, help="the service's rate, calls/s (200)")
    parser.add_argument("--burst", type=float, default=BURST, help="the service's burst (50)")
    parser.add_argument("--in-flight", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--headers", nargs="+", choices=list(STYLES), default=list(STYLES))
    parser.add_argument("--modes", nargs="+", default=["none", "RateLimit(190)", "RateLimit()", "long"])
    parser.add_argument(
        "--announce", default="none", help="the style the service announces its limit in (none, openai, ietf)"
    )
    return parser.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    outcomes = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for _ in range(args.rounds):
        for header in args.headers:
            for in_flight in args.in_flight:
                for mode in args.modes:
                    if mode == "gather" and in_flight != args.in_flight[0]:
                        continue  # all its calls are in flight: one job, whatever --in-flight says
                    calls = args.long_calls if mode == "long" else args.calls
                    named = "RateLimit()" if mode == "long" else mode
                    outcome = run_job(header, in_flight, named, calls, args.rate, args.burst, args.announce)
                    outcomes.append(outcome)
                    print(table([outcome])[-1], file=sys.stderr, flush=True)
    end = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"Measured {started} with python -m benchmarks ratelimit; Python {platform.python_version()}, ")
    print(f"{os.cpu_count()} cores; load averages at the start {_load(load)}, at the end {_load(end)}.")
    told = "" if args.announce == "none" else f", announce={args.announce!r}"
    print(f"Service: FakeService(rate_limit=({args.rate:g}, {args.burst:g}){told}) in its own process.")
    print("\n".join(table(outcomes)))
    print()
    print("\n".join(verdicts(outcomes)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

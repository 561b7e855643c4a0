"""``python -m benchmarks fleet``: fleets of client processes sharing one rate limit, side by side.

One service process (``qa_min.testing.FakeService(rate_limit=(200, 50))``) answers 429 with
``Retry-After: 1`` or an exact ``retry-after-ms``, and may announce its limit on every response
(``announce=...``). N client processes (each its own ``qa.Client``, 8 calls in flight through
``submit``, no coordination) share it. Each row of the table is one run:

* ``default``: ``Client()`` in each process, N = 1, 2, 4, 8, both 429 styles;
* ``split``: ``RateLimit(190).split(N)`` in each (the user knows N);
* ``announced``: the default client, the service announcing its limit (OpenAI-style fields);
* ``staggered``: 4 processes started 5 s apart; ``exiting``: 4 processes, one stops at 10 s.

Reported: the share of the service's rate the fleet got (answers over the whole run's time), the
share of requests answered 429, the calls lost (failed, e.g. ``RateLimited``), the fairness
(slowest over fastest process's rate while all ran) and, for ``exiting``, the rate after the exit.
``--modes`` and ``--headers`` choose rows; ``--quick`` runs a few small rows in seconds (a CI
smoke test). Self-contained: it imports no other benchmark module.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
RATE, BURST, IN_FLIGHT = 200.0, 50, 8
STYLES = {"Retry-After: 1": "seconds", "retry-after-ms": "ms"}


@dataclass(frozen=True)
class Row:
    """One fleet run: who, how many, what the service says."""

    mode: str  # default, split, announced, staggered, exiting
    n: int
    header: str
    calls: int
    announce: str = "none"
    stagger: float = 0.0
    exit_after: Optional[float] = None


@dataclass
class Outcome:
    row: Row
    seconds: float
    answered: int
    lost: int
    requests: int
    throttled: int
    fairness: Optional[float]
    after_exit: Optional[float] = None
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def share_of_rate(self) -> float:
        return self.answered / self.seconds / RATE if self.seconds else 0.0

    @property
    def share_429(self) -> float:
        return self.throttled / self.requests if self.requests else 0.0


def serve(style: str, announce: str) -> int:
    """The service process: print the URL, serve until stdin closes, print the counts."""
    sys.path.insert(0, str(ROOT))
    from qa_min.testing import FakeService

    with FakeService(rate_limit=(RATE, BURST), retry_after=style, announce=announce) as svc:
        print(svc.url, flush=True)
        sys.stdin.read()
        counts = {"requests": svc.request_count, "throttled": svc.rate_limited_count}
    print(json.dumps(counts), flush=True)
    return 0


def client(url: str, calls: int, limit: str, stop_after: Optional[float]) -> int:
    """One client process: ``calls`` calls, 8 in flight; prints its answers' times as JSON."""
    sys.path.insert(0, str(ROOT))
    import qa_min as qa

    class Review(qa.Questions):
        toxic = qa.YesNo("The text insults someone", "The text insults no one")

    rate_limit = qa.RateLimit() if limit == "default" else qa.RateLimit(190).split(int(limit.split(":")[1]))
    answered: list[float] = []
    errors: dict[str, int] = {}
    started = time.time()
    with qa.Client(base_url=url, trust_env=False, max_workers=IN_FLIGHT, rate_limit=rate_limit) as c:
        pending = []
        for i in range(calls):
            if stop_after is not None and time.time() - started >= stop_after:
                break
            pending.append(c.submit(c.ask, f"text {i}", Review))
            while len(pending) >= 2 * IN_FLIGHT:  # keep a short queue, so a stop is prompt
                _collect(pending.pop(0), answered, errors)
        for call in pending:
            _collect(call, answered, errors)
    print(json.dumps({"started": started, "answered": answered, "errors": errors}), flush=True)
    return 0


def _collect(call: object, answered: list[float], errors: dict[str, int]) -> None:
    import qa_min as qa

    try:
        call.result()  # type: ignore[attr-defined]
        answered.append(time.time())
    except qa.QAError as exc:
        errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1


def _spawn(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.fleet", *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def run_row(row: Row) -> Outcome:
    """Start the service, then the N clients (staggered if asked), and gather what they saw."""
    service = _spawn(["--serve", STYLES[row.header], row.announce])
    assert service.stdout is not None
    url = service.stdout.readline().strip()
    limit = f"split:{row.n}" if row.mode == "split" else "default"
    procs = []
    try:
        for i in range(row.n):
            if i and row.stagger:
                time.sleep(row.stagger)
            stop = ["--stop-after", str(row.exit_after)] if row.exit_after is not None and i == 0 else []
            procs.append(
                _spawn(["--client", url, "--calls", str(row.calls // row.n), "--limit", limit, *stop])
            )
        reports = [json.loads(p.communicate(timeout=900)[0].strip().splitlines()[-1]) for p in procs]
    finally:
        out, _ = service.communicate("", timeout=60)
    counts = json.loads(out.strip().splitlines()[-1])
    return _outcome(row, reports, counts)


def _outcome(row: Row, reports: list[dict[str, Any]], counts: dict[str, int]) -> Outcome:
    times: list[list[float]] = [sorted(r["answered"]) for r in reports]
    starts = [float(r["started"]) for r in reports]
    ends = [t[-1] if t else s for t, s in zip(times, starts)]
    seconds = max(ends) - min(starts)
    errors: dict[str, int] = {}
    for r in reports:
        for name, n in r["errors"].items():
            errors[name] = errors.get(name, 0) + n
    fairness = None
    window = (max(starts), min(ends))
    if window[1] - window[0] >= 2.0:
        rates = [sum(1 for x in t if window[0] <= x < window[1]) for t in times]
        fairness = min(rates) / max(rates) if max(rates) else 0.0
    after = None
    if row.exit_after is not None:
        exited = ends[0] + 1.0
        until = min(ends[1:])
        if until > exited:
            served = sum(sum(1 for x in t if exited <= x < until) for t in times[1:])
            after = served / (until - exited) / RATE
    answered = sum(len(t) for t in times)
    return Outcome(
        row,
        seconds,
        answered,
        sum(errors.values()),
        counts["requests"],
        counts["throttled"],
        fairness,
        after,
        errors,
    )


def rows(quick: bool, calls: Optional[int]) -> list[Row]:
    if quick:
        small = calls or 600
        return [
            Row("default", 2, "retry-after-ms", small),
            Row("announced", 2, "retry-after-ms", small, announce="openai"),
            Row("split", 2, "Retry-After: 1", small),
        ]
    calls = calls or 8000
    table = []
    for header in STYLES:
        table += [Row("default", n, header, calls) for n in (1, 2, 4, 8)]
    table += [Row("split", n, "Retry-After: 1", calls) for n in (2, 4, 8)]
    table += [Row("announced", n, "retry-after-ms", calls, announce="openai") for n in (1, 2, 4, 8)]
    table += [Row("announced", 4, "Retry-After: 1", calls, announce="ietf")]
    for header in STYLES:
        table += [
            Row("staggered", 4, header, calls, stagger=5.0),
            Row("exiting", 4, header, calls, exit_after=10.0),
        ]
    table += [
        Row("staggered", 4, "retry-after-ms", calls, announce="openai", stagger=5.0),
        Row("exiting", 4, "retry-after-ms", calls, announce="openai", exit_after=10.0),
    ]
    return table


def line(o: Outcome) -> str:
    r = o.row
    what = r.mode + ("" if r.announce == "none" else f" ({r.announce})")
    fair = "-" if o.fairness is None else f"{o.fairness:.2f}"
    after = "" if o.after_exit is None else f"{100 * o.after_exit:.0f}%"
    lost = f"{o.lost}" + (
        "" if not o.errors else " (" + ", ".join(f"{n} {k}" for k, n in sorted(o.errors.items())) + ")"
    )
    return (
        f"| {what} | {r.n} | {r.header} | {r.calls:,} | {o.seconds:.1f} | {100 * o.share_of_rate:.1f}% | "
        f"{100 * o.share_429:.2f}% | {lost} | {fair} | {after} |"
    )


HEAD = [
    "| client | N | 429 says | calls | seconds | % of 200/s | % 429 | lost | fairness | after the exit |",
    "|---|--:|---|--:|--:|--:|--:|--:|--:|--:|",
]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks fleet", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--serve", nargs=2, metavar=("STYLE", "ANNOUNCE"), help=argparse.SUPPRESS)
    parser.add_argument("--client", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--limit", default="default", help=argparse.SUPPRESS)
    parser.add_argument("--stop-after", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--calls", type=int, default=None, help="calls per run, all processes together (8,000; --quick: 600)"
    )
    parser.add_argument("--quick", action="store_true", help="three small runs, a few seconds (a smoke test)")
    parser.add_argument(
        "--modes", nargs="+", help="only these modes (default, split, announced, staggered, exiting)"
    )
    parser.add_argument(
        "--headers",
        nargs="+",
        choices=list(STYLES),
        default=list(STYLES),
        help="only rows whose 429s say this",
    )
    args = parser.parse_args(argv)
    if args.serve:
        return serve(*args.serve)
    if args.client:
        return client(args.client, args.calls or 0, args.limit, args.stop_after)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    outcomes = []
    print("\n".join(HEAD), file=sys.stderr, flush=True)
    for row in rows(args.quick, args.calls):
        if (args.modes and row.mode not in args.modes) or row.header not in args.headers:
            continue
        outcomes.append(run_row(row))
        print(line(outcomes[-1]), file=sys.stderr, flush=True)
    end = os.getloadavg() if hasattr(os, "getloadavg") else None
    loads = " / ".join("unknown" if v is None else " ".join(f"{x:.2f}" for x in v) for v in (load, end))
    print(
        f"Measured {started} with python -m benchmarks fleet; Python {platform.python_version()}, "
        f"{os.cpu_count()} cores; load averages at the start / end: {loads}."
    )
    service = f"FakeService(rate_limit=({RATE:g}, {BURST}))"
    print(f"Service: {service} in its own process; {IN_FLIGHT} calls in flight per process.")
    print("\n".join(HEAD + [line(o) for o in outcomes]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

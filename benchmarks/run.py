"""``python -m benchmarks``: run every client against the local server and report the medians.

The parent process measures nothing itself; it starts the server (``server.start``) and, for
each round, each measurement and each client, a fresh child process (``benchmarks.clients``, or
a bare ``python -c`` for import times). Clients are interleaved, their order rotated each round,
and each client's numbers are compared with the raw ``http.client`` floor of the same round,
so that a machine that slows down in the middle of a run (thermal limits, a noisy neighbour)
shifts both sides of a ratio together.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from . import report
from .server import ROOT, child_env, start

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .server import ServerProcess


@dataclass(frozen=True)
class ClientSpec:
    """A benchmarked client: its name in ``benchmarks.clients.MAKERS``, what it needs, how it imports."""

    name: str
    label: str
    package: Optional[str]  # None: the standard library only
    statement: str  # what its import time is measured on
    cold: str  # import plus a client object, no request: what a cold start pays before a call


CLIENTS = (
    ClientSpec(
        "raw",
        "raw http.client + json",
        None,
        "import http.client, json",
        "import http.client, json; http.client.HTTPConnection('127.0.0.1', 9)",
    ),
    ClientSpec(
        "urllib3", "urllib3 PoolManager", "urllib3", "import urllib3", "import urllib3; urllib3.PoolManager()"
    ),
    ClientSpec(
        "requests", "requests Session", "requests", "import requests", "import requests; requests.Session()"
    ),
    ClientSpec("httpx", "httpx Client", "httpx", "import httpx", "import httpx; httpx.Client()"),
    ClientSpec(
        "qa_core",
        "qa_min core()",
        "qa_min",
        "import qa_min",
        "import qa_min; qa_min.Client(base_url='http://127.0.0.1:9')",
    ),
    ClientSpec(
        "qa_ask",
        "qa_min ask()",
        "qa_min",
        "import qa_min",
        "import qa_min; qa_min.Client(base_url='http://127.0.0.1:9')",
    ),
)
BY_NAME = {spec.name: spec for spec in CLIENTS}
METRICS = ("cpu_us", "calls_per_s", "importtime_ms", "import_wall_ms", "cold_ms", "cold_wall_ms", "rss_mib")
DIFFERENCE_METRICS = {"rss_mib"}  # compared with raw as a difference, the others as a ratio
MARK = "--benchmarks: import starts--"


class BenchmarkFailed(Exception):
    """A child process failed: an error, or a wrong answer from the server."""


@dataclass
class Settings:
    rounds: int
    calls: int
    warmup: int
    threads: int
    thread_calls: int
    rss_calls: int
    import_runs: int
    wrong_answer: bool = False
    python: str = sys.executable


@dataclass
class Results:
    """Every sample, by client and metric, plus the per-round comparison with raw."""

    clients: list[ClientSpec]
    missing: list[ClientSpec]
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    versus_raw: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # Per 8-thread run: (client, server CPU µs per request, calls/s): is the server the bottleneck?
    server_load: list[tuple[str, float, float]] = field(default_factory=list)

    def add_round(self, values: dict[str, dict[str, float]]) -> None:
        raw = values["raw"]
        for name, metrics in values.items():
            for metric, value in metrics.items():
                self.samples.setdefault(name, {}).setdefault(metric, []).append(value)
                base = raw[metric]
                compared = value - base if metric in DIFFERENCE_METRICS else value / base
                self.versus_raw.setdefault(name, {}).setdefault(metric, []).append(compared)

    def median(self, name: str, metric: str) -> float:
        return statistics.median(self.samples[name][metric])

    def median_versus_raw(self, name: str, metric: str) -> float:
        return statistics.median(self.versus_raw[name][metric])


# -- child processes ------------------------------------------------------------------------


def run_client(
    settings: Settings, env: dict[str, str], name: str, mode: str, url: str, calls: int
) -> dict[str, float]:
    """Run one measurement of one client in a fresh process; its ``RESULT`` dict.

    Raises:
        BenchmarkFailed: The process failed (its stderr is in the message).
    """
    threads = settings.threads if mode == "threads" else 1
    command = [settings.python, "-m", "benchmarks.clients", name, mode, url]
    command += [str(calls), str(settings.warmup), str(threads)]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise BenchmarkFailed(f"{name} ({mode}) exited with status {proc.returncode}:\n{proc.stderr.strip()}")
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, float] = json.loads(line[len("RESULT ") :])
            return result
    raise BenchmarkFailed(f"{name} ({mode}) printed no RESULT line:\n{proc.stdout.strip()}")


def _python(settings: Settings, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [settings.python, *args], capture_output=True, text=True, env=env, cwd=ROOT, check=False
    )
    if proc.returncode != 0:
        raise BenchmarkFailed(f"python {shlex.join(args)} failed:\n{proc.stderr.strip()}")
    return proc


def parse_importtime(stderr: str) -> float:
    """Milliseconds: the cumulative times of the top-level imports after ``MARK``.

    ``-X importtime`` lines read ``import time: <self us> | <cumulative us> | <indent><name>``
    with two spaces of indent per nesting level; interpreter start-up imports come before the
    marker, which the measured statement writes to stderr first.
    """
    lines = stderr.splitlines()
    try:
        start = lines.index(MARK) + 1
    except ValueError:
        raise BenchmarkFailed(f"no import marker in the -X importtime output:\n{stderr[:2000]}") from None
    total = 0
    for line in lines[start:]:
        if not line.startswith("import time:"):
            continue
        parts = line.split("|", 2)
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue  # the header line
        name = parts[2][1:]  # after the one separating space
        if not name.startswith(" "):
            total += int(parts[1])
    return total / 1000.0


def import_times(
    settings: Settings, env: dict[str, str], statements: Sequence[str]
) -> dict[str, tuple[float, float]]:
    """Per statement: (``-X importtime`` ms, wall ms over ``python -c pass``), medians over the runs.

    The statements take turns run by run, so that a burst of load on the machine lands on all
    of them rather than on whichever was being measured at the time.
    """
    importtime: dict[str, list[float]] = {statement: [] for statement in statements}
    wall: dict[str, list[float]] = {statement: [] for statement in ("pass", *statements)}
    for _ in range(settings.import_runs):
        for statement in statements:
            code = f"import sys; sys.stderr.write({MARK!r} + '\\n'); sys.stderr.flush(); {statement}"
            stderr = _python(settings, env, "-X", "importtime", "-c", code).stderr
            importtime[statement].append(parse_importtime(stderr))
        for statement, times in wall.items():
            started = time.perf_counter()
            _python(settings, env, "-c", statement)
            times.append(time.perf_counter() - started)
    # Each run's difference from the `pass` run next to it: a slow spell cancels out.
    return {
        statement: (
            statistics.median(importtime[statement]),
            statistics.median(t - b for t, b in zip(wall[statement], wall["pass"])) * 1000.0,
        )
        for statement in statements
    }


# -- the rounds -----------------------------------------------------------------------------


def rotated(items: Sequence[ClientSpec], round_index: int) -> list[ClientSpec]:
    shift = round_index % len(items)
    return [*items[shift:], *items[:shift]]


def run_round(
    settings: Settings, env: dict[str, str], server: ServerProcess, order: list[ClientSpec], results: Results
) -> dict[str, dict[str, float]]:
    """One round: each measurement kind for every client in ``order``, kind after kind."""
    values: dict[str, dict[str, float]] = {spec.name: {} for spec in order}
    url = server.url
    for spec in order:
        cpu = run_client(settings, env, spec.name, "cpu", url, settings.calls)
        values[spec.name]["cpu_us"] = cpu["cpu_us"]
    for spec in order:
        before = server.cpu_seconds()
        threaded = run_client(settings, env, spec.name, "threads", url, settings.thread_calls)
        after = server.cpu_seconds()
        values[spec.name]["calls_per_s"] = threaded["calls_per_s"]
        if before is not None and after is not None:
            cost = (after - before) / threaded["requests"] * 1e6
            results.server_load.append((spec.name, cost, threaded["calls_per_s"]))
    for spec in order:
        rss = run_client(settings, env, spec.name, "rss", url, settings.rss_calls)
        values[spec.name]["rss_mib"] = rss["rss_kib"] / 1024.0
    # qa_core and qa_ask share `import qa_min`: measured once.
    statements = [spec.statement for spec in order] + [spec.cold for spec in order]
    measured = import_times(settings, env, list(dict.fromkeys(statements)))
    for spec in order:
        values[spec.name]["importtime_ms"], values[spec.name]["import_wall_ms"] = measured[spec.statement]
        values[spec.name]["cold_ms"], values[spec.name]["cold_wall_ms"] = measured[spec.cold]
    return values


def available(specs: Sequence[ClientSpec]) -> tuple[list[ClientSpec], list[ClientSpec]]:
    """(installed, not installed): a client whose package cannot be found is skipped."""
    installed: list[ClientSpec] = []
    missing: list[ClientSpec] = []
    for spec in specs:
        found = spec.package is None or importlib.util.find_spec(spec.package) is not None
        (installed if found else missing).append(spec)
    return installed, missing


def benchmark(settings: Settings, specs: Sequence[ClientSpec], progress: bool = True) -> Results:
    """Run every round; raises ``BenchmarkFailed`` on the first failing child."""
    installed, missing = available(specs)
    results = Results(installed, missing)
    env = child_env()
    # Compile every module once, so no round pays for byte-compilation.
    for statement in dict.fromkeys(spec.statement for spec in installed):
        _python(settings, env, "-c", statement)
    with start(wrong_answer=settings.wrong_answer, python=settings.python) as server:
        for index in range(settings.rounds):
            order = rotated(installed, index)
            if progress:
                print(
                    f"round {index + 1}/{settings.rounds}: {', '.join(s.name for s in order)}",
                    file=sys.stderr,
                )
            values = run_round(settings, env, server, order, results)
            results.add_round(values)
            if progress:
                print(report.progress_line(values), file=sys.stderr)
    return results


# -- the command ----------------------------------------------------------------------------

QUICK = {"rounds": 1, "calls": 300, "warmup": 50, "thread_calls": 800, "rss_calls": 300, "import_runs": 2}
FULL = {"rounds": 5, "calls": 2000, "warmup": 200, "thread_calls": 4000, "rss_calls": 1000, "import_runs": 10}


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    names = ", ".join(spec.name for spec in CLIENTS)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=f"""\
Benchmark qa_min against raw http.client, urllib3, requests and httpx.

A local HTTP/1.1 keep-alive server (asyncio, in its own process) answers POST /v1/core
instantly with a fixed JSON body. Every client runs in a fresh python process per
measurement, makes the same POST with the same JSON body and checks every answer
(toxic true, tone "formal", quality 2); an error or a wrong answer stops the run with
exit status 1. Clients are interleaved over the rounds, their order rotated each round.

Per client, the median over the rounds, and the median of its ratio to the raw
http.client floor measured in the same round:
  * CPU us per call on one thread (time.process_time over --calls calls after --warmup);
  * calls/s with --threads threads sharing one client (raw: one HTTPConnection per thread);
  * import time: top-level cumulative times of `python -X importtime -c STATEMENT`, and the
    wall time of `python -c STATEMENT` minus that of a `python -c pass` run next to it
    (medians of --import-runs);
  * peak RSS after --rss-calls calls, in MiB and as a difference from raw: VmHWM from
    /proc/self/status on Linux (ru_maxrss there is inherited across exec from the
    runner), ru_maxrss elsewhere.

Clients: {names} (raw is always included: it is the floor).
A client whose package is not installed is reported as such and skipped.
The extra `pip install -e '.[bench]'` installs urllib3, requests and httpx.

The markdown table goes to stdout and to --output; progress goes to stderr.""",
    )
    parser.add_argument("--rounds", type=int, help=f"rounds (default {FULL['rounds']}; --quick: 1)")
    parser.add_argument("--clients", help=f"comma-separated subset of: {names} (default: all)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 round, fewer calls")
    parser.add_argument("--calls", type=int, help=f"timed calls on one thread (default {FULL['calls']})")
    parser.add_argument("--warmup", type=int, help=f"untimed calls first (default {FULL['warmup']})")
    parser.add_argument("--threads", type=int, default=8, help="threads sharing one client (default 8)")
    parser.add_argument(
        "--thread-calls", type=int, help=f"calls shared by the threads (default {FULL['thread_calls']})"
    )
    parser.add_argument(
        "--rss-calls", type=int, help=f"calls before the peak RSS is read (default {FULL['rss_calls']})"
    )
    parser.add_argument(
        "--import-runs",
        type=int,
        help=f"python processes per import measurement (default {FULL['import_runs']})",
    )
    parser.add_argument(
        "--output",
        default=str(Path(__file__).resolve().parent / "RESULTS.md"),
        help="also write the markdown here (default benchmarks/RESULTS.md); '-' for stdout only",
    )
    parser.add_argument("--json", metavar="FILE", help="also write every sample as JSON")
    parser.add_argument(
        "--profile",
        metavar="CLIENT",
        choices=[spec.name for spec in CLIENTS],
        help="instead: profile CLIENT's one-thread loop with cProfile and print the statistics",
    )
    parser.add_argument(
        "--wrong-answer",
        action="store_true",
        help="self-test: the server answers toxic=false, so the run must fail with status 1",
    )
    args = parser.parse_args(argv)
    defaults = QUICK if args.quick else FULL
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for key in ("rounds", "calls", "threads", "thread_calls", "rss_calls", "import_runs"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must be at least 0")
    chosen = list(CLIENTS) if not args.clients else []
    for name in (args.clients or "").split(","):
        if not name.strip():
            continue
        if name.strip() not in BY_NAME:
            parser.error(f"unknown client {name.strip()!r}; choose from: {names}")
        chosen.append(BY_NAME[name.strip()])
    if BY_NAME["raw"] not in chosen:
        chosen.insert(0, BY_NAME["raw"])
    args.specs = list(dict.fromkeys(chosen))
    return args


def machine() -> dict[str, str]:
    """What the results were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a",
    }


def versions(specs: Sequence[ClientSpec]) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for spec in specs:
        if spec.package is None or spec.package in found:
            continue
        try:
            found[spec.package] = version(spec.package)
        except PackageNotFoundError:
            found[spec.package] = _source_version(spec.package)
    return found


def _source_version(package: str) -> str:
    # qa_min run from a checkout is not an installed distribution; its version is in _config.
    text = (ROOT / package / "_config.py").read_text() if (ROOT / package).is_dir() else ""
    for line in text.splitlines():
        if line.startswith("__version__"):
            return line.partition("=")[2].strip().strip("\"'") + " (checkout)"
    return "unknown"


def profile(settings: Settings, client: str) -> int:
    with start(python=settings.python) as server:
        command = [settings.python, "-m", "benchmarks.clients", client, "profile", server.url]
        command += [str(settings.calls), str(settings.warmup), "1"]
        return subprocess.run(command, env=child_env(), cwd=ROOT, check=False).returncode


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    settings = Settings(
        rounds=args.rounds,
        calls=args.calls,
        warmup=args.warmup,
        threads=args.threads,
        thread_calls=args.thread_calls,
        rss_calls=args.rss_calls,
        import_runs=args.import_runs,
        wrong_answer=args.wrong_answer,
    )
    if args.profile:
        return profile(settings, args.profile)
    command = shlex.join(["python", "-m", "benchmarks", *(sys.argv[1:] if argv is None else argv)])
    started = machine()
    try:
        results = benchmark(settings, args.specs)
    except BenchmarkFailed as exc:
        print(f"benchmarks: FAILED: {exc}", file=sys.stderr)
        return 1
    started["load_end"] = machine()["load"]
    text = report.render(results, settings, started, versions(args.specs), command)
    print(text)
    if args.output != "-":
        Path(args.output).write_text(text + "\n")
        print(f"written to {args.output}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "samples": results.samples,
                    "versus_raw": results.versus_raw,
                    "server_load": results.server_load,
                },
                indent=1,
            )
            + "\n"
        )
    return 0

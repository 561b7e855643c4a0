"""The steady-state measurements: every client against every server, round by round.

The parent process measures nothing itself; it starts the servers (nginx and/or the own server,
``benchmarks.servers``) and, for each round, each measurement and each client, a fresh child
process (``benchmarks.clients``, or a bare ``python -c`` for import times). Clients are
interleaved, their order rotated each round, and each client's numbers are compared with the
raw ``http.client`` floor of the same round and server, so that a machine that slows down in the
middle of a run (thermal limits, a noisy neighbour) shifts both sides of a ratio together.

The per-call metrics (CPU, threads) are measured against each server and stored as
``<metric>@<server key>``; import times and peak RSS involve no server's work and are measured
once per round.
"""

from __future__ import annotations

import contextlib
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

from .common import ROOT, child_env

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from .process import ServerProcess
    from .servers import Starter


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
PER_SERVER = ("cpu_us", "calls_per_s")  # measured against each server: "<metric>@<server key>"
METRICS = ("importtime_ms", "import_wall_ms", "cold_ms", "cold_wall_ms", "rss_mib")
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
    thread_repeats: int = 1  # threaded runs per client, server and round; their median counts
    python: str = sys.executable
    servers: list[tuple[str, str]] = field(default_factory=list)  # (key, name) as measured


@dataclass
class Results:
    """Every sample, by client and metric, plus the per-round comparison with raw."""

    clients: list[ClientSpec]
    missing: list[ClientSpec]
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    versus_raw: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # Per threaded run: (server key, client, server CPU µs per request, calls/s): is the server
    # the bottleneck?
    server_load: list[tuple[str, str, float, float]] = field(default_factory=list)
    # Per client: the own server's reads per request in each one-thread run; above 1 when the
    # client's requests arrive in pieces (http.client: the head, then the body).
    reads: dict[str, list[float]] = field(default_factory=dict)
    # Per (server key, client): the server's CPU µs per request in each one-thread run.
    server_cost: dict[tuple[str, str], list[float]] = field(default_factory=dict)

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

    def range_versus_raw(self, name: str, metric: str) -> tuple[float, float]:
        """The lowest and highest per-round comparison with raw: the noise of the run."""
        values = self.versus_raw[name][metric]
        return min(values), max(values)


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
    settings: Settings,
    env: dict[str, str],
    servers: Sequence[tuple[str, ServerProcess]],
    order: list[ClientSpec],
    results: Results,
) -> dict[str, dict[str, float]]:
    """One round: each measurement kind for every client in ``order``, kind after kind."""
    values: dict[str, dict[str, float]] = {spec.name: {} for spec in order}
    for key, server in servers:
        for spec in order:
            before = server.counters() if key == "own" else None
            spent = server.cpu_seconds()
            cpu = run_client(settings, env, spec.name, "cpu", server.url, settings.calls)
            values[spec.name][f"cpu_us@{key}"] = cpu["cpu_us"]
            now = server.cpu_seconds()
            if spent is not None and now is not None:
                cost = (now - spent) / cpu["requests"] * 1e6
                results.server_cost.setdefault((key, spec.name), []).append(cost)
            after = server.counters() if before is not None else None
            if before is not None and after is not None and after[0] > before[0]:
                # The request that read `after` was one read more.
                reads = (after[1] - before[1] - 1) / (after[0] - before[0])
                results.reads.setdefault(spec.name, []).append(reads)
        rates: dict[str, list[float]] = {}
        for repeat in range(settings.thread_repeats):
            for spec in rotated(order, repeat):
                spent = server.cpu_seconds()
                threaded = run_client(settings, env, spec.name, "threads", server.url, settings.thread_calls)
                now = server.cpu_seconds()
                rates.setdefault(spec.name, []).append(threaded["calls_per_s"])
                if spent is not None and now is not None:
                    cost = (now - spent) / threaded["requests"] * 1e6
                    results.server_load.append((key, spec.name, cost, threaded["calls_per_s"]))
        for name, found in rates.items():
            # Short threaded runs are the noisiest measurement: a median of repeats, interleaved.
            values[name][f"calls_per_s@{key}"] = statistics.median(found)
    # Memory and imports involve no server's work: measured once, against the first server.
    for spec in order:
        rss = run_client(settings, env, spec.name, "rss", servers[0][1].url, settings.rss_calls)
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


def benchmark(
    settings: Settings, specs: Sequence[ClientSpec], starters: Sequence[Starter], progress: bool = True
) -> Results:
    """Run every round against every server; raises ``BenchmarkFailed`` on the first failing child.

    Fills ``settings.servers`` with the (key, name) of each server as it ran.
    """
    installed, missing = available(specs)
    results = Results(installed, missing)
    env = child_env()
    # Compile every module once, so no round pays for byte-compilation.
    for statement in dict.fromkeys(spec.statement for spec in installed):
        _python(settings, env, "-c", statement)
    with contextlib.ExitStack() as stack:
        servers = [
            (starter.key, stack.enter_context(starter.start(settings.wrong_answer))) for starter in starters
        ]
        settings.servers = [(key, server.name) for key, server in servers]
        for index in range(settings.rounds):
            order = rotated(installed, index)
            if progress:
                print(
                    f"round {index + 1}/{settings.rounds}: {', '.join(s.name for s in order)}",
                    file=sys.stderr,
                )
            values = run_round(settings, env, servers, order, results)
            results.add_round(values)
            if progress:
                print(progress_line(values), file=sys.stderr)
    return results


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
    init = Path(ROOT, package, "__init__.py")
    text = init.read_text() if init.is_file() else ""
    for line in text.splitlines():
        if line.startswith("__version__"):
            return line.partition("=")[2].strip().strip("\"'") + " (checkout)"
    return "unknown"


def progress_line(values: Mapping[str, Mapping[str, float]]) -> str:
    """One round's raw numbers, for stderr."""
    parts = []
    for name, metrics in values.items():
        servers = [key.partition("@")[2] for key in metrics if key.startswith("cpu_us@")]
        per_server = "  ".join(
            f"{server}: cpu {metrics['cpu_us@' + server]:7.1f} µs {metrics['calls_per_s@' + server]:7,.0f}/s"
            for server in servers
        )
        parts.append(
            f"  {name:<8} {per_server}  import {metrics['importtime_ms']:6.2f} ms"
            f" ({metrics['import_wall_ms']:6.1f} wall)  rss {metrics['rss_mib']:5.1f} MiB"
        )
    return "\n".join(parts)

"""The markdown report: one table of medians and ratios, the conditions, the issue-5 targets."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .run import Results, Settings

COLUMNS = (
    # (metric, heading, format of the value, heading of the comparison with raw)
    ("cpu_us", "CPU µs/call, 1 thread", "{:,.1f}", "x raw"),
    ("calls_per_s", "calls/s, {threads} threads", "{:,.0f}", "x raw"),
    ("importtime_ms", "import ms (-X importtime)", "{:.2f}", "x raw"),
    ("import_wall_ms", "import ms (wall)", "{:.1f}", "x raw"),
    ("cold_ms", "import + new client ms (-X importtime)", "{:.2f}", "x raw"),
    ("cold_wall_ms", "import + new client ms (wall)", "{:.1f}", "x raw"),
    ("rss_mib", "peak RSS MiB", "{:.1f}", "Δ raw MiB"),
)

TARGETS = (
    # (client, metric, limit, "max" or "min", wording)
    ("qa_core", "cpu_us", 1.15, "max", "core() CPU per call ≤ 1.15x raw"),
    ("qa_ask", "cpu_us", 1.00, "max", "ask() CPU per call ≤ 1.00x raw"),
    ("qa_core", "calls_per_s", 0.90, "min", "core() calls/s with {threads} threads ≥ 0.90x raw"),
    ("qa_ask", "calls_per_s", 0.90, "min", "ask() calls/s with {threads} threads ≥ 0.90x raw"),
    (
        "qa_core",
        "importtime_ms",
        1.10,
        "max",
        "`import qa_min` ≤ 1.10x `import http.client, json` (-X importtime)",
    ),
    (
        "qa_core",
        "cold_ms",
        1.10,
        "max",
        "(not a target; for honesty) import + new `Client` ≤ 1.10x import + new `HTTPConnection`",
    ),
    ("qa_core", "rss_mib", 1.5, "max", "core() peak RSS ≤ raw + 1.5 MiB"),
    ("qa_ask", "rss_mib", 1.5, "max", "ask() peak RSS ≤ raw + 1.5 MiB"),
)


def versus(metric: str, value: float) -> str:
    """A comparison with raw as shown: a ratio, or a signed difference for memory."""
    return f"{value:+.1f}" if metric == "rss_mib" else f"{value:.2f}x"


def table(results: Results, threads: int) -> list[str]:
    heads = ["client"]
    for _, heading, _, compare in COLUMNS:
        heads += [heading.format(threads=threads), compare]
    lines = ["| " + " | ".join(heads) + " |", "|---" + "|--:" * (len(heads) - 1) + "|"]
    for spec in results.clients:
        cells = [spec.label]
        for metric, _, shown, _ in COLUMNS:
            cells.append(shown.format(results.median(spec.name, metric)))
            cells.append(versus(metric, results.median_versus_raw(spec.name, metric)))
        lines.append("| " + " | ".join(cells) + " |")
    for spec in results.missing:
        lines.append("| " + " | ".join([spec.label, "not installed"] + [""] * (len(heads) - 2)) + " |")
    return lines


def targets(results: Results, threads: int) -> list[str]:
    names = {spec.name for spec in results.clients}
    rows = []
    for client, metric, limit, kind, wording in TARGETS:
        if client not in names:
            continue
        value = results.median_versus_raw(client, metric)
        met = value <= limit if kind == "max" else value >= limit
        rows.append(
            f"| {wording.format(threads=threads)} | {versus(metric, value)} | {'yes' if met else '**no**'} |"
        )
    if not rows:
        return []
    return [
        "",
        "Targets of issue 5 (medians of the per-round comparisons with raw):",
        "",
        "| target | measured | met |",
        "|---|--:|:-:|",
        *rows,
    ]


def render(
    results: Results,
    settings: Settings,
    machine: Mapping[str, str],
    versions: Mapping[str, str],
    command: str,
) -> str:
    """The whole report, ready to paste into the README."""
    threads_word = f"{settings.threads}-thread"
    libraries = ", ".join(f"{name} {version}" for name, version in versions.items()) or "none"
    server = ""
    if results.server_load:
        # The server's CPU per request times the rate the clients drove it at, run by run.
        name, cost, rate = max(results.server_load, key=lambda run: run[1] * run[2])
        server = (
            f" Its CPU cost was {statistics.median(run[1] for run in results.server_load):.0f} µs per"
            f" request (median); the busiest {threads_word} run ({name}, {rate:,.0f} calls/s at"
            f" {cost:.0f} µs) kept it busy {cost * rate / 1e4:.0f}% of one core."
        )
    lines = [
        "## Benchmark results",
        "",
        f"Measured {machine['date']} with `{command}`.",
        "",
        f"- Machine: {machine['platform']}; {machine['cpu']}, {machine['cores']} cores"
        f" (load averages at the start: {machine['load']}; at the end: {machine.get('load_end', 'n/a')})",
        f"- Python: {machine['python']}; libraries: {libraries}",
        f"- Method: {_count(settings.rounds, 'round')}, clients interleaved and their order rotated"
        " each round, each measurement in a fresh process; every call POSTs the same JSON body to"
        " /v1/core and checks the three answers. Values are medians over the rounds; `x raw` and `Δ raw` are"
        " medians of the per-round comparisons with the raw `http.client` floor.",
        f"- CPU: `time.process_time()` over {settings.calls:,} calls after {settings.warmup:,}"
        f" warm-up calls. Threads: {settings.threads} threads share one client (raw: one"
        f" `HTTPConnection` each) for {settings.thread_calls:,} calls.",
        f"- RSS: the peak after {settings.rss_calls:,} calls (`VmHWM` from /proc/self/status:"
        " on Linux `ru_maxrss` is inherited across exec, so it would show the runner's own size).",
        f"- Import: medians of {_count(settings.import_runs, 'process', 'processes')} per round;"
        " `-X importtime` sums the top-level cumulative times of the statement's imports"
        " (raw: `import http.client, json`); wall is `python -c 'import X'` minus a"
        " `python -c pass` run next to it. `import + new client` adds making a client object"
        " without a request (raw: an `HTTPConnection`; qa_min: a `Client`, which loads its"
        " transport then, not at import), so it counts everything a cold start pays before"
        " its first request.",
        "- Server: asyncio HTTP/1.1 keep-alive, in its own process, fixed JSON reply." + server,
        "",
        *table(results, settings.threads),
        *targets(results, settings.threads),
    ]
    return "\n".join(lines)


def _count(number: int, one: str, many: str = "") -> str:
    return f"{number:,} {one if number == 1 else many or one + 's'}"


def progress_line(values: Mapping[str, Mapping[str, float]]) -> str:
    """One round's raw numbers, for stderr."""
    parts = []
    for name, metrics in values.items():
        parts.append(
            f"  {name:<8} cpu {metrics['cpu_us']:8.1f} µs  {metrics['calls_per_s']:8,.0f} calls/s"
            f"  import {metrics['importtime_ms']:6.2f} ms ({metrics['import_wall_ms']:6.1f} wall)"
            f"  rss {metrics['rss_mib']:5.1f} MiB"
        )
    return "\n".join(parts)

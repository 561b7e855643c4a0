"""The markdown: the steady-state tables by server, the cold-start table, the targets.

Each mode's text is one section of ``benchmarks/RESULTS.md``, between ``<!-- begin NAME -->``
and ``<!-- end NAME -->``; ``write_section`` replaces that section only, so the text around it
(the explanation of the server, written by hand) stays.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from .cold import PROFILE_RUNS
from .run import BY_NAME

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from .cold import Outcome
    from .run import Results, Settings

PER_SERVER_COLUMNS = (
    # (metric, heading, format of the value)
    ("cpu_us", "CPU µs/call, 1 thread", "{:,.1f}"),
    ("calls_per_s", "calls/s, {threads} threads", "{:,.0f}"),
)
COLUMNS = (
    # (metric, heading, format of the value, heading of the comparison with raw)
    ("importtime_ms", "import ms (-X importtime)", "{:.2f}", "x raw"),
    ("import_wall_ms", "import ms (wall)", "{:.1f}", "x raw"),
    ("cold_ms", "import + new client ms (-X importtime)", "{:.2f}", "x raw"),
    ("cold_wall_ms", "import + new client ms (wall)", "{:.1f}", "x raw"),
    ("rss_mib", "peak RSS MiB", "{:.1f}", "Δ raw MiB"),
)
PER_SERVER_TARGETS = (
    # (client, metric, limit, "max" or "min", wording): checked on every server
    ("qa_core", "cpu_us", 1.00, "max", "core() CPU per call ≤ 1.00x raw"),
    ("qa_ask", "cpu_us", 1.00, "max", "ask() CPU per call ≤ 1.00x raw"),
    ("qa_core", "calls_per_s", 1.00, "min", "core() calls/s with {threads} threads ≥ 1.00x raw"),
    ("qa_ask", "calls_per_s", 1.00, "min", "ask() calls/s with {threads} threads ≥ 1.00x raw"),
)
TARGETS = (
    (
        "qa_core",
        "importtime_ms",
        1.10,
        "max",
        "`import qa_min` ≤ 1.10x `import http.client, json` (-X importtime)",
    ),
    ("qa_core", "rss_mib", 1.5, "max", "core() peak RSS ≤ raw + 1.5 MiB"),
    ("qa_ask", "rss_mib", 1.5, "max", "ask() peak RSS ≤ raw + 1.5 MiB"),
)
COLD_WALL_LIMIT = 1.05
COLD_RSS_LIMIT = 1.0
SERVER_TEXT = {
    "nginx": "`return 200` with the fixed body, one process, its configuration in a temporary directory",
    "own": "a selector loop, one thread, its own process",
}


def versus(metric: str, value: float) -> str:
    """A comparison with raw as shown: a ratio, or a signed difference for memory."""
    return f"{value:+.1f}" if metric.startswith("rss_mib") else f"{value:.2f}x"


def _met(value: float, limit: float, kind: str) -> str:
    return "yes" if (value <= limit if kind == "max" else value >= limit) else "**no**"


def per_server_table(results: Results, settings: Settings) -> list[str]:
    heads = ["client"]
    for _, heading, _ in PER_SERVER_COLUMNS:
        for key, _ in settings.servers:
            heads += [f"{heading.format(threads=settings.threads)}, {key}", "x raw"]
    lines = ["| " + " | ".join(heads) + " |", "|---" + "|--:" * (len(heads) - 1) + "|"]
    for spec in results.clients:
        cells = [spec.label]
        for metric, _, shown in PER_SERVER_COLUMNS:
            for key, _ in settings.servers:
                cells.append(shown.format(results.median(spec.name, f"{metric}@{key}")))
                cells.append(versus(metric, results.median_versus_raw(spec.name, f"{metric}@{key}")))
        lines.append("| " + " | ".join(cells) + " |")
    for spec in results.missing:
        lines.append("| " + " | ".join([spec.label, "not installed"] + [""] * (len(heads) - 2)) + " |")
    return lines


def table(results: Results) -> list[str]:
    heads = ["client"]
    for _, heading, _, compare in COLUMNS:
        heads += [heading, compare]
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


def agreement(results: Results, settings: Settings) -> list[str]:
    """Each client's ratios to raw on each server, with the per-round range, and their gap.

    The gap is relative (the difference over the mean of the two medians), so that a ratio of
    8x and one of 0.8x are judged alike; the noise is the width of the per-round range
    relative to its median, on one server.
    """
    keys = [key for key, _ in settings.servers]
    if len(keys) < 2 or len(results.clients) < 2:
        return []
    heads = ["client", "measure", *(f"x raw, {key} (rounds' min-max)" for key in keys), "gap"]
    lines = ["| " + " | ".join(heads) + " |", "|---|---" + "|--:" * (len(heads) - 2) + "|"]
    gaps: dict[str, list[float]] = {}
    noise: dict[str, list[float]] = {}
    for spec in results.clients:
        if spec.name == "raw":
            continue
        for metric, heading, _ in PER_SERVER_COLUMNS:
            cells = [spec.label, heading.format(threads=settings.threads)]
            medians = []
            for key in keys:
                low, high = results.range_versus_raw(spec.name, f"{metric}@{key}")
                medians.append(results.median_versus_raw(spec.name, f"{metric}@{key}"))
                cells.append(f"{medians[-1]:.2f}x ({low:.2f}-{high:.2f})")
                noise.setdefault(metric, []).append((high - low) / medians[-1] * 100)
            gap = (max(medians) - min(medians)) / statistics.mean(medians) * 100
            gaps.setdefault(metric, []).append(gap)
            lines.append("| " + " | ".join([*cells, f"{gap:.0f}%"]) + " |")
    summary = []
    for metric, heading, _ in PER_SERVER_COLUMNS:
        summary.append(
            f"{heading.format(threads=settings.threads)}: the servers' medians differ by"
            f" {statistics.median(gaps[metric]):.0f}% (median over the clients; at most"
            f" {max(gaps[metric]):.0f}%), while on one server a client's per-round ratios spread over"
            f" {statistics.median(noise[metric]):.0f}% of their median (the noise)."
        )
    return ["", "How close the servers agree (ratios to raw, per server):", "", *lines, "", *summary]


def targets(results: Results, settings: Settings) -> list[str]:
    names = {spec.name for spec in results.clients}
    keys = [key for key, _ in settings.servers]
    rows = []
    for client, metric, limit, kind, wording in PER_SERVER_TARGETS:
        if client in names:
            for key in keys:
                value = results.median_versus_raw(client, f"{metric}@{key}")
                text = wording.format(threads=settings.threads)
                rows.append(f"| {text}, {key} | {versus(metric, value)} | {_met(value, limit, kind)} |")
    for client, metric, limit, kind, wording in TARGETS:
        if client in names:
            value = results.median_versus_raw(client, metric)
            rows.append(f"| {wording} | {versus(metric, value)} | {_met(value, limit, kind)} |")
    if not rows:
        return []
    heading = "Targets (issues 5 and 14; medians of the per-round comparisons with raw):"
    return ["", heading, "", "| target | measured | met |", "|---|--:|:-:|", *rows]


def render(
    results: Results,
    settings: Settings,
    machine: Mapping[str, str],
    versions: Mapping[str, str],
    command: str,
    note: str = "",
) -> str:
    """The steady-state section, ready to paste into the README."""
    libraries = ", ".join(f"{name} {version}" for name, version in versions.items()) or "none"
    servers = "; ".join(f"{name} ({SERVER_TEXT[key]})" for key, name in settings.servers)
    load = []
    for key, _ in settings.servers:
        runs = [run for run in results.server_load if run[0] == key]
        if runs:
            # The server's CPU per request times the rate the clients drove it at, run by run.
            _, name, cost, rate = max(runs, key=lambda run: run[2] * run[3])
            load.append(
                f"{key}: {statistics.median(run[2] for run in runs):.0f} µs of CPU per request (median);"
                f" its busiest {settings.threads}-thread run ({name}, {rate:,.0f} calls/s at"
                f" {cost:.0f} µs) kept it busy {cost * rate / 1e4:.0f}% of one core"
            )
    for key, _ in settings.servers:
        costs = [
            f"{spec.label} {statistics.median(results.server_cost[key, spec.name]):.1f}"
            for spec in results.clients
            if (key, spec.name) in results.server_cost
        ]
        if costs:
            load.append(f"{key}'s CPU µs per request in the 1-thread runs (median): {', '.join(costs)}")
    if results.reads:
        shown = ", ".join(
            f"{spec.label} {statistics.median(results.reads[spec.name]):.2f}"
            for spec in results.clients
            if spec.name in results.reads
        )
        load.append(f"own server's reads per request in the 1-thread runs (median): {shown}")
    lines = [
        "## Steady state",
        "",
        f"Measured {machine['date']} with `{command}`.",
        "",
        f"- Machine: {machine['platform']}; {machine['cpu']}, {machine['cores']} cores"
        f" (load averages at the start: {machine['load']}; at the end: {machine.get('load_end', 'n/a')})",
        f"- Python: {machine['python']}; libraries: {libraries}",
        f"- Servers: {servers}." + (f" {note}" if note else ""),
        f"- Method: {_count(settings.rounds, 'round')}, clients interleaved and their order rotated"
        " each round, each measurement in a fresh process; every call POSTs the same JSON body to"
        " /v1/core and checks the three answers. Values are medians over the rounds; `x raw` and"
        " `Δ raw` are medians of the per-round comparisons with the raw `http.client` floor"
        " measured against the same server.",
        f"- CPU: `time.process_time()` over {settings.calls:,} calls after {settings.warmup:,}"
        f" warm-up calls. Threads: {settings.threads} threads share one client (raw: one"
        f" `HTTPConnection` each) for {settings.thread_calls:,} calls; per round, the median of"
        f" {_count(settings.thread_repeats, 'run')} per client, interleaved.",
        "- Server load: " + ("; ".join(load) + "." if load else "not measured (no /proc)."),
        "",
        *per_server_table(results, settings),
        *agreement(results, settings),
        "",
        "Import and memory (no server's work involved; measured once per round):",
        "",
        f"- RSS: the peak after {settings.rss_calls:,} calls (`VmHWM` from /proc/self/status:"
        " on Linux `ru_maxrss` is inherited across exec, so it would show the runner's own size).",
        f"- Import: medians of {_count(settings.import_runs, 'process', 'processes')} per round;"
        " `-X importtime` sums the top-level cumulative times of the statement's imports"
        " (raw: `import http.client, json`); wall is `python -c 'import X'` minus a"
        " `python -c pass` run next to it. `import + new client` adds making a client object"
        " without a request (raw: an `HTTPConnection`; qa_min: a `Client`, which loads its"
        " transport then, not at import). The whole cold start, first call included, is"
        " `python -m benchmarks cold`.",
        "",
        *table(results),
        *targets(results, settings),
    ]
    return "\n".join(lines)


def render_cold(outcome: Outcome, machine: Mapping[str, str], command: str, notes: Sequence[str]) -> str:
    """The cold-start section."""
    results = outcome.results
    rounds = len(results.runs[results.schemes[0], "raw"])
    heads = ["client"]
    for scheme in results.schemes:
        heads += [
            f"{scheme}:// ms",
            "x raw",
            "middle half; min-max",
            "CPU x raw",
            "peak RSS MiB",
            "Δ raw MiB",
        ]
    lines = ["| " + " | ".join(heads) + " |", "|---" + "|--:" * (len(heads) - 1) + "|"]
    rows = []
    for name in results.names:
        label = BY_NAME[name].label
        cells = [label]
        for scheme in results.schemes:
            ratios = results.wall_ratios(scheme, name)
            differences = results.rss_differences(scheme, name)
            ratio, difference = statistics.median(ratios), statistics.median(differences)
            cells += [
                f"{results.median_wall_ms(scheme, name):.1f}",
                f"{ratio:.3f}x",
                f"{_quartiles(ratios)}; {min(ratios):.2f}-{max(ratios):.2f}",
                f"{statistics.median(results.cpu_ratios(scheme, name)):.3f}x",
                f"{results.median_peak_mib(scheme, name):.1f}",
                f"{difference:+.2f}",
            ]
            if name != "raw":
                wall_row = f"| {label} over {scheme}:// wall ≤ {COLD_WALL_LIMIT:.2f}x raw | {ratio:.3f}x"
                rows.append(f"{wall_row} | {_met(ratio, COLD_WALL_LIMIT, 'max')} |")
                rss_row = f"| {label} over {scheme}:// peak RSS ≤ raw + {COLD_RSS_LIMIT:.1f} MiB"
                rows.append(f"{rss_row} | {difference:+.2f} | {_met(difference, COLD_RSS_LIMIT, 'max')} |")
        lines.append("| " + " | ".join(cells) + " |")
    text = [
        "## Cold start",
        "",
        f"Measured {machine['date']} with `{command}`.",
        "",
        f"- Machine: {machine['platform']}; {machine['cpu']}, {machine['cores']} cores"
        f" (load averages at the start: {machine['load']}; at the end: {machine.get('load_end', 'n/a')})",
        f"- Python: {machine['python']}. Server: {outcome.server}"
        + (
            ", HTTP and HTTPS (a throwaway CA made with `openssl` for the run)."
            if "https" in results.schemes
            else "."
        )
        + "".join(f" {note}" for note in notes),
        f"- Method: {_count(rounds, 'round')}; each runs every client once per scheme, the order rotated"
        " round by round. A run is a whole `python -c` process timed from spawn until reaped:"
        " start-up, imports, a client, one POST /v1/core, the answers checked. `x raw` is the median"
        " of each run's ratio to the raw run of its round, then the range of the middle half of"
        " those ratios (first to third quartile) and the lowest and highest;"
        " `CPU x raw` is the same for the child's user + system CPU time (from `wait4`), which a"
        " busy machine disturbs less than the wall clock. Peak RSS is the child's own `VmHWM`.",
        "",
        *lines,
        "",
        "Targets (issue 14):",
        "",
        "| target | measured | met |",
        "|---|--:|:-:|",
        *rows,
    ]
    if outcome.profile:
        heading = "What the qa_min process imports beyond raw's"
        heading += f" (`-X importtime`, medians of {PROFILE_RUNS} runs, µs):"
        text += ["", heading, ""]
        text += ["| module | self | cumulative |", "|---|--:|--:|"]
        text += [f"| {module} | {own:,} | {total:,} |" for module, own, total in outcome.profile]
    return "\n".join(text)


def write_section(path: Path, name: str, text: str) -> None:
    """Replace section ``name`` of the markdown file at ``path`` (appended if absent)."""
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    old = path.read_text() if path.exists() else ""
    block = f"{begin}\n{text}\n{end}"
    if begin in old and end in old:
        head, _, rest = old.partition(begin)
        _, _, tail = rest.partition(end)
        new = head + block + tail
    else:
        new = (old.rstrip() + "\n\n" if old.strip() else "") + block + "\n"
    path.write_text(new)


def _quartiles(values: Sequence[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.2f}-{values[0]:.2f}"
    low, _, high = statistics.quantiles(values, n=4)
    return f"{low:.2f}-{high:.2f}"


def _count(number: int, one: str, many: str = "") -> str:
    return f"{number:,} {one if number == 1 else many or one + 's'}"

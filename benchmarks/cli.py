"""``python -m benchmarks [MODE] ...``: the modes (``MODES``), and the command line of two of them.

``python -m benchmarks MODE ARGS`` runs ``MODES[MODE]``; without a mode it runs ``steady``, so
``python -m benchmarks --rounds 5`` is the steady state. ``steady`` (``benchmarks.run``) and
``cold`` (``benchmarks.cold``) have their command line here: each writes its markdown to stdout
and into its own section of ``benchmarks/RESULTS.md`` (``report.write_section``), so that running
one mode keeps the other's figures. The other modes are self-contained modules.

Adding a mode is one line in ``MODES`` (keep it in alphabetical order): its name, the function
that runs it as ``"module:function"`` (it takes the arguments after the mode's name, a list of
strings, and returns the exit status), and what it measures in one line for ``--help``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from . import cold, report, run, servers
from .common import ROOT, child_env
from .nginx import NginxNotFound

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

MODES: dict[str, tuple[str, str]] = {
    "asyncio": (
        "benchmarks.aio:main",
        "K concurrent asyncio calls: AsyncClient, aiohttp, httpx, a raw floor",
    ),
    "batch": ("benchmarks.batch:main", "`qa-min batch` on a million lines: memory, first line, resuming"),
    "cold": ("benchmarks.cli:cold_main", "cold starts: whole processes up to the first answer, vs raw"),
    "engines": ("benchmarks.engines:main", "process pools, Dask, Ray, Spark (needs the extra 'engines')"),
    "fleet": ("benchmarks.fleet:main", "fleets of 1-8 client processes sharing one rate limit"),
    "ratelimit": ("benchmarks.ratelimit:main", "a rate-limited service, with and without the limiter"),
    "redaction": ("benchmarks.redaction:main", "hiding the key in an 8 MiB body; the nesting check"),
    "steady": ("benchmarks.cli:steady_main", "CPU per call, calls/s, import time, RSS vs raw (the default)"),
}
DEFAULT_MODE = "steady"

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
QUICK = {
    "rounds": 1,
    "calls": 300,
    "warmup": 50,
    "thread_calls": 800,
    "thread_repeats": 1,
    "rss_calls": 300,
    "import_runs": 2,
}
FULL = {
    "rounds": 5,
    "calls": 2000,
    "warmup": 200,
    "thread_calls": 4000,
    "thread_repeats": 3,
    "rss_calls": 1000,
    "import_runs": 10,
}
COLD_ROUNDS = 41


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--server",
        choices=servers.CHOICES,
        default="auto",
        help="auto (default): nginx and the own server if nginx is installed, else the own server;"
        " both / nginx (fail without nginx) / own",
    )
    parser.add_argument("--nginx", metavar="PATH", help="the nginx executable (default: $NGINX, PATH, sbin)")
    parser.add_argument(
        "--output",
        default=str(RESULTS),
        help="also write the section into this file (default benchmarks/RESULTS.md); '-': stdout only",
    )


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    names = ", ".join(spec.name for spec in run.CLIENTS)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks [steady]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=f"""\
Benchmark qa_min against raw http.client, urllib3, requests and httpx (steady state).

Modes (`python -m benchmarks MODE --help` for each; without a MODE: steady):
{modes_help()}

The server answers POST /v1/core instantly with a fixed JSON body: nginx (`return 200`,
started by the benchmark with its own configuration in a temporary directory) when it is
installed, and the own server (benchmarks/server.py, a selector loop in its own process);
with --server auto both, each round measuring every client against each. Every client runs
in a fresh python process per measurement, makes the same POST with the same JSON body and
checks every answer (toxic true, tone "formal", quality 2); an error or a wrong answer stops
the run with exit status 1. Clients are interleaved, their order rotated each round.

Per client, the median over the rounds, and the median of its ratio to the raw
http.client floor measured in the same round against the same server:
  * CPU us per call on one thread (time.process_time over --calls calls after --warmup);
  * calls/s with --threads threads sharing one client (raw: one HTTPConnection per thread),
    the median of --thread-repeats runs per round;
  * import time: top-level cumulative times of `python -X importtime -c STATEMENT`, and the
    wall time of `python -c STATEMENT` minus that of a `python -c pass` run next to it
    (medians of --import-runs);
  * peak RSS after --rss-calls calls, in MiB and as a difference from raw: VmHWM from
    /proc/self/status on Linux (ru_maxrss there is inherited across exec from the
    runner), ru_maxrss elsewhere.

Clients: {names} (raw is always included: it is the floor).
A client whose package is not installed is reported as such and skipped.
The extra `pip install -e '.[bench]'` installs urllib3, requests and httpx.

The markdown goes to stdout and into --output; progress goes to stderr.""",
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
        "--thread-repeats",
        type=int,
        help=f"threaded runs per client, server and round, interleaved; the median counts"
        f" (default {FULL['thread_repeats']})",
    )
    parser.add_argument(
        "--rss-calls", type=int, help=f"calls before the peak RSS is read (default {FULL['rss_calls']})"
    )
    parser.add_argument(
        "--import-runs",
        type=int,
        help=f"python processes per import measurement (default {FULL['import_runs']})",
    )
    _common(parser)
    parser.add_argument("--json", metavar="FILE", help="also write every sample as JSON")
    parser.add_argument(
        "--profile",
        metavar="CLIENT",
        choices=[spec.name for spec in run.CLIENTS],
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
    for key in ("rounds", "calls", "threads", "thread_calls", "thread_repeats", "rss_calls", "import_runs"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must be at least 0")
    chosen = list(run.CLIENTS) if not args.clients else []
    for name in (args.clients or "").split(","):
        if not name.strip():
            continue
        if name.strip() not in run.BY_NAME:
            parser.error(f"unknown client {name.strip()!r}; choose from: {names}")
        chosen.append(run.BY_NAME[name.strip()])
    if run.BY_NAME["raw"] not in chosen:
        chosen.insert(0, run.BY_NAME["raw"])
    args.specs = list(dict.fromkeys(chosen))
    return args


def parse_cold_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks cold",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Cold start: what a new process pays up to its first answer, qa_min against raw http.client.

Each run is a whole `python -c` process, timed from spawn until reaped: interpreter start-up,
the imports, a client, one POST /v1/core with the same body, the answers checked. Clients:
raw (http.client + json), qa_core (qa_min core()), qa_ask (qa_min ask() with a Questions
class). Over http:// and https://: the server gets a throwaway CA and certificate made with
the openssl command for this run, and every process trusts that CA through SSL_CERT_FILE,
so raw and qa_min make the same handshake (without openssl, http:// only).

Each round runs every client once per scheme in a rotated order; each qa_min run is compared
with the raw run of its own round. Reported: median wall ms, the median ratio to raw with
its min-max over the rounds, and the peak RSS (the child's own VmHWM on Linux) with its
median difference from raw. Server: nginx (HTTP and HTTPS) when installed, else the own
server; --server both is not used here (one server is enough: little of a cold start is
the server's).""",
    )
    parser.add_argument(
        "--rounds", type=int, default=COLD_ROUNDS, help=f"rounds (default {COLD_ROUNDS}, min 1)"
    )
    parser.add_argument(
        "--importtime",
        action="store_true",
        help="also list the modules the qa_min process imports beyond raw's (-X importtime, one run)",
    )
    _common(parser)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.server == "both":
        parser.error("--server both: the cold-start mode uses one server (auto, nginx or own)")
    return args


def profile(settings: run.Settings, client: str, starter: servers.Starter) -> int:
    with starter.start() as server:
        command = [settings.python, "-m", "benchmarks.clients", client, "profile", server.url]
        command += [str(settings.calls), str(settings.warmup), "1"]
        return subprocess.run(command, env=child_env(), cwd=ROOT, check=False).returncode


def _emit(text: str, output: str, section: str) -> None:
    print(text)
    if output != "-":
        report.write_section(Path(output), section, text)
        print(f"written to {output} (section {section!r})", file=sys.stderr)


def _servers(args: argparse.Namespace, python: str) -> Optional[tuple[list[servers.Starter], str]]:
    """The servers ``--server`` asks for and a note for the report; None, said, without nginx."""
    try:
        starters, note = servers.choose(args.server, python, args.nginx)
    except NginxNotFound as exc:
        print(f"benchmarks: {exc}", file=sys.stderr)
        return None
    if note:
        print(f"benchmarks: {note}", file=sys.stderr)
    return starters, note


def steady_main(argv: list[str]) -> int:
    args = parse_args(argv)
    settings = run.Settings(
        rounds=args.rounds,
        calls=args.calls,
        warmup=args.warmup,
        threads=args.threads,
        thread_calls=args.thread_calls,
        rss_calls=args.rss_calls,
        import_runs=args.import_runs,
        wrong_answer=args.wrong_answer,
        thread_repeats=args.thread_repeats,
    )
    chosen = _servers(args, settings.python)
    if chosen is None:
        return 2
    starters, note = chosen
    if args.profile:
        return profile(settings, args.profile, starters[0])
    command = shlex.join(["python", "-m", "benchmarks", *argv])
    started = run.machine()
    try:
        results = run.benchmark(settings, args.specs, starters)
    except run.BenchmarkFailed as exc:
        print(f"benchmarks: FAILED: {exc}", file=sys.stderr)
        return 1
    started["load_end"] = run.machine()["load"]
    text = report.render(results, settings, started, run.versions(args.specs), command, note)
    _emit(text, args.output, "steady")
    if args.json:
        samples = {
            "samples": results.samples,
            "versus_raw": results.versus_raw,
            "server_load": results.server_load,
        }
        Path(args.json).write_text(json.dumps(samples, indent=1) + "\n")
    return 0


def cold_main(argv: list[str]) -> int:
    args = parse_cold_args(argv)
    chosen = _servers(args, sys.executable)
    if chosen is None:
        return 2
    starters, note = chosen
    command = shlex.join(["python", "-m", "benchmarks", "cold", *argv])
    started = run.machine()
    starter = starters[0]
    try:
        outcome = cold.run(
            lambda tls: starter.start(tls=tls), sys.executable, cold.NAMES, args.rounds, args.importtime
        )
    except cold.ColdFailed as exc:
        print(f"benchmarks: FAILED: {exc}", file=sys.stderr)
        return 1
    started["load_end"] = run.machine()["load"]
    notes = [note, *outcome.notes] if note else outcome.notes
    _emit(report.render_cold(outcome, started, command, notes), args.output, "cold")
    return 0


def modes_help() -> str:
    """One line per mode, for ``--help``."""
    width = max(map(len, MODES))
    return "\n".join(f"  {name:<{width}}  {summary}" for name, (_, summary) in MODES.items())


def mode_main(name: str) -> Callable[[list[str]], int]:
    """The function that runs mode ``name``, imported only now: a mode loads only what it uses."""
    module, _, function = MODES[name][0].partition(":")
    found: Callable[[list[str]], int] = getattr(importlib.import_module(module), function)
    return found


def main(argv: Optional[Sequence[str]] = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] and arguments[0] in MODES:
        return mode_main(arguments[0])(arguments[1:])
    if arguments[:1] and not arguments[0].startswith("-"):  # the default mode takes options only
        print(
            f"python -m benchmarks: unknown mode {arguments[0]!r}; modes: {', '.join(MODES)}", file=sys.stderr
        )
        return 2
    return mode_main(DEFAULT_MODE)(arguments)

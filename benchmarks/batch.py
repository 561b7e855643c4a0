"""``qa-min batch`` at scale: memory, first answer, order, and resuming after Ctrl-C or ``kill -9``.

    python -m benchmarks batch [--lines 1000000] [--concurrency 8] [--max-rate R]
                               [--base-url URL] [--scenarios full,sigint,kill]

It writes a JSONL input of ``--lines`` states (``{"id": "t<n>", "state": ...}``, each state
different) and, unless ``--base-url`` names a service to use instead, starts the fake service
(``qa_min.testing.FakeService``) in a process of its own, a fresh one per scenario, which
counts how often each state was asked. Each batch runs as ``python -m qa_min batch`` would,
in its own process, with the same three questions as the README's example.

Scenarios:
    full    one run to the end: the batch process's peak RSS (``VmHWM``, read by the process
            itself as it exits), the time from starting it to its first output line, the rate,
            and a check that the output holds exactly one answer per input line, in input order,
            each the fake's deterministic answer, and that the service was asked each state once.
    sigint  SIGINT once about half the lines are written, then the command the batch printed:
            the same checks, and how many states the service was asked twice (only those in
            flight at the interrupt may be; at most ``WINDOW * --concurrency``).
    kill    the same with ``kill -9`` and the first command plus ``--resume``.

It prints one markdown section (the figures and whether each target is met) and exits 1 if a
check fails. With ``--base-url`` the service's counts are not available and are reported as such.
The fake service runs in ``benchmarks.fake``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from .common import LEVELS, MODEL, ROOT, TONES, YES_NO, child_env
from .fake import FakeProcess

QUESTIONS: dict[str, Any] = {"toxic": YES_NO, "tone": TONES, "quality": LEVELS}
FLAGS = [
    "--yes-no", "toxic", *QUESTIONS["toxic"].values(),
    "--choice", "tone", *(f"{k}={v}" for k, v in QUESTIONS["tone"].items()),
    "--score", "quality", *QUESTIONS["quality"],
]  # fmt: skip
RSS_TARGET_MIB = 60.0
FIRST_LINE_TARGET_S = 1.0
POLL = 0.002

# Runs `python -m qa_min` (sys.argv[0] is qa_min/__main__.py, as with -m, so the resume command
# it prints is the real one) and, as it exits, writes its own peak RSS where $QA_BENCH_HWM says.
LAUNCHER = """\
import atexit, os, runpy, sys
def report():
    with open("/proc/self/status") as status, open(os.environ["QA_BENCH_HWM"], "w") as out:
        out.write(next(line for line in status if line.startswith("VmHWM")).split()[1])
atexit.register(report)
runpy.run_module("qa_min", run_name="__main__", alter_sys=True)
"""


def state(n: int) -> str:
    return f"Ticket {n}: the parcel arrived late and the box was crushed, but support sorted it out."


def generate(path: Path, lines: int) -> None:
    with open(path, "w", encoding="utf-8") as file:
        for n in range(1, lines + 1):
            file.write(json.dumps({"id": f"t{n}", "state": state(n)}) + "\n")


# -- the service, in its own process ---------------------------------------------------------------


class Service:
    """A fresh fake service process, or the service at ``--base-url`` (no counts then)."""

    def __init__(self, base_url: Optional[str]) -> None:
        self.fake = FakeProcess() if base_url is None else None
        self.url = self.fake.url if self.fake is not None else str(base_url)

    def stats(self) -> Optional[dict[str, int]]:
        return self.fake.stats() if self.fake is not None else None

    def close(self) -> None:
        if self.fake is not None:
            self.fake.close()


# -- one batch process ------------------------------------------------------------------------------


class Batch:
    """``python -m qa_min *argv`` in its own process, measured."""

    def __init__(self, argv: list[str], work: Path, name: str) -> None:
        self.hwm = work / f"{name}.hwm"
        self.err_path = work / f"{name}.err"
        env = {**child_env(), "QA_BENCH_HWM": str(self.hwm)}
        self.started = time.perf_counter()
        with open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", LAUNCHER, *argv],
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=ROOT,
                env=env,
            )

    def wait_for_output(self, path: Path, size: int) -> float:
        """Seconds from the start until ``path`` holds ``size`` bytes (or the process ended)."""
        while self.proc.poll() is None:
            try:
                if path.stat().st_size >= size:
                    break
            except FileNotFoundError:
                pass
            time.sleep(POLL)
        return time.perf_counter() - self.started

    def wait(self) -> tuple[int, float, str]:
        """Exit code, seconds from the start, and stderr."""
        code = self.proc.wait()
        return code, time.perf_counter() - self.started, self.err_path.read_text()

    def peak_rss_mib(self) -> Optional[float]:
        try:
            return int(self.hwm.read_text()) / 1024
        except (FileNotFoundError, ValueError):
            return None  # killed before it could tell


def check_output(path: Path, lines: int) -> dict[str, Any]:
    """Whether ``path`` holds exactly one correct answer per input line, in input order."""
    from qa_min.testing import expected_answer

    problems: list[str] = []
    count = 0
    with open(path, encoding="utf-8") as file:
        for count, text in enumerate(file, 1):
            row = json.loads(text)
            if row.get("line") != count or row.get("id") != f"t{count}":
                problems.append(f"output line {count} is for input line {row.get('line')}")
            elif "answers" not in row:
                problems.append(f"line {count}: {row.get('error')}")
            else:
                want = {q: expected_answer(MODEL, state(count), q, c) for q, c in QUESTIONS.items()}
                if row["answers"] != want:
                    problems.append(f"line {count}: answers {row['answers']} != {want}")
            if len(problems) >= 5:
                break
    if count != lines and len(problems) < 5:
        problems.append(f"{count} output lines for {lines} input lines")
    return {"output_lines": count, "problems": problems}


# -- scenarios ----------------------------------------------------------------------------------------


def batch_argv(args: argparse.Namespace, url: str, inp: Path, out: Path) -> list[str]:
    rate = ["--max-rate", str(args.max_rate)] if args.max_rate is not None else []
    return [
        "--base-url",
        url,
        "batch",
        str(inp),
        "-o",
        str(out),
        "--concurrency",
        str(args.concurrency),
        *rate,
        *FLAGS,
    ]


def run_full(args: argparse.Namespace, inp: Path, work: Path) -> dict[str, Any]:
    service = Service(args.base_url)
    out = work / "full.jsonl"
    try:
        batch = Batch(batch_argv(args, service.url, inp, out), work, "full")
        first = batch.wait_for_output(out, 1)
        code, wall, err = batch.wait()
        stats = service.stats()
    finally:
        service.close()
    result: dict[str, Any] = {
        "scenario": "full",
        "exit": code,
        "first_line_s": first,
        "wall_s": wall,
        "stats": stats,
    }
    result.update(rss_mib=batch.peak_rss_mib(), rate=args.lines / wall, stderr_tail=err.splitlines()[-1:])
    result.update(check_output(out, args.lines))
    if stats is not None and (stats["states"], stats["twice"]) != (args.lines, 0):
        result["problems"].append(f"the service counted {stats}")
    return result


def output_size(lines: int) -> int:
    """About how many bytes the output holds after ``lines`` lines."""
    row = {"line": lines, "id": f"t{lines}", "answers": {"toxic": True, "tone": "formal", "quality": 0}}
    return lines * (len(json.dumps(row)) + 1)


def run_stopped(args: argparse.Namespace, inp: Path, work: Path, how: str) -> dict[str, Any]:
    from qa_min._cli._batch import WINDOW

    service = Service(args.base_url)
    out = work / f"{how}.jsonl"
    argv = batch_argv(args, service.url, inp, out)
    try:
        batch = Batch(argv, work, how)
        batch.wait_for_output(out, output_size(args.lines // 2))
        os.kill(batch.proc.pid, signal.SIGINT if how == "sigint" else signal.SIGKILL)
        code, _, err = batch.wait()
        written = out.read_bytes().count(b"\n")
        if how == "sigint":
            command = shlex.split(err.strip().splitlines()[-1])
            if command[:3] != [sys.executable, "-m", "qa_min"]:
                raise RuntimeError(f"unexpected resume command: {command}")
            argv = command[3:]
        else:
            argv = [*argv, "--resume"]
        resumed = Batch(argv, work, f"{how}-resume")
        resume_code, wall, _ = resumed.wait()
        stats = service.stats()
    finally:
        service.close()
    result: dict[str, Any] = {
        "scenario": how,
        "exit": code,
        "written": written,
        "resume_exit": resume_code,
        "stats": stats,
    }
    result.update(window=WINDOW * args.concurrency, rss_mib=resumed.peak_rss_mib(), wall_s=wall)
    result.update(check_output(out, args.lines))
    if stats is not None and (stats["states"] != args.lines or stats["twice"] > result["window"]):
        result["problems"].append(f"the service counted {stats}")
    return result


# -- the report -----------------------------------------------------------------------------------------


def report(args: argparse.Namespace, results: list[dict[str, Any]], started: str, argv: list[str]) -> str:
    command = "python -m benchmarks batch " + shlex.join(argv)
    lines = [
        "## Batch: a million lines, streamed and resumed",
        "",
        f"Measured {started} with `{command.strip()}`.",
        "",
        f"- Machine: {platform.platform()}, {os.cpu_count()} cores (load averages at the end: "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}); CPython {platform.python_version()}.",
        f'- Input: {args.lines:,} lines `{{"id": "t<n>", "state": "Ticket <n>: ..."}}`, three questions; '
        f"`--concurrency {args.concurrency}`"
        + (f", `--max-rate {args.max_rate}`" if args.max_rate is not None else "")
        + (
            ", the fake service in its own process (a fresh one per scenario)."
            if args.base_url is None
            else "."
        ),
        "- Peak RSS is the batch process's own `VmHWM`; the first line is timed from process start to the "
        "first byte of the output file; for sigint/kill the RSS and time are the resumed run's.",
        "",
        "| scenario | exit | lines at the stop | resumed exit | peak RSS MiB | first line s | wall s "
        "| lines/s | states asked twice (limit) | output check |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for r in results:
        twice = "n/a" if r["stats"] is None else f"{r['stats']['twice']:,}"
        limit = f" (≤ {r['window']})" if "window" in r else " (0)"
        check = "ok" if not r["problems"] else "; ".join(r["problems"])
        lines.append(
            f"| {r['scenario']} | {r['exit']} | {fmt(r.get('written'))} | {fmt(r.get('resume_exit'))} "
            f"| {fmt(r['rss_mib'], '.1f')} | {fmt(r.get('first_line_s'), '.3f')} | {r['wall_s']:.1f} "
            f"| {fmt(r.get('rate'), ',.0f')} | {twice}{limit} | {check} |"
        )
    return "\n".join(lines) + "\n"


def fmt(value: Any, spec: str = ",") -> str:
    return "" if value is None else format(value, spec)


def met(results: list[dict[str, Any]]) -> bool:
    ok = all(not r["problems"] for r in results)
    for r in results:
        if r["scenario"] == "full":
            ok = ok and r["exit"] == 0 and (r["rss_mib"] or 1e9) < RSS_TARGET_MIB
            ok = ok and r["first_line_s"] < FIRST_LINE_TARGET_S
        else:
            ok = ok and r["exit"] in (130, -signal.SIGKILL) and r["resume_exit"] == 0
    return ok


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks batch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-rate", type=float, default=None)
    parser.add_argument("--base-url", default=None, help="use this service instead of a fake of our own")
    parser.add_argument("--scenarios", default="full,sigint,kill")
    args = parser.parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="qa-batch-") as tmp:
        work = Path(tmp)
        inp = work / "in.jsonl"
        generate(inp, args.lines)
        results = []
        for name in args.scenarios.split(","):
            run = run_full(args, inp, work) if name == "full" else run_stopped(args, inp, work, name)
            print(json.dumps(run), file=sys.stderr, flush=True)
            results.append(run)
    sys.stdout.write(report(args, results, started, argv))
    return 0 if met(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())

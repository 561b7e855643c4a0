"""``benchmarks/``: one quick run of every mode and the few checks its figures rest on.

Each mode in ``benchmarks.cli.MODES`` has one entry in ``SMOKE``: the arguments of a run small
enough to take a few seconds (the own server, the standard-library clients, tiny sizes) and a
line its output must hold. What the runs measure is the benchmark's business; these check that
each runs to the end, checks its answers and prints its table. A new mode adds one line to
``SMOKE`` (``test_every_mode_has_a_smoke_run`` says so). The folder's imports (no cycle) are
checked in ``test_architecture.py``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import cli, run
from benchmarks.common import ROOT, child_env

STEADY_SMALL = ["--quick", "--clients", "raw,qa_core,qa_ask", "--server", "own", "--calls", "40"]
STEADY_SMALL += ["--warmup", "5", "--thread-calls", "64", "--rss-calls", "20", "--import-runs", "1"]

# mode: (arguments, a line the output holds, marks)
SMOKE: dict[str, tuple[list[str], str, tuple[pytest.MarkDecorator, ...]]] = {
    "asyncio": (
        ["--ks", "20", "--rounds", "1", "--clients", "floor,qa_min", "--output", "-"],
        "| 20 | qa_min | ",
        (pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status"),),
    ),
    "batch": (
        ["--lines", "2000", "--scenarios", "sigint"],
        "| sigint | 130 | ",  # interrupted, then resumed: the row ends with its output check
        (pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status"),),
    ),
    "cold": (["--rounds", "1", "--server", "own"], "| raw http.client + json | ", ()),
    "engines": (
        [
            "--rounds",
            "1",
            "--paced-calls",
            "200",
            "--engines",
            "processes (fork)",
            "processes (spawn)",
            "Dask",
        ],
        "| processes (spawn) | ",
        (pytest.mark.engines, pytest.mark.timeout(120)),
    ),
    "fleet": (
        ["--quick", "--calls", "60", "--modes", "announced", "split", "--headers", "retry-after-ms"],
        "| announced (openai) | 2 | retry-after-ms | 60 | ",
        (),
    ),
    "ratelimit": (
        # --rate 100: the explicit ceiling is 95% of the service's rate
        [
            *("--calls", "120", "--in-flight", "4", "--headers", "retry-after-ms"),
            *("--modes", "RateLimit(190)", "--rate", "100", "--burst", "20"),
        ],
        "| retry-after-ms | 4 | RateLimit(95) | 120 | ",
        (),
    ),
    "redaction": (["--rounds", "1", "--mib", "1"], "  prefixes 1 apart ", ()),
    "steady": (STEADY_SMALL, "| qa_min ask() | ", ()),
}


def _benchmarks(*args: str, timeout: float = 50.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )


def test_every_mode_has_a_smoke_run() -> None:
    assert set(SMOKE) == set(cli.MODES), "add the mode's quick run to SMOKE in tests/test_benchmarks.py"


def test_help_lists_every_mode_with_one_line() -> None:
    proc = _benchmarks("--help")
    assert proc.returncode == 0, proc.stderr
    for name, (_, summary) in cli.MODES.items():
        assert f"  {name} " in proc.stdout
        assert summary in proc.stdout
    assert "--rounds" in proc.stdout  # the default mode's options follow


def test_an_unknown_mode_is_named_with_the_modes() -> None:
    proc = _benchmarks("colt")
    assert proc.returncode == 2
    assert f"unknown mode 'colt'; modes: {', '.join(cli.MODES)}" in proc.stderr


@pytest.mark.benchmarks
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "mode", [pytest.param(name, marks=marks, id=name) for name, (_, _, marks) in SMOKE.items()]
)
def test_a_small_run_of_each_mode_ends_with_its_table(mode: str, tmp_path: Path) -> None:
    arguments, row, _ = SMOKE[mode]
    output = ["--output", str(tmp_path / "RESULTS.md")] if mode in ("steady", "cold") else []
    proc = _benchmarks(mode, *arguments, *output, timeout=110 if mode == "engines" else 50)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith(row)]
    assert lines, proc.stdout
    if mode == "batch":
        assert lines[0].rstrip(" |").endswith("| ok")  # one correct answer per line, in order
    if mode == "cold":  # each run compared with raw's of its round: raw's own ratio is exactly 1
        assert lines[0].split(" | ")[2:4] == ["1.000x", "1.00-1.00; 1.00-1.00"]
        if shutil.which("openssl") is not None:  # https:// too, with the throwaway CA
            assert "| qa_min core() over https:// wall ≤ 1.05x raw |" in proc.stdout
    if output:  # the section went into the file, the markers around it
        written = (tmp_path / "RESULTS.md").read_text()
        assert written == f"<!-- begin {mode} -->\n{proc.stdout.strip()}\n<!-- end {mode} -->\n"


def test_fleet_runs_only_the_rows_asked_for() -> None:
    # --headers drops the quick split row (Retry-After: 1) that --modes kept: no process starts.
    proc = _benchmarks("fleet", "--quick", "--modes", "split", "--headers", "retry-after-ms")
    assert proc.returncode == 0, proc.stderr
    assert "| split |" not in proc.stdout
    assert "| client | N | 429 says |" in proc.stdout


# -- what the figures rest on ----------------------------------------------------------------


def test_steady_run_fails_with_status_1_when_the_server_answers_wrongly() -> None:
    proc = _benchmarks(*STEADY_SMALL, "--clients", "raw", "--wrong-answer", "--output", "-")
    assert proc.returncode == 1
    assert "FAILED" in proc.stderr
    assert "wrong answer" in proc.stderr
    assert "| raw" not in proc.stdout


def test_peak_rss_is_the_child_process_own_not_inherited_from_its_parent() -> None:
    # ru_maxrss would report at least this parent's size (Linux keeps it across exec).
    ballast = b"\x01" * (160 * 1024 * 1024)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", "from benchmarks.clients import peak_rss_kib; print(peak_rss_kib())"],
            capture_output=True,
            text=True,
            env=child_env(),
            cwd=ROOT,
            timeout=20,
            check=False,
        )
    finally:
        del ballast
    assert proc.returncode == 0, proc.stderr
    assert 1024 < float(proc.stdout) < 128 * 1024  # a bare interpreter: some MiB


def test_import_time_sums_the_top_level_imports_after_the_marker() -> None:
    stderr = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:       100 |        100 | site",  # start-up: before the marker
            run.MARK,
            "import time:       500 |        500 |   http",
            "import time:       900 |       2000 | http.client",
            "import time:       300 |        300 |     email.parser",
            "import time:       200 |        700 | json",
        ]
    )
    assert run.parse_importtime(stderr) == pytest.approx(2.7)


def test_each_round_is_compared_with_raw_of_the_same_round() -> None:
    results = run.Results([run.BY_NAME["raw"], run.BY_NAME["qa_core"]], [])
    for raw_cpu, qa_cpu in ((100.0, 110.0), (200.0, 180.0), (150.0, 150.0)):
        results.add_round(
            {
                "raw": {"cpu_us@own": raw_cpu, "rss_mib": 20.0},
                "qa_core": {"cpu_us@own": qa_cpu, "rss_mib": 20.5},
            }
        )
    assert results.median_versus_raw("qa_core", "cpu_us@own") == pytest.approx(1.0)  # of 1.1, 0.9, 1.0
    assert results.range_versus_raw("qa_core", "cpu_us@own") == pytest.approx((0.9, 1.1))
    assert results.median_versus_raw("qa_core", "rss_mib") == pytest.approx(0.5)  # a difference

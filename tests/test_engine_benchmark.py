"""``benchmarks/engines.py`` runs end to end: a small run of its two measurements.

Timings are the benchmark's business; this checks that it runs, checks its answers and reports
every row. Process pools need no engine; the Dask rows run where Dask is installed.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.engines, pytest.mark.timeout(90)]


def test_a_small_run_reports_every_row() -> None:
    engines = ["processes (fork)", "processes (spawn)", "Dask"]
    command = [sys.executable, "-m", "benchmarks.engines", "--rounds", "1", "--paced-calls", "200"]
    proc = subprocess.run(
        [*command, "--engines", *engines], capture_output=True, text=True, cwd=ROOT, timeout=80, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert any(row.startswith("| processes (fork) | ") for row in rows), proc.stdout
    assert any(row.startswith("| processes (spawn) | ") for row in rows), proc.stdout
    if importlib.util.find_spec("distributed") is None:
        assert "Skipped: Dask (distributed is not installed)" in proc.stdout
        return
    assert any(row.startswith("| Dask | ") for row in rows), proc.stdout
    for mode in ("RateLimit(200).split(2)", "RateLimit()"):
        row = next(row for row in rows if row.startswith(f"| {mode} | "))
        assert row.split(" | ")[1] == "200", row  # calls

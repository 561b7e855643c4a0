"""A small run of ``python -m benchmarks.batch``: the script that measures batch at scale works."""

from __future__ import annotations

import subprocess
import sys

import pytest
from batchsupport import ROOT, child_env


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.timeout(60)  # five processes and 4,000 calls
def test_benchmark_script_stops_resumes_and_reports() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.batch", "--lines", "2000", "--scenarios", "sigint"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=child_env(),
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| sigint |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1] == "130"  # exit at the interrupt
    assert cells[3] == "0"  # the resumed run
    assert cells[-1] == "ok"  # one correct answer per input line, in order
    assert "(≤ 32)" in cells[-2]

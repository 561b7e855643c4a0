"""Tests of ``benchmarks/``: the clients' checks, the steady-state runner, smoke runs.

Only the standard-library clients (raw, qa_core, qa_ask) are run end to end, so the suite needs
no extra; the urllib3/requests/httpx clients are exercised only where those are installed. The
runs use the own server (``--server own``), so nginx is not needed. The servers themselves are
tested in ``test_benchmarks_servers.py``, the cold-start mode in ``test_benchmarks_cold.py``.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import cli, clients, report, run
from benchmarks.process import ROOT, ServerProcess, child_env
from benchmarks.servers import start_own as start
from qa_min.testing import FakeService

STDLIB_CLIENTS = ("raw", "qa_core", "qa_ask")
POST = (
    b'POST /v1/core HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"a":1}'
)
GET = b"GET /v1/models HTTP/1.1\r\nHost: h\r\n\r\n"


def _run(*args: str, timeout: float = 25.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )


# -- the server process (its framing and routes: test_benchmarks_servers.py) ----------------


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with start() as running:
        yield running


@pytest.fixture(scope="module")
def wrong_server() -> Iterator[ServerProcess]:
    """A server whose answers are wrong (toxic false): every client must fail on them."""
    with start(wrong_answer=True) as running:
        yield running


# -- the clients -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answers", "formal"),
    [
        pytest.param((False, "formal", 2), "formal", id="toxic-false"),
        pytest.param((1, "formal", 2), "formal", id="toxic-not-a-bool"),
        pytest.param((True, "casual", 2), "formal", id="wrong-tone"),
        pytest.param((True, "formal", 1), "formal", id="wrong-quality"),
        pytest.param((True, "formal", True), "formal", id="quality-a-bool"),
        pytest.param((True, "formal", 2.0), "formal", id="quality-a-float"),
        pytest.param((True, "formal", 2), object(), id="tone-not-the-enum-member"),
    ],
)
def test_check_rejects_every_wrong_answer(answers: tuple[object, object, object], formal: object) -> None:
    with pytest.raises(clients.WrongAnswer):
        clients.check(*answers, formal=formal)


@pytest.mark.parametrize("name", STDLIB_CLIENTS)
def test_client_process_exits_2_with_a_message_on_a_wrong_answer(
    wrong_server: ServerProcess, name: str
) -> None:
    proc = _run("-m", "benchmarks.clients", name, "cpu", wrong_server.url, "3", "0")
    assert proc.returncode == 2, proc.stderr
    assert f"{name}: wrong answer: got toxic=False" in proc.stderr
    assert "RESULT" not in proc.stdout


def test_client_process_fails_when_a_thread_gets_a_wrong_answer(wrong_server: ServerProcess) -> None:
    proc = _run("-m", "benchmarks.clients", "qa_core", "threads", wrong_server.url, "8", "0", "4")
    assert proc.returncode == 2, proc.stderr
    assert "wrong answer" in proc.stderr


@pytest.mark.parametrize(("mode", "key"), [("cpu", "cpu_us"), ("threads", "calls_per_s"), ("rss", "rss_kib")])
def test_client_process_prints_one_result_per_mode(server: ServerProcess, mode: str, key: str) -> None:
    proc = _run("-m", "benchmarks.clients", "raw", mode, server.url, "8", "2", "2")
    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert json.loads(line[len("RESULT ") :])[key] > 0


@pytest.mark.parametrize("name", list(clients.MAKERS))
def test_every_client_sends_the_same_body_and_headers(name: str) -> None:
    package = run.BY_NAME[name].package
    if package is not None and importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed")
    with FakeService() as svc:
        svc.set_answers({"toxic": True, "tone": "formal", "quality": 2})
        bench = clients.MAKERS[name](svc.url, 1)
        try:
            bench.call()
            bench.for_thread()()
        finally:
            bench.close()
        requests = svc.requests
    assert [(r.method, r.path) for r in requests] == [("POST", "/v1/core")] * 2
    for recorded in requests:
        assert recorded.json() == clients.PAYLOAD
        assert recorded.headers["content-type"] == "application/json"
        assert recorded.headers["accept"] == "application/json"
        assert recorded.headers["user-agent"]


def test_every_benchmarked_client_has_a_maker_and_a_profile_filter() -> None:
    names = [spec.name for spec in run.CLIENTS]
    assert set(names) == set(clients.MAKERS) == set(clients.PROFILE_FILTERS)


def test_peak_rss_is_the_child_process_own_not_inherited_from_its_parent() -> None:
    # ru_maxrss would report at least this parent's size (Linux keeps it across exec).
    ballast = b"\x01" * (160 * 1024 * 1024)
    try:
        proc = _run("-c", "from benchmarks.clients import peak_rss_kib; print(peak_rss_kib())")
    finally:
        del ballast
    assert proc.returncode == 0, proc.stderr
    assert 1024 < float(proc.stdout) < 128 * 1024  # a bare interpreter: some MiB


# -- the runner ------------------------------------------------------------------------------


def test_parse_importtime_sums_top_level_imports_after_the_marker() -> None:
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


def test_parse_importtime_fails_loudly_without_the_marker() -> None:
    with pytest.raises(run.BenchmarkFailed, match="marker"):
        run.parse_importtime("import time:       200 |        700 | json")


def test_results_compare_with_raw_of_the_same_round() -> None:
    results = run.Results([run.BY_NAME["raw"], run.BY_NAME["qa_core"]], [])
    for raw_cpu, qa_cpu in ((100.0, 110.0), (200.0, 180.0), (150.0, 150.0)):
        results.add_round(
            {
                "raw": {"cpu_us@own": raw_cpu, "cpu_us@nginx": 50.0, "rss_mib": 20.0},
                "qa_core": {"cpu_us@own": qa_cpu, "cpu_us@nginx": 40.0, "rss_mib": 20.5},
            }
        )
    assert results.median("qa_core", "cpu_us@own") == 150.0
    assert results.median_versus_raw("qa_core", "cpu_us@own") == pytest.approx(1.0)  # of 1.1, 0.9, 1.0
    assert results.range_versus_raw("qa_core", "cpu_us@own") == pytest.approx((0.9, 1.1))
    assert results.median_versus_raw("qa_core", "cpu_us@nginx") == pytest.approx(0.8)  # its own raw
    assert results.median_versus_raw("qa_core", "rss_mib") == pytest.approx(0.5)  # a difference


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param([], [spec.name for spec in run.CLIENTS], id="all-by-default"),
        pytest.param(["--clients", "qa_core,qa_ask"], ["raw", "qa_core", "qa_ask"], id="raw-always-added"),
        pytest.param(["--clients", "qa_ask, raw"], ["qa_ask", "raw"], id="order-kept"),
    ],
)
def test_clients_option_always_includes_the_raw_floor(argv: list[str], expected: list[str]) -> None:
    assert [spec.name for spec in cli.parse_args(argv).specs] == expected


def test_clients_option_rejects_an_unknown_client(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.parse_args(["--clients", "raw,curl"])
    assert caught.value.code == 2
    assert "unknown client 'curl'" in capsys.readouterr().err


def test_rounds_rotate_the_client_order() -> None:
    specs = list(run.CLIENTS[:3])
    assert [[s.name for s in run.rotated(specs, i)] for i in range(4)] == [
        ["raw", "urllib3", "requests"],
        ["urllib3", "requests", "raw"],
        ["requests", "raw", "urllib3"],
        ["raw", "urllib3", "requests"],
    ]


def test_a_client_whose_package_is_missing_is_reported_not_installed() -> None:
    ghost = run.ClientSpec(
        "ghost", "ghost Client", "no_such_package_for_qa_min_tests", "import ghost", "import ghost"
    )
    installed, missing = run.available([run.BY_NAME["raw"], ghost])
    assert (installed, missing) == ([run.BY_NAME["raw"]], [ghost])
    results = run.Results(installed, missing)
    results.add_round({"raw": dict.fromkeys([*run.METRICS, "cpu_us@own", "calls_per_s@own"], 1.0)})
    settings = run.Settings(1, 1, 0, 8, 1, 1, 1, servers=[("own", "the own server")])
    assert "| ghost Client | not installed |" in "\n".join(report.table(results))
    assert "| ghost Client | not installed |" in "\n".join(report.per_server_table(results, settings))


def test_help_documents_the_measurements() -> None:
    proc = _run("-m", "benchmarks", "--help")
    assert proc.returncode == 0
    for text in ("--rounds", "--quick", "--clients", "--output", "--server", "nginx", "importtime", "RSS"):
        assert text in proc.stdout
    assert "benchmarks cold --help" in proc.stdout


# -- the whole command -----------------------------------------------------------------------

SMALL = ["--calls", "40", "--warmup", "5", "--thread-calls", "64", "--rss-calls", "20", "--import-runs", "1"]
SMALL += ["--server", "own"]


def test_quick_run_of_the_stdlib_clients_writes_a_row_for_each(tmp_path: Path) -> None:
    output = tmp_path / "RESULTS.md"
    output.write_text("# Kept\n\n<!-- begin steady -->\nold figures\n<!-- end steady -->\n\nAlso kept.\n")
    proc = _run(
        "-m", "benchmarks", "--quick", "--clients", ",".join(STDLIB_CLIENTS), *SMALL, "--output", str(output)
    )
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    labels = [row.split(" | ")[0][2:] for row in rows]
    assert labels[:4] == ["client", "raw http.client + json", "qa_min core()", "qa_min ask()"]
    assert "CPU µs/call, 1 thread, own" in rows[0]
    assert "not installed" not in proc.stdout
    assert "python -m benchmarks --quick --clients raw,qa_core,qa_ask" in proc.stdout
    assert f"Python: CPython {sys.version.split()[0]}" in proc.stdout
    assert "Servers: benchmarks/server.py (a selector loop" in proc.stdout
    assert "| core() CPU per call ≤ 1.00x raw, own |" in proc.stdout
    written = output.read_text()
    assert written.startswith("# Kept\n\n<!-- begin steady -->\n## Steady state\n")
    assert written.endswith("<!-- end steady -->\n\nAlso kept.\n")
    assert "old figures" not in written
    assert proc.stdout.strip() in written
    if Path("/proc/self/stat").exists():  # the server's load is read from /proc
        assert "% of one core" in proc.stdout


def test_whole_run_fails_with_status_1_when_the_server_answers_wrongly() -> None:
    proc = _run("-m", "benchmarks", "--quick", "--clients", "raw", *SMALL, "--wrong-answer", "--output", "-")
    assert proc.returncode == 1
    assert "FAILED" in proc.stderr
    assert "wrong answer" in proc.stderr
    assert "| raw" not in proc.stdout

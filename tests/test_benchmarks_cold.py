"""Tests of the cold-start mode (``python -m benchmarks cold``), its throwaway CA, the report's sections.

The children run against ``qa_min.testing.FakeService``; the quick run uses the own server, over
``https://`` too where the ``openssl`` command exists. Nothing here depends on how fast the
machine is.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import clients, cold, report, tls
from benchmarks.process import ROOT, ServerProcess, child_env
from benchmarks.server import MODELS_BODY
from benchmarks.servers import start_own
from qa_min.testing import FakeService

needs_openssl = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="the openssl command is not installed"
)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tls.Certificates:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    return tls.make_certificates(tmp_path_factory.mktemp("certs"))


def _env(**extra: str) -> dict[str, str]:
    return child_env(extra)


# -- the children of the cold-start mode -----------------------------------------------------


@pytest.mark.parametrize("name", cold.NAMES)
def test_cold_children_send_the_same_request_and_report_their_peak_rss(name: str) -> None:
    with FakeService() as svc:
        svc.set_answers({"toxic": True, "tone": "formal", "quality": 2})
        run = cold.run_child(sys.executable, cold.child_code(name, svc.url), _env())
        (recorded,) = svc.requests
    assert (recorded.method, recorded.path) == ("POST", "/v1/core")
    assert recorded.json() == clients.PAYLOAD
    assert recorded.headers["content-type"] == "application/json"
    assert run.wall_s > 0
    assert run.cpu_s > 0
    assert 1024 < run.peak_kib < 1024 * 1024  # an interpreter: some MiB, not the runner's GiB


@pytest.mark.parametrize("name", cold.NAMES)
def test_cold_children_fail_on_a_wrong_answer(name: str) -> None:
    with FakeService() as svc:
        svc.set_answers({"toxic": False, "tone": "formal", "quality": 2})
        with pytest.raises(cold.ColdFailed, match="wrong answer"):
            cold.run_child(sys.executable, cold.child_code(name, svc.url), _env())


def test_cold_child_code_rejects_an_unknown_client() -> None:
    with pytest.raises(ValueError, match="unknown cold-start client 'curl'"):
        cold.child_code("curl", "http://127.0.0.1:9")


def test_cold_results_compare_each_round_with_its_own_raw_run() -> None:
    results = cold.ColdResults(["http"], ["raw", "qa_core"])
    for raw_wall, qa_wall, raw_kib, qa_kib in ((0.040, 0.042, 18000, 18512), (0.080, 0.080, 18000, 18000)):
        results.runs["http", "raw"].append(cold.Run(raw_wall, raw_wall, raw_kib))
        results.runs["http", "qa_core"].append(cold.Run(qa_wall, qa_wall / 2, qa_kib))
    assert results.wall_ratios("http", "qa_core") == pytest.approx([1.05, 1.0])
    assert results.cpu_ratios("http", "qa_core") == pytest.approx([0.525, 0.5])
    assert results.rss_differences("http", "qa_core") == pytest.approx([0.5, 0.0])
    assert results.median_wall_ms("http", "qa_core") == pytest.approx(61.0)


# -- the throwaway CA ------------------------------------------------------------------------


@needs_openssl
def test_throwaway_ca_passes_strict_verification_for_127_0_0_1_and_localhost(
    certs: tls.Certificates,
) -> None:
    context = ssl.create_default_context(cafile=certs.ca)
    context.verify_flags |= getattr(ssl, "VERIFY_X509_STRICT", 0)  # Python 3.13's default
    with _tls_server(certs) as server:
        for host in ("127.0.0.1", "localhost"):
            port = int(server.tls_url.rpartition(":")[2]) if server.tls_url else 0
            conn = http.client.HTTPSConnection(host, port, context=context, timeout=10)
            conn.request("GET", "/v1/models")
            assert conn.getresponse().read() == MODELS_BODY
            conn.close()


@needs_openssl
def test_an_untrusted_client_is_refused_by_the_tls_server(certs: tls.Certificates) -> None:
    with _tls_server(certs) as server:
        assert server.tls_url is not None
        port = int(server.tls_url.rpartition(":")[2])
        conn = http.client.HTTPSConnection(
            "127.0.0.1", port, context=ssl.create_default_context(), timeout=10
        )
        with pytest.raises(ssl.SSLCertVerificationError):
            conn.request("GET", "/v1/models")
        conn.close()


def test_make_certificates_says_when_openssl_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    with pytest.raises(tls.CertificateError, match="openssl command is not installed"):
        tls.make_certificates(tmp_path)
    assert cold.certificates(tmp_path) == (
        None,
        None,
        "https:// not measured: the openssl command is not installed",
    )


def _tls_server(certs: tls.Certificates) -> contextlib.AbstractContextManager[ServerProcess]:
    return start_own(tls=(certs.cert, certs.key))


# -- the command and its sections -----------------------------------------------------------


def test_write_section_replaces_only_its_own_section(tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    report.write_section(path, "cold", "## Cold start\nfirst")
    assert path.read_text() == "<!-- begin cold -->\n## Cold start\nfirst\n<!-- end cold -->\n"
    report.write_section(path, "steady", "## Steady state")
    report.write_section(path, "cold", "## Cold start\nsecond")
    assert path.read_text() == (
        "<!-- begin cold -->\n## Cold start\nsecond\n<!-- end cold -->\n\n"
        "<!-- begin steady -->\n## Steady state\n<!-- end steady -->\n"
    )


@pytest.fixture(scope="module")
def quick_cold(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    output = tmp_path_factory.mktemp("cold") / "RESULTS.md"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "cold",
            "--rounds",
            "1",
            "--server",
            "own",
            "--output",
            str(output),
        ],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=25,
        check=False,
    )
    return proc, output


def test_cold_run_reports_every_client_against_raw(
    quick_cold: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    proc, output = quick_cold
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    labels = [row.split(" | ")[0][2:] for row in rows[:4]]
    assert labels == ["client", "raw http.client + json", "qa_min core()", "qa_min ask()"]
    assert rows[1].split(" | ")[2:4] == ["1.000x", "1.00-1.00; 1.00-1.00"]  # raw against itself
    assert "python -m benchmarks cold --rounds 1 --server own" in proc.stdout
    assert "Server: benchmarks/server.py, " in proc.stdout
    assert "| qa_min core() over http:// wall ≤ 1.05x raw |" in proc.stdout
    assert "| qa_min ask() over http:// peak RSS ≤ raw + 1.0 MiB |" in proc.stdout
    assert output.read_text() == f"<!-- begin cold -->\n{proc.stdout.strip()}\n<!-- end cold -->\n"


def test_cold_run_measures_https_with_the_throwaway_ca_when_openssl_exists(
    quick_cold: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    proc, _ = quick_cold
    if shutil.which("openssl") is None:
        assert "https:// not measured: the openssl command is not installed" in proc.stdout
    else:
        assert "HTTP and HTTPS (a throwaway CA made with `openssl` for the run)" in proc.stdout
        assert "| qa_min core() over https:// wall ≤ 1.05x raw |" in proc.stdout


def test_a_failing_cold_child_is_named_with_its_output() -> None:
    with FakeService() as svc:
        svc.set_answers({"toxic": False, "tone": "formal", "quality": 2})
        with pytest.raises(cold.ColdFailed, match=r"raw over http: exit status 1:\nwrong answer: \(False"):
            cold.measure(sys.executable, {"http": svc.url}, cold.NAMES, 1, _env(), progress=False)


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--server", "both"]])
def test_cold_options_are_checked(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import cli

    with pytest.raises(SystemExit) as caught:
        cli.parse_cold_args(argv)
    assert caught.value.code == 2
    assert ("at least 1" if "0" in argv else "uses one server") in capsys.readouterr().err


def test_import_profile_names_what_qa_min_loads_beyond_raw(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cold, "PROFILE_RUNS", 2)  # the medians of two: enough to test, and fast
    with FakeService() as svc:
        svc.set_answers({"toxic": True, "tone": "formal", "quality": 2})
        profile = cold.import_profile(sys.executable, svc.url, _env())
    names = [module for module, _, _ in profile]
    assert "qa_min" in names
    assert "qa_min._client" in names
    assert "http.client" not in names  # raw loads it too
    assert all(own >= 0 and total >= own for _, own, total in profile)
    assert json.dumps(profile)  # plain data

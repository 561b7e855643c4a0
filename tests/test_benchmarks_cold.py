"""Tests of the cold-start mode, nginx, the throwaway CA, the choice of server, the report's sections.

nginx and the ``openssl`` command are used where installed; a test that needs one is skipped
with the reason otherwise. Nothing here depends on how fast the machine is.
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

from benchmarks import clients, cold, nginx, report, servers, tls
from benchmarks.process import ROOT, ServerProcess, child_env
from benchmarks.server import CORE_BODY, MODELS_BODY, NOT_ALLOWED_BODY, NOT_FOUND_BODY
from qa_min.testing import FakeService

needs_openssl = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="the openssl command is not installed"
)


def _nginx_or_none() -> str | None:
    try:
        found = nginx.find_nginx()
        nginx.version(found)
    except nginx.NginxNotFound:
        return None
    return found


needs_nginx = pytest.mark.skipif(_nginx_or_none() is None, reason="nginx (1.19.5+) is not installed")


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
    return servers.start_own(tls=(certs.cert, certs.key))


# -- nginx ----------------------------------------------------------------------------------


def test_nginx_config_answers_like_the_own_server_and_skips_modules_left_out() -> None:
    text = nginx.config(Path("/d"), 8080, False, ("c.pem", "k.pem", 8443), "--without-http_uwsgi_module")
    assert "listen 127.0.0.1:8080;" in text
    assert "listen 127.0.0.1:8443 ssl;" in text
    assert "ssl_certificate c.pem;" in text
    assert f"return 200 '{CORE_BODY.decode()}';" in text
    assert f"return 200 '{MODELS_BODY.decode()}';" in text
    assert f"return 405 '{NOT_ALLOWED_BODY.decode()}';" in text
    assert f"return 404 '{NOT_FOUND_BODY.decode()}';" in text
    assert "scgi_temp_path /d/scgi;" in text
    assert "uwsgi_temp_path" not in text
    assert "daemon off;" in text
    assert "master_process off;" in text
    wrong = nginx.config(Path("/d"), 8080, True, None, "")
    assert '"toxic": false' in wrong
    assert " ssl;" not in wrong


def test_find_nginx_names_a_missing_explicit_binary() -> None:
    with pytest.raises(nginx.NginxNotFound, match="no-such-nginx-binary is not an executable"):
        nginx.find_nginx("no-such-nginx-binary")


def test_server_choice_falls_back_to_the_own_server_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(binary: object = None) -> str:
        raise nginx.NginxNotFound("nginx is not installed (apt-get install nginx-light)")

    monkeypatch.setattr(nginx, "find_nginx", missing)
    starters, note = servers.choose("auto")
    assert [s.key for s in starters] == ["own"]
    assert (
        note == "nginx not used (nginx is not installed (apt-get install nginx-light)): the own server only."
    )
    assert [s.key for s in servers.choose("own")[0]] == ["own"]
    for choice in ("nginx", "both"):
        with pytest.raises(nginx.NginxNotFound):
            servers.choose(choice)


def test_requiring_nginx_that_is_missing_exits_2_with_the_reason() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--server", "nginx", "--nginx", "no-such-nginx-binary"],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=20,
        check=False,
    )
    assert proc.returncode == 2
    assert "no-such-nginx-binary is not an executable" in proc.stderr


@needs_nginx
def test_nginx_answers_exactly_like_the_own_server(certs: tls.Certificates) -> None:
    requests = [("POST", "/v1/core"), ("GET", "/v1/models"), ("GET", "/v1/core"), ("GET", "/nowhere")]
    answers = {}
    for starter in servers.choose("both")[0]:
        with starter.start(tls=(certs.cert, certs.key)) as server:
            answers[starter.key] = _ask(server.url, requests)
            assert server.tls_url is not None
            answers[starter.key + " tls"] = _ask(server.tls_url, requests[:1], certs.ca)
            assert server.cpu_seconds() is not None or not Path("/proc").exists()
    assert answers["nginx"] == answers["own"]
    assert answers["nginx"][0] == (200, "application/json", CORE_BODY)
    assert answers["nginx tls"] == answers["own tls"] == [(200, "application/json", CORE_BODY)]


def _ask(url: str, requests: list[tuple[str, str]], ca: str | None = None) -> list[tuple[int, str, bytes]]:
    host, _, port = url.partition("://")[2].rpartition(":")
    if ca is None:
        conn: http.client.HTTPConnection = http.client.HTTPConnection(host, int(port), timeout=10)
    else:
        context = ssl.create_default_context(cafile=ca)
        conn = http.client.HTTPSConnection(host, int(port), context=context, timeout=10)
    found = []
    for method, path in requests:  # one kept-alive connection for all
        conn.request(method, path, b"{}" if method == "POST" else None)
        response = conn.getresponse()
        found.append((response.status, response.getheader("content-type", ""), response.read()))
    conn.close()
    return found


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
    assert rows[1].split(" | ")[2] == "1.000x (1.00-1.00)"  # raw against itself
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


def test_import_profile_names_what_qa_min_loads_beyond_raw() -> None:
    with FakeService() as svc:
        svc.set_answers({"toxic": True, "tone": "formal", "quality": 2})
        profile = cold.import_profile(sys.executable, svc.url, _env())
    names = [module for module, _, _ in profile]
    assert "qa_min" in names
    assert "qa_min._client" in names
    assert "http.client" not in names  # raw loads it too
    assert all(own >= 0 and total >= own for _, own, total in profile)
    assert json.dumps(profile)  # plain data

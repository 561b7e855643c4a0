"""Every numeric and path option of every subcommand: a bad value is a clear error, never a traceback.

``qa-min fake --port 99999`` once printed a misleading "Address already in use" and an
``OverflowError`` traceback. Each option is tried just past its limit (and, where it has one,
at it): a value argparse can judge is a usage error (exit 2, "argument --opt: ..."); a file that
cannot be used is the documented "invalid input" (exit 3, ``FileError`` or ``InvalidQuestion``);
two options naming one file, or ``--resume`` of a device, a usage error. ``main`` runs in this
process, so any exception it let out would fail the test; a few run as a child process as well,
to see that stderr holds no traceback.
"""

from __future__ import annotations

import _thread
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from batchsupport import QUESTION, Result, child_env, clean_env, run_main, start_batch
from support import wait_until

from qa_min._cli import _parser
from qa_min.testing import FakeService, reply


@pytest.fixture(autouse=True)
def _isolate(monkeypatch: pytest.MonkeyPatch) -> None:
    clean_env(monkeypatch)


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, str]:
    """Stand-ins used in the argv below: an input of two lines, a directory, a missing directory."""
    source = tmp_path / "in.jsonl"
    source.write_text('"first state"\n"second state"\n')
    return {
        "IN": str(source),
        "DIR": str(tmp_path),
        "NODIR": str(tmp_path / "missing" / "file.jsonl"),
        "OUT": str(tmp_path / "out.jsonl"),
    }


def main_with(capsys: pytest.CaptureFixture[str], argv: list[str], paths: dict[str, str], url: str) -> Result:
    filled = [paths.get(a, url if a == "URL" else a) for a in argv]
    result = run_main(capsys, *filled)
    assert "Traceback" not in result.err
    return result


BAD_NUMBERS = [
    (["--timeout", "0", "models"], "argument --timeout: must be a finite number > 0"),
    (["--timeout", "-1", "models"], "argument --timeout: must be a finite number > 0"),
    (["--timeout", "nan", "models"], "argument --timeout: must be a finite number > 0"),
    (["--timeout", "inf", "models"], "argument --timeout: must be a finite number > 0"),
    (["--timeout", "1e10", "models"], "argument --timeout: must be <= 9.22337e+09 seconds"),
    (["--timeout", "soon", "models"], "argument --timeout: not a number"),
    (["models", "--timeout", "1e400"], "argument --timeout: must be a finite number > 0"),
    (["--retries", "-1", "models"], "argument --retries: must be >= 0"),
    (["--retries", "1001", "models"], "argument --retries: must be <= 1000"),
    (["--retries", "1" + "0" * 30, "models"], "argument --retries: must be <= 1000"),
    (["--retries", "1.5", "models"], "argument --retries: not an integer"),
    (["ask", "--retries", "1001", "x", *QUESTION], "argument --retries: must be <= 1000"),
    (["batch", "IN", "--concurrency", "0", *QUESTION], "argument --concurrency: must be >= 1"),
    (["batch", "IN", "--concurrency", "257", *QUESTION], "argument --concurrency: must be <= 256"),
    (["batch", "IN", "--max-rate", "0", *QUESTION], "argument --max-rate: must be a finite number > 0"),
    (["batch", "IN", "--max-rate", "inf", *QUESTION], "argument --max-rate: must be a finite number > 0"),
    (["batch", "IN", "--max-rate", "fast", *QUESTION], "argument --max-rate: not a number"),
    (
        ["batch", "IN", "--max-rate", "5e-309", *QUESTION],
        "argument --max-rate: 1 / R, the seconds between requests, must be at most 1.79769e+308, "
        "got '5e-309'",
    ),
    (["fake", "--port", "99999"], "argument --port: must be <= 65535, got 99999"),
    (["fake", "--port", "65536"], "argument --port: must be <= 65535, got 65536"),
    (["fake", "--port", "-1"], "argument --port: must be >= 0"),
    (["fake", "--port", "http"], "argument --port: not an integer"),
    (["fake", "--rate-limit", "0", "5"], "argument --rate-limit: must be a finite number > 0"),
    (["fake", "--rate-limit", "5", "nan"], "argument --rate-limit: must be a finite number > 0"),
    (["fake", "--rate-limit", "5", "0.5"], "argument --rate-limit: BURST must be >= 1, got 0.5"),
    (
        ["fake", "--rate-limit", "1", "10000000001"],
        "argument --rate-limit: BURST / RATE, the seconds the bucket takes to fill, must be <= 1e+10, "
        "got 10000000001",
    ),
    (["fake", "--rate-limit", "1e-310", "1"], "argument --rate-limit: BURST / RATE, the seconds the bucket"),
    (
        ["fake", "--announce", "openai"],
        "qa-min fake: error: argument --announce: openai needs --rate-limit RATE BURST, the limit",
    ),
]


@pytest.mark.parametrize(("argv", "words"), BAD_NUMBERS, ids=[" ".join(a) for a, _ in BAD_NUMBERS])
def test_a_bad_number_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], paths: dict[str, str], argv: list[str], words: str
) -> None:
    result = main_with(capsys, ["--base-url", "http://127.0.0.1:9", *argv], paths, "")
    assert result.code == 2, result.err
    assert words in result.err


def test_every_limit_itself_is_accepted() -> None:
    parse = _parser.build_parser().parse_args
    assert parse(["fake", "--port", "65535"]).port == 65535
    assert parse(["fake", "--port", "0"]).port == 0
    assert parse(["fake", "--rate-limit", "5", "1"]).rate_limit == (5.0, 1.0)
    assert parse(["fake", "--rate-limit", "1", "1e10"]).rate_limit == (1.0, 1e10)
    assert parse(["fake", "--rate-limit", "1e-10", "1"]).rate_limit == (1e-10, 1.0)
    assert parse(["--retries", "1000", "models"]).retries == 1000
    assert parse(["--timeout", repr(_thread.TIMEOUT_MAX), "models"]).timeout == _thread.TIMEOUT_MAX
    assert parse(["batch", "--concurrency", "256", *QUESTION]).concurrency == 256
    assert parse(["batch", "--max-rate", "1e-300", *QUESTION]).max_rate == pytest.approx(1e-300)
    assert parse(["batch", "--max-rate", "5.6e-309", *QUESTION]).max_rate == pytest.approx(5.6e-309)


def test_fake_defaults_are_those_its_help_names() -> None:
    args = _parser.build_parser().parse_args(["fake"])
    assert (args.host, args.port, args.prefix) == ("127.0.0.1", 8080, "")
    assert (args.rate_limit, args.retry_after, args.announce, args.api_key) == (None, "seconds", "none", None)


BAD_PATHS = [
    (["batch", "NODIR", *QUESTION], 3, "error: FileError: cannot read", "No such file"),
    (["batch", "DIR", *QUESTION], 3, "error: FileError: cannot read", "Is a directory"),
    (["batch", "IN", "-o", "NODIR", *QUESTION], 3, "error: FileError: cannot write", "No such file"),
    (["batch", "IN", "-o", "DIR", *QUESTION], 3, "error: FileError: cannot write", "Is a directory"),
    (["batch", "IN", "--failures", "NODIR", *QUESTION], 3, "error: FileError: cannot write", "No such file"),
    (["batch", "IN", "--failures", "DIR", *QUESTION], 3, "error: FileError: cannot write", "Is a directory"),
    (["batch", "IN", "-o", "IN", *QUESTION], 2, "--output", "is the input"),
    (["batch", "IN", "-o", "IN", "--resume", *QUESTION], 2, "--output", "is the input"),
    (["batch", "IN", "--failures", "IN", *QUESTION], 2, "--failures", "is the input"),
    (["batch", "IN", "-o", "OUT", "--failures", "OUT", *QUESTION], 2, "--failures", "is --output"),
    (["batch", "IN", "--questions", "NODIR"], 3, "cannot read questions file", "No such file"),
    (["batch", "IN", "--questions", "DIR"], 3, "cannot read questions file", "Is a directory"),
    (["ask", "x", "--questions", "NODIR"], 3, "cannot read questions file", "No such file"),
    (["ask", "x", "--questions", "DIR"], 3, "cannot read questions file", "Is a directory"),
]


@pytest.mark.parametrize(
    ("argv", "code", "where", "why"), BAD_PATHS, ids=[" ".join(a[:4]) for a, *_ in BAD_PATHS]
)
def test_a_path_that_cannot_be_used_is_refused_before_any_call(
    capsys: pytest.CaptureFixture[str],
    svc: FakeService,
    paths: dict[str, str],
    argv: list[str],
    code: int,
    where: str,
    why: str,
) -> None:
    before = Path(paths["IN"]).read_text()
    result = main_with(capsys, ["--base-url", "URL", *argv], paths, svc.url)
    assert result.code == code, result.err
    assert where in result.err
    assert why in result.err
    assert svc.requests == []
    assert Path(paths["IN"]).read_text() == before  # never overwritten


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_input_is_refused(
    capsys: pytest.CaptureFixture[str], svc: FakeService, paths: dict[str, str]
) -> None:
    os.chmod(paths["IN"], 0)
    result = main_with(capsys, ["--base-url", "URL", "batch", "IN", *QUESTION], paths, svc.url)
    assert result.code == 3
    assert "cannot read" in result.err
    assert "Permission denied" in result.err


full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")


@full
def test_an_output_that_cannot_take_a_line_is_a_file_error(
    capsys: pytest.CaptureFixture[str], svc: FakeService, paths: dict[str, str]
) -> None:
    # /dev/full was once read back as an earlier run's output, forever: zeros, never a newline.
    result = main_with(
        capsys, ["--base-url", "URL", "batch", "IN", "-o", "/dev/full", *QUESTION], paths, svc.url
    )
    assert result.code == 3
    assert "error: FileError: cannot write '/dev/full': No space left on device" in result.err
    resumed = main_with(capsys, ["batch", "IN", "-o", "/dev/full", "--resume", *QUESTION], paths, svc.url)
    assert resumed.code == 2
    assert "--resume needs a regular file to continue; '/dev/full' is not one" in resumed.err


@full
def test_a_failures_file_that_cannot_take_a_line_is_a_file_error(
    capsys: pytest.CaptureFixture[str], svc: FakeService, paths: dict[str, str]
) -> None:
    svc.script(reply(404, {"detail": "no"}))
    argv = ["--base-url", "URL", "batch", "IN", "--failures", "/dev/full", "--concurrency", "1", *QUESTION]
    result = main_with(capsys, argv, paths, svc.url)
    assert result.code == 3
    assert "error: FileError: cannot write '/dev/full': No space left on device" in result.err


def test_dev_null_may_take_both_outputs(
    capsys: pytest.CaptureFixture[str], svc: FakeService, paths: dict[str, str]
) -> None:
    argv = ["--base-url", "URL", "batch", "IN", "-q", "-o", os.devnull, "--failures", os.devnull, *QUESTION]
    assert main_with(capsys, argv, paths, svc.url).code == 0


def run_child(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "qa_min", *argv],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=25,
        check=False,
    )


@pytest.mark.parametrize("port", ["99999", "65536"])
def test_fake_with_a_port_out_of_range_prints_a_usage_error(port: str) -> None:
    proc = run_child("fake", "--port", port)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "Address already in use" not in proc.stderr
    assert (
        proc.stderr.splitlines()[-1] == f"qa-min fake: error: argument --port: must be <= 65535, got {port}"
    )


def test_fake_on_a_host_that_does_not_resolve_says_so_without_a_traceback() -> None:
    proc = run_child("fake", "--host", "no such host.invalid", "--port", "0")
    assert proc.returncode == 1  # EXIT_CODES: fake cannot listen on the address
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: cannot listen on no such host.invalid:0: ")


@pytest.mark.timeout(60)
def test_a_tiny_max_rate_waits_instead_of_overflowing(svc: FakeService, tmp_path: Path) -> None:
    # One call per 1e300 s: the second waits longer than a lock accepts (it raised OverflowError
    # in a worker, and batch died with a traceback). It now waits until interrupted.
    source = tmp_path / "in.jsonl"
    source.write_text('"first state"\n"second state"\n')
    out = tmp_path / "out.jsonl"
    argv = ["--base-url", svc.url, "batch", str(source), "-o", str(out), "--max-rate", "1e-300"]
    proc = start_batch(*argv, "--concurrency", "1", "-q", *QUESTION)
    try:
        assert wait_until(
            lambda: (out.exists() and out.read_text().count("\n") == 1) or proc.poll() is not None
        )
        assert proc.poll() is None, proc.communicate()[1]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "Traceback" not in err
    assert "OverflowError" not in err
    assert proc.returncode == 130, err
    assert "interrupted: 1 input lines done" in err


@pytest.mark.parametrize("good", [6, 7, 8], ids=["7 chars", "8 chars", "9 chars"])
@pytest.mark.parametrize("where", ["--api-key", "SERVICE_API_KEY"])
def test_a_key_that_is_not_utf8_is_refused_not_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, good: int, where: str
) -> None:
    # Undecodable bytes in argv or the environment arrive as surrogates; the scrubber of the
    # command's output was built from such a key before the client refused it, and raised
    # UnicodeEncodeError (a key shorter than 8 characters, or one whose last 4 held one).
    key = "k" * good + "\udcff"
    monkeypatch.delenv("SERVICE_API_KEY", raising=False)
    argv = ["--base-url", "http://127.0.0.1:9", "models"]
    if where == "--api-key":
        argv = ["--api-key", key, *argv]
    else:
        monkeypatch.setenv("SERVICE_API_KEY", key)
    result = run_main(capsys, *argv)
    assert "Traceback" not in result.err
    assert result.code == 3, result.err
    named = where.lstrip("-").replace("-", "_")
    assert f"error: InvalidOption: {named} holds a surrogate (U+DCFF) at index {good}" in result.err


@pytest.mark.parametrize("option", ["--prefix", "--host"])
def test_a_fake_prefix_or_host_that_is_not_utf8_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], option: str
) -> None:
    # FakeService raised UnicodeEncodeError (prefix) or TypeError (host, at bind): a traceback.
    result = run_main(capsys, "fake", option, "/p\udcff", "--port", "0")
    assert "Traceback" not in result.err
    assert result.code == 2, result.err
    assert f"argument {option}: is not UTF-8: '/p\\udcff', at index 2" in result.err

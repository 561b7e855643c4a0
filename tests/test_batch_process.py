"""Tests of ``qa-min batch`` as a process: SIGINT, SIGTERM and ``kill -9`` then ``--resume``, the
command it prints, and its progress on a terminal and off one."""

from __future__ import annotations

import io
import json
import os
import pty
import queue
import re
import select
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from batchsupport import (
    QUESTION,
    answer,
    asked,
    child_env,
    clean_env,
    line_count,
    read_rows,
    run_main,
    start_batch,
    write_input,
)
from support import wait_until

from qa_min._cli import _batch, _output, _progress
from qa_min._cli._parser import build_parser
from qa_min.testing import FakeService, delay, hang

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and terminals")

STATES = [f"state number {i}" for i in range(20)]
ANSWERED = 5  # lines answered before the service stops answering
CONCURRENCY = 2


@pytest.fixture(autouse=True)
def _isolate(monkeypatch: pytest.MonkeyPatch) -> None:
    clean_env(monkeypatch)
    monkeypatch.setattr(sys, "stdin", sys.stdin)


class Stalled(NamedTuple):
    proc: subprocess.Popen[str]
    inp: Path
    out: Path
    written: int  # the lines before the first hung one


def stalled_run(svc: FakeService, tmp_path: Path, *options: str) -> Stalled:
    """A batch process whose service answered ``ANSWERED`` calls and holds the next ``CONCURRENCY``;
    ``options`` go before the command."""
    inp = write_input(tmp_path / "in.jsonl", STATES)
    out = tmp_path / "out.jsonl"
    svc.script(*[delay(0)] * ANSWERED, *[hang()] * CONCURRENCY)
    argv = [
        "--base-url",
        svc.url,
        *options,
        "batch",
        str(inp),
        "-o",
        str(out),
        "--concurrency",
        str(CONCURRENCY),
    ]
    proc = start_batch(*argv, *QUESTION)
    assert svc.wait_for_requests(ANSWERED + CONCURRENCY, timeout=10)
    # Steps go to requests in arrival order, which two calls in flight may swap: the hung
    # calls are the last two to arrive, and every line before the first of them is answered.
    hung = [r.json()["state"] for r in svc.requests[ANSWERED:]]
    written = min(STATES.index(s) for s in hung)
    assert wait_until(lambda: line_count(out) == written, timeout=10)
    return Stalled(proc, inp, out, written)


def finish(proc: subprocess.Popen[str]) -> str:
    try:
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return err


def assert_complete_after_resume(svc: FakeService, run: Stalled, command: list[str], **env: str) -> None:
    resumed = subprocess.run(
        command, capture_output=True, text=True, env={**child_env(), **env}, timeout=20, check=False
    )
    assert resumed.returncode == 0, resumed.stderr
    assert read_rows(run.out) == [{"line": n, "answers": answer(s)} for n, s in enumerate(STATES, 1)]
    counts = asked(svc)
    assert set(counts) == set(STATES)
    # Only the lines asked but not written before the stop were asked twice.
    assert sorted(s for s, n in counts.items() if n > 1) == sorted(
        STATES[run.written : ANSWERED + CONCURRENCY]
    )


@pytest.mark.parametrize(
    ("signum", "code", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
    ids=["sigint", "sigterm"],
)
def test_signal_writes_the_answers_cancels_the_rest_and_prints_the_resume_command(
    svc: FakeService, tmp_path: Path, signum: int, code: int, word: str
) -> None:
    run = stalled_run(svc, tmp_path)
    run.proc.send_signal(signum)
    err = finish(run.proc)
    assert run.proc.returncode == code, err
    assert read_rows(run.out) == [
        {"line": n, "answers": answer(s)} for n, s in enumerate(STATES[: run.written], 1)
    ]
    *_, stopped, resume, command = err.splitlines()
    assert stopped == (
        f"{word}: {run.written} input lines done, their answers in {str(run.out)!r}; "
        f"{ANSWERED + CONCURRENCY - run.written} lines read but not written are asked again on resume"
    )
    assert resume == "resume with:"
    argv = shlex.split(command)
    assert argv[:3] == [sys.executable, "-m", "qa_min"]
    assert argv[-1] == "--resume"
    assert str(run.inp) in argv
    assert_complete_after_resume(svc, run, argv)


def test_the_printed_resume_command_holds_no_key_and_runs_with_the_key_from_the_environment(
    tmp_path: Path,
) -> None:
    # The key given with --api-key was printed as `--api-key [redacted]`, which got 401s.
    with FakeService(api_key=KEY) as svc:
        run = stalled_run(svc, tmp_path, "--api-key", KEY)
        run.proc.send_signal(signal.SIGINT)
        err = finish(run.proc)
        assert run.proc.returncode == 130, err
        assert KEY not in err
        assert "[redacted]" not in err
        *_, resume, command, note = err.splitlines()
        assert resume == "resume with:"
        assert note == (
            "the key given with --api-key is left out of it: set SERVICE_API_KEY, or add --api-key KEY"
        )
        argv = shlex.split(command)
        assert not [word for word in argv if word.startswith("--a")]
        assert_complete_after_resume(svc, run, argv, SERVICE_API_KEY=KEY)


def test_kill_9_loses_only_what_was_in_flight(svc: FakeService, tmp_path: Path) -> None:
    run = stalled_run(svc, tmp_path)
    run.proc.kill()
    finish(run.proc)
    assert line_count(run.out) == run.written
    command = [sys.executable, "-m", "qa_min", *run.proc.args[3:], "--resume"]  # type: ignore[index]
    assert_complete_after_resume(svc, run, command)


def test_a_second_signal_exits_at_once(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    exits: list[int] = []
    monkeypatch.setattr(os, "_exit", exits.append)
    batch: Any = _batch._Batch.__new__(_batch._Batch)
    batch.signal = None
    batch.wakeups = queue.SimpleQueue()
    batch.on_signal(signal.SIGINT, None)
    assert (batch.signal, exits) == (signal.SIGINT, [])
    assert batch.wakeups.get_nowait() == ("signal", signal.SIGINT)
    batch.on_signal(signal.SIGINT, None)
    assert exits == [130]
    assert "second interrupt: exiting now" in capfd.readouterr().err


@pytest.mark.parametrize(
    ("argv0", "argv", "expected"),
    [
        (
            "/x/qa_min/__main__.py",
            ["batch", "in.jsonl", "-o", "o"],
            [sys.executable, "-m", "qa_min", "batch", "in.jsonl", "-o", "o", "--resume"],
        ),
        (
            "/bin/qa-min",
            ["batch", "-o", "o", "--score", "q", "a", "b", "--", "-in"],
            ["/bin/qa-min", "batch", "-o", "o", "--score", "q", "a", "b", "--resume", "--", "-in"],
        ),
        ("qa-min", ["batch", "-o", "o o", "--resume"], ["qa-min", "batch", "-o", "o o", "--resume"]),
    ],
    ids=["python-m", "before-dashes", "already-resuming"],
)
def test_resume_command(
    monkeypatch: pytest.MonkeyPatch, argv0: str, argv: list[str], expected: list[str]
) -> None:
    # sys.argv as the run had it: the command starts with its first word, the program.
    monkeypatch.setattr(sys, "argv", [argv0, *argv])
    command, key_left_out = _output.resume_command(argv)
    assert shlex.split(command) == expected
    assert key_left_out is False


KEY = "sk-never-printed-42"


@pytest.mark.parametrize(
    ("argv", "kept"),
    [
        (["--api-key", KEY, "batch", "in", "-o", "o"], ["batch", "in", "-o", "o"]),
        (["batch", "in", "-o", "o", "--api-key", KEY], ["batch", "in", "-o", "o"]),
        (["--api-key=" + KEY, "batch", "in", "-o", "o"], ["batch", "in", "-o", "o"]),
        (["batch", "--api-key=" + KEY, "in", "-o", "o"], ["batch", "in", "-o", "o"]),
        (["--api", KEY, "batch", "in", "-o", "o"], ["batch", "in", "-o", "o"]),
        (["batch", "in", "--a=" + KEY, "-o", "o"], ["batch", "in", "-o", "o"]),
        (["--api-key", KEY, "batch", "in", "-o", "o", "--api-k", KEY], ["batch", "in", "-o", "o"]),
        (["batch", "-o", "o", "--api-key", KEY, "--", "--api-key"], ["batch", "-o", "o", "--", "--api-key"]),
    ],
    ids=["before-command", "after-command", "equals", "equals-after-command", "prefix", "shortest-prefix",
         "twice", "then-a-file-named-like-it"],
)  # fmt: skip
def test_resume_command_leaves_out_the_api_key_in_every_spelling(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], kept: list[str]
) -> None:
    # It printed `--api-key [redacted]`: pasted as printed, every call got 401.
    assert build_parser().parse_args(argv).api_key == KEY  # a spelling argparse takes
    monkeypatch.setattr(sys, "argv", ["/x/qa_min/__main__.py"])
    command, key_left_out = _output.resume_command(argv)
    assert KEY not in command
    words = shlex.split(command)
    resumed = kept[:]
    resumed.insert(resumed.index("--") if "--" in resumed else len(resumed), "--resume")
    assert words == [sys.executable, "-m", "qa_min", *resumed]
    assert build_parser().parse_args(words[3:]).api_key is None
    assert key_left_out is True


@pytest.mark.parametrize("word", ["--", "-a", "--b=" + KEY, "--api-keys"])
def test_resume_command_keeps_what_is_not_the_api_key_option(word: str) -> None:
    # "--a" is the shortest prefix argparse takes for --api-key; "--" and "-a" are not it.
    argv = ["batch", "-o", "o", word]
    assert _output.without_api_key(argv) == (argv, False)


# -- progress -------------------------------------------------------------------------------------


def test_progress_is_one_redrawn_line_on_a_terminal(
    capsys: pytest.CaptureFixture[str], svc: FakeService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inp = write_input(tmp_path / "in.jsonl", STATES[:3])
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as terminal:
        monkeypatch.setattr(sys, "stderr", terminal)
        monkeypatch.setattr(_progress, "REDRAW_EVERY", 0.0)
        result = run_main(capsys, "--base-url", svc.url, "batch", str(inp), *QUESTION)
        shown = b""
        while select.select([master], [], [], 0)[0]:
            shown += os.read(master, 65536)
    os.close(master)
    assert result.code == 0
    text = shown.decode()
    assert "\r3/3 lines (100.0%) | " in text
    assert "\x1b[K" in text  # each redraw clears the rest of the line
    assert "\n" not in text.split("3/3 lines")[0]  # one line, redrawn, until the end
    assert re.search(r"\r\nbatch: 3 lines in \d+s: 3 answered, 0 failed\r\n\Z", text)


@pytest.mark.parametrize("quiet", [False, True], ids=["plain", "quiet"])
def test_progress_is_plain_lines_off_a_terminal_and_nothing_when_quiet(
    capsys: pytest.CaptureFixture[str],
    svc: FakeService,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    quiet: bool,
) -> None:
    inp = write_input(tmp_path / "in.jsonl", STATES[:3])
    monkeypatch.setattr(_progress, "PLAIN_EVERY", 0.0)
    flag = ["-q"] if quiet else []
    result = run_main(capsys, "--base-url", svc.url, "batch", str(inp), *flag, *QUESTION)
    assert result.code == 0
    if quiet:
        assert result.err == ""
        return
    lines = result.err.splitlines()
    assert "\r" not in result.err
    # The last redraw may come before the reader has seen the end of the input: then "~3".
    assert lines[-2].startswith(("3/3 lines (100.0%) | ", "3/~3 lines (100.0%) | "))
    assert re.fullmatch(r"batch: 3 lines in \d+s: 3 answered, 0 failed", lines[-1])


def test_progress_line_estimates_the_total_then_counts_it() -> None:
    now = [100.0]
    tally = _progress.Tally()
    total: list[tuple[int, bool] | None] = [None]
    progress = _progress.Progress(
        sys.__stderr__ or sys.stderr, tally, lambda: total[0], quiet=True, clock=lambda: now[0]
    )
    assert progress.line() == "0/? lines | 0/s | 0 failed"
    now[0], tally.done, tally.failed, tally.retries = 105.0, 250, 2, 7
    total[0] = (1000, False)
    assert progress.line() == "250/~1,000 lines (25.0%) | 50/s | 2 failed | 7 retries | ETA 15s"
    tally.skipped = 50
    total[0] = (1000, True)
    assert (
        progress.line() == "250/1,000 lines (25.0%) | 40/s | 50 done before | 2 failed | 7 retries | ETA 18s"
    )


def test_progress_line_shows_busy_replies_and_the_rate_ceiling_when_known() -> None:
    tally = _progress.Tally()
    stream = sys.__stderr__ or sys.stderr
    ceiling: list[float | None] = [None]
    progress = _progress.Progress(
        stream, tally, lambda: (10, True), quiet=True, clock=lambda: 0.0, ceiling=lambda: ceiling[0]
    )
    tally.busy = 3
    assert progress.line() == "0/10 lines (0.0%) | 0/s | 0 failed | 3 busy replies"
    ceiling[0] = 190.0
    assert progress.line() == "0/10 lines (0.0%) | 0/s | 0 failed | 3 busy replies | limit 190/s"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.4, "0s"), (59.9, "59s"), (60, "1m0s"), (3599, "59m59s"), (3600, "1h0m"), (7140, "1h59m"),
        (7199, "1h59m"), (90061, "25h1m"),
    ],
)  # fmt: skip
def test_duration(seconds: float, text: str) -> None:
    assert _progress.duration(seconds) == text


class _Shown(io.StringIO):
    """A stream that keeps what was flushed: what a terminal shows, or a reader of the log gets."""

    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty, self.shown = tty, ""

    def isatty(self) -> bool:
        return self.tty

    def flush(self) -> None:
        self.shown = self.getvalue()


def _progress_at(now: list[float], tty: bool, quiet: bool = False) -> tuple[_progress.Progress, _Shown]:
    stream = _Shown(tty)
    return _progress.Progress(stream, _progress.Tally(), lambda: None, quiet, clock=lambda: now[0]), stream


@pytest.mark.parametrize(("tty", "every"), [(True, 0.1), (False, 5.0)], ids=["terminal", "plain"])
def test_progress_is_drawn_every_tenth_of_a_second_on_a_terminal_and_every_5_seconds_off_one(
    tty: bool, every: float
) -> None:
    # docs/batch.md: "redrawn in place on a terminal, a plain line every 5 seconds otherwise";
    # the interval counts from the last drawing, and what is drawn is flushed at once.
    now = [0.0]
    progress, stream = _progress_at(now, tty)
    drawn = "\r0/? lines | 0/s | 0 failed\x1b[K" if tty else "0/? lines | 0/s | 0 failed\n"
    for at, times in [(every - 0.001, 0), (every, 1), (2 * every - 0.001, 1), (2 * every, 2)]:
        now[0] = at
        progress.tick()
        assert (stream.getvalue(), stream.shown) == (drawn * times, drawn * times), at


def test_progress_clears_its_line_for_a_message_only_on_a_terminal_and_when_not_quiet() -> None:
    now = [0.0]
    for tty, quiet, wiped in [(True, False, "\r\x1b[K"), (False, False, ""), (True, True, "")]:
        progress, stream = _progress_at(now, tty, quiet)
        progress.clear()
        assert (stream.getvalue(), stream.shown) == (wiped, wiped), (tty, quiet)


def test_progress_finish_on_a_terminal_draws_the_last_state_then_the_summary() -> None:
    now = [0.0]
    progress, stream = _progress_at(now, tty=True)
    progress.tally.done = progress.tally.answered = 3
    now[0] = 65.0
    progress.finish()
    last = "\r3/? lines | 0/s | 0 failed\x1b[K\n"
    assert stream.shown == last + "batch: 3 lines in 1m5s: 3 answered, 0 failed\n"


@pytest.mark.parametrize(
    ("seen", "rates"),
    [
        ([(5.0, 100), (15.0, 100)], ["20/s", "0/s"]),  # no line for exactly ten seconds: 0/s
        ([(5.0, 100), (14.5, 100)], ["20/s", "7/s"]),  # a little less: the 100 lines still count
        ([(8.0, 80), (12.0, 80)], ["10/s", "7/s"]),  # the start is older than ten seconds, not its next
    ],
    ids=["stalled-ten-seconds", "stalled-less", "window-from-the-second-sample"],
)
def test_progress_rate_counts_the_lines_of_the_last_ten_seconds(
    seen: list[tuple[float, int]], rates: list[str]
) -> None:
    now = [0.0]
    progress, _ = _progress_at(now, tty=False)
    shown = []
    for now[0], progress.tally.done in seen:
        shown.append(progress.line().split(" | ")[1])
    assert shown == rates


def test_progress_eta_is_0s_once_the_lines_done_pass_the_estimate() -> None:
    # The estimate (~) may fall short of the lines the input holds: nothing is left, not -1 line.
    tally = _progress.Tally()
    now = [0.0]
    progress = _progress.Progress(io.StringIO(), tally, lambda: (5, False), quiet=True, clock=lambda: now[0])
    now[0], tally.done = 10.0, 6
    assert progress.line() == "6/~5 lines (120.0%) | 1/s | 0 failed | ETA 0s"


def test_a_tally_refuses_a_misspelt_counter() -> None:
    tally = _progress.Tally()
    with pytest.raises(AttributeError):
        tally.retry = 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("signum", "code", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
    ids=["sigint", "sigterm"],
)
def test_a_signal_while_stdin_waits_for_its_writer_exits_with_the_signals_code(
    svc: FakeService, tmp_path: Path, signum: int, code: int, word: str
) -> None:
    # The writer keeps the pipe open: the reader is blocked on stdin when the signal comes. A
    # reader stuck in readline() held stdin's lock, and the interpreter aborted at exit
    # ("Fatal Python error: _enter_buffered_busy", exit 134) instead of exiting with the code.
    out = tmp_path / "out.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "qa_min", "--base-url", svc.url, "batch", "-o", str(out), *QUESTION],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
        env=child_env(),
    )
    assert proc.stdin is not None
    try:
        proc.stdin.write('"first"\n')
        proc.stdin.flush()
        assert wait_until(lambda: line_count(out) == 1, timeout=10)
        proc.send_signal(signum)
        proc.wait(timeout=10)  # stdin stays open: the run must not wait for it
        assert proc.stderr is not None
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert proc.returncode == code, err
    assert "Fatal Python error" not in err
    assert f"{word}: 1 input lines done" in err
    assert read_rows(out) == [{"line": 1, "answers": answer("first")}]


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["sigint", "sigterm"]
)
def test_a_signal_while_a_fifo_waits_for_its_writer_ends_the_run(
    svc: FakeService, tmp_path: Path, signum: int, code: int
) -> None:
    # Closing the FIFO waited for the reader blocked in readline(), so the run hung until the
    # writer closed its end.
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    out = tmp_path / "out.jsonl"
    writer = os.open(fifo, os.O_RDWR)  # holds the FIFO open for writing until the end
    try:
        os.write(writer, b'"first"\n')
        proc = start_batch("--base-url", svc.url, "batch", str(fifo), "-o", str(out), *QUESTION)
        assert wait_until(lambda: line_count(out) == 1, timeout=10)
        proc.send_signal(signum)
        try:
            proc.wait(timeout=10)
        finally:
            err = finish(proc)
    finally:
        os.close(writer)
    assert proc.returncode == code, err
    assert read_rows(out) == [{"line": 1, "answers": answer("first")}]


def test_batch_with_stdin_closed_exits_3_and_says_so(svc: FakeService) -> None:
    # sys.stdin is None: the reader thread died on None.readline() and the run waited forever.
    argv = [sys.executable, "-m", "qa_min", "--base-url", svc.url, "batch", "-q", *QUESTION]
    done = subprocess.run(
        ["sh", "-c", 'exec "$@" <&-', "sh", *argv],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=20,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert done.stderr == "error: FileError: cannot read the input: stdin is closed\n"


def run_closed(redirect: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m qa_min *argv`` started with one of its standard streams closed (``redirect``)."""
    command = [sys.executable, "-m", "qa_min", *argv]
    return subprocess.run(
        ["sh", "-c", f'exec "$@" {redirect}', "sh", *command],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=20,
        check=False,
    )


def test_batch_with_stderr_closed_writes_every_answer_and_nothing_else(
    svc: FakeService, tmp_path: Path
) -> None:
    # The progress line was drawn on sys.stderr, None: the run crashed (exit 1) before any call,
    # and a note (a duplicate id) went to stdout, among the answers, as print(file=None) does.
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"id": "a", "state": "one"}\n{"id": "a", "state": "two"}\n')
    done = run_closed("2>&-", "--base-url", svc.url, "batch", str(inp), *QUESTION)
    assert done.returncode == 3  # the duplicate's error line
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert rows[0] == {"line": 1, "id": "a", "answers": answer("one")}
    assert rows[1]["error"]["type"] == "InvalidState"
    assert len(rows) == 2


def test_batch_with_stdout_closed_and_no_output_file_exits_3_and_says_so(
    svc: FakeService, tmp_path: Path
) -> None:
    inp = write_input(tmp_path / "in.jsonl", STATES[:2])
    done = run_closed(">&-", "--base-url", svc.url, "batch", str(inp), *QUESTION)
    assert done.returncode == 3, done.stderr
    assert done.stderr == "error: FileError: cannot write the answers: stdout is closed; pass --output FILE\n"
    assert not svc.requests


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize(
    "command",
    [["batch", "IN"], ["batch", "IN", "-o", "OUT", "--failures", "-"], ["--json", "ask", "one"]],
    ids=["batch", "batch-failures", "ask-json"],
)
def test_a_full_stdout_exits_3_and_says_so(svc: FakeService, tmp_path: Path, command: list[str]) -> None:
    # A write to stdout that failed with ENOSPC escaped as a traceback (exit 1), and the
    # interpreter's last flush of stdout failed again.
    inp = tmp_path / "in.jsonl"
    inp.write_text('"one"\n{"id": 5}\n')
    paths = {"IN": str(inp), "OUT": str(tmp_path / "out.jsonl")}
    argv = [paths.get(arg, arg) for arg in command]
    done = run_closed(">/dev/full", "--base-url", svc.url, *argv, *QUESTION)
    assert done.returncode == 3, done.stderr
    # No traceback, and no "Exception ignored" from the interpreter's last flush.
    assert done.stderr == "error: FileError: cannot write stdout: No space left on device\n"

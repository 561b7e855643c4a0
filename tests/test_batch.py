"""Tests of ``qa-min batch`` run in this process through ``main(argv)``: order, streaming, resume,
failures, the two-ways command line and the option limits. Signals and terminals are in
``test_batch_process.py``."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from batchsupport import QUESTION, YES_NO, Result, answer, asked, clean_env, read_rows, run_main, write_input
from support import wait_until

import qa_min as qa
from qa_min._cli import _batch, _jsonl, _parser, _progress
from qa_min._cli._batch import WINDOW
from qa_min._cli._output import Output
from qa_min.testing import FakeService, delay, hang, reply

STATES = [f"state number {i}" for i in range(10)]


@pytest.fixture(autouse=True)
def _isolate(monkeypatch: pytest.MonkeyPatch) -> None:
    clean_env(monkeypatch)
    monkeypatch.setattr(sys, "stdin", sys.stdin)


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], svc: FakeService) -> Any:
    def run(*argv: str, stdin: str | None = None) -> Result:
        return run_main(capsys, "--base-url", svc.url, "batch", *argv, stdin=stdin)

    return run


@pytest.fixture
def inp(tmp_path: Path) -> Path:
    return write_input(tmp_path / "in.jsonl", STATES)


# -- order and errors ---------------------------------------------------------------------------


def test_answers_and_errors_are_written_in_input_order_with_line_and_id(
    run: Any, svc: FakeService, tmp_path: Path
) -> None:
    lines = [json.dumps(s) for s in STATES[:4]]
    lines += ["", "   ", "{not json", json.dumps({"id": "no-state"}), json.dumps({"state": ""}), "42"]
    lines += [json.dumps({"state": s, "id": f"id-{i}"}) for i, s in enumerate(STATES[4:], 4)]
    lines += [json.dumps({"id": 7, "state": "integer id"}), json.dumps({"id": [1], "state": "x"})]
    path = tmp_path / "in.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode() + b'"\xff"\n')
    result = run(str(path), "--concurrency", "3", *QUESTION)
    assert result.code == 3  # the first failed line is a bad line
    rows = [json.loads(line) for line in result.out.splitlines()]
    assert [row["line"] for row in rows] == [1, 2, 3, 4, *range(7, 20)]
    assert [row.get("id") for row in rows[8:]] == [
        "id-4",
        "id-5",
        "id-6",
        "id-7",
        "id-8",
        "id-9",
        7,
        None,
        None,
    ]
    assert [row["answers"] for row in rows if "answers" in row] == [
        *(answer(s) for s in STATES),
        answer("integer id"),
    ]
    bad = {row["line"]: row["error"] for row in rows if "error" in row}
    assert sorted(bad) == [7, 8, 9, 10, 18, 19]
    assert {e["type"] for e in bad.values()} == {"InvalidState"}
    assert all(e["status"] is None and e["attempts"] == 0 for e in bad.values())
    assert "line 7 is not JSON" in bad[7]["message"]
    assert "string or an integer" in bad[18]["message"]
    assert "not UTF-8" in bad[19]["message"]
    assert len(svc.requests) == 11


def test_a_line_whose_json_escapes_a_surrogate_is_a_bad_line(run: Any, svc: FakeService) -> None:
    # Valid JSON and valid UTF-8, but "\udce9" decodes to a surrogate, which is no text: the
    # line is refused as the library refuses such a state, and the lines around it are asked.
    stdin = '"before"\n"caf\\udce9"\n{"id": "x", "state": "\\ud800"}\n"after"\n'
    result = run("--concurrency", "1", *QUESTION, stdin=stdin)
    assert result.code == 3
    rows = [json.loads(line) for line in result.out.splitlines()]
    assert [row.get("answers") for row in rows] == [answer("before"), None, None, answer("after")]
    assert rows[1]["error"]["type"] == rows[2]["error"]["type"] == "InvalidState"
    surrogate = "state is not UTF-8: it holds the surrogate"
    assert rows[1]["error"]["message"] == f"line 2: {surrogate} '\\udce9' at index 3"
    assert rows[2]["error"]["message"] == f"line 3: {surrogate} '\\ud800' at index 0"
    assert rows[2]["id"] == "x"
    assert [r.json()["state"] for r in svc.requests] == ["before", "after"]


def test_an_id_whose_json_escapes_a_surrogate_is_a_bad_line_and_the_output_stays_utf8(
    run: Any, svc: FakeService, tmp_path: Path
) -> None:
    # The id is copied into the output line, which a surrogate cannot be written in: the line
    # is refused (without its id) as a state holding one is, and the run goes on.
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a\\udce9", "state": "x"}\n{"id": "b", "state": "y"}\n')
    out = tmp_path / "out.jsonl"
    result = run(str(path), "--output", str(out), *QUESTION)
    assert result.code == 3
    rows = [json.loads(line) for line in out.read_bytes().decode("utf-8").splitlines()]
    assert rows[1] == {"line": 2, "id": "b", "answers": answer("y")}
    assert rows[0]["line"] == 1
    assert "id" not in rows[0]
    assert rows[0]["error"]["type"] == "InvalidState"
    assert "id must be text" in rows[0]["error"]["message"]
    assert "\\udce9" in rows[0]["error"]["message"]
    assert [r.json()["state"] for r in svc.requests] == ["y"]


def test_a_byte_order_mark_before_the_first_line_is_left_out(
    run: Any, svc: FakeService, tmp_path: Path
) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'\xef\xbb\xbf"first"\n"second"\n')
    result = run(str(path), *QUESTION)
    assert result.code == 0, result.out
    assert [row["answers"] for row in map(json.loads, result.out.splitlines())] == [
        answer("first"),
        answer("second"),
    ]


def test_a_bad_state_error_names_its_line_in_its_text_too() -> None:
    questions = [qa.NamedQuestion("toxic", qa.YesNo(YES_NO["true"], YES_NO["false"]))]
    key, error = _jsonl.parse_line(3, json.dumps({"id": "k", "state": ""}), questions)
    assert key == "k"
    assert isinstance(error, qa.ValidationError)
    assert error.message.startswith("line 3: state ")
    assert str(error) == error.message  # as a log or a traceback shows it


def test_stdin_input_and_http_errors_per_line(run: Any, svc: FakeService) -> None:
    svc.script(reply(429, {"detail": "slow down"}))
    stdin = "".join(json.dumps(s) + "\n" for s in STATES[:3])
    result = run("--retries", "0", "--concurrency", "1", *QUESTION, stdin=stdin)
    assert result.code == 4
    rows = [json.loads(line) for line in result.out.splitlines()]
    assert rows[0] == {
        "line": 1,
        "error": {
            "type": "RateLimited",
            "message": rows[0]["error"]["message"],
            "status": 429,
            "attempts": 1,
            "request_id": None,
            "body": '{"detail": "slow down"}',
        },
    }
    assert rows[1:] == [{"line": n, "answers": answer(STATES[n - 1])} for n in (2, 3)]
    assert re.fullmatch(r"batch: 3 lines in \d+s: 2 answered, 1 failed", result.err.splitlines()[-1])


def test_failures_file_lists_each_failed_line_and_the_api_key_is_scrubbed(
    run: Any, svc: FakeService, tmp_path: Path, inp: Path
) -> None:
    key = "sk-secret-123"
    svc.script(delay(0), reply(500, {"detail": f"key {key} is bad"}), reply(404, {"detail": "no"}))
    failures = tmp_path / "failures.jsonl"
    result = run(
        str(inp),
        "--api-key",
        key,
        "--retries",
        "0",
        "--concurrency",
        "1",
        "--failures",
        str(failures),
        *QUESTION,
    )
    assert result.code == 5
    rows = read_rows(failures)
    assert [(r["line"], r["error"]["type"], r["error"]["status"]) for r in rows] == [
        (2, "ServerError", 500),
        (3, "NotFound", 404),
    ]
    assert "[redacted]" in rows[0]["error"]["body"]
    assert key not in failures.read_text() + result.out + result.err
    assert [r["line"] for r in map(json.loads, result.out.splitlines())] == list(range(1, 11))


# -- streaming ------------------------------------------------------------------------------------


def test_a_short_key_inside_a_question_name_leaves_the_answers_as_decoded(run: Any, inp: Path) -> None:
    # "tox" is inside "toxic": a short key is hidden only where it stands alone.
    result = run(str(inp), "--api-key", "tox", *QUESTION)
    assert result.code == 0, result.err
    assert [row["answers"] for row in map(json.loads, result.out.splitlines())] == [answer(s) for s in STATES]


def test_calls_in_flight_never_exceed_concurrency_and_reading_waits_for_them(
    capsys: pytest.CaptureFixture[str], svc: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = []

    class Input:
        def __init__(self) -> None:
            self.lines = iter(json.dumps(f"state {i}") + "\n" for i in range(40))

        def readline(self) -> str:
            line = next(self.lines, "")
            read.append(line)
            return line

    monkeypatch.setattr(sys, "stdin", Input())
    submitted: list[object] = []
    submit = qa.Client.submit

    def counted(client: qa.Client, *args: Any, **kwargs: Any) -> Any:
        submitted.append(args)
        return submit(client, *args, **kwargs)

    monkeypatch.setattr(qa.Client, "submit", counted)
    svc.script(hang(), hang())
    codes: list[int] = []
    argv = ["--base-url", svc.url, "--retries", "0", "batch", "--concurrency", "2", "-q", *QUESTION]
    worker = threading.Thread(target=lambda: codes.append(run_main(capsys, *argv).code))
    worker.start()
    try:
        assert svc.wait_for_requests(2)
        # Both calls are stuck: a third request would break the bound, and reading stops
        # once the window of lines read but not written is full.
        assert not svc.wait_for_requests(3, timeout=0.3)
        # docs/batch.md: at most 4N lines read but not yet written.
        assert wait_until(lambda: len(read) == 4 * 2)
        assert not wait_until(lambda: len(read) > 4 * 2, timeout=0.1)
        assert WINDOW == 4
        # The lines read wait for a call to end, not in the client's queue of calls.
        assert len(submitted) == 2
    finally:
        svc.release()
        worker.join(10)
    assert codes == [6]  # the released requests end without a response: ConnectionFailed
    assert len(read) == 41


def test_first_answer_is_written_before_the_input_ends(
    capsys: pytest.CaptureFixture[str], svc: FakeService, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    r, w = os.pipe()
    with os.fdopen(r, "rb") as stdin_bytes, os.fdopen(w, "wb", buffering=0) as feed:

        class Stdin:
            buffer = stdin_bytes

        monkeypatch.setattr(sys, "stdin", Stdin())
        out = tmp_path / "out.jsonl"
        argv = ["--base-url", svc.url, "batch", "-o", str(out), "-q", *QUESTION]
        worker = threading.Thread(target=run_main, args=(capsys, *argv))
        worker.start()
        try:
            feed.write(b'"first"\n')
            assert wait_until(lambda: out.exists() and out.read_bytes().endswith(b"\n"))
            feed.write(b'"second"\n')
        finally:
            feed.close()
            worker.join(10)
    assert read_rows(out) == [
        {"line": 1, "answers": answer("first")},
        {"line": 2, "answers": answer("second")},
    ]


def test_a_stop_writes_what_ended_before_the_first_cancelled_line_and_nothing_after() -> None:
    # The signal came as line 1's call had just ended, unwritten: it is written. Line 2's call
    # is cancelled, so line 3's error waits with it for the resume: the file stays in order.
    rows: list[dict[str, Any]] = []
    progress = _progress.Progress(io.StringIO(), _progress.Tally(), lambda: None, quiet=True)
    batch = _batch._Batch(cast(Any, None), Output(False, []), [], _jsonl.Done(), rows.append, progress, 2)
    ended: Future[Any] = Future()
    ended.set_result(SimpleNamespace(answers={"toxic": True}))
    running: Future[Any] = Future()
    lines = [_batch._Line(1, "a"), _batch._Line(2, None), _batch._Line(3, None)]
    lines[0].call, lines[1].call = cast(Any, ended), cast(Any, running)
    lines[2].error = qa.InvalidState("line 3 is not JSON")
    batch.pending.extend(lines)
    assert batch.stop() == 2
    assert rows == [{"line": 1, "id": "a", "answers": {"toxic": True}}]
    assert running.cancelled()
    assert (progress.tally.done, progress.tally.answered) == (1, 1)


def test_a_stop_ends_the_reader_waiting_for_room_without_reading_another_line(tmp_path: Path) -> None:
    # docs/batch.md: on a signal "reading stops". The reader waits for room in the window; the
    # room the stop frees to wake it must not be taken for reading on.
    rows: list[dict[str, Any]] = []
    progress = _progress.Progress(io.StringIO(), _progress.Tally(), lambda: None, quiet=True)
    batch = _batch._Batch(cast(Any, None), Output(False, []), [], _jsonl.Done(), rows.append, progress, 1)
    batch.room = threading.Semaphore(0)  # the window is full
    batch.signal = signal.SIGINT
    source = _jsonl.InputLines(str(write_input(tmp_path / "in.jsonl", STATES * 3)))
    try:
        batch.run(source)
        assert (source.lines, rows) == (0, [])
        assert not any(t.name == "qa_min-batch-input" and t.is_alive() for t in threading.enumerate())
    finally:
        source.close()


def test_a_stop_ends_the_reader_waiting_for_a_pipes_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    # docs/batch.md: on a signal "reading stops", a read that waits for stdin's writer too: the
    # run does not end leaving its reader behind, polling a pipe nobody reads from any more.
    r, w = os.pipe()  # the writer stays open and writes nothing
    buffer = os.fdopen(r, "rb")
    monkeypatch.setattr(sys, "stdin", _Piped(buffer))
    source = _jsonl.InputLines(None)
    quiet = _Poll(quiet=10**9)
    monkeypatch.setattr(source, "_poll", quiet)
    progress = _progress.Progress(io.StringIO(), _progress.Tally(), lambda: None, quiet=True)
    rows: list[dict[str, Any]] = []
    batch = _batch._Batch(cast(Any, None), Output(False, []), [], _jsonl.Done(), rows.append, progress, 1)
    runner = threading.Thread(target=batch.run, args=(source,), daemon=True)
    try:
        runner.start()
        assert wait_until(lambda: quiet.quiet < 10**9)  # the reader waits for the writer
        batch.on_signal(signal.SIGINT, None)
        runner.join(10)
        assert not runner.is_alive()
        assert not any(t.name == "qa_min-batch-input" and t.is_alive() for t in threading.enumerate())
        assert source.lines == 0
    finally:
        source.stop()
        os.close(w)
        source.close()
        buffer.close()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_writing_to_stdout_exits_130_and_says_how_to_make_a_run_resumable(
    capsys: pytest.CaptureFixture[str], svc: FakeService, inp: Path
) -> None:
    svc.script(delay(0), delay(0), hang(), hang())

    def interrupt() -> None:
        if svc.wait_for_requests(4):
            os.kill(os.getpid(), signal.SIGINT)  # handled by batch's handler, in this (main) thread

    before = signal.getsignal(signal.SIGINT)
    sender = threading.Thread(target=interrupt)
    sender.start()
    try:
        result = run_main(
            capsys, "--base-url", svc.url, "batch", str(inp), "--concurrency", "2", "-q", *QUESTION
        )
    finally:
        sender.join(10)
    assert result.code == 130
    rows = [json.loads(line) for line in result.out.splitlines()]
    assert [row["line"] for row in rows] == list(range(1, len(rows) + 1))  # a prefix, in order
    assert all("answers" in row for row in rows)
    assert result.err.splitlines()[-1] == "to be able to resume, run with --output FILE"
    assert signal.getsignal(signal.SIGINT) is before  # restored


def test_an_input_that_cannot_be_read_exits_3(
    capsys: pytest.CaptureFixture[str], svc: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = iter(['"one"\n', '"two"\n'])

    class Broken:
        def readline(self) -> str:
            line = next(lines, None)
            if line is None:
                raise OSError(5, "Input/output error")
            return line

    monkeypatch.setattr(sys, "stdin", Broken())
    result = run_main(capsys, "--base-url", svc.url, "batch", "-q", *QUESTION)
    assert result.code == 3
    assert "error: FileError: cannot read the input: [Errno 5] Input/output error" in result.err


def test_blank_lines_are_counted_and_leave_the_window_free(
    run: Any, svc: FakeService, tmp_path: Path
) -> None:
    # More blank lines than the window holds (4 lines per call in flight): each frees its place.
    path = tmp_path / "in.jsonl"
    path.write_text("\n   \n\n\t\n\n" + json.dumps("after the blanks") + "\n")
    result = run(str(path), "--concurrency", "1", *QUESTION)
    assert result.code == 0, result.err
    assert [json.loads(line) for line in result.out.splitlines()] == [
        {"line": 6, "answers": answer("after the blanks")}
    ]
    assert re.fullmatch(r"batch: 6 lines in \d+s: 1 answered, 0 failed", result.err.splitlines()[-1])


def test_an_unexpected_error_reading_the_input_ends_the_run(
    capsys: pytest.CaptureFixture[str], svc: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Broken:
        def readline(self) -> str:
            raise RuntimeError("the reader broke")

    monkeypatch.setattr(sys, "stdin", Broken())
    with pytest.raises(RuntimeError, match="the reader broke"):  # raised, not waited for forever
        run_main(capsys, "--base-url", svc.url, "batch", "-q", *QUESTION)
    assert svc.requests == []


def test_progress_counts_the_retries_and_the_busy_replies(
    run: Any, svc: FakeService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown: list[_progress.Progress] = []

    class Kept(_progress.Progress):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            shown.append(self)

    monkeypatch.setattr(_batch, "Progress", Kept)
    soon = [("retry-after-ms", "1")]
    # Line 1: two busy replies, then its answer; line 2: a 503, then its answer.
    svc.script(
        reply(429, {}, headers=soon), reply(529, {}, headers=soon), delay(0), reply(503, {}, headers=soon)
    )
    path = write_input(tmp_path / "in.jsonl", STATES[:3])
    result = run(str(path), "--concurrency", "1", "--max-rate", "1000", *QUESTION)
    assert result.code == 0, result.err
    assert " | 0 failed | 3 retries | 2 busy replies | " in shown[0].line()


def test_progress_is_redrawn_while_the_calls_in_flight_are_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    # No call ends and no line comes for a while: the wait still redraws the progress line.
    monkeypatch.setattr(_batch, "REDRAW_EVERY", 0.001)
    stream, clock = io.StringIO(), iter(range(0, 1000, 10))
    progress = _progress.Progress(stream, _progress.Tally(), lambda: None, False, clock=lambda: next(clock))
    rows: list[dict[str, Any]] = []
    batch = _batch._Batch(cast(Any, None), Output(False, []), [], _jsonl.Done(), rows.append, progress, 1)
    batch._wait()
    assert stream.getvalue() == "0/? lines | 0/s | 0 failed\n"


def test_a_line_refused_before_sending_counts_no_retry() -> None:
    # docs/batch.md: "attempts" is 0 for a line refused before sending (its timeout expired
    # while it waited for the rate limiter, say): no attempt, so no retry either.
    rows: list[dict[str, Any]] = []
    progress = _progress.Progress(io.StringIO(), _progress.Tally(), lambda: None, quiet=True)
    batch = _batch._Batch(cast(Any, None), Output(False, []), [], _jsonl.Done(), rows.append, progress, 1)
    refused: Future[Any] = Future()
    refused.set_exception(qa.Canceled("the call's timeout of 0.5 s expired"))
    line = _batch._Line(1, None)
    line.call, line.diagnostics = cast(Any, refused), qa.Diagnostics()
    batch.pending.append(line)
    batch._write_ready()
    assert [(row["error"]["type"], row["error"]["attempts"]) for row in rows] == [("Canceled", 0)]
    tally = progress.tally
    assert (tally.done, tally.failed, tally.retries, tally.busy) == (1, 1, 0, 0)


# -- resume ---------------------------------------------------------------------------------------


def test_a_resume_redraws_the_progress_while_it_skips_the_lines_done_before() -> None:
    # A resumed run may skip a long prefix before its first call: the progress line moves meanwhile.
    stream, clock = io.StringIO(), iter(range(0, 1000, 10))
    progress = _progress.Progress(stream, _progress.Tally(), lambda: None, False, clock=lambda: next(clock))
    done = _jsonl.Done()
    done.mark_line(1)
    questions = [qa.NamedQuestion("toxic", qa.YesNo(YES_NO["true"], YES_NO["false"]))]
    rows: list[dict[str, Any]] = []
    batch = _batch._Batch(cast(Any, None), Output(False, []), questions, done, rows.append, progress, 1)
    batch._admit(1, json.dumps("answered before") + "\n")
    assert stream.getvalue() == "1/? lines | 0/s | 1 done before | 0 failed\n"
    assert rows == []  # the output already holds it


def test_resume_by_line_skips_answered_lines_and_appends_the_rest_in_order(
    run: Any, svc: FakeService, tmp_path: Path, inp: Path
) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text(
        "".join(json.dumps({"line": n, "answers": answer(STATES[n - 1])}) + "\n" for n in (1, 2, 3))
    )
    result = run(str(inp), "-o", str(out), "--resume", *QUESTION)
    assert result.code == 0, result.err
    assert read_rows(out) == [{"line": n, "answers": answer(s)} for n, s in enumerate(STATES, 1)]
    assert sorted(asked(svc)) == sorted(STATES[3:])
    summary = result.err.splitlines()[-1]
    assert re.fullmatch(r"batch: 10 lines in \d+s: 7 answered, 0 failed, 3 done before", summary)


def test_resume_by_id_holds_when_the_input_is_reordered(run: Any, svc: FakeService, tmp_path: Path) -> None:
    first = write_input(tmp_path / "in.jsonl", STATES, ids=True)
    out = tmp_path / "out.jsonl"
    assert run(str(first), "-o", str(out), *QUESTION).code == 0
    svc_before = len(svc.requests)
    # The same ids on other lines, plus one new: only the new one is asked.
    lines = [*first.read_text().splitlines()[::-1], json.dumps({"id": "new", "state": "a new state"})]
    first.write_text("\n".join(lines) + "\n")
    result = run(str(first), "-o", str(out), "--resume", *QUESTION)
    assert result.code == 0, result.err
    assert [r.json()["state"] for r in svc.requests[svc_before:]] == ["a new state"]
    assert read_rows(out)[-1] == {"line": 11, "id": "new", "answers": answer("a new state")}


def test_a_bad_line_past_what_a_resumed_output_holds_is_written(
    run: Any, svc: FakeService, tmp_path: Path
) -> None:
    # The output of a run stopped after line 5: its line table has room past line 5 (grown by
    # doubling), which must not read as lines already written.
    lines = [json.dumps(s) for s in STATES[:5]] + ["{not json", json.dumps(STATES[6])]
    path, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    out.write_text(
        "".join(json.dumps({"line": n, "answers": answer(STATES[n - 1])}) + "\n" for n in range(1, 6))
    )
    result = run(str(path), "-o", str(out), "--resume", *QUESTION)
    assert result.code == 3, result.err
    rows = read_rows(out)
    assert [row["line"] for row in rows] == [1, 2, 3, 4, 5, 6, 7]
    assert "line 6 is not JSON" in rows[5]["error"]["message"]
    assert rows[6] == {"line": 7, "answers": answer(STATES[6])}
    assert sorted(asked(svc)) == [STATES[6]]


def test_a_resume_skips_more_written_input_errors_than_the_window_holds(tmp_path: Path) -> None:
    # Each line skipped frees its place in the window (4 lines per call in flight): with more
    # bad lines already written than that, the run still reads to the end and appends nothing.
    bad = WINDOW + 1
    done = _jsonl.Done()
    for n in range(1, bad + 1):
        done.mark_line(n, _jsonl.WRITTEN)
    rows: list[dict[str, Any]] = []
    progress = _progress.Progress(io.StringIO(), _progress.Tally(), lambda: None, quiet=True)
    batch = _batch._Batch(cast(Any, None), Output(False, []), [], done, rows.append, progress, 1)
    (tmp_path / "in.jsonl").write_text("{not json\n" * bad)
    source = _jsonl.InputLines(str(tmp_path / "in.jsonl"))
    runner = threading.Thread(target=batch.run, args=(source,), daemon=True)
    try:
        runner.start()
        runner.join(10)
        assert not runner.is_alive()  # not stuck waiting for room
    finally:
        source.close()
    assert rows == []
    assert (progress.tally.done, progress.tally.skipped) == (bad, bad)


@pytest.mark.parametrize(
    "questions",
    [
        ["--yes-no", "rude", "It is rude", "It is polite"],  # another question
        [*QUESTION, "--yes-no", "rude", "It is rude", "It is polite"],  # one more
    ],
    ids=["other", "one-more"],
)
def test_resume_with_other_questions_is_refused_and_leaves_the_file_alone(
    run: Any, svc: FakeService, tmp_path: Path, inp: Path, questions: list[str]
) -> None:
    out = tmp_path / "out.jsonl"
    # A failed line first: it answers no question, so the refusal comes from the answered one.
    rows = [{"line": 1, "error": {"type": "NotFound"}}, {"line": 2, "answers": answer(STATES[1])}]
    out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    before = out.read_bytes()
    result = run(str(inp), "-o", str(out), "--resume", *questions)
    assert result.code == 2, result.err
    names = "['rude']" if questions[1] == "rude" else "['rude', 'toxic']"
    assert f"line 2 answers ['toxic'], not these questions {names}" in result.err
    assert "resume with the questions the run began with" in result.err
    assert out.read_bytes() == before
    assert svc.request_count == 0


@pytest.mark.parametrize("skip_failed", [False, True], ids=["asks-again", "skip-failed"])
def test_resume_asks_failed_lines_again_unless_skip_failed(
    run: Any, svc: FakeService, tmp_path: Path, inp: Path, skip_failed: bool
) -> None:
    out = tmp_path / "out.jsonl"
    svc.script(delay(0), reply(404, {"detail": "no"}))
    assert run(str(inp), "-o", str(out), "--retries", "0", "--concurrency", "1", *QUESTION).code == 5
    flag = ["--skip-failed"] if skip_failed else []
    result = run(str(inp), "-o", str(out), "--resume", *flag, *QUESTION)
    assert result.code == 0, result.err
    rows = read_rows(out)
    assert len(rows) == (10 if skip_failed else 11)
    # The failure kept is not counted as answered: the summary says what this run did.
    summary = result.err.splitlines()[-1]
    assert summary.endswith(
        "0 answered, 0 failed, 10 done before" if skip_failed else "1 answered, 0 failed, 9 done before"
    )
    assert rows[1]["error"]["type"] == "NotFound"
    if not skip_failed:
        assert rows[-1] == {"line": 2, "answers": answer(STATES[1])}
    assert asked(svc)[STATES[1]] == (1 if skip_failed else 2)


def test_torn_last_line_is_cut_off_and_asked_again(
    run: Any, svc: FakeService, tmp_path: Path, inp: Path
) -> None:
    out = tmp_path / "out.jsonl"
    whole = json.dumps({"line": 1, "answers": answer(STATES[0])}) + "\n"
    out.write_text(whole + '{"line": 2, "answ')
    result = run(str(inp), "-o", str(out), "--resume", *QUESTION)
    assert result.code == 0, result.err
    assert "last line was cut short" in result.err
    assert read_rows(out) == [{"line": n, "answers": answer(s)} for n, s in enumerate(STATES, 1)]
    assert STATES[0] not in asked(svc)


def test_scan_output_leaves_a_torn_file_at_its_new_end(tmp_path: Path) -> None:
    # Cut at the torn line and left there: the next line written follows the whole ones, even in a
    # file not opened for appending (no gap of NUL bytes where the torn line was).
    path = tmp_path / "out.jsonl"
    whole = json.dumps({"line": 1, "answers": {}}) + "\n"
    path.write_text(whole + '{"line": 2, "answ')
    with open(path, "r+b") as file:
        done = _jsonl.scan_output(file, str(path), False)
        assert (done.torn, done.has_line(1), done.wrote(2)) == (True, True, False)
        assert file.tell() == len(whole)
        file.write(b'{"line": 2, "answers": {}}\n')
    assert path.read_text() == whole + '{"line": 2, "answers": {}}\n'


SKIP_FAILED_ALONE = "qa-min batch: error: argument --skip-failed: needs --resume, the run whose failed lines"


ANSWERED = '{"line": 1, "answers": {"toxic": true}}\n'  # line 1 of a run asking QUESTION


@pytest.mark.parametrize(
    ("argv", "content", "code", "message"),
    [
        (["-o", "OUT"], '{"line": 1, "answers": {}}\n', 2, "pass --resume to continue it"),
        (["--resume"], None, 2, "--resume needs --output FILE"),
        (["-o", "OUT", "--resume"], f'{ANSWERED}{{"note": 1}}\n', 3, "line 2 is not a line"),
        (["-o", "OUT", "--resume"], f"{ANSWERED}a log line\n", 3, "line 2 is not a line batch wrote"),
        (["-o", "OUT", "--resume"], '{"line": 0, "answers": {}}\n', 3, "line 1 is not a line batch"),
        (["-o", "OUT", "--resume"], '{"line": 1, "id": [1], "answers": {}}\n', 3, "not a line batch"),
        (["-o", "OUT", "--resume"], '{"line": 1, "id": true, "error": {}}\n', 3, "not a line batch"),
        (["-o", "OUT", "--resume"], '{"line": true, "answers": {}}\n', 3, "not a line batch"),
        (["--failures", "DIR"], None, 3, "cannot write 'DIR': Is a directory"),
        (["-o", "OUT", "--failures", "DIR"], None, 3, "cannot write 'DIR': Is a directory"),
        (["-o", "DIR"], None, 3, "cannot write 'DIR': Is a directory"),
        (["--skip-failed"], None, 2, SKIP_FAILED_ALONE),
        (["-o", "OUT", "--skip-failed"], None, 2, SKIP_FAILED_ALONE),
    ],
    ids=["exists-without-resume", "resume-without-output", "foreign-line", "not-json", "line-zero",
         "id-a-list", "id-a-bool", "line-a-bool", "failures-unwritable",
         "failures-unwritable-with-output", "output-unwritable", "skip-failed-without-resume",
         "skip-failed-with-output-without-resume"],
)  # fmt: skip
def test_output_files_that_cannot_be_used_are_refused_before_any_call(
    run: Any,
    svc: FakeService,
    tmp_path: Path,
    inp: Path,
    argv: list[str],
    content: str | None,
    code: int,
    message: str,
) -> None:
    out = tmp_path / "out.jsonl"
    if content is not None:
        out.write_text(content)
    argv = [str(out) if a == "OUT" else str(tmp_path) if a == "DIR" else a for a in argv]
    result = run(str(inp), *argv, *QUESTION)
    assert result.code == code
    assert message.replace("DIR", str(tmp_path)) in result.err
    assert svc.requests == []
    if content is not None:
        assert out.read_text() == content


def test_an_existing_output_is_refused_without_resume_from_its_first_byte(
    run: Any, svc: FakeService, tmp_path: Path
) -> None:
    # docs/batch.md: without --resume, an existing non-empty FILE is refused rather than overwritten.
    inp, out = write_input(tmp_path / "in.jsonl", STATES[:2]), tmp_path / "out.jsonl"
    out.write_text("\n")
    refused = run(str(inp), "-o", str(out), *QUESTION)
    assert refused.code == 2
    assert f"{str(out)!r} already holds answers: pass --resume to continue it" in refused.err
    assert (out.read_text(), svc.requests) == ("\n", [])
    out.write_text("")  # empty: nothing to lose
    taken = run(str(inp), "-o", str(out), "-q", *QUESTION)
    assert taken.code == 0, taken.err
    assert read_rows(out) == [{"line": n, "answers": answer(s)} for n, s in enumerate(STATES[:2], 1)]


def test_a_dash_for_the_output_or_the_failures_is_stdout_never_a_file_named_dash(
    run: Any, svc: FakeService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "in.jsonl"
    path.write_text('"first"\n{not json\n"third"\n')
    result = run(str(path), "-o", "-", *QUESTION)
    assert result.code == 3
    assert [row["line"] for row in map(json.loads, result.out.splitlines())] == [1, 2, 3]
    assert not (tmp_path / "-").exists()

    out = tmp_path / "out.jsonl"
    result = run(str(path), "-o", str(out), "--failures", "-", *QUESTION)
    assert result.code == 3
    assert [row["line"] for row in read_rows(out)] == [1, 2, 3]
    failed = [json.loads(line) for line in result.out.splitlines()]
    assert [(row["line"], row["error"]["type"]) for row in failed] == [(2, "InvalidState")]
    assert not (tmp_path / "-").exists()

    # Both on stdout, each failed line would be there twice: refused before any call.
    sent = len(svc.requests)
    result = run(str(path), "-o", "-", "--failures", "-", *QUESTION)
    assert result.code == 2
    assert "--failures: '-' is stdout" in result.err
    assert result.out == ""
    assert len(svc.requests) == sent
    assert not (tmp_path / "-").exists()


def test_a_closed_stdout_is_refused_only_when_something_would_go_to_it(
    run: Any, svc: FakeService, tmp_path: Path, inp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out.jsonl"
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stdout", None)  # started with `>&-`
        result = run(str(inp), "-o", str(out), *QUESTION)
        refused = run(str(inp), "-o", str(tmp_path / "other.jsonl"), "--failures", "-", *QUESTION)
    assert result.code == 0, result.err
    assert [row["line"] for row in read_rows(out)] == list(range(1, 11))
    assert refused.code == 3
    assert "cannot write the failed lines: stdout is closed; pass --failures FILE" in refused.err
    assert len(svc.requests) == 10


def test_missing_input_exits_3(run: Any, tmp_path: Path) -> None:
    result = run(str(tmp_path / "missing.jsonl"), *QUESTION)
    assert result.code == 3
    assert result.err.startswith("error: FileError: cannot read ")
    # The reason in words, as the other file errors give it ("cannot write 'DIR': Is a directory").
    assert f"cannot read {str(tmp_path / 'missing.jsonl')!r}: No such file or directory\n" in result.err


# -- ids ------------------------------------------------------------------------------------------


def test_duplicate_ids_are_answered_by_an_error_and_reported(
    run: Any, svc: FakeService, tmp_path: Path
) -> None:
    path = tmp_path / "in.jsonl"
    docs: list[dict[str, object]] = [
        {"id": "a", "state": "one"},
        {"id": "b", "state": "two"},
        {"id": "a", "state": "three"},
    ]
    docs += [{"id": "b", "state": "four"}, {"id": "1", "state": "five"}, {"id": 1, "state": "six"}]
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    result = run(str(path), *QUESTION)
    assert result.code == 3
    rows = [json.loads(line) for line in result.out.splitlines()]
    assert ["answers" in row for row in rows] == [True, True, False, False, True, True]
    assert "id 'a' is already on an earlier line" in rows[2]["error"]["message"]
    assert "duplicate ids, not asked: line 3 (id 'a') and 1 more" in result.err
    assert sorted(asked(svc)) == ["five", "one", "six", "two"]


def by_key(rows: list[dict[str, Any]]) -> dict[object, dict[str, Any]]:
    """The output as a reader takes it: the last line for each key (the id, else the line)."""
    return {row.get("id", ("line", row["line"])): row for row in rows}


def duplicate_input(tmp_path: Path) -> Path:
    """Seven lines with ids; "a1" on lines 1 and 7."""
    docs = [{"id": f"s{n}", "state": STATES[n]} for n in range(1, 6)]
    docs = [{"id": "a1", "state": "the first a1"}, *docs, {"id": "a1", "state": "the second a1"}]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def test_a_duplicate_id_is_reported_once_and_a_resume_appends_nothing(
    run: Any, svc: FakeService, tmp_path: Path
) -> None:
    path, out = duplicate_input(tmp_path), tmp_path / "out.jsonl"
    first = run(str(path), "-o", str(out), *QUESTION)
    assert first.code == 3
    assert "duplicate ids, not asked: line 7 (id 'a1'); see the output" in first.err  # one: no "and 0 more"
    rows = read_rows(out)
    assert len(rows) == 7
    assert rows[6] == {"line": 7, "error": rows[6]["error"]}  # no "id": it is not a1's answer
    assert "id 'a1' is already on an earlier line" in rows[6]["error"]["message"]
    assert by_key(rows)["a1"] == {"line": 1, "id": "a1", "answers": answer("the first a1")}
    written, calls = out.read_text(), len(svc.requests)
    for _ in range(2):
        again = run(str(path), "-o", str(out), "--resume", *QUESTION)
        assert again.code == 0, again.err
        assert "duplicate" not in again.err
        assert out.read_text() == written
    assert len(svc.requests) == calls


def test_a_duplicate_after_an_interrupted_run_is_reported_by_the_resume_once(
    run: Any, svc: FakeService, tmp_path: Path
) -> None:
    path, out = duplicate_input(tmp_path), tmp_path / "out.jsonl"
    # As a run stopped after three lines leaves it: a1 answered, line 7 not read yet.
    head = [{"line": 1, "id": "a1", "answers": answer("the first a1")}]
    head += [{"line": n, "id": f"s{n - 1}", "answers": answer(STATES[n - 1])} for n in (2, 3)]
    out.write_text("".join(json.dumps(row) + "\n" for row in head))
    resumed = run(str(path), "-o", str(out), "--resume", *QUESTION)
    assert resumed.code == 3
    assert "duplicate ids, not asked: line 7 (id 'a1')" in resumed.err
    rows = read_rows(out)
    assert [row["line"] for row in rows] == [1, 2, 3, 4, 5, 6, 7]
    assert "id" not in rows[-1]
    assert by_key(rows)["a1"]["answers"] == answer("the first a1")
    assert "the second a1" not in asked(svc)
    written = out.read_text()
    again = run(str(path), "-o", str(out), "--resume", *QUESTION)
    assert (again.code, out.read_text()) == (0, written)


def test_an_input_error_is_written_once_and_a_failed_call_asked_again(
    run: Any, svc: FakeService, tmp_path: Path
) -> None:
    path, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines = [json.dumps("one"), "not json", json.dumps({"id": "x", "state": 5}), json.dumps("two")]
    path.write_text("".join(line + "\n" for line in lines))
    svc.script(delay(0), reply(404, {"detail": "no"}))  # the second call ("two") fails once
    first = run(str(path), "-o", str(out), "--retries", "0", "--concurrency", "1", *QUESTION)
    assert first.code == 3
    assert [sorted(row) for row in read_rows(out)] == [
        ["answers", "line"],
        ["error", "line"],
        ["error", "id", "line"],
        ["error", "line"],
    ]
    again = run(str(path), "-o", str(out), "--resume", *QUESTION)
    assert again.code == 0, again.err
    rows = read_rows(out)
    assert len(rows) == 5  # only the failed call was asked again
    assert rows[-1] == {"line": 4, "answers": answer("two")}
    written = out.read_text()
    assert run(str(path), "-o", str(out), "--resume", *QUESTION).code == 0
    assert out.read_text() == written


def test_key_table_keeps_every_key_and_its_flags_across_growth() -> None:
    table = _jsonl.KeyTable()
    keys = [_jsonl.id_hash(f"id-{i}") for i in range(5000)] + [0, _jsonl.id_hash(5)]
    for key in keys:
        assert table.mark(key, _jsonl.SEEN) == 0
    assert len(table) == len(keys)
    assert len(table._flags) == len(table._keys) == 8192  # a flag byte per slot, no more
    assert all(table.mark(key, _jsonl.DONE) == _jsonl.SEEN for key in keys)
    assert all(table.mark(key, 0) == _jsonl.SEEN | _jsonl.DONE for key in keys)
    assert _jsonl.id_hash("5") != _jsonl.id_hash(5)


def test_key_table_grows_once_more_than_70_percent_of_its_slots_hold_keys() -> None:
    table = _jsonl.KeyTable()
    for i in range(716):  # 70% of 1024 is 716.8
        table.mark(_jsonl.id_hash(i), _jsonl.SEEN)
    assert (len(table), len(table._keys)) == (716, 1024)
    table.mark(_jsonl.id_hash(716), _jsonl.SEEN)
    assert (len(table), len(table._keys)) == (717, 2048)


def test_key_table_probes_every_slot_for_keys_that_share_their_low_bits() -> None:
    # Keys that all start on even slots, more of them than the table has even slots (512 of
    # 1024): the ones that follow take the odd slots, each found again.
    table = _jsonl.KeyTable()
    keys = [2 * i for i in range(1, 701)]
    assert all(table.mark(key, _jsonl.SEEN) == 0 for key in keys)
    assert all(table.mark(key, _jsonl.DONE) == _jsonl.SEEN for key in keys)
    assert (len(table), len(table._keys)) == (700, 1024)


@pytest.mark.parametrize(("expected", "size"), [(0, 1024), (716, 1024), (717, 2048), (3000, 8192)])
def test_key_table_sized_for_the_keys_expected_never_grows(expected: int, size: int) -> None:
    table = _jsonl.KeyTable(expected)
    assert len(table._keys) == 0  # nothing allocated before the first id
    for i in range(max(expected, 1)):
        table.mark(_jsonl.id_hash(i), _jsonl.SEEN)
    assert len(table._keys) == size


def test_input_estimates_its_line_count_from_size_and_first_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_input(tmp_path / "in.jsonl", [f"state {i:04}" for i in range(5000)])
    source = _jsonl.InputLines(str(path))
    try:
        assert 4500 <= source.estimate() <= 5500
        assert source.read() == (1, '"state 0000"\n')  # the estimate consumed nothing
    finally:
        source.close()
    # Short lines in the first 8 KiB (a default buffer), long ones after: the estimate reads its
    # first 64 KiB, as its docstring says, not what a default buffer happens to hold.
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(b"1234567\n" * 1024 + (b"x" * 1023 + b"\n") * 120)
    source = _jsonl.InputLines(str(mixed))
    try:
        assert source.estimate() == (1024 + 56) * mixed.stat().st_size // (1 << 16)
    finally:
        source.close()
    empty = _jsonl.InputLines(str(write_input(tmp_path / "empty.jsonl", [])))
    assert empty.estimate() == 0
    empty.close()
    with open(path, "rb", buffering=0) as unbuffered:  # a stdin that cannot peek: unknown
        monkeypatch.setattr(sys, "stdin", _Piped(unbuffered))
        source = _jsonl.InputLines("-")
        assert source.size == path.stat().st_size
        assert source.estimate() == 0


def test_input_estimate_is_0_for_a_file_emptied_after_it_was_opened(tmp_path: Path) -> None:
    # Its size came from the open file; its head, read later, holds nothing to count: unknown.
    path = write_input(tmp_path / "in.jsonl", STATES)
    source = _jsonl.InputLines(str(path))
    try:
        path.write_bytes(b"")
        assert source.size == len("".join(json.dumps(s) + "\n" for s in STATES))
        assert source.estimate() == 0
    finally:
        source.close()


class _Piped:
    """A stdin whose bytes come from a pipe (as ``python -m qa_min batch < pipe`` reads them)."""

    def __init__(self, buffer: Any) -> None:
        self.buffer = buffer


def piped_input(monkeypatch: pytest.MonkeyPatch, data: bytes) -> _jsonl.InputLines:
    """``InputLines`` reading stdin from a pipe that holds ``data``, its writer closed."""
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    buffer = os.fdopen(r, "rb")
    monkeypatch.setattr(sys, "stdin", _Piped(buffer))
    source = _jsonl.InputLines(None)
    assert source.size is None
    return source


class _Poll:
    """Stands for the pipe's poll: ``quiet`` timeouts with nothing to read, then readable."""

    def __init__(self, quiet: int) -> None:
        self.quiet = quiet

    def poll(self, timeout: int) -> list[tuple[int, int]]:
        self.quiet -= 1
        return [] if self.quiet >= 0 else [(0, 1)]


def test_a_pipe_is_read_line_by_line_an_empty_line_and_an_unended_last_line_included(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = piped_input(monkeypatch, b'\n"a"\n\n"b"')
    try:
        assert [source.read() for _ in range(4)] == [(1, "\n"), (2, '"a"\n'), (3, "\n"), (4, '"b"')]
        assert source.read() is None
        assert source.eof  # the end, not a stop: the count is exact
        assert source.total() == (4, True)
    finally:
        buffer = sys.stdin.buffer
        source.close()
        buffer.close()


class _Feeder:
    """Stands for the pipe's poll: before each poll, the writer writes its next chunk (closes the
    pipe after the last), so that the reader sees the input arrive in those pieces."""

    def __init__(self, w: int, chunks: list[bytes]) -> None:
        self.w, self.chunks = w, chunks

    def poll(self, timeout: int) -> list[tuple[int, int]]:
        if self.chunks:
            os.write(self.w, self.chunks.pop(0))
        elif self.w >= 0:
            os.close(self.w)
            self.w = -1
        return [(0, 1)]


def test_a_pipe_line_that_arrives_in_pieces_is_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    r, w = os.pipe()
    buffer = os.fdopen(r, "rb")
    monkeypatch.setattr(sys, "stdin", _Piped(buffer))
    source = _jsonl.InputLines(None)
    feeder = _Feeder(w, [b'"fir', b'st"', b'\n"sec', b'ond"\n"third"'])
    try:
        monkeypatch.setattr(source, "_poll", feeder)
        assert [source.read() for _ in range(3)] == [(1, '"first"\n'), (2, '"second"\n'), (3, '"third"')]
        assert source.read() is None
        assert source.eof
    finally:
        if feeder.w >= 0:
            os.close(feeder.w)
        source.close()
        buffer.close()


def test_a_pipe_line_in_pieces_is_searched_for_its_newline_once_from_where_the_last_search_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each wait for the next piece resumes the search past the bytes already searched: a search
    # from the line's start would cost the line's length per piece (a long line, many pieces).
    r, w = os.pipe()
    buffer = os.fdopen(r, "rb")
    monkeypatch.setattr(sys, "stdin", _Piped(buffer))
    source = _jsonl.InputLines(None)
    searched: list[tuple[int, int]] = []

    class Watched(_Feeder):
        def poll(self, timeout: int) -> list[tuple[int, int]]:
            searched.append((source._scanned, len(source._buffer)))
            return super().poll(timeout)

    feeder = Watched(w, [b'"ab', b"cd", b'ef"\n'])
    try:
        monkeypatch.setattr(source, "_poll", feeder)
        assert source.read() == (1, '"abcdef"\n')
        assert searched == [(0, 0), (3, 3), (5, 5)]
        assert source._scanned == 0  # the next line is searched from its start
    finally:
        if feeder.w >= 0:
            os.close(feeder.w)
        source.close()
        buffer.close()


def test_a_pipe_read_waits_out_a_quiet_poll_and_ends_once_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    source = piped_input(monkeypatch, b'"a"\n')
    try:
        monkeypatch.setattr(source, "_poll", _Poll(quiet=2))  # the writer is slow: 100 ms of nothing
        assert source.read() == (1, '"a"\n')
        monkeypatch.setattr(source, "_poll", _Poll(quiet=10**9))  # the writer never writes again
        source.stop()
        assert source.read() is None
        assert not source.eof  # stopped: the input did not end
    finally:
        buffer = sys.stdin.buffer
        source.close()
        buffer.close()


def test_input_total_is_estimated_from_the_bytes_read_then_exact_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_input(tmp_path / "in.jsonl", ["s1", "s2", "s3", "s4"])  # 4 lines of 5 bytes
    source = _jsonl.InputLines(str(path))
    try:
        assert source.total() is None  # nothing read yet
        source.read()
        assert source.total() == (4, False)
        for _ in range(3):
            source.read()
        assert source.total() == (4, False)  # the end not seen yet
        assert source.read() is None
        assert source.total() == (4, True)
    finally:
        source.close()
    monkeypatch.setattr(sys, "stdin", io.StringIO('"s1"\n"s2"\n'))
    unsized = _jsonl.InputLines("-")
    assert unsized.read() == (1, '"s1"\n')
    assert unsized.total() is None  # no size to estimate from
    assert [unsized.read(), unsized.read()] == [(2, '"s2"\n'), None]
    assert unsized.total() == (2, True)


# -- the command line -----------------------------------------------------------------------------


def test_a_file_name_is_never_taken_as_a_question_value(run: Any, svc: FakeService, inp: Path) -> None:
    result = run("--score", "q", "low", "mid", "high", str(inp))
    assert result.code == 2
    assert f"{str(inp)!r} names a file but would be read as a --score value" in result.err
    assert "usage: qa-min batch" in result.err
    assert svc.requests == []
    after_dashes = run("--score", "q", "low", "high", "--", str(inp))
    assert after_dashes.code == 0, after_dashes.err
    assert len(after_dashes.out.splitlines()) == len(STATES)


@pytest.mark.parametrize(
    ("option", "value", "ok"),
    [
        ("--concurrency", "1", True),
        ("--concurrency", "0", False),
        ("--concurrency", str(_parser.MAX_CONCURRENCY), True),
        ("--concurrency", str(_parser.MAX_CONCURRENCY + 1), False),
        ("--concurrency", "two", False),
        ("--max-rate", "190", True),
        ("--max-rate", "1000.5", True),
        ("--max-rate", "0", False),
        ("--max-rate", "-5", False),
        ("--max-rate", "inf", False),
        ("--max-rate", "nan", False),
        ("--max-rate", "fast", False),
    ],
)
def test_concurrency_and_max_rate_limits(run: Any, inp: Path, option: str, value: str, ok: bool) -> None:
    result = run(str(inp), option, value, "-q", *QUESTION)
    assert result.code == (0 if ok else 2), result.err
    if ok:
        assert len(result.out.splitlines()) == len(STATES)
    else:
        assert f"argument {option}: " in result.err


def test_progress_shows_the_limiters_ceiling_and_counts_busy_replies() -> None:
    from qa_min._cli._batch import _ceiling

    with qa.Client(base_url="http://127.0.0.1:9", rate_limit=qa.RateLimit(50)) as paced:
        assert _ceiling(paced)() == 50.0
    with qa.Client(base_url="http://127.0.0.1:9") as adaptive:
        assert _ceiling(adaptive)() is None  # no ceiling until the first 429
    with qa.Client(base_url="http://127.0.0.1:9", rate_limit=None) as unlimited:
        assert _ceiling(unlimited)() is None


def test_a_short_key_that_spells_a_number_leaves_every_json_line_parseable(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The key was hidden in the JSON text: with the key "1", {"line": 1, ...} became
    # {"line": [redacted], ...}, which a reader cannot parse and --resume refused to continue.
    inp = write_input(tmp_path / "in.jsonl", STATES[:3])
    out, failed = tmp_path / "out.jsonl", tmp_path / "failed.jsonl"
    with FakeService(api_key="1") as svc:
        svc.script(reply(500, {"detail": "no"}))
        argv = ["--base-url", svc.url, "--api-key", "1", "--retries", "0", "batch", str(inp), "-o", str(out)]
        first = run_main(capsys, *argv, "--failures", str(failed), "--concurrency", "1", "-q", *QUESTION)
        assert first.code == 5, first.err
        assert [row["line"] for row in read_rows(failed)] == [1]
        assert [row["line"] for row in read_rows(out)] == [1, 2, 3]
        again = run_main(capsys, *argv, "--resume", "-q", *QUESTION)
        assert again.code == 0, again.err
        assert read_rows(out)[-1] == {"line": 1, "answers": answer(STATES[0])}
        shown = run_main(capsys, "--base-url", svc.url, "--api-key", "1", "--json", "models")
        assert shown.code == 0, shown.err
        assert isinstance(json.loads(shown.out), list)

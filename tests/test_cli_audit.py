"""An outside audit of the command line, hooks, Diagnostics and a pickled client (SPEC.md 6-7b).

What the docs promise and no other test held, on real sockets and, where it matters, real
processes:

  batch on stdin, SIGINT in flight, the printed command resumes it after a torn last line,
  the calls in flight stop at --concurrency .....
      test_sigint_on_stdin_then_the_printed_command_resumes_a_torn_output
  batch into a pipe that closes: exit 1 ........ test_a_reader_that_goes_away_ends_batch_with_exit_1_quietly
  empty input ................................... test_an_empty_input_writes_nothing_and_exits_0
  order and exit code under retries and faults . test_order_attempts_and_exit_code_under_retries_and_faults
  nothing listening: exit 6 ..................... test_a_service_that_cannot_be_reached_exits_6_line_by_line
  --max-rate, counted by the service ............ test_max_rate_is_what_the_service_counts
  --failures holds exactly this run's failures .. test_failures_file_is_the_error_lines_of_this_run
  malformed lines, and bytes that are not UTF-8
  on a pipe ..................................... test_malformed_lines_are_answered_by_their_error_once,
                                                  test_lines_that_are_not_utf8_on_a_pipe_are_bad_lines
  hooks: a before and an after event per attempt,
  in order, on both clients, retries, 429/529
  pauses, cancellations, a hook that raises ..... test_every_attempt_has_a_before_and_an_after_event
  Call.cancel() of a submitted call .............
      test_cancelling_a_submitted_call_shows_the_attempt_to_the_hooks
  a Diagnostics reused: this call's records ..... test_a_reused_diagnostics_holds_only_the_last_calls_attempts
  a pickled client: configuration, no state ..... test_a_pickled_client_keeps_its_configuration_and_no_state

What those files already hold is not repeated: test_batch.py, test_batch_process.py, test_cli.py,
test_cli_options.py, test_debugging.py, test_scenarios.py and test_pickle_client.py.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
import pickle
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import pytest
from batchsupport import (
    QUESTION,
    Result,
    answer,
    asked,
    child_env,
    clean_env,
    line_count,
    read_rows,
    run_main,
    start_batch,
)
from faultservers import RawServer, read_request
from support import wait_until

import qa_min as qa
from qa_min.testing import FakeService, MockTransport, Step, delay, drop, hang, reply

BOUND = 10.0  # seconds: a bound on anything awaited here, so that a bug fails instead of hanging
ROOT = Path(__file__).resolve().parent.parent
posix = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and pipes")


@pytest.fixture(autouse=True)
def _isolate(monkeypatch: pytest.MonkeyPatch) -> None:
    clean_env(monkeypatch)
    monkeypatch.setattr(sys, "stdin", sys.stdin)


def finish(proc: subprocess.Popen[str], stdin: Optional[str] = None) -> tuple[str, str]:
    """Wait for ``proc`` (bounded); kill it if it outlives the bound, so that none is leaked."""
    try:
        return proc.communicate(stdin, timeout=BOUND)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


# -- batch as a process ---------------------------------------------------------------------------


@posix
def test_sigint_on_stdin_then_the_printed_command_resumes_a_torn_output(
    svc: FakeService, tmp_path: Path
) -> None:
    states = [f"state number {i}" for i in range(12)]
    lines = "".join(json.dumps({"id": f"s{i}", "state": s}) + "\n" for i, s in enumerate(states))
    out, failures = tmp_path / "out.jsonl", tmp_path / "failed.jsonl"
    answered, concurrency = 4, 3
    svc.script(*[delay(0)] * answered, *[hang()] * concurrency)
    argv = ["--base-url", svc.url, "batch", "-o", str(out), "--failures", str(failures)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "qa_min", *argv, "--concurrency", str(concurrency), "-q", *QUESTION],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=child_env(),
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(lines)
        proc.stdin.close()
        proc.stdin = None  # closed: communicate() must not flush it
        assert svc.wait_for_requests(answered + concurrency, timeout=BOUND)
        # --concurrency calls in flight, all held: not one more is sent.
        assert not svc.wait_for_requests(answered + concurrency + 1, timeout=0.2)
        hung = [r.json()["state"] for r in svc.requests[answered:]]
        written = min(states.index(s) for s in hung)
        assert wait_until(lambda: line_count(out) == written, timeout=BOUND)
        proc.send_signal(signal.SIGINT)
        proc.wait(BOUND)
    finally:
        _, err = finish(proc)
        svc.release()
    assert proc.returncode == 130, err
    assert read_rows(out) == [
        {"line": n, "id": f"s{n - 1}", "answers": answer(s)} for n, s in enumerate(states[:written], 1)
    ]
    assert failures.read_text() == ""  # a cancelled line is asked again, not a failure
    *_, stopped, resume, command = err.splitlines()
    in_flight = answered + concurrency - written
    assert stopped == (
        f"interrupted: {written} input lines done, their answers in {str(out)!r}; "
        f"{in_flight} lines read but not written are asked again on resume"
    )
    assert resume == "resume with (with the same input on stdin):"
    resume_argv = shlex.split(command)
    assert resume_argv[:3] == [sys.executable, "-m", "qa_min"]
    assert "--resume" in resume_argv

    # As `kill -9` in the middle of writing the next line would have left the file.
    with out.open("a") as torn:
        torn.write(f'{{"line": {written + 1}, "id": "s{written}", "answ')
    resumed = subprocess.run(
        resume_argv, input=lines, capture_output=True, text=True, env=child_env(), timeout=BOUND, check=False
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "its last line was cut short; that line is asked again" in resumed.stderr
    rows = read_rows(out)
    assert rows == [{"line": n, "id": f"s{n - 1}", "answers": answer(s)} for n, s in enumerate(states, 1)]
    counts = asked(svc)
    assert set(counts) == set(states)
    assert {s for s, n in counts.items() if n > 1} <= set(states[written : answered + concurrency])
    assert failures.read_text() == ""


@posix
def test_a_reader_that_goes_away_ends_batch_with_exit_1_quietly(svc: FakeService, tmp_path: Path) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(f"state {i}") + "\n" for i in range(3000)))
    proc = start_batch("--base-url", svc.url, "batch", str(inp), "-q", *QUESTION)
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline()) == {"line": 1, "answers": answer("state 0")}
        proc.stdout.close()  # `batch ... | head -1`
        proc.wait(BOUND)
    finally:
        _, err = finish(proc)
    assert proc.returncode == 1, err
    assert err == ""  # no traceback, no "Exception ignored ... BrokenPipeError"
    assert svc.request_count < 3000  # it stopped, rather than asking about the whole file


# -- batch in this process --------------------------------------------------------------------------


def batch(capsys: pytest.CaptureFixture[str], url: str, *argv: str, stdin: Optional[str] = None) -> Result:
    return run_main(capsys, "--base-url", url, "batch", *argv, stdin=stdin)


@pytest.mark.parametrize("content", ["", "\n  \n\r\n"], ids=["empty", "blank-lines"])
@pytest.mark.parametrize("where", ["file", "stdin"])
def test_an_empty_input_writes_nothing_and_exits_0(
    capsys: pytest.CaptureFixture[str], svc: FakeService, tmp_path: Path, content: str, where: str
) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text(content)
    out = tmp_path / "out.jsonl"
    source = [str(inp)] if where == "file" else []
    stdin = content if where == "stdin" else None
    first = batch(capsys, svc.url, *source, "-o", str(out), *QUESTION, stdin=stdin)
    assert first.code == 0, first.err
    assert (first.out, out.read_text()) == ("", "")
    blank = content.count("\n")
    assert first.err == f"batch: {blank} lines in 0s: 0 answered, 0 failed\n"
    # An empty output is one a resumed run may continue.
    again = batch(capsys, svc.url, *source, "-o", str(out), "--resume", "-q", *QUESTION, stdin=stdin)
    assert (again.code, again.err, out.read_text()) == (0, "", "")
    assert svc.requests == []


class StateServer:
    """A service that answers each ``/v1/core`` request by the first word of its state.

    ``ok``: 200. ``slow404``: 404 after 0.2 s. ``busy``: 429 (``retry-after-ms: 5``), always.
    ``garbled``: 200 with a body that is not JSON. ``flaky``: 503 the first time, then 200.
    ``drop``: the connection closed without a response the first time, then 200. Every
    response carries ``request-id: rid-<state>-<n>``, n counting that state's requests.
    """

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._raw = RawServer(self._handle)

    def __enter__(self) -> StateServer:
        self._raw.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._raw.__exit__(*exc)

    @property
    def url(self) -> str:
        return self._raw.url

    @staticmethod
    def answer(state: str) -> dict[str, object]:
        return {"toxic": len(state) % 2 == 0}

    def _handle(self, conn: socket.socket, stop: threading.Event) -> None:
        while True:
            request = read_request(conn)
            if not request:
                return
            state = json.loads(request.partition(b"\r\n\r\n")[2])["state"]
            with self._lock:
                self.seen[state] += 1
                count = self.seen[state]
            kind, rid = state.split()[0], f"rid-{state.replace(' ', '-')}-{count}"
            ok = json.dumps({"answers": self.answer(state), "usage": {}}).encode()
            if kind == "drop" and count == 1:
                return
            if kind == "slow404" and stop.wait(0.2):
                return
            status, body, extra = {
                "slow404": (404, b'{"detail": "gone"}', ""),
                "busy": (429, b'{"detail": "slow down"}', "retry-after-ms: 5\r\n"),
                "garbled": (200, b"not json", ""),
                "flaky": (503, b'{"detail": "busy"}', "retry-after-ms: 1\r\n")
                if count == 1
                else (200, ok, ""),
            }.get(kind, (200, ok, ""))
            head = (
                f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nrequest-id: {rid}\r\n{extra}\r\n"
            )
            conn.sendall(head.encode() + body)


def test_order_attempts_and_exit_code_under_retries_and_faults(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    states = ["ok a", "slow404 b", "busy c", "garbled d", "flaky e", "drop f", None, "ok g", "ok hh"]
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(("{oops" if s is None else json.dumps(s)) + "\n" for s in states))
    with StateServer() as server:
        result = batch(capsys, server.url, str(inp), "--concurrency", "4", "--retries", "1", "-q", *QUESTION)
        rows = [json.loads(line) for line in result.out.splitlines()]
        assert [row["line"] for row in rows] == list(range(1, len(states) + 1))  # input order
        for row, state in zip(rows, states):
            if state is not None and state.split()[0] in ("ok", "flaky", "drop"):
                assert row == {"line": row["line"], "answers": server.answer(state)}
        errors = {row["line"]: row["error"] for row in rows if "error" in row}
        assert sorted(errors) == [2, 3, 4, 7]
        busy = server.seen["busy c"]
        assert busy >= 2  # retried, then given up
        assert errors[2] == {
            "type": "NotFound",
            "message": errors[2]["message"],
            "status": 404,
            "attempts": 1,
            "request_id": "rid-slow404-b-1",
            "body": '{"detail": "gone"}',
        }
        assert "gone" in errors[2]["message"]
        assert "rid-slow404-b-1" in errors[2]["message"]
        assert (errors[3]["type"], errors[3]["status"], errors[3]["attempts"]) == ("RateLimited", 429, busy)
        assert errors[3]["request_id"] == f"rid-busy-c-{busy}"  # the last response's
        assert (errors[4]["type"], errors[4]["status"], errors[4]["attempts"]) == ("InvalidResponse", 200, 1)
        assert errors[4]["request_id"] == "rid-garbled-d-1"
        assert (errors[7]["type"], errors[7]["attempts"], errors[7]["status"]) == ("InvalidState", 0, None)
        assert (server.seen["flaky e"], server.seen["drop f"]) == (2, 2)
        # Line 3 (429, exit 4) and line 4 (exit 7) failed before line 2 (404, exit 5) answered;
        # the exit code is that of the first failed line in input order.
        assert result.code == 5
        again = batch(
            capsys,
            server.url,
            "--concurrency",
            "3",
            "-q",
            *QUESTION,
            stdin='"ok x"\n"garbled y"\n"slow404 z"\n',
        )
        assert again.code == 7
        assert [sorted(json.loads(line)) for line in again.out.splitlines()] == [
            ["answers", "line"],
            ["error", "line"],
            ["error", "line"],
        ]


def test_a_service_that_cannot_be_reached_exits_6_line_by_line(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeService() as gone:  # a port that no longer listens
        url = gone.url
    result = batch(capsys, url, "--retries", "0", "-q", *QUESTION, stdin='"one"\n"two"\n')
    assert result.code == 6
    rows = [json.loads(line) for line in result.out.splitlines()]
    assert [row["line"] for row in rows] == [1, 2]
    for row in rows:
        error = row["error"]
        assert (error["type"], error["status"], error["attempts"], error["body"]) == (
            "ConnectionFailed",
            None,
            1,
            None,
        )


def test_max_rate_is_what_the_service_counts(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    count, rate = 12, 40.0
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(f"state {i}") + "\n" for i in range(count)))
    # RateLimit(40) spaces attempts 25 ms apart, each allowed to start up to 50 ms early
    # (docs/rate-limits.md): at most 40 T + 3 in any T seconds, arrivals a few ms apart from
    # that on a loaded machine. The service lets 60 a second through, 8 at once: a client
    # that sent faster (its 8 workers at once, then more) would be answered 429, and with
    # --retries 0 that line would fail. A burst of 8 leaves room for calls a loaded machine
    # sends up to 125 ms late, all at once (with 4, 25 ms late was enough for a 429).
    with FakeService(rate_limit=(60.0, 8.0), retry_after="ms") as svc:
        started = time.monotonic()
        argv = [str(inp), "--max-rate", str(rate), "--retries", "0", "--concurrency", "8", "-q", *QUESTION]
        result = batch(capsys, svc.url, *argv)
        took = time.monotonic() - started
        assert result.code == 0, result.out
        assert svc.rate_limited_count == 0
        assert svc.request_count == count
    assert [json.loads(line)["answers"] for line in result.out.splitlines()] == [
        answer(f"state {i}") for i in range(count)
    ]
    assert took >= 0.8 * (count - 3) / rate


def test_failures_file_is_the_error_lines_of_this_run(
    capsys: pytest.CaptureFixture[str], svc: FakeService, tmp_path: Path
) -> None:
    docs: list[object] = [
        {"id": "a", "state": "one"},
        "two",
        {"id": 3, "state": "three"},
        "{bad",
        {"id": "d"},
    ]
    docs += [{"id": "e", "state": "five"}]
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join((d if d == "{bad" else json.dumps(d)) + "\n" for d in docs))
    out, failures = tmp_path / "out.jsonl", tmp_path / "failed.jsonl"
    # Calls, one at a time: "one" answered, "two" 404, "three" 500, "five" answered.
    svc.script(delay(0), reply(404, {"detail": "no"}), reply(500, {"detail": "down"}))
    argv = [str(inp), "-o", str(out), "--failures", str(failures), "--concurrency", "1", "--retries", "0"]
    first = batch(capsys, svc.url, *argv, "-q", *QUESTION)
    assert first.code == 5
    failed = read_rows(failures)
    assert failed == [row for row in read_rows(out) if "error" in row]
    assert [(r["line"], r.get("id"), r["error"]["type"]) for r in failed] == [
        (2, None, "NotFound"),
        (3, 3, "ServerError"),
        (4, None, "InvalidState"),
        (5, "d", "InvalidState"),
    ]
    # The resumed run asks the two failed calls again ("three" fails again); its failures file
    # holds its own failures only: the bad lines were not asked, nor written, again.
    svc.script(delay(0), reply(503, {"detail": "still down"}))
    again = batch(capsys, svc.url, *argv, "--resume", "-q", *QUESTION)
    assert again.code == 5
    rows = read_rows(out)
    assert len(rows) == 8
    assert rows[-2:] == [
        {"line": 2, "answers": answer("two")},
        {"line": 3, "id": 3, "error": rows[-1]["error"]},
    ]
    assert read_rows(failures) == [rows[-1]]
    assert (rows[-1]["error"]["status"], rows[-1]["error"]["body"]) == (503, '{"detail": "still down"}')


def test_malformed_lines_are_answered_by_their_error_once(
    capsys: pytest.CaptureFixture[str], svc: FakeService, tmp_path: Path
) -> None:
    bad = [
        "[1]",
        "null",
        '"state" trailing',
        '{"id": null, "state": "x"}',
        '{"id": 1.5, "state": "x"}',
        '{"id": true, "state": "x"}',
        '{"id": "k1", "state": 5}',
        '{"id": "k2", "state": "   "}',
        '{"id": "k3"}',
        '{"state": ["x"]}',
    ]
    inp = tmp_path / "in.jsonl"
    inp.write_text("\n".join([*bad, '"fine"']) + "\n")
    out = tmp_path / "out.jsonl"
    result = batch(capsys, svc.url, str(inp), "-o", str(out), "-q", *QUESTION)
    assert result.code == 3
    rows = read_rows(out)
    assert [row["line"] for row in rows] == list(range(1, len(bad) + 2))
    assert rows[-1] == {"line": len(bad) + 1, "answers": answer("fine")}
    for row in rows[:-1]:
        assert row["error"] == {
            "type": "InvalidState",
            "message": row["error"]["message"],
            "status": None,
            "attempts": 0,
            "request_id": None,
            "body": None,
        }
    # Every message names its line, the library's own validation errors (a blank state) too.
    assert [row["error"]["message"].split(":")[0].split(" is ")[0] for row in rows[:-1]] == [
        f"line {number}" for number in range(1, len(bad) + 1)
    ]
    # A valid id is kept on its line's error; an id that is not one is not copied.
    assert [row.get("id") for row in rows[:-1]] == [None] * 6 + ["k1", "k2", "k3", None]
    assert [r.json()["state"] for r in svc.requests] == ["fine"]
    written = out.read_text()
    resumed = batch(capsys, svc.url, str(inp), "-o", str(out), "--resume", "-q", *QUESTION)
    assert (resumed.code, out.read_text(), svc.request_count) == (0, written, 1)


@posix
def test_lines_that_are_not_utf8_on_a_pipe_are_bad_lines(
    capsys: pytest.CaptureFixture[str], svc: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    r, w = os.pipe()
    os.write(w, b'"caf\xc3\xa9"\n"caf\xe9"\n\xff\xfe\n{"id": "k", "state": "last, no newline"}')
    os.close(w)
    with os.fdopen(r, "rb") as stdin_bytes:

        class Stdin:
            buffer = stdin_bytes

        monkeypatch.setattr(sys, "stdin", Stdin())
        result = run_main(capsys, "--base-url", svc.url, "batch", "-q", *QUESTION)
    assert result.code == 3
    rows = [json.loads(line) for line in result.out.splitlines()]
    assert rows[0] == {"line": 1, "answers": answer("café")}
    assert rows[3] == {"line": 4, "id": "k", "answers": answer("last, no newline")}
    for number, row in ((2, rows[1]), (3, rows[2])):
        assert (row["line"], row["error"]["type"], row["error"]["attempts"]) == (number, "InvalidState", 0)
        assert row["error"]["message"] == f"line {number} is not UTF-8"
    assert sorted(r.json()["state"] for r in svc.requests) == ["café", "last, no newline"]


# -- hooks and Diagnostics, on both clients ----------------------------------------------------------

REQUEST = qa.Request(state="Some text", questions=[qa.NamedQuestion("toxic", qa.YesNo("yes", "no"))])
Event = tuple[str, int, Optional[int], Optional[str], Optional[str], bool, int]


class Recorder:
    """Keeps every event a hook sees (and the thread it ran on); the hook before it raises."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: qa.HookEvent) -> None:
        error = None if event.error is None else type(event.error).__name__
        timed = event.duration is not None and event.duration >= 0
        thread = threading.get_ident()
        self.events.append((event.stage, event.attempt, event.status, error, event.request_id, timed, thread))

    def hooks(self) -> dict[str, list[Any]]:
        return {"before_attempt": [_raising, self], "after_attempt": [_raising, self]}


def _raising(event: qa.HookEvent) -> None:
    raise RuntimeError(f"the tracing backend is down at attempt {event.attempt}")


def _no_wait(seconds: float, wake: threading.Event) -> None:
    """Backoff and pauses without waiting (the delays are still computed)."""


async def _no_wait_async(seconds: float) -> None:
    pass


@dataclass
class Scenario:
    name: str
    steps: tuple[Step, ...]
    attempts: int
    error: Optional[str] = None  # the call's error, or None: answered
    last: Optional[str] = None  # the error the last attempt's record names
    options: dict[str, Any] = field(default_factory=dict)
    timeout: Optional[float] = None
    cancel: bool = False  # the token, from another thread, once the request arrived
    waits: bool = False  # real backoff, for a timeout to expire in it


SCENARIOS = [
    Scenario(
        "503-drop-then-200",
        (reply(503, {"detail": "busy"}, headers=[("retry-after-ms", "1"), ("request-id", "r1")]), drop()),
        3,
        options={"retry": qa.RetryPolicy(max_retries=3)},
    ),
    Scenario(
        "429-529-pauses-then-200",
        (
            reply(429, {"detail": "slow"}, headers=[("retry-after-ms", "20"), ("request-id", "r429")]),
            reply(529, None, headers=[("retry-after-ms", "10")]),
        ),
        3,
    ),
    Scenario(
        "500-until-retries-run-out", (reply(500, {"detail": "down"}),) * 3, 3, "ServerError", "ServerError"
    ),
    Scenario(
        "timeout-in-the-backoff",
        (reply(503, None, headers=[("retry-after-ms", "5000")]),),
        1,
        "Canceled",
        "ServerError",  # the attempt was over; the wait after it was cut short
        timeout=0.5,  # the 503 must come within it, over a new connection, on a loaded machine
        waits=True,
    ),
    Scenario("timeout-in-the-attempt", (hang(),), 1, "Canceled", "Canceled", timeout=0.1, waits=True),
    Scenario("token-cancelled-in-the-attempt", (hang(),), 1, "Canceled", "Canceled", cancel=True),
]


def _cancel_once_arrived(svc: FakeService, token: qa.CancelToken) -> threading.Thread:
    def cancel() -> None:
        svc.wait_for_requests(1, BOUND)
        token.cancel()

    thread = threading.Thread(target=cancel)
    thread.start()
    return thread


def run_scenario(
    kind: str, svc: FakeService, case: Scenario, recorder: Recorder
) -> tuple[object, qa.Diagnostics]:
    """The call through ``Client`` or ``AsyncClient``: its result or error, and its Diagnostics."""
    svc.script(*case.steps)
    diagnostics, token = qa.Diagnostics(), qa.CancelToken()
    options: dict[str, Any] = {
        "base_url": svc.url,
        "trust_env": False,
        "hooks": recorder.hooks(),
        **case.options,
    }
    canceller = _cancel_once_arrived(svc, token) if case.cancel else None
    outcome: object
    try:
        if kind == "Client":
            sleep: dict[str, Any] = {} if case.waits else {"sleep": _no_wait}
            with qa.Client(**options, **sleep) as client:
                try:
                    outcome = client.core(
                        REQUEST, diagnostics=diagnostics, cancel=token, timeout=case.timeout
                    )
                except qa.QAError as exc:
                    outcome = exc
        else:

            async def main() -> object:
                sleep: dict[str, Any] = {} if case.waits else {"sleep": _no_wait_async}
                async with qa.AsyncClient(**options, **sleep) as client:
                    try:
                        return await client.core(
                            REQUEST, diagnostics=diagnostics, cancel=token, timeout=case.timeout
                        )
                    except qa.QAError as exc:
                        return exc

            outcome = asyncio.run(main())
    finally:
        if canceller is not None:
            canceller.join(BOUND)
        svc.release()
    return outcome, diagnostics


@pytest.mark.parametrize("case", SCENARIOS, ids=[c.name for c in SCENARIOS])
@pytest.mark.parametrize("kind", ["Client", "AsyncClient"])
def test_every_attempt_has_a_before_and_an_after_event(
    svc: FakeService, caplog: pytest.LogCaptureFixture, kind: str, case: Scenario
) -> None:
    recorder = Recorder()
    with caplog.at_level(logging.WARNING, logger="qa_min"):
        outcome, diag = run_scenario(kind, svc, case, recorder)
    if case.error is None:
        assert isinstance(outcome, qa.CoreResponse), outcome
        assert outcome.diagnostics is diag
    else:
        assert type(outcome).__name__ == case.error, outcome
        assert isinstance(outcome, qa.QAError)
        assert outcome.diagnostics is diag
    # One record per attempt; one before and one after event each, in order, on the caller's
    # thread (the loop's, for AsyncClient), whatever the hook before the recorder raised.
    n = case.attempts
    assert diag.attempts == len(diag.history) == n
    assert [a.number for a in diag.history] == list(range(1, n + 1))
    events = recorder.events
    assert [(e[0], e[1]) for e in events] == [
        (stage, i) for i in range(1, n + 1) for stage in ("before_attempt", "after_attempt")
    ]
    assert {e[6] for e in events} == {threading.get_ident()}
    for before, after, record in zip(events[::2], events[1::2], diag.history):
        assert before[2:6] == (None, None, None, False)
        assert after[2:6] == (record.status, record.error, record.request_id, True)
    assert events[-1][3] == diag.history[-1].error == case.last
    # The raising hook ran for every event, was logged as a warning, and the call went on.
    warnings = [r.getMessage() for r in caplog.records if r.name == "qa_min" and r.levelno == logging.WARNING]
    hook_warnings = [m for m in warnings if "the tracing backend is down" in m]
    assert len(hook_warnings) == 2 * n
    assert all("RuntimeError" in m for m in hook_warnings)
    with pytest.raises(AttributeError):
        diag.history[0].status = 0
    assert isinstance(diag.history, tuple)


def test_cancelling_a_submitted_call_shows_the_attempt_to_the_hooks(svc: FakeService) -> None:
    recorder = Recorder()
    svc.script(hang())
    diag = qa.Diagnostics()
    try:
        with qa.Client(base_url=svc.url, trust_env=False, hooks=recorder.hooks()) as client:
            call = client.submit(client.core, REQUEST, diagnostics=diag)
            assert svc.wait_for_requests(1, BOUND)
            assert call.cancel()
            with pytest.raises(qa.Canceled, match="cancelled"):
                call.result(BOUND)
            assert wait_until(lambda: len(recorder.events) == 2)
    finally:
        svc.release()
    assert [(e[0], e[1], e[2], e[3]) for e in recorder.events] == [
        ("before_attempt", 1, None, None),
        ("after_attempt", 1, None, "Canceled"),
    ]
    assert [(a.number, a.status, a.error) for a in diag.history] == [(1, None, "Canceled")]


@pytest.mark.parametrize("kind", ["Client", "AsyncClient"])
def test_a_reused_diagnostics_holds_only_the_last_calls_attempts(svc: FakeService, kind: str) -> None:
    diag = qa.Diagnostics()
    svc.script(reply(503, None, headers=[("retry-after-ms", "1"), ("request-id", "first")]))
    if kind == "Client":
        with qa.Client(base_url=svc.url, trust_env=False, sleep=_no_wait) as client:
            client.core(REQUEST, diagnostics=diag)
            assert diag.attempts == 2
            client.core(REQUEST, diagnostics=diag)
    else:

        async def main() -> None:
            async with qa.AsyncClient(base_url=svc.url, trust_env=False, sleep=_no_wait_async) as client:
                await client.core(REQUEST, diagnostics=diag)
                assert diag.attempts == 2
                await client.core(REQUEST, diagnostics=diag)

        asyncio.run(main())
    assert (diag.attempts, diag.status, diag.request_id) == (1, 200, None)
    assert [(a.number, a.status) for a in diag.history] == [(1, 200)]


# -- a pickled client ------------------------------------------------------------------------------

SEEN_BY_HOOK: list[int] = []


def _count_attempt(event: qa.HookEvent) -> None:
    SEEN_BY_HOOK.append(event.attempt)


def _calls(client: Union[qa.Client, qa.AsyncClient], count: int) -> list[object]:
    """``count`` calls of ``core`` one after the other (an AsyncClient's on one loop, its own)."""

    async def on_loop(aclient: qa.AsyncClient) -> list[object]:
        outcomes: list[object] = []
        for _ in range(count):
            try:
                outcomes.append(await aclient.core(REQUEST))
            except qa.QAError as exc:
                outcomes.append(exc)
        return outcomes

    if isinstance(client, qa.AsyncClient):
        return asyncio.run(on_loop(client))
    outcomes: list[object] = []
    for _ in range(count):
        try:
            outcomes.append(client.core(REQUEST))
        except qa.QAError as exc:
            outcomes.append(exc)
    return outcomes


@pytest.fixture
def hook_log() -> Iterator[list[int]]:
    SEEN_BY_HOOK.clear()
    yield SEEN_BY_HOOK
    SEEN_BY_HOOK.clear()


@pytest.mark.parametrize("kind", ["Client", "AsyncClient"])
def test_a_pickled_client_keeps_its_configuration_and_no_state(
    svc: FakeService, hook_log: list[int], kind: str
) -> None:
    options: dict[str, Any] = {
        "base_url": svc.url,
        "trust_env": False,
        "retry": qa.RetryPolicy(max_retries=1),
        "retry_budget": qa.RetryBudget(capacity=5, retry_cost=5),  # one retry, then empty
        "rate_limit": qa.RateLimit(40),
        "hooks": {"after_attempt": [_count_attempt]},
        "extra_headers": [("X-Team", "audit")],
    }
    original: Union[qa.Client, qa.AsyncClient]
    if kind == "Client":
        original = qa.Client(sleep=_no_wait, **options)
    else:
        original = qa.AsyncClient(sleep=_no_wait_async, **options)
    shipped = None
    try:
        # A throttled retry spends no budget (docs/retries.md): the 429 is retried even when
        # the budget is empty, and the limiter learns from it.
        svc.script(reply(500), reply(500), reply(503), reply(429, None, headers=[("retry-after-ms", "1")]))
        first, second, third = _calls(original, 3)
        assert isinstance(first, qa.ServerError)
        assert first.diagnostics.attempts == 2  # one retry, which emptied the budget
        assert isinstance(second, qa.ServerError)
        assert second.diagnostics.attempts == 1  # the budget is empty: not retried
        assert isinstance(third, qa.CoreResponse)
        state = original.rate_limit
        assert state is not None
        assert state.throttles == 1
        shipped = pickle.loads(pickle.dumps(original))
        assert type(shipped) is type(original)
        hook_log.clear()
        svc.script(reply(500))
        (fourth,) = _calls(shipped, 1)
        assert isinstance(fourth, qa.CoreResponse), fourth
        assert fourth.diagnostics.attempts == 2  # a fresh budget: the retry is paid for
        assert hook_log == [1, 2]  # its hooks came along
        state = shipped.rate_limit
        assert state is not None
        assert (state.per_second, state.throttles) == (40.0, 0)  # the ceiling, not what was learned
        assert svc.requests[-1].headers["x-team"] == "audit"
    finally:
        for client in (original, shipped):
            if isinstance(client, qa.Client):
                client.close()
            elif client is not None:
                asyncio.run(client.aclose())


# ---------------------------------------------------------------------------------------------
# What the audit found broken, each fixed with the test that found it.


def _outcome(kind: str, url: str, op: str, **options: Any) -> object:
    """The call's result, or the ``QAError`` it raised."""

    async def on_loop() -> object:
        async with qa.AsyncClient(base_url=url, trust_env=False, **options) as client:
            try:
                return await (client.core(REQUEST) if op == "core" else client.list_models())
            except qa.QAError as exc:
                return exc

    if kind == "AsyncClient":
        return asyncio.run(on_loop())
    with qa.Client(base_url=url, trust_env=False, **options) as client:
        try:
            return client.core(REQUEST) if op == "core" else client.list_models()
        except qa.QAError as exc:
            return exc


@pytest.mark.parametrize(
    ("op", "body"),
    [("core", "not json"), ("core", {"answers": {"toxic": "maybe"}}), ("list_models", {"models": "none"})],
    ids=["core-not-json", "core-wrong-answer", "models-wrong-shape"],
)
@pytest.mark.parametrize("kind", ["Client", "AsyncClient"])
def test_an_invalid_response_names_its_request_id_and_attempts(kind: str, op: str, body: object) -> None:
    # docs/errors.md: messages end with "(request id ...)" when the server sent one.
    with FakeService() as svc:
        svc.script(drop(), reply(200, body, headers=[("request-id", "req_audit_7")]))
        error = _outcome(kind, svc.url, op, retry=qa.RetryPolicy(backoff_initial_ms=1))  # no real wait
    assert isinstance(error, qa.InvalidResponse), error
    assert error.diagnostics.request_id == "req_audit_7"
    assert error.diagnostics.attempts == 2
    assert str(error).endswith("(request id req_audit_7) (after 2 attempts)"), str(error)


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("this exception has no text")


def _unprintable_hook(event: qa.HookEvent) -> None:
    raise _Unprintable()


@pytest.mark.parametrize("kind", ["Client", "AsyncClient"])
def test_a_hook_whose_exception_cannot_be_printed_is_logged_and_the_call_goes_on(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeService() as svc, caplog.at_level(logging.WARNING, logger="qa_min"):
        outcome = _outcome(kind, svc.url, "core", hooks={"before_attempt": [_unprintable_hook]})
    assert isinstance(outcome, qa.CoreResponse), outcome
    logged = [r.getMessage() for r in caplog.records]
    assert any("raised _Unprintable: (an exception whose text cannot be shown)" in m for m in logged), logged


def _mock_handler(request: object) -> Step:
    return reply(200, {"answers": {"toxic": True}, "model": "judge-mock"})


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_a_client_with_a_mock_transport_travels_with_a_fresh_mock(how: str) -> None:
    mock = MockTransport(_mock_handler)
    with qa.Client(base_url="http://mock.invalid", transport=mock, api_key="sk-mock") as client:
        copied = pickle.loads(pickle.dumps(client)) if how == "pickle" else copy.deepcopy(client)
        with copied:
            answer = copied.core(REQUEST)
    assert answer.answers == {"toxic": True}
    assert mock.requests == []  # the copy's requests went to its own mock


@posix
@pytest.mark.parametrize("command", ["fake", "ask"])
def test_sigterm_ends_any_command_with_exit_143(command: str) -> None:
    # docs/command-line.md: 143 terminated (SIGTERM); before, only batch handled it and the
    # others died by the signal (returncode -15), the fake service left unclosed.
    with FakeService() as svc:
        svc.script(hang())
        argv = (
            ["fake", "--port", "0"]
            if command == "fake"
            else ["--base-url", svc.url, "ask", "x", "--yes-no", "t", "a", "b"]
        )
        proc = start_batch(*argv)  # any command: python -m qa_min, output on pipes
        try:
            if command == "fake":
                assert proc.stdout is not None
                assert "listening" in proc.stdout.readline()
            else:
                assert svc.wait_for_requests(1, BOUND)
            proc.send_signal(signal.SIGTERM)
            _, err = finish(proc)
        finally:
            svc.release()
    assert proc.returncode == 143, err
    assert "terminated" in err
    assert "Traceback" not in err

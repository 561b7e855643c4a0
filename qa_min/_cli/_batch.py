"""``qa-min batch``: the same questions about every state of a JSONL input, streamed.

How a run goes:
    A thread of its own reads the input while fewer than ``WINDOW * --concurrency`` lines wait
    to be written, so memory does not grow with the input and a slow pipe holds up neither the
    answers nor a Ctrl-C. The main thread sends each line with ``client.submit(client.core,
    ...)``, at most ``--concurrency`` at once, and writes, and flushes, each answer as soon as
    every earlier line is written. A line that is not valid is answered by its error, unsent.

Duplicate ids:
    The first line with an id is the one asked; each later line with the same id gets one error
    line, without an ``id`` (its message names it), so a reader who takes the last line for a key
    never loses the first line's answer. A resumed run does not report a duplicate again.

Resuming (``--output FILE --resume``):
    Lines whose answer FILE already holds are skipped, matched by ``id`` when the input line has
    one, else by line number (every output line keeps both, but a duplicate's). Lines whose call
    ended in an error are asked again, unless ``--skip-failed``; the new line is appended, so a
    reader takes the last line for a key. A line that earned its error without a call (not JSON,
    a bad state, a duplicate id) is written once: a resumed run with nothing left to ask appends
    nothing. A torn last line (a hard kill mid-write) is cut off and asked again. A FILE whose
    answers are to other questions is refused (exit 2), not mixed with this run's. Whether the
    input is the one the run began with is not checked: ids and line numbers are all FILE keeps.

Ctrl-C and SIGTERM:
    Reading stops, calls in flight are cancelled, the answers that can be written in input
    order are written (those after the first cancelled line are asked again on resume, so the
    file stays in order), the command that resumes is printed on stderr (without ``--api-key``:
    a line says so), and the exit code is 130 (143). A second signal exits at once. Either way
    the file holds a prefix of the input's answers, and a resumed run re-asks at most
    ``WINDOW * --concurrency`` lines.
"""

from __future__ import annotations

import io
import os
import queue
import signal
import sys
import threading
from collections import deque

from .. import Client, Diagnostics, InvalidState, QAError
from ._jsonl import DONE, SEEN, WRITTEN, Done, InputLines, check_paths, id_hash, open_output, parse_line
from ._output import FileError, UsageError, client_options, exit_code, resume_command, write_stdout
from ._progress import REDRAW_EVERY, Progress, Tally
from ._questions import collect_questions

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from types import FrameType
    from typing import IO, Any, Callable, Optional, Union

    from .. import Call, CoreResponse, NamedQuestion
    from ._output import Output

WINDOW = 4
"""Lines read but not yet written, per call in flight: room to keep every worker busy while the
oldest line, which must be written first, is still running."""


class _Line:
    """A line read and not yet written: its call, or the error it earned without one."""

    __slots__ = ("call", "cancelled", "diagnostics", "error", "key", "number")

    def __init__(self, number: int, key: Union[str, int, None]) -> None:
        self.number = number
        self.key = key
        self.call: Optional[Call[CoreResponse]] = None
        self.diagnostics: Optional[Diagnostics] = None
        self.error: Optional[QAError] = None
        self.cancelled = False

    def ready(self) -> bool:
        return self.call is None or self.call.done()

    def record(self) -> dict[str, Any]:
        return {"line": self.number} if self.key is None else {"line": self.number, "id": self.key}


class _Batch:
    """One run: reads, submits, writes in order, and stops cleanly on a signal."""

    def __init__(
        self,
        client: Client,
        out: Output,
        questions: list[NamedQuestion],
        done: Done,
        write: Callable[[dict[str, Any]], None],
        progress: Progress,
        concurrency: int,
    ) -> None:
        self.client = client
        self.out = out
        self.questions = questions
        self.done = done
        self.write = write
        self.progress = progress
        self.tally = progress.tally
        self.concurrency = concurrency
        self.failures: Optional[Callable[[dict[str, Any]], None]] = None
        self.pending: deque[_Line] = deque()  # read, not yet written
        self.waiting: deque[tuple[int, Optional[str]]] = deque()  # read, not yet admitted
        self.in_flight = 0
        self.eof = False
        # Lines read and not yet written: the reader takes one before each line.
        self.room = threading.Semaphore(WINDOW * concurrency)
        self.closing = False
        # The reader, done callbacks and signal handlers wake the main loop through this queue.
        self.wakeups: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.signal: Optional[int] = None
        self.worst = 0
        self.duplicates: list[tuple[int, Union[str, int]]] = []

    def run(self, source: InputLines) -> None:
        """Read, ask and write until the input ends or a signal arrives."""
        reader = threading.Thread(target=self._read, args=(source,), name="qa_min-batch-input", daemon=True)
        reader.start()
        try:
            while self.signal is None:
                self._write_ready()
                if self.waiting and self.in_flight < self.concurrency:
                    self._admit(*self.waiting.popleft())
                elif self.eof and not self.waiting and not self.pending:
                    break
                else:
                    self._wait()
        finally:
            # A reader waiting for room, or for a pipe's writer, ends now.
            self.closing = True
            source.stop()
            self.room.release(WINDOW * self.concurrency + 1)
            reader.join(REDRAW_EVERY)

    def _read(self, source: InputLines) -> None:
        # Its own thread, so that a slow pipe delays neither the answers nor a Ctrl-C.
        try:
            while True:
                self.room.acquire()
                if self.closing:
                    return
                item = source.read()
                if self.closing:
                    return
                self.wakeups.put(("line", item) if item is not None else ("eof", None))
                if item is None:
                    return
        except (OSError, ValueError) as exc:
            self.wakeups.put(("error", FileError(f"cannot read the input: {exc}")))
        except BaseException as exc:  # raised by the main loop: it must not wait for a dead reader
            self.wakeups.put(("error", exc))

    def _admit(self, number: int, text: Optional[str]) -> None:
        if text is not None and not text.strip():
            self.tally.done += 1
            self.room.release()
            return
        key, job = parse_line(number, text, self.questions)
        flags = 0 if key is None else self.done.ids.mark(id_hash(key), SEEN)
        if flags & SEEN and key is not None:
            # A duplicate's error line has no id: it never stands for the first line's answer.
            job = InvalidState(f"line {number}: id {key!r} is already on an earlier line; ids must be unique")
            if not self.done.wrote(number):
                self.duplicates.append((number, key))
            key, flags = None, 0
        # Answered already; or an input error (no call to retry) that the output already holds.
        if flags & DONE or (key is None and self.done.has_line(number)):
            self._skip()
            return
        if isinstance(job, QAError) and (flags & WRITTEN or (key is None and self.done.wrote(number))):
            self._skip()
            return
        line = _Line(number, key)
        if isinstance(job, QAError):
            line.error = job
        else:
            line.diagnostics = Diagnostics()
            line.call = self.client.submit(self.client.core, job, diagnostics=line.diagnostics)
            self.in_flight += 1
            line.call.add_done_callback(self._woken)
        self.pending.append(line)

    def _skip(self) -> None:
        self.tally.skipped += 1
        self.tally.done += 1
        self.room.release()
        self.progress.tick()

    def _woken(self, call: object) -> None:
        self.wakeups.put(("done", None))

    def _wait(self) -> None:
        try:
            kind, value = self.wakeups.get(timeout=REDRAW_EVERY)
        except queue.Empty:
            self.progress.tick()
            return
        while True:
            if kind == "done":
                self.in_flight -= 1
            elif kind == "line":
                self.waiting.append(value)
            elif kind == "eof":
                self.eof = True
            elif kind == "error":
                raise value
            try:
                kind, value = self.wakeups.get_nowait()
            except queue.Empty:
                return

    def _write_ready(self) -> None:
        while self.pending and self.pending[0].ready():
            self._settle(self.pending.popleft())

    def _settle(self, line: _Line) -> None:
        error, record = line.error, line.record()
        if line.call is not None:
            try:
                record["answers"] = dict(line.call.result().answers)
            except QAError as exc:
                error = exc
        if error is None:
            self.tally.answered += 1
        else:
            record["error"] = self.out.error_info(error)
            self.tally.failed += 1
            self.worst = self.worst or exit_code(error)
        self.write(record)
        if error is not None and self.failures is not None:
            self.failures(record)
        if line.diagnostics is not None:
            self.tally.retries += max(line.diagnostics.attempts - 1, 0)
            self.tally.busy += sum(a.status in (429, 529) for a in line.diagnostics.history)
        self.tally.done += 1
        self.room.release()
        self.progress.tick()

    def stop(self) -> int:
        """Cancel what is in flight, write what can be written in order; the count left unwritten."""
        for line in self.pending:
            if line.call is not None and line.call.cancel():
                line.cancelled = True
        while self.pending and not self.pending[0].cancelled:
            self._settle(self.pending.popleft())
        return len(self.pending)

    def on_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        if self.signal is not None:
            os.write(2, b"\nsecond interrupt: exiting now\n")
            os._exit(128 + signum)
        self.signal = signum
        self.wakeups.put(("signal", signum))


def _report_stop(args: argparse.Namespace, out: Output, tally: Tally, signum: int, unwritten: int) -> None:
    name = "terminated" if signum == signal.SIGTERM else "interrupted"
    where = repr(args.output) if args.output else "stdout"
    out.note(
        f"{name}: {tally.done:,} input lines done, their answers in {where}; "
        f"{unwritten:,} lines read but not written are asked again on resume"
    )
    if not args.output:
        out.note("to be able to resume, run with --output FILE")
        return
    stdin = " (with the same input on stdin)" if args.input in (None, "-") else ""
    command, key_left_out = resume_command(args.argv)
    out.note(f"resume with{stdin}:\n  {command}")
    if key_left_out:
        out.note("the key given with --api-key is left out of it: set SERVICE_API_KEY, or add --api-key KEY")


def _report_duplicates(out: Output, duplicates: list[tuple[int, Union[str, int]]]) -> None:
    if duplicates:
        number, key = duplicates[0]
        more = f" and {len(duplicates) - 1:,} more" if len(duplicates) > 1 else ""
        out.note(f"duplicate ids, not asked: line {number} (id {key!r}){more}; see the output")


def _writer(
    file: Optional[IO[bytes]], path: Optional[str], line: Callable[[dict[str, Any]], str]
) -> Callable[[dict[str, Any]], None]:
    """Writes a record as a line of JSON (``line``), and flushes it: to ``file`` (``path``), else stdout."""
    if file is None:

        def write(record: dict[str, Any]) -> None:
            write_stdout(line(record) + "\n")

    else:

        def write(record: dict[str, Any]) -> None:
            try:
                file.write((line(record) + "\n").encode())
                file.flush()
            except OSError as exc:  # a full disk, /dev/full, a lost network share
                raise FileError(f"cannot write {path!r}: {exc.strerror or exc}") from None

    return write


class _Signals:
    """Routes SIGINT and SIGTERM to a handler while a run lasts (only the main thread can)."""

    def __init__(self, handler: Callable[[int, Optional[FrameType]], None]) -> None:
        self.handler = handler
        self.saved: dict[int, Any] = {}

    def __enter__(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self.saved[signum] = signal.signal(signum, self.handler)

    def __exit__(self, *exc: object) -> None:
        for signum, saved in self.saved.items():
            signal.signal(signum, saved)


def _open_files(
    args: argparse.Namespace, expected: int, names: frozenset[str]
) -> tuple[Optional[IO[bytes]], Done, Optional[IO[bytes]]]:
    if args.resume and not args.output:
        raise UsageError("--resume needs --output FILE: the file to continue")
    if sys.stdout is None and (not args.output or args.failures == "-"):  # started with `>&-`
        what, option = ("the failed lines", "failures") if args.output else ("the answers", "output")
        raise FileError(f"cannot write {what}: stdout is closed; pass --{option} FILE")
    check_paths(args.input, args.output, args.failures)
    if args.output:
        output, done = open_output(args.output, args.resume, args.skip_failed, expected, names)
    else:
        output, done = None, Done(expected)
    failures = None
    if args.failures and args.failures != "-":
        try:
            failures = open(args.failures, "wb")  # noqa: SIM115 - closed by the caller
        except OSError as exc:
            if output is not None:
                output.close()
            raise FileError(f"cannot write {args.failures!r}: {exc.strerror or exc}") from None
    return output, done, failures


def run_batch(args: argparse.Namespace, out: Output) -> int:
    """Answer every JSONL line; write one JSONL line per input line, in input order."""
    questions = collect_questions(args)
    source = InputLines(args.input)
    output: Optional[IO[bytes]] = None
    failures: Optional[IO[bytes]] = None
    try:
        names = frozenset(question.name for question in questions)
        output, done, failures = _open_files(args, source.estimate(), names)
        if done.torn:
            out.note(f"{args.output!r}: its last line was cut short; that line is asked again")
        with Client(**client_options(args, max_workers=args.concurrency)) as client:
            # Started with stderr closed (`2>&-`): no progress, and the answers still written.
            stderr, quiet = (sys.stderr, args.quiet) if sys.stderr is not None else (io.StringIO(), True)
            progress = Progress(stderr, Tally(), source.total, quiet, ceiling=_ceiling(client))
            write = _writer(output, args.output, out.json_line)  # answers: values, as decoded
            batch = _Batch(client, out, questions, done, write, progress, args.concurrency)
            if args.failures:  # `--failures -`: stdout (its file None), the answers in a file
                batch.failures = _writer(failures, args.failures, lambda r: out.json_line(r, decoded=False))
            with _Signals(batch.on_signal):
                batch.run(source)
                unwritten = batch.stop() if batch.signal is not None else 0
        progress.finish()
        _report_duplicates(out, batch.duplicates)
        if batch.signal is not None:
            _report_stop(args, out, progress.tally, batch.signal, unwritten)
            return 128 + batch.signal
        return batch.worst
    finally:
        source.close()
        for file in (output, failures):
            if file is not None:
                try:
                    file.close()
                except OSError:  # nothing is left to flush: every line was flushed or reported
                    pass


def _ceiling(client: Client) -> Callable[[], Optional[float]]:
    """The client's rate-limit ceiling now (requests per second), for the progress line."""

    def ceiling() -> Optional[float]:
        state = client.rate_limit
        return None if state is None else state.per_second

    return ceiling

"""batch's files: the input read line by line, the output it resumes, and the ids it has seen.

Memory stays flat however long the input: lines are read as the in-flight window frees up, and
what a run must remember per line (which ids it has seen, which lines and ids the output already
answers) is one byte per line number plus 9 bytes per id in `KeyTable`, not a Python object.
"""

from __future__ import annotations

import json
import os
import select
import stat
import sys
from array import array

from .. import InvalidState, Request, ValidationError
from ._output import FileError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any, Optional, Union

    from .. import NamedQuestion, QAError

SEEN = 1
"""`KeyTable` flag: the id was on an input line of this run."""
DONE = 2
"""`KeyTable` flag (and `Done.lines` value): the output already holds the line's final answer."""
WRITTEN = 4
"""`KeyTable` flag (and `Done.lines` value): the output holds an error line for it; a line that
earns its error without a call (not JSON, a bad state, a duplicate id) is not written again."""


_HEAD = 1 << 16
"""The bytes `InputLines.estimate` reads a file's line length from."""


class InputLines:
    """The numbered lines of a JSONL input, read one at a time, and how far reading has got."""

    def __init__(self, path: Optional[str]) -> None:
        self._stream: Any
        if path is None or path == "-":
            if sys.stdin is None:  # started with stdin closed (`<&-`)
                raise FileError("cannot read the input: stdin is closed")
            self._stream, self._owned = getattr(sys.stdin, "buffer", sys.stdin), False
        else:
            try:
                # A buffer of _HEAD bytes, so that `estimate` sees that many: peek() shows no more
                # than the buffer holds.
                self._stream, self._owned = open(path, "rb", _HEAD), True  # noqa: SIM115 - closed by close()
            except OSError as exc:
                raise FileError(f"cannot read {path!r}: {exc.strerror or exc}") from None
        self.size: Optional[int] = None
        # A pipe, FIFO or terminal is read from its descriptor, polled, so that `stop` ends a
        # read that waits for a writer: a thread blocked in readline() would hold the stream's
        # lock, and closing it (or the interpreter's exit, for stdin) would wait or abort.
        self._fd = -1
        self._poll: Optional[select.poll] = None
        self._buffer = bytearray()
        self._scanned = 0  # bytes of _buffer known to hold no newline
        self._ended = False  # the pipe's writer closed it
        self._stopped = False
        try:
            fd = self._stream.fileno()
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode):
                self.size = info.st_size
            elif hasattr(select, "poll"):  # not on Windows: a plain readline() there
                self._fd, self._poll = fd, select.poll()
                self._poll.register(fd, select.POLLIN)
        except (OSError, ValueError, AttributeError):
            pass  # a stream without a file (a test's StringIO): no size
        self.lines = 0
        self.bytes = 0
        self.eof = False

    def read(self) -> Optional[tuple[int, Optional[str]]]:
        """``(line number, text)`` (text None when it is not UTF-8), or None at the end (or once
        `stop` was called, for a pipe)."""
        raw: Union[bytes, str, None] = self._stream.readline() if self._poll is None else self._pipe_line()
        if raw is None:
            return None
        if not raw:
            self.eof = True
            return None
        self.lines += 1
        self.bytes += len(raw)
        if isinstance(raw, str):
            return self.lines, raw
        try:
            return self.lines, raw.decode("utf-8-sig" if self.lines == 1 else "utf-8")
        except UnicodeDecodeError:
            return self.lines, None

    def stop(self) -> None:
        """End a `read` that waits for a pipe's writer (from another thread), within 50 ms."""
        self._stopped = True

    def _pipe_line(self) -> Optional[bytes]:
        """The next line of a pipe (b"" at its end), or None once stopped."""
        assert self._poll is not None
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0 or (self._ended and self._buffer):
                size = end + 1 if end >= 0 else len(self._buffer)
                line = bytes(self._buffer[:size])
                del self._buffer[:size]
                self._scanned = 0
                return line
            if self._ended:
                return b""
            self._scanned = len(self._buffer)
            while not self._poll.poll(50):
                if self._stopped:
                    return None
            chunk = os.read(self._fd, 1 << 16)
            self._buffer += chunk
            self._ended = not chunk

    def estimate(self) -> int:
        """About how many lines the input holds, from its size and its first 64 KiB; 0 if unknown."""
        try:
            head = self._stream.peek(_HEAD)[:_HEAD] if self.size else b""
        except (AttributeError, OSError, ValueError):
            return 0
        lines = head.count(b"\n")
        return lines * self.size // len(head) if lines and self.size else 0

    def total(self) -> Optional[tuple[int, bool]]:
        """``(line count, exact)``: exact at the end, else estimated from the file size."""
        if self.eof:
            return self.lines, True
        if self.size is None or self.bytes == 0:
            return None
        return max(self.lines, round(self.lines * self.size / self.bytes)), False

    def close(self) -> None:
        if self._owned:
            self._stream.close()


def parse_line(
    number: int, text: Optional[str], questions: list[NamedQuestion]
) -> tuple[Union[str, int, None], Union[Request, QAError]]:
    """``(id or None, the Request)``, or the id and the error the line earns instead."""
    if text is None:
        return None, InvalidState(f"line {number} is not UTF-8")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return None, InvalidState(f"line {number} is not JSON: {exc}")
    key = None
    if isinstance(doc, dict):
        key = doc.get("id")
        if "id" in doc and (not isinstance(key, (str, int)) or isinstance(key, bool)):
            return None, InvalidState(f"line {number}: an id must be a string or an integer, not {key!r}")
        if isinstance(key, str) and not _is_text(key):
            # Like a state's "\udce9" escape: a surrogate has no UTF-8 form, so the output line
            # carrying this id could not be written (or, on stdout, would not be UTF-8).
            return None, InvalidState(f"line {number}: an id must be text; {key!r} holds a lone surrogate")
        doc = doc.get("state")
    if not isinstance(doc, str):
        return key, InvalidState(f'line {number}: expected a JSON string or an object with a string "state"')
    try:
        return key, Request(doc, questions)
    except ValidationError as exc:
        exc.message = f"line {number}: {exc.message}"  # as the line's other errors name it
        exc.args = (exc.message,)
        return key, exc


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def id_hash(key: Union[str, int]) -> int:
    """A 64-bit hash of an id; str and int ids never share one on purpose."""
    # hash() differs between processes, which is fine: a table lives in one process. Two of a
    # million ids share a 64-bit hash with odds of about 1 in 30 million.
    return hash(key) if isinstance(key, str) else hash((key,))


_FULL = 0.7
"""`KeyTable` grows past this load; linear probing then looks at about 2 slots per key found."""


class KeyTable:
    """A set of 64-bit id hashes with a few flag bits each, in two flat arrays.

    A Python set of a million ids costs ~100 MB; this costs 9 bytes per slot (linear probing,
    at most 70% full, 18 MB for a million ids). Sized for ``expected`` keys, it never grows, and
    growing is what costs most: the old arrays and the new, twice as large, live together for a
    moment. The arrays are made with the first key, so that an input without ids costs nothing.
    """

    def __init__(self, expected: int = 0) -> None:
        self._size = 1024  # a power of 2: a key's first slot is its hash & (size - 1)
        while _FULL * self._size < expected:
            self._size *= 2
        self._keys = array("q")
        self._flags = bytearray()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def mark(self, key: int, flags: int) -> int:
        """Add ``flags`` to ``key``'s (adding the key if new); return its flags before."""
        key = key or 1  # 0 marks an empty slot
        if not self._keys:
            self._keys, self._flags = array("q", [0]) * self._size, bytearray(self._size)
        keys = self._keys
        mask = len(keys) - 1
        slot = key & mask
        while keys[slot] != key:
            if keys[slot] == 0:
                keys[slot] = key
                self._flags[slot] = flags
                self._count += 1
                if self._count > _FULL * len(keys):
                    self._grow()
                return 0
            slot = (slot + 1) & mask
        before = self._flags[slot]
        self._flags[slot] = before | flags
        return before

    def _grow(self) -> None:
        keys, flags = self._keys, self._flags
        self._keys = array("q", [0]) * (2 * len(keys))
        self._flags = bytearray(2 * len(flags))
        self._count = 0
        for key, bits in zip(keys, flags):
            if key:
                self.mark(key, bits)


class Done:
    """What an earlier run's output answers: line numbers (a byte each) and ids."""

    def __init__(self, expected: int = 0) -> None:
        self.ids = KeyTable(expected)
        self.lines = bytearray()
        self.torn = False

    def mark_line(self, number: int, flag: int = DONE) -> None:
        if number >= len(self.lines):
            self.lines.extend(bytes(max(number + 1 - len(self.lines), len(self.lines))))
        self.lines[number] |= flag

    def has_line(self, number: int) -> bool:
        """Whether the output holds line ``number``'s final answer."""
        return number < len(self.lines) and bool(self.lines[number] & DONE)

    def wrote(self, number: int) -> bool:
        """Whether the output holds any line for line ``number``, an error included."""
        return number < len(self.lines) and self.lines[number] != 0


def _check_record(path: str, count: int, raw: bytes) -> dict[str, Any]:
    try:
        record = json.loads(raw)
    except ValueError:
        record = None
    number = record.get("line") if isinstance(record, dict) else None
    key = record.get("id", "") if isinstance(record, dict) else None
    if (
        not isinstance(record, dict)
        or not isinstance(number, int)
        or isinstance(number, bool)
        or number < 1
        # The ids batch writes (a list would not even hash)
        or not isinstance(key, (str, int))
        or isinstance(key, bool)
        or ("answers" not in record and "error" not in record)
    ):
        raise FileError(f"{path!r} line {count} is not a line batch wrote; refusing to append to it")
    return record


def scan_output(
    file: IO[bytes], path: str, skip_failed: bool, expected: int = 0, names: Optional[frozenset[str]] = None
) -> Done:
    """Read an earlier run's output; cut a torn last line off the file; leave it at the end.

    ``names``, the questions asked now: a line that answers others is refused, since appending
    would mix two runs' answers in one file (its unanswered lines asked with other questions).

    Raises:
        FileError: FILE holds a line batch did not write.
        UsageError: FILE answers other questions than ``names``.
    """
    done = Done(expected)
    kept = 0
    for count, raw in enumerate(file, 1):
        if not raw.endswith(b"\n"):
            # A hard kill mid-write: the line is asked again and written whole.
            done.torn = True
            break
        kept += len(raw)
        record = _check_record(path, count, raw)
        flag = DONE
        if "answers" in record:
            _check_answers(path, count, record["answers"], names)
        elif not skip_failed:
            flag = WRITTEN  # asked again if it was a call that failed
        if "id" in record:
            done.ids.mark(id_hash(record["id"]), flag)
        else:
            done.mark_line(record["line"], flag)
    if done.torn:
        file.truncate(kept)
    file.seek(kept)
    return done


def _check_answers(path: str, count: int, answers: object, names: Optional[frozenset[str]]) -> None:
    if names is None or not isinstance(answers, dict) or answers.keys() == names:
        return
    raise UsageError(
        f"{path!r} line {count} answers {sorted(answers)}, not these questions {sorted(names)}: "
        "resume with the questions the run began with, or give another --output"
    )


def check_paths(source: Optional[str], output: Optional[str], failures: Optional[str]) -> None:
    """The input, ``--output`` and ``--failures`` are different files: each would overwrite another.

    Raises:
        UsageError: two of them name the same file.
    """
    named = [("the input", source), ("--output", output), ("--failures", failures)]
    given = [(name, path) for name, path in named if path is not None and path != "-"]
    for i, (name, path) in enumerate(given):
        for other, other_path in given[i + 1 :]:
            if _same_file(path, other_path):
                raise UsageError(f"{other} {other_path!r} is {name} ({path!r}): give another file")


def _same_file(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are one regular file (``/dev/null`` twice is fine)."""
    try:
        return os.path.samefile(a, b) and stat.S_ISREG(os.stat(a).st_mode)
    except OSError:  # one does not exist (yet): the same path names the same file
        return os.path.realpath(a) == os.path.realpath(b)


def open_output(
    path: str, resume: bool, skip_failed: bool, expected: int = 0, names: Optional[frozenset[str]] = None
) -> tuple[IO[bytes], Done]:
    """``--output`` opened for appending, with what it already answers (nothing if new).

    ``expected`` is about how many ids the input holds, if known; ``names``, the questions asked.

    Raises:
        UsageError: FILE holds answers but ``--resume`` was not given, or answers other questions.
        FileError: FILE cannot be opened, or holds lines batch did not write.
    """
    try:
        file = open(path, "a+b")  # noqa: SIM115 - the caller closes it
    except OSError as exc:
        raise FileError(f"cannot write {path!r}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            # A device or a pipe (/dev/stdout): written to, never read back (/dev/full never ends).
            if resume:
                raise UsageError(f"--resume needs a regular file to continue; {path!r} is not one")
            return file, Done(expected)
        if not resume and file.tell() > 0:
            raise UsageError(f"{path!r} already holds answers: pass --resume to continue it")
        file.seek(0)
        return file, scan_output(file, path, skip_failed, expected, names)
    except BaseException:
        file.close()
        raise

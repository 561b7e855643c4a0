"""``qa-min batch``: the same questions about every state of a JSONL input, concurrently.

The input is read first (the progress line shows a total); lines then go to the client's
executor through a window of ``2 * --concurrency`` calls in flight, and results are written in
input order. A line that is not valid is answered by its error, without a request.
"""

from __future__ import annotations

import json
import sys
from collections import deque

from . import InvalidState, QAError, Request, ValidationError
from ._cli import _client, collect_questions, exit_code

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from concurrent.futures import Future
    from typing import Any, Optional, Union

    from . import CoreResponse, NamedQuestion
    from ._cli import _Output

    Line = Union[Request, QAError]
    Job = Union[QAError, "Future[CoreResponse]"]


def _parse_line(number: int, text: str, questions: list[NamedQuestion]) -> tuple[dict[str, Any], Line]:
    """``({"id": ...} or {"line": n}, Request or the ValidationError the line earns)``."""
    key: dict[str, Any] = {"line": number}
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return key, InvalidState(f"line {number} is not JSON: {exc}")
    if isinstance(doc, dict):
        if "id" in doc:
            key = {"id": doc["id"]}
        doc = doc.get("state")
    if not isinstance(doc, str):
        return key, InvalidState(f'line {number}: expected a JSON string or an object with a string "state"')
    try:
        return key, Request(doc, questions)
    except ValidationError as exc:
        return key, exc


def _read_jsonl(path: Optional[str]) -> list[tuple[int, str]]:
    if path is None or path == "-":
        lines = sys.stdin.readlines()
    else:
        try:
            with open(path, encoding="utf-8") as file:
                lines = file.readlines()
        except OSError as exc:
            raise InvalidState(f"cannot read {path!r}: {exc.strerror or exc}") from None
    return [(n, text) for n, text in enumerate(lines, 1) if text.strip()]


class _Progress:
    """``\\r{done}/{total}`` on stderr, when asked for or when stderr is a terminal."""

    def __init__(self, total: int, enabled: Optional[bool]) -> None:
        self.total = total
        self.done = 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled

    def step(self) -> None:
        self.done += 1
        if self.enabled:
            print(f"\r{self.done}/{self.total}", end="", file=sys.stderr, flush=True)

    def finish(self) -> None:
        if self.enabled:
            print(file=sys.stderr, flush=True)


def run_batch(args: argparse.Namespace, out: _Output) -> int:
    """Answer every JSONL line; write one JSONL result per line, in input order."""
    questions = collect_questions(args)
    items = [_parse_line(n, text, questions) for n, text in _read_jsonl(args.input)]
    progress = _Progress(len(items), args.progress)
    worst = 0
    # A window of submitted calls bounds memory; two per worker keeps every worker busy while
    # the oldest call, whose line must be written first, is still running.
    window = 2 * args.concurrency
    pending: deque[tuple[dict[str, Any], Job]] = deque()
    with _client(args, max_workers=args.concurrency) as client:

        def emit() -> None:
            nonlocal worst
            key, job = pending.popleft()
            try:
                if isinstance(job, QAError):
                    raise job
                out.data({**key, "answers": dict(job.result().answers)})
            except QAError as exc:
                out.data({**key, "error": out.error_info(exc)})
                worst = worst or exit_code(exc)
            progress.step()

        for key, job in items:
            pending.append((key, job if isinstance(job, QAError) else client.submit(client.core, job)))
            if len(pending) >= window:
                emit()
        while pending:
            emit()
    progress.finish()
    return worst

"""What every command shares: the printer, the one exit-code table and the client options; and
the command line as it may be printed (``resume_command``: never with the API key).

This module is the bottom of the command line: the command modules import it, and it imports
only qa_min's public names plus the library's key redaction.
"""

from __future__ import annotations

import json
import os
import shlex
import sys

from .. import (
    APIStatusError,
    ConfigurationError,
    ConnectionFailed,
    Diagnostics,
    MissingApiKey,
    QAError,
    ServiceBusy,
    ValidationError,
)
from .._redact import Redactor

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterable, Sequence
    from typing import Any, Optional


class UsageError(QAError):
    """The command line asks for something that cannot be done as written (exit 2)."""


class FileError(QAError):
    """A file named on the command line cannot be read, written or continued (exit 3)."""


def write_stdout(text: str) -> None:
    """``text`` on stdout, flushed (nothing when stdout is closed, as print() does).

    Raises:
        FileError: the write failed (a full disk); a closed pipe stays a ``BrokenPipeError`` (exit 1).
    """
    if sys.stdout is None:
        return
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        drop_stdout()  # --json's error line, and the interpreter's last flush, would fail again
        raise FileError(f"cannot write stdout: {exc.strerror or exc}") from None


def drop_stdout() -> None:
    """Point stdout at devnull, so that the interpreter's final flush does not fail again (as the
    signal module's docs advise for a closed pipe)."""
    try:
        stdout = sys.stdout.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stdout)
        os.close(devnull)
    except (OSError, ValueError):
        pass


# The one table of exit codes: `exit_code` reads its classes, `--help` prints its text.
EXIT_CODES: tuple[tuple[int, str, tuple[type[QAError], ...]], ...] = (
    (0, "success", ()),
    (1, "fake cannot listen on the address; output pipe closed", ()),
    (2, "usage error", (UsageError,)),
    (
        3,
        "invalid input: validation error, bad questions file, JSONL line or file,\n"
        "       configuration error (MissingApiKey, InvalidBaseUrl)",
        (ValidationError, ConfigurationError, FileError),
    ),
    (4, "service busy after retries (RateLimited 429, Overloaded 529)", (ServiceBusy,)),
    (5, "other HTTP error status", (APIStatusError,)),
    (6, "connection failed", (ConnectionFailed,)),
    (7, "other qa_min error (InvalidResponse, Canceled: --timeout expired, ...)", (QAError,)),
    (130, "interrupted (Ctrl-C)", ()),
    (143, "terminated (SIGTERM)", ()),
)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as Ctrl-C raises ``KeyboardInterrupt``: a command ends
    the same way (a call cancelled, a service closed), with exit code 143."""


def on_sigterm(signum: int, frame: object) -> None:
    raise Terminated


def exit_code(exc: BaseException) -> int:
    """The process exit code for an error, from `EXIT_CODES` (the first row that matches)."""
    for code, _, classes in EXIT_CODES:
        if classes and isinstance(exc, classes):
            return code
    return 7


def exit_help() -> str:
    """The exit-code section of ``--help``."""
    rows = [f"  {code:<4} {text}" for code, text, _ in EXIT_CODES]
    rows.append("batch exits with the code of its first failed line, after writing every line.")
    return "exit codes:\n" + "\n".join(rows) + "\n"


def scrubber(keys: Iterable[Optional[str]]) -> Redactor:
    """The library's one redaction, hiding every piece of every given API key.

    A blank key is no key (the client refuses it): hiding it would hide every space."""
    return Redactor(*dict.fromkeys(key for key in keys if key and key.strip()))


class Output:
    """Where results and errors go, with any API key scrubbed from all of it."""

    def __init__(self, as_json: bool, keys: Iterable[Optional[str]]) -> None:
        self.json = as_json
        # A server may echo the key anywhere (an error body, usage), raw or JSON-escaped.
        self.scrub = scrubber(keys)

    def line(self, text: str = "", *, decoded: bool = False) -> None:
        """A line on stdout; ``decoded``: it shows values as the client decoded them, where a
        short key is hidden only where it stands alone (``Redactor.values``)."""
        write_stdout((self.scrub.values if decoded else self.scrub)(text) + "\n")

    def value(self, text: str) -> str:
        """A decoded value (a model name, a question id, an answer) as a text line shows it:
        redacted as ``line(..., decoded=True)`` redacts, then escaped by `printable`. Redacting
        first keeps escaping from splitting a key; ``line`` redacts the result again, in case
        escaping spelled one (a key holding a backslash)."""
        return printable(self.scrub.values(text))

    def data(self, value: object) -> None:
        """``value`` as one line of JSON on stdout."""
        write_stdout(self.json_line(value) + "\n")

    def json_line(self, value: object, *, decoded: bool = True) -> str:
        """``value`` as one line of JSON, its strings redacted before it is written (values as the
        client decoded them, where a short key is hidden only where it stands alone, unless not
        ``decoded``): redacting the JSON text would cut a short key that spells a number,
        ``true`` or ``null`` out of the syntax, and the line would no longer parse."""
        hide = self.scrub.values if decoded else self.scrub
        return json.dumps(self.scrub.walk(value, hide), ensure_ascii=False)

    def note(self, text: str) -> None:
        """A message for the person at the terminal, on stderr (none when stderr is closed: print()
        would write it on stdout, among the results)."""
        if sys.stderr is not None:
            print(self.scrub(text), file=sys.stderr, flush=True)

    def error_info(self, exc: QAError) -> dict[str, Any]:
        diag = exc.diagnostics
        status = exc.status if isinstance(exc, APIStatusError) else diag.status
        return {
            "type": type(exc).__name__,
            "message": self.scrub(exc.message),
            "status": status,
            "attempts": diag.attempts,
            "request_id": diag.request_id,
            "body": None if diag.body is None else self.scrub(diag.body),
        }

    def error(self, exc: QAError) -> int:
        """Report ``exc`` on stderr (and as JSON on stdout with ``--json``); return the exit code."""
        self.note(f"error: {type(exc).__name__}: {exc.message}")
        details = diagnostics_text(exc.diagnostics)
        if details:
            self.note(f"  {details}")
        if isinstance(exc, MissingApiKey):
            self.note("  pass --api-key or set SERVICE_API_KEY, or --base-url for another service")
        if self.json:
            self.data({"error": self.error_info(exc)})
        return exit_code(exc)


def diagnostics_text(diag: Diagnostics) -> str:
    """``status=…, attempts=…, body=…`` (and the transport error), or "" if nothing was sent."""
    if diag.attempts == 0 and diag.status is None:
        return ""
    body = diag.body
    if body is not None and len(body) > 200:
        body = body[:197] + "..."
    text = f"status={diag.status}, attempts={diag.attempts}, body={body!r}"
    if diag.request_id is not None:
        text += f", request_id={diag.request_id}"
    if diag.transport_error is not None:
        text += f", transport_error={diag.transport_error!r}"
    return text


def printable(text: str) -> str:
    """``text`` itself when every character of it prints, else its ``repr()``.

    A name a server sent may hold a newline, a terminal escape (C0, DEL, C1) or another
    character ``str.isprintable`` refuses; shown raw, it would break "one per line" or reach
    the terminal as a command. ``--json`` needs none of this: ``json.dumps`` escapes them.
    """
    return text if text.isprintable() else repr(text)


def answer_text(value: object) -> str:
    """An answer as one word: ``true``/``false``, the option key, or the level."""
    if isinstance(value, (bool, int)):
        return json.dumps(value)
    return str(value)


def client_options(args: argparse.Namespace, max_workers: int = 8) -> dict[str, Any]:
    """The ``Client(...)`` keyword arguments the connection options ask for."""
    retry = None
    if args.retries is not None:
        from .. import RetryPolicy

        retry = RetryPolicy(max_retries=args.retries)
    options: dict[str, Any] = {
        "api_key": args.api_key,
        "base_url": args.base_url,
        "model": args.model,
        "retry": retry,
        "timeout": args.timeout,
        "max_workers": max_workers,
    }
    # --max-rate R is Client(rate_limit=RateLimit(per_second=R)); without it the client's
    # default, adaptive limiter applies.
    options.update(rate_limit_option(getattr(args, "max_rate", None)))
    return options


def rate_limit_option(max_rate: Optional[float]) -> dict[str, Any]:
    """``{"rate_limit": RateLimit(per_second=max_rate)}``, or ``{}`` for the client's default."""
    if max_rate is None:
        return {}
    from .. import RateLimit

    return {"rate_limit": RateLimit(per_second=max_rate)}


def resume_command(argv: Sequence[str]) -> tuple[str, bool]:
    """The command line that continues this batch run, as a shell would take it, and whether
    ``--api-key`` was left out of it (the key is never printed; see `without_api_key`)."""
    if os.path.basename(sys.argv[0]) == "__main__.py":
        # `python -m qa_min` (or the name it is vendored under)
        command = [sys.executable, "-m", __package__.rpartition(".")[0]]
    else:
        command = [sys.argv[0]]
    args, left_out = without_api_key(argv)
    if "--resume" not in args:
        # Before a `--`, after which it would be read as the input file.
        args.insert(args.index("--") if "--" in args else len(args), "--resume")
    return shlex.join(command + args), left_out


def without_api_key(argv: Sequence[str]) -> tuple[list[str], bool]:
    """``argv`` without the ``--api-key`` option and its value, and whether it held one.

    Every spelling argparse takes goes: ``--api-key K``, ``--api-key=K`` and, as the parser
    allows abbreviations, a prefix (``--api K``, ``--a=K``: no other option starts with ``--a``),
    before or after the command. After ``--`` every word is an argument, kept.
    """
    kept: list[str] = []
    left_out = False
    words = iter(argv)
    for word in words:
        if word == "--":
            kept.append(word)
            kept.extend(words)
            break
        name, equals, _ = word.partition("=")
        if len(name) > 2 and "--api-key".startswith(name):
            left_out = True
            if not equals:
                next(words, None)  # its value, the next word
            continue
        kept.append(word)
    return kept, left_out

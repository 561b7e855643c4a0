"""The command line: ``python -m qa_min [global options] [command] ...`` (also installed as ``qa-min``).

Commands:
    demo     (the default) runs every operation against an in-process fake service and prints it
    models   lists the model names the account can use
    ask      asks questions about one state (an argument, or stdin)
    batch    asks the same questions about every state of a JSONL file (or stdin), concurrently
    fake     serves the fake service on a local port until Ctrl-C

Exit codes:
    0    success
    1    ``fake`` could not listen on its address, or the output pipe closed (``| head``)
    2    usage error (reported by argparse)
    3    invalid input: a ``ValidationError``, a bad questions file or JSONL line, or a
         configuration error (``MissingApiKey``, ``InvalidBaseUrl``): fix the command, not the service
    4    the service stayed busy after retries (``ServiceBusy``: 429 ``RateLimited``, 529 ``Overloaded``)
    5    any other HTTP error status (``APIStatusError``)
    6    the service could not be reached (``ConnectionFailed``)
    7    any other ``QAError``: ``InvalidResponse``, ``Canceled`` (a ``--timeout`` expired), ...
    130  interrupted (Ctrl-C)

``batch`` exits with the code of its first failed line, in input order, after writing every line.

This module is imported only when the command line runs, never by ``import qa_min``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from . import (
    APIStatusError,
    Choice,
    Client,
    ConfigurationError,
    ConnectionFailed,
    Diagnostics,
    InvalidQuestion,
    MissingApiKey,
    NamedQuestion,
    NoQuestions,
    QAError,
    Request,
    Score,
    ServiceBusy,
    ValidationError,
    YesNo,
    __version__,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any, Callable, Optional, Union

PROG = "qa-min"

_QUESTIONS_HELP = """\
questions file (--questions FILE.json): one JSON object, question id -> question, each question
an object with exactly one of these keys:
  {"toxic":   {"yes_no": ["The text insults someone", "The text insults no one"]},
   "lang":    {"choice": {"en": "English", "fr": "French"}},
   "quality": {"score":  ["poor", "fair", "good"]}}
Questions are asked in command-line order, files and flags alike; ids must be unique.
--choice and --score take several values: put the state (or input file) first, or after `--`.

"""

_BATCH_HELP = """\
input: one state per line, a JSON string or {"state": ..., "id": ...}; blank lines are skipped.
output, in input order: {"id" or "line": ..., "answers": {...}}
                     or {"id" or "line": ..., "error": {"type", "message", "status", ...}}

"""

_EXIT_HELP = """\
exit codes:
  0    success
  1    fake cannot listen on the address; output pipe closed
  2    usage error
  3    invalid input: validation error, bad questions file or JSONL line,
       configuration error (MissingApiKey, InvalidBaseUrl)
  4    service busy after retries (RateLimited 429, Overloaded 529)
  5    other HTTP error status
  6    connection failed
  7    other qa_min error (InvalidResponse, Canceled: --timeout expired, ...)
  130  interrupted
batch exits with the code of its first failed line, after writing every line.
"""


def exit_code(exc: BaseException) -> int:
    """The process exit code for an error, as the module docstring lists them."""
    if isinstance(exc, (ValidationError, ConfigurationError)):
        return 3
    if isinstance(exc, ServiceBusy):
        return 4
    if isinstance(exc, APIStatusError):
        return 5
    if isinstance(exc, ConnectionFailed):
        return 6
    return 7


# -- output ------------------------------------------------------------------------------


class _Output:
    """Where results and errors go, with any API key scrubbed from error text."""

    def __init__(self, as_json: bool, secrets: Iterable[Optional[str]]) -> None:
        self.json = as_json
        # A server may echo the key anywhere (an error body, usage), raw or JSON-escaped.
        forms = set()
        for secret in filter(None, secrets):
            forms |= {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
        self._secrets = sorted(forms, key=len, reverse=True)

    def line(self, text: str = "") -> None:
        print(self.scrub(text), flush=True)

    def data(self, value: object) -> None:
        print(self.scrub(json.dumps(value, ensure_ascii=False)), flush=True)

    def scrub(self, text: str) -> str:
        """``text`` without any form of the API key."""
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return text

    def error_info(self, exc: QAError) -> dict[str, Any]:
        diag = exc.diagnostics
        status = exc.status if isinstance(exc, APIStatusError) else diag.status
        return {
            "type": type(exc).__name__,
            "message": self.scrub(exc.message),
            "status": status,
            "attempts": diag.attempts,
            "body": None if diag.body is None else self.scrub(diag.body),
        }

    def error(self, exc: QAError) -> int:
        """Report ``exc`` on stderr (and as JSON on stdout with ``--json``); return the exit code."""
        print(f"error: {type(exc).__name__}: {self.scrub(exc.message)}", file=sys.stderr)
        details = diagnostics_text(exc.diagnostics)
        if details:
            print(f"  {self.scrub(details)}", file=sys.stderr)
        if isinstance(exc, MissingApiKey):
            print(
                "  pass --api-key or set SERVICE_API_KEY, or --base-url for another service", file=sys.stderr
            )
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
    if diag.transport_error is not None:
        text += f", transport_error={diag.transport_error!r}"
    return text


def answer_text(value: object) -> str:
    """An answer as one word: ``true``/``false``, the option key, or the level."""
    if isinstance(value, (bool, int)):
        return json.dumps(value)
    return str(value)


# -- questions ---------------------------------------------------------------------------


class _AddQuestion(argparse.Action):
    """Collects --questions/--yes-no/--choice/--score in command-line order, in one list."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Union[str, Sequence[Any], None],
        option_string: Optional[str] = None,
    ) -> None:
        items = list(getattr(namespace, self.dest, None) or [])
        items.append((self.const, [values] if isinstance(values, str) else list(values or [])))
        setattr(namespace, self.dest, items)


def _question_from_json(spec: object) -> Any:
    if not isinstance(spec, dict) or len(spec) != 1:
        raise InvalidQuestion('expected an object with one key: "yes_no", "choice" or "score"')
    ((kind, criteria),) = spec.items()
    if kind == "yes_no":
        if not isinstance(criteria, list) or len(criteria) != 2:
            raise InvalidQuestion('"yes_no" takes a list [yes text, no text]')
        return YesNo(criteria[0], criteria[1])
    if kind == "choice":
        if not isinstance(criteria, dict):
            raise InvalidQuestion('"choice" takes an object {option: description, ...}')
        return Choice(criteria)
    if kind == "score":
        if not isinstance(criteria, list):
            raise InvalidQuestion('"score" takes a list of level texts')
        return Score(criteria)
    raise InvalidQuestion(f'unknown kind {kind!r}: expected "yes_no", "choice" or "score"')


def questions_from_file(path: str) -> list[NamedQuestion]:
    """The questions of a JSON questions file (format in ``--help``).

    Raises:
        InvalidQuestion: The file cannot be read, is not JSON, or a question is malformed.
    """
    try:
        with open(path, encoding="utf-8") as file:
            doc = json.load(file)
    except OSError as exc:
        raise InvalidQuestion(f"cannot read questions file {path!r}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InvalidQuestion(f"questions file {path!r} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidQuestion(f"questions file {path!r} must hold a JSON object of id -> question")
    questions = []
    for name, spec in doc.items():
        try:
            questions.append(NamedQuestion(name, _question_from_json(spec)))
        except ValidationError as exc:
            raise InvalidQuestion(f"questions file {path!r}, question {name!r}: {exc.message}") from None
    return questions


def _question_from_flag(kind: str, values: list[str]) -> NamedQuestion:
    name, rest = values[0], values[1:]
    if kind == "yes_no":
        return NamedQuestion(name, YesNo(rest[0], rest[1]))
    if kind == "score":
        return NamedQuestion(name, Score(rest))
    options = {}
    for item in rest:
        key, sep, text = item.partition("=")
        if not sep:
            raise InvalidQuestion(f"--choice {name}: expected KEY=TEXT, got {item!r}")
        options[key] = text
    return NamedQuestion(name, Choice(options))


def collect_questions(args: argparse.Namespace) -> list[NamedQuestion]:
    """Every question the command line asks for, files and flags in their order."""
    questions: list[NamedQuestion] = []
    for kind, values in args.questions or []:
        if kind == "file":
            questions.extend(questions_from_file(values[0]))
        else:
            questions.append(_question_from_flag(kind, values))
    if not questions:
        raise NoQuestions("no questions: pass --questions FILE.json, --yes-no, --choice or --score")
    # Validates names and duplicates once, before any state is read or sent.
    Request("-", questions)
    return questions


# -- commands ----------------------------------------------------------------------------


def _client(args: argparse.Namespace, max_workers: int = 8) -> Client:
    retry = None
    if args.retries is not None:
        from . import RetryPolicy

        retry = RetryPolicy(max_retries=args.retries)
    return Client(
        api_key=args.api_key,
        base_url=args.base_url,
        model=args.model,
        retry=retry,
        timeout=args.timeout,
        max_workers=max_workers,
    )


def _cmd_models(args: argparse.Namespace, out: _Output) -> int:
    with _client(args) as client:
        names = [model.name for model in client.list_models()]
    if out.json:
        out.data(names)
    else:
        for name in names:
            out.line(name)
    return 0


def _read_state(arg: Optional[str]) -> str:
    if arg is not None and arg != "-":
        return arg
    if sys.stdin.isatty():
        # Otherwise a user who forgot the state sees a command that seems to hang.
        print("reading the state from stdin; end it with Ctrl-D", file=sys.stderr, flush=True)
    # A shell pipe adds a final newline that is not part of the text.
    return sys.stdin.read().rstrip("\r\n")


def _cmd_ask(args: argparse.Namespace, out: _Output) -> int:
    questions = collect_questions(args)
    request = Request(_read_state(args.state), questions)
    with _client(args) as client:
        response = client.core(request)
    if out.json:
        out.data({"answers": dict(response.answers), "usage": dict(response.usage)})
    else:
        for name, value in response.answers.items():
            out.line(f"{name}: {answer_text(value)}")
    return 0


def _cmd_batch(args: argparse.Namespace, out: _Output) -> int:
    from ._batch import run_batch

    return run_batch(args, out)


def _serve_forever() -> None:  # pragma: no cover - runs in test_fake_process_stops_cleanly_on_sigint
    # time.sleep, unlike a lock wait, is interrupted by Ctrl-C on every platform.
    while True:
        time.sleep(3600)


def _cmd_fake(args: argparse.Namespace, out: _Output) -> int:
    from .testing import FakeService

    try:
        service = FakeService(api_key=args.api_key, host=args.host, port=args.port, prefix=args.prefix)
        service.start()
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    try:
        if out.json:
            out.data({"url": service.url})
        else:
            out.line(f"fake service listening on {service.url} (Ctrl-C stops it)")
            out.line(f"  try: SERVICE_BASE_URL={service.url} {PROG} models")
        _serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        service.close()
    return 0


def _cmd_demo(args: argparse.Namespace, out: _Output) -> int:
    from ._demo import run_demo

    return run_demo(out)


# -- the parser --------------------------------------------------------------------------


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def _add_connection_options(parser: argparse.ArgumentParser, top: bool) -> None:
    # Subcommands repeat the options with SUPPRESS defaults, so `qa-min models --json` works
    # and a value given before the subcommand is not overwritten by a subcommand default.
    default: Any = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--base-url", default=default, help="service URL (default: $SERVICE_BASE_URL, public)"
    )
    parser.add_argument("--api-key", default=default, help="API key (default: $SERVICE_API_KEY)")
    parser.add_argument(
        "--model", default=default, help="model (default: $SERVICE_DEFAULT_MODEL, judge-latest)"
    )
    parser.add_argument(
        "--timeout", type=_positive_float, default=default, help="seconds per call, retries included"
    )
    parser.add_argument(
        "--retries", type=_count(0), default=default, metavar="N", help="retries per call (2)"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="machine-readable output",
    )


def _add_question_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("questions (at least one; see the questions file format below)")
    add = group.add_argument
    add(
        "--questions",
        action=_AddQuestion,
        const="file",
        metavar="FILE.json",
        help="questions from a JSON file",
    )
    add(
        "--yes-no",
        action=_AddQuestion,
        const="yes_no",
        nargs=3,
        metavar=("NAME", "YES", "NO"),
        dest="questions",
        help="a yes/no question: its id, the text for yes, the text for no",
    )
    add(
        "--choice",
        action=_AddQuestion,
        const="choice",
        nargs="+",
        metavar=("NAME", "KEY=TEXT"),
        dest="questions",
        help="a choice: its id, then 2+ options as key=description",
    )
    add(
        "--score",
        action=_AddQuestion,
        const="score",
        nargs="+",
        metavar=("NAME", "LEVEL"),
        dest="questions",
        help="a score: its id, then 2+ level texts, lowest first",
    )


def _add_batch_options(batch: argparse.ArgumentParser) -> None:
    batch.add_argument("input", nargs="?", help="JSONL file; '-' or absent: read stdin")
    batch.add_argument("--concurrency", type=_count(1), default=4, metavar="N", help="calls in flight (4)")
    batch.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show done/total on stderr (default: when stderr is a terminal)",
    )


def _add_fake_options(fake: argparse.ArgumentParser) -> None:
    fake.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    fake.add_argument("--port", type=_count(0), default=8080, help="port (8080; 0 picks a free one)")
    fake.add_argument("--prefix", default="", help="path prefix the service lives under")
    # dest api_key, default SUPPRESS: `qa-min --api-key K fake` works too, and the environment's
    # key is never required by accident.
    fake.add_argument("--api-key", default=argparse.SUPPRESS, help="require this key (default: none)")
    fake.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the URL as JSON")


def build_parser() -> argparse.ArgumentParser:
    """The ``qa-min`` argument parser."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Command line for the question-answering service. Without a command: demo.",
        epilog=_EXIT_HELP,
        formatter_class=formatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_connection_options(parser, top=True)
    parser.set_defaults(run=_cmd_demo, questions=None)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    def command(name: str, run: Callable[[argparse.Namespace, _Output], int], help: str, epilog: str) -> Any:
        sub = commands.add_parser(name, help=help, description=help, epilog=epilog, formatter_class=formatter)
        sub.set_defaults(run=run)
        return sub

    command(
        "demo",
        _cmd_demo,
        "show every operation on an in-process fake service (the default; ignores connection options)",
        "",
    )
    models = command("models", _cmd_models, "list the model names, one per line", _EXIT_HELP)
    _add_connection_options(models, top=False)
    ask = command(
        "ask",
        _cmd_ask,
        "ask questions about one state; prints `id: answer` lines",
        _QUESTIONS_HELP + _EXIT_HELP,
    )
    _add_connection_options(ask, top=False)
    ask.add_argument("state", nargs="?", help="the text to judge; '-' or absent: read stdin")
    _add_question_options(ask)
    batch = command(
        "batch",
        _cmd_batch,
        "ask questions about each state of a JSONL file; writes JSONL",
        _BATCH_HELP + _QUESTIONS_HELP + _EXIT_HELP,
    )
    _add_connection_options(batch, top=False)
    _add_batch_options(batch)
    _add_question_options(batch)
    _add_fake_options(command("fake", _cmd_fake, "serve the fake service locally until Ctrl-C", ""))
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else 2
    out = _Output(args.json, [args.api_key, os.environ.get("SERVICE_API_KEY", "").strip()])
    try:
        return int(args.run(args, out))
    except QAError as exc:
        return out.error(exc)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly. Pointing stdout at devnull keeps the
        # interpreter's final flush from failing again, as the signal module's docs advise.
        try:
            stdout = sys.stdout.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stdout)
            os.close(devnull)
        except (OSError, ValueError):
            pass
        return 1

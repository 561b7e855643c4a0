"""The ``qa-min`` argument parser: global connection options, then one subcommand."""

from __future__ import annotations

import _thread
import argparse
import math
import os
import sys

from .. import __version__
from ._commands import PROG, ask, batch, demo, fake, models
from ._output import exit_help
from ._questions import QUESTIONS_HELP

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, Callable, Optional, Union

    from ._output import Output

MAX_CONCURRENCY = 256
"""More worker threads than this only contend for the interpreter lock."""
MAX_RETRIES = 1000
"""``RetryPolicy``'s own bound on ``max_retries``: beyond it, a usage error, not a library one."""

_BATCH_HELP = """\
input: one state per line, a JSON string or {"state": ..., "id": ...} (id: a string or an
integer, unique); blank lines are skipped. Output, one line per input line, in input order:
  {"line": N, "id": ..., "answers": {...}}
  {"line": N, "id": ..., "error": {"type", "message", "status", "attempts", "request_id", "body"}}
("id" only when the input line has one). Ids must be unique: the first line with an id is
asked; each later line with that id gets one error line without "id" (its message names it), so
a reader taking the last line per key never loses the first line's answer. With --output FILE
--resume, lines already answered in FILE (matched by id, else by line number) are skipped and
the rest appended; failed calls are asked again, but an error that needed no call (not JSON, a
bad state, a duplicate id) is not written twice. Ctrl-C writes what was answered and prints the
command that resumes.

"""


class _AddQuestion(argparse.Action):
    """Collects --questions/--yes-no/--choice/--score in command-line order, in one list."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Union[str, Sequence[Any], None],
        option_string: Optional[str] = None,
    ) -> None:
        given = [values] if isinstance(values, str) else list(values or [])
        items = list(getattr(namespace, self.dest, None) or [])
        items.append((self.const, given))
        setattr(namespace, self.dest, items)


class _AddBatchQuestion(_AddQuestion):
    """As `_AddQuestion`, refusing a value that names a file: it was meant as batch's input."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Union[str, Sequence[Any], None],
        option_string: Optional[str] = None,
    ) -> None:
        for value in [values] if isinstance(values, str) else list(values or []):
            if os.path.isfile(value):
                parser.error(
                    f"{value!r} names a file but would be read as a {option_string} value: "
                    "put the input file before the questions, or after `--`"
                )
        super().__call__(parser, namespace, values, option_string)


class _RateLimitPair(argparse.Action):
    """``--rate-limit RATE BURST``, each a finite number > 0 (its type): a bucket the fake can play."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Union[str, Sequence[Any], None],
        option_string: Optional[str] = None,
    ) -> None:
        from .._fakerules import MAX_REFILL_SECONDS

        rate, burst = list(values or [])
        if burst < 1:
            raise argparse.ArgumentError(self, f"BURST must be >= 1, got {burst:g}")
        if burst / rate > MAX_REFILL_SECONDS:
            raise argparse.ArgumentError(
                self,
                f"BURST / RATE, the seconds the bucket takes to fill, must be <= {MAX_REFILL_SECONDS:g}, "
                f"got {burst / rate:.12g}",
            )
        setattr(namespace, self.dest, (rate, burst))


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def _rate(text: str) -> float:
    """Requests per second, as ``RateLimit`` takes them: > 0, one every 1 / R seconds, a float."""
    value = _positive_float(text)
    if 1.0 / value > sys.float_info.max:
        raise argparse.ArgumentTypeError(
            f"1 / R, the seconds between requests, must be at most {sys.float_info.max:g}, got {text!r}"
        )
    return value


def _utf8(text: str) -> str:
    """Text the fake can bind or serve: bytes argv could not decode are surrogates, which it cannot."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise argparse.ArgumentTypeError(f"is not UTF-8: {text!r}, at index {exc.start}") from None
    return text


def _seconds(text: str) -> float:
    """A timeout: > 0 and at most what locks and sockets accept (about 292 years)."""
    value = _positive_float(text)
    if value > _thread.TIMEOUT_MAX:
        raise argparse.ArgumentTypeError(f"must be <= {_thread.TIMEOUT_MAX:g} seconds, got {text!r}")
    return value


def _count(minimum: int, maximum: Optional[int] = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {value}")
        return value

    return parse


def _add_connection_options(parser: argparse.ArgumentParser, top: bool) -> None:
    # Subcommands repeat the options with SUPPRESS defaults, so `qa-min models --json` works
    # and a value given before the subcommand is not overwritten by a subcommand default.
    default: Any = None if top else argparse.SUPPRESS
    add = parser.add_argument
    add("--base-url", default=default, help="service URL (default: $SERVICE_BASE_URL, public)")
    add("--api-key", default=default, help="API key (default: $SERVICE_API_KEY)")
    add("--model", default=default, help="model (default: $SERVICE_DEFAULT_MODEL, judge-latest)")
    add("--timeout", type=_seconds, default=default, help="seconds per call, retries included")
    add("--retries", type=_count(0, MAX_RETRIES), default=default, metavar="N", help="retries per call (2)")
    add(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="machine-readable output",
    )


def _add_question_options(parser: argparse.ArgumentParser, action: type[_AddQuestion]) -> None:
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
        action=action,
        const="yes_no",
        nargs=3,
        metavar=("NAME", "YES", "NO"),
        dest="questions",
        help="a yes/no question: its id, the text for yes, the text for no",
    )
    add(
        "--choice",
        action=action,
        const="choice",
        nargs="+",
        metavar=("NAME", "KEY=TEXT"),
        dest="questions",
        help="a choice: its id, then 2+ options as key=description",
    )
    add(
        "--score",
        action=action,
        const="score",
        nargs="+",
        metavar=("NAME", "LEVEL"),
        dest="questions",
        help="a score: its id, then 2+ level texts, lowest first",
    )


def _add_batch_options(sub: argparse.ArgumentParser) -> None:
    add = sub.add_argument
    add("input", nargs="?", help="JSONL file; '-' or absent: read stdin")
    add("-o", "--output", metavar="FILE", help="write the answers to FILE ('-' or absent: stdout)")
    add("--resume", action="store_true", help="continue FILE: skip the lines it answers, append the rest")
    add("--skip-failed", action="store_true", help="with --resume, do not ask again lines that failed")
    add(
        "--failures",
        metavar="FILE",
        help="also write this run's failed lines to FILE ('-': stdout, with --output FILE)",
    )
    add(
        "--concurrency",
        type=_count(1, MAX_CONCURRENCY),
        default=8,
        metavar="N",
        help=f"calls in flight, 1-{MAX_CONCURRENCY} (8)",
    )
    add(
        "--max-rate",
        type=_rate,
        metavar="R",
        help="at most R requests per second (default: adapt to the service's 429s)",
    )
    add("-q", "--quiet", action="store_true", help="no progress or summary on stderr")


def _add_fake_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--host", type=_utf8, default="127.0.0.1", help="address to listen on (127.0.0.1)")
    sub.add_argument("--port", type=_count(0, 65535), default=8080, help="port (8080; 0 picks a free one)")
    sub.add_argument("--prefix", type=_utf8, default="", help="path prefix the service lives under")
    sub.add_argument(
        "--rate-limit",
        nargs=2,
        type=_positive_float,
        action=_RateLimitPair,
        metavar=("RATE", "BURST"),
        default=None,
        help="play a rate-limited service: a token bucket of BURST refilled at RATE a second; "
        "a request that finds no token gets 429",
    )
    sub.add_argument(
        "--retry-after",
        choices=("seconds", "ms", "both", "none"),
        default="seconds",
        help="what a 429 says: Retry-After in seconds (default), retry-after-ms, both, or neither",
    )
    sub.add_argument(
        "--announce",
        choices=("none", "ietf", "ietf-draft", "openai", "anthropic"),
        default="none",
        help="announce the rate limit on every response: IETF RateLimit/RateLimit-Policy (ietf), "
        "RateLimit-Limit/-Remaining/-Reset (ietf-draft), x-ratelimit-*-requests (openai), "
        "anthropic-ratelimit-requests-* (anthropic), or not at all (none, the default)",
    )
    # dest api_key, default SUPPRESS: `qa-min --api-key K fake` works too, and the environment's
    # key is never required by accident.
    sub.add_argument("--api-key", default=argparse.SUPPRESS, help="require this key (default: none)")
    sub.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the URL as JSON")


def _no_checks(args: argparse.Namespace) -> None:
    pass


def _fake_checks(sub: argparse.ArgumentParser) -> Callable[[argparse.Namespace], None]:
    """What argparse cannot check option by option: ``--announce`` needs ``--rate-limit``; a key
    the fake requires is not empty (no client can send that)."""

    def check(args: argparse.Namespace) -> None:
        if getattr(args, "api_key", None) == "":
            sub.error("argument --api-key: a key cannot be empty (leave the option out to accept any key)")
        if args.announce != "none" and args.rate_limit is None:
            sub.error(
                f"argument --announce: {args.announce} needs --rate-limit RATE BURST, the limit to announce"
            )

    return check


def _batch_checks(sub: argparse.ArgumentParser) -> Callable[[argparse.Namespace], None]:
    """``--skip-failed`` needs ``--resume``: alone it would change nothing, and say nothing. An
    output of ``-`` is stdout, and so is a ``--failures`` of ``-``, but not both at once."""

    def check(args: argparse.Namespace) -> None:
        if args.output == "-":
            # As the input's '-' is stdin; opened as a path, it was a file named "-".
            args.output = None
        if args.skip_failed and not args.resume:
            sub.error("argument --skip-failed: needs --resume, the run whose failed lines it skips")
        if args.failures == "-" and args.output is None:
            sub.error("argument --failures: '-' is stdout, where the answers go; give --output FILE")

    return check


def build_parser() -> argparse.ArgumentParser:
    """The ``qa-min`` argument parser; each command sets ``run``, a function ``(args, out) -> code``,
    and ``check``, run on the parsed ``args`` (a usage error exits as argparse's do)."""
    formatter = argparse.RawDescriptionHelpFormatter
    exits = exit_help()
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Command line for the question-answering service. Without a command: demo.",
        epilog=exits,
        formatter_class=formatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_connection_options(parser, top=True)
    parser.set_defaults(run=demo, questions=None, check=_no_checks)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    def command(name: str, run: Callable[[argparse.Namespace, Output], int], help: str, epilog: str) -> Any:
        sub = commands.add_parser(name, help=help, description=help, epilog=epilog, formatter_class=formatter)
        sub.set_defaults(run=run)
        return sub

    demo_help = "show every operation on an in-process fake service (the default; ignores connection options)"
    show = command("demo", demo, demo_help, "")
    # Of the global options only --json changes what demo does: listing the connection options
    # in its --help too would offer options that do nothing.
    show.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON document"
    )
    _add_connection_options(command("models", models, "list the model names, one per line", exits), top=False)
    ask_help = "ask questions about one state; prints `id: answer` lines"
    one = command("ask", ask, ask_help, QUESTIONS_HELP + exits)
    _add_connection_options(one, top=False)
    one.add_argument("state", nargs="?", help="the text to judge; '-' or absent: read stdin")
    _add_question_options(one, _AddQuestion)
    batch_help = "ask questions about each state of a JSONL file; writes JSONL"
    many = command("batch", batch, batch_help, _BATCH_HELP + QUESTIONS_HELP + exits)
    _add_connection_options(many, top=False)
    _add_batch_options(many)
    _add_question_options(many, _AddBatchQuestion)
    many.set_defaults(check=_batch_checks(many))
    serve = command("fake", fake, "serve the fake service locally until Ctrl-C", "")
    _add_fake_options(serve)
    serve.set_defaults(check=_fake_checks(serve))
    return parser

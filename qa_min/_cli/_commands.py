"""The commands: ``models``, ``ask`` and ``fake`` here; ``batch`` and ``demo`` in their own modules.

Each command takes the parsed arguments and the `Output` and returns the exit code; errors of
qa_min's hierarchy propagate to ``main``, which reports them. ``batch`` and ``demo`` are imported
when they run, so that ``ask`` does not pay for them.
"""

from __future__ import annotations

import sys
import time

from .. import Client, InvalidState, Request
from ._output import FileError, answer_text, client_options
from ._questions import collect_questions

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import NoReturn, Optional

    from ._output import Output

PROG = "qa-min"


def models(args: argparse.Namespace, out: Output) -> int:
    with Client(**client_options(args)) as client:
        names = [model.name for model in client.list_models()]
    if out.json:
        out.data(names)
    else:
        for name in names:
            out.line(out.value(name), decoded=True)
    return 0


def _utf8(text: str, what: str) -> str:
    """``text``, or `InvalidState` as batch refuses a line that is not UTF-8.

    Python hands on bytes it cannot decode (in argv, and in stdin under the C locale or in UTF-8
    mode) as lone surrogates; sent, they would reach the service as JSON escapes of those, not
    as the text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidState(f"{what} is not UTF-8") from None
    return text


def _read_state(arg: Optional[str]) -> str:
    if arg is not None and arg != "-":
        return _utf8(arg, "the state argument")
    if sys.stdin is None:  # started with stdin closed (`<&-`)
        raise FileError("no state given and stdin is closed: pass the state as an argument")
    if sys.stdin.isatty():
        # Otherwise a user who forgot the state sees a command that seems to hang.
        print("reading the state from stdin; end it with Ctrl-D", file=sys.stderr, flush=True)
    try:
        text = sys.stdin.read()
    except UnicodeDecodeError:  # stdin decoded strictly, as in a locale other than C
        raise InvalidState("the state read from stdin is not UTF-8") from None
    # A shell pipe adds a final newline that is not part of the text.
    return _utf8(text.rstrip("\r\n"), "the state read from stdin")


def ask(args: argparse.Namespace, out: Output) -> int:
    questions = collect_questions(args)
    request = Request(_read_state(args.state), questions)
    with Client(**client_options(args)) as client:
        response = client.core(request)
    if out.json:
        request_id = response.diagnostics.request_id
        out.data({"answers": dict(response.answers), "usage": dict(response.usage), "request_id": request_id})
    else:
        for name, value in response.answers.items():
            out.line(f"{out.value(name)}: {out.value(answer_text(value))}", decoded=True)
    return 0


def batch(args: argparse.Namespace, out: Output) -> int:
    from ._batch import run_batch

    return run_batch(args, out)


def demo(args: argparse.Namespace, out: Output) -> int:
    from ._demo import run_demo

    return run_demo(out)


def _serve_forever() -> NoReturn:  # pragma: no cover - runs in test_fake_process_exits_130_on_sigint
    # time.sleep, unlike a lock wait, is interrupted by Ctrl-C on every platform.
    while True:
        time.sleep(3600)


def fake(args: argparse.Namespace, out: Output) -> int:
    from ..testing import FakeService

    try:
        service = FakeService(  # the parser checked what FakeService would refuse with ValueError
            api_key=args.api_key,
            host=args.host,
            port=args.port,
            prefix=args.prefix,
            rate_limit=args.rate_limit,
            retry_after=args.retry_after,
            announce=args.announce,
        )
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
    finally:
        # Ctrl-C or SIGTERM: closed here, then main() prints it and exits 130 or 143.
        service.close()

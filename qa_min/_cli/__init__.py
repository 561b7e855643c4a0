"""The command line: ``python -m qa_min [global options] [command] ...`` (also installed as ``qa-min``).

Commands:
    demo     (the default) runs every operation against an in-process fake service and prints it
    models   lists the model names the account can use
    ask      asks questions about one state (an argument, or stdin)
    batch    asks the same questions about every state of a JSONL file (or stdin), concurrently,
             streaming, resumable
    fake     serves the fake service on a local port until Ctrl-C

Modules, each importing only those below it and qa_min's public names:
    ``__init__`` (`main`) -> ``_parser`` -> ``_commands`` -> ``_batch`` (-> ``_jsonl``,
    ``_progress``), ``_demo`` -> ``_questions`` -> ``_output`` (the printer, the exit-code table
    ``EXIT_CODES``, the ``Client`` options and key scrubbing).

This package is imported only when the command line runs, never by ``import qa_min``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from .. import QAError
from ._output import Output, Terminated, drop_stdout, on_sigterm
from ._parser import build_parser

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Optional

__all__ = ["main"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit code (``EXIT_CODES`` in ``_output`` lists them)."""
    given = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(given)
        args.check(args)
    except SystemExit as exc:  # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else 2
    args.argv = given  # batch prints the command that resumes it
    out = Output(args.json, [args.api_key, os.environ.get("SERVICE_API_KEY", "").strip()])
    # Only the main thread may set a handler; a caller's own handler comes back after the run.
    main_thread = threading.current_thread() is threading.main_thread()
    saved = signal.signal(signal.SIGTERM, on_sigterm) if main_thread else None
    try:
        return int(args.run(args, out))
    except QAError as exc:
        return out.error(exc)
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        print("terminated" if terminated else "interrupted", file=sys.stderr)
        return 143 if terminated else 130
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly.
        drop_stdout()
        return 1
    finally:
        if main_thread:  # None: a handler not set from Python, for which the default stands in
            signal.signal(signal.SIGTERM, signal.SIG_DFL if saved is None else saved)

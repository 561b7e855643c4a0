"""``python -m benchmarks redaction``: the cost of hiding the key in an 8 MiB body, and of the nesting check.

Each case is timed side by side, in the same round, with decoding the same body from UTF-8
bytes, which the client does to every error body anyway; the figure to quote is the ratio.
Bodies:

* no key: 8 MiB of text that holds no piece of the key (the common case);
* five echoes: the same, with the key, a 20-character prefix and a middle piece planted;
* key copies: 8 MiB made of the key, back to back;
* prefix copies: 8 MiB made of a 20-character prefix of the key, back to back;
* prefixes 1 apart: the same with a space between copies (the slowest kind found).

The nesting check (``_responses._too_deep``) is timed on 8 MiB bodies next to ``json.loads``.

Every response's headers are redacted for its Diagnostics (``ResponseHeaders.redacted``): timed on
a typical head holding no key, next to a scan of each name and value one by one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Optional

from qa_min._diagnostics import ResponseHeaders
from qa_min._redact import Redactor
from qa_min._responses import _too_deep

KEY = "sk-proj-Xq7vB2mK9pL4nR8tW1yZ3cF6hJ0dG5sA"
MIB = 1024 * 1024


def _bodies(size: int) -> dict[str, str]:
    filler = ("The quick brown fox jumps over the lazy dog 0123456789. " * (size // 56 + 1))[:size]
    third = size // 3
    echoed = filler[:third] + KEY + filler[third : 2 * third] + KEY[:20] + filler[2 * third :] + KEY[10:22]
    return {
        "no key": filler,
        "five echoes": echoed[:size],
        "key copies": (KEY * (size // len(KEY) + 1))[:size],
        "prefix copies": (KEY[:20] * (size // 20 + 1))[:size],
        "prefixes 1 apart": ((KEY[:20] + " ") * (size // 21 + 1))[:size],
    }


def _seconds(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks redaction", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    parser.add_argument("--mib", type=int, default=8, help="size of each body in MiB (8)")
    args = parser.parse_args(argv)
    rounds, size = args.rounds, args.mib * MIB
    hide = Redactor(KEY)
    print(f"redaction of {args.mib} MiB, median of {rounds} rounds (ms; ratio to decoding it)")
    for name, body in _bodies(size).items():
        ours, old = [], []
        data = body.encode()
        for _ in range(rounds):
            ours.append(_seconds(lambda: hide(body)))  # noqa: B023 - used at once
            old.append(_seconds(lambda: data.decode("utf-8", "replace")))  # noqa: B023
        ratio = statistics.median(a / b for a, b in zip(ours, old))
        print(f"  {name:14} {statistics.median(ours) * 1000:8.1f} ms  {ratio:6.1f}x")
    nested = {
        "wide models": json.dumps(
            {"models": [{"name": f"m{i}", "x": [1, {"y": [2]}]} for i in range(25_000 * args.mib)]}
        ),
        "deep run": "[" * size,
        "128 deep, repeated": "[" + ",".join(["[" * 127 + "]" * 127] * (size // 255)) + "]",
    }
    print("nesting check (ms; ratio to json.loads of the same body, where it parses)")
    for name, text in nested.items():
        data = text.encode()
        check = statistics.median(_seconds(lambda: _too_deep(data)) for _ in range(rounds))  # noqa: B023
        try:
            parse = statistics.median(_seconds(lambda: json.loads(data)) for _ in range(rounds))  # noqa: B023
            versus = f"{check / parse:6.2f}x"
        except (ValueError, RecursionError):
            versus = "(json refuses)"
        print(f"  {name:20} {check * 1000:8.1f} ms  {versus}")
    _headers(hide, rounds)
    return 0


HEAD = (
    ("Server", "BaseHTTP/0.6 Python/3.11.9"),
    ("Date", "Sat, 28 Nov 2026 12:00:00 GMT"),
    ("Content-Type", "application/json"),
    ("Content-Length", "123"),
    ("request-id", "req_0123456789abcdef"),
    ("x-ratelimit-limit-requests", "100"),
    ("x-ratelimit-remaining-requests", "99"),
    ("x-ratelimit-reset-requests", "1s"),
)


def _headers(hide: Redactor, rounds: int) -> None:
    headers, times = ResponseHeaders(HEAD), 20_000
    ours, apart = [], []
    for _ in range(rounds):
        ours.append(_seconds(lambda: [headers.redacted(hide) for _ in range(times)]))
        apart.append(
            _seconds(lambda: [ResponseHeaders((hide(n), hide(v)) for n, v in HEAD) for _ in range(times)])
        )
    ratio = statistics.median(a / b for a, b in zip(ours, apart))
    each = statistics.median(ours) / times * 1e6
    print(f"a response's {len(HEAD)} headers, no key (µs; ratio to a scan of each name and value)")
    print(f"  {'redacted':14} {each:8.2f} µs  {ratio:6.2f}x")


if __name__ == "__main__":
    raise SystemExit(main())

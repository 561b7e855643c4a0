"""``qa_min.testing.FakeService`` in a process of its own, for the modes that measure against it.

In its own process the service's threads do not share a GIL with the client's, so the client
is measured, not the two together. ``FakeProcess`` starts it and reads its counts; the child is
this module run as a script::

    python -m benchmarks.fake [--rate R --burst B] [--retry-after seconds|ms]

which prints ``READY <url>``, answers a ``stats`` line on stdin with its counts as one JSON
line, and prints them a last time and exits when stdin closes (so it cannot outlive the process
that started it). The counts: ``requests`` (all that arrived), ``throttled`` (answered 429),
``states`` (distinct states asked of ``/v1/core``) and ``twice`` (states asked more than once).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from typing import TYPE_CHECKING, Optional

from .common import ROOT, child_env

if TYPE_CHECKING:
    from types import TracebackType

    from qa_min.testing import FakeService


class FakeProcess:
    """A fresh fake service in a child process, at ``url``; ``stats()``, then ``close()``.

    Args:
        rate_limit: (requests per second, burst) the service allows, or None for no limit.
        retry_after: How its 429s say when to come back: ``"seconds"`` or ``"ms"``.
        announce: The style it announces its limit in on every response (``"none"``: not).

    Raises:
        RuntimeError: The service did not start.
    """

    def __init__(
        self,
        rate_limit: Optional[tuple[float, float]] = None,
        retry_after: str = "seconds",
        announce: str = "none",
    ) -> None:
        command = [sys.executable, "-m", "benchmarks.fake", "--retry-after", retry_after]
        command += ["--announce", announce]
        if rate_limit is not None:
            command += ["--rate", str(rate_limit[0]), "--burst", str(rate_limit[1])]
        pipe = subprocess.PIPE
        self.process = subprocess.Popen(
            command, stdin=pipe, stdout=pipe, text=True, cwd=ROOT, env=child_env()
        )
        assert self.process.stdout is not None
        ready = self.process.stdout.readline().split()
        if ready[:1] != ["READY"]:
            self.process.kill()
            self.process.communicate()
            raise RuntimeError(f"the fake service did not start: {ready!r}")
        self.url = ready[1]

    def stats(self) -> dict[str, int]:
        """The counts so far."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write("stats\n")
        self.process.stdin.flush()
        counts: dict[str, int] = json.loads(self.process.stdout.readline())
        return counts

    def close(self) -> dict[str, int]:
        """Stop the service; its last counts."""
        out, _ = self.process.communicate("", timeout=60)
        counts: dict[str, int] = json.loads(out.strip().splitlines()[-1])
        return counts

    def __enter__(self) -> FakeProcess:
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self.process.returncode is None:
            self.close()


def counts(service: FakeService) -> dict[str, int]:
    asked = Counter(r.json()["state"] for r in service.requests if r.path.endswith("/v1/core"))
    return {
        "requests": service.request_count,
        "throttled": service.rate_limited_count,
        "states": len(asked),
        "twice": sum(1 for n in asked.values() if n > 1),
    }


def main(argv: Optional[list[str]] = None) -> int:
    from qa_min.testing import FakeService

    parser = argparse.ArgumentParser(prog="python -m benchmarks.fake", description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, help="requests per second it allows (default: no limit)")
    parser.add_argument("--burst", type=float, default=50.0, help="the burst it allows with --rate (50)")
    parser.add_argument("--retry-after", choices=("seconds", "ms"), default="seconds")
    parser.add_argument("--announce", default="none", help="the style it announces its limit in (none)")
    args = parser.parse_args(argv)
    rate_limit = None if args.rate is None else (args.rate, args.burst)
    with FakeService(rate_limit=rate_limit, retry_after=args.retry_after, announce=args.announce) as service:
        print(f"READY {service.url}", flush=True)
        for command in sys.stdin:
            if command.strip() == "stats":
                print(json.dumps(counts(service)), flush=True)
        print(json.dumps(counts(service)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

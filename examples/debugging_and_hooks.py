"""Debugging a call: request ids, timings, per-attempt records, and event hooks for metrics and logs.

Run it from the repository root (or with qa_min installed)::

    python examples/debugging_and_hooks.py

With ``SERVICE_BASE_URL`` set (and ``SERVICE_API_KEY`` for the public service) it asks that
service; otherwise it starts a local fake service that answers 429, then 503, then 200, so that
every attempt shows up in the hooks and in ``diagnostics.history``.
"""

from __future__ import annotations

import collections
import logging
import os
import sys

import qa_min as qa


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


class Metrics:
    """A stand-in for a metrics client (Prometheus, StatsD, ...): counters and a latency sum."""

    def __init__(self) -> None:
        self.counters: collections.Counter[str] = collections.Counter()
        self.seconds = 0.0

    def after_attempt(self, event: qa.HookEvent) -> None:
        outcome = str(event.status) if event.error is None else type(event.error).__name__
        self.counters[f"qa.attempts{{outcome={outcome}}}"] += 1
        self.seconds += event.duration or 0.0


def log_attempt(event: qa.HookEvent) -> None:
    """Every attempt as one log line: what a tracing or logging library would attach."""
    log = logging.getLogger("myapp.qa")
    if event.stage == "before_attempt":
        log.info("-> %s %s (attempt %d)", event.method, event.url, event.attempt)
    else:
        outcome = event.status if event.error is None else f"{event.status} {type(event.error).__name__}"
        log.info("<- %s in %.1f ms, request id %s", outcome, (event.duration or 0) * 1000, event.request_id)


def main(base_url: str | None = None) -> None:
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="log: %(message)s")
    metrics = Metrics()
    hooks = {"before_attempt": [log_attempt], "after_attempt": [log_attempt, metrics.after_attempt]}
    # Short backoff for the demonstration; the defaults start at 0.5 s.
    retry = qa.RetryPolicy(backoff_initial_ms=50)
    with qa.Client(base_url=base_url, hooks=hooks, retry=retry) as client:
        response = client.ask("Thanks, that fixed it.", Review)

    diagnostics = response.diagnostics  # every result carries its own
    print(f"answer: toxic={response.answers.toxic}")
    took = f"{diagnostics.attempts} attempt(s) in {diagnostics.elapsed:.3f} s"
    print(f"request id: {diagnostics.request_id}, {took}")
    for attempt in diagnostics.history:
        outcome = attempt.status if attempt.error is None else f"{attempt.status} {attempt.error}"
        print(f"  attempt {attempt.number}: {outcome}, slept {attempt.delay:.3f} s before it")
    if diagnostics.headers is not None:
        print(f"content-type of the last response: {diagnostics.headers.get('content-type')}")
    print(f"metrics: {dict(sorted(metrics.counters.items()))}")


if __name__ == "__main__":
    if os.environ.get("SERVICE_BASE_URL", "").strip():
        main()
    else:
        from qa_min.testing import FakeService, reply

        with FakeService() as service:
            print(f"(no SERVICE_BASE_URL: a local fake service at {service.url}; its answers are arbitrary)")
            service.script(
                reply(
                    429, {"detail": "slow down"}, headers=[("retry-after-ms", "20"), ("request-id", "req_1")]
                ),
                reply(503, {"detail": "busy"}, headers=[("request-id", "req_2")]),
            )
            main(service.url)

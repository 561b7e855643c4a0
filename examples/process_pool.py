"""Process pools: many texts judged by worker processes, one rate limit shared between them.

    python examples/process_pool.py

A ``Client`` pickles as its configuration, the API key included, and arrives in each task as a
fresh client with its own connections: pass it to the pool like any other argument. Or build
the client in the worker from the worker's environment (``SERVICE_API_KEY``), and no key
travels at all. Both are shown, with the "fork" and the "spawn" start methods. An error raised
in a worker reaches the parent as itself: ``except qa.ServiceBusy`` works there, with
``.status`` and ``.diagnostics``, and the pool stays usable.

Without ``SERVICE_BASE_URL`` it starts a local fake service, scripted to be busy for the last
step.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from typing import Optional

import qa_min as qa


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


TEXTS = [f"Order {i}: the parcel arrived {('late', 'broken', 'early')[i % 3]}." for i in range(20)]
WORKERS = 2
START_METHODS = [m for m in ("fork", "spawn") if m in multiprocessing.get_all_start_methods()]
# Say the service allows this job 100 requests a second: each worker's client gets its share.
LIMIT = qa.RateLimit(100)
# For the last step: give up after one quick retry.
IMPATIENT = qa.RetryPolicy(max_retries=1, backoff_initial_ms=100)


def judge(texts: Iterable[str], client: qa.Client) -> list[bool]:
    """In a worker: ``client`` is this task's copy of the parent's client (left open: see README)."""
    return [client.ask(text, Review).answers.toxic for text in texts]


def judge_with_own_client(texts: Iterable[str], base_url: Optional[str]) -> list[bool]:
    """In a worker: a client built here, its key read from the worker's environment."""
    with qa.Client(base_url=base_url, rate_limit=LIMIT.split(WORKERS)) as client:
        return [client.ask(text, Review).answers.toxic for text in texts]


def judge_impatiently(text: str, client: qa.Client) -> bool:
    return client.ask(text, Review, retry=IMPATIENT).answers.toxic


def chunks(items: list[str], n: int) -> list[list[str]]:
    return [items[i::n] for i in range(n)]


def main(base_url: Optional[str] = None) -> None:
    parts = chunks(TEXTS, 4)
    with qa.Client(base_url=base_url, rate_limit=LIMIT.split(WORKERS)) as client:
        for method in START_METHODS:
            context = multiprocessing.get_context(method)
            with ProcessPoolExecutor(WORKERS, mp_context=context) as pool:
                shipped = list(itertools.chain(*pool.map(judge, parts, itertools.repeat(client))))
                own = list(
                    itertools.chain(*pool.map(judge_with_own_client, parts, itertools.repeat(base_url)))
                )
            print(
                f"{method}: {len(shipped)} texts judged by {WORKERS} processes: {sum(shipped)} toxic "
                f"with the shipped client, {sum(own)} with a client built in the worker"
            )

        # An error in a worker arrives as itself, and the pool goes on working.
        with ProcessPoolExecutor(WORKERS, mp_context=multiprocessing.get_context(START_METHODS[-1])) as pool:
            try:
                pool.submit(judge_impatiently, TEXTS[0], client).result()
                print("busy: answered: the service was not busy")
            except qa.ServiceBusy as exc:
                d = exc.diagnostics
                print(f"busy: {type(exc).__name__} from a worker: status={exc.status}, {d.attempts} attempts")
            print(f"the pool still answers: toxic={pool.submit(judge, TEXTS[:1], client).result()}")


if __name__ == "__main__":
    if os.environ.get("SERVICE_BASE_URL", "").strip():
        main()
    else:
        from qa_min.testing import FakeService, delay, reply

        busy = reply(429, {"detail": "rate limit exceeded"}, headers=[("retry-after-ms", "20")])
        with FakeService() as service:
            print(f"(no SERVICE_BASE_URL: a local fake service at {service.url}; its answers are arbitrary)")
            # Each request takes the next step: the jobs are served, then the impatient call
            # meets two 429s.
            served = 2 * len(TEXTS) * len(START_METHODS)
            service.script(*[delay(0)] * served, busy, busy)
            main(service.url)

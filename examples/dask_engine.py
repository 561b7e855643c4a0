"""Dask: many texts judged on a local cluster of worker processes, one rate limit shared.

    pip install -e ".[engines]"
    python examples/dask_engine.py

``LocalCluster(processes=True)`` starts a scheduler and two worker processes. A ``Client``
pickles as its configuration, the API key included, so it can be an argument of
``bag.map_partitions`` or ``client.map``; each task gets its own copy, with its own
connections. Or build the client in the task, from the worker's environment, and no key
travels. An error raised in a task reaches the driver as itself (``except qa.ServiceBusy``,
``.status``, ``.diagnostics``), and the workers go on.

Without ``SERVICE_BASE_URL`` it starts a local fake service, scripted to be busy for the last
step.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable
from typing import Optional

import qa_min as qa

try:
    import dask.bag
    from dask.distributed import Client as DaskClient
    from dask.distributed import LocalCluster
except ImportError:
    sys.exit('dask_engine.py needs Dask, which is not installed: pip install -e ".[engines]"')


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


TEXTS = [f"Order {i}: the parcel arrived {('late', 'broken', 'early')[i % 3]}." for i in range(40)]
WORKERS = 2
# Say the service allows this job 100 requests a second: each worker's client gets its share.
LIMIT = qa.RateLimit(100)
IMPATIENT = qa.RetryPolicy(max_retries=1, backoff_initial_ms=100)


def judge(texts: Iterable[str], client: qa.Client) -> list[bool]:
    """A partition: ``client`` is this task's copy of the driver's (left open: see README)."""
    return [client.ask(text, Review).answers.toxic for text in texts]


def judge_with_own_client(texts: list[str], base_url: Optional[str]) -> list[bool]:
    """A partition with a client built in the worker, its key from the worker's environment."""
    with qa.Client(base_url=base_url, rate_limit=LIMIT.split(WORKERS)) as client:
        return [client.ask(text, Review).answers.toxic for text in texts]


def judge_impatiently(text: str, client: qa.Client) -> bool:
    return client.ask(text, Review, retry=IMPATIENT).answers.toxic


def main(base_url: Optional[str] = None) -> None:
    cluster = LocalCluster(
        n_workers=WORKERS,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        silence_logs=logging.CRITICAL,
    )
    with (
        cluster,
        DaskClient(cluster) as dask_client,
        qa.Client(base_url=base_url, rate_limit=LIMIT.split(WORKERS)) as client,
    ):
        # 1. The client shipped with each partition of a bag.
        bag = dask.bag.from_sequence(TEXTS, npartitions=4)
        shipped = bag.map_partitions(judge, client).compute()
        print(f"1. map_partitions, shipped client: {len(shipped)} texts, {sum(shipped)} toxic")

        # 2. A client per partition, built in the worker, with client.map.
        parts = [TEXTS[i::4] for i in range(4)]
        own = [
            toxic
            for part in dask_client.gather(dask_client.map(judge_with_own_client, parts, base_url=base_url))
            for toxic in part
        ]
        print(f"2. client.map, a client per partition: {len(own)} texts, {sum(own)} toxic")

        # 3. An error in a worker arrives as itself; the cluster goes on working.
        try:
            dask_client.submit(judge_impatiently, TEXTS[0], client).result()
            print("3. answered: the service was not busy")
        except qa.ServiceBusy as exc:
            attempts = exc.diagnostics.attempts
            print(f"3. {type(exc).__name__} from a worker: status={exc.status}, {attempts} attempts")
        again = dask_client.submit(judge, TEXTS[:1], client).result()
        print(f"   the cluster still answers: toxic={again}")


if __name__ == "__main__":
    if os.environ.get("SERVICE_BASE_URL", "").strip():
        main()
    else:
        from qa_min.testing import FakeService, delay, reply

        busy = reply(429, {"detail": "rate limit exceeded"}, headers=[("retry-after-ms", "20")])
        with FakeService() as service:
            print(f"(no SERVICE_BASE_URL: a local fake service at {service.url}; its answers are arbitrary)")
            # Each request takes the next step: steps 1 and 2 are served, then step 3's call
            # meets two 429s.
            service.script(*[delay(0)] * (2 * len(TEXTS)), busy, busy)
            main(service.url)

"""Ray: many texts judged by remote tasks and by an actor pool, one rate limit shared.

    pip install -e ".[engines]"
    python examples/ray_engine.py

``ray.init(num_cpus=2)`` starts a local Ray with two worker processes. A ``Client`` pickles as
its configuration, the API key included, so it can be an argument of a task or an actor; each
gets its own copy, with its own connections. An actor can also build its client itself, from
the worker's environment, so that no key travels. An error raised in a task arrives in the
driver as ``RayTaskError(RateLimited)``, which is also a ``qa.RateLimited``: ``except
qa.ServiceBusy`` works, with ``.status`` and ``.diagnostics``; the actors go on working.

Without ``SERVICE_BASE_URL`` it starts a local fake service, scripted to be busy for the last
step.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

import qa_min as qa

try:
    import ray
    from ray.util import ActorPool
except ImportError:
    sys.exit('ray_engine.py needs Ray, which is not installed: pip install -e ".[engines]"')


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


TEXTS = [f"Order {i}: the parcel arrived {('late', 'broken', 'early')[i % 3]}." for i in range(40)]
WORKERS = 2
# Say the service allows this job 100 requests a second: each worker's client gets its share.
LIMIT = qa.RateLimit(100)
IMPATIENT = qa.RetryPolicy(max_retries=1, backoff_initial_ms=100)


def judge(texts: list[str], client: qa.Client) -> list[bool]:
    """A task: ``client`` is this task's copy of the driver's (left open: see README)."""
    return [client.ask(text, Review).answers.toxic for text in texts]


def judge_impatiently(text: str, client: qa.Client) -> bool:
    return client.ask(text, Review, retry=IMPATIENT).answers.toxic


class Judge:
    """An actor: one client for its lifetime, built here from the worker's environment."""

    def __init__(self, base_url: Optional[str]) -> None:
        self.client = qa.Client(base_url=base_url, rate_limit=LIMIT.split(WORKERS))

    def judge(self, texts: list[str]) -> list[bool]:
        return [self.client.ask(text, Review).answers.toxic for text in texts]


# What Ray runs in its worker processes (``ray.remote`` as a function keeps the plain ones typed).
remote_judge = ray.remote(judge)
remote_judge_impatiently = ray.remote(judge_impatiently)
RemoteJudge = ray.remote(Judge)


def main(base_url: Optional[str] = None) -> None:
    os.environ.setdefault("RAY_DISABLE_USAGE_STATS", "1")
    ray.init(num_cpus=WORKERS, include_dashboard=False, log_to_driver=False)
    try:
        parts = [TEXTS[i::4] for i in range(4)]
        with qa.Client(base_url=base_url, rate_limit=LIMIT.split(WORKERS)) as client:
            # 1. Tasks, each with its copy of the shipped client.
            shipped = [t for part in ray.get([remote_judge.remote(p, client) for p in parts]) for t in part]
            print(f"1. tasks, shipped client: {len(shipped)} texts, {sum(shipped)} toxic")

            # 2. An actor pool, each actor with a client of its own.
            pool = ActorPool([RemoteJudge.remote(base_url) for _ in range(WORKERS)])
            own = [t for part in pool.map(lambda actor, p: actor.judge.remote(p), parts) for t in part]
            print(f"2. actor pool, a client per actor: {len(own)} texts, {sum(own)} toxic")

            # 3. An error in a task arrives as itself (and as a RayTaskError); the actors go on.
            try:
                ray.get(remote_judge_impatiently.remote(TEXTS[0], client))
                print("3. answered: the service was not busy")
            except qa.ServiceBusy as exc:
                attempts = exc.diagnostics.attempts
                print(f"3. {type(exc).__name__} from a worker: status={exc.status}, {attempts} attempts")
            again = list(pool.map(lambda actor, p: actor.judge.remote(p), [TEXTS[:1]]))
            print(f"   the actors still answer: toxic={again[0]}")
    finally:
        ray.shutdown()


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

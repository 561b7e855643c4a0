"""Functions a ``ProcessPoolExecutor`` worker runs: a plain module, so a spawned process imports it.

It imports only ``qa_min``, which keeps a spawned worker's start cheap.
"""

from __future__ import annotations

import os

import qa_min as qa


def list_models(url: str) -> tuple[int, qa.ModelList]:
    """The models ``url`` lists, and the worker's process id."""
    with qa.Client(base_url=url, trust_env=False, retry=qa.RetryPolicy.none) as client:
        return os.getpid(), client.list_models()


def list_models_busy(url: str) -> qa.ModelList:
    """A call whose server answers 429: raises ``RateLimited`` in the worker."""
    policy = qa.RetryPolicy(max_retries=1, backoff_initial_ms=1)
    with qa.Client(base_url=url, trust_env=False, retry=policy) as client:
        return client.list_models()

"""A bounded soak: many threads, one client, a service that misbehaves one request in ten.

It checks what only volume shows: no call ends in anything but an answer or a qa_min error, and
once the client and the service are closed the process holds exactly the descriptors and
threads it held before.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from typing import Callable

import pytest

import qa_min as qa
from qa_min.testing import FakeService, Step, delay, drop, reply, reset, truncate

THREADS = 8
CALLS = 2000
FAULT_RATE = 0.10
SEED = 20240611
TIME_LIMIT = 20.0


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")
    quality = qa.Score(["poor", "fair", "good"])


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def fault_script(rng: random.Random, length: int) -> list[Step]:
    """``length`` steps, about one in ten a fault; the others serve normally."""
    faults: list[Callable[[], Step]] = [
        lambda: reply(503, {"detail": "unavailable"}),
        lambda: reply(429, {"detail": "slow down"}, headers=[("retry-after-ms", "2")]),
        drop,
        reset,
        truncate,
        lambda: delay(0.001),
    ]
    return [rng.choice(faults)() if rng.random() < FAULT_RATE else delay(0) for _ in range(length)]


def test_soak_8_threads_2000_calls_through_faults_end_in_answers_or_qa_errors() -> None:
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to count open descriptors")
    threads_before = threading.active_count()
    fds_before = open_fds()
    started = time.monotonic()

    rng = random.Random(SEED)
    outcomes: Counter[str] = Counter()
    unexpected: list[BaseException] = []
    lock = threading.Lock()
    svc = FakeService().start()
    # Retries add requests; once the script runs out the rest are served normally.
    svc.script(*fault_script(rng, CALLS))
    client = qa.Client(
        base_url=svc.url,
        trust_env=False,
        retry=qa.RetryPolicy(backoff_initial_ms=1, backoff_max_ms=5),
        # The limiter's shared pauses run under the faults too; an adaptive ceiling would only
        # pace this job (its own tests measure that), stretching a 1 s soak to 10 s.
        rate_limit=qa.RateLimit(adaptive=False),
    )
    states = [f"text number {i}" for i in range(CALLS)]

    def worker(index: int) -> None:
        for state in states[index::THREADS]:
            try:
                response = client.ask(state, Review)
                assert isinstance(response.answers.toxic, bool)
                kind = "answer"
            except qa.QAError as exc:
                kind = type(exc).__name__
            except BaseException as exc:  # everything else is a bug this test exists to find
                with lock:
                    unexpected.append(exc)
                kind = "unexpected"
            with lock:
                outcomes[kind] += 1

    try:
        workers = [threading.Thread(target=worker, args=(i,), name=f"soak-{i}") for i in range(THREADS)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join(TIME_LIMIT)
        assert not any(thread.is_alive() for thread in workers), "a soak thread is stuck"
        requests = len(svc.requests)
    finally:
        client.close()
        svc.close()

    elapsed = time.monotonic() - started
    assert unexpected == []
    assert sum(outcomes.values()) == CALLS
    # A call fails only when all three of its attempts meet a fault (about 1 in 1000).
    assert outcomes["answer"] >= CALLS * 0.97, outcomes
    assert set(outcomes) <= {"answer", "ServerError", "RateLimited", "ConnectionFailed"}, outcomes
    # The faults did happen: retries and invisible resends add about one request per fault.
    assert requests > CALLS * (1 + FAULT_RATE / 2)
    assert elapsed < TIME_LIMIT
    assert open_fds() == fds_before
    assert threading.active_count() == threads_before

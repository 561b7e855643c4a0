"""qa_min in process pools: ProcessPoolExecutor (fork and spawn) and multiprocessing.Pool.

Each pool runs 2,000 states against a FakeService on 127.0.0.1, with a client shipped from the
parent and with a client built per partition, and every answer is checked. A 429 storm reaches
the parent as ``RateLimited`` with its status and diagnostics, and the same pool then runs
another job (before qa_min's errors pickled, ``BrokenProcessPool`` and a hung ``.get()``).

  shipped client, 2,000 states ........ test_pool_executor_with_a_shipped_client,
                                        test_multiprocessing_pool_with_a_shipped_client
  client per partition, 2,000 states .. test_pool_executor_with_a_client_per_partition,
                                        test_multiprocessing_pool_with_a_client_per_partition
  the limit's share travels ........... test_each_worker_holds_its_share_of_the_limit
  429 storm, pool still usable ........ test_pool_executor_storm_reaches_the_parent_and_the_pool_survives,
                                        test_multiprocessing_pool_storm_reaches_the_parent
"""

from __future__ import annotations

import itertools
import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

import engine_jobs as jobs
import pytest

import qa_min as qa
from qa_min.testing import FakeService

# Python 3.12+ warns when a process with threads (the fake service's) forks. The workers
# never touch the parent's threads or locks: qa_min's fork check gives them their own.
pytestmark = [
    pytest.mark.engines,
    pytest.mark.timeout(60),
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]
METHODS = [m for m in ("fork", "spawn") if m in multiprocessing.get_all_start_methods()]


@pytest.fixture(scope="module")
def service() -> Iterator[FakeService]:
    with FakeService() as svc:
        yield svc


@pytest.fixture
def storm_service() -> Iterator[FakeService]:
    with FakeService() as svc:
        jobs.storm(svc)
        yield svc


@pytest.fixture(scope="module", params=METHODS)
def executor(request: pytest.FixtureRequest) -> Iterator[ProcessPoolExecutor]:
    context = multiprocessing.get_context(request.param)
    with ProcessPoolExecutor(jobs.WORKERS, mp_context=context) as pool:
        yield pool


@pytest.fixture(scope="module", params=METHODS)
def mp_pool(request: pytest.FixtureRequest) -> Iterator[multiprocessing.pool.Pool]:
    pool = multiprocessing.get_context(request.param).Pool(jobs.WORKERS)
    try:
        yield pool
    finally:
        pool.terminate()
        pool.join()


def test_pool_executor_with_a_shipped_client(executor: ProcessPoolExecutor, service: FakeService) -> None:
    parts = jobs.partitions(jobs.STATES)
    with jobs.make_client(service.url) as client:
        responses = jobs.flatten(executor.map(jobs.judge, parts, itertools.repeat(client), timeout=50))
    jobs.check(jobs.STATES, responses)


def test_pool_executor_with_a_client_per_partition(
    executor: ProcessPoolExecutor, service: FakeService
) -> None:
    parts = jobs.partitions(jobs.STATES)
    responses = jobs.flatten(
        executor.map(jobs.judge_with_own_client, parts, itertools.repeat(service.url), timeout=50)
    )
    jobs.check(jobs.STATES, responses)


def test_each_worker_holds_its_share_of_the_limit(
    executor: ProcessPoolExecutor, service: FakeService
) -> None:
    with jobs.make_client(service.url) as client:
        seen = [executor.submit(jobs.limit_in_worker, client).result(30) for _ in range(4)]
    assert {limit for _, limit in seen} == {qa.RateLimit(20_000)}


def test_pool_executor_storm_reaches_the_parent_and_the_pool_survives(
    executor: ProcessPoolExecutor, service: FakeService, storm_service: FakeService
) -> None:
    with jobs.make_client(storm_service.url, retry=jobs.IMPATIENT) as busy:
        futures = [executor.submit(jobs.judge, part, busy) for part in jobs.partitions(jobs.STATES[:10], 2)]
        for future in futures:
            with pytest.raises(qa.ServiceBusy) as caught:
                future.result(30)
            jobs.check_busy(caught.value)
    # The same pool, the same processes, answering again.
    parts = jobs.partitions(jobs.STATES[:100], 4)
    with jobs.make_client(service.url) as client:
        jobs.check(jobs.STATES[:100], jobs.flatten(executor.map(jobs.judge, parts, itertools.repeat(client))))


def test_multiprocessing_pool_with_a_shipped_client(
    mp_pool: multiprocessing.pool.Pool, service: FakeService
) -> None:
    parts = jobs.partitions(jobs.STATES)
    with jobs.make_client(service.url) as client:
        # chunksize 4: four tasks are pickled together, so they share one copy of the client
        # in the worker, one after the other; a copy left open serves them all.
        result = mp_pool.starmap_async(jobs.judge, [(part, client) for part in parts], chunksize=4)
        responses = jobs.flatten(result.get(50))
    jobs.check(jobs.STATES, responses)


def test_multiprocessing_pool_with_a_client_per_partition(
    mp_pool: multiprocessing.pool.Pool, service: FakeService
) -> None:
    parts = jobs.partitions(jobs.STATES)
    result = mp_pool.starmap_async(jobs.judge_with_own_client, [(part, service.url) for part in parts])
    jobs.check(jobs.STATES, jobs.flatten(result.get(50)))


def test_multiprocessing_pool_storm_reaches_the_parent(
    mp_pool: multiprocessing.pool.Pool, service: FakeService, storm_service: FakeService
) -> None:
    with jobs.make_client(storm_service.url, retry=jobs.IMPATIENT) as busy:
        result = mp_pool.apply_async(jobs.judge, (jobs.STATES[:5], busy))
        with pytest.raises(qa.ServiceBusy) as caught:
            result.get(30)  # raises at once: it used to hang here
    jobs.check_busy(caught.value)
    with jobs.make_client(service.url) as client:
        jobs.check(jobs.STATES[:20], mp_pool.apply_async(jobs.judge, (jobs.STATES[:20], client)).get(30))

"""qa_min on Dask: a LocalCluster of 2 worker processes, ``dask.bag`` and ``client.map``.

2,000 states against a FakeService on 127.0.0.1, with a client shipped from the driver (bag
``map_partitions``) and with a client built per partition (``client.map``); every answer is
checked. A 429 storm reaches the driver as ``RateLimited`` with its status and diagnostics,
and the same workers then run another job.

  shipped client, 2,000 states ........ test_map_partitions_with_a_shipped_client
  client per partition, 2,000 states .. test_client_map_with_a_client_per_partition
  the limit's share travels ........... test_each_worker_holds_its_share_of_the_limit
  429 storm, cluster still usable ..... test_a_storm_reaches_the_driver_and_the_cluster_survives
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import engine_jobs as jobs
import pytest

import qa_min as qa
from qa_min.testing import FakeService

pytestmark = [pytest.mark.engines, pytest.mark.timeout(90)]


def need(module: str) -> Any:
    """``module``, imported only by the tests that run (importing ``distributed`` changes how
    other tests' objects pickle), or the test skipped when Dask is not installed."""
    return pytest.importorskip(module, reason="Dask is not installed: pip install -e '.[engines]'")


@pytest.fixture(scope="module")
def dask_bag() -> Any:
    return need("dask.bag")


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Any]:
    distributed = need("distributed")
    # Workers are spawned processes with the driver's sys.path, so engine_jobs imports there.
    with (
        distributed.LocalCluster(
            n_workers=jobs.WORKERS,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def service() -> Iterator[FakeService]:
    with FakeService() as svc:
        yield svc


@pytest.fixture
def storm_service() -> Iterator[FakeService]:
    with FakeService() as svc:
        jobs.storm(svc)
        yield svc


def test_map_partitions_with_a_shipped_client(dask_client: Any, dask_bag: Any, service: FakeService) -> None:
    with jobs.make_client(service.url) as client:
        bag = dask_bag.from_sequence(jobs.STATES, npartitions=jobs.PARTITIONS)
        responses = bag.map_partitions(jobs.judge, client).compute()
    jobs.check(jobs.STATES, responses)


def test_client_map_with_a_client_per_partition(dask_client: Any, service: FakeService) -> None:
    parts = jobs.partitions(jobs.STATES)
    futures = dask_client.map(jobs.judge_with_own_client, parts, url=service.url)
    jobs.check(jobs.STATES, jobs.flatten(dask_client.gather(futures)))


def test_each_worker_holds_its_share_of_the_limit(dask_client: Any, service: FakeService) -> None:
    with jobs.make_client(service.url) as client:
        futures = dask_client.map(jobs.limit_in_worker, [client] * 4, pure=False)
        seen = dask_client.gather(futures)
    assert {limit for _, limit in seen} == {qa.RateLimit(20_000)}


def test_a_storm_reaches_the_driver_and_the_cluster_survives(
    dask_client: Any, dask_bag: Any, service: FakeService, storm_service: FakeService
) -> None:
    workers = set(dask_client.scheduler_info()["workers"])
    with jobs.make_client(storm_service.url, retry=jobs.IMPATIENT) as busy:
        futures = dask_client.map(jobs.judge, jobs.partitions(jobs.STATES[:10], 2), client=busy, pure=False)
        for future in futures:
            with pytest.raises(qa.ServiceBusy) as caught:
                future.result(timeout=30)
            jobs.check_busy(caught.value)
        with pytest.raises(qa.RateLimited):
            dask_bag.from_sequence(jobs.STATES[:10], npartitions=2).map_partitions(jobs.judge, busy).compute()
    assert set(dask_client.scheduler_info()["workers"]) == workers  # no worker was lost
    with jobs.make_client(service.url) as client:
        bag = dask_bag.from_sequence(jobs.STATES[:100], npartitions=4)
        jobs.check(jobs.STATES[:100], bag.map_partitions(jobs.judge, client).compute())

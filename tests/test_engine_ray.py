"""qa_min on Ray: ``ray.init(num_cpus=2)``, remote tasks and an actor pool.

2,000 states against a FakeService on 127.0.0.1, with a client shipped from the driver (tasks,
and actors holding it) and with a client built per partition (tasks); every answer is
checked. A 429 storm reaches the driver as ``RayTaskError(RateLimited)``, which is a
``qa.RateLimited`` with the worker's status and diagnostics, and the same tasks and actors
then run another job.

  shipped client, 2,000 states ........ test_tasks_with_a_shipped_client,
                                        test_an_actor_pool_with_a_shipped_client
  client per partition, 2,000 states .. test_tasks_with_a_client_per_partition
  the limit's share travels ........... test_each_worker_holds_its_share_of_the_limit
  429 storm, Ray still usable ......... test_a_storm_in_tasks_reaches_the_driver_and_ray_survives,
                                        test_a_storm_in_an_actor_pool_leaves_the_actors_usable
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import engine_jobs as jobs
import pytest

import qa_min as qa
from qa_min.testing import FakeService

pytestmark = [pytest.mark.engines, pytest.mark.timeout(90)]


class Judge:
    """An actor holding one client for its lifetime: the shipped one, or one it builds."""

    def __init__(self, client: qa.Client) -> None:
        self.client = client

    def judge(self, states: list[str]) -> list[qa.AskResponse[jobs.Review]]:
        return jobs.judge(states, self.client)


@pytest.fixture(scope="module")
def ray() -> Iterator[Any]:
    """Ray, started for this module; imported only here, by the tests that run, or skipped."""
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[engines]'")
    pytest.importorskip("ray.util", reason="Ray is not installed: pip install -e '.[engines]'")
    temp = tempfile.mkdtemp(prefix="qa-ray-")  # short: Ray's socket paths must fit 107 bytes
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_DISABLE_USAGE_STATS", "1")
        ray.init(
            num_cpus=jobs.WORKERS,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            _temp_dir=temp,
            runtime_env={"env_vars": {"PYTHONPATH": jobs.worker_pythonpath()}},
        )
    try:
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def service() -> Iterator[FakeService]:
    with FakeService() as svc:
        yield svc


@pytest.fixture
def storm_service() -> Iterator[FakeService]:
    with FakeService() as svc:
        jobs.storm(svc)
        yield svc


def actor_pool(ray: Any, client: qa.Client) -> Any:
    actor = ray.remote(Judge)
    return ray.util.ActorPool([actor.remote(client) for _ in range(jobs.WORKERS)])


def test_tasks_with_a_shipped_client(ray: Any, service: FakeService) -> None:
    judge = ray.remote(jobs.judge)
    with jobs.make_client(service.url) as client:
        refs = [judge.remote(part, client) for part in jobs.partitions(jobs.STATES)]
        jobs.check(jobs.STATES, jobs.flatten(ray.get(refs, timeout=60)))


def test_tasks_with_a_client_per_partition(ray: Any, service: FakeService) -> None:
    judge = ray.remote(jobs.judge_with_own_client)
    refs = [judge.remote(part, service.url) for part in jobs.partitions(jobs.STATES)]
    jobs.check(jobs.STATES, jobs.flatten(ray.get(refs, timeout=60)))


def test_an_actor_pool_with_a_shipped_client(ray: Any, service: FakeService) -> None:
    with jobs.make_client(service.url) as client:
        pool = actor_pool(ray, client)
        parts = jobs.partitions(jobs.STATES)
        jobs.check(jobs.STATES, jobs.flatten(pool.map(lambda actor, part: actor.judge.remote(part), parts)))


def test_each_worker_holds_its_share_of_the_limit(ray: Any, service: FakeService) -> None:
    limit_in_worker = ray.remote(jobs.limit_in_worker)
    with jobs.make_client(service.url) as client:
        seen = ray.get([limit_in_worker.remote(client) for _ in range(4)], timeout=60)
    assert {limit for _, limit in seen} == {qa.RateLimit(20_000)}


def test_a_storm_in_tasks_reaches_the_driver_and_ray_survives(
    ray: Any, service: FakeService, storm_service: FakeService
) -> None:
    judge = ray.remote(jobs.judge)
    with jobs.make_client(storm_service.url, retry=jobs.IMPATIENT) as busy:
        refs = [judge.remote(part, busy) for part in jobs.partitions(jobs.STATES[:10], 2)]
        for ref in refs:
            with pytest.raises(qa.ServiceBusy) as caught:
                ray.get(ref, timeout=60)
            jobs.check_busy(caught.value)  # Ray's wrapper is a RateLimited too
            assert isinstance(caught.value, ray.exceptions.RayTaskError)
            jobs.check_busy(caught.value.cause)  # and holds the worker's own error
    with jobs.make_client(service.url) as client:
        refs = [judge.remote(part, client) for part in jobs.partitions(jobs.STATES[:100], 4)]
        jobs.check(jobs.STATES[:100], jobs.flatten(ray.get(refs, timeout=60)))


def test_a_storm_in_an_actor_pool_leaves_the_actors_usable(ray: Any) -> None:
    with FakeService() as svc:
        # Exactly the attempts of the two failing calls (IMPATIENT: 2 each): then the same
        # service answers, and the same actors with the same clients must get through.
        jobs.storm(svc, replies=2 * jobs.WORKERS)
        with jobs.make_client(svc.url, retry=jobs.IMPATIENT) as busy:
            pool = actor_pool(ray, busy)
        for part in jobs.partitions(jobs.STATES[:10], jobs.WORKERS):
            pool.submit(lambda actor, states: actor.judge.remote(states), part)
        for _ in range(jobs.WORKERS):
            with pytest.raises(qa.ServiceBusy) as caught:
                pool.get_next(timeout=60)
            jobs.check_busy(caught.value)
        assert not pool.has_next()
        parts = jobs.partitions(jobs.STATES[:100], 4)
        jobs.check(
            jobs.STATES[:100], jobs.flatten(pool.map(lambda actor, part: actor.judge.remote(part), parts))
        )
        assert svc.request_count == 2 * jobs.WORKERS + 100

"""qa_min on Spark: ``local[2]``, ``rdd.mapPartitions``.

2,000 states against a FakeService on 127.0.0.1, with a client shipped in the closure and with
a client built per partition; every answer is checked. Spark sends a worker's exception to the
driver as text inside a ``Py4JJavaError``, so the recipe returns errors as values: a 429 storm
then reaches the driver as ``RateLimited`` with its status and diagnostics. An error left
uncaught fails the job with its class and status in the message, and Spark runs the next job.

  shipped client, 2,000 states ........ test_map_partitions_with_a_shipped_client
  client per partition, 2,000 states .. test_map_partitions_with_a_client_per_partition
  the limit's share travels ........... test_each_worker_holds_its_share_of_the_limit
  429 storm, Spark still usable ....... test_a_storm_returned_as_values_reaches_the_driver_intact,
                                        test_an_uncaught_storm_fails_the_job_and_spark_survives
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import engine_jobs as jobs
import pytest

import qa_min as qa
from qa_min.testing import FakeService

pytestmark = [pytest.mark.engines, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A SparkContext for this module; pyspark is imported only here, by the tests that run."""
    pyspark = pytest.importorskip("pyspark", reason="Spark is not installed: pip install -e '.[engines]'")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs a Java runtime: no java on PATH and JAVA_HOME unset")
    environment = {
        "PYSPARK_PYTHON": sys.executable,  # workers run this interpreter, with this tree on the path
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": jobs.worker_pythonpath(),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environment.items():
            patch.setenv(name, value)
        conf = (
            pyspark.SparkConf()
            .setMaster(f"local[{jobs.WORKERS}]")
            .setAppName("qa_min-tests")
            .set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false")
        )
        context = pyspark.SparkContext(conf=conf)
    context.setLogLevel("ERROR")
    try:
        yield context
    finally:
        stop(pyspark, context)


def stop(pyspark: Any, context: Any) -> None:
    """Stop the context and the JVM behind it, which ``stop()`` alone leaves running."""
    gateway = pyspark.SparkContext._gateway
    context.stop()
    if gateway is None:
        return
    gateway.shutdown()
    process = getattr(gateway, "proc", None)
    if process is not None:
        process.stdin.close()  # the JVM exits when its stdin closes
        process.wait(timeout=30)
    pyspark.SparkContext._gateway = None
    pyspark.SparkContext._jvm = None


@pytest.fixture(scope="module")
def service() -> Iterator[FakeService]:
    with FakeService() as svc:
        yield svc


@pytest.fixture
def storm_service() -> Iterator[FakeService]:
    with FakeService() as svc:
        jobs.storm(svc)
        yield svc


def test_map_partitions_with_a_shipped_client(spark: Any, service: FakeService) -> None:
    with jobs.make_client(service.url) as client:
        rdd = spark.parallelize(jobs.STATES, jobs.PARTITIONS)
        responses = rdd.mapPartitions(lambda states: jobs.judge(states, client)).collect()
    jobs.check(jobs.STATES, responses)


def test_map_partitions_with_a_client_per_partition(spark: Any, service: FakeService) -> None:
    url = service.url
    rdd = spark.parallelize(jobs.STATES, jobs.PARTITIONS)
    responses = rdd.mapPartitions(lambda states: jobs.judge_with_own_client(states, url)).collect()
    jobs.check(jobs.STATES, responses)


def test_each_worker_holds_its_share_of_the_limit(spark: Any, service: FakeService) -> None:
    with jobs.make_client(service.url) as client:
        seen = spark.parallelize(range(4), 4).map(lambda _: jobs.limit_in_worker(client)).collect()
    assert {limit for _, limit in seen} == {qa.RateLimit(20_000)}


def test_a_storm_returned_as_values_reaches_the_driver_intact(spark: Any, storm_service: FakeService) -> None:
    states = jobs.STATES[:10]
    with jobs.make_client(storm_service.url, retry=jobs.IMPATIENT) as busy:
        rdd = spark.parallelize(states, 2)
        rows = rdd.mapPartitions(lambda part: jobs.judge_or_error(part, busy)).collect()
    assert [state for state, _ in rows] == states
    for _, outcome in rows:
        jobs.check_busy(outcome)


def test_an_uncaught_storm_fails_the_job_and_spark_survives(
    spark: Any, service: FakeService, storm_service: FakeService
) -> None:
    py4j_protocol = pytest.importorskip("py4j.protocol")
    with jobs.make_client(storm_service.url, retry=jobs.IMPATIENT) as busy:
        rdd = spark.parallelize(jobs.STATES[:10], 2)
        with pytest.raises(py4j_protocol.Py4JJavaError) as caught:
            rdd.mapPartitions(lambda part: jobs.judge(part, busy)).collect()
    text = str(caught.value)
    assert "RateLimited: HTTP 429" in text, text[-2000:]
    assert jobs.BUSY_DETAIL in text
    with jobs.make_client(service.url) as client:
        rdd = spark.parallelize(jobs.STATES[:100], 4)
        jobs.check(jobs.STATES[:100], rdd.mapPartitions(lambda part: jobs.judge(part, client)).collect())

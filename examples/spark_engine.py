"""Spark: many texts judged with ``rdd.mapPartitions`` on ``local[2]``, one rate limit shared.

    pip install -e ".[engines]"    # and a Java runtime: java -version
    python examples/spark_engine.py

A ``Client`` pickles as its configuration, the API key included, so a closure may use one:
each task gets its own copy, with its own connections. Or build the client in the partition,
from the worker's environment, and no key travels. Spark hands a worker's exception to the
driver only as text, inside a ``Py4JJavaError``: to keep its class, ``.status`` and
``.diagnostics``, catch it in the partition and return it as a value (qa_min's errors pickle),
then ``except qa.ServiceBusy`` in the driver as usual.

Without ``SERVICE_BASE_URL`` it starts a local fake service, scripted to be busy for the last
step.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable, Iterator
from typing import Optional, Union

import qa_min as qa

try:
    from pyspark import SparkConf, SparkContext
except ImportError:
    sys.exit('spark_engine.py needs Spark, which is not installed: pip install -e ".[engines]"')
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    sys.exit("spark_engine.py needs a Java runtime: no java on PATH and JAVA_HOME unset")


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


TEXTS = [f"Order {i}: the parcel arrived {('late', 'broken', 'early')[i % 3]}." for i in range(40)]
WORKERS = 2
# Say the service allows this job 100 requests a second: each worker's client gets its share.
LIMIT = qa.RateLimit(100)
IMPATIENT = qa.RetryPolicy(max_retries=1, backoff_initial_ms=100)


def judge(texts: Iterable[str], client: qa.Client) -> Iterator[bool]:
    """A partition: ``client`` is this task's copy of the driver's (left open: see README)."""
    for text in texts:
        yield client.ask(text, Review).answers.toxic


def judge_with_own_client(texts: Iterable[str], base_url: Optional[str]) -> Iterator[bool]:
    """A partition with a client built in the worker, its key from the worker's environment."""
    with qa.Client(base_url=base_url, rate_limit=LIMIT.split(WORKERS)) as client:
        for text in texts:
            yield client.ask(text, Review).answers.toxic


def judge_or_error(texts: Iterable[str], client: qa.Client) -> Iterator[Union[bool, qa.QAError]]:
    """Each answer, or the error in its place: Spark would keep only an error's text."""
    for text in texts:
        try:
            yield client.ask(text, Review, retry=IMPATIENT).answers.toxic
        except qa.QAError as exc:
            yield exc


def main(base_url: Optional[str] = None) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers run this interpreter
    conf = (
        SparkConf()
        .setMaster(f"local[{WORKERS}]")
        .setAppName("qa_min")
        .set("spark.ui.enabled", "false")
        .set("spark.ui.showConsoleProgress", "false")
    )
    spark = SparkContext(conf=conf)
    spark.setLogLevel("ERROR")
    try:
        rdd = spark.parallelize(TEXTS, 4)
        with qa.Client(base_url=base_url, rate_limit=LIMIT.split(WORKERS)) as client:
            # 1. The client shipped in the closure.
            shipped = rdd.mapPartitions(lambda texts: judge(texts, client)).collect()
            print(f"1. mapPartitions, shipped client: {len(shipped)} texts, {sum(shipped)} toxic")

            # 2. A client per partition, built in the worker.
            own = rdd.mapPartitions(lambda texts: judge_with_own_client(texts, base_url)).collect()
            print(f"2. mapPartitions, a client per partition: {len(own)} texts, {sum(own)} toxic")

            # 3. Errors come back as values, intact; raise or report them in the driver.
            outcomes = (
                spark.parallelize(TEXTS[:1], 1).mapPartitions(lambda t: judge_or_error(t, client)).collect()
            )
            try:
                for outcome in outcomes:
                    if isinstance(outcome, qa.QAError):
                        raise outcome
                print("3. answered: the service was not busy")
            except qa.ServiceBusy as exc:
                attempts = exc.diagnostics.attempts
                print(f"3. {type(exc).__name__} from a worker: status={exc.status}, {attempts} attempts")
            again = spark.parallelize(TEXTS[:1], 1).mapPartitions(lambda t: judge(t, client)).collect()
            print(f"   Spark still answers: toxic={again}")
    finally:
        spark.stop()


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

"""``python -m benchmarks engines``: qa_min inside process pools, Dask, Ray and Spark.

Run it with an interpreter that has the engines (``pip install -e ".[engines]"``); a missing
engine is left out and named. Two measurements, each against ``FakeService`` in a process of
its own:

* **Calls per second per engine**: 2 workers, 2,000 states in 8 partitions asked one after
  another, with a client shipped from the driver (unpickled by each task) and with a client
  built in each partition. Rounds alternate which goes first; the ratio is the median of the
  per-round ratios; every answer is checked against ``expected_answer``, outside the timing.
* **A 2-worker Dask job against** ``FakeService(rate_limit=(200, 50), retry_after="ms")``:
  2,000 calls in 2 partitions, 8 in flight in each (``client.submit``), with
  ``RateLimit(200).split(2)`` and with the default ``RateLimit()``: the share of 200/s
  achieved, the requests refused with 429, and the calls lost (failed or wrong).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Optional

import qa_min as qa
from qa_min.testing import expected_answer

from .common import ROOT
from .fake import FakeProcess

WORKERS = 2
PARTITIONS = 8
STATES = [
    f"State {i}: the parcel came {('late', 'early', 'on time')[i % 3]} and {i % 7} items" for i in range(2000)
]
RATE, BURST = 200.0, 50.0
IN_FLIGHT = 8
ENGINES = ("processes (fork)", "processes (spawn)", "Dask", "Ray", "Spark")


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")
    quality = qa.Score(["poor", "fair", "good"])


Answer = tuple[bool, int]
Job = Callable[[list[str], Any], Any]


# -- what the workers run (imported by name as benchmarks.engines) ---------------------------


def pair(r: qa.AskResponse[Review]) -> Answer:
    return (r.answers.toxic, r.answers.quality)


def judge(states: list[str], client: qa.Client) -> list[Answer]:
    """A partition with the shipped client: this task's copy."""
    return [pair(client.ask(state, Review)) for state in states]


def judge_with_own_client(states: list[str], url: str) -> list[Answer]:
    """A partition with a client built here."""
    with qa.Client(base_url=url, trust_env=False) as client:
        return judge(states, client)


def judge_in_flight(states: list[str], client: qa.Client) -> tuple[list[Optional[Answer]], dict[str, int]]:
    """A partition with ``IN_FLIGHT`` calls at a time: answers (None if lost) and failures by class."""
    calls = [client.submit(client.ask, state, Review) for state in states]
    answers: list[Optional[Answer]] = []
    failed: Counter[str] = Counter()
    for call in calls:
        try:
            answers.append(pair(call.result()))
        except qa.QAError as exc:
            answers.append(None)
            failed[type(exc).__name__] += 1
    return answers, dict(failed)


def expected(states: Iterable[str]) -> list[tuple[object, object]]:
    """The fake's answers to ``states``, as ``judge`` returns them."""
    toxic, quality = Review.toxic.criteria, Review.quality.criteria
    model = qa.DEFAULT_MODEL
    return [
        (expected_answer(model, s, "toxic", toxic), expected_answer(model, s, "quality", quality))
        for s in states
    ]


# -- the engines -----------------------------------------------------------------------------


def _pythonpath() -> str:
    return os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)


@contextmanager
def process_pool(method: str) -> Iterator[Callable[[Job, list[list[str]], Any], list[Any]]]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(WORKERS, mp_context=multiprocessing.get_context(method)) as pool:
        yield lambda fn, parts, arg: list(pool.map(fn, parts, itertools.repeat(arg)))


@contextmanager
def dask_engine() -> Iterator[Callable[[Job, list[list[str]], Any], list[Any]]]:
    from dask.distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=WORKERS,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        silence_logs=logging.ERROR,
    )
    with cluster, Client(cluster) as client:
        yield lambda fn, parts, arg: client.gather(client.map(fn, parts, [arg] * len(parts), pure=False))


@contextmanager
def ray_engine() -> Iterator[Callable[[Job, list[list[str]], Any], list[Any]]]:
    os.environ.setdefault("RAY_DISABLE_USAGE_STATS", "1")
    import ray

    temp = tempfile.mkdtemp(prefix="qa-ray-")
    ray.init(
        num_cpus=WORKERS,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        _temp_dir=temp,
        runtime_env={"env_vars": {"PYTHONPATH": _pythonpath()}},
    )
    remote: dict[Job, Any] = {}  # one remote function each: Ray exports it once

    def run(fn: Job, parts: list[list[str]], arg: Any) -> list[Any]:
        task = remote.setdefault(fn, ray.remote(fn))
        return list(ray.get([task.remote(part, arg) for part in parts]))

    try:
        yield run
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@contextmanager
def spark_engine() -> Iterator[Callable[[Job, list[list[str]], Any], list[Any]]]:
    os.environ.update(PYSPARK_PYTHON=sys.executable, PYTHONPATH=_pythonpath(), SPARK_LOCAL_IP="127.0.0.1")
    from pyspark import SparkConf, SparkContext

    conf = (
        SparkConf()
        .setMaster(f"local[{WORKERS}]")
        .set("spark.ui.enabled", "false")
        .set("spark.ui.showConsoleProgress", "false")
    )
    context = SparkContext(conf=conf)
    context.setLogLevel("ERROR")
    gateway = SparkContext._gateway
    try:
        yield (
            lambda fn, parts, arg: context.parallelize(parts, len(parts)).map(lambda p: fn(p, arg)).collect()
        )
    finally:
        context.stop()
        if gateway is not None:  # the JVM outlives stop(): it exits when its stdin closes
            gateway.shutdown()
            gateway.proc.stdin.close()
            gateway.proc.wait(timeout=30)


def engine(name: str) -> Any:
    return {
        "processes (fork)": lambda: process_pool("fork"),
        "processes (spawn)": lambda: process_pool("spawn"),
        "Dask": dask_engine,
        "Ray": ray_engine,
        "Spark": spark_engine,
    }[name]()


def missing(name: str) -> Optional[str]:
    """Why ``name`` cannot run here, or None."""
    module = {"Dask": "distributed", "Ray": "ray", "Spark": "pyspark"}.get(name)
    if module is not None and importlib.util.find_spec(module) is None:
        return f"{module} is not installed"
    return None


# -- the measurements ------------------------------------------------------------------------


@dataclass
class Speed:
    engine: str
    shipped: list[float]  # calls/s, one per round
    own: list[float]

    @property
    def ratio(self) -> float:
        return statistics.median(s / o for s, o in zip(self.shipped, self.own))


def timed(run: Callable[[Job, list[list[str]], Any], list[Any]], fn: Job, arg: Any) -> float:
    parts = [STATES[i::PARTITIONS] for i in range(PARTITIONS)]
    started = time.perf_counter()
    results = run(fn, parts, arg)
    seconds = time.perf_counter() - started
    for part, answers in zip(parts, results):
        if list(answers) != expected(part):
            raise AssertionError(f"wrong answers from {fn.__name__}")
    return len(STATES) / seconds


def speeds(name: str, rounds: int, url: str) -> Speed:
    jobs = importlib.import_module("benchmarks.engines")  # pickled by name, not as __main__
    speed = Speed(name, [], [])
    client = qa.Client(base_url=url, trust_env=False)
    with engine(name) as run:
        run(jobs.judge, [STATES[:20]] * WORKERS, client)  # warm up: workers started, qa_min loaded
        for n in range(rounds):
            order = [("shipped", jobs.judge, client), ("own", jobs.judge_with_own_client, url)]
            for mode, fn, arg in order if n % 2 == 0 else order[::-1]:
                getattr(speed, mode).append(timed(run, fn, arg))
    client.close()
    return speed


@dataclass
class Paced:
    mode: str
    seconds: float
    answered: int
    lost: int
    failed: dict[str, int]
    requests: int
    throttled: int

    @property
    def share(self) -> float:
        return self.answered / self.seconds / RATE


def paced_job(mode: str, calls: int) -> Paced:
    jobs = importlib.import_module("benchmarks.engines")
    limit = qa.RateLimit(RATE).split(WORKERS) if mode == "RateLimit(200).split(2)" else qa.RateLimit()
    states = [f"{STATES[i % len(STATES)]} #{i}" for i in range(calls)]
    parts = [states[i::WORKERS] for i in range(WORKERS)]
    service = FakeProcess((RATE, BURST), "ms")
    try:
        client = qa.Client(base_url=service.url, trust_env=False, rate_limit=limit, max_workers=IN_FLIGHT)
        with engine("Dask") as run:
            run(jobs.judge, [["warm-up"]] * WORKERS, qa.Client(base_url=service.url, trust_env=False))
            time.sleep(BURST / RATE)  # the service's bucket full again, as at the start of a job
            started = time.perf_counter()
            results = run(jobs.judge_in_flight, parts, client)
            seconds = time.perf_counter() - started
        client.close()
    finally:
        counts = service.close()
    answered = sum(
        got == want
        for part, (got_all, _) in zip(parts, results)
        for got, want in zip(got_all, expected(part))
    )
    failed = sum((Counter(part_failed) for _, part_failed in results), Counter())
    return Paced(
        mode, seconds, answered, calls - answered, dict(failed), counts["requests"], counts["throttled"]
    )


# -- the report ------------------------------------------------------------------------------


def speed_table(results: list[Speed]) -> list[str]:
    lines = [
        "| engine | calls/s, shipped client | calls/s, client per partition | shipped / per partition |",
        "|---|--:|--:|--:|",
    ]
    for s in results:
        lines.append(
            f"| {s.engine} | {statistics.median(s.shipped):,.0f} | {statistics.median(s.own):,.0f} | "
            f"{s.ratio:.2f}x ({'met' if s.ratio >= 0.90 else 'NOT MET'}: >= 0.90x) |"
        )
    return lines


def paced_table(results: list[Paced]) -> list[str]:
    lines = [
        "| rate_limit | calls | seconds | % of 200/s | requests answered 429 | lost calls | >= 85%, 0 lost |",
        "|---|--:|--:|--:|--:|--:|:-:|",
    ]
    for p in results:
        met = p.share >= 0.85 and p.lost == 0
        failed = ", ".join(f"{n} {name}" for name, n in sorted(p.failed.items()))
        lost = f"{p.lost}" + (f" ({failed})" if failed else "")
        lines.append(
            f"| {p.mode} | {p.answered + p.lost:,} | {p.seconds:.1f} | {100 * p.share:.1f}% | "
            f"{p.throttled:,} of {p.requests:,} | {lost} | {'yes' if met else 'no'} |"
        )
    return lines


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks engines", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the calls/s measurement (3)")
    parser.add_argument("--engines", nargs="*", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--paced-calls", type=int, default=2000, help="calls of each rate-limited job")
    paced = ["RateLimit(200).split(2)", "RateLimit()"]
    parser.add_argument("--paced", nargs="*", choices=paced, default=paced, help="the rate-limited jobs")
    return parser.parse_args(argv)


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, ROOT)
    started, load = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), _load()
    results, skipped = [], []
    service = FakeProcess(retry_after="ms")
    try:
        for name in args.engines:
            reason = missing(name)
            if reason is not None:
                skipped.append(f"{name} ({reason})")
                continue
            results.append(speeds(name, args.rounds, service.url))
            print(speed_table(results[-1:])[-1], file=sys.stderr, flush=True)
    finally:
        service.close()
    paced = []
    if missing("Dask") is None:
        for mode in args.paced:
            paced.append(paced_job(mode, args.paced_calls))
            print(paced_table(paced[-1:])[-1], file=sys.stderr, flush=True)
    print(
        f"Measured {started} with `python -m benchmarks engines --rounds {args.rounds}`; Python "
        f"{platform.python_version()}, {os.cpu_count()} cores; load averages at the start {load}, "
        f"at the end {_load()}. Skipped: {', '.join(skipped) or 'none'}."
    )
    print("", *speed_table(results), "", *paced_table(paced), sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

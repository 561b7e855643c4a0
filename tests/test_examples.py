"""The scripts in ``examples/`` run as documented: each as its own process, on its own fake
service and against the service named by ``SERVICE_BASE_URL``."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qa_min.testing import FakeService

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# What each example prints on its own fake service, which is scripted to make every branch run.
ON_OWN_FAKE: dict[str, list[str]] = {
    "quickstart.py": [
        r"^toxic: +(True|False)$",
        r"^tone: +(formal|casual) \(",
        r"^quality: +[012] \(",
        "^usage: ",
    ],
    "runtime_questions.py": [
        r"spam=(True|False), lang='(en|fr|de)', urgency=[0-3]$",
        r"^with model judge-2\.1: urgency=[0-3]$",
        r"^validation: NoQuestions: ",
    ],
    "errors_and_retries.py": [
        r"^1\. answered after 3 attempt\(s\)",
        r'^2\. RateLimited: status=429 attempts=2 body=\{"detail": "rate limit exceeded"\}$',
        r"^   the service is busy",
        r"^3\. Overloaded on the only attempt: the service is busy",
    ],
    "cancellation.py": [
        r"^1\. cancelled from another thread after 0\.\d s",
        r"^2\. deadline passed: ",
        r"^3\. still running after 0\.3 s \(running=True\): call\.cancel\(\)$",
        r"^3\. call\.result\(\) raised Canceled",
    ],
    "asyncio_usage.py": [
        r"^no answer within 0\.5 s: the call was cancelled$",
        r"^'Terrible\. Never again\.' +toxic=(True |False) quality=[012]$",
        r"^AskResponse / InvalidState$",
    ],
    "testing_your_code.py": [r"^ok  test_flag_toxic_retries_a_rate_limit", r"^5 tests passed$"],
    "testing_with_mock_transport.py": [
        r"^flagged: \[",
        r"^ok  test_flag_toxic_retries_a_rate_limit_then_succeeds$",
        r"^4 tests passed$",
    ],
    "debugging_and_hooks.py": [
        r"^log: -> POST http://127\.0\.0\.1:\d+/v1/core \(attempt 1\)$",
        r"^log: <- 429 RateLimited in [\d.]+ ms, request id req_1$",
        r"^log: <- 503 ServerError in [\d.]+ ms, request id req_2$",
        r"^request id: None, 3 attempt\(s\) in ",
        r"^  attempt 2: 503 ServerError, slept 0\.020 s before it$",
        r"^metrics: \{'qa\.attempts\{outcome=200\}': 1, 'qa\.attempts\{outcome=RateLimited\}': 1, ",
    ],
    "process_pool.py": [
        r"^fork: 20 texts judged by 2 processes: (\d+) toxic with the shipped client, \1 with a client",
        r"^spawn: 20 texts judged by 2 processes: (\d+) toxic with the shipped client, \1 with a client",
        r"^busy: RateLimited from a worker: status=429, 2 attempts$",
        r"^the pool still answers: toxic=\[(True|False)\]$",
    ],
    "dask_engine.py": [
        r"^1\. map_partitions, shipped client: 40 texts, \d+ toxic$",
        r"^2\. client\.map, a client per partition: 40 texts, \d+ toxic$",
        r"^3\. RateLimited from a worker: status=429, 2 attempts$",
        r"^   the cluster still answers: toxic=\[(True|False)\]$",
    ],
    "ray_engine.py": [
        r"^1\. tasks, shipped client: 40 texts, \d+ toxic$",
        r"^2\. actor pool, a client per actor: 40 texts, \d+ toxic$",
        r"^3\. RayTaskError\(RateLimited\) from a worker: status=429, 2 attempts$",
        r"^   the actors still answer: toxic=\[(True|False)\]$",
    ],
    "spark_engine.py": [
        r"^1\. mapPartitions, shipped client: 40 texts, \d+ toxic$",
        r"^2\. mapPartitions, a client per partition: 40 texts, \d+ toxic$",
        r"^3\. RateLimited from a worker: status=429, 2 attempts$",
        r"^   Spark still answers: toxic=\[(True|False)\]$",
    ],
}

# Against a healthy service nothing is busy or slow: the other branch of each step runs.
ON_HEALTHY_SERVICE: dict[str, list[str]] = {
    "quickstart.py": [r"^toxic: +(True|False)$"],
    "runtime_questions.py": [r"^with model judge-2\.1: "],
    "errors_and_retries.py": [
        r"^1\. answered after 1 attempt\(s\)",
        r"^2\. answered: the service was not busy$",
        r"^3\. answered on the only attempt$",
    ],
    "cancellation.py": [
        r"^1\. answered before the cancel",
        r"^2\. answered within the deadline",
        r"^3\. answered: ",
    ],
    "asyncio_usage.py": [r"^answered within 0\.5 s: toxic=(True|False)$"],
    "testing_your_code.py": [r"^flagged: \[", r"^5 tests passed$"],
    "testing_with_mock_transport.py": [r"^flagged: \[", r"^4 tests passed$"],
    "debugging_and_hooks.py": [
        r"^request id: None, 1 attempt\(s\) in ",
        r"^  attempt 1: 200, slept 0\.000 s",
    ],
    "process_pool.py": [
        r"^spawn: 20 texts judged by 2 processes: ",
        r"^busy: answered: the service was not busy$",
    ],
    "dask_engine.py": [
        r"^2\. client\.map, a client per partition: 40 texts",
        r"^3\. answered: the service was not busy$",
    ],
    "ray_engine.py": [
        r"^2\. actor pool, a client per actor: 40 texts",
        r"^3\. answered: the service was not busy$",
    ],
    "spark_engine.py": [
        r"^2\. mapPartitions, a client per partition: 40",
        r"^3\. answered: the service was not busy$",
    ],
}
# Examples of an engine (test-only extra 'engines'): run where it is installed, each in a few
# tens of seconds (Ray and Spark start slowly), and allowed the engine's own log lines on stderr.
ENGINES = {"dask_engine.py": "distributed", "ray_engine.py": "ray", "spark_engine.py": "pyspark"}
ENGINE_TIMEOUT = 150


def examples(names: list[str]) -> list[object]:
    """``names`` as parameters; the engine examples marked ``engines`` and given more time."""
    marks = [pytest.mark.engines, pytest.mark.timeout(ENGINE_TIMEOUT + 10)]
    return [pytest.param(name, marks=marks) if name in ENGINES else name for name in sorted(names)]


def skip_without_engine(name: str) -> None:
    module = ENGINES.get(name)
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.skip(f"{name} needs {module}, which is not installed: pip install -e '.[engines]'")
    if module == "pyspark" and shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip(f"{name} needs a Java runtime: no java on PATH and JAVA_HOME unset")


def run_example(name: str, base_url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SERVICE_") and not k.lower().endswith("_proxy")
    }
    env["PYTHONPATH"] = str(ROOT)
    if base_url is not None:
        env["SERVICE_BASE_URL"] = base_url
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=ENGINE_TIMEOUT if name in ENGINES else 25,
    )


def assert_prints(proc: subprocess.CompletedProcess[str], patterns: list[str], name: str) -> None:
    assert proc.returncode == 0, proc.stderr
    if name in ENGINES:
        assert "Traceback" not in proc.stderr, proc.stderr
    else:
        assert proc.stderr == ""
    for pattern in patterns:
        assert re.search(pattern, proc.stdout, re.MULTILINE), f"{pattern!r} not in:\n{proc.stdout}"


def test_every_example_is_tested() -> None:
    present = {path.name for path in EXAMPLES.glob("*.py")}
    assert present == set(ON_OWN_FAKE) == set(ON_HEALTHY_SERVICE)


@pytest.mark.parametrize("name", sorted(ON_OWN_FAKE))
def test_example_has_main_taking_base_url_and_a_main_guard(name: str) -> None:
    tree = ast.parse((EXAMPLES / name).read_text(encoding="utf-8"))
    mains = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main"]
    assert len(mains) == 1
    args = mains[0].args
    assert [a.arg for a in args.args] == ["base_url"]
    assert isinstance(args.defaults[0], ast.Constant)
    assert args.defaults[0].value is None
    guards = [node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
    assert len(guards) == 1
    assert ast.get_docstring(tree), "each example starts with a docstring saying how to run it"


@pytest.mark.parametrize("name", examples(list(ON_OWN_FAKE)))
def test_example_runs_on_its_own_fake_service(name: str) -> None:
    skip_without_engine(name)
    proc = run_example(name)
    assert_prints(proc, ON_OWN_FAKE[name], name)
    assert proc.stdout.startswith("(no SERVICE_BASE_URL: a local fake service at http://127.0.0.1:")


@pytest.mark.parametrize("name", examples(list(ON_HEALTHY_SERVICE)))
def test_example_uses_service_base_url_when_set(name: str, svc: FakeService) -> None:
    skip_without_engine(name)
    proc = run_example(name, base_url=svc.url)
    assert_prints(proc, ON_HEALTHY_SERVICE[name], name)
    assert "no SERVICE_BASE_URL" not in proc.stdout
    assert svc.requests, "the example did not ask the service named by SERVICE_BASE_URL"

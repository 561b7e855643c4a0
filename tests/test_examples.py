"""The scripts in ``examples/`` run as documented: each as its own process, on its own fake
service and against the service named by ``SERVICE_BASE_URL``."""

from __future__ import annotations

import ast
import os
import re
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
}


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
        timeout=25,
    )


def assert_prints(proc: subprocess.CompletedProcess[str], patterns: list[str]) -> None:
    assert proc.returncode == 0, proc.stderr
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


@pytest.mark.parametrize("name", sorted(ON_OWN_FAKE))
def test_example_runs_on_its_own_fake_service(name: str) -> None:
    proc = run_example(name)
    assert_prints(proc, ON_OWN_FAKE[name])
    assert proc.stdout.startswith("(no SERVICE_BASE_URL: a local fake service at http://127.0.0.1:")


@pytest.mark.parametrize("name", sorted(ON_HEALTHY_SERVICE))
def test_example_uses_service_base_url_when_set(name: str, svc: FakeService) -> None:
    proc = run_example(name, base_url=svc.url)
    assert_prints(proc, ON_HEALTHY_SERVICE[name])
    assert "no SERVICE_BASE_URL" not in proc.stdout
    assert svc.requests, "the example did not ask the service named by SERVICE_BASE_URL"

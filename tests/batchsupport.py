"""Helpers for the ``qa-min batch`` tests: inputs, reading the output, and running the command."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from qa_min._cli import main
from qa_min.testing import FakeService, expected_answer

ROOT = Path(__file__).resolve().parent.parent
MODEL = "judge-latest"
YES_NO = {"true": "insults someone", "false": "insults no one"}
QUESTION = ["--yes-no", "toxic", YES_NO["true"], YES_NO["false"]]


class Result(NamedTuple):
    code: int
    out: str
    err: str


def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI reads the environment as the library does; the developer's must not leak in."""
    for name in list(os.environ):
        if name.startswith("SERVICE_") or name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)


def run_main(capsys: pytest.CaptureFixture[str], *argv: str, stdin: str | None = None) -> Result:
    """``main(argv)`` in this process; the caller restores ``sys.stdin`` (a monkeypatch)."""
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    code = main(list(argv))
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def answer(state: str) -> dict[str, object]:
    return {"toxic": expected_answer(MODEL, state, "toxic", YES_NO)}


def write_input(path: Path, states: list[str], ids: bool = False) -> Path:
    """One JSONL line per state: a JSON string, or ``{"id": "s<i>", "state": ...}``."""
    lines = [json.dumps({"id": f"s{i}", "state": s} if ids else s) for i, s in enumerate(states)]
    path.write_text("".join(line + "\n" for line in lines))
    return path


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def asked(svc: FakeService) -> Counter[str]:
    """How many times the service was asked about each state."""
    return Counter(r.json()["state"] for r in svc.requests if r.path.endswith("/v1/core"))


def child_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SERVICE_")
        and not k.lower().endswith("_proxy")
        # A child writes to its pipes block-buffered, as a user's run does, wherever the suite runs.
        and k != "PYTHONUNBUFFERED"
    }
    env["PYTHONPATH"] = str(ROOT)
    return env


def start_batch(*argv: str) -> subprocess.Popen[str]:
    """``python -m qa_min *argv`` in a child process, its output on pipes."""
    return subprocess.Popen(
        [sys.executable, "-m", "qa_min", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=child_env(),
    )


def line_count(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0

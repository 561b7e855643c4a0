"""mypy --strict accepts ``tests/typing_check.py``, and rejects it once the library's types break.

The second test proves the first can fail: it breaks one annotation in a copy of ``qa_min/``
and expects mypy to report the answer type that no longer matches.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "tests" / "typing_check.py"

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # One cache for both runs: the standard library stubs are analysed once, not twice. It starts
    # as a copy of the project's own cache when mypy ran here before (CI runs it before the
    # tests): mypy checks again whatever changed since and reuses the rest, 2 s of stubs among it.
    # The copy keeps these runs from writing into the project's cache.
    cache = tmp_path_factory.mktemp("mypy_cache")
    if (ROOT / ".mypy_cache").is_dir():
        shutil.copytree(ROOT / ".mypy_cache", cache, dirs_exist_ok=True)
    return cache


def mypy(target: Path, cwd: Path, cache_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MYPYPATH": str(cwd)}
    env.pop("MYPY_CACHE_DIR", None)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache_dir), str(target)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_public_api_types_check_under_mypy_strict(cache_dir: Path) -> None:
    done = mypy(CHECK.relative_to(ROOT), ROOT, cache_dir)
    assert done.returncode == 0, done.stdout + done.stderr


def test_typing_check_fails_when_an_answer_type_is_wrong(tmp_path: Path, cache_dir: Path) -> None:
    shutil.copytree(ROOT / "qa_min", tmp_path / "qa_min", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(CHECK, tmp_path / CHECK.name)
    # The project's mypy settings too (python_version among them): the run differs from the
    # first only by the broken annotation, and finds the standard library in the shared cache.
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    questions = tmp_path / "qa_min" / "_questions.py"
    source = questions.read_text()
    assert "class YesNo(_Question[bool]):" in source
    questions.write_text(source.replace("class YesNo(_Question[bool]):", "class YesNo(_Question[int]):"))

    done = mypy(Path(CHECK.name), tmp_path, cache_dir)

    assert done.returncode == 1, done.stdout + done.stderr
    assert 'Expression is of type "int", not "bool"' in done.stdout, done.stdout

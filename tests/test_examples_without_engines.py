"""The engine examples, run where their engine is missing: one line naming the install command.

A new user who runs ``python examples/dask_engine.py`` before installing the extra sees
``pip install -e ".[engines]"`` (the README's command, also in the example's docstring), not a
traceback. The engine is made missing by a ``None`` in ``sys.modules``, so these run (and
fail before the fix) whether or not the engines are installed here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INSTALL = 'pip install -e ".[engines]"'
# example -> (the modules made missing, the engine's name in the message)
EXAMPLES = {
    "dask_engine.py": (["dask", "distributed"], "Dask"),
    "ray_engine.py": (["ray"], "Ray"),
    "spark_engine.py": (["pyspark", "py4j"], "Spark"),
}
RUN = """
import runpy, sys, types
for name in sys.argv[2].split(","):
    sys.modules[name] = None  # import name: ModuleNotFoundError
if sys.argv[3] == "fake-pyspark":
    fake = types.ModuleType("pyspark")
    fake.SparkConf = fake.SparkContext = object
    sys.modules["pyspark"] = fake
runpy.run_path(sys.argv[1], run_name="__main__")
"""


def run(
    example: str, missing: list[str], *, fake_pyspark: bool = False, path: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_") and k != "JAVA_HOME"}
    env["PYTHONPATH"] = str(ROOT)
    if path is not None:
        env["PATH"] = path
    argv = [sys.executable, "-c", RUN, str(ROOT / "examples" / example), ",".join(missing)]
    argv.append("fake-pyspark" if fake_pyspark else "-")
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, timeout=25, check=False)


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_an_example_without_its_engine_names_the_install_command(example: str) -> None:
    missing, engine = EXAMPLES[example]
    proc = run(example, missing)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines() == [f"{example} needs {engine}, which is not installed: {INSTALL}"]
    assert proc.stdout == ""


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_the_docstring_and_the_docs_name_the_same_command(example: str) -> None:
    source = (ROOT / "examples" / example).read_text(encoding="utf-8")
    docstring = source.split('"""')[1]
    assert f"    {INSTALL}" in docstring
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
    assert any(INSTALL in page.read_text(encoding="utf-8") for page in docs if page.exists())


def test_spark_without_java_says_so_in_one_line(tmp_path: Path) -> None:
    # pyspark stands in as a bare module; no java on PATH (an empty directory) and no JAVA_HOME.
    proc = run("spark_engine.py", [], fake_pyspark=True, path=str(tmp_path))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines() == [
        "spark_engine.py needs a Java runtime: no java on PATH and JAVA_HOME unset"
    ]

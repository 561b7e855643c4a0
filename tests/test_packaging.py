"""The built distributions hold the package, its ``py.typed`` marker and the license, and no more.

Builds run on a copy of the working tree, so no ``build/`` or ``*.egg-info`` lands in the
repository, and without build isolation, so no network is needed: the wheel with
``pip wheel --no-build-isolation`` (skipped when the installed setuptools cannot build wheels),
the sdist through setuptools' PEP 517 ``build_sdist`` hook, which is what
``python -m build --sdist --no-isolation`` calls. Each takes a few seconds, once per module.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from email.parser import HeaderParser
from pathlib import Path

import pytest

import qa_min

ROOT = Path(__file__).resolve().parent.parent
VERSION = qa_min.__version__
DIST_INFO = f"qa_min-{VERSION}.dist-info/"
NOT_SHIPPED = ("tests/", "examples/", "benchmarks/")


def setuptools_unusable() -> str | None:
    """Why the installed setuptools cannot build this project, or None if it can."""
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return "setuptools is not installed"
    # pyproject.toml's [build-system] asks for 61+, the first to read the [project] table.
    if _release(version) < (61, 0):
        return f"setuptools {version} is older than the 61 the project's build needs"
    return None


def wheel_build_unavailable() -> str | None:
    """Why this interpreter cannot build a wheel offline, or None if it can."""
    reason = setuptools_unusable()
    if reason is not None:
        return reason
    version = importlib.metadata.version("setuptools")
    # setuptools carries its own bdist_wheel from 70.1 on; before, the wheel package does.
    if _release(version) >= (70, 1) or importlib.util.find_spec("wheel") is not None:
        return None
    return f"setuptools {version} needs the wheel package to build a wheel"


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:2])


def _ignore(directory: str, names: list[str]) -> set[str]:
    # Leftovers of earlier builds would leak into this one; dot-directories are caches.
    return {n for n in names if n.startswith(".") or n in ("build", "dist") or n.endswith(".egg-info")}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("source") / "qa_min-src"
    shutil.copytree(ROOT, tree, ignore=_ignore)
    return tree


def run(args: list[str], cwd: Path) -> None:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def wheel(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    reason = wheel_build_unavailable()
    if reason is not None:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("wheel")
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            ".",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
        ],
        source,
    )
    [built] = out.glob("*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


@pytest.fixture(scope="module")
def sdist(source: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    reason = setuptools_unusable()
    if reason is not None:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("sdist")
    run(
        [sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_sdist({str(out)!r})"],
        source,
    )
    [built] = out.glob("*.tar.gz")
    with tarfile.open(built) as tar:
        return tar.getnames()


def package_sources() -> list[str]:
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "qa_min").rglob("*.py"))


# -- the wheel ------------------------------------------------------------------------------------


def test_wheel_holds_every_module_and_py_typed(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    assert {"qa_min/__init__.py", "qa_min/py.typed", "qa_min/testing.py"} <= names
    assert set(package_sources()) <= names


def test_wheel_holds_the_license_file(wheel: zipfile.ZipFile) -> None:
    assert (ROOT / "LICENSE").is_file()
    licenses = [n for n in wheel.namelist() if n.startswith(DIST_INFO) and n.rsplit("/", 1)[-1] == "LICENSE"]
    assert len(licenses) == 1
    assert wheel.read(licenses[0]) == (ROOT / "LICENSE").read_bytes()


def test_wheel_holds_only_the_package_and_its_metadata(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    assert [n for n in names if n.startswith(NOT_SHIPPED)] == []
    assert [n for n in names if not n.startswith(("qa_min/", DIST_INFO))] == []
    assert [n for n in names if n.endswith((".pyc", ".pyo")) or "__pycache__" in n] == []


def test_wheel_metadata_names_version_python_and_no_dependency(wheel: zipfile.ZipFile) -> None:
    metadata = HeaderParser().parsestr(wheel.read(DIST_INFO + "METADATA").decode())
    assert metadata["Version"] == VERSION
    assert metadata["Requires-Python"] == ">=3.9"
    # Extras (test, lint, bench) may require packages; the library itself requires none.
    unconditional = [r for r in metadata.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert unconditional == []
    assert "Typing :: Typed" in (metadata.get_all("Classifier") or [])


def test_wheel_console_scripts_point_at_shipped_modules(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    entry_points = DIST_INFO + "entry_points.txt"
    if entry_points not in names:
        return
    for line in wheel.read(entry_points).decode().splitlines():
        if "=" not in line:
            continue
        target = line.partition("=")[2].strip().partition(":")[0].replace(".", "/")
        assert {f"{target}.py", f"{target}/__init__.py"} & names, f"{line!r} names a module the wheel lacks"


def test_wheel_contents_import_and_serve_in_a_fresh_interpreter(
    wheel: zipfile.ZipFile, tmp_path: Path
) -> None:
    wheel.extractall(tmp_path / "site")
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path / 'site')!r})\n"
        "import qa_min, qa_min.testing\n"
        "with qa_min.testing.FakeService() as svc, qa_min.Client(base_url=svc.url) as c:\n"
        "    names = [m.name for m in c.list_models().models]\n"
        "print(qa_min.__version__, qa_min.__file__, bool(names))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-B", "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    version, path, served = done.stdout.split()
    assert version == VERSION
    assert path == str(tmp_path / "site" / "qa_min" / "__init__.py")
    assert served == "True"


# -- the sdist ------------------------------------------------------------------------------------


def test_sdist_holds_package_license_readme_and_project_file(sdist: list[str]) -> None:
    prefix = f"qa_min-{VERSION}/"
    names = {n.removeprefix(prefix) for n in sdist}
    assert {"pyproject.toml", "README.md", "LICENSE", "PKG-INFO", "qa_min/py.typed"} <= names
    assert set(package_sources()) <= names

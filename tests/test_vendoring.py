"""qa_min works vendored under another name, from a zip file, and from a read-only directory.

Each check runs in a fresh interpreter (``python -I``: no PYTHONPATH, no user site, no current
directory on ``sys.path``) that imports a copy of the package and makes calls through it
against a ``FakeService`` from the same copy. A vendored copy must never import a module named
``qa_min``: that would mean an absolute import, which breaks the application that vendors it.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qa_min.testing import FakeService

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "qa_min"

# Runs in the child. Imports the package as {module!r}, makes calls through it against a fake
# from the same copy, and prints what it found as JSON.
CALLS = """
import json, logging, sys
sys.path.insert(0, {site!r})
import importlib
qa = importlib.import_module({module!r})
testing = importlib.import_module({module!r} + ".testing")

class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")

with testing.FakeService(api_key="sk-vendored") as svc:
    with qa.Client(base_url=svc.url, api_key="sk-vendored", sleep=lambda seconds, wake: None) as client:
        svc.script(testing.reply(503, {{"detail": "busy"}}))
        answer = client.ask("Some text", Review, retry=qa.RetryPolicy(max_retries=1))
        svc.script(testing.reply(404, {{"detail": "no such model"}}))
        try:
            client.ask("Some text", Review)
        except qa.NotFound as exc:
            error = type(exc).__module__
        models = client.submit(client.list_models).result(timeout=10)
expected = testing.expected_answer("judge-latest", "Some text", "toxic", Review.toxic.criteria)
print(json.dumps({{
    "answer_ok": answer.answers.toxic == expected,
    "models": [m.name for m in models.models],
    "error_module": error,
    "package_file": qa.__file__,
    "testing_file": testing.__file__,
    "loggers": sorted(name for name in logging.Logger.manager.loggerDict if "qa_min" in name),
    "qa_min_modules": sorted(m for m in sys.modules if m == "qa_min" or m.startswith("qa_min.")),
}}))
"""


def python(code: str, *flags: str, cwd: Path, env: dict[str, str] | None = None) -> Any:
    """Run ``code`` in a fresh interpreter and return the JSON it printed last."""
    done = subprocess.run(
        [sys.executable, *flags, "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def copy_package(dest: Path) -> None:
    shutil.copytree(PACKAGE, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def vendor(root: Path) -> None:
    """``root/somelib/_vendor/qa_min``, the way vendoring tools lay a dependency out."""
    vendored = root / "somelib" / "_vendor"
    copy_package(vendored / "qa_min")
    (root / "somelib" / "__init__.py").write_text("")
    (vendored / "__init__.py").write_text("")


def zip_tree(source: Path, archive: Path) -> None:
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(source.rglob("*")):
            zf.write(path, path.relative_to(source).as_posix())


@pytest.mark.parametrize(
    ("layout", "module"),
    [
        ("directory", "somelib._vendor.qa_min"),
        ("zip", "somelib._vendor.qa_min"),
        ("zip", "qa_min"),
    ],
    ids=["vendored-directory", "vendored-zip", "zip"],
)
def test_copy_of_package_makes_calls(tmp_path: Path, layout: str, module: str) -> None:
    tree = tmp_path / "tree"
    if module == "qa_min":
        copy_package(tree / "qa_min")
    else:
        vendor(tree)
    site = tree
    if layout == "zip":
        site = tmp_path / "app.zip"
        zip_tree(tree, site)
        shutil.rmtree(tree)
    work = tmp_path / "work"
    work.mkdir()

    found = python(CALLS.format(site=str(site), module=module), "-I", cwd=work)

    assert found["answer_ok"] is True
    assert found["models"]
    assert found["error_module"] == f"{module}._errors"
    package_dir = os.path.join(str(site), *module.split("."))
    assert found["package_file"] == os.path.join(package_dir, "__init__.py")
    assert found["testing_file"] == os.path.join(package_dir, "testing.py")
    # Log records go to the embedding package's own logger.
    assert found["loggers"] == [module]
    if module != "qa_min":
        assert found["qa_min_modules"] == []


def listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory under ``root``: path -> (size, mtime in ns)."""
    return {
        str(path.relative_to(root)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in root.rglob("*")
    }


def set_writable(root: Path, writable: bool) -> None:
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        if path.is_dir():
            mode = (mode | stat.S_IWUSR) if writable else (mode & ~0o222) | 0o555
        else:
            mode = (mode | stat.S_IWUSR) if writable else mode & ~0o222
        path.chmod(mode)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Path]:
    """A directory holding a fresh copy of ``qa_min``, made writable again for cleanup."""
    root = tmp_path / "site"
    copy_package(root / "qa_min")
    yield root
    set_writable(root, True)


def no_bytecode_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def test_import_and_calls_write_no_files_next_to_the_package(site: Path, tmp_path: Path) -> None:
    before = listing(site)
    # Not -I here: it would ignore PYTHONDONTWRITEBYTECODE, as a Lambda runtime sets it.
    found = python(CALLS.format(site=str(site), module="qa_min"), cwd=tmp_path, env=no_bytecode_env())
    assert found["answer_ok"] is True
    assert listing(site) == before


def test_import_and_calls_work_from_read_only_directory(site: Path, tmp_path: Path) -> None:
    set_writable(site, False)
    probe = site / "qa_min" / "probe"
    try:
        probe.write_text("")
    except OSError:
        pass
    else:
        probe.unlink()
        pytest.skip("file permissions do not bind this user (root): cannot make a read-only directory")
    before = listing(site)
    found = python(CALLS.format(site=str(site), module="qa_min"), cwd=tmp_path, env=no_bytecode_env())
    assert found["answer_ok"] is True
    assert listing(site) == before


# Runs in the child: records every "open" audit event from `import qa_min`, then from one call.
OPENS = """
import json, sys, sysconfig
sys.path.insert(0, {site!r})
events = []
phase = ["import"]

def hook(event, args):
    if event == "open":
        events.append([phase[0], str(args[0]), args[1], args[2]])

sys.addaudithook(hook)
import qa_min as qa

class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")

phase[0] = "call"
with qa.Client(base_url={url!r}) as client:
    client.ask("Some text", Review)
phase[0] = "done"
paths = sysconfig.get_paths()
print(json.dumps({{
    "events": events,
    "stdlib": sorted({{paths["stdlib"], paths["platstdlib"]}}),
    "package": qa.__path__[0],
}}))
"""


def test_import_and_a_call_open_only_modules_of_package_and_stdlib(site: Path, tmp_path: Path) -> None:
    with FakeService() as svc:
        found = python(OPENS.format(site=str(site), url=svc.url), "-I", "-B", cwd=tmp_path)
        assert len(svc.requests) == 1
    roots = tuple(os.path.join(p, "") for p in [found["package"], *found["stdlib"]])
    unexpected = [
        (phase, path, mode)
        for phase, path, mode, _flags in found["events"]
        if not (path.endswith((".py", ".pyc")) and path.startswith(roots) and mode in ("r", "rb"))
    ]
    assert unexpected == []
    # The check above saw the package's own modules being read: the hook did record.
    assert any(path.startswith(os.path.join(found["package"], "")) for _, path, _, _ in found["events"])

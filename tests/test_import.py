"""What ``import qa_min`` loads, and the public names it offers.

Spec line -> tests:

  S7 Importing qa_min imports nothing outside the standard library, and is fast
      test_import_loads_only_standard_library_modules
      test_stdlib_fallback_classifier_agrees_with_the_interpreter (the 3.9 path)
      test_import_skips_heavy_optional_modules (typing, dataclasses, logging,
      concurrent.futures, qa_min.testing: loaded lazily, if ever)
  S2-S6 public names are exact (SPEC.md preamble: "Names written here are the public API")
      test_spec_names_are_exported
      test_all_is_sorted, test_all_has_no_duplicates, test_all_names_resolve,
      test_all_is_complete, test_every_error_class_of_the_package_is_exported
  RetryPolicy and Call are available lazily
      test_retry_policy_and_call_load_on_first_use, test_dir_lists_the_lazy_names,
      test_unknown_attribute_is_attribute_error
  S7b ``import qa_min`` does not import asyncio; the first use of ``qa.AsyncClient`` does
      test_import_does_not_load_asyncio, test_async_client_loads_asyncio_on_first_use
  The cold path (issue 14): ``import qa_min; Client(base_url="http://h")`` loads nothing
  beyond what ``import http.client, json`` loads, qa_min's own modules and COLD_ALLOWED
      test_cold_path_loads_only_what_http_client_and_json_load,
      test_cold_path_never_imports_the_heavy_modules (even where http.client loads them),
      test_cold_probe_catches_a_heavy_import (the probe itself can fail)
  and loads neither http.client (qa_min reads HTTP/1.1 itself), email nor ssl
      test_cold_path_loads_neither_http_client_nor_email_nor_ssl
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import types
from pathlib import Path
from typing import Any

import pytest

import qa_min as qa

ROOT = Path(__file__).resolve().parent.parent

# Run in a fresh, isolated interpreter (-I: no PYTHONPATH, no user site) so that nothing the
# test runner imported hides what ``import qa_min`` itself pulls in.
PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
before = set(sys.modules)
import qa_min
after_import = set(sys.modules)
files = {}
for name in sorted(after_import - before):
    module = sys.modules.get(name)
    files[name] = getattr(module, "__file__", None)
lazy = {}
asyncio_after_import = "asyncio" in sys.modules
for attr, module in (
    ("RetryPolicy", "qa_min._retry"), ("Call", "qa_min._futures"), ("AsyncClient", "qa_min._aclient")
):
    loaded_before = module in sys.modules
    value = getattr(qa_min, attr)
    lazy[attr] = [loaded_before, module in sys.modules, value.__name__]
print(json.dumps({"new": files, "lazy": lazy, "asyncio": [asyncio_after_import, "asyncio" in sys.modules]}))
"""


@pytest.fixture(scope="module")
def probe() -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-I", "-c", PROBE, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _stdlib_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    return [os.path.realpath(paths[key]) for key in ("stdlib", "platstdlib")]


def is_stdlib_fallback(name: str, file: str | None) -> bool:
    """Classify a module as standard library without ``sys.stdlib_module_names`` (Python 3.9)."""
    top = name.split(".", maxsplit=1)[0]
    if top in sys.builtin_module_names or file is None:
        # Built-in, frozen, or a namespace package; only the stdlib has the first two.
        return top in sys.builtin_module_names or name in ("__future__",)
    real = os.path.realpath(file)
    for directory in _stdlib_dirs():
        inside = real.startswith(directory + os.sep)
        if inside and "site-packages" not in real and "dist-packages" not in real:
            return True
    return False


def is_stdlib(name: str, file: str | None) -> bool:
    names = getattr(sys, "stdlib_module_names", None)
    if names is None:  # pragma: no cover - Python 3.9
        return is_stdlib_fallback(name, file)
    return name.split(".", maxsplit=1)[0] in names


def test_import_loads_only_standard_library_modules(probe: dict[str, Any]) -> None:
    new: dict[str, str | None] = probe["new"]
    outside = [
        name for name, file in new.items() if name.split(".")[0] != "qa_min" and not is_stdlib(name, file)
    ]
    assert outside == []
    assert "qa_min" in new


def test_stdlib_fallback_classifier_agrees_with_the_interpreter(probe: dict[str, Any]) -> None:
    names = getattr(sys, "stdlib_module_names", None)
    if names is None:  # pragma: no cover - Python 3.9 has only the fallback
        pytest.skip("needs sys.stdlib_module_names to compare against")
    for name, file in probe["new"].items():
        if name.split(".")[0] == "qa_min":
            assert not is_stdlib_fallback(name, file)
        elif file is not None:
            assert is_stdlib_fallback(name, file) == (name.split(".")[0] in names), name
    assert not is_stdlib_fallback("pytest", pytest.__file__)


@pytest.mark.parametrize(
    "module", ["typing", "dataclasses", "logging", "concurrent.futures", "qa_min.testing", "qa_min._retry"]
)
def test_import_skips_heavy_optional_modules(probe: dict[str, Any], module: str) -> None:
    assert module not in probe["new"]


def test_retry_policy_and_call_load_on_first_use(probe: dict[str, Any]) -> None:
    assert probe["lazy"]["RetryPolicy"] == [False, True, "RetryPolicy"]
    assert probe["lazy"]["Call"] == [False, True, "Call"]
    # In this process too, whatever the order: the lazy names are the real classes.
    from qa_min import Call, RetryPolicy
    from qa_min._futures import Call as RealCall
    from qa_min._retry import RetryPolicy as RealRetryPolicy

    assert RetryPolicy is RealRetryPolicy
    assert Call is RealCall


def test_import_does_not_load_asyncio(probe: dict[str, Any]) -> None:
    assert "asyncio" not in probe["new"]
    assert not any(name.startswith("asyncio.") for name in probe["new"])
    assert probe["asyncio"][0] is False


def test_async_client_loads_asyncio_on_first_use(probe: dict[str, Any]) -> None:
    assert probe["lazy"]["AsyncClient"] == [False, True, "AsyncClient"]
    assert probe["asyncio"][1] is True
    from qa_min import AsyncClient
    from qa_min._aclient import AsyncClient as RealAsyncClient

    assert AsyncClient is RealAsyncClient


def test_dir_lists_the_lazy_names() -> None:
    assert {"RetryPolicy", "Call", "AsyncClient"} <= set(dir(qa))


def test_unknown_attribute_is_attribute_error() -> None:
    with pytest.raises(AttributeError):
        getattr(qa, "NoSuchThing")  # noqa: B009
    assert not hasattr(qa, "no_such_thing")


# -- __all__ --------------------------------------------------------------------------------

SPEC_NAMES = {
    "Client",
    "PUBLIC_BASE_URL",
    "DEFAULT_MODEL",
    "RetryPolicy",
    "Questions",
    "YesNo",
    "Choice",
    "Score",
    "Request",
    "NamedQuestion",
    "Diagnostics",
    "CancelToken",
    "Call",
    "QAError",
    "APIStatusError",
    "ValidationError",
    "ServiceBusy",
    "BadRequest",
    "Unauthorized",
    "PermissionDenied",
    "NotFound",
    "RequestTimeout",
    "UnprocessableEntity",
    "RateLimited",
    "Overloaded",
    "ServerError",
    "UnexpectedStatus",
    "ConnectionFailed",
    "InvalidBaseUrl",
    "InvalidResponse",
    "NoQuestions",
    "DuplicateQuestionName",
    "MissingApiKey",
    "Canceled",
}


def test_spec_names_are_exported() -> None:
    assert set(qa.__all__) >= SPEC_NAMES


def _isort_key(name: str) -> tuple[int, str]:
    # ruff's RUF022 order: SCREAMING_SNAKE_CASE, then CamelCase, then everything else.
    if len(name) > 1 and name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def test_all_is_sorted() -> None:
    assert qa.__all__ == sorted(qa.__all__, key=_isort_key)


def test_all_has_no_duplicates() -> None:
    assert len(qa.__all__) == len(set(qa.__all__))


def test_all_names_resolve() -> None:
    for name in qa.__all__:
        assert getattr(qa, name) is not None, name


def test_all_is_complete() -> None:
    future = __import__("__future__")
    public = {
        name
        for name, value in vars(qa).items()
        if not name.startswith("_")
        and name != "TYPE_CHECKING"
        and not isinstance(value, (types.ModuleType, type(future.annotations)))
    }
    assert public | {"RetryPolicy", "Call", "AsyncClient", "__version__"} == set(qa.__all__)


def test_every_error_class_of_the_package_is_exported() -> None:
    from qa_min import _errors

    defined = {
        name
        for name, value in vars(_errors).items()
        if isinstance(value, type) and issubclass(value, BaseException) and not name.startswith("_")
    }
    assert defined <= set(qa.__all__)


# -- the cold path: import + Client() for an http:// URL --------------------------------------

COLD_ALLOWED = {
    # Every qa_min module starts with `from __future__ import annotations` (annotations stay
    # strings on Python 3.9); the import costs about 0.1 ms.
    "__future__",
}
"""Modules the cold path may load beyond ``import http.client, json`` and qa_min's own."""

HEAVY = ("logging", "concurrent.futures", "dataclasses", "random", "typing", "asyncio", "threading")
"""Modules the cold path must never import, whether or not ``http.client`` loaded them first."""

# In a fresh isolated interpreter: what ``import http.client, json`` loads is the baseline;
# then the heavy modules are poisoned (None in sys.modules makes any import of them fail, even
# of one http.client loaded already, e.g. random before Python 3.13) and the cold path runs.
COLD_PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
heavy, statement = json.loads(sys.argv[2]), sys.argv[3]
import http.client, json
baseline = set(sys.modules)
for name in heavy:
    sys.modules[name] = None
failure = None
try:
    exec(statement, {})
except ImportError as exc:
    failure = str(exc)
new = sorted(name for name in set(sys.modules) - baseline if sys.modules[name] is not None)
print(json.dumps({"new": new, "failure": failure}))
"""
COLD_STATEMENT = 'import qa_min; qa_min.Client(base_url="http://h")'


def cold_probe(statement: str = COLD_STATEMENT, root: Path = ROOT) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-I", "-c", COLD_PROBE, str(root), json.dumps(HEAVY), statement],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


@pytest.fixture(scope="module")
def cold() -> dict[str, Any]:
    return cold_probe()


def test_cold_path_loads_only_what_http_client_and_json_load(cold: dict[str, Any]) -> None:
    own = [name for name in cold["new"] if name == "qa_min" or name.startswith("qa_min.")]
    beyond = sorted(set(cold["new"]) - set(own) - COLD_ALLOWED)
    assert beyond == [], f"Client() for an http:// URL now loads {beyond}: load them where first needed"
    assert {"qa_min._client", "qa_min._transport", "qa_min._connection"} <= set(own)  # it did run


def test_cold_path_never_imports_the_heavy_modules(cold: dict[str, Any]) -> None:
    assert cold["failure"] is None, f"the cold path imports a heavy module: {cold['failure']}"


LEFT_OUT = ("http.client", "email", "email.parser", "ssl", "datetime", "calendar", "base64")
"""What raw ``http.client`` loads and qa_min's own HTTP/1.1 reader does without."""


@pytest.mark.parametrize("url", ["http://h", "https://h"])
def test_cold_path_loads_neither_http_client_nor_email_nor_ssl(url: str) -> None:
    # ssl loads with the first TLS connection, not with a client for an https:// URL.
    probe = (
        f"import sys; sys.path.insert(0, sys.argv[1]); import qa_min; qa_min.Client(base_url={url!r});"
        f" print([m for m in {LEFT_OUT!r} if m in sys.modules])"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", probe, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("module", ["random", "logging"])
def test_cold_probe_catches_a_heavy_import(tmp_path: Path, module: str) -> None:
    # A stand-in package whose Client() imports a heavy module, as a regression would; random
    # and logging matter most here: Python 3.11's http.client loads random itself.
    package = tmp_path / "qa_probe"
    package.mkdir()
    (package / "__init__.py").write_text(
        f"class Client:\n    def __init__(self, base_url):\n        import {module}\n"
    )
    found = cold_probe('import qa_probe; qa_probe.Client(base_url="http://h")', tmp_path)
    assert found["failure"] is not None
    assert module in found["failure"]
    assert "qa_probe" in found["new"]

"""The shape of the package, as ARCHITECTURE.md draws it: imports point down, modules stay small.

Every ``qa_min`` module has a rank in ``LAYERS`` (bottom first). An import of another
``qa_min`` module, wherever it stands (module level, inside a function, under
``TYPE_CHECKING``), must point to a strictly lower rank; so there can be no import cycle either.
A new module fails these tests until it is given its place here and in ARCHITECTURE.md.
"""

from __future__ import annotations

import ast
import functools
import re
import statistics
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "qa_min"

# Bottom first. Each entry may import only entries before it.
LAYERS: tuple[str, ...] = (
    # leaves: they import nothing of qa_min
    "_constants",
    "_diagnostics",
    "_errors",
    "_typing",
    "_redact",
    "_pacer",
    "_announced",
    # the HTTP/1.1 protocol, no I/O, on the leaves only: its grammar and events, then the reader
    "_wire",
    "_protocol",
    # the request value that travels down the stack, its head written by the protocol
    "_http",
    # values and per-call primitives, on the leaves only
    "_steer",
    "_policy",
    "_limiter",
    "_ratelimit",
    "_call",
    "_backoff",
    "_questions",
    "_request",
    "_responses",
    "_retry",
    "_options",
    "_hooks",
    # configuration (a URL parsed, then the rest of it), then the wire, bottom up
    "_origin",
    "_config",
    # what a call tells (messages, logs, hooks), then its retry decisions: no I/O
    "_messages",
    "_decide",
    "_connection",
    "_failure",
    "_aio",
    "_transport",
    "_retrying",
    "_futures",
    "_lifecycle",
    # the in-process transport, and the fake service's rules and HTTP plumbing it shares
    "_fakecheck",
    "_fakerules",
    "_fakehttp",
    "_mock",
    "_client",
    # the asyncio client: cancellation scopes, the retry loop awaited, the facade
    "_ascope",
    "_atransport",
    "_asender",
    "_aclient",
    # the public facade, then what is built on the public names only
    "__init__",
    "_fake",
    "testing",
    "_cli",
    "__main__",
)

MAX_MODULE_LINES = 400
MAX_MEDIAN_MODULE_LINES = 250
MAX_FUNCTION_LINES = 60


@functools.cache  # the package does not change during a session
def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).with_suffix("")
        found[".".join(relative.parts)] = path
    return found


@functools.cache
def _tree(path: Path) -> ast.Module:
    """``path`` parsed, once a session: several tests walk every module of the package."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _imported(module: str, path: Path) -> list[tuple[int, str]]:
    """(line, qa_min module) for every import of the package in ``path``, at any depth."""
    package_parts = module.split(".")[:-1]
    found = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package_parts[: len(package_parts) - (node.level - 1)]
            target = ".".join([*base, node.module]) if node.module else ".".join(base)
            if target == "":  # ``from . import name``: the facade, or a submodule by that name
                for alias in node.names:
                    found.append((node.lineno, alias.name if alias.name in _modules() else "__init__"))
            else:
                found.append((node.lineno, target))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            for name in names:
                if name and name.split(".")[0] == "qa_min":
                    found.append((node.lineno, "qa_min imported by name"))
    return found


def _rank(module: str) -> int:
    top = module.split(".", maxsplit=1)[0]
    return LAYERS.index(top)


def test_every_module_has_a_declared_layer() -> None:
    undeclared = sorted({m.split(".")[0] for m in _modules()} - set(LAYERS))
    assert not undeclared, f"give these modules a layer in LAYERS and ARCHITECTURE.md: {undeclared}"


@pytest.mark.parametrize("module", sorted(_modules()))
def test_imports_point_down(module: str) -> None:
    path = _modules()[module]
    upward = []
    for line, target in _imported(module, path):
        if target == "qa_min imported by name":
            upward.append(f"line {line}: absolute import of qa_min (vendoring needs relative imports)")
        elif target.split(".")[0] not in LAYERS:
            upward.append(f"line {line}: {target} has no layer")
        elif target.split(".")[0] != module.split(".", maxsplit=1)[0] and _rank(target) >= _rank(module):
            upward.append(f"line {line}: {target} is not below {module}")
    assert not upward, f"{path.name} imports upward or sideways: {upward}"


def test_the_import_graph_has_no_cycle() -> None:
    graph = {m: {t for _, t in _imported(m, p)} & set(_modules()) for m, p in _modules().items()}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                pytest.fail(f"import cycle: {' -> '.join([*trail, node, nxt])}")
            if nxt not in state:
                visit(nxt, [*trail, node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])


def test_the_checker_sees_function_level_and_type_only_imports(tmp_path: Path) -> None:
    source = (
        "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from ._client import Client\n"
        "def f() -> None:\n    from ._transport import Transport\n"
    )
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert [t for _, t in _imported("probe", path)] == ["_client", "_transport"]


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_is_over_the_size_limit() -> None:
    sizes = {m: _lines(p) for m, p in _modules().items()}
    over = {m: n for m, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines: {over}"
    assert statistics.median(sizes.values()) <= MAX_MEDIAN_MODULE_LINES, sizes


def test_no_function_is_over_the_length_limit() -> None:
    long = []
    for module, path in _modules().items():
        for node in ast.walk(_tree(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name}: {length} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


# ARCHITECTURE.md names every module; benchmarks/ has no import cycle. Kept apart from LAYERS.

ROOT = PACKAGE.parent
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
BENCHMARKS = ROOT / "benchmarks"


def _names_in_the_architecture(module: str) -> list[str]:
    """How ARCHITECTURE.md may name ``module``: ``_client``; ``_cli/_batch`` or ``_cli._batch``.

    A submodule is named with its package, since ``_cli/_questions`` is not ``_questions``; a
    package is named by itself (``_cli``, ``_cli/``).
    """
    parts = module.split(".")
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ["/".join(parts), ".".join(parts)]


def _named(name: str, text: str) -> bool:
    # A whole name: not part of a longer one (``_cli`` in ``_client``), nor the tail of a
    # qualified one (``_questions`` in ``_cli/_questions``).
    return re.search(rf"(?<![\w./]){re.escape(name)}(?![\w])", text) is not None


def test_architecture_md_names_every_module() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    missing = [
        m for m in sorted(_modules()) if not any(_named(n, text) for n in _names_in_the_architecture(m))
    ]
    assert not missing, f"ARCHITECTURE.md does not name these modules of qa_min/: {missing}"


def test_the_module_name_check_tells_a_submodule_from_a_namesake() -> None:
    text = "| `_questions` | ... |\n| `_cli` | ... |\n"
    assert _named("_questions", text)
    assert _named("_cli", text)
    assert not _named("_cli/_questions", text)
    assert not _named("_questions", "| `_cli/_questions` | ... |")
    assert not _named("_cli", "`_client`")
    assert _names_in_the_architecture("_cli._batch") == ["_cli/_batch", "_cli._batch"]
    assert _names_in_the_architecture("_cli.__init__") == ["_cli", "_cli"]


def _benchmark_modules() -> dict[str, Path]:
    found = {}
    for path in sorted(BENCHMARKS.rglob("*.py")):
        found[".".join(path.relative_to(BENCHMARKS).with_suffix("").parts)] = path
    return found


def _benchmark_imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules of benchmarks/ that ``module`` imports, relatively or as ``benchmarks.…``, at any depth."""
    package = module.split(".")[:-1]
    targets: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - (node.level - 1)]
            stem = [*base, *(node.module.split(".") if node.module else [])]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "benchmarks":
            stem = (node.module or "").split(".")[1:]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "benchmarks":
                    targets.add(".".join(alias.name.split(".")[1:]) or "__init__")
            continue
        else:
            continue
        # ``from .pkg import name``: ``name`` may be a module of the folder, else a name of ``pkg``.
        for alias in node.names:
            candidate = ".".join([*stem, alias.name])
            targets.add(candidate if candidate in known else ".".join(stem) or "__init__")
    return {t if t in known else f"{t}.__init__" for t in targets} & known


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` as a path that ends where it starts, or []."""
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> list[str]:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*trail[trail.index(nxt) :], nxt] if nxt in trail else [*trail, nxt]
            if nxt not in state:
                found = visit(nxt, [*trail, nxt])
                if found:
                    return found
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return []


def test_the_cycle_finder_finds_a_cycle_and_only_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_the_benchmark_import_reader_sees_every_form(tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    path.write_text(
        "from . import run, report\nfrom .servers import Starter\nimport benchmarks.nginx\n"
        "from benchmarks import cold\nfrom benchmarks.tls import x\nimport json\n"
        "def f() -> None:\n    from .cli import main\n"
        "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from .process import ServerProcess\n"
    )
    known = {"run", "report", "servers", "nginx", "cold", "tls", "cli", "process", "probe"}
    assert _benchmark_imports("probe", path, known) == known - {"probe"}


def _benchmark_graph() -> dict[str, set[str]]:
    modules = _benchmark_modules()
    return {m: _benchmark_imports(m, p, set(modules)) - {m} for m, p in modules.items()}


def test_benchmarks_have_no_import_cycle() -> None:
    cycle = _cycle(_benchmark_graph())
    assert not cycle, f"import cycle in benchmarks/: {' -> '.join(cycle)}"


def test_benchmarks_common_imports_nothing_of_the_folder_and_clients_only_common() -> None:
    # clients.py runs in the measured process: what it imports counts for every client alike.
    graph = _benchmark_graph()
    assert graph["common"] == set()
    assert graph["clients"] == {"common"}
    assert graph["__init__"] == set()

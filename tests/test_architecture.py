"""The shape of the package, as ARCHITECTURE.md draws it: imports point down, modules stay small.

Every ``qa_min`` module has a rank in ``LAYERS`` (bottom first). An import of another
``qa_min`` module, wherever it stands (module level, inside a function, under
``TYPE_CHECKING``), must point to a strictly lower rank; so there can be no import cycle either.
A new module fails these tests until it is given its place here and in ARCHITECTURE.md.
"""

from __future__ import annotations

import ast
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
    "_schedule",
    # values and per-call primitives, on the leaves only
    "_limiter",
    "_ratelimit",
    "_call",
    "_backoff",
    "_questions",
    "_responses",
    "_retry",
    "_options",
    "_hooks",
    # configuration, then the wire, bottom up
    "_config",
    "_response",
    "_connection",
    "_aio",
    "_transport",
    "_retrying",
    "_futures",
    "_lifecycle",
    # the in-process transport, and the fake service's rules and HTTP plumbing it shares
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


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).with_suffix("")
        found[".".join(relative.parts)] = path
    return found


def _imported(module: str, path: Path) -> list[tuple[int, str]]:
    """(line, qa_min module) for every import of the package in ``path``, at any depth."""
    package_parts = module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name}: {length} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"

"""The README's code runs as pasted, and the README and docs/ link to files that exist.

Every ```python block of README.md is self-contained: it imports what it uses and starts the
fake service it talks to, so a reader can paste any one of them alone. Each runs here the same
way, alone, in a fresh interpreter (the repository on its path, no ``SERVICE_*`` variable, every
warning an error) from an empty directory, and must exit 0 with nothing on stderr (an unclosed
socket would print a ``ResourceWarning`` there). A block that defines ``test_*`` functions, as
a test module does, has each of them called after it ran, in the order defined.

A block may need a public name that is still being built: an HTML comment on the line before
its fence, ``<!-- readme-test: needs qa_min.NAME -->``, skips it while ``qa_min`` has no
``NAME``, so it runs as soon as ``NAME`` lands.

Two pages of docs/ run the same way: docs/testing.md's blocks, joined, as the one test module
they make, and docs/asyncio.md's first block against a ``FakeService`` where it names
``qa-min fake``'s address. The other pages' blocks are fragments that use a client made
elsewhere.

The link checks: every page of docs/ is linked from README.md; every relative link in README.md
and docs/*.md names a file that exists, and a ``#fragment`` a heading of that file; no figure
that looks like a measured ratio (``0.70x``) appears outside ``benchmarks/RESULTS.md``, which
holds every figure.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple, Optional

import pytest

import qa_min
from qa_min.testing import FakeService, expected_answer

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
MAX_README_LINES = 250

_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_NEEDS = re.compile(r"<!--\s*readme-test:\s*needs\s+qa_min\.(\w+)\s*-->\s*$")
# Calls each test_* function the block defined; ``FunctionType`` keeps classes and imports out.
_RUN_TESTS = """
import types as _types
for _name, _value in list(globals().items()):
    if _name.startswith("test_") and isinstance(_value, _types.FunctionType):
        _value()
"""


class Block(NamedTuple):
    line: int  # of the opening fence
    language: str
    code: str
    needs: Optional[str]  # a name of qa_min the block needs, from its marker


def blocks(text: str) -> list[Block]:
    found = []
    lines = text.splitlines()
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        marker = _NEEDS.search(lines[line - 2]) if line >= 2 else None
        found.append(Block(line, match.group(1), match.group(2), marker.group(1) if marker else None))
    return found


PYTHON_BLOCKS = [b for b in blocks(README.read_text(encoding="utf-8")) if b.language == "python"]


def test_the_readme_is_short_and_has_code_to_run() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; the rest belongs in docs/"
    assert len(PYTHON_BLOCKS) >= 4, PYTHON_BLOCKS


def test_the_block_reader_sees_fences_languages_and_markers() -> None:
    text = "intro\n<!-- readme-test: needs qa_min.AsyncClient -->\n```python\nx = 1\n```\n\n```sh\nls\n```\n"
    assert blocks(text) == [
        Block(3, "python", "x = 1\n", "AsyncClient"),
        Block(7, "sh", "ls\n", None),
    ]


def test_a_marker_names_what_its_block_uses() -> None:
    for block in PYTHON_BLOCKS:
        if block.needs is not None:
            assert f"qa.{block.needs}" in block.code or f"qa_min.{block.needs}" in block.code, block


def test_each_python_block_can_be_pasted_into_the_interactive_interpreter() -> None:
    # There, a blank line ends a compound statement: an indented line after one is an error.
    for block in PYTHON_BLOCKS:
        lines = block.code.splitlines()
        for n, (line, following) in enumerate(zip(lines, lines[1:]), start=block.line + 1):
            assert line.strip() or not following[:1].isspace(), (
                f"README.md line {n}: blank line inside a block"
            )


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    script = cwd / "block.py"
    script.write_text(code + _RUN_TESTS, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-W", "error", str(script)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=25,
        check=False,
    )


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[f"README.md:{b.line}" for b in PYTHON_BLOCKS])
def test_each_python_block_of_the_readme_runs_alone(block: Block, tmp_path: Path) -> None:
    if block.needs is not None and not hasattr(qa_min, block.needs):
        pytest.skip(f"qa_min.{block.needs} does not exist yet")
    done = _run(block.code, tmp_path)
    assert done.returncode == 0, f"README.md line {block.line} failed:\n{done.stderr}"
    assert done.stderr == "", f"README.md line {block.line} wrote to stderr:\n{done.stderr}"


def test_a_failing_block_or_a_failing_test_in_it_is_seen(tmp_path: Path) -> None:
    assert _run("assert 1 == 2\n", tmp_path).returncode != 0
    assert _run("def test_fails():\n    raise ValueError('seen')\n", tmp_path).returncode != 0
    assert _run("def test_passes():\n    pass\n", tmp_path).returncode == 0


# -- docs/ ------------------------------------------------------------------------------------
# Most blocks of docs/ are fragments that use a ``client`` made elsewhere; these pages' blocks
# run as they stand, so they are run here as the README's are.


def _python_blocks(page: str) -> list[Block]:
    return [b for b in blocks((DOCS / page).read_text(encoding="utf-8")) if b.language == "python"]


def test_the_blocks_of_docs_testing_run_as_one_test_module(tmp_path: Path) -> None:
    # "Your code" first, then the tests of it, as the page reads: together, one test module.
    code = "".join(block.code for block in _python_blocks("testing.md"))
    assert code.count("\ndef test_") == 3, code
    done = _run(code, tmp_path)
    assert done.returncode == 0, f"docs/testing.md failed:\n{done.stderr}"
    assert done.stderr == "", f"docs/testing.md wrote to stderr:\n{done.stderr}"


def test_the_first_block_of_docs_asyncio_prints_the_answers_of_a_fake_service(tmp_path: Path) -> None:
    first = _python_blocks("asyncio.md")[0]
    local = "http://127.0.0.1:8080"  # where `qa-min fake` listens; a free port here
    assert local in first.code
    criteria = {"true": "The text insults someone", "false": "The text insults no one"}
    texts = ["Some text", "first text", "second text", "third text"]
    toxic = [expected_answer(qa_min.DEFAULT_MODEL, text, "toxic", criteria) for text in texts]
    with FakeService() as fake:
        done = _run(first.code.replace(local, fake.url), tmp_path)
    assert done.returncode == 0, f"docs/asyncio.md line {first.line} failed:\n{done.stderr}"
    assert done.stderr == "", done.stderr
    assert done.stdout.splitlines() == [str(toxic[0]), str(toxic[1:])]


# -- links ------------------------------------------------------------------------------------

PAGES = sorted(DOCS.glob("*.md"))
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_INLINE_CODE = re.compile(r"`[^`\n]*`")


def _prose(text: str) -> str:
    """``text`` without fenced blocks and inline code, where ``](`` is code, not a link."""
    return _INLINE_CODE.sub("", _FENCE.sub("", text))


def links(text: str) -> list[str]:
    return _LINK.findall(_prose(text))


def anchors(text: str) -> set[str]:
    """The fragments GitHub gives a page's headings: lower case, punctuation dropped, '-' for spaces."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*$", _FENCE.sub("", text), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in found:
            n += 1
            candidate = f"{slug}-{n}"
        found.add(candidate)
    return found


def test_the_link_reader_skips_code_and_slugs_headings_as_github_does() -> None:
    text = "See [a](docs/a.md#x) and `[b](c)`.\n```python\nprint([x](y))\n```\n"
    assert links(text) == ["docs/a.md#x"]
    assert anchors("# In-process, with no socket: `MockTransport`\n## Exit codes\n## Exit codes\n") == {
        "in-process-with-no-socket-mocktransport",
        "exit-codes",
        "exit-codes-1",
    }


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(README.parent / target.split("#")[0]).resolve() for target in links(README.read_text("utf-8"))}
    assert PAGES, "docs/ has no page"
    unlinked = [page.name for page in PAGES if page.resolve() not in linked]
    assert not unlinked, f"README.md links to none of these docs/ pages: {unlinked}"


@pytest.mark.parametrize("source", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(source: Path) -> None:
    broken = []
    for target in links(source.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not a file of the repository
            continue
        path, _, fragment = target.partition("#")
        file = (source.parent / path).resolve() if path else source
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file.read_text("utf-8")):
            broken.append(f"{target}: no heading #{fragment} in {file.name}")
    assert not broken, f"{source.name} has broken links: {broken}"


@pytest.mark.parametrize("source", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_speed_ratio_is_quoted_that_results_md_does_not_hold(source: Path) -> None:
    held = set(re.findall(r"\b\d+\.\d+x\b", RESULTS.read_text(encoding="utf-8")))
    quoted = set(re.findall(r"\b\d+\.\d+x\b", source.read_text(encoding="utf-8")))
    assert not quoted - held, (
        f"{source.name} quotes figures benchmarks/RESULTS.md does not hold: {quoted - held}"
    )

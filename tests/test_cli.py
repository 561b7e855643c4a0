"""Tests of the command line, ``python -m qa_min``: in-process through ``main(argv)``, plus a few
real subprocesses for the entry point, stdin and a signal."""

from __future__ import annotations

import errno
import io
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import threading
import types
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import qa_min as qa
from qa_min._cli import _commands, _demo, _output, main
from qa_min.testing import FakeService, expected_answer, hang, reply

ROOT = Path(__file__).resolve().parent.parent
MODEL = "judge-latest"
YES_NO = {"true": "insults someone", "false": "insults no one"}
CHOICE = {"en": "English", "fr": "French", "de": "German"}
SCORE = ["poor", "fair", "good"]
FLAGS = [
    "--yes-no", "toxic", YES_NO["true"], YES_NO["false"],
    "--choice", "lang", *(f"{k}={v}" for k, v in CHOICE.items()),
    "--score", "quality", *SCORE,
]  # fmt: skip
STATE = "Some text to judge"
BUSY = reply(429, {"detail": "slow down"}, headers=[("retry-after-ms", "1")])


class Result(NamedTuple):
    code: int
    out: str
    err: str


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The CLI reads the environment as the library does; the developer's must not leak in.
    for name in ("SERVICE_API_KEY", "SERVICE_BASE_URL", "SERVICE_DEFAULT_MODEL", "SERVICE_LOG"):
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Any:
    def run(*argv: str, stdin: str | None = None) -> Result:
        if stdin is not None:
            sys.stdin = io.StringIO(stdin)  # restored by the monkeypatch below
        code = main(list(argv))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture(autouse=True)
def _restore_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", sys.stdin)


def expected(state: str, model: str = MODEL) -> dict[str, object]:
    return {
        "toxic": expected_answer(model, state, "toxic", YES_NO),
        "lang": expected_answer(model, state, "lang", CHOICE),
        "quality": expected_answer(model, state, "quality", SCORE),
    }


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- demo ----------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [[], ["demo"]], ids=["no-command", "demo"])
def test_demo_shows_each_operation_and_an_error_then_exits_0(run: Any, argv: list[str]) -> None:
    result = run(*argv)
    assert result.code == 0, result.err
    for text in (
        "client.ask(state, Review)",
        "Tone.",
        "client.core(Request(...))",
        "judge-latest, judge-mini-latest",
        "RateLimited: HTTP 429",
        "slow down",
    ):
        assert text in result.out
    assert "attempts  3" in result.out
    assert result.err == ""


@pytest.mark.parametrize(
    "argv", [["--json", "demo"], ["demo", "--json"]], ids=["json-before-command", "json-after-command"]
)
def test_demo_json_is_one_document_with_every_section(run: Any, argv: list[str]) -> None:
    result = run(*argv)
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert set(doc) == {"url", "ask", "core", "models", "error"}
    assert set(doc["ask"]) == {"toxic", "tone", "quality", "usage"}
    assert doc["models"] == ["judge-latest", "judge-mini-latest", "judge-2.1", "judge-mini-1.3"]
    assert doc["error"] == {
        "type": "RateLimited",
        "message": doc["error"]["message"],
        "status": 429,
        "attempts": 3,
        "request_id": None,
        "body": '{"detail": "slow down"}',
    }


def test_demo_help_offers_json_and_no_option_it_would_ignore(run: Any) -> None:
    result = run("demo", "--help")
    assert result.code == 0
    assert "--json" in result.out
    for ignored in ("--base-url", "--api-key", "--model", "--timeout", "--retries"):
        assert ignored not in result.out
    refused = run("demo", "--timeout", "5")
    assert refused.code == 2
    assert "unrecognized arguments: --timeout 5" in refused.err


def test_demo_opens_with_the_version_the_fake_s_address_the_state_and_how_the_fake_answers(run: Any) -> None:
    lines = run("demo").out.splitlines()
    assert lines[0].startswith(f"qa_min {qa.__version__} demo, against a fake service at http://127.0.0.1:")
    assert lines[1] == f"state: {_demo._DEMO_STATE!r}"
    assert lines[2].startswith("(the fake answers by a fixed hash of model, state and question id")
    assert lines[3:5] == ["", "client.ask(state, Review): typed answers"]


def test_demo_prints_each_section_as_a_title_aligned_rows_and_a_blank_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _output.Output(False, [])
    _demo._rows(out, "first", [("a", 1), ("longer", "x")])
    _demo._rows(out, "second", [("b", 2)])
    assert capsys.readouterr().out == "first\n  a       1\n  longer  x\n\nsecond\n  b  2\n\n"


def test_demo_ignores_the_environment_and_sends_no_real_key(
    run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVICE_BASE_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("SERVICE_API_KEY", "sk-real-key")
    result = run("demo")
    assert result.code == 0
    assert "sk-real-key" not in result.out + result.err


# -- models --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "parse"),
    [
        (["models"], str.splitlines),
        (["--json", "models"], json.loads),
        (["models", "--json"], json.loads),
    ],
    ids=["text", "json-before-command", "json-after-command"],
)
def test_models_lists_names(run: Any, svc: FakeService, argv: list[str], parse: Any) -> None:
    result = run("--base-url", svc.url, *argv)
    assert result.code == 0
    assert parse(result.out) == ["judge-latest", "judge-mini-latest", "judge-2.1", "judge-mini-1.3"]


def test_models_text_escapes_a_name_that_does_not_print(run: Any, svc: FakeService) -> None:
    # One model per line, and no terminal escape from the server reaches the terminal.
    names = ["judge-latest", "a\nb\x1b[31mred", "c1\x85del\x7f", "naïve model"]
    svc.script(reply(200, {"models": [{"name": name} for name in names]}))
    result = run("--base-url", svc.url, "models")
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        "judge-latest",
        "'a\\nb\\x1b[31mred'",
        "'c1\\x85del\\x7f'",
        "naïve model",
    ]
    assert "\x1b" not in result.out


def test_models_json_keeps_the_names_as_sent(run: Any, svc: FakeService) -> None:
    svc.script(reply(200, {"models": [{"name": "a\nb\x1b[31mred"}]}))
    result = run("--base-url", svc.url, "--json", "models")
    assert (result.code, json.loads(result.out)) == (0, ["a\nb\x1b[31mred"])


@pytest.mark.parametrize("key", ["sk-very-secret-0123", 'sk-"quoted"\\slash'], ids=["plain", "json-escaped"])
def test_an_escaped_model_name_still_hides_the_api_key(run: Any, svc: FakeService, key: str) -> None:
    # Redacted before it is escaped: escaping would double the backslash inside the key.
    svc.script(reply(200, {"models": [{"name": f"it's {key}\x1b"}]}))
    result = run("--base-url", svc.url, "--api-key", key, "models")
    assert result.code == 0, result.err
    for form in key_forms(key):
        assert form not in result.out
    assert result.out.splitlines() == ['"it\'s [redacted]\\x1b"']


def test_options_after_the_command_do_not_reset_those_before_it(run: Any) -> None:
    with FakeService(models=["only-one"]) as service:
        result = run("--base-url", service.url, "models", "--json")
    assert (result.code, json.loads(result.out)) == (0, ["only-one"])


# -- ask -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state_args", "stdin"),
    [
        ([STATE], None),
        (["-"], STATE + "\n"),
        ([], STATE + "\r\n"),
    ],
    ids=["argument", "dash-reads-stdin", "absent-reads-stdin"],
)
def test_ask_prints_one_id_answer_line_per_question(
    run: Any, svc: FakeService, state_args: list[str], stdin: str | None
) -> None:
    result = run("--base-url", svc.url, "ask", *state_args, *FLAGS, stdin=stdin)
    assert result.code == 0, result.err
    want = expected(STATE)
    assert result.out.splitlines() == [
        f"toxic: {'true' if want['toxic'] else 'false'}",
        f"lang: {want['lang']}",
        f"quality: {want['quality']}",
    ]
    assert svc.requests[0].json()["state"] == STATE


def test_ask_takes_the_state_after_double_dash_behind_many_valued_flags(run: Any, svc: FakeService) -> None:
    result = run("--base-url", svc.url, "ask", "--score", "quality", *SCORE, "--", "-starts with a dash")
    assert result.code == 0, result.err
    assert svc.requests[0].json()["state"] == "-starts with a dash"
    assert svc.requests[0].json()["questions"] == {"quality": {"criteria": SCORE}}


def test_ask_says_it_reads_stdin_when_stdin_is_a_terminal(
    run: Any, svc: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    terminal = io.StringIO(STATE + "\n")
    monkeypatch.setattr(terminal, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys, "stdin", terminal)
    result = run("--base-url", svc.url, "ask", "--yes-no", "t", "y", "n")
    assert result.code == 0
    assert result.err == "reading the state from stdin; end it with Ctrl-D\n"
    assert svc.requests[0].json()["state"] == STATE


def test_ask_text_escapes_an_id_that_does_not_print(run: Any, svc: FakeService, tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    path.write_text(
        json.dumps({"a\nb": {"yes_no": ["y", "n"]}, "plain": {"choice": {"x": "X", "y\tz": "Y"}}})
    )
    svc.script(reply(200, {"answers": {"a\nb": True, "plain": "y\tz"}}))
    result = run("--base-url", svc.url, "ask", STATE, "--questions", str(path))
    assert result.code == 0, result.err
    assert result.out.splitlines() == ["'a\\nb': true", "plain: 'y\\tz'"]


def test_ask_json_prints_answers_and_usage(run: Any, svc: FakeService) -> None:
    result = run("--base-url", svc.url, "--json", "ask", STATE, *FLAGS)
    assert result.code == 0
    assert json.loads(result.out) == {
        "answers": expected(STATE),
        "usage": {"input_tokens": 4, "output_tokens": 3},
        "request_id": None,
    }


def test_ask_sends_the_questions_in_command_line_order(run: Any, svc: FakeService, tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    path.write_text(json.dumps({"lang": {"choice": CHOICE}, "quality": {"score": SCORE}}))
    result = run(
        "--base-url", svc.url, "ask", STATE,
        "--yes-no", "toxic", YES_NO["true"], YES_NO["false"],
        "--questions", str(path),
        "--score", "tail", "low", "high",
    )  # fmt: skip
    assert result.code == 0, result.err
    questions = svc.requests[0].json()["questions"]
    assert list(questions) == ["toxic", "lang", "quality", "tail"]
    assert questions["toxic"] == {"criteria": YES_NO}
    assert questions["lang"] == {"criteria": CHOICE}
    assert questions["quality"] == {"criteria": SCORE}
    assert questions["tail"] == {"criteria": ["low", "high"]}


def test_questions_file_alone_is_enough(run: Any, svc: FakeService, tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    path.write_text(
        json.dumps(
            {
                "toxic": {"yes_no": list(YES_NO.values())},
                "lang": {"choice": CHOICE},
                "quality": {"score": SCORE},
            }
        )
    )
    result = run("--base-url", svc.url, "--json", "ask", STATE, "--questions", str(path))
    assert result.code == 0, result.err
    assert json.loads(result.out)["answers"] == expected(STATE)


def test_a_questions_file_saved_with_a_byte_order_mark_is_read(
    run: Any, svc: FakeService, tmp_path: Path
) -> None:
    # Windows editors save UTF-8 with a BOM; batch reads its JSONL input past one too.
    path = tmp_path / "q.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"toxic": {"yes_no": list(YES_NO.values())}}).encode())
    result = run("--base-url", svc.url, "--json", "ask", STATE, "--questions", str(path))
    assert result.code == 0, result.err
    assert json.loads(result.out)["answers"] == {"toxic": expected(STATE)["toxic"]}
    assert [r.json()["state"] for r in svc.requests] == [STATE]


def test_global_options_reach_the_request(run: Any) -> None:
    with FakeService(api_key="sk-cli-test") as service:
        result = run(
            "--base-url", service.url, "--api-key", "sk-cli-test", "--model", "judge-9.9",
            "--timeout", "5", "--retries", "0", "--json", "ask", STATE, *FLAGS,
        )  # fmt: skip
        assert result.code == 0, result.err
        sent = service.requests[0]
    assert sent.headers["authorization"] == "Bearer sk-cli-test"
    assert sent.json()["model"] == "judge-9.9"
    assert json.loads(result.out)["answers"] == expected(STATE, "judge-9.9")


def test_environment_configures_the_client_as_in_the_library(
    run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeService(api_key="sk-from-env") as service:
        monkeypatch.setenv("SERVICE_BASE_URL", service.url)
        monkeypatch.setenv("SERVICE_API_KEY", "sk-from-env")
        monkeypatch.setenv("SERVICE_DEFAULT_MODEL", "judge-mini-latest")
        result = run("ask", STATE, *FLAGS)
        assert result.code == 0, result.err
        assert service.requests[0].json()["model"] == "judge-mini-latest"


# -- errors and exit codes -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (qa.InvalidState("x"), 3),
        (qa.NoQuestions("x"), 3),
        (qa.InvalidOption("x"), 3),
        (qa.MissingApiKey("x"), 3),
        (qa.InvalidBaseUrl("x"), 3),
        (qa.RateLimited("x", status=429), 4),
        (qa.Overloaded("x", status=529), 4),
        (qa.BadRequest("x", status=400), 5),
        (qa.NotFound("x", status=404), 5),
        (qa.ServerError("x", status=503), 5),
        (qa.UnexpectedStatus("x", status=302), 5),
        (qa.ConnectionFailed("x"), 6),
        (qa.InvalidResponse("x"), 7),
        (qa.Canceled("x"), 7),
        (qa.ClientClosed("x"), 7),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_exit_code_of_each_error_class(error: qa.QAError, code: int) -> None:
    assert _output.exit_code(error) == code


@pytest.mark.parametrize("error", [RuntimeError("x"), OSError(5, "x")], ids=["RuntimeError", "OSError"])
def test_an_error_from_outside_the_library_exits_7_as_other(error: Exception) -> None:
    # No row of the table names it: the code is 7, "other", never None (which exits 0).
    assert _output.exit_code(error) == 7


def test_help_documents_every_exit_code_and_the_questions_file(run: Any) -> None:
    top = run("--help")
    assert top.code == 0
    for code in (0, 1, 2, 3, 4, 5, 6, 7, 130, 143):
        assert f"\n  {code} " in top.out
    ask = run("ask", "--help")
    assert '"yes_no"' in ask.out
    assert '"choice"' in ask.out
    assert '"score"' in ask.out
    assert "\n  130 " in ask.out


def test_help_says_batch_exits_with_the_code_of_its_first_failed_line(run: Any) -> None:
    # docs/batch.md promises it; --help is where the exit-code table is read.
    said = "batch exits with the code of its first failed line, after writing every line."
    for argv in (["--help"], ["batch", "--help"]):
        assert said in run(*argv).out


def test_version_prints_the_library_version(run: Any) -> None:
    result = run("--version")
    assert (result.code, result.out.strip()) == (0, f"qa-min {qa.__version__}")


@pytest.mark.parametrize(
    "argv",
    [
        ["--retries", "-1", "models"],
        ["--retries", "two", "models"],
        ["--timeout", "0", "models"],
        ["--timeout", "soon", "models"],
        ["nonsense"],
        ["ask", "x", "--yes-no", "only", "two"],
        ["batch", "--concurrency", "0", "--yes-no", "a", "y", "n"],
    ],
    ids=["negative-retries", "retries-not-int", "zero-timeout", "timeout-not-number", "unknown-command",
         "yes-no-short", "zero-concurrency"],
)  # fmt: skip
def test_usage_errors_exit_2(run: Any, argv: list[str]) -> None:
    result = run(*argv)
    assert result.code == 2
    assert "usage: qa-min" in result.err


ONE_KEY = "question 'q': expected an object with one key"


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "questions.json"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("questions", "error", "detail"),
    [
        ([], "NoQuestions", "no questions"),
        (["--choice", "lang", "en"], "InvalidQuestion", "expected KEY=TEXT"),
        (["--choice", "lang", "en=English"], "InvalidQuestion", "at least 2 options"),
        (["--score", "q", "only"], "InvalidQuestion", "at least 2 levels"),
        (["--yes-no", "t", "", "no"], "InvalidQuestion", "yes text"),
        (["--yes-no", "t", "y", "n", "--yes-no", "t", "y", "n"], "DuplicateQuestionName", "'t'"),
        (["--questions", "MISSING"], "InvalidQuestion", "cannot read questions file"),
        (["--questions", "FILE:{not json"], "InvalidQuestion", "is not JSON"),
        (["--questions", "FILE:[1, 2]"], "InvalidQuestion", "must hold a JSON object"),
        (["--questions", 'FILE:{"q": "text"}'], "InvalidQuestion", "question 'q': expected an object"),
        (["--questions", 'FILE:{"q": {"yes_no": ["a"]}}'], "InvalidQuestion", '"yes_no" takes'),
        (["--questions", 'FILE:{"q": {"choice": ["a", "b"]}}'], "InvalidQuestion", '"choice" takes'),
        (["--questions", 'FILE:{"q": {"score": "a"}}'], "InvalidQuestion", '"score" takes'),
        (["--questions", 'FILE:{"q": {"scale": ["a", "b"]}}'], "InvalidQuestion", "unknown kind 'scale'"),
        (["--questions", 'FILE:{"q": {"yes_no": ["a", 7]}}'], "InvalidQuestion", "question 'q': the no text"),
        (["--questions", 'FILE:{"": {"yes_no": ["a", "b"]}}'], "InvalidName", "non-empty string"),
        (["--choice", "c", "x=X", "x=Y", "z=Z"], "InvalidQuestion", "--choice c: option 'x' is given twice"),
        (["--choice", "c", "x=X", "x=Y"], "InvalidQuestion", "--choice c: option 'x' is given twice"),
        (["--questions", 'FILE:{"q": {"yes_no": ["a", "b"]}, "q": {"score": ["a", "b"]}}'], "InvalidQuestion",
         "key 'q' is given twice in one object"),
        (["--questions", 'FILE:{"q": {"choice": {"x": "X", "x": "Y", "z": "Z"}}}'], "InvalidQuestion",
         "key 'x' is given twice in one object"),
        (["--questions", 'FILE:{"a": {"yes_no": ["a", "b"]}, "q": {"score": ["a", "b"]}, "q": {}}'],
         "InvalidQuestion", "key 'q' is given twice in one object"),
        (["--questions", 'FILE:{"q": {"yes_no": ["a", "b"], "score": ["a", "b"]}}'], "InvalidQuestion",
         ONE_KEY),
        (["--questions", 'FILE:{"q": {}}'], "InvalidQuestion", ONE_KEY),
        (["--questions", 'FILE:{"q": "t"}'], "InvalidQuestion", ONE_KEY),
        (["--questions", 'FILE:{"q": 7}'], "InvalidQuestion", ONE_KEY),
        (["--questions", "MISSING"], "InvalidQuestion", "missing.json': No such file or directory"),
        (["--score", "q", "low", "high", "low"], "InvalidQuestion",
         "level 'low' is given twice; levels must be unique"),
        (["--questions", 'FILE:{"q": {"score": ["low", "low"]}}'], "InvalidQuestion",
         "question 'q': level 'low' is given twice"),
        (["--yes-no", "t", "same", "same"], "InvalidQuestion", "the yes and no texts are both 'same'"),
        (["--choice", "c", "x=X", "y=X"], "InvalidQuestion", "options ['x', 'y'] share the text 'X'"),
    ],
    ids=[
        "no-questions", "choice-without-equals", "choice-one-option", "score-one-level", "yes-no-empty-text",
        "duplicate-name", "file-missing", "file-not-json", "file-not-object", "question-not-object",
        "yes-no-not-pair", "choice-not-object", "score-not-list", "unknown-kind", "text-not-string",
        "empty-name", "choice-duplicate-option", "choice-duplicate-option-of-two", "file-duplicate-id",
        "file-duplicate-option", "file-duplicate-id-after-another", "question-two-keys", "question-no-key",
        "question-one-character-string", "question-number", "file-missing-reason", "score-duplicate-level",
        "file-score-duplicate-level", "yes-no-one-text", "choice-one-text",
    ],
)  # fmt: skip
def test_bad_questions_exit_3_before_anything_is_sent(
    run: Any, svc: FakeService, tmp_path: Path, questions: list[str], error: str, detail: str
) -> None:
    argv = [
        str(tmp_path / "missing.json")
        if arg == "MISSING"
        else _write(tmp_path, arg[len("FILE:") :])
        if arg.startswith("FILE:")
        else arg
        for arg in questions
    ]
    result = run("--base-url", svc.url, "ask", STATE, *argv)
    assert result.code == 3
    first = result.err.splitlines()[0]
    assert first.startswith(f"error: {error}: ")
    assert detail in first
    assert svc.requests == []


def test_an_id_of_a_file_asked_again_by_a_flag_is_refused_before_the_state_is_read(
    run: Any, svc: FakeService, tmp_path: Path
) -> None:
    # docs/command-line.md: ids must be unique "across files and flags"; checked before stdin is read.
    path = _write(tmp_path, '{"lang": {"choice": {"en": "English", "fr": "French"}}}')
    result = run("--base-url", svc.url, "ask", "--questions", path, "--yes-no", "lang", "y", "n", stdin=STATE)
    assert result.code == 3
    assert result.err.splitlines()[0].startswith("error: DuplicateQuestionName: ")
    assert "'lang'" in result.err.splitlines()[0]
    assert sys.stdin.read() == STATE  # not read
    assert svc.requests == []


@pytest.mark.parametrize(
    ("argv", "stdin", "error"),
    [
        (["ask", "-", "--yes-no", "t", "y", "n"], "\n", "InvalidState"),
        (["--base-url", "ftp://example.com", "models"], None, "InvalidBaseUrl"),
        (["models"], None, "MissingApiKey"),
    ],
    ids=["empty-state", "bad-base-url", "public-service-without-key"],
)
def test_input_and_configuration_errors_exit_3(
    run: Any, svc: FakeService, argv: list[str], stdin: str | None, error: str
) -> None:
    if argv[0] == "ask":
        argv = ["--base-url", svc.url, *argv]
    result = run(*argv, stdin=stdin)
    assert result.code == 3
    assert result.err.startswith(f"error: {error}: ")
    if error == "MissingApiKey":
        assert "--api-key" in result.err


@pytest.mark.parametrize(
    ("steps", "argv", "code", "error", "status", "attempts"),
    [
        ([BUSY, BUSY, BUSY], [], 4, "RateLimited", 429, 3),
        ([reply(529, {"detail": "overloaded"})], ["--retries", "0"], 4, "Overloaded", 529, 1),
        (
            [reply(503, {"detail": "down"}, headers=[("retry-after-ms", "1")])] * 2,
            ["--retries", "1"],
            5,
            "ServerError",
            503,
            2,
        ),
        ([], ["--model", "no-such-model"], 5, "NotFound", 404, 1),
        ([reply(400, "<html>bad</html>")], [], 5, "BadRequest", 400, 1),
    ],
    ids=["busy-429-after-retries", "busy-529", "server-error-after-retries", "unknown-model", "bad-request"],
)
def test_http_errors_exit_with_their_code_and_print_diagnostics(
    run: Any,
    svc: FakeService,
    steps: list[Any],
    argv: list[str],
    code: int,
    error: str,
    status: int,
    attempts: int,
) -> None:
    svc.script(*steps)
    result = run("--base-url", svc.url, *argv, "ask", STATE, "--yes-no", "t", "y", "n")
    assert result.code == code
    assert result.out == ""
    first, second = result.err.splitlines()
    assert first.startswith(f"error: {error}: HTTP {status}")
    assert second.startswith(f"  status={status}, attempts={attempts}, body=")
    assert len(svc.requests) == attempts


def test_long_error_bodies_are_shortened_in_the_diagnostics_line(run: Any, svc: FakeService) -> None:
    page = "<html>" + "x" * 500 + "</html>"
    svc.script(reply(502, page))
    result = run("--base-url", svc.url, "--retries", "0", "--json", "models")
    assert result.code == 5
    second = result.err.splitlines()[1]
    assert "body='<html>xxx" in second
    assert "...'" in second
    assert len(second) < 260
    assert json.loads(result.out)["error"]["body"] == page  # the JSON keeps all of it


@pytest.mark.parametrize(
    ("length", "shown"), [(200, "x" * 200), (201, "x" * 197 + "...")], ids=["at-the-limit", "one-past"]
)
def test_the_diagnostics_line_shows_a_body_of_up_to_200_characters_whole(length: int, shown: str) -> None:
    diag = qa.Diagnostics()
    diag.status, diag.attempts, diag.body = 502, 1, "x" * length
    assert _output.diagnostics_text(diag) == f"status=502, attempts=1, body={shown!r}"


def test_the_diagnostics_line_is_empty_text_only_when_nothing_was_sent() -> None:
    diag = qa.Diagnostics()
    assert _output.diagnostics_text(diag) == ""  # a str: the caller joins and tests it
    diag.attempts = 1  # one attempt without a response: shown
    assert _output.diagnostics_text(diag) == "status=None, attempts=1, body=None"


def test_errors_print_the_request_id_and_json_carries_it(run: Any, svc: FakeService) -> None:
    svc.script(reply(404, {"detail": "gone"}, headers=[("x-request-id", "req_cli_7")]))
    result = run("--base-url", svc.url, "--json", "models")
    assert result.code == 5
    assert json.loads(result.out)["error"]["request_id"] == "req_cli_7"
    assert "(request id req_cli_7)" in result.err.splitlines()[0]
    assert result.err.splitlines()[1].endswith(", request_id=req_cli_7")
    svc.script(reply(404, {"detail": "gone"}, headers=[("request-id", "req_cli_8")]))
    assert "(request id req_cli_8)" in run("--base-url", svc.url, "models").err


def test_ask_json_carries_the_request_id(run: Any, svc: FakeService) -> None:
    svc.script(reply(200, {"answers": {"toxic": True}}, headers=[("request-id", "req_ok")]))
    result = run("--base-url", svc.url, "--json", "ask", STATE, "--yes-no", "toxic", "a", "b")
    assert json.loads(result.out)["request_id"] == "req_ok"


def test_json_errors_go_to_stdout_as_json_and_to_stderr(run: Any, svc: FakeService) -> None:
    svc.script(BUSY, BUSY, BUSY)
    result = run("--base-url", svc.url, "--json", "models")
    assert result.code == 4
    assert json.loads(result.out) == {
        "error": {
            "type": "RateLimited",
            "message": json.loads(result.out)["error"]["message"],
            "status": 429,
            "attempts": 3,
            "request_id": None,
            "body": '{"detail": "slow down"}',
        }
    }
    assert result.err.startswith("error: RateLimited: HTTP 429")


def test_connection_failure_exits_6_with_the_transport_error(run: Any) -> None:
    result = run("--base-url", f"http://127.0.0.1:{closed_port()}", "--retries", "0", "models")
    assert result.code == 6
    first, second = result.err.splitlines()
    assert first.startswith("error: ConnectionFailed: ")
    assert "attempts=1" in second
    assert "transport_error=ConnectionRefusedError" in second


def test_answer_that_does_not_fit_exits_7(run: Any, svc: FakeService) -> None:
    svc.set_answers({"t": "maybe"})
    result = run("--base-url", svc.url, "ask", STATE, "--yes-no", "t", "y", "n")
    assert result.code == 7
    assert result.err.startswith("error: InvalidResponse: ")


def test_timeout_expiry_exits_7_with_canceled(run: Any, svc: FakeService) -> None:
    svc.script(hang())
    result = run("--base-url", svc.url, "--timeout", "0.2", "models")
    assert result.code == 7
    assert result.err.startswith("error: Canceled: ")


KEYS = ["sk-very-secret-0123", 'sk-"quoted"\\slash', "sk-caf\u00e9"]


def key_forms(key: str) -> list[str]:
    return [key, json.dumps(key)[1:-1], json.dumps(key, ensure_ascii=False)[1:-1]]


@pytest.mark.parametrize("key", KEYS, ids=["plain", "json-escaped", "non-ascii"])
@pytest.mark.parametrize("source", ["option", "environment"])
def test_error_output_never_contains_the_api_key(
    run: Any, svc: FakeService, monkeypatch: pytest.MonkeyPatch, source: str, key: str
) -> None:
    # A misbehaving server echoing the key in its error body: the CLI still must not print it.
    svc.script(reply(500, {"detail": f"key {key} is revoked"}))
    argv = ["--base-url", svc.url, "--retries", "0", "--json"]
    if source == "option":
        argv += ["--api-key", key]
    else:
        monkeypatch.setenv("SERVICE_API_KEY", key)
    result = run(*argv, "models")
    assert result.code == 5
    for form in key_forms(key):
        assert form not in result.out + result.err
    assert "[redacted]" in result.err
    assert json.loads(result.out)["error"]["type"] == "ServerError"
    assert svc.requests[0].headers["authorization"] == f"Bearer {key}"


@pytest.mark.parametrize("key", KEYS, ids=["plain", "json-escaped", "non-ascii"])
def test_answer_output_never_contains_the_api_key(run: Any, svc: FakeService, key: str) -> None:
    # A server echoing the key in "usage", which `ask --json` prints.
    svc.script(reply(200, {"answers": {"t": True}, "usage": {"account": key, "input_tokens": 1}}))
    result = run("--base-url", svc.url, "--api-key", key, "--json", "ask", STATE, "--yes-no", "t", "y", "n")
    assert result.code == 0, result.err
    for form in key_forms(key):
        assert form not in result.out
    assert json.loads(result.out) == {
        "answers": {"t": True},
        "usage": {"account": "[redacted]", "input_tokens": 1},
        "request_id": None,
    }


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_short_test_key_leaves_model_names_and_answers_as_the_service_sent_them(
    run: Any, as_json: bool
) -> None:
    # "test" is inside "judge-latest" and "contest": hidden only where it stands alone.
    flags = ["--json"] if as_json else []
    with FakeService(api_key="test") as service:
        listed = run("--base-url", service.url, "--api-key", "test", *flags, "models")
        service.script(reply(200, {"answers": {"contest": True}, "usage": {"echo": "test"}}))
        asked = run(
            "--base-url",
            service.url,
            "--api-key",
            "test",
            *flags,
            "ask",
            STATE,
            "--yes-no",
            "contest",
            "y",
            "n",
        )
    assert (listed.code, asked.code) == (0, 0), listed.err + asked.err
    if as_json:
        assert json.loads(listed.out)[0] == "judge-latest"
        assert json.loads(asked.out)["answers"] == {"contest": True}
        assert json.loads(asked.out)["usage"] == {"echo": "[redacted]"}  # standing alone
    else:
        assert listed.out.splitlines()[0] == "judge-latest"
        assert asked.out.splitlines()[0].startswith("contest: ")


def test_ctrl_c_exits_130(run: Any, svc: FakeService, monkeypatch: pytest.MonkeyPatch) -> None:
    class Interrupted(io.StringIO):
        def read(self, size: int | None = -1) -> str:
            raise KeyboardInterrupt

    monkeypatch.setattr(sys, "stdin", Interrupted())
    result = run("--base-url", svc.url, "ask", "--yes-no", "t", "y", "n")
    assert result.code == 130
    assert result.err == "interrupted\n"


def test_a_run_handles_sigterm_and_then_gives_the_caller_s_handler_back(
    run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    during: list[object] = []

    class Watched(io.StringIO):
        def read(self, size: int | None = -1) -> str:
            during.append(signal.getsignal(signal.SIGTERM))
            raise KeyboardInterrupt

    def mine(signum: int, frame: object) -> None:  # pragma: no cover - never sent
        pass

    monkeypatch.setattr(sys, "stdin", Watched())
    argv = ("--base-url", "http://127.0.0.1:1", "ask", "--yes-no", "t", "y", "n")
    previous = signal.signal(signal.SIGTERM, mine)
    try:
        assert run(*argv).code == 130
        assert signal.getsignal(signal.SIGTERM) is mine
        # Off the main thread, where no handler can be set, main() leaves the caller's alone.
        codes: list[int] = []
        thread = threading.Thread(target=lambda: codes.append(main(list(argv))))
        thread.start()
        thread.join(5)
        assert codes == [130]
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert during == [_output.on_sigterm, mine]


def test_each_stdout_line_is_flushed_as_it_is_written(
    svc: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reader of a pipe (`qa-min fake --json | ...`, batch's streaming answers) sees every line
    # at once, not when a block buffer fills or the process exits; a full disk fails at the write.
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # block-buffered, as a pipe is
    monkeypatch.setattr(sys, "stdout", stdout)
    assert main(["--base-url", svc.url, "--json", "models"]) == 0
    written = stdout.buffer.getvalue()
    assert written.endswith(b"]\n")
    assert MODEL in json.loads(written)


@pytest.mark.parametrize("has_fd", [True, False], ids=["real-stdout", "stdout-without-fd"])
def test_closed_output_pipe_exits_1_quietly(
    svc: FakeService, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, has_fd: bool
) -> None:
    with open(tmp_path / "stdout", "w") as target:

        class ClosedPipe(io.StringIO):
            def write(self, text: str) -> int:
                raise BrokenPipeError(32, "Broken pipe")

            def fileno(self) -> int:
                return target.fileno() if has_fd else super().fileno()

        monkeypatch.setattr(sys, "stdout", ClosedPipe())
        assert main(["--base-url", svc.url, "models"]) == 1
        if has_fd:
            # Later writes (the interpreter's final flush) go to devnull instead of failing.
            os.write(target.fileno(), b"ignored")
            assert os.fstat(target.fileno()).st_ino != os.stat(tmp_path / "stdout").st_ino


def test_dropping_stdout_points_it_at_devnull_and_leaves_no_descriptor_open(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with open(tmp_path / "stdout", "wb") as target:
        monkeypatch.setattr(sys, "stdout", target)
        free = os.open(os.devnull, os.O_RDONLY)  # the lowest free number: the one devnull will take
        os.close(free)
        _output.drop_stdout()
        os.write(target.fileno(), b"lost")
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.fstat(free)  # devnull, once copied onto stdout, was closed
    assert (tmp_path / "stdout").read_bytes() == b""


def test_python_m_qa_min_runs_main_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["qa_min", "--version"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_module("qa_min", run_name="__main__")
    assert exit_info.value.code == 0


# -- fake ----------------------------------------------------------------------------------


def _serve_then(action: Any) -> Any:
    """A stand-in for the serve-forever loop: runs ``action`` while the fake serves, then Ctrl-C."""

    def serve() -> None:
        action()
        raise KeyboardInterrupt

    return serve


def test_fake_serves_until_ctrl_c_then_closes_and_exits_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def use_it() -> None:
        url = capsys.readouterr().out.split()[4]
        seen["url"] = url
        with qa.Client(base_url=url, trust_env=False) as client:
            seen["models"] = [m.name for m in client.list_models()]

    monkeypatch.setattr(_commands, "_serve_forever", _serve_then(use_it))
    assert main(["fake", "--port", "0", "--prefix", "/api"]) == 130  # interrupted (Ctrl-C)
    assert capsys.readouterr().err == "interrupted\n"
    assert seen["url"].startswith("http://127.0.0.1:")
    assert seen["url"].endswith("/api")
    assert seen["models"][0] == "judge-latest"
    client = qa.Client(base_url=seen["url"], trust_env=False, retry=qa.RetryPolicy.none)
    with client, pytest.raises(qa.ConnectionFailed):
        client.list_models()


def test_fake_says_where_it_listens_and_gives_a_command_to_try_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shown: list[str] = []
    show = _serve_then(lambda: shown.append(capsys.readouterr().out))
    monkeypatch.setattr(_commands, "_serve_forever", show)
    assert main(["fake", "--port", "0"]) == 130
    url = shown[0].split()[4]
    assert shown == [
        f"fake service listening on {url} (Ctrl-C stops it)\n  try: SERVICE_BASE_URL={url} qa-min models\n"
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["--json", "fake", "--port", "0", "--api-key", "sk-local"],
        ["--api-key", "sk-local", "fake", "--port", "0", "--json"],
    ],
    ids=["options-after-command", "options-before-command"],
)
def test_fake_requires_the_api_key_it_was_given(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    statuses: list[object] = []

    def use_it() -> None:
        url = json.loads(capsys.readouterr().out)["url"]
        for key in (None, "sk-local"):
            try:
                with qa.Client(base_url=url, api_key=key, trust_env=False) as client:
                    statuses.append(len(client.list_models()))
            except qa.Unauthorized as exc:
                statuses.append(exc.status)

    monkeypatch.setattr(_commands, "_serve_forever", _serve_then(use_it))
    assert main(argv) == 130
    assert statuses == [401, 4]


@pytest.mark.parametrize("style", ["seconds", "ms", "both", "none"])
def test_fake_plays_a_rate_limited_service(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, style: str
) -> None:
    seen: list[tuple[int, dict[str, str]]] = []

    def use_it() -> None:
        url = json.loads(capsys.readouterr().out)["url"]
        with qa.Client(base_url=url, trust_env=False, retry=qa.RetryPolicy.none, rate_limit=None) as client:
            for _ in range(3):
                diagnostics = qa.Diagnostics()
                try:
                    client.list_models(diagnostics=diagnostics)
                except qa.RateLimited:
                    pass
                assert diagnostics.headers is not None
                seen.append((diagnostics.status or 0, dict(diagnostics.headers.items())))

    monkeypatch.setattr(_commands, "_serve_forever", _serve_then(use_it))
    argv = ["--json", "fake", "--port", "0", "--rate-limit", "0.01", "2", "--retry-after", style]
    assert main(argv) == 130
    assert [status for status, _ in seen] == [200, 200, 429]  # a burst of 2, then the limit
    throttled = {name.lower() for name in seen[2][1]}
    assert ("retry-after" in throttled) == (style in ("seconds", "both"))
    assert ("retry-after-ms" in throttled) == (style in ("ms", "both"))


@pytest.mark.parametrize(("rate", "burst"), [("5", "0.5"), ("0", "5"), ("fast", "5")])
def test_fake_refuses_a_rate_limit_it_cannot_play(run: Any, rate: str, burst: str) -> None:
    result = run("fake", "--port", "0", "--rate-limit", rate, burst)
    assert result.code == 2
    assert "--rate-limit" in result.err


@pytest.mark.parametrize("where", ["after", "before"])
def test_fake_with_an_empty_api_key_is_a_usage_error(run: Any, where: str) -> None:
    # No client can send an empty key: the fake would answer every call 401.
    args = (
        ["fake", "--port", "0", "--api-key", ""]
        if where == "after"
        else ["--api-key", "", "fake", "--port", "0"]
    )
    result = run(*args)
    assert result.code == 2
    assert "qa-min fake: error: argument --api-key: a key cannot be empty" in result.err
    assert "Traceback" not in result.err


def test_fake_announce_without_a_rate_limit_is_a_usage_error_naming_the_option(run: Any) -> None:
    # It once read "error: UsageError: --announce: announce='openai' needs a rate_limit".
    result = run("fake", "--port", "0", "--announce", "openai")
    assert result.code == 2
    assert result.err.startswith("usage: qa-min fake")
    assert "qa-min fake: error: argument --announce: openai needs --rate-limit RATE BURST" in result.err
    assert "UsageError" not in result.err
    assert "rate_limit" not in result.err


def test_fake_announces_with_a_rate_limit(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, str] = {}

    def use_it() -> None:
        url = json.loads(capsys.readouterr().out)["url"]
        diagnostics = qa.Diagnostics()
        with qa.Client(base_url=url, trust_env=False) as client:
            client.list_models(diagnostics=diagnostics)
        assert diagnostics.headers is not None
        seen.update((name.lower(), value) for name, value in diagnostics.headers.items())

    monkeypatch.setattr(_commands, "_serve_forever", _serve_then(use_it))
    assert main(["--json", "fake", "--port", "0", "--rate-limit", "5", "5", "--announce", "openai"]) == 130
    assert seen["x-ratelimit-limit-requests"] == "5"


def test_fake_on_a_busy_port_exits_1(run: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = run("fake", "--port", str(taken.getsockname()[1]))
    assert result.code == 1
    assert result.err.startswith("error: cannot listen on 127.0.0.1:")


def test_fake_that_cannot_listen_gives_the_system_s_reason_or_else_the_whole_error(
    run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("fake", "--port", str(port))
    assert result.err == f"error: cannot listen on 127.0.0.1:{port}: {os.strerror(errno.EADDRINUSE)}\n"

    def refuse(self: FakeService) -> None:
        raise OSError("no reason given")

    monkeypatch.setattr(FakeService, "start", refuse)
    result = run("fake", "--port", "0")
    assert (result.code, result.err) == (1, "error: cannot listen on 127.0.0.1:0: no reason given\n")


def test_fake_idles_in_long_sleeps_until_ctrl_c_rather_than_spinning(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    asleep = threading.Event()

    class Stop(Exception):
        pass

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        asleep.set()
        raise Stop  # as Ctrl-C would interrupt it

    def serve() -> None:
        with pytest.raises(Stop):
            _commands._serve_forever()

    monkeypatch.setattr(_commands, "time", types.SimpleNamespace(sleep=sleep))
    thread = threading.Thread(target=serve, daemon=True)  # a loop that spins would never end
    thread.start()
    assert asleep.wait(5), "the serve loop never slept"
    thread.join(5)
    assert slept[0] >= 60  # not a short poll either


# -- real processes --------------------------------------------------------------------------


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SERVICE_") and not k.lower().endswith("_proxy")
    }
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def _python(*argv: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv],
        check=False,
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(**env),
        timeout=20,
    )


def test_python_m_qa_min_demo_runs() -> None:
    proc = _python("-m", "qa_min", "demo")
    assert proc.returncode == 0, proc.stderr
    assert "client.list_models()" in proc.stdout
    assert "RateLimited" in proc.stdout


def test_python_m_qa_min_json_models(svc: FakeService) -> None:
    proc = _python("-m", "qa_min", "--json", "models", SERVICE_BASE_URL=svc.url)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0] == "judge-latest"


def test_python_m_qa_min_ask_reads_stdin(svc: FakeService) -> None:
    proc = _python("-m", "qa_min", "--base-url", svc.url, "ask", *FLAGS, stdin=STATE + "\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1] == f"lang: {expected(STATE)['lang']}"


def test_python_m_qa_min_failure_exit_code_and_lazy_cli_import() -> None:
    proc = _python(
        "-m", "qa_min", "--base-url", f"http://127.0.0.1:{closed_port()}", "--retries", "0", "models"
    )
    assert proc.returncode == 6
    assert proc.stderr.startswith("error: ConnectionFailed: ")
    plain = _python("-c", "import sys, qa_min; print('qa_min._cli' in sys.modules)")
    assert plain.stdout.strip() == "False"


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX-only here")
def test_fake_process_exits_130_on_sigint() -> None:
    # docs/command-line.md: 130 interrupted (Ctrl-C), for fake too (it exited 0). A shell that
    # started this test run in the background may have left SIGINT ignored, and Python keeps an
    # ignored SIGINT ignored: a launcher resets it, then becomes `python -m qa_min fake` (exec).
    launcher = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execv(sys.executable, [sys.executable, '-m', 'qa_min', *sys.argv[1:]])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", launcher, "--json", "fake", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_env(),
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        assert ready, "the fake printed no URL"
        url = json.loads(proc.stdout.readline())["url"]
        with qa.Client(base_url=url, trust_env=False) as client:
            assert len(client.list_models()) == 4  # it serves
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert err == "interrupted\n"
    client = qa.Client(base_url=url, trust_env=False, retry=qa.RetryPolicy.none)
    with client, pytest.raises(qa.ConnectionFailed):  # and it closed its socket
        client.list_models()


@pytest.mark.parametrize("key", [" ", "\t"], ids=["space", "tab"])
def test_a_blank_api_key_is_refused_with_its_message_and_json_intact(
    run: Any, svc: FakeService, key: str
) -> None:
    # A blank key was taken as a key to hide: every space of the message became [redacted].
    result = run("--base-url", svc.url, "--api-key", key, "--json", "models")
    assert result.code == 3
    assert result.err.startswith("error: InvalidOption: api_key must be a non-empty string")
    error = json.loads(result.out)["error"]
    assert error["message"] == "api_key must be a non-empty string (or None to read SERVICE_API_KEY)"


def test_ask_refuses_a_state_argument_that_is_not_utf8(run: Any, svc: FakeService) -> None:
    # Python hands undecodable argv bytes on as lone surrogates ("caf\xe9" -> "caf\udce9"),
    # which were sent as JSON escapes; batch refuses such a line as "not UTF-8".
    result = run("--base-url", svc.url, "--json", "ask", "caf\udce9", *FLAGS)
    assert result.code == 3
    assert result.err.startswith("error: InvalidState: the state argument is not UTF-8\n")
    assert json.loads(result.out)["error"]["message"] == "the state argument is not UTF-8"
    assert svc.requests == []


@pytest.mark.parametrize("errors", ["surrogateescape", "strict"])
def test_ask_refuses_a_state_on_stdin_that_is_not_utf8(
    run: Any, svc: FakeService, monkeypatch: pytest.MonkeyPatch, errors: str
) -> None:
    # Python reads stdin with surrogateescape under the C locale and in UTF-8 mode, else strictly.
    stdin = io.TextIOWrapper(io.BytesIO(b"caf\xe9\n"), encoding="utf-8", errors=errors)
    monkeypatch.setattr(sys, "stdin", stdin)
    result = run("--base-url", svc.url, "ask", *FLAGS)
    assert result.code == 3
    assert result.err == "error: InvalidState: the state read from stdin is not UTF-8\n"
    assert svc.requests == []


@pytest.mark.skipif(sys.platform == "win32", reason="argv is bytes on POSIX only")
def test_python_m_qa_min_ask_refuses_argv_bytes_that_are_not_utf8(svc: FakeService) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "qa_min", "--base-url", svc.url, "ask", b"caf\xe9", *FLAGS],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(PYTHONUTF8="1"),  # argv decoded as UTF-8 with surrogateescape, whatever the locale
        timeout=20,
    )
    assert proc.returncode == 3
    assert proc.stderr == "error: InvalidState: the state argument is not UTF-8\n"
    assert svc.requests == []


def test_ask_without_a_state_and_with_stdin_closed_exits_3_and_says_so(
    run: Any, svc: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", None)  # as Python starts with fd 0 closed (`<&-`)
    result = run("--base-url", svc.url, "ask", "--yes-no", "toxic", YES_NO["true"], YES_NO["false"])
    assert result.code == 3
    assert (
        result.err == "error: FileError: no state given and stdin is closed: pass the state as an argument\n"
    )
    assert not svc.requests

"""An audit of the guides' claims that no other test held, grouped per page.

Pages: README.md (prose), docs/rate-limits.md, docs/asyncio.md, docs/testing.md, docs/batch.md,
docs/command-line.md, docs/install.md. Each test's docstring quotes what it checks. Claims
already proven elsewhere are not repeated here (test_limiter_audit, test_ratelimit_client,
test_testing, test_testing_audit, test_mock_transport, test_asyncio_audit, test_cli, test_batch,
test_import, test_packaging, test_vendoring hold most of these pages).
"""

from __future__ import annotations

import asyncio
import configparser
import contextlib
import io
import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Optional

import pytest
from support import BOUND, executor_threads, make_client

import qa_min as qa
from qa_min._cli import _commands, main
from qa_min._cli._output import EXIT_CODES
from qa_min.testing import FakeService, hang, reply

ROOT = Path(__file__).resolve().parent.parent


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


def _run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The CLI reads SERVICE_* as the library does; the developer's must not leak in.
    for name in ("SERVICE_API_KEY", "SERVICE_BASE_URL", "SERVICE_DEFAULT_MODEL", "SERVICE_LOG"):
        monkeypatch.delenv(name, raising=False)


# -- README.md ------------------------------------------------------------------------------


def test_readme_error_example_prints_what_its_comments_say() -> None:
    """README, Errors: ``print(exc.status, exc)  # 503 HTTP 503 from GET ...: down for maintenance
    (request id req_42)``; ``print(diag.status, diag.attempts, diag.request_id, diag.body)``;
    "Diagnostics also holds the last response's headers, the call's elapsed time and one record
    per attempt (history)". Both clients."""
    script = reply(503, {"detail": "down for maintenance"}, headers=[("request-id", "req_42")])

    def check(exc: qa.APIStatusError, diag: qa.Diagnostics, url: str) -> None:
        assert type(exc) is qa.ServerError
        assert not isinstance(exc, qa.ServiceBusy)
        assert exc.status == 503
        assert str(exc) == f"HTTP 503 from GET {url}/v1/models: down for maintenance (request id req_42)"
        assert (diag.status, diag.attempts, diag.request_id) == (503, 1, "req_42")
        assert diag.body == '{"detail": "down for maintenance"}'
        assert diag.headers is not None
        assert diag.headers.get("request-id") == "req_42"
        assert diag.elapsed is not None
        assert 0 < diag.elapsed < BOUND
        assert [a.status for a in diag.history] == [503]

    async def through_async(url: str) -> tuple[qa.APIStatusError, qa.Diagnostics]:
        diag = qa.Diagnostics()
        async with qa.AsyncClient(base_url=url, trust_env=False) as client:
            with pytest.raises(qa.APIStatusError) as info:
                await client.list_models(retry=qa.RetryPolicy.none, diagnostics=diag)
        return info.value, diag

    with FakeService() as fake:
        fake.script(script)
        diag = qa.Diagnostics()
        with make_client(fake.url) as client, pytest.raises(qa.APIStatusError) as info:
            client.list_models(retry=qa.RetryPolicy.none, diagnostics=diag)
        check(info.value, diag, fake.url)
        fake.script(script)
        check(*asyncio.run(through_async(fake.url)), fake.url)


def test_readme_async_client_takes_the_same_arguments_but_max_workers() -> None:
    """README, Sync and async: "qa.AsyncClient takes the same arguments (but max_workers)"; and the
    error tree: ServiceBusy (RateLimited 429 · Overloaded 529), ConnectionFailed (ProxyError),
    ConfigurationError (ValueError): InvalidBaseUrl · MissingApiKey, ValidationError (ValueError)."""
    with pytest.raises(TypeError, match="max_workers"):
        qa.AsyncClient(base_url="http://127.0.0.1:9", max_workers=2)  # type: ignore[call-arg]
    tree = {
        qa.RateLimited: qa.ServiceBusy,
        qa.Overloaded: qa.ServiceBusy,
        qa.ServiceBusy: qa.APIStatusError,
        qa.UnexpectedStatus: qa.APIStatusError,
        qa.ProxyError: qa.ConnectionFailed,
        qa.InvalidBaseUrl: qa.ConfigurationError,
        qa.MissingApiKey: qa.ConfigurationError,
        qa.ConfigurationError: ValueError,
        qa.ValidationError: ValueError,
        qa.InvalidOption: qa.ValidationError,
        qa.DuplicateQuestionName: qa.ValidationError,
    }
    for cls, parent in tree.items():
        assert issubclass(cls, parent), (cls, parent)
        assert issubclass(cls, qa.QAError), cls


# -- docs/rate-limits.md ---------------------------------------------------------------------


def test_rate_limit_state_writes_the_ceiling_to_one_decimal_or_three_digits_when_huge() -> None:
    """rate-limits.md, Announced limits: "writes ... the ceiling to one decimal, or to three
    significant digits when it is below 0.1/s or huge (0.01/s, 1.25e+307/s)"; and
    "client.rate_limit ... None when off"."""
    shown = {
        qa.RateLimit(12.345): "RateLimitState(paced at 12.3/s, throttles=0)",
        qa.RateLimit(190, adaptive=False): "RateLimitState(paced at 190.0/s, throttles=0)",
        qa.RateLimit(1.25e307, adaptive=False): "RateLimitState(paced at 1.25e+307/s, throttles=0)",
    }
    for limit, text in shown.items():
        with qa.Client(base_url="http://127.0.0.1:9", rate_limit=limit) as client:
            assert repr(client.rate_limit) == text
    with qa.Client(base_url="http://127.0.0.1:9", rate_limit=None) as client:
        assert client.rate_limit is None


# -- docs/asyncio.md (Mixed code) and docs/batch.md (Streaming) ------------------------------


def _hold_eight_then_release(svc: FakeService, seen: dict[str, object]) -> threading.Thread:
    """A watcher: once 8 requests hang, records the requests and the worker threads, then releases."""

    def watch() -> None:
        seen["arrived"] = svc.wait_for_requests(8)
        seen["requests"] = len(svc.requests)
        seen["threads"] = len(executor_threads())
        svc.release()

    watcher = threading.Thread(target=watch)
    watcher.start()
    return watcher


def test_a_clients_submit_runs_at_most_8_calls_by_default() -> None:
    """asyncio.md, Mixed code: "Its concurrency is capped by the client's max_workers (8 by
    default)"."""
    seen: dict[str, object] = {}
    with FakeService() as svc:
        svc.script(*[hang() for _ in range(8)])
        with make_client(svc.url, retry=qa.RetryPolicy.none) as client:
            calls = [client.submit(client.list_models) for _ in range(9)]
            assert len(executor_threads()) == 8
            watcher = _hold_eight_then_release(svc, seen)
            for call in calls:
                with contextlib.suppress(qa.ConnectionFailed):
                    call.result(timeout=BOUND)
            watcher.join(BOUND)
    assert seen == {"arrived": True, "requests": 8, "threads": 8}


def test_batch_keeps_8_calls_in_flight_by_default(tmp_path: Path) -> None:
    """batch.md, Streaming: "--concurrency N calls in flight (default 8; also the client's worker
    threads)"; the exit code "is that of the first failed line" (6: a connection failure)."""
    states = tmp_path / "states.jsonl"
    states.write_text("".join(f'"text {i}"\n' for i in range(10)))
    out = tmp_path / "answers.jsonl"
    seen: dict[str, object] = {}
    with FakeService() as svc:
        svc.script(*[hang() for _ in range(8)])
        watcher = _hold_eight_then_release(svc, seen)
        code, _, _ = _run_cli(
            "--base-url", svc.url, "--retries", "0", "batch", str(states), "-o", str(out), "--quiet",
            "--yes-no", "toxic", "insults someone", "insults no one",
        )  # fmt: skip
        watcher.join(BOUND)
    assert seen == {"arrived": True, "requests": 8, "threads": 8}
    assert code == 6
    assert len(out.read_text().splitlines()) == 10


# -- docs/command-line.md --------------------------------------------------------------------


def test_demo_and_fake_ignore_connection_options_before_and_refuse_them_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """command-line.md: "demo uses none of them but --json, and fake only --api-key and --json; the
    others are ignored before those two commands and refused after them"."""
    served: list[Optional[str]] = []

    def serve_once() -> None:
        served.append("served")
        raise KeyboardInterrupt  # how Ctrl-C ends the fake

    monkeypatch.setattr(_commands, "_serve_forever", serve_once)
    before = ["--base-url", "http://127.0.0.1:9", "--model", "m", "--timeout", "3", "--retries", "1"]
    assert _run_cli(*before, "demo")[0] == 0
    assert _run_cli(*before, "fake", "--port", "0")[0] == 130  # served, then Ctrl-C
    assert served == ["served"]
    for command in (["demo"], ["fake", "--port", "0"]):
        for option in (
            ["--base-url", "http://127.0.0.1:9"],
            ["--model", "m"],
            ["--timeout", "3"],
            ["--retries", "1"],
        ):
            code, _, err = _run_cli(*command, *option)
            assert code == 2, (command, option)
            assert f"unrecognized arguments: {option[0]}" in err
    assert served == ["served"]


def test_the_questions_file_of_the_page_is_one_ask_reads(tmp_path: Path) -> None:
    """command-line.md: `ask "Some text" --questions questions.json`, "A questions file
    (`questions.json` above) is one JSON object, question id → question" (its ```json block)."""
    page = (ROOT / "docs" / "command-line.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"^```json\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
    questions = tmp_path / "questions.json"
    questions.write_text(block, encoding="utf-8")
    assert 'ask "Some text" --questions questions.json' in page
    with FakeService() as svc:
        code, out, err = _run_cli(
            "--base-url", svc.url, "--json", "ask", "Some text", "--questions", str(questions)
        )
    assert (code, err) == (0, "")
    answers = json.loads(out)["answers"]
    assert list(answers) == ["toxic", "lang", "quality"]
    assert answers["lang"] in ("en", "fr")
    assert answers["quality"] in (0, 1, 2)


def test_the_exit_code_table_has_the_codes_the_command_line_exits_with() -> None:
    """command-line.md, Exit codes: the table's codes are EXIT_CODES' (what `--help` prints), in
    order, and each error row names what the code's classes are (busy: 429/529, ...)."""
    page = (ROOT / "docs" / "command-line.md").read_text(encoding="utf-8")
    section = page.split("## Exit codes", 1)[1]
    rows = dict(re.findall(r"^\| (\d+) \| (.*) \|$", section, re.MULTILINE))
    assert [int(code) for code in rows] == [code for code, _, _ in EXIT_CODES]
    named = {3: "validation", 4: "429/529", 5: "HTTP", 6: "connection", 7: "InvalidResponse"}
    for code, word in named.items():
        assert word in rows[str(code)], (code, rows[str(code)])
    classes = {code: found for code, _, found in EXIT_CODES}
    assert (classes[4], classes[6]) == ((qa.ServiceBusy,), (qa.ConnectionFailed,))
    assert {qa.ValidationError, qa.ConfigurationError} <= set(classes[3])


# -- docs/install.md -------------------------------------------------------------------------


def test_install_page_names_the_tox_environments_and_the_wheel_version() -> None:
    """install.md: "tox  # py39 ... py313 (those installed), lint, type" and
    "dist/qa_min-0.1.0-py3-none-any.whl"."""
    tox = configparser.ConfigParser()
    tox.read(ROOT / "tox.ini")
    envs = [env.strip() for env in tox["tox"]["envlist"].split(",")]
    assert envs == ["py39", "py310", "py311", "py312", "py313", "lint", "type"]
    assert f"dist/qa_min-{qa.__version__}-py3-none-any.whl" in (ROOT / "docs" / "install.md").read_text()


# A retried call, in a fresh interpreter with ``random`` poisoned (None in sys.modules makes any
# import of it fail): the first attempt is refused (a port bound, then closed), and so is the retry
# after a 1 ms backoff whose jitter was drawn.
_RETRY_WITHOUT_RANDOM = r"""
import json, socket, sys
sys.path.insert(0, sys.argv[1])
sys.modules["random"] = None
import qa_min as qa
class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
policy = qa.RetryPolicy(max_retries=1, backoff_initial_ms=1)
with qa.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False, retry=policy) as client:
    try:
        client.ask("Some text", Review)
    except qa.ConnectionFailed as exc:
        delays = [a.delay for a in exc.diagnostics.history]
        print(json.dumps({"attempts": exc.diagnostics.attempts, "delays": delays, "modules": sorted(
            name for name in ("threading", "random") if sys.modules.get(name) is not None)}))
"""


def test_a_retrys_jitter_loads_threading_and_not_random() -> None:
    """install.md, the cold start: "`threading` with the first wait (a backoff, the rate limiter),
    not `random`: a retry's jitter draws from `os.urandom`"."""
    root = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-I", "-c", _RETRY_WITHOUT_RANDOM, root],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["attempts"] == 2
    assert seen["modules"] == ["threading"]
    assert 0.00075 <= seen["delays"][1] <= 0.001  # 1 ms, less a jitter of at most 25%

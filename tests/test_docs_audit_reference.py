"""Audit of the reference pages against the code: each test quotes the sentence it checks.

Grouped per page (configuration, errors, retries, cancellation, bad servers), then the drawn
references read against the code: the error trees of errors.md and README.md, and the
signature of `Client` on configuration.md. Claims another module already proves are not
repeated here. The backoff is recorded by the ``sleep=`` seam,
never slept, so the module runs in well under a second.
"""

from __future__ import annotations

import _thread
import ast
import asyncio
import inspect
import re
from pathlib import Path
from typing import Any, Union

import pytest
from rawhttp import BODY_TRUE, Toxic, call_once, response
from support import InProcessService, Listener, SleepRecorder, make_recording_client

import qa_min as qa
from qa_min._typing import UNSET
from qa_min.testing import reply

KINDS = ["sync", "async"]
TESTS = Path(__file__).resolve().parent
DOCS = TESTS.parent / "docs"
LONGEST = int(_thread.TIMEOUT_MAX)


def _ask(
    kind: str, url: str, transport: Any, **options: Any
) -> tuple[qa.Diagnostics, Union[qa.QAError, None]]:
    """One ``ask`` by either client over ``transport``; returns the diagnostics and the error."""
    diag = qa.Diagnostics()
    retry = options.pop("retry", None)
    client_options = {"base_url": url, "trust_env": False, "transport": transport, "random": lambda: 0.0}
    if kind == "sync":
        with qa.Client(sleep=lambda s, wake: None, **client_options, **options) as client:
            try:
                client.ask("t", Toxic, diagnostics=diag, retry=retry)
            except qa.QAError as exc:
                return diag, exc
            return diag, None

    async def no_wait(seconds: float) -> None:
        pass

    async def run() -> Union[qa.QAError, None]:
        async with qa.AsyncClient(sleep=no_wait, **client_options, **options) as client:
            try:
                await client.ask("t", Toxic, diagnostics=diag, retry=retry)
            except qa.QAError as exc:
                return exc
            return None

    return diag, asyncio.run(run())


# --- docs/configuration.md -------------------------------------------------------------------


def test_config_async_client_takes_the_same_options_but_max_workers_and_its_sleep() -> None:
    """configuration.md: "an `AsyncClient` takes the same ones but `max_workers`" (and, the
    page now says, `sleep=` is an async function of the seconds there)."""
    with pytest.raises(TypeError, match="max_workers"):
        qa.AsyncClient(base_url="http://h", trust_env=False, max_workers=2)  # type: ignore[call-arg]
    threaded_sleep: Any = lambda seconds, wake: None  # noqa: E731  (the Client's form)
    with pytest.raises(qa.InvalidOption, match=r"^sleep must be an async function of the seconds"):
        qa.AsyncClient(base_url="http://h", trust_env=False, sleep=threaded_sleep)
    qa.Client(base_url="http://h", trust_env=False, sleep=lambda s, wake: None, max_workers=2).close()


@pytest.mark.parametrize("kind", KINDS)
def test_config_seconds_at_most_the_longest_wait_which_the_message_names(
    kind: str, listener: Listener
) -> None:
    """configuration.md: "seconds (`timeout`, `idle_timeout`) are finite numbers above 0 and at
    most the platform's longest wait (`_thread.TIMEOUT_MAX`, about 292 years), which the message
    names" and "A bad value raises `qa.InvalidOption` ... when the client is made, before any
    connection"; counts are whole numbers."""
    make: Any = qa.Client if kind == "sync" else qa.AsyncClient
    for name in ("timeout", "idle_timeout"):
        for bad in (0, -1.0, float("inf"), float("nan"), LONGEST + 1.0):
            with pytest.raises(qa.InvalidOption, match=f"^{name} must be a finite number > 0") as caught:
                make(base_url=listener.url, trust_env=False, **{name: bad})
            if bad == float("inf") or bad == LONGEST + 1.0:
                assert f"at most {LONGEST} seconds" in str(caught.value)
        make(base_url=listener.url, trust_env=False, **{name: _thread.TIMEOUT_MAX})
    for name in ("max_idle_per_host", "max_response_bytes"):
        with pytest.raises(qa.InvalidOption, match=f"^{name} must be a whole number"):
            make(base_url=listener.url, trust_env=False, **{name: 2.0})
    assert 292 <= _thread.TIMEOUT_MAX / (365.25 * 86400) < 293
    assert listener.connections() == 0


# --- docs/errors.md --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_errors_message_names_request_id_before_attempts_and_history_fields(kind: str) -> None:
    """errors.md: "`request_id` ... error messages name it: `(request id …)`, before
    `(after N attempts)` when there were several", the `status`, `body` and `attempts` rows,
    and "`history` | one read-only `qa.Attempt` per attempt: `number`, `status`, `error` (a
    class name or None), `duration`, `delay` slept before it"."""
    with InProcessService() as service:
        service.script(*[reply(503, {"detail": "busy"}, headers=[("request-id", f"r{i}")]) for i in range(3)])
        diag, error = _ask(kind, service.url, service.transport)
    assert isinstance(error, qa.ServerError)
    assert error.status == 503
    assert str(error).endswith(": busy (request id r2) (after 3 attempts)"), str(error)
    assert error.diagnostics is diag
    assert (diag.status, diag.attempts, diag.request_id) == (503, 3, "r2")
    assert diag.body is not None
    assert "busy" in diag.body
    assert [(a.number, a.status, a.error, a.request_id) for a in diag.history] == [
        (n, 503, "ServerError", f"r{n - 1}") for n in (1, 2, 3)
    ]
    # random=0.0: every delay its full length, 500 ms then doubled.
    assert [a.delay for a in diag.history] == [0.0, 0.5, 1.0]
    assert all(a.duration >= 0 for a in diag.history)
    with pytest.raises(AttributeError):
        diag.history[0].status = 200


# --- docs/retries.md -------------------------------------------------------------------------


def test_retries_numbers_python_would_take_are_ignored_and_backoff_used() -> None:
    """retries.md: "A value that is unparseable (a sign, an exponent, `1_0`, `nan`, a no-break
    space: all of which Python's `float()` would take) ... is ignored as if absent", while "ASCII
    digits with an optional decimal fraction (`1500`, `0.25`), spaces or tabs around it" count."""
    with InProcessService() as service:
        sleep = SleepRecorder()
        client = make_recording_client(service.url, sleep=sleep, retry=qa.RetryPolicy(max_retries=1))
        with client:
            for value in ("+1", "1e1", "1_0", "\xa01", " 2\t", "0.25"):
                service.script(reply(503, headers=[("Retry-After", value)]))
                client.ask("t", Toxic)
    # 0.5 s is the first backoff (random=0.0): the server's value was ignored.
    assert sleep.seconds == [0.5, 0.5, 0.5, 0.5, 2.0, 0.25]


def test_retries_a_raising_random_ends_the_call_as_it_was_raised_with_diagnostics_filled() -> None:
    """retries.md: "A `retry_status` that raises ... its exception leaves the call as it was
    raised ... the attempt it judged is in `diagnostics.history` (with that exception's class
    name as its error) ... No retry follows. The same goes for a `random=` function of the
    client that raises."; configuration.md: `random` returning anything else "fails the call
    with `InvalidOption` when a backoff is drawn"."""

    def broken() -> float:
        raise KeyError("no entropy")

    for rand, raised in ((broken, KeyError), (lambda: 1.0, qa.InvalidOption)):
        with InProcessService() as service:
            service.script(reply(503, "busy"), reply(200, {"answers": {"toxic": True}, "usage": {}}))
            diag = qa.Diagnostics()
            with make_recording_client(service.url, rand=rand) as client, pytest.raises(raised) as caught:
                client.ask("t", Toxic, diagnostics=diag)
            assert (diag.attempts, diag.status, diag.body) == (1, 503, "busy")
            assert [(a.status, a.error) for a in diag.history] == [(503, raised.__name__)]
            assert len(service.requests) == 1  # the scripted 200 was never asked for
        if raised is qa.InvalidOption:
            assert "random must return a number in [0, 1), returned 1.0" in str(caught.value)


# --- docs/cancellation.md --------------------------------------------------------------------


def test_cancellation_a_finished_call_cannot_be_cancelled_and_close_means_client_closed() -> None:
    """cancellation.md: "`Call.cancel()` returns True unless the call had already finished" and
    "`close()` ... later calls raise `qa.ClientClosed`"."""
    with InProcessService() as service:
        client = make_recording_client(service.url)
        call = client.submit(client.ask, "t", Toxic)
        assert call.result(timeout=5).answers.toxic is True
        assert call.cancel() is False
        assert not call.cancelled()
        client.close()
        with pytest.raises(qa.ClientClosed, match="closed"):
            client.ask("t", Toxic)


# --- docs/bad-servers.md ---------------------------------------------------------------------


def test_bad_servers_100_header_lines_pass_and_an_error_body_is_cut_and_its_connection_closed() -> None:
    """bad-servers.md: "At most 100 header lines" (100 are read), and "For a non-2xx response the
    status is the answer ... the body in `diagnostics.body` is then what could be read, cut at the
    limit, and the connection is closed, never reused"; a 2xx exactly at `max_response_bytes` passes."""
    lines = ["Content-Type: application/json", *(f"X-{i}: v" for i in range(98))]  # + Content-Length
    assert call_once(response(headers=lines)).answer is True
    assert call_once(response(), max_response_bytes=len(BODY_TRUE)).answer is True
    cut = call_once(response("500 Internal Server Error", body=b"x" * 100), max_response_bytes=10)
    assert isinstance(cut.error, qa.ServerError)
    assert cut.error.status == 500
    assert cut.diagnostics.body == "x" * 10
    assert cut.idle == 0


def test_bad_servers_names_test_modules_that_exist_and_the_fuzz_runs_example_counts() -> None:
    """bad-servers.md: "Each promise has its own test module (`tests/test_interim.py`, ...)", and
    test_fuzz_responses.py checks the page "on generated raw responses ...: 100 in the suite and
    650 more in the benchmarks' step"."""
    page = " ".join((DOCS / "bad-servers.md").read_text(encoding="utf-8").split())
    named = re.findall(r"`(?:tests/)?(test_\w+\.py)`", page)
    assert len(named) >= 10, named
    assert [name for name in named if not (TESTS / name).exists()] == []
    fuzz = (TESTS / "test_fuzz_responses.py").read_text(encoding="utf-8")
    suite, more = re.findall(r"max_examples=(\d+)", fuzz)
    assert f"{suite} in the suite and {more} more in the benchmarks' step" in page


# --- the reference tables against the code ------------------------------------------------------

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _block(page: Path, starts: str) -> str:
    found: list[str] = [
        code for _, code in _FENCE.findall(page.read_text(encoding="utf-8")) if code.startswith(starts)
    ]
    (block,) = found
    return block


def _error_tree(text: str) -> dict[str, str]:
    """{class: parent} from a drawn tree: a line's depth is where its name starts; after ``──``
    (or ``:``) on a line come its first name's children, continued on a line with no branch of
    its own; a name in parentheses is left out (a base class, or the README's short form)."""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    last = ""
    for line in text.splitlines():
        depth = len(line) - len(line.lstrip("│├└─ "))
        named = re.sub(r"\([^)]*\)", "", line)  # (ValueError), (.status): no node
        head, tail = [*re.split(r" ── |: ", named, maxsplit=1), ""][:2]
        if "├" not in line and "└" not in line and depth > 0:  # a continued list of children
            head, tail = "", named
        if head.strip():
            first = re.findall(r"[A-Z]\w+", head)[0]
            while stack and stack[-1][0] >= depth:
                stack.pop()
            if stack:
                parents[first] = stack[-1][1]
            stack.append((depth, first))
            for name in re.findall(r"\b[A-Z][a-z]\w*\b", head)[1:]:
                parents[name] = stack[-2][1]
            last = first
        for name in re.findall(r"\b[A-Z][a-z]\w*\b", tail):
            parents[name] = last
    return parents


def test_the_error_trees_hold_every_error_under_its_parent() -> None:
    """errors.md: the tree under "The errors" (every exception of qa_min, each under its base
    class); README.md: the same tree, shortened (each name it draws is under its parent)."""
    public = {
        name: cls
        for name, cls in vars(qa).items()
        if isinstance(cls, type) and issubclass(cls, BaseException) and not name.startswith("_")
    }
    tree = _error_tree(_block(DOCS / "errors.md", "QAError\n"))
    assert set(tree) | {"QAError"} == set(public), set(public) ^ (set(tree) | {"QAError"})
    for name, parent in tree.items():
        assert public[name].__bases__[0] is public[parent], (name, parent)
    readme = _block(DOCS.parent / "README.md", "QAError\n")
    short = _error_tree(readme)
    assert len(short) >= 20, short
    for name, parent in short.items():
        assert issubclass(public[name], public[parent]), (name, parent)
    drawn = set(re.findall(r"\b[A-Z][a-z]\w*\b", readme)) - {"ValueError"}
    assert drawn <= set(public), drawn - set(public)


def test_the_error_tree_reader_sees_depth_dashes_and_continued_lines() -> None:
    text = "Qa\n├── Bb (.x)\n│   └── Cc · Dd\n├── Ee (Value) ── Ff · Gg\n                  Hh\n└── Ii: Jj 1\n"
    assert _error_tree(text) == {
        **{"Bb": "Qa", "Cc": "Bb", "Dd": "Bb", "Ee": "Qa", "Ff": "Ee", "Gg": "Ee", "Hh": "Ee"},
        **{"Ii": "Qa", "Jj": "Ii"},
    }


def test_config_the_drawn_signature_of_client_is_its_own() -> None:
    """configuration.md, "Every option of `Client`": `Client(api_key=None, ..., transport=None)`,
    the constructor's parameters in its order, `*` where they become keyword-only, and its
    defaults (`8 MiB`; `RetryBudget()` and `RateLimit()`, which it makes when none is given)."""
    drawn = " ".join(_block(DOCS / "configuration.md", "Client(").split())
    items = [item.strip() for item in drawn[len("Client(") : drawn.rindex(")")].split(",")]
    params = list(inspect.signature(qa.Client).parameters.values())
    star = items.index("*")
    items.remove("*")
    assert [p.kind is p.KEYWORD_ONLY for p in params] == [n >= star for n in range(len(params))]
    assert [item.partition("=")[0] for item in items] == [p.name for p in params]
    made = {"8 MiB": 8 * 1024 * 1024, "RetryBudget()": UNSET, "RateLimit()": UNSET}
    for item, param in zip(items, params):
        text = item.partition("=")[2]
        assert param.default == (made[text] if text in made else ast.literal_eval(text)), param

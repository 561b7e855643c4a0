"""Observability through both clients: what a client, a call's ``Diagnostics`` and its hooks show.

The key stays out of every ``repr``, even where the caller put it in the base URL's path; a
``Diagnostics`` passed to a call is filled by that call whatever ends it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from support import BOUND

import qa_min as qa
from qa_min.testing import FakeService, hang, reply

KEY = "sk-probe-0123456789abcdefXYZ"
KINDS = ["sync", "async"]

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("kind", KINDS)
def test_a_clients_repr_hides_a_key_in_the_base_urls_path(kind: str) -> None:
    # Some gateways take the key in the path; messages and log lines hide it there already.
    options = {"base_url": f"http://127.0.0.1:1/keys/{KEY}", "api_key": KEY, "trust_env": False}
    if kind == "sync":
        with qa.Client(**options) as client:  # type: ignore[arg-type]
            shown = repr(client)
    else:

        async def made() -> str:
            async with qa.AsyncClient(**options) as client:  # type: ignore[arg-type]
                return repr(client)

        shown = asyncio.run(made())
    assert KEY[3:11] not in shown, shown
    assert "/keys/[redacted]'" in shown, shown


# -- a Diagnostics passed to a call that ends before its first attempt -----------------------


def _unsent_calls() -> list[tuple[str, Callable[[Any, qa.Diagnostics], Any], type[qa.QAError]]]:
    """(name, call on a client with ``diagnostics=``, the error it ends in before sending)."""
    return [
        ("empty state", lambda c, d: c.ask("", Toxic, diagnostics=d), qa.InvalidState),
        ("bad model", lambda c, d: c.ask("x", Toxic, model="m\n", diagnostics=d), qa.InvalidModel),
        ("not a Request", lambda c, d: c.core("x", diagnostics=d), qa.InvalidOption),
        ("bad timeout", lambda c, d: c.list_models(timeout=-1, diagnostics=d), qa.InvalidOption),
        ("bad token", lambda c, d: c.core(REQUEST, cancel=object(), diagnostics=d), qa.InvalidOption),
    ]


class Toxic(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


REQUEST = qa.Request(state="x", questions=[qa.NamedQuestion("toxic", Toxic.toxic)])
UNSENT = _unsent_calls()


def assert_unsent(error: qa.QAError, diag: qa.Diagnostics) -> None:
    """``diag`` says the call made no attempt and got no response, and ``error`` carries it."""
    assert error.diagnostics is diag
    shown = (diag.status, diag.attempts, diag.request_id, diag.headers, diag.body, diag.history)
    assert shown == (None, 0, None, None, None, ()), diag


def served_once(svc: FakeService) -> None:
    svc.script(reply(503, {"detail": "busy"}, headers=[("x-request-id", "req-earlier")]))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("name", "call", "error"), UNSENT, ids=[u[0] for u in UNSENT])
def test_a_call_refused_before_sending_fills_the_diagnostics_passed(
    svc: FakeService, kind: str, name: str, call: Callable[[Any, qa.Diagnostics], Any], error: type
) -> None:
    # The same Diagnostics first served a call that got a 503: left as it was, it would tell
    # of that call's status and request id after a call that sent nothing.
    served_once(svc)
    diag = qa.Diagnostics()
    options: dict[str, Any] = {"base_url": svc.url, "trust_env": False, "retry": qa.RetryPolicy.none}
    if kind == "sync":
        with qa.Client(**options) as client:
            with pytest.raises(qa.ServerError):
                client.list_models(diagnostics=diag)
            assert diag.request_id == "req-earlier"
            with pytest.raises(qa.QAError) as caught:
                call(client, diag)
    else:

        async def run() -> pytest.ExceptionInfo[qa.QAError]:
            async with qa.AsyncClient(**options) as client:
                with pytest.raises(qa.ServerError):
                    await client.list_models(diagnostics=diag)
                assert diag.request_id == "req-earlier"
                with pytest.raises(qa.QAError) as caught:
                    await call(client, diag)
                return caught

        caught = asyncio.run(run())
    assert type(caught.value) is error, caught.value
    assert_unsent(caught.value, diag)


@pytest.mark.parametrize("kind", KINDS)
def test_a_call_on_a_closed_client_fills_the_diagnostics_passed(svc: FakeService, kind: str) -> None:
    served_once(svc)
    diag = qa.Diagnostics()
    options: dict[str, Any] = {"base_url": svc.url, "trust_env": False, "retry": qa.RetryPolicy.none}
    if kind == "sync":
        client = qa.Client(**options)
        with pytest.raises(qa.ServerError):
            client.list_models(diagnostics=diag)
        client.close()
        with pytest.raises(qa.ClientClosed) as caught:
            client.ask("x", Toxic, diagnostics=diag)
    else:

        async def run() -> pytest.ExceptionInfo[qa.ClientClosed]:
            client = qa.AsyncClient(**options)
            with pytest.raises(qa.ServerError):
                await client.list_models(diagnostics=diag)
            await client.aclose()
            with pytest.raises(qa.ClientClosed) as caught:
                await client.ask("x", Toxic, diagnostics=diag)
            return caught

        caught = asyncio.run(run())
    assert_unsent(caught.value, diag)


def test_a_submitted_call_cancelled_before_it_started_fills_the_diagnostics_passed(svc: FakeService) -> None:
    served_once(svc)
    diag = qa.Diagnostics()
    with qa.Client(base_url=svc.url, trust_env=False, retry=qa.RetryPolicy.none, max_workers=1) as client:
        with pytest.raises(qa.ServerError):
            client.list_models(diagnostics=diag)
        svc.script(hang())
        busy = client.submit(client.list_models)  # holds the one worker
        assert svc.wait_for_requests(2)
        queued = client.submit(client.ask, "x", Toxic, diagnostics=diag)
        assert queued.cancel()
        with pytest.raises(qa.Canceled, match="before it started") as caught:
            queued.result(timeout=BOUND)
        svc.release()
        busy.result(timeout=BOUND)
    assert_unsent(caught.value, diag)


# -- hooks= read as configuration.md reads every option ---------------------------------------


class _ItemsRaise(dict):  # type: ignore[type-arg]
    def items(self) -> Any:
        raise ValueError(f"no items for {KEY}")


class _IterRaises:
    def __iter__(self) -> Any:
        raise ValueError(f"cannot iterate {KEY}")


class _Stage(str):
    """A stage name whose own methods lie or raise: it must be read as its text."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("__eq__ called")

    def __hash__(self) -> int:
        return 7


def made(kind: str, hooks: object, url: str = "http://127.0.0.1:1") -> None:
    options: dict[str, Any] = {"base_url": url, "api_key": KEY, "trust_env": False, "hooks": hooks}
    if kind == "sync":
        qa.Client(**options).close()
    else:
        qa.AsyncClient(**options)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("hooks", "expected"),
    [
        (_ItemsRaise(), "hooks could not be read: reading its items raised ValueError"),
        ({"before_attempt": _IterRaises()}, "hooks['before_attempt'] could not be read: iterating it raised"),
    ],
    ids=["items raise", "list raises"],
)
def test_hooks_that_raise_as_they_are_read_are_invalid_option_without_the_key(
    kind: str, hooks: object, expected: str
) -> None:
    with pytest.raises(qa.InvalidOption) as caught:
        made(kind, hooks)
    assert str(caught.value).startswith(expected), caught.value
    assert KEY[3:11] not in str(caught.value)
    assert isinstance(caught.value.__cause__, ValueError)


@pytest.mark.parametrize("kind", KINDS)
def test_a_stage_named_by_a_str_subclass_is_read_as_its_text(svc: FakeService, kind: str) -> None:
    seen: list[str] = []
    hooks = {_Stage("before_attempt"): [lambda event: seen.append(event.stage)]}
    options: dict[str, Any] = {"base_url": svc.url, "trust_env": False, "hooks": hooks}
    if kind == "sync":
        with qa.Client(**options) as client:
            client.list_models()
    else:

        async def run() -> None:
            async with qa.AsyncClient(**options) as client:
                await client.list_models()

        asyncio.run(run())
    assert seen == ["before_attempt"]


class _KeyedHook:
    """A hook that holds the key (as a partial bound to it would), and shows it in its repr."""

    def __call__(self, event: qa.HookEvent) -> None:
        pass

    def __repr__(self) -> str:
        return f"KeyedHook({KEY})"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("hooks", "expected"),
    [
        (_KeyedHook(), "hooks must be a mapping"),
        ({"before_attempt": _KeyedHook()}, "hooks['before_attempt'] must be a list of functions"),
        ({"before_attempt": [_KeyedHook(), KEY]}, "hooks['before_attempt'] holds something that is not"),
        ({KEY: [_KeyedHook()]}, "hooks: unknown stage"),
    ],
    ids=["not a mapping", "not a list", "not a function", "not a stage"],
)
def test_a_refused_hooks_message_never_shows_the_key(kind: str, hooks: object, expected: str) -> None:
    with pytest.raises(qa.InvalidOption) as caught:
        made(kind, hooks)
    assert str(caught.value).startswith(expected), caught.value
    assert KEY[3:11] not in str(caught.value), caught.value
    assert "[redacted]" in str(caught.value), caught.value

"""Property: arbitrary Python values at every public entry point give a result or a clear error.

An outside audit of the rule "bad input gets a clear error of the library's own hierarchy, never
a raw KeyError, TypeError, ValueError, AttributeError, JSONDecodeError or http.client exception;
nothing is left half-done". Hypothesis throws values of every kind (None, bools, huge and negative
ints, nan and infinities, empty, NUL, surrogate and very long strings, bytes, containers,
subclasses of str, int, float and dict, objects of no known type) at:

* each keyword option of ``Client(...)`` and ``AsyncClient(...)``, the others left default;
* ``RetryPolicy(...)``'s fields, ``RateLimit(...)`` and ``.split(n)``, ``RetryBudget(...)``;
* the question types, ``Questions`` classes made with ``type(...)``, ``Request`` and
  ``NamedQuestion``;
* ``ask``, ``core``, ``list_models`` and ``submit`` with each per-call option, through both
  clients (over ``MockTransport``, and over a real socket to ``FakeService``);
* ``qa_min.testing``'s ``reply``, ``delay`` and ``FakeService``, where ValueError and TypeError
  naming the argument are the documented errors.

For each example either the call works, or it raises a ``qa.QAError`` subclass (a
``ValidationError`` where the value is refused before anything is sent) whose message names the
argument; it ends within its bound; and no thread (nor, over sockets, socket) outlives it.
Hand-written cases are in test_api_audit.py and test_config_audit.py; what the fuzzing found
that the library does not yet do is described in the audit's report, not held here.

Every property is derandomized with no example database: each run tries the same examples.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import math
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Callable, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import BOUND, SleepRecorder, no_sleep, open_sockets, wait_until

import qa_min as qa
from qa_min import testing
from qa_min.testing import FakeService, MockTransport

loose: Any = qa  # the API without its types, to pass what mypy would refuse
KINDS = ["sync", "async"]
URL = "http://qa.test"
CALL_TIMEOUT = 5.0  # bounds each call that is not itself fuzzing timeout=


def fuzz(examples: int) -> settings:
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# -- the values -----------------------------------------------------------------------------


class Str(str):
    pass


class Int(int):
    pass


class Float(float):
    pass


class Dict(dict):  # type: ignore[type-arg]
    pass


class Opaque:
    """An object of no type the library knows, with a repr that works."""

    def __repr__(self) -> str:
        return "<Opaque>"


class Shouty(enum.Enum):
    a = "A"


class Hostile(Exception):
    """What a hostile value's one overridden method raises."""


def _raising(name: str) -> Callable[..., Any]:
    def method(self: object, *args: object, **kwargs: object) -> Any:
        raise Hostile(f"{name} of a hostile {type(self).__name__}")

    return method


def hostile(base: type, dunder: str) -> type:
    """A subclass of ``base`` whose ``dunder`` (and only it) raises ``Hostile``."""
    body: dict[str, Any] = {dunder: _raising(dunder)}
    if dunder == "__eq__":
        body["__hash__"] = base.__hash__  # defining __eq__ alone would make it unhashable
    return type(f"Hostile{base.__name__.capitalize()}_{dunder.strip('_')}", (base,), body)


class Headers(Mapping[str, str]):
    """A Mapping of no known type, its methods all written by hand."""

    def __init__(self, fields: dict[str, str]) -> None:
        self._fields = fields

    def __getitem__(self, key: str) -> str:
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


NUMBER_DUNDERS = [
    "__index__",
    "__int__",
    "__float__",
    "__eq__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__bool__",
]
NUMBER_DUNDERS += ["__hash__", "__str__", "__format__", "__abs__", "__neg__", "__round__", "__trunc__"]
STR_DUNDERS = ["__eq__", "__hash__", "__str__", "__iter__", "__len__", "__getitem__", "__contains__"]
STR_DUNDERS += [
    "__format__",
    "__add__",
    "__mod__",
    "__lt__",
    "lower",
    "encode",
    "strip",
    "split",
    "startswith",
]
MAP_DUNDERS = ["__iter__", "__len__", "__getitem__", "__contains__", "items", "keys", "values", "get"]
MAP_DUNDERS += ["__eq__", "__bool__"]


def _hostile_values() -> st.SearchStrategy[object]:
    """Subclasses of int, float, str and dict and a Mapping, each with ONE method that raises."""
    ints = st.builds(
        lambda dunder, value: hostile(int, dunder)(value),
        st.sampled_from(NUMBER_DUNDERS),
        st.sampled_from([0, 1, 3, 30, -1]),
    )
    floats = st.builds(
        lambda dunder, value: hostile(float, dunder)(value),
        st.sampled_from(NUMBER_DUNDERS),
        st.sampled_from([0.5, 2.0, 30.0, 0.0]),
    )
    strs = st.builds(
        lambda dunder, value: hostile(str, dunder)(value),
        st.sampled_from(STR_DUNDERS),
        st.sampled_from(["judge", "X-A", "v", "", "sk-key-123456", "http://qa.test"]),
    )
    fields = st.sampled_from([{"X-A": "v"}, {}, {"Accept": "text/plain"}])
    dicts = st.builds(
        lambda dunder, items: hostile(dict, dunder)(items), st.sampled_from(MAP_DUNDERS), fields
    )
    mappings = st.builds(
        lambda dunder, items: hostile(Headers, dunder)(items), st.sampled_from(MAP_DUNDERS), fields
    )
    texts = st.one_of(strs, st.sampled_from(["X-A", "v"]))
    pairs = st.lists(st.tuples(texts, texts), min_size=1, max_size=2)  # extra_headers=, headers=
    return st.one_of(ints, floats, strs, dicts, mappings, pairs)


hostiles = _hostile_values()


SPECIAL: list[object] = [
    Str("judge"),
    Str(""),
    Int(3),
    Int(-3),
    Float(0.5),
    Float(math.nan),
    Dict(a=1),
    Opaque(),
    object,
    Shouty,
    Shouty.a,
    print,
    1j,
    10**400,
    -(10**400),
    10**5000,
    2**64,
    "x" * 20_000,
    "\x00",
    "\ud800",
    "\udce9abc",
    math.nan,
    math.inf,
    -math.inf,
    -0.0,
    bytearray(b"ab"),
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=12),
    st.binary(max_size=8),
    st.sampled_from(SPECIAL),
    hostiles,
)
values = st.one_of(
    scalars,
    hostiles,
    st.lists(st.tuples(scalars, scalars), max_size=2),
    st.lists(scalars, max_size=3),
    st.tuples(scalars, scalars),
    st.dictionaries(st.text(max_size=4), scalars, max_size=3),
    st.frozensets(st.integers(), max_size=3),
)


# -- running a call on either client and checking what is left behind ------------------------


def threads() -> set[threading.Thread]:
    return set(threading.enumerate())


@contextmanager
def nothing_left(sockets: bool = False) -> Iterator[None]:
    """Fails when a thread (or, with ``sockets``, a socket) made inside outlives the block."""
    before_threads = threads()
    before_sockets = open_sockets() if sockets else -1
    yield
    # A worker told to stop may take a moment to end: polled, bounded.
    assert wait_until(lambda: not (threads() - before_threads)), threads() - before_threads
    if before_sockets >= 0:
        assert wait_until(lambda: open_sockets() <= before_sockets), (open_sockets(), before_sockets)


def run(kind: str, options: dict[str, Any], call: Callable[[Any], Any]) -> Any:
    """``call(client)`` on a new client of ``kind`` made with ``options``; awaited for async."""
    if kind == "sync":
        with qa.Client(**options) as client:
            return call(client)

    async def main() -> Any:
        async with qa.AsyncClient(**options) as client:
            result = call(client)
            return await result if asyncio.iscoroutine(result) else result

    return asyncio.run(main())


async def no_async_sleep(seconds: float) -> None:
    """AsyncClient's sleep seam: backoff without waiting."""


def mock_options(kind: str = "sync", **options: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "base_url": URL,
        "transport": MockTransport(),
        "trust_env": False,
        "sleep": no_sleep if kind == "sync" else no_async_sleep,
    }
    base.update(options)
    return base


def attempt(make: Callable[[], Any], *errors: type[BaseException]) -> tuple[Any, Optional[BaseException]]:
    """``(make(), None)``, or ``(None, error)`` when it raised one of ``errors`` (QAError by default)."""
    expected = errors or (qa.QAError,)
    try:
        return make(), None
    except expected as exc:
        return None, exc


def names(error: BaseException, *words: str) -> bool:
    text = str(error).lower()
    return any(word.lower() in text for word in words)


class Toxic(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


def ask(client: Any) -> Any:
    return client.ask("Some text", Toxic, timeout=CALL_TIMEOUT)


# -- Client and AsyncClient options ---------------------------------------------------------

OPTIONS = [
    "api_key",
    "base_url",
    "model",
    "retry",
    "extra_headers",
    "timeout",
    "max_idle_per_host",
    "idle_timeout",
    "max_response_bytes",
    "max_workers",
    "ssl_context",
    "proxy",
    "trust_env",
    "retry_budget",
    "rate_limit",
    "sleep",
    "random",
    "hooks",
    "transport",
]
# How a refusal names each option, when not by its own name.
OPTION_WORDS = {"base_url": ("base_url", "base URL", "no API key"), "proxy": ("proxy",)}


def refused_naming(error: BaseException, option: str) -> None:
    # InvalidBaseUrl and MissingApiKey are ConfigurationErrors, the others ValidationErrors.
    assert isinstance(error, (qa.ValidationError, qa.ConfigurationError)), repr(error)
    assert names(error, *OPTION_WORDS.get(option, (option,))), (option, str(error))


@pytest.mark.parametrize(
    ("kind", "option"),
    [(kind, option) for kind in KINDS for option in OPTIONS if (kind, option) != ("async", "max_workers")],
)
def test_any_value_of_one_client_option_is_taken_or_refused_naming_it(kind: str, option: str) -> None:

    @fuzz(12)
    @given(value=st.one_of(values, hostiles))
    def check(value: object) -> None:
        options = mock_options(kind, **{option: value})
        if option == "transport" and value is None:
            return  # None means sockets: qa.test would be looked up in DNS
        if option in ("sleep", "random") and callable(value):
            return  # a function of the caller's own: what it does is its own (see the report)
        with nothing_left():
            made, exc = attempt(lambda: run(kind, options, lambda client: None))
            if exc is not None:
                refused_naming(exc, option)
                return
            assert made is None
            try:
                run(kind, options, ask)
            except qa.QAError:
                pass  # a client made with it may still fail its call: max_response_bytes=1

    check()


@pytest.mark.parametrize("kind", KINDS)
def test_a_random_seam_returning_a_fraction_gives_a_working_retry(kind: str) -> None:
    # The documented contract of random=: a float in [0, 1).
    @fuzz(10)
    @given(fraction=st.floats(min_value=0.0, max_value=1.0, exclude_max=True))
    def check(fraction: float) -> None:
        script = [testing.reply(503), None]
        transport = MockTransport(lambda request: script.pop(0))
        options = mock_options(kind, transport=transport, random=lambda: fraction)
        with nothing_left():
            result = run(kind, options, ask)
        assert result.answers.toxic in (True, False)
        assert len(transport.requests) == 2

    check()


# -- RetryPolicy, RateLimit, RetryBudget ----------------------------------------------------


def retry_fields() -> list[str]:
    return [field.name for field in dataclasses.fields(qa.RetryPolicy)]


@pytest.mark.parametrize("field", retry_fields())
def test_any_retry_policy_field_is_taken_or_refused_naming_it(field: str) -> None:
    @fuzz(15)
    @given(value=values)
    def check(value: object) -> None:
        policy, exc = attempt(lambda: loose.RetryPolicy(**{field: value}))
        if exc is not None:
            assert isinstance(exc, qa.InvalidOption), repr(exc)
            assert field in str(exc), str(exc)
            return
        # One taken is used by a call that is retried once, then answered.
        script = [testing.reply(503), None]
        transport = MockTransport(lambda request: script.pop(0) if script else None)
        with nothing_left():
            try:
                run("sync", mock_options(transport=transport, retry=policy), ask)
            except qa.QAError:
                pass  # a policy that retries no 503 ends in ServerError

    check()


@fuzz(60)
@given(per_second=values, burst=values, adaptive=values)
def test_any_rate_limit_is_taken_or_refused_naming_the_argument(
    per_second: object, burst: object, adaptive: object
) -> None:
    limit, exc = attempt(lambda: loose.RateLimit(per_second, burst=burst, adaptive=adaptive))
    if exc is not None:
        assert isinstance(exc, qa.InvalidOption), repr(exc)
        assert names(exc, "per_second", "burst", "adaptive"), str(exc)
        return
    assert isinstance(limit, qa.RateLimit)
    assert limit == loose.RateLimit(per_second, burst=burst, adaptive=adaptive)


@fuzz(40)
@given(limit=st.sampled_from([qa.RateLimit(), qa.RateLimit(190, burst=9), qa.RateLimit(1e-300)]), n=values)
def test_any_split_is_a_rate_limit_or_refused_naming_n(limit: qa.RateLimit, n: object) -> None:
    share, exc = attempt(lambda: limit.split(n))  # type: ignore[arg-type]
    if exc is not None:
        assert isinstance(exc, qa.InvalidOption), repr(exc)
        assert names(exc, "split n", "per_second"), str(exc)
        return
    assert isinstance(share, qa.RateLimit)
    assert share.adaptive is limit.adaptive


@fuzz(40)
@given(capacity=values, cost=values, refund=values)
def test_any_retry_budget_is_taken_or_refused_naming_the_argument(
    capacity: object, cost: object, refund: object
) -> None:
    budget, exc = attempt(lambda: loose.RetryBudget(capacity, cost, refund))
    if exc is not None:
        assert isinstance(exc, qa.InvalidOption), repr(exc)
        assert names(exc, "capacity", "retry_cost", "success_refund"), str(exc)
        return
    assert isinstance(budget.try_spend(), bool)


# -- questions and requests -----------------------------------------------------------------

QUESTION_WORDS = ("question", "text", "option", "level", "Choice", "Score", "YesNo", "member", "criteria")


def question_or_refusal(make: Callable[[], object]) -> Optional[object]:
    outcome = attempt(make)
    made: object = outcome[0]
    exc = outcome[1]
    if exc is not None:
        assert isinstance(exc, qa.InvalidQuestion), repr(exc)
        assert names(exc, *QUESTION_WORDS), str(exc)
    return made


@fuzz(60)
@given(yes=values, no=values)
def test_any_yes_no_texts_make_a_question_or_invalid_question(yes: object, no: object) -> None:
    question_or_refusal(lambda: loose.YesNo(yes, no))


@fuzz(60)
@given(
    options=st.one_of(
        values,
        st.dictionaries(st.one_of(st.text(max_size=4), st.integers(), st.none()), values, max_size=3),
        st.lists(st.one_of(st.text(max_size=4), values), max_size=3),
    )
)
def test_any_choice_or_score_argument_makes_a_question_or_invalid_question(options: object) -> None:
    question_or_refusal(lambda: loose.Choice(options))
    question_or_refusal(lambda: loose.Score(options))


@pytest.mark.parametrize("kind", KINDS)
def test_any_questions_class_made_with_type_is_asked_or_refused_naming_it(kind: str) -> None:
    @fuzz(20)
    @given(
        name=st.one_of(st.text(max_size=8), st.sampled_from(["__init__", "_qa_spec", "model"])), attr=values
    )
    def check(name: str, attr: object) -> None:
        made, exc = attempt(lambda: type("Made", (qa.Questions,), {name: qa.YesNo("y", "n"), "other": attr}))
        if exc is not None:
            assert isinstance(exc, qa.ValidationError), repr(exc)
            assert names(exc, "name", "question", "reserved"), str(exc)
            return
        with nothing_left():
            result, exc = attempt(
                lambda: run(
                    kind, mock_options(kind), lambda client: client.ask("s", made, timeout=CALL_TIMEOUT)
                )
            )
            if exc is not None:
                assert isinstance(exc, qa.ValidationError), repr(exc)
                assert names(exc, "question", "name"), str(exc)
                return
        assert result.answers is not None

    check()


@fuzz(60)
@given(state=values, questions=values, model=values, name=values, question=values)
def test_any_request_parts_make_a_request_or_a_validation_error_naming_the_part(
    state: object, questions: object, model: object, name: object, question: object
) -> None:
    parts: list[tuple[Callable[[], object], tuple[str, ...]]] = [
        (lambda: loose.Request(state, [qa.NamedQuestion("a", qa.YesNo("y", "n"))]), ("state",)),
        (lambda: loose.Request("s", questions), ("question",)),
        (lambda: loose.Request("s", [qa.NamedQuestion("a", qa.YesNo("y", "n"))], model=model), ("model",)),
        (lambda: loose.Request("s", [loose.NamedQuestion(name, qa.YesNo("y", "n"))]), ("name",)),
        (lambda: loose.Request("s", [("a", question)]), ("YesNo, Choice or Score",)),
    ]
    for make, words in parts:
        made, exc = attempt(make)
        if exc is not None:
            assert isinstance(exc, qa.ValidationError), repr(exc)
            assert names(exc, *words), (words, str(exc))
        else:
            assert isinstance(made, qa.Request)


# -- the operations and their per-call options ----------------------------------------------

PER_CALL = ["model", "retry", "diagnostics", "cancel", "timeout"]


def operation(name: str, keyword: str, value: object) -> Callable[[Any], Any]:
    request = qa.Request("s", [qa.NamedQuestion("a", qa.YesNo("y", "n"))])
    options = {keyword: value}
    if keyword != "timeout":
        options["timeout"] = CALL_TIMEOUT
    if name == "ask":
        return lambda client: client.ask("s", Toxic, **options)
    if name == "core":
        return lambda client: client.core(request, **options)
    if name == "list_models":
        return lambda client: client.list_models(**options)
    # submit: the threaded client's executor runs ask with the option
    return lambda client: client.submit(client.ask, "s", Toxic, **options).result(BOUND)


def per_call_outcome(kind: str, keyword: str, op: str, value: object, options: dict[str, Any]) -> None:
    result, exc = attempt(lambda: run(kind, options, operation(op, keyword, value)))
    if exc is not None and keyword == "timeout" and isinstance(exc, qa.Canceled):
        # A valid timeout too short for the call (5e-54 s): it expires, as it should.
        assert "the call's timeout of" in str(exc), str(exc)
        return
    if exc is not None and keyword == "model" and isinstance(exc, qa.NotFound):
        # A valid model name the service does not serve ("0"): its answer, not a refusal.
        assert "model" in str(exc), str(exc)
        return
    if exc is not None:
        assert isinstance(exc, qa.ValidationError), repr(exc)
        assert names(exc, keyword), (keyword, str(exc))
        return
    assert result is not None


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("keyword", PER_CALL)
def test_any_per_call_option_works_or_is_refused_naming_it(kind: str, keyword: str) -> None:
    ops = ["ask", "core", "list_models"] + (["submit"] if kind == "sync" else [])
    if keyword == "model":
        ops = [op for op in ops if op != "list_models"]

    @fuzz(10)
    @given(value=values, op=st.sampled_from(ops))
    def check(value: object, op: str) -> None:
        with nothing_left():
            per_call_outcome(kind, keyword, op, value, mock_options(kind))

    check()


@pytest.mark.parametrize("kind", KINDS)
def test_any_per_call_option_over_a_socket_leaves_no_socket_behind(kind: str) -> None:
    with FakeService() as svc:

        @fuzz(15)
        @given(value=values, keyword=st.sampled_from(PER_CALL))
        def check(value: object, keyword: str) -> None:
            sleep = no_sleep if kind == "sync" else no_async_sleep
            options = {"base_url": svc.url, "trust_env": False, "sleep": sleep}
            with nothing_left(sockets=True):
                per_call_outcome(kind, keyword, "ask", value, options)

        check()


@pytest.mark.parametrize("kind", KINDS)
def test_any_state_or_questions_argument_is_asked_or_refused_and_nothing_sent(kind: str) -> None:
    @fuzz(25)
    @given(state=values, questions=st.one_of(values, st.just(Toxic)))
    def check(state: object, questions: object) -> None:
        transport = MockTransport()
        with nothing_left():
            options = mock_options(kind, transport=transport)
            _, exc = attempt(lambda: run(kind, options, lambda c: c.ask(state, questions, timeout=5)))
        if exc is not None:
            assert isinstance(exc, qa.ValidationError), repr(exc)
            assert names(exc, "state", "question", "Questions"), str(exc)
            assert transport.requests == []

    check()


@pytest.mark.parametrize("kind", KINDS)
def test_anything_but_a_request_given_to_core_is_refused_naming_it(kind: str) -> None:
    @fuzz(15)
    @given(request=values)
    def check(request: object) -> None:
        transport = MockTransport()
        with nothing_left(), pytest.raises(qa.ValidationError) as caught:
            run(kind, mock_options(kind, transport=transport), lambda c: c.core(request, timeout=5))
        assert names(caught.value, "Request", "request"), str(caught.value)
        assert transport.requests == []

    check()


@fuzz(15)
@given(fn=values, args=st.lists(values, max_size=2))
def test_submit_of_anything_but_an_operation_is_invalid_option(fn: object, args: list[object]) -> None:
    with (
        nothing_left(),
        qa.Client(**mock_options()) as client,
        pytest.raises(qa.InvalidOption, match="submit\\(\\) runs this client's ask, core or list_models"),
    ):
        client.submit(fn, *args)  # type: ignore[arg-type]


# -- qa_min.testing: ValueError and TypeError are its documented errors ----------------------


def check_testing_call(make: Callable[[], object], *words: str) -> None:
    _, exc = attempt(make, ValueError, TypeError)
    if exc is not None:
        # ValidationError is a ValueError too; none of the library's other errors is documented.
        assert not isinstance(exc, qa.QAError) or isinstance(exc, qa.ValidationError), repr(exc)
        assert names(exc, *words), (words, str(exc))


@fuzz(60)
@given(status=values, body=values, headers=values, name=values, value=values)
def test_reply_makes_a_step_or_raises_value_or_type_error_naming_the_argument(
    status: object, body: object, headers: object, name: object, value: object
) -> None:
    any_reply: Any = testing.reply
    check_testing_call(lambda: any_reply(status), "status")
    check_testing_call(lambda: any_reply(200, body), "body", "JSON", "serializable")
    check_testing_call(lambda: any_reply(200, headers=headers), "header")
    check_testing_call(lambda: any_reply(200, headers=[(name, "v")]), "header")
    check_testing_call(lambda: any_reply(200, headers=[("X-A", value)]), "header")


@fuzz(60)
@given(seconds=values)
def test_delay_makes_a_step_or_raises_value_or_type_error_naming_seconds(seconds: object) -> None:
    any_delay: Any = testing.delay
    check_testing_call(lambda: any_delay(seconds), "seconds")


FAKE_OPTIONS = ["api_key", "models", "prefix", "port", "rate_limit", "retry_after", "announce"]


@pytest.mark.parametrize("option", FAKE_OPTIONS)
def test_fake_service_starts_or_raises_value_or_type_error_naming_the_argument(option: str) -> None:
    @fuzz(8)
    @given(value=values)
    def check(value: object) -> None:
        def start() -> None:
            any_fake: Any = FakeService
            with any_fake(**{option: value}) as svc:
                assert svc.url.startswith("http://")

        with nothing_left(sockets=True):
            check_testing_call(start, option, "rate", "burst")

    check()


def test_a_cancel_token_of_any_state_gives_canceled_or_a_result() -> None:
    @fuzz(10)
    @given(cancelled=st.booleans(), kind=st.sampled_from(KINDS))
    def check(cancelled: bool, kind: str) -> None:
        token = qa.CancelToken()
        if cancelled:
            token.cancel()
        with nothing_left():
            result, exc = attempt(
                lambda: run(kind, mock_options(kind), lambda c: c.ask("s", Toxic, cancel=token, timeout=5)),
                qa.Canceled,
            )
            if exc is not None:
                assert cancelled
                assert "cancel" in str(exc).lower(), str(exc)
                return
        assert not cancelled
        assert result.answers.toxic in (True, False)

    check()


# -- defects the fuzzing found, each test failing without its fix ------------------------------


class Boom(Exception):
    pass


class BadRepr:
    def __repr__(self) -> str:
        raise Boom("repr")


class BadEq:
    def __repr__(self) -> str:
        return "<BadEq>"

    def __eq__(self, other: object) -> bool:
        raise Boom("eq")

    __hash__ = object.__hash__


def retried_once(drawn: object, kind: str, sleep: Any = None) -> Any:
    """One call answered 503 then 200, the backoff's jitter drawn by ``random=lambda: drawn``."""
    script = [testing.reply(503), None]
    transport = MockTransport(lambda request: script.pop(0))
    extra = {} if sleep is None else {"sleep": sleep}
    return run(kind, mock_options(kind, transport=transport, random=lambda: drawn, **extra), ask)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("drawn", ["x", None, [0.5], True, 1, 1.0, -0.001, 5.0, math.nan, math.inf])
def test_a_random_seam_returning_anything_but_a_number_in_0_1_is_refused_naming_random(
    kind: str, drawn: object
) -> None:
    # docs/configuration.md: random= returns a float in [0, 1). A str gave a raw TypeError from
    # the backoff's arithmetic; 5.0 asked sleep for -0.125 s, nan for nan, inf for -inf.
    with pytest.raises(qa.InvalidOption, match=r"random must return a number in \[0, 1\), returned "):
        retried_once(drawn, kind)


@pytest.mark.parametrize("drawn", [0, 0.0, 0.5, math.nextafter(1.0, 0.0)])
def test_a_random_seam_returning_the_ends_of_0_1_is_used(drawn: float) -> None:
    slept = SleepRecorder()
    assert retried_once(drawn, "sync", sleep=slept).answers.toxic in (True, False)
    default = qa.RetryPolicy()
    full = default.backoff_initial_ms / 1000
    assert len(slept.seconds) == 1
    assert full * (1 - default.backoff_jitter) <= slept.seconds[0] <= full


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("option", ["timeout", "max_workers", "api_key", "retry", "hooks"])
def test_an_option_whose_repr_raises_is_refused_naming_the_option(kind: str, option: str) -> None:
    # _typing.short() caught only the ValueError of a too-long int: the object's own exception
    # replaced the InvalidOption.
    if kind == "async" and option == "max_workers":
        pytest.skip("AsyncClient has no max_workers")
    with pytest.raises(qa.InvalidOption, match=option) as caught:
        run(kind, mock_options(kind, **{option: BadRepr()}), lambda client: None)
    if option != "api_key":  # a key is never quoted
        assert "whose repr() raised" in str(caught.value)


@pytest.mark.parametrize("kind", KINDS)
def test_a_proxy_whose_eq_raises_is_refused_naming_proxy(kind: str) -> None:
    # It was compared with "" before its type was checked.
    with pytest.raises(qa.InvalidOption, match="proxy"):
        run(kind, mock_options(kind, proxy=BadEq()), lambda client: None)


def test_reply_names_the_argument_holding_an_int_too_long_to_print() -> None:
    # The message quoted it with repr/str, which raises past 4,300 digits: a ValueError that
    # named nothing (3.10's property run drew such a header value).
    huge = 10**5000
    with pytest.raises(ValueError, match="status must be within 200-599, not an int of 16610 bits"):
        testing.reply(huge)
    headers: Any = [("X-Big", huge)]
    with pytest.raises(TypeError, match=r"headers must be a sequence of .* not a list too long to print"):
        testing.reply(200, headers=headers)


# -- values whose own methods raise: read as their base type, or refused naming the argument --


def key_raising(text: str) -> type:
    """A Mapping of headers whose iteration raises an error quoting ``text`` (a key, say)."""

    def method(self: object) -> Any:
        raise ValueError(f"no iterating {text}")

    return type("KeyRaising", (Headers,), {"__iter__": method})


@pytest.mark.parametrize("kind", KINDS)
def test_extra_headers_whose_iteration_raises_is_refused_naming_it_without_the_key(kind: str) -> None:
    # Its own exception came out of Client(): a Hostile, or here a ValueError quoting the key.
    key = "sk-secret-0123456789"
    headers = key_raising(key)({"X-A": "v"})
    with pytest.raises(qa.InvalidOption) as caught:
        run(kind, mock_options(kind, api_key=key, extra_headers=headers), lambda client: None)
    text = str(caught.value)
    assert text.startswith(
        "extra_headers could not be read: iterating it raised ValueError('no iterating "
    ), text
    assert "0123456789" not in text, text
    assert "[redacted]" in text, text
    assert isinstance(caught.value.__cause__, ValueError)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dunder", ["encode", "lower", "__iter__"])
def test_extra_headers_of_str_subclasses_are_sent_as_their_text(kind: str, dunder: str) -> None:
    # The name's own lower() or encode() raised from Client() or from the first call.
    text = hostile(str, dunder)
    transport = MockTransport()
    options = mock_options(kind, transport=transport, extra_headers=[(text("X-Team"), text("blue"))])
    assert run(kind, options, ask).answers.toxic in (True, False)
    assert transport.requests[0].headers["X-Team"] == "blue"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dunder", ["strip", "isascii", "isprintable", "encode", "__format__", "__str__"])
def test_an_api_key_of_a_str_subclass_is_sent_as_its_text(kind: str, dunder: str) -> None:
    # configuration.md: a str subclass given for an option is read through str. The key's own
    # strip() (is it blank?), isascii()/isprintable() (can a header carry it?) and __format__
    # (the Authorization value) must never run.
    transport = MockTransport()
    options = mock_options(kind, transport=transport, api_key=hostile(str, dunder)("sk-subclass-0123"))
    assert run(kind, options, ask).answers.toxic in (True, False)
    assert transport.requests[0].headers["Authorization"] == "Bearer sk-subclass-0123"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("base", "dunder"), [(int, "__gt__"), (float, "__gt__")])
def test_a_timeout_of_a_number_subclass_is_read_as_its_value(kind: str, base: type, dunder: str) -> None:
    # Comparing it with 0 or TIMEOUT_MAX called its own __gt__/__lt__, whose exception came out.
    timeout = hostile(base, dunder)(5)
    client_timeout = mock_options(kind, timeout=timeout)
    assert run(kind, client_timeout, ask).answers.toxic in (True, False)
    per_call = mock_options(kind)
    assert run(kind, per_call, lambda c: c.ask("s", Toxic, timeout=timeout)).answers.toxic in (True, False)


@pytest.mark.parametrize("dunder", ["__lt__", "__int__"])
def test_max_workers_of_an_int_subclass_is_read_as_its_value(dunder: str) -> None:
    # The threaded client's only: its check called __lt__, then int(max_workers) __int__.
    with qa.Client(**mock_options(max_workers=hostile(int, dunder)(2))) as client:
        assert client.submit(client.ask, "s", Toxic, timeout=CALL_TIMEOUT).result(BOUND).answers.toxic in (
            True,
            False,
        )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dunder", ["encode", "lstrip", "__contains__", "__iter__", "__eq__", "__hash__"])
def test_base_url_and_proxy_of_str_subclasses_are_read_as_their_text(kind: str, dunder: str) -> None:
    # configuration.md: a str subclass given for an option is read through str; none of its own
    # methods is called. The URL parser called encode(), lstrip(), __contains__, __iter__ and
    # __hash__ of base_url and proxy, and proxy="" was compared through its own __eq__.
    text = hostile(str, dunder)
    transport = MockTransport()
    options = mock_options(kind, transport=transport, base_url=text(URL + "/prefix"), proxy=text(""))
    assert run(kind, options, ask).answers.toxic in (True, False)
    assert transport.requests[0].path == "/prefix/v1/core"
    run(kind, mock_options(kind, proxy=text("http://proxy.test:3128")), lambda client: None)  # parsed


@pytest.mark.parametrize("base", [int, float])
@pytest.mark.parametrize("dunder", ["__ge__", "__lt__", "__float__"])
def test_a_retry_budget_of_number_subclasses_is_read_as_its_values(base: type, dunder: str) -> None:
    # Its range check (0 <= value < 1e15) and float(value) must not call the value's own methods.
    value = hostile(base, dunder)(10)
    budget = qa.RetryBudget(value, value, value)
    assert (budget.capacity, budget.retry_cost, budget.success_refund) == (10.0, 10.0, 10.0)
    assert type(budget.capacity) is float
    with pytest.raises(qa.InvalidOption, match=r"^RetryBudget capacity must be a number from 0 to below"):
        qa.RetryBudget(hostile(base, dunder)(-1))


@pytest.mark.parametrize("kind", KINDS)
def test_retry_policy_and_rate_limit_of_number_subclasses_are_read_as_their_values(kind: str) -> None:
    # RetryPolicy's range check called __le__/__ge__, RateLimit's __abs__ and __lt__.
    policy = qa.RetryPolicy(
        max_retries=hostile(int, "__le__")(2), backoff_jitter=hostile(float, "__ge__")(0.5)
    )
    limit = qa.RateLimit(hostile(float, "__gt__")(50.0), burst=hostile(int, "__abs__")(5))
    assert (type(policy.max_retries), type(policy.backoff_jitter)) == (int, float)
    assert limit == qa.RateLimit(50.0, burst=5)
    assert run(kind, mock_options(kind, retry=policy, rate_limit=limit), ask).answers.toxic in (True, False)


def test_testing_constructors_refuse_hostile_arguments_with_their_documented_errors() -> None:
    # reply(headers=) let the Mapping's own exception out; delay() and FakeService(port=) an
    # int subclass's __lt__/__le__; FakeService(retry_after=) a dict subclass's __eq__.
    with pytest.raises(
        TypeError, match=r"^headers could not be read: iterating it raised Hostile\('__iter__"
    ):
        testing.reply(200, headers=hostile(Headers, "__iter__")({"X-A": "v"}))
    with pytest.raises(
        TypeError, match=r"^headers could not be read: iterating an item raised Hostile\('__iter__"
    ):
        testing.reply(200, headers=[hostile(tuple, "__iter__")(("X-A", "v"))])
    assert testing.delay(hostile(int, "__lt__")(0)).seconds == 0
    with pytest.raises(ValueError, match="retry_after must be one of"):
        FakeService(retry_after=hostile(dict, "__eq__")())
    with FakeService(port=hostile(int, "__le__")(0)) as svc:
        assert svc.url.startswith("http://127.0.0.1:")

"""Every exception and result object survives pickle (every protocol) and copy.deepcopy.

Type, message, ``.status`` and diagnostics come through intact; a ``transport_error`` that
cannot be pickled becomes a stand-in with its type name and message, and a stand-in comes
through exactly. Of the standard library's own exceptions, only their message is qa_min's promise
(the engine tests import Dask, which changes how they pickle, only when they run). Multiprocessing relies on
this: a ``RateLimited`` raised in a ``ProcessPoolExecutor`` worker reaches the parent as itself
and the pool stays usable.

  errors: test_error_classes_are_found, test_every_error_class_round_trips,
      test_rate_limited_with_keyword_only_status, test_errors_from_real_calls_round_trip,
      test_connection_failed_from_a_real_call_round_trips,
      test_error_notes_and_attributes_round_trip, test_copy_copy_of_an_error
  diagnostics: test_diagnostics_round_trip, test_unpicklable_transport_error_becomes_a_stand_in,
      test_transport_error_that_cannot_be_loaded_becomes_a_stand_in
  values: test_retry_policy_round_trips, test_request_round_trips_and_still_works,
      test_questions_round_trip_and_decode_alike, test_answers_instance_round_trips,
      test_results_round_trip_and_stay_read_only, test_cancel_token_and_retry_budget_round_trip
  engines: test_collecting_the_engine_tests_imports_no_engine
  processes: test_rate_limited_in_a_process_pool_worker_reaches_the_parent
"""

from __future__ import annotations

import copy
import enum
import json
import multiprocessing
import pickle
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
import spawn_workers
from support import make_client

import qa_min as qa
from qa_min._diagnostics import _StandIn
from qa_min.testing import FakeService, reply

T = TypeVar("T")
PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


class Tone(enum.Enum):
    formal = "Written in a formal register"
    casual = "Written casually"


class Level(enum.Enum):
    poor = "poor"
    fair = "fair"
    good = "good"


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")
    tone = qa.Choice(Tone)
    quality = qa.Score(Level)
    lang = qa.Choice({"en": "English", "fr": "French"})
    size = qa.Score(["small", "large"])


def copies(value: T) -> Iterator[tuple[str, T]]:
    """``value`` through pickle with every protocol, then through copy.deepcopy."""
    for protocol in PROTOCOLS:
        yield f"pickle protocol {protocol}", pickle.loads(pickle.dumps(value, protocol))
    yield "deepcopy", copy.deepcopy(value)


def all_error_classes() -> list[type[qa.QAError]]:
    found: list[type[qa.QAError]] = []
    todo: list[type[qa.QAError]] = [qa.QAError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(set(found), key=lambda c: c.__name__)


def filled_diagnostics(transport_error: BaseException | None = None) -> qa.Diagnostics:
    """Diagnostics as a failed call leaves them; by default its transport error is a stand-in,
    qa_min's own (as after redaction), whose every detail qa_min promises to keep."""
    diag = qa.Diagnostics()
    diag.status, diag.body, diag.attempts = 503, '{"detail": "busy"}', 3
    if transport_error is None:
        transport_error = _StandIn("ConnectionResetError", "[Errno 104] Connection reset by peer")
    diag.transport_error = transport_error
    return diag


def assert_same_diagnostics(got: qa.Diagnostics, want: qa.Diagnostics) -> None:
    """What qa_min promises: its own fields and stand-ins exactly; of a standard-library
    transport error, an exception with the same message. (How the standard library pickles its
    own ``OSError`` subclasses at protocols 0 to 2 is its business, and Dask's ``distributed``
    changes it for the whole process: a ``ConnectionRefusedError`` may load as an ``OSError``.)"""
    assert type(got) is qa.Diagnostics
    assert (got.status, got.body, got.attempts) == (want.status, want.body, want.attempts)
    assert (got.request_id, got.history, got.headers) == (want.request_id, want.history, want.headers)
    assert (got.transport_error is None) == (want.transport_error is None)
    assert isinstance(got.transport_error, (BaseException, type(None)))
    assert str(got.transport_error) == str(want.transport_error)
    if want.transport_error is None or type(want.transport_error) is _StandIn:
        assert type(got.transport_error) is type(want.transport_error)
        assert repr(got) == repr(want)


def make_error(cls: type[qa.QAError]) -> qa.QAError:
    if issubclass(cls, (qa.APIStatusError, qa.ProxyError)):
        return cls(f"HTTP 429 from GET x ({cls.__name__})", filled_diagnostics(), status=429)
    return cls(f"it failed ({cls.__name__})", filled_diagnostics())


# -- errors ----------------------------------------------------------------------------------


def test_error_classes_are_found() -> None:
    names = {cls.__name__ for cls in all_error_classes()}
    assert {"QAError", "RateLimited", "Overloaded", "InvalidBaseUrl", "InvalidOption"} <= names
    assert len(names) >= 28


@pytest.mark.parametrize("cls", all_error_classes(), ids=lambda cls: cls.__name__)
def test_every_error_class_round_trips(cls: type[qa.QAError]) -> None:
    error = make_error(cls)
    for how, got in copies(error):
        assert type(got) is cls, how
        assert str(got) == str(error), how
        assert got.args == error.args, how
        assert got.message == error.message, how
        assert getattr(got, "status", None) == getattr(error, "status", None), how
        assert_same_diagnostics(got.diagnostics, error.diagnostics)
        assert got.diagnostics is not error.diagnostics


def test_rate_limited_with_keyword_only_status() -> None:
    # The case that broke before: Exception pickles as cls(*args), and status is keyword-only.
    error = qa.RateLimited("m", status=429)
    for how, got in copies(error):
        assert isinstance(got, qa.RateLimited), how
        assert got.status == 429, how
        assert str(got) == "m", how


def test_error_notes_and_attributes_round_trip() -> None:
    error = qa.ConnectionFailed("unreachable", filled_diagnostics())
    error.retryable = False
    error.add_note("while judging batch 7") if hasattr(error, "add_note") else None
    for how, got in copies(error):
        assert got.retryable is False, how
        assert getattr(got, "__notes__", None) == getattr(error, "__notes__", None), how


def test_copy_copy_of_an_error() -> None:
    error = make_error(qa.Overloaded)
    got = copy.copy(error)
    assert type(got) is qa.Overloaded
    assert (got.status, got.message, got.diagnostics) == (429, error.message, error.diagnostics)


@pytest.fixture
def plain(svc: FakeService) -> Iterator[qa.Client]:
    with make_client(svc.url, retry=qa.RetryPolicy(max_retries=1, backoff_initial_ms=1)) as client:
        yield client


@pytest.mark.parametrize(
    ("status", "error", "attempts"),
    [(429, qa.RateLimited, 2), (529, qa.Overloaded, 2), (404, qa.NotFound, 1), (307, qa.UnexpectedStatus, 1)],
)
def test_errors_from_real_calls_round_trip(
    svc: FakeService, plain: qa.Client, status: int, error: type[qa.APIStatusError], attempts: int
) -> None:
    svc.script(*[reply(status, {"detail": "no"})] * 2)
    with pytest.raises(error) as caught:
        plain.list_models()
    original = caught.value
    for how, got in copies(original):
        assert type(got) is error, how
        assert got.status == status, how
        assert str(got) == str(original), how
        assert got.diagnostics.attempts == attempts, how
        assert_same_diagnostics(got.diagnostics, original.diagnostics)


def test_connection_failed_from_a_real_call_round_trips() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    refused = make_client(f"http://127.0.0.1:{port}", retry=qa.RetryPolicy.none)
    with refused as client, pytest.raises(qa.ConnectionFailed) as caught:
        client.list_models()
    assert isinstance(caught.value.diagnostics.transport_error, OSError)
    for how, got in copies(caught.value):
        assert isinstance(got.diagnostics.transport_error, OSError), how
        assert_same_diagnostics(got.diagnostics, caught.value.diagnostics)


# -- diagnostics -----------------------------------------------------------------------------


def test_diagnostics_round_trip() -> None:
    refused = filled_diagnostics(ConnectionRefusedError(111, "Connection refused"))
    for diag in (qa.Diagnostics(), filled_diagnostics(), refused):
        for how, got in copies(diag):
            assert got is not diag, how
            assert_same_diagnostics(got, diag)


def test_unpicklable_transport_error_becomes_a_stand_in() -> None:
    class LocalError(OSError):  # a class pickle cannot find by name
        pass

    diag = filled_diagnostics()
    diag.transport_error = LocalError(104, "Connection reset by peer")
    for how, got in copies(diag):
        stand_in = got.transport_error
        assert isinstance(stand_in, Exception), how
        assert repr(stand_in) == "LocalError('[Errno 104] Connection reset by peer')", how
        assert str(stand_in) == "[Errno 104] Connection reset by peer", how
        # The stand-in itself travels again unchanged.
        assert repr(pickle.loads(pickle.dumps(stand_in, 0))) == repr(stand_in)
    assert isinstance(diag.transport_error, LocalError)  # the original is untouched


class NeedsKeyword(Exception):
    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.code = code


def test_transport_error_that_cannot_be_loaded_becomes_a_stand_in() -> None:
    diag = qa.Diagnostics()
    diag.transport_error = NeedsKeyword("bad chunk", code=3)
    for how, got in copies(diag):
        assert repr(got.transport_error) == "NeedsKeyword('bad chunk')", how


# -- values ----------------------------------------------------------------------------------


def only_429(status: int) -> bool:
    return status == 429


@pytest.mark.parametrize(
    "policy",
    [
        qa.RetryPolicy(),
        qa.RetryPolicy.none,
        qa.RetryPolicy(max_retries=7, backoff_jitter=0.0, retry_status=only_429),
        qa.RetryPolicy(backoff_initial_ms=86_400_000, backoff_max_ms=86_400_000, max_retry_after_ms=0),
    ],
    ids=["default", "none", "custom", "extremes"],
)
def test_retry_policy_round_trips(policy: qa.RetryPolicy) -> None:
    for how, got in copies(policy):
        assert type(got) is qa.RetryPolicy, how
        assert got == policy, how
        assert got.retry_status(429) is True, how
    with pytest.raises(AttributeError):
        got.max_retries = 3  # type: ignore[misc]  # still frozen


def test_request_round_trips_and_still_works(svc: FakeService, plain: qa.Client) -> None:
    request = qa.Request(
        state="Some text",
        questions=[
            qa.NamedQuestion("tone", qa.Choice(Tone)),
            qa.NamedQuestion("size", qa.Score(["small", "large"])),
        ],
        model="judge-2.1",
    )
    want = plain.core(request).answers
    for how, got in copies(request):
        assert type(got) is qa.Request, how
        assert (got.state, got.questions, got.model) == (request.state, request.questions, request.model)
        assert repr(got) == repr(request), how
        assert plain.core(got).answers == want, how
    assert len(svc.requests) == 1 + len(PROTOCOLS) + 1
    assert {r.body for r in svc.requests} == {svc.requests[0].body}  # the same bytes every time


QUESTIONS: list[Any] = [
    qa.YesNo("insults someone", "insults no one"),
    qa.Choice({"en": "English", "fr": "French"}),
    qa.Choice(Tone),
    qa.Score(["poor", "fair", "good"]),
    qa.Score(Level),
    qa.NamedQuestion("tone", qa.Choice(Tone)),
]


@pytest.mark.parametrize("question", QUESTIONS, ids=repr)
def test_questions_round_trip_and_decode_alike(question: Any) -> None:
    inner = question.question if isinstance(question, qa.NamedQuestion) else question
    criteria: Any = inner.criteria
    samples = {qa.YesNo: True, qa.Choice: next(iter(criteria)), qa.Score: len(criteria) - 1}
    sample = samples[type(inner)]
    for how, got in copies(question):
        assert type(got) is type(question), how
        assert got == question, how
        got_inner = got.question if isinstance(got, qa.NamedQuestion) else got
        assert got_inner.decode(sample) == inner.decode(sample), how


def test_answers_instance_round_trips() -> None:
    answers = Review(toxic=True, tone=Tone.casual, quality=Level.good, lang="fr", size=0)
    for how, got in copies(answers):
        assert type(got) is Review, how
        assert got == answers, how
        assert got.quality is Level.good, how
        with pytest.raises(AttributeError):
            got.toxic = False


def read_only(mapping: Any) -> bool:
    """A mapping that refuses a change, with a message that says how to get one that does not."""
    try:
        mapping["changed"] = True
    except TypeError as exc:
        return "read-only" in str(exc) and "changed" not in mapping
    return False


def test_result_mappings_themselves_pickle_copy_and_encode_as_json(
    svc: FakeService, plain: qa.Client
) -> None:
    # usage, answers and a model's info are what a caller logs or stores: each survives pickle,
    # copy and deepcopy read-only, and json.dumps writes it as the object the service sent.
    asked = plain.ask("Some text", Review)
    core = plain.core(qa.Request("Some text", [qa.NamedQuestion("tone", qa.Choice(Tone))]))
    info = plain.list_models().models[0].info
    for mapping in (asked.usage, core.answers, core.usage, info):
        for how, got in [*copies(mapping), ("copy", copy.copy(mapping))]:
            assert dict(got) == dict(mapping), how
            assert read_only(got), how
        assert json.loads(json.dumps(mapping, default=lambda member: member.name)) == {
            k: v.name if isinstance(v, enum.Enum) else v for k, v in mapping.items()
        }


def test_results_round_trip_and_stay_read_only(svc: FakeService, plain: qa.Client) -> None:
    asked = plain.ask("Some text", Review)
    core = plain.core(qa.Request("Some text", [qa.NamedQuestion("tone", qa.Choice(Tone))]))
    models = plain.list_models()
    assert read_only(asked.usage)
    assert read_only(core.answers)
    assert read_only(models.models[0].info)
    for how, got_ask in copies(asked):
        assert type(got_ask) is qa.AskResponse, how
        assert got_ask.answers == asked.answers, how
        assert dict(got_ask.usage) == dict(asked.usage), how
        assert read_only(got_ask.usage), how
    for how, got_core in copies(core):
        assert type(got_core) is qa.CoreResponse, how
        assert dict(got_core.answers) == dict(core.answers), how
        assert got_core.get("tone") is core.get("tone"), how  # Enum members stay themselves
        assert read_only(got_core.answers), how
        assert read_only(got_core.usage), how
    for how, got_models in copies(models):
        assert type(got_models) is qa.ModelList, how
        assert list(got_models) == list(models), how
        assert all(read_only(m.info) for m in got_models), how
    for how, got_model in copies(models.models[0]):
        assert type(got_model) is qa.Model, how
        assert got_model == models.models[0], how


def test_cancel_token_and_retry_budget_round_trip() -> None:
    fresh, cancelled = qa.CancelToken(), qa.CancelToken()
    cancelled.cancel()
    budget = qa.RetryBudget(capacity=10, retry_cost=2, success_refund=0.5)
    assert budget.try_spend()
    for how, got in copies(fresh):
        assert type(got) is qa.CancelToken, how
        assert not got.cancelled, how
    for how, got in copies(cancelled):
        assert got.cancelled, how
    for how, got_budget in copies(budget):
        assert type(got_budget) is qa.RetryBudget, how
        assert (got_budget.capacity, got_budget.retry_cost, got_budget.success_refund) == (10, 2, 0.5), how
        assert got_budget.tokens == 10, how  # a budget lands full: it guards its new process


# -- engines ---------------------------------------------------------------------------------

ENGINES = ("dask", "distributed", "ray", "pyspark", "py4j")
COLLECT = """
import sys, pytest
tried = []
class Watch:  # notes every import of an engine, installed or not
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in sys.argv[1].split(","):
            tried.append(name)
sys.meta_path.insert(0, Watch())
# --assert=plain: rewriting the modules' asserts (done afresh where no bytecode is written)
# took most of the run's second, and the watch sees every import either way.
options = ["--collect-only", "-q", "-m", "engines", "-p", "no:randomly", "--assert=plain"]
code = pytest.main([*options, *sys.argv[2:]])
print("engines imported:", sorted(set(tried)))
sys.exit(code)
"""


@pytest.mark.timeout(60)
def test_collecting_the_engine_tests_imports_no_engine() -> None:
    # Importing Dask's ``distributed`` changes how the standard library's exceptions pickle in
    # the whole process: an engine is imported by the tests that use it, never at collection.
    root = Path(__file__).resolve().parent.parent
    modules = sorted(str(p.relative_to(root)) for p in root.glob("tests/test_engine_*.py"))
    assert len(modules) >= 4
    argv = [sys.executable, "-c", COLLECT, ",".join(ENGINES), *modules]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=root, timeout=50, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "engines imported: []" in proc.stdout.splitlines(), proc.stdout[-3000:]


# -- processes -------------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_rate_limited_in_a_process_pool_worker_reaches_the_parent(svc: FakeService) -> None:
    svc.script(
        reply(429, {"detail": "slow down"}, headers=[("retry-after-ms", "1")]),
        reply(429, {"detail": "slow down"}),
    )
    spawn = multiprocessing.get_context("spawn")  # no fork of a threaded test process
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
        with pytest.raises(qa.RateLimited) as caught:
            pool.submit(spawn_workers.list_models_busy, svc.url).result(timeout=60)
        error = caught.value
        assert error.status == 429
        assert error.diagnostics.status == 429
        assert error.diagnostics.attempts == 2
        assert error.diagnostics.body == '{"detail": "slow down"}'
        assert "slow down" in str(error)
        assert "(after 2 attempts)" in str(error)
        # The pool survived: the same worker process answers the next call.
        pid, models = pool.submit(spawn_workers.list_models, svc.url).result(timeout=60)
        assert isinstance(models, qa.ModelList)
        with make_client(svc.url) as client:
            assert [m.name for m in models] == [m.name for m in client.list_models()]
        again_pid, _ = pool.submit(spawn_workers.list_models, svc.url).result(timeout=60)
        assert again_pid == pid

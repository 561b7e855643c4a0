"""Every public class of ``qa_min`` survives pickle (every protocol), cloudpickle and deepcopy.

The classes are enumerated from ``qa_min.__all__``: a new public class fails
``test_every_public_class_has_a_case`` until it gets a sample here. Engines (Dask, Ray, Spark)
serialize with cloudpickle; those cases run where it is installed (the ``engines`` extra) and
skip elsewhere. ``Call`` is the one class that refuses: it is a call running in this process.

  every class has a case ......... test_every_public_class_has_a_case
  round trips .................... test_a_public_class_round_trips (class x way), and for
                                   results, their diagnostics: test_results_keep_their_diagnostics
  the one refusal ................ test_a_call_refuses_clearly
"""

from __future__ import annotations

import asyncio
import copy
import enum
import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Optional

import pytest
from support import make_client

import qa_min as qa
from qa_min.testing import FakeService, reply

PUBLIC_CLASSES = sorted(name for name in qa.__all__ if isinstance(getattr(qa, name), type))
REFUSED = {"Call": "a call running in this process; its result() is what travels"}


class Tone(enum.Enum):
    formal = "Written in a formal register"
    casual = "Written casually"


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")
    tone = qa.Choice(Tone)
    quality = qa.Score(["poor", "fair", "good"])


REQUEST = qa.Request(
    "Some text",
    [
        qa.NamedQuestion("lang", qa.Choice({"en": "English", "fr": "French"})),
        qa.NamedQuestion("tone", Review.tone),
    ],
    model="judge-2.1",
)


@dataclass
class Made:
    """Real objects, made once by real calls against a fake service."""

    url: str
    ask: qa.AskResponse[Review]
    core: qa.CoreResponse
    models: qa.ModelList
    error: qa.RateLimited


@pytest.fixture(scope="module")
def service() -> Iterator[FakeService]:
    with FakeService() as svc:
        yield svc


@pytest.fixture(scope="module")
def made(service: FakeService) -> Made:
    throttled = reply(
        429, {"detail": "slow down"}, headers=[("retry-after-ms", "1"), ("request-id", "req_9")]
    )
    policy = qa.RetryPolicy(max_retries=1, backoff_initial_ms=1)
    with make_client(service.url, retry=policy) as client:
        service.script(throttled)  # the ask: a 429, then the answer
        ask = client.ask("Some text", Review)
        core = client.core(REQUEST)
        models = client.list_models()
        service.script(throttled, throttled)
        try:
            client.ask("Some text", Review)
        except qa.RateLimited as exc:
            return Made(service.url, ask, core, models, exc)
    raise AssertionError("the scripted 429s did not raise")


def diagnostics_of(d: qa.Diagnostics) -> tuple[object, ...]:
    error = d.transport_error
    headers = None if d.headers is None else d.headers.items()
    return (d.status, d.body, d.attempts, d.request_id, headers, d.elapsed, d.history, d.rate_limit_wait) + (
        (type(error), str(error)) if error is not None else (None,)
    )


def error_of(e: qa.QAError) -> tuple[object, ...]:
    return (type(e), e.args, e.message, getattr(e, "status", None), diagnostics_of(e.diagnostics))


def client_of(c: qa.Client) -> tuple[object, ...]:
    with c:
        answered = c.list_models().diagnostics.status  # an open client with a working pool
    state = c.rate_limit
    return (
        c.base_url,
        c.model,
        c._key,
        c._timeout,
        c._retry,
        None if state is None else state.limit,
        answered,
    )


def async_client_of(c: qa.AsyncClient) -> tuple[object, ...]:
    async def answered() -> Optional[int]:
        async with c:  # an open client on a loop of its own, with a working pool
            return (await c.list_models()).diagnostics.status

    status = asyncio.run(answered())
    state, core = c.rate_limit, c._core
    limit = None if state is None else state.limit
    return (c.base_url, c.model, core._key, core._timeout, core._retry, limit, status)


# name -> (samples from the made objects, what must come through equal)
Fingerprint = Callable[[Any], object]
CASES: dict[str, tuple[Callable[[Made], list[Any]], Fingerprint]] = {
    "AskResponse": (
        lambda m: [m.ask],
        lambda r: (r.answers, dict(r.usage), diagnostics_of(r.diagnostics), r.answers.tone is Tone.formal),
    ),
    "AsyncClient": (
        lambda m: [
            qa.AsyncClient(
                base_url=m.url,
                api_key="sk-pickle-0123456789",
                timeout=5.0,
                rate_limit=qa.RateLimit(50).split(2),
                trust_env=False,
            )
        ],
        async_client_of,
    ),
    "Attempt": (lambda m: [*m.ask.diagnostics.history, *m.error.diagnostics.history], lambda a: (a, repr(a))),
    "CancelToken": (lambda m: [qa.CancelToken(), cancelled_token()], lambda t: t.cancelled),
    "Choice": (lambda m: [Review.tone, qa.Choice({"a": "A", "b": "B"})], lambda q: (q, q.criteria)),
    "Client": (
        lambda m: [
            make_client(
                m.url, api_key="sk-pickle-0123456789", timeout=5.0, rate_limit=qa.RateLimit(50).split(2)
            )
        ],
        client_of,
    ),
    "CoreResponse": (
        lambda m: [m.core],
        lambda r: (dict(r.answers), dict(r.usage), diagnostics_of(r.diagnostics), r.get("tone")),
    ),
    "Diagnostics": (lambda m: [qa.Diagnostics(), m.ask.diagnostics, m.error.diagnostics], diagnostics_of),
    "HookEvent": (
        lambda m: [
            qa.HookEvent("before_attempt", "POST", m.url + "/v1/core", 1, b"POST / HTTP/1.1\r\n\r\n{}"),
            qa.HookEvent("after_attempt", "GET", m.url, 2, b"", 429, m.error, 0.25, "req_9"),
        ],
        lambda e: (
            repr(e),
            e.stage,
            e.status,
            e.attempt,
            e.duration,
            e.request_id,
            e.request_body(),
            type(e.error),
        ),
    ),
    "Model": (lambda m: list(m.models.models), lambda x: (x, x.name, dict(x.info))),
    "ModelList": (lambda m: [m.models], lambda x: (list(x), diagnostics_of(x.diagnostics))),
    "NamedQuestion": (lambda m: list(REQUEST.questions), lambda q: (q, q.name)),
    "Questions": (lambda m: [m.ask.answers], lambda a: (a, repr(a), a.tone)),
    "RateLimit": (
        lambda m: [qa.RateLimit(), qa.RateLimit(190, burst=5, adaptive=False)],
        lambda x: (x, repr(x)),
    ),
    "Request": (lambda m: [REQUEST], lambda r: (repr(r), r.state, list(r.questions), r.model)),
    "ResponseHeaders": (lambda m: [m.error.diagnostics.headers], lambda h: (h, h.get("request-id"))),
    "RetryBudget": (lambda m: [qa.RetryBudget(capacity=10, retry_cost=2, success_refund=0.5)], repr),
    "RetryPolicy": (
        lambda m: [qa.RetryPolicy(), qa.RetryPolicy.none, qa.RetryPolicy(max_retries=5)],
        lambda p: p,
    ),
    "Score": (lambda m: [Review.quality], lambda q: (q, q.criteria)),
    "YesNo": (lambda m: [Review.toxic], lambda q: (q, q.criteria)),
}
ERRORS = sorted(name for name in PUBLIC_CLASSES if issubclass(getattr(qa, name), qa.QAError))


def cancelled_token() -> qa.CancelToken:
    token = qa.CancelToken()
    token.cancel()
    return token


def sample_error(cls: type[qa.QAError], made: Made) -> qa.QAError:
    diagnostics = copy.deepcopy(made.error.diagnostics)
    if issubclass(cls, (qa.APIStatusError, qa.ProxyError)):
        return cls(f"HTTP 429 from GET x ({cls.__name__})", diagnostics, status=429)
    return cls(f"it failed ({cls.__name__})", diagnostics)


def _cloudpickle(value: Any) -> Any:
    cloudpickle = pytest.importorskip("cloudpickle", reason="cloudpickle is not installed (extra 'engines')")
    return pickle.loads(cloudpickle.dumps(value))


def _pickler(protocol: int) -> Callable[[Any], Any]:
    return lambda value: pickle.loads(pickle.dumps(value, protocol))


WAYS = [
    *(pytest.param(_pickler(p), id=f"pickle-{p}") for p in range(pickle.HIGHEST_PROTOCOL + 1)),
    pytest.param(_cloudpickle, id="cloudpickle", marks=pytest.mark.engines),
    pytest.param(copy.deepcopy, id="deepcopy"),
]


def test_every_public_class_has_a_case() -> None:
    assert set(PUBLIC_CLASSES) == set(CASES) | set(ERRORS) | set(REFUSED)
    assert not set(CASES) & set(ERRORS)
    assert len(PUBLIC_CLASSES) > 40  # the enumeration found the package's classes


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("name", sorted(set(PUBLIC_CLASSES) - set(REFUSED)))
def test_a_public_class_round_trips(name: str, way: Callable[[Any], Any], made: Made) -> None:
    cls = getattr(qa, name)
    if name in ERRORS:
        samples: list[Any] = [sample_error(cls, made)]
        if isinstance(made.error, cls):
            samples.append(made.error)
        fingerprint: Fingerprint = error_of
    else:
        make, fingerprint = CASES[name]
        samples = make(made)
    assert samples
    for sample in samples:
        assert isinstance(sample, cls)
        copied = way(sample)
        assert type(copied) is type(sample)
        assert copied is not sample
        assert fingerprint(copied) == fingerprint(sample), name


def test_results_keep_their_diagnostics(made: Made) -> None:
    for result in (made.ask, made.core, made.models):
        assert result.diagnostics.status == 200
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            copied = pickle.loads(pickle.dumps(result, protocol))
            assert diagnostics_of(copied.diagnostics) == diagnostics_of(result.diagnostics)
    assert [a.status for a in made.ask.diagnostics.history] == [429, 200]


def test_a_call_refuses_clearly(made: Made) -> None:
    with make_client(made.url) as client:
        call = client.submit(client.list_models)
        call.result(5)
        for attempt in (lambda: pickle.dumps(call), lambda: copy.copy(call), lambda: copy.deepcopy(call)):
            with pytest.raises(TypeError, match=r"a Call cannot be pickled or copied.*send its result\(\)"):
                attempt()
        assert isinstance(pickle.loads(pickle.dumps(call.result())), qa.ModelList)

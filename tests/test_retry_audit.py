"""Outside audit of SPEC.md section 6 (Retries) through both clients, ``Client`` and ``AsyncClient``.

``test_retry_policy`` holds the formula and the retry loop for the threaded client over
``MockTransport``; here the same promises are held for both clients over a real socket
(``FakeService``), each limit tried at the limit and one past it, with the server's own count
of requests as the judge of ``Diagnostics.attempts``:

* every ``RetryPolicy`` field: ``max_retries`` 0 and n, the doubling and its cap, the jitter
  (it only subtracts, never below zero), ``respect_retry_after``, ``max_retry_after_ms`` at
  the limit and one past, ``retry-after-ms`` before ``Retry-After``, an HTTP-date,
  ``retry_connection_errors``, ``retry_status`` (a function, a non-bool, one that raises);
* ``RetryPolicy.none`` and the arguments a policy refuses;
* ``x-should-retry`` in any case, with spaces, and a value that is neither;
* which statuses are raised only after the retries ran out;
* a backoff sleep ended at once by a token or ``timeout=``;
* the client-wide retry budget in an outage of N threads (or tasks), and its refill.

The backoff is recorded by the ``sleep=`` seam, not slept, and ``random=`` is fixed, so the
delays are exact; the module takes about 3 s, mostly starting one server per test.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pytest

import qa_min as qa
from qa_min.testing import FakeService, Step, delay, drop, reply

KINDS = ["sync", "async"]
ALMOST_ONE = math.nextafter(1.0, 0.0)  # the supremum of random(), never reached
BOUND = 5.0  # waits for what happens at once: a bug fails instead of hanging
PROMPT = 2.0  # generous upper bound for "at once" on a shared machine


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


@dataclass
class Outcome:
    """One call's end: its error (None on success), its Diagnostics and the backoffs asked for."""

    error: Optional[BaseException]
    diagnostics: qa.Diagnostics
    sleeps: list[float] = field(default_factory=list)


def call(
    kind: str,
    url: str,
    retry: Optional[qa.RetryPolicy] = None,
    rand: Callable[[], float] = lambda: 0.0,
    diagnostics: Optional[qa.Diagnostics] = None,
    call_options: Optional[dict[str, Any]] = None,
    **options: Any,
) -> Outcome:
    """One ``ask`` through the ``kind`` client, its backoff recorded and not slept; ``diagnostics``
    filled (a new one when None); ``call_options`` add to the call's (``retry`` among them)."""
    sleeps: list[float] = []
    diagnostics = qa.Diagnostics() if diagnostics is None else diagnostics
    asked: dict[str, Any] = {"retry": retry, **(call_options or {})}
    error: Optional[BaseException] = None
    if kind == "sync":

        def record(seconds: float, wake: threading.Event) -> None:
            sleeps.append(seconds)

        with qa.Client(base_url=url, trust_env=False, sleep=record, random=rand, **options) as client:
            try:
                client.ask("some text", Review, diagnostics=diagnostics, **asked)
            except Exception as exc:
                error = exc
        return Outcome(error, diagnostics, sleeps)

    async def arecord(seconds: float) -> None:
        sleeps.append(seconds)
        await asyncio.sleep(0)  # a sleep yields to the loop, as the real one does

    async def main() -> Optional[BaseException]:
        async with qa.AsyncClient(
            base_url=url, trust_env=False, sleep=arecord, random=rand, **options
        ) as client:
            try:
                await client.ask("some text", Review, diagnostics=diagnostics, **asked)
            except Exception as exc:
                return exc
        return None

    return Outcome(asyncio.run(main()), diagnostics, sleeps)


def scripted(
    kind: str, steps: Sequence[Step], retry: Optional[qa.RetryPolicy] = None, **options: Any
) -> tuple[Outcome, int]:
    """``call`` against a fresh FakeService scripted with ``steps``; with the server's request count."""
    with FakeService() as service:
        service.script(*steps)
        outcome = call(kind, service.url, retry, **options)
        return outcome, service.request_count


def only_backoff(**fields: Any) -> qa.RetryPolicy:
    """A policy whose delays are small round numbers: 100, 200, 300, 300, ... ms."""
    return qa.RetryPolicy(**{"backoff_initial_ms": 100, "backoff_max_ms": 300, "backoff_jitter": 0, **fields})


# -- max_retries, the doubling and its cap -----------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_the_default_policy_makes_three_attempts_after_500_and_1000_ms(kind: str) -> None:
    outcome, served = scripted(kind, [reply(503, {"detail": "down"})] * 5)
    assert isinstance(outcome.error, qa.ServerError)
    assert "after 3 attempts" in str(outcome.error)
    assert outcome.diagnostics.attempts == served == 3
    assert outcome.sleeps == [0.5, 1.0]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("retries", "sleeps"),
    [(0, []), (1, [0.1]), (2, [0.1, 0.2]), (5, [0.1, 0.2, 0.3, 0.3, 0.3])],
    ids=["0", "1", "2", "5-capped"],
)
def test_max_retries_bounds_the_attempts_and_the_backoff_doubles_to_its_cap(
    kind: str, retries: int, sleeps: list[float]
) -> None:
    outcome, served = scripted(kind, [reply(503)] * 8, only_backoff(max_retries=retries))
    assert isinstance(outcome.error, qa.ServerError)
    assert outcome.diagnostics.attempts == served == retries + 1
    assert outcome.sleeps == pytest.approx(sleeps)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("retries", [1, 4])
def test_a_success_on_the_last_retry_returns(kind: str, retries: int) -> None:
    outcome, served = scripted(kind, [reply(503)] * retries, only_backoff(max_retries=retries))
    assert outcome.error is None
    assert outcome.diagnostics.status == 200
    assert outcome.diagnostics.attempts == served == retries + 1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("jitter", [0.0, 0.25, 1.0])
@pytest.mark.parametrize("draw", [0.0, 0.5, ALMOST_ONE], ids=["U=0", "U=0.5", "U=sup"])
def test_jitter_only_subtracts_and_never_below_zero(kind: str, jitter: float, draw: float) -> None:
    policy = qa.RetryPolicy(max_retries=4, backoff_initial_ms=100, backoff_max_ms=400, backoff_jitter=jitter)
    outcome, _ = scripted(kind, [reply(503)] * 5, policy, rand=lambda: draw)
    bases = [0.1, 0.2, 0.4, 0.4]
    assert len(outcome.sleeps) == 4
    for slept, base in zip(outcome.sleeps, bases):
        assert base * (1 - jitter) - 1e-12 <= slept <= base  # ms to s may round the last bit
        assert slept == pytest.approx(base * (1 - jitter * draw))
        assert slept >= 0


# -- server-requested delays -------------------------------------------------------------------


def http_date(timestamp: float) -> str:
    return email.utils.formatdate(timestamp, usegmt=True)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("headers", "policy", "slept"),
    [
        pytest.param([("retry-after-ms", "60000")], None, 60.0, id="ms-at-the-default-cap"),
        pytest.param([("retry-after-ms", "60001")], None, 0.5, id="ms-one-past-the-cap-backoff"),
        pytest.param([("Retry-After", "60")], None, 60.0, id="seconds-at-the-default-cap"),
        pytest.param([("Retry-After", "61")], None, 0.5, id="seconds-one-past-the-cap-backoff"),
        pytest.param([("Retry-After", "60.001")], None, 0.5, id="seconds-a-ms-past-the-cap-backoff"),
        pytest.param(
            [("retry-after-ms", "1000")], qa.RetryPolicy(max_retry_after_ms=1000), 1.0, id="ms-at-a-set-cap"
        ),
        pytest.param(
            [("retry-after-ms", "1001")], qa.RetryPolicy(max_retry_after_ms=1000), 0.5, id="ms-past-a-set-cap"
        ),
        pytest.param(
            [("retry-after-ms", "1")], qa.RetryPolicy(max_retry_after_ms=0), 0.5, id="cap-zero-ignores-all"
        ),
        pytest.param(
            [("retry-after-ms", "250"), ("Retry-After", "7")], None, 0.25, id="ms-read-before-seconds"
        ),
        pytest.param(
            [("Retry-After", "7"), ("retry-after-ms", "250")], None, 0.25, id="ms-wins-in-either-order"
        ),
        pytest.param(
            [("retry-after-ms", "-5"), ("Retry-After", "2")], None, 2.0, id="bad-ms-falls-to-seconds"
        ),
        pytest.param(
            [("retry-after-ms", "0"), ("Retry-After", "3")], None, 3.0, id="zero-ms-falls-to-seconds"
        ),
        pytest.param(
            [("retry-after-ms", "90000"), ("Retry-After", "2")], None, 2.0, id="long-ms-falls-to-seconds"
        ),
        pytest.param([("Retry-After", " 0.25\t")], None, 0.25, id="fraction-with-spaces"),
        pytest.param(
            [("retry-after-ms", "1500"), ("Retry-After", "2")],
            qa.RetryPolicy(respect_retry_after=False),
            0.5,
            id="not-respected-backoff",
        ),
    ],
)
def test_server_delay_limits_and_precedence(
    kind: str, headers: list[tuple[str, str]], policy: Optional[qa.RetryPolicy], slept: float
) -> None:
    outcome, served = scripted(kind, [reply(429, headers=headers)], policy)
    assert outcome.error is None
    assert outcome.diagnostics.attempts == served == 2
    assert outcome.sleeps == [pytest.approx(slept)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("offset", "policy", "low", "high"),
    [
        pytest.param(30, None, 28.0, 30.0, id="future-honoured"),
        pytest.param(-100, None, 0.5, 0.5, id="past-backoff"),
        pytest.param(100, None, 0.5, 0.5, id="past-the-cap-backoff"),
        pytest.param(30, qa.RetryPolicy(respect_retry_after=False), 0.5, 0.5, id="not-respected-backoff"),
    ],
)
def test_retry_after_as_an_http_date(
    kind: str, offset: float, policy: Optional[qa.RetryPolicy], low: float, high: float
) -> None:
    # Whole seconds on the wire: up to one second of a future date has passed when it is read.
    outcome, served = scripted(
        kind, [reply(503, headers=[("Retry-After", http_date(time.time() + offset))])], policy
    )
    assert outcome.error is None
    assert outcome.diagnostics.attempts == served == 2
    assert len(outcome.sleeps) == 1
    assert low <= outcome.sleeps[0] <= high


# -- retry_connection_errors, retry_status, RetryPolicy.none -----------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("retried", "attempts"), [(True, 3), (False, 1)])
def test_retry_connection_errors(kind: str, retried: bool, attempts: int) -> None:
    outcome, served = scripted(kind, [drop()] * 3, qa.RetryPolicy(retry_connection_errors=retried))
    assert isinstance(outcome.error, qa.ConnectionFailed)
    assert "closed the connection" in str(outcome.error)
    assert outcome.diagnostics.transport_error is not None
    assert outcome.diagnostics.status is None
    assert outcome.diagnostics.attempts == served == attempts


@pytest.mark.parametrize("kind", KINDS)
def test_a_dropped_connection_then_a_success_is_one_retry(kind: str) -> None:
    outcome, served = scripted(kind, [drop()])
    assert outcome.error is None
    assert outcome.diagnostics.attempts == served == 2
    assert outcome.sleeps == [0.5]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("status", "error", "attempts"),
    [(409, qa.UnexpectedStatus, 3), (503, qa.ServerError, 1), (429, qa.RateLimited, 1)],
)
def test_retry_status_as_a_function_decides_alone(
    kind: str, status: int, error: type[qa.APIStatusError], attempts: int
) -> None:
    policy = qa.RetryPolicy(retry_status=lambda code: code == 409)
    outcome, served = scripted(kind, [reply(status, {"detail": "nope"})] * 3, policy)
    assert type(outcome.error) is error
    assert outcome.diagnostics.status == status
    assert outcome.diagnostics.attempts == served == attempts


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("verdict", "attempts"), [(1, 3), (0, 1), (None, 1)], ids=["1", "0", "None"])
def test_retry_status_returning_a_non_bool_is_read_by_its_truth(
    kind: str, verdict: object, attempts: int
) -> None:
    policy = qa.RetryPolicy(retry_status=lambda code: verdict)  # type: ignore[arg-type,return-value]
    outcome, served = scripted(kind, [reply(503)] * 3, policy)
    assert isinstance(outcome.error, qa.ServerError)
    assert outcome.diagnostics.attempts == served == attempts


class JudgeBug(Exception):
    pass


class Unjudgeable:
    def __bool__(self) -> bool:
        raise JudgeBug("no truth")


def _raising(code: int) -> bool:
    raise JudgeBug(f"cannot judge {code}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "judge", [_raising, lambda code: Unjudgeable()], ids=["raises", "returns-a-value-whose-truth-raises"]
)
def test_a_retry_status_that_raises_ends_the_call_unwrapped_after_one_attempt(
    kind: str, judge: Callable[[int], bool]
) -> None:
    outcome, served = scripted(kind, [reply(503, {"detail": "busy"})] * 3, qa.RetryPolicy(retry_status=judge))
    assert type(outcome.error) is JudgeBug
    assert outcome.diagnostics.attempts == served == 1
    assert outcome.diagnostics.status == 503
    assert outcome.diagnostics.body is not None
    assert "busy" in outcome.diagnostics.body
    assert outcome.sleeps == []


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("step", [reply(503), reply(429, headers=[("retry-after-ms", "5")]), drop()], ids=str)
def test_retry_policy_none_makes_one_attempt(kind: str, step: Step) -> None:
    outcome, served = scripted(kind, [step] * 3, qa.RetryPolicy.none)
    assert isinstance(outcome.error, (qa.ServerError, qa.RateLimited, qa.ConnectionFailed))
    assert "after" not in str(outcome.error)
    assert outcome.diagnostics.attempts == served == 1
    assert outcome.sleeps == []


def test_retry_policy_none_is_max_retries_zero() -> None:
    assert qa.RetryPolicy.none == qa.RetryPolicy(max_retries=0)


# -- arguments a policy refuses -----------------------------------------------------------------

DAY_MS = 86_400_000.0


@pytest.mark.parametrize(
    "fields",
    [
        {"max_retries": 0},
        {"max_retries": 1000},
        {"backoff_initial_ms": 0},
        {"backoff_initial_ms": DAY_MS},
        {"backoff_max_ms": DAY_MS},
        {"max_retry_after_ms": 0},
        {"max_retry_after_ms": DAY_MS},
        {"backoff_jitter": 0},
        {"backoff_jitter": 1},
    ],
    ids=str,
)
def test_policy_fields_at_their_limits_are_taken(fields: dict[str, Any]) -> None:
    policy = qa.RetryPolicy(**fields)
    for name, value in fields.items():
        assert getattr(policy, name) == value


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"max_retries": 1001}, "max_retries"),
        ({"max_retries": -1}, "max_retries"),
        ({"backoff_initial_ms": math.nextafter(DAY_MS, math.inf)}, "backoff_initial_ms"),
        ({"backoff_max_ms": math.inf}, "backoff_max_ms"),
        ({"max_retry_after_ms": math.nextafter(DAY_MS, math.inf)}, "max_retry_after_ms"),
        ({"max_retry_after_ms": -0.001}, "max_retry_after_ms"),
        ({"backoff_jitter": math.nextafter(1.0, 2.0)}, "backoff_jitter"),
        ({"backoff_jitter": math.nextafter(0.0, -1.0)}, "backoff_jitter"),
        ({"respect_retry_after": 1}, "respect_retry_after"),
        ({"retry_connection_errors": None}, "retry_connection_errors"),
        ({"retry_status": None}, "retry_status"),
        ({"retry_status": (408, 429)}, "retry_status"),
    ],
    ids=str,
)
def test_policy_fields_one_past_their_limits_are_refused_by_name(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(qa.InvalidOption, match=named):
        qa.RetryPolicy(**fields)


@pytest.mark.parametrize("kind", KINDS)
def test_a_retry_that_is_not_a_policy_is_refused_before_sending(kind: str) -> None:
    with FakeService() as service:
        outcome = call(kind, service.url, {"max_retries": 1})  # type: ignore[arg-type]
        assert service.request_count == 0
    assert isinstance(outcome.error, qa.InvalidOption)
    assert "retry" in str(outcome.error)


# -- x-should-retry -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("status", "value", "attempts"),
    [
        pytest.param(400, "true", 3, id="400-true"),
        pytest.param(400, " True ", 3, id="400-spaced-True"),
        pytest.param(400, "\tTRUE", 3, id="400-tab-TRUE"),
        pytest.param(503, "false", 1, id="503-false"),
        pytest.param(503, " FaLsE\t", 1, id="503-spaced-mixed-case"),
        pytest.param(429, "false", 1, id="429-false"),
        pytest.param(400, "yes", 1, id="400-neither-retry_status-decides"),
        pytest.param(503, "no", 3, id="503-neither-retry_status-decides"),
        pytest.param(503, "", 3, id="503-empty-retry_status-decides"),
        pytest.param(503, "true false", 3, id="503-both-retry_status-decides"),
    ],
)
def test_x_should_retry_overrides_retry_status(kind: str, status: int, value: str, attempts: int) -> None:
    outcome, served = scripted(
        kind, [reply(status, {"detail": "x"}, headers=[("x-should-retry", value)])] * 4
    )
    assert isinstance(outcome.error, qa.APIStatusError)
    assert outcome.error.status == status
    assert outcome.diagnostics.attempts == served == attempts


@pytest.mark.parametrize("kind", KINDS)
def test_x_should_retry_true_stays_within_max_retries_and_overrides_a_custom_retry_status(kind: str) -> None:
    policy = qa.RetryPolicy(max_retries=1, retry_status=lambda code: False)
    outcome, served = scripted(kind, [reply(422, headers=[("X-Should-Retry", "true")])] * 4, policy)
    assert isinstance(outcome.error, qa.UnprocessableEntity)
    assert outcome.diagnostics.attempts == served == 2


# -- which statuses are raised only after retries -------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("status", "error", "attempts"),
    [
        (408, qa.RequestTimeout, 4),
        (429, qa.RateLimited, 4),
        (529, qa.Overloaded, 4),
        (500, qa.ServerError, 4),
        (502, qa.ServerError, 4),
        (599, qa.ServerError, 4),
        (400, qa.BadRequest, 1),
        (404, qa.NotFound, 1),
        (422, qa.UnprocessableEntity, 1),
        (409, qa.UnexpectedStatus, 1),
    ],
    ids=str,
)
def test_statuses_raised_only_after_retries_with_the_attempts_the_server_counted(
    kind: str, status: int, error: type[qa.APIStatusError], attempts: int
) -> None:
    outcome, served = scripted(
        kind, [reply(status, {"detail": f"detail {status}"})] * 5, only_backoff(max_retries=3)
    )
    assert type(outcome.error) is error
    assert outcome.error.status == status
    assert f"detail {status}" in str(outcome.error)
    assert (f"after {attempts} attempts" in str(outcome.error)) == (attempts > 1)
    assert outcome.diagnostics.status == status
    assert outcome.diagnostics.attempts == served == attempts
    assert len(outcome.sleeps) == attempts - 1


# -- a backoff sleep ended at once ------------------------------------------------------------------


def _slow_backoff() -> qa.RetryPolicy:
    return qa.RetryPolicy(backoff_initial_ms=60_000, backoff_max_ms=60_000, backoff_jitter=0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", ["token", "timeout"])
def test_a_real_backoff_sleep_ends_at_once_when_the_call_is_cancelled(kind: str, how: str) -> None:
    with FakeService() as service:
        service.script(*[reply(503)] * 3)
        token = qa.CancelToken()
        options: dict[str, Any] = {"cancel": token} if how == "token" else {"timeout": 0.3}
        diagnostics = qa.Diagnostics()
        judged = threading.Event()  # the 503 is judged: the call goes to its 60 s backoff
        hooks = {"after_attempt": [lambda event: judged.set()]}

        def cancel_once_sent() -> None:
            if how == "token":
                assert judged.wait(BOUND)
                token.cancel()

        canceller = threading.Thread(target=cancel_once_sent)
        canceller.start()
        started = time.monotonic()
        if kind == "sync":
            with (
                qa.Client(
                    base_url=service.url, trust_env=False, retry=_slow_backoff(), hooks=hooks
                ) as client,
                pytest.raises(qa.Canceled) as info,
            ):
                client.ask("text", Review, diagnostics=diagnostics, **options)
        else:

            async def main() -> None:
                async with qa.AsyncClient(
                    base_url=service.url, trust_env=False, retry=_slow_backoff(), hooks=hooks
                ) as client:
                    await client.ask("text", Review, diagnostics=diagnostics, **options)

            with pytest.raises(qa.Canceled) as info:
                asyncio.run(main())
        took = time.monotonic() - started
        canceller.join(BOUND)
        assert service.request_count == 1
    assert took < PROMPT
    assert info.value.diagnostics is diagnostics
    assert diagnostics.attempts == 1
    if how == "token" or judged.is_set():  # a timeout may, on a starved machine, end the attempt
        assert diagnostics.status == 503


# -- the client-wide retry budget -------------------------------------------------------------------


Batch = tuple[Sequence[Step], int]  # steps scripted, then calls made by each worker


def session(
    kind: str, service: FakeService, batches: Sequence[Batch], workers: int = 1, **options: Any
) -> list[list[int]]:
    """One client (so one budget) for all ``batches``: each scripted on ``service``, then its
    calls made by ``workers`` threads (or tasks) at once. The attempts of each batch's calls."""
    results: list[list[int]] = []
    lock = threading.Lock()
    if kind == "sync":
        with qa.Client(
            base_url=service.url, trust_env=False, sleep=lambda seconds, wake: None, **options
        ) as client:

            def work(attempts: list[int], calls: int) -> None:
                for _ in range(calls):
                    diagnostics = qa.Diagnostics()
                    try:
                        client.ask("text", Review, diagnostics=diagnostics)
                    except qa.ServerError:
                        pass
                    with lock:
                        attempts.append(diagnostics.attempts)

            for steps, calls in batches:
                service.script(*steps)
                attempts: list[int] = []
                threads = [threading.Thread(target=work, args=(attempts, calls)) for _ in range(workers)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(BOUND)
                results.append(attempts)
        return results

    async def yield_only(seconds: float) -> None:
        await asyncio.sleep(0)

    async def main() -> None:
        async with qa.AsyncClient(
            base_url=service.url, trust_env=False, sleep=yield_only, **options
        ) as client:

            async def work(attempts: list[int], calls: int) -> None:
                for _ in range(calls):
                    diagnostics = qa.Diagnostics()
                    try:
                        await client.ask("text", Review, diagnostics=diagnostics)
                    except qa.ServerError:
                        pass
                    attempts.append(diagnostics.attempts)

            for steps, calls in batches:
                service.script(*steps)
                attempts: list[int] = []
                await asyncio.gather(*(work(attempts, calls) for _ in range(workers)))
                results.append(attempts)

    asyncio.run(main())
    return results


@pytest.mark.parametrize("kind", KINDS)
def test_an_outage_of_n_workers_costs_one_attempt_a_call_plus_100_retries(kind: str) -> None:
    # The default budget: 500 tokens at 5 a retry pay for 100 retries across the whole client,
    # whatever the number of threads; then each call makes its one attempt.
    workers, calls = 8, 20
    with FakeService() as service:
        [attempts] = session(kind, service, [([reply(503)] * (workers * calls * 3), calls)], workers)
        served = service.request_count
    assert len(attempts) == workers * calls
    assert sum(attempts) == served == workers * calls + 100
    assert set(attempts) <= {1, 2, 3}


@pytest.mark.parametrize("kind", KINDS)
def test_the_default_budget_refills_one_retry_per_five_successes(kind: str) -> None:
    with FakeService() as service:
        results = session(
            kind,
            service,
            [
                ([reply(503)] * 150, 50),  # 50 calls of 3 attempts: the 100 retries spent
                ([reply(503)], 1),  # empty: one attempt
                ([delay(0)] * 5, 5),  # five successes put 5 tokens back...
                ([reply(503)] * 3, 2),  # ...one retry's worth, then empty again
            ],
        )
        served = service.request_count
    assert results == [[3] * 50, [1], [1] * 5, [2, 1]]
    assert served == 150 + 1 + 5 + 3


@pytest.mark.parametrize("kind", KINDS)
def test_successes_refill_the_budget_only_up_to_its_capacity(kind: str) -> None:
    budget = qa.RetryBudget(capacity=10, retry_cost=5, success_refund=5)
    with FakeService() as service:
        results = session(kind, service, [([delay(0)] * 4, 4), ([reply(503)] * 9, 4)], retry_budget=budget)
    # Full at 10 tokens however many successes: two retries, then one attempt a call.
    assert results == [[1] * 4, [3, 1, 1, 1]]
    assert budget.tokens == 0


@pytest.mark.parametrize("kind", KINDS)
def test_without_a_budget_an_outage_triples_the_load(kind: str) -> None:
    workers, calls = 4, 10
    with FakeService() as service:
        [attempts] = session(kind, service, [([reply(503)] * 150, calls)], workers, retry_budget=None)
        assert service.request_count == sum(attempts) == workers * calls * 3


# A failure here is a hang: the event loop spins in the limiter, so the suite's timer ends it.
@pytest.mark.timeout(5)
def test_an_async_sleep_seam_that_returns_at_once_lets_concurrent_throttled_calls_finish() -> None:
    # docs/testing.md: a sleep that returns at once makes retry tests instant. Two calls
    # throttled together: one is held for the other's answer, which only a turn of the loop
    # can bring; a seam that never awaits anything gave it none, and the loop spun.
    slept: list[float] = []

    async def at_once(seconds: float) -> None:
        slept.append(seconds)

    async def main(url: str) -> list[BaseException]:
        async with qa.AsyncClient(base_url=url, trust_env=False, sleep=at_once) as client:
            calls = [client.ask("text", Review) for _ in range(2)]
            ended = await asyncio.gather(*calls, return_exceptions=True)
        return [error for error in ended if isinstance(error, BaseException)]

    with FakeService() as service:
        service.script(*[reply(429, headers=[("retry-after-ms", "1")])] * 60)
        errors = asyncio.run(main(service.url))
        counted = service.request_count
    assert len(errors) == 2
    assert all(isinstance(error, qa.RateLimited) for error in errors), errors
    assert counted >= 2 * 3, counted  # each made its retries at least
    assert slept

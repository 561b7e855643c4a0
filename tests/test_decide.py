"""The retry decisions in memory: ``_decide.Attempts`` fed every kind of outcome.

No socket, no thread, no sleep: times are passed in, ``random`` and the wall clock injected, the
rate limiter a recording stand-in. Each test names the outcome and asserts the decision, what
the call's Diagnostics record, and what the budget and the limiter were told.
"""

from __future__ import annotations

import pickle
from email.utils import formatdate
from typing import Any, Optional

import pytest

import qa_min as qa
from qa_min._backoff import backoff_ms
from qa_min._call import CallState, RetryBudget
from qa_min._decide import RAISE, RETRY, RETURN, Attempts, Decision, Rules
from qa_min._diagnostics import ResponseHeaders
from qa_min._errors import ProxyError
from qa_min._http import Outgoing, Resend, encode
from qa_min._limiter import ABSORBED
from qa_min._messages import Messages
from qa_min._pacer import Priority
from qa_min._redact import Redactor
from qa_min._wire import request_head

KEY = "sk-decide-0123456789abcdef"
BASE = "http://service.test/api"
WALL = 1_800_000_000.0  # the injected wall clock, for HTTP-date delays
CORE = Outgoing(
    "POST", "/api/v1/core", (("Host", "service.test"), ("Authorization", f"Bearer {KEY}")), "/v1/core"
)


class Limiter:
    """The limiter's interface as ``Attempts`` uses it, recording what it is told."""

    def __init__(self, engaged: bool = False) -> None:
        self.engaged = engaged
        self.succeeded: list[float] = []
        self.reports: list[tuple[Optional[float], Optional[int], Optional[float]]] = []
        self.heard = 0
        self.drops = 0

    def report(self, ticket: Optional[float], status: Optional[int], pause: Optional[float]) -> None:
        self.reports.append((ticket, status, pause))

    # The limiter seam of issue 22: every response's headers (announced limits), and whether a
    # 429 with a delay is absorbed beyond max_retries (a busy or paced client; never here).
    def hear(self, headers: object) -> None:
        self.heard += 1

    def absorbs(self) -> bool:
        return False

    def dropped(self) -> None:
        self.drops += 1


def attempts(
    policy: Optional[qa.RetryPolicy] = None,
    budget: Optional[RetryBudget] = None,
    limiter: Optional[Limiter] = None,
    uniform: float = 0.5,
) -> Attempts:
    rules = Rules(Messages(Redactor(KEY), BASE, None), budget, limiter, lambda: uniform, lambda: WALL)  # type: ignore[arg-type]
    call = CallState(None, None)
    call.redact = rules.messages.redact
    return Attempts(rules, CORE, policy or qa.RetryPolicy(), call)


def respond(
    state: Attempts, status: int, body: bytes = b"{}", started: float = 10.0, **fields: str
) -> Decision:
    headers = ResponseHeaders([(name.replace("_", "-"), value) for name, value in fields.items()])
    return state.on_response(status, headers, body, started, started + 0.25)


def connection_failed(retryable: bool = True) -> qa.ConnectionFailed:
    error = qa.ConnectionFailed(f"{BASE}: ConnectionRefusedError: refused")
    error.diagnostics.transport_error = ConnectionRefusedError(111, "refused")
    error.retryable = retryable
    return error


# -- a 2xx --------------------------------------------------------------------------------------


def test_a_2xx_returns_its_body_redacted_and_records_one_attempt() -> None:
    budget = RetryBudget(capacity=10, retry_cost=5)
    assert budget.try_spend()
    state = attempts(budget=budget)
    decision = respond(state, 200, f'{{"echo": "{KEY}"}}'.encode(), request_id="req-1")
    assert decision.action == RETURN
    assert KEY not in decision.body.decode()
    assert b"[redacted]" in decision.body
    assert decision.error is None
    assert decision.recorded
    assert decision.status == 200
    assert decision.duration == pytest.approx(0.25)
    call = state.call
    assert call.attempts == len(call.history) == 1
    assert (call.history[0].status, call.history[0].error, call.request_id) == (200, None, "req-1")
    assert budget.tokens == pytest.approx(6.0)  # the success's refund


# -- statuses -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (408, qa.APIStatusError),
        (429, qa.RateLimited),
        (500, qa.ServerError),
        (502, qa.ServerError),
        (503, qa.ServerError),
        (529, qa.Overloaded),
    ],
)
def test_a_retryable_status_without_a_server_delay_waits_the_backoff(status: int, kind: type) -> None:
    state = attempts(uniform=0.5)
    decision = respond(state, status, b'{"detail": "busy now"}')
    assert decision.action == RETRY
    expected = backoff_ms(qa.RetryPolicy(), 0, 0.5) / 1000.0
    assert decision.wait == pytest.approx(expected)
    assert state.wait == pytest.approx(expected)
    assert isinstance(decision.error, kind)
    assert getattr(decision.error, "status", None) == status
    assert f"HTTP {status} from POST {BASE}/v1/core: busy now" in str(decision.error)
    assert state.retries == 1
    assert state.call.history[0].error == type(decision.error).__name__
    assert state.call.body == '{"detail": "busy now"}'


@pytest.mark.parametrize(
    ("fields", "seconds"),
    [
        ({"retry_after": "2"}, 2.0),
        ({"retry_after_ms": "250"}, 0.25),
        ({"retry_after_ms": "250", "retry_after": "9"}, 0.25),  # the finer one wins
        ({"retry_after": formatdate(WALL + 5, usegmt=True)}, 5.0),  # by the injected wall clock
    ],
)
@pytest.mark.parametrize("status", [429, 503, 529])
def test_a_retryable_status_with_a_server_delay_waits_that_delay(
    status: int, fields: dict[str, str], seconds: float
) -> None:
    given: Any = fields
    decision = respond(attempts(), status, **given)
    assert decision.action == RETRY
    assert decision.wait == pytest.approx(seconds, abs=1e-9)


def test_a_server_delay_over_the_policys_cap_falls_back_to_the_backoff() -> None:
    decision = respond(attempts(qa.RetryPolicy(max_retry_after_ms=1000), uniform=0.0), 429, retry_after="2")
    assert decision.wait == pytest.approx(0.5)


def test_x_should_retry_overrides_the_status() -> None:
    no = respond(attempts(), 503, x_should_retry="false")
    assert no.action == RAISE
    assert isinstance(no.error, qa.ServerError)
    assert no.recorded
    yes = respond(attempts(), 400, x_should_retry="true")
    assert yes.action == RETRY
    assert isinstance(yes.error, qa.BadRequest)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_a_status_not_worth_a_retry_is_raised_at_once(status: int) -> None:
    state = attempts()
    decision = respond(state, status)
    assert decision.action == RAISE
    assert getattr(decision.error, "status", None) == status
    assert state.retries == 0
    assert state.call.attempts == 1


# -- the limits: max_retries and the budget --------------------------------------------------------


@pytest.mark.parametrize("max_retries", [0, 1, 3])
def test_max_retries_allows_exactly_that_many_retries(max_retries: int) -> None:
    state = attempts(qa.RetryPolicy(max_retries=max_retries))
    for number in range(1, max_retries + 1):  # up to the limit: retried
        assert respond(state, 503).action == RETRY
        assert state.retries == number
    last = respond(state, 503)  # one past: raised
    assert last.action == RAISE
    assert isinstance(last.error, qa.ServerError)
    assert state.retries == max_retries
    assert state.call.attempts == max_retries + 1


def test_an_empty_budget_ends_the_call_with_the_attempts_error() -> None:
    budget = RetryBudget(capacity=10, retry_cost=5, success_refund=1)
    state = attempts(qa.RetryPolicy(max_retries=5), budget=budget)
    assert respond(state, 503).action == RETRY  # 10 -> 5
    assert respond(state, 503).action == RETRY  # exactly what is left: 5 -> 0
    last = respond(state, 503)  # one past
    assert last.action == RAISE
    assert isinstance(last.error, qa.ServerError)
    assert budget.tokens == 0.0
    assert state.retries == 2


def test_a_429_with_a_server_delay_spends_no_budget_one_without_does() -> None:
    budget = RetryBudget(capacity=5, retry_cost=5)
    state = attempts(qa.RetryPolicy(max_retries=5), budget=budget)
    assert respond(state, 429, retry_after="1").action == RETRY
    assert budget.tokens == 5.0
    assert respond(state, 429).action == RETRY
    assert budget.tokens == 0.0
    assert respond(state, 429).action == RAISE


# -- failures without a response --------------------------------------------------------------------


def test_a_retryable_connection_failure_is_retried_and_its_cause_kept() -> None:
    state = attempts(uniform=0.0)
    error = connection_failed()
    decision = state.on_failure(error, 1.0, 1.5)
    assert decision.action == RETRY
    assert decision.error is error
    assert decision.wait == pytest.approx(0.5)
    assert isinstance(state.call.transport_error, ConnectionRefusedError)
    assert (state.call.history[0].status, state.call.history[0].error) == (None, "ConnectionFailed")


def test_a_connection_failure_is_retryable_unless_it_says_otherwise() -> None:
    # ConnectionFailed's class default: one made without setting .retryable is retried.
    error = qa.ConnectionFailed(f"{BASE}: ConnectionResetError: reset")
    assert error.retryable is True
    assert ProxyError("proxy refused: HTTP 502", status=502).retryable is True
    assert attempts(uniform=0.0).on_failure(error, 1.0, 1.5).action == RETRY


@pytest.mark.parametrize(
    ("error", "policy"),
    [
        (connection_failed(retryable=False), qa.RetryPolicy()),  # an untrusted certificate
        (connection_failed(), qa.RetryPolicy(retry_connection_errors=False)),
    ],
    ids=["not-retryable", "policy-says-no"],
)
def test_a_connection_failure_not_worth_a_retry_is_raised(error: qa.QAError, policy: qa.RetryPolicy) -> None:
    state = attempts(policy)
    decision = state.on_failure(error, 1.0, 1.5)
    assert decision.action == RAISE
    assert decision.error is error
    assert decision.recorded
    assert state.call.attempts == 1


@pytest.mark.parametrize(("status", "action"), [(502, RETRY), (407, RAISE)])
def test_a_proxys_refusal_goes_by_its_status(status: int, action: str) -> None:
    error = ProxyError(f"proxy refused: HTTP {status}", status=status)
    error.retryable = status != 407
    error.diagnostics.body = f"denied for {KEY}"
    state = attempts()
    decision = state.on_failure(error, 1.0, 1.5)
    assert decision.action == action
    assert state.call.status == decision.status == state.call.history[0].status == status
    assert state.call.body == "denied for [redacted]"


def test_a_retry_status_that_raises_on_a_proxys_refusal_leaves_with_the_attempt_recorded() -> None:
    # The caller's bug, judging a proxy's status as it would a response's: their exception,
    # once the attempt it judged is in the history.
    def retry_status(status: int) -> bool:
        raise LookupError(f"no rule for {status}")

    error = ProxyError("proxy refused: HTTP 502", status=502)
    error.retryable = True
    state = attempts(qa.RetryPolicy(retry_status=retry_status))
    decision = state.on_failure(error, 1.0, 1.5)
    assert decision.action == RAISE
    assert (type(decision.error), str(decision.error)) == (LookupError, "no rule for 502")
    assert decision.recorded
    assert (decision.status, state.call.history[0].status, state.call.history[0].error) == (
        502,
        502,
        "LookupError",
    )


def test_a_body_refused_after_its_head_records_that_head_and_names_its_status() -> None:
    # A 2xx head came, then its body was refused (``_failure.failure``): that head is the last
    # response (status, headers, request id), and the error names the answer as a shape refused is.
    state = attempts()
    respond(state, 503, request_id="req-1")
    error = qa.InvalidResponse("the response body is malformed: chunk data not followed by CRLF")
    error.diagnostics.status = 200
    error.diagnostics.headers = ResponseHeaders([("request-id", "req-2")])
    refusal = error.message
    decision = state.on_failure(error, 2.0, 2.5)
    assert decision.action == RAISE
    assert (decision.status, decision.request_id, state.call.history[1].status) == (200, "req-2", 200)
    assert state.call.status == 200
    assert state.call.headers is error.diagnostics.headers
    named = f"HTTP 200 from POST {BASE}/v1/core: {refusal}"
    assert (str(error), error.message) == (named, named)


def test_a_failure_without_a_head_leaves_the_last_responses_status() -> None:
    state = attempts()
    respond(state, 503, request_id="req-1")
    decision = state.on_failure(connection_failed(), 2.0, 2.5)
    assert decision.action == RETRY
    assert (decision.status, state.call.history[1].status) == (None, None)
    assert (state.call.status, state.call.request_id) == (503, "req-1")  # Diagnostics: the last status


def test_a_call_stopped_before_its_first_attempt_gives_nothing_back() -> None:
    # Cancelled while it waited to start (``call.check()`` before the first ``slot()``): no
    # attempt, no slot, no pause to drop; the error leaves as it came.
    limiter = Limiter(engaged=True)
    state = attempts(limiter=limiter)
    error = qa.Canceled("the call was cancelled")
    state.end(error)
    assert (str(error), error.diagnostics.attempts) == ("the call was cancelled", 0)
    assert (limiter.reports, limiter.drops) == ([], 0)


def test_cancellation_during_an_attempt_is_recorded_and_raised() -> None:
    limiter = Limiter(engaged=True)
    state = attempts(limiter=limiter)
    assert state.slot() == (None, 0)
    state.ticket = 7.0
    decision = state.on_failure(qa.Canceled("the call was cancelled"), 1.0, 1.25)
    assert decision.action == RAISE
    assert isinstance(decision.error, qa.Canceled)
    assert state.call.history[0].error == "Canceled"
    assert state.call.attempts == 1
    assert limiter.reports == [(7.0, None, None)]  # the slot goes back


def test_an_interrupt_is_raised_unrecorded_and_the_slot_given_back() -> None:
    limiter = Limiter(engaged=True)
    state = attempts(limiter=limiter)
    state.slot()
    state.ticket = 3.0
    interrupt = KeyboardInterrupt()
    decision = state.on_failure(interrupt, 1.0, 1.1)
    assert decision.action == RAISE
    assert decision.error is interrupt
    assert not decision.recorded
    assert state.call.attempts == 0
    assert limiter.reports == [(3.0, None, None)]


def test_a_resend_is_an_attempt_but_no_retry_no_wait_no_budget_and_keeps_its_slot() -> None:
    limiter = Limiter(engaged=True)
    budget = RetryBudget(capacity=5, retry_cost=5)
    state = attempts(budget=budget, limiter=limiter)
    state.slot()
    state.ticket = 4.0
    decision = state.on_failure(Resend(ConnectionResetError(104, "reset")), 1.0, 1.01)
    assert (decision.action, decision.wait, decision.fresh) == (RETRY, None, True)
    assert state.call.attempts == 1
    assert state.call.history[0].error == "ConnectionFailed"
    assert "ConnectionResetError" in str(decision.error)
    assert state.retries == 0
    assert budget.tokens == 5.0
    assert limiter.reports == []
    assert state.slot() is None  # the re-send goes in the same slot...
    assert respond(state, 200).action == RETURN
    assert limiter.reports == [(4.0, 200, None)]  # ...and reports once, with its ticket
    assert state.call.attempts == 2


def test_a_resend_after_a_backoff_in_the_limiters_slot_goes_at_once_in_that_slot() -> None:
    # The retry asked for its slot with its backoff as its own wait; its kept-alive connection
    # then failed: the re-send waits neither that backoff again nor for a new slot.
    limiter = Limiter(engaged=True)
    state = attempts(limiter=limiter, uniform=0.0)
    assert respond(state, 503).action == RETRY
    slot: Any = state.slot()
    assert slot == (pytest.approx(0.5), Priority.NEW)
    state.ticket = 2.0
    decision = state.on_failure(Resend(ConnectionResetError(104, "reset")), 1.0, 1.01)
    assert (decision.action, decision.wait, decision.fresh) == (RETRY, None, True)
    assert state.wait is None
    assert state.slot() is None


def test_after_a_resend_the_next_retry_asks_the_limiter_for_a_slot_of_its_own() -> None:
    limiter = Limiter(engaged=True)
    state = attempts(limiter=limiter, uniform=0.0)
    state.slot()
    state.ticket = 4.0
    state.on_failure(Resend(ConnectionResetError(104, "reset")), 1.0, 1.01)
    assert state.slot() is None  # the re-send: the slot it repeats
    assert respond(state, 503).action == RETRY
    assert limiter.reports == [(4.0, 503, None)]
    slot: Any = state.slot()
    assert slot == (pytest.approx(0.5), Priority.NEW)  # its retry: a new one


def test_a_call_stopped_before_its_resend_gives_the_slot_it_holds_back() -> None:
    limiter = Limiter(engaged=True)
    state = attempts(limiter=limiter)
    state.slot()
    state.ticket = 4.0
    state.on_failure(Resend(BrokenPipeError(32, "pipe")), 1.0, 1.01)
    assert limiter.reports == []  # kept for the re-send
    state.end(qa.Canceled("the call was cancelled"))
    assert limiter.reports == [(4.0, None, None)]
    assert state.ticket is None


# -- the rate limiter seam -------------------------------------------------------------------------


def test_a_disengaged_limiter_is_asked_for_no_slot_and_learns_the_successes() -> None:
    limiter = Limiter(engaged=False)
    state = attempts(limiter=limiter)
    assert state.slot() is None
    respond(state, 200, started=12.5)
    assert limiter.succeeded == [12.5]
    assert limiter.reports == []
    state = attempts(limiter=limiter)
    state.slot()
    respond(state, 503)
    assert limiter.reports == []  # nothing to tell of a 5xx sent disengaged
    respond(state, 429, retry_after_ms="1500")
    assert limiter.reports == [(None, 429, 1.5)]  # a throttle engages it


@pytest.mark.parametrize(("status", "learned"), [(200, [3.0]), (299, [3.0]), (300, [])])
def test_every_2xx_sent_disengaged_and_only_a_2xx_is_learned_as_a_success(
    status: int, learned: list[float]
) -> None:
    limiter = Limiter(engaged=False)
    state = attempts(limiter=limiter)
    state.slot()
    assert (respond(state, status, started=3.0).action == RETURN) == bool(learned)
    assert limiter.succeeded == learned
    assert limiter.reports == []


@pytest.mark.parametrize("zero", ["0_0", "-0", "0e0", "\xa00"])
def test_a_retry_after_ms_that_only_float_reads_as_zero_pauses_by_retry_after(zero: str) -> None:
    # Malformed, it is ignored as if absent (docs/retries.md): Retry-After pauses the client.
    limiter = Limiter(engaged=True)
    state = attempts(qa.RetryPolicy(max_retries=2), limiter=limiter)
    state.slot()
    state.ticket = 1.0
    respond(state, 429, retry_after_ms=zero, retry_after="1")
    assert limiter.reports == [(1.0, 429, 1.0)]


def test_a_throttled_call_asks_for_a_slot_ahead_and_its_last_retry_further_ahead() -> None:
    limiter = Limiter(engaged=True)
    state = attempts(qa.RetryPolicy(max_retries=2), limiter=limiter)
    assert state.slot() == (None, 0)
    state.ticket = 1.0
    respond(state, 429, retry_after_ms="0", retry_after="1")
    assert limiter.reports == [(1.0, 429, None)]  # retry-after-ms: 0 pauses nobody
    slot: Any = state.slot()
    assert slot == (pytest.approx(1.0), 1)
    state.ticket = 2.0
    respond(state, 429, retry_after="2")
    assert limiter.reports[-1] == (2.0, 429, 2.0)
    slot = state.slot()
    assert slot == (pytest.approx(2.0), 2)
    state.ticket = 3.0
    assert respond(state, 500).action == RAISE  # the last retry spent
    last: Any = limiter.reports[-1]
    assert last == (3.0, 500, None)


# -- the error that leaves the call ----------------------------------------------------------------


def test_the_final_error_names_the_request_id_and_attempts_and_hides_the_key() -> None:
    state = attempts(qa.RetryPolicy(max_retries=1))
    respond(state, 503, f'{{"detail": "down for {KEY}"}}'.encode())
    decision = respond(state, 503, b'{"detail": "still down"}', request_id="req-9")
    assert decision.action == RAISE
    error: Any = decision.error
    state.end(error)
    assert str(error).endswith("(request id req-9) (after 2 attempts)")
    assert error.diagnostics.attempts == len(error.diagnostics.history) == 2
    assert KEY not in pickle.dumps(error).decode("latin-1")


def test_a_canceled_call_does_not_name_its_attempts() -> None:
    state = attempts()
    respond(state, 503)
    error = qa.Canceled("the call was cancelled")
    state.end(error)
    assert str(error) == "the call was cancelled"
    assert error.diagnostics.attempts == 1


def test_a_resend_never_asks_the_limiter_even_if_it_engaged_meanwhile() -> None:
    limiter = Limiter(engaged=False)
    state = attempts(limiter=limiter)
    assert state.slot() is None
    state.on_failure(Resend(BrokenPipeError(32, "pipe")), 1.0, 1.01)
    limiter.engaged = True  # another thread's 429
    assert state.slot() is None
    respond(state, 200, started=2.0)
    assert limiter.succeeded == [2.0]
    assert limiter.reports == []


@pytest.mark.parametrize("asked", [False, True], ids=["before-its-slot", "after-asking"])
def test_a_throttled_call_stopped_before_its_retry_asks_for_a_slot_lets_its_pause_go(asked: bool) -> None:
    # Cancelled between its 429 and its retry: nobody will wait for that pause any more (the
    # limiter's ``abandon`` does the same for a retry stopped while it waits for its slot).
    limiter = Limiter(engaged=True)
    state = attempts(limiter=limiter)
    respond(state, 429, retry_after="30")
    if asked:
        state.slot()  # from here the limiter's own waiter covers it
    state.end(qa.Canceled("the call was cancelled"))
    assert limiter.drops == (0 if asked else 1)


def test_a_call_stopped_during_a_backoff_that_no_429_asked_for_drops_no_pause() -> None:
    limiter = Limiter(engaged=True)
    state = attempts(limiter=limiter)
    respond(state, 503)
    state.end(qa.Canceled("the call was cancelled"))
    assert limiter.drops == 0


def test_a_backoff_waited_while_another_call_engaged_the_limiter_then_asks_for_its_slot() -> None:
    # The driver slept the backoff alone (no slot: the limiter was disengaged); a 429 elsewhere
    # engaged it meanwhile, so the retry asks for its slot now, its own wait already done.
    limiter = Limiter(engaged=False)
    state = attempts(limiter=limiter, uniform=0.0)
    assert respond(state, 503).action == RETRY
    assert state.slot() is None
    assert state.wait == pytest.approx(0.5)
    limiter.engaged = True
    assert state.rested() == (None, Priority.NEW)
    assert state.wait is None
    limiter.engaged = False
    assert state.rested() is None  # still disengaged: nothing to ask for


@pytest.mark.parametrize("status", [429, 529])
def test_a_throttle_sent_while_the_limiter_is_disengaged_engages_it(status: int) -> None:
    limiter = Limiter(engaged=False)
    state = attempts(limiter=limiter)
    state.slot()
    assert respond(state, status, retry_after="2").action == RETRY
    assert limiter.reports == [(None, status, 2.0)]


class Absorbing(Limiter):
    """A limiter pacing a busy client: it absorbs a 429 that carries a delay."""

    def absorbs(self) -> bool:
        return True


@pytest.mark.parametrize("max_retries", [1, 2])
def test_a_paced_client_absorbs_up_to_ABSORBED_429s_a_call_beyond_max_retries(max_retries: int) -> None:
    limiter = Absorbing(engaged=True)
    state = attempts(qa.RetryPolicy(max_retries=max_retries), limiter=limiter)
    for absorbed in range(1, ABSORBED + 1):
        state.slot()
        assert respond(state, 429, retry_after="1").action == RETRY
        assert (state.absorbed, state.retries) == (absorbed, 0)
    for retry in range(1, max_retries + 1):  # past ABSORBED, each 429 is a retry again
        slot: Any = state.slot()
        assert slot == (pytest.approx(1.0), Priority.RETRY)
        assert respond(state, 429, retry_after="1").action == RETRY
        assert (state.absorbed, state.retries) == (ABSORBED, retry)
    slot = state.slot()
    assert slot == (pytest.approx(1.0), Priority.LAST)
    decision = respond(state, 429, retry_after="1")
    assert decision.action == RAISE
    assert isinstance(decision.error, qa.RateLimited)
    assert state.call.attempts == ABSORBED + max_retries + 1


def test_a_call_with_no_retries_absorbs_no_429() -> None:
    limiter = Absorbing(engaged=True)
    state = attempts(qa.RetryPolicy(max_retries=0), limiter=limiter)
    assert state.slot() == (None, Priority.NEW)
    decision = respond(state, 429, retry_after="1")
    assert decision.action == RAISE
    assert isinstance(decision.error, qa.RateLimited)
    assert state.absorbed == 0


def test_a_429_without_a_delay_is_never_absorbed() -> None:
    limiter = Absorbing(engaged=True)
    state = attempts(qa.RetryPolicy(max_retries=1), limiter=limiter)
    state.slot()
    assert respond(state, 429).action == RETRY
    assert (state.absorbed, state.retries) == (0, 1)


def test_an_outgoing_request_is_frozen_and_shows_its_method_path_and_body_size_never_a_field() -> None:
    request = CORE.with_body(b'{"a": 1}')
    assert repr(request) == "Outgoing(POST /v1/core, 8 body bytes)"
    assert repr(CORE) == "Outgoing(POST /v1/core, 0 body bytes)"
    assert KEY not in repr(request)
    assert request.head == CORE.head == request_head("POST", "/api/v1/core", CORE.fields)
    with pytest.raises(AttributeError):  # a tuple with no __dict__: nothing can be hung on it
        request.note = "x"  # type: ignore[attr-defined]


def test_an_outgoing_post_says_content_length_even_without_a_body_and_a_get_never() -> None:
    host = CORE.fields[:1]
    post = Outgoing("POST", "/api/v1/core", host, "/v1/core")
    assert encode(post) == b"POST /api/v1/core HTTP/1.1\r\nHost: service.test\r\nContent-Length: 0\r\n\r\n"
    get = Outgoing("GET", "/api/v1/models", host, "/v1/models")
    assert encode(get) == b"GET /api/v1/models HTTP/1.1\r\nHost: service.test\r\n\r\n"

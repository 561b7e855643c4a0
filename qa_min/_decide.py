"""The retry decisions of one call, as a value: fed each outcome, it says what comes next.

``Attempts`` is to a call what urllib3's ``Retry`` is to a request, without the copying: the
driver (``_retrying.Sender.send``, and any other driver: it does no I/O) feeds it each outcome,
``on_response`` or ``on_failure``, and gets back a ``Decision``: return this body, raise this
error, or send again after ``wait`` seconds (``None`` for at once). It decides what the call's
``Diagnostics`` record, what the retry budget and the rate limiter are told, and which error
leaves the call. It never sleeps, sends, or reads a clock: the driver passes the times in, and
the client's ``random`` and wall clock come with its ``Rules``.

The rate limiter is touched in one place, the section at the end of the class: ``slot()`` says
whether the next attempt must ask the limiter for a slot (the driver's ``acquire`` waits for
it), ``_tell`` reports each outcome to it (and hands it every response's headers, for an
announced limit), ``_absorbs`` says whether it absorbs a 429 beyond ``max_retries``.
"""

from __future__ import annotations

from ._backoff import backoff_ms, delay_number, server_delay_ms, should_retry
from ._errors import ConnectionFailed, InvalidOption, InvalidResponse, ProxyError, QAError
from ._http import Resend
from ._limiter import ABSORBED
from ._pacer import Priority
from ._typing import short

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional

    from ._backoff import RetryPolicy
    from ._call import CallState, RetryBudget
    from ._diagnostics import ResponseHeaders
    from ._http import Outgoing
    from ._limiter import Limiter
    from ._messages import Messages

RETURN, RAISE, RETRY = "return", "raise", "retry"


class Rules:
    """What every call of one client decides with; shared by its threads."""

    __slots__ = ("budget", "limiter", "messages", "random", "wall_clock")

    def __init__(
        self,
        messages: Messages,
        budget: Optional[RetryBudget],
        limiter: Optional[Limiter],
        random: Callable[[], float],
        wall_clock: Callable[[], float],
    ) -> None:
        self.messages = messages
        self.budget = budget
        self.limiter = limiter
        self.random = random
        self.wall_clock = wall_clock  # for a Retry-After given as an HTTP-date


class Decision:
    """What the driver does after an attempt.

    Attributes:
        action: ``RETURN`` (``body``), ``RAISE`` (``error``) or ``RETRY``.
        wait: Before a retry: seconds to wait, or None to send again at once (a re-send on a
            fresh connection, ``fresh`` True).
        body: The 2xx body, redacted.
        error: The error to raise; or, before a retry, the one the attempt ended in.
        recorded: Whether the attempt went into the call's history (its log line and hooks are due).
        status, duration, request_id: The attempt's, as recorded.
    """

    __slots__ = ("action", "body", "duration", "error", "fresh", "recorded", "request_id", "status", "wait")

    def __init__(
        self,
        action: str,
        error: Optional[BaseException] = None,
        body: bytes = b"",
        wait: Optional[float] = None,
        fresh: bool = False,
        recorded: bool = False,
        status: Optional[int] = None,
        duration: float = 0.0,
        request_id: Optional[str] = None,
    ) -> None:
        self.action = action
        self.error = error
        self.body = body
        self.wait = wait
        self.fresh = fresh
        self.recorded = recorded
        self.status = status
        self.duration = duration
        self.request_id = request_id


class Attempts:
    """The retry state of one call: how many retries were made, what the next attempt waits."""

    __slots__ = (
        "absorbed",
        "call",
        "pending",
        "policy",
        "request",
        "resending",
        "retries",
        "rules",
        "throttled",
        "ticket",
        "wait",
    )

    def __init__(self, rules: Rules, request: Outgoing, policy: RetryPolicy, call: CallState) -> None:
        self.rules = rules
        self.request = request
        self.policy = policy
        self.call = call
        self.retries = 0
        self.absorbed = 0  # 429s with a delay the limiter absorbed (not counted in retries)
        self.wait: Optional[float] = None  # seconds before the next attempt; None: at once
        self.throttled = False  # the last attempt got a 429/529
        self.ticket: Optional[float] = None  # the limiter's, for the attempt in flight
        self.resending = False  # the next send repeats the last one, in its slot of the limiter
        self.pending = False  # a throttled retry is due and has not yet asked for its slot

    def on_response(
        self, status: int, headers: ResponseHeaders, body: bytes, started: float, ended: float
    ) -> Decision:
        """A response arrived: ``started`` and ``ended`` are the attempt's times (monotonic)."""
        call = self.call
        call.status = status
        call.headers = headers
        rules = self.rules
        if rules.limiter is not None:
            rules.limiter.hear(headers.items())  # an announced limit paces before the first 429
        if 200 <= status < 300:
            if rules.limiter is not None:
                self._tell(status, None, started)
            decision = self._record(RETURN, None, status, started, ended, rules.messages.redact.data(body))
            if rules.budget is not None:
                rules.budget.refund()
            return decision
        policy = self.policy
        throttled = status in (429, 529)
        delay = None
        if policy.respect_retry_after:
            delay = server_delay_ms(
                headers.get("retry-after-ms"),
                headers.get("retry-after"),
                policy.max_retry_after_ms,
                rules.wall_clock(),
            )
        if throttled or self.ticket is not None:
            self._tell(status, _pause_seconds(headers, delay) if throttled else None, started)
        failure = rules.messages.status_error(status, headers, body, self.request, call)
        try:
            wait = self._again(failure, delay, throttled) if should_retry(policy, status, headers) else None
        except BaseException as exc:
            # The caller's retry_status (or random) raised: their bug, so their exception leaves
            # the call unchanged, once the attempt it judged is recorded (history, hooks, Diagnostics).
            return self._record(RAISE, exc, status, started, ended)
        return self._record(RAISE if wait is None else RETRY, failure, status, started, ended, wait=wait)

    def on_failure(self, exc: BaseException, started: float, ended: float) -> Decision:
        """The attempt ended without a whole response: ``exc`` is what the transport raised."""
        if isinstance(exc, Resend):
            # Not a retry (no wait, no budget, no retry counted, the same slot of the limiter),
            # but an attempt: the server may have read the request.
            noted = ConnectionFailed(
                f"{self.rules.messages.base_url}: the reused connection failed before the response "
                f"({type(exc.error).__name__}); sent again on a fresh one"
            )
            self.resending = True
            self.wait = None
            return self._record(RETRY, noted, None, started, ended, fresh=True)
        self._tell(None, None, started)
        if not isinstance(exc, QAError):
            return Decision(RAISE, exc)  # KeyboardInterrupt and the like: not an outcome to record
        call = self.call
        status = None  # the attempt's, once a response's head came
        if isinstance(exc, ConnectionFailed):
            call.transport_error = self.rules.messages.safe_cause(exc)
        # Now, not when the call ends: the after_attempt hooks see this error, and a retried
        # attempt's error never reaches ``end``.
        self.rules.messages.scrub(exc)
        if isinstance(exc, ProxyError):
            # The proxy answered: its status and page are what the caller can act on, and the
            # attempt's record holds that status as ``Diagnostics.status`` does. Its headers are
            # not kept: an earlier response's must not lend this answer their request id.
            status = call.status = exc.status
            call.headers = None
            call.body = self.rules.messages.redact(exc.diagnostics.body or "")
        elif exc.diagnostics.status is not None:
            # A head came, then its body was refused or cut short (``_failure.failure``): the
            # head is the last response, its request id the attempt's.
            status = call.status = exc.diagnostics.status
            call.headers = exc.diagnostics.headers
            if isinstance(exc, InvalidResponse):  # a 2xx body refused: named as a shape refused is
                exc.message = self.rules.messages.answered(status, self.request, exc.message)
                exc.args = (exc.message,)
        wait = None
        try:
            if isinstance(exc, ConnectionFailed) and exc.retryable and _retry_failure(self.policy, exc):
                wait = self._again(exc, None, False)
        except BaseException as raised:  # the caller's retry_status, judging a proxy's refusal
            return self._record(RAISE, raised, status, started, ended)
        return self._record(RAISE if wait is None else RETRY, exc, status, started, ended, wait=wait)

    def end(self, exc: BaseException) -> None:
        """``exc`` leaves the call: a slot still held goes back to the limiter; a qa_min error
        gets the call's Diagnostics, its request id and attempts named, the key hidden."""
        self._tell(None, None, 0.0)
        if self.pending and self.rules.limiter is not None:
            # Stopped between its 429 and its retry's slot: as a wait abandoned (``abandon``).
            self.rules.limiter.dropped()
        if isinstance(exc, QAError):
            self.rules.messages.finish(exc, self.call)
        else:  # the caller's own exception or an interrupt: it leaves as it is, the record filled
            self.call.fill()

    def _again(self, failure: QAError, delay: Optional[float], throttled: bool) -> Optional[float]:
        """A retryable failure: the seconds to wait before the retry, or None when retries or
        the budget ran out (the failure is raised)."""
        self.throttled = throttled
        policy, budget = self.policy, self.rules.budget
        # A 429/529 retried after the delay the server asked for is announced pacing, not the
        # failure storm the budget guards against: it spends no budget.
        exempt = throttled and delay is not None
        absorb = exempt and self._absorbs()
        if not absorb and self.retries >= policy.max_retries:
            return None
        if delay is None:  # drawn before the budget is charged: the caller's random may raise
            delay = backoff_ms(policy, self.retries, _uniform(self.rules.random()))
        if not (absorb or exempt or budget is None or budget.try_spend()):
            return None
        self.wait = delay / 1000.0
        self.pending = throttled
        if absorb:
            self.absorbed += 1
        else:
            self.retries += 1
        return self.wait

    def _record(
        self,
        action: str,
        error: Optional[BaseException],
        status: Optional[int],
        started: float,
        ended: float,
        body: bytes = b"",
        wait: Optional[float] = None,
        fresh: bool = False,
    ) -> Decision:
        """The attempt's history record (one per attempt: the one count of attempts), and the
        decision that carries it to the driver's log line and hooks."""
        duration = ended - started
        request_id = self.call.record(status, None if error is None else type(error).__name__, duration)
        return Decision(action, error, body, wait, fresh, True, status, duration, request_id)

    # -- the rate limiter: every exchange with it is here --------------------------------------

    def slot(self) -> Optional[tuple[Optional[float], Priority]]:
        """Whether the next attempt asks the limiter for a slot: (its own wait, its priority),
        or None (then it only waits ``wait``). The driver's ``acquire`` returns ``ticket``."""
        limiter = self.rules.limiter
        self.pending = False
        if self.resending:
            self.resending = False
            return None  # a re-send keeps the slot (and any ticket) of the attempt it repeats
        self.ticket = None
        if limiter is None or not limiter.engaged:
            return None
        # One sleep covers both the call's own delay and its slot in the schedule.
        if not self.throttled:
            return self.wait, Priority.NEW
        last = self.retries >= self.policy.max_retries and not self._absorbs()
        return self.wait, Priority.LAST if last else Priority.RETRY

    def rested(self) -> Optional[tuple[Optional[float], Priority]]:
        """After a wait ``slot()`` left to the driver alone (the limiter was disengaged): the
        slot to ask for now if another call's 429 engaged it meanwhile, that wait done."""
        self.wait = None
        return self.slot()

    def _absorbs(self) -> bool:
        """Whether the limiter absorbs this 429 (it had a delay): not counted in ``max_retries``,
        ``ABSORBED`` at most a call, while it paces a fleet's share (``Limiter.absorbs``)."""
        limiter = self.rules.limiter
        return (
            limiter is not None
            and self.policy.max_retries > 0
            and self.absorbed < ABSORBED
            and limiter.absorbs()
        )

    def _tell(self, status: Optional[int], pause: Optional[float], started: float) -> None:
        """Report an attempt's outcome to the limiter (``status`` None: no response)."""
        limiter = self.rules.limiter
        if limiter is None:
            return
        ticket = self.ticket
        if ticket is None:
            if status is not None and 200 <= status < 300:
                limiter.succeeded.append(started)  # what got through, for a first ceiling
            elif status in (429, 529):
                limiter.report(None, status, pause)
            return
        self.ticket = None
        limiter.report(ticket, status, pause)


def _pause_seconds(headers: ResponseHeaders, delay_ms: Optional[float]) -> Optional[float]:
    """How long a 429/529 pauses the whole client, in seconds; None for no pause.

    ``retry-after-ms: 0`` says the limit frees up at once: the client does not pause, though a
    ``Retry-After`` (whole seconds, rounded up) may come with it. The call itself still waits as
    it always has (``Retry-After``, else its backoff), and retries in the first free slot.
    """
    text = headers.get("retry-after-ms")
    if delay_ms is None or (text is not None and _is_zero(text)):
        return None
    return delay_ms / 1000.0


def _is_zero(text: str) -> bool:
    return delay_number(text) == 0.0  # "0_0" or "-0" is malformed, so ignored: no zero


def _retry_failure(policy: RetryPolicy, failure: ConnectionFailed) -> bool:
    """Whether a connection failure is worth another attempt; a proxy's refusal goes by its status."""
    if isinstance(failure, ProxyError):
        return bool(policy.retry_status(failure.status))
    return policy.retry_connection_errors


def _uniform(drawn: object) -> float:
    """The ``random=`` seam's draw, if it is the number in [0, 1) the docs ask for: else a
    negative, NaN or endless delay would reach ``sleep``, or a raw ``TypeError`` the caller."""
    if isinstance(drawn, (int, float)) and not isinstance(drawn, bool) and 0.0 <= drawn < 1.0:
        return float(drawn)
    raise InvalidOption(f"random must return a number in [0, 1), returned {short(drawn)}")

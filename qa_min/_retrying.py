"""The threaded retry driver: it sleeps, sends and waits; ``_decide`` decides.

``Sender.send`` runs one call: before each attempt it waits (the backoff or the server's delay,
and the rate limiter's slot when the limiter is engaged, in one sleep), sends through the
transport, and hands the outcome to the call's ``Attempts``, whose ``Decision`` says whether
to return, raise, or go round again. Hooks and log lines come from ``_messages``. A second
driver (asyncio) does the same with ``await`` in place of the sleeps.
"""

from __future__ import annotations

import time

from ._decide import RETRY, RETURN, Attempts, Rules
from ._limiter import Limiter
from ._messages import Messages, noting
from ._redact import Redactor

TYPE_CHECKING = False
if TYPE_CHECKING:
    import threading
    from typing import Callable, Optional

    from ._backoff import RetryPolicy
    from ._call import CallState, RetryBudget
    from ._decide import Decision
    from ._errors import QAError
    from ._hooks import Hook
    from ._http import Outgoing
    from ._pacer import Waiter
    from ._ratelimit import RateLimit
    from ._transport import TransportLike


class Sender:
    """Runs the calls of one client: waits, attempts, and what ``Attempts`` decides of them."""

    def __init__(
        self,
        transport: TransportLike,
        budget: Optional[RetryBudget],
        sleep: Callable[[float, threading.Event], object],
        random: Callable[[], float],
        secrets: tuple[Optional[str], ...],
        hooks: Optional[dict[str, tuple[Hook, ...]]] = None,
        rate_limit: Optional[RateLimit] = None,
    ) -> None:
        self.transport = transport
        # The API key and any proxy credentials: a proxy's page or the service may echo either.
        self.redact = Redactor(*secrets)
        self.messages = Messages(self.redact, transport.origin.url(), hooks)
        self._sleep = sleep
        # One limiter per client, shared by its threads; None when rate limiting is off.
        self.rate_limit = rate_limit
        self.limiter = (
            None
            if rate_limit is None
            else Limiter(
                rate_limit.per_second,
                rate_limit.burst,
                rate_limit.adaptive,
                notify=noting(self.messages.base_url),
            )
        )
        self.rules = Rules(self.messages, budget, self.limiter, random, time.time)

    def send(self, request: Outgoing, policy: RetryPolicy, call: CallState) -> bytes:
        """The retry loop: the 2xx body, or the error SPEC.md section 5 names."""
        call.redact = self.redact
        state = Attempts(self.rules, request, policy, call)
        fresh = False
        try:
            while True:
                call.check()
                slot = state.slot()
                if slot is None and state.wait is not None:
                    self._nap(state.wait, call)
                    # Another call's 429 may have paused the client meanwhile (SPEC.md 7a).
                    slot = state.rested()
                if slot is not None:
                    limiter = self.rules.limiter
                    assert limiter is not None
                    state.ticket = limiter.acquire(
                        slot[0], slot[1], lambda s, held, waiter=None: self._nap(s, call, held, waiter)
                    )
                decision = self._attempt(request, state, call, fresh)
                if decision.action == RETURN:
                    return decision.body
                error = decision.error
                assert error is not None  # a RAISE or a RETRY names it
                if decision.action != RETRY:
                    raise error
                fresh = decision.fresh
                if decision.wait is not None:
                    self.messages.retrying(decision.wait, call, error)
        except BaseException as exc:
            state.end(exc)
            raise

    def _attempt(self, request: Outgoing, state: Attempts, call: CallState, fresh: bool) -> Decision:
        """One attempt through the transport, its outcome decided, logged and shown to the hooks."""
        messages = self.messages
        if messages.hooks is not None:
            messages.emit("before_attempt", request, call.attempts + 1)
        started = time.monotonic()
        try:
            status, headers, body = self.transport.attempt(request, call, fresh)
        except BaseException as exc:
            decision = state.on_failure(exc, started, time.monotonic())
        else:
            decision = state.on_response(status, headers, body, started, time.monotonic())
        if decision.recorded:
            messages.attempted(
                request, call, decision.status, decision.error, decision.duration, decision.request_id
            )
        return decision

    def finish(self, exc: QAError, call: CallState) -> None:
        """``exc`` ready to leave the call: Diagnostics filled, request id and attempts named, key hidden."""
        self.messages.finish(exc, call)

    def _nap(
        self, seconds: float, call: CallState, held: float = 0.0, waiter: Optional[Waiter] = None
    ) -> None:
        """One wait before an attempt; ends at once if the call is cancelled or the client closes,
        or, for a ``waiter`` of the rate limiter, when the answer it is held for comes.

        ``held`` seconds of it are the rate limiter's, the rest the backoff or the server's delay.
        """
        inner, limiter = self._sleep, self.limiter
        asked: list[float] = []  # what the wait slept for, once it sleeps: cut to the deadline
        woken: list[threading.Event] = []  # the wait's event, once it sleeps

        def sleep(cut: float, wake: threading.Event) -> object:
            asked.append(cut)
            woken.append(wake)
            if waiter is not None and limiter is not None:
                limiter.arm(waiter, wake.set)  # the limiter wakes it: no polling
                if waiter.answer:  # for another call's answer, which no seam brings sooner
                    return wake.wait(cut)
            return inner(cut, wake)

        started = time.monotonic()
        try:
            call.wait(seconds, sleep)
        finally:
            # A wait cut short (by the deadline, cancelled, closed, or woken by the limiter)
            # counts what it took: the deadline cuts its end, the limiter's part first.
            taken = asked[0] if woken and not woken[0].is_set() else time.monotonic() - started
            call.waited(seconds, held, taken)

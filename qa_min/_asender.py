"""The retry loop of an ``AsyncClient``: ``Sender``'s decisions, awaited instead of slept.

Every decision is the threaded client's ``Sender`` (one per client, built by the same code):
what a response or a failure means (``answered``, ``_failed``), the delay before a retry
(``_backoff``), the retry budget, the rate limiter's reports, the history, the hooks, the log
lines, the final error's message and redaction (``finish``). This loop only awaits: the
attempt on the loop's transport, and the sleep between attempts, which the call's ``Scope``
interrupts.
"""

from __future__ import annotations

import asyncio
import time

from ._ascope import Scope
from ._backoff import backoff_ms
from ._call import hooked
from ._errors import QAError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Awaitable
    from typing import Callable, Optional, Protocol, Union

    from ._backoff import RetryPolicy
    from ._call import CallState
    from ._config import Origin
    from ._diagnostics import ResponseHeaders
    from ._retrying import Sender

    Sleep = Callable[[float], Awaitable[object]]

    class AioTransportLike(Protocol):
        """What the loop needs of a transport: ``_atransport``'s socket one, or its mock."""

        origin: Origin

        async def attempt(
            self, request: bytes, method: str, call: CallState, scope: Scope
        ) -> tuple[int, ResponseHeaders, bytes]: ...
        def close(self) -> None: ...


class AioSender:
    """The retry loop of one ``AsyncClient`` over its ``Sender``'s decisions."""

    def __init__(self, sender: Sender, transport: AioTransportLike, sleep: Optional[Sleep]) -> None:
        self.sender = sender
        self.transport = transport
        self._sleep: Sleep = asyncio.sleep if sleep is None else sleep
        self.scopes: set[Scope] = set()  # of the calls in flight

    async def send(
        self,
        loop: asyncio.AbstractEventLoop,
        request: bytes,
        method: str,
        policy: RetryPolicy,
        call: CallState,
    ) -> bytes:
        """As ``Sender.send``: the 2xx body, or the error SPEC.md section 5 names.

        The call runs in a ``Scope``, which its timeout, its ``CancelToken`` and ``aclose()``
        (through ``scopes``) stop.
        """
        scope = Scope(loop, call)
        scopes = self.scopes
        scopes.add(scope)
        try:
            with hooked(call.token, scope.stop_soon):
                return await self._send(request, method, policy, call, scope)
        finally:
            scope.close()
            scopes.discard(scope)

    async def _send(
        self, request: bytes, method: str, policy: RetryPolicy, call: CallState, scope: Scope
    ) -> bytes:
        sender = self.sender
        call.redact = sender.redact
        budget, attempt = sender._budget, self.transport.attempt
        retries = 0
        wait: Optional[float] = None  # seconds before the next attempt; None before the first
        try:
            while True:
                call.check()
                if wait is not None:
                    await self._nap(wait, call, scope)
                started = time.monotonic()
                try:
                    if sender._hooks is not None:
                        sender._emit("before_attempt", request, method, call, None, None, None)
                        started = time.monotonic()
                    status, headers, body = await attempt(request, method, call, scope)
                except QAError as exc:
                    outcome: Union[bytes, tuple[QAError, Optional[float], bool]]
                    outcome = sender._failed(request, method, policy, call, exc, started)
                else:
                    outcome = sender.answered(
                        request, method, policy, call, None, started, status, headers, body
                    )
                if isinstance(outcome, bytes):
                    return outcome
                failure, delay, throttled = outcome
                exempt = throttled and delay is not None  # announced pacing spends no budget
                if retries >= policy.max_retries or not (exempt or budget is None or budget.try_spend()):
                    raise failure
                if delay is None:
                    delay = backoff_ms(policy, retries, sender._random())
                wait = delay / 1000.0
                sender._log_retry(wait, call, failure)
                retries += 1
        except QAError as exc:
            sender.finish(exc, call)
            raise

    async def _nap(self, seconds: float, call: CallState, scope: Scope) -> None:
        """The wait before a retry, cut short by the deadline; the scope interrupts it."""
        call.delay = seconds
        call.rate_limit_wait = 0.0
        if call.deadline is not None:
            seconds = min(seconds, max(0.0, call.deadline - time.monotonic()))
        try:
            await self._sleep(seconds)
        except asyncio.CancelledError as exc:
            raise scope.absorb(exc) from None
        call.check()

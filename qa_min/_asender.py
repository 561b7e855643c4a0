"""The asyncio driver: ``_retrying.Sender.send`` with ``await`` in place of the sleeps.

Every decision is the one the threaded driver feeds: the call's ``Attempts`` (``_decide``)
with the client's ``Rules``, and its ``Messages`` (hooks, log lines, the final error's text and
redaction), all of them the ``Sender`` that the ``AsyncClient``'s inner ``Client`` built. This
loop only awaits: the attempt on the loop's transport, the wait before a retry, and the rate
limiter's slot; the call's ``Scope`` interrupts any of them.
"""

from __future__ import annotations

import asyncio
import time

from ._ascope import Scope
from ._decide import RETRY, RETURN, Attempts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Awaitable
    from typing import Callable, Optional, Protocol

    from ._backoff import RetryPolicy
    from ._call import CallState
    from ._diagnostics import ResponseHeaders
    from ._http import Outgoing
    from ._limiter import Limiter
    from ._origin import Origin
    from ._pacer import Priority, Waiter
    from ._retrying import Sender

    Sleep = Callable[[float], Awaitable[object]]

    class AioTransportLike(Protocol):
        """What the loop needs of a transport: ``_atransport``'s socket one, or its mock."""

        origin: Origin

        def attempt(
            self, request: Outgoing, call: CallState, scope: Scope, fresh: bool = False
        ) -> Awaitable[tuple[int, ResponseHeaders, bytes]]: ...
        def close(self) -> None: ...


class AioSender:
    """The driver of one ``AsyncClient``'s calls, over its ``Sender``'s decisions."""

    def __init__(self, sender: Sender, transport: AioTransportLike, sleep: Optional[Sleep]) -> None:
        self.sender = sender
        self.transport = transport
        self._sleep: Sleep = asyncio.sleep if sleep is None else sleep
        self.scopes: set[Scope] = set()  # of the calls in flight

    def orphaned(self) -> None:
        """The loop the calls in flight ran on is closed: they will never run again. Their
        scopes are dropped, so that when the garbage collector finalizes one of their tasks, it
        tells the rate limiter nothing (no slot given back, no answer, no pause dropped): the
        limiter's schedule was restarted for the next loop, and is not theirs."""
        scopes = self.scopes
        for scope in scopes:
            scope.close()
        scopes.clear()

    async def send(
        self, loop: asyncio.AbstractEventLoop, request: Outgoing, policy: RetryPolicy, call: CallState
    ) -> bytes:
        """As ``Sender.send``: the 2xx body, or the error SPEC.md section 5 names.

        The call runs in a ``Scope``, which its timeout, its ``CancelToken`` and ``aclose()``
        (through ``scopes``) stop. One coroutine for the whole call: a call in flight keeps few
        frames, which the garbage collector walks again and again when thousands are.
        """
        sender = self.sender
        messages, attempt = sender.messages, self.transport.attempt
        call.redact = sender.redact
        state = Attempts(sender.rules, request, policy, call)
        scope = Scope(loop, call)
        self.scopes.add(scope)
        fresh = False
        try:
            while True:
                call.check()
                slot = state.slot()
                if slot is None and state.wait is not None:
                    await self._nap(state.wait, call, scope)
                    # Another call's 429 may have paused the client meanwhile (SPEC.md 7a).
                    slot = state.rested()
                if slot is not None:
                    limiter = sender.rules.limiter
                    assert limiter is not None
                    state.ticket = await self._acquire(limiter, slot[0], slot[1], call, scope)
                if messages.hooks is not None:
                    messages.emit("before_attempt", request, call.attempts + 1)
                started = time.monotonic()
                try:
                    status, headers, body = await attempt(request, call, scope, fresh)
                except BaseException as exc:
                    decision = self._owned(state, scope).on_failure(exc, started, time.monotonic())
                else:
                    decision = state.on_response(status, headers, body, started, time.monotonic())
                if decision.recorded:
                    messages.attempted(
                        request, call, decision.status, decision.error, decision.duration, decision.request_id
                    )
                if decision.action == RETURN:
                    return decision.body
                error = decision.error
                assert error is not None  # a RAISE or a RETRY names it
                if decision.action != RETRY:
                    raise error
                fresh = decision.fresh
                if decision.wait is not None:
                    messages.retrying(decision.wait, call, error)
        except BaseException as exc:
            self._owned(state, scope).end(exc)
            if scope.foreign is None:
                raise
            # Recorded as the Canceled it became; the canceller gets its CancelledError.
            raise scope.foreign from None
        finally:
            scope.close()
            self.scopes.discard(scope)

    def _owned(self, state: Attempts, scope: Scope) -> Attempts:
        """``state``, cut from the rate limiter if its call was orphaned (``orphaned``): its slot
        was in a schedule forgotten since, which it must not touch. (Its ``pending`` is already
        False: ``slot()`` clears it before the call's first await after a 429.)"""
        if scope not in self.scopes:
            state.ticket = None
        return state

    async def _acquire(
        self, limiter: Limiter, delay: Optional[float], priority: Priority, call: CallState, scope: Scope
    ) -> float:
        """``Limiter.acquire`` on the loop: its ``begin``/``step`` decisions, each wait awaited (one
        the limiter may end early, ``arm``ed with a future), the slot given back on a stop."""
        waiter, first = limiter.begin(delay, priority)
        try:
            if first is not None:
                await self._nap(first[0], call, scope, first[1])
            while True:
                wait = limiter.step(waiter)
                if wait is None:
                    return waiter.slot
                await self._nap(wait[0], call, scope, wait[0], (limiter, waiter) if wait[1] else None)
        except BaseException:
            if scope in self.scopes:  # an orphaned call's waiter is not the schedule's any more
                limiter.abandon(waiter)
            raise

    async def _nap(
        self,
        seconds: float,
        call: CallState,
        scope: Scope,
        held: float = 0.0,
        woken: Optional[tuple[Limiter, Waiter]] = None,
    ) -> None:
        """One wait before an attempt, as ``Sender._nap``: ``held`` seconds of it the limiter's;
        cut short by the deadline, ended early by what ``woken``'s waiter is held for; the call's
        scope interrupts it (its timeout, its token, ``aclose()``)."""
        cut = seconds  # what it sleeps: the deadline cuts its end, the limiter's part first
        if call.deadline is not None:
            cut = min(seconds, max(0.0, call.deadline - time.monotonic()))
        started, early = time.monotonic(), True
        try:
            if woken is not None and (self._sleep is asyncio.sleep or woken[1].answer):
                # A wait for another call's answer is not a seam's: through a seam returning at
                # once, the held calls asked the limiter at every turn of the loop until it came.
                early = await _until_woken(woken[0], woken[1], cut)
            else:
                await self._sleep(cut)
                early = False
                if self._sleep is not asyncio.sleep:
                    # A seam that returns at once stands for time passing, in which the other
                    # calls go on: a turn of the loop lets them.
                    await asyncio.sleep(0)
        except asyncio.CancelledError as exc:
            raise scope.absorb(exc) from None
        finally:
            # A wait cut short (cancelled, or woken by the limiter) counts what it took.
            taken = time.monotonic() - started if early else cut
            call.waited(seconds, held, taken)
        call.check()


async def _until_woken(limiter: Limiter, waiter: Waiter, seconds: float) -> bool:
    """Wait ``seconds``, or until the limiter wakes ``waiter`` (an answer it was held for came).

    The limiter belongs to one client, which belongs to one loop at a time: it wakes the waiter
    on the loop's thread, from ``report``, so the future is set directly. The waiters of a loop
    closed since are forgotten with its schedule (``Limiter.restart``): none is woken.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[bool] = loop.create_future()

    def end(early: bool) -> None:
        if not future.done():
            future.set_result(early)

    timer = loop.call_later(seconds, end, False)
    limiter.arm(waiter, lambda: end(True))
    try:
        return await future
    finally:
        timer.cancel()

"""How an ``AsyncClient`` call is stopped from outside: one scope per call, around its task.

The threaded client wakes a blocked thread by shutting its socket down or setting its sleep's
event. On asyncio the one way to interrupt an ``await``, wherever it is (connecting, the TLS
handshake, the response, a backoff sleep), is to cancel the task, which is what ``Scope.stop``
does, noting why. The code that catches the ``CancelledError`` asks ``absorb`` what it is:
qa_min's own cancellation becomes ``Canceled`` with the reason (the call's timeout, its
``CancelToken``, the client closing). A cancellation of the task by anyone else propagates, but
only once the call has ended as a ``Canceled`` would (the attempt recorded, the hooks run, the
caller's ``Diagnostics`` filled): ``absorb`` keeps it in ``foreign`` for the driver to raise.

Three things stop a scope: a ``loop.call_at`` timer at the call's deadline (no task and no
``asyncio.wait_for`` per call: before Python 3.12 it creates a task and has races), the call's
``CancelToken`` (from any thread, through ``call_soon_threadsafe``), and ``aclose()``.

On Python 3.11+ ``Task.uncancel()`` tells a cancellation of ours from one that came with it;
on 3.9 and 3.10 a cancel of the task that arrives together with ours is taken as ours.
"""

from __future__ import annotations

import asyncio
import time

from ._errors import Canceled, QAError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

    from ._call import CallState
    from ._diagnostics import Diagnostics


class WrongLoop(QAError, RuntimeError):
    """An ``AsyncClient`` was used outside a running loop's task, or from an event loop other
    than its own while its own is open (it follows a new loop once its own is closed)."""


class Scope:
    """The task of one call, and why qa_min cancelled it (``reason``), if it did."""

    __slots__ = (
        "_baseline",
        "_ended",
        "_hook",
        "_loop",
        "_open",
        "_task",
        "_timer",
        "absorbed",
        "foreign",
        "reason",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, call: CallState) -> None:
        task = asyncio.current_task(loop)
        if task is None:
            raise WrongLoop("an AsyncClient call must be awaited inside an asyncio task")
        self._loop = loop
        self._task = task
        self._open = True
        self.reason: Optional[str] = None
        self.absorbed = False
        self.foreign: Optional[BaseException] = None  # a cancellation by anyone else, to raise
        uncancel = getattr(task, "cancelling", None)
        self._baseline = 0 if uncancel is None else uncancel()
        self._timer: Optional[asyncio.TimerHandle] = None
        self._ended: Optional[asyncio.Future[None]] = None  # made by ``ended()``: few calls need it
        if call.deadline is not None:
            at = loop.time() + (call.deadline - time.monotonic())
            self._timer = loop.call_at(at, self.stop, f"the call's timeout of {call.timeout:g} s expired")
        # A token already cancelled registers nothing: the call's first check raises.
        self._hook = None if call.token is None else call.token.hooked(self.stop_soon)
        if self._hook is not None:
            self._hook.__enter__()

    def stop(self, reason: str) -> None:
        """Cancel the call's task, once, unless the call is over. On the loop's thread only."""
        if self._open and self.reason is None:
            self.reason = reason
            self._task.cancel()

    def stop_soon(self) -> None:
        """``stop`` for a cancelled ``CancelToken``: from any thread."""
        try:
            self._loop.call_soon_threadsafe(self.stop, "the call was cancelled")
        except RuntimeError:
            pass  # the loop is closed: so is every call on it

    def absorb(self, exc: BaseException, heard: Optional[Diagnostics] = None) -> Canceled:
        """The ``Canceled`` that the task's cancellation ``exc`` ends the call with (``heard``:
        its diagnostics, the head of a response cut off, as ``_failure.failure`` gives). One by
        anyone else is also kept in ``foreign``: the driver raises it once the call has ended."""
        if self.reason is None or self.absorbed:
            self.foreign = exc
            return Canceled("the call's task was cancelled", heard)
        self.absorbed = True
        uncancel = getattr(self._task, "uncancel", None)
        if uncancel is not None and uncancel() > self._baseline:
            self.foreign = exc  # the task was also cancelled by someone else: theirs wins
        return Canceled(self.reason, heard)

    def ended(self) -> asyncio.Future[None]:
        """A future done once the call is over (``close``). On the loop's thread only."""
        if self._ended is None:
            self._ended = self._loop.create_future()
            if not self._open:
                self._ended.set_result(None)
        return self._ended

    def close(self) -> None:
        """The call is over: later stops do nothing."""
        self._open = False
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)
        if self._timer is not None:
            self._timer.cancel()
        if self._hook is not None:
            self._hook.__exit__(None, None, None)

"""``Call`` and the client's executor, loaded on the first ``submit`` (not at import).

A ``Call`` is a ``concurrent.futures.Future`` with one difference the spec asks for: ``cancel()``
also stops a call that is already running. It cancels the call's own ``CancelToken``, which
shuts its socket down or wakes its backoff sleep, and the call resolves with ``Canceled``. The
stdlib CANCELLED state is never used, so ``result()`` raises ``Canceled``, a ``QAError``, in every
case, and ``cancelled()`` stays False.
"""

from __future__ import annotations

import _thread
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from ._call import CancelToken, unsent
from ._errors import Canceled, InvalidOption
from ._typing import short

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, Callable, Optional, TypeVar

    R = TypeVar("R")
else:
    R = None


class Call(Future[R]):
    """A call running on the client's executor, returned by ``client.submit``.

    ``cancel()`` aborts it whether it is waiting for a thread or already running, and returns
    True unless the call had already finished; ``result()`` then raises ``Canceled``.
    ``asyncio.wrap_future(call)`` makes it awaitable, and cancelling the awaiting task cancels it.
    """

    def __init__(
        self, token: CancelToken, outer: Optional[CancelToken] = None, diagnostics: object = None
    ) -> None:
        super().__init__()
        self._token = token
        self._outer = outer  # the caller's cancel= token, which cancels this call too
        self._diagnostics = diagnostics  # the caller's diagnostics=, filled if it never starts
        self._claimed = False
        self._claim = _thread.allocate_lock()
        self._why = "the call was cancelled"  # what a cancelled call that answered anyway says

    def __reduce__(self) -> tuple[object, ...]:
        # As a concurrent.futures.Future (a TypeError), but saying what to send instead.
        raise TypeError("a Call cannot be pickled or copied: it is a call of this process; send its result()")

    def cancel(self) -> bool:
        """Abort the call; False if it had already finished."""
        return self._stop("the call was cancelled", "the call was cancelled before it started")

    def _stop(self, why: str, unstarted: str) -> bool:
        """``cancel()``, saying ``why`` (``unstarted`` for a call that never started)."""
        with self._claim:
            if self.done():
                return False
            self._why = why
            never_started = not self._claimed
            self._claimed = True
        self._token.cancel()
        if never_started:
            self.set_running_or_notify_cancel()
            canceled = Canceled(unstarted)
            unsent(canceled, self._diagnostics)
            self.set_exception(canceled)
        return True

    def _run(self, fn: Callable[..., R], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        with self._claim:
            if self._claimed:
                return
            self._claimed = True
        self.set_running_or_notify_cancel()
        try:
            if self._outer is None:
                result = fn(*args, **kwargs)
            else:
                with self._outer.hooked(self._token.cancel) as armed:
                    if not armed:
                        self._token.cancel()
                    result = fn(*args, **kwargs)
        except BaseException as exc:
            self.set_exception(exc)
        else:
            if self._token.cancelled:
                # cancel() said it aborted the call: keep its word even if the answer won the race.
                self.set_exception(Canceled(self._why))
            else:
                self.set_result(result)


class Executor:
    """The client's worker threads and the calls they owe, so ``close()`` can end them all."""

    def __init__(self, max_workers: int) -> None:
        self._threads = ThreadPoolExecutor(max_workers, thread_name_prefix="qa_min")
        self._calls: set[Call[Any]] = set()
        self._lock = _thread.allocate_lock()

    def submit(self, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call[R]:
        outer = kwargs.get("cancel")
        if outer is not None and not isinstance(outer, CancelToken):
            raise InvalidOption(f"cancel must be a CancelToken, got {short(outer)}")
        token = CancelToken()
        call: Call[R] = Call(token, outer, kwargs.get("diagnostics"))
        with self._lock:
            self._calls.add(call)
        call.add_done_callback(self._finished)
        self._threads.submit(call._run, fn, args, {**kwargs, "cancel": token})
        return call

    def _finished(self, call: Future[Any]) -> None:
        with self._lock:
            self._calls.discard(call)

    def cancel_all(self) -> None:
        """Cancel every unfinished call, queued or running: the client is closing."""
        with self._lock:
            calls = list(self._calls)
        # Queued calls first: cancelling a running one frees a worker, which must find nothing
        # left to start.
        calls.sort(key=lambda call: call._claimed)
        for call in calls:
            call._stop("the client was closed", "the client was closed before the call started")

    def join(self) -> None:
        """Wait for the worker threads to end, unless called from one of them."""
        # close() from a done-callback runs on a worker: waiting for itself would never end.
        own = threading.current_thread() in getattr(self._threads, "_threads", ())
        self._threads.shutdown(wait=not own)

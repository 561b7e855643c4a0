"""A client's lifecycle: one closing token, one fork check, and the executor behind ``submit``.

``close()`` cancels the closing token first: no call starts after that, and every wait (a
backoff, the rate limiter, a hung mock) wakes. Queued ``Call``s are cancelled next, then the
transport aborts busy sockets and closes idle ones. The pool reads the same token under its
lock, so nothing is pooled after ``close()``. In a child after ``os.fork()`` the first call (or
``close()``) gives the client a fresh pool, executor and rate-limiter schedule (what the limiter
learned stays) and leaves the parent's sockets alone.
"""

from __future__ import annotations

import _thread
import os

from ._call import CancelToken
from ._errors import ClientClosed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, Callable, Optional

    from ._futures import Call, Executor
    from ._limiter import Limiter
    from ._transport import TransportLike


class Lifecycle:
    """Open or closed, which process, and the worker threads: one owner for all three."""

    def __init__(self, max_workers: int) -> None:
        self.closing = CancelToken()
        self.transport: Optional[TransportLike] = None  # set once the client has built it...
        self.limiter: Optional[Limiter] = None  # ...and its rate limiter, if any
        self._max_workers = max_workers
        self._lock = _thread.allocate_lock()
        self._futures: Optional[Executor] = None
        self._pid = os.getpid()

    @property
    def executor(self) -> Optional[Executor]:
        """The executor, or None until the first ``submit``."""
        return self._futures

    def check(self) -> None:
        """Before a call: ``ClientClosed`` after ``close()``; a fresh start in a forked child."""
        if self.closing.cancelled:
            raise ClientClosed("the client is closed")
        self._adopt()

    def _adopt(self) -> None:
        """In a forked child, let go of the parent's pool and executor without touching them."""
        if self._pid != os.getpid():
            # The parent's locks may have been held by its other threads at fork time.
            self._lock = _thread.allocate_lock()
            self._futures = None  # the parent's worker threads do not exist in the child
            if self.transport is not None:
                self.transport.forget()
            if self.limiter is not None:
                self.limiter.forget()
            self._pid = os.getpid()

    def submit(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Call[Any]:
        """Run ``fn(*args, **kwargs)`` on the executor, started on first use."""
        self.check()
        with self._lock:
            if self.closing.cancelled:
                raise ClientClosed("the client is closed")
            futures = self._futures
            if futures is None:
                from ._futures import Executor

                futures = self._futures = Executor(self._max_workers)
            return futures.submit(fn, args, dict(kwargs))

    def close(self) -> None:
        """Cancel everything in flight and release every socket and thread. Idempotent."""
        # A child closing before any call: the calls in flight and their sockets are the
        # parent's, and shutting those sockets down here would break the parent's calls.
        self._adopt()
        with self._lock:
            futures, self._futures = self._futures, None
            self.closing.cancel()
        # Calls queued on the executor end as Canceled before the pool closes: otherwise a
        # worker freed in between would start one on a closed client.
        if futures is not None:
            futures.cancel_all()
        if self.transport is not None:
            self.transport.close()
        if futures is not None:
            futures.join()

"""``CancelToken``: a flag another thread can raise, plus the hooks that make it prompt.

A call registers a hook on its token for as long as it holds a socket; ``cancel()`` runs the
hooks, which shut the socket down, so a thread blocked in ``recv`` or ``send`` wakes at once.
A backoff sleep waits on the token's event, so it ends at once too.
"""

from __future__ import annotations

import _thread
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable


class CancelToken:
    """Cancels the calls it is passed to (``cancel=token``), from any thread.

    A token is one-shot: once cancelled it stays cancelled, and every call given it afterwards
    raises ``Canceled`` before sending anything.
    """

    __slots__ = ("_event", "_hooks", "_lock")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._hooks: list[Callable[[], object]] = []
        self._lock = _thread.allocate_lock()

    @property
    def cancelled(self) -> bool:
        """True once ``cancel()`` was called."""
        return self._event.is_set()

    def cancel(self) -> None:
        """Cancel every call using this token; safe to call from any thread, any number of times."""
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            hooks, self._hooks = self._hooks, []
        # Outside the lock: a hook may take other locks (the pool's), and must not deadlock.
        for hook in hooks:
            try:
                hook()
            except Exception:
                pass

    def _add_hook(self, hook: Callable[[], object]) -> bool:
        """Run ``hook`` on cancel; False (hook not added) if already cancelled."""
        with self._lock:
            if self._event.is_set():
                return False
            self._hooks.append(hook)
            return True

    def _remove_hook(self, hook: Callable[[], object]) -> None:
        with self._lock:
            try:
                self._hooks.remove(hook)
            except ValueError:
                pass

    def __repr__(self) -> str:
        return f"CancelToken(cancelled={self.cancelled})"

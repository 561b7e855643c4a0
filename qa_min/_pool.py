"""The pool of idle keep-alive connections, per (scheme, host, port[, proxy]).

Each key has a LIFO stack of idle connections: the most recently used is the most likely to
still be alive, and the rest age out. Checked-out connections are remembered too, so that
``close()`` can abort requests in flight instead of waiting for them.

Before an idle connection is handed out it must pass two checks:

* its idle age, on a clock that counts a frozen process's pause, is under ``idle_timeout``
  (a NAT or load balancer may have forgotten it without a word);
* a zero-timeout poll finds nothing to read (the server closed it, or sent garbage).

The pool remembers the pid that made it; in a child after ``os.fork()`` it forgets the
parent's connections (closing only the child's copies of the descriptors) and starts over.
"""

from __future__ import annotations

import _thread
import os

from ._connection import Connection, idle_clock

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Hashable


class PoolClosed(Exception):
    """The pool was closed; no connection can be checked out."""


class Pool:
    """Idle connections by key, bounded to ``max_idle`` per key."""

    def __init__(self, max_idle: int, idle_timeout: float) -> None:
        self.max_idle = max_idle
        self.idle_timeout = idle_timeout
        self._pid = os.getpid()
        self._lock = _thread.allocate_lock()
        self._idle: dict[Hashable, list[Connection]] = {}
        self._busy: set[Connection] = set()
        self.closed = False

    def _after_fork(self) -> None:
        # The parent's lock may have been held by another thread at fork time: make new state.
        old = [c for stack in self._idle.values() for c in stack] + list(self._busy)
        self._lock = _thread.allocate_lock()
        self._idle, self._busy = {}, set()
        self._pid = os.getpid()
        for conn in old:
            conn.close()  # closes the child's descriptor only; the parent's socket lives on

    def checkout(self, key: Hashable) -> Connection | None:
        """A live idle connection for ``key``, now marked busy; None if there is none."""
        if self._pid != os.getpid():
            self._after_fork()
        while True:
            with self._lock:
                if self.closed:
                    raise PoolClosed
                stack = self._idle.get(key)
                if not stack:
                    return None
                conn = stack.pop()
                self._busy.add(conn)
            age = idle_clock() - conn.idle_since
            if 0 <= age <= self.idle_timeout and not conn.peer_closed():
                return conn
            self.discard(conn)

    def track(self, conn: Connection) -> None:
        """Mark a new connection busy, so ``close()`` can abort it."""
        with self._lock:
            if self.closed:
                closed = True
            else:
                closed = False
                self._busy.add(conn)
        if closed:
            conn.close()
            raise PoolClosed

    def release(self, conn: Connection) -> None:
        """Return a connection whose response was read to the end and which may be reused."""
        conn.idle_since = idle_clock()
        with self._lock:
            self._busy.discard(conn)
            if not self.closed and self._pid == os.getpid():
                stack = self._idle.setdefault(conn.key, [])
                if len(stack) < self.max_idle:
                    stack.append(conn)
                    return
        conn.close()

    def discard(self, conn: Connection) -> None:
        """Close a connection that failed, was interrupted, or must not be reused."""
        with self._lock:
            self._busy.discard(conn)
        conn.close()

    def idle_count(self) -> int:
        """Idle connections held now, all keys together."""
        with self._lock:
            return sum(len(stack) for stack in self._idle.values())

    def close(self) -> None:
        """Close every idle connection and abort every busy one. Idempotent."""
        with self._lock:
            self.closed = True
            idle = [c for stack in self._idle.values() for c in stack]
            busy = list(self._busy)
            self._idle.clear()
        for conn in idle:
            conn.close()
        for conn in busy:
            # The thread using it wakes with an error and discards it; closing the descriptor
            # here could hand its number to another socket under that thread's feet.
            conn.abort()

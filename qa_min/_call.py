"""The per-call primitives every layer shares: ``CancelToken``, ``CallState``, ``RetryBudget``.

A leaf below the transport: the client makes them, the retry loop and the transport read and
change them, and none of them knows about sockets or HTTP.

Cancellation works by hooks. A call registers a hook on its token for as long as it is blocked
somewhere another thread must be able to wake it (a socket it holds, a backoff sleep);
``cancel()`` runs the hooks, which shut the socket down or set the sleep's event, so the
blocked thread returns at once. ``token.hooked(fn)`` is the one way to register such a hook.
"""

from __future__ import annotations

import _thread
import time

from ._diagnostics import Attempt, Diagnostics
from ._errors import Canceled, InvalidOption
from ._typing import plain, short

TYPE_CHECKING = False
if TYPE_CHECKING:
    import threading
    from types import TracebackType
    from typing import Callable, Optional

    from ._diagnostics import ResponseHeaders
    from ._errors import QAError


class CancelToken:
    """Cancels the calls it is passed to (``cancel=token``), from any thread.

    A token is one-shot: once cancelled it stays cancelled, and every call given it afterwards
    raises ``Canceled`` before sending anything.
    """

    # A flag under a lock, not a threading.Event: every Client makes a token, and ``threading``
    # would then load with ``import qa_min`` (Python 3.12+), which a cold start pays for.
    __slots__ = ("_cancelled", "_hooks", "_lock")

    def __init__(self) -> None:
        self._cancelled = False
        self._hooks: list[Callable[[], object]] = []
        self._lock = _thread.allocate_lock()

    @property
    def cancelled(self) -> bool:
        """True once ``cancel()`` was called."""
        return self._cancelled

    def cancel(self) -> None:
        """Cancel every call using this token; safe to call from any thread, any number of times."""
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            hooks, self._hooks = self._hooks, []
        # Outside the lock: a hook may take other locks (the pool's), and must not deadlock.
        for hook in hooks:
            try:
                hook()
            except Exception:
                pass

    def hooked(self, hook: Callable[[], object]) -> _Hooked:
        """A context manager that runs ``hook`` if the token is cancelled while it is open.

        ``with token.hooked(fn) as armed:`` gives False (and registers nothing) when the token
        was already cancelled; the caller then must not start the blocking work.
        """
        return _Hooked(self, hook)

    def __repr__(self) -> str:
        return f"CancelToken(cancelled={self.cancelled})"

    def __reduce__(self) -> tuple[object, ...]:
        # A token stands for "the calls of this process": across a pickle it is a fresh one,
        # cancelled if the original was.
        return (_restore_token, (self.cancelled,))


def _restore_token(cancelled: bool) -> CancelToken:
    token = CancelToken()
    if cancelled:
        token.cancel()
    return token


def hooked(token: Optional[CancelToken], hook: Callable[[], object]) -> _Hooked:
    """``token.hooked(hook)``, or a block that is always armed when there is no token."""
    return _Hooked(token, hook)


class _Hooked:
    """Registration of one hook on one token for the length of a ``with`` block."""

    __slots__ = ("_hook", "_token")

    def __init__(self, token: Optional[CancelToken], hook: Callable[[], object]) -> None:
        self._token = token
        self._hook = hook

    def __enter__(self) -> bool:
        token = self._token
        if token is None:
            return True
        with token._lock:
            if token._cancelled:
                self._token = None
                return False
            token._hooks.append(self._hook)
            return True

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        token = self._token
        if token is None:
            return
        with token._lock:
            try:
                token._hooks.remove(self._hook)
            except ValueError:
                pass  # cancel() took it: it runs, or already ran, on the cancelling thread


class RetryBudget:
    """A token bucket shared by every thread of one client, as the AWS SDKs' retry quota.

    Each retry takes ``retry_cost`` tokens; each successful call puts back ``success_refund``
    (up to ``capacity``). When the bucket cannot pay for a retry, the call fails after the
    attempt it just made, with that attempt's error. The defaults allow a sustained retry rate
    of one retry per ``retry_cost`` successful calls, so they never engage in normal
    operation; during an outage they turn N calls into about N + capacity/retry_cost
    attempts instead of N * (1 + max_retries).

    Args:
        capacity: Tokens in a full bucket (500).
        retry_cost: Tokens one retry takes (5).
        success_refund: Tokens a successful call puts back (1).

    Raises:
        InvalidOption: An argument is not a number from 0 to below 1e15 (a bool is not one).
    """

    __slots__ = ("_lock", "_tokens", "capacity", "retry_cost", "success_refund")

    def __init__(self, capacity: float = 500, retry_cost: float = 5, success_refund: float = 1) -> None:
        capacity, retry_cost, success_refund = plain(capacity), plain(retry_cost), plain(success_refund)
        for name, value in (
            ("capacity", capacity),
            ("retry_cost", retry_cost),
            ("success_refund", success_refund),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e15:
                raise InvalidOption(
                    f"RetryBudget {name} must be a number from 0 to below 1e15, got {short(value)}"
                )
        self.capacity = float(capacity)
        self.retry_cost = float(retry_cost)
        self.success_refund = float(success_refund)
        self._tokens = self.capacity
        self._lock = _thread.allocate_lock()

    @property
    def tokens(self) -> float:
        """Tokens left now."""
        return self._tokens

    def try_spend(self) -> bool:
        """Take the cost of one retry; False (taking nothing) if the bucket cannot pay."""
        with self._lock:
            if self._tokens < self.retry_cost:
                return False
            self._tokens -= self.retry_cost
            return True

    def refund(self) -> None:
        """Put back a successful call's refund."""
        # The unlocked read keeps the success path lock-free while the bucket is full.
        if self._tokens < self.capacity:
            with self._lock:
                self._tokens = min(self.capacity, self._tokens + self.success_refund)

    def __repr__(self) -> str:
        return (
            f"RetryBudget(capacity={self.capacity:g}, retry_cost={self.retry_cost:g}, "
            f"success_refund={self.success_refund:g}, tokens={self._tokens:g})"
        )

    def __reduce__(self) -> tuple[object, ...]:
        # Its configuration, full: a budget in another process guards that process's calls.
        return (RetryBudget, (self.capacity, self.retry_cost, self.success_refund))


class CallState:
    """What one call carries through its attempts, and what it tells its ``Diagnostics``.

    Made by the client, changed by the retry decisions (``_decide``: status, body, transport
    error, one ``record`` per attempt, which is also the count of attempts); ``fill()`` copies it
    into the caller's ``Diagnostics``.
    """

    __slots__ = (
        "attempts",
        "body",
        "closing",
        "deadline",
        "delay",
        "diagnostics",
        "headers",
        "history",
        "rate_limit_total",
        "rate_limit_wait",
        "redact",
        "request_id",
        "started",
        "status",
        "timeout",
        "token",
        "transport_error",
    )

    def __init__(
        self,
        token: Optional[CancelToken],
        timeout: Optional[float],
        diagnostics: Optional[Diagnostics] = None,
        closing: Optional[CancelToken] = None,
    ) -> None:
        self.token = token
        self.closing = closing  # the client's: cancelled by close()
        self.timeout = timeout
        self.started = time.monotonic()
        self.deadline = None if timeout is None else self.started + timeout
        self.diagnostics = diagnostics
        self.attempts = 0
        self.status: Optional[int] = None
        self.body: Optional[str] = None
        self.transport_error: Optional[BaseException] = None
        self.headers: Optional[ResponseHeaders] = None  # of the last response, as received
        self.request_id: Optional[str] = None
        self.history: list[Attempt] = []
        self.delay = 0.0  # seconds slept before the next attempt
        self.rate_limit_wait = 0.0  # seconds the next attempt waited for the rate limiter
        self.rate_limit_total = 0.0  # and every attempt so far
        self.redact: Callable[[str], str] = str  # the client's key redaction

    def record(self, status: Optional[int], error: Optional[str], duration: float) -> Optional[str]:
        """Add the attempt that just ended to the history; return its request id."""
        request_id = None
        if status is not None and self.headers is not None:
            # An empty field names no request: "(request id )" said nothing.
            found = self.headers.get("request-id") or self.headers.get("x-request-id")
            request_id = self.redact(found) if found else None
        self.request_id = request_id if status is not None else self.request_id
        self.history.append(
            Attempt(
                len(self.history) + 1, status, error, duration, self.delay, self.rate_limit_wait, request_id
            )
        )
        self.delay = self.rate_limit_wait = 0.0
        # One count for Diagnostics, hooks and the history: every recorded attempt.
        self.attempts = len(self.history)
        return request_id

    def stop_reason(self) -> Optional[str]:
        """Why the call must stop now (cancelled, client closed, timeout expired), or None."""
        # The closing first: close() cancels the calls it ends too, and says why.
        if self.closing is not None and self.closing.cancelled:
            return "the client was closed"
        if self.token is not None and self.token.cancelled:
            return "the call was cancelled"
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return f"the call's timeout of {self.timeout:g} s expired"
        return None

    def check(self) -> None:
        """Raise ``Canceled`` if the call must stop."""
        reason = self.stop_reason()
        if reason is not None:
            raise Canceled(reason)

    def waited(self, seconds: float, held: float, taken: float) -> None:
        """Note a wait before an attempt: ``seconds`` planned, the last ``held`` of them the rate
        limiter's (after the backoff or the server's delay), that lasted ``taken`` (less when cut
        short: cancelled, closed, or woken by the limiter)."""
        delay = max(0.0, seconds - held)
        taken = max(0.0, min(taken, seconds))
        held = max(0.0, min(held, taken - delay))
        # An attempt may wait in several naps (a limiter that looks again, a wait held for an
        # answer): its record sums them, as the call's total does.
        self.delay += min(delay, taken)
        self.rate_limit_wait += held
        self.rate_limit_total += held

    def wait(self, seconds: float, sleep: Callable[[float, threading.Event], object]) -> None:
        """Sleep ``seconds`` through ``sleep(seconds, wake)``, then ``check()``.

        The wait is capped by the deadline and ends at once when the call is cancelled or the
        client closes (both set ``wake``); ``sleep`` is called once, or not at all when either
        token is already cancelled.
        """
        if self.deadline is not None:
            seconds = min(seconds, max(0.0, self.deadline - time.monotonic()))
        import threading  # loaded by the first wait, not by a cold start

        wake = threading.Event()
        with hooked(self.token, wake.set) as armed, hooked(self.closing, wake.set) as armed_too:
            if armed and armed_too:
                sleep(seconds, wake)
        self.check()

    def fill(self) -> Diagnostics:
        """The caller's ``Diagnostics`` (or a new one), filled with what the call did."""
        diag = self.diagnostics if self.diagnostics is not None else Diagnostics()
        diag.status = self.status
        diag.body = self.body
        diag.attempts = self.attempts
        diag.transport_error = self.transport_error
        diag.request_id = self.request_id
        # Set either way: a Diagnostics passed to an earlier call still holds that call's.
        diag.headers = None if self.headers is None else self.headers.redacted(self.redact)
        diag.elapsed = time.monotonic() - self.started
        diag.history = tuple(self.history)
        diag.rate_limit_wait = self.rate_limit_total
        return diag


def unsent(exc: QAError, diagnostics: object) -> None:
    """``exc`` ends a call before its first attempt (its request refused before sending, the
    client closed, the call cancelled before it started): the ``Diagnostics`` passed, if one
    was, is filled as any call fills it (no attempt, no response) and is the one ``exc`` carries."""
    if isinstance(diagnostics, Diagnostics):
        # Left as it was, one passed again would show an earlier call's status and request id.
        exc.diagnostics = CallState(None, None, diagnostics).fill()

"""The retry loop: attempts until a 2xx, a final error, or cancellation.

When the client's rate limiter (``_limiter``) is engaged, each attempt first takes its slot, in
one sleep with the backoff, and each response is reported to it.

``Sender.send`` is the only loop. What it decides with lives below it: the delay formula,
server-requested delays and should-retry in ``_backoff``; the retry budget and the call's
state in ``_call``; one attempt on the wire in ``_transport``.
"""

from __future__ import annotations

import time

from ._backoff import backoff_ms, server_delay_ms, should_retry
from ._config import get_logger
from ._diagnostics import _StandIn
from ._errors import Canceled, ConnectionFailed, ProxyError, QAError, status_error_class
from ._hooks import HookEvent
from ._limiter import Limiter
from ._redact import Redactor
from ._responses import BadShape, load_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    import threading
    from typing import Callable, Optional, Union

    from ._backoff import RetryPolicy
    from ._call import CallState, RetryBudget
    from ._diagnostics import ResponseHeaders
    from ._hooks import Hook
    from ._ratelimit import RateLimit
    from ._transport import TransportLike


class Sender:
    """Runs the retry loop of one client: attempts, backoff sleeps, the budget, the final error."""

    def __init__(
        self,
        transport: TransportLike,
        budget: Optional[RetryBudget],
        sleep: Callable[[float, threading.Event], object],
        random: Callable[[], float],
        api_key: Optional[str],
        hooks: Optional[dict[str, tuple[Hook, ...]]] = None,
        rate_limit: Optional[RateLimit] = None,
    ) -> None:
        self.transport = transport
        self.redact = Redactor(api_key)
        # For messages and log lines: a key put in the base URL's path is hidden there too.
        self.base_url = self.redact(transport.origin.url())
        self._budget = budget
        self._sleep = sleep
        self._random = random
        self._hooks = hooks
        # One limiter per client, shared by its threads; None when rate limiting is off.
        self.rate_limit = rate_limit
        self.limiter = (
            None
            if rate_limit is None
            else Limiter(
                rate_limit.per_second, rate_limit.burst, rate_limit.adaptive, notify=_noting(self.base_url)
            )
        )

    def send(self, request: bytes, method: str, policy: RetryPolicy, call: CallState) -> bytes:
        """The retry loop: the 2xx body, or the error SPEC.md section 5 names."""
        call.redact = self.redact
        limiter = self.limiter
        retries = 0
        wait: Optional[float] = None  # seconds before the next attempt; None before the first
        throttled = False
        try:
            while True:
                call.check()
                ticket = None
                if limiter is not None and limiter.engaged:
                    # One sleep covers both the call's own delay and its slot in the schedule.
                    front = (2 if retries >= policy.max_retries else 1) if throttled else 0
                    ticket = limiter.acquire(wait, front, lambda s, held: self._nap(s, call, held))
                elif wait is not None:
                    self._nap(wait, call)
                outcome = self._attempt(request, method, policy, call, ticket)
                if isinstance(outcome, bytes):
                    return outcome
                failure, delay, throttled = outcome
                # A 429/529 retried after the delay the server asked for is announced pacing,
                # not the failure storm the budget guards against: it spends no budget.
                exempt = throttled and delay is not None
                if retries >= policy.max_retries or not (
                    exempt or self._budget is None or self._budget.try_spend()
                ):
                    raise failure
                if delay is None:
                    delay = backoff_ms(policy, retries, self._random())
                wait = delay / 1000.0
                self._log_retry(wait, call, failure)
                retries += 1
        except QAError as exc:
            self.finish(exc, call)
            raise

    def finish(self, exc: QAError, call: CallState) -> None:
        """Make ``exc`` the call's final error: its diagnostics, request id, attempts, no key."""
        exc.diagnostics = call.fill()
        suffix = "" if call.request_id is None else f" (request id {call.request_id})"
        if call.attempts > 1 and not isinstance(exc, Canceled):
            suffix += f" (after {call.attempts} attempts)"
        exc.message = f"{exc.message}{suffix}"
        self.scrub(exc)

    def scrub(self, exc: QAError) -> None:
        """Hide the key in ``exc``'s message and in every exception chained to it."""
        exc.message = self.redact(exc.message)
        exc.args = (exc.message,)
        seen = {id(exc)}
        todo: list[BaseException] = [exc]
        while todo:
            node = todo.pop()
            for link in ("__cause__", "__context__"):
                linked = getattr(node, link)
                if linked is not None and id(linked) not in seen:
                    safe = self._safe(linked)
                    setattr(node, link, safe)
                    seen.update((id(linked), id(safe)))
                    todo.append(safe)

    def _safe_cause(self, exc: ConnectionFailed) -> Optional[BaseException]:
        """The transport error behind ``exc``, or its stand-in, which then also becomes its cause."""
        raw = exc.diagnostics.transport_error
        safe = None if raw is None else self._safe(raw)
        if safe is not raw:
            exc.diagnostics.transport_error = exc.__cause__ = exc.__context__ = safe
        return safe

    def _safe(self, exc: BaseException) -> BaseException:
        """``exc``, or a ``_StandIn`` with its text redacted when its text, args or attributes hold a
        piece of the key."""
        if not self.redact.active:
            return exc
        try:
            text, shown = str(exc), repr(exc)
        except Exception:
            return _StandIn(type(exc).__name__, "(an exception whose text cannot be shown)")
        # Pickle keeps an exception's args and attributes, where a server's bytes may be.
        held = (exc.args, getattr(exc, "__dict__", None))
        if self.redact.hides(text) or self.redact.hides(shown) or self.redact.holds(held):
            return _StandIn(type(exc).__name__, self.redact(text))
        return exc

    def _attempt(
        self, request: bytes, method: str, policy: RetryPolicy, call: CallState, ticket: Optional[float]
    ) -> Union[bytes, tuple[QAError, Optional[float], bool]]:
        """One attempt: the 2xx body, or (the error, the server's delay in ms, whether it was a
        429/529) when worth a retry; raises the errors that are not."""
        started = time.monotonic()
        try:  # an attempt holding a ticket always reports to the limiter, even on KeyboardInterrupt
            if self._hooks is not None:
                self._emit("before_attempt", request, method, call, None, None, None)
                started = time.monotonic()
            status, headers, body = self.transport.attempt(request, method, call)
        except BaseException as exc:
            if ticket is not None and self.limiter is not None:
                self.limiter.report(ticket, None, None)
            if not isinstance(exc, QAError):
                raise
            return self._failed(request, method, policy, call, exc, started)
        return self.answered(request, method, policy, call, ticket, started, status, headers, body)

    def answered(
        self,
        request: bytes,
        method: str,
        policy: RetryPolicy,
        call: CallState,
        ticket: Optional[float],
        started: float,
        status: int,
        headers: ResponseHeaders,
        body: bytes,
    ) -> Union[bytes, tuple[QAError, Optional[float], bool]]:
        """What a response means: the 2xx body, or (the error, the server's delay in ms, whether
        it was a 429/529) when worth a retry; raises the errors that are not. The limiter, the
        budget, the history and the hooks are told."""
        call.status = status
        call.headers = headers
        limiter = self.limiter
        if 200 <= status < 300:
            if limiter is not None:
                if ticket is None:
                    limiter.succeeded.append(started)  # what got through, for a first ceiling
                else:
                    limiter.report(ticket, status, None)
            self._record(request, method, call, status, None, started)
            if self._budget is not None:
                self._budget.refund()
            return self.redact.data(body)
        throttled = status in (429, 529)
        delay = None
        if policy.respect_retry_after:
            delay = server_delay_ms(
                headers.get("retry-after-ms"), headers.get("retry-after"), policy.max_retry_after_ms
            )
        if limiter is not None and (ticket is not None or throttled):
            limiter.report(ticket, status, _pause_seconds(headers, delay) if throttled else None)
        failure = self._status_error(status, headers, body, method, call)
        self._record(request, method, call, status, failure, started)
        if not should_retry(policy, status, headers):
            raise failure
        return failure, delay, throttled

    def _failed(
        self, request: bytes, method: str, policy: RetryPolicy, call: CallState, exc: QAError, started: float
    ) -> tuple[QAError, Optional[float], bool]:
        """An attempt that ended without a response: recorded, then retried or raised."""
        if isinstance(exc, ConnectionFailed):
            call.transport_error = self._safe_cause(exc)
        if isinstance(exc, ProxyError):
            # The proxy answered: its status and page are what the caller can act on.
            call.status = exc.status
            call.body = self.redact(exc.diagnostics.body or "")
        self._record(request, method, call, None, exc, started)
        if not (isinstance(exc, ConnectionFailed) and exc.retryable and _retry_failure(policy, exc)):
            raise exc
        return exc, None, False

    def _record(
        self,
        request: bytes,
        method: str,
        call: CallState,
        status: Optional[int],
        error: Optional[QAError],
        started: float,
    ) -> None:
        """The attempt's history record, debug log line and after-attempt hooks."""
        duration = time.monotonic() - started
        request_id = call.record(status, None if error is None else type(error).__name__, duration)
        log = get_logger()
        if log is not None and log.isEnabledFor(10):
            log.debug(
                "%s %s%s -> %s in %.1f ms (attempt %d)",
                method,
                self.base_url,
                _path(method),
                status if status is not None else type(error).__name__,
                duration * 1000.0,
                call.attempts,
            )
        if self._hooks is not None:
            self._emit("after_attempt", request, method, call, status, error, duration, request_id)

    def _emit(
        self,
        stage: str,
        request: bytes,
        method: str,
        call: CallState,
        status: Optional[int],
        error: Optional[QAError],
        duration: Optional[float],
        request_id: Optional[str] = None,
    ) -> None:
        """Run the hooks of ``stage``; one that raises is logged, and the call goes on."""
        hooks = self._hooks.get(stage, ()) if self._hooks is not None else ()
        if not hooks:
            return
        number = call.attempts + (1 if stage == "before_attempt" else 0)
        url = f"{self.base_url}{_path(method)}"
        event = HookEvent(stage, method, url, number, request, status, error, duration, request_id)
        for hook in hooks:
            try:
                hook(event)
            except Exception as exc:
                log = get_logger()
                if log is not None:
                    log.warning(
                        "the %s hook %r raised %s: %s", stage, hook, type(exc).__name__, self.redact(str(exc))
                    )

    def _log_retry(self, seconds: float, call: CallState, failure: QAError) -> None:
        log = get_logger()
        if log is not None:
            log.info(
                "retrying %s in %.3f s (attempt %d failed: %s)",
                self.base_url,
                seconds,
                call.attempts,
                type(failure).__name__,
            )

    def _nap(self, seconds: float, call: CallState, held: float = 0.0) -> None:
        """One wait before an attempt; ends at once if the call is cancelled or the client closes.

        ``held`` seconds of it are the rate limiter's, the rest the backoff or the server's delay.
        """
        if call.deadline is not None:
            held = min(held, max(0.0, call.deadline - time.monotonic()))
        call.delay = max(0.0, seconds - held)
        call.rate_limit_wait = held
        call.rate_limit_total += held
        call.wait(seconds, self._sleep)

    def _status_error(
        self, status: int, headers: ResponseHeaders, body: bytes, method: str, call: CallState
    ) -> QAError:
        # The whole body is redacted before anything shortens it (the message, Diagnostics' repr).
        text = self.redact(body.decode("utf-8", "replace"))
        call.body = text
        path = _path(method)
        detail = _detail(body, text, headers, self.redact)
        message = f"HTTP {status} from {method} {self.base_url}{path}: {detail}"
        return status_error_class(status)(message, status=status)


def _noting(base_url: str) -> Callable[[str], None]:
    """The limiter's news, logged at INFO. Not a method: a limiter holding its sender would
    make a cycle, and a dropped client's sockets would wait for the garbage collector."""

    def note(message: str) -> None:
        log = get_logger()
        if log is not None:
            log.info("%s: %s", base_url, message)

    return note


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
    try:
        return float(text) == 0.0
    except ValueError:
        return False


def _retry_failure(policy: RetryPolicy, failure: ConnectionFailed) -> bool:
    """Whether a connection failure is worth another attempt; a proxy's refusal goes by its status."""
    if isinstance(failure, ProxyError):
        return bool(policy.retry_status(failure.status))
    return policy.retry_connection_errors


def _path(method: str) -> str:
    return "/v1/core" if method == "POST" else "/v1/models"


def _detail(body: bytes, text: str, headers: ResponseHeaders, redact: Redactor) -> str:
    """A short, readable reason from an error body: JSON ``detail``, an HTML title, or the text.

    ``text`` is the body, decoded and redacted; a ``detail`` decoded from JSON is redacted again
    (escapes undone, it may spell out a key the body only held escaped).
    """
    detail = None
    if "json" in (headers.get("content-type") or "") or text.startswith("{"):
        try:
            obj = load_json(body)
        except BadShape:
            obj = None
        if isinstance(obj, dict) and "detail" in obj:
            found = obj["detail"]
            if isinstance(found, list):  # FastAPI-style [{"loc": ..., "msg": ...}]
                found = "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in found)
            detail = redact(str(found))
    if detail is None:
        lower = text.lower()
        start, end = lower.find("<title>"), lower.find("</title>")
        detail = text[start + 7 : end] if 0 <= start < end else text
    # Redacted once more after whitespace is folded, which may join two halves of a piece.
    short = redact(" ".join(detail[:2000].split()))
    if not short:
        return "(empty body)"
    return short if len(short) <= 200 else short[:197] + "..."

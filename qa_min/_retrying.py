"""The retry loop: attempts until a 2xx, a final error, or cancellation.

``Sender.send`` is the only loop. What it decides with lives below it: the delay formula,
server-requested delays and should-retry in ``_backoff``; the retry budget and the call's
state in ``_call``; one attempt on the wire in ``_transport``.

It is also where what a server sent reaches the caller, so it is where the API key is hidden:
in error bodies and messages (before anything is shortened), in a 2xx body before it is
decoded, in the transport error, and in every exception chained to the error raised
(``__cause__``, ``__context__``), which a stand-in replaces when its text holds a piece.
"""

from __future__ import annotations

import threading
import time

from ._backoff import backoff_ms, server_delay_ms, should_retry
from ._config import get_logger
from ._errors import Canceled, ConnectionFailed, QAError, _StandIn, status_error_class
from ._redact import Redactor
from ._responses import BadShape, load_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from http.client import HTTPMessage
    from typing import Callable, Optional

    from ._backoff import RetryPolicy
    from ._call import CallState, CancelToken, RetryBudget
    from ._transport import Transport


class Sender:
    """Runs the retry loop of one client: attempts, backoff sleeps, the budget, the final error."""

    def __init__(
        self,
        transport: Transport,
        budget: Optional[RetryBudget],
        sleep: Callable[[float, threading.Event], object],
        random: Callable[[], float],
        api_key: Optional[str],
        closing: CancelToken,
    ) -> None:
        self.transport = transport
        self.redact = Redactor(api_key)
        # For messages and log lines: a key put in the base URL's path is hidden there too.
        self.base_url = self.redact(transport.origin.url())
        self._budget = budget
        self._sleep = sleep
        self._random = random
        self.closing = closing

    def send(self, request: bytes, method: str, policy: RetryPolicy, call: CallState) -> bytes:
        """The retry loop: the 2xx body, or the error SPEC.md section 5 names."""
        transport = self.transport
        retries = 0
        try:
            while True:
                transport.check(call)
                started = time.monotonic()
                try:
                    status, headers, body = transport.attempt(request, method, call)
                except ConnectionFailed as exc:
                    call.transport_error = self._safe_cause(exc)
                    self._log_attempt(method, call, None, started)
                    if not (policy.retry_connection_errors and exc.retryable):
                        raise
                    failure: QAError = exc
                    delay = None
                else:
                    call.status = status
                    self._log_attempt(method, call, status, started)
                    if 200 <= status < 300:
                        if self._budget is not None:
                            self._budget.refund()
                        if call.diagnostics is not None:
                            call.fill()
                        return self.redact.data(body)
                    failure = self._status_error(status, headers, body, method, call)
                    if not should_retry(policy, status, headers):
                        raise failure
                    delay = (
                        server_delay_ms(
                            headers.get("retry-after-ms"),
                            headers.get("retry-after"),
                            policy.max_retry_after_ms,
                        )
                        if policy.respect_retry_after
                        else None
                    )
                if retries >= policy.max_retries or not (self._budget is None or self._budget.try_spend()):
                    raise failure
                if delay is None:
                    delay = backoff_ms(policy, retries, self._random())
                self._pause(delay / 1000.0, call, failure)
                retries += 1
        except QAError as exc:
            exc.diagnostics = call.fill()
            if call.attempts > 1 and not isinstance(exc, Canceled):
                exc.message = f"{exc.message} (after {call.attempts} attempts)"
            self.scrub(exc)
            raise

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
        """``exc``, or a ``_StandIn`` with its text redacted when that text holds a piece of the key."""
        if not self.redact.active:
            return exc
        try:
            text, shown = str(exc), repr(exc)
        except Exception:
            return _StandIn(type(exc).__name__, "(an exception whose text cannot be shown)")
        if self.redact.hides(text) or self.redact.hides(shown):
            return _StandIn(type(exc).__name__, self.redact(text))
        return exc

    def _pause(self, seconds: float, call: CallState, failure: QAError) -> None:
        """The backoff sleep; ends at once if the call is cancelled or the client closes."""
        log = get_logger()
        if log is not None:
            log.info(
                "retrying %s in %.3f s (attempt %d failed: %s)",
                self.base_url,
                seconds,
                call.attempts,
                type(failure).__name__,
            )
        if call.deadline is not None:
            seconds = min(seconds, max(0.0, call.deadline - time.monotonic()))
        wake = threading.Event()
        with self.closing.hooked(wake.set) as armed:
            token = call.token
            if token is None:
                if armed:
                    self._sleep(seconds, wake)
            else:
                with token.hooked(wake.set) as armed_too:
                    if armed and armed_too:
                        self._sleep(seconds, wake)
        self.transport.check(call)

    def _log_attempt(self, method: str, call: CallState, status: Optional[int], started: float) -> None:
        log = get_logger()
        if log is not None and log.isEnabledFor(10):
            path = "/v1/core" if method == "POST" else "/v1/models"
            log.debug(
                "%s %s%s -> %s in %.1f ms (attempt %d)",
                method,
                self.base_url,
                path,
                status if status is not None else "connection failed",
                (time.monotonic() - started) * 1000.0,
                call.attempts,
            )

    def _status_error(
        self, status: int, headers: HTTPMessage, body: bytes, method: str, call: CallState
    ) -> QAError:
        # The whole body is redacted before anything shortens it (the message, Diagnostics' repr).
        text = self.redact(body.decode("utf-8", "replace"))
        call.body = text
        path = "/v1/core" if method == "POST" else "/v1/models"
        detail = _detail(body, text, headers, self.redact)
        message = f"HTTP {status} from {method} {self.base_url}{path}: {detail}"
        return status_error_class(status)(message, status=status)


def _detail(body: bytes, text: str, headers: HTTPMessage, redact: Redactor) -> str:
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

"""The retry loop: attempts until a 2xx, a final error, or cancellation.

``Sender.send`` is the only loop. What it decides with lives below it: the delay formula,
server-requested delays and should-retry in ``_backoff``; the retry budget and the call's
state in ``_call``; one attempt on the wire in ``_transport``.
"""

from __future__ import annotations

import json
import threading
import time

from ._backoff import backoff_ms, server_delay_ms, should_retry
from ._config import get_logger, redactor
from ._errors import Canceled, ConnectionFailed, QAError, status_error_class

TYPE_CHECKING = False
if TYPE_CHECKING:
    from http.client import HTTPMessage
    from typing import Callable, Optional

    from ._backoff import RetryPolicy
    from ._call import CallState, RetryBudget
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
    ) -> None:
        self.transport = transport
        self.base_url = transport.origin.url()
        self._budget = budget
        self._sleep = sleep
        self._random = random
        self.redact = redactor(api_key)

    def send(self, request: bytes, method: str, policy: RetryPolicy, call: CallState) -> bytes:
        """The retry loop: the 2xx body, or the error SPEC.md section 5 names."""
        transport = self.transport
        retries = 0
        try:
            while True:
                call.check()
                started = time.monotonic()
                try:
                    status, headers, body = transport.attempt(request, method, call)
                except ConnectionFailed as exc:
                    call.transport_error = exc.diagnostics.transport_error
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
                        return body
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
                exc.args = (exc.message,)
            raise

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
        call.wait(seconds, self._sleep)

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
        text = self.redact(body.decode("utf-8", "replace"))
        call.body = text
        path = "/v1/core" if method == "POST" else "/v1/models"
        # Redacted again: a key JSON-escaped in the body comes out plain once `detail` is decoded.
        message = self.redact(f"HTTP {status} from {method} {self.base_url}{path}: {_detail(text, headers)}")
        return status_error_class(status)(message, status=status)


def _detail(text: str, headers: HTTPMessage) -> str:
    """A short, readable reason from an error body: JSON ``detail``, an HTML title, or the text."""
    detail: object = None
    if "json" in (headers.get("content-type") or "") or text.startswith("{"):
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            obj = None
        if isinstance(obj, dict) and "detail" in obj:
            detail = obj["detail"]
            if isinstance(detail, list):  # FastAPI-style [{"loc": ..., "msg": ...}]
                detail = "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail)
    if detail is None:
        lower = text.lower()
        start, end = lower.find("<title>"), lower.find("</title>")
        detail = text[start + 7 : end] if 0 <= start < end else text
    short = " ".join(str(detail).split())
    if not short:
        return "(empty body)"
    return short if len(short) <= 200 else short[:197] + "..."

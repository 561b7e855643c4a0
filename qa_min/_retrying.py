"""The retry loop, and what it decides with: backoff, server-requested delays, the budget.

* ``backoff_ms``: the policy's exponential backoff with subtractive jitter.
* ``server_delay_ms``: a delay the server asked for, or None when it asked for nothing usable.
* ``RetryBudget``: the client-wide token bucket that keeps an outage from multiplying load.
* ``Sender.send``: attempts until a 2xx, a final error, or cancellation; when the client's rate
  limiter (``_limiter``) is engaged, each attempt first takes its slot, in one sleep with the
  backoff, and each response is reported to it.

Free of ``dataclasses`` (slow to import): ``RetryPolicy`` lives in ``_retry`` and is loaded only
when used; ``DEFAULTS`` mirrors its field defaults and serves every client that sets none.
"""

from __future__ import annotations

import json
import math
import threading
import time

from ._client import CancelToken
from ._config import get_logger, redactor
from ._errors import Canceled, ConnectionFailed, QAError, status_error_class
from ._limiter import Limiter

TYPE_CHECKING = False
if TYPE_CHECKING:
    from http.client import HTTPMessage
    from typing import Callable, Optional, Protocol

    from ._client import RetryBudget
    from ._ratelimit import RateLimit
    from ._transport import CallState, Transport

    class PolicyLike(Protocol):
        """The fields of ``RetryPolicy`` that the retry loop reads."""

        @property
        def max_retries(self) -> int: ...
        @property
        def backoff_initial_ms(self) -> float: ...
        @property
        def backoff_max_ms(self) -> float: ...
        @property
        def backoff_jitter(self) -> float: ...
        @property
        def respect_retry_after(self) -> bool: ...
        @property
        def max_retry_after_ms(self) -> float: ...
        @property
        def retry_connection_errors(self) -> bool: ...
        @property
        def retry_status(self) -> Callable[[int], bool]: ...


def default_retry_status(status: int) -> bool:
    """True for 408, 429 and every 5xx (529 included): the statuses worth another try."""
    return status in (408, 429) or 500 <= status <= 599


class _Defaults:
    """``RetryPolicy()``'s values, readable without building the dataclass."""

    max_retries = 2
    backoff_initial_ms = 500.0
    backoff_max_ms = 5000.0
    backoff_jitter = 0.25
    respect_retry_after = True
    max_retry_after_ms = 60000.0
    retry_connection_errors = True
    retry_status = staticmethod(default_retry_status)


DEFAULTS = _Defaults()


def backoff_ms(policy: PolicyLike, retry_index: int, uniform: float) -> float:
    """The delay before retry ``retry_index`` (0 for the first retry), in milliseconds.

    ``min(initial * 2**k, max) * (1 - jitter * U)``, ``uniform`` being U in [0, 1).
    """
    # 2**k overflows float conversion for absurd k; the cap applies long before.
    base = policy.backoff_initial_ms * (2.0 ** min(retry_index, 64))
    return min(base, policy.backoff_max_ms) * (1.0 - policy.backoff_jitter * uniform)


def _positive_finite(text: str, scale: float) -> Optional[float]:
    try:
        value = float(text) * scale
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def _http_date_ms(text: str, now: float) -> Optional[float]:
    from email.utils import mktime_tz, parsedate_tz

    try:
        parsed = parsedate_tz(text)
        if parsed is None:
            return None
        return (mktime_tz(parsed) - now) * 1000.0
    except (ValueError, OverflowError, TypeError, IndexError):
        # A year like 99999 or a mangled date must never break the retry loop.
        return None


def server_delay_ms(
    retry_after_ms: Optional[str],
    retry_after: Optional[str],
    max_ms: float,
    now: Optional[float] = None,
) -> Optional[float]:
    """The delay the server asked for, in ms, or None to fall back to the backoff.

    ``retry-after-ms`` (float milliseconds) wins over ``Retry-After`` (float seconds or an
    HTTP-date). A header that is unparseable, not finite, zero or negative, or above
    ``max_ms`` is ignored as if absent.
    """
    candidates = []
    if retry_after_ms is not None:
        candidates.append(_positive_finite(retry_after_ms, 1.0))
    if retry_after is not None:
        seconds = _positive_finite(retry_after, 1000.0)
        if seconds is None and not _looks_numeric(retry_after):
            seconds = _http_date_ms(retry_after, time.time() if now is None else now)
        candidates.append(seconds)
    for value in candidates:
        if value is not None and 0 < value <= max_ms:
            return value
    return None


def _looks_numeric(text: str) -> bool:
    # "-5" or "nan" are numbers the server got wrong, not dates to parse.
    stripped = text.strip().lstrip("+-")
    return bool(stripped) and (
        stripped[0].isdigit() or stripped[0] == "." or stripped.lower()[:3] in ("nan", "inf")
    )


class Sender:
    """Runs the retry loop of one client: attempts, backoff sleeps, the budget, the final error."""

    def __init__(
        self,
        transport: Transport,
        budget: Optional[RetryBudget],
        sleep: Callable[[float, threading.Event], object],
        random: Callable[[], float],
        api_key: Optional[str],
        rate_limit: Optional[RateLimit] = None,
    ) -> None:
        self.transport = transport
        self.base_url = transport.origin.url()
        self._budget = budget
        self._sleep = sleep
        self._random = random
        self.redact = redactor(api_key)
        self.closer = CancelToken()
        # rate limit: one limiter per client, shared by its threads (None: turned off)
        self.rate_limit = rate_limit
        self.limiter = (
            None
            if rate_limit is None
            else Limiter(
                rate_limit.per_second, rate_limit.burst, rate_limit.adaptive, notify=self._note_rate_limit
            )
        )

    def send(self, request: bytes, method: str, policy: PolicyLike, call: CallState) -> bytes:
        """The retry loop: the 2xx body, or the error SPEC.md section 5 names."""
        limiter = self.limiter
        retries = 0
        wait: Optional[float] = None  # seconds before the next attempt; None before the first
        throttled = False
        try:
            while True:
                self.transport.check(call)
                ticket = None
                if limiter is not None and limiter.engaged:
                    # One sleep covers both the call's own delay and its slot in the schedule.
                    front = (2 if retries >= policy.max_retries else 1) if throttled else 0
                    ticket = limiter.acquire(wait, front, lambda s, held: self._nap(s, call, held))
                elif wait is not None:
                    self._nap(wait, call)
                body, failure, delay, throttled = self._attempt(request, method, policy, call, ticket)
                if failure is None:
                    return body
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
            exc.diagnostics = call.fill()
            if call.attempts > 1 and not isinstance(exc, Canceled):
                exc.message = f"{exc.message} (after {call.attempts} attempts)"
                exc.args = (exc.message,)
            raise

    def _attempt(
        self, request: bytes, method: str, policy: PolicyLike, call: CallState, ticket: Optional[float]
    ) -> tuple[bytes, Optional[QAError], Optional[float], bool]:
        """One attempt: (body, None, ...) on a 2xx, else (b"", the error, the server's delay in
        ms or None, whether it was a 429/529); raises errors that are not retried."""
        limiter = self.limiter
        started = time.monotonic()
        try:
            status, headers, body = self.transport.attempt(request, method, call)
        except BaseException as exc:
            if ticket is not None and limiter is not None:
                limiter.report(ticket, None, None)
            if not isinstance(exc, ConnectionFailed):
                raise
            call.transport_error = exc.diagnostics.transport_error
            self._log_attempt(method, call, None, started)
            if not (policy.retry_connection_errors and exc.retryable):
                raise
            return b"", exc, None, False
        call.status = status
        self._log_attempt(method, call, status, started)
        if 200 <= status < 300:
            if limiter is not None:
                if ticket is None:
                    limiter.succeeded.append(started)  # what got through, for a first ceiling
                else:
                    limiter.report(ticket, status, None)
            if self._budget is not None:
                self._budget.refund()
            if call.diagnostics is not None:
                call.fill()
            return body, None, None, False
        failure = self._status_error(status, headers, body, method, call)
        throttled = status in (429, 529)
        delay = (
            server_delay_ms(
                headers.get("retry-after-ms"), headers.get("retry-after"), policy.max_retry_after_ms
            )
            if policy.respect_retry_after
            else None
        )
        if limiter is not None and (ticket is not None or throttled):
            limiter.report(ticket, status, _pause_seconds(headers, delay) if throttled else None)
        if not _should_retry(policy, status, headers):
            raise failure
        return b"", failure, delay, throttled

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

        ``held`` seconds of it are the rate limiter's, counted in ``Diagnostics.rate_limit_wait``.
        """
        if call.deadline is not None:
            left = max(0.0, call.deadline - time.monotonic())
            held, seconds = min(held, left), min(seconds, left)
        call.rate_limit_wait += held
        wake = threading.Event()
        tokens = [t for t in (call.token, self.closer) if t is not None]
        hooked = [t for t in tokens if t._add_hook(wake.set)]
        try:
            if len(hooked) == len(tokens):
                self._sleep(seconds, wake)
        finally:
            for token in hooked:
                token._remove_hook(wake.set)
        self.transport.check(call)

    def _note_rate_limit(self, message: str) -> None:
        log = get_logger()
        if log is not None:
            log.info("%s: %s", self.base_url, message)

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


def _pause_seconds(headers: HTTPMessage, delay_ms: Optional[float]) -> Optional[float]:
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


def _should_retry(policy: PolicyLike, status: int, headers: HTTPMessage) -> bool:
    override = headers.get("x-should-retry")
    if override is not None:
        flag = override.strip().lower()
        if flag == "true":
            return True
        if flag == "false":
            return False
    return bool(policy.retry_status(status))


def _detail(text: str, headers: HTTPMessage) -> str:
    """A short, readable reason from an error body: JSON ``detail``, an HTML title, or the text."""
    detail: object = None
    if "json" in (headers.get("content-type") or "") or text.startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError:
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

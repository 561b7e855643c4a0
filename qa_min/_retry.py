"""``RetryPolicy``: an immutable value, loaded on first use (``dataclasses`` is slow to import)."""

from __future__ import annotations

import dataclasses

from ._errors import InvalidOption
from ._retrying import DEFAULTS, default_retry_status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, ClassVar


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """When and how a call is retried. ``RetryPolicy.none`` never retries.

    Attributes:
        max_retries: Retries after the first attempt; 0 disables retries.
        backoff_initial_ms: The first backoff delay, doubled on each retry.
        backoff_max_ms: The cap on a backoff delay.
        backoff_jitter: The fraction of each delay randomly taken off (0 to 1).
        respect_retry_after: Honour ``retry-after-ms`` and ``Retry-After``.
        max_retry_after_ms: A longer server-requested delay is ignored (backoff is used).
        retry_connection_errors: Retry when the service cannot be reached or the connection drops.
        retry_status: Decides which HTTP statuses are retried (408, 429 and 5xx by default). An
            ``x-should-retry: true|false`` response header overrides it.
    """

    if TYPE_CHECKING:
        none: ClassVar[RetryPolicy]

    max_retries: int = DEFAULTS.max_retries
    backoff_initial_ms: float = DEFAULTS.backoff_initial_ms
    backoff_max_ms: float = DEFAULTS.backoff_max_ms
    backoff_jitter: float = DEFAULTS.backoff_jitter
    respect_retry_after: bool = DEFAULTS.respect_retry_after
    max_retry_after_ms: float = DEFAULTS.max_retry_after_ms
    retry_connection_errors: bool = DEFAULTS.retry_connection_errors
    retry_status: Callable[[int], bool] = default_retry_status

    def __post_init__(self) -> None:
        if (
            isinstance(self.max_retries, bool)
            or not isinstance(self.max_retries, int)
            or self.max_retries < 0
        ):
            raise InvalidOption(f"max_retries must be an int >= 0, got {self.max_retries!r}")
        for name in ("backoff_initial_ms", "backoff_max_ms", "max_retry_after_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise InvalidOption(f"{name} must be a number >= 0, got {value!r}")
        jitter = self.backoff_jitter
        if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not 0 <= jitter <= 1:
            raise InvalidOption(f"backoff_jitter must be between 0 and 1, got {jitter!r}")
        if not callable(self.retry_status):
            raise InvalidOption(f"retry_status must be a function int -> bool, got {self.retry_status!r}")


RetryPolicy.none = RetryPolicy(max_retries=0)

"""Checks of the client's and the calls' options: wrong types and values become ``InvalidOption``.

Run once per ``Client`` (and, for ``timeout=``, once per call), before anything is sent.
"""

from __future__ import annotations

import _thread

from ._backoff import RetryPolicy
from ._call import RetryBudget
from ._errors import InvalidOption
from ._ratelimit import RateLimit
from ._typing import UNSET, plain, short

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional


# The options that count things: threads, idle connections, bytes. Each is an int (not a bool)
# of at least this much; a float such as 1.5 is refused, not rounded.
COUNTS = {"max_idle_per_host": 0, "max_workers": 1, "max_response_bytes": 1}


def count(name: str, value: object, minimum: int) -> int:
    """``value`` if it is an int (not a bool) >= ``minimum``, else ``InvalidOption``."""
    value = plain(value)  # an int subclass's own __lt__ is never called
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidOption(f"{name} must be a whole number >= {minimum}, got {short(value)}")
    return value


def number(name: str, value: object, minimum: float, allow_none: bool = False) -> Any:
    """``value`` if it is a number of seconds in (``minimum``, ``_thread.TIMEOUT_MAX``].

    Else ``InvalidOption``, saying the upper bound when ``value`` is over it.
    """
    if value is None and allow_none:
        return None
    value = plain(value)  # a subclass's own __lt__ or __gt__ is never called
    # TIMEOUT_MAX bounds what sockets and locks accept; "no limit" is None, not inf.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not minimum < value:
        raise InvalidOption(f"{name} must be a finite number > {minimum:g}, got {short(value)}")
    if value > _thread.TIMEOUT_MAX:  # inf too (nan failed the test above)
        most = int(_thread.TIMEOUT_MAX)  # CPython's is whole already: 9223372036 on 64-bit Linux
        unlimited = " (None for no limit)" if allow_none else ""
        kind = f"a finite number > {minimum:g} and at most {most} seconds{unlimited}"
        raise InvalidOption(f"{name} must be {kind}, got {short(value)}")
    return value


def check_options(
    retry_budget: object,
    ssl_context: object,
    sleep: object,
    random: object,
    max_idle_per_host: object,
    max_workers: object,
) -> Optional[RetryBudget]:
    """Check the options that need no resolving; return the retry budget to use."""
    budget = RetryBudget() if retry_budget is UNSET else retry_budget
    if budget is not None and not isinstance(budget, RetryBudget):
        raise InvalidOption(f"retry_budget must be a RetryBudget or None, got {short(retry_budget)}")
    count("max_idle_per_host", max_idle_per_host, COUNTS["max_idle_per_host"])
    count("max_workers", max_workers, COUNTS["max_workers"])
    for name, function in (("sleep", sleep), ("random", random)):
        if function is not None and not callable(function):
            raise InvalidOption(f"{name} must be a function, got {short(function)}")
    if ssl_context is not None:
        import ssl

        if not isinstance(ssl_context, ssl.SSLContext):
            raise InvalidOption(f"ssl_context must be an ssl.SSLContext, got {short(ssl_context)}")
    return budget


def check_retry(retry: object) -> RetryPolicy:
    """``retry`` if it is a ``RetryPolicy``."""
    if not isinstance(retry, RetryPolicy):
        raise InvalidOption(f"retry must be a RetryPolicy, got {short(retry)}")
    return retry


def check_rate_limit(rate_limit: object) -> Optional[RateLimit]:
    """The client's ``RateLimit``: ``RateLimit()`` when not given, None when turned off."""
    if rate_limit is UNSET:
        return RateLimit()
    if rate_limit is not None and not isinstance(rate_limit, RateLimit):
        raise InvalidOption(f"rate_limit must be a RateLimit or None, got {short(rate_limit)}")
    return rate_limit

"""What a call did: ``Diagnostics``, its per-attempt ``Attempt`` records and ``ResponseHeaders``.

A leaf: the call state fills these, the errors carry them, results expose them. Each survives
``pickle`` and ``copy``; an exception that cannot travel becomes a ``_StandIn`` that keeps its type
name and message.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from typing import Callable, Optional


class Diagnostics:
    """What a call did; pass one as ``diagnostics=`` to see it, on success and on failure.

    Every result carries one too, as ``.diagnostics`` (the one passed, if any).

    Attributes:
        status: The last HTTP status received, or None if no response arrived.
        body: The last non-2xx response body as text, or None.
        attempts: HTTP attempts made, the first one included.
        transport_error: The exception behind a ``ConnectionFailed``, or None.
        request_id: The last response's ``request-id`` (or ``x-request-id``) header, or None.
        headers: The last response's headers, read-only, as received; None if none arrived.
        elapsed: Seconds the whole call took, retries and waits included.
        history: One read-only ``Attempt`` per attempt, in order.
        rate_limit_wait: Seconds the client's rate limiter held the call back, beyond the
            delays it would have waited anyway (0.0 when it never waited).
    """

    __slots__ = (
        "attempts",
        "body",
        "elapsed",
        "headers",
        "history",
        "rate_limit_wait",
        "request_id",
        "status",
        "transport_error",
    )

    def __init__(self) -> None:
        self.status: Optional[int] = None
        self.body: Optional[str] = None
        self.attempts = 0
        self.transport_error: Optional[BaseException] = None
        self.request_id: Optional[str] = None
        self.headers: Optional[ResponseHeaders] = None
        self.elapsed = 0.0
        self.history: tuple[Attempt, ...] = ()
        self.rate_limit_wait = 0.0

    def __repr__(self) -> str:
        body = self.body if self.body is None or len(self.body) <= 80 else self.body[:77] + "..."
        return (
            f"Diagnostics(status={self.status!r}, attempts={self.attempts!r}, "
            f"request_id={self.request_id!r}, elapsed={self.elapsed:.3f}, "
            f"body={body!r}, transport_error={self.transport_error!r})"
        )

    def __reduce__(self) -> tuple[object, ...]:
        state = {name: getattr(self, name) for name in self.__slots__}
        state["transport_error"] = portable(self.transport_error)
        return (_restore_diagnostics, (state,))


def _restore_diagnostics(state: dict[str, object]) -> Diagnostics:
    diag = Diagnostics()
    for name, value in state.items():
        setattr(diag, name, value)
    return diag


class _StandIn(Exception):
    """Stands for an exception that cannot travel, or whose text had to be redacted.

    ``repr()`` shows the original type name and message, as the original's would.

    Attributes:
        type_name: The name of the original exception's type.
        message: Its message.
    """

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(type_name, message)
        self.type_name = type_name
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{self.type_name}({self.message!r})"


def portable(exc: Optional[BaseException]) -> Optional[BaseException]:
    """``exc`` if a pickled copy of it can be loaded again, else its ``_StandIn``."""
    if exc is None or type(exc) is _StandIn:
        return exc
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return _StandIn(type(exc).__name__, str(exc))
    return exc


class Attempt:
    """One HTTP attempt of a call, as ``Diagnostics.history`` records it (read-only).

    Attributes:
        number: 1 for the first attempt, 2 for the next (a retry or a re-send), ...
        status: The HTTP status received, or None when no response arrived.
        error: The name of the error the attempt ended in (``"ConnectionFailed"``, ``"RateLimited"``,
            ``"Canceled"``, ...), or None for a 2xx; the exception's when the policy's
            ``retry_status`` raised judging it (docs/retries.md).
        duration: Seconds from sending the request to the end of the response or failure.
        delay: Seconds the call slept (backoff or a server-requested delay) before this attempt.
        rate_limit_wait: Seconds this attempt waited for the client's rate limiter.
        request_id: The response's request id, or None.
    """

    __slots__ = ("delay", "duration", "error", "number", "rate_limit_wait", "request_id", "status")

    number: int
    status: Optional[int]
    error: Optional[str]
    duration: float
    delay: float
    rate_limit_wait: float
    request_id: Optional[str]

    def __init__(
        self,
        number: int,
        status: Optional[int],
        error: Optional[str],
        duration: float,
        delay: float = 0.0,
        rate_limit_wait: float = 0.0,
        request_id: Optional[str] = None,
    ) -> None:
        for name, value in (
            ("number", number),
            ("status", status),
            ("error", error),
            ("duration", duration),
            ("delay", delay),
            ("rate_limit_wait", rate_limit_wait),
            ("request_id", request_id),
        ):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Attempt is read-only; cannot set {name!r}")

    def __reduce__(self) -> tuple[object, ...]:
        return (
            Attempt,
            (
                self.number,
                self.status,
                self.error,
                self.duration,
                self.delay,
                self.rate_limit_wait,
                self.request_id,
            ),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Attempt) and self.__reduce__() == other.__reduce__()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        outcome = self.status if self.error is None else f"{self.status} {self.error}"
        return (
            f"Attempt(#{self.number}: {outcome}, {self.duration * 1000:.1f} ms, "
            f"delay={self.delay:.3f}, rate_limit_wait={self.rate_limit_wait:.3f}, "
            f"request_id={self.request_id!r})"
        )


class ResponseHeaders:
    """A response's headers, read-only: lookups ignore case, ``items()`` gives them as received."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[tuple[str, str]]) -> None:
        self._items = tuple(items)

    def get(self, name: str, default: Optional[str] = None) -> Optional[str]:
        """The first value of header ``name`` (any case), or ``default``."""
        wanted = name.lower()
        for key, value in self._items:
            if key.lower() == wanted:
                return value
        return default

    def get_all(self, name: str) -> list[str]:
        """Every value of header ``name``, in order."""
        wanted = name.lower()
        return [value for key, value in self._items if key.lower() == wanted]

    def __getitem__(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def items(self) -> tuple[tuple[str, str], ...]:
        """(name, value) pairs in the order and spelling received."""
        return self._items

    def keys(self) -> list[str]:
        return [key for key, _ in self._items]

    def redacted(self, hide: Callable[[str], str]) -> ResponseHeaders:
        """A copy with ``hide`` (the client's redactor) run over every name and value: a server
        may echo the key in either (``X-Echo-<key>: 1``); ``self`` when there is nothing to hide.

        Every response's headers pass here, and they almost never hold the key: one scan of the
        names and values joined tells, since a piece of the key in any of them is in the joined
        text too (``benchmarks/redaction.py``: about a third of the time of a scan per field)."""
        joined = "\n".join([text for pair in self._items for text in pair])
        if hide(joined) == joined:
            return self
        return ResponseHeaders((hide(name), hide(value)) for name, value in self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ResponseHeaders) and other._items == self._items

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[object, ...]:
        return (ResponseHeaders, (self._items,))

    def __repr__(self) -> str:
        return f"ResponseHeaders({list(self._items)!r})"

"""Event hooks: what a library embedding qa_min can watch around each attempt.

``Client(hooks={"before_attempt": [fn, ...], "after_attempt": [fn, ...]})``, as httpx's
``event_hooks``. The retry loop calls each hook with a ``HookEvent``: before every attempt, and
after every response or failure (cancellation included). A hook that raises is logged and
ignored; the call goes on. Hooks are plain functions (they run on the I/O path, nothing awaits
or iterates what they return): a generator or ``async def`` one is refused when the client is
made. Events never hold the API key: of the request they keep the method, the URL and the body
(``event.request_body()``), never its fields.
"""

from __future__ import annotations

from ._errors import InvalidOption
from ._typing import plain, read, short

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional

    Hook = Callable[["HookEvent"], object]

STAGES = ("before_attempt", "after_attempt")


class HookEvent:
    """One moment of one attempt, as a hook sees it (read-only).

    Attributes:
        stage: ``"before_attempt"`` or ``"after_attempt"``.
        method: ``"POST"`` or ``"GET"``.
        url: The full URL of the request.
        attempt: 1 for the first attempt, 2 for the next, ...: every time the request is
            written, a quiet re-send on a fresh connection included (as ``Diagnostics.attempts``
            and ``Diagnostics.history`` count).
        status: The HTTP status received (after a response), else None.
        error: The qa_min error the attempt ended in (after a failure or cancellation), else None.
            After a non-2xx response it is the error that status maps to, even when it is retried;
            when the policy's ``retry_status`` raised judging the attempt, that exception.
        duration: Seconds the attempt took (after), else None.
        request_id: The response's request id (after), else None.
    """

    __slots__ = ("_body", "attempt", "duration", "error", "method", "request_id", "stage", "status", "url")

    stage: str
    method: str
    url: str
    attempt: int
    status: Optional[int]
    error: Optional[BaseException]
    duration: Optional[float]
    request_id: Optional[str]
    _body: bytes

    def __init__(
        self,
        stage: str,
        method: str,
        url: str,
        attempt: int,
        body: bytes,
        status: Optional[int] = None,
        error: Optional[BaseException] = None,
        duration: Optional[float] = None,
        request_id: Optional[str] = None,
    ) -> None:
        # The body only: the request's fields hold the key, and a hook may log, pickle or
        # walk its event.
        for name, value in (
            ("stage", stage),
            ("method", method),
            ("url", url),
            ("attempt", attempt),
            ("status", status),
            ("error", error),
            ("duration", duration),
            ("request_id", request_id),
            ("_body", body),
        ):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        # Every hook of the attempt sees the same event: one must not change what the next sees.
        raise AttributeError(f"HookEvent is read-only; cannot set {name!r}")

    def request_body(self) -> bytes:
        """The request body (the JSON with the state and questions); empty for ``GET``."""
        return self._body

    def __reduce__(self) -> tuple[object, ...]:
        # Protocols 0 and 1 refuse a class with __slots__ and no __getstate__; built again from
        # its arguments, it travels by every protocol.
        return (
            HookEvent,
            (
                self.stage,
                self.method,
                self.url,
                self.attempt,
                self._body,
                self.status,
                self.error,
                self.duration,
                self.request_id,
            ),
        )

    def __repr__(self) -> str:
        outcome = (
            "" if self.stage == "before_attempt" else f", status={self.status}, error={short(self.error)}"
        )
        return f"HookEvent({self.stage} #{self.attempt} {self.method} {self.url}{outcome})"


def check_hooks(hooks: object, key: Optional[str] = None) -> Optional[dict[str, tuple[Hook, ...]]]:
    """The hooks as {stage: functions}, or None when there are none; ``InvalidOption`` if malformed.

    Read once, as configuration.md reads every option: what the caller's mapping or list raises
    as it is read becomes ``InvalidOption`` (``key`` cut out of it), and a stage given as a str
    subclass is its text, none of its own methods called."""
    if hooks is None:
        return None
    from ._redact import redact  # here, not at import: HookEvent loads with the package

    # Every message too: a hook may hold the key (a partial bound to it) and show it in its repr.
    hide = None if key is None else lambda text: redact(text, key)
    if not hasattr(hooks, "items"):
        raise InvalidOption(
            f"hooks must be a mapping of stage to a list of functions, got {short(hooks, hide)}"
        )
    pairs = read(lambda given: dict(given.items()), hooks, "hooks", "reading its items", InvalidOption, hide)
    checked: dict[str, tuple[Hook, ...]] = {}
    for named, given in pairs.items():
        stage = plain(named)
        if not isinstance(stage, str) or stage not in STAGES:
            raise InvalidOption(
                f"hooks: unknown stage {short(stage, hide)}; the stages are {', '.join(STAGES)}"
            )
        if callable(given) or not hasattr(given, "__iter__"):
            raise InvalidOption(f"hooks[{stage!r}] must be a list of functions, got {short(given, hide)}")
        functions = read(tuple, given, f"hooks[{stage!r}]", "iterating it", InvalidOption, hide)
        for fn in functions:
            if not callable(fn):
                raise InvalidOption(
                    f"hooks[{stage!r}] holds something that is not a function: {short(fn, hide)}"
                )
            unrun = never_runs(fn)
            if unrun is not None:
                raise InvalidOption(
                    f"hooks[{stage!r}] holds {unrun[0]}, {short(fn, hide)}: {unrun[1]}, so its body would"
                    " never run; hooks must be plain functions"
                )
        checked[stage] = functions
    return checked if any(checked.values()) else None


# inspect's flags, without importing inspect: calling a function of such a code only makes a
# coroutine or an async generator (CO_COROUTINE | CO_ASYNC_GENERATOR), or a generator
# (CO_GENERATOR), whose body nothing would run.
_ASYNC_FLAGS = 0x80 | 0x200
_GENERATOR_FLAG = 0x20


def never_runs(fn: object) -> Optional[tuple[str, str]]:
    """What ``fn`` is, and why its body would never run, when it is an ``async def`` or a
    generator function: itself, a partial or a bound method of one, or an object whose class's
    ``__call__`` is one. None when it is neither or that cannot be told: a hook (or a
    ``MockTransport`` handler) that still returns an awaitable or a generator is caught when it
    runs."""
    from functools import partial  # loaded with json: free, and only read when hooks are given
    from types import FunctionType, MethodType

    try:
        while isinstance(fn, partial):
            fn = fn.func
        if not isinstance(fn, (FunctionType, MethodType)):
            # An object: its class's ``__call__``, looked up on the class (never on the object).
            fn = type(fn).__call__
        if isinstance(fn, MethodType):
            fn = fn.__func__
        flags = fn.__code__.co_flags if isinstance(fn, FunctionType) else 0
    except Exception:
        return None
    if flags & _ASYNC_FLAGS:
        return "an async def function", "its call only makes a coroutine, which nothing awaits"
    if flags & _GENERATOR_FLAG:
        return "a generator function", "its call only makes a generator, which nothing iterates"
    return None

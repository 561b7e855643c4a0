"""``AsyncClient``: the same client, native on asyncio.

An ``AsyncClient`` holds a ``Client`` built from the same arguments, and shares with it every
decision that is not I/O: the configuration and its checks, validation, request encoding,
response decoding, the retry loop's decisions (``Sender``), the retry budget, the rate
limiter, hooks, redaction, ``Diagnostics``, ``MockTransport``. That client's transport never
opens a socket and its executor never starts: the I/O is ``_atransport``'s on the running
loop, and the waiting is ``_asender``'s. See ``_ascope`` for cancellation.

A client belongs to one open event loop at a time: its connections are that loop's. Once
that loop is closed (one ``asyncio.run`` per AWS Lambda invocation, per CLI command, per test),
nothing of it can run again, and the client follows the next loop a call comes from
(``_follow``): the pool closes the old loop's sockets itself and a fresh one serves the new loop,
the old loop's calls are dropped, and the rate limiter restarts its schedule, keeping what it
learned, any pause in force and the attempts that went (not the old loop's calls' slots). A
call from another loop while the client's is open (running in another thread, or stopped: it
may run again) raises ``WrongLoop``. ``aclose()`` works from any loop once the client's is
closed, the sockets closed the same way; any later call raises ``ClientClosed``.
"""

from __future__ import annotations

import _thread
import asyncio
import inspect

from ._aio import AioPool
from ._ascope import WrongLoop
from ._asender import AioSender
from ._atransport import AioMock, AioTransport
from ._call import unsent
from ._client import Client, refuse_ssl_context
from ._constants import MAX_RESPONSE_BYTES
from ._errors import ClientClosed, InvalidOption, QAError
from ._responses import AskResponse, CoreResponse
from ._typing import UNSET, Unset, readonly, short

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl
    from collections.abc import Awaitable, Mapping, Sequence
    from types import TracebackType
    from typing import Any, Callable, Optional, TypeVar, Union

    from ._backoff import RetryPolicy
    from ._call import CancelToken, RetryBudget
    from ._errors import Diagnostics
    from ._hooks import HookEvent
    from ._mock import MockTransport
    from ._questions import Questions
    from ._ratelimit import RateLimit, RateLimitState
    from ._request import Request
    from ._responses import ModelList

    Q = TypeVar("Q", bound=Questions)
    Timeout = Union[float, None, Unset]


# Seconds aclose() waits for its cancelled calls to end. They take a loop turn or two; the bound
# keeps aclose() prompt should a call's task never run again.
_ENDING = 1.0


def _rebuild(options: dict[str, Any]) -> AsyncClient:
    return AsyncClient(**options)


class AsyncClient:
    """A client of the question-answering service for asyncio: ``await client.ask(...)``.

    It takes ``Client``'s arguments (see there), but for ``max_workers``, and ``sleep``, which
    here is an ``async`` function of the seconds to wait (for tests; default
    ``asyncio.sleep``). Hooks and ``MockTransport`` handlers run on the loop's thread.

    Raises:
        MissingApiKey, InvalidBaseUrl, InvalidOption: As ``Client``.
    """

    def __init__(
        self,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        model: Optional[str] = None,
        retry: Optional[RetryPolicy] = None,
        extra_headers: Sequence[tuple[str, str]] = (),
        timeout: Optional[float] = None,
        *,
        max_idle_per_host: int = 10,
        idle_timeout: float = 30.0,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        ssl_context: Optional[ssl.SSLContext] = None,
        proxy: Optional[str] = None,
        trust_env: bool = True,
        retry_budget: Union[RetryBudget, Unset, None] = UNSET,
        rate_limit: Union[RateLimit, Unset, None] = UNSET,
        sleep: Optional[Callable[[float], Awaitable[object]]] = None,
        random: Optional[Callable[[], float]] = None,
        hooks: Optional[Mapping[str, Sequence[Callable[[HookEvent], object]]]] = None,
        transport: Optional[MockTransport] = None,
    ) -> None:
        if sleep is not None and not inspect.iscoroutinefunction(sleep):
            raise InvalidOption(f"sleep must be an async function of the seconds, got {short(sleep)}")
        self._core = core = Client(
            api_key,
            base_url,
            model,
            retry,
            extra_headers,
            timeout,
            max_idle_per_host=max_idle_per_host,
            idle_timeout=idle_timeout,
            max_response_bytes=max_response_bytes,
            ssl_context=ssl_context,
            proxy=proxy,
            trust_env=trust_env,
            retry_budget=retry_budget,
            rate_limit=rate_limit,
            random=random,
            hooks=hooks,
            transport=transport,
        )
        sync = core._transport
        self._pool: Optional[AioPool] = None
        if transport is None:
            self._pool = pool = AioPool(sync.pool.max_idle, sync.pool.idle_timeout)
            self._transport: Union[AioTransport, AioMock] = AioTransport(sync, pool)
        else:
            self._transport = AioMock(sync)  # type: ignore[arg-type]
        self._sender = AioSender(core._sender, self._transport, sleep)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._binding = _thread.allocate_lock()  # held while the client changes loops
        self.base_url = core.base_url
        self._options = {**core._options, "sleep": sleep}
        del self._options["max_workers"]

    def __del__(self) -> None:
        # Collected unclosed once its loop is closed (the last invocation's, at exit): nothing
        # runs on that loop, so the sockets are closed here, quietly, as a Client's are. While
        # the loop is open, only it may close them, and its transports warn as Python's do.
        loop, pool = getattr(self, "_loop", None), getattr(self, "_pool", None)
        if loop is not None and loop.is_closed() and pool is not None:
            pool.close_orphaned()

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle and copy as the configuration, as ``Client``: a fresh client, the key included."""
        refuse_ssl_context(self._options, "an AsyncClient")
        return (_rebuild, (self._options,))

    @property
    def model(self) -> str:
        """The model used when a call names none."""
        return self._core.model

    @property
    def rate_limit(self) -> Optional[RateLimitState]:
        """A snapshot of the rate limiter now: its ceiling and any pause; None when turned off."""
        return self._core.rate_limit

    def __repr__(self) -> str:
        # As messages show it: a key put in the base URL's path is hidden there too.
        return f"AsyncClient(base_url={self._core._sender.messages.base_url!r}, model={self.model!r})"

    # -- operations -------------------------------------------------------------------------

    async def ask(
        self,
        state: str,
        questions: type[Q],
        *,
        model: Optional[str] = None,
        retry: Optional[RetryPolicy] = None,
        diagnostics: Optional[Diagnostics] = None,
        cancel: Optional[CancelToken] = None,
        timeout: Timeout = UNSET,
    ) -> AskResponse[Q]:
        """As ``Client.ask``; cancelling the awaiting task raises ``CancelledError``."""
        core = self._core
        try:
            loop = self._bind()
            spec, body = core._ask_body(state, questions, model)
            call = core._call(cancel, timeout, diagnostics)
        except QAError as exc:
            unsent(exc, diagnostics)
            raise
        data = await self._sender.send(loop, core._endpoints.core.with_body(body), core._policy(retry), call)
        answers, usage = core._decode(data, spec, call)
        return AskResponse(questions._qa_from(answers), usage, call.fill())

    async def core(
        self,
        request: Request,
        *,
        model: Optional[str] = None,
        retry: Optional[RetryPolicy] = None,
        diagnostics: Optional[Diagnostics] = None,
        cancel: Optional[CancelToken] = None,
        timeout: Timeout = UNSET,
    ) -> CoreResponse:
        """As ``Client.core``."""
        core = self._core
        try:
            loop = self._bind()
            body = core._core_body(request, model)
            call = core._call(cancel, timeout, diagnostics)
        except QAError as exc:
            unsent(exc, diagnostics)
            raise
        data = await self._sender.send(loop, core._endpoints.core.with_body(body), core._policy(retry), call)
        answers, usage = core._decode(data, request._spec, call)
        return CoreResponse(readonly(answers), usage, call.fill())

    async def list_models(
        self,
        *,
        retry: Optional[RetryPolicy] = None,
        diagnostics: Optional[Diagnostics] = None,
        cancel: Optional[CancelToken] = None,
        timeout: Timeout = UNSET,
    ) -> ModelList:
        """As ``Client.list_models``."""
        core = self._core
        try:
            loop = self._bind()
            call = core._call(cancel, timeout, diagnostics)
        except QAError as exc:
            unsent(exc, diagnostics)
            raise
        data = await self._sender.send(loop, core._endpoints.models, core._policy(retry), call)
        return core._models(data, call)

    async def aclose(self) -> None:
        """Release every connection; calls in flight end with ``Canceled``, their sockets closed
        before it returns. Idempotent.

        Calls made afterwards raise ``ClientClosed``. Awaited in any loop once the client's own
        loop is closed (its calls ended with it): the sockets are closed without that loop.
        """
        if self._loop is not None and self._loop.is_closed() and self._close_orphaned():
            return
        if self._loop is not None:
            self._bind()
        self._core.close()  # the closing token: every call and wait stops; no call starts
        scopes = list(self._sender.scopes)
        for scope in scopes:
            scope.stop("the client was closed")
        self._transport.close()
        if scopes:
            # A call still connecting holds a socket the pool does not know yet: its task closes
            # it when it takes the cancellation, a turn or two of the loop from now.
            await asyncio.wait([scope.ended() for scope in scopes], timeout=_ENDING)
        await asyncio.sleep(0)  # the loop closes the sockets on its next turn: let it

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.aclose()

    def _close_orphaned(self) -> bool:
        """``aclose()`` once the loop this client ran on is closed: nothing can run on it, so no
        call is in flight any more, and each socket is closed here (``AioPool.close_orphaned``).
        False if another thread's loop took the client meanwhile (``_follow``)."""
        with self._binding:
            if self._loop is not None and not self._loop.is_closed():
                return False
            self._core.close()
            self._sender.orphaned()  # the tasks of the closed loop, which will never run again
            if self._pool is not None:
                self._pool.close_orphaned()
            return True

    # -- the call machinery -----------------------------------------------------------------

    def _bind(self) -> asyncio.AbstractEventLoop:
        """The running loop, which must be this client's (it becomes so on first use, or once
        the client's loop is closed: ``_follow``)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise WrongLoop("an AsyncClient call must be awaited inside a running event loop") from None
        if loop is not self._loop:
            self._follow(loop)
        return loop

    def _follow(self, loop: asyncio.AbstractEventLoop) -> None:
        """Make ``loop`` the client's: on first use, or once the client's loop is closed (nothing
        of it can run again, so nothing of it can conflict with ``loop``). Under a lock: two
        threads' loops racing for the client, one gets it, the other ``WrongLoop``."""
        with self._binding:
            old = self._loop
            if old is not None and old is not loop:
                if not old.is_closed():
                    raise WrongLoop(
                        f"this AsyncClient belongs to another event loop ({_state(old)}), not the one "
                        "running now; it follows a new loop only once its own is closed: create one "
                        "client per event loop"
                    )
                if self._core._closing.cancelled:
                    raise ClientClosed("the client is closed")  # whichever loop runs now
                self._sender.orphaned()  # the old loop's calls, left pending, never run again
                pool, transport = self._pool, self._transport
                if pool is not None and isinstance(transport, AioTransport):
                    pool.close_orphaned()  # its sockets, closed here: that loop cannot
                    self._pool = transport.pool = AioPool(pool.max_idle, pool.idle_timeout)
                limiter = self._core._sender.limiter
                if limiter is not None:
                    limiter.restart()  # what it learned and any pause stay; the old loop's slots go
            self._loop = loop


def _state(loop: asyncio.AbstractEventLoop) -> str:
    """What the open loop a client belongs to is doing, as ``WrongLoop`` words it."""
    # A loop that ran run_until_complete() and returned is stopped but open: it can run again.
    return "still running" if loop.is_running() else "stopped, not closed"

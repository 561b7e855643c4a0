"""``Client``, the public facade, and its option types ``CancelToken`` and ``RetryBudget``.

The client encodes requests, hands them to the retry loop (``_retrying``), and decodes and
checks the responses. Its transport modules load with the first ``Client``, not at import.

The hot path of a call is: validate the few per-call inputs, splice the state and model into
the question set's pre-encoded JSON, prepend the client's fixed header block, one ``attempt``,
one ``json.loads``, one decoder per question. Everything else (header validation, URL parsing,
question encoding, the TLS context) is done once per client or once per question class.
"""

from __future__ import annotations

import _thread
import json
import os
import threading

from ._errors import (
    ClientClosed,
    Diagnostics,
    InvalidOption,
    InvalidQuestion,
    InvalidResponse,
    MissingApiKey,
)
from ._questions import (
    UNSET,
    AskResponse,
    CoreResponse,
    Model,
    ModelList,
    Questions,
    Request,
    Unset,
    _Mismatch,
    _short,
    check_model,
    readonly,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl
    from collections.abc import Mapping, Sequence
    from types import TracebackType
    from typing import Any, Callable, Optional, ParamSpec, TypeVar, Union

    from ._futures import Call
    from ._ratelimit import RateLimit, RateLimitState
    from ._retry import RetryPolicy
    from ._retrying import PolicyLike
    from ._transport import CallState

    Q = TypeVar("Q", bound=Questions)
    R = TypeVar("R")
    P = ParamSpec("P")
    Timeout = Union[float, None, Unset]

_EMPTY: Mapping[str, Any] = readonly({})
_MISSING = object()
MAX_RESPONSE_BYTES = 8 * 1024 * 1024


def _wait(seconds: float, wake: threading.Event) -> None:
    wake.wait(seconds)


def _number(name: str, value: object, minimum: float, allow_none: bool = False) -> Any:
    if value is None and allow_none:
        return None
    # TIMEOUT_MAX bounds what sockets and locks accept; "no limit" is None, not inf.
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not minimum < value <= threading.TIMEOUT_MAX
    ):
        raise InvalidOption(f"{name} must be a finite number > {minimum:g}, got {value!r}")
    return value


# A call registers a hook on its token for as long as it holds a socket; ``cancel()`` runs the
# hooks, which shut the socket down, so a thread blocked in ``recv`` or ``send`` wakes at once.
# A backoff sleep waits on the token's event, so it ends at once too.
class CancelToken:
    """Cancels the calls it is passed to (``cancel=token``), from any thread.

    A token is one-shot: once cancelled it stays cancelled, and every call given it afterwards
    raises ``Canceled`` before sending anything.
    """

    __slots__ = ("_event", "_hooks", "_lock")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._hooks: list[Callable[[], object]] = []
        self._lock = _thread.allocate_lock()

    @property
    def cancelled(self) -> bool:
        """True once ``cancel()`` was called."""
        return self._event.is_set()

    def cancel(self) -> None:
        """Cancel every call using this token; safe to call from any thread, any number of times."""
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            hooks, self._hooks = self._hooks, []
        # Outside the lock: a hook may take other locks (the pool's), and must not deadlock.
        for hook in hooks:
            try:
                hook()
            except Exception:
                pass

    def _add_hook(self, hook: Callable[[], object]) -> bool:
        """Run ``hook`` on cancel; False (hook not added) if already cancelled."""
        with self._lock:
            if self._event.is_set():
                return False
            self._hooks.append(hook)
            return True

    def _remove_hook(self, hook: Callable[[], object]) -> bool:
        """Forget ``hook``; False if ``cancel()`` already took it (it runs or will run)."""
        with self._lock:
            try:
                self._hooks.remove(hook)
            except ValueError:
                return False
            return True

    def __repr__(self) -> str:
        return f"CancelToken(cancelled={self.cancelled})"


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
    """

    __slots__ = ("_lock", "_tokens", "capacity", "retry_cost", "success_refund")

    def __init__(self, capacity: float = 500, retry_cost: float = 5, success_refund: float = 1) -> None:
        for name, value in (
            ("capacity", capacity),
            ("retry_cost", retry_cost),
            ("success_refund", success_refund),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                from ._errors import InvalidOption

                raise InvalidOption(f"RetryBudget {name} must be a number >= 0, got {value!r}")
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


class Client:
    """A client of the question-answering service, safe to share between threads.

    Args:
        api_key: The API key; default ``SERVICE_API_KEY``. Required only for the public address.
        base_url: The service address, path prefix allowed; default ``SERVICE_BASE_URL``, then
            ``PUBLIC_BASE_URL``.
        model: The default model; default ``SERVICE_DEFAULT_MODEL``, then ``DEFAULT_MODEL``.
        retry: The default ``RetryPolicy`` (``RetryPolicy()`` when None).
        extra_headers: (name, value) pairs sent with every request, after the standard ones.
        timeout: Seconds for every call, retries included, unless a call passes its own;
            None means no limit.
        max_idle_per_host: Idle keep-alive connections kept per host (10).
        idle_timeout: Seconds an idle connection may wait before it is discarded rather than
            reused (30): below the 60 s idle limit of common load balancers and proxies, far
            below the 350 s after which NAT gateways silently forget a connection.
        max_response_bytes: Larger responses are refused without being read (8 MiB).
        max_workers: Threads of the executor behind ``submit`` (default: 8).
        ssl_context: TLS settings; default: the system trust store, ``SSL_CERT_FILE`` and
            ``SSL_CERT_DIR`` honoured.
        proxy: An ``http://[user:pass@]host:port`` proxy for every request; https goes
            through a CONNECT tunnel.
        trust_env: Read the environment (True): ``SERVICE_API_KEY``, ``SERVICE_BASE_URL``,
            ``SERVICE_DEFAULT_MODEL``, and ``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY``/``NO_PROXY``.
            False suits a library that must not be steered by its host's environment.
        retry_budget: The retry budget shared by this client's threads; None disables it.
        rate_limit: The ``RateLimit`` shared by this client's threads (``RateLimit()``: no
            ceiling, adaptive after the first 429/529); None turns rate limiting off.
        sleep: ``sleep(seconds, wake)`` used for backoff; it must return early once ``wake``
            is set. For tests: the default waits on ``wake``.
        random: A function returning a float in [0, 1), for backoff jitter. For tests.

    Raises:
        MissingApiKey: The base URL is the public address and no key was found.
        InvalidBaseUrl: The base URL is not an http(s) URL with a host.
        InvalidOption: Another option has the wrong type or value.
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
        max_workers: int = 8,
        ssl_context: Optional[ssl.SSLContext] = None,
        proxy: Optional[str] = None,
        trust_env: bool = True,
        retry_budget: Union[RetryBudget, Unset, None] = UNSET,
        rate_limit: Union[RateLimit, Unset, None] = UNSET,
        sleep: Optional[Callable[[float, threading.Event], object]] = None,
        random: Optional[Callable[[], float]] = None,
    ) -> None:
        # The transport loads with the first client, not with ``import qa_min``: code that only
        # imports the package (for its types or errors) does not pay for sockets and pools.
        from ._config import (
            env_proxy,
            header_block,
            is_public,
            parse_proxy,
            request_heads,
            resolve_api_key,
            resolve_base_url,
            resolve_model,
        )
        from ._connection import Pool
        from ._retrying import DEFAULTS, Sender
        from ._transport import CallState, Transport

        env = os.environ if trust_env else {}
        self._key = resolve_api_key(api_key, env)
        origin = resolve_base_url(base_url, env)
        if self._key is None and is_public(origin):
            raise MissingApiKey(
                "no API key: pass api_key= or set SERVICE_API_KEY (required for the public service)"
            )
        self._model = resolve_model(model, env)
        self._retry: PolicyLike = DEFAULTS if retry is None else _check_retry(retry)
        self._timeout = _number("timeout", timeout, 0, allow_none=True)
        budget = _check_options(retry_budget, ssl_context, sleep, random, max_idle_per_host, max_workers)
        proxy_url = proxy if proxy is not None else (env_proxy(origin, env) if trust_env else None)
        proxy_origin = None if proxy_url is None else parse_proxy(proxy_url)
        self._heads = request_heads(origin, proxy_origin, header_block(self._key, extra_headers))
        self._transport = Transport(
            origin,
            proxy_origin,
            Pool(int(max_idle_per_host), float(_number("idle_timeout", idle_timeout, 0))),
            ssl_context,
            int(_number("max_response_bytes", max_response_bytes, 0)),
        )
        if random is None:
            import random as _random_module

            random = _random_module.random
        self._new_call = CallState
        limit = _rate_limit(rate_limit)
        self._sender = Sender(
            self._transport, budget, _wait if sleep is None else sleep, random, self._key, limit
        )
        self._max_workers = int(max_workers)
        self._executor_lock = threading.Lock()
        self._futures: Any = None
        self._closed = False
        self.base_url = origin.url()

    @property
    def model(self) -> str:
        """The model used when a call names none."""
        return self._model

    @property
    def rate_limit(self) -> Optional[RateLimitState]:
        """A snapshot of the rate limiter now: its ceiling and any pause; None when turned off."""
        from ._ratelimit import RateLimitState

        sender = self._sender
        if sender.rate_limit is None or sender.limiter is None:
            return None
        return RateLimitState(sender.rate_limit, *sender.limiter.snapshot())

    def __repr__(self) -> str:
        return f"Client(base_url={self.base_url!r}, model={self._model!r})"

    # -- operations -------------------------------------------------------------------------

    def ask(
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
        """Ask a typed question set about ``state`` (POST /v1/core).

        Returns:
            An ``AskResponse`` whose ``answers`` is an instance of ``questions``.

        Raises:
            ValidationError: The state, model or question set is invalid; nothing was sent.
            APIStatusError: The service answered with an error status (after retries).
            ConnectionFailed: The service could not be reached (after retries).
            InvalidResponse: The response or an answer does not fit the questions.
            Canceled: ``cancel`` was cancelled, ``timeout`` expired, or the client closed.
        """
        if not (isinstance(questions, type) and issubclass(questions, Questions)):
            raise InvalidQuestion(f"ask() takes a Questions subclass, got {questions!r}")
        spec = questions._qa_spec()
        body = spec.body(state, self._model if model is None else check_model(model))
        call = self._call(cancel, timeout, diagnostics)
        data = self._sender.send(self._post(body), "POST", self._policy(retry), call)
        obj = self._json(data, call)
        try:
            answers = spec.decode(obj.get("answers", _MISSING))
        except _Mismatch as exc:
            raise self._invalid(f"the service's answers do not fit: {exc}", call) from None
        return AskResponse(questions._qa_from(answers), self._usage(obj, call))

    def core(
        self,
        request: Request,
        *,
        model: Optional[str] = None,
        retry: Optional[RetryPolicy] = None,
        diagnostics: Optional[Diagnostics] = None,
        cancel: Optional[CancelToken] = None,
        timeout: Timeout = UNSET,
    ) -> CoreResponse:
        """Ask a question set built at run time (POST /v1/core).

        The model is ``model=``, else ``request.model``, else the client's.

        Returns:
            A ``CoreResponse``: ``answers`` maps each question id to its answer.

        Raises:
            The same errors as ``ask``.
        """
        if not isinstance(request, Request):
            raise InvalidOption(f"core() takes a qa_min.Request, got {_short(request)}")
        chosen = model if model is not None else request.model
        body = request._spec.body(request.state, self._model if chosen is None else check_model(chosen))
        call = self._call(cancel, timeout, diagnostics)
        data = self._sender.send(self._post(body), "POST", self._policy(retry), call)
        obj = self._json(data, call)
        try:
            answers = request._spec.decode(obj.get("answers", _MISSING))
        except _Mismatch as exc:
            raise self._invalid(f"the service's answers do not fit: {exc}", call) from None
        return CoreResponse(readonly(answers), self._usage(obj, call))

    def list_models(
        self,
        *,
        retry: Optional[RetryPolicy] = None,
        diagnostics: Optional[Diagnostics] = None,
        cancel: Optional[CancelToken] = None,
        timeout: Timeout = UNSET,
    ) -> ModelList:
        """The models this account can use (GET /v1/models).

        Raises:
            The same errors as ``ask``, validation excepted.
        """
        call = self._call(cancel, timeout, diagnostics)
        obj = self._json(self._sender.send(self._heads[1], "GET", self._policy(retry), call), call)
        items = obj.get("models")
        if type(items) is not list:
            raise self._invalid(f'"models" must be a list, got {_short(items)}', call)
        models = []
        for item in items:
            if type(item) is not dict or type(item.get("name")) is not str:
                raise self._invalid(f"a model must be an object with a name, got {_short(item)}", call)
            models.append(Model(item["name"], readonly(item)))
        return ModelList(models)

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Call[R]:
        """Run ``client.ask``, ``client.core`` or ``client.list_models`` on the client's executor.

        Returns:
            A ``Call``, a ``concurrent.futures.Future`` whose ``cancel()`` also aborts a call
            that is already running (its ``result()`` then raises ``Canceled``).

        Raises:
            InvalidOption: ``fn`` is not one of this client's operations.
            ClientClosed: The client was closed.
        """
        if getattr(fn, "__self__", None) is not self or getattr(fn, "__name__", None) not in (
            "ask",
            "core",
            "list_models",
        ):
            raise InvalidOption("submit() runs this client's ask, core or list_models")
        with self._executor_lock:
            # After os.fork() the parent's worker threads do not exist in the child.
            if self._futures is None or self._futures.pid != os.getpid():
                from ._futures import Executor

                self._futures = Executor(self._max_workers)
            if self._closed:
                raise ClientClosed("the client is closed")
            return self._futures.submit(fn, args, kwargs)  # type: ignore[no-any-return]

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Release every socket and the executor; calls in flight end with ``Canceled``.

        Idempotent. Calls made afterwards raise ``ClientClosed``.
        """
        with self._executor_lock:
            futures, self._futures = self._futures, None
            self._closed = True
        # Calls queued on the executor end as Canceled before the pool closes: otherwise a
        # worker freed in between would start one on a closed client.
        if futures is not None:
            futures.cancel_all()
        self._transport.pool.close()
        self._sender.closer.cancel()
        if futures is not None:
            futures.join()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    # -- the call machinery -----------------------------------------------------------------

    def _call(self, cancel: object, timeout: Timeout, diagnostics: object) -> CallState:
        # _closed is set first thing in close(), before the pool closes: no call starts after.
        if self._closed:
            raise ClientClosed("the client is closed")
        if cancel is not None and not isinstance(cancel, CancelToken):
            raise InvalidOption(f"cancel must be a CancelToken, got {_short(cancel)}")
        if diagnostics is not None and not isinstance(diagnostics, Diagnostics):
            raise InvalidOption(f"diagnostics must be a Diagnostics, got {_short(diagnostics)}")
        seconds = self._timeout if timeout is UNSET else _number("timeout", timeout, 0, True)
        return self._new_call(cancel, seconds, diagnostics)

    def _post(self, body: bytes) -> bytes:
        return b"%s%d\r\n\r\n%s" % (self._heads[0], len(body), body)

    def _policy(self, retry: Optional[RetryPolicy]) -> PolicyLike:
        return self._retry if retry is None else _check_retry(retry)

    def _invalid(self, message: str, call: CallState) -> InvalidResponse:
        # Bad data is quoted in the message, and a server may have echoed the key into it.
        return InvalidResponse(self._sender.redact(message), call.fill())

    def _json(self, data: bytes, call: CallState) -> dict[str, Any]:
        try:
            obj = json.loads(data)
        except ValueError as exc:
            raise self._invalid(f"the response is not JSON ({exc}): {_short(data)}", call) from None
        if type(obj) is not dict:
            raise self._invalid(f"the response is not a JSON object: {_short(obj)}", call)
        return obj

    def _usage(self, obj: dict[str, Any], call: CallState) -> Mapping[str, Any]:
        usage = obj.get("usage", _MISSING)
        if usage is _MISSING:
            return _EMPTY
        if type(usage) is not dict:
            raise self._invalid(f'"usage" must be an object, got {_short(usage)}', call)
        return readonly(usage)


def _check_options(
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
        raise InvalidOption(f"retry_budget must be a RetryBudget or None, got {_short(retry_budget)}")
    _number("max_idle_per_host", max_idle_per_host, -1)
    _number("max_workers", max_workers, 0)
    for name, function in (("sleep", sleep), ("random", random)):
        if function is not None and not callable(function):
            raise InvalidOption(f"{name} must be a function, got {_short(function)}")
    if ssl_context is not None:
        import ssl

        if not isinstance(ssl_context, ssl.SSLContext):
            raise InvalidOption(f"ssl_context must be an ssl.SSLContext, got {_short(ssl_context)}")
    return budget


def _rate_limit(rate_limit: object) -> Optional[RateLimit]:
    from ._ratelimit import RateLimit

    if rate_limit is UNSET:
        return RateLimit()
    if rate_limit is not None and not isinstance(rate_limit, RateLimit):
        raise InvalidOption(f"rate_limit must be a RateLimit or None, got {_short(rate_limit)}")
    return rate_limit


def _check_retry(retry: object) -> PolicyLike:
    """``retry`` if it is a ``RetryPolicy``; loading the class only to check means it is in use."""
    from ._retry import RetryPolicy

    if not isinstance(retry, RetryPolicy):
        raise InvalidOption(f"retry must be a RetryPolicy, got {_short(retry)}")
    return retry

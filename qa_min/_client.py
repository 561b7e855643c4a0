"""``Client``: encodes requests, hands them to the retry loop, decodes and checks the responses.

It owns the lifecycle of everything below it: one closing token (``close()`` cancels it; the
retry loop, the transport and the pool read it), one fork check (``_check_fork``), and the
executor behind ``submit``. Its transport modules load with the first ``Client``, not at import.

The hot path of a call is: validate the few per-call inputs, splice the state and model into
the question set's pre-encoded JSON, copy the client's prepared request with that body, one
``attempt``, one ``json.loads``, one decoder per question. Everything else (header validation, URL parsing,
question encoding, the TLS context) is done once per client or once per question class.
"""

from __future__ import annotations

import _thread
import os

from ._backoff import DEFAULTS, RetryPolicy
from ._call import CallState, CancelToken, RetryBudget, unsent
from ._constants import MAX_RESPONSE_BYTES
from ._errors import ConfigurationError, Diagnostics, InvalidOption, InvalidQuestion, InvalidResponse, QAError
from ._lifecycle import Lifecycle
from ._options import COUNTS, check_options, check_rate_limit, check_retry, count, number
from ._questions import Questions, _Mismatch, _Spec, check_model
from ._request import Request
from ._responses import AskResponse, BadShape, CoreResponse, ModelList, models_of, parse_object, usage_of
from ._typing import UNSET, Unset, cast, plain, readonly, short

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl
    import threading
    from collections.abc import Mapping, Sequence
    from types import TracebackType
    from typing import Any, Callable, Optional, ParamSpec, TypeVar, Union

    from ._futures import Call
    from ._hooks import HookEvent
    from ._http import Outgoing
    from ._mock import MockTransport
    from ._ratelimit import RateLimit, RateLimitState

    Q = TypeVar("Q", bound=Questions)
    R = TypeVar("R")
    P = ParamSpec("P")
    Timeout = Union[float, None, Unset]


def _check_transport(transport: object) -> MockTransport:
    from ._mock import MockTransport

    if not isinstance(transport, MockTransport):
        raise InvalidOption(f"transport must be a qa_min.testing.MockTransport, got {short(transport)}")
    return transport


def _rebuild(options: dict[str, Any]) -> Client:
    return Client(**options)


def _wait(seconds: float, wake: threading.Event) -> None:
    # Locks take at most TIMEOUT_MAX (292 years), which is as long as forever: a tiny
    # RateLimit(per_second) asks for longer, and Event.wait would raise OverflowError.
    wake.wait(min(seconds, _thread.TIMEOUT_MAX))


def _uniform() -> float:
    # Not ``random.random``: importing ``random`` in ``Client()`` would cost every cold start
    # (since Python 3.13 ``http.client`` no longer loads it), and importing it at the first retry
    # failed with a raw OSError when that retry followed a connect that ran out of file
    # descriptors (an import opens files; os.urandom needs none where getrandom() exists).
    return int.from_bytes(os.urandom(7), "big") / 72057594037927936  # 2**56: [0, 1), 56 bits


class Client:
    """A client of the question-answering service, safe to share between threads.

    Args:
        api_key: The API key; default ``SERVICE_API_KEY``. Required only for the public address.
        base_url: The service address, path prefix allowed; default ``SERVICE_BASE_URL``, then
            ``PUBLIC_BASE_URL``.
        model: The default model; default ``SERVICE_DEFAULT_MODEL``, then ``DEFAULT_MODEL``.
        retry: The default ``RetryPolicy`` (``RetryPolicy()`` when None).
        extra_headers: (name, value) pairs sent with every request, after the standard ones; one
            named as a standard one (Accept, User-Agent, Authorization) replaces it.
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
            through a CONNECT tunnel. ``""``: no proxy, the environment's proxy variables unread.
        trust_env: Read the environment (True): ``SERVICE_API_KEY``, ``SERVICE_BASE_URL``,
            ``SERVICE_DEFAULT_MODEL``, and ``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY``/``NO_PROXY``.
            False suits a library that must not be steered by its host's environment.
        retry_budget: The retry budget shared by this client's threads; None disables it.
        rate_limit: The ``RateLimit`` shared by this client's threads (``RateLimit()``: no
            ceiling, adaptive after the first 429/529); None turns rate limiting off.
        sleep: ``sleep(seconds, wake)`` used for backoff; it must return early once ``wake``
            is set. For tests: the default waits on ``wake``.
        random: A function returning a float in [0, 1), for backoff jitter. For tests.
        transport: A ``qa_min.testing.MockTransport`` that answers in-process, for tests: no
            socket, no thread; everything above the network behaves as it does over one.
        hooks: ``{"before_attempt": [fn, ...], "after_attempt": [fn, ...]}``: functions called
            with a ``HookEvent`` before each attempt and after each response or failure. A hook
            that raises is logged and ignored. Hooks are plain functions: a generator or
            ``async def`` function is refused (``InvalidOption``).

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
        hooks: Optional[Mapping[str, Sequence[Callable[[HookEvent], object]]]] = None,
        transport: Optional[MockTransport] = None,
    ) -> None:
        # What pickle and copy rebuild the client from: every argument, with the ones that came
        # from the environment (key, address, model, proxy) fixed to the values found here.
        options = {name: value for name, value in locals().items() if name != "self"}
        # The transport loads with the first client, not with ``import qa_min``: code that only
        # imports the package (for its types or errors) does not pay for sockets and pools.
        from ._config import endpoints, header_fields, resolve
        from ._connection import Pool
        from ._hooks import check_hooks
        from ._retrying import Sender
        from ._transport import Transport

        self._key, origin, proxy_origin, self._model = resolve(api_key, base_url, model, proxy, trust_env)
        self._retry: RetryPolicy = DEFAULTS if retry is None else check_retry(retry)
        self._timeout = number("timeout", timeout, 0, allow_none=True)
        budget = check_options(retry_budget, ssl_context, sleep, random, max_idle_per_host, max_workers)
        self._endpoints = endpoints(origin, proxy_origin, header_fields(self._key, extra_headers))
        self._life = Lifecycle(plain(max_workers))  # owns "closed": everything below reads its token
        self._closing = self._life.closing
        pool = Pool(plain(max_idle_per_host), float(number("idle_timeout", idle_timeout, 0)), self._closing)
        max_body = count("max_response_bytes", max_response_bytes, COUNTS["max_response_bytes"])
        if transport is None:
            self._transport = Transport(origin, proxy_origin, pool, ssl_context, max_body)
        else:
            # Typed as the socket transport, whose interface (TransportLike) the mock shares.
            self._transport = cast("Transport", _check_transport(transport)._bind(origin, max_body))
        limit, checked_hooks = check_rate_limit(rate_limit), check_hooks(hooks, self._key)
        secrets = (self._key, *(() if proxy_origin is None else proxy_origin.secrets()))
        self._sender = Sender(
            self._transport, budget, sleep or _wait, random or _uniform, secrets, checked_hooks, limit
        )
        self._life.transport, self._life.limiter = self._transport, self._sender.limiter
        self.base_url = origin.url()
        proxy_url = None if proxy_origin is None else proxy_origin.source
        options.update(api_key=self._key, base_url=self.base_url, model=self._model, proxy=proxy_url)
        self._options = {**options, "trust_env": False}

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle and copy as the configuration: a fresh client, with its own pool and threads.

        The API key travels with it. Sockets, threads and a closed state never do.
        """
        refuse_ssl_context(self._options, "a Client")
        return (_rebuild, (self._options,))

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
        # As messages show it: a key put in the base URL's path is hidden there too.
        return f"Client(base_url={self._sender.messages.base_url!r}, model={self._model!r})"

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
        try:
            spec, body = self._ask_body(state, questions, model)
            call = self._call(cancel, timeout, diagnostics)
        except QAError as exc:
            unsent(exc, diagnostics)
            raise
        data = self._sender.send(self._endpoints.core.with_body(body), self._policy(retry), call)
        answers, usage = self._decode(data, spec, call)
        return AskResponse(questions._qa_from(answers), usage, call.fill())

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
        try:
            body = self._core_body(request, model)
            call = self._call(cancel, timeout, diagnostics)
        except QAError as exc:
            unsent(exc, diagnostics)
            raise
        data = self._sender.send(self._endpoints.core.with_body(body), self._policy(retry), call)
        answers, usage = self._decode(data, request._spec, call)
        return CoreResponse(readonly(answers), usage, call.fill())

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
        try:
            call = self._call(cancel, timeout, diagnostics)
        except QAError as exc:
            unsent(exc, diagnostics)
            raise
        data = self._sender.send(self._endpoints.models, self._policy(retry), call)
        return self._models(data, call)

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
        call: Call[R] = self._life.submit(fn, args, kwargs)
        return call

    def close(self) -> None:
        """Release every socket and the executor; calls in flight end with ``Canceled``.

        Idempotent. Calls made afterwards raise ``ClientClosed``.
        """
        self._life.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    # -- the call machinery (shared with AsyncClient) ---------------------------------------

    def _ask_body(self, state: str, questions: type[Questions], model: Optional[str]) -> tuple[_Spec, bytes]:
        """The checked question set and the body of an ``ask``."""
        if not (isinstance(questions, type) and issubclass(questions, Questions)):
            raise InvalidQuestion(f"ask() takes a Questions subclass, got {short(questions)}")
        spec = questions._qa_spec()
        return spec, spec.body(state, self._model if model is None else check_model(model))

    def _core_body(self, request: Request, model: Optional[str]) -> bytes:
        """The body of a ``core`` call; its model is ``model``, else the request's, else ours."""
        if not isinstance(request, Request):
            raise InvalidOption(f"core() takes a qa_min.Request, got {short(request)}")
        chosen = model if model is not None else request.model
        return request._spec.body(request.state, self._model if chosen is None else check_model(chosen))

    def _models(self, data: bytes, call: CallState) -> ModelList:
        """The ``ModelList`` of a ``/v1/models`` body."""
        try:
            models = models_of(parse_object(data))
        except BadShape as exc:
            problem = str(exc)
        else:
            models.diagnostics = call.fill()
            return models
        # Raised outside the except clause, so that no __context__ carries the raw text along.
        raise self._invalid(problem, call, self._endpoints.models)

    def _call(self, cancel: object, timeout: Timeout, diagnostics: object) -> CallState:
        self._life.check()
        if cancel is not None and not isinstance(cancel, CancelToken):
            raise InvalidOption(f"cancel must be a CancelToken, got {short(cancel)}")
        if diagnostics is not None and not isinstance(diagnostics, Diagnostics):
            raise InvalidOption(f"diagnostics must be a Diagnostics, got {short(diagnostics)}")
        seconds = self._timeout if timeout is UNSET else number("timeout", timeout, 0, True)
        return CallState(cancel, seconds, diagnostics, self._closing)

    def _policy(self, retry: Optional[RetryPolicy]) -> RetryPolicy:
        return self._retry if retry is None else check_retry(retry)

    def _decode(
        self, data: bytes, spec: _Spec, call: CallState
    ) -> tuple[dict[str, object], Mapping[str, Any]]:
        """The answers and usage of a ``/v1/core`` body, checked against the questions asked."""
        try:
            obj = parse_object(data)
            if "answers" not in obj:
                raise BadShape('the response has no "answers"')
            return spec.decode(obj["answers"]), usage_of(obj)
        except BadShape as exc:
            problem = str(exc)
        except _Mismatch as exc:
            problem = f"the service's answers do not fit: {exc}"
        # Raised outside the except clause, so that no __context__ carries the raw text along.
        raise self._invalid(problem, call, self._endpoints.core)

    def _invalid(self, problem: str, call: CallState, request: Outgoing) -> InvalidResponse:
        # Bad data is quoted in the message; the body was redacted before it was decoded, and
        # this redacts what decoding may have spelled out (a key the body held escaped).
        error = InvalidResponse(self._sender.messages.answered(call.status, request, problem))
        self._sender.finish(error, call)
        return error


def refuse_ssl_context(options: dict[str, Any], what: str) -> None:
    """``ConfigurationError`` naming ``what`` if ``options`` hold an (unpicklable) ``ssl_context``."""
    if options["ssl_context"] is not None:
        raise ConfigurationError(
            f"{what} with an ssl_context cannot be pickled (an SSLContext cannot be); "
            "build the client where it is used instead"
        )

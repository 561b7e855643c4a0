"""``Client``: the public facade. Encodes requests, runs the retry loop, decodes responses.

The hot path of a call is: validate the few per-call inputs, splice the state and model into the
question set's pre-encoded JSON, prepend the client's fixed header block, one ``attempt``, one
``json.loads``, one decoder per question. Everything else (header validation, URL parsing,
question encoding, the TLS context) is done once per client or once per question class.
"""

from __future__ import annotations

import json
import os
import threading
import time

from . import _log
from ._backoff import DEFAULTS, RetryBudget, backoff_ms, server_delay_ms
from ._cancel import CancelToken
from ._config import (
    Origin,
    check_model,
    env_proxy,
    header_block,
    is_public,
    parse_proxy,
    resolve_api_key,
    resolve_base_url,
    resolve_model,
)
from ._errors import (
    Canceled,
    ClientClosed,
    ConnectionFailed,
    Diagnostics,
    InvalidOption,
    InvalidQuestion,
    InvalidResponse,
    MissingApiKey,
    QAError,
    status_error_class,
)
from ._pool import Pool
from ._questions import (
    AskResponse,
    CoreResponse,
    Model,
    ModelList,
    Questions,
    Request,
    _Mismatch,
    _short,
    readonly,
)
from ._transport import CallState, Transport
from ._typing import UNSET, Unset

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl
    from collections.abc import Mapping, Sequence
    from http.client import HTTPMessage
    from types import TracebackType
    from typing import Any, Callable, Optional, TypeVar, Union

    from ._backoff import PolicyLike
    from ._futures import Call
    from ._retry import RetryPolicy

    Q = TypeVar("Q", bound=Questions)
    R = TypeVar("R")
    Timeout = Union[float, None, Unset]

_EMPTY: Mapping[str, Any] = readonly({})
_MISSING = object()
_FRAMING_HEADERS = {"host", "content-length", "transfer-encoding", "connection"}
MAX_RESPONSE_BYTES = 8 * 1024 * 1024


def _wait(seconds: float, wake: threading.Event) -> None:
    wake.wait(seconds)


def _number(name: str, value: object, minimum: float, allow_none: bool = False) -> Any:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > minimum:
        raise InvalidOption(f"{name} must be a number > {minimum:g}, got {value!r}")
    return value


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
        trust_env: Read ``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY``/``NO_PROXY`` (True).
        retry_budget: The retry budget shared by this client's threads; None disables it.
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
        sleep: Optional[Callable[[float, threading.Event], object]] = None,
        random: Optional[Callable[[], float]] = None,
    ) -> None:
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
        self._budget = RetryBudget() if retry_budget is UNSET else retry_budget
        if self._budget is not None and not isinstance(self._budget, RetryBudget):
            raise InvalidOption(f"retry_budget must be a RetryBudget or None, got {retry_budget!r}")
        _number("max_idle_per_host", max_idle_per_host, -1)
        _number("max_workers", max_workers, 0)
        self._max_workers = int(max_workers)
        proxy_url = proxy if proxy is not None else (env_proxy(origin, env) if trust_env else None)
        proxy_origin = None if proxy_url is None else parse_proxy(proxy_url)
        self._transport = Transport(
            origin,
            proxy_origin,
            Pool(int(max_idle_per_host), float(_number("idle_timeout", idle_timeout, 0))),
            ssl_context,
            int(_number("max_response_bytes", max_response_bytes, 0)),
        )
        for pair in extra_headers if isinstance(extra_headers, (list, tuple)) else ():
            if isinstance(pair, (list, tuple)) and pair and str(pair[0]).lower() in _FRAMING_HEADERS:
                raise InvalidOption(f"extra_headers must not set {pair[0]!r}; qa_min sets it")
        self._heads = self._build_heads(origin, proxy_origin, header_block(self._key, extra_headers))
        self._sleep = _wait if sleep is None else sleep
        if random is None:
            import random as _random_module

            random = _random_module.random
        self._random = random
        self._closer = CancelToken()
        self._executor_lock = threading.Lock()
        self._futures: Any = None
        self.base_url = origin.url()

    @staticmethod
    def _build_heads(origin: Origin, proxy: Optional[Origin], block: bytes) -> tuple[bytes, bytes]:
        # Through a plain-http proxy the request line carries the absolute URL.
        base = origin.url() if proxy is not None and origin.scheme == "http" else origin.path
        if proxy is not None and origin.scheme == "http":
            auth = proxy.basic_auth()
            if auth is not None:
                block += f"Proxy-Authorization: {auth}\r\n".encode()
        host = f"Host: {origin.netloc}\r\n".encode("idna" if not origin.netloc.isascii() else "ascii")
        post = (
            f"POST {base}/v1/core HTTP/1.1\r\n".encode()
            + host
            + b"Content-Type: application/json\r\n"
            + block
            + b"Content-Length: "
        )
        get = f"GET {base}/v1/models HTTP/1.1\r\n".encode() + host + block + b"\r\n"
        return post, get

    @property
    def model(self) -> str:
        """The model used when a call names none."""
        return self._model

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
        data = self._send(b"%s%d\r\n\r\n%s" % (self._heads[0], len(body), body), "POST", retry, call)
        obj = self._json(data, call)
        try:
            answers = spec.decode(obj.get("answers", _MISSING))
        except _Mismatch as exc:
            raise InvalidResponse(f"the service's answers do not fit: {exc}", call.fill()) from None
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
        data = self._send(b"%s%d\r\n\r\n%s" % (self._heads[0], len(body), body), "POST", retry, call)
        obj = self._json(data, call)
        try:
            answers = request._spec.decode(obj.get("answers", _MISSING))
        except _Mismatch as exc:
            raise InvalidResponse(f"the service's answers do not fit: {exc}", call.fill()) from None
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
        obj = self._json(self._send(self._heads[1], "GET", retry, call), call)
        items = obj.get("models")
        if type(items) is not list:
            raise InvalidResponse(f'"models" must be a list, got {_short(items)}', call.fill())
        models = []
        for item in items:
            if type(item) is not dict or type(item.get("name")) is not str:
                raise InvalidResponse(
                    f"a model must be an object with a name, got {_short(item)}", call.fill()
                )
            models.append(Model(item["name"], readonly(item)))
        return ModelList(models)

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Call[R]:
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
            if self._futures is None:
                from ._futures import Executor

                self._futures = Executor(self._max_workers)
            if self._transport.pool.closed:
                raise ClientClosed("the client is closed")
            return self._futures.submit(fn, args, kwargs)  # type: ignore[no-any-return]

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Release every socket and the executor; calls in flight end with ``Canceled``.

        Idempotent. Calls made afterwards raise ``ClientClosed``.
        """
        self._transport.pool.close()
        self._closer.cancel()
        with self._executor_lock:
            futures, self._futures = self._futures, None
        if futures is not None:
            futures.shutdown()

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
        if self._transport.pool.closed:
            raise ClientClosed("the client is closed")
        if cancel is not None and not isinstance(cancel, CancelToken):
            raise InvalidOption(f"cancel must be a CancelToken, got {_short(cancel)}")
        if diagnostics is not None and not isinstance(diagnostics, Diagnostics):
            raise InvalidOption(f"diagnostics must be a Diagnostics, got {_short(diagnostics)}")
        seconds = self._timeout if timeout is UNSET else _number("timeout", timeout, 0, True)
        return CallState(cancel, seconds, diagnostics)

    def _send(self, request: bytes, method: str, retry: Optional[RetryPolicy], call: CallState) -> bytes:
        """The retry loop: the 2xx body, or the error SPEC.md section 5 names."""
        policy = self._retry if retry is None else _check_retry(retry)
        transport = self._transport
        retries = 0
        try:
            while True:
                transport.check(call)
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
                    if not _should_retry(policy, status, headers):
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
        log = _log.get()
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
        tokens = [t for t in (call.token, self._closer) if t is not None]
        hooked = [t for t in tokens if t._add_hook(wake.set)]
        try:
            if len(hooked) == len(tokens):
                self._sleep(seconds, wake)
        finally:
            for token in hooked:
                token._remove_hook(wake.set)
        self._transport.check(call)

    def _log_attempt(self, method: str, call: CallState, status: Optional[int], started: float) -> None:
        log = _log.get()
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
        text = body.decode("utf-8", "replace")
        if self._key is not None:
            text = text.replace(self._key, "[redacted]")
        call.body = text
        path = "/v1/core" if method == "POST" else "/v1/models"
        message = f"HTTP {status} from {method} {self.base_url}{path}: {_detail(text, headers)}"
        return status_error_class(status)(message, status=status)

    def _json(self, data: bytes, call: CallState) -> dict[str, Any]:
        try:
            obj = json.loads(data)
        except ValueError as exc:
            raise InvalidResponse(f"the response is not JSON ({exc}): {_short(data)}", call.fill()) from None
        if type(obj) is not dict:
            raise InvalidResponse(f"the response is not a JSON object: {_short(obj)}", call.fill())
        return obj

    @staticmethod
    def _usage(obj: dict[str, Any], call: CallState) -> Mapping[str, Any]:
        usage = obj.get("usage", _MISSING)
        if usage is _MISSING:
            return _EMPTY
        if type(usage) is not dict:
            raise InvalidResponse(f'"usage" must be an object, got {_short(usage)}', call.fill())
        return readonly(usage)


def _check_retry(retry: object) -> PolicyLike:
    from ._retry import RetryPolicy

    if not isinstance(retry, RetryPolicy):
        raise InvalidOption(f"retry must be a RetryPolicy, got {_short(retry)}")
    return retry


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

"""A proxy's refusal is ``qa.ProxyError``: the proxy's status and page, the proxy named, no password.

The proxies here are raw sockets that answer with exact bytes, as squid and tinyproxy do (see
``test_real_proxies.py`` for the real ones): a CONNECT refused with 407, 401, 403 or 50x; a
plain-http request refused with 407, or with a 401 the proxy wrote itself. A proxy that cannot be
reached, or that drops a CONNECT unanswered, is a ``ConnectionFailed`` naming the proxy as the
host that failed.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

import pytest
from faultservers import Handler, RawServer, answer_early, read_request, reset_after_request, respond_sequence
from rawhttp import Toxic, response
from support import no_sleep

import qa_min as qa
from qa_min._connection import Connection, open_tunnel
from qa_min._http import TunnelRefused

USER, PASSWORD = "alice", "s3cret-proxy-pw"
TOKEN = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
SECRETS = (PASSWORD, TOKEN, f"{USER}:{PASSWORD}")
HTTPS_ORIGIN = "https://api.example.invalid"  # never reached: the proxy refuses first
HTTP_ORIGIN = "http://api.example.invalid:8080"
PAGE_407 = b"<html><head><title>ERROR: Cache Access Denied</title></head></html>"
REFUSAL_407 = response(
    "407 Proxy Authentication Required",
    ['Proxy-Authenticate: Basic realm="corp"', "Content-Type: text/html"],
    PAGE_407,
)
TINYPROXY_401 = response(  # what tinyproxy 1.11 sends for a wrong password
    "401 Unauthorized",
    ['WWW-Authenticate: Basic realm="Tinyproxy"', "Connection: close", "Content-Type: text/html"],
    b"<html><head><title>401 Unauthorized</title></head></html>",
    length=None,
    version="HTTP/1.0",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


class Refusing:
    """A raw proxy answering every request (CONNECT or absolute-form) with fixed bytes."""

    def __init__(self, answer: bytes, echo: bool = False) -> None:
        self.answer = answer
        self.echo = echo  # append the request head to the page, as a careless proxy might
        self.heads: list[bytes] = []
        self._lock = threading.Lock()
        self.server = RawServer(self._handle)

    def _handle(self, conn: socket.socket, stop: threading.Event) -> None:
        request = read_request(conn)
        if not request:
            return
        with self._lock:
            self.heads.append(request.partition(b"\r\n\r\n")[0])
        answer = self.answer
        if self.echo:
            answer = response(
                "407 Proxy Authentication Required", ["Proxy-Authenticate: Basic"], PAGE_407 + request
            )
        conn.sendall(answer)

    def url(self, credentials: bool = True) -> str:
        auth = f"{USER}:{PASSWORD}@" if credentials else ""
        return f"http://{auth}127.0.0.1:{self.server.port}"


@contextmanager
def refusing(answer: bytes, echo: bool = False) -> Iterator[Refusing]:
    proxy = Refusing(answer, echo)
    with proxy.server:
        yield proxy


def call(
    base_url: str, proxy: str, state: str = "some text", **options: Any
) -> tuple[Optional[qa.QAError], qa.Diagnostics]:
    diag = qa.Diagnostics()
    with qa.Client(base_url=base_url, proxy=proxy, trust_env=False, sleep=no_sleep, **options) as client:
        try:
            client.ask(state, Toxic, diagnostics=diag)
        except qa.QAError as exc:
            return exc, diag
    return None, diag


def call_async(
    base_url: str, proxy: str, state: str = "some text"
) -> tuple[Optional[qa.QAError], qa.Diagnostics, tuple[int, int]]:
    """``call`` on an ``AsyncClient``; also its pool's (idle, busy) connections once the call ended."""
    diag = qa.Diagnostics()

    async def main() -> tuple[Optional[qa.QAError], tuple[int, int]]:
        options: dict[str, Any] = {"base_url": base_url, "proxy": proxy, "trust_env": False}
        async with qa.AsyncClient(sleep=nap, **options) as client:
            pool = client._transport.pool  # type: ignore[union-attr]
            try:
                await client.ask(state, Toxic, diagnostics=diag)
            except qa.QAError as exc:
                return exc, (pool.idle_count(), pool.busy_count())
            return None, (pool.idle_count(), pool.busy_count())

    error, counts = asyncio.run(main())
    return error, diag, counts


def assert_no_password(error: BaseException, diag: qa.Diagnostics) -> None:
    texts = [str(error), repr(error), repr(diag), str(diag.body), *map(str, error.args)]
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} in {text!r}"


# -- CONNECT refused ----------------------------------------------------------------------------


@pytest.mark.parametrize("answer", [REFUSAL_407, TINYPROXY_401], ids=["407", "401-tinyproxy"])
def test_refused_connect_is_proxy_error_with_the_proxy_status_after_one_attempt(answer: bytes) -> None:
    with refusing(answer) as proxy:
        error, diag = call(HTTPS_ORIGIN, proxy.url())
        assert proxy.server.connections == 1
    status = 407 if answer is REFUSAL_407 else 401
    assert type(error) is qa.ProxyError
    assert isinstance(error, qa.ConnectionFailed)
    assert not isinstance(error, qa.APIStatusError)
    assert error.status == status
    assert (diag.status, diag.attempts, diag.transport_error) == (status, 1, None)
    assert diag.body is not None
    assert "<title>" in diag.body
    port = proxy.server.port
    assert str(error) == (
        f"proxy 127.0.0.1:{port} refused CONNECT to api.example.invalid:443: HTTP {status} "
        f"{'Proxy Authentication Required' if status == 407 else 'Unauthorized'}; "
        "check the proxy user name and password"
    )
    assert_no_password(error, diag)


def test_proxy_page_echoing_the_credentials_is_redacted() -> None:
    with refusing(b"", echo=True) as proxy:
        error, diag = call(HTTPS_ORIGIN, proxy.url())
    assert type(error) is qa.ProxyError
    assert diag.body is not None
    assert "Proxy-Authorization: Basic [redacted]" in diag.body
    assert_no_password(error, diag)


def test_proxy_named_from_the_environment_is_named_without_its_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with refusing(REFUSAL_407) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url())
        diag = qa.Diagnostics()
        with (
            qa.Client(base_url=HTTPS_ORIGIN, sleep=no_sleep) as client,
            pytest.raises(qa.ProxyError) as caught,
        ):
            client.ask("x", Toxic, diagnostics=diag)
    assert f"proxy 127.0.0.1:{proxy.server.port} refused" in str(caught.value)
    assert_no_password(caught.value, diag)


def echoing(status: str) -> Callable[[socket.socket, threading.Event], None]:
    """A plain-http proxy answering ``status`` with a page and a header that echo the request."""

    def handle(conn: socket.socket, stop: threading.Event) -> None:
        request = read_request(conn)
        head = request.partition(b"\r\n\r\n")[0].decode("latin-1")
        echoed = [f"X-Seen-{n}: {line}" for n, line in enumerate(head.split("\r\n"))]
        conn.sendall(response(status, ["Content-Type: text/plain", *echoed], request))

    return handle


@pytest.mark.parametrize("status", ["502 Bad Gateway", "400 Bad Request"])
def test_a_plain_http_proxy_page_that_is_no_refusal_hides_the_credentials_it_echoes(status: str) -> None:
    # A gateway error (or a service that sees the proxy's headers) is a status error, not a
    # ProxyError: its body and headers echo the Proxy-Authorization the request carried.
    with RawServer(echoing(status)) as server:
        proxy = f"http://{USER}:{PASSWORD}@127.0.0.1:{server.port}"
        error, diag = call(HTTP_ORIGIN, proxy, retry=qa.RetryPolicy.none)
    assert isinstance(error, qa.APIStatusError)
    assert error.status == diag.status == int(status[:3])
    assert diag.body is not None
    assert "Proxy-Authorization: Basic [redacted]" in diag.body
    shown = [diag.body, repr(diag.headers), *map(repr, diag.history), str(error.diagnostics)]
    assert not [s for s in SECRETS for text in shown if s in text]
    assert_no_password(error, diag)


@pytest.mark.parametrize("status", ["502 Bad Gateway", "503 Service Unavailable", "504 Gateway Timeout"])
def test_proxy_gateway_errors_follow_the_retry_policy(status: str) -> None:
    answer = response(status, ["Content-Type: text/plain"], b"upstream unreachable")
    with refusing(answer) as proxy:
        error, diag = call(HTTPS_ORIGIN, proxy.url())
        assert proxy.server.connections == 3
    assert type(error) is qa.ProxyError
    assert error.status == int(status[:3])
    assert (diag.status, diag.attempts, diag.body) == (int(status[:3]), 3, "upstream unreachable")
    assert str(error).endswith("(after 3 attempts)")


@pytest.mark.parametrize(
    ("policy", "attempts"),
    [
        (qa.RetryPolicy.none, 1),
        (qa.RetryPolicy(max_retries=1), 2),
        (qa.RetryPolicy(retry_status=lambda status: False), 1),
        (qa.RetryPolicy(retry_connection_errors=False), 3),  # a status answered, not a dropped line
    ],
    ids=["none", "one-retry", "retry-status-false", "no-connection-retries"],
)
def test_proxy_503_retries_are_decided_by_retry_status(policy: qa.RetryPolicy, attempts: int) -> None:
    with refusing(response("503 Service Unavailable", body=b"busy")) as proxy:
        error, diag = call(HTTPS_ORIGIN, proxy.url(), retry=policy)
        assert proxy.server.connections == attempts
    assert type(error) is qa.ProxyError
    assert diag.attempts == attempts


class RetryStatusBug(Exception):
    """A caller's own bug, raised by their ``retry_status``."""


def test_a_retry_status_that_raises_on_a_proxy_refusal_ends_the_call_with_its_exception() -> None:
    def retry_status(status: int) -> bool:
        raise RetryStatusBug(f"no rule for {status}")

    events: list[tuple[int, Optional[int], str]] = []
    hooks = {"after_attempt": [lambda e: events.append((e.attempt, e.status, type(e.error).__name__))]}
    diag = qa.Diagnostics()
    with refusing(response("503 Service Unavailable", body=b"busy")) as proxy:
        with (
            qa.Client(
                base_url=HTTPS_ORIGIN,
                proxy=proxy.url(),
                trust_env=False,
                retry=qa.RetryPolicy(retry_status=retry_status),
                hooks=hooks,
            ) as client,
            pytest.raises(RetryStatusBug, match=r"^no rule for 503$"),
        ):
            client.ask("some text", Toxic, diagnostics=diag)
        assert proxy.server.connections == 1
    assert (diag.status, diag.attempts, diag.body) == (503, 1, "busy")
    # The attempt judged holds the proxy's status, as a service's status judged so does.
    assert [(a.number, a.status, a.error) for a in diag.history] == [(1, 503, "RetryStatusBug")]
    assert events == [(1, 503, "RetryStatusBug")]


@pytest.mark.parametrize("status", ["403 Forbidden", "400 Bad Request"])
def test_other_refusals_are_not_retried_by_default(status: str) -> None:
    with refusing(response(status, body=b"not allowed")) as proxy:
        error, diag = call(HTTPS_ORIGIN, proxy.url(credentials=False))
    assert type(error) is qa.ProxyError
    assert diag.attempts == 1
    assert "check the proxy" not in str(error)


@pytest.mark.parametrize("answer", [REFUSAL_407, TINYPROXY_401], ids=["407", "401"])
@pytest.mark.parametrize("origin", [HTTPS_ORIGIN, HTTP_ORIGIN], ids=["connect", "plain"])
def test_407_and_401_are_not_retried_even_when_retry_status_says_so(answer: bytes, origin: str) -> None:
    with refusing(answer) as proxy:
        error, diag = call(origin, proxy.url(), retry=qa.RetryPolicy(retry_status=lambda status: True))
        assert proxy.server.connections == 1
    assert type(error) is qa.ProxyError
    assert error.retryable is False
    assert diag.attempts == 1


def test_a_retried_refusal_holds_the_proxy_status_and_page_when_the_hooks_see_it() -> None:
    seen: list[tuple[int, Optional[int], Optional[str]]] = []

    def after(event: Any) -> None:
        assert isinstance(event.error, qa.ProxyError)
        seen.append((event.attempt, event.error.diagnostics.status, event.error.diagnostics.body))

    with refusing(response("503 Service Unavailable", body=b"busy")) as proxy:
        error, _ = call(
            HTTPS_ORIGIN, proxy.url(), retry=qa.RetryPolicy(max_retries=1), hooks={"after_attempt": [after]}
        )
    assert type(error) is qa.ProxyError
    assert seen == [(1, 503, "busy"), (2, 503, "busy")]


def test_proxy_sending_bytes_after_accepting_the_tunnel_is_a_connection_failure() -> None:
    with refusing(b"HTTP/1.1 200 Connection established\r\n\r\nunexpected") as proxy:
        error, diag = call(HTTPS_ORIGIN, proxy.url(), retry=qa.RetryPolicy.none)
    assert type(error) is qa.ConnectionFailed
    assert str(error) == (
        f"proxy 127.0.0.1:{proxy.server.port} failed CONNECT to api.example.invalid:443: "
        "MalformedHead: the proxy sent data before the TLS handshake"
    )
    assert diag.status is None


# -- plain http through a proxy -----------------------------------------------------------------


@pytest.mark.parametrize("method", ["POST", "GET"])
def test_407_on_a_plain_http_request_is_proxy_error_not_unauthorized(method: str) -> None:
    with refusing(REFUSAL_407) as proxy:
        diag = qa.Diagnostics()
        with qa.Client(base_url=HTTP_ORIGIN, proxy=proxy.url(), trust_env=False, sleep=no_sleep) as client:
            operation = (
                (lambda: client.ask("x", Toxic, diagnostics=diag))
                if method == "POST"
                else (lambda: client.list_models(diagnostics=diag))
            )
            with pytest.raises(qa.ProxyError) as caught:
                operation()
    path = "/v1/core" if method == "POST" else "/v1/models"
    assert str(caught.value).startswith(
        f"proxy 127.0.0.1:{proxy.server.port} refused {method} {HTTP_ORIGIN}{path}: HTTP 407"
    )
    assert (diag.status, diag.attempts, diag.body) == (407, 1, PAGE_407.decode())
    assert_no_password(caught.value, diag)


@pytest.mark.parametrize("credentials", [True, False], ids=["credentials", "no-credentials"])
def test_a_407_is_the_proxy_s_even_without_a_challenge_and_with_via(credentials: bool) -> None:
    # docs/configuration.md: a 407 is always the proxy's, whatever its headers say.
    answer = response("407 Proxy Authentication Required", ["Via: 1.1 corp-proxy"], b'{"detail": "no"}')
    with refusing(answer) as proxy:
        error, diag = call(HTTP_ORIGIN, proxy.url(credentials))
    assert type(error) is qa.ProxyError
    assert str(error) == (
        f"proxy 127.0.0.1:{proxy.server.port} refused POST {HTTP_ORIGIN}/v1/core: "
        "HTTP 407 Proxy Authentication Required; check the proxy user name and password"
    )
    assert (error.status, diag.status, diag.attempts) == (407, 407, 1)


@pytest.mark.parametrize(
    ("headers", "credentials", "expected"),
    [
        (['Proxy-Authenticate: Basic realm="corp"'], True, qa.ProxyError),
        (['Proxy-Authenticate: Basic realm="corp"'], False, qa.ProxyError),
        (['WWW-Authenticate: Basic realm="Tinyproxy"'], True, qa.ProxyError),  # no Via: the proxy's own
        (["WWW-Authenticate: Bearer", "Via: 1.1 corp-proxy"], True, qa.Unauthorized),  # forwarded
        (["WWW-Authenticate: Bearer"], False, qa.Unauthorized),  # no credentials to refuse
    ],
    ids=[
        "proxy-challenge",
        "proxy-challenge-no-credentials",
        "tinyproxy-style",
        "forwarded",
        "no-credentials",
    ],
)
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_plain_http_401_is_the_proxy_s_only_when_it_says_so(
    headers: list[str], credentials: bool, expected: type[qa.QAError], kind: str
) -> None:
    answer = response("401 Unauthorized", headers, b'{"detail": "no"}')
    with refusing(answer) as proxy:
        if kind == "sync":
            error, diag = call(HTTP_ORIGIN, proxy.url(credentials))
        else:
            error, diag, _ = call_async(HTTP_ORIGIN, proxy.url(credentials))
    assert type(error) is expected
    assert diag.status == 401
    assert diag.attempts == 1


@pytest.mark.parametrize(
    "headers",
    [['Proxy-Authenticate: Basic realm="corp"'], ["WWW-Authenticate: Bearer", "Via: 1.1 corp-proxy"]],
    ids=["the-proxy-s", "forwarded"],
)
@pytest.mark.parametrize("status", ["401 Unauthorized", "407 Proxy Authentication Required"])
def test_a_401_or_407_through_a_plain_http_proxy_is_never_pooled(status: str, headers: list[str]) -> None:
    # A proxy that refused may leave the request body unread and its connection dead while
    # calling it keep-alive (squid does); a 400 or 402 says nothing of it and is pooled. Nor is
    # the refused call's connection left busy: it is closed, as the asyncio client's.
    with (
        refusing(response(status, headers, b'{"detail": "no"}')) as proxy,
        qa.Client(base_url=HTTP_ORIGIN, proxy=proxy.url(), trust_env=False, sleep=no_sleep) as client,
    ):
        with pytest.raises(qa.QAError):
            client.ask("some text", Toxic)
        pool = client._transport.pool
        assert (pool.idle_count(), len(pool._busy)) == (0, 0)


@pytest.mark.parametrize(
    "headers",
    [['Proxy-Authenticate: Basic realm="corp"'], ["WWW-Authenticate: Bearer", "Via: 1.1 corp-proxy"]],
    ids=["the-proxy-s", "forwarded"],
)
@pytest.mark.parametrize("status", ["401 Unauthorized", "407 Proxy Authentication Required"])
def test_the_async_client_never_pools_nor_keeps_busy_a_401_or_407_s_connection(
    status: str, headers: list[str]
) -> None:
    # As the threaded client; a refusal raised as ProxyError still closes its connection.
    with refusing(response(status, headers, b'{"detail": "no"}')) as proxy:
        error, _, (idle, busy) = call_async(HTTP_ORIGIN, proxy.url())
    assert isinstance(error, qa.QAError)
    assert (idle, busy) == (0, 0)


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("status", ["400 Bad Request", "402 Payment Required"])
def test_a_400_or_402_through_a_plain_http_proxy_is_pooled(status: str, kind: str) -> None:
    with refusing(response(status, ["Via: 1.1 corp-proxy"], b'{"detail": "no"}')) as proxy:
        if kind == "async":
            error, _, (idle, busy) = call_async(HTTP_ORIGIN, proxy.url())
            assert isinstance(error, qa.APIStatusError)
            assert (idle, busy) == (1, 0)
            return
        with qa.Client(base_url=HTTP_ORIGIN, proxy=proxy.url(), trust_env=False, sleep=no_sleep) as client:
            with pytest.raises(qa.APIStatusError):
                client.ask("some text", Toxic)
            assert client._transport.pool.idle_count() == 1


@pytest.mark.parametrize("size", [10, 1_048_576], ids=["10B", "1MB"])
def test_proxy_answering_before_reading_the_body_is_read(size: int) -> None:
    # tinyproxy's wrong-password answer: a 401 page, then a close without reading the POST body.
    proxy = Refusing(b"")
    proxy.server = RawServer(answer_early(TINYPROXY_401))
    with proxy.server:
        for _ in range(5):
            error, diag = call(HTTP_ORIGIN, proxy.url(), state="x" * size)
            assert type(error) is qa.ProxyError, repr(error)
            assert (diag.status, diag.attempts) == (401, 1)


# -- a proxy that cannot be reached -------------------------------------------------------------


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def nap(seconds: float) -> None:
    """The asyncio client's backoff without waiting, as ``no_sleep`` is the threaded one's."""


def list_models_through(
    base_url: str, proxy: str, kind: str, retry: qa.RetryPolicy = qa.RetryPolicy.none
) -> tuple[qa.QAError, qa.Diagnostics]:
    diag = qa.Diagnostics()
    options: dict[str, Any] = {"base_url": base_url, "proxy": proxy, "trust_env": False}
    try:
        if kind == "async":

            async def main() -> None:
                async with qa.AsyncClient(sleep=nap, **options) as client:
                    await client.list_models(retry=retry, diagnostics=diag, timeout=10)

            asyncio.run(main())
        else:
            with qa.Client(sleep=no_sleep, **options) as client:
                client.list_models(retry=retry, diagnostics=diag, timeout=10)
    except qa.QAError as exc:
        return exc, diag
    raise AssertionError("the call succeeded")


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("origin", [HTTP_ORIGIN, HTTPS_ORIGIN], ids=["http", "https-connect"])
def test_an_unreachable_proxy_is_named_as_the_host_not_reached(
    closed_port: int, origin: str, kind: str
) -> None:
    # The message once read "http://api.example.invalid:8080: ... Connection refused", as if the
    # service had refused.
    proxy = f"http://{USER}:{PASSWORD}@127.0.0.1:{closed_port}"
    error, diag = list_models_through(origin, proxy, kind)
    assert type(error) is qa.ConnectionFailed
    assert str(error).startswith(
        f"cannot reach proxy 127.0.0.1:{closed_port} (for {origin}): ConnectionRefusedError: "
    ), str(error)
    assert isinstance(diag.transport_error, ConnectionRefusedError)
    assert_no_password(error, diag)


CONNECT_DROPPED = (
    "failed CONNECT to api.example.invalid:443: IncompleteMessage: "
    "the proxy closed the connection before answering the CONNECT"
)


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize(
    ("handler", "detail", "cause"),
    [
        (None, CONNECT_DROPPED, qa.IncompleteMessage),
        (reset_after_request(), "failed CONNECT to api.example.invalid:443: ConnectionResetError: ", OSError),
    ],
    ids=["closed", "reset"],
)
def test_a_proxy_dropping_the_connect_is_named_as_the_host_that_failed(
    kind: str, handler: Optional[Handler], detail: str, cause: type[BaseException]
) -> None:
    # Only the proxy was spoken to, yet the message once named the service:
    # "https://api.example.invalid: IncompleteMessage: the server closed the connection ...".
    proxy = Refusing(b"")  # reads the CONNECT, then closes without a word
    if handler is not None:
        proxy.server = RawServer(handler)
    with proxy.server:
        error, diag = list_models_through(HTTPS_ORIGIN, proxy.url(), kind)
    assert type(error) is qa.ConnectionFailed
    assert str(error).startswith(f"proxy 127.0.0.1:{proxy.server.port} {detail}"), str(error)
    assert isinstance(diag.transport_error, cause)
    assert (diag.status, diag.attempts, diag.body) == (None, 1, None)
    assert [(a.status, a.error) for a in diag.history] == [(None, "ConnectionFailed")]
    if handler is None:
        assert [head.split(b"\r\n")[0] for head in proxy.heads] == [
            b"CONNECT api.example.invalid:443 HTTP/1.1"
        ]
        assert str(diag.transport_error) == "the proxy closed the connection before answering the CONNECT"
    assert_no_password(error, diag)


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize(
    ("policy", "attempts"),
    [(qa.RetryPolicy(), 3), (qa.RetryPolicy(retry_connection_errors=False), 1)],
    ids=["default", "no-connection-retries"],
)
def test_a_proxy_dropping_the_connect_is_retried_as_a_dropped_connection(
    kind: str, policy: qa.RetryPolicy, attempts: int
) -> None:
    with refusing(b"") as proxy:
        error, diag = list_models_through(HTTPS_ORIGIN, proxy.url(), kind, retry=policy)
        assert proxy.server.connections == attempts
    assert type(error) is qa.ConnectionFailed
    assert str(error).startswith(f"proxy 127.0.0.1:{proxy.server.port} {CONNECT_DROPPED}")
    assert diag.attempts == attempts
    assert [(a.status, a.error) for a in diag.history] == [(None, "ConnectionFailed")] * attempts


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_proxy_reached_that_then_fails_names_the_service(kind: str) -> None:
    # Plain http: the request went through the proxy to the service, whichever of them closed.
    with refusing(b"") as proxy:  # reads the request, then closes without an answer
        error, _ = list_models_through(HTTP_ORIGIN, proxy.url(), kind)
    assert type(error) is qa.ConnectionFailed
    assert str(error).startswith(f"{HTTP_ORIGIN}: "), str(error)
    assert "cannot reach proxy" not in str(error)


# -- what the history records of a proxy's refusal ------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize(
    ("origin", "answer", "attempts"),
    [
        (HTTPS_ORIGIN, REFUSAL_407, 1),
        (HTTP_ORIGIN, REFUSAL_407, 1),
        (HTTPS_ORIGIN, response("503 Service Unavailable", body=b"busy"), 3),
    ],
    ids=["connect-407", "plain-407", "connect-503-retried"],
)
def test_a_proxy_refusal_s_history_record_holds_the_proxy_status(
    kind: str, origin: str, answer: bytes, attempts: int
) -> None:
    # The record once said status None while diagnostics.status said 407.
    with refusing(answer) as proxy:
        error, diag = list_models_through(origin, proxy.url(), kind, retry=qa.RetryPolicy())
        assert proxy.server.connections == attempts
    status = int(answer[9:12])
    assert type(error) is qa.ProxyError
    assert (error.status, diag.status, diag.attempts) == (status, status, attempts)
    assert [(a.number, a.status, a.error, a.request_id) for a in diag.history] == [
        (n, status, "ProxyError", None) for n in range(1, attempts + 1)
    ]
    assert_no_password(error, diag)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_proxy_refusal_after_a_service_answer_takes_no_request_id_from_it(kind: str) -> None:
    # The service's 503 (forwarded, then the connection closed), then the proxy's own 407: the
    # last response is the proxy's, which names no request id of the service's.
    forwarded = response(
        "503 Service Unavailable",
        ["Request-Id: req-from-service", "Via: 1.1 corp", "Connection: close"],
        b'{"detail": "busy"}',
    )
    with RawServer(respond_sequence(forwarded, REFUSAL_407)) as server:
        proxy = f"http://{USER}:{PASSWORD}@127.0.0.1:{server.port}"
        error, diag = list_models_through(HTTP_ORIGIN, proxy, kind, retry=qa.RetryPolicy())
        assert server.connections == 2
    assert type(error) is qa.ProxyError
    assert [(a.number, a.status, a.error, a.request_id) for a in diag.history] == [
        (1, 503, "ServerError", "req-from-service"),
        (2, 407, "ProxyError", None),
    ]
    assert (diag.status, diag.request_id, diag.headers) == (407, None, None)
    assert "req-from-service" not in str(error)
    assert str(error).endswith("(after 2 attempts)")
    assert_no_password(error, diag)


@pytest.mark.parametrize("status", [299, 300])
def test_a_connect_answered_with_a_2xx_opens_the_tunnel_and_a_300_refuses_it(status: int) -> None:
    def tunnel() -> Optional[int]:
        try:
            open_tunnel(Connection(ours, ("https", "h", 443, ("p", 8080))), "h:443", b"", None, 1000)
        except TunnelRefused as exc:
            return exc.status
        return None

    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n".encode())
        assert tunnel() == (None if status == 299 else 300)

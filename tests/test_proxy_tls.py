"""TLS verification and HTTP proxies: a throwaway CA, an HTTPS fake service and a forward proxy.

The certificates are made with the ``openssl`` command (the module is skipped without it); the
servers live in ``tests/tlshelpers.py``. Backoff sleeps are replaced by a no-op, so a retried
failure costs no time and an unexpected retry shows up as an attempt count, not a slow test.
"""

from __future__ import annotations

import base64
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faultservers import RawServer
from support import no_sleep
from support import wait_until as poll_until
from tlshelpers import Certs, Proxy, TLSService, hashed_dir

import qa_min as qa
from qa_min.testing import FakeService

STATE = "Some text to judge"
KEY = "sk-tunnelled-key-42"


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


ENV_NAMES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUEST_METHOD",  # makes urllib ignore HTTP_PROXY (the CGI "httpoxy" guard)
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The machine's own proxy or trust-store settings must not decide these tests.
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def ca_context(certs: Certs) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certs.ca))


@pytest.fixture
def tls_service(certs: Certs) -> Iterator[TLSService]:
    with TLSService(certs.server_cert, certs.server_key) as svc:
        yield svc


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    with Proxy() as p:
        yield p


@pytest.fixture
def http_service() -> Iterator[FakeService]:
    with FakeService() as svc:
        yield svc


def client(base_url: str, **options: Any) -> qa.Client:
    return qa.Client(base_url=base_url, sleep=no_sleep, **options)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


# -- certificate verification ---------------------------------------------------------------


@pytest.mark.parametrize("via_proxy", [False, True], ids=["direct", "through-proxy"])
def test_default_client_refuses_unknown_ca_without_retrying(
    tls_service: TLSService, proxy: Proxy, via_proxy: bool
) -> None:
    diagnostics = qa.Diagnostics()
    c = client(tls_service.url, proxy=proxy.url if via_proxy else None)
    with c, pytest.raises(qa.ConnectionFailed) as info:
        c.ask(STATE, Review, diagnostics=diagnostics)
    assert diagnostics.attempts == 1
    assert info.value.diagnostics.attempts == 1
    assert isinstance(diagnostics.transport_error, ssl.SSLCertVerificationError)
    assert tls_service.seen == []
    assert len(proxy.seen) == (1 if via_proxy else 0)


def test_certificate_for_another_host_is_refused_without_retrying(
    certs: Certs, ca_context: ssl.SSLContext
) -> None:
    diagnostics = qa.Diagnostics()
    svc = TLSService(certs.other_cert, certs.other_key)
    c = client(svc.url, ssl_context=ca_context)
    with svc, c, pytest.raises(qa.ConnectionFailed):
        c.ask(STATE, Review, diagnostics=diagnostics)
    assert diagnostics.attempts == 1
    assert isinstance(diagnostics.transport_error, ssl.SSLCertVerificationError)
    assert svc.seen == []


@pytest.mark.parametrize("via_proxy", [False, True], ids=["direct", "through-proxy"])
def test_https_url_for_a_plain_http_server_is_named_and_not_retried(
    http_service: FakeService, proxy: Proxy, via_proxy: bool
) -> None:
    # The common slip: https:// for a local server that speaks plain HTTP (`qa-min fake`).
    url = http_service.url.replace("http://", "https://")
    diagnostics = qa.Diagnostics()
    c = client(url, proxy=proxy.url if via_proxy else None)
    with c, pytest.raises(qa.ConnectionFailed) as info:
        c.ask(STATE, Review, diagnostics=diagnostics)
    cause = diagnostics.transport_error
    assert isinstance(cause, ssl.SSLError)
    if cause.reason not in ("WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL"):  # OpenSSL 3.2.0 names no reason
        pytest.skip(f"{ssl.OPENSSL_VERSION} reports a peer without TLS as {cause.reason!r}")
    assert str(info.value) == (
        f"{url}: the server did not answer TLS; it may speak plain HTTP (check the URL's scheme): "
        f"SSLError: {cause}"
    )
    assert cause.reason in ("WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL")
    # As deterministic as a certificate that fails verification: one attempt, no retry.
    assert diagnostics.attempts == info.value.diagnostics.attempts == 1
    assert info.value.retryable is False
    assert len(proxy.seen) == (1 if via_proxy else 0)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_client_trusting_the_ca_gets_answers_over_tls(
    tls_service: TLSService, ca_context: ssl.SSLContext, host: str
) -> None:
    with client(f"https://{host}:{tls_service.port}", ssl_context=ca_context, api_key=KEY) as c:
        answer = c.ask(STATE, Review)
        models = c.list_models()
    assert answer.answers.toxic is True
    assert answer.usage == {"tls": True}
    assert [m.name for m in models.models] == ["judge-latest"]
    assert [(r.method, r.target) for r in tls_service.seen] == [("POST", "/v1/core"), ("GET", "/v1/models")]
    assert tls_service.seen[0].headers["authorization"] == f"Bearer {KEY}"


def test_ssl_cert_file_environment_makes_default_client_trust_the_ca(
    tls_service: TLSService, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    # OpenSSL reads SSL_CERT_FILE when a default context loads its verify paths, which the
    # client does when it first needs TLS: setting it in this process is enough.
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca))
    with client(tls_service.url) as c:
        assert c.ask(STATE, Review).answers.toxic is True


@pytest.mark.parametrize("blank", ["", " ", "\t "], ids=["empty", "space", "whitespace"])
@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "SSL_CERT_DIR"])
def test_blank_ssl_cert_variable_is_read_as_unset(
    tls_service: TLSService,
    certs: Certs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    blank: str,
) -> None:
    # OpenSSL reads both variables itself, and a set one replaces its default place even when
    # blank: nothing in the system's bundle (or directory) was trusted. The default places are
    # compiled into OpenSSL; here they are made to name the test CA, so that trusting it shows
    # that the default place of the blank variable was read.
    capath = hashed_dir(certs.ca, tmp_path / "capath")
    paths = ssl.get_default_verify_paths()._replace(openssl_cafile=str(certs.ca), openssl_capath=str(capath))
    monkeypatch.setattr(ssl, "get_default_verify_paths", lambda: paths)
    monkeypatch.setenv(variable, blank)
    diagnostics = qa.Diagnostics()
    with client(tls_service.url) as c:
        answer = c.ask(STATE, Review, diagnostics=diagnostics)
    assert answer.answers.toxic is True
    assert diagnostics.attempts == 1
    assert diagnostics.transport_error is None


@pytest.mark.parametrize("via_proxy", [False, True], ids=["direct", "through-proxy"])
def test_tls_connection_closed_by_server_while_idle_is_replaced_silently(
    tls_service: TLSService, proxy: Proxy, ca_context: ssl.SSLContext, via_proxy: bool
) -> None:
    with client(tls_service.url, ssl_context=ca_context, proxy=proxy.url if via_proxy else None) as c:
        c.ask(STATE, Review)
        tls_service.drop_connections()
        # Through the proxy the close reaches the client a moment later; a request written
        # before it arrives would honestly count as a second attempt. Wait until it is seen.
        pooled = [conn for stack in c._transport.pool._idle.values() for conn in stack]
        assert poll_until(lambda: all(conn.peer_closed() for conn in pooled))
        diagnostics = qa.Diagnostics()
        assert c.ask(STATE, Review, diagnostics=diagnostics).answers.toxic is True
    assert diagnostics.attempts == 1
    assert tls_service.handshakes == 2
    assert len(tls_service.seen) == 2


# -- https through a proxy --------------------------------------------------------------------


def test_https_through_proxy_opens_a_connect_tunnel_to_the_origin(
    tls_service: TLSService, proxy: Proxy, ca_context: ssl.SSLContext
) -> None:
    with client(tls_service.url, ssl_context=ca_context, proxy=proxy.url, api_key=KEY) as c:
        assert c.ask(STATE, Review).answers.toxic is True
    [connect] = proxy.seen
    assert (connect.method, connect.target) == ("CONNECT", f"127.0.0.1:{tls_service.port}")
    assert connect.headers["host"] == f"127.0.0.1:{tls_service.port}"
    # The key travels only inside the tunnel, encrypted to the origin.
    assert "authorization" not in connect.headers
    assert [(r.method, r.target) for r in tls_service.seen] == [("POST", "/v1/core")]
    assert tls_service.seen[0].headers["authorization"] == f"Bearer {KEY}"


def test_tunnel_is_reused_for_the_next_call(
    tls_service: TLSService, proxy: Proxy, ca_context: ssl.SSLContext
) -> None:
    with client(tls_service.url, ssl_context=ca_context, proxy=proxy.url) as c:
        c.ask(STATE, Review)
        c.list_models()
        c.ask(STATE, Review)
    assert [r.method for r in proxy.seen] == ["CONNECT"]
    assert len(tls_service.seen) == 3


def test_proxy_refusing_the_tunnel_is_connection_failed(
    tls_service: TLSService, ca_context: ssl.SSLContext
) -> None:
    refusing = Proxy(refuse_connect=403)
    c = client(tls_service.url, ssl_context=ca_context, proxy=refusing.url)
    with refusing, c, pytest.raises(qa.ConnectionFailed, match="403"):
        c.ask(STATE, Review)
    assert refusing.seen
    assert all(r.method == "CONNECT" for r in refusing.seen)
    assert tls_service.seen == []


def test_proxy_without_a_scheme_is_taken_as_http(
    tls_service: TLSService, proxy: Proxy, ca_context: ssl.SSLContext
) -> None:
    with client(tls_service.url, ssl_context=ca_context, proxy=f"127.0.0.1:{proxy.port}") as c:
        c.ask(STATE, Review)
    assert [r.method for r in proxy.seen] == ["CONNECT"]


# -- http through a proxy ---------------------------------------------------------------------


def test_http_through_proxy_sends_absolute_uri_request_lines(http_service: FakeService, proxy: Proxy) -> None:
    with client(http_service.url, proxy=proxy.url) as c:
        c.ask(STATE, Review)
        c.list_models()
    assert [(r.method, r.target) for r in proxy.seen] == [
        ("POST", f"{http_service.url}/v1/core"),
        ("GET", f"{http_service.url}/v1/models"),
    ]
    assert [(r.method, r.path) for r in http_service.requests] == [
        ("POST", "/v1/core"),
        ("GET", "/v1/models"),
    ]
    assert proxy.seen[0].headers["host"] == http_service.url.removeprefix("http://")


# -- proxy credentials ------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_proxy_credentials_in_url_go_to_proxy_as_basic_auth(
    tls_service: TLSService,
    http_service: FakeService,
    proxy: Proxy,
    ca_context: ssl.SSLContext,
    scheme: str,
) -> None:
    base_url = tls_service.url if scheme == "https" else http_service.url
    proxy_url = f"http://us%40er:p%3Ass@127.0.0.1:{proxy.port}"
    with client(base_url, ssl_context=ca_context, proxy=proxy_url) as c:
        c.ask(STATE, Review)
    [seen] = proxy.seen
    assert seen.headers["proxy-authorization"] == basic("us@er", "p:ss")
    if scheme == "https":
        # Inside the tunnel the origin must not learn the proxy's credentials.
        assert "proxy-authorization" not in tls_service.seen[0].headers


def test_proxy_credentials_from_environment_go_to_proxy(
    tls_service: TLSService, proxy: Proxy, ca_context: ssl.SSLContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", f"http://envuser:envpass@127.0.0.1:{proxy.port}")
    with client(tls_service.url, ssl_context=ca_context) as c:
        c.ask(STATE, Review)
    [connect] = proxy.seen
    assert connect.headers["proxy-authorization"] == basic("envuser", "envpass")
    assert "proxy-authorization" not in tls_service.seen[0].headers


def test_no_credentials_means_no_proxy_authorization(
    tls_service: TLSService, proxy: Proxy, ca_context: ssl.SSLContext
) -> None:
    with client(tls_service.url, ssl_context=ca_context, proxy=proxy.url) as c:
        c.ask(STATE, Review)
    assert "proxy-authorization" not in proxy.seen[0].headers


# -- proxy environment variables --------------------------------------------------------------


@pytest.mark.parametrize(
    ("scheme", "variable"),
    [
        ("https", "HTTPS_PROXY"),
        ("https", "https_proxy"),
        ("https", "ALL_PROXY"),
        ("http", "HTTP_PROXY"),
        ("http", "http_proxy"),
    ],
)
def test_proxy_environment_variable_is_honoured(
    tls_service: TLSService,
    http_service: FakeService,
    proxy: Proxy,
    ca_context: ssl.SSLContext,
    monkeypatch: pytest.MonkeyPatch,
    scheme: str,
    variable: str,
) -> None:
    monkeypatch.setenv(variable, proxy.url)
    base_url = tls_service.url if scheme == "https" else http_service.url
    with client(base_url, ssl_context=ca_context) as c:
        assert c.ask(STATE, Review).answers.toxic in (True, False)
    expected = "CONNECT" if scheme == "https" else "POST"
    assert [r.method for r in proxy.seen] == [expected]


def test_proxy_for_the_other_scheme_is_not_used(
    http_service: FakeService, proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    with client(http_service.url) as c:
        c.ask(STATE, Review)
    assert proxy.seen == []
    assert len(http_service.requests) == 1


@pytest.mark.parametrize(
    ("host", "no_proxy"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("127.0.0.1", "example.com,127.0.0.1"),
        ("localhost", "localhost"),
        ("127.0.0.1", "*"),
    ],
)
def test_no_proxy_bypasses_the_proxy(
    tls_service: TLSService,
    proxy: Proxy,
    ca_context: ssl.SSLContext,
    monkeypatch: pytest.MonkeyPatch,
    host: str,
    no_proxy: str,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", no_proxy)
    with client(f"https://{host}:{tls_service.port}", ssl_context=ca_context) as c:
        c.ask(STATE, Review)
    assert proxy.seen == []
    assert len(tls_service.seen) == 1


def test_trust_env_false_ignores_proxy_environment(
    tls_service: TLSService, proxy: Proxy, ca_context: ssl.SSLContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    monkeypatch.setenv("ALL_PROXY", proxy.url)
    with client(tls_service.url, ssl_context=ca_context, trust_env=False) as c:
        c.ask(STATE, Review)
    assert proxy.seen == []
    assert len(tls_service.seen) == 1


def test_explicit_proxy_wins_over_no_proxy(
    tls_service: TLSService, proxy: Proxy, ca_context: ssl.SSLContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_PROXY", "*")
    with client(tls_service.url, ssl_context=ca_context, proxy=proxy.url) as c:
        c.ask(STATE, Review)
    assert [r.method for r in proxy.seen] == ["CONNECT"]


@pytest.mark.parametrize(
    "proxy_url", ["https://127.0.0.1:3128", "socks5://127.0.0.1:1080", "SOCKS5H://127.0.0.1:1080", "ftp://p"]
)
def test_non_http_proxy_is_refused_at_construction(tls_service: TLSService, proxy_url: str) -> None:
    # Every other scheme is refused as https is: a socks5 proxy was told it "must be an http
    # or https URL", and the https one then written was refused as well.
    with pytest.raises(qa.InvalidOption) as caught:
        qa.Client(base_url=tls_service.url, proxy=proxy_url)
    assert str(caught.value) == f"only http:// proxies are supported (proxy), got {proxy_url!r}"


# -- a stalled TLS setup ------------------------------------------------------------------------


class SilentTLSPeer:
    """A handler that reads the client's first handshake bytes and never answers them.

    ``hello`` is set once the ClientHello arrived: the client is then blocked in the handshake.
    """

    def __init__(self) -> None:
        self.hello = threading.Event()

    def __call__(self, conn: socket.socket, stop: threading.Event) -> None:
        if conn.recv(1):
            self.hello.set()
        stop.wait(10)


def wait_until(condition: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the call never reached the stalled step"
        time.sleep(0.005)


@pytest.mark.parametrize("stall", ["tls-handshake", "proxy-connect"])
def test_timeout_ends_a_stalled_tls_setup_with_canceled(
    tls_service: TLSService, ca_context: ssl.SSLContext, stall: str
) -> None:
    raw, stuck_proxy = RawServer(SilentTLSPeer()), Proxy(hang_connect=True)
    with raw, stuck_proxy:
        if stall == "tls-handshake":
            c = client(f"https://127.0.0.1:{raw.port}", ssl_context=ca_context)
        else:
            c = client(tls_service.url, ssl_context=ca_context, proxy=stuck_proxy.url)
        started = time.monotonic()
        with c, pytest.raises(qa.Canceled):
            c.ask(STATE, Review, timeout=0.15)
        assert time.monotonic() - started < 3.0


@pytest.mark.parametrize("stop", ["cancel-token", "client-close"])
@pytest.mark.parametrize("stall", ["tls-handshake", "proxy-connect"])
def test_cancel_or_close_ends_a_stalled_tls_setup_promptly(
    tls_service: TLSService, ca_context: ssl.SSLContext, stall: str, stop: str
) -> None:
    peer = SilentTLSPeer()
    raw, stuck_proxy = RawServer(peer), Proxy(hang_connect=True)
    with raw, stuck_proxy:
        if stall == "tls-handshake":
            c = client(f"https://127.0.0.1:{raw.port}", ssl_context=ca_context)
            reached = peer.hello.is_set
        else:
            c = client(tls_service.url, ssl_context=ca_context, proxy=stuck_proxy.url)
            reached = lambda: bool(stuck_proxy.seen)  # noqa: E731
        token = qa.CancelToken()
        outcome: list[BaseException] = []

        def call() -> None:
            try:
                c.ask(STATE, Review, cancel=token)
            except BaseException as exc:
                outcome.append(exc)

        with c:
            worker = threading.Thread(target=call)
            worker.start()
            wait_until(reached)
            if stop == "cancel-token":
                token.cancel()
            else:
                c.close()
            worker.join(3.0)
            assert not worker.is_alive(), "the call is still blocked in the TLS setup"
        assert len(outcome) == 1
        assert isinstance(outcome[0], qa.Canceled)

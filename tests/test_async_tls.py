"""``qa.AsyncClient`` over TLS (``loop.start_tls``) and through an HTTP proxy's CONNECT tunnel,
against the same servers as the threaded client's tests (``tlshelpers``)."""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from tlshelpers import Certs, Proxy, TLSService

import qa_min as qa
from qa_min.testing import FakeService

KEY = "sk-tunnelled-key-42"


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def tls_service(certs: Certs) -> Iterator[TLSService]:
    with TLSService(certs.server_cert, certs.server_key) as svc:
        yield svc


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    with Proxy() as p:
        yield p


def ask_all(url: str, calls: int = 1, **options: Any) -> tuple[list[object], qa.Diagnostics]:
    diagnostics = qa.Diagnostics()

    async def main() -> list[object]:
        async with qa.AsyncClient(base_url=url, trust_env=False, **options) as client:
            answers: list[object] = []
            for _ in range(calls):
                answers.append((await client.ask("s", Review, diagnostics=diagnostics)).answers.toxic)
            return answers

    return asyncio.run(main()), diagnostics


@pytest.mark.parametrize("via_proxy", [False, True], ids=["direct", "through-proxy"])
def test_tls_with_the_ca_trusted(
    tls_service: TLSService, certs: Certs, proxy: Proxy, via_proxy: bool
) -> None:
    context = ssl.create_default_context(cafile=str(certs.ca))
    answers, _ = ask_all(
        tls_service.url, 3, ssl_context=context, api_key=KEY, proxy=proxy.url if via_proxy else None
    )
    assert answers == [True, True, True]
    assert tls_service.handshakes == 1  # one connection, kept alive
    assert tls_service.seen[0].headers["authorization"] == f"Bearer {KEY}"
    if via_proxy:
        [connect] = proxy.seen
        assert (connect.method, connect.target) == ("CONNECT", f"127.0.0.1:{tls_service.port}")
        assert "authorization" not in connect.headers


def test_the_default_context_is_built_once_and_off_the_loop(
    tls_service: TLSService, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SPEC 7b: no blocking call on the event loop; loading the trust store takes tens of ms.
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca))
    built_on: list[int] = []
    default = ssl.create_default_context

    def recorded(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        built_on.append(threading.get_ident())
        return default(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", recorded)

    async def main() -> list[object]:
        async with qa.AsyncClient(base_url=tls_service.url, trust_env=False) as client:
            first = await client.ask("s", Review)
            tls_service.drop_connections()  # the second call opens a new TLS connection
            return [first.answers.toxic, (await client.ask("s", Review)).answers.toxic]

    assert asyncio.run(main()) == [True, True]
    assert len(built_on) == 1, built_on
    assert built_on[0] != threading.get_ident(), "built on the loop's thread"


def test_unknown_ca_is_refused_without_retrying(tls_service: TLSService) -> None:
    with pytest.raises(qa.ConnectionFailed) as caught:
        ask_all(tls_service.url)
    assert caught.value.diagnostics.attempts == 1
    assert isinstance(caught.value.diagnostics.transport_error, ssl.SSLCertVerificationError)
    assert tls_service.seen == []


@pytest.mark.parametrize("via_proxy", [False, True], ids=["direct", "through-proxy"])
def test_https_url_for_a_plain_http_server_is_named_and_not_retried(proxy: Proxy, via_proxy: bool) -> None:
    # The common slip: https:// for a local server that speaks plain HTTP (`qa-min fake`).
    async def no_sleep(seconds: float) -> None:
        """Backoff without waiting: a retry shows up as an attempt, not a slow test."""

    with FakeService() as svc:
        url = svc.url.replace("http://", "https://")
        with pytest.raises(qa.ConnectionFailed) as caught:
            ask_all(url, proxy=proxy.url if via_proxy else None, sleep=no_sleep)
    cause = caught.value.diagnostics.transport_error
    assert isinstance(cause, ssl.SSLError)
    if cause.reason not in ("WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL"):  # OpenSSL 3.2.0 names no reason
        pytest.skip(f"{ssl.OPENSSL_VERSION} reports a peer without TLS as {cause.reason!r}")
    assert str(caught.value) == (
        f"{url}: the server did not answer TLS; it may speak plain HTTP (check the URL's scheme): "
        f"SSLError: {cause}"
    )
    assert cause.reason in ("WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL")
    # As deterministic as a certificate that fails verification: one attempt, no retry.
    assert caught.value.diagnostics.attempts == 1
    assert caught.value.retryable is False
    assert len(proxy.seen) == (1 if via_proxy else 0)


def test_proxy_refusing_the_tunnel(tls_service: TLSService, certs: Certs) -> None:
    context = ssl.create_default_context(cafile=str(certs.ca))
    with Proxy(refuse_connect=403) as refusing, pytest.raises(qa.ConnectionFailed, match="403"):
        ask_all(tls_service.url, ssl_context=context, proxy=refusing.url)
    assert tls_service.seen == []


def test_plain_http_through_the_proxy_sends_absolute_uris(proxy: Proxy) -> None:
    with FakeService() as svc:
        answers, _ = ask_all(svc.url, 1, proxy=proxy.url)
    assert len(answers) == 1
    assert [r.target for r in proxy.seen] == [f"{svc.url}/v1/core"]

"""qa_min behind a real squid and a real tinyproxy with Basic auth (skipped when not installed).

Each proxy runs once for the module, from a config in a temp dir, on a free port; the origins
are the HTTPS fake of ``tlshelpers`` (reached through a CONNECT tunnel) and ``FakeService`` over
plain http (absolute-form requests). ``.ci/run`` installs both proxies where it can.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Iterator
from typing import Any, Optional

import pytest
from realproxies import PASSWORD, USER, RealProxy, Squid, Tinyproxy, Unavailable
from support import no_sleep, wait_until
from tlshelpers import Certs, TLSService

import qa_min as qa
from qa_min.testing import FakeService

pytestmark = pytest.mark.timeout(120)

WRONG = "wr0ng-proxy-pw"
SECRETS = (WRONG, base64.b64encode(f"{USER}:{WRONG}".encode()).decode(), PASSWORD)
STATUS = {"squid": 407, "tinyproxy": 401}  # tinyproxy answers a wrong password with 401
ENV_NAMES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD", "SSL_CERT_FILE")


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture(scope="session")
def stopping() -> Iterator[list[RealProxy]]:
    """The proxies told to exit, waited for at the end of the session. Squid takes about 2 s to
    exit once told (its shutdown goes in steps a second apart): the tests after these need not
    wait for it."""
    told: list[RealProxy] = []
    yield told
    for proxy in told:
        proxy.stop()


def start(kind: type[RealProxy], stopping: list[RealProxy]) -> Iterator[RealProxy]:
    try:
        proxy = kind().__enter__()
    except Unavailable as exc:
        pytest.skip(str(exc))
    try:
        yield proxy
    finally:
        proxy.terminate()
        stopping.append(proxy)


@pytest.fixture(scope="module")
def squid(stopping: list[RealProxy]) -> Iterator[RealProxy]:
    yield from start(Squid, stopping)


@pytest.fixture(scope="module")
def tinyproxy(stopping: list[RealProxy]) -> Iterator[RealProxy]:
    yield from start(Tinyproxy, stopping)


@pytest.fixture(params=["squid", "tinyproxy"])
def proxy(request: pytest.FixtureRequest) -> RealProxy:
    found: RealProxy = request.getfixturevalue(request.param)
    return found


@pytest.fixture(scope="module")
def https_origin(certs: Certs) -> Iterator[TLSService]:
    with TLSService(certs.server_cert, certs.server_key) as svc:
        yield svc


@pytest.fixture(scope="module")
def http_origin() -> Iterator[FakeService]:
    with FakeService() as svc:
        yield svc


@pytest.fixture(params=["https", "http"])
def origin(request: pytest.FixtureRequest, https_origin: TLSService, http_origin: FakeService) -> str:
    return https_origin.url if request.param == "https" else http_origin.url


@pytest.fixture(scope="module")
def context(certs: Certs) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certs.ca))


def client(base_url: str, context: ssl.SSLContext, **options: Any) -> qa.Client:
    return qa.Client(base_url=base_url, ssl_context=context, sleep=no_sleep, **options)


def ask(c: qa.Client, state: str = "Some text") -> tuple[Optional[qa.QAError], qa.Diagnostics]:
    diag = qa.Diagnostics()
    try:
        c.ask(state, Review, diagnostics=diag)
    except qa.QAError as exc:
        return exc, diag
    return None, diag


def test_right_password_reaches_the_origin_through_the_proxy(
    proxy: RealProxy, origin: str, context: ssl.SSLContext
) -> None:
    before = proxy.log()
    with client(origin, context, proxy=proxy.url()) as c:
        for _ in range(3):
            error, diag = ask(c)
            assert error is None, repr(error)
            assert diag.status == 200
            # A proxy may close a kept-alive connection just after its answer; when that close
            # reaches the client only after the next request went out, the request goes out
            # again on a fresh connection, and is counted (SPEC 7): a re-send, never a retry.
            shape = [(a.number, a.status, a.error) for a in diag.history]
            assert shape in ([(1, 200, None)], [(1, None, "ConnectionFailed"), (2, 200, None)]), shape
            assert diag.attempts == len(shape)
        assert c.list_models().models
    # The proxy logged the traffic (squid logs a tunnel once it closes, so wait for it).
    port = origin.rpartition(":")[2]
    assert wait_until(lambda: f"127.0.0.1:{port}" in proxy.log()[len(before) :])


def test_wrong_password_is_proxy_error_with_the_proxy_status_after_one_attempt(
    proxy: RealProxy, origin: str, context: ssl.SSLContext
) -> None:
    with client(origin, context, proxy=proxy.url(password=WRONG)) as c:
        error, diag = ask(c)
    status = STATUS[proxy.name]
    assert type(error) is qa.ProxyError, repr(error)
    assert error.status == status
    assert (diag.status, diag.attempts, diag.transport_error) == (status, 1, None)
    assert diag.body
    assert f"proxy 127.0.0.1:{proxy.port} refused" in str(error)
    assert "check the proxy user name and password" in str(error)
    for text in (str(error), repr(error), repr(diag), diag.body, *map(str, error.args)):
        for secret in SECRETS:
            assert secret not in text


def test_no_credentials_is_a_407_proxy_error(proxy: RealProxy, origin: str, context: ssl.SSLContext) -> None:
    with client(origin, context, proxy=proxy.url(user=None)) as c:
        error, diag = ask(c)
    assert type(error) is qa.ProxyError, repr(error)
    assert (diag.status, diag.attempts) == (407, 1)


@pytest.mark.parametrize("size", [10, 1_048_576], ids=["10B", "1MB"])
def test_wrong_password_with_a_large_body_is_still_the_proxy_refusal(
    proxy: RealProxy, http_origin: FakeService, context: ssl.SSLContext, size: int
) -> None:
    # tinyproxy answers before reading the body and closes; the send fails, the answer stands.
    with client(http_origin.url, context, proxy=proxy.url(password=WRONG)) as c:
        for _ in range(5):
            error, diag = ask(c, "x" * size)
            assert type(error) is qa.ProxyError, repr(error)
            assert (diag.status, diag.attempts) == (STATUS[proxy.name], 1)


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_proxy_from_the_environment(
    proxy: RealProxy,
    https_origin: TLSService,
    http_origin: FakeService,
    context: ssl.SSLContext,
    monkeypatch: pytest.MonkeyPatch,
    scheme: str,
) -> None:
    origin = https_origin.url if scheme == "https" else http_origin.url
    monkeypatch.setenv(f"{scheme.upper()}_PROXY", proxy.url())
    with client(origin, context) as c:
        assert ask(c)[0] is None
    monkeypatch.setenv(f"{scheme.upper()}_PROXY", proxy.url(password=WRONG))
    with client(origin, context) as c:
        error, diag = ask(c)
    assert type(error) is qa.ProxyError, repr(error)
    assert diag.status == STATUS[proxy.name]


def test_no_proxy_bypasses_the_proxy(
    proxy: RealProxy, origin: str, context: ssl.SSLContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The proxy would refuse (wrong password): an answer means the call went around it.
    monkeypatch.setenv("HTTPS_PROXY", proxy.url(password=WRONG))
    monkeypatch.setenv("HTTP_PROXY", proxy.url(password=WRONG))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with client(origin, context) as c:
        error, _ = ask(c)
    assert error is None, repr(error)

"""URLs: a host IDNA cannot encode is refused at construction; a non-ASCII path is percent-encoded.

Before, the host was encoded late (building the Host header, or in ``getaddrinfo``) and a
``UnicodeError`` could leave ``Client()`` or a call. Now every host is IDNA-encoded once, label
by label, when the URL is parsed: ``InvalidBaseUrl`` (``InvalidOption`` for a proxy) names the
reason, and the encoded host is what goes on the wire (Host, the request line through a proxy,
CONNECT). A path prefix is percent-encoded as RFC 3986 section 3.3 asks, existing escapes kept.

  hosts: test_host_idna_cannot_encode_is_invalid_base_url,
      test_host_idna_cannot_encode_is_invalid_option_for_a_proxy,
      test_label_of_63_is_accepted_and_64_refused, test_the_last_label_is_held_to_63_too,
      test_trailing_dot_ip_literals_and_unicode_hosts_are_accepted,
      test_internationalised_host_goes_on_the_wire_encoded,
      test_internationalised_host_through_a_connect_tunnel_is_encoded
  paths: test_non_ascii_path_prefix_is_percent_encoded, test_reserved_and_escaped_path_kept
  not UTF-8 (a surrogate, from undecodable bytes): test_a_url_that_is_not_utf8_is_refused_as_the_option_it_is
"""

from __future__ import annotations

import re
import socket
import threading
from typing import Any

import pytest
from faultservers import Handler, RawServer, ok_response, read_request
from support import make_client

import qa_min as qa

BAD_HOSTS = [
    ("a..example.com", "empty-label"),
    (".example.com", "leading-dot"),
    ("x" * 64 + ".example.com", "label-over-63"),
    ("b\u00fccher." + "y" * 60 + "\u00e9.example", "encoded-label-over-63"),
    ("\ufffd.example.com", "refused-character"),
    ("a\u05d0.example.com", "bidi-mix"),
    ("xn--b\u00fccher.example", "ace-prefix-and-unicode"),
]
bad_hosts = pytest.mark.parametrize("host", [h for h, _ in BAD_HOSTS], ids=[i for _, i in BAD_HOSTS])


class Review(qa.Questions):
    toxic = qa.YesNo("insults someone", "insults no one")


# Good for both operations: an answer to Review, and an empty model list.
ANSWER = ok_response(b'{"answers": {"toxic": true}, "usage": {}, "models": []}')


def capture(seen: list[bytes], answer: bytes = ANSWER) -> Handler:
    """Record each request's bytes and answer it with ``answer``."""

    def handler(conn: socket.socket, stop: threading.Event) -> None:
        while True:
            request = read_request(conn)
            if not request:
                return
            seen.append(request)
            conn.sendall(answer)

    return handler


@bad_hosts
def test_host_idna_cannot_encode_is_invalid_base_url(host: str) -> None:
    with pytest.raises(qa.InvalidBaseUrl) as caught:
        qa.Client(base_url=f"http://{host}:8080/prefix", trust_env=False)
    assert "IDNA cannot encode" in str(caught.value)
    assert caught.value.__context__ is None


@bad_hosts
def test_host_idna_cannot_encode_is_invalid_option_for_a_proxy(host: str) -> None:
    with pytest.raises(qa.InvalidOption, match="proxy has a host name IDNA cannot encode"):
        qa.Client(base_url="http://127.0.0.1:1", proxy=f"http://{host}:3128", trust_env=False)


def test_label_of_63_is_accepted_and_64_refused() -> None:
    at_limit = "x" * 63 + ".example.com"
    with qa.Client(base_url=f"http://{at_limit}", trust_env=False) as client:
        assert client.base_url == f"http://{at_limit}"
    with pytest.raises(qa.InvalidBaseUrl, match=r"label .*too long"):
        qa.Client(base_url=f"http://x{at_limit}", trust_env=False)


def test_the_last_label_is_held_to_63_too() -> None:
    # Only a final dot's empty label is dropped before the check, not the last label itself.
    with qa.Client(base_url=f"http://example.{'x' * 63}", trust_env=False) as client:
        assert client.base_url == f"http://example.{'x' * 63}"
    with pytest.raises(qa.InvalidBaseUrl, match=r"IDNA cannot encode \(label empty or too long\)"):
        qa.Client(base_url=f"http://example.{'x' * 64}", trust_env=False)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://example.com./p", "http://example.com./p"),
        ("http://localhost.:8080/p", "http://localhost.:8080/p"),
        ("http://example.com:80/p", "http://example.com/p"),
        ("https://example.com:443", "https://example.com"),
        ("http://example.com:443", "http://example.com:443"),
        ("http://[::1]:8080", "http://[::1]:8080"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("https://B\u00dcCHER.example", "https://xn--bcher-kva.example"),
        ("http://\u65e5\u672c.example:81/", "http://xn--wgv71a.example:81"),
    ],
)
def test_trailing_dot_ip_literals_and_unicode_hosts_are_accepted(url: str, shown: str) -> None:
    # A one-label host keeps its final dot too; a scheme's default port is not shown, another's is.
    with qa.Client(base_url=url, trust_env=False) as client:
        assert client.base_url == shown


def test_internationalised_host_goes_on_the_wire_encoded() -> None:
    # Through a plain-http proxy the request line carries the absolute URL, and the proxy
    # sees the Host header: both must be the ASCII form.
    seen: list[bytes] = []
    with RawServer(capture(seen)) as proxy:
        client = make_client("http://b\u00fccher.example:8080/pr\u00e4fix", proxy=proxy.url)
        with client:
            assert client.ask("x", Review).answers.toxic is True
    head = seen[0].split(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"POST http://xn--bcher-kva.example:8080/pr%C3%A4fix/v1/core HTTP/1.1"
    assert b"Host: xn--bcher-kva.example:8080" in head


def test_internationalised_host_through_a_connect_tunnel_is_encoded() -> None:
    seen: list[bytes] = []
    with RawServer(capture(seen, b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")) as proxy:
        client = make_client("https://b\u00fccher.example", proxy=proxy.url, retry=qa.RetryPolicy.none)
        with client, pytest.raises(qa.ProxyError, match=r"refused CONNECT to xn--bcher-kva\.example:443"):
            client.list_models()
    assert seen[0].startswith(
        b"CONNECT xn--bcher-kva.example:443 HTTP/1.1\r\nHost: xn--bcher-kva.example:443\r\n"
    )


@pytest.mark.parametrize(
    ("prefix", "wire"),
    [
        ("/pr\u00e4fix", b"/pr%C3%A4fix"),
        ("/\u65e5\u672c/api", b"/%E6%97%A5%E6%9C%AC/api"),
        ('/a"b<c>d^e`f{g|h}i\\j', b"/a%22b%3Cc%3Ed%5Ee%60f%7Bg%7Ch%7Di%5Cj"),
        ("/emoji-\U0001f642", b"/emoji-%F0%9F%99%82"),
    ],
)
def test_non_ascii_path_prefix_is_percent_encoded(prefix: str, wire: bytes) -> None:
    seen: list[bytes] = []
    with RawServer(capture(seen)) as server, make_client(server.url + prefix) as client:
        assert client.base_url == server.url + wire.decode()
        client.ask("x", Review)
        client.list_models()
    assert seen[0].startswith(b"POST " + wire + b"/v1/core HTTP/1.1\r\n")
    assert seen[1].startswith(b"GET " + wire + b"/v1/models HTTP/1.1\r\n")


def test_reserved_and_escaped_path_kept() -> None:
    prefix = "/a%20b/c:d@e!f$g&h'i(j)k*l+m,n;o=p-q.r_s~t/%C3%A4"
    seen: list[bytes] = []
    with RawServer(capture(seen)) as server, make_client(server.url + prefix) as client:
        client.list_models()
    assert seen[0].startswith(b"GET " + prefix.encode() + b"/v1/models HTTP/1.1\r\n")


@pytest.mark.parametrize("url", ["https://api.qa-service.com.", "HTTPS://API.QA-SERVICE.COM.:443/"])
def test_the_public_address_written_fully_qualified_still_needs_a_key(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    # "host." is the same host as "host" (a fully qualified name): the key check is not bypassed.
    monkeypatch.delenv("SERVICE_API_KEY", raising=False)
    with pytest.raises(qa.MissingApiKey):
        qa.Client(base_url=url)
    with qa.Client(base_url="https://api.qa-service.com.example.", trust_env=False) as client:
        assert client.base_url == "https://api.qa-service.com.example."  # another host


# os.environ and sys.argv turn bytes that do not decode into surrogates (U+D800-U+DFFF), which
# have no UTF-8 form: percent-encoding the path, or the proxy's password, raised
# UnicodeEncodeError out of Client().
@pytest.mark.parametrize(
    ("char", "refused"),
    [
        (chr(0xD7FF), False),
        (chr(0xD800), True),
        (chr(0xDCFF), True),
        (chr(0xDFFF), True),
        (chr(0xE000), False),
    ],
    ids=["U+D7FF", "U+D800", "U+DCFF", "U+DFFF", "U+E000"],
)
def test_a_url_that_is_not_utf8_is_refused_as_the_option_it_is(
    monkeypatch: pytest.MonkeyPatch, char: str, refused: bool
) -> None:
    for name in ("SERVICE_BASE_URL", "HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    surrogate = f"the surrogate {re.escape(repr(char))} at index"
    cases: list[tuple[type[qa.QAError], str, dict[str, Any], dict[str, str]]] = [
        (qa.InvalidBaseUrl, "base_url", {"base_url": f"http://qa.test/p{char}"}, {}),
        (
            qa.InvalidBaseUrl,
            "base_url from SERVICE_BASE_URL",
            {},
            {"SERVICE_BASE_URL": f"http://qa.test/{char}"},
        ),
        (
            qa.InvalidOption,
            "proxy",
            {"base_url": "http://qa.test", "proxy": f"http://u:pw{char}@p.test:3128"},
            {},
        ),
        (
            qa.InvalidOption,
            "proxy from HTTPS_PROXY",
            {"base_url": "https://qa.test"},
            {"HTTPS_PROXY": f"http://u:pw{char}@p"},
        ),
    ]
    for error, name, options, env in cases:
        if env and refused and not "\udc80" <= char <= "\udcff":
            continue  # the environment holds only the surrogates of undecodable bytes
        for variable, value in env.items():
            monkeypatch.setenv(variable, value)
        if refused:
            with pytest.raises(error, match=f"^{name} is not UTF-8: it holds {surrogate} \\d+$") as caught:
                qa.Client(**options)
            assert "pw" not in str(caught.value)
        else:
            qa.Client(**options).close()
        for variable in env:
            monkeypatch.delenv(variable)

"""An outside audit of configuration, errors, Diagnostics and redaction, aimed at what the other
modules leave untested: both clients alike, against real sockets.

Helpers here are shared with the audit's uncommitted list of failures (``failing_audit.py``).
"""

from __future__ import annotations

import asyncio
import email.utils
import pickle
import threading
from collections.abc import Sequence
from typing import Any, Optional

import pytest
from faultservers import Handler, RawServer, read_request, respond_sequence
from rawhttp import Toxic, response

import qa_min as qa
from qa_min._backoff import server_delay_ms

KEY = "sk-live-0123456789abcdefXYZ"
PIECES = [KEY[i : i + 8] for i in range(len(KEY) - 7)]
CLIENTS = ("sync", "async")


def holds_key(blob: object) -> bool:
    """True if ``blob`` (text or bytes) holds any 8-character piece of ``KEY``."""
    if isinstance(blob, bytes):
        return any(piece.encode() in blob for piece in PIECES)
    return any(piece in str(blob) for piece in PIECES)


class Recorded:
    """What one call did: its error, Diagnostics, hook events and the sleeps asked for."""

    def __init__(self) -> None:
        self.error: Optional[qa.QAError] = None
        self.diagnostics = qa.Diagnostics()
        self.events: list[qa.HookEvent] = []
        self.sleeps: list[float] = []
        self.requests: list[bytes] = []


def call(kind: str, responses: Sequence[bytes], **options: Any) -> Recorded:
    """One ``ask`` by a ``kind`` client against a server answering ``responses`` in order.

    Sleeps are recorded, not slept; the jitter draw is 0, so a backoff is its full length.
    """
    out = Recorded()
    hooks = {"before_attempt": [out.events.append], "after_attempt": [out.events.append]}
    options.setdefault("api_key", KEY)
    with RawServer(respond_sequence(*responses)) as server:
        if kind == "sync":

            def sleep(seconds: float, wake: threading.Event) -> None:
                out.sleeps.append(seconds)

            with qa.Client(
                base_url=server.url, trust_env=False, sleep=sleep, random=lambda: 0.0, hooks=hooks, **options
            ) as client:
                try:
                    client.ask("some text", Toxic, diagnostics=out.diagnostics)
                except qa.QAError as exc:
                    out.error = exc
        else:

            async def asleep(seconds: float) -> None:
                out.sleeps.append(seconds)

            async def main() -> None:
                async with qa.AsyncClient(
                    base_url=server.url,
                    trust_env=False,
                    sleep=asleep,
                    random=lambda: 0.0,
                    hooks=hooks,
                    **options,
                ) as client:
                    try:
                        await client.ask("some text", Toxic, diagnostics=out.diagnostics)
                    except qa.QAError as exc:
                        out.error = exc

            asyncio.run(main())
    return out


def make(kind: str, **options: Any) -> None:
    """Make (and close) a ``kind`` client with ``options``; its error, if any, propagates."""
    options.setdefault("trust_env", False)
    if kind == "sync":
        qa.Client(**options).close()
        return

    async def main() -> None:
        await qa.AsyncClient(**options).aclose()

    asyncio.run(main())


def status(code: str, headers: Sequence[str] = (), body: bytes = b"busy") -> bytes:
    return response(code, ("Content-Type: text/plain", *headers), body)


# -- base URLs ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize(
    "url",
    [
        "http://user:s3cr3tpw/x@host:80",  # a "/" ends the authority: urlsplit's "port" is the password
        "http://user:s3:cr3tpw/x@host",
        "http://user:s3cr3tpw#x@host",
        "http://user:s3cr3tpw?x@host",
        "http://user:99999123/x@host",  # digits, out of range
    ],
)
def test_a_password_that_urlsplit_reads_as_a_port_is_not_quoted(kind: str, url: str) -> None:
    password = url.split("user:")[1].partition("@")[0]
    for option, error in (("base_url", qa.InvalidBaseUrl), ("proxy", qa.InvalidOption)):
        options = {"base_url": url} if option == "base_url" else {"base_url": "http://h", "proxy": url}
        with pytest.raises(error, match=r"(?i)port") as caught:
            make(kind, **options)
        for piece in {password, *password.replace("#", "/").replace("?", "/").split("/")}:
            assert len(piece) < 4 or piece not in str(caught.value), (piece, str(caught.value))


@pytest.mark.parametrize("kind", CLIENTS)
def test_ports_1_and_65535_are_accepted_0_and_65536_refused_naming_the_port(kind: str) -> None:
    # Port 0 names no destination: connect() to it could only fail later, as a ConnectionFailed
    # that is retried. The same parser reads a proxy URL.
    make(kind, base_url="http://127.0.0.1:1")
    make(kind, base_url="http://127.0.0.1:65535")
    make(kind, base_url="http://[::1]:65535/prefix/")
    make(kind, base_url="http://127.0.0.1:9", proxy="http://127.0.0.1:65535")
    for port in ("0", "65536", "00"):
        why = rf"is not a valid URL \(port {int(port)} is out of range 1-65535\)"
        with pytest.raises(qa.InvalidBaseUrl, match="base_url " + why):
            make(kind, base_url=f"http://127.0.0.1:{port}")
        with pytest.raises(qa.InvalidOption, match="proxy " + why):
            make(kind, base_url="http://127.0.0.1:9", proxy=f"127.0.0.1:{port}")


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://h:-1", "Port could not be cast"),
        ("http://h:+80", "Port could not be cast"),
        ("http://h:8080:90", "Port could not be cast"),
        ("http://::1:8080", "Port could not be cast"),  # an IPv6 address without brackets
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://h..com", "IDNA cannot encode"),
        ("http:///v1", "with a host"),
        ("http:h", "with a host"),
        ("ftp://h", "http or https URL"),
        ("http://h: 80", "without spaces"),
        ("http://h\u3000/", "without spaces"),
        (" http://h", "without spaces"),
        ("http://h/\t", "without spaces"),
        ("http://h/?q=1", "must not have a query"),
        ("http://h/#top", "must not have a query or fragment"),
    ],
)
def test_malformed_base_urls_are_refused_saying_why(kind: str, url: str, why: str) -> None:
    with pytest.raises(qa.InvalidBaseUrl) as caught:
        make(kind, base_url=url)
    assert why in str(caught.value)
    assert "base_url" in str(caught.value)


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize("option", ["base_url", "proxy"])
@pytest.mark.parametrize("value", [b"http://h:1", 3128, ["http://h:1"]], ids=["bytes", "int", "list"])
def test_a_url_that_is_no_str_is_refused_as_no_str(kind: str, option: str, value: object) -> None:
    # It was told it "must be an http(s) URL without spaces", though it held no space.
    options: dict[str, Any] = {"base_url": "http://127.0.0.1:9", option: value}
    with pytest.raises(qa.ConfigurationError if option == "base_url" else qa.InvalidOption) as caught:
        make(kind, **options)
    assert str(caught.value) == f"{option} must be a str holding an http(s) URL, got {value!r}"


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize(
    ("url", "why"),
    [
        # urlsplit's hostname drops text after the "]": this was http://[::1]:8080
        ("http://[::1]x:8080", "followed by nothing but :port"),
        ("http://[::1]junk/", "followed by nothing but :port"),
        ("http://x[::1]", "brackets must enclose the whole host"),
        ("http://[::1]]", "brackets must enclose the whole host"),
        # One bracket after the user info (urlsplit checks the first pair in the whole authority):
        # this was the host "a]b"
        ("http://[::1]@a]b:8080", "brackets must enclose the whole host"),
        ("http://[::1]@a[b:8080", "brackets must enclose the whole host"),
        # IPvFuture: this was the DNS name "v1.x"
        ("http://[v1.x]", "the brackets must hold an IPv6 address"),
        ("http://[]", "not a valid URL"),
        ("http://[1.2.3.4]", "not a valid URL"),  # accepted as 1.2.3.4 before Python 3.11
        # A zone id: RFC 6874's spelling never resolved, a bare "%" reached the Host header.
        ("http://[fe80::1%25eth0]:8080", "IPv6 zone id (after '%') is not supported"),
        ("http://[fe80::1%eth0]", "IPv6 zone id (after '%') is not supported"),
        # int() reads these on Python 3.9 (port 10, port 12, port 80)
        ("http://h:1_0", "Port could not be cast to integer value as '1_0'"),
        ("http://h:\u0661\u0662", "Port could not be cast to integer value"),
        ("http://[::1]:+80", "Port could not be cast to integer value as '+80'"),
    ],
)
def test_hosts_and_ports_urlsplit_reads_loosely_are_refused(kind: str, url: str, why: str) -> None:
    with pytest.raises(qa.InvalidBaseUrl) as caught:
        make(kind, base_url=url)
    assert why in str(caught.value)
    assert str(caught.value).startswith("base_url ")
    with pytest.raises(qa.InvalidOption) as refused:
        make(kind, base_url="http://127.0.0.1:9", proxy=url)
    assert why in str(refused.value)
    assert str(refused.value).startswith("proxy ")


@pytest.mark.parametrize("kind", CLIENTS)
def test_ipv6_literals_with_a_port_or_an_empty_one_are_accepted(kind: str) -> None:
    for url in ("http://[::1]:8080/p", "http://[::ffff:1.2.3.4]:81", "http://[::1]:", "http://h:/p"):
        make(kind, base_url=url)
        make(kind, base_url="http://127.0.0.1:9", proxy=url)


@pytest.mark.parametrize("kind", CLIENTS)
def test_userinfo_in_base_url_is_refused_without_showing_it(kind: str) -> None:
    for url in ("http://user@h", "http://user:pw-secret-1234@h/p", "http://:pw-secret-1234@h"):
        with pytest.raises(qa.InvalidBaseUrl, match="must not carry credentials; pass api_key") as caught:
            make(kind, base_url=url)
        assert "secret" not in str(caught.value)
        assert "secret" not in repr(caught.value)


@pytest.mark.parametrize("kind", CLIENTS)
def test_the_environment_base_url_is_stripped_and_an_argument_wins(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok = response("200 OK", ("Content-Type: application/json",))
    with RawServer(respond_sequence(ok, ok)) as server, RawServer(respond_sequence(ok)) as other:
        monkeypatch.setenv("SERVICE_BASE_URL", f"  {server.url}/  \n")
        monkeypatch.setenv("SERVICE_API_KEY", f"\t{KEY}  ")

        async def aask(**options: Any) -> bool:
            async with qa.AsyncClient(**options) as client:
                return (await client.ask("t", Toxic)).answers.toxic

        def ask(**options: Any) -> bool:
            if kind == "async":
                return asyncio.run(aask(**options))
            with qa.Client(**options) as client:
                return client.ask("t", Toxic).answers.toxic

        assert ask() is True
        assert server.connections == 1
        assert ask(base_url=other.url) is True
        assert other.connections == 1
        assert server.connections == 1


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_key_argument_wins_over_the_environment_on_the_wire(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bytes] = []
    ok = response("200 OK", ("Content-Type: application/json",))

    def handler(conn: Any, stop: threading.Event) -> None:
        from faultservers import read_request

        seen.append(read_request(conn))
        conn.sendall(ok)

    monkeypatch.setenv("SERVICE_API_KEY", "env-key-should-lose")
    with RawServer(handler) as server:
        options: dict[str, Any] = {"base_url": server.url, "api_key": KEY, "retry": qa.RetryPolicy.none}
        if kind == "sync":
            with qa.Client(**options) as client:
                client.ask("t", Toxic)
        else:

            async def main() -> None:
                async with qa.AsyncClient(**options) as client:
                    await client.ask("t", Toxic)

            asyncio.run(main())
    assert f"Authorization: Bearer {KEY}\r\n".encode() in seen[0]
    assert b"env-key-should-lose" not in seen[0]


# -- the key, echoed back -------------------------------------------------------------------


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_key_echoed_as_the_request_id_is_hidden_everywhere(kind: str) -> None:
    echo = status("503 Service Unavailable", (f"request-id: {KEY}", f"X-Echo: Bearer {KEY}"), KEY.encode())
    done = call(kind, [echo] * 3)
    exc, diag = done.error, done.diagnostics
    assert isinstance(exc, qa.ServerError)
    assert exc.status == 503
    assert "(request id [redacted]) (after 3 attempts)" in str(exc)
    assert diag.request_id == "[redacted]"
    assert [a.request_id for a in diag.history] == ["[redacted]"] * 3
    assert diag.headers is not None
    assert diag.headers["x-echo"] == "Bearer [redacted]"
    after = [e for e in done.events if e.stage == "after_attempt"]
    assert [e.request_id for e in after] == ["[redacted]"] * 3
    for blob in (
        str(exc),
        repr(exc),
        repr(diag),
        repr(diag.history),
        repr(diag.headers),
        diag.body,
        exc.args,
    ):
        assert not holds_key(blob), blob
    assert not holds_key(pickle.dumps((exc, diag)))
    assert not any(holds_key(repr(e)) or holds_key(e.error) for e in done.events)


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_key_echoed_in_a_redirect_location_is_hidden(kind: str) -> None:
    moved = status("302 Found", (f"Location: https://elsewhere.test/login?key={KEY}",), b"")
    done = call(kind, [moved])
    exc, diag = done.error, done.diagnostics
    assert isinstance(exc, qa.UnexpectedStatus)
    assert exc.status == 302
    assert "HTTP 302" in str(exc)
    assert diag.attempts == 1  # not followed, not retried
    assert diag.headers is not None
    assert diag.headers["location"] == "https://elsewhere.test/login?key=[redacted]"
    assert not holds_key(pickle.dumps((exc, diag)))


def cut_short(page: bytes) -> Handler:
    """Read one request, send ``page`` (a head and less body than it announces), close."""

    def handler(conn: Any, stop: threading.Event) -> None:
        read_request(conn)
        conn.sendall(page)

    return handler


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize("whole", [True, False], ids=["error-page", "body-cut-short"])
def test_a_key_echoed_in_a_response_header_name_is_hidden(kind: str, whole: bool) -> None:
    # Names are redacted as values are: CallState.fill (a status error) and heard_head (a head
    # whose body failed) both go through ResponseHeaders.redacted with the client's redactor.
    fields = ("Content-Type: application/json", f"X-Echo-{KEY}: 1", "X-Trace: t1")
    if whole:
        page: Any = status("500 Internal Server Error", fields[1:], b"oops")
    else:
        page = cut_short(response("200 OK", fields, b'{"ans', length="100"))
    done = call(kind, [page], retry=qa.RetryPolicy.none)
    exc, diag = done.error, done.diagnostics
    assert isinstance(exc, qa.ServerError if whole else (qa.ConnectionFailed, qa.InvalidResponse))
    assert diag.status == (500 if whole else 200)
    assert diag.headers is not None
    assert ("X-Echo-[redacted]", "1") in diag.headers.items()
    assert diag.headers["x-trace"] == "t1"
    assert not holds_key(repr(diag.headers.items())), diag.headers.items()
    assert not holds_key(pickle.dumps((exc, diag)))


# -- retries and Retry-After ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("date", "seconds"),
    [
        ("Sun, 06 Nov 2095 08:49:37 GMT", 37.0),  # IMF-fixdate
        ("Sun Nov  6 08:49:37 2095", 37.0),  # asctime, which RFC 9110 says to accept
        ("Sun, 06 Nov 2095 08:49:37 +0100", None),  # an hour earlier: in the past
        ("Sun, 06 Nov 2095 08:48:59 GMT", None),  # a second ago
        ("Sun, 06 Nov 2095 08:49:00 GMT", None),  # now: zero is ignored
    ],
)
def test_retry_after_dates_against_a_fixed_clock(date: str, seconds: Optional[float]) -> None:
    parsed = email.utils.parsedate_tz("Sun, 06 Nov 2095 08:49:00 GMT")
    assert parsed is not None
    now = float(email.utils.mktime_tz(parsed))
    expected = None if seconds is None else seconds * 1000.0
    assert server_delay_ms(None, date, 60_000.0, now) == expected


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize(
    ("headers", "first_sleep"),
    [
        (("Retry-After: 3",), 3.0),
        (("Retry-After: 0.25",), 0.25),
        (("retry-after-ms: 40", "Retry-After: 9"), 0.04),
        (("Retry-After: 60",), 60.0),  # exactly max_retry_after_ms
        (("Retry-After: 61",), 0.5),  # one past it: the backoff
        (("Retry-After: -3",), 0.5),
        (("Retry-After: nan",), 0.5),
        (("Retry-After: 1e999",), 0.5),
        (("Retry-After: soon",), 0.5),
        (("retry-after-ms: 0", "Retry-After: 2"), 2.0),
    ],
)
def test_server_requested_delays_through_both_clients(
    kind: str, headers: tuple[str, ...], first_sleep: float
) -> None:
    busy = status("503 Service Unavailable", headers)
    ok = response("200 OK", ("Content-Type: application/json",))
    done = call(kind, [busy, ok], retry=qa.RetryPolicy(max_retries=1))
    assert done.error is None
    assert done.sleeps == [pytest.approx(first_sleep)]
    assert [(a.status, a.error) for a in done.diagnostics.history] == [(503, "ServerError"), (200, None)]
    assert done.diagnostics.history[1].delay == pytest.approx(first_sleep)


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize(
    "headers",
    [
        ("Retry-After: 1_0",),  # float() reads 10
        ("retry-after-ms: 1_000",),  # 1000
        ("Retry-After: 3\xa0",),  # float() strips NBSP; HTTP's whitespace is SP and HTAB
        ("Retry-After: +3",),
        ("retry-after-ms: 2e3",),
        ("retry-after-ms: infinity", "Retry-After: Nan"),
    ],
)
def test_a_delay_that_is_not_decimal_digits_falls_back_to_the_backoff(
    kind: str, headers: tuple[str, ...]
) -> None:
    # RFC 9110: delay-seconds = 1*DIGIT (docs/retries.md: a decimal fraction is read too).
    busy = status("503 Service Unavailable", headers)
    ok = response("200 OK", ("Content-Type: application/json",))
    done = call(kind, [busy, ok], retry=qa.RetryPolicy(max_retries=1))
    assert done.error is None
    assert done.sleeps == [pytest.approx(0.5)]  # the backoff, not a server delay
    assert done.diagnostics.history[1].delay == pytest.approx(0.5)


@pytest.mark.parametrize("kind", CLIENTS)
def test_respect_retry_after_false_uses_the_backoff(kind: str) -> None:
    busy = status("429 Too Many Requests", ("Retry-After: 7",))
    done = call(kind, [busy] * 3, retry=qa.RetryPolicy(respect_retry_after=False), rate_limit=None)
    assert isinstance(done.error, qa.RateLimited)
    assert done.error.status == 429
    assert done.sleeps == [pytest.approx(0.5), pytest.approx(1.0)]
    assert "(after 3 attempts)" in str(done.error)


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize(
    ("code", "cls", "attempts"),
    [
        ("400 Bad Request", qa.BadRequest, 1),
        ("401 Unauthorized", qa.Unauthorized, 1),
        ("403 Forbidden", qa.PermissionDenied, 1),
        ("404 Not Found", qa.NotFound, 1),
        ("405 Method Not Allowed", qa.UnexpectedStatus, 1),
        ("407 Proxy Authentication Required", qa.UnexpectedStatus, 1),  # from the service itself
        ("408 Request Timeout", qa.RequestTimeout, 3),
        ("409 Conflict", qa.UnexpectedStatus, 1),
        ("422 Unprocessable Entity", qa.UnprocessableEntity, 1),
        ("429 Too Many Requests", qa.RateLimited, 3),
        ("501 Not Implemented", qa.ServerError, 3),
        ("529 Site Overloaded", qa.Overloaded, 3),
        ("599 Whatever", qa.ServerError, 3),
    ],
)
def test_status_class_and_diagnostics_after_retries(kind: str, code: str, cls: type, attempts: int) -> None:
    number = int(code[:3])
    page = status(code, ("request-id: req-42", "X-Trace: t1"), b"nope")
    done = call(kind, [page] * attempts, rate_limit=None)
    exc, diag = done.error, done.diagnostics
    assert type(exc) is cls
    assert isinstance(exc, qa.APIStatusError)
    assert exc.status == number
    assert exc.diagnostics is diag
    assert f"HTTP {number} from POST" in str(exc)
    assert "nope" in str(exc)
    assert "(request id req-42)" in str(exc)
    assert ("(after 3 attempts)" in str(exc)) == (attempts == 3)
    assert (diag.status, diag.attempts, diag.request_id, diag.body) == (number, attempts, "req-42", "nope")
    assert diag.transport_error is None
    assert diag.headers is not None
    assert diag.headers["x-trace"] == "t1"
    assert [(a.number, a.status, a.error) for a in diag.history] == [
        (n, number, cls.__name__) for n in range(1, attempts + 1)
    ]
    assert diag.elapsed >= sum(a.duration for a in diag.history)
    assert len(done.sleeps) == attempts - 1


@pytest.mark.parametrize("kind", CLIENTS)
def test_x_should_retry_false_stops_a_retryable_status(kind: str) -> None:
    page = status("503 Service Unavailable", ("x-should-retry:  FALSE ",))
    done = call(kind, [page])
    assert isinstance(done.error, qa.ServerError)
    assert done.diagnostics.attempts == 1
    assert "after" not in str(done.error)


@pytest.mark.parametrize("kind", CLIENTS)
def test_an_unknown_x_should_retry_value_leaves_the_policy_in_charge(kind: str) -> None:
    page = status("400 Bad Request", ("x-should-retry: yes",))
    done = call(kind, [page])
    assert isinstance(done.error, qa.BadRequest)
    assert done.diagnostics.attempts == 1


# -- options --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"api_key": ""}, "api_key must be a non-empty string"),
        ({"api_key": b"sk"}, "api_key must be a non-empty string"),
        ({"api_key": "k\x7f"}, "api_key holds a control character (U+007F) at index 1"),
        ({"api_key": "kk\u0100"}, "api_key holds a character outside latin-1 (U+0100) at index 2"),
        ({"timeout": 0}, "timeout must be a finite number > 0, got 0"),
        ({"timeout": -0.0}, "timeout must be a finite number > 0"),
        ({"timeout": "5"}, "timeout must be a finite number > 0, got '5'"),
        ({"timeout": True}, "timeout must be a finite number > 0, got True"),
        ({"idle_timeout": None}, "idle_timeout must be a finite number > 0, got None"),
        ({"max_response_bytes": 0}, "max_response_bytes must be a whole number >= 1, got 0"),
        ({"max_idle_per_host": -1}, "max_idle_per_host must be a whole number >= 0, got -1"),
        ({"extra_headers": None}, "extra_headers must be a sequence of (name, value) pairs"),
        ({"extra_headers": [("Host", "x")]}, "extra_headers must not set 'Host'"),
        ({"extra_headers": [("Bad Name", "x")]}, "is not an RFC 9110 token"),
        ({"proxy": "https://p:1"}, "only http:// proxies are supported"),
        ({"proxy": "socks5://p"}, "only http:// proxies are supported (proxy), got 'socks5://p'"),
        ({"trust_env": "false"}, "trust_env must be True or False, got 'false'"),
        ({"retry": {"max_retries": 1}}, "retry must be a RetryPolicy"),
        ({"retry_budget": 5}, "retry_budget must be a RetryBudget or None, got 5"),
        ({"rate_limit": 5}, "rate_limit must be a RateLimit or None, got 5"),
        ({"hooks": {"bogus": []}}, "unknown stage 'bogus'"),
    ],
)
def test_bad_options_raise_invalid_option_naming_the_option(
    kind: str, options: dict[str, Any], words: str
) -> None:
    options.setdefault("base_url", "http://127.0.0.1:9")
    with pytest.raises(qa.ValidationError) as caught:
        make(kind, **options)
    assert isinstance(caught.value, qa.InvalidOption)
    assert words in str(caught.value)


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize("proxy", ["proxy.example:0", "proxy.example:80?x=1", "pr oxy:80"])
def test_a_proxy_without_a_scheme_is_quoted_as_given_when_refused(kind: str, proxy: str) -> None:
    with pytest.raises(qa.InvalidOption, match="proxy") as caught:
        make(kind, base_url="http://127.0.0.1:9", proxy=proxy)
    assert str(caught.value).endswith(repr(proxy)), str(caught.value)


@pytest.mark.parametrize("kind", CLIENTS)
def test_an_empty_proxy_is_no_proxy_whatever_the_environment_names(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SPEC says nothing of proxy=""; requests, httpx and curl read it as no proxy (before, it
    # was refused quoting 'http://', a URL the caller never wrote).
    for name in ("http_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    ok = response("200 OK", ("Content-Type: application/json",))

    async def aask(**options: Any) -> bool:
        async with qa.AsyncClient(**options) as client:
            return (await client.ask("t", Toxic)).answers.toxic

    def ask(**options: Any) -> bool:
        if kind == "async":
            return asyncio.run(aask(**options))
        with qa.Client(**options) as client:
            return client.ask("t", Toxic).answers.toxic

    with RawServer(respond_sequence(ok)) as server, RawServer(respond_sequence(ok)) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        assert ask(base_url=server.url, api_key=KEY, proxy="") is True
        assert (server.connections, proxy.connections) == (1, 0)
        assert ask(base_url=server.url, api_key=KEY) is True  # without proxy="", the variable's
        assert (server.connections, proxy.connections) == (1, 1)


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_model_from_the_environment_is_refused_under_its_name(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVICE_DEFAULT_MODEL", "judge\tx")
    with pytest.raises(qa.InvalidModel, match="SERVICE_DEFAULT_MODEL") as caught:
        make(kind, base_url="http://127.0.0.1:9", trust_env=True)
    assert "control character" in str(caught.value)
    make(kind, base_url="http://127.0.0.1:9", trust_env=False)  # not read at all


@pytest.mark.parametrize("kind", CLIENTS)
def test_missing_key_for_the_public_address_in_any_spelling(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SERVICE_API_KEY", raising=False)
    for url in (
        "HTTPS://API.QA-SERVICE.COM:443/",
        "https://api.qa-service.com//",
        "https://\uff41pi.qa-service.com",
    ):
        with pytest.raises(qa.MissingApiKey, match="no API key: pass api_key="):
            make(kind, base_url=url)
    monkeypatch.setenv("SERVICE_API_KEY", "   ")
    with pytest.raises(qa.MissingApiKey):
        make(kind, base_url="https://api.qa-service.com", trust_env=True)

"""``qa_min.testing`` as a library that embeds qa_min sees it: the fields a rate-limited fake
announces, written as the real services write them, and its options and steps.
"""

from __future__ import annotations

import http.client
import re
import sys
import urllib.parse
from collections.abc import Callable

import pytest

import qa_min as qa
from qa_min._fakehttp import Headers
from qa_min._fakerules import announce_headers, throttle_headers
from qa_min.testing import FakeService, MockTransport, RecordedRequest, Step, reply

WALL = 1_764_000_000.0
STYLES = ("ietf", "ietf-draft", "openai", "anthropic")


def get_fields(url: str) -> dict[str, str]:
    """The fields of the fake's answer to ``GET /v1/models``, names lowercased."""
    where = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname or "", where.port, timeout=10)
    try:
        conn.request("GET", f"{where.path}/v1/models")
        response = conn.getresponse()
        response.read()
        return {name.lower(): value for name, value in response.getheaders()}
    finally:
        conn.close()


@pytest.mark.parametrize("style", STYLES)
def test_announced_counts_are_written_whole_with_every_digit(style: str) -> None:
    # A burst of 1234567 went out as "1.23457e+06" and a rate of 1e7 as "q=1e+07": no service
    # writes an exponent, and the limit read back was 1234570, above what the bucket holds.
    with FakeService(rate_limit=(10_000_000, 1_234_567), announce=style) as svc:
        fields = get_fields(svc.url)
    told = {name: value for name, value in fields.items() if "ratelimit" in name}
    assert told, fields
    assert not any(re.search(r"[0-9][eE][+-]?[0-9]", value) for value in told.values()), told
    if style == "ietf":
        assert told["ratelimit-policy"] == '"default";q=10000000;w=1'
    else:
        limit = next(value for name, value in told.items() if name.endswith("limit") or "-limit-" in name)
        assert limit == "1234567"


def test_a_window_or_rate_below_one_is_written_without_an_exponent() -> None:
    # A bucket of 1 refilled once in 1e9 s: "w=1e+09" and "q=1e-09" before.
    ietf = dict(announce_headers("ietf", 0.0, 1e-9, 1.0, WALL))
    draft = dict(announce_headers("ietf-draft", 0.0, 1e-9, 1.0, WALL))
    assert ietf["RateLimit-Policy"] == '"default";q=0.000000001;w=1'
    assert draft["RateLimit-Policy"] == "1;w=1000000000"
    assert draft["RateLimit-Reset"] == "1000000000"


@pytest.mark.parametrize(
    ("tokens", "rate", "reset"),
    [
        (1.0, 1 / 7200, "2h0m0s"),  # "120m0s" before: Go counts hours
        (991 / 4096, 1 / 2048, "1h0m0.5s"),  # 3600.5 s, exact in binary
        (1.0, 1 / 59.5, "59.5s"),
        (1.0, 1 / 90.25, "1m30.25s"),
        (0.0, 50.0, "40ms"),  # an empty bucket of 2
        (2.0, 10.0, "0s"),  # a full bucket: "0ms" before, which Go never writes
        (1.0, 1000.0, "1ms"),  # the shortest time a bucket not full is told in: one millisecond
        (1.0, 1000 / 999, "999ms"),  # the longest in milliseconds...
        (1.0, 1.0, "1s"),  # ...and a whole second is told in seconds
    ],
)
def test_openai_reset_is_a_duration_as_go_writes_it(tokens: float, rate: float, reset: str) -> None:
    fields = dict(announce_headers("openai", tokens, rate, 2.0, WALL))
    assert fields["x-ratelimit-reset-requests"] == reset


@pytest.mark.parametrize(
    ("wait", "seconds", "millis"),
    [
        (1e-6, "1", "0.001"),  # a delay under a second is still one: never "Retry-After: 0"
        (0.5, "1", "500.000"),
        (1.0, "1", "1000.000"),  # exactly a second: one
        (1.000001, "2", "1000.001"),  # a microsecond past: two, and the exact delay rounded up
        (2.0, "2", "2000.000"),
    ],
)
def test_a_429s_delay_is_whole_seconds_rounded_up_and_exact_milliseconds(
    wait: float, seconds: str, millis: str
) -> None:
    assert throttle_headers(wait, "seconds") == (("Retry-After", seconds),)
    assert throttle_headers(wait, "ms") == (("retry-after-ms", millis),)
    assert throttle_headers(wait, "both") == (("retry-after-ms", millis), ("Retry-After", seconds))
    assert throttle_headers(wait, "none") == ()


def _busy_diagnostics(step: Step, over: str) -> qa.Diagnostics:
    """The Diagnostics of a call answered ``step`` once, over a socket or by a MockTransport."""
    diag = qa.Diagnostics()
    with FakeService() as svc:
        svc.script(step)
        mock = MockTransport(lambda request: step) if over == "mock" else None
        with qa.Client(base_url=svc.url, transport=mock) as client, pytest.raises(qa.QAError):
            client.list_models(diagnostics=diag, retry=qa.RetryPolicy.none)
    return diag


@pytest.mark.parametrize("over", ["socket", "mock"])
def test_a_reply_header_value_reads_without_its_surrounding_blanks_on_both_transports(over: str) -> None:
    # Over a socket the reader trims SP and HTAB around a value (RFC 9110 5.5); MockTransport
    # handed " req_1 \t" on as given: another request id, in Diagnostics and the message.
    step = reply(503, {"detail": "down"}, headers=[("x-request-id", " req_1 \t"), ("x-note", "\ta b ")])
    diag = _busy_diagnostics(step, over)
    assert diag.request_id == "req_1"
    assert diag.headers is not None
    assert (diag.headers["x-request-id"], diag.headers["x-note"]) == ("req_1", "a b")


MODELS_BODY = b'{"models": [{"name": "judge-latest"}]}'


@pytest.mark.parametrize("over", ["socket", "mock"])
def test_a_step_built_directly_drops_its_content_length_as_reply_does(over: str) -> None:
    # reply() drops a Content-Length (the fake sends the right one); Step(...) kept it: the fake
    # then sent two ("5, 38": InvalidResponse) while MockTransport delivered the body whole.
    step = Step("reply", status=200, body=MODELS_BODY, headers=(("Content-Length", "5"),))
    assert step.headers == ()
    with FakeService() as svc:
        svc.script(step)
        mock = MockTransport(lambda request: step) if over == "mock" else None
        with qa.Client(base_url=svc.url, transport=mock) as client:
            models = client.list_models(retry=qa.RetryPolicy.none)
    assert [model.name for model in models.models] == ["judge-latest"]


@pytest.mark.parametrize(
    "build",
    [
        lambda: reply(200, MODELS_BODY, headers=[("Transfer-Encoding", "chunked")]),
        lambda: Step("reply", status=200, body=MODELS_BODY, headers=(("transfer-encoding", "identity"),)),
    ],
)
def test_a_scripted_transfer_encoding_is_refused(build: Callable[[], Step]) -> None:
    # The fake frames every body with its Content-Length: a chunked one was garbage over a socket
    # ("bad chunk size line") and a good answer under MockTransport.
    with pytest.raises(
        ValueError, match=r"Transfer-Encoding: the fake frames every body by its Content-Length"
    ):
        build()


@pytest.mark.skipif(sys.platform == "win32", reason="Windows does not connect to 0.0.0.0")
def test_a_fake_on_every_interface_has_a_url_a_client_takes() -> None:
    # host="" binds every interface, as socketserver reads it, but the URL was "http://:PORT",
    # which a client refuses (InvalidBaseUrl) and `qa-min fake --host ''` printed as the one to use.
    with FakeService(host="") as svc:
        assert svc.url.startswith("http://0.0.0.0:")
        with qa.Client(base_url=svc.url) as client:
            assert client.list_models().models


def test_set_answers_names_the_answer_it_cannot_encode() -> None:
    # json's own "Object of type object is not JSON serializable" named neither set_answers'
    # argument nor that it was being encoded.
    loop: list[object] = []
    loop.append(loop)
    with FakeService() as svc:
        for value in (object(), loop):
            with pytest.raises(TypeError, match=r"^answers could not be read: encoding it as JSON raised"):
                svc.set_answers({"toxic": value})


def test_headers_given_as_a_dict_are_named_as_given() -> None:
    # The message showed the list read from the dict, "not ['X-Id']": a value never passed.
    with pytest.raises(TypeError, match=r"pairs of str, not \{'X-Id': 'a'\}"):
        reply(200, headers={"X-Id": "a"})  # type: ignore[arg-type]


@pytest.mark.parametrize("over", ["socket", "mock"])
def test_a_key_ending_in_a_blank_is_accepted_as_a_server_reads_it(over: str) -> None:
    # A server reads a field without its trailing SP/HTAB (RFC 9110 5.5), and so did the fake,
    # but it compared what it read with "Bearer sk-test " itself: the key it was given never passed.
    key = "sk-test \t"
    with FakeService(api_key=key) as svc:
        mock = MockTransport(api_key=key) if over == "mock" else None
        with qa.Client(base_url=svc.url, api_key=key, transport=mock) as client:
            assert client.list_models(retry=qa.RetryPolicy.none).models


def test_a_recorded_requests_repr_hides_the_key_it_carried() -> None:
    # Reprs land in test reports and logs; the key is still there to assert on, by name.
    key = "sk-test-secret-0123456789"
    wrong = "sk-wrong-key-0123456789"
    with FakeService(api_key=key) as svc, qa.Client(base_url=svc.url, api_key=key) as client:
        client.list_models()
        bad = qa.Client(base_url=svc.url, api_key=wrong, retry=qa.RetryPolicy.none)
        with bad, pytest.raises(qa.Unauthorized):
            bad.list_models()
        recorded = svc.requests
    assert [r.headers["authorization"] for r in recorded] == [
        f"Bearer {key}",
        "Bearer sk-wrong-key-0123456789",
    ]
    for request in recorded:
        shown = repr(request)
        assert "'authorization': 'Bearer [redacted]'" in shown, shown
        assert "0123456789" not in shown
        assert "0123456789" not in str(request.headers)
        assert "'user-agent': 'qa_min/" in shown  # only the credentials are hidden
    assert "'proxy-authorization': 'Basic [redacted]'" in repr(
        RecordedRequest("GET", "/", Headers([("Proxy-Authorization", "Basic dTpw")]), b"")
    )


@pytest.mark.parametrize("name", ["request-id", "x-request-id"])
def test_an_empty_request_id_names_no_request(name: str) -> None:
    with FakeService() as svc, qa.Client(base_url=svc.url, retry=qa.RetryPolicy.none) as client:
        svc.script(reply(500, {"detail": "boom"}, headers=[(name, "")]))
        diag = qa.Diagnostics()
        with pytest.raises(qa.ServerError) as caught:
            client.list_models(diagnostics=diag)
    assert diag.request_id is None
    assert diag.history[0].request_id is None
    assert "request id" not in str(caught.value)
    assert "boom" in str(caught.value)

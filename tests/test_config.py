"""SPEC.md section 3, configuration: arguments, environment, defaults, and the API key's secrecy.

Spec line -> tests:

  Client(api_key=None, base_url=None, model=None, retry=None, extra_headers=(), timeout=None, **more)
      test_client_signature_matches_the_spec
      test_client_takes_the_six_spec_options_positionally
  Precedence: explicit argument, then environment, then default
      test_api_key_precedence, test_base_url_precedence, test_model_precedence
  Empty or whitespace-only environment values are ignored
      test_blank_environment_values_are_ignored
      test_blank_key_in_environment_still_means_no_key_for_the_public_address
  api_key / SERVICE_API_KEY / none - required only when the base URL is the public address
      test_missing_api_key_for_the_public_address (normalised variants, env base URL)
      test_missing_api_key_for_the_default_address
      test_no_key_needed_for_other_addresses
      test_a_key_makes_the_public_address_acceptable
  base_url / SERVICE_BASE_URL / PUBLIC_BASE_URL (an https URL; one constant)
      test_base_url_defaults_to_the_public_address
      test_public_base_url_is_one_https_constant
  model / SERVICE_DEFAULT_MODEL / DEFAULT_MODEL (one constant)
      test_model_precedence (default case), test_default_model_is_one_constant
  retry / RetryPolicy()
      test_default_retry_is_retry_policy_defaults
  extra_headers: a sequence of (name, value) pairs sent with every request
      test_extra_headers_go_with_every_request
      test_extra_headers_default_sends_nothing_extra
      test_bad_client_option_raises_a_validation_error (extra_headers rows)
  timeout: None means no limit; seconds for every call, retries included, unless the call
  passes its own
      test_no_timeout_waits_for_a_slow_response
      test_client_timeout_cancels_a_hung_call
      test_client_timeout_covers_retries_and_backoff
      test_per_call_timeout_overrides_the_client_timeout (both directions)
      test_bad_client_option_raises_a_validation_error (timeout rows)
      test_bad_per_call_option_raises_a_validation_error_and_sends_nothing
      test_huge_timeout_never_leaks_overflow_error
  MissingApiKey ... (normalising scheme/host case, default port, trailing slash)
      test_missing_api_key_for_the_public_address
  InvalidBaseUrl unless the URL is http or https with a host
      test_invalid_base_url, test_non_str_base_url_is_invalid_base_url,
      test_invalid_base_url_from_environment
  Without a key, no Authorization header is sent. A 401 maps to Unauthorized.
      test_without_a_key_no_authorization_and_401_is_unauthorized
  The key never appears in repr(), str(), log records, exception messages or Diagnostics
      test_key_not_in_client_repr_or_str
      test_key_echoed_in_error_body_is_not_exposed
      test_key_echoed_json_escaped_in_error_body_is_not_exposed
      test_key_echoed_in_a_2xx_body_is_not_exposed
      test_key_not_in_log_records
      test_bad_key_errors_do_not_show_the_key
  (more) bad option types raise InvalidOption, never TypeError/KeyError
      test_bad_client_option_raises_a_validation_error
      test_bad_option_with_a_listening_server_never_escapes_as_a_builtin_error
  (more) counts (max_idle_per_host >= 0, max_workers >= 1, max_response_bytes >= 1) are ints
      test_count_options_at_their_minimum_are_accepted (and the async one)
      test_count_options_refuse_anything_but_a_whole_number_in_range (Client and AsyncClient)
  (more) seconds (timeout, idle_timeout, per-call timeout=) are > 0 and <= _thread.TIMEOUT_MAX
      test_seconds_options_at_their_limits_are_accepted, test_per_call_timeout_at_the_limit_is_accepted
      test_seconds_options_over_the_limit_name_the_limit
      test_per_call_timeout_over_the_limit_names_the_limit
      test_seconds_options_at_or_under_zero_keep_the_short_message
  (more) trust_env is True or False, not any truth value
      test_trust_env_takes_a_bool_only
  (helper) test_listener_sees_a_connection: the "nothing was sent" probe itself works
"""

from __future__ import annotations

import _thread
import asyncio
import copy
import inspect
import logging
import math
import pickle
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest
from faultservers import RawServer
from support import Listener, no_sleep
from tlshelpers import Proxy

import qa_min as qa
from qa_min.testing import FakeService, delay, hang, reply

KEY = "sk-config-test-SECRET-4242"
ENV_VARS = ("SERVICE_API_KEY", "SERVICE_BASE_URL", "SERVICE_DEFAULT_MODEL", "SERVICE_LOG")
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The developer's own settings must not leak into these tests.
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def test_listener_sees_a_connection(listener: Listener) -> None:
    # The "nothing was sent" checks below rely on this.
    assert listener.connections() == 0
    listener.connect_once()
    assert listener.connections() == 1


# -- the signature ---------------------------------------------------------------------------


def test_client_signature_matches_the_spec() -> None:
    params = list(inspect.signature(qa.Client).parameters.values())
    spec = [
        ("api_key", None),
        ("base_url", None),
        ("model", None),
        ("retry", None),
        ("extra_headers", ()),
        ("timeout", None),
    ]
    assert [(p.name, p.default) for p in params[:6]] == spec
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params[:6])
    # Everything beyond the six is the "**more" part: keyword-only.
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[6:])


def test_the_not_given_default_reads_unset_and_stays_one_object_through_copy_and_pickle() -> None:
    # help(qa.Client) shows it; an option is "not given" only while it `is` that one object.
    default = inspect.signature(qa.Client).parameters["retry_budget"].default
    assert repr(default) == "UNSET"
    assert str(inspect.signature(qa.Client).parameters["rate_limit"]).endswith(" = UNSET")
    assert copy.copy(default) is default
    assert copy.deepcopy(default) is default
    assert all(pickle.loads(pickle.dumps(default, p)) is default for p in range(pickle.HIGHEST_PROTOCOL + 1))
    with pytest.raises(AttributeError):  # nothing can be hung on the shared object
        default.note = "x"


def test_client_takes_the_six_spec_options_positionally(svc: FakeService) -> None:
    with qa.Client(KEY, svc.url, "judge-mini-latest", qa.RetryPolicy.none, [("X-Pos", "1")], 5.0) as client:
        client.ask("x", Review)
    (request,) = svc.requests
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["x-pos"] == "1"
    assert request.json()["model"] == "judge-mini-latest"


# -- precedence ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("explicit", "env", "sent"),
    [
        ("sk-explicit", "sk-env", "Bearer sk-explicit"),
        (None, "sk-env", "Bearer sk-env"),
        (None, None, None),
    ],
    ids=["explicit-wins", "env-next", "default-none"],
)
def test_api_key_precedence(
    svc: FakeService, monkeypatch: pytest.MonkeyPatch, explicit: str | None, env: str | None, sent: str | None
) -> None:
    if env is not None:
        monkeypatch.setenv("SERVICE_API_KEY", env)
    with qa.Client(api_key=explicit, base_url=svc.url) as client:
        client.ask("x", Review)
    assert svc.requests[0].headers.get("authorization") == sent


@pytest.mark.parametrize("source", ["explicit-wins", "env-next"])
def test_base_url_precedence(svc: FakeService, monkeypatch: pytest.MonkeyPatch, source: str) -> None:
    with RawServer(lambda conn, stop: None) as decoy:
        if source == "explicit-wins":
            monkeypatch.setenv("SERVICE_BASE_URL", decoy.url)
            client = qa.Client(base_url=svc.url)
        else:
            monkeypatch.setenv("SERVICE_BASE_URL", svc.url + "/")
            client = qa.Client()
        with client:
            client.ask("x", Review, retry=qa.RetryPolicy.none)
        assert decoy.connections == 0
    assert len(svc.requests) == 1
    assert client.base_url == svc.url


def test_base_url_defaults_to_the_public_address() -> None:
    with qa.Client(api_key=KEY) as client:
        assert client.base_url == qa.PUBLIC_BASE_URL


@pytest.mark.parametrize(
    ("explicit", "env", "used"),
    [
        ("judge-explicit-1.0", "judge-env-2.0", "judge-explicit-1.0"),
        (None, "judge-env-2.0", "judge-env-2.0"),
        (None, None, qa.DEFAULT_MODEL),
    ],
    ids=["explicit-wins", "env-next", "default"],
)
def test_model_precedence(
    svc: FakeService, monkeypatch: pytest.MonkeyPatch, explicit: str | None, env: str | None, used: str
) -> None:
    if env is not None:
        monkeypatch.setenv("SERVICE_DEFAULT_MODEL", env)
    with qa.Client(base_url=svc.url, model=explicit) as client:
        assert client.model == used
        client.ask("x", Review)
    assert svc.requests[0].json()["model"] == used


@pytest.mark.parametrize("blank", ["", " ", "\t", "  \n  "], ids=["empty", "space", "tab", "mixed"])
def test_blank_environment_values_are_ignored(
    svc: FakeService, monkeypatch: pytest.MonkeyPatch, blank: str
) -> None:
    for name in ("SERVICE_API_KEY", "SERVICE_DEFAULT_MODEL"):
        monkeypatch.setenv(name, blank)
    monkeypatch.setenv("SERVICE_BASE_URL", blank)
    with qa.Client(base_url=svc.url) as client:
        assert client.model == qa.DEFAULT_MODEL
        client.ask("x", Review)
    assert "authorization" not in svc.requests[0].headers
    assert svc.requests[0].json()["model"] == qa.DEFAULT_MODEL
    # A blank SERVICE_BASE_URL falls back to the public default, which needs a key.
    with qa.Client(api_key=KEY) as client:
        assert client.base_url == qa.PUBLIC_BASE_URL


@pytest.mark.parametrize("blank", ["", "   "], ids=["empty", "spaces"])
def test_blank_key_in_environment_still_means_no_key_for_the_public_address(
    monkeypatch: pytest.MonkeyPatch, blank: str
) -> None:
    monkeypatch.setenv("SERVICE_API_KEY", blank)
    with pytest.raises(qa.MissingApiKey):
        qa.Client()


# -- defaults ---------------------------------------------------------------------------------


def test_public_base_url_is_one_https_constant() -> None:
    assert isinstance(qa.PUBLIC_BASE_URL, str)
    assert qa.PUBLIC_BASE_URL.startswith("https://")
    from qa_min import _constants

    assert _constants.PUBLIC_BASE_URL is qa.PUBLIC_BASE_URL


def test_default_model_is_one_constant() -> None:
    assert isinstance(qa.DEFAULT_MODEL, str)
    assert qa.DEFAULT_MODEL.strip()
    from qa_min import _constants

    assert _constants.DEFAULT_MODEL is qa.DEFAULT_MODEL


def test_default_retry_is_retry_policy_defaults(svc: FakeService) -> None:
    svc.script(*[reply(503, {"detail": "busy"})] * 5)
    diagnostics = qa.Diagnostics()
    with qa.Client(base_url=svc.url, sleep=no_sleep) as client, pytest.raises(qa.ServerError):
        client.ask("x", Review, diagnostics=diagnostics)
    assert diagnostics.attempts == qa.RetryPolicy().max_retries + 1 == 3


def test_extra_headers_go_with_every_request(svc: FakeService) -> None:
    headers = (("X-One", "1"), ("X-Two", "two words"))
    with qa.Client(base_url=svc.url, extra_headers=headers) as client:
        client.ask("x", Review)
        client.list_models()
        client.ask("y", Review)
    assert len(svc.requests) == 3
    for request in svc.requests:
        assert (request.headers["x-one"], request.headers["x-two"]) == ("1", "two words")


def test_extra_headers_default_sends_nothing_extra(svc: FakeService) -> None:
    with qa.Client(base_url=svc.url) as client:
        client.ask("x", Review)
    assert set(svc.requests[0].headers) == {"host", "content-type", "accept", "user-agent", "content-length"}


# -- timeout ----------------------------------------------------------------------------------


def test_no_timeout_waits_for_a_slow_response(svc: FakeService) -> None:
    svc.script(delay(0.03))
    with qa.Client(base_url=svc.url, timeout=None) as client:
        assert isinstance(client.ask("x", Review).answers.toxic, bool)


def test_client_timeout_cancels_a_hung_call(svc: FakeService) -> None:
    svc.script(hang())
    started = time.monotonic()
    with qa.Client(base_url=svc.url, timeout=0.02) as client, pytest.raises(qa.Canceled):
        client.ask("x", Review)
    assert time.monotonic() - started < 1.0


def test_client_timeout_covers_retries_and_backoff(svc: FakeService) -> None:
    # Each attempt is fast; only the 10 s backoff between them could outlast the timeout.
    svc.script(*[reply(503, {"detail": "busy"})] * 5)
    policy = qa.RetryPolicy(max_retries=4, backoff_initial_ms=10_000, backoff_jitter=0)
    started = time.monotonic()
    diagnostics = qa.Diagnostics()
    with qa.Client(base_url=svc.url, retry=policy, timeout=0.08) as client, pytest.raises(qa.Canceled):
        client.ask("x", Review, diagnostics=diagnostics)
    assert time.monotonic() - started < 1.0
    assert diagnostics.attempts == 1


def test_per_call_timeout_overrides_the_client_timeout(svc: FakeService) -> None:
    svc.script(delay(0.03), hang())
    with qa.Client(base_url=svc.url, timeout=0.02) as client:
        # A longer per-call timeout lets a response the client timeout would cut off arrive.
        assert isinstance(client.ask("x", Review, timeout=5.0).answers.toxic, bool)
    started = time.monotonic()
    with qa.Client(base_url=svc.url, timeout=30.0) as client, pytest.raises(qa.Canceled):
        client.ask("x", Review, timeout=0.02)
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("timeout", [float("inf"), 1e300], ids=["inf", "1e300"])
def test_huge_timeout_never_leaks_overflow_error(svc: FakeService, timeout: float) -> None:
    # Either "no practical limit" or a refused option; never a raw OverflowError from time_t.
    try:
        client = qa.Client(base_url=svc.url, timeout=timeout)
    except qa.InvalidOption:
        pass
    else:
        with client:
            assert isinstance(client.ask("x", Review).answers.toxic, bool)
    with qa.Client(base_url=svc.url) as client:
        try:
            result = client.ask("x", Review, timeout=timeout)
        except qa.InvalidOption:
            pass
        else:
            assert isinstance(result.answers.toxic, bool)


# -- option validation ----------------------------------------------------------------------


def _sslish() -> Any:
    return "not an SSLContext"


BAD_CLIENT_OPTIONS: list[tuple[str, dict[str, Any], type[qa.QAError]]] = [
    ("api_key-int", {"api_key": 42}, qa.InvalidOption),
    ("api_key-bytes", {"api_key": b"sk-bytes"}, qa.InvalidOption),
    ("api_key-empty", {"api_key": ""}, qa.InvalidOption),
    ("api_key-blank", {"api_key": "   "}, qa.InvalidOption),
    ("api_key-newline", {"api_key": "sk\r\nX-Evil: 1"}, qa.InvalidOption),
    ("model-int", {"model": 3}, qa.InvalidModel),
    ("model-empty", {"model": ""}, qa.InvalidModel),
    ("retry-str", {"retry": "twice"}, qa.InvalidOption),
    ("retry-int", {"retry": 3}, qa.InvalidOption),
    ("retry-dict", {"retry": {"max_retries": 1}}, qa.InvalidOption),
    ("headers-str", {"extra_headers": "X-A: 1"}, qa.InvalidOption),
    ("headers-dict", {"extra_headers": {"X-A": "1"}}, qa.InvalidOption),
    ("headers-int", {"extra_headers": 5}, qa.InvalidOption),
    ("headers-single", {"extra_headers": [("X-A",)]}, qa.InvalidOption),
    ("headers-triple", {"extra_headers": [("X-A", "1", "2")]}, qa.InvalidOption),
    ("headers-int-value", {"extra_headers": [("X-A", 1)]}, qa.InvalidOption),
    ("headers-crlf", {"extra_headers": [("X-A", "a\r\nX-Evil: 1")]}, qa.InvalidOption),
    ("headers-space-name", {"extra_headers": [("Bad Name", "v")]}, qa.InvalidOption),
    ("headers-colon-name", {"extra_headers": [("X:A", "v")]}, qa.InvalidOption),
    ("headers-empty-name", {"extra_headers": [("", "v")]}, qa.InvalidOption),
    ("headers-non-latin1", {"extra_headers": [("X-A", "€")]}, qa.InvalidOption),
    ("headers-content-length", {"extra_headers": [("Content-Length", "5")]}, qa.InvalidOption),
    ("headers-host", {"extra_headers": [("Host", "evil.example")]}, qa.InvalidOption),
    ("timeout-zero", {"timeout": 0}, qa.InvalidOption),
    ("timeout-negative", {"timeout": -1}, qa.InvalidOption),
    ("timeout-str", {"timeout": "5"}, qa.InvalidOption),
    ("timeout-bool", {"timeout": True}, qa.InvalidOption),
    ("timeout-nan", {"timeout": math.nan}, qa.InvalidOption),
    ("timeout-list", {"timeout": [1]}, qa.InvalidOption),
    ("max_idle-str", {"max_idle_per_host": "10"}, qa.InvalidOption),
    ("idle_timeout-negative", {"idle_timeout": -1.0}, qa.InvalidOption),
    ("max_response_bytes-zero", {"max_response_bytes": 0}, qa.InvalidOption),
    ("max_workers-zero", {"max_workers": 0}, qa.InvalidOption),
    ("proxy-int", {"proxy": 8080}, qa.InvalidOption),
    ("proxy-ftp", {"proxy": "ftp://proxy.example:21"}, qa.InvalidOption),
    ("retry_budget-str", {"retry_budget": "lots"}, qa.InvalidOption),
    ("ssl_context-str", {"ssl_context": _sslish()}, qa.InvalidOption),
    ("sleep-str", {"sleep": "not callable"}, qa.InvalidOption),
    ("random-int", {"random": 4}, qa.InvalidOption),
]


@pytest.mark.parametrize(
    ("options", "error"),
    [pytest.param(options, error, id=name) for name, options, error in BAD_CLIENT_OPTIONS],
)
def test_bad_client_option_raises_a_validation_error(
    listener: Listener, options: dict[str, Any], error: type[qa.QAError]
) -> None:
    with pytest.raises(error) as caught:
        qa.Client(base_url=listener.url, **options)
    assert isinstance(caught.value, qa.ValidationError)
    assert listener.connections() == 0


@pytest.mark.parametrize(
    "options",
    [
        {"ssl_context": "not an SSLContext"},
        {"sleep": "not callable", "retry_budget": None},
        {"random": 4, "retry_budget": None},
    ],
    ids=["ssl_context", "sleep", "random"],
)
def test_bad_option_with_a_listening_server_never_escapes_as_a_builtin_error(options: dict[str, Any]) -> None:
    # If construction lets the option through, the first call that uses it must still fail
    # with a qa_min error, not an AttributeError or TypeError from deep inside.
    with FakeService() as service:
        service.script(reply(503, {"detail": "busy"}))
        base = service.url.replace("http://", "https://") if "ssl_context" in options else service.url
        try:
            client = qa.Client(base_url=base, **options)
        except qa.InvalidOption:
            return
        with client:
            try:
                client.ask("x", Review, retry=qa.RetryPolicy(max_retries=1))
            except qa.QAError:
                pass


PER_CALL_BAD: list[tuple[str, dict[str, Any], type[qa.QAError]]] = [
    ("retry-str", {"retry": "twice"}, qa.InvalidOption),
    ("retry-int", {"retry": 0}, qa.InvalidOption),
    ("diagnostics-dict", {"diagnostics": {}}, qa.InvalidOption),
    ("cancel-bool", {"cancel": True}, qa.InvalidOption),
    ("cancel-event", {"cancel": threading.Event()}, qa.InvalidOption),
    ("timeout-zero", {"timeout": 0}, qa.InvalidOption),
    ("timeout-negative", {"timeout": -0.5}, qa.InvalidOption),
    ("timeout-str", {"timeout": "1"}, qa.InvalidOption),
    ("timeout-bool", {"timeout": False}, qa.InvalidOption),
    ("timeout-nan", {"timeout": math.nan}, qa.InvalidOption),
]


@pytest.mark.parametrize("operation", ["ask", "core", "list_models"])
@pytest.mark.parametrize(
    ("options", "error"),
    [pytest.param(options, error, id=name) for name, options, error in PER_CALL_BAD],
)
def test_bad_per_call_option_raises_a_validation_error_and_sends_nothing(
    listener: Listener, operation: str, options: dict[str, Any], error: type[qa.QAError]
) -> None:
    request = qa.Request(state="x", questions=[qa.NamedQuestion("toxic", qa.YesNo("y", "n"))])
    # The timeout only bounds a test whose call wrongly goes out: nothing ever answers.
    with qa.Client(base_url=listener.url, timeout=2.0) as client:
        calls: dict[str, Callable[[], object]] = {
            "ask": lambda: client.ask("x", Review, **options),
            "core": lambda: client.core(request, **options),
            "list_models": lambda: client.list_models(**options),
        }
        with pytest.raises(error) as caught:
            calls[operation]()
    assert isinstance(caught.value, qa.ValidationError)
    assert listener.connections() == 0


def _one(name: str, value: object) -> dict[str, Any]:
    return {name: value}


# The count options and their least valid value; each must be an int, not a float or a bool.
COUNT_MINIMUMS = {"max_idle_per_host": 0, "max_workers": 1, "max_response_bytes": 1}
ASYNC_COUNTS = ["max_idle_per_host", "max_response_bytes"]  # an AsyncClient has no max_workers


def _not_counts(minimum: int) -> list[object]:
    # One under the minimum, a fraction either side of it, the minimum as a float, a bool.
    return [minimum - 1, minimum - 0.5, minimum + 0.5, float(minimum), float(minimum + 3), True, str(minimum)]


def _count_refusal(name: str, value: object) -> str:
    return f"^{name} must be a whole number >= {COUNT_MINIMUMS[name]}, got {re.escape(repr(value))}$"


@pytest.mark.parametrize("name", list(COUNT_MINIMUMS))
def test_count_options_at_their_minimum_are_accepted(svc: FakeService, name: str) -> None:
    least = COUNT_MINIMUMS[name]
    with qa.Client(base_url=svc.url, **_one(name, least)) as client:
        if name == "max_workers":  # one worker thread really runs a call
            assert isinstance(client.submit(client.ask, "x", Review).result(timeout=10).answers.toxic, bool)
    with qa.Client(base_url=svc.url, **_one(name, least + 1)):
        pass


@pytest.mark.parametrize("name", ASYNC_COUNTS)
def test_async_count_options_at_their_minimum_are_accepted(svc: FakeService, name: str) -> None:
    async def make() -> None:
        async with qa.AsyncClient(base_url=svc.url, **_one(name, COUNT_MINIMUMS[name])):
            pass

    asyncio.run(make())


@pytest.mark.parametrize(
    ("make", "name", "value"),
    [
        pytest.param(make, n, v, id=f"{make.__name__}-{n}={v!r}")
        for make, names in ((qa.Client, list(COUNT_MINIMUMS)), (qa.AsyncClient, ASYNC_COUNTS))
        for n in names
        for v in _not_counts(COUNT_MINIMUMS[n])
    ],
)
def test_count_options_refuse_anything_but_a_whole_number_in_range(
    listener: Listener, make: Any, name: str, value: object
) -> None:
    # max_workers=0.5 used to pass here and fail at the first submit with a raw ValueError;
    # max_response_bytes=1.5 then refused every response as over a "1-byte limit".
    with pytest.raises(qa.InvalidOption, match=_count_refusal(name, value)):
        make(base_url=listener.url, **_one(name, value))
    assert listener.connections() == 0


@pytest.mark.parametrize("length", [58, 59], ids=["repr-60-chars", "repr-61-chars"])
def test_a_refused_value_is_quoted_whole_to_60_characters_then_cut(listener: Listener, length: int) -> None:
    # The message quotes the value's repr: whole up to 60 characters, else its first 57 and "...".
    given: Any = "x" * length
    shown = repr(given) if length == 58 else repr(given)[:57] + "..."
    with pytest.raises(qa.InvalidOption) as caught:
        qa.Client(base_url=listener.url, max_workers=given)
    assert str(caught.value) == f"max_workers must be a whole number >= 1, got {shown}"
    assert len(shown) == 60


# Seconds are bounded by what locks and sockets accept: _thread.TIMEOUT_MAX (a whole number).
MOST_SECONDS = _thread.TIMEOUT_MAX
PAST_MOST_SECONDS = [math.nextafter(MOST_SECONDS, math.inf), MOST_SECONDS + 1, 1e10, math.inf]


def _seconds_refusal(name: str, value: float, none_allowed: bool) -> str:
    unlimited = r" \(None for no limit\)" if none_allowed else ""
    most = f"at most {int(MOST_SECONDS)} seconds{unlimited}"
    return f"^{name} must be a finite number > 0 and {most}, got {re.escape(repr(value))}$"


@pytest.mark.parametrize("name", ["timeout", "idle_timeout"])
def test_seconds_options_at_their_limits_are_accepted(svc: FakeService, name: str) -> None:
    for value in (MOST_SECONDS, math.nextafter(0.0, 1.0)):
        qa.Client(base_url=svc.url, **_one(name, value)).close()
    with qa.Client(base_url=svc.url, **_one(name, MOST_SECONDS)) as client:
        assert isinstance(client.ask("x", Review).answers.toxic, bool)


@pytest.mark.parametrize(("name", "none_allowed"), [("timeout", True), ("idle_timeout", False)])
@pytest.mark.parametrize("value", PAST_MOST_SECONDS, ids=repr)
def test_seconds_options_over_the_limit_name_the_limit(
    listener: Listener, name: str, none_allowed: bool, value: float
) -> None:
    # The message used to say "a finite number > 0, got 10000000000.0": true of the value.
    with pytest.raises(qa.InvalidOption, match=_seconds_refusal(name, value, none_allowed)):
        qa.Client(base_url=listener.url, **_one(name, value))
    with pytest.raises(qa.InvalidOption, match=_seconds_refusal(name, value, none_allowed)):
        qa.AsyncClient(base_url=listener.url, **_one(name, value))
    assert listener.connections() == 0


@pytest.mark.parametrize("name", ["timeout", "idle_timeout"])
@pytest.mark.parametrize("value", [0, 0.0, -1, -math.inf, math.nan], ids=repr)
def test_seconds_options_at_or_under_zero_keep_the_short_message(
    listener: Listener, name: str, value: float
) -> None:
    # The upper bound is named only when the value is over it.
    with pytest.raises(
        qa.InvalidOption, match=f"^{name} must be a finite number > 0, got {re.escape(repr(value))}$"
    ):
        qa.Client(base_url=listener.url, **_one(name, value))
    assert listener.connections() == 0


def test_per_call_timeout_at_the_limit_is_accepted(svc: FakeService) -> None:
    with qa.Client(base_url=svc.url) as client:
        assert isinstance(client.ask("x", Review, timeout=MOST_SECONDS).answers.toxic, bool)


@pytest.mark.parametrize("operation", ["ask", "list_models"])
@pytest.mark.parametrize("value", PAST_MOST_SECONDS, ids=repr)
def test_per_call_timeout_over_the_limit_names_the_limit(
    listener: Listener, operation: str, value: float
) -> None:
    with qa.Client(base_url=listener.url, timeout=2.0) as client:
        calls: dict[str, Callable[[], object]] = {
            "ask": lambda: client.ask("x", Review, timeout=value),
            "list_models": lambda: client.list_models(timeout=value),
        }
        with pytest.raises(qa.InvalidOption, match=_seconds_refusal("timeout", value, True)):
            calls[operation]()
    assert listener.connections() == 0


# -- MissingApiKey and InvalidBaseUrl ----------------------------------------------------


PUBLIC_VARIANTS = [
    qa.PUBLIC_BASE_URL,
    qa.PUBLIC_BASE_URL + "/",
    qa.PUBLIC_BASE_URL.upper(),
    "HTTPS://API.QA-SERVICE.COM:443/",
    qa.PUBLIC_BASE_URL + ":443",
    qa.PUBLIC_BASE_URL.replace("https://", "HTTPS://"),
]


@pytest.mark.parametrize("url", PUBLIC_VARIANTS)
@pytest.mark.parametrize("via", ["argument", "environment"])
def test_missing_api_key_for_the_public_address(monkeypatch: pytest.MonkeyPatch, url: str, via: str) -> None:
    if via == "environment":
        monkeypatch.setenv("SERVICE_BASE_URL", url)
    base_url = url if via == "argument" else None
    with pytest.raises(qa.MissingApiKey) as caught:
        qa.Client(base_url=base_url)
    assert isinstance(caught.value, qa.QAError)
    assert "SERVICE_API_KEY" in str(caught.value) or "api_key" in str(caught.value)


def test_missing_api_key_for_the_default_address() -> None:
    with pytest.raises(qa.MissingApiKey):
        qa.Client()


@pytest.mark.parametrize("via", ["argument", "environment"])
def test_a_key_makes_the_public_address_acceptable(monkeypatch: pytest.MonkeyPatch, via: str) -> None:
    if via == "environment":
        monkeypatch.setenv("SERVICE_API_KEY", KEY)
        client = qa.Client(base_url="HTTPS://API.QA-SERVICE.COM:443/")
    else:
        client = qa.Client(api_key=KEY, base_url="HTTPS://API.QA-SERVICE.COM:443/")
    with client:
        assert client.base_url == qa.PUBLIC_BASE_URL


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080",
        "http://localhost",
        "https://qa.internal.example/prefix",
        "https://api.qa-service.com.example.org",
        "https://api.qa-service.com:8443",
    ],
    ids=["loopback", "localhost", "private-https", "lookalike-host", "other-port"],
)
def test_no_key_needed_for_other_addresses(url: str) -> None:
    with qa.Client(base_url=url) as client:
        assert client.base_url == url


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com",
        "file:///etc/passwd",
        "ws://example.com",
        "http://",
        "https:///only/a/path",
        "example.com",
        "127.0.0.1:8080",
        "not a url",
        "",
        "   ",
        "http://exa mple.com",
        "http://example.com:notaport",
        "http://[::1",
    ],
    ids=[
        "ftp",
        "file",
        "ws",
        "no-host",
        "path-only",
        "no-scheme",
        "host-port",
        "garbage",
        "empty",
        "blank",
        "space",
        "bad-port",
        "bad-ipv6",
    ],
)
def test_invalid_base_url(url: str) -> None:
    with pytest.raises(qa.InvalidBaseUrl) as caught:
        qa.Client(base_url=url, api_key=KEY)
    assert isinstance(caught.value, qa.QAError)


@pytest.mark.parametrize(
    "url", [42, b"http://example.com", ["http://example.com"]], ids=["int", "bytes", "list"]
)
def test_non_str_base_url_is_invalid_base_url(url: object) -> None:
    with pytest.raises(qa.InvalidBaseUrl):
        qa.Client(base_url=url, api_key=KEY)  # type: ignore[arg-type]


def test_invalid_base_url_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVICE_BASE_URL", "ftp://example.com")
    with pytest.raises(qa.InvalidBaseUrl):
        qa.Client(api_key=KEY)


def test_without_a_key_no_authorization_and_401_is_unauthorized() -> None:
    with FakeService(api_key=KEY) as service, qa.Client(base_url=service.url) as client:
        with pytest.raises(qa.Unauthorized) as caught:
            client.ask("x", Review)
        assert caught.value.status == 401
    assert "authorization" not in service.requests[0].headers
    assert len(service.requests) == 1  # 401 is not retried


# -- the key stays secret -------------------------------------------------------------------


def test_key_not_in_client_repr_or_str(svc: FakeService) -> None:
    with qa.Client(base_url=svc.url, api_key=KEY) as client:
        assert KEY not in repr(client)
        assert KEY not in str(client)


def _assert_hidden(exc: BaseException, diagnostics: qa.Diagnostics) -> None:
    assert KEY not in str(exc)
    assert KEY not in repr(exc)
    assert all(KEY not in str(arg) for arg in exc.args)
    assert KEY not in repr(diagnostics)
    assert KEY not in (diagnostics.body or "")
    assert KEY not in repr(diagnostics.transport_error)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422, 500])
def test_key_echoed_in_error_body_is_not_exposed(svc: FakeService, status: int) -> None:
    svc.script(
        reply(
            status, {"detail": f"bad credentials: Bearer {KEY}", "echo": {"authorization": f"Bearer {KEY}"}}
        )
    )
    diagnostics = qa.Diagnostics()
    with qa.Client(base_url=svc.url, api_key=KEY) as client, pytest.raises(qa.APIStatusError) as caught:
        client.ask("x", Review, retry=qa.RetryPolicy.none, diagnostics=diagnostics)
    _assert_hidden(caught.value, diagnostics)
    _assert_hidden(caught.value, caught.value.diagnostics)
    assert "bad credentials" in str(caught.value)  # the rest of the detail still helps


def test_key_echoed_json_escaped_in_error_body_is_not_exposed(svc: FakeService) -> None:
    # Base64-style keys contain "/", which PHP's json_encode (and others) write as "\/".
    key = "sk-ab/cd+ef/SECRET"
    escaped = key.replace("/", "\\/")
    body = '{"detail": "invalid key ' + escaped + '"}'
    svc.script(reply(401, body, headers=[("Content-Type", "application/json")]))
    diagnostics = qa.Diagnostics()
    with qa.Client(base_url=svc.url, api_key=key) as client, pytest.raises(qa.Unauthorized) as caught:
        client.ask("x", Review, diagnostics=diagnostics)
    assert key not in str(caught.value)
    assert key not in repr(diagnostics)


@pytest.mark.parametrize(
    "body",
    [
        f"Authorization: Bearer {KEY} (echoed by a misconfigured proxy)",
        {"answers": {"toxic": KEY}},
        {"answers": {"toxic": True}, "usage": KEY},
        {"models": KEY},
    ],
    ids=["non-json", "as-an-answer", "as-usage", "as-models"],
)
def test_key_echoed_in_a_2xx_body_is_not_exposed(svc: FakeService, body: object) -> None:
    svc.script(reply(200, body))
    diagnostics = qa.Diagnostics()
    with qa.Client(base_url=svc.url, api_key=KEY) as client:
        calls: dict[bool, Callable[[], object]] = {
            True: lambda: client.list_models(diagnostics=diagnostics),
            False: lambda: client.ask("x", Review, diagnostics=diagnostics),
        }
        with pytest.raises(qa.InvalidResponse) as caught:
            calls[isinstance(body, dict) and "models" in body]()
    _assert_hidden(caught.value, diagnostics)


def test_key_not_in_log_records(svc: FakeService, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="qa_min")
    svc.script(
        reply(503, {"detail": f"busy, key {KEY}"}),
        reply(401, {"detail": f"no such key {KEY}"}),
    )
    with qa.Client(base_url=svc.url, api_key=KEY, sleep=no_sleep) as client:
        with pytest.raises(qa.Unauthorized) as caught:
            client.ask("x", Review)
        client.ask("x", Review)
        client.list_models()
    records = [r for r in caplog.records if r.name == "qa_min" or r.name.startswith("qa_min.")]
    assert len(records) >= 4  # the attempts and the retry were logged: the check below means something
    for record in records:
        assert KEY not in record.getMessage()
        assert KEY not in repr(record.args)
        assert KEY not in (record.exc_text or "")
    assert KEY not in caplog.text
    assert KEY not in str(caught.value)


@pytest.mark.parametrize(
    "key",
    ["sk-SECRET\nX-Evil: 1", "sk-SECRET-€uro", "  "],
    ids=["newline", "non-latin1", "blank"],
)
def test_bad_key_errors_do_not_show_the_key(key: str) -> None:
    with pytest.raises(qa.InvalidOption) as caught:
        qa.Client(api_key=key, base_url="http://127.0.0.1:1")
    if key.strip():
        assert "SECRET" not in str(caught.value)
        assert "SECRET" not in repr(caught.value)


# -- NO_PROXY -------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ["{host}", "{host}:{port}", "example.com, {host}:{port}"])
def test_no_proxy_entries_match_as_urllib_matches_them(monkeypatch: pytest.MonkeyPatch, entry: str) -> None:
    # urllib matches NO_PROXY against the URL's host[:port]; a "host:port" entry was ignored
    # (the client asked with the bare host) and the request went to the proxy.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    with FakeService() as service, FakeService() as proxy:  # the proxy records what it is sent
        split = urllib.parse.urlsplit(service.url)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", entry.format(host=split.hostname, port=split.port))
        with qa.Client(base_url=service.url, retry=qa.RetryPolicy.none) as client:
            client.list_models()
        assert proxy.requests == []
        assert [r.path for r in service.requests] == ["/v1/models"]


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("entry", ["127.0.0.1:443", "example.com,127.0.0.1:443"])
def test_no_proxy_entry_naming_the_default_port_matches(
    monkeypatch: pytest.MonkeyPatch, entry: str, kind: str
) -> None:
    # "host:443" names https://host exactly, but the client asked urllib with "host" alone (the
    # default port left out), so the entry never matched and the call went through the proxy.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    with Proxy(refuse_connect=403) as proxy:  # records each CONNECT it is asked for
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", entry)
        options: dict[str, Any] = {"base_url": "https://127.0.0.1", "retry": qa.RetryPolicy.none}
        options["timeout"] = 5
        error: qa.QAError | None = None
        try:
            if kind == "sync":
                with qa.Client(**options) as client:
                    client.list_models()
            else:

                async def main() -> None:
                    async with qa.AsyncClient(**options) as aclient:
                        await aclient.list_models()

                asyncio.run(main())
        except qa.QAError as exc:
            error = exc
        assert proxy.seen == []
    # Straight to 127.0.0.1:443, where nothing serves the API: the service is the host named.
    assert isinstance(error, qa.ConnectionFailed), repr(error)
    assert not isinstance(error, qa.ProxyError), repr(error)
    assert str(error).startswith("https://127.0.0.1: "), str(error)


@pytest.mark.parametrize("blank", [" ", "\t", "  \n  "], ids=["space", "tab", "mixed"])
@pytest.mark.parametrize("variable", ["HTTP_PROXY", "ALL_PROXY", "http_proxy"])
def test_blank_proxy_variables_are_ignored(
    monkeypatch: pytest.MonkeyPatch, variable: str, blank: str
) -> None:
    # configuration.md: "empty or whitespace-only environment values are ignored". An empty
    # proxy variable was, but one of blanks was taken as the proxy's URL and refused:
    # InvalidOption "proxy from HTTP_PROXY must be an http(s) URL without spaces".
    monkeypatch.setenv(variable, blank)
    with FakeService() as service, qa.Client(base_url=service.url, retry=qa.RetryPolicy.none) as client:
        client.list_models()
        assert [r.path for r in service.requests] == ["/v1/models"]


# -- a bad value from the environment is reported under its variable's name ------------------


def test_a_bad_service_base_url_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    # The message said "base_url must be ...", to a caller who passed no base_url.
    monkeypatch.setenv("SERVICE_BASE_URL", "ftp://example.com")
    with pytest.raises(
        qa.InvalidBaseUrl, match=r"^base_url from SERVICE_BASE_URL must be an http or https URL"
    ):
        qa.Client(api_key=KEY)
    with pytest.raises(qa.InvalidBaseUrl, match=r"^base_url must be an http or https URL"):
        qa.Client(api_key=KEY, base_url="ftp://example.com")


@pytest.mark.parametrize(
    ("variable", "base_url", "value", "words"),
    [
        (
            "HTTP_PROXY",
            "http://api.example",
            "socks5://p:1080",
            "only http:// proxies are supported (proxy from HTTP_PROXY), got 'socks5://p:1080'",
        ),
        (
            "HTTPS_PROXY",
            "https://api.example",
            "http://p:notaport",
            "proxy from HTTPS_PROXY is not a valid URL",
        ),
        ("ALL_PROXY", "https://api.example", "http://p:3128?x", "proxy from ALL_PROXY must not have a query"),
    ],
)
def test_a_bad_proxy_variable_is_named(
    monkeypatch: pytest.MonkeyPatch, variable: str, base_url: str, value: str, words: str
) -> None:
    # The message said "proxy ...", to a caller who passed no proxy.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv(variable, value)
    with pytest.raises(qa.InvalidOption, match=f"^{re.escape(words)}"):
        qa.Client(api_key=KEY, base_url=base_url)
    with pytest.raises(qa.InvalidOption, match=r"^proxy (must|is not)|\(proxy\)"):
        qa.Client(api_key=KEY, base_url=base_url, proxy=value)


@pytest.mark.parametrize("make", [qa.Client, qa.AsyncClient], ids=["Client", "AsyncClient"])
@pytest.mark.parametrize("value", ["false", "no", "", 0, 1, None], ids=repr)
def test_trust_env_takes_a_bool_only(
    listener: Listener, monkeypatch: pytest.MonkeyPatch, make: Any, value: object
) -> None:
    # Read as a truth value, trust_env="false" read SERVICE_DEFAULT_MODEL and the proxy variables.
    monkeypatch.setenv("SERVICE_DEFAULT_MODEL", "judge-from-env")
    refused = f"^trust_env must be True or False, got {re.escape(repr(value))}$"
    with pytest.raises(qa.InvalidOption, match=refused):
        make(base_url=listener.url, trust_env=value)
    for trust_env, model in ((True, "judge-from-env"), (False, qa.DEFAULT_MODEL)):
        client = make(base_url=listener.url, trust_env=trust_env)
        assert client.model == model
        if isinstance(client, qa.Client):
            client.close()
    assert listener.connections() == 0

"""Headers: names in ``extra_headers`` are RFC 9110 tokens; values hold no control character but HTAB.

The same rule covers the API key, which travels in ``Authorization``. A header that breaks it is
``InvalidOption`` when the client is made, before any connection; messages never quote a value.
C0 controls (CR and LF included), DEL and the C1 controls 0x80-0x9F are refused (Python's own
``str.splitlines`` ends a line at 0x85); HTAB, space and the rest of latin-1 are allowed.

  test_every_token_character_is_accepted_and_sent, test_names_that_are_not_tokens_are_refused,
  test_value_control_characters_are_refused, test_value_tab_space_and_latin1_are_accepted,
  test_value_outside_latin1_is_refused_without_quoting_it,
  test_header_that_is_not_a_string_is_refused_without_quoting_it,
  test_extra_headers_of_the_wrong_shape_are_refused_without_quoting_them,
  test_extra_headers_cannot_set_the_fields_qa_min_frames_the_request_with,
  test_api_key_with_a_control_character_is_refused, test_api_key_with_a_tab_is_sent,
  test_api_key_a_header_cannot_carry_is_refused_naming_the_argument,
  test_api_key_from_the_environment_a_header_cannot_carry_is_named_as_the_variable,
  test_api_key_with_latin1_next_to_the_refused_characters_is_sent
"""

from __future__ import annotations

import pytest
from support import Listener, make_client

import qa_min as qa
from qa_min.testing import FakeService

TCHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
SEPARATORS = '"(),/:;<=>?@[\\]{} \t'
FORBIDDEN_IN_VALUES = [chr(c) for c in [*range(0x00, 0x09), *range(0x0A, 0x20), 0x7F, *range(0x80, 0xA0)]]


def test_every_token_character_is_accepted_and_sent(svc: FakeService) -> None:
    with make_client(svc.url, extra_headers=[(TCHARS, "v")]) as client:
        client.list_models()
    assert svc.requests[0].headers[TCHARS.lower()] == "v"


@pytest.mark.parametrize(
    "name",
    ["", *[f"X{c}Name" for c in SEPARATORS], "X-\x7f", "X-\x00", "X-\u00e9", "X-\u20ac", "X-Name\r\nX-Evil"],
    ids=repr,
)
def test_names_that_are_not_tokens_are_refused(listener: Listener, name: str) -> None:
    with pytest.raises(qa.InvalidOption) as caught:
        qa.Client(base_url=listener.url, extra_headers=[(name, "value")], trust_env=False)
    assert "RFC 9110 token" in str(caught.value)
    assert listener.connections() == 0


@pytest.mark.parametrize("char", FORBIDDEN_IN_VALUES, ids=lambda c: f"U+{ord(c):04X}")
def test_value_control_characters_are_refused(listener: Listener, char: str) -> None:
    with pytest.raises(qa.InvalidOption) as caught:
        qa.Client(base_url=listener.url, extra_headers=[("X-Token", f"secret{char}value")], trust_env=False)
    assert str(caught.value) == "the value of header 'X-Token' has a control character (only HTAB is allowed)"
    assert "secret" not in str(caught.value)
    assert caught.value.__context__ is None
    assert listener.connections() == 0


@pytest.mark.parametrize(
    "value", ["a\tb", "\ttab first", "with space", "\xa0nbsp", "\xff", "caf\xe9", "~!@#$%^&*()"]
)
def test_value_tab_space_and_latin1_are_accepted(svc: FakeService, value: str) -> None:
    with make_client(svc.url, extra_headers=[("X-Value", value)]) as client:
        client.list_models()
    assert svc.requests[0].headers["x-value"] == value.strip(" \t")  # the server trims, as RFC 9110 says


@pytest.mark.parametrize("value", ["\u0100", "\u20ac", "\U0001f642"])
def test_value_outside_latin1_is_refused_without_quoting_it(listener: Listener, value: str) -> None:
    with pytest.raises(qa.InvalidOption) as caught:
        qa.Client(base_url=listener.url, extra_headers=[("X-Value", f"secret{value}")], trust_env=False)
    assert str(caught.value) == "the value of header 'X-Value' is not latin-1"  # named, never quoted
    assert "secret" not in repr(caught.value)
    assert caught.value.__context__ is None


@pytest.mark.parametrize(
    ("name", "value"), [(b"X-Bytes", "v"), ("X-Bytes", b"secret")], ids=["name", "value"]
)
def test_header_that_is_not_a_string_is_refused_without_quoting_it(
    listener: Listener, name: object, value: object
) -> None:
    with pytest.raises(qa.InvalidOption, match=r"pair of strings, got \((bytes, str|str, bytes)\)") as caught:
        qa.Client(base_url=listener.url, extra_headers=[(name, value)], trust_env=False)  # type: ignore[list-item]
    assert "secret" not in str(caught.value)


@pytest.mark.parametrize(
    ("extra", "shape"),
    [
        ("X-Token: secret", "^extra_headers must be a sequence of (name, value) pairs, got str$"),
        (["X-Token: secret"], "^extra_headers items are (name, value) pairs, got str$"),
        ([("X-Token: secret",)], "^extra_headers items are (name, value) pairs, got tuple of 1 items$"),
        ([["X-Token", "secret", "x"]], "^extra_headers items are (name, value) pairs, got list of 3 items$"),
    ],
    ids=["one string", "a string item", "one item", "three items"],
)
def test_extra_headers_of_the_wrong_shape_are_refused_without_quoting_them(
    listener: Listener, extra: object, shape: str
) -> None:
    # "Name: value" strings are a common slip; the message quoted them, a token and all.
    with pytest.raises(qa.InvalidOption, match=shape.replace("(", r"\(").replace(")", r"\)")) as caught:
        qa.Client(base_url=listener.url, extra_headers=extra, trust_env=False)  # type: ignore[arg-type]
    assert "secret" not in str(caught.value)
    assert listener.connections() == 0
    # Two items, the shape of a pair, are taken.
    qa.Client(base_url=listener.url, extra_headers=[["X-Token", "secret"]], trust_env=False).close()  # type: ignore[list-item]


# Any case: each is refused as the name is written, lowered only to compare.
FRAMING = ["Host", "content-length", "Transfer-Encoding", "CONNECTION", "Content-Type"]


@pytest.mark.parametrize("name", FRAMING)
def test_extra_headers_cannot_set_the_fields_qa_min_frames_the_request_with(
    listener: Listener, name: str
) -> None:
    # A second Transfer-Encoding or Connection would change how the server reads the request.
    with pytest.raises(qa.InvalidOption) as caught:
        qa.Client(base_url=listener.url, extra_headers=[(name, "secret")], trust_env=False)
    assert str(caught.value) == f"extra_headers must not set {name!r}: qa_min sets it"
    assert listener.connections() == 0


@pytest.mark.parametrize("char", ["\x00", "\x08", "\n", "\r", "\x1f", "\x7f", "\x85", "\x9f"], ids=repr)
def test_api_key_with_a_control_character_is_refused(listener: Listener, char: str) -> None:
    key = f"sk-SECRET{char}0123"
    with pytest.raises(qa.InvalidOption) as caught:
        qa.Client(base_url=listener.url, api_key=key, trust_env=False)
    assert "SECRET" not in str(caught.value)
    assert "SECRET" not in repr(caught.value)
    assert listener.connections() == 0


def test_api_key_with_a_tab_is_sent() -> None:
    with FakeService(api_key="sk-a\tb") as svc, make_client(svc.url, api_key="sk-a\tb") as client:
        client.list_models()
    assert svc.requests[0].headers["authorization"] == "Bearer sk-a\tb"


LATIN1_ONLY = "a header carries latin-1 text only"
KEY_REFUSALS = [
    ("\n", "a control character (U+000A)", "a header value may hold none but HTAB"),
    ("\x9f", "a control character (U+009F)", "a header value may hold none but HTAB"),
    ("\u0100", "a character outside latin-1 (U+0100)", LATIN1_ONLY),
    ("\u20ac", "a character outside latin-1 (U+20AC)", LATIN1_ONLY),
    ("\U0001f642", "a character outside latin-1 (U+1F642)", LATIN1_ONLY),
    ("\ud800", "a surrogate (U+D800)", f"what bytes that do not decode become; {LATIN1_ONLY}"),
    ("\udce9", "a surrogate (U+DCE9)", f"what bytes that do not decode become; {LATIN1_ONLY}"),
    # The surrogates' range at each end, and one past it on either side.
    ("\ud7ff", "a character outside latin-1 (U+D7FF)", LATIN1_ONLY),
    ("\udfff", "a surrogate (U+DFFF)", f"what bytes that do not decode become; {LATIN1_ONLY}"),
    ("\ue000", "a character outside latin-1 (U+E000)", LATIN1_ONLY),
]


@pytest.mark.parametrize(
    ("char", "kind", "why"), KEY_REFUSALS, ids=[f"U+{ord(c):04X}" for c, *_ in KEY_REFUSALS]
)
def test_api_key_a_header_cannot_carry_is_refused_naming_the_argument(
    listener: Listener, char: str, kind: str, why: str
) -> None:
    # Named as api_key, not as the Authorization header the caller never wrote; never quoted.
    with pytest.raises(qa.InvalidOption) as caught:
        qa.Client(base_url=listener.url, api_key=f"sk-SECRET{char}0123", trust_env=False)
    assert str(caught.value) == f"api_key holds {kind} at index 9: {why}"
    assert "SECRET" not in repr(caught.value)
    assert caught.value.__context__ is None
    assert listener.connections() == 0


@pytest.mark.parametrize(
    ("char", "kind", "why"),
    [KEY_REFUSALS[0], KEY_REFUSALS[3], KEY_REFUSALS[6]],
    ids=["U+000A", "U+20AC", "U+DCE9"],
)
def test_api_key_from_the_environment_a_header_cannot_carry_is_named_as_the_variable(
    listener: Listener, monkeypatch: pytest.MonkeyPatch, char: str, kind: str, why: str
) -> None:
    # "\udce9" is how os.environ reads the byte 0xE9 that does not decode as UTF-8.
    monkeypatch.setenv("SERVICE_API_KEY", f"sk-SECRET{char}0123")
    with pytest.raises(qa.InvalidOption) as caught:
        qa.Client(base_url=listener.url)
    assert str(caught.value) == f"SERVICE_API_KEY holds {kind} at index 9: {why}"
    assert "SECRET" not in repr(caught.value)
    assert listener.connections() == 0


@pytest.mark.parametrize("char", ["\xa0", "\xe9", "\xff", " ", "~"], ids=repr)
def test_api_key_with_latin1_next_to_the_refused_characters_is_sent(char: str) -> None:
    key = f"sk-a{char}b"
    with FakeService(api_key=key) as svc, make_client(svc.url, api_key=key) as client:
        client.list_models()
    assert svc.requests[0].headers["authorization"] == f"Bearer {key}"

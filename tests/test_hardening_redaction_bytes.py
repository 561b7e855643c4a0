"""The key in bytes a server sent, held by a transport error's args or attributes, not its text.

A 2xx whose ``Content-Length`` promises more than the server sends ends in a transport error
(qa_min's reader keeps no partial body in it, only a byte count). The body echoes the key: it
must be hidden from ``diagnostics.transport_error`` (str, repr, args, attributes) and from every
pickle of the error, as bytes, latin-1 and UTF-8. The check is generic: any exception whose
args or attributes hold the key, as str or bytes, is replaced by a redacted stand-in.

  truncated 2xx echoing the key .. test_a_truncated_success_body_echoing_the_key_is_held_nowhere
  args and attributes ............ test_any_exception_holding_the_key_in_its_args_is_replaced
  nothing to hide ................ test_a_truncated_body_without_the_key_keeps_the_original_error
"""

from __future__ import annotations

import logging
import pickle
from typing import Any

import pytest
from faultservers import RawServer, answer_once
from support import make_recording_client
from test_hardening_redaction import ECHOES, KEY, assert_hidden, chain, pieces, texts_of

import qa_min as qa
from qa_min._diagnostics import _StandIn
from qa_min._messages import Messages
from qa_min._redact import Redactor

echoes = pytest.mark.parametrize(("key", "echo"), [e[:2] for e in ECHOES], ids=[e[2] for e in ECHOES])


def truncated(body: bytes, promised: int) -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {promised}\r\n\r\n"
    return head.encode("latin-1") + body


def byte_forms(key: str) -> set[bytes]:
    """Every piece of the key as bytes on the wire or in a pickle: UTF-8 and latin-1."""
    found = {p.encode("utf-8") for p in pieces(key)}
    for piece in pieces(key):
        try:
            found.add(piece.encode("latin-1"))
        except UnicodeEncodeError:
            pass
    return found


def held_values(exc: BaseException) -> list[Any]:
    """What pickle stores of an exception: its args and its attributes, flattened one level."""
    values: list[Any] = list(exc.args) + list(getattr(exc, "__dict__", {}).values())
    return [v for value in values for v in (value if isinstance(value, (tuple, list)) else [value])]


def assert_no_bytes_of(key: str, error: BaseException) -> None:
    blobs = [pickle.dumps(error, protocol) for protocol in range(pickle.HIGHEST_PROTOCOL + 1)]
    for node in chain(error):
        blobs += [bytes(v) for v in held_values(node) if isinstance(v, (bytes, bytearray))]
        texts = [v for v in held_values(node) if isinstance(v, str)]
        blobs += [t.encode("utf-8") for t in texts]
    leaks = sorted({form for form in byte_forms(key) for blob in blobs if form in blob})
    assert not leaks, f"pieces of the key leaked as bytes: {leaks[:5]}"


@pytest.fixture(autouse=True)
def _debug_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="qa_min")


@echoes
def test_a_truncated_success_body_echoing_the_key_is_held_nowhere(
    caplog: pytest.LogCaptureFixture, key: str, echo: str
) -> None:
    body = b'{"answers": {"toxic": true}, "echo": "' + echo.encode("utf-8") + b'", "more'
    with RawServer(answer_once(truncated(body, len(body) + 100))) as server:
        diag = qa.Diagnostics()
        client = make_recording_client(server.url, api_key=key, retry=qa.RetryPolicy.none)
        with client, pytest.raises(qa.ConnectionFailed) as caught:
            client.list_models(diagnostics=diag)
    error = caught.value
    held = diag.transport_error
    assert held is not None
    assert error.__cause__ is held
    # qa_min's reader keeps no partial body in its errors, only how much is missing.
    assert type(held) is qa.IncompleteMessage
    assert "100 bytes of the body missing" in str(held)
    assert_hidden(key, texts_of(error, diag, *held_values(held)), caplog)
    assert_no_bytes_of(key, error)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        again = pickle.loads(pickle.dumps(error, protocol))
        assert repr(again.diagnostics.transport_error) == repr(held)


class Holder(Exception):
    """Text without the key; the key only in args and an attribute, as bytes or str."""

    def __init__(self, data: object) -> None:
        super().__init__(data)
        self.data = data

    def __str__(self) -> str:
        return "Holder(something)"

    __repr__ = __str__


LATIN = "sk-caf\xe9-cr\xe8me-0123456789"


@pytest.mark.parametrize(
    ("key", "data"),
    [
        (KEY, KEY.encode()),
        (KEY, bytearray(KEY[3:15].encode())),
        (KEY, ("ok", [b"x" + KEY[:9].encode()])),
        (KEY, KEY[5:30]),
        (LATIN, LATIN.encode("latin-1")),
        (LATIN, LATIN.encode("utf-8")[2:16]),
    ],
    ids=["bytes", "bytearray-piece", "nested", "str", "latin-1", "utf-8-piece"],
)
def test_any_exception_holding_the_key_in_its_args_is_replaced(key: str, data: object) -> None:
    messages = Messages(Redactor(key), "http://service.test", None)
    safe = messages.safe(Holder(data))
    assert type(safe) is _StandIn
    assert repr(safe) == "Holder('Holder(something)')"
    assert_no_bytes_of(key, safe)
    assert messages.safe(Holder(b"nothing of it")).args == (b"nothing of it",)  # kept as it is


def test_a_truncated_body_without_the_key_keeps_the_original_error() -> None:
    body = b'{"answers": {"toxic": true}, "note": "nothing secret'
    with RawServer(answer_once(truncated(body, len(body) + 100))) as server:
        client = make_recording_client(server.url, api_key=KEY, retry=qa.RetryPolicy.none)
        with client, pytest.raises(qa.ConnectionFailed) as caught:
            client.list_models()
    original = caught.value.diagnostics.transport_error
    assert original is not None
    assert type(original) is qa.IncompleteMessage  # the reader's own error, not a stand-in
    assert not any(isinstance(v, (bytes, bytearray)) for v in held_values(original))  # no body held

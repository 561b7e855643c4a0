"""qa_min reads response heads itself; its header fields are the ones ``http.client`` would give.

``_response`` replaced ``http.client`` (and the ``email`` parser behind it) so that a cold start
loads neither. For every head the reader accepts, the (name, value) pairs, lookups and
``get_all`` agree with ``http.client.parse_headers``: folded lines, blanks around values,
repeated names, any case, Latin-1 bytes; random heads checked by Hypothesis. Its protocol
errors carry http.client's names and words, and survive pickling.
"""

from __future__ import annotations

import http.client
import io
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qa_min import _response
from qa_min._response import read_head

pytestmark = pytest.mark.timeout(60)


def ours(fields: bytes) -> list[tuple[str, str]]:
    head = read_head(io.BufferedReader(io.BytesIO(b"HTTP/1.1 200 OK\r\n" + fields + b"\r\n")))
    return list(head.headers.items())


def theirs(fields: bytes) -> list[tuple[str, str]]:
    return list(http.client.parse_headers(io.BytesIO(fields + b"\r\n")).items())


HEADS = [
    b"Content-Length: 12\r\n",
    b"content-length:12\r\nX-Empty:\r\nX-Blank:   \r\n",
    b"X-Tab:\tvalue\t\r\nX-Spaces:  a  b  \r\n",
    b"Set-Cookie: a=1\r\nset-cookie: b=2\r\nSET-COOKIE: c=3\r\n",
    b"X-Folded: first\r\n second\r\n\tthird\r\nX-After: yes\r\n",
    b"X-Latin: caf\xe9 \xff\r\n",
    b"X-Colons: a:b:c\r\nX-Bare-LF: yes\n",
    b"Retry-After: 1\r\nretry-after-ms: 250.5\r\nRequest-Id: req_1\r\n",
]


@pytest.mark.parametrize("fields", HEADS)
def test_fields_are_the_ones_http_client_gives(fields: bytes) -> None:
    assert ours(fields) == theirs(fields)


def test_lookups_ignore_case_and_get_all_keeps_order() -> None:
    fields = b"Set-Cookie: a=1\r\nX-One: 1\r\nset-cookie: b=2\r\n"
    head = read_head(io.BufferedReader(io.BytesIO(b"HTTP/1.1 200 OK\r\n" + fields + b"\r\n")))
    message = http.client.parse_headers(io.BytesIO(fields + b"\r\n"))
    for name in ("set-cookie", "SET-COOKIE", "x-one", "missing"):
        assert head.headers.get(name) == message.get(name)
        assert head.headers.get_all(name) == (message.get_all(name) or [])
        assert (name in head.headers) == (name in message)


NAME = st.text(
    alphabet="!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    min_size=1,
    max_size=12,
)
VALUE = st.binary(max_size=30).map(lambda b: bytes(c for c in b if c not in b"\r\n"))
LINE = st.one_of(
    st.tuples(NAME, VALUE).map(lambda nv: nv[0].encode() + b":" + nv[1] + b"\r\n"),
    st.tuples(st.sampled_from([b" ", b"\t"]), VALUE).map(lambda fv: fv[0] + fv[1] + b"\r\n"),
)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.tuples(NAME, VALUE), st.lists(LINE, max_size=8))
def test_random_heads_agree_with_http_client(first: tuple[str, bytes], rest: list[bytes]) -> None:
    fields = first[0].encode() + b":" + first[1] + b"\r\n" + b"".join(rest)
    assert ours(fields) == theirs(fields)


ERRORS = [
    (_response.BadStatusLine("HELLO"), http.client.BadStatusLine("HELLO")),
    (_response.BadStatusLine(""), http.client.BadStatusLine("")),
    (_response.LineTooLong("header line"), http.client.LineTooLong("header line")),
    (_response.RemoteDisconnected("closed"), http.client.RemoteDisconnected("closed")),
    (_response.IncompleteRead(b"{", 10), http.client.IncompleteRead(b"{", 10)),
    (_response.IncompleteRead(b"ab"), http.client.IncompleteRead(b"ab")),
]


@pytest.mark.parametrize(("mine", "stdlib"), ERRORS, ids=lambda e: type(e).__name__)
def test_protocol_errors_read_as_http_clients_and_survive_pickling(
    mine: Exception, stdlib: Exception
) -> None:
    assert type(mine).__name__ == type(stdlib).__name__
    assert str(mine) == str(stdlib)
    copy = pickle.loads(pickle.dumps(mine))
    assert type(copy) is type(mine)
    assert str(copy) == str(mine)
    assert isinstance(mine, _response.HTTPException)
    assert isinstance(_response.RemoteDisconnected(), ConnectionResetError)

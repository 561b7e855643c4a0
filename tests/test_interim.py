"""Interim 1xx responses before the final one are skipped (RFC 9110 §15.2); 101 is final.

Each test serves exact bytes from a raw socket, so the interim heads arrive as a real server
(or a proxy adding ``103 Early Hints``) would send them.
"""

from __future__ import annotations

import pytest
from faultservers import respond_sequence, slow_bytes
from rawhttp import BODY_FALSE, ask, call_once, interim, response, serving

import qa_min as qa

MAX_INTERIM = 32  # documented in the README: "What qa_min promises about bad servers"


@pytest.mark.parametrize(
    "head",
    [
        interim("100 Continue"),
        interim("102 Processing"),
        interim("103 Early Hints", ["Link: </style.css>; rel=preload; as=style"]),
        interim("199 Something New", ["X-Note: unknown interim statuses are skipped too"]),
        interim("100"),  # no reason phrase
    ],
    ids=["100", "102", "103", "199-unknown", "no-reason"],
)
def test_interim_response_before_the_final_one_is_skipped(head: bytes) -> None:
    outcome = call_once(head + response(body=BODY_FALSE))
    assert outcome.error is None, repr(outcome.error)
    assert outcome.answer is False
    assert outcome.diagnostics.status == 200
    assert outcome.diagnostics.attempts == 1


def test_several_interim_responses_in_a_row_are_skipped() -> None:
    heads = (
        interim("100 Continue") + interim("103 Early Hints", ["Link: </a>"]) * 3 + interim("102 Processing")
    )
    outcome = call_once(heads + response(body=BODY_FALSE))
    assert outcome.error is None, repr(outcome.error)
    assert outcome.answer is False


def test_interim_responses_arriving_one_byte_at_a_time_are_skipped() -> None:
    data = interim("103 Early Hints", ["Link: </a>"]) + interim("100 Continue") + response(body=BODY_FALSE)
    with serving(slow_bytes(data, interval=0.0)) as (_, client):
        answer, error, diag = ask(client)
    assert error is None, repr(error)
    assert answer is False
    assert diag.status == 200


def test_final_error_status_after_interim_responses_is_that_status() -> None:
    body = b'{"detail": "slow down"}'
    outcome = call_once(interim("103 Early Hints") + response("429 Too Many Requests", body=body))
    assert type(outcome.error) is qa.RateLimited
    assert outcome.diagnostics.status == 429
    assert outcome.diagnostics.body == body.decode()
    assert "slow down" in str(outcome.error)


def test_connection_stays_reusable_after_interim_responses() -> None:
    exchange = interim("103 Early Hints") + response(body=BODY_FALSE)
    with serving(respond_sequence(exchange, exchange)) as (server, client):
        first = ask(client)
        second = ask(client)
        assert client._transport.pool.idle_count() == 1
    assert (first[0], second[0]) == (False, False)
    assert server.connections == 1


@pytest.mark.parametrize(("count", "accepted"), [(MAX_INTERIM, True), (MAX_INTERIM + 1, False)])
def test_interim_responses_are_skipped_up_to_the_limit(count: int, accepted: bool) -> None:
    outcome = call_once(interim("103 Early Hints") * count + response(body=BODY_FALSE))
    if accepted:
        assert outcome.error is None, repr(outcome.error)
        assert outcome.answer is False
    else:
        # An endless stream of interim heads is not an answer, and must not hold the call forever.
        assert type(outcome.error) is qa.ConnectionFailed
        assert f"more than {MAX_INTERIM} interim responses" in str(outcome.error)
        assert outcome.diagnostics.status is None


def test_switching_protocols_is_an_unexpected_status_and_the_connection_is_dropped() -> None:
    data = response(
        "101 Switching Protocols", ["Upgrade: websocket", "Connection: Upgrade"], b"", length=None
    )
    outcome = call_once(data + b"\x81\x05hello", retry=None)
    assert type(outcome.error) is qa.UnexpectedStatus
    assert isinstance(outcome.error, qa.APIStatusError)
    assert outcome.error.status == 101
    assert "HTTP 101" in str(outcome.error)
    assert outcome.diagnostics.status == 101
    assert outcome.diagnostics.attempts == 1  # not retried, even with the default policy
    assert outcome.idle == 0  # whatever follows on that connection is another protocol


def test_connection_closed_after_an_interim_response_is_a_connection_failure() -> None:
    outcome = call_once(interim("100 Continue"))
    assert type(outcome.error) is qa.ConnectionFailed
    assert "after an interim response" in str(outcome.error)
    assert outcome.diagnostics.status is None

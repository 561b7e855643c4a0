"""A response whose head was read and whose body was then refused or cut off keeps its head, in
both clients.

The body refused by the reader (a malformed chunk size, a body over ``max_response_bytes``
announced or growing, a Content-Length body cut short, a bad trailer section), or cut off by a
connection reset or by the call's timeout, ends the call with the error ``docs/bad-servers.md``
names for it; what the head said still reaches the call:

  ``Diagnostics.status``, ``request_id`` and ``headers`` are the head's, the message ends with
  ``(request id …)``, the attempt's history record and the after-attempt hook carry its status
  and request id, and the connection is not pooled
      test_a_refused_body_keeps_the_heads_status_headers_and_request_id
      test_a_body_cut_off_by_a_reset_or_the_timeout_keeps_the_heads_status_headers_and_request_id
  a truncated or reset body is still retried, each attempt recorded with its own head
      test_a_truncated_body_is_retried_each_attempt_with_its_own_head
  a header that echoes the key is redacted wherever the head goes (Diagnostics, the error,
  the hook's event, the transport error, pickled or not)
      test_the_key_echoed_in_a_refused_responses_head_never_shows
  ``MockTransport`` refuses a 2xx over the cap with its head too, as a socket would
      test_a_mocked_2xx_over_the_cap_keeps_its_head_as_over_a_socket
"""

from __future__ import annotations

import asyncio
import pickle
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
from faultservers import Handler, RawServer, answer_once, answer_then_reset, respond_sequence
from rawhttp import BODY_TRUE, Toxic, chunked, chunked_response, response
from support import no_sleep

import qa_min as qa
from qa_min.testing import MockTransport, reply

pytestmark = pytest.mark.timeout(30)

CAP = 1000
RID = "req_X"
CALL_TIMEOUT = 10.0  # a call that waited for more bytes would fail here, not hang the suite
# The call's timeout that a body stalled after its head runs into. Its length proves nothing (the
# server sends no more until it stops), so it is short, yet leaves the head ample time to arrive.
SHORT_TIMEOUT = 0.2
JSON = "Content-Type: application/json"
EXTRA = ("x-ratelimit-remaining: 7",)


def heads(id_field: str = "request-id", rid: str = RID) -> list[str]:
    return [f"{id_field}: {rid}", *EXTRA]


@dataclass(frozen=True)
class Case:
    name: str
    data: bytes
    error: type[qa.QAError]
    words: tuple[str, ...]
    id_field: str = "request-id"


CASES = [
    Case(
        "malformed-chunk-size",
        chunked_response(b"zz\r\n" + BODY_TRUE, headers=heads()),
        qa.InvalidResponse,
        ("malformed", "bad chunk size line"),
    ),
    Case(
        "content-length-over-cap",
        response(headers=[JSON, *heads()], body=b"{" + b" " * CAP + b"}"),
        qa.InvalidResponse,
        (f"has {CAP + 2} bytes", f"over the {CAP}-byte limit"),
    ),
    Case(
        "chunked-over-cap",
        chunked_response(chunked(b"{" + b" " * CAP + b"}", sizes=[500]), headers=heads()),
        qa.InvalidResponse,
        (f"over the {CAP}-byte limit",),
    ),
    Case(
        "truncated-content-length",
        response(headers=[JSON, *heads()], body=BODY_TRUE[:10], length="100"),
        qa.ConnectionFailed,
        ("IncompleteMessage", "90 bytes of the body missing"),
    ),
    Case(
        "bad-trailer-section",
        chunked_response(chunked(BODY_TRUE, trailers=[b"not a field"]), headers=heads("x-request-id")),
        qa.InvalidResponse,
        ("malformed", "not a header field"),
        id_field="x-request-id",
    ),
]


@dataclass
class Outcome:
    error: qa.QAError
    diagnostics: qa.Diagnostics
    events: list[qa.HookEvent] = field(default_factory=list)
    # Each event's error as the hook saw it, pickled then: a retried or failing attempt's error
    # before the call filled its Diagnostics.
    seen: list[bytes] = field(default_factory=list)
    idle: int = -1  # connections left idle in the pool after the call
    connections: int = 0


def recording() -> tuple[Outcome, dict[str, list[Callable[[qa.HookEvent], None]]]]:
    """An outcome to fill, and the after-attempt hook that records into it."""
    outcome = Outcome(qa.QAError("no error"), qa.Diagnostics())

    def after(event: qa.HookEvent) -> None:
        outcome.events.append(event)
        outcome.seen.append(pickle.dumps(event.error))

    return outcome, {"after_attempt": [after]}


def call_sync(handler: Handler, timeout: float = CALL_TIMEOUT, **options: Any) -> Outcome:
    outcome, hooks = recording()
    with RawServer(handler) as server:
        client = qa.Client(
            base_url=server.url,
            trust_env=False,
            sleep=no_sleep,
            hooks=hooks,
            **options,
        )
        with client:
            diag = qa.Diagnostics()
            with pytest.raises(qa.QAError) as caught:
                client.ask("some text", Toxic, diagnostics=diag, timeout=timeout)
            idle = client._transport.pool.idle_count()
    outcome.error, outcome.diagnostics, outcome.idle = caught.value, diag, idle
    outcome.connections = server.connections
    return outcome


def call_async(handler: Handler, timeout: float = CALL_TIMEOUT, **options: Any) -> Outcome:
    outcome, hooks = recording()

    async def no_wait(seconds: float) -> None:
        pass

    async def main() -> None:
        async with qa.AsyncClient(
            base_url=server.url, trust_env=False, sleep=no_wait, hooks=hooks, **options
        ) as client:
            diag = qa.Diagnostics()
            with pytest.raises(qa.QAError) as caught:
                await client.ask("some text", Toxic, diagnostics=diag, timeout=timeout)
            idle = client._transport.pool.idle_count()  # type: ignore[union-attr]
        outcome.error, outcome.diagnostics, outcome.idle = caught.value, diag, idle

    with RawServer(handler) as server:
        asyncio.run(main())
    outcome.connections = server.connections
    return outcome


RUNNERS: dict[str, Callable[..., Outcome]] = {"Client": call_sync, "AsyncClient": call_async}


def assert_head_kept(
    outcome: Outcome,
    error_class: type[qa.QAError],
    words: tuple[str, ...],
    status: int = 200,
    id_field: str = "request-id",
) -> None:
    """The call ended in ``error_class`` (its message holding ``words``) after one attempt, and
    the head it came after reached the error, Diagnostics, the history and the hook."""
    error, diag = outcome.error, outcome.diagnostics
    assert type(error) is error_class, repr(error)
    assert error.diagnostics is diag
    for word in words:
        assert word in str(error), str(error)
    assert str(error).endswith(f"(request id {RID})"), str(error)

    assert diag.status == status
    assert diag.request_id == RID
    assert diag.headers is not None
    assert diag.headers[id_field] == RID
    assert diag.headers["X-RateLimit-Remaining"] == "7"  # any case, as for any response
    assert (id_field, RID) in diag.headers.items()

    assert diag.attempts == 1
    [attempt] = diag.history
    assert (attempt.number, attempt.status, attempt.error, attempt.request_id) == (
        1,
        status,
        error_class.__name__,
        RID,
    )
    [event] = outcome.events  # the hooks see the attempt as the history records it
    assert (event.attempt, event.status, type(event.error), event.request_id) == (1, status, error_class, RID)

    assert outcome.idle == 0  # a connection whose body was refused or cut off is never pooled
    assert outcome.connections == 1


@pytest.mark.parametrize("kind", list(RUNNERS))
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_refused_body_keeps_the_heads_status_headers_and_request_id(case: Case, kind: str) -> None:
    outcome = RUNNERS[kind](answer_once(case.data), retry=qa.RetryPolicy.none, max_response_bytes=CAP)
    assert_head_kept(outcome, case.error, case.words, id_field=case.id_field)


def truncated(rid: str = RID, status: str = "200 OK") -> bytes:
    return response(status, headers=[JSON, *heads(rid=rid)], body=BODY_TRUE[:10], length="100")


def stalled(data: bytes) -> Handler:
    """Send ``data``, then nothing more until the server stops: the call's timeout ends it."""
    return answer_once(data, stall=CALL_TIMEOUT)


@dataclass(frozen=True)
class CutOff:
    name: str
    handler: Handler
    error: type[qa.QAError]
    words: tuple[str, ...]
    timeout: float = CALL_TIMEOUT
    status: int = 200


TIMED_OUT = (f"the call's timeout of {SHORT_TIMEOUT:g} s expired",)
CUT_OFF = [
    CutOff(
        "reset-in-a-length-body",
        answer_then_reset(truncated()),
        qa.ConnectionFailed,
        ("ConnectionResetError",),
    ),
    CutOff(
        "reset-in-a-chunked-body",
        answer_then_reset(chunked_response(b"%x\r\n%s" % (len(BODY_TRUE), BODY_TRUE[:10]), headers=heads())),
        qa.ConnectionFailed,
        ("ConnectionResetError",),
    ),
    CutOff("timeout-in-the-body", stalled(truncated()), qa.Canceled, TIMED_OUT, SHORT_TIMEOUT),
    # Not only a 2xx: a non-2xx body the deadline cut off is a Canceled too, after that head.
    CutOff(
        "timeout-in-a-503-body",
        stalled(truncated(status="503 Service Unavailable")),
        qa.Canceled,
        TIMED_OUT,
        SHORT_TIMEOUT,
        status=503,
    ),
]


@pytest.mark.parametrize("kind", list(RUNNERS))
@pytest.mark.parametrize("case", CUT_OFF, ids=[c.name for c in CUT_OFF])
def test_a_body_cut_off_by_a_reset_or_the_timeout_keeps_the_heads_status_headers_and_request_id(
    case: CutOff, kind: str
) -> None:
    outcome = RUNNERS[kind](case.handler, timeout=case.timeout, retry=qa.RetryPolicy.none)
    assert_head_kept(outcome, case.error, case.words, status=case.status)
    if case.error is qa.ConnectionFailed:
        assert isinstance(outcome.diagnostics.transport_error, ConnectionResetError)
    else:
        assert outcome.diagnostics.transport_error is None


# A body cut short (the server closed) or reset after its head: a connection failure, retried.
CUTS: dict[str, tuple[Callable[[bytes], Handler], type[BaseException]]] = {
    "truncated": (answer_once, qa.IncompleteMessage),
    "reset": (answer_then_reset, ConnectionResetError),
}


@pytest.mark.parametrize("kind", list(RUNNERS))
@pytest.mark.parametrize("cut", list(CUTS))
def test_a_truncated_or_reset_body_is_retried_each_attempt_with_its_own_head(cut: str, kind: str) -> None:
    serve, transport_error = CUTS[cut]
    handler = respond_sequence(serve(truncated("req_A")), serve(truncated("req_B")))
    outcome = RUNNERS[kind](handler, retry=qa.RetryPolicy(max_retries=1))
    error, diag = outcome.error, outcome.diagnostics

    assert type(error) is qa.ConnectionFailed
    assert str(error).endswith("(request id req_B) (after 2 attempts)"), str(error)
    assert (diag.status, diag.request_id, diag.attempts) == (200, "req_B", 2)
    assert diag.headers is not None
    assert diag.headers["request-id"] == "req_B"
    assert [(a.number, a.status, a.error, a.request_id) for a in diag.history] == [
        (1, 200, "ConnectionFailed", "req_A"),
        (2, 200, "ConnectionFailed", "req_B"),
    ]
    assert type(diag.transport_error) is transport_error
    assert getattr(diag.transport_error, "status", 200) == 200  # a protocol error's is the head's
    assert outcome.connections == 2
    assert outcome.idle == 0


KEY = "sk-live-0123456789abcdefXYZ"


def echoing(data: bytes) -> bytes:
    """The response ``data`` with two more fields that echo the key."""
    head, sep, body = data.partition(b"\r\n\r\n")
    echo = f"\r\nx-echo: {KEY}\r\nx-request-id-echo: id {KEY}".encode()
    return head + echo + sep + body


def assert_no_key(*things: object) -> None:
    piece = KEY[4:12]  # any 8 characters of the key are hidden, not only the whole key
    for thing in things:
        assert piece not in repr(thing), repr(thing)
        assert piece.encode() not in pickle.dumps(thing)


# (how the server sends the echoing response, the response, the error, the call's timeout)
ECHOED: dict[str, tuple[Callable[[bytes], Handler], bytes, type[qa.QAError], float]] = {
    CASES[0].name: (answer_once, CASES[0].data, CASES[0].error, CALL_TIMEOUT),
    CASES[3].name: (answer_once, CASES[3].data, CASES[3].error, CALL_TIMEOUT),
    "reset-in-the-body": (answer_then_reset, truncated(), qa.ConnectionFailed, CALL_TIMEOUT),
    "timeout-in-the-body": (stalled, truncated(), qa.Canceled, SHORT_TIMEOUT),
}


@pytest.mark.parametrize("kind", list(RUNNERS))
@pytest.mark.parametrize("case", list(ECHOED))
def test_the_key_echoed_in_a_refused_responses_head_never_shows(case: str, kind: str) -> None:
    serve, data, error_class, timeout = ECHOED[case]
    outcome = RUNNERS[kind](
        serve(echoing(data)), timeout, retry=qa.RetryPolicy.none, max_response_bytes=CAP, api_key=KEY
    )
    error, diag = outcome.error, outcome.diagnostics
    assert type(error) is error_class
    assert diag.headers is not None
    assert diag.request_id == RID
    assert "[redacted]" in diag.headers["x-echo"]
    [seen] = outcome.seen
    assert KEY[4:12].encode() not in seen  # the error the hook saw, its diagnostics included
    assert_no_key(str(error), error, diag, diag.headers, diag.transport_error)
    assert getattr(diag.transport_error, "headers", None) is None


@pytest.mark.parametrize("kind", list(RUNNERS))
def test_a_mocked_2xx_over_the_cap_keeps_its_head_as_over_a_socket(kind: str) -> None:
    big = reply(200, {"answers": {"toxic": True}, "pad": " " * CAP}, headers=[("request-id", RID)])
    options: dict[str, Any] = {"base_url": "http://h", "transport": MockTransport(lambda request: big)}
    options.update(retry=qa.RetryPolicy.none, max_response_bytes=CAP)
    diag = qa.Diagnostics()
    if kind == "Client":
        with qa.Client(**options) as client, pytest.raises(qa.InvalidResponse) as caught:
            client.ask("some text", Toxic, diagnostics=diag, timeout=CALL_TIMEOUT)
    else:

        async def main() -> None:
            async with qa.AsyncClient(**options) as client:
                await client.ask("some text", Toxic, diagnostics=diag, timeout=CALL_TIMEOUT)

        with pytest.raises(qa.InvalidResponse) as caught:
            asyncio.run(main())
    assert f"over the {CAP}-byte limit" in str(caught.value)
    assert str(caught.value).endswith(f"(request id {RID})")
    assert (diag.status, diag.request_id) == (200, RID)
    assert diag.headers is not None
    assert diag.headers["request-id"] == RID
    assert [(a.status, a.error, a.request_id) for a in diag.history] == [(200, "InvalidResponse", RID)]

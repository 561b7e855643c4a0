"""``MockTransport``: the service answered in-process, with no socket and no thread.

``Client(transport=MockTransport(handler))`` replaces the one class below the retry loop that
touches the network. Everything above it runs as it does over a socket: the retry loop and its
backoff, the retry budget, the rate limiter, error mapping and messages, ``Diagnostics``,
hooks, cancellation of waits. The handler receives the request qa_min would have written (its
method, target, fields and body, as the socket transport encodes them); the response it returns
becomes what a socket would have delivered, through the socket reader's size cap (``cap_body``)
and the socket transport's error translation (``_failure.failure``).
"""

from __future__ import annotations

import threading
import time

from ._call import hooked
from ._diagnostics import ResponseHeaders
from ._errors import IncompleteMessage, InvalidResponse, LimitExceeded, ProtocolError
from ._failure import failure
from ._fakecheck import HeaderPairs, not_a_step
from ._fakehttp import TRUNCATED_HEAD, TRUNCATED_MISSING, Headers, json_bytes
from ._fakerules import DEFAULT_MODELS, RecordedRequest, Step, apply_rules, check_api_key, model_names
from ._hooks import never_runs
from ._http import wire_fields
from ._typing import short

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Callable, Optional

    from ._call import CallState
    from ._http import Outgoing
    from ._origin import Origin

    Handler = Callable[[RecordedRequest], Optional[Step]]


def _failure(kind: str) -> Optional[OSError | ProtocolError]:
    """What a failing step looks like to the code above the transport, as over a real socket."""
    if kind == "drop":
        return IncompleteMessage("the server closed the connection without a response")
    if kind == "reset":
        return ConnectionResetError(104, "Connection reset by peer")
    if kind == "truncate":
        missing = f"the connection closed with {TRUNCATED_MISSING} bytes of the body missing"
        # The head a FakeService's truncate() sends, which the client keeps (Diagnostics.headers).
        return IncompleteMessage(missing, status=200, headers=ResponseHeaders(TRUNCATED_HEAD))
    return None


class MockTransport:
    """Serves a client's requests by calling ``handler(request)`` on the calling thread.

    ``handler`` receives a ``RecordedRequest`` (method, path, headers with lowercased names, body)
    and returns a ``Step`` built by ``reply`` (a response), ``drop``, ``reset`` or ``truncate``
    (a broken connection), ``delay`` (the normal answer, late) or ``hang`` (no answer until the
    call is cancelled, times out or the client closes), or None for the normal answer: the
    fake service's rules (see ``qa_min.testing``). It may also raise an ``OSError``, which the
    client sees as a dropped connection. With no handler every request gets the normal answer.
    A handler that returns anything else fails the call with ``qa.ConfigurationError``, naming
    what it returned (a coroutine or a generator it returned is closed first, its body never
    run). The handler is a plain function, for ``AsyncClient`` too: nothing awaits or iterates
    what it returns.

    Args:
        handler: The function that answers; None serves the normal answers.
        api_key: When set, the normal answer to a request without ``Bearer <api_key>`` is 401.
        models: The models the normal answers list and accept.

    Raises:
        TypeError: ``handler`` is not callable or is a generator or ``async def`` function (a
            partial or a bound method of one, an object whose ``__call__`` is one), ``api_key``
            is not a str or None, or ``models`` is a str or holds something other than str names.
        ValueError: ``api_key`` is empty (a client cannot send it).

    Attributes:
        requests: Every request received, in order (a snapshot list).

    A client with a ``MockTransport`` pickles (and deep-copies) with a fresh one: the same
    handler and options, its own ``requests``.
    """

    def __init__(
        self,
        handler: Optional[Handler] = None,
        *,
        api_key: Optional[str] = None,
        models: Sequence[str] = DEFAULT_MODELS,
    ) -> None:
        if handler is not None and not callable(handler):
            raise TypeError(f"handler must be a function of a RecordedRequest, got {handler!r}")
        unrun = None if handler is None else never_runs(handler)
        if unrun is not None:
            raise TypeError(
                f"handler is {unrun[0]}, {short(handler)}: {unrun[1]}, so its body would never run;"
                " handlers are plain functions, for AsyncClient too"
            )
        check_api_key(api_key)
        self._handler = handler
        self._api_key = api_key
        self._models = model_names(models)
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled and copied as its handler and options (a client's pickle carries it): the copy
        records its own requests. A handler pickle cannot carry (a lambda) fails pickle's way."""
        return (_rebuilt, (self._handler, self._api_key, self._models))

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def _bind(self, origin: Origin, max_body: int) -> _Bound:
        """What a client uses as its transport: this mock, for ``origin``."""
        return _Bound(self, origin, max_body)

    def _serve(
        self, recorded: RecordedRequest, prefix: str, call: CallState
    ) -> tuple[int, bytes, HeaderPairs]:
        step = self._take(recorded)
        if step is not None and step.kind in ("hang", "delay"):
            _wait_for_stop(call, step.seconds if step.kind == "delay" else None)
        return self._answer(step, recorded, prefix)

    def _take(self, recorded: RecordedRequest) -> Optional[Step]:
        """Record the request and ask the handler: its step; raises what a failing step stands for.

        What both clients' mocks share; only the wait of a ``hang`` or ``delay`` step differs.
        """
        with self._lock:
            self._requests.append(recorded)
        step = None if self._handler is None else self._handler(recorded)
        if step is not None and not isinstance(step, Step):
            from ._messages import unawaited  # here: only a broken handler needs it

            unawaited(step)  # a coroutine or generator is closed: its body never runs
            raise not_a_step(step)
        failure = None if step is None else _failure(step.kind)
        if failure is not None:
            raise failure
        return step

    def _answer(
        self, step: Optional[Step], recorded: RecordedRequest, prefix: str
    ) -> tuple[int, bytes, HeaderPairs]:
        """The response of a step that answers: the scripted reply, or the fake service's rules."""
        if step is not None and step.kind == "reply":
            return step.status, step.body, step.headers
        status, payload, headers = apply_rules(
            recorded, {}, api_key=self._api_key, prefix=prefix, models=self._models
        )
        return status, json_bytes(payload), (*headers, ("Content-Type", "application/json"))


def _rebuilt(handler: Optional[Handler], api_key: Optional[str], models: Sequence[str]) -> MockTransport:
    return MockTransport(handler, api_key=api_key, models=models)


def _wait_for_stop(call: CallState, seconds: Optional[float]) -> None:
    """Block like a server that is slow (``seconds``) or silent (None): until then or a stop."""
    wake = threading.Event()
    with hooked(call.token, wake.set), hooked(call.closing, wake.set):
        limit = None if call.deadline is None else max(0.0, call.deadline - time.monotonic())
        if seconds is not None:
            limit = seconds if limit is None else min(limit, seconds)
        if call.stop_reason() is None:
            wake.wait(limit)
    call.check()


class _Bound:
    """A ``MockTransport`` as one client's transport (the interface of ``_transport.Transport``)."""

    def __init__(self, mock: MockTransport, origin: Origin, max_body: int) -> None:
        self.mock = mock
        self.origin = origin
        self.max_body = max_body

    def attempt(
        self, request: Outgoing, call: CallState, fresh: bool = False
    ) -> tuple[int, ResponseHeaders, bytes]:
        """One attempt, answered by the mock: as ``Transport.attempt``, without a socket."""
        recorded = self.recorded(request)
        try:
            status, body, headers = self.mock._serve(recorded, self.origin.path, call)
            return self.delivered(status, body, headers, call)
        except (OSError, ProtocolError) as exc:
            error = failure(exc, self.origin, call, mocked=True)
            # As the socket transport: a refused body's text is the message, raised from None.
            raise error from (None if isinstance(error, InvalidResponse) else exc)

    def recorded(self, request: Outgoing) -> RecordedRequest:
        """The request as the handler sees it: as a server reads what the socket transport writes."""
        # Values as a server reads them: without the SP/HTAB around them (RFC 9110 section 5.5).
        fields = Headers((name, value.strip(" \t")) for name, value in wire_fields(request))
        return RecordedRequest(request.method, request.target, fields, request.body)

    def delivered(
        self, status: int, body: bytes, headers: HeaderPairs, call: CallState
    ) -> tuple[int, ResponseHeaders, bytes]:
        """What a socket would have delivered of the handler's answer."""
        # A cancel or close that came while the handler ran wins, as it would over a socket.
        call.check()
        body = cap_body(status, body, self.max_body, headers)
        # Spelled and ordered as the handler gave them, each value read as the socket reader reads
        # it: without the SP and HTAB around it (RFC 9110 section 5.5).
        answer = [(name, value.strip(" \t")) for name, value in headers]
        if not any(name.lower() == "content-length" for name, _ in answer):
            answer.append(("Content-Length", str(len(body))))
        return status, ResponseHeaders(answer), body

    def close(self) -> None:
        """Nothing to release: no socket was opened."""

    def forget(self) -> None:
        """Nothing to forget after a fork."""


def cap_body(status: int, body: bytes, max_body: int, headers: HeaderPairs) -> bytes:
    """The size cap, for a body that arrived whole: a 2xx over it is refused (``LimitExceeded``
    with the head, as the socket reader refuses it while reading), another status keeps its
    first ``max_body`` bytes."""
    if len(body) <= max_body:
        return body
    if 200 <= status < 300:
        text = f"the response body has {len(body)} bytes, over the {max_body}-byte limit"
        raise LimitExceeded(text, status=status, headers=ResponseHeaders(headers))
    return body[:max_body]

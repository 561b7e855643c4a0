"""A deterministic, scriptable fake of the question-answering service, for tests.

`FakeService` is a real HTTP/1.1 server (``http.server`` based, keep-alive, JSON bodies with
``Content-Length``) that runs in background daemon threads on an ephemeral port. It speaks the
service's wire protocol, so any client, this library's included, can be pointed at
``FakeService.url``. It checks requests the way the real service does:

* With ``api_key`` set, a request whose ``Authorization`` header is not exactly
  ``Bearer <api_key>`` (trailing blanks aside, as a server reads a field) gets 401.
* A malformed ``/v1/core`` body gets 422 (not JSON, not an object, ``state`` not a non-empty
  string, ``questions`` not a non-empty object, a question without valid criteria, ``model``
  missing or not a string).
* A model that is neither listed nor versioned (``judge-2.1``, ``judge-mini-1.0.3``: a family name,
  a dash and a dotted version number) gets 404.
* An unknown path gets 404 and a wrong method on a known path 405.

Every error body is ``{"detail": "<what is wrong>"}``.

Deterministic answers:
    For question ``id`` asked about ``state`` with ``model``, let
    ``h = hashlib.sha256(f"{model}\\0{state}\\0{id}".encode()).digest()[0]`` (an int 0-255):

    * yes/no (criteria ``{"true": ..., "false": ...}``) answers ``h % 2 == 0``;
    * choice (criteria ``{option: description, ...}``) answers the option at index ``h % n``,
      options counted in the order they were sent;
    * score (criteria ``[level 0, level 1, ...]``) answers the integer ``h % n``.

    `expected_answer` computes the same value. `FakeService.set_answers` replaces the answer of
    chosen ids with a raw wire value, sent unvalidated so that tests can make the service
    misbehave. ``usage`` is ``{"input_tokens": <words in state>, "output_tokens": <questions>}``
    and ``model`` echoes the model asked for.

Scripting:
    `FakeService.script` queues `Step` objects; each incoming request, on any path, takes the next
    one, and requests arriving while the queue is empty are served normally. Steps are built by
    `reply` (a canned response), `delay` (serve normally, late), `hang` (never answer until
    `FakeService.release` or `FakeService.close`), `drop` (close without a response), `reset`
    (close with a TCP reset) and `truncate` (a 200 whose body stops short of its
    ``Content-Length``). Every request, scripted or not, is recorded first, in
    `FakeService.requests`; only a request whose body cannot be read (sent chunked: 501, or
    with a bad ``Content-Length``: 400, answered at once; no qa_min client sends one) is not.

Rate limiting:
    ``FakeService(rate_limit=(rate, burst), retry_after=...)`` plays a rate-limited service: a
    token bucket of ``burst`` tokens refilled at ``rate`` a second, full at start, shared by
    every request. A request that finds no token gets 429 before any other rule is applied,
    with ``Retry-After`` (whole seconds, rounded up), ``retry-after-ms`` (the exact time until a
    token is free), both or neither. `FakeService.request_count` and
    `FakeService.rate_limited_count` count what arrived and what the limit refused.

    ``FakeService(rate_limit=..., announce=...)`` also announces the limit on every response
    of the rules (2xx, 4xx and the 429s alike), as real services do, so that a client's pacing
    by announced limits, or a whole fleet of clients, can be tested:

    * ``"ietf"``: draft-11 structured fields, ``RateLimit-Policy: "default";q=<rate>;w=1`` and
      ``RateLimit: "default";r=<tokens left>;t=<whole seconds until full>``;
    * ``"ietf-draft"``: the older drafts' ``RateLimit-Limit: <burst>``, ``RateLimit-Remaining``,
      ``RateLimit-Reset`` (whole seconds until full) and ``RateLimit-Policy: <burst>;w=<seconds
      to refill it>``;
    * ``"openai"``: ``x-ratelimit-limit-requests: <burst>``, ``x-ratelimit-remaining-requests``
      and ``x-ratelimit-reset-requests`` (the time until full as a duration, ``120ms``, ``1.5s``);
    * ``"anthropic"``: ``anthropic-ratelimit-requests-limit``, ``-remaining`` and ``-reset`` (the
      time it is full again, RFC 3339 to the microsecond);
    * ``"none"`` (the default): nothing.

    The command line plays the same: ``qa-min fake --rate-limit 200 50 --announce openai``.

Example:
    ::

        import qa_min as qa
        from qa_min.testing import FakeService, expected_answer, reply

        YES_NO = {"true": "The text insults someone", "false": "The text insults no one"}

        class Review(qa.Questions):
            toxic = qa.YesNo(YES_NO["true"], YES_NO["false"])

        with FakeService(api_key="sk-test") as svc:
            svc.script(reply(503, {"detail": "busy"}))  # the first attempt fails...
            with qa.Client(base_url=svc.url, api_key="sk-test") as client:
                r = client.ask("Some text", Review)     # ...and the retry gets the rule's answer
            assert r.answers.toxic == expected_answer("judge-latest", "Some text", "toxic", YES_NO)
            assert len(svc.requests) == 2
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ._fake import ServiceState
from ._fakecheck import step_headers, step_status
from ._fakehttp import json_bytes
from ._fakerules import (
    DEFAULT_MODELS,
    RecordedRequest,
    Step,
    answer,
    check_address,
    check_styles,
    classify,
    model_names,
    rate_bucket,
    wait_seconds,
)
from ._mock import MockTransport
from ._typing import read

__all__ = [
    "DEFAULT_MODELS",
    "FakeService",
    "MockTransport",
    "RecordedRequest",
    "Step",
    "delay",
    "drop",
    "expected_answer",
    "hang",
    "reply",
    "reset",
    "truncate",
]


# Defined with the fake's rules; public here, and pickled under this module's name.
RecordedRequest.__module__ = Step.__module__ = __name__


def reply(status: int, body: bytes | str | object = None, *, headers: Sequence[tuple[str, str]] = ()) -> Step:
    """Answer the request with a canned response instead of the normal one.

    Args:
        status: The HTTP status, 200-599.
        body: ``bytes`` or ``str`` are sent as is (``str`` UTF-8 encoded) as ``text/plain``;
            ``None`` sends an empty body; anything else is sent JSON-encoded as
            ``application/json``.
        headers: Extra response headers. A ``Content-Type`` here replaces the default one; a
            ``Content-Length`` is ignored because the fake always sends the correct one (in a
            `Step` built directly too).

    Raises:
        ValueError: ``status`` is outside 200-599, a header name is not an RFC 9110 token (one
            or more letters, digits or ``!#$%&'*+-.^_`|~``: no space, colon or other
            delimiter, not empty), a header name or value holds CR, LF, NUL or a character
            outside Latin-1 (which HTTP/1.1 cannot carry), or a header is a Transfer-Encoding (the
            fake frames every body with its Content-Length).
        TypeError: ``status`` is not an int, ``body`` cannot be encoded as JSON (a NaN or an
            infinity included: RFC 8259 has none; send ``bytes`` to script such a body), or ``headers``
            is not a sequence of ``(name, value)`` pairs of str.
    """
    status = step_status(status)  # before the body is encoded: a bad status is the error told
    content_type: str | None = "text/plain; charset=utf-8"
    if body is None:
        data, content_type = b"", None
    elif isinstance(body, bytes):
        data = body
    elif isinstance(body, str):
        data = body.encode()
    else:
        data = read(json_bytes, body, "body", "encoding it as JSON", TypeError)
        content_type = "application/json"
    kept = step_headers(headers)
    if content_type is not None and all(name.lower() != "content-type" for name, _ in kept):
        kept += (("Content-Type", content_type),)
    return Step("reply", status=status, body=data, headers=kept)


def delay(seconds: float) -> Step:
    """Wait ``seconds``, then serve the request normally.

    `FakeService.close` cuts the wait short and drops the connection instead.

    Raises:
        TypeError: ``seconds`` is not a number.
        ValueError: ``seconds`` is negative, not finite, or over ``_thread.TIMEOUT_MAX`` (about
            292 years, the longest wait a lock takes; `hang` never answers).
    """
    return Step("delay", seconds=seconds)  # checked by Step, as one built directly is


def hang() -> Step:
    """Read the request and never answer it; `FakeService.release`, `FakeService.clear` or
    `FakeService.close` closes the connection without a response."""
    return Step("hang")


def drop() -> Step:
    """Read the request, then close without sending a byte (``RemoteDisconnected``)."""
    return Step("drop")


def reset() -> Step:
    """Read the request, then abort the connection with a TCP reset (``ConnectionResetError``).

    The socket is closed with ``SO_LINGER`` 0, so no FIN precedes the reset.
    """
    return Step("reset")


def truncate() -> Step:
    """Send a 200 announcing a JSON body of N bytes, send part of it, close (``IncompleteRead``)."""
    return Step("truncate")


def expected_answer(model: str, state: str, question_id: str, criteria: object) -> object:
    """Return the answer the fake gives by its rules (overrides aside).

    Raises:
        ValueError: ``criteria`` is not valid yes/no, choice or score criteria.
    """
    classified = classify(criteria)
    if classified is None:
        raise ValueError(f"invalid criteria: {criteria!r}")
    return answer(model, state, question_id, *classified)


class FakeService:
    """An in-process fake of the service, served over real HTTP on ``host`` and a free port.

    Use it as a context manager (or call `start` and `close`). All methods are thread-safe.

    Args:
        api_key: When set, requests must carry ``Authorization: Bearer <api_key>``.
        models: The model names listed by ``GET /v1/models`` and accepted by ``/v1/core``
            (versioned names are accepted whether listed or not).
        prefix: A path prefix the service lives under, e.g. ``"/api"``; percent-encoded as a client
            encodes its base URL (``"/a b"`` serves ``/a%20b``), so that `url` is one it takes.
        host: The address to listen on: a name, an IPv4 or an IPv6 literal (``"::1"``, bracketed in
            `url`), or ``""`` for every interface (`url` then names ``0.0.0.0``).
        port: The port to listen on; 0 picks a free one.
        rate_limit: ``(rate, burst)``: play a rate-limited service, a token bucket of
            ``burst`` tokens refilled at ``rate`` a second (full at start). A request that finds
            no token is answered 429 ``{"detail": "rate limit exceeded"}``, before any other
            rule; scripted steps are played regardless. None (the default): no limit.
        retry_after: What a 429 of the rate limit says about when to retry: ``"seconds"``
            (``Retry-After``, whole seconds rounded up), ``"ms"`` (``retry-after-ms``, the exact
            time until a token is free, to the microsecond), ``"both"`` or ``"none"``.
        announce: How every response announces the rate limit: ``"none"`` (default),
            ``"ietf"``, ``"ietf-draft"``, ``"openai"`` or ``"anthropic"`` (see "Rate limiting"
            in this module's docstring). Needs ``rate_limit``.

    Raises:
        TypeError: ``models`` is a str or holds something other than str names, ``api_key`` is
            not a str or None, ``prefix`` or ``host`` not a str, ``port`` not an int, or
            ``rate_limit`` is not a pair of numbers.
        ValueError: ``api_key`` is empty (a client cannot send it), ``port`` is outside
            0-65535, ``rate_limit`` holds a rate that is not > 0, a burst below 1, a number
            larger than the largest float, or a bucket that takes more than ``1e10`` seconds
            to fill (``burst / rate``: its delays and resets could not be written), ``prefix``
            or ``host`` is not UTF-8 (holds a surrogate), ``retry_after`` is not one of the
            four styles, ``announce`` not one of its five, or is given without ``rate_limit``.
        OSError: ``host``:``port`` cannot be listened on, when the service starts (the port
            is taken, or the host does not resolve to an address of this machine).
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        models: Sequence[str] = DEFAULT_MODELS,
        prefix: str = "",
        host: str = "127.0.0.1",
        port: int = 0,
        rate_limit: tuple[float, float] | None = None,
        retry_after: str = "seconds",
        announce: str = "none",
    ) -> None:
        models = model_names(models)
        api_key, prefix, host, port = check_address(api_key, prefix, host, port)
        retry_after, announce = check_styles(retry_after, announce, rate_limit is not None)
        self._state = ServiceState(
            api_key=api_key,
            models=models,
            prefix=prefix,
            address=(host, port),
            rate_limit=None if rate_limit is None else rate_bucket(rate_limit),
            retry_after=retry_after,
            announce=announce,
        )

    @property
    def url(self) -> str:
        """The base URL, ``http://<host>:<port><prefix>``; it stays readable after `close`.

        Raises:
            RuntimeError: The service was never started.
        """
        if self._state.url is None:
            raise RuntimeError("FakeService.url is known only after start()")
        return self._state.url

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        return self._state.requests

    @property
    def request_count(self) -> int:
        """How many requests the service has received so far (``len(requests)``, cheaper)."""
        return self._state.counts[0]

    @property
    def connections(self) -> int:
        """How many TCP connections the service has accepted so far."""
        return self._state.counts[1]

    @property
    def rate_limited_count(self) -> int:
        """How many requests the ``rate_limit`` answered with 429 so far (scripted 429s aside)."""
        return self._state.counts[2]

    def start(self) -> FakeService:
        """Bind, start serving from a background daemon thread, and return ``self``.

        Raises:
            RuntimeError: The service was already started or closed.
        """
        self._state.start()
        return self

    def close(self) -> None:
        """Stop serving and end every connection, hung or idle, joining all threads; idempotent."""
        self._state.close()

    def __enter__(self) -> FakeService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_answers(self, answers: Mapping[str, object]) -> None:
        """Make the listed question ids answer these raw wire values from now on.

        The values are sent as given, unchecked against the question, so a test can make the
        service answer with a wrong type or an unknown option. Ids not listed here follow the
        deterministic rules; only ids a request asks about are answered. Each call replaces the
        previous overrides; ``set_answers({})`` clears them.

        Raises:
            TypeError: ``answers`` is not a mapping of str question ids, or a value cannot be
                encoded as JSON (a NaN or an infinity included: RFC 8259 has none).
        """
        if not isinstance(answers, Mapping) or not all(isinstance(key, str) for key in answers):
            # A key that is not a str would match no question id, silently.
            raise TypeError(f"set_answers() takes a mapping of question id (str) to answer, not {answers!r}")
        overrides = dict(answers)
        # Fail here, in the test, rather than inside a handler thread.
        read(json_bytes, overrides, "answers", "encoding it as JSON", TypeError)
        self._state.set_answers(overrides)

    def script(self, *steps: Step) -> None:
        """Queue ``steps``; each following request, on any path, consumes one in order.

        Raises:
            TypeError: A step is not a `Step` (built by `reply`, `delay`, `hang`, ...).
        """
        for step in steps:
            if not isinstance(step, Step):
                # Checked here, in the test, rather than inside the handler thread that takes it.
                raise TypeError(f"script() takes steps built by reply(), delay(), hang() ..., not {step!r}")
        self._state.script(steps)

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> bool:
        """Block until at least ``n`` requests were recorded, for at most ``timeout`` seconds (not
        at all when it is negative); return False on timeout.

        Raises:
            TypeError: ``n`` is not an int, or ``timeout`` not a number.
            ValueError: ``timeout`` is not finite, or over ``_thread.TIMEOUT_MAX`` (292 years).
        """
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"n must be an int, not {n!r}")
        return self._state.wait_for_requests(n, wait_seconds(timeout))

    def release(self) -> None:
        """Wake every request held by a `hang` step so far; each one's connection is closed.

        A request counts as held from the moment it is recorded, so
        ``wait_for_requests(n)`` followed by ``release()`` cannot miss it.
        """
        self._state.release()

    def clear(self) -> None:
        """Forget what the service was told and saw, so that one service serves many tests.

        Drops the script's steps left, the `set_answers` overrides and the recorded requests;
        the counters start again from zero, the rate limit's bucket is full, and every request
        held by a `hang` step is released. The port, settings and open connections stay."""
        self._state.clear()

    def close_idle_connections(self) -> None:
        """Close, server side, every keep-alive connection waiting for its next request.

        This is what a server's keep-alive timeout does; a client that sends its next request
        on such a connection finds it closed. Returns once those connections are gone.
        """
        self._state.close_idle_connections()

"""The fake service's request rules and data: pure functions and values, no sockets, no locks.

``apply_rules`` answers one recorded request the way the real service would: it checks the API
key, the route and the method, and ``core`` validates a ``/v1/core`` body (``parse_core``,
``classify``) and answers it by the hash rule (``answer``), the rule ``expected_answer`` in
``qa_min.testing`` exposes; that module's docstring is their specification. ``TokenBucket`` is
the rate limit a fake can play. ``RecordedRequest`` and ``Step`` are public through
``qa_min.testing``.
"""

from __future__ import annotations

import _thread
import hashlib
import json
import math
import re
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

from ._fakecheck import HeaderPairs, StepKind, delay_seconds, step_body, step_headers, step_kind, step_status
from ._typing import not_utf8, plain, read, short

# fullmatch, not `$`: `$` would also accept a trailing newline.
VERSIONED: Final = re.compile(r"([a-z][a-z0-9-]*?)-\d+(?:\.\d+)+")

DEFAULT_MODELS: Final[tuple[str, ...]] = (
    "judge-latest",
    "judge-mini-latest",
    "judge-2.1",
    "judge-mini-1.3",
)
"""Model names the fake service lists on ``GET /v1/models`` unless told otherwise."""

Reply = tuple[int, object, HeaderPairs]
_Parsed = tuple[str, str, dict[str, tuple[str, tuple[str, ...]]]]


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake received it.

    Attributes:
        method: The HTTP method, e.g. ``"POST"``.
        path: The request target as sent, prefix and query string included.
        headers: The request headers; names are lowercased and lookups ignore case.
        body: The raw request body (empty when there was none).
    """

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """Return the body parsed as JSON; raises ``ValueError`` when it is not JSON."""
        return json.loads(self.body)


@dataclass(frozen=True)
class Step:
    """One scripted behaviour of a `FakeService`.

    Build steps with `reply`, `delay`, `hang`, `drop`, `reset` or `truncate` rather than directly.
    One built directly is checked as they check theirs (headers kept as a tuple of pairs).

    Raises:
        ValueError: ``kind`` is not one of the six, ``status`` outside 200-599, a header is one
            `reply` refuses, or ``seconds`` is negative, not finite or over ``_thread.TIMEOUT_MAX``.
        TypeError: ``kind`` is not a str, ``status`` not an int, ``body`` not bytes, ``headers``
            not a sequence of ``(name, value)`` pairs of str, or ``seconds`` not a number.
    """

    kind: StepKind
    status: int = 200
    body: bytes = b""
    headers: HeaderPairs = ()
    seconds: float = 0.0

    def __post_init__(self) -> None:
        # A step built directly skipped the builders' checks: FakeService's handler thread then
        # failed on it (a dropped connection) while MockTransport delivered it as given.
        step_kind(self.kind)
        # Kept as the checks read them: a bytes, int or float subclass as its plain value, so that
        # none of its overrides runs where the step is played (a float subclass's __radd__ ran in
        # the thread serving a delay, which dropped the connection, while MockTransport served it).
        object.__setattr__(self, "body", step_body(self.body))
        object.__setattr__(self, "status", step_status(self.status))
        object.__setattr__(self, "seconds", delay_seconds(self.seconds))
        object.__setattr__(self, "headers", step_headers(self.headers))


def model_names(models: object) -> tuple[str, ...]:
    """``models`` as the fake's tuple of names: a sequence of str, never one str.

    Raises:
        TypeError: ``models`` is a str, not iterable, or holds something other than a str.
    """
    if isinstance(models, (str, bytes)) or not isinstance(models, Iterable):
        raise TypeError(f"models must be a sequence of names, not {short(models)}")
    # Each name as str's own text: the fake hashes and compares them.
    names = tuple(map(plain, read(tuple, models, "models", "iterating it", TypeError)))
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"models must hold str names, not {name!r}")
    return names


def rate_bucket(rate_limit: object) -> tuple[float, float]:
    """``FakeService``'s ``rate_limit`` as ``(rate, burst)``, checked: a rate > 0 and a burst
    >= 1, both finite numbers, and a bucket that fills within ``MAX_REFILL_SECONDS``."""
    given = (
        read(tuple, rate_limit, "rate_limit", "iterating it", TypeError)
        if isinstance(rate_limit, (tuple, list))
        else ()
    )
    pair = tuple(map(plain, given))  # a subclass's own __lt__ or __float__ never runs
    if len(pair) != 2 or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in pair):
        raise TypeError(f"rate_limit must be a (rate, burst) pair of finite numbers, not {rate_limit!r}")
    if any(isinstance(x, int) and abs(x) > sys.float_info.max for x in pair):
        # math.isfinite and float() raise OverflowError on such an int.
        raise ValueError(
            f"rate_limit's rate and burst must be at most {sys.float_info.max:g}, the largest float"
        )
    if not all(math.isfinite(x) for x in pair):
        raise TypeError(f"rate_limit must be a (rate, burst) pair of finite numbers, not {rate_limit!r}")
    rate, burst = float(pair[0]), float(pair[1])
    if not rate > 0 or not burst >= 1:
        raise ValueError(f"rate_limit needs a rate > 0 and a burst >= 1, not {rate_limit!r}")
    if burst / rate > MAX_REFILL_SECONDS:
        raise ValueError(
            f"rate_limit needs burst / rate, the seconds its bucket takes to fill, to be at most "
            f"{MAX_REFILL_SECONDS:g}, not {rate_limit!r}: a longer delay or reset cannot be written"
        )
    return rate, burst


def wait_seconds(timeout: object) -> float:
    """``wait_for_requests``'s timeout, checked: a finite number of seconds up to
    ``_thread.TIMEOUT_MAX``; a negative one waits not at all."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, not {timeout!r}")
    # A NaN waited for ever, more raised OverflowError; -inf (or below the largest float)
    # raised nothing or OverflowError.
    if not -math.inf < timeout <= _thread.TIMEOUT_MAX:
        most = int(_thread.TIMEOUT_MAX)
        raise ValueError(f"timeout must be finite and at most {most}, not {short(timeout)}")
    return max(0.0, timeout)


def check_api_key(api_key: object) -> None:
    """The key a fake expects: None for any, else what a client can send (it refuses "")."""
    if api_key is not None and not isinstance(api_key, str):
        raise TypeError(f"api_key must be a str or None, not {short(api_key)}")
    if plain(api_key) == "":
        raise ValueError("api_key must be a non-empty string or None: a client cannot send an empty key")


def check_address(api_key: object, prefix: object, host: object, port: object) -> tuple[Any, str, str, int]:
    """``FakeService``'s key, prefix, host and port, their types and the port's range checked.

    Each as a plain str or int: a subclass's own ``__eq__``, ``__hash__`` or ``__le__`` never runs."""
    api_key, prefix, host = plain(api_key), plain(prefix), plain(host)
    check_api_key(api_key)
    for name, value in (("prefix", prefix), ("host", host)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, not {short(value)}")
        if (problem := not_utf8(value)) is not None:  # percent-encoding or binding it raised
            raise ValueError(f"{name} is {problem}")
    port = plain(port)
    if isinstance(port, bool) or not isinstance(port, int):
        raise TypeError(f"port must be an int, not {short(port)}")
    if not 0 <= port <= 65535:
        raise ValueError(f"port must be within 0-65535, not {port}")
    return api_key, cast("str", prefix), cast("str", host), port  # each checked a str above


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up; full at first. Not thread-safe:
    its owner holds a lock around it."""

    __slots__ = ("_burst", "_rate", "_tokens", "_updated")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self._rate = rate
        self._burst = burst
        self._tokens = burst
        self._updated = now

    @property
    def tokens(self) -> float:
        """The tokens left after the latest ``take``."""
        return self._tokens

    def take(self, now: float) -> float | None:
        """Take a token: None when there was one, else the seconds until there will be."""
        self._tokens = min(self._burst, self._tokens + (now - self._updated) * self._rate)
        self._updated = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return None
        return (1.0 - self._tokens) / self._rate


MAX_REFILL_SECONDS: Final = 1e10
"""The longest a fake's bucket may take to fill from empty, ``burst / rate`` (about 317 years).

Every delay and reset the fake tells is at most this, so each can be written: whole seconds and
milliseconds as integers, and an RFC 3339 time that ``time.gmtime`` gives on every platform
(Windows' stops at year 3000). A rate of ``1e-310`` made them infinite."""


def throttle_headers(wait: float, style: str) -> HeaderPairs:
    """The 429's delay headers: ``Retry-After`` in whole seconds (rounded up), ``retry-after-ms``
    exact to the microsecond (rounded up, so never 0), both, or neither."""
    seconds = ("Retry-After", str(max(1, math.ceil(wait))))
    millis = ("retry-after-ms", f"{math.ceil(wait * 1e6) / 1000:.3f}")
    return {"seconds": (seconds,), "ms": (millis,), "both": (millis, seconds)}.get(style, ())


ANNOUNCE_STYLES: Final[tuple[str, ...]] = ("none", "ietf", "ietf-draft", "openai", "anthropic")
"""How a fake may announce its limit on every response (see ``announce_headers``)."""
_RETRY_AFTER: Final = ("seconds", "ms", "both", "none")


def check_styles(retry_after: object, announce: object, limited: bool) -> tuple[str, str]:
    """``FakeService``'s ``retry_after`` and ``announce``, each one of its styles, as a plain str
    (a subclass's own ``__eq__`` never runs)."""
    plain_retry_after, plain_announce = plain(retry_after), plain(announce)
    for name, value, styles in (
        ("retry_after", plain_retry_after, _RETRY_AFTER),
        ("announce", plain_announce, ANNOUNCE_STYLES),
    ):
        if not isinstance(value, str) or value not in styles:
            raise ValueError(f"{name} must be one of {', '.join(styles)}, not {short(value)}")
    if plain_announce != "none" and not limited:
        raise ValueError(f"announce={plain_announce!r} needs a rate_limit to announce")
    return plain_retry_after, plain_announce


def _written(number: float) -> str:
    """A count, rate or window as the services write one: in digits, never with an exponent (``:g``
    wrote a burst of 1234567 as ``1.23457e+06``, read back as 1234570), to 15 significant ones."""
    from decimal import Decimal  # only a fake that announces its limit needs it

    return format(Decimal(f"{number:.15g}"), "f")


def announce_headers(style: str, tokens: float, rate: float, burst: float, wall: float) -> HeaderPairs:
    """The fields that announce a token bucket of ``burst`` refilled at ``rate`` a second,
    holding ``tokens`` now, in ``style`` (each style's fields: ``qa_min.testing``'s docstring,
    "Rate limiting"); ``wall`` is the time in epoch seconds."""
    if style == "none":
        return ()
    remaining = str(max(0, math.floor(tokens)))
    to_full = max(0.0, (burst - tokens) / rate)
    limit = _written(burst)
    if style == "ietf":
        return (
            ("RateLimit-Policy", f'"default";q={_written(rate)};w=1'),
            ("RateLimit", f'"default";r={remaining};t={math.ceil(to_full)}'),
        )
    if style == "ietf-draft":
        return (
            ("RateLimit-Limit", limit),
            ("RateLimit-Remaining", remaining),
            ("RateLimit-Reset", str(math.ceil(to_full))),
            ("RateLimit-Policy", f"{limit};w={_written(burst / rate)}"),
        )
    if style == "openai":  # the time until full as Go prints a duration: 0s, 20ms, 1.5s, 6m0s, 2h0m0s
        hours, millis = divmod(math.ceil(to_full * 1000), 3_600_000)
        minutes, millis = divmod(millis, 60_000)
        reset = f"{millis}ms" if 0 < millis < 1000 and not hours + minutes else f"{millis / 1000:g}s"
        reset = f"{hours}h{minutes}m{reset}" if hours else f"{minutes}m{reset}" if minutes else reset
        names = "x-ratelimit-{}-requests"
    else:
        # In whole microseconds first: a fraction that rounds up to a second carries into the seconds.
        whole, micros = divmod(round((wall + to_full) * 1e6), 1_000_000)
        reset = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{micros:06d}Z"
        names = "anthropic-ratelimit-requests-{}"
    told = {"limit": limit, "remaining": remaining, "reset": reset}
    return tuple((names.format(part), value) for part, value in told.items())


# The request rules.


def classify(criteria: object) -> tuple[str, tuple[str, ...]] | None:
    """Return ``(kind, option keys or levels)`` for valid criteria, else None."""
    if (
        isinstance(criteria, list)
        and len(criteria) >= 2
        and all(isinstance(level, str) for level in criteria)
    ):
        return "score", tuple(criteria)
    if (
        isinstance(criteria, dict)
        and len(criteria) >= 2
        and all(isinstance(key, str) and isinstance(text, str) for key, text in criteria.items())
    ):
        return ("yesno" if set(criteria) == {"true", "false"} else "choice"), tuple(criteria)
    return None


def answer(model: str, state: str, question_id: str, kind: str, options: tuple[str, ...]) -> object:
    # surrogatepass: JSON may carry lone surrogates, which plain UTF-8 encoding rejects.
    key = f"{model}\0{state}\0{question_id}".encode("utf-8", "surrogatepass")
    h = hashlib.sha256(key).digest()[0]
    if kind == "yesno":
        return h % 2 == 0
    if kind == "choice":
        return options[h % len(options)]
    return h % len(options)


def parse_core(doc: object) -> _Parsed | str:
    """Return ``(state, model, {id: (kind, options)})``, or the 422 detail."""
    if not isinstance(doc, dict):
        return "request body must be a JSON object"
    state = doc.get("state")
    if not isinstance(state, str) or not state:
        return "'state' must be a non-empty string"
    questions = doc.get("questions")
    if not isinstance(questions, dict) or not questions:
        return "'questions' must be a non-empty object"
    parsed: dict[str, tuple[str, tuple[str, ...]]] = {}
    for question_id, question in questions.items():
        criteria = question.get("criteria") if isinstance(question, dict) else None
        classified = classify(criteria)
        if classified is None:
            return f"question {question_id!r} has no valid 'criteria'"
        parsed[question_id] = classified
    model = doc.get("model")
    if not isinstance(model, str):
        return "'model' must be a string"
    return state, model, parsed


def family(model: str) -> str:
    if model.endswith("-latest"):
        return model[: -len("-latest")]
    versioned = VERSIONED.fullmatch(model)
    return versioned.group(1) if versioned else model


def apply_rules(
    recorded: RecordedRequest,
    overrides: Mapping[str, object],
    *,
    api_key: str | None,
    prefix: str,
    models: tuple[str, ...],
) -> Reply:
    """Return ``(status, JSON payload, extra headers)`` for a request the rules serve."""
    # As a server reads the field a client sends: without a trailing SP or HTAB (RFC 9110 5.5).
    expected = None if api_key is None else f"Bearer {api_key}".rstrip(" \t")
    if expected is not None and recorded.headers.get("authorization") != expected:
        return 401, {"detail": "missing or invalid API key"}, (("WWW-Authenticate", "Bearer"),)
    path = recorded.path.split("?", 1)[0]
    routes = {f"{prefix}/v1/core": "POST", f"{prefix}/v1/models": "GET"}
    allowed = routes.get(path)
    if allowed is None:
        return 404, {"detail": f"no route for {path}"}, ()
    if recorded.method != allowed:
        detail = f"method {recorded.method} not allowed on {path}"
        return 405, {"detail": detail}, (("Allow", allowed),)
    if allowed == "GET":
        listed = [{"name": name, "family": family(name)} for name in models]
        return 200, {"models": listed}, ()
    return core(recorded.body, overrides, models)


def core(body: bytes, overrides: Mapping[str, object], models: tuple[str, ...]) -> Reply:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return 422, {"detail": "request body is not valid JSON"}, ()
    parsed = parse_core(doc)
    if isinstance(parsed, str):
        return 422, {"detail": parsed}, ()
    state, model, questions = parsed
    if model not in models and not VERSIONED.fullmatch(model):
        return 404, {"detail": f"model {model!r} not found"}, ()
    answers = {
        question_id: (
            overrides[question_id]
            if question_id in overrides
            else answer(model, state, question_id, *question)
        )
        for question_id, question in questions.items()
    }
    usage = {"input_tokens": len(state.split()), "output_tokens": len(questions)}
    return 200, {"answers": answers, "usage": usage, "model": model}, ()

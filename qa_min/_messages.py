"""What a call tells people: error messages, the key scrubbed out of them, log lines, hooks.

One ``Messages`` per client, shared by its threads and by both retry drivers. Nothing here
decides anything: the retry decisions (``_decide``) ask it for an error's text, and the driver
(``_retrying``) asks it to log and to run the hooks.
"""

from __future__ import annotations

from ._config import get_logger, read_service_log
from ._diagnostics import _StandIn
from ._errors import Canceled, status_error_class
from ._hooks import HookEvent
from ._redact import Redactor
from ._responses import BadShape, load_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional

    from ._call import CallState
    from ._diagnostics import ResponseHeaders
    from ._errors import ConnectionFailed, QAError
    from ._hooks import Hook
    from ._http import Outgoing


class Messages:
    """A client's error texts, log lines and hooks, the key hidden in every one."""

    __slots__ = ("base_url", "hooks", "redact")

    def __init__(self, redact: Redactor, base_url: str, hooks: Optional[dict[str, tuple[Hook, ...]]]) -> None:
        self.redact = redact
        # For messages and log lines: a key put in the base URL's path is hidden there too.
        self.base_url = redact(base_url)
        self.hooks = hooks
        # SERVICE_LOG is read when the client is made, as the other variables are.
        read_service_log()

    def status_error(
        self, status: int, headers: ResponseHeaders, body: bytes, request: Outgoing, call: CallState
    ) -> QAError:
        """The error a non-2xx response maps to; its body, redacted, goes to ``call.body``."""
        # The whole body is redacted before anything shortens it (the message, Diagnostics' repr).
        text = self.redact(body.decode("utf-8", "replace"))
        call.body = text
        detail = _detail(body, text, headers, self.redact)
        return status_error_class(status)(self.answered(status, request, detail), status=status)

    def answered(self, status: Optional[int], request: Outgoing, problem: str) -> str:
        """A message about ``request``'s response: its status, the URL it went to, ``problem``."""
        return f"HTTP {status} from {request.method} {self.base_url}{request.path}: {problem}"

    def finish(self, exc: QAError, call: CallState) -> None:
        """The error leaving the call: Diagnostics filled, request id and attempts named, key hidden."""
        exc.diagnostics = call.fill()
        suffix = "" if call.request_id is None else f" (request id {call.request_id})"
        if call.attempts > 1 and not isinstance(exc, Canceled):
            suffix += f" (after {call.attempts} attempts)"
        exc.message = f"{exc.message}{suffix}"
        self.scrub(exc)

    def scrub(self, exc: QAError) -> None:
        """Hide the key in ``exc``'s message and in every exception chained to it."""
        exc.message = self.redact(exc.message)
        exc.args = (exc.message,)
        # Each exception met, by id, and what stands for it: a stand-in keeps the links of the
        # exception it replaced, and one leading back to a replaced exception must lead to its stand-in.
        done: dict[int, BaseException] = {id(exc): exc}
        todo: list[BaseException] = [exc]
        while todo:
            node = todo.pop()
            for link in ("__cause__", "__context__"):
                linked = getattr(node, link)
                if linked is None:
                    continue
                safe = done.get(id(linked))
                if safe is None:
                    safe = done[id(linked)] = self.safe(linked)
                    done[id(safe)] = safe
                    todo.append(safe)
                if safe is not linked:
                    suppress = node.__suppress_context__  # setting __cause__ sets it
                    setattr(node, link, safe)
                    node.__suppress_context__ = suppress

    def safe_cause(self, exc: ConnectionFailed) -> Optional[BaseException]:
        """The transport error behind ``exc``, or its stand-in, which then also becomes its cause."""
        raw = exc.diagnostics.transport_error
        safe = None if raw is None else self.safe(raw)
        if safe is not raw:
            exc.diagnostics.transport_error = exc.__cause__ = exc.__context__ = safe
        return safe

    def safe(self, exc: BaseException) -> BaseException:
        """``exc``, or a ``_StandIn`` with its text redacted when its text, args or attributes hold a
        piece of the key."""
        if not self.redact.active:
            return exc
        try:
            text, shown = str(exc), repr(exc)
        except Exception:
            return _stand_in(exc, _UNSHOWN)
        # Pickle keeps an exception's args and attributes, where a server's bytes may be.
        held = (exc.args, getattr(exc, "__dict__", None))
        if self.redact.hides(text) or self.redact.hides(shown) or self.redact.holds(held):
            return _stand_in(exc, self.redact(text))
        return exc

    # -- log lines and hooks ------------------------------------------------------------------

    def attempted(
        self,
        request: Outgoing,
        call: CallState,
        status: Optional[int],
        error: Optional[BaseException],
        duration: float,
        request_id: Optional[str],
    ) -> None:
        """The debug line and the after-attempt hooks of the attempt ``call`` just recorded."""
        # No logger can listen before ``logging`` is imported (SERVICE_LOG imports it).
        log = get_logger()
        if log is not None and log.isEnabledFor(10):
            # As an Attempt shows it: the status, the error's name, or both (a 200 whose body was
            # refused is "200 InvalidResponse").
            named = "" if error is None else type(error).__name__
            outcome = named if status is None else f"{status} {named}".rstrip()
            log.debug(
                "%s %s%s -> %s in %.1f ms (attempt %d)",
                request.method,
                self.base_url,
                request.path,
                outcome,
                duration * 1000.0,
                call.attempts,
            )
        if self.hooks is not None:
            self.emit("after_attempt", request, call.attempts, status, error, duration, request_id)

    def retrying(self, seconds: float, call: CallState, failure: BaseException) -> None:
        log = get_logger()
        if log is not None:
            log.info(
                "retrying %s in %.3f s (attempt %d failed: %s)",
                self.base_url,
                seconds,
                call.attempts,
                type(failure).__name__,
            )

    def emit(
        self,
        stage: str,
        request: Outgoing,
        number: int,
        status: Optional[int] = None,
        error: Optional[BaseException] = None,
        duration: Optional[float] = None,
        request_id: Optional[str] = None,
    ) -> None:
        """Run the hooks of ``stage``; one that raises or returns an awaitable or a generator is
        logged, and the call goes on."""
        hooks = self.hooks.get(stage, ()) if self.hooks is not None else ()
        if not hooks:
            return
        url = f"{self.base_url}{request.path}"
        event = HookEvent(
            stage, request.method, url, number, request.body, status, error, duration, request_id
        )
        for hook in hooks:
            try:
                returned = hook(event)
            except Exception as exc:
                self.hook_failed(stage, hook, f"raised {type(exc).__name__}: {_text(exc)}")
            else:
                unrun = None if returned is None else unawaited(returned)
                if unrun is not None:
                    what = f"returned {type(returned).__name__} {unrun}: hooks must be plain functions"
                    self.hook_failed(stage, hook, what)

    def hook_failed(self, stage: str, hook: object, what: str) -> None:
        """The warning for a hook that raised or returned what nothing runs; the call goes on."""
        log = get_logger()
        if log is not None:
            # Both as text, redacted: a hook may hold the key (a partial bound to it).
            log.warning("the %s hook %s %s", stage, self.redact(_shown(hook)), self.redact(what))


_UNSHOWN = "(an exception whose text cannot be shown)"


def _text(exc: BaseException) -> str:
    """``str(exc)``, or a stand-in when its ``__str__`` raises: a hook's error never ends the call."""
    try:
        return str(exc)
    except Exception:
        return _UNSHOWN


def unawaited(returned: object) -> Optional[str]:
    """What a hook returned that nothing will run, said as "(an awaitable), which nothing awaits"
    (a sync function handing back a coroutine) or "(a generator), which nothing iterates"; else
    None. A coroutine or a generator is closed, so its body never runs and Python does not warn,
    later and elsewhere, that a coroutine was never awaited."""
    from types import CoroutineType, GeneratorType  # loaded with json; read only when a hook returned

    try:
        if isinstance(returned, GeneratorType):
            returned.close()
            return "(a generator), which nothing iterates"
        if isinstance(returned, CoroutineType):
            returned.close()
        elif getattr(type(returned), "__await__", None) is None:
            return None
        return "(an awaitable), which nothing awaits"
    except Exception:
        return None


def _shown(hook: object) -> str:
    """``repr(hook)``, or its type's name when that raises."""
    try:
        return repr(hook)
    except Exception:
        return f"<{type(hook).__name__} whose repr() raised>"


def noting(base_url: str) -> Callable[[str], None]:
    """The limiter's news, logged at INFO. Not a method: a limiter holding its sender would
    make a cycle, and a dropped client's sockets would wait for the garbage collector."""

    def note(message: str) -> None:
        log = get_logger()
        if log is not None:
            log.info("%s: %s", base_url, message)

    return note


def _detail(body: bytes, text: str, headers: ResponseHeaders, redact: Redactor) -> str:
    """A short, readable reason from an error body: JSON ``detail``, an HTML title, or the text.

    ``text`` is the body, decoded and redacted; a ``detail`` decoded from JSON is redacted again
    (escapes undone, it may spell out a key the body only held escaped).
    """
    detail = None
    if "json" in (headers.get("content-type") or "") or text.startswith("{"):
        try:
            obj = load_json(body)
        except BadShape:
            obj = None
        if isinstance(obj, dict) and "detail" in obj:
            found = obj["detail"]
            if isinstance(found, list):  # FastAPI-style [{"loc": ..., "msg": ...}]
                found = "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in found)
            said = "" if found is None else redact(str(found))
            detail = said if said.strip() else None  # null or blank says nothing: the body shows
    if detail is None:
        lower = text.lower()
        start, end = lower.find("<title>"), lower.find("</title>")
        detail = text[start + 7 : end] if 0 <= start < end else text
    # Redacted once more after whitespace is folded, which may join two halves of a piece.
    short = redact(" ".join(detail[:2000].split()))
    if not short:
        return "(empty body)"
    return short if len(short) <= 200 else short[:197] + "..."


def _stand_in(exc: BaseException, message: str) -> _StandIn:
    """A ``_StandIn`` for ``exc`` that keeps what was chained behind it (``scrub`` walks on)."""
    safe = _StandIn(type(exc).__name__, message)
    safe.__cause__, safe.__context__ = exc.__cause__, exc.__context__
    safe.__suppress_context__ = exc.__suppress_context__
    return safe

"""The exceptions qa_min raises, and the Diagnostics a call fills.

Every exception is a ``QAError``::

    QAError
    ├── APIStatusError                 .status: the HTTP status
    │   ├── BadRequest                 400
    │   ├── Unauthorized               401
    │   ├── PermissionDenied           403
    │   ├── NotFound                   404
    │   ├── RequestTimeout             408, after retries
    │   ├── UnprocessableEntity        422
    │   ├── ServiceBusy
    │   │   ├── RateLimited            429, after retries
    │   │   └── Overloaded             529, after retries
    │   ├── ServerError                other 5xx, after retries
    │   └── UnexpectedStatus           any other non-2xx status, 3xx included
    ├── ConnectionFailed               could not connect, or the connection dropped
    │   └── ProxyError                 .status: the proxy refused (407, 401, a CONNECT refused)
    ├── InvalidResponse                a body or an answer of the wrong shape
    ├── Canceled                       cancelled from outside, or the call's timeout expired
    ├── ClientClosed                   a call started after ``close()``
    ├── ConfigurationError (ValueError)
    │   ├── InvalidBaseUrl
    │   └── MissingApiKey
    └── ValidationError (ValueError)   the request is wrong; nothing was sent
        ├── NoQuestions
        ├── DuplicateQuestionName
        ├── InvalidName
        ├── InvalidState
        ├── InvalidQuestion
        ├── InvalidModel
        └── InvalidOption

``ConnectionFailed.diagnostics.transport_error`` holds what broke the connection: an ``OSError``,
an ``ssl.SSLError``, or one of qa_min's own HTTP/1.1 protocol errors (never raised by a call
itself; they say in the protocol's words what the server's bytes got wrong)::

    QAError
    └── ProtocolError                  .status: the final response's status, once its head was read
        ├── MalformedHead              the status line or a field line breaks RFC 9112
        ├── BadFraming                 the body cannot be delimited safely (Content-Length,
        │                              Transfer-Encoding, chunk size lines, chunk CRLFs, trailers)
        ├── LimitExceeded              a line, the head, the interim responses or a body over a cap
        └── IncompleteMessage          the server closed the connection before the message ended

A 2xx body refused for its framing or its size surfaces as ``InvalidResponse`` (the protocol
error's words as its message); everything else as ``ConnectionFailed``. An error after the head
hands the head's status and headers on to the call's ``Diagnostics`` (and to its message's
request id), whatever the error.

Each instance carries ``.diagnostics``. Messages name the status and a short detail, never the
API key.

Every exception and ``Diagnostics`` survive ``pickle`` (every protocol) and ``copy.deepcopy`` with
their type, message, ``.status`` and diagnostics, so they cross process boundaries
(``ProcessPoolExecutor``, ``multiprocessing``). A ``transport_error`` that cannot be pickled
travels as a ``_StandIn`` with its type name and message.
"""

from __future__ import annotations

from ._diagnostics import Diagnostics as Diagnostics

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

    from ._diagnostics import ResponseHeaders


class QAError(Exception):
    """Base of every exception qa_min raises."""

    diagnostics: Diagnostics

    def __init__(self, message: str, diagnostics: Optional[Diagnostics] = None) -> None:
        super().__init__(message)
        self.message = message
        self.diagnostics = diagnostics if diagnostics is not None else Diagnostics()

    def __reduce__(self) -> tuple[object, ...]:
        # Exception pickles as ``cls(*args)``, which a keyword-only ``status`` breaks: rebuild
        # without __init__ and restore the attributes (message, diagnostics, status, ...).
        return (_restore_error, (type(self), self.args), self.__dict__)


def _restore_error(cls: type[QAError], args: tuple[object, ...]) -> QAError:
    exc = cls.__new__(cls)
    exc.args = args
    return exc


class APIStatusError(QAError):
    """The service answered with a non-2xx HTTP status.

    Attributes:
        status: The HTTP status code.
    """

    def __init__(self, message: str, diagnostics: Optional[Diagnostics] = None, *, status: int) -> None:
        super().__init__(message, diagnostics)
        self.status = status


class BadRequest(APIStatusError):
    """HTTP 400."""


class Unauthorized(APIStatusError):
    """HTTP 401: the API key is missing, wrong or revoked."""


class PermissionDenied(APIStatusError):
    """HTTP 403."""


class NotFound(APIStatusError):
    """HTTP 404, for example a model the account cannot use."""


class RequestTimeout(APIStatusError):
    """HTTP 408, raised after retries are exhausted."""


class UnprocessableEntity(APIStatusError):
    """HTTP 422: the service refused the request body."""


class ServiceBusy(APIStatusError):
    """Base of RateLimited and Overloaded, so callers can handle "busy" in one place."""


class RateLimited(ServiceBusy):
    """HTTP 429, raised after retries are exhausted."""


class Overloaded(ServiceBusy):
    """HTTP 529, raised after retries are exhausted."""


class ServerError(APIStatusError):
    """A 5xx status other than 529, raised after retries are exhausted."""


class UnexpectedStatus(APIStatusError):
    """Any other non-2xx status; 3xx included, since redirects are never followed."""


class ConnectionFailed(QAError):
    """The service could not be reached or the connection dropped, after retries.

    ``diagnostics.transport_error`` holds the underlying exception.
    """

    # False for failures another attempt cannot fix: an untrusted certificate, a peer without TLS.
    retryable = True


class ProxyError(ConnectionFailed):
    """The HTTP proxy refused to pass the request on; the service was never reached.

    Raised for a CONNECT answered with anything but 2xx, and for a 407 (or a 401 the proxy wrote
    itself) on a plain-http request. ``diagnostics.status`` and ``diagnostics.body`` hold the
    proxy's answer. 401 and 407 (wrong or missing proxy credentials) are never retried; other
    statuses (502, 503, 504, ...) follow the policy's ``retry_status``.

    Attributes:
        status: The HTTP status the proxy answered with.
    """

    def __init__(self, message: str, diagnostics: Optional[Diagnostics] = None, *, status: int) -> None:
        super().__init__(message, diagnostics)
        self.status = status


class InvalidResponse(QAError):
    """A 2xx body that is not the expected shape, or an answer that does not fit its question."""


class Canceled(QAError):
    """The call was cancelled from outside, or its ``timeout`` expired."""


class ClientClosed(QAError):
    """The client was closed before this call started."""


class ConfigurationError(QAError, ValueError):
    """The client's configuration cannot work."""


class InvalidBaseUrl(ConfigurationError):
    """``base_url`` is not an http(s) URL with a host."""


class MissingApiKey(ConfigurationError):
    """No API key was given or found for the public service address."""


class ValidationError(QAError, ValueError):
    """The request is invalid; it was refused before any byte was sent."""


class NoQuestions(ValidationError):
    """A request has no questions."""


class DuplicateQuestionName(ValidationError):
    """Two questions of one request share a name."""


class InvalidName(ValidationError):
    """A question name is empty or not a string."""


class InvalidState(ValidationError):
    """The state is empty or not a string."""


class InvalidQuestion(ValidationError):
    """A question's criteria are malformed: an empty text, too few options or levels, ..."""


class InvalidModel(ValidationError):
    """A model name is empty or not a string."""


class InvalidOption(ValidationError):
    """A per-call or client option has the wrong type or value."""


_STATUS_ERRORS: dict[int, type[APIStatusError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: PermissionDenied,
    404: NotFound,
    408: RequestTimeout,
    422: UnprocessableEntity,
    429: RateLimited,
    529: Overloaded,
}


def status_error_class(status: int) -> type[APIStatusError]:
    """The exception class SPEC.md assigns to a non-2xx status."""
    cls = _STATUS_ERRORS.get(status)
    if cls is not None:
        return cls
    return ServerError if 500 <= status <= 599 else UnexpectedStatus


class ProtocolError(QAError):
    """The server's bytes break HTTP/1.1 as RFC 9112 defines it (``_protocol`` says how).

    Found in ``diagnostics.transport_error``; a call itself raises ``ConnectionFailed`` or
    ``InvalidResponse``. Messages name what is wrong, with at most 40 bytes of the offending
    line, and never hold a body.

    Attributes:
        status: The final response's status when the error came after its head, else None.
        headers: That head's headers, until the transport hands them on to the call's
            ``Diagnostics`` (``_failure.failure``); then None, so that a ``transport_error``
            never holds a header (which may echo the key).
    """

    def __init__(
        self,
        message: str,
        diagnostics: Optional[Diagnostics] = None,
        *,
        status: Optional[int] = None,
        headers: Optional[ResponseHeaders] = None,
    ) -> None:
        super().__init__(message, diagnostics)
        self.status = status
        self.headers = headers


class MalformedHead(ProtocolError):
    """The status line or a header field line is not valid HTTP/1.1."""


class BadFraming(ProtocolError):
    """Where the body ends cannot be told safely; the response is refused, never guessed."""


class LimitExceeded(ProtocolError):
    """A line, the head, the number of interim responses or a 2xx body is over its cap."""


class IncompleteMessage(ProtocolError):
    """The connection ended before the response did (before its first byte, even)."""

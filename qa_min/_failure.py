"""What a failed exchange becomes: the one translation of network, protocol and size-cap
errors into qa_min's, shared by the socket transports (``_transport``, ``_atransport``) and
``MockTransport``. No I/O: it reads the exception, the call's state and the head already read.

* ``Canceled``, when the call's token was cancelled, its deadline passed, or the client closed;
* ``InvalidResponse``, for a 2xx body refused for its size or its framing;
* ``ConnectionFailed``, with ``retryable`` telling the retry loop whether trying again can help
  (not for an untrusted certificate, nor a server that does not speak TLS), and the ``OSError``
  or ``ProtocolError`` in ``diagnostics.transport_error``.

An error after the response's head carries that head (status, headers redacted) in its own
``diagnostics``, for ``_decide.Attempts.on_failure`` to give the call's.
"""

from __future__ import annotations

import socket
import sys

from ._connection import Expired, Stopped
from ._diagnostics import Diagnostics, ResponseHeaders
from ._errors import BadFraming, Canceled, ConnectionFailed, InvalidResponse, LimitExceeded, ProtocolError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional

    from ._call import CallState
    from ._errors import QAError
    from ._origin import Origin
    from ._wire import Head

# OpenSSL's reasons for a first record that is not TLS at all (UNKNOWN_PROTOCOL before 1.0.2q).
_NOT_TLS = ("WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL")
_NOT_TLS_HINT = "the server did not answer TLS; it may speak plain HTTP (check the URL's scheme): "


def failure(
    exc: BaseException,
    origin: Origin,
    call: CallState,
    where: Optional[str] = None,
    *,
    head: Optional[Head] = None,
    mocked: bool = False,
) -> QAError:
    """What an exchange that failed becomes above the transports: the one translation of
    network, protocol and size-cap errors, used by ``Transport`` and ``MockTransport`` alike.
    ``where``: what failed, as the message names it: the origin's URL unless a proxy did (not
    reached, or its connection broken during a CONNECT).
    ``head``: the response head the connection had read when ``exc`` came, if any.
    ``mocked``: ``exc`` was raised by a ``MockTransport`` handler, so a ``TimeoutError`` is the
    handler's dropped connection, not a socket's timeout set from the call's deadline.

    ``Canceled`` when the call was stopped (cancelled, timed out, client closed) whatever the error;
    ``InvalidResponse`` for a refused 2xx body (``BadFraming`` or ``LimitExceeded`` with a status:
    malformed, or over the size cap); otherwise ``ConnectionFailed``, ``retryable`` unless retrying
    cannot help (an untrusted certificate, a server without TLS), the error kept as ``transport_error``.

    An error after the response's head (a refused body, a reset, the deadline, a cancel) hands
    that head on (its status, its headers redacted) in the error's own ``diagnostics``, for
    ``Attempts.on_failure`` to give the call's, as a ``ProxyError`` brings its status.
    """
    heard = heard_head(exc, head, call.redact)
    if isinstance(exc, (BadFraming, LimitExceeded)) and exc.status is not None:
        return InvalidResponse(_refusal(exc), heard)
    reason = call.stop_reason()
    timed_out = isinstance(exc, Expired) or (isinstance(exc, socket.timeout) and not mocked)
    if reason is None and timed_out and call.deadline is not None:
        reason = f"the call's timeout of {call.timeout:g} s expired"
    if reason is not None or isinstance(exc, Stopped):
        return Canceled(reason or "the call was cancelled", heard)
    plain = _not_tls(exc)
    hint = _NOT_TLS_HINT if plain else ""
    error = ConnectionFailed(f"{where or origin.url()}: {hint}{_describe(exc)}", heard)
    error.diagnostics.transport_error = exc
    # Retrying cannot fix a certificate the client does not trust, nor a server without TLS.
    error.retryable = not (plain or _is_certificate_error(exc))
    return error


def heard_head(
    exc: BaseException, head: Optional[Head], redact: Callable[[str], str]
) -> Optional[Diagnostics]:
    """The head ``exc`` came after, as its error's diagnostics (its status, its headers
    redacted): a protocol error's own, taken off it, else ``head``, the one the connection had
    read; None when no head came. The asyncio transport's cancellations use it too."""
    status, headers = (None, None) if head is None else (head.status, head.headers)
    if isinstance(exc, ProtocolError) and exc.status is not None:
        status, headers = exc.status, exc.headers
        exc.headers = None  # so that a transport_error holds no header (one may echo the key)
    if status is None:
        return None
    heard = Diagnostics()
    heard.status = status
    heard.headers = (headers or ResponseHeaders(())).redacted(redact)
    return heard


def _is_certificate_error(exc: BaseException) -> bool:
    ssl = sys.modules.get("ssl")  # not loaded: no TLS, so no TLS error
    return ssl is not None and isinstance(exc, ssl.SSLCertVerificationError)


def _not_tls(exc: BaseException) -> bool:
    """The peer answered the TLS hello with bytes that are no TLS record (an HTTP 400, often)."""
    ssl = sys.modules.get("ssl")
    return ssl is not None and isinstance(exc, ssl.SSLError) and exc.reason in _NOT_TLS


def _refusal(exc: ProtocolError) -> str:
    text = str(exc)
    return text if isinstance(exc, LimitExceeded) else f"the response body is malformed: {text}"


def named(proxy: Origin) -> str:
    """A proxy as host:port, IPv6 in brackets; never its URL, which may hold its password."""
    host = f"[{proxy.host}]" if ":" in proxy.host else proxy.host
    return f"{host}:{proxy.port}"


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text

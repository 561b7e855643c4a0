"""The request as it travels down the stack: a value, not bytes (as httpx hands its transport a
``Request``). Its bytes are the protocol's (``_wire``): the head written and checked once per
client, finished per call.

A client builds one ``Outgoing`` per operation once (``/v1/core`` without a body, ``/v1/models``)
and each call takes a copy with its body (``with_body``): the fields tuple, and the bytes of
the request line and fields, are built once per client and shared by every call. Above the
transport nothing reads bytes: messages, hooks and ``MockTransport`` read the fields of the
value; only the socket transport turns it into bytes (``encode``).

Through a proxy an https request is preceded by a CONNECT (``connect_request``), whose two ways
of failing both connection layers raise alike: ``TunnelRefused`` (the proxy answered no) and
``TunnelBroken`` (its connection failed before an answer). The transport names the proxy in
either error, since the origin was never reached.
"""

from __future__ import annotations

from operator import itemgetter

from ._wire import finish_request, has_length, request_head

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

Fields = tuple[tuple[str, str], ...]


class Outgoing(tuple):  # type: ignore[type-arg]
    """One request, frozen: (method, target, fields, body, path, head).

    Attributes:
        method: ``"POST"`` or ``"GET"``.
        target: As written on the request line: the origin-form (``/prefix/v1/core``), or the
            absolute URL through a plain-http proxy.
        fields: The (name, value) pairs in order, ``Host`` first; ``Content-Length`` is not
            among them (it follows from the body). One tuple, shared by a client's calls.
        body: The body bytes; empty for ``GET``.
        path: The operation's path relative to the base URL (``/v1/core``), for messages,
            hooks and the log.
        head: The request line and fields as bytes, built once with the fields.
    """

    __slots__ = ()

    method: str = property(itemgetter(0))  # type: ignore[assignment]
    target: str = property(itemgetter(1))  # type: ignore[assignment]
    fields: Fields = property(itemgetter(2))  # type: ignore[assignment]
    body: bytes = property(itemgetter(3))  # type: ignore[assignment]
    path: str = property(itemgetter(4))  # type: ignore[assignment]
    head: bytes = property(itemgetter(5))  # type: ignore[assignment]

    def __new__(
        cls,
        method: str,
        target: str,
        fields: Fields,
        path: str,
        body: bytes = b"",
        head: Optional[bytes] = None,
    ) -> Outgoing:
        if head is None:
            head = request_head(method, target, fields)
        return tuple.__new__(cls, (method, target, fields, body, path, head))

    def with_body(self, body: bytes) -> Outgoing:
        """The same request with ``body``: one tuple, nothing encoded again."""
        return tuple.__new__(Outgoing, (self[0], self[1], self[2], body, self[4], self[5]))

    def __repr__(self) -> str:
        # Never the fields: the Authorization value is the key.
        return f"Outgoing({self[0]} {self[4]}, {len(self[3])} body bytes)"


def encode(request: Outgoing) -> bytes:
    """The bytes of ``request`` on the wire, in one piece (one ``send``)."""
    return finish_request(request[5], request[0], request[3])


def wire_fields(request: Outgoing) -> Fields:
    """The fields as ``encode`` writes them: ``Content-Length`` added when there is one."""
    body, fields = request.body, request.fields
    if has_length(request.method, body):
        return (*fields, ("Content-Length", str(len(body))))
    return fields


class Resend(Exception):
    """The request went out whole on a reused connection that then failed before any response
    byte: most likely the server had closed it while idle. Not an error of the call: the retry
    loop counts the attempt (the server may have read it) and sends again, at once, on a fresh
    connection (``attempt(..., fresh=True)``), spending no retry and no budget.

    Raised by a transport, caught by the retry loop. ``error`` is what went wrong, for the record.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__("a reused connection failed before the response; sent again")
        self.error = error


def connect_request(target: str, headers: bytes) -> bytes:
    """The CONNECT request for a tunnel to ``target`` ("host:port"), with ``headers`` (each
    ending in CRLF: the proxy's credentials)."""
    host = target.encode("ascii")
    return b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (host, host, headers)


class TunnelRefused(Exception):
    """The proxy answered a CONNECT with a non-2xx status."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"the proxy refused the tunnel: HTTP {status}")
        self.status = status
        self.body = body


class TunnelBroken(Exception):
    """The connection to the proxy failed before it answered a CONNECT (or as it did: data sent
    before the TLS handshake). ``error`` is what broke, an ``OSError`` or a ``ProtocolError``."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"the proxy's connection failed during the CONNECT: {error!r}")
        self.error = error

"""Raw HTTP responses, built byte by byte, and one call of a client against them.

Shared by the framing, interim-response, early-response and fuzz tests: ``response()`` and
``chunked()`` build the bytes a server sends, ``Outcome`` is what one ``ask`` made of them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Optional

from faultservers import Handler, RawServer, answer_once
from support import no_sleep

import qa_min as qa

BODY_TRUE = b'{"answers": {"toxic": true}, "usage": {}}'
BODY_FALSE = b'{"answers": {"toxic": false}, "usage": {"tokens": 3}}'


class Toxic(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


def response(
    status: str = "200 OK",
    headers: Sequence[str] = ("Content-Type: application/json",),
    body: bytes = BODY_TRUE,
    length: Optional[str] = "auto",
    version: str = "HTTP/1.1",
) -> bytes:
    """A response; ``length`` "auto" adds a right Content-Length, None none, else that value."""
    lines = [f"{version} {status}", *headers]
    if length == "auto":
        lines.append(f"Content-Length: {len(body)}")
    elif length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def interim(status: str = "100 Continue", headers: Sequence[str] = ()) -> bytes:
    """An interim (1xx) response head."""
    return ("\r\n".join([f"HTTP/1.1 {status}", *headers]) + "\r\n\r\n").encode("latin-1")


def chunked(
    body: bytes, sizes: Sequence[int] = (), extension: bytes = b"", trailers: Sequence[bytes] = ()
) -> bytes:
    """``body`` as chunks of ``sizes`` (the rest in one last chunk), then the last chunk."""
    out = []
    start = 0
    for size in [*sizes, len(body)]:
        piece = body[start : start + size]
        start += len(piece)
        if piece:
            out.append(b"%x%s\r\n%s\r\n" % (len(piece), extension, piece))
    out.append(b"0\r\n" + b"".join(t + b"\r\n" for t in trailers) + b"\r\n")
    return b"".join(out)


def chunked_response(body_bytes: bytes, status: str = "200 OK", headers: Sequence[str] = ()) -> bytes:
    """A head announcing a chunked body, followed by ``body_bytes`` as given (framing included)."""
    head = [f"HTTP/1.1 {status}", "Content-Type: application/json", "Transfer-Encoding: chunked", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body_bytes


@dataclass
class Outcome:
    """What one call made of a server's bytes."""

    answer: Optional[bool]
    error: Optional[qa.QAError]
    diagnostics: qa.Diagnostics
    elapsed: float
    connections: int
    idle: int  # connections left idle in the pool after the call

    @property
    def kind(self) -> Optional[type[qa.QAError]]:
        return None if self.error is None else type(self.error)


def ask(client: qa.Client, **options: Any) -> tuple[Optional[bool], Optional[qa.QAError], qa.Diagnostics]:
    diag = qa.Diagnostics()
    try:
        answer = client.ask("some text", Toxic, diagnostics=diag, **options)
    except qa.QAError as exc:
        error: qa.QAError = exc
    else:
        return answer.answers.toxic, None, diag
    assert error.diagnostics is diag
    return None, error, diag


@contextmanager
def serving(handler: Handler, **options: Any) -> Iterator[tuple[RawServer, qa.Client]]:
    """A raw server running ``handler`` and a client of it that never sleeps between retries."""
    options.setdefault("retry", qa.RetryPolicy.none)
    with (
        RawServer(handler) as server,
        qa.Client(base_url=server.url, trust_env=False, sleep=no_sleep, **options) as c,
    ):
        yield server, c


def call_once(data: bytes, stall: float = 0.0, timeout: Optional[float] = None, **options: Any) -> Outcome:
    """One ``ask`` against a server that answers with ``data``, then closes (after ``stall`` s)."""
    with serving(answer_once(data, stall), **options) as (server, client):
        started = time.monotonic()
        answer, error, diag = ask(client, timeout=timeout)
        elapsed = time.monotonic() - started
        idle = client._transport.pool.idle_count()
    return Outcome(answer, error, diag, elapsed, server.connections, idle)

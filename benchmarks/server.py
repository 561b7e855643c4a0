"""The benchmark's server: HTTP/1.1 keep-alive, fixed JSON replies, in a process of its own.

Run by ``python -m benchmarks``; on its own::

    python -m benchmarks.server [--host 127.0.0.1] [--port 0] [--wrong-answer] [--exit-on-stdin-eof]

It prints ``READY <base url>`` on stdout once it listens, serves until SIGINT/SIGTERM (or, with
``--exit-on-stdin-eof``, until its stdin closes, so it cannot outlive the process that started
it), then prints ``STATS requests=<n> cpu_s=<seconds>``.

Routes: ``POST /v1/core`` answers ``CORE_BODY`` (with ``--wrong-answer``, ``WRONG_BODY``: the same
shape with ``toxic`` false, which every client must reject), ``GET /v1/models`` answers a model
list, anything else 404/405.

It has to stay far from being the bottleneck with 8 client threads, so it is an
``asyncio.Protocol`` that does only what HTTP/1.1 framing needs: find the end of the head, read
the request line, ``Content-Length``, ``Transfer-Encoding`` and ``Connection``, skip the body, and
write prepared bytes. Pipelined requests and requests split over several reads are handled by
``Parser``, which keeps the unparsed tail between reads. Chunked request bodies are refused
(501): none of the clients benchmarked sends one for a body of known length.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

ROOT = Path(__file__).resolve().parent.parent
"""The directory holding ``benchmarks/`` and ``qa_min/``: on every child process's path."""

CORE_BODY = (
    b'{"answers": {"toxic": true, "tone": "formal", "quality": 2}, '
    b'"usage": {"input_tokens": 3, "output_tokens": 3}}'
)
WRONG_BODY = (
    b'{"answers": {"toxic": false, "tone": "formal", "quality": 2}, '
    b'"usage": {"input_tokens": 3, "output_tokens": 3}}'
)
MODELS_BODY = b'{"models": [{"name": "judge-latest"}]}'
MAX_HEAD = 64 * 1024
READY_TIMEOUT = 30.0


def response(status: str, body: bytes, close: bool = False) -> bytes:
    """A complete HTTP/1.1 response with a JSON body."""
    return b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        status.encode(),
        len(body),
        b"Connection: close\r\n" if close else b"",
        body,
    )


class BadRequest(Exception):
    """A request this server cannot frame; answered with ``reply`` and the connection closed."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(detail)
        self.reply = response(status, b'{"detail": "%s"}' % detail.encode(), close=True)


class Parser:
    """Splits a byte stream into requests: (method, target, keep_alive) each, bodies skipped."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[tuple[bytes, bytes, bool]]:
        """The requests completed by ``data``; an incomplete tail waits for the next call.

        Raises:
            BadRequest: The stream is not HTTP/1.x this server can frame.
        """
        buffer = self._buffer + data if self._buffer else data
        requests = []
        start = 0
        while True:
            # RFC 9112 2.2: a server should ignore empty lines before a request line.
            while buffer.startswith(b"\r\n", start):
                start += 2
            end = buffer.find(b"\r\n\r\n", start)
            if end < 0:
                if len(buffer) - start > MAX_HEAD:
                    raise BadRequest("431 Request Header Fields Too Large", "head too large")
                break
            method, target, keep_alive, length = _head(buffer[start:end])
            stop = end + 4 + length
            if len(buffer) < stop:
                break
            requests.append((method, target, keep_alive))
            start = stop
        self._buffer = buffer[start:]
        return requests


def _head(head: bytes) -> tuple[bytes, bytes, bool, int]:
    # Searching the lowercased head for the three fields that matter costs a few C-level
    # scans; splitting it into fields would cost a Python loop per header line.
    line_end = head.find(b"\r\n")
    parts = (head if line_end < 0 else head[:line_end]).split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise BadRequest("400 Bad Request", "bad request line")
    method, target, version = parts
    lower = head.lower()
    if b"\r\ntransfer-encoding:" in lower:
        raise BadRequest("501 Not Implemented", "chunked bodies are not supported")
    length = 0
    at = lower.find(b"\r\ncontent-length:")
    if at >= 0:
        value = _field(lower, at + 17)
        if not value.strip().isdigit():
            raise BadRequest("400 Bad Request", "bad content-length")
        length = int(value)
    keep_alive = version != b"HTTP/1.0"
    at = lower.find(b"\r\nconnection:")
    if at >= 0:
        tokens = _field(lower, at + 13)
        if b"close" in tokens:
            keep_alive = False
        elif b"keep-alive" in tokens:
            keep_alive = True
    return method, target, keep_alive, length


def _field(head: bytes, start: int) -> bytes:
    end = head.find(b"\r\n", start)
    return head[start:] if end < 0 else head[start:end]


class Routes:
    """The prepared response for each (method, path), keep-alive or closing."""

    def __init__(self, wrong_answer: bool = False) -> None:
        core = WRONG_BODY if wrong_answer else CORE_BODY
        self._known = {(b"POST", b"/v1/core"): core, (b"GET", b"/v1/models"): MODELS_BODY}
        self._paths = {path for _, path in self._known}
        self._cache: dict[tuple[bytes, bytes, bool], bytes] = {}

    def reply(self, method: bytes, target: bytes, keep_alive: bool) -> bytes:
        key = (method, target, keep_alive)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        path = target.partition(b"?")[0]
        body = self._known.get((method, path))
        if body is not None:
            reply = response("200 OK", body, close=not keep_alive)
        elif path in self._paths:
            reply = response("405 Method Not Allowed", b'{"detail": "method not allowed"}', not keep_alive)
        else:
            reply = response("404 Not Found", b'{"detail": "not found"}', close=not keep_alive)
        if len(self._cache) < 64:  # bounded: a scan of random paths must not grow it forever
            self._cache[key] = reply
        return reply


class _Protocol(asyncio.Protocol):
    def __init__(self, routes: Routes, counter: list[int]) -> None:
        self._routes = routes
        self._counter = counter
        self._parser = Parser()
        self._transport: Optional[asyncio.Transport] = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        assert transport is not None
        try:
            requests = self._parser.feed(data)
        except BadRequest as exc:
            transport.write(exc.reply)
            transport.close()
            return
        if not requests:
            return
        replies = []
        for method, target, keep_alive in requests:
            replies.append(self._routes.reply(method, target, keep_alive))
            if not keep_alive:
                break
        self._counter[0] += len(replies)
        # One write for all the pipelined replies: one send() instead of several.
        transport.write(b"".join(replies) if len(replies) > 1 else replies[0])
        if not keep_alive:
            transport.close()


class _EofWatcher(asyncio.Protocol):
    def __init__(self, stop: asyncio.Future[None]) -> None:
        self._stop = stop

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if not self._stop.done():
            self._stop.set_result(None)


async def serve(
    host: str, port: int, wrong_answer: bool, exit_on_stdin_eof: bool, counter: list[int]
) -> None:
    """Listen, print ``READY <url>``, serve until a stop signal."""
    loop = asyncio.get_running_loop()
    routes = Routes(wrong_answer)
    server = await loop.create_server(
        lambda: _Protocol(routes, counter), host, port, backlog=1024, reuse_address=True
    )
    bound = server.sockets[0].getsockname()
    stop: asyncio.Future[None] = loop.create_future()

    def finish() -> None:
        if not stop.done():
            stop.set_result(None)

    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):  # Windows has no add_signal_handler
            loop.add_signal_handler(signum, finish)
    if exit_on_stdin_eof:
        await loop.connect_read_pipe(lambda: _EofWatcher(stop), sys.stdin)
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    print(f"READY http://{shown}:{bound[1]}", flush=True)
    try:
        await stop
    finally:
        server.close()


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.server",
        description="The benchmark's keep-alive HTTP server; prints READY <url> once listening.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 (default) picks a free port")
    parser.add_argument(
        "--wrong-answer", action="store_true", help="answer toxic=false: every benchmark client must fail"
    )
    parser.add_argument(
        "--exit-on-stdin-eof", action="store_true", help="stop when stdin closes (used by the runner)"
    )
    args = parser.parse_args(argv)
    counter = [0]
    started = time.process_time()
    try:
        asyncio.run(serve(args.host, args.port, args.wrong_answer, args.exit_on_stdin_eof, counter))
    except KeyboardInterrupt:
        pass
    print(f"STATS requests={counter[0]} cpu_s={time.process_time() - started:.6f}", flush=True)
    return 0


# -- the parent's side ------------------------------------------------------------------------


def child_env(extra: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The environment of every benchmark process: ``ROOT`` on the path, no proxies, no ``SERVICE_*``.

    Byte-code caches are written even where ``PYTHONDONTWRITEBYTECODE`` is set.

    A proxy variable would send requests and httpx (and qa_min) through a proxy instead of to
    the local server, and ``SERVICE_DEFAULT_MODEL`` would change qa_min's request body.
    """
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.lower().endswith("_proxy") and not key.startswith("SERVICE_")
    }
    # Byte-code caches on: without them every import of a changed module would pay for
    # compiling it, and the import times would measure the compiler.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(ROOT) if not path else f"{ROOT}{os.pathsep}{path}"
    env.update(extra or {})
    return env


class ServerProcess:
    """A running server process: ``url``, ``pid``, and ``stop()``."""

    def __init__(self, process: subprocess.Popen[str], url: str) -> None:
        self.process = process
        self.url = url
        self.pid = process.pid
        self.requests: Optional[int] = None
        self.cpu_s: Optional[float] = None

    def stop(self) -> None:
        """Close the server's stdin (its stop signal), wait for it, and read its ``STATS`` line."""
        if self.process.poll() is None:
            try:
                out, _ = self.process.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                out, _ = self.process.communicate()
        else:
            out = self.process.stdout.read() if self.process.stdout else ""
        for line in out.splitlines():
            if line.startswith("STATS "):
                fields = dict(item.split("=", 1) for item in line.split()[1:])
                self.requests = int(fields["requests"])
                self.cpu_s = float(fields["cpu_s"])

    def cpu_seconds(self) -> Optional[float]:
        """CPU time the server used so far, from ``/proc`` (None where there is no ``/proc``)."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            return None
        # utime and stime are fields 14 and 15 of stat(5); fields[0] here is field 3.
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def start(wrong_answer: bool = False, python: str = sys.executable) -> Iterator[ServerProcess]:
    """Run the server in a child process for the duration of the ``with`` block.

    Raises:
        RuntimeError: The server did not print ``READY`` (its stderr is in the message).
    """
    command = [python, "-m", "benchmarks.server", "--exit-on-stdin-eof"]
    if wrong_answer:
        command.append("--wrong-answer")
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        cwd=ROOT,
    )
    assert process.stdout is not None
    server: Optional[ServerProcess] = None
    try:
        # Bounded: a server that hangs before listening must not hang the benchmark.
        readable, _, _ = select.select([process.stdout], [], [], READY_TIMEOUT)
        line = process.stdout.readline() if readable else ""
        if not line.startswith("READY "):
            process.kill()
            _, err = process.communicate()
            raise RuntimeError(f"the benchmark server did not start: {line.strip()!r}\n{err.strip()}")
        server = ServerProcess(process, line.split()[1])
        yield server
    finally:
        if server is not None:
            server.stop()
        elif process.poll() is None:
            process.kill()
            process.communicate()


if __name__ == "__main__":
    raise SystemExit(main())

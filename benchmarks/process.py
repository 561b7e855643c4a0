"""Server processes as the runner sees them: start, URLs, CPU used so far, stop.

Both servers (``benchmarks.server`` and ``benchmarks.nginx``) run as child processes and are
reached over loopback, so that their CPU time is never the client's.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import select
import socket
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from .common import ROOT, child_env

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

READY_TIMEOUT = 30.0


class ServerProcess:
    """A running server: its ``name``, ``url`` (and ``tls_url``), ``pid``, and ``stop()``.

    Args:
        process: The server's process.
        urls: Its base URLs: plain HTTP first, then HTTPS if it serves it.
        name: What the reports call it.
        stop_signal: How to stop it: a signal, or None to close its stdin.
    """

    def __init__(
        self,
        process: subprocess.Popen[str],
        urls: Sequence[str],
        name: str,
        stop_signal: Optional[int] = None,
    ) -> None:
        self.process = process
        self.url = urls[0]
        self.tls_url: Optional[str] = urls[1] if len(urls) > 1 else None
        self.name = name
        self.pid = process.pid
        self._stop_signal = stop_signal

    def stop(self) -> None:
        """Stop the server and wait for it."""
        if self.process.poll() is None and self._stop_signal is not None:
            self.process.send_signal(self._stop_signal)
        # communicate() also when it has exited: it reads what is left and closes the pipes.
        try:
            self.process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()

    def cpu_seconds(self) -> Optional[float]:
        """CPU time the server used so far, from ``/proc`` (None where there is no ``/proc``).

        ``schedstat`` counts nanoseconds (of the main thread: both servers have one thread);
        ``stat``, the fallback, counts clock ticks, often 10 ms.
        """
        try:
            return int(Path(f"/proc/{self.pid}/schedstat").read_text().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            pass
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            return None
        # utime and stime are fields 14 and 15 of stat(5); fields[0] here is field 3.
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def counters(self) -> Optional[tuple[int, int]]:
        """(requests, reads) so far, from the own server's ``GET /_stats``; None if it has none."""
        host, _, port = self.url.partition("://")[2].rpartition(":")
        conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=10)
        try:
            conn.request("GET", "/_stats")
            response = conn.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException):
            return None
        finally:
            conn.close()
        if response.status != 200:
            return None
        data = json.loads(body)
        return int(data["requests"]), int(data["reads"])


@contextlib.contextmanager
def start_process(command: Sequence[str], name: str) -> Iterator[ServerProcess]:
    """Run a server that prints ``READY <url>...`` once it listens; stop it on leaving.

    Raises:
        RuntimeError: The server did not print ``READY`` (its stderr is in the message).
    """
    process = subprocess.Popen(
        list(command),
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
        server = ServerProcess(process, line.split()[1:], name)
        yield server
    finally:
        if server is not None:
            server.stop()
        elif process.poll() is None:
            process.kill()
            process.communicate()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (for servers that cannot bind port 0 and report it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def wait_listening(
    process: subprocess.Popen[str], ports: Sequence[int], timeout: float = READY_TIMEOUT
) -> bool:
    """Poll until every port accepts a connection (True), or the process exits or time runs out."""
    deadline = time.monotonic() + timeout
    waiting = list(ports)
    delay = 0.005
    while waiting:
        if process.poll() is not None or time.monotonic() > deadline:
            return False
        try:
            with socket.create_connection(("127.0.0.1", waiting[0]), timeout=1):
                waiting.pop(0)
                continue
        except OSError:
            pass
        time.sleep(delay)  # a process starting up: nothing to wait on but time
        delay = min(delay * 2, 0.1)
    return True

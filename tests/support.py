"""Helpers shared by several test modules: clients, polling, and probes.

A plain module, imported as ``support`` (pytest puts ``tests/`` on ``sys.path``); the fixtures
built on these live in ``conftest.py``.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Optional

import qa_min as qa

BOUND = 5.0  # bounds waits for things that happen at once, so a bug fails instead of hanging
_EXECUTOR_THREAD = re.compile(r"qa_min_\d+$")


def no_sleep(seconds: float, wake: threading.Event) -> None:
    """Backoff without waiting, so retried tests stay fast; the delay is still computed and counted."""


def make_client(url: str, **options: Any) -> qa.Client:
    # trust_env=False: a proxy variable in the environment must not reroute 127.0.0.1.
    return qa.Client(base_url=url, trust_env=False, **options)


class SleepRecorder:
    """An injected ``sleep``: records the seconds asked for and returns at once."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def __call__(self, seconds: float, wake: threading.Event) -> None:
        self.seconds.append(seconds)


def make_recording_client(
    url: str,
    sleep: Optional[SleepRecorder] = None,
    rand: Callable[[], float] = lambda: 0.0,
    **options: Any,
) -> qa.Client:
    """A client whose backoff is recorded, not slept, with ``random`` fixed (no jitter by default)."""
    return qa.Client(
        base_url=url,
        trust_env=False,
        sleep=SleepRecorder() if sleep is None else sleep,
        random=rand,
        **options,
    )


def wait_until(condition: Callable[[], bool], timeout: float = BOUND) -> bool:
    """Poll ``condition`` until it holds; False after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not condition():
        if time.monotonic() >= deadline:
            return False
        pause.wait(0.005)
    return True


def executor_threads() -> list[str]:
    """Names of live worker threads of any client's executor."""
    return [t.name for t in threading.enumerate() if _EXECUTOR_THREAD.match(t.name)]


class Listener:
    """A socket that listens but never accepts.

    A client's connect() completes into the accept queue, so after a call a non-blocking
    accept() tells whether the client opened a connection at all, with no server thread to
    start and stop: validation tests stay cheap however many cases they run.
    """

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.setblocking(False)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def connections(self) -> int:
        count = 0
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return count
            conn.close()
            count += 1

    def connect_once(self) -> None:
        """Open and close one connection, as a client that sends something would."""
        with socket.create_connection(self.sock.getsockname(), timeout=1):
            pass

    def close(self) -> None:
        self.sock.close()

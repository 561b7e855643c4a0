"""Helpers shared by several test modules: clients, polling, and probes.

A plain module, imported as ``support`` (pytest puts ``tests/`` on ``sys.path``); the fixtures
built on these live in ``conftest.py``.
"""

from __future__ import annotations

import asyncio
import gc
import os
import re
import socket
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from typing import Any, Optional

import qa_min as qa
from qa_min._fakerules import apply_rules
from qa_min.testing import DEFAULT_MODELS, MockTransport, RecordedRequest, Step, reply

BOUND = 5.0  # bounds waits for things that happen at once, so a bug fails instead of hanging
_EXECUTOR_THREAD = re.compile(r"qa_min_\d+$")


def no_sleep(seconds: float, wake: threading.Event) -> None:
    """Backoff without waiting, so retried tests stay fast; the delay is still computed and counted."""


def make_client(url: str, **options: Any) -> qa.Client:
    # trust_env=False: a proxy variable in the environment must not reroute 127.0.0.1.
    return qa.Client(base_url=url, trust_env=False, **_in_process(url, options))


# Base URLs of InProcessService instances, so that a client made for one is wired to its transport.
_IN_PROCESS: dict[str, MockTransport] = {}


def _in_process(url: str, options: dict[str, Any]) -> dict[str, Any]:
    transport = _IN_PROCESS.get(url)
    return options if transport is None else {"transport": transport, **options}


class InProcessService:
    """``FakeService``'s scripting API served through ``MockTransport``: no socket, no thread.

    For tests of the layers above the transport (the retry loop, errors, diagnostics); a client
    made with ``make_client(service.url)`` or ``make_recording_client(service.url)`` is wired to
    it. The socket-level tests keep the real ``FakeService``.
    """

    def __init__(self, **options: Any) -> None:
        self._steps: deque[Step] = deque()
        self._overrides: dict[str, object] = {}
        self._api_key = options.get("api_key")
        self.transport = MockTransport(self._answer, **options)
        self.url = f"http://in-process-{id(self)}.test"

    def _answer(self, request: RecordedRequest) -> Optional[Step]:
        if self._steps:
            return self._steps.popleft()
        if not self._overrides:
            return None
        # The normal answer with some answers replaced, as FakeService.set_answers does.
        status, payload, headers = apply_rules(
            request, self._overrides, api_key=self._api_key, prefix="", models=DEFAULT_MODELS
        )
        return reply(status, payload, headers=headers)

    def __enter__(self) -> InProcessService:
        _IN_PROCESS[self.url] = self.transport
        return self

    def __exit__(self, *exc: object) -> None:
        _IN_PROCESS.pop(self.url, None)

    def script(self, *steps: Step) -> None:
        self._steps.extend(steps)

    def set_answers(self, answers: dict[str, object]) -> None:
        self._overrides = dict(answers)

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.transport.requests

    def wait_for_requests(self, n: int, timeout: float = BOUND) -> bool:
        return wait_until(lambda: len(self.transport.requests) >= n, timeout)


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
        **_in_process(url, options),
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


async def until_true(check: Callable[[], bool]) -> bool:
    """``wait_until`` for a coroutine: poll ``check`` without blocking the loop (bounded)."""
    deadline = time.monotonic() + BOUND
    while not check() and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
    return check()


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


def open_sockets() -> int:
    """Sockets this process holds open, or -1 where /proc cannot tell (not Linux)."""
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return -1
    count = 0
    for fd in fds:
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass  # closed while listed (a server thread's selector may come and go)
    return count


def resource_warnings_now() -> list[str]:
    """The ``ResourceWarning``s (unclosed transports) that collecting the garbage now gives."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]

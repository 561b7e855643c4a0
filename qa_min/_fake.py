"""The fake service's state and its one owner, ``ServiceState``, behind ``testing.FakeService``.

Three private modules make the fake; ``qa_min.testing`` is the public face over them:

* ``_fakerules``: the request rules and data, pure (``apply_rules``, ``TokenBucket``, the
  ``RecordedRequest`` and ``Step`` values);
* ``_fakehttp``: the HTTP plumbing (``Server``, ``Handler``), which keeps no state and asks its
  ``Host`` what to do with each request;
* this module: ``ServiceState``, that ``Host``. It owns every piece of mutable state (settings,
  recorded requests, the script, answer overrides, connections, the rate limit's bucket and
  counters) and the one condition guarding it, which also wakes every kind of waiter.

Imports point one way: ``testing`` → ``_fake`` → ``_fakehttp`` → ``_fakerules``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

from ._fakecheck import HeaderPairs
from ._fakehttp import ConnState, Server, accept_loop, shutdown
from ._fakerules import (
    RecordedRequest,
    Reply,
    Step,
    TokenBucket,
    announce_headers,
    apply_rules,
    throttle_headers,
)
from ._origin import PATH_SAFE

# Bounds every join so that a bug in a handler cannot hang the test run that owns the fake.
JOIN_TIMEOUT: Final = 10.0
_THROTTLED_BODY: Final = {"detail": "rate limit exceeded"}


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    thread: threading.Thread
    state: ConnState = "idle"


@dataclass(frozen=True)
class _Running:
    server: Server
    accept_thread: threading.Thread
    wake_r: socket.socket
    wake_w: socket.socket


class ServiceState:
    """Everything a fake service knows, and the lock that guards it; ``FakeService`` forwards here.

    ``rate_limit`` is ``(rate, burst)`` or None; ``retry_after`` is ``"seconds"``, ``"ms"``,
    ``"both"`` or ``"none"``; ``announce`` one of ``ANNOUNCE_STYLES`` (checked by the facade).
    """

    def __init__(
        self,
        *,
        api_key: str | None,
        models: Sequence[str],
        prefix: str,
        address: tuple[str, int],
        rate_limit: tuple[float, float] | None,
        retry_after: str,
        announce: str = "none",
    ) -> None:
        self._api_key = api_key
        self._models = tuple(models)
        # Percent-encoded as a client encodes its base URL's path, so that the URL is one a
        # client takes and the routes are the paths it sends ("/a b" serves "/a%20b/v1/...").
        stripped = quote(prefix.strip("/"), safe=PATH_SAFE)
        self._prefix = f"/{stripped}" if stripped else ""
        self._address = address
        self._rate_limit = rate_limit
        self._retry_after = retry_after
        self._announce = announce
        self.url: str | None = None
        self._cond = threading.Condition()
        self._closed = False
        self._running: _Running | None = None
        self._requests: list[RecordedRequest] = []
        self._steps: deque[Step] = deque()
        self._overrides: Mapping[str, object] = {}
        self._release_generation = 0
        self._connections = 0
        self._conns: dict[socket.socket, _Conn] = {}
        self._threads: list[threading.Thread] = []
        self._bucket: TokenBucket | None = None
        self._throttled = 0

    # What the facade reads and changes.

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._cond:
            return list(self._requests)

    @property
    def counts(self) -> tuple[int, int, int]:
        """(requests, connections, 429s the rate limit answered)."""
        with self._cond:
            return len(self._requests), self._connections, self._throttled

    def start(self) -> None:
        with self._cond:
            if self._running is not None or self._closed:
                raise RuntimeError("a FakeService can be started only once")
            server = Server(self, self._address)
            server.socket.setblocking(False)
            wake_r, wake_w = socket.socketpair()
            thread = threading.Thread(
                target=accept_loop, args=(server, wake_r), name="qa_min-fake-accept", daemon=True
            )
            self._running = _Running(server, thread, wake_r, wake_w)
            # "" binds every interface (socketserver's reading): the URL names the address bound,
            # as "http://:PORT" is no URL a client takes.
            host = self._address[0] or server.socket.getsockname()[0]
            authority = f"[{host}]" if ":" in host else host  # an IPv6 literal is bracketed in a URL
            self.url = f"http://{authority}:{server.socket.getsockname()[1]}{self._prefix}"
            if self._rate_limit is not None:
                self._bucket = TokenBucket(*self._rate_limit, time.monotonic())
            # Under the lock, so that a close() from another thread never joins it unstarted.
            thread.start()

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()  # wakes hang() and delay() steps
            running = self._running
        if running is None:
            return
        running.wake_w.send(b"\0")
        running.accept_thread.join(JOIN_TIMEOUT)
        running.server.server_close()
        with self._cond:
            for conn in self._conns.values():
                shutdown(conn.sock)
            threads = list(self._threads)
        for thread in threads:
            thread.join(JOIN_TIMEOUT)
        running.wake_r.close()
        running.wake_w.close()

    def set_answers(self, overrides: Mapping[str, object]) -> None:
        with self._cond:
            self._overrides = overrides

    def script(self, steps: Sequence[Step]) -> None:
        with self._cond:
            self._steps.extend(steps)

    def wait_for_requests(self, n: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self._requests) >= n, timeout)

    def release(self) -> None:
        with self._cond:
            self._release_generation += 1
            self._cond.notify_all()

    def clear(self) -> None:
        with self._cond:
            self._requests = []
            self._steps.clear()
            self._overrides = {}
            self._connections = self._throttled = 0
            if self._bucket is not None and self._rate_limit is not None:
                self._bucket = TokenBucket(*self._rate_limit, time.monotonic())
            self._release_generation += 1  # a hang left by the last test must not hold a thread
            self._cond.notify_all()

    def close_idle_connections(self) -> None:
        with self._cond:
            # A client may already hold a response whose handler has not yet turned idle.
            self._cond.wait_for(
                lambda: all(conn.state != "writing" for conn in self._conns.values()), JOIN_TIMEOUT
            )
            idle = [conn for conn in self._conns.values() if conn.state == "idle"]
            for conn in idle:
                shutdown(conn.sock)
        for conn in idle:
            conn.thread.join(JOIN_TIMEOUT)

    # What the server and its handlers ask (the ``_fakehttp.Host`` protocol).

    def track(self, sock: socket.socket, thread: threading.Thread) -> None:
        with self._cond:
            self._connections += 1
            self._conns[sock] = _Conn(sock, thread)
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
            # Started under the lock so close_idle_connections() never joins an unstarted thread.
            thread.start()

    def untrack(self, sock: socket.socket) -> None:
        with self._cond:
            del self._conns[sock]
            self._cond.notify_all()

    def set_state(self, sock: socket.socket, state: ConnState) -> None:
        with self._cond:
            self._conns[sock].state = state
            self._cond.notify_all()

    def record(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[RecordedRequest, Step | None, int]:
        recorded = RecordedRequest(method, path, headers, body)
        with self._cond:
            self._requests.append(recorded)
            step = self._steps.popleft() if self._steps else None
            self._cond.notify_all()
            return recorded, step, self._release_generation

    def hold(self, generation: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._release_generation != generation)

    def pause(self, seconds: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._closed, seconds)

    def respond(self, recorded: RecordedRequest) -> Reply:
        announced: HeaderPairs = ()
        with self._cond:
            overrides = self._overrides
            wait = None if self._bucket is None else self._bucket.take(time.monotonic())
            if wait is not None:
                self._throttled += 1
            if self._bucket is not None and self._rate_limit is not None:
                rate, burst = self._rate_limit
                announced = announce_headers(self._announce, self._bucket.tokens, rate, burst, time.time())
        if wait is not None:
            return 429, _THROTTLED_BODY, throttle_headers(wait, self._retry_after) + announced
        status, payload, headers = apply_rules(
            recorded, overrides, api_key=self._api_key, prefix=self._prefix, models=self._models
        )
        return status, payload, headers + announced

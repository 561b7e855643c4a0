"""``qa.AsyncClient``'s lifecycle at the edges of asyncio's: what happens to a client and its
calls when the event loop they ran on goes away without them.

  a call left pending on a loop closed under it is finalized by the garbage collector without
  an error of qa_min's ("Event loop is closed"), its socket closed
      test_a_call_left_pending_on_a_closed_loop_is_finalized_quietly
"""

from __future__ import annotations

import asyncio
import gc
import sys
import warnings
from typing import Any

import pytest
from faultservers import Holds, RawServer
from support import until_true

import qa_min as qa

BOUND = 5.0  # seconds: bounds waits for what happens at once, so a bug fails instead of hanging


class Toxic(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


def test_a_call_left_pending_on_a_closed_loop_is_finalized_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    # A loop run by hand and closed while a call's task still waits for its answer (a
    # fire-and-forget task, a test runner that closes its loop): asyncio reports the pending task
    # when it is collected; the call's own cleanup must not fail on the closed loop ("Exception
    # ignored in: <coroutine ...> RuntimeError: Event loop is closed"), and closes its socket.
    unraisable: list[str] = []
    monkeypatch.setattr(
        sys, "unraisablehook", lambda u: unraisable.append(f"{u.exc_type.__name__}: {u.exc_value}")
    )
    handler = Holds()
    with RawServer(handler) as server:
        loop = asyncio.new_event_loop()
        client = qa.AsyncClient(base_url=server.url, trust_env=False, retry=qa.RetryPolicy.none)
        task: Any = loop.create_task(client.ask("s", Toxic))
        assert loop.run_until_complete(until_true(handler.heard.is_set))
        loop.close()
        task._log_destroy_pending = False  # asyncio's own report of the pending task: not ours
        del task, client
        with warnings.catch_warnings():
            # Python 3.9 and 3.10 may collect the transport before the task: it warns, then
            # closes its socket itself.
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        assert unraisable == []
        assert handler.gone.wait(BOUND)

"""``client.submit`` from asyncio: ``asyncio.wrap_future`` makes a call awaitable, and cancelling
the awaiting task cancels the call itself, down to its socket."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from faultservers import RawServer, read_request
from support import BOUND, executor_threads

import qa_min as qa
from qa_min.testing import FakeService, expected_answer, hang

PROMPT = 1.0  # seconds within which a cancelled call must have ended
TOXIC = ("The text insults someone", "The text insults no one")


class Review(qa.Questions):
    toxic = qa.YesNo(*TOXIC)
    quality = qa.Score(["poor", "fair", "good"])


def expected(state: str) -> tuple[object, object]:
    model = qa.DEFAULT_MODEL
    return (
        expected_answer(model, state, "toxic", {"true": TOXIC[0], "false": TOXIC[1]}),
        expected_answer(model, state, "quality", ["poor", "fair", "good"]),
    )


def answers_of(response: qa.AskResponse[Review]) -> tuple[object, object]:
    return response.answers.toxic, response.answers.quality


@pytest.fixture
def env_free_client(svc: FakeService) -> Iterator[qa.Client]:
    """Unlike conftest's ``client``, the default retry policy and the environment ignored."""
    with qa.Client(base_url=svc.url, trust_env=False) as c:
        yield c
    assert executor_threads() == []


def test_awaiting_a_submitted_call_returns_its_answer(env_free_client: qa.Client) -> None:
    async def main() -> qa.AskResponse[Review]:
        return await asyncio.wrap_future(env_free_client.submit(env_free_client.ask, "Some text", Review))

    response = asyncio.run(main())
    assert answers_of(response) == expected("Some text")


def test_awaiting_list_models_through_submit(env_free_client: qa.Client) -> None:
    async def main() -> qa.ModelList:
        return await asyncio.wrap_future(env_free_client.submit(env_free_client.list_models))

    assert "judge-latest" in [model.name for model in asyncio.run(main()).models]


def test_gather_of_twenty_calls_returns_each_its_own_answer(
    svc: FakeService, env_free_client: qa.Client
) -> None:
    states = [f"text number {i}" for i in range(20)]

    async def main() -> list[qa.AskResponse[Review]]:
        calls = [
            asyncio.wrap_future(env_free_client.submit(env_free_client.ask, state, Review))
            for state in states
        ]
        responses: list[qa.AskResponse[Review]] = await asyncio.gather(*calls)
        return responses

    responses = asyncio.run(main())
    assert [answers_of(r) for r in responses] == [expected(s) for s in states]
    assert len(svc.requests) == 20
    # 20 calls on 8 workers: connections are reused, one request at a time each.
    assert svc.connections <= 8


def test_errors_reach_the_awaiting_task_as_qa_errors(svc: FakeService, env_free_client: qa.Client) -> None:
    async def main() -> None:
        await asyncio.wrap_future(
            env_free_client.submit(env_free_client.ask, "Some text", Review, model="no-such-model")
        )

    with pytest.raises(qa.NotFound):
        asyncio.run(main())


class DropWatcher:
    """A server that never answers and notices when the client drops the connection."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.dropped = threading.Event()
        self.server = RawServer(self._handle)

    def _handle(self, conn: socket.socket, stop: threading.Event) -> None:
        if not read_request(conn):
            return
        self.arrived.set()
        # Nothing more is ever sent, so the next read ends only when the client hangs up.
        conn.settimeout(BOUND)
        try:
            if conn.recv(1) == b"":
                self.dropped.set()
        except ConnectionResetError:
            self.dropped.set()

    def __enter__(self) -> DropWatcher:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__(None, None, None)


def test_cancelling_the_awaiting_task_cancels_the_call_and_drops_its_connection() -> None:
    with DropWatcher() as watcher, qa.Client(base_url=watcher.server.url, trust_env=False) as client:
        diag = qa.Diagnostics()
        call = client.submit(client.ask, "Some text", Review, diagnostics=diag)

        async def main() -> float:
            task = asyncio.ensure_future(asyncio.wrap_future(call))
            await asyncio.sleep(0)  # the task now awaits the wrapped call
            arrived = await asyncio.get_running_loop().run_in_executor(None, watcher.arrived.wait, BOUND)
            assert arrived
            fired = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return fired

        fired = asyncio.run(main())
        with pytest.raises(qa.Canceled):
            call.result(timeout=BOUND)
        assert time.monotonic() - fired < PROMPT
        assert watcher.dropped.wait(BOUND)
        assert diag.attempts == 1
        assert client._transport.pool.idle_count() == 0


def test_wait_for_timeout_cancels_the_call(svc: FakeService) -> None:
    # asyncio.wait_for cancels what it waits for on expiry: the call must stop, not run on.
    svc.script(hang())
    with qa.Client(base_url=svc.url, trust_env=False) as client:
        call = client.submit(client.ask, "Some text", Review)

        async def main() -> None:
            await asyncio.wait_for(asyncio.wrap_future(call), 0.1)

        with pytest.raises(asyncio.TimeoutError):
            asyncio.run(main())
        with pytest.raises(qa.Canceled):
            call.result(timeout=PROMPT)

        # The client goes on working after the cancelled call.
        async def again() -> qa.AskResponse[Review]:
            return await asyncio.wrap_future(client.submit(client.ask, "Other text", Review))

        assert answers_of(asyncio.run(again())) == expected("Other text")

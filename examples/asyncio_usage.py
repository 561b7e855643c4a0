"""asyncio: await qa_min calls without blocking the event loop.

``client.submit`` runs a call on the client's own threads and returns a ``Call`` (a
``concurrent.futures.Future``); ``asyncio.wrap_future`` makes it awaitable. Cancelling the
awaiting task (``asyncio.wait_for`` does on timeout) cancels the call and aborts its request.

    python examples/asyncio_usage.py

Without ``SERVICE_BASE_URL`` it starts a local fake service whose first request hangs, to show
the timeout.
"""

from __future__ import annotations

import asyncio
import os

import qa_min as qa


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")
    quality = qa.Score(["poor", "fair", "good"])


TEXTS = [
    "Great product, arrived early.",
    "Terrible. Never again.",
    "It does what it says.",
    "The manual is useless and so is your support team.",
]


async def ask(client: qa.Client, text: str) -> qa.AskResponse[Review]:
    return await asyncio.wrap_future(client.submit(client.ask, text, Review))


async def ask_with_deadline(client: qa.Client, text: str, seconds: float) -> qa.AskResponse[Review] | None:
    try:
        return await asyncio.wait_for(ask(client, text), seconds)
    except asyncio.TimeoutError:  # the builtin TimeoutError from Python 3.11 on
        return None


async def run(base_url: str | None) -> None:
    # max_workers bounds how many calls run at once; the others wait for a thread.
    with qa.Client(base_url=base_url, max_workers=4) as client:
        first = await ask_with_deadline(client, TEXTS[0], 0.5)
        if first is None:
            print("no answer within 0.5 s: the call was cancelled")
        else:
            print(f"answered within 0.5 s: toxic={first.answers.toxic}")

        responses = await asyncio.gather(*(ask(client, text) for text in TEXTS))
        for text, response in zip(TEXTS, responses):
            print(f"{text[:30]!r:34} toxic={response.answers.toxic!s:5} quality={response.answers.quality}")

        # return_exceptions=True: one failed call does not hide the others' answers.
        results = await asyncio.gather(ask(client, TEXTS[0]), ask(client, "  "), return_exceptions=True)
        print(" / ".join(type(r).__name__ for r in results))


def main(base_url: str | None = None) -> None:
    asyncio.run(run(base_url))


if __name__ == "__main__":
    if os.environ.get("SERVICE_BASE_URL", "").strip():
        main()
    else:
        from qa_min.testing import FakeService, hang

        with FakeService() as service:
            print(f"(no SERVICE_BASE_URL: a local fake service at {service.url}; its answers are arbitrary)")
            service.script(hang())
            main(service.url)

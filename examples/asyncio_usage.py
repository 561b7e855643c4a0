"""asyncio: ``qa.AsyncClient``, the same client native on asyncio (no thread, nothing blocking).

``await client.ask(...)`` takes the same per-call options as ``Client.ask``: ``timeout=`` (the
call raises ``qa.Canceled`` when it expires), ``cancel=``, ``retry=``, ``diagnostics=``.
Cancelling the task that awaits a call raises ``asyncio.CancelledError`` at once and closes its
connection. Mixed code that already has a threaded ``Client`` can await its calls through
``asyncio.wrap_future(client.submit(...))``, at most ``max_workers`` at a time.

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


async def run(base_url: str | None) -> None:
    async with qa.AsyncClient(base_url=base_url) as client:
        try:
            first = await client.ask(TEXTS[0], Review, timeout=0.5)
            print(f"answered within 0.5 s: toxic={first.answers.toxic}")
        except qa.Canceled:
            print("no answer within 0.5 s: the call was cancelled")

        # Any number of calls at once, on one thread, over a keep-alive pool.
        responses = await asyncio.gather(*(client.ask(text, Review) for text in TEXTS))
        for text, response in zip(TEXTS, responses):
            print(f"{text[:30]!r:34} toxic={response.answers.toxic!s:5} quality={response.answers.quality}")

        # return_exceptions=True: one failed call does not hide the others' answers.
        results = await asyncio.gather(
            client.ask(TEXTS[0], Review), client.ask("  ", Review), return_exceptions=True
        )
        print(" / ".join(type(r).__name__ for r in results))

        # Cancelling the awaiting task: CancelledError at once, the connection closed.
        task = asyncio.ensure_future(client.ask(TEXTS[1], Review))
        await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            print("task cancelled: CancelledError")
        else:
            print("answered before the cancel")


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

"""Quickstart: ask a typed set of questions about a text.

Run it from the repository root (or with qa_min installed)::

    python examples/quickstart.py

With ``SERVICE_BASE_URL`` set (and ``SERVICE_API_KEY`` for the public service) it asks that
service; otherwise it starts a local fake service (``qa_min.testing.FakeService``) first.
"""

from __future__ import annotations

import enum
import os

import qa_min as qa


class Tone(enum.Enum):
    # The values are what the service reads; the names are what your code gets back.
    formal = "Written in a formal register"
    casual = "Written casually"


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")
    tone = qa.Choice(Tone)
    quality = qa.Score(["poor", "fair", "good"])


TEXT = "Thanks a lot for the quick fix, it works perfectly now."


def main(base_url: str | None = None) -> None:
    # base_url=None reads SERVICE_BASE_URL; the key comes from SERVICE_API_KEY, the model from
    # SERVICE_DEFAULT_MODEL (default qa.DEFAULT_MODEL).
    with qa.Client(base_url=base_url) as client:
        response = client.ask(TEXT, Review)

    answers = response.answers
    toxic: bool = answers.toxic  # mypy knows each answer's type
    tone: Tone = answers.tone
    quality: int = answers.quality
    print(f"text:    {TEXT!r}")
    print(f"toxic:   {toxic}")
    print(f"tone:    {tone.name} ({tone.value})")
    print(f"quality: {quality} ({['poor', 'fair', 'good'][quality]})")
    print(f"usage:   {dict(response.usage)}")


if __name__ == "__main__":
    if os.environ.get("SERVICE_BASE_URL", "").strip():
        main()
    else:
        from qa_min.testing import FakeService

        with FakeService() as service:
            print(f"(no SERVICE_BASE_URL: a local fake service at {service.url}; its answers are arbitrary)")
            main(service.url)

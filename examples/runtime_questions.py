"""Questions built at run time: ``qa.Request`` and ``client.core``.

Use this when the questions come from configuration, a database or a user, rather than from
code. Here they come from a JSON document, the same format as ``python -m qa_min ask
--questions FILE.json``.

    python examples/runtime_questions.py

With ``SERVICE_BASE_URL`` set it asks that service; otherwise it starts a local fake service.
"""

from __future__ import annotations

import json
import os
from typing import Any

import qa_min as qa

CONFIG = """
{
  "spam":    {"yes_no": ["The text advertises something", "The text advertises nothing"]},
  "lang":    {"choice": {"en": "English", "fr": "French", "de": "German"}},
  "urgency": {"score":  ["can wait", "this week", "today", "right now"]}
}
"""


def build_questions(config: dict[str, Any]) -> list[qa.NamedQuestion]:
    """One NamedQuestion per entry; the library validates the texts and option counts."""
    questions = []
    for name, spec in config.items():
        ((kind, criteria),) = spec.items()
        if kind == "yes_no":
            yes, no = criteria
            questions.append(qa.NamedQuestion(name, qa.YesNo(yes, no)))
        elif kind == "choice":
            questions.append(qa.NamedQuestion(name, qa.Choice(dict(criteria))))
        else:
            questions.append(qa.NamedQuestion(name, qa.Score(list(criteria))))
    return questions


def main(base_url: str | None = None) -> None:
    questions = build_questions(json.loads(CONFIG))
    texts = ["Please call me back today, the server room is flooding.", "Buy two, get one free!"]
    with qa.Client(base_url=base_url) as client:
        for text in texts:
            # Request validates now (names, duplicates, the text), before anything is sent.
            response = client.core(qa.Request(text, questions))
            answers = ", ".join(f"{name}={value!r}" for name, value in response.answers.items())
            print(f"{text[:40]!r:44} {answers}")
        # One request can name its own model, overriding the client's.
        pinned = client.core(qa.Request(texts[0], questions, model="judge-2.1"))
        print(f"with model judge-2.1: urgency={pinned.get('urgency')}")

    try:
        qa.Request("some text", [])
    except qa.ValidationError as exc:  # NoQuestions, DuplicateQuestionName, InvalidQuestion, ...
        print(f"validation: {type(exc).__name__}: {exc}")


if __name__ == "__main__":
    if os.environ.get("SERVICE_BASE_URL", "").strip():
        main()
    else:
        from qa_min.testing import FakeService

        with FakeService() as service:
            print(f"(no SERVICE_BASE_URL: a local fake service at {service.url}; its answers are arbitrary)")
            main(service.url)

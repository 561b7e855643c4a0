"""Static typing of the public API, checked by mypy (``tests/test_typing.py``), never run.

Each ``assert_type`` states the type mypy must infer for a public expression. Each misuse line
carries ``# type: ignore[<code>]`` with the exact error code: ``--strict`` turns on
``warn_unused_ignores``, so a misuse that stops being an error fails the check too.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

import qa_min as qa

if TYPE_CHECKING:
    # mypy's bundled stubs know typing_extensions; the package need not be installed, since
    # this module is only ever type-checked.
    from typing_extensions import assert_type
elif sys.version_info >= (3, 11):
    from typing import assert_type
else:

    def assert_type(value: object, _type: object) -> object:
        return value


class Tone(enum.Enum):
    formal = "Written in a formal register"
    casual = "Written casually"


class Level(enum.Enum):
    low = "Barely"
    high = "Clearly"


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")
    tone = qa.Choice(Tone)
    lang = qa.Choice({"en": "English", "fr": "French"})
    quality = qa.Score(["poor", "fair", "good"])
    level = qa.Score(Level)


def answers_have_their_declared_types(client: qa.Client) -> None:
    response = client.ask("Some text", Review)
    assert_type(response, qa.AskResponse[Review])
    assert_type(response.answers, Review)
    assert_type(response.answers.toxic, bool)
    assert_type(response.answers.tone, Tone)
    assert_type(response.answers.lang, str)
    assert_type(response.answers.quality, int)
    assert_type(response.answers.level, Level)
    assert_type(response.usage, Mapping[str, Any])


def questions_read_on_the_class_are_the_question_objects() -> None:
    assert_type(Review.toxic, qa.YesNo)
    assert_type(Review.tone, qa.Choice[Tone])
    assert_type(Review.lang, qa.Choice[str])
    assert_type(Review.quality, qa.Score[int])
    assert_type(Review.level, qa.Score[Level])


def canned_answers_build_the_same_type() -> None:
    canned = Review(toxic=True, tone=Tone.formal, lang="en", quality=2, level=Level.low)
    assert_type(canned.toxic, bool)


def every_operation_has_its_response_type(client: qa.Client, cancel: qa.CancelToken) -> None:
    request = qa.Request(
        state="Some text",
        questions=[
            qa.NamedQuestion("toxic", qa.YesNo("insults someone", "insults no one")),
            qa.NamedQuestion("lang", qa.Choice({"en": "English", "fr": "French"})),
        ],
        model=None,
    )
    core = client.core(request, model="judge-2.1", retry=qa.RetryPolicy.none, cancel=cancel, timeout=5.0)
    assert_type(core, qa.CoreResponse)
    assert_type(core.answers, Mapping[str, Any])
    models = client.list_models(diagnostics=qa.Diagnostics(), timeout=None)
    assert_type(models, qa.ModelList)
    assert_type([m.name for m in models.models], list[str])
    assert_type(client.model, str)


def submit_keeps_the_operation_result_type(client: qa.Client) -> None:
    assert_type(client.submit(client.ask, "Some text", Review), qa.Call[qa.AskResponse[Review]])
    assert_type(client.submit(client.list_models), qa.Call[qa.ModelList])
    request = qa.Request("Some text", [qa.NamedQuestion("toxic", qa.YesNo("yes", "no"))])
    assert_type(client.submit(client.core, request), qa.Call[qa.CoreResponse])
    call = client.submit(client.ask, "Some text", Review, timeout=2.0)
    assert_type(call.result().answers.toxic, bool)


def errors_carry_typed_details() -> None:
    try:
        pass
    except qa.APIStatusError as exc:
        assert_type(exc.status, int)
        assert_type(exc.diagnostics, qa.Diagnostics)
    diagnostics = qa.Diagnostics()
    assert_type(diagnostics.status, Optional[int])
    assert_type(diagnostics.body, Optional[str])
    assert_type(diagnostics.attempts, int)
    assert_type(diagnostics.transport_error, Optional[BaseException])
    assert_type(qa.RetryPolicy().max_retries, int)


def misuse_is_a_type_error(client: qa.Client) -> None:
    response = client.ask("Some text", Review)
    print(response.answers.nope)  # type: ignore[attr-defined]
    client.ask("Some text", Review, retry=5)  # type: ignore[arg-type]
    qa.Choice(5)  # type: ignore[call-overload]
    qa.Score(3)  # type: ignore[call-overload]
    client.ask(1, Review)  # type: ignore[arg-type]
    client.ask("Some text", Review())  # type: ignore[arg-type]
    qa.YesNo("yes", None)  # type: ignore[arg-type]
    client.submit(client.ask, 1, Review)  # type: ignore[arg-type]
    answer: str = response.answers.toxic  # type: ignore[assignment]
    del answer

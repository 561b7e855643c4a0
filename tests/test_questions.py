"""SPEC.md section 4 (operations) and the question table of section 1 they rely on.

Spec line -> tests:

  S1 table: yes/no criteria {"true", "false"}, answer JSON true/false, Python bool
      test_criteria_wire_form[yesno], test_fake_answers_decode_for_every_kind,
      test_well_formed_answer_decodes[yesno-*], test_wrong_answer_is_invalid_response[yesno-*]
  S1 table: choice criteria {option: description} (2+), answer one option key, Python the key
  str or the Enum member
      test_criteria_wire_form[choice-*], test_choice_option_order_is_kept_on_the_wire,
      test_well_formed_answer_decodes[choice-*], test_wrong_answer_is_invalid_response[choice-*]
  S1 table: score criteria [level texts] (2+), answer 0-based int (not a bool), Python int or
  the Enum member at that position
      test_criteria_wire_form[score-*], test_well_formed_answer_decodes[score-*],
      test_wrong_answer_is_invalid_response[score-*], test_wrong_answer_in_ask_is_invalid_response
  class Review(qa.Questions) ... client.ask("Some text", Review)   # POST /v1/core
      test_ask_returns_typed_answers_on_a_questions_instance
  r.answers.toxic bool / .tone Tone.formal / .quality int (mypy infers bool, Tone, int)
      test_ask_returns_typed_answers_on_a_questions_instance, test_mypy_infers_answer_types
  a Questions class asks its own questions and every base's
      test_a_questions_class_asks_the_questions_of_every_base
  Review(toxic=True, ...) by hand: read-only, equal only to the same answers of the same class;
  class keywords reach a cooperating base
      test_answers_by_hand_are_read_only_and_equal_only_to_the_same_answers_of_the_same_class,
      test_a_questions_class_passes_class_keywords_on_to_a_cooperating_base
  r.usage   # mapping, as the server sent it
      test_usage_is_the_servers_mapping
  qa.Request(state=..., questions=[qa.NamedQuestion(...)], model=None); client.core(req)
      test_core_returns_answers_by_id, test_request_accepts_name_question_pairs
  r2.get("lang") -> "en"; r2.answers is a read-only mapping of id -> answer
      test_core_returns_answers_by_id, test_core_answers_are_read_only
  models = client.list_models(); [m.name for m in models.models]
      test_list_models_returns_model_names,
      test_results_show_what_they_hold_and_a_model_equals_only_its_like
  Per-call retry=, diagnostics=, cancel=, timeout= on every operation; ask/core take model=
      test_every_operation_takes_the_per_call_options
      test_per_call_retry_diagnostics_cancel_and_timeout_take_effect
  Request.model / model= override the client's model for one call
      test_model_override_is_sent_for_one_call
  Validation before any byte is sent, ValidationError subclasses: NoQuestions,
  DuplicateQuestionName, empty or non-string names or state, yes/no with an empty text,
  choice < 2 options, a choice of exactly "true" and "false" (yes/no criteria), score < 2 levels,
  a score with one level text twice, a yes/no or a choice with one text for two answers, ...
      test_no_questions, test_duplicate_question_name, test_bad_question_name,
      test_choice_of_exactly_true_and_false_is_refused_as_a_yes_no,
      test_choice_near_true_and_false_is_a_choice,
      test_a_score_refuses_a_level_text_given_twice,
      test_a_score_enum_with_one_value_twice_is_its_distinct_members,
      test_a_yes_no_with_one_text_for_both_answers_is_refused,
      test_a_choice_with_one_text_for_two_options_is_refused,
      test_texts_that_differ_by_one_character_are_distinct,
      test_questions_are_equal_by_kind_and_criteria_and_hash_alike,
      test_bad_state_for_ask, test_bad_state_for_request, test_bad_question_definition,
      test_a_state_that_is_not_utf8_is_refused_before_sending,
      test_a_state_next_to_the_surrogates_is_sent_as_utf8,
      test_a_question_text_or_name_that_is_not_utf8_is_refused,
      test_a_questions_class_with_a_name_that_is_not_utf8_is_refused,
      test_a_questions_class_refuses_a_question_named_as_its_machinery,
      test_a_questions_subclass_refuses_a_reserved_name_its_base_did_not_use,
      test_a_question_named_next_to_a_reserved_name_is_asked,
      test_question_texts_next_to_the_surrogates_are_sent,
      test_a_choice_enum_member_name_is_checked_as_an_option_key,
      test_a_choice_enum_member_name_at_the_limits_is_sent,
      test_non_question_objects_are_refused, test_ask_refuses_what_is_not_a_questions_class,
      test_a_dict_or_a_string_is_refused_as_what_it_is,
      test_a_pair_of_a_two_character_name_and_a_question_is_accepted,
      test_core_refuses_what_is_not_a_request, test_bad_model_is_refused_before_sending,
      test_a_model_not_utf8_or_with_a_newline_is_refused_before_sending,
      test_a_model_next_to_the_surrogates_is_sent,
      test_a_model_with_any_control_character_is_refused,
      test_a_model_next_to_the_control_characters_is_sent,
      test_a_request_checks_its_model_when_made, test_a_request_keeps_a_good_model
      test_str_subclass_is_a_string (the positive side of "non-string")
  Versioned model ids are accepted whether or not list_models lists them
      test_versioned_model_ids_are_accepted
  (helper) test_listener_sees_a_connection: the "nothing was sent" probe itself works
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support import InProcessService, Listener, make_client, no_sleep

import qa_min as qa
from qa_min.testing import FakeService, expected_answer, hang, reply


@pytest.fixture
def svc() -> Iterator[InProcessService]:
    """The service in-process (MockTransport): these tests are about the layers above the socket."""
    with InProcessService() as service:
        yield service


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing_extensions import assert_type
else:

    def assert_type(value, _type):
        return value


class Tone(enum.Enum):
    formal = "Written in a formal register"
    casual = "Written casually"


class Level(enum.Enum):
    low = "Barely"
    mid = "Somewhat"
    high = "Very"


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")
    tone = qa.Choice(Tone)
    quality = qa.Score(["poor", "fair", "good"])


class Mixed(qa.Questions):
    lang = qa.Choice({"en": "English", "fr": "French", "de": "German"})
    level = qa.Score(Level)


@pytest.fixture(scope="module")
def shared_service() -> Iterator[FakeService]:
    # For the answer tables: they only set answers (never script steps), so one service can
    # serve them all; starting one per case would dominate the file's run time.
    with FakeService() as service:
        yield service


@pytest.fixture
def shared(shared_service: FakeService) -> Iterator[tuple[FakeService, qa.Client]]:
    with qa.Client(base_url=shared_service.url, retry=qa.RetryPolicy.none) as c:
        yield shared_service, c
    shared_service.set_answers({})


def test_listener_sees_a_connection(listener: Listener) -> None:
    # The "nothing was sent" checks below rely on this.
    assert listener.connections() == 0
    listener.connect_once()
    assert listener.connections() == 1


@pytest.fixture
def idle_client(listener: Listener) -> Iterator[qa.Client]:
    # The timeout only bounds a test whose call wrongly goes out: nothing ever answers.
    with qa.Client(base_url=listener.url, retry=qa.RetryPolicy.none, timeout=2.0) as c:
        yield c


def assert_nothing_sent(listener: Listener) -> None:
    assert listener.connections() == 0


# -- the question table ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "criteria"),
    [
        (qa.YesNo("insults", "does not insult"), {"true": "insults", "false": "does not insult"}),
        (qa.Choice({"en": "English", "fr": "French"}), {"en": "English", "fr": "French"}),
        (qa.Choice(Tone), {"formal": "Written in a formal register", "casual": "Written casually"}),
        (qa.Score(["poor", "fair", "good"]), ["poor", "fair", "good"]),
        (qa.Score(("no", "yes")), ["no", "yes"]),
        (qa.Score(Level), ["Barely", "Somewhat", "Very"]),
    ],
    ids=["yesno", "choice-dict", "choice-enum", "score-list", "score-tuple", "score-enum"],
)
def test_criteria_wire_form(shared: tuple[FakeService, qa.Client], question: Any, criteria: object) -> None:
    svc, client = shared
    client.core(qa.Request(state="x", questions=[qa.NamedQuestion("q", question)]))
    assert svc.requests[-1].json()["questions"] == {"q": {"criteria": criteria}}


def test_choice_option_order_is_kept_on_the_wire(shared: tuple[FakeService, qa.Client]) -> None:
    svc, client = shared
    options = {"zeta": "Z", "alpha": "A", "mid": "M"}
    client.core(qa.Request(state="x", questions=[qa.NamedQuestion("q", qa.Choice(options))]))
    assert list(svc.requests[-1].json()["questions"]["q"]["criteria"]) == ["zeta", "alpha", "mid"]


@pytest.mark.parametrize("state", ["a", "Some text", "another text entirely", "x y z"])
def test_fake_answers_decode_for_every_kind(shared: tuple[FakeService, qa.Client], state: str) -> None:
    svc, client = shared
    result = client.ask(state, Review)
    model = qa.DEFAULT_MODEL
    wire = svc.requests[-1].json()["questions"]
    assert result.answers.toxic is expected_answer(model, state, "toxic", wire["toxic"]["criteria"])
    assert result.answers.tone is Tone[str(expected_answer(model, state, "tone", wire["tone"]["criteria"]))]
    assert result.answers.quality == expected_answer(model, state, "quality", wire["quality"]["criteria"])
    mixed = client.ask(state, Mixed)
    wire = svc.requests[-1].json()["questions"]
    assert mixed.answers.lang == expected_answer(model, state, "lang", wire["lang"]["criteria"])
    level = expected_answer(model, state, "level", wire["level"]["criteria"])
    assert isinstance(level, int)
    assert mixed.answers.level is list(Level)[level]


QUESTIONS: dict[str, Any] = {
    "yesno": qa.YesNo("yes", "no"),
    "choice": qa.Choice({"en": "English", "fr": "French"}),
    "choice-enum": qa.Choice(Tone),
    "score": qa.Score(["poor", "fair", "good"]),
    "score-enum": qa.Score(Level),
}

GOOD_ANSWERS: list[tuple[str, object, object]] = [
    ("yesno", True, True),
    ("yesno", False, False),
    ("choice", "en", "en"),
    ("choice", "fr", "fr"),
    ("choice-enum", "formal", Tone.formal),
    ("choice-enum", "casual", Tone.casual),
    ("score", 0, 0),
    ("score", 2, 2),
    ("score-enum", 0, Level.low),
    ("score-enum", 2, Level.high),
]


@pytest.mark.parametrize(
    ("kind", "wire", "expected"),
    [pytest.param(k, w, e, id=f"{k}-{w!r}") for k, w, e in GOOD_ANSWERS],
)
def test_well_formed_answer_decodes(
    shared: tuple[FakeService, qa.Client], kind: str, wire: object, expected: object
) -> None:
    svc, client = shared
    svc.set_answers({"q": wire})
    result = client.core(qa.Request(state="x", questions=[qa.NamedQuestion("q", QUESTIONS[kind])]))
    answer = result.get("q")
    assert answer == expected
    assert type(answer) is type(expected)


BAD_ANSWERS: list[tuple[str, object]] = [
    ("yesno", 1),
    ("yesno", 0),
    ("yesno", "true"),
    ("yesno", "yes"),
    ("yesno", None),
    ("yesno", [True]),
    ("choice", "es"),
    ("choice", "EN"),
    ("choice", "English"),
    ("choice", 0),
    ("choice", True),
    ("choice", None),
    ("choice", ["en"]),
    ("choice-enum", "Written casually"),
    ("choice-enum", "Tone.formal"),
    ("choice-enum", "neutral"),
    ("choice-enum", 1),
    ("score", True),
    ("score", False),
    ("score", 3),
    ("score", -1),
    ("score", 1.0),
    ("score", "1"),
    ("score", None),
    ("score", "fair"),
    ("score-enum", 3),
    ("score-enum", True),
    ("score-enum", "mid"),
    ("score-enum", "Somewhat"),
]


@pytest.mark.parametrize(
    ("kind", "wire"),
    [pytest.param(k, w, id=f"{k}-{w!r}") for k, w in BAD_ANSWERS],
)
def test_wrong_answer_is_invalid_response(
    shared: tuple[FakeService, qa.Client], kind: str, wire: object
) -> None:
    svc, client = shared
    svc.set_answers({"q": wire})
    request = qa.Request(state="x", questions=[qa.NamedQuestion("q", QUESTIONS[kind])])
    with pytest.raises(qa.InvalidResponse) as caught:
        client.core(request)
    assert "'q'" in str(caught.value)  # the message names the question at fault


def test_wrong_answer_in_ask_is_invalid_response(svc: InProcessService, client: qa.Client) -> None:
    svc.set_answers({"quality": True})
    with pytest.raises(qa.InvalidResponse, match=r"'quality': expected a level from 0 to 2, got True"):
        client.ask("x", Review)


@pytest.mark.parametrize(
    ("operation", "body", "message"),
    [
        ("ask", {"usage": {}}, 'the response has no "answers"'),
        ("ask", {"answers": None}, '"answers" must be an object, got None'),
        ("list_models", {"data": []}, 'the response has no "models"'),
        ("list_models", {"models": None}, '"models" must be a list, got None'),
    ],
)
def test_a_success_missing_its_field_says_so(
    svc: InProcessService, client: qa.Client, operation: str, body: object, message: str
) -> None:
    svc.script(reply(200, body))
    with pytest.raises(qa.InvalidResponse) as caught:
        client.ask("x", Review) if operation == "ask" else client.list_models()
    assert message in str(caught.value)
    assert "object at 0x" not in str(caught.value)


# -- the operations and their responses ---------------------------------------------------


def test_ask_returns_typed_answers_on_a_questions_instance(svc: InProcessService, client: qa.Client) -> None:
    svc.set_answers({"toxic": False, "tone": "formal", "quality": 1})
    r = client.ask("Some text", Review)
    assert isinstance(r, qa.AskResponse)
    assert isinstance(r.answers, Review)
    assert r.answers.toxic is False
    assert r.answers.tone is Tone.formal
    assert r.answers.quality == 1
    assert type(r.answers.quality) is int
    assert (svc.requests[0].method, svc.requests[0].path) == ("POST", "/v1/core")
    with pytest.raises(AttributeError):
        r.answers.toxic = True


class ReviewToo(Review):  # the same questions, another class
    pass


def test_answers_by_hand_are_read_only_and_equal_only_to_the_same_answers_of_the_same_class() -> None:
    answers = Review(toxic=True, tone=Tone.formal, quality=2)
    with pytest.raises(AttributeError, match="Review answers are read-only"):
        answers.toxic = False
    with pytest.raises(AttributeError, match="Review answers are read-only"):
        del answers.toxic
    assert answers.toxic is True
    assert answers == Review(toxic=True, tone=Tone.formal, quality=2)
    assert answers != Review(toxic=False, tone=Tone.formal, quality=2)  # one answer differs
    assert answers != ReviewToo(toxic=True, tone=Tone.formal, quality=2)  # the same answers, another class
    assert answers != {"toxic": True, "tone": Tone.formal, "quality": 2}


def test_a_questions_class_passes_class_keywords_on_to_a_cooperating_base() -> None:
    # ``__init_subclass__`` calls the next one in the MRO: a mixin's keywords reach it.
    seen: list[tuple[str, object]] = []

    class Registered:
        def __init_subclass__(cls, tag: object = None, **kwargs: Any) -> None:
            super().__init_subclass__(**kwargs)
            seen.append((cls.__name__, tag))

    class Tagged(qa.Questions, Registered, tag="reviews"):
        toxic = qa.YesNo("insults someone", "insults no one")

    assert seen == [("Tagged", "reviews")]
    assert [name for name, _ in Tagged._qa_fields] == ["toxic"]


class Tonal(qa.Questions):
    tone = qa.Choice(Tone)


class Judged(qa.Questions):
    quality = qa.Score(Level)


class Both(Tonal, Judged):  # questions from every base, as dataclasses merge fields
    toxic = qa.YesNo("insults someone", "insults no one")


def test_a_questions_class_asks_the_questions_of_every_base(svc: InProcessService, client: qa.Client) -> None:
    svc.set_answers({"toxic": True, "tone": "casual", "quality": 2})
    r = client.ask("Some text", Both)
    assert list(svc.requests[0].json()["questions"]) == ["quality", "tone", "toxic"]  # farthest base first
    assert (r.answers.toxic, r.answers.tone, r.answers.quality) == (True, Tone.casual, Level.high)
    assert Both(toxic=False, tone=Tone.formal, quality=Level.low).quality is Level.low


def test_mypy_infers_answer_types(svc: InProcessService, client: qa.Client) -> None:
    # mypy --strict over this file checks the assert_type calls; at run time they are no-ops.
    r = client.ask("Some text", Review)
    assert_type(r.answers.toxic, bool)
    assert_type(r.answers.tone, Tone)
    assert_type(r.answers.quality, int)
    m = client.ask("Some text", Mixed)
    assert_type(m.answers.lang, str)
    assert_type(m.answers.level, Level)
    assert isinstance(r.answers.toxic, bool)


def test_usage_is_the_servers_mapping(svc: InProcessService, client: qa.Client) -> None:
    r = client.ask("three words here", Review)
    assert dict(r.usage) == {"input_tokens": 3, "output_tokens": 3}
    r2 = client.core(qa.Request(state="two words", questions=[qa.NamedQuestion("a", qa.YesNo("y", "n"))]))
    assert dict(r2.usage) == {"input_tokens": 2, "output_tokens": 1}


def test_core_returns_answers_by_id(svc: InProcessService, client: qa.Client) -> None:
    svc.set_answers({"toxic": True, "lang": "en"})
    req = qa.Request(
        state="Some text",
        questions=[
            qa.NamedQuestion("toxic", qa.YesNo("insults someone", "insults no one")),
            qa.NamedQuestion("lang", qa.Choice({"en": "English", "fr": "French"})),
        ],
        model=None,
    )
    r2 = client.core(req)
    assert isinstance(r2, qa.CoreResponse)
    assert r2.get("lang") == "en"
    assert r2.get("toxic") is True
    assert r2.get("nope") is None
    assert r2.get("nope", "fallback") == "fallback"
    assert dict(r2.answers) == {"toxic": True, "lang": "en"}
    assert (svc.requests[0].method, svc.requests[0].path) == ("POST", "/v1/core")


def test_core_answers_are_read_only(client: qa.Client) -> None:
    r2 = client.core(qa.Request(state="x", questions=[qa.NamedQuestion("a", qa.YesNo("y", "n"))]))
    answers: Any = r2.answers
    with pytest.raises(TypeError):
        answers["a"] = "changed"
    with pytest.raises(TypeError):
        del answers["a"]
    with pytest.raises(AttributeError):  # no attribute can be added either: it has no __dict__
        answers.note = "changed"


def test_request_accepts_name_question_pairs(svc: InProcessService, client: qa.Client) -> None:
    pairs: Any = [("a", qa.YesNo("y", "n"))]
    client.core(qa.Request(state="x", questions=pairs))
    assert list(svc.requests[0].json()["questions"]) == ["a"]


def test_a_misspelt_attribute_of_a_request_or_named_question_is_refused_not_kept() -> None:
    # Both have fixed attributes (no __dict__): `request.modle = ...` raises instead of being ignored.
    named: Any = qa.NamedQuestion("a", qa.YesNo("y", "n"))
    request: Any = qa.Request(state="x", questions=[named])
    with pytest.raises(AttributeError):
        request.modle = "judge-latest"
    with pytest.raises(AttributeError):
        named.questoin = qa.YesNo("y", "n")
    assert not hasattr(request, "modle")
    assert not hasattr(named, "questoin")


def test_list_models_returns_model_names(svc: InProcessService, client: qa.Client) -> None:
    from qa_min.testing import DEFAULT_MODELS

    models = client.list_models()
    assert isinstance(models, qa.ModelList)
    assert [m.name for m in models.models] == list(DEFAULT_MODELS)
    assert all(isinstance(m, qa.Model) for m in models.models)
    assert (svc.requests[0].method, svc.requests[0].path) == ("GET", "/v1/models")


def test_results_show_what_they_hold_and_a_model_equals_only_its_like(
    svc: InProcessService, client: qa.Client
) -> None:
    from qa_min.testing import DEFAULT_MODELS

    models = client.list_models()
    assert len(models) == len(DEFAULT_MODELS) >= 2
    assert repr(models) == f"ModelList({list(DEFAULT_MODELS)!r})"
    first, second = models.models[:2]
    assert repr(first) == f"Model(name={first.name!r})"
    assert first == qa.Model(first.name, dict(first.info))
    assert first != second
    assert first != first.name
    svc.set_answers({"a": True})
    core = client.core(qa.Request(state="x", questions=[qa.NamedQuestion("a", qa.YesNo("y", "n"))]))
    assert repr(core) == f"CoreResponse(answers={{'a': True}}, usage={dict(core.usage)!r})"
    asked = client.ask("x", Review)
    assert repr(asked) == f"AskResponse(answers={asked.answers!r}, usage={dict(asked.usage)!r})"


@pytest.mark.parametrize("operation", ["ask", "core", "list_models"])
def test_every_operation_takes_the_per_call_options(operation: str) -> None:
    params = inspect.signature(getattr(qa.Client, operation)).parameters
    wanted = {"retry", "diagnostics", "cancel", "timeout"} | (
        {"model"} if operation != "list_models" else set()
    )
    for name in wanted:
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name


Operation = Callable[..., object]


def operations(client: qa.Client) -> dict[str, Operation]:
    request = qa.Request(state="x", questions=[qa.NamedQuestion("toxic", qa.YesNo("y", "n"))])
    return {
        "ask": lambda **kw: client.ask("x", Review, **kw),
        "core": lambda **kw: client.core(request, **kw),
        "list_models": client.list_models,
    }


@pytest.mark.parametrize("operation", ["ask", "core", "list_models"])
def test_per_call_retry_diagnostics_cancel_and_timeout_take_effect(
    svc: InProcessService, operation: str
) -> None:
    with make_client(svc.url, sleep=no_sleep) as client:
        call = operations(client)[operation]
        # retry=: the client would retry a 503 twice; this call does not retry at all.
        svc.script(reply(503, {"detail": "busy"}), reply(503, {"detail": "busy"}))
        diagnostics = qa.Diagnostics()
        with pytest.raises(qa.ServerError):
            call(retry=qa.RetryPolicy.none, diagnostics=diagnostics)
        assert (diagnostics.attempts, diagnostics.status) == (1, 503)
        # ...and the next call, given a retry policy that retries, gets past the second 503.
        diagnostics = qa.Diagnostics()
        call(retry=qa.RetryPolicy(max_retries=1), diagnostics=diagnostics)
        assert (diagnostics.attempts, diagnostics.status) == (2, 200)
        # cancel=: a cancelled token stops the call before it sends anything.
        token = qa.CancelToken()
        token.cancel()
        sent = len(svc.requests)
        with pytest.raises(qa.Canceled):
            call(cancel=token)
        assert len(svc.requests) == sent
        # timeout=: a hung response is given up on, promptly.
        svc.script(hang())
        started = time.monotonic()
        with pytest.raises(qa.Canceled):
            call(timeout=0.02)
        assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("where", ["ask-model", "core-model", "request-model", "core-model-beats-request"])
def test_model_override_is_sent_for_one_call(svc: InProcessService, where: str) -> None:
    named = [qa.NamedQuestion("toxic", qa.YesNo("y", "n"))]
    with make_client(svc.url, model="judge-latest") as client:
        if where == "ask-model":
            client.ask("x", Review, model="judge-mini-latest")
        elif where == "core-model":
            client.core(qa.Request(state="x", questions=named), model="judge-mini-latest")
        elif where == "request-model":
            client.core(qa.Request(state="x", questions=named, model="judge-mini-latest"))
        else:
            client.core(qa.Request(state="x", questions=named, model="judge-2.1"), model="judge-mini-latest")
        client.ask("x", Review)  # the override lasted one call
        client.core(qa.Request(state="x", questions=named, model=None))
    models = [r.json()["model"] for r in svc.requests]
    assert models == ["judge-mini-latest", "judge-latest", "judge-latest"]


@pytest.mark.parametrize(
    "model",
    ["judge-3.0", "judge-2.1.7", "judge-mini-1.0.3", "judge-9.99"],
)
@pytest.mark.parametrize("where", ["client", "ask", "request"])
def test_versioned_model_ids_are_accepted(svc: InProcessService, model: str, where: str) -> None:
    with make_client(svc.url, model=model if where == "client" else None) as client:
        assert model not in [m.name for m in client.list_models().models]
        if where == "request":
            request = qa.Request(
                state="x", questions=[qa.NamedQuestion("a", qa.YesNo("y", "n"))], model=model
            )
            client.core(request)
        else:
            client.ask("x", Review, model=model if where == "ask" else None)
    assert svc.requests[-1].json()["model"] == model


# -- client-side validation -------------------------------------------------------------------


class NoneAsked(qa.Questions):
    pass


def test_no_questions(listener: Listener, idle_client: qa.Client) -> None:
    with pytest.raises(qa.NoQuestions):
        qa.Request(state="x", questions=[])
    with pytest.raises(qa.NoQuestions):
        idle_client.ask("x", NoneAsked)
    with pytest.raises(qa.NoQuestions):
        idle_client.ask("x", qa.Questions)
    assert issubclass(qa.NoQuestions, qa.ValidationError)
    assert_nothing_sent(listener)


def test_duplicate_question_name(listener: Listener, idle_client: qa.Client) -> None:
    with pytest.raises(qa.DuplicateQuestionName) as caught:
        qa.Request(
            state="x",
            questions=[
                qa.NamedQuestion("same", qa.YesNo("y", "n")),
                qa.NamedQuestion("other", qa.Score(["a", "b"])),
                qa.NamedQuestion("same", qa.Choice({"a": "A", "b": "B"})),
            ],
        )
    assert "same" in str(caught.value)
    assert issubclass(qa.DuplicateQuestionName, qa.ValidationError)
    assert_nothing_sent(listener)


@pytest.mark.parametrize("name", ["", "   ", None, 5, b"name", ("a",)], ids=repr)
def test_bad_question_name(listener: Listener, name: Any) -> None:
    with pytest.raises(qa.ValidationError):
        qa.Request(state="x", questions=[qa.NamedQuestion(name, qa.YesNo("y", "n"))])
    assert_nothing_sent(listener)


BAD_STATES: list[Any] = ["", "   ", "\n\t", None, 5, b"bytes", ["text"]]


@pytest.mark.parametrize("state", BAD_STATES, ids=repr)
def test_bad_state_for_ask(listener: Listener, idle_client: qa.Client, state: Any) -> None:
    with pytest.raises(qa.InvalidState) as caught:
        idle_client.ask(state, Review)
    assert isinstance(caught.value, qa.ValidationError)
    assert_nothing_sent(listener)


@pytest.mark.parametrize("state", BAD_STATES, ids=repr)
def test_bad_state_for_request(listener: Listener, state: Any) -> None:
    with pytest.raises(qa.InvalidState):
        qa.Request(state=state, questions=[qa.NamedQuestion("a", qa.YesNo("y", "n"))])
    assert_nothing_sent(listener)


# Surrogate code points (U+D800 to U+DFFF) have no UTF-8 form: os.fsdecode and surrogateescape
# leave them for bytes that do not decode, and they went out as JSON escapes that are no text.
NOT_UTF8_STATES = [
    ("caf\udce9", "'\\udce9' at index 3"),
    ("\ud800 first surrogate", "'\\ud800' at index 0"),
    ("last surrogate \udfff", "'\\udfff' at index 15"),
    ("\ud83d\ude00", "'\\ud83d' at index 0"),  # a UTF-16 pair, but two code points in a str
]


@pytest.mark.parametrize(("state", "where"), NOT_UTF8_STATES, ids=["fsdecoded", "d800", "dfff", "pair"])
@pytest.mark.parametrize("how", ["ask", "request", "async"])
def test_a_state_that_is_not_utf8_is_refused_before_sending(
    listener: Listener, idle_client: qa.Client, state: str, where: str, how: str
) -> None:
    named = [qa.NamedQuestion("a", qa.YesNo("y", "n"))]

    async def ask_async() -> object:
        async with qa.AsyncClient(base_url=listener.url, retry=qa.RetryPolicy.none, timeout=2.0) as client:
            return await client.ask(state, Review)

    calls: dict[str, Callable[[], object]] = {
        "ask": lambda: idle_client.ask(state, Review),
        "request": lambda: qa.Request(state=state, questions=named),
        "async": lambda: asyncio.run(ask_async()),
    }
    with pytest.raises(qa.InvalidState) as caught:
        calls[how]()
    assert str(caught.value) == f"state is not UTF-8: it holds the surrogate {where}"
    assert_nothing_sent(listener)


@pytest.mark.parametrize("state", ["\ud7ff just below", "\ue000 just above", "café 日本 😀"], ids=repr)
def test_a_state_next_to_the_surrogates_is_sent_as_utf8(
    svc: InProcessService, client: qa.Client, state: str
) -> None:
    client.ask(state, Review)
    client.core(qa.Request(state=state, questions=[qa.NamedQuestion("a", qa.YesNo("y", "n"))]))
    for sent in svc.requests:
        # As UTF-8 rather than \u escapes: the same JSON string, in fewer bytes.
        assert state.encode() in sent.body
        assert sent.json()["state"] == state


def test_str_subclass_is_a_string(svc: InProcessService, client: qa.Client) -> None:
    class Text(str):
        pass

    client.ask(Text("some text"), Review)
    client.core(
        qa.Request(state=Text("more text"), questions=[qa.NamedQuestion(Text("a"), qa.YesNo("y", "n"))])
    )
    assert [r.json()["state"] for r in svc.requests] == ["some text", "more text"]


class One(enum.Enum):
    only = "The only member"


class Empty(enum.Enum):
    pass


class NotText(enum.Enum):
    a = 1
    b = 2


def _bad_questions() -> list[tuple[str, Callable[[], object]]]:
    # Lambdas: each definition must fail inside the test, not while the module loads.
    return [
        ("yesno-empty-yes", lambda: qa.YesNo("", "no")),
        ("yesno-empty-no", lambda: qa.YesNo("yes", "")),
        ("yesno-blank", lambda: qa.YesNo("   ", "no")),
        ("yesno-non-str", lambda: qa.YesNo(1, "no")),  # type: ignore[arg-type]
        ("yesno-none", lambda: qa.YesNo("yes", None)),  # type: ignore[arg-type]
        ("choice-empty", lambda: qa.Choice({})),
        ("choice-one", lambda: qa.Choice({"a": "A"})),
        ("choice-enum-one", lambda: qa.Choice(One)),
        ("choice-enum-empty", lambda: qa.Choice(Empty)),
        ("choice-enum-non-str", lambda: qa.Choice(NotText)),
        ("choice-list", lambda: qa.Choice(["a", "b"])),  # type: ignore[call-overload]
        ("choice-empty-key", lambda: qa.Choice({"": "A", "b": "B"})),
        ("choice-empty-text", lambda: qa.Choice({"a": "", "b": "B"})),
        ("choice-non-str-text", lambda: qa.Choice({"a": 1, "b": "B"})),  # type: ignore[dict-item]
        ("score-empty", lambda: qa.Score([])),
        ("score-one", lambda: qa.Score(["only"])),
        ("score-enum-one", lambda: qa.Score(One)),
        ("score-str", lambda: qa.Score("abc")),
        ("score-empty-level", lambda: qa.Score(["a", ""])),
        ("score-non-str-level", lambda: qa.Score(["a", 2])),  # type: ignore[list-item]
        ("score-dict", lambda: qa.Score({"a": "A", "b": "B"})),  # type: ignore[call-overload]
        ("score-duplicate-level", lambda: qa.Score(["poor", "good", "poor"])),
    ]


@pytest.mark.parametrize("make", [pytest.param(make, id=name) for name, make in _bad_questions()])
def test_bad_question_definition(listener: Listener, make: Callable[[], object]) -> None:
    with pytest.raises(qa.ValidationError):
        make()
    assert_nothing_sent(listener)


@pytest.mark.parametrize(
    ("levels", "words"),
    [
        (["poor", "good", "poor"], "level 'poor' is given twice"),
        (("low", "low"), "level 'low' is given twice"),
        (["a", "b", "c", "b", "a"], "level 'b' is given twice"),
    ],
    ids=["list", "tuple-of-two", "first-repeat-named"],
)
def test_a_score_refuses_a_level_text_given_twice(levels: list[str], words: str) -> None:
    # The service answers with an index; two levels with one text leave it no way to say which.
    with pytest.raises(qa.InvalidQuestion, match=re.escape(words)) as info:
        qa.Score(levels)
    assert str(info.value).endswith("; levels must be unique")


def test_a_score_enum_with_one_value_twice_is_its_distinct_members() -> None:
    # Members sharing a value are aliases: the Enum's iteration, hence the scale, holds each once.
    class WithAlias(enum.Enum):
        low = "Low"
        high = "High"
        bottom = "Low"

    score = qa.Score(WithAlias)
    assert score.criteria == ["Low", "High"]
    assert score.decode(0) is WithAlias.low
    assert WithAlias["bottom"] is WithAlias.low


@pytest.mark.parametrize("text", ["same", "The text insults someone"])
def test_a_yes_no_with_one_text_for_both_answers_is_refused(listener: Listener, text: str) -> None:
    # true and false would both mean this one text: the service could not tell which to answer.
    with pytest.raises(qa.InvalidQuestion) as caught:
        qa.YesNo(text, text)
    assert str(caught.value) == f"the yes and no texts are both {text!r}; they must differ"
    assert_nothing_sent(listener)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"a": "same", "b": "same"}, "options ['a', 'b'] share the text 'same'"),
        ({"en": "English", "uk": "English", "fr": "French"}, "options ['en', 'uk'] share the text 'English'"),
        ({"a": "x", "b": "y", "c": "x", "d": "x"}, "options ['a', 'c', 'd'] share the text 'x'"),
    ],
    ids=["two", "two-of-three", "three-named"],
)
def test_a_choice_with_one_text_for_two_options_is_refused(
    listener: Listener, options: dict[str, str], words: str
) -> None:
    with pytest.raises(qa.InvalidQuestion) as caught:
        qa.Choice(options)
    assert str(caught.value) == f"{words}; option texts must differ"
    assert_nothing_sent(listener)


class _KeyWithoutRepr(str):
    def __repr__(self) -> str:
        raise RuntimeError("this key has no repr")


def test_a_choice_key_of_a_str_subclass_is_named_by_its_text() -> None:
    # Its own __repr__ never runs: the key is read as str's text, and named so in a message.
    choice = qa.Choice({_KeyWithoutRepr("a"): "A", "b": "B"})
    assert choice.criteria == {"a": "A", "b": "B"}
    assert type(next(iter(choice.criteria))) is str
    refused = r"^the text of option 'a' must be a non-empty string, got ''$"
    with pytest.raises(qa.InvalidQuestion, match=refused):
        qa.Choice({_KeyWithoutRepr("a"): "", "b": "B"})


def test_texts_that_differ_by_one_character_are_distinct() -> None:
    # The check compares texts exactly, as a score's levels are compared: one character is enough.
    assert qa.YesNo("same", "Same").criteria == {"true": "same", "false": "Same"}
    assert qa.YesNo("same", "same ").criteria == {"true": "same", "false": "same "}
    assert qa.Choice({"a": "same", "b": "same."}).criteria == {"a": "same", "b": "same."}


def test_questions_are_equal_by_kind_and_criteria_and_hash_alike() -> None:
    # A question is a value: one kind and one criteria make one question, in a set or a dict too.
    assert qa.YesNo("a", "b") == qa.YesNo("a", "b")
    assert hash(qa.YesNo("a", "b")) == hash(qa.YesNo("a", "b"))
    assert hash(qa.Choice({"x": "a", "y": "b"})) == hash(qa.Choice({"x": "a", "y": "b"}))
    assert hash(qa.Score(["a", "b"])) == hash(qa.Score(["a", "b"]))
    assert qa.YesNo("a", "b") != qa.YesNo("a", "c")
    assert qa.Choice({"x": "a", "y": "b"}) != qa.Choice({"x": "a", "y": "c"})
    assert qa.Score(["a", "b"]) != qa.Score(["a", "c"])
    assert qa.Score(["a", "b"]) != ["a", "b"]
    assert qa.YesNo("a", "b") != "a"
    assert len({qa.YesNo("a", "b"), qa.YesNo("a", "b"), qa.YesNo("b", "a")}) == 2


@pytest.mark.parametrize(
    "value",
    [
        qa.YesNo("a", "b"),
        qa.Choice({"x": "a", "y": "b"}),
        qa.Score(["a", "b"]),
        qa.AskResponse(None, {}),
        qa.CoreResponse({}, {}),
        qa.Model("m", {}),
        qa.ModelList([]),
    ],
    ids=["YesNo", "Choice", "Score", "AskResponse", "CoreResponse", "Model", "ModelList"],
)
def test_a_misspelt_attribute_is_refused_not_kept(value: object) -> None:
    # Their __slots__ hold at run time as under a type checker: no __dict__ to take a typo.
    with pytest.raises(AttributeError, match="critera"):
        value.critera = {}  # type: ignore[attr-defined]
    assert not hasattr(value, "__dict__")


def test_questions_that_answer_differently_are_unequal_though_they_ask_the_same() -> None:
    # One wire form, three kinds of answer: the dict's keys, Level's members, Other's members.
    Level = enum.Enum("Level", {"low": "a", "high": "b"})
    Other = enum.Enum("Other", {"low": "a", "high": "b"})
    by_dict, by_level, by_other = qa.Choice({"low": "a", "high": "b"}), qa.Choice(Level), qa.Choice(Other)
    assert by_dict.criteria == by_level.criteria == by_other.criteria
    assert by_dict != by_level
    assert by_level != by_dict  # either way round
    assert by_level != by_other
    assert by_level == qa.Choice(Level)
    assert len({by_dict, by_level, by_other, qa.Choice(Level)}) == 3
    assert qa.Score(["a", "b"]) != qa.Score(Level)
    assert qa.Score(Level) != qa.Score(Other)
    assert qa.Score(Level) == qa.Score(Level)


def test_a_named_question_equals_only_one_of_the_same_name_and_question_and_is_unhashable() -> None:
    yes_no = qa.YesNo("a", "b")
    assert qa.NamedQuestion("q", yes_no) == qa.NamedQuestion("q", qa.YesNo("a", "b"))
    assert qa.NamedQuestion("q", yes_no) != qa.NamedQuestion("r", yes_no)
    assert qa.NamedQuestion("q", yes_no) != qa.NamedQuestion("q", qa.YesNo("a", "c"))
    # The pair it unpacks to is not a NamedQuestion: unequal, and comparing raises nothing.
    assert qa.NamedQuestion("q", yes_no) != ("q", yes_no)
    assert qa.NamedQuestion("q", yes_no) != "q"
    assert tuple(qa.NamedQuestion("q", yes_no)) == ("q", yes_no)
    with pytest.raises(TypeError, match="unhashable"):
        hash(qa.NamedQuestion("q", yes_no))


def _not_utf8_questions() -> list[tuple[str, Callable[[], object], type[qa.ValidationError], str]]:
    # Lambdas: each definition must fail inside the test. "\udce9" is what os.fsdecode makes of
    # the byte 0xE9; json.dumps wrote it as an escape the service cannot read as text.
    surrogate = "caf\udce9"
    EnumValue = enum.Enum("EnumValue", {"a": surrogate, "b": "B"})
    named = [qa.NamedQuestion(surrogate, qa.YesNo("y", "n"))]
    return [
        ("yes", lambda: qa.YesNo(surrogate, "no"), qa.InvalidQuestion, "the yes text"),
        ("no", lambda: qa.YesNo("yes", surrogate), qa.InvalidQuestion, "the no text"),
        ("choice-key", lambda: qa.Choice({surrogate: "A", "b": "B"}), qa.InvalidQuestion, "an option key"),
        (
            "choice-text",
            lambda: qa.Choice({"a": surrogate, "b": "B"}),
            qa.InvalidQuestion,
            "the text of option 'a'",
        ),
        ("choice-enum", lambda: qa.Choice(EnumValue), qa.InvalidQuestion, "the value of EnumValue.a"),
        ("score-level", lambda: qa.Score(["low", surrogate]), qa.InvalidQuestion, "level 1"),
        ("score-enum", lambda: qa.Score(EnumValue), qa.InvalidQuestion, "the value of EnumValue.a"),
        ("request-name", lambda: qa.Request(state="x", questions=named), qa.InvalidName, "a question name"),
    ]


@pytest.mark.parametrize(
    ("make", "error", "what"), [pytest.param(*case[1:], id=case[0]) for case in _not_utf8_questions()]
)
def test_a_question_text_or_name_that_is_not_utf8_is_refused(
    listener: Listener, make: Callable[[], object], error: type[qa.ValidationError], what: str
) -> None:
    with pytest.raises(error) as caught:
        make()
    assert str(caught.value) == f"{what} is not UTF-8: it holds the surrogate '\\udce9' at index 3"
    assert_nothing_sent(listener)


def test_a_questions_class_with_a_name_that_is_not_utf8_is_refused(
    listener: Listener, idle_client: qa.Client
) -> None:
    named = type("Named", (qa.Questions,), {"ok": qa.YesNo("y", "n"), "\udce9": qa.YesNo("y", "n")})
    with pytest.raises(qa.InvalidName) as caught:
        idle_client.ask("x", named)
    assert str(caught.value) == "a question name is not UTF-8: it holds the surrogate '\\udce9' at index 0"
    assert_nothing_sent(listener)


@pytest.mark.parametrize(
    "name", ["_qa_spec", "_qa_from", "_qa_fields", "_qa_compiled", "__init__", "__eq__", "__x__", "____"]
)
def test_a_questions_class_refuses_a_question_named_as_its_machinery(name: str) -> None:
    # Such a question hid the method or cache of that name: every ask failed with a TypeError
    # (``__init__``: building the answers raised a raw AttributeError).
    with pytest.raises(qa.InvalidName) as caught:
        type("Review", (qa.Questions,), {"ok": qa.YesNo("y", "n"), name: qa.YesNo("y", "n")})
    assert str(caught.value) == f"Review.{name}: {name!r} is reserved by qa.Questions"


def test_a_questions_subclass_refuses_a_reserved_name_its_base_did_not_use() -> None:
    class Base(qa.Questions):
        ok = qa.YesNo("y", "n")

    with pytest.raises(qa.InvalidName, match=r"^Sub\._qa_spec: '_qa_spec' is reserved by qa\.Questions$"):
        type("Sub", (Base,), {"_qa_spec": qa.YesNo("y", "n")})


@pytest.mark.parametrize("name", ["_qa_spe", "_qa_specs", "qa_spec", "_qa_", "__init", "init__", "_x_"])
def test_a_question_named_next_to_a_reserved_name_is_asked(
    svc: InProcessService, client: qa.Client, name: str
) -> None:
    asked = type("Review", (qa.Questions,), {name: qa.YesNo("y", "n")})
    answers: qa.Questions = client.ask("x", asked).answers
    assert list(svc.requests[-1].json()["questions"]) == [name]
    assert getattr(answers, name) is expected_answer(qa.DEFAULT_MODEL, "x", name, {"true": "y", "false": "n"})


@pytest.mark.parametrize("text", ["\ud7ff just below", "\ue000 just above"], ids=repr)
def test_question_texts_next_to_the_surrogates_are_sent(
    svc: InProcessService, client: qa.Client, text: str
) -> None:
    yes_no = qa.YesNo(text, "no")
    choice = qa.Choice({text: "A", "b": text})
    score = qa.Score([text, "high"])
    asked = [qa.NamedQuestion(text, yes_no), qa.NamedQuestion("c", choice), qa.NamedQuestion("s", score)]
    client.core(qa.Request(state="x", questions=asked))
    sent = svc.requests[-1].json()["questions"]
    assert sent == {
        text: {"criteria": yes_no.criteria},
        "c": {"criteria": choice.criteria},
        "s": {"criteria": score.criteria},
    }


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        (" ", "must be a non-empty string, got ' '"),
        ("\t\n", "must be a non-empty string, got '\\t\\n'"),
        ("caf\udce9", "is not UTF-8: it holds the surrogate '\\udce9' at index 3"),
    ],
    ids=["blank", "whitespace", "not-utf8"],
)
def test_a_choice_enum_member_name_is_checked_as_an_option_key(
    listener: Listener, name: str, problem: str
) -> None:
    # The functional API takes any string as a name, and the names are the option keys sent.
    members = {name: "English", "fr": "French"}
    options = enum.Enum("Lang", members)  # type: ignore[misc]  # a name only known at run time
    with pytest.raises(qa.InvalidQuestion) as caught:
        qa.Choice(options)
    assert str(caught.value) == f"a member name of Lang {problem}"
    assert_nothing_sent(listener)


@pytest.mark.parametrize("name", ["x", " x ", "\ud7ff", "\ue000"], ids=repr)
def test_a_choice_enum_member_name_at_the_limits_is_sent(
    svc: InProcessService, client: qa.Client, name: str
) -> None:
    members = {name: "English", "fr": "French"}
    options = enum.Enum("Lang", members)  # type: ignore[misc]  # a name only known at run time
    result = client.core(qa.Request(state="x", questions=[qa.NamedQuestion("lang", qa.Choice(options))]))
    assert svc.requests[-1].json()["questions"]["lang"] == {"criteria": {name: "English", "fr": "French"}}
    assert result.get("lang") in set(options)


class TrueFalse(enum.Enum):
    true = "The claim is true"
    false = "The claim is false"


@pytest.mark.parametrize(
    "make",
    [
        lambda: qa.Choice({"true": "The claim is true", "false": "The claim is false"}),
        lambda: qa.Choice({"false": "The claim is false", "true": "The claim is true"}),
        lambda: qa.Choice(TrueFalse),
    ],
    ids=["dict", "dict-reversed", "enum"],
)
def test_choice_of_exactly_true_and_false_is_refused_as_a_yes_no(make: Callable[[], object]) -> None:
    # Its wire criteria are exactly a yes/no question's (SPEC 1): the service answers a bool,
    # and every call failed with InvalidResponse.
    with pytest.raises(
        qa.InvalidQuestion, match="'true' and 'false' are yes/no criteria on the wire"
    ) as info:
        make()
    assert isinstance(info.value, qa.ValidationError)
    assert "answered with a bool: use YesNo" in str(info.value)


@pytest.mark.parametrize(
    "options",
    [
        {"true": "T", "false": "F", "unsure": "U"},
        {"True": "T", "False": "F"},
        {"true": "T", "no": "F"},
    ],
    ids=["three-options", "capitalised", "one-of-them"],
)
def test_choice_near_true_and_false_is_a_choice(options: dict[str, str]) -> None:
    assert qa.Choice(options).criteria == options


@pytest.mark.parametrize(
    "questions",
    [
        [qa.NamedQuestion("a", "not a question")],  # type: ignore[arg-type]
        [qa.NamedQuestion("a", qa.YesNo)],  # type: ignore[arg-type]
        [qa.NamedQuestion("a", 5)],  # type: ignore[arg-type]
        [qa.NamedQuestion("a", {"true": "y", "false": "n"})],  # type: ignore[arg-type]
        [5],
        ["ab"],
        ["abc"],
        "abc",
        None,
        5,
    ],
    ids=[
        "str-question",
        "question-class",
        "int-question",
        "raw-criteria",
        "int-item",
        "two-char-str-item",
        "str-item",
        "str",
        "none",
        "int",
    ],
)
def test_non_question_objects_are_refused(listener: Listener, questions: Any) -> None:
    with pytest.raises(qa.ValidationError):
        qa.Request(state="x", questions=questions)
    assert_nothing_sent(listener)


YES_NO = qa.YesNo("y", "n")


@pytest.mark.parametrize(
    ("questions", "words"),
    [
        ({"ab": YES_NO}, "questions must be a sequence of NamedQuestion, got {'ab': YesNo("),
        ({"a": YES_NO}, "questions must be a sequence of NamedQuestion, got {'a': YesNo("),
        (["ab"], "expected a NamedQuestion, got 'ab'"),
        ([b"ab"], "expected a NamedQuestion, got b'ab'"),
        ([("a", YES_NO), "ab"], "expected a NamedQuestion, got 'ab'"),
    ],
    ids=["dict-two-char-key", "dict-one-char-key", "two-char-str", "two-byte-bytes", "str-after-a-pair"],
)
def test_a_dict_or_a_string_is_refused_as_what_it_is(listener: Listener, questions: Any, words: str) -> None:
    # Unpacked, {"ab": q} gave the name "a" and the "question" "b", and the error spoke of those.
    with pytest.raises(qa.InvalidQuestion) as caught:
        qa.Request(state="x", questions=questions)
    assert str(caught.value).startswith(words)
    assert_nothing_sent(listener)


@pytest.mark.parametrize("pair", [("ab", YES_NO), ["ab", YES_NO], qa.NamedQuestion("ab", YES_NO)], ids=repr)
def test_a_pair_of_a_two_character_name_and_a_question_is_accepted(pair: Any) -> None:
    assert qa.Request(state="x", questions=[pair]).questions == (qa.NamedQuestion("ab", YES_NO),)


@pytest.mark.parametrize(
    "questions",
    [Review(toxic=True, tone=Tone.formal, quality=0), int, "Review", None, Tone, qa.YesNo("y", "n")],
    ids=["instance", "int", "name", "none", "enum", "question"],
)
def test_ask_refuses_what_is_not_a_questions_class(
    listener: Listener, idle_client: qa.Client, questions: Any
) -> None:
    with pytest.raises(qa.ValidationError):
        idle_client.ask("x", questions)
    assert_nothing_sent(listener)


@pytest.mark.parametrize(
    "request_",
    [None, "x", {"state": "x", "questions": {}}, Review],
    ids=["none", "str", "dict", "questions-class"],
)
def test_core_refuses_what_is_not_a_request(
    listener: Listener, idle_client: qa.Client, request_: Any
) -> None:
    with pytest.raises(qa.ValidationError):
        idle_client.core(request_)
    assert_nothing_sent(listener)


@pytest.mark.parametrize(
    ("model", "words"),
    [
        (5, "model must be a non-empty string, got 5"),
        ("   ", "model must be a non-empty string, got '   '"),
        (b"judge-latest", "model must be a non-empty string, got b'judge-latest'"),
        ("judge-\udce9", "model is not UTF-8: it holds the surrogate '\\udce9' at index 6"),
    ],
    ids=["int", "blank", "bytes", "not-utf8"],
)
def test_a_request_checks_its_model_when_made(model: Any, words: str) -> None:
    # Where the mistake is written, as the state and the questions are, not at client.core().
    with pytest.raises(qa.InvalidModel) as caught:
        qa.Request(state="x", questions=[qa.NamedQuestion("a", qa.YesNo("y", "n"))], model=model)
    assert str(caught.value) == words


@pytest.mark.parametrize("model", [None, "judge-latest", "judge-2.1"], ids=repr)
def test_a_request_keeps_a_good_model(model: str | None) -> None:
    request = qa.Request(state="x", questions=[qa.NamedQuestion("a", qa.YesNo("y", "n"))], model=model)
    assert request.model == model


@pytest.mark.parametrize(
    ("model", "why"),
    [
        # "judge-\xe9" passed through os.fsdecode, or read from os.environ, which decodes the same way.
        ("judge-\udce9", "is not UTF-8: it holds the surrogate '\\udce9' at index 6"),
        # Sent, it reached the service as a name no model has (404); the newline was never meant.
        ("judge-\nlatest", "holds the control character '\\n' at index 6: a model name has none"),
    ],
    ids=["not-utf8", "newline"],
)
@pytest.mark.parametrize("where", ["client", "env", "ask", "core", "request"])
def test_a_model_not_utf8_or_with_a_newline_is_refused_before_sending(
    listener: Listener,
    idle_client: qa.Client,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
    model: str,
    why: str,
) -> None:
    monkeypatch.setenv("SERVICE_DEFAULT_MODEL", model)
    named = [qa.NamedQuestion("a", qa.YesNo("y", "n"))]
    calls: dict[str, Callable[[], object]] = {
        "client": lambda: qa.Client(base_url=listener.url, model=model),
        "env": lambda: qa.Client(base_url=listener.url),
        "ask": lambda: idle_client.ask("x", Review, model=model),
        "core": lambda: idle_client.core(qa.Request(state="x", questions=named), model=model),
        "request": lambda: idle_client.core(qa.Request(state="x", questions=named, model=model)),
    }
    with pytest.raises(qa.InvalidModel) as caught:
        calls[where]()
    what = "SERVICE_DEFAULT_MODEL" if where == "env" else "model"
    assert str(caught.value) == f"{what} {why}"
    assert_nothing_sent(listener)


@pytest.mark.parametrize("model", ["judge-\ud7ff", "judge-\ue000"], ids=["below", "above"])
def test_a_model_next_to_the_surrogates_is_sent(svc: InProcessService, client: qa.Client, model: str) -> None:
    with pytest.raises(qa.NotFound):  # the service knows no such model; it was sent as it is
        client.ask("x", Review, model=model)
    assert svc.requests[-1].json()["model"] == model


@pytest.mark.parametrize("char", ["\x00", "\t", "\x1f", "\x7f", "\x80", "\x9f"], ids=repr)
def test_a_model_with_any_control_character_is_refused(
    listener: Listener, idle_client: qa.Client, char: str
) -> None:
    with pytest.raises(qa.InvalidModel) as caught:
        idle_client.ask("x", Review, model=f"judge-{char}")
    expected = f"model holds the control character {char!r} at index 6: a model name has none"
    assert str(caught.value) == expected
    assert_nothing_sent(listener)


def test_a_model_with_a_space_before_its_control_character_names_the_control_character(
    listener: Listener, idle_client: qa.Client
) -> None:
    # A space is printable: the first character that is not is the newline at the end.
    with pytest.raises(qa.InvalidModel) as caught:
        idle_client.ask("x", Review, model="judge latest\n")
    assert str(caught.value) == "model holds the control character '\\n' at index 12: a model name has none"
    assert_nothing_sent(listener)


@pytest.mark.parametrize("char", [" ", "~", "\xa0"], ids=repr)
def test_a_model_next_to_the_control_characters_is_sent(
    svc: InProcessService, client: qa.Client, char: str
) -> None:
    model = f"judge-{char}x"
    with pytest.raises(qa.NotFound):  # the service knows no such model; it was sent as it is
        client.ask("x", Review, model=model)
    assert svc.requests[-1].json()["model"] == model


@pytest.mark.parametrize("model", ["", "   ", 5, b"judge-latest"], ids=repr)
@pytest.mark.parametrize("where", ["ask", "core", "request"])
def test_bad_model_is_refused_before_sending(
    listener: Listener, idle_client: qa.Client, model: Any, where: str
) -> None:
    named = [qa.NamedQuestion("a", qa.YesNo("y", "n"))]
    calls: dict[str, Callable[[], object]] = {
        "ask": lambda: idle_client.ask("x", Review, model=model),
        "core": lambda: idle_client.core(qa.Request(state="x", questions=named), model=model),
        "request": lambda: idle_client.core(qa.Request(state="x", questions=named, model=model)),
    }
    with pytest.raises(qa.ValidationError):
        calls[where]()
    assert_nothing_sent(listener)

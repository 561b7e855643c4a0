"""Question sets and answers at their edges: bases that are not ``Questions`` classes, and
values of a ``str`` subclass given as a state, a question name or a text.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator

import pytest
from support import InProcessService, make_client

import qa_min as qa


@pytest.fixture
def svc() -> Iterator[InProcessService]:
    with InProcessService() as service:
        yield service


@pytest.fixture
def client(svc: InProcessService) -> Iterator[qa.Client]:
    with make_client(svc.url, retry=qa.RetryPolicy.none) as c:
        yield c


class Tone(enum.Enum):
    formal = "Written in a formal register"
    casual = "Written casually"


class ToxicityMixin:  # a plain class holding questions, mixed into Questions classes
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


class Reviewed(qa.Questions, ToxicityMixin):
    tone = qa.Choice(Tone)


class Overridden(ToxicityMixin, qa.Questions):
    toxic = qa.YesNo("It is rude", "It is polite")  # the class's own wins, as attribute lookup says


def test_a_question_of_a_plain_mixin_is_asked_and_answered(svc: InProcessService, client: qa.Client) -> None:
    # It was neither sent nor accepted as an answer: Reviewed(tone=..., toxic=...) was refused,
    # and reading answers.toxic, typed bool, raised AttributeError('this answer is not set').
    svc.set_answers({"toxic": True, "tone": "casual"})
    r = client.ask("Some text", Reviewed)
    assert svc.requests[0].json()["questions"] == {
        "toxic": {"criteria": {"true": "The text insults someone", "false": "The text insults no one"}},
        "tone": {"criteria": {"formal": "Written in a formal register", "casual": "Written casually"}},
    }
    assert (r.answers.toxic, r.answers.tone) == (True, Tone.casual)
    assert Reviewed(toxic=False, tone=Tone.formal).toxic is False


def test_a_mixin_question_overridden_by_the_class_is_the_class_s(
    svc: InProcessService, client: qa.Client
) -> None:
    svc.set_answers({"toxic": False})
    assert client.ask("Some text", Overridden).answers.toxic is False
    assert svc.requests[0].json()["questions"] == {
        "toxic": {"criteria": {"true": "It is rude", "false": "It is polite"}}
    }


def test_a_mixin_question_with_a_reserved_name_is_refused() -> None:
    mixin = type("Mixin", (), {"_qa_spec": qa.YesNo("y", "n")})
    with pytest.raises(qa.InvalidName, match=r"'_qa_spec' is reserved by qa.Questions"):
        type("Made", (qa.Questions, mixin), {})

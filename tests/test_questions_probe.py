"""Question sets and answers at their edges: bases that are not ``Questions`` classes, and
values of a ``str`` subclass given as a state, a question name or a text.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from typing import Any

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


class Refused(Exception):
    """Raised by the one method of a str subclass that qa_min must not call."""


def text_type(dunder: str) -> type[str]:
    """A str subclass whose ``dunder`` raises ``Refused``; the rest is str's."""

    def method(self: str, *args: object) -> object:
        raise Refused(f"{dunder} of {type(self).__name__}")

    body: dict[str, object] = {dunder: method}
    if dunder == "__eq__":
        body["__hash__"] = str.__hash__  # defining __eq__ alone would make it unhashable
    return type(f"Text_{dunder.strip('_')}", (str,), body)


@pytest.mark.parametrize("dunder", ["__eq__", "__hash__", "__repr__"])
def test_a_question_name_of_a_str_subclass_is_read_as_its_text(
    svc: InProcessService, client: qa.Client, dunder: str
) -> None:
    # Its own __eq__ and __hash__ were called to find the service's answer (raising, or missing
    # it: "no answer for question 'toxic'"), and the answers were keyed by it, so repr() raised.
    svc.set_answers({"toxic": True})
    name = text_type(dunder)("toxic")
    request = qa.Request("Some text", [qa.NamedQuestion(name, qa.YesNo("insults", "is polite"))])
    r = client.core(request)
    assert [(type(k), k, v) for k, v in r.answers.items()] == [(str, "toxic", True)]
    assert r.get("toxic") is True
    assert "'toxic': True" in repr(r)
    assert list(svc.requests[0].json()["questions"]) == ["toxic"]


@pytest.mark.parametrize("dunder", ["isspace", "__len__"])
def test_a_state_of_a_str_subclass_is_read_as_its_text(
    svc: InProcessService, client: qa.Client, dunder: str
) -> None:
    # The emptiness check called its own __len__ and isspace(): Refused came out of ask().
    svc.set_answers({"toxic": False, "tone": "formal"})
    state = text_type(dunder)("Some text")
    assert client.ask(state, Reviewed).answers.toxic is False
    assert client.core(qa.Request(state, [qa.NamedQuestion("a", qa.YesNo("y", "n"))])).get("a") in (
        True,
        False,
    )
    assert [sent.json()["state"] for sent in svc.requests] == ["Some text", "Some text"]


def test_yes_no_texts_of_a_str_subclass_are_compared_as_their_text() -> None:
    # Comparing the two texts called the yes text's own __eq__: Refused came out of YesNo().
    text = text_type("__eq__")
    assert qa.YesNo(text("insults"), text("is polite")).criteria == {"true": "insults", "false": "is polite"}
    with pytest.raises(qa.InvalidQuestion, match=r"^the yes and no texts are both 'same'; they must differ$"):
        qa.YesNo(text("same"), text("same"))


class Unreadable(Sequence[qa.NamedQuestion]):
    """A sequence of questions that fails as it is read, past its first item."""

    def __getitem__(self, index: Any) -> Any:
        if index == 0:
            return qa.NamedQuestion("a", qa.YesNo("y", "n"))
        raise RuntimeError("no more questions")

    def __len__(self) -> int:
        return 2


def test_questions_whose_iteration_raises_are_refused_naming_them() -> None:
    # The sequence's own exception came out of Request(), where a choice's options or a score's
    # levels that raise as they are read give InvalidQuestion.
    with pytest.raises(
        qa.InvalidQuestion,
        match=r"^questions could not be read: iterating them raised RuntimeError\('no more questions'\)$",
    ) as caught:
        qa.Request("Some text", Unreadable())
    assert isinstance(caught.value.__cause__, RuntimeError)


class Apart(str):
    """A str subclass whose own hash and equality tell it from the str of the same text."""

    def __hash__(self) -> int:
        return 12345

    def __eq__(self, other: object) -> bool:
        return type(other) is Apart and str.__eq__(self, other)


def test_a_choice_with_two_keys_of_one_text_is_refused() -> None:
    # The dict held two keys, "a" and Apart("a"); the criteria sent held one option "a", the
    # first one's text lost: a choice of one option, which the 2-option check had let through.
    with pytest.raises(qa.InvalidQuestion, match=r"^option 'a' is given twice; option keys must differ$"):
        qa.Choice({Apart("a"): "first", "a": "second", "b": "third"})
    assert qa.Choice({Apart("a"): "first", "b": "second"}).criteria == {"a": "first", "b": "second"}

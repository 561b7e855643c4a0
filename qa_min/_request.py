"""The run-time form of a question set: ``NamedQuestion`` and ``Request``, for ``client.core``.

They compile to the same ``_Spec`` as a ``Questions`` subclass (``_questions``).
"""

from __future__ import annotations

from ._errors import InvalidQuestion
from ._questions import _Spec, check_model
from ._typing import read, short

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, Optional

    from ._questions import _Question


class NamedQuestion:
    """A question with its id, for ``Request``: ``NamedQuestion("lang", Choice({...}))``."""

    __slots__ = ("name", "question")

    def __init__(self, name: str, question: _Question[Any]) -> None:
        self.name = name
        self.question = question

    def __iter__(self) -> Any:
        return iter((self.name, self.question))

    def __repr__(self) -> str:
        return f"NamedQuestion({self.name!r}, {self.question!r})"

    def __reduce__(self) -> tuple[object, ...]:
        return (NamedQuestion, (self.name, self.question))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NamedQuestion) and (other.name, other.question) == (self.name, self.question)

    __hash__ = None  # type: ignore[assignment]


class Request:
    """A question set built at run time, for ``client.core``.

    Args:
        state: The text to judge.
        questions: The questions, each a ``NamedQuestion`` (or a ``(name, question)`` pair).
        model: A model for this request, overriding the client's; None uses the client's.

    Raises:
        ValidationError: A subclass naming what is wrong (``NoQuestions``, ``DuplicateQuestionName``,
            ``InvalidName``, ``InvalidQuestion``, ``InvalidState``, ``InvalidModel``).
    """

    __slots__ = ("_spec", "model", "questions", "state")

    def __init__(self, state: str, questions: Sequence[NamedQuestion], model: Optional[str] = None) -> None:
        # Unpacked, a dict gives its keys, a 2-character str a name and a question: refused as such.
        iterable = hasattr(questions, "__iter__") and not hasattr(questions, "keys")
        if not iterable or isinstance(questions, (str, bytes)):
            raise InvalidQuestion(f"questions must be a sequence of NamedQuestion, got {short(questions)}")
        # Read once, as a choice's items and a score's levels are: what raises is refused as those are.
        given = (
            questions
            if type(questions) in (list, tuple)
            else read(list, questions, "questions", "iterating them", InvalidQuestion)
        )
        named = []
        for item in given:
            try:
                name, question = () if isinstance(item, (str, bytes)) else item
            except (TypeError, ValueError):
                raise InvalidQuestion(f"expected a NamedQuestion, got {short(item)}") from None
            named.append(NamedQuestion(name, question))
        self._spec = _Spec((q.name, q.question) for q in named)
        self._spec.body(state, "")  # validates the state now rather than at send time
        self.state = state
        self.questions = tuple(named)
        self.model = model if model is None else check_model(model)  # refused where it was written

    def __repr__(self) -> str:
        return f"Request(state={short(self.state)}, questions={list(self.questions)!r}, model={self.model!r})"

    def __reduce__(self) -> tuple[object, ...]:
        # Compiled again where it lands: the compiled form holds bound methods.
        return (Request, (self.state, list(self.questions), self.model))

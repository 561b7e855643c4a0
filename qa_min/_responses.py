"""The results of the three operations, and the checks that turn a 2xx body into one.

``parse_object``, ``usage_of`` and ``models_of`` raise ``BadShape`` with a message that quotes
the offending data; the client adds the diagnostics and redacts the message.
"""

from __future__ import annotations

import json

from ._errors import Diagnostics
from ._typing import Generic, readonly, short

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any, Optional, TypeVar

    _T = TypeVar("_T")
else:
    _T = None

_EMPTY: Mapping[str, Any] = readonly({})
_MISSING = object()


class BadShape(Exception):
    """A 2xx body that is not the shape SPEC.md section 2 gives; the message says how."""


def parse_object(data: bytes) -> dict[str, Any]:
    """The JSON object in ``data``."""
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as exc:
        # RecursionError: nesting deeper than the interpreter's limit is not an answer either.
        raise BadShape(f"the response is not JSON ({type(exc).__name__}: {exc}): {short(data)}") from None
    if type(obj) is not dict:
        raise BadShape(f"the response is not a JSON object: {short(obj)}")
    return obj


def usage_of(obj: dict[str, Any]) -> Mapping[str, Any]:
    """The ``usage`` object, read-only; empty when absent."""
    usage = obj.get("usage", _MISSING)
    if usage is _MISSING:
        return _EMPTY
    if type(usage) is not dict:
        raise BadShape(f'"usage" must be an object, got {short(usage)}')
    return readonly(usage)


def models_of(obj: dict[str, Any]) -> ModelList:
    """The ``ModelList`` of a ``GET /v1/models`` body."""
    items = obj.get("models")
    if type(items) is not list:
        raise BadShape(f'"models" must be a list, got {short(items)}')
    models = []
    for item in items:
        if type(item) is not dict or type(item.get("name")) is not str:
            raise BadShape(f"a model must be an object with a name, got {short(item)}")
        models.append(Model(item["name"], readonly(item)))
    return ModelList(models)


class AskResponse(Generic[_T]):
    """The result of ``client.ask``.

    Attributes:
        answers: An instance of the ``Questions`` class asked, its attributes the answers.
        usage: The usage object the service sent (read-only; empty when absent).
        diagnostics: What the call did: request id, headers, timings, attempts.
    """

    __slots__ = ("answers", "diagnostics", "usage")

    def __init__(
        self, answers: _T, usage: Mapping[str, Any], diagnostics: Optional[Diagnostics] = None
    ) -> None:
        self.answers = answers
        self.usage = usage
        self.diagnostics = diagnostics if diagnostics is not None else Diagnostics()

    def __repr__(self) -> str:
        return f"AskResponse(answers={self.answers!r}, usage={dict(self.usage)!r})"


class CoreResponse:
    """The result of ``client.core``.

    Attributes:
        answers: A read-only mapping of question id to answer (``bool``, ``str`` or Enum
            member, ``int`` or Enum member).
        usage: The usage object the service sent (read-only; empty when absent).
        diagnostics: What the call did: request id, headers, timings, attempts.
    """

    __slots__ = ("answers", "diagnostics", "usage")

    def __init__(
        self, answers: Mapping[str, Any], usage: Mapping[str, Any], diagnostics: Optional[Diagnostics] = None
    ) -> None:
        self.answers = answers
        self.usage = usage
        self.diagnostics = diagnostics if diagnostics is not None else Diagnostics()

    def get(self, question_id: str, default: Any = None) -> Any:
        """The answer to one question, or ``default`` if no question had that id."""
        return self.answers.get(question_id, default)

    def __repr__(self) -> str:
        return f"CoreResponse(answers={dict(self.answers)!r}, usage={dict(self.usage)!r})"


class Model:
    """One model the account can use.

    Attributes:
        name: The model id to pass as ``model=``.
        info: Every field the service sent for it, ``name`` included (read-only).
    """

    __slots__ = ("info", "name")

    def __init__(self, name: str, info: Mapping[str, Any]) -> None:
        self.name = name
        self.info = info

    def __repr__(self) -> str:
        return f"Model(name={self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Model) and (other.name, other.info) == (self.name, self.info)

    __hash__ = None  # type: ignore[assignment]


class ModelList:
    """The result of ``client.list_models``.

    Attributes:
        models: The models, in the order the service listed them.
        diagnostics: What the call did: request id, headers, timings, attempts.
    """

    __slots__ = ("diagnostics", "models")

    def __init__(self, models: Sequence[Model], diagnostics: Optional[Diagnostics] = None) -> None:
        self.models = tuple(models)
        self.diagnostics = diagnostics if diagnostics is not None else Diagnostics()

    def __iter__(self) -> Any:
        return iter(self.models)

    def __len__(self) -> int:
        return len(self.models)

    def __repr__(self) -> str:
        return f"ModelList({[m.name for m in self.models]!r})"

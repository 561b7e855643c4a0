"""The results of the three operations, and the checks that turn a 2xx body into one.

``parse_object``, ``usage_of`` and ``models_of`` raise ``BadShape`` with a message that quotes
the offending data; the client adds the diagnostics. ``load_json`` is the one JSON parser for
whatever a server sends, error bodies included: a body nested deeper than ``MAX_NESTING``
levels, or holding an integer longer than ``MAX_INT_DIGITS`` digits, is refused before
``json`` can overflow the C stack (a worker thread's may be small) or spend quadratic time.
Both limits are far above anything the service sends; serde_json nests 128 deep, too. So is
``NaN``, ``Infinity`` or ``-Infinity``, which ``json`` reads and RFC 8259 does not.

Results pickle and deep-copy: their read-only mappings travel as plain dicts.
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
    _R = TypeVar("_R", "AskResponse[Any]", "CoreResponse", "Model")
else:
    _T = _R = None

_EMPTY: Mapping[str, Any] = readonly({})
_MISSING = object()


MAX_NESTING = 128
"""Arrays and objects nested deeper than this are refused."""

MAX_INT_DIGITS = 4300
"""Integers with more digits are refused (CPython's own limit since 3.11, on every version)."""

_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_ONE_KIND = bytes.maketrans(b"{}", b"[]")
_STEPS = bytes.maketrans(b"[]", b"\x02\x00")  # twice the openers, so no step is negative


class BadShape(Exception):
    """A 2xx body that is not the shape SPEC.md section 2 gives; the message says how."""


def _int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS + (text[0] == "-"):
        raise ValueError(f"an integer of {len(text)} digits, over the limit of {MAX_INT_DIGITS}")
    return int(text)


def _constant(name: str) -> object:
    # json reads NaN, Infinity and -Infinity, which RFC 8259 has no place for; called only for them.
    raise ValueError(f"{name} is not a JSON value (RFC 8259 has no NaN or Infinity)")


_DECODER = json.JSONDecoder(parse_int=_int, parse_constant=_constant)


def _too_deep(data: bytes) -> bool:
    """True if ``data`` nests arrays and objects deeper than ``MAX_NESTING`` levels."""
    if data.count(b"[") + data.count(b"{") <= MAX_NESTING:
        return False  # the common case: too few brackets to nest that deep
    encoding = json.detect_encoding(data)
    if encoding not in ("utf-8", "utf-8-sig"):
        data = data.decode(encoding, "replace").encode()
    # Brackets inside strings do not nest: drop escaped backslashes and quotes, then strings.
    # What is left is the nesting of the body, or of the part json would read before it fails.
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    # Two quotes in a row, once the rest is gone, enclose nothing that counts: drop them first.
    skeleton = data.translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    if b'"' in skeleton:
        skeleton = b"".join(skeleton.split(b'"')[::2])
    skeleton = skeleton.translate(_ONE_KIND)
    if b"[" * (MAX_NESTING + 1) in skeleton:
        return True  # the usual attack, found at C speed
    # Each pass takes the innermost pairs away, one level, and shrinks a wide body to little.
    passes = 0
    while passes < 8 and skeleton:
        skeleton = skeleton.replace(b"[]", b"")
        passes += 1
    if not skeleton:
        return False
    from itertools import accumulate, count
    from operator import sub

    # The depth after k brackets is 2 * openers - k: a running sum of the steps, minus k.
    deepest: int = max(map(sub, accumulate(skeleton.translate(_STEPS)), count(1)))
    return passes + deepest > MAX_NESTING


def load_json(data: bytes) -> Any:
    """The JSON value in ``data``; ``BadShape`` if it is not JSON or is beyond the limits."""
    if _too_deep(data):
        raise BadShape(f"the response nests deeper than {MAX_NESTING} levels or is not JSON: {short(data)}")
    try:
        return _DECODER.decode(data.decode(json.detect_encoding(data), "surrogatepass"))
    except (ValueError, RecursionError) as exc:
        # RecursionError: a last defence; the nesting check above keeps json far from it.
        raise BadShape(f"the response is not JSON ({type(exc).__name__}: {exc}): {short(data)}") from None


def parse_object(data: bytes) -> dict[str, Any]:
    """The JSON object in ``data``."""
    obj = load_json(data)
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
    if "models" not in obj:
        raise BadShape('the response has no "models"')
    items = obj["models"]
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

    def __reduce__(self) -> tuple[object, ...]:
        return (_restore, (AskResponse, self.answers, dict(self.usage), self.diagnostics))


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

    def __reduce__(self) -> tuple[object, ...]:
        return (_restore, (CoreResponse, dict(self.answers), dict(self.usage), self.diagnostics))


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

    def __reduce__(self) -> tuple[object, ...]:
        return (_restore, (Model, self.name, dict(self.info)))

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

    def __reduce__(self) -> tuple[object, ...]:
        return (ModelList, (self.models, self.diagnostics))


def _restore(cls: type[_R], first: Any, mapping: dict[str, Any], *diagnostics: Diagnostics) -> _R:
    """A result rebuilt from its pickled form: a plain dict becomes read-only again.

    ``diagnostics``: the result's own (a ``Model`` has none).
    """
    if isinstance(first, dict):
        first = readonly(first)
    return cls(first, readonly(mapping), *diagnostics)

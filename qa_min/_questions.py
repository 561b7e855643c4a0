"""Questions, their wire form, and the checks on the answers that come back.

Two ways to ask, one machinery:

* A ``Questions`` subclass declares its questions as class attributes. Each attribute is a
  descriptor whose ``__get__`` is typed, so ``answers.toxic`` is a ``bool`` to mypy, and whose
  value at run time sits in the instance ``__dict__`` (plain attribute speed).
* ``Request`` / ``NamedQuestion`` (in ``_request``) build the same thing at run time.

Both compile, once, to a ``_Spec``: the JSON of the ``questions`` object (encoded once, since
the hot path only splices it into each body) and one decoder per question. A decoder returns
the Python answer or raises ``_Mismatch``; the client turns that into ``InvalidResponse``.
"""

from __future__ import annotations

import enum
import json

from ._errors import (
    DuplicateQuestionName,
    InvalidModel,
    InvalidName,
    InvalidQuestion,
    InvalidState,
    NoQuestions,
    ValidationError,
)
from ._typing import UNSET as UNSET
from ._typing import Generic, cast, control_char, first_repeat, not_utf8, overload, plain, read, short

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any, Callable, Optional, TypeVar, Union

    _T = TypeVar("_T")
    _E = TypeVar("_E", bound=enum.Enum)
    _QuestionT = TypeVar("_QuestionT", bound="_Question[Any]")
    Decoder = Callable[[object], Any]
else:
    _T = _E = None

_encode_str = json.encoder.encode_basestring_ascii
_encode_utf8 = json.encoder.encode_basestring


class _Mismatch(Exception):
    """An answer that does not fit its question; the message says how."""


def _text(value: object, what: str, error: type[ValidationError] = InvalidQuestion) -> str:
    value = plain(value)  # sent as str's own text: a subclass's strip() or encode() never runs
    if not isinstance(value, str) or not value.strip():
        raise error(f"{what} must be a non-empty string, got {short(value)}")
    if not_utf8(value):  # json.dumps would write it as a \u escape that is no character
        raise error(f"{what} is {not_utf8(value)}")
    return value


def _items(options: Mapping[Any, object]) -> list[tuple[object, object]]:
    return list(options.items())


def _enum_of(members: Iterable[object]) -> Optional[type[enum.Enum]]:
    """The Enum class a question was built from, or None if it was built from a dict or list."""
    first = next(iter(members), None)
    return type(first) if isinstance(first, enum.Enum) else None


def _enum_texts(options: type[enum.Enum], what: str) -> list[tuple[str, str]]:
    members = list(options)
    if len(members) < 2:
        raise InvalidQuestion(f"{what} needs at least 2 members, {options.__name__} has {len(members)}")
    return [(m.name, _text(m.value, f"the value of {options.__name__}.{m.name}")) for m in members]


class _Question(Generic[_T]):
    """Base of the three question kinds; a descriptor when used in a ``Questions`` class.

    A question is a value: two are equal, and hash alike, when they are of one kind, send the
    same criteria and decode answers alike (a ``Choice`` of an Enum is not one of a dict).
    """

    __slots__ = ("criteria",)

    criteria: object  # the wire form of the criteria: a dict or a list

    def decode(self, value: object) -> _T:
        raise NotImplementedError

    @overload
    def __get__(self: _QuestionT, obj: None, owner: object) -> _QuestionT: ...
    @overload
    def __get__(self, obj: Questions, owner: object) -> _T: ...
    def __get__(self, obj: object, owner: object) -> object:
        # Reached only for class access or a Questions instance built without this answer:
        # answers live in the instance __dict__, which wins over a non-data descriptor.
        if obj is None:
            return self
        raise AttributeError("this answer is not set")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.criteria!r})"

    def _answers(self) -> Optional[type[enum.Enum]]:
        """The Enum class the answers are members of, or None for plain values."""
        return None

    def __eq__(self, other: object) -> bool:
        # Equal questions ask the same and answer alike: a Choice of an Enum is not the Choice
        # of a dict with its texts (one answers members, the other keys), nor of another Enum.
        return (
            type(other) is type(self)
            and other.criteria == self.criteria
            and other._answers() is self._answers()
        )

    def __hash__(self) -> int:
        return hash((type(self), json.dumps(self.criteria, sort_keys=True)))


class YesNo(_Question[bool]):
    """A yes/no question: ``YesNo(yes_text, no_text)``; its answer is a ``bool``."""

    __slots__ = ()

    def __init__(self, yes: str, no: str) -> None:
        yes_text, no_text = _text(yes, "the yes text"), _text(no, "the no text")
        self.criteria = {"true": yes_text, "false": no_text}
        if yes_text == no_text:  # the answer would say true or false of one text: the service cannot tell
            raise InvalidQuestion(f"the yes and no texts are both {yes_text!r}; they must differ")

    def __reduce__(self) -> tuple[object, ...]:
        return (YesNo, tuple(cast("dict[str, str]", self.criteria).values()))  # made true, then false

    def decode(self, value: object) -> bool:
        if value is True or value is False:
            return value
        raise _Mismatch(f"expected true or false, got {short(value)}")


class Choice(_Question[_T]):
    """One option out of several: ``Choice({"key": "description", ...})`` or ``Choice(AnEnum)``.

    With a dict the answer is the option key (``str``); with an Enum it is the member whose
    name the service sent, and the members' values are the descriptions.
    """

    __slots__ = ("_options",)

    @overload
    def __init__(self: Choice[str], options: Mapping[str, str]) -> None: ...
    @overload
    def __init__(self: Choice[_E], options: type[_E]) -> None: ...
    def __init__(self, options: Union[Mapping[str, str], type[enum.Enum]]) -> None:
        if isinstance(options, type) and issubclass(options, enum.Enum):
            named = f"a member name of {options.__name__}"  # the names are the option keys sent
            pairs = [(_text(k, named), v) for k, v in _enum_texts(options, "a choice")]
            self._options: Mapping[str, object] = {m.name: m for m in options}
        elif hasattr(options, "items") and not isinstance(options, type):
            given = read(_items, options, "a choice's options", "reading their items()", InvalidQuestion)
            keys = [_text(k, "an option key") for k, _ in given]  # plain str: their repr is str's
            pairs = [(key, _text(v, f"the text of option {key!r}")) for key, (_, v) in zip(keys, given)]
            if len(pairs) < 2:
                raise InvalidQuestion(f"a choice needs at least 2 options, got {len(pairs)}")
            twice = first_repeat(keys)
            if twice is not None:  # two keys of one text (their own __eq__ told them apart): one on the wire
                raise InvalidQuestion(f"option {twice!r} is given twice; option keys must differ")
            repeat = first_repeat(text for _, text in pairs)
            if repeat is not None:  # the service could not tell which of them the text means
                keys = [key for key, text in pairs if text == repeat]
                raise InvalidQuestion(f"options {keys} share the text {repeat!r}; option texts must differ")
            self._options = {k: k for k, _ in pairs}
        else:
            raise InvalidQuestion(f"a choice takes a dict or an Enum class, got {short(options)}")
        if {key for key, _ in pairs} == {"true", "false"}:
            raise InvalidQuestion(
                "options 'true' and 'false' are yes/no criteria on the wire, answered with a bool: use YesNo"
            )
        self.criteria = dict(pairs)

    def __reduce__(self) -> tuple[object, ...]:
        # Built again from what it was built from: the Enum class (by reference), or the dict.
        return (Choice, (self._answers() or self.criteria,))

    def _answers(self) -> Optional[type[enum.Enum]]:
        return _enum_of(self._options.values())

    def decode(self, value: object) -> _T:
        if type(value) is str:
            found = self._options.get(value, _Mismatch)
            if found is not _Mismatch:
                return found  # type: ignore[return-value]
        raise _Mismatch(f"expected one of {sorted(self._options)}, got {short(value)}")


class Score(_Question[_T]):
    """A level on a scale: ``Score(["poor", "fair", "good"])`` or ``Score(AnEnum)``.

    With a list the answer is the 0-based level (``int``); with an Enum it is the member at that
    position, the members' values being the level texts in order.
    """

    __slots__ = ("_levels",)

    @overload
    def __init__(self: Score[int], levels: Sequence[str]) -> None: ...
    @overload
    def __init__(self: Score[_E], levels: type[_E]) -> None: ...
    def __init__(self, levels: Union[Sequence[str], type[enum.Enum]]) -> None:
        if isinstance(levels, type) and issubclass(levels, enum.Enum):
            texts = [text for _, text in _enum_texts(levels, "a score")]
            self._levels: Sequence[object] = tuple(levels)
        elif isinstance(levels, (list, tuple)):
            given = (
                levels
                if type(levels) in (list, tuple)
                else read(list, levels, "a score's levels", "iterating them", InvalidQuestion)
            )
            texts = [_text(t, f"level {i}") for i, t in enumerate(given)]
            if len(texts) < 2:
                raise InvalidQuestion(f"a score needs at least 2 levels, got {len(texts)}")
            if first_repeat(texts) is not None:  # one text at two indices: the answer could not say which
                raise InvalidQuestion(f"level {first_repeat(texts)!r} is given twice; levels must be unique")
            self._levels = range(len(texts))
        else:
            raise InvalidQuestion(
                f"a score takes a list of level texts or an Enum class, got {short(levels)}"
            )
        self.criteria = texts

    def __reduce__(self) -> tuple[object, ...]:
        return (Score, (self._answers() or list(cast("list[str]", self.criteria)),))

    def _answers(self) -> Optional[type[enum.Enum]]:
        return _enum_of(self._levels)

    def decode(self, value: object) -> _T:
        if type(value) is int and 0 <= value < len(self._levels):
            return self._levels[value]  # type: ignore[return-value]
        raise _Mismatch(f"expected a level from 0 to {len(self._levels) - 1}, got {short(value)}")


class _Spec:
    """A compiled question set: the encoded ``questions`` JSON and one decoder per id."""

    __slots__ = ("decoders", "middle")

    def __init__(self, pairs: Iterable[tuple[str, _Question[Any]]]) -> None:
        items = list(pairs)
        if not items:
            raise NoQuestions("a request needs at least one question")
        wire: dict[str, object] = {}
        named = []
        for given, question in items:
            # Its str text: the answers are looked up, and keyed, by what the service sent.
            name = _text(given, "a question name", InvalidName)
            if not isinstance(question, _Question):
                raise InvalidQuestion(
                    f"question {name!r} must be a YesNo, Choice or Score, got {short(question)}"
                )
            if name in wire:
                raise DuplicateQuestionName(f"two questions are named {name!r}")
            wire[name] = {"criteria": question.criteria}
            named.append((name, question))
        # What every body holds between the state and the model, joined once.
        self.middle = b',"questions":%s,"model":' % json.dumps(wire, separators=(",", ":")).encode()
        self.decoders: tuple[tuple[str, Decoder], ...] = tuple((n, q.decode) for n, q in named)

    def body(self, state: object, model: str) -> bytes:
        """The JSON request body; ``state`` is checked here, the one per-call input."""
        if type(state) is not str:  # a str subclass's own isspace() or __len__ never runs
            state = plain(state)
        if not isinstance(state, str) or not state or state.isspace():
            raise InvalidState(f"state must be a non-empty string, got {short(state)}")
        try:
            # UTF-8, not \u escapes (smaller): the one encode is also the check that it is text.
            text = _encode_utf8(state).encode()
        except UnicodeEncodeError:
            raise InvalidState(f"state is {not_utf8(state)}") from None
        return b"".join((b'{"state":', text, self.middle, _encode_str(model).encode(), b"}"))

    def decode(self, answers: object) -> dict[str, object]:
        """Decoded answers by id; raises ``_Mismatch`` naming the first bad one."""
        if type(answers) is not dict:
            raise _Mismatch(f'"answers" must be an object, got {short(answers)}')
        out = {}
        for name, decode in self.decoders:
            try:
                value = answers[name]
            except KeyError:
                raise _Mismatch(f"no answer for question {name!r}") from None
            try:
                out[name] = decode(value)
            except _Mismatch as exc:
                raise _Mismatch(f"answer to {name!r}: {exc}") from None
        return out


def check_model(model: object, what: str = "model") -> str:
    text = _text(model, what, InvalidModel)  # sent as JSON, as the questions' texts are
    if (found := control_char(text)) is not None:  # a newline or a tab came with a paste
        raise InvalidModel(f"{what} holds {found}: a model name has none")
    return text


def _declared(cls: type, holder: type) -> list[tuple[str, _Question[Any]]]:
    """The questions ``holder`` itself declares, for the ``Questions`` class ``cls``."""
    found = []
    for name, value in vars(holder).items():
        if isinstance(value, _Question):
            # A question would hide the attribute of that name that ask(), pickling or
            # Python itself (``__init__``, ``__eq__``...) use.
            if (
                name in ("_qa_compiled", "_qa_fields", "_qa_from", "_qa_spec")
                or name[:2] == name[-2:] == "__"
            ):
                raise InvalidName(f"{cls.__name__}.{name}: {name!r} is reserved by qa.Questions")
            found.append((name, value))
    return found


class Questions:
    """Base class of a typed question set.

    Subclass it and declare questions as class attributes::

        class Review(qa.Questions):
            toxic = qa.YesNo("The text insults someone", "The text insults no one")
            quality = qa.Score(["poor", "fair", "good"])

    ``client.ask(state, Review).answers`` is then a ``Review`` instance whose attributes are the
    answers, typed for mypy. Instances are read-only; ``Review(toxic=True, quality=2)`` builds
    one by hand, for example as a canned answer in a test.
    """

    __slots__ = ("__dict__",)
    _qa_fields: tuple[tuple[str, _Question[Any]], ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Every base's questions (``class AB(A, B)``), the farthest first, as dataclasses do. A
        # plain mixin's count too: its questions are attributes of the class, typed as answers.
        fields: dict[str, _Question[Any]] = {}
        for base in reversed(cls.__mro__[1:]):
            merged = base.__dict__.get("_qa_fields")
            fields.update(_declared(cls, base) if merged is None else merged)
        fields.update(_declared(cls, cls))
        cls._qa_fields = tuple(fields.items())

    @classmethod
    def _qa_spec(cls) -> _Spec:
        # Looked up in the class's own __dict__: a subclass must not reuse its base's spec.
        spec: Optional[_Spec] = cls.__dict__.get("_qa_compiled")
        if spec is None:
            spec = _Spec(cls._qa_fields)
            setattr(cls, "_qa_compiled", spec)  # noqa: B010
        return spec

    @classmethod
    def _qa_from(cls, answers: dict[str, object]) -> Any:
        obj = object.__new__(cls)
        obj.__dict__.update(answers)
        return obj

    def __init__(self, **answers: object) -> None:
        names = {name for name, _ in self._qa_fields}
        if set(answers) != names:
            raise InvalidName(
                f"{type(self).__name__} takes exactly the answers {sorted(names)}, got {sorted(answers)}"
            )
        self.__dict__.update(answers)

    def __setattr__(self, name: str, value: object = None) -> None:
        raise AttributeError(f"{type(self).__name__} answers are read-only")

    __delattr__ = __setattr__

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"{type(self).__name__}({inner})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[object, ...]:
        # The class travels by reference, so it must be importable where the answers land.
        return (type(self)._qa_from, (dict(self.__dict__),))

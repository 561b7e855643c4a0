"""Typing names at no run-time cost, and small helpers every layer shares.

``import typing`` adds ~3 ms to a cold start, a tenth of ``http.client`` itself: the checker
sees typing's objects, the interpreter sees stand-ins. A leaf: it imports nothing of qa_min.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Generic as Generic
    from typing import cast as cast
    from typing import overload as overload
else:

    def overload(func):
        # The implementation defined after the overloads replaces them, as with typing's.
        return func

    def cast(_tp, value):
        return value

    class Generic:
        # `class C(Generic[T])` must work without TypeVar objects: any subscript gives back
        # the class itself, and instances of subclasses stay subscriptable for annotations.
        # No slot of its own, as typing's: a subclass's __slots__ then hold, with no __dict__.
        __slots__ = ()

        def __class_getitem__(cls, _item):
            return cls


class Unset:
    """The type of ``UNSET``: "this option was not given", as distinct from None."""

    # A plain class, not an Enum member: creating an Enum class costs a cold start ~0.1 ms.
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"

    def __reduce__(self) -> str:
        return "UNSET"  # the one instance, across pickle and copy


UNSET = Unset()

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any, Optional, TypeVar

    T = TypeVar("T")
    R = TypeVar("R")


def short(value: object, hide: Optional[Callable[[str], str]] = None) -> str:
    """``repr(value)``, cut to 60 characters for a message; ``hide`` redacts it before the cut."""
    try:
        text = repr(value)
    except ValueError:
        # An int of more digits than sys.get_int_max_str_digits() (4300), or a container that
        # holds one, has no repr: the message naming the value must not fail in its place.
        if isinstance(value, int):
            return f"an int of {int.bit_length(value)} bits, too long to print"
        return f"a {type(value).__name__} too long to print"
    except Exception:  # the caller's own __repr__ raised: the message still names the option
        return f"a {type(value).__name__} whose repr() raised"
    if hide is not None:
        text = hide(text)
    return text if len(text) <= 60 else text[:57] + "..."


_PLAIN = (int, float, str, bool)


def plain(value: object) -> Any:
    """``value``, or the value of an int, float or str subclass as a plain int, float or str.

    Read through the base type's own slot, so the subclass's overrides (``__index__``, ``__lt__``,
    ``__hash__``, ``strip``...) are never called: they may raise, or lie. Anything else as it is."""
    if type(value) in _PLAIN:  # the common case: nothing to copy
        return value
    if isinstance(value, int):
        return int.__index__(value)  # int's own slot: an exact int, whatever the subclass says
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    return value


def read(
    reader: Callable[[T], R],
    value: T,
    name: str,
    doing: str,
    error: Callable[[str], BaseException],
    hide: Optional[Callable[[str], str]] = None,
) -> R:
    """``reader(value)``, where ``value`` is the caller's own object and may raise as it is read.

    Its exception becomes ``error`` naming the argument, what was done and what it raised
    (``"extra_headers could not be read: iterating it raised ValueError('...')"``), chained;
    ``hide`` redacts the exception's text (a secret it may hold) before it is cut."""
    try:
        return reader(value)
    except Exception as exc:
        raise error(f"{name} could not be read: {doing} raised {short(exc, hide)}") from exc


def first_repeat(texts: Iterable[str]) -> Optional[str]:
    """The first text met a second time in ``texts``, or None when no text is there twice."""
    seen: set[str] = set()
    for text in texts:
        if text in seen:
            return text
        seen.add(text)
    return None


def not_utf8(text: str) -> Optional[str]:
    """Why ``text`` has no UTF-8 form, for a message ("not UTF-8: ..."), or None when it has one.

    What has none is a surrogate code point: ``os.fsdecode`` and ``surrogateescape`` turn bytes
    that do not decode into those, and JSON would carry them as escapes that are no text. The
    index lets a caller find the bad byte in a long text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"not UTF-8: it holds the surrogate {text[exc.start]!r} at index {exc.start}"
    return None


def control_char(text: str) -> Optional[str]:
    """The first control character of ``text`` (C0, DEL or C1) and its index, for a message
    ("the control character '\\n' at index 5"), or None when it holds none."""
    if text.isprintable():  # the common case, at C speed: printable text holds none
        return None
    for index, char in enumerate(text):
        if char < " " or "\x7f" <= char <= "\x9f":
            return f"the control character {char!r} at index {index}"
    return None


class ReadOnly(dict):  # type: ignore[type-arg]
    """A dict that refuses every change (``TypeError``, as a ``MappingProxyType`` does), so that
    answers handed to the caller cannot be changed under them; unlike a proxy it pickles,
    copies and encodes as JSON, as a caller storing ``usage`` or ``answers`` expects."""

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError("this mapping is read-only; dict(mapping) is a copy that can change")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[object, ...]:
        return (ReadOnly, (dict(self),))

    def __copy__(self) -> ReadOnly:
        return self  # it never changes


def readonly(mapping: dict[str, Any]) -> Mapping[str, Any]:
    """``mapping`` as a ``ReadOnly`` copy, so answers handed to the caller cannot be changed."""
    return ReadOnly(mapping)

"""Typing names at no run-time cost, and small helpers every layer shares.

``import typing`` adds ~3 ms to a cold start, a tenth of ``http.client`` itself: the checker
sees typing's objects, the interpreter sees stand-ins. A leaf: it imports nothing of qa_min.
"""

from __future__ import annotations

from types import MappingProxyType

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
    from collections.abc import Mapping
    from typing import Any


def short(value: object) -> str:
    """``repr(value)``, cut to 60 characters for a message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def readonly(mapping: dict[str, Any]) -> Mapping[str, Any]:
    """A read-only view, so answers handed to the caller cannot be changed under them."""
    return MappingProxyType(mapping)

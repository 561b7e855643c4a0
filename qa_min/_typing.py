"""Typing names that cost nothing at run time.

``import typing`` adds about 3 ms to a cold start, a tenth of what ``http.client`` itself
costs, and qa_min promises an import no slower than ``http.client`` plus ``json``. The type
checker sees the real ``typing`` objects; the interpreter sees the tiny stand-ins below, which
behave the same for the only uses qa_min makes of them.
"""

from __future__ import annotations

import enum as _enum

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


class Unset(_enum.Enum):
    """The type of ``UNSET``: "this option was not given", as distinct from None."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


UNSET = Unset.UNSET

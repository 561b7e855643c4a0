"""``RetryPolicy`` made a frozen dataclass, on first public use (``dataclasses`` is slow to import).

The fields are declared once, in ``_backoff``; this module only applies the decorator in place
and adds ``RetryPolicy.none``.
"""

from __future__ import annotations

import dataclasses

from ._backoff import RetryPolicy

if not dataclasses.is_dataclass(RetryPolicy):
    dataclasses.dataclass(frozen=True)(RetryPolicy)
    RetryPolicy.none = RetryPolicy(max_retries=0)

__all__ = ["RetryPolicy"]

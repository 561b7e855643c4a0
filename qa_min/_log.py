"""The ``qa_min`` logger, set up on first use so that ``import qa_min`` does not load logging.

Silent by default (a ``NullHandler``). ``SERVICE_LOG=debug`` or ``SERVICE_LOG=info`` adds a
stderr handler at that level. Records never hold the API key or a body.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import logging
    from typing import Optional

NAME = __name__.rpartition(".")[0]  # "qa_min", or the vendored package's own name
_logger: Optional[logging.Logger] = None


def get() -> Optional[logging.Logger]:
    """The library's logger, or None while nobody could be listening.

    Until the application imports ``logging`` (or sets ``SERVICE_LOG``) no handler can exist,
    so there is nothing to log to and no reason to pay for the import.
    """
    global _logger
    if _logger is None:
        level = (os.environ.get("SERVICE_LOG") or "").strip().lower()
        if "logging" not in sys.modules and not level:
            return None
        import logging

        logger = logging.getLogger(NAME)
        logger.addHandler(logging.NullHandler())
        if level in ("debug", "info"):
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
            logger.addHandler(handler)
            logger.setLevel(logging.DEBUG if level == "debug" else logging.INFO)
        _logger = logger
    return _logger

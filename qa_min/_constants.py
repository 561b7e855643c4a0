"""The package's fixed values: its version, the public address, the default model.

A leaf: every other module may import it, and it imports nothing, so ``_config`` never has to
reach back up into ``__init__`` for them.
"""

__version__ = "0.1.0"

PUBLIC_BASE_URL = "https://api.qa-service.com"
"""The address of the public service; an API key is required there."""

DEFAULT_MODEL = "judge-latest"
"""The latest alias of the primary model family, used when no model is configured."""

MAX_RESPONSE_BYTES = 8 * 1024 * 1024
"""Default cap on a response body; larger ones are refused, not buffered."""

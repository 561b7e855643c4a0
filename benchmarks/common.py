"""What several benchmark modules share: where the checkout is, the children's environment, the
request every client sends and the replies every server gives.

This module imports nothing of ``benchmarks`` (every other module imports it, never the other
way round) and, at run time, only ``os``, which the interpreter has loaded before
it runs a line: ``benchmarks.clients`` imports it in the very process whose import time and
peak memory are measured, and anything this module loaded would count for every client alike
and blur the comparison with raw ``http.client``.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The directory holding ``benchmarks/`` and ``qa_min/``: every child process runs there, with it
on its path."""

# -- the request every client sends ----------------------------------------------------------

STATE = "The meeting moves to Thursday at 10:00; please confirm that you can attend."
MODEL = "judge-latest"
YES_NO = {"true": "The text insults someone", "false": "The text insults no one"}
TONES = {"formal": "Written in a formal register", "casual": "Written casually"}
LEVELS = ["poor", "fair", "good"]
PAYLOAD = {
    "state": STATE,
    "questions": {
        "toxic": {"criteria": YES_NO},
        "tone": {"criteria": TONES},
        "quality": {"criteria": LEVELS},
    },
    "model": MODEL,
}
"""The body every client sends: what qa_min's ``core()`` and ``ask()`` send for these questions."""
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json",
    "User-Agent": "qa-benchmarks/1.0",
}
PATH = "/v1/core"

# -- the replies every server gives (the own server and nginx alike) -------------------------

CORE_BODY = (
    b'{"answers": {"toxic": true, "tone": "formal", "quality": 2}, '
    b'"usage": {"input_tokens": 3, "output_tokens": 3}}'
)
WRONG_BODY = (
    b'{"answers": {"toxic": false, "tone": "formal", "quality": 2}, '
    b'"usage": {"input_tokens": 3, "output_tokens": 3}}'
)
"""``CORE_BODY`` with toxic false: served with ``--wrong-answer``, every client must reject it."""
MODELS_BODY = b'{"models": [{"name": "judge-latest"}]}'
NOT_FOUND_BODY = b'{"detail": "not found"}'
NOT_ALLOWED_BODY = b'{"detail": "method not allowed"}'


def child_env(extra: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The environment of every benchmark process: ``ROOT`` on the path, no proxies, no ``SERVICE_*``.

    A proxy variable would send requests and httpx (and qa_min) through a proxy instead of to
    the local server, ``SERVICE_DEFAULT_MODEL`` would change qa_min's request body, and
    ``SSL_CERT_FILE``/``SSL_CERT_DIR`` are the cold-start mode's to set.
    """
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.lower().endswith("_proxy")
        and not key.startswith("SERVICE_")
        and key not in ("SSL_CERT_FILE", "SSL_CERT_DIR")
    }
    # Byte-code caches on: without them every import of a changed module would pay for
    # compiling it, and the import times would measure the compiler.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = ROOT if not path else f"{ROOT}{os.pathsep}{path}"
    env.update(extra or {})
    return env

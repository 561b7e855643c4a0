"""Which servers a run uses: nginx when it is installed, the own server, or both.

``--server auto`` (the default) measures against both when nginx is found, so every run shows
whether the two agree, and falls back to the own server alone, saying so, when it is not.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Optional

from . import nginx, server

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from .process import ServerProcess

CHOICES = ("auto", "both", "nginx", "own")


class Starter:
    """How to start one kind of server.

    Attributes:
        key: Short name in metric keys and tables: ``nginx`` or ``own``.
        python: The interpreter that runs the own server.
        binary: The nginx executable, for ``nginx``.
    """

    def __init__(self, key: str, python: str = sys.executable, binary: Optional[str] = None) -> None:
        self.key = key
        self.python = python
        self.binary = binary

    def start(
        self, wrong_answer: bool = False, tls: Optional[tuple[str, str]] = None
    ) -> AbstractContextManager[ServerProcess]:
        """A context manager running the server; see ``nginx.start`` and ``server.start``."""
        if self.key == "nginx":
            return nginx.start(wrong_answer=wrong_answer, tls=tls, binary=self.binary)
        return server.start(wrong_answer=wrong_answer, python=self.python, tls=tls)


def choose(
    choice: str, python: str = sys.executable, binary: Optional[str] = None
) -> tuple[list[Starter], str]:
    """The servers for ``--server choice``, and a note for the report when nginx is missing.

    Raises:
        nginx.NginxNotFound: ``choice`` requires nginx (``nginx`` or ``both``) and it is missing.
    """
    own = Starter("own", python)
    if choice == "own":
        return [own], ""
    try:
        found = nginx.find_nginx(binary)
        nginx.version(found)
    except nginx.NginxNotFound as exc:
        if choice != "auto":
            raise
        return [own], f"nginx not used ({exc}): the own server only."
    with_nginx = Starter("nginx", python, found)
    return ([with_nginx] if choice == "nginx" else [with_nginx, own]), ""

"""Which servers a run uses: nginx when it is installed, the own server, or both.

``--server auto`` (the default) measures against both when nginx is found, so every run shows
whether the two agree, and falls back to the own server alone, saying so, when it is not.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Optional

from . import nginx
from .process import start_process

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
        """A context manager running the server; see ``nginx.start`` and ``start_own``."""
        if self.key == "nginx":
            return nginx.start(wrong_answer=wrong_answer, tls=tls, binary=self.binary)
        return start_own(wrong_answer=wrong_answer, python=self.python, tls=tls)


def start_own(
    wrong_answer: bool = False, python: str = sys.executable, tls: Optional[tuple[str, str]] = None
) -> AbstractContextManager[ServerProcess]:
    """Run ``benchmarks.server`` in a child process for the duration of a ``with`` block.

    Args:
        wrong_answer: Serve ``WRONG_BODY`` for ``POST /v1/core``.
        python: The interpreter to run it with.
        tls: (certificate file, key file): also serve HTTPS, at ``tls_url``.

    Raises:
        RuntimeError: The server did not print ``READY`` (its stderr is in the message).
    """
    command = [python, "-m", "benchmarks.server", "--exit-on-stdin-eof"]
    if wrong_answer:
        command.append("--wrong-answer")
    if tls is not None:
        command += ["--tls-cert", tls[0], "--tls-key", tls[1]]
    return start_process(command, "benchmarks/server.py")


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

"""Fixtures shared by the test modules; plain helpers are in ``support.py``.

A module that needs a different service or client defines its own fixture under another name
(``env_free_client``, ``keyed_svc``, ...), so a name here always means the same thing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from support import Listener, make_client

import qa_min as qa
from qa_min.testing import FakeService

if TYPE_CHECKING:
    from tlshelpers import Certs


@pytest.fixture
def svc() -> Iterator[FakeService]:
    """A fake service with no key and the default answers."""
    with FakeService() as service:
        yield service


@pytest.fixture
def client(svc: FakeService) -> Iterator[qa.Client]:
    """A client of ``svc`` that never retries: a scripted failure surfaces on the first attempt."""
    with make_client(svc.url, retry=qa.RetryPolicy.none) as c:
        yield c


@pytest.fixture
def listener() -> Iterator[Listener]:
    sock = Listener()
    try:
        yield sock
    finally:
        sock.close()


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A test CA and the server certificates it signed, made once for the session: each set
    costs three openssl runs, and no test changes them."""
    from tlshelpers import OpenSSLUnavailable, make_certs  # ssl and http.server: loaded when needed

    try:
        return make_certs(tmp_path_factory.mktemp("certs"))
    except OpenSSLUnavailable as exc:
        pytest.skip(f"cannot make test certificates: {exc}")

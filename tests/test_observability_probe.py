"""Observability through both clients: what a client, a call's ``Diagnostics`` and its hooks show.

The key stays out of every ``repr``, even where the caller put it in the base URL's path; a
``Diagnostics`` passed to a call is filled by that call whatever ends it.
"""

from __future__ import annotations

import asyncio

import pytest

import qa_min as qa

KEY = "sk-probe-0123456789abcdefXYZ"
KINDS = ["sync", "async"]

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("kind", KINDS)
def test_a_clients_repr_hides_a_key_in_the_base_urls_path(kind: str) -> None:
    # Some gateways take the key in the path; messages and log lines hide it there already.
    options = {"base_url": f"http://127.0.0.1:1/keys/{KEY}", "api_key": KEY, "trust_env": False}
    if kind == "sync":
        with qa.Client(**options) as client:  # type: ignore[arg-type]
            shown = repr(client)
    else:

        async def made() -> str:
            async with qa.AsyncClient(**options) as client:  # type: ignore[arg-type]
                return repr(client)

        shown = asyncio.run(made())
    assert KEY[3:11] not in shown, shown
    assert "/keys/[redacted]'" in shown, shown

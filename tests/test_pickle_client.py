"""A Client pickles as its configuration and unpickles into a fresh, open client (SPEC.md 7a).

pickles with the key, every protocol ......... test_a_pickled_client_works_with_its_key
copy.copy / deepcopy do the same ............. test_copy_and_deepcopy_make_fresh_clients
no sockets, threads or closed state .......... test_the_copy_shares_no_pool_and_no_executor,
                                               test_a_closed_client_unpickles_open
environment fixed at construction ............ test_values_from_the_environment_travel_as_found
what cannot travel is refused clearly ........ test_a_client_with_an_ssl_context_is_refused
shipped to a process pool .................... test_a_client_shipped_to_a_spawned_process_answers
"""

from __future__ import annotations

import concurrent.futures
import copy
import multiprocessing
import pickle
import ssl
from collections.abc import Iterator

import pytest
from support import make_client, resource_warnings_now

import qa_min as qa
from qa_min.testing import FakeService

KEY = "sk-pickle-0123456789"
REQUEST = qa.Request(state="Some text", questions=[qa.NamedQuestion("toxic", qa.YesNo("yes", "no"))])


@pytest.fixture
def keyed() -> Iterator[FakeService]:
    with FakeService(api_key=KEY) as service:
        yield service


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_pickled_client_works_with_its_key(keyed: FakeService, protocol: int) -> None:
    with make_client(keyed.url, api_key=KEY, timeout=5.0, extra_headers=[("X-Team", "a")]) as client:
        shipped = pickle.loads(pickle.dumps(client, protocol))
    with shipped:
        assert shipped.core(REQUEST).diagnostics.status == 200  # the key went along: no 401
        assert shipped.base_url == keyed.url
        assert shipped._timeout == 5.0
    assert keyed.requests[-1].headers["x-team"] == "a"


def test_copy_and_deepcopy_make_fresh_clients(keyed: FakeService) -> None:
    with make_client(keyed.url, api_key=KEY, retry=qa.RetryPolicy(max_retries=1)) as client:
        for twin in (copy.copy(client), copy.deepcopy(client)):
            with twin:
                assert twin is not client
                assert twin._retry == qa.RetryPolicy(max_retries=1)
                assert twin.list_models().models


def test_the_copy_shares_no_pool_and_no_executor(svc: FakeService) -> None:
    with make_client(svc.url) as client:
        client.submit(client.core, REQUEST).result(5)
        twin = pickle.loads(pickle.dumps(client))
        with twin:
            assert twin._transport.pool is not client._transport.pool
            assert twin._transport.pool.idle_count() == 0  # no socket came along
            assert twin._life.executor is None  # nor a thread
            assert twin._closing is not client._closing
            assert twin.submit(twin.core, REQUEST).result(5).diagnostics.status == 200


def test_a_copy_left_open_closes_its_idle_sockets_quietly_when_collected(svc: FakeService) -> None:
    # docs/engines.md: leave a shipped copy open in the task; Python collects it.
    with make_client(svc.url) as client:
        twin = pickle.loads(pickle.dumps(client))
        assert twin.core(REQUEST).diagnostics.status == 200
        [conn] = [conn for stack in twin._transport.pool._idle.values() for conn in stack]
        sock = conn.sock
        del twin, conn
        assert resource_warnings_now() == []
        assert sock.fileno() == -1  # closed by the pool, not left to the socket's own finalizer
        twin = pickle.loads(pickle.dumps(client))
        assert twin.core(REQUEST).diagnostics.status == 200
        del twin
        assert resource_warnings_now() == []


def test_a_closed_client_unpickles_open(svc: FakeService) -> None:
    client = make_client(svc.url)
    client.close()
    with pytest.raises(qa.ClientClosed):
        client.core(REQUEST)
    with pickle.loads(pickle.dumps(client)) as twin:
        assert twin.core(REQUEST).diagnostics.status == 200


def test_values_from_the_environment_travel_as_found(
    svc: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVICE_BASE_URL", svc.url)
    monkeypatch.setenv("SERVICE_API_KEY", KEY)
    monkeypatch.setenv("SERVICE_DEFAULT_MODEL", "judge-2.1")
    with qa.Client() as client:
        data = pickle.dumps(client)
    for name in ("SERVICE_BASE_URL", "SERVICE_API_KEY", "SERVICE_DEFAULT_MODEL"):
        monkeypatch.setenv(name, "http://elsewhere.invalid" if name == "SERVICE_BASE_URL" else "other")
    with pickle.loads(data) as twin:  # a worker with another environment
        assert (twin.base_url, twin._key, twin.model) == (svc.url, KEY, "judge-2.1")


def test_a_client_with_an_ssl_context_is_refused() -> None:
    context = ssl.create_default_context()
    with (
        qa.Client(base_url="https://127.0.0.1:9", ssl_context=context) as client,
        pytest.raises(qa.ConfigurationError, match="ssl_context cannot be pickled") as caught,
    ):
        pickle.dumps(client)
    assert "build the client where it is used" in str(caught.value)


def _ask_in_worker(client: qa.Client) -> int:
    with client:
        return client.core(REQUEST).diagnostics.attempts


@pytest.mark.timeout(60)
def test_a_client_shipped_to_a_spawned_process_answers(keyed: FakeService) -> None:
    context = multiprocessing.get_context("spawn")
    with (
        make_client(keyed.url, api_key=KEY) as client,
        concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool,
    ):
        assert pool.submit(_ask_in_worker, client).result(50) == 1
    assert len(keyed.requests) == 1

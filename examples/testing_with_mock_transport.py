"""Testing your own code in-process with ``qa_min.testing.MockTransport``: no socket, no thread.

``Client(transport=MockTransport(handler))`` answers every request by calling ``handler`` on the
calling thread. The handler gets the request qa_min would have sent (method, path, headers, body)
and returns a ``reply(...)`` (or ``drop()``, ``reset()``, ``hang()``, ...), or None for the fake
service's normal answer. Everything above the network runs as it does over a socket: retries and
their delays, errors, diagnostics, hooks, cancellation.

Run the tests below with pytest (``python -m pytest examples/testing_with_mock_transport.py``), or
run this file: it runs each test and prints its name.
"""

from __future__ import annotations

import threading
from typing import Optional

import qa_min as qa
from qa_min.testing import MockTransport, RecordedRequest, Step, reply

# -- your code -------------------------------------------------------------------------------


class Moderation(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


def flag_toxic(client: qa.Client, texts: list[str]) -> list[str]:
    """The texts the service judges toxic; a busy service is reported as "not flagged yet"."""
    flagged = []
    for text in texts:
        try:
            if client.ask(text, Moderation).answers.toxic:
                flagged.append(text)
        except qa.ServiceBusy:
            continue
    return flagged


# -- your tests ------------------------------------------------------------------------------


def no_sleep(seconds: float, wake: threading.Event) -> None:
    """Retries without waiting: the delay is still computed, and recorded by qa_min."""


def answer_toxic(texts: set[str]) -> MockTransport:
    """A service that finds exactly ``texts`` toxic."""

    def handler(request: RecordedRequest) -> Optional[Step]:
        return reply(200, {"answers": {"toxic": request.json()["state"] in texts}})

    return MockTransport(handler)


def test_flag_toxic_keeps_the_texts_the_service_flags() -> None:
    transport = answer_toxic({"you idiot"})
    with qa.Client(base_url="http://qa.test", transport=transport) as client:
        assert flag_toxic(client, ["hello", "you idiot"]) == ["you idiot"]
    assert [r.json()["state"] for r in transport.requests] == ["hello", "you idiot"]


def test_flag_toxic_retries_a_rate_limit_then_succeeds() -> None:
    script = [reply(429, {"detail": "slow down"}, headers=[("retry-after-ms", "20")])]

    def handler(request: RecordedRequest) -> Optional[Step]:
        if script:
            return script.pop(0)  # a 429 first...
        return reply(200, {"answers": {"toxic": True}})  # ...then a 200

    diagnostics = qa.Diagnostics()
    with qa.Client(base_url="http://qa.test", transport=MockTransport(handler), sleep=no_sleep) as client:
        assert client.ask("you idiot", Moderation, diagnostics=diagnostics).answers.toxic is True
    assert [a.status for a in diagnostics.history] == [429, 200]
    assert diagnostics.history[1].delay == 0.02  # the delay the server asked for


def test_flag_toxic_skips_a_text_when_the_service_stays_busy() -> None:
    busy = MockTransport(lambda request: reply(429, {"detail": "slow down"}))
    with qa.Client(base_url="http://qa.test", transport=busy, sleep=no_sleep) as client:
        assert flag_toxic(client, ["hello"]) == []
    assert len(busy.requests) == 3  # the first attempt and the policy's two retries


def test_the_default_answers_follow_the_fake_services_rules() -> None:
    with qa.Client(base_url="http://qa.test", transport=MockTransport()) as client:
        assert isinstance(client.ask("hello", Moderation).answers.toxic, bool)


TESTS = [
    test_flag_toxic_keeps_the_texts_the_service_flags,
    test_flag_toxic_retries_a_rate_limit_then_succeeds,
    test_flag_toxic_skips_a_text_when_the_service_stays_busy,
    test_the_default_answers_follow_the_fake_services_rules,
]


def main(base_url: str | None = None) -> None:
    # The tests need no service: MockTransport is the service. The code under test also runs
    # once over a socket, against SERVICE_BASE_URL or a local fake.
    with qa.Client(base_url=base_url) as client:
        print(f"flagged: {flag_toxic(client, ['hello', 'you idiot'])}")
    for test in TESTS:
        test()
        print(f"ok  {test.__name__}")
    print(f"{len(TESTS)} tests passed")


if __name__ == "__main__":
    import os

    if os.environ.get("SERVICE_BASE_URL", "").strip():
        main()
    else:
        from qa_min.testing import FakeService

        with FakeService() as service:
            print(f"(no SERVICE_BASE_URL: a local fake service at {service.url}; its answers are arbitrary)")
            main(service.url)

"""Testing your own code with ``qa_min.testing.FakeService``.

``FakeService`` is a real HTTP server on 127.0.0.1 that speaks the service's protocol, so the
code under test runs unchanged, sockets, retries and all. Its answers are deterministic; a test
can pin them (``set_answers``), script failures (``script(reply(...))``), and check what was
sent (``requests``).

Run the tests below with pytest (``python -m pytest examples/testing_your_code.py``), or run
this file: it calls the code against ``SERVICE_BASE_URL`` (or a fake) and then runs each test.
"""

from __future__ import annotations

import os
import threading

import qa_min as qa
from qa_min.testing import FakeService, delay, expected_answer, reply

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


def no_wait(seconds: float, wake: threading.Event) -> None:
    """A backoff "sleep" that returns at once: retries without slowing the tests down."""


def fake_client(service: FakeService) -> qa.Client:
    # trust_env=False: the developer's SERVICE_API_KEY or proxy settings must not leak in.
    return qa.Client(base_url=service.url, trust_env=False, sleep=no_wait)


def test_flag_toxic_keeps_the_texts_judged_toxic() -> None:
    with FakeService() as service, fake_client(service) as client:
        service.set_answers({"toxic": True})  # every "toxic" question now answers true
        assert flag_toxic(client, ["one", "two"]) == ["one", "two"]
        service.set_answers({"toxic": False})
        assert flag_toxic(client, ["three"]) == []


def test_flag_toxic_sends_one_yes_no_question_per_text() -> None:
    with FakeService() as service, fake_client(service) as client:
        flag_toxic(client, ["one", "two"])
    bodies = [request.json() for request in service.requests]
    assert [body["state"] for body in bodies] == ["one", "two"]
    assert bodies[0]["questions"] == {"toxic": {"criteria": Moderation.toxic.criteria}}


def test_flag_toxic_follows_the_fakes_deterministic_answers() -> None:
    texts = [f"text {i}" for i in range(10)]
    criteria = Moderation.toxic.criteria
    with FakeService() as service, fake_client(service) as client:
        flagged = flag_toxic(client, texts)
    assert flagged == [t for t in texts if expected_answer(qa.DEFAULT_MODEL, t, "toxic", criteria)]


def test_flag_toxic_retries_a_rate_limit_then_skips_a_text_that_stays_busy() -> None:
    busy = reply(429, {"detail": "slow down"})
    served = delay(0)  # a step that serves the request normally
    with FakeService() as service, fake_client(service) as client:
        service.set_answers({"toxic": True})
        # Each request takes the next step: "one" gets a 429 and its retry is answered; "two"
        # gets a 429 on its first attempt and both retries; "three" finds the script empty.
        service.script(busy, served, busy, busy, busy)
        assert flag_toxic(client, ["one", "two", "three"]) == ["one", "three"]
        assert [r.json()["state"] for r in service.requests] == ["one"] * 2 + ["two"] * 3 + ["three"]


def test_flag_toxic_lets_other_errors_through() -> None:
    error: qa.QAError | None = None
    with FakeService(api_key="sk-right") as service:
        client = qa.Client(base_url=service.url, api_key="sk-wrong", trust_env=False)
        try:
            flag_toxic(client, ["one"])  # with pytest: `with pytest.raises(qa.Unauthorized):`
        except qa.Unauthorized as exc:
            error = exc
        finally:
            client.close()
    assert isinstance(error, qa.Unauthorized)
    assert error.status == 401


TESTS = [
    test_flag_toxic_keeps_the_texts_judged_toxic,
    test_flag_toxic_sends_one_yes_no_question_per_text,
    test_flag_toxic_follows_the_fakes_deterministic_answers,
    test_flag_toxic_retries_a_rate_limit_then_skips_a_text_that_stays_busy,
    test_flag_toxic_lets_other_errors_through,
]


def main(base_url: str | None = None) -> None:
    with qa.Client(base_url=base_url) as client:
        print(f"flagged: {flag_toxic(client, ['You are an idiot.', 'Have a nice day.'])}")
    for test in TESTS:
        test()
        print(f"ok  {test.__name__}")
    print(f"{len(TESTS)} tests passed")


if __name__ == "__main__":
    if os.environ.get("SERVICE_BASE_URL", "").strip():
        main()
    else:
        with FakeService() as demo_service:
            print(f"(no SERVICE_BASE_URL: a local fake service at {demo_service.url}; answers are arbitrary)")
            main(demo_service.url)

"""Errors and retries: a busy service as your code sees it, and tuning the retries.

    python examples/errors_and_retries.py

Without ``SERVICE_BASE_URL`` it starts a local fake service scripted to be busy (429 and 529
replies), so that every branch below runs. Against a real, healthy service the calls simply
succeed on their first attempt.
"""

from __future__ import annotations

import os

import qa_min as qa


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


TEXT = "Your parcel is on its way."

# Patient: up to 4 retries, 200 ms doubling to at most 2 s, and 409 retried too. Busy replies
# that carry retry-after-ms or Retry-After wait as long as the service asks instead.
PATIENT = qa.RetryPolicy(
    max_retries=4,
    backoff_initial_ms=200,
    backoff_max_ms=2000,
    retry_status=lambda status: status in (408, 409, 429) or status >= 500,
)
# For a call someone is waiting on: one quick retry at most.
IMPATIENT = qa.RetryPolicy(max_retries=1, backoff_initial_ms=100)


def advice(exc: qa.QAError) -> str:
    """What a caller can do about an error: the error tree, from the most specific branch."""
    if isinstance(exc, qa.ServiceBusy):  # RateLimited (429) or Overloaded (529), after retries
        return "the service is busy: try again later, or with fewer calls at a time"
    if isinstance(exc, qa.APIStatusError):  # any other HTTP status: .status says which
        return f"HTTP {exc.status}: the request or the account needs fixing"
    if isinstance(exc, qa.ConnectionFailed):
        return f"unreachable: {exc.diagnostics.transport_error!r}"
    return "see the message"


def main(base_url: str | None = None) -> None:
    with qa.Client(base_url=base_url, retry=PATIENT) as client:
        # 1. Retries that work are invisible; a Diagnostics shows what the call did.
        diagnostics = qa.Diagnostics()
        response = client.ask(TEXT, Review, diagnostics=diagnostics)
        print(f"1. answered after {diagnostics.attempts} attempt(s): toxic={response.answers.toxic}")

        # 2. A service that stays busy raises ServiceBusy once the retries are used up. The
        #    error carries the same diagnostics: last status, last body, attempts made.
        try:
            client.ask(TEXT, Review, retry=IMPATIENT)
            print("2. answered: the service was not busy")
        except qa.ServiceBusy as exc:
            d = exc.diagnostics
            print(f"2. {type(exc).__name__}: status={exc.status} attempts={d.attempts} body={d.body}")
            print(f"   {advice(exc)}")

        # 3. No retries at all for this one call; every qa_min error is a qa.QAError.
        try:
            client.ask(TEXT, Review, retry=qa.RetryPolicy.none)
            print("3. answered on the only attempt")
        except qa.QAError as exc:
            print(f"3. {type(exc).__name__} on the only attempt: {advice(exc)}")


if __name__ == "__main__":
    if os.environ.get("SERVICE_BASE_URL", "").strip():
        main()
    else:
        from qa_min.testing import FakeService, delay, reply

        busy = reply(429, {"detail": "rate limit exceeded"}, headers=[("retry-after-ms", "50")])
        overloaded = reply(529, {"detail": "overloaded"})
        with FakeService() as service:
            print(f"(no SERVICE_BASE_URL: a local fake service at {service.url}; its answers are arbitrary)")
            # Each request takes the next step: two 429s, then a normal answer (call 1);
            # two 429s (call 2 gives up); one 529 (call 3).
            service.script(busy, busy, delay(0), busy, busy, overloaded)
            main(service.url)

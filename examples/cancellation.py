"""Cancellation: stop a call from another thread, give it a deadline, or cancel a submitted one.

    python examples/cancellation.py

Without ``SERVICE_BASE_URL`` it starts a local fake service whose first three requests hang,
so each way of stopping a call has something to stop. A fast real service may answer first;
the example says so when it does.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time

import qa_min as qa


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


TEXT = "Where is my order?"


def cancel_from_another_thread(client: qa.Client) -> None:
    # A CancelToken is how another thread (a Stop button, a shutdown handler) aborts a call:
    # cancel() shuts the call's socket down, or ends its backoff sleep, at once.
    token = qa.CancelToken()
    timer = threading.Timer(0.3, token.cancel)
    timer.start()
    started = time.monotonic()
    try:
        response = client.ask(TEXT, Review, cancel=token)
        print(f"1. answered before the cancel: toxic={response.answers.toxic}")
    except qa.Canceled as exc:
        print(f"1. cancelled from another thread after {time.monotonic() - started:.1f} s: {exc}")
    finally:
        timer.cancel()


def with_a_deadline(client: qa.Client) -> None:
    # timeout= bounds the whole call, retries and backoff included; Client(timeout=...) sets
    # a default for every call.
    try:
        response = client.ask(TEXT, Review, timeout=0.5)
        print(f"2. answered within the deadline: toxic={response.answers.toxic}")
    except qa.Canceled as exc:
        print(f"2. deadline passed: {exc}")


def submit_then_cancel(client: qa.Client) -> None:
    # submit() runs the call on the client's threads and returns a Call, a Future whose
    # cancel() also aborts a call that is already running.
    call = client.submit(client.ask, TEXT, Review)
    done, _ = concurrent.futures.wait([call], timeout=0.3)
    if not done:
        print(f"3. still running after 0.3 s (running={call.running()}): call.cancel()")
        call.cancel()
    try:
        print(f"3. answered: toxic={call.result().answers.toxic}")
    except qa.Canceled as exc:
        print(f"3. call.result() raised Canceled: {exc}")


def main(base_url: str | None = None) -> None:
    with qa.Client(base_url=base_url) as client:
        cancel_from_another_thread(client)
        with_a_deadline(client)
        submit_then_cancel(client)


if __name__ == "__main__":
    if os.environ.get("SERVICE_BASE_URL", "").strip():
        main()
    else:
        from qa_min.testing import FakeService, hang

        with FakeService() as service:
            print(f"(no SERVICE_BASE_URL: a local fake service at {service.url}; its answers are arbitrary)")
            service.script(hang(), hang(), hang())  # closing the service ends the hung requests
            main(service.url)

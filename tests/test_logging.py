"""The ``qa_min`` logger: silent unless asked, one DEBUG record per attempt, one INFO per retry.

Records must never carry the API key or a body (the state sent, the answers or error detail
received). In-process tests read records through ``caplog``; the default silence and the
``SERVICE_LOG`` switch are process-wide, so they run in a child interpreter that calls a
``FakeService`` running here.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import no_sleep

import qa_min as qa
from qa_min import testing
from qa_min.testing import FakeService, drop, reply

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-secret-123"
STATE = "A distinctive state sentence 7f3a"
DETAIL = "overloaded-detail-9c1e"
# Held by every response body of the fake, and by no log message the library should write.
BODY_MARKERS = (STATE, DETAIL, '"answers"', "input_tokens", KEY)


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


@pytest.fixture
def keyed_svc() -> Iterator[FakeService]:
    with FakeService(api_key=KEY) as service:
        yield service


@pytest.fixture
def keyed_client(keyed_svc: FakeService) -> Iterator[qa.Client]:
    # no_sleep: the delay is still computed and logged, only not waited for.
    # random() == 0 takes no jitter off: the delays are exactly 0.5 s, 1 s, ...
    with qa.Client(base_url=keyed_svc.url, api_key=KEY, sleep=no_sleep, random=lambda: 0.0) as c:
        yield c


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "qa_min" and r.levelno == level]


def seconds_in(message: str) -> list[float]:
    """Every duration written in ``message`` ("0.500 s", "250 ms"), in seconds."""
    found = re.findall(r"(\d+(?:\.\d+)?)\s*(ms|s)\b", message)
    return [float(value) / (1000.0 if unit == "ms" else 1.0) for value, unit in found]


def assert_no_secret_or_body(caplog: pytest.LogCaptureFixture) -> None:
    texts = [caplog.text] + [r.getMessage() for r in caplog.records] + [repr(r.args) for r in caplog.records]
    for text in texts:
        for marker in BODY_MARKERS:
            assert marker not in text


# -- records, in process ------------------------------------------------------------------------


def test_each_attempt_logs_one_debug_record(
    keyed_svc: FakeService, keyed_client: qa.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="qa_min")
    keyed_svc.script(reply(503, {"detail": DETAIL}), reply(429, {"detail": DETAIL}))
    keyed_client.ask(STATE, Review)

    debug = records(caplog, logging.DEBUG)
    assert len(debug) == 3
    for attempt, (record, status) in enumerate(zip(debug, ["503", "429", "200"]), start=1):
        message = record.getMessage()
        assert "POST" in message
        assert f"{keyed_svc.url}/v1/core" in message
        assert re.search(rf"\b{status}\b", message), message
        assert re.search(rf"\battempt {attempt}\b", message), message
        assert seconds_in(message), f"no duration in {message!r}"


def test_the_debug_record_gives_the_attempt_s_duration_in_ms(
    keyed_svc: FakeService, keyed_client: qa.Client, caplog: pytest.LogCaptureFixture
) -> None:
    # The same duration Diagnostics holds in seconds, written in milliseconds.
    caplog.set_level(logging.DEBUG, logger="qa_min")
    diag = qa.Diagnostics()
    keyed_client.ask(STATE, Review, diagnostics=diag)
    [record] = records(caplog, logging.DEBUG)
    [attempt] = diag.history
    assert f" in {attempt.duration * 1000.0:.1f} ms " in record.getMessage()


def test_list_models_attempt_logs_get_and_its_url(
    keyed_svc: FakeService, keyed_client: qa.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="qa_min")
    keyed_client.list_models()
    [record] = records(caplog, logging.DEBUG)
    assert "GET" in record.getMessage()
    assert f"{keyed_svc.url}/v1/models" in record.getMessage()


def test_each_retry_logs_one_info_record_with_its_delay(
    keyed_svc: FakeService, keyed_client: qa.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="qa_min")
    keyed_svc.script(
        reply(503, {"detail": DETAIL}),
        reply(503, {"detail": DETAIL}),
        reply(429, {"detail": DETAIL}, headers=[("retry-after-ms", "250")]),
    )
    keyed_client.ask(STATE, Review, retry=qa.RetryPolicy(max_retries=3))

    info = records(caplog, logging.INFO)
    # Backoff 0.5 s then 1 s; then the server's 250 ms.
    expected = [0.5, 1.0, 0.25]
    assert len(info) == len(expected)
    for record, delay in zip(info, expected):
        assert delay in [pytest.approx(s) for s in seconds_in(record.getMessage())], record.getMessage()
    assert len(records(caplog, logging.DEBUG)) == 4


def test_failed_connection_attempt_is_logged_and_retried(
    keyed_svc: FakeService, keyed_client: qa.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="qa_min")
    keyed_svc.script(drop())
    keyed_client.ask(STATE, Review)
    debug = records(caplog, logging.DEBUG)
    assert len(debug) == 2
    assert re.search(r"\battempt 1\b", debug[0].getMessage())
    assert not re.search(r"\b200\b", debug[0].getMessage())
    assert len(records(caplog, logging.INFO)) == 1


def test_records_never_hold_the_key_or_a_body(
    keyed_svc: FakeService, keyed_client: qa.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    keyed_svc.script(
        reply(503, {"detail": DETAIL}), reply(503, {"detail": DETAIL}), reply(503, {"detail": DETAIL})
    )
    with pytest.raises(qa.ServerError):
        keyed_client.ask(STATE, Review)
    keyed_client.ask(STATE, Review)
    keyed_client.list_models()
    assert len(records(caplog, logging.DEBUG)) == 5
    assert_no_secret_or_body(caplog)


def test_rejected_key_is_not_logged(keyed_svc: FakeService, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with (
        qa.Client(base_url=keyed_svc.url, api_key="sk-wrong-key-777", sleep=no_sleep) as c,
        pytest.raises(qa.Unauthorized),
    ):
        c.ask(STATE, Review)
    assert records(caplog, logging.DEBUG)
    assert "sk-wrong-key-777" not in caplog.text


def test_nothing_is_logged_at_warning_level(
    keyed_svc: FakeService, keyed_client: qa.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="qa_min")
    keyed_svc.script(reply(503, {"detail": DETAIL}), drop())
    keyed_client.ask(STATE, Review)
    assert [r for r in caplog.records if r.name.startswith("qa_min")] == []


# -- process-wide behaviour, in a child interpreter ---------------------------------------------

CHILD = """
import sys
sys.path.insert(0, {root!r})
{prelude}
import qa_min as qa

class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")

with qa.Client(base_url={url!r}, api_key={key!r}, sleep=lambda seconds, wake: None) as client:
    client.ask({state!r}, Review)
{epilogue}
"""


def run_child(
    svc: FakeService, *, service_log: str | None, prelude: str = "", epilogue: str = ""
) -> tuple[str, str]:
    """(stdout, stderr) of a child that makes one call, retried once, to ``svc``."""
    svc.script(reply(503, {"detail": DETAIL}))
    env = {k: v for k, v in os.environ.items() if k not in ("SERVICE_LOG", "PYTHONPATH")}
    if service_log is not None:
        env["SERVICE_LOG"] = service_log
    code = CHILD.format(root=str(ROOT), url=svc.url, key=KEY, state=STATE, prelude=prelude, epilogue=epilogue)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert len(svc.requests) == 2
    return done.stdout, done.stderr


def test_logger_is_silent_by_default_with_a_null_handler(keyed_svc: FakeService) -> None:
    # The application imports logging but configures nothing: Python's last-resort handler
    # would print WARNING and above to stderr if the library logged at those levels.
    stdout, stderr = run_child(
        keyed_svc,
        service_log=None,
        prelude="import logging",
        epilogue="print([type(h).__name__ for h in logging.getLogger('qa_min').handlers])",
    )
    assert stderr == ""
    assert stdout.strip() == "['NullHandler']"


def test_call_does_not_import_logging_when_application_does_not(keyed_svc: FakeService) -> None:
    stdout, stderr = run_child(keyed_svc, service_log=None, epilogue="print('logging' in sys.modules)")
    assert stderr == ""
    assert stdout.strip() == "False"


@pytest.mark.parametrize("value", ["debug", "DEBUG", " debug "])
def test_service_log_debug_prints_attempts_and_retries_on_stderr(keyed_svc: FakeService, value: str) -> None:
    _, stderr = run_child(keyed_svc, service_log=value)
    lines = stderr.splitlines()
    debug = [line for line in lines if "DEBUG" in line]
    info = [line for line in lines if "INFO" in line]
    assert len(debug) == 2
    assert all("POST" in line and f"{keyed_svc.url}/v1/core" in line for line in debug)
    assert len(info) == 1
    assert len(lines) == 3
    for marker in BODY_MARKERS:
        assert marker not in stderr


def test_service_log_adds_its_handler_once_a_process_however_many_clients_are_made(
    keyed_svc: FakeService,
) -> None:
    # configuration.md: SERVICE_LOG is read when each Client is made; the handler it adds is one.
    # A second handler would print every record twice.
    client = f"qa_min.Client(base_url={keyed_svc.url!r}).close()"
    made = f"import logging, qa_min\nfor _ in range(2):\n    {client}"
    stdout, stderr = run_child(
        keyed_svc,
        service_log="debug",
        prelude=made,
        epilogue="print([type(h).__name__ for h in logging.getLogger('qa_min').handlers])",
    )
    assert stdout.strip() == "['NullHandler', 'StreamHandler']"
    lines = stderr.splitlines()
    assert [line.split()[3] for line in lines] == ["DEBUG", "INFO", "DEBUG"], stderr


@pytest.mark.parametrize("value", ["verbose", "warning", "1"])
def test_an_unknown_service_log_is_ignored_as_the_official_sdks_ignore_it(
    keyed_svc: FakeService, value: str
) -> None:
    # A typo in a debugging switch must not stop a deployed client: no handler, no error.
    stdout, stderr = run_child(
        keyed_svc,
        service_log=value,
        prelude="import logging",
        epilogue="print([type(h).__name__ for h in logging.getLogger('qa_min').handlers])",
    )
    assert stderr == ""
    assert stdout.strip() == "['NullHandler']"


def test_service_log_info_prints_only_retries_on_stderr(keyed_svc: FakeService) -> None:
    _, stderr = run_child(keyed_svc, service_log="info")
    lines = stderr.splitlines()
    assert len(lines) == 1
    assert "INFO" in lines[0]
    # The first backoff, 0.5 s less up to 25 % jitter.
    assert any(0.375 <= s <= 0.5 for s in seconds_in(lines[0])), lines[0]
    for marker in BODY_MARKERS:
        assert marker not in stderr


@pytest.mark.parametrize("value", ["", "   "], ids=["empty", "blank"])
def test_empty_service_log_is_ignored(keyed_svc: FakeService, value: str) -> None:
    _, stderr = run_child(keyed_svc, service_log=value)
    assert stderr == ""


SWITCHED = """
import os, sys
sys.path.insert(0, {root!r})
import logging  # as in a notebook: the application imports logging and configures nothing
import qa_min as qa

class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")

def client():
    return qa.Client(base_url={url!r}, api_key={key!r}, sleep=lambda seconds, wake: None)

with client() as quiet:
    quiet.list_models()
os.environ["SERVICE_LOG"] = {late!r}
with client() as switched:
    os.environ.pop("SERVICE_LOG", None)
    switched.ask({state!r}, Review)
"""


@pytest.mark.parametrize(("late", "lines"), [("debug", 3), ("verbose", 0)])
def test_service_log_is_read_when_each_client_is_made(keyed_svc: FakeService, late: str, lines: int) -> None:
    # configuration.md: SERVICE_LOG is "read when a Client is made". It was read at the first
    # record the process logged: a client made with SERVICE_LOG=debug after another client had
    # logged (in silence) printed nothing, and one whose variable was gone by its call neither.
    keyed_svc.script(testing.delay(0), reply(503, {"detail": DETAIL}))
    env = {k: v for k, v in os.environ.items() if k not in ("SERVICE_LOG", "PYTHONPATH")}
    code = SWITCHED.format(root=str(ROOT), url=keyed_svc.url, key=KEY, state=STATE, late=late)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert len(keyed_svc.requests) == 3
    logged = done.stderr.splitlines()
    assert len(logged) == lines, done.stderr
    assert [line.split()[3] for line in logged] == ["DEBUG", "INFO", "DEBUG"][:lines], done.stderr


def test_an_unknown_service_log_does_not_import_logging(keyed_svc: FakeService) -> None:
    # configuration.md: "logging itself is imported only once something could listen"; an
    # unknown SERVICE_LOG adds no handler, yet it imported logging.
    stdout, stderr = run_child(keyed_svc, service_log="verbose", epilogue="print('logging' in sys.modules)")
    assert stderr == ""
    assert stdout.strip() == "False"

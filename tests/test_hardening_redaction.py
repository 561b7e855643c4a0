"""No 8-character piece of the API key leaves the client, whatever a server echoes.

A server echoes the key whole, a 20-character prefix, a middle piece, or JSON-escaped, in a
success body, an error body, a body cut at ``max_response_bytes``, a header, or a malformed
status line. None of it appears in an exception's message, ``repr``, args or pickled bytes, in
``Diagnostics``, in a log record, or in any exception reachable through ``__cause__`` and
``__context__``. One function does it (``qa_min._redact``), before anything is shortened.
Passwords in a base URL or proxy URL never appear in a configuration error (``***``).

  the function: test_every_piece_of_8_is_hidden_and_7_is_not, test_short_key_is_hidden_whole,
      test_a_short_key_in_a_success_body_is_hidden_only_where_it_stands_alone,
      test_a_short_test_key_leaves_model_names_and_answers_as_the_fake_sent_them,
      test_escaped_forms_are_hidden, test_text_without_a_piece_is_returned_as_is,
      test_marker_never_makes_a_piece, test_property_no_piece_survives (hypothesis),
      test_the_key_s_last_8_characters_at_the_very_end_of_a_text_are_hidden_and_its_last_7_are_not,
      test_a_piece_just_after_a_block_that_starts_no_piece_is_hidden,
      test_pieces_of_the_key_side_by_side_make_one_marker,
      test_values_hide_a_key_of_8_or_more_as_the_call_does, test_holds_looks_4_containers_deep_and_not_5,
      test_holds_finds_a_piece_in_a_dict_s_keys_and_values_and_in_bytes,
      test_an_8_mib_body_is_redacted_in_bounded_time
  echoes: test_error_body_echo, test_retried_error_body_echo, test_truncated_error_body_echo,
      test_success_body_echo_in_an_answer, test_success_body_echo_in_usage,
      test_success_body_echo_in_model_names, test_non_json_success_body_echo,
      test_header_echo, test_status_line_echo_in_the_transport_error_and_cause,
      test_a_retried_attempt_s_error_shown_to_a_hook_hides_the_key,
      test_status_line_without_the_key_keeps_the_original_transport_error,
      test_a_chained_exception_whose_text_cannot_be_read_is_replaced,
      test_a_loop_of_chained_exceptions_is_scrubbed_once_each_and_ends,
      test_a_key_two_links_down_a_chain_is_hidden_too,
      test_key_in_the_base_url_path
  configuration: test_password_in_a_bad_base_url_or_proxy_is_masked,
      test_password_in_an_unsupported_proxy_is_masked,
      test_base_url_with_credentials_names_no_password,
      test_password_in_a_bad_proxy_from_the_environment_is_masked,
      test_proxy_credential_forms_of_4_characters_are_hidden_and_of_3_left_out
"""

from __future__ import annotations

import json
import logging
import pickle
import time
import warnings
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from faultservers import RawServer, respond_sequence
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import make_recording_client

import qa_min as qa
from qa_min._redact import PIECE, Redactor, redact
from qa_min.testing import FakeService, MockTransport, RecordedRequest, reply

KEY = "sk-proj-Xq7vB2mK9pL4nR8tW1yZ3cF6hJ0dG5sA"
SLASH_KEY = "sk-ab/cd+ef/SECRET-0123/456789"  # "/" is "\/" in PHP's JSON
LATIN_KEY = "sk-caf\xe9-cr\xe8me-0123456789"  # latin-1, so it can be sent; "\u00e9" in JSON
# Base64-alphabet secrets (AWS-style) hold "/", "+" and "=": "%2F", "%2B", "%3D" in a URL.
B64_KEY = "wJalrXUt/nFEMI+K7MDENG/bPxRfi+CYEXAMPLEKEY="
JSON = [("Content-Type", "application/json")]


def forms(key: str) -> set[str]:
    """The key as a server may echo it: as is, JSON-escaped (ASCII or not), with "\\/", and
    percent-encoded (as ``quote`` and ``quote_plus`` write it)."""
    found = {key, quote(key, safe=""), quote_plus(key, safe="")}
    for ascii_only in (True, False):
        escaped = json.dumps(key, ensure_ascii=ascii_only)[1:-1]
        found |= {escaped, escaped.replace("/", "\\/")}
    return found


def pieces(key: str) -> set[str]:
    return {form[i : i + PIECE] for form in forms(key) for i in range(len(form) - PIECE + 1)}


ECHOES = [
    (KEY, KEY, "whole"),
    (KEY, KEY[:20], "prefix-20"),
    (KEY, KEY[10:22], "middle-12"),
    (SLASH_KEY, SLASH_KEY.replace("/", "\\/"), "json-slash-escaped"),
    (SLASH_KEY, SLASH_KEY.replace("/", "\\/")[4:19], "json-slash-escaped-piece"),
    (LATIN_KEY, json.dumps(LATIN_KEY)[1:-1], "json-unicode-escaped"),
    (LATIN_KEY, LATIN_KEY[2:14], "latin-1-piece"),
    (B64_KEY, quote(B64_KEY, safe=""), "url-encoded"),
    (B64_KEY, quote_plus(B64_KEY)[6:30], "url-encoded-piece"),
    (LATIN_KEY, quote(LATIN_KEY, safe="")[4:25], "url-encoded-utf-8-piece"),
]
echoes = pytest.mark.parametrize(("key", "echo"), [e[:2] for e in ECHOES], ids=[e[2] for e in ECHOES])


def chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception reachable from it through ``__cause__``/``__context__``."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        todo += [e for e in (node.__cause__, node.__context__) if e is not None]


def texts_of(exc: BaseException, *extra: object) -> list[str]:
    """Everything a user could print, log or ship from ``exc``, and ``repr`` of ``extra``."""
    found = [repr(x) for x in extra]
    for node in chain(exc):
        found += [str(node), repr(node), *map(str, node.args)]
        diag = getattr(node, "diagnostics", None)
        if isinstance(diag, qa.Diagnostics):
            found += [repr(diag), diag.body or "", str(diag.transport_error), repr(diag.transport_error)]
        if isinstance(diag, qa.Diagnostics):
            found += [repr(diag.headers), str(diag.request_id), *map(repr, diag.history)]
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        data = pickle.dumps(exc, protocol).decode("latin-1")
        found.append(data)
        with warnings.catch_warnings():
            # Binary pickle data holds stray backslashes (a "\x" of no escape on some Pythons);
            # only the escapes that decode matter.
            warnings.simplefilter("ignore", DeprecationWarning)
            found.append(data.encode().decode("unicode_escape", "ignore"))
    return found


def assert_hidden(key: str, texts: list[str], caplog: pytest.LogCaptureFixture) -> None:
    records = [r for r in caplog.records if r.name.startswith("qa_min")]
    texts = texts + [caplog.text] + [r.getMessage() for r in records] + [repr(r.args) for r in records]
    leaks = sorted({p for p in pieces(key) for t in texts if p in t})
    assert not leaks, f"pieces of the key leaked: {leaks[:5]}"


@pytest.fixture(autouse=True)
def _debug_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="qa_min")


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


def keyed(svc: FakeService, key: str, **options: Any) -> qa.Client:
    return make_recording_client(svc.url, api_key=key, **options)


# -- the function ----------------------------------------------------------------------------


def test_every_piece_of_8_is_hidden_and_7_is_not() -> None:
    hide = Redactor(KEY)
    for start in range(len(KEY) - 7):
        for length in (8, 9, 20, len(KEY) - start):
            piece = KEY[start : start + length]
            if len(piece) < 8:
                continue
            shown = hide(f"before {piece} after")
            assert shown == "before [redacted] after", piece
        seven = KEY[start : start + 7]
        assert hide(f"before {seven} after") == f"before {seven} after"


def test_short_key_is_hidden_whole() -> None:
    assert redact("a sk-test and sk-tes", "sk-test") == "a [redacted] and sk-tes"
    assert redact("nothing to hide", None, "") == "nothing to hide"


def test_a_short_key_in_a_success_body_is_hidden_only_where_it_stands_alone() -> None:
    hide = Redactor("test")
    body = b'{"model": "judge-latest", "usage": {"testing": 1}}'
    assert hide.data(body) is body  # inside a word: the body is decoded as the server sent it
    assert hide.data(b'{"echo": "test"}') == b'{"echo": "[redacted]"}'
    assert hide.data(b"Bearer test.") == b"Bearer [redacted]."
    assert hide.data(b"test") == b"[redacted]"  # at both ends of the body
    assert hide.data(b"x_test test1") == b"x_test test1"  # joined to a word on either side
    assert hide("judge-latest") == "judge-la[redacted]"  # in a message it is hidden anywhere
    # A key that begins or ends with punctuation: only its word-character ends need a boundary.
    assert Redactor("-ab").data(b"x-ab y-abc") == b"x[redacted] y-abc"
    # A key of 8 or more: every piece, inside a word or not, as before.
    assert Redactor(KEY).data(f"judge{KEY[3:11]}x".encode()) == b"judge[redacted]x"


def test_a_short_test_key_leaves_model_names_and_answers_as_the_fake_sent_them() -> None:
    class Short(qa.Questions):
        ok = qa.YesNo("yes", "no")

    with FakeService(api_key="test") as fake, qa.Client(base_url=fake.url, api_key="test") as client:
        assert "judge-latest" in [m.name for m in client.list_models().models]
    with FakeService(api_key="k") as fake, qa.Client(base_url=fake.url, api_key="k") as client:
        assert isinstance(client.ask("text", Short).answers.ok, bool)


@pytest.mark.parametrize("key", ["2", "null", "true"])
def test_a_short_key_that_spells_a_json_number_or_word_leaves_a_success_body_that_parses(key: str) -> None:
    # Redacted as text, {"s": 2} became {"s": [redacted]}: every call failed with InvalidResponse.
    body = b'{"answers": {"s": 2, "ok": true, "n": null}, "usage": {"input_tokens": 2}, "echo": "%s"}'
    shown = json.loads(Redactor(key).data(body % key.encode()))
    assert shown["answers"] == {"s": 2, "ok": True, "n": None}
    assert shown["echo"] == "[redacted]"  # a string that is the key is still hidden

    class Levels(qa.Questions):
        s = qa.Score(["low", "mid", "high"])

    def handler(request: RecordedRequest) -> Any:
        return reply(200, {"answers": {"s": 2}, "usage": {"input_tokens": 2, "output_tokens": 1}})

    with qa.Client(base_url="http://qa.test", api_key="2", transport=MockTransport(handler)) as client:
        assert client.ask("text", Levels).answers.s == 2


@pytest.mark.parametrize(
    "key", [SLASH_KEY, LATIN_KEY, B64_KEY, 'sk-"quoted"\\back-0123', "sk-with space-0123"]
)
def test_escaped_forms_are_hidden(key: str) -> None:
    hide = Redactor(key)
    for form in forms(key):
        assert hide(f'{{"detail": "{form}"}}') == '{"detail": "[redacted]"}', form


def test_text_without_a_piece_is_returned_as_is() -> None:
    text = "HTTP 429 from POST http://127.0.0.1/v1/core: slow down " * 100
    assert Redactor(KEY)(text) is text
    assert Redactor(None)(text) is text
    assert Redactor(None).values(text) is text
    body = text.encode()
    assert Redactor(KEY).data(body) is body
    assert Redactor(None).data(body) is body
    assert Redactor(KEY).data(f'{{"usage": "{KEY[5:15]}"}}'.encode()) == b'{"usage": "[redacted]"}'


@pytest.mark.parametrize(
    ("key", "mark"),
    [
        ("sk-[abc]-0123456789", "***"),
        ("sk-[*]-0123456789", "###"),
        ("sk-[*#]-0123456789", "\u2026"),
        ("redacted", "***"),
        # Either edge alone rules "[redacted]" out: "x" + "[redacted]" would spell the key "x[" again.
        ("sk-[abc-0123456789", "***"),
        ("sk-abc]-0123456789", "***"),
        ("x[", "***"),
        ("]y", "***"),
    ],
)
def test_marker_never_makes_a_piece(key: str, mark: str) -> None:
    shown = redact(f"x{key}y {key[:9]}", key)
    assert shown == f"x{mark}y {mark}"
    assert key[:PIECE] not in shown


keys = st.text(alphabet='ab/"\\[]*#~\xe9', min_size=1, max_size=24)
texts = st.text(alphabet='ab/"\\[]*#~\xe9xyred ', max_size=120)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    key=keys,
    text=texts,
    cuts=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(0, 200))),
)
@example(key="abababab", text="ababababababa", cuts=[])
@example(key="aaaaaaaaa", text="a" * 40, cuts=[])
def test_property_no_piece_survives(key: str, text: str, cuts: list[tuple[int, int, int]]) -> None:
    for start, length, at in cuts:  # plant pieces of the key, escaped or not, anywhere
        form = sorted(forms(key))[start % len(forms(key))]
        text = text[:at] + form[start : start + length] + text[at:]
    shown = redact(text, key)
    wanted = pieces(key) | {f for f in forms(key) if len(f) < PIECE}
    assert not [p for p in wanted if p in shown]
    if not any(p in text for p in wanted):
        assert shown == text  # nothing to hide: nothing changed


def test_the_key_s_last_8_characters_at_the_very_end_of_a_text_are_hidden_and_its_last_7_are_not() -> None:
    # A text cut where the key ends: the last piece is hidden; 7 characters are no piece, even there.
    hide = Redactor(KEY)
    assert hide(f"cut: {KEY[-PIECE:]}") == "cut: [redacted]"
    assert hide(f"cut: {KEY[-PIECE + 1 :]}") == f"cut: {KEY[-PIECE + 1 :]}"
    assert (
        hide(f"{KEY[: PIECE - 1]} and {KEY[-PIECE + 1 :]}") == f"{KEY[: PIECE - 1]} and {KEY[-PIECE + 1 :]}"
    )
    assert hide(f"{KEY[:20]} then {KEY[-PIECE + 1 :]}") == f"[redacted] then {KEY[-PIECE + 1 :]}"


def test_a_piece_just_after_a_block_that_starts_no_piece_is_hidden() -> None:
    # "xabc" is a block of the key that starts no piece of "xabcdefgh"; the piece "abcdefgh" starts
    # one character later and must be found from there.
    assert redact("xabcdefgh", "xabcabcdefgh") == "x[redacted]"
    assert redact("xabcdefg", "xabcabcdefgh") == "xabcdefg"


def test_pieces_of_the_key_side_by_side_make_one_marker() -> None:
    hide = Redactor(KEY)
    assert hide(f"{KEY[:12]}{KEY[20:30]} x") == "[redacted] x"
    assert hide(f"{KEY[:20]}{KEY[:20]}{KEY[:20]} x") == "[redacted] x"  # copies of one cut piece
    assert hide(f"{KEY[:12]} {KEY[20:30]} x") == "[redacted] [redacted] x"


@pytest.mark.parametrize("key", [KEY, KEY[:PIECE], KEY[: PIECE + 1]])
def test_values_hide_a_key_of_8_or_more_as_the_call_does(key: str) -> None:
    # ``values`` differs from ``__call__`` only for a key shorter than PIECE.
    hide = Redactor(key)
    for text in (f"{key}{key}", f"a {key} b {key[1:]}c", f"{key[:PIECE]}{key}", f"word{key}word"):
        assert hide.values(text) == hide(text), text
    assert hide.values(f"{key}{key}") == "[redacted][redacted]"


def nested(value: object, depth: int) -> object:
    for _ in range(depth):
        value = [value]
    return value


def test_holds_looks_4_containers_deep_and_not_5() -> None:
    hide = Redactor(KEY)
    assert hide.holds(nested(KEY[3:11], 4))
    assert not hide.holds(nested(KEY[3:11], 5))
    assert hide.holds(nested({"k": KEY[3:11]}, 3))  # the dict is the 4th container
    assert not hide.holds(nested({"k": KEY[3:11]}, 4))
    assert not hide.holds(nested(KEY[3:10], 4))  # 7 characters: no piece


def test_holds_finds_a_piece_in_a_dict_s_keys_and_values_and_in_bytes() -> None:
    hide = Redactor(KEY)
    assert hide.holds({"k": KEY[3:11]})
    assert hide.holds({KEY[3:11]: 1})
    assert hide.holds(({"x": {"y": KEY}},))
    assert hide.holds(KEY[3:11].encode())
    assert not hide.holds({"k": "v", 1: (2, b"x")})
    assert hide.holds(2) is False  # a bool for a value that is no container, as for one
    loop: list[object] = []
    loop.append(loop)
    assert not hide.holds(loop)  # a list holding itself: 4 deep, then no further
    assert not Redactor(None).holds({"k": KEY})


@pytest.mark.timeout(60)
def test_an_8_mib_body_is_redacted_in_bounded_time() -> None:
    # Speed is measured in benchmarks/redaction.py; this bound only catches a quadratic blow-up.
    size = 8 * 1024 * 1024
    hide = Redactor(KEY)
    bodies = {
        "no key": ("0123456789abcdef" * (size // 16)),
        "prefix copies": KEY[:20] * (size // 20),
        "piece every 1000": ("x" * 990 + KEY[3:13]) * (size // 1000),
    }
    for name, body in bodies.items():
        started = time.perf_counter()
        shown = hide(body)
        assert time.perf_counter() - started < 20, name
        assert KEY[3:11] not in shown


# -- what a server echoes --------------------------------------------------------------------


def call_and_catch(client: qa.Client, diag: qa.Diagnostics) -> qa.QAError:
    with pytest.raises(qa.QAError) as caught:
        client.ask("x", Review, diagnostics=diag)
    return caught.value


@echoes
def test_error_body_echo(svc: FakeService, caplog: pytest.LogCaptureFixture, key: str, echo: str) -> None:
    body = '{"detail": "bad credentials: Bearer ' + echo + '", "echo": "' + echo + '"}'
    svc.script(reply(401, body, headers=JSON))
    diag = qa.Diagnostics()
    with keyed(svc, key) as client:
        error = call_and_catch(client, diag)
    assert isinstance(error, qa.Unauthorized)
    assert "bad credentials: Bearer [redacted]" in str(error)
    assert "[redacted]" in (diag.body or "")
    assert_hidden(key, texts_of(error, diag), caplog)


@echoes
def test_retried_error_body_echo(
    svc: FakeService, caplog: pytest.LogCaptureFixture, key: str, echo: str
) -> None:
    svc.script(*[reply(503, f"upstream said: {echo} is over quota")] * 3)
    diag = qa.Diagnostics()
    with keyed(svc, key) as client:
        error = call_and_catch(client, diag)
    assert isinstance(error, qa.ServerError)
    assert diag.attempts == 3
    assert str(error).endswith("upstream said: [redacted] is over quota (after 3 attempts)")
    assert_hidden(key, texts_of(error, diag), caplog)


@echoes
def test_truncated_error_body_echo(
    svc: FakeService, caplog: pytest.LogCaptureFixture, key: str, echo: str
) -> None:
    # The body is cut at the limit in the middle of the echo: the part before the cut is >= 8.
    limit = 1024
    cut = min(len(echo) - 1, 14)
    body = "x" * (limit - cut) + echo + "y" * 500
    svc.script(reply(500, body))
    diag = qa.Diagnostics()
    with keyed(svc, key, max_response_bytes=limit, retry=qa.RetryPolicy.none) as client:
        error = call_and_catch(client, diag)
    assert isinstance(error, qa.ServerError)
    assert diag.body is not None
    assert diag.body.startswith("x" * (limit - cut))
    assert diag.body.endswith("[redacted]")
    assert_hidden(key, texts_of(error, diag), caplog)


@echoes
def test_success_body_echo_in_an_answer(
    svc: FakeService, caplog: pytest.LogCaptureFixture, key: str, echo: str
) -> None:
    svc.script(reply(200, '{"answers": {"toxic": "' + echo + '"}}', headers=JSON))
    diag = qa.Diagnostics()
    with keyed(svc, key) as client:
        error = call_and_catch(client, diag)
    assert isinstance(error, qa.InvalidResponse)
    assert "[redacted]" in str(error)
    assert error.__context__ is None
    assert_hidden(key, texts_of(error, diag), caplog)


@echoes
def test_success_body_echo_in_usage(
    svc: FakeService, caplog: pytest.LogCaptureFixture, key: str, echo: str
) -> None:
    body = '{"answers": {"toxic": true}, "usage": {"account": "' + echo + '", "tokens": 3}}'
    svc.script(reply(200, body, headers=JSON))
    with keyed(svc, key) as client:
        response = client.ask("x", Review)
    assert response.answers.toxic is True
    assert dict(response.usage) == {"account": "[redacted]", "tokens": 3}
    shipped = [pickle.dumps(response, p).decode("latin-1") for p in range(pickle.HIGHEST_PROTOCOL + 1)]
    assert_hidden(key, [repr(response), *shipped], caplog)


@echoes
def test_success_body_echo_in_model_names(
    svc: FakeService, caplog: pytest.LogCaptureFixture, key: str, echo: str
) -> None:
    body = '{"models": [{"name": "judge-' + echo + '", "owner": "' + echo + '"}]}'
    svc.script(reply(200, body, headers=JSON))
    with keyed(svc, key) as client:
        models = client.list_models()
    assert [m.name for m in models] == ["judge-[redacted]"]
    assert_hidden(
        key, [repr(models), repr(dict(models.models[0].info)), pickle.dumps(models).decode("latin-1")], caplog
    )


@echoes
def test_non_json_success_body_echo(
    svc: FakeService, caplog: pytest.LogCaptureFixture, key: str, echo: str
) -> None:
    svc.script(reply(200, f"Authorization: Bearer {echo} (echoed by a misconfigured proxy)"))
    diag = qa.Diagnostics()
    with keyed(svc, key) as client:
        error = call_and_catch(client, diag)
    assert isinstance(error, qa.InvalidResponse)
    assert "Bearer [redacted]" in str(error)
    assert_hidden(key, texts_of(error, diag), caplog)


@echoes
def test_header_echo(svc: FakeService, caplog: pytest.LogCaptureFixture, key: str, echo: str) -> None:
    headers = [
        ("X-Echo", f"Bearer {echo}"),
        ("WWW-Authenticate", f'Bearer realm="{echo}"'),
        ("Retry-After", echo),
    ]
    svc.script(*[reply(429, {"detail": "slow down"}, headers=headers)] * 3, reply(200, None, headers=headers))
    diag = qa.Diagnostics()
    with keyed(svc, key) as client:
        error = call_and_catch(client, diag)
        ok_diag = qa.Diagnostics()
        with pytest.raises(qa.InvalidResponse):  # an empty 2xx body; its headers echo the key
            client.ask("x", Review, diagnostics=ok_diag)
    assert isinstance(error, qa.RateLimited)
    assert diag.attempts == 3
    assert_hidden(key, [*texts_of(error, diag), repr(ok_diag)], caplog)


@echoes
def test_status_line_echo_in_the_transport_error_and_cause(
    caplog: pytest.LogCaptureFixture, key: str, echo: str
) -> None:
    line = b"HTTP/1.1 " + echo.encode("latin-1") + b"\r\n\r\n"
    with RawServer(respond_sequence(line, line)) as server:
        diag = qa.Diagnostics()
        client = make_recording_client(server.url, api_key=key, retry=qa.RetryPolicy(max_retries=1))
        with client, pytest.raises(qa.ConnectionFailed) as caught:
            client.list_models(diagnostics=diag)
    error = caught.value
    assert diag.attempts == 2
    assert error.__cause__ is diag.transport_error  # the stand-in is the cause, too
    assert repr(diag.transport_error).startswith("MalformedHead(")
    assert "[redacted]" in str(error)
    assert_hidden(key, texts_of(error, diag), caplog)


@echoes
def test_a_retried_attempt_s_error_shown_to_a_hook_hides_the_key(
    caplog: pytest.LogCaptureFixture, key: str, echo: str
) -> None:
    # The first attempt's error is retried, never raised: only a hook ever sees it.
    line = b"HTTP/1.1 " + echo.encode("latin-1") + b"\r\n\r\n"
    events: list[qa.HookEvent] = []
    with RawServer(respond_sequence(line, line)) as server:
        client = make_recording_client(
            server.url,
            api_key=key,
            retry=qa.RetryPolicy(max_retries=1),
            hooks={"after_attempt": [events.append]},
        )
        with client, pytest.raises(qa.ConnectionFailed) as caught:
            client.list_models()
    assert [(e.attempt, type(e.error).__name__) for e in events] == [
        (1, "ConnectionFailed"),
        (2, "ConnectionFailed"),
    ]
    assert events[0].error is not caught.value
    assert "MalformedHead" in str(events[0].error)
    assert "[redacted]" in str(events[0].error)
    texts = [text for e in events if isinstance(e.error, qa.QAError) for text in texts_of(e.error, e)]
    assert_hidden(key, texts + [pickle.dumps(e).decode("latin-1") for e in events], caplog)


def test_status_line_without_the_key_keeps_the_original_transport_error(
    caplog: pytest.LogCaptureFixture,
) -> None:

    line = b"HTTP/1.1 nonsense\r\n\r\n"
    with RawServer(respond_sequence(line)) as server:
        client = make_recording_client(server.url, api_key=KEY, retry=qa.RetryPolicy.none)
        with client, pytest.raises(qa.ConnectionFailed) as caught:
            client.list_models()
    assert isinstance(caught.value.__cause__, qa.MalformedHead)
    assert caught.value.__cause__ is caught.value.diagnostics.transport_error


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_a_chained_exception_whose_text_cannot_be_read_is_replaced() -> None:
    # Defensive: an exception chained to an error must not break the error's way out.
    with qa.Client(base_url="http://127.0.0.1:1", api_key=KEY, trust_env=False) as client:
        error = qa.InvalidResponse("bad")
        error.__context__ = Unprintable(KEY)
        client._sender.messages.scrub(error)
    assert repr(error.__context__) == "Unprintable('(an exception whose text cannot be shown)')"


def test_a_loop_of_chained_exceptions_is_scrubbed_once_each_and_ends() -> None:
    # Python makes such loops (a handler raising what an inner handler caught); each is seen once.
    with qa.Client(base_url="http://127.0.0.1:1", api_key=KEY, trust_env=False) as client:
        error = qa.InvalidResponse(f"bad {KEY}")
        first, second = ValueError("no secret"), ValueError("none here either")
        error.__cause__ = first
        first.__context__ = second
        second.__context__ = first
        client._sender.messages.scrub(error)
    assert str(error) == "bad [redacted]"
    assert error.__cause__ is first
    assert first.__context__ is second
    assert second.__context__ is first


def test_a_key_two_links_down_a_chain_is_hidden_too() -> None:
    # The walk goes on through each exception it keeps, not only the error's own links.
    with qa.Client(base_url="http://127.0.0.1:1", api_key=KEY, trust_env=False) as client:
        error = qa.InvalidResponse("bad")
        first, second = ValueError("no secret"), ValueError("none here either")
        error.__cause__ = first
        first.__context__ = second
        third = second.__cause__ = ValueError(f"echoed {KEY}")
        client._sender.messages.scrub(error)
    assert error.__cause__ is first
    assert first.__context__ is second
    assert second.__cause__ is not third
    assert str(second.__cause__) == "echoed [redacted]"


def test_a_stand_in_keeps_what_was_chained_behind_the_exception_it_replaced() -> None:
    # A redacted link must not cut the chain short: what caused it still shows, redacted in turn.
    with qa.Client(base_url="http://127.0.0.1:1", api_key=KEY, trust_env=False) as client:
        error = qa.InvalidResponse("bad")
        leaky = ValueError(f"echoed {KEY}")
        root, leaky_root = OSError("no secret"), ValueError(f"also {KEY}")
        error.__cause__ = leaky
        leaky.__cause__, leaky.__context__ = root, leaky_root
        leaky.__suppress_context__ = True
        client._sender.messages.scrub(error)
    stand_in = error.__cause__
    assert stand_in is not leaky
    assert repr(stand_in) == "ValueError('echoed [redacted]')"
    assert stand_in.__cause__ is root
    assert stand_in.__suppress_context__ is True
    assert stand_in.__context__ is not leaky_root
    assert repr(stand_in.__context__) == "ValueError('also [redacted]')"


def test_a_loop_of_leaky_exceptions_links_their_stand_ins_not_the_originals() -> None:
    # A stand-in keeps the links of the exception it replaced; one pointing back at an exception
    # already replaced must point at that one's stand-in, or the original's text would show.
    with qa.Client(base_url="http://127.0.0.1:1", api_key=KEY, trust_env=False) as client:
        error = qa.InvalidResponse("bad")
        first, second = ValueError(f"first {KEY}"), ValueError(f"second {KEY}")
        error.__cause__ = first
        first.__context__ = second
        second.__context__ = first
        error.__suppress_context__ = False  # as it was set: replacing the cause keeps it
        client._sender.messages.scrub(error)
    assert error.__suppress_context__ is False
    one = error.__cause__
    assert one is not None
    two = one.__context__
    assert two is not None
    assert (repr(one), repr(two)) == ("ValueError('first [redacted]')", "ValueError('second [redacted]')")
    assert two.__context__ is one
    texts = texts_of(error)
    assert not [piece for piece in pieces(KEY) for text in texts if piece in text]


def test_a_transport_errors_stand_in_keeps_its_cause() -> None:
    with qa.Client(base_url="http://127.0.0.1:1", api_key=KEY, trust_env=False) as client:
        error = qa.ConnectionFailed("failed")
        raw = OSError(f"echoed {KEY}")
        root = raw.__cause__ = OSError("no secret")
        error.diagnostics.transport_error = raw
        safe = client._sender.messages.safe_cause(error)
    assert safe is not raw
    assert safe is error.__cause__ is error.diagnostics.transport_error
    assert repr(safe) == "OSError('echoed [redacted]')"
    assert safe.__cause__ is root


def test_key_in_the_base_url_path(svc: FakeService, caplog: pytest.LogCaptureFixture) -> None:
    # Some gateways take the key in the path; it must not then show in messages and logs.
    diag = qa.Diagnostics()
    client = make_recording_client(f"{svc.url}/keys/{KEY}", api_key=KEY, retry=qa.RetryPolicy.none)
    with client, pytest.raises(qa.APIStatusError) as caught:
        client.list_models(diagnostics=diag)
    assert "/keys/[redacted]/v1/models" in str(caught.value)
    assert len(caplog.records) >= 1
    assert_hidden(KEY, texts_of(caught.value, diag), caplog)


# -- configuration errors --------------------------------------------------------------------

SECRET = "pa55-SECRET-w0rd"
BAD_URLS = [
    f"http://user:{SECRET}@example.com/?query",
    f"http://user:{SECRET}@example.com/#fragment",
    f"ftp://user:{SECRET}@example.com",
    f"http://user:{SECRET}@example.com:notaport",
    f"http://user:{SECRET}@a..b",
    f"http://user:{SECRET}@exa\uff03mple.com",
    f"http://user:{SECRET}@example.com/a b",
    f"http://user:{SECRET}@",
    f"http://user:{SECRET.replace('-', '/')}@example.com:bad",  # a "/" the parser takes for a path
]


def test_proxy_credential_forms_of_4_characters_are_hidden_and_of_3_left_out() -> None:
    # What the redactor is given for a proxy URL's user:password: 3 characters would hide them everywhere.
    from qa_min._origin import Origin

    at_limit = Origin("http://user:pass@proxy:3128", "proxy").secrets()
    assert {"pass", "user:pass", "dXNlcjpwYXNz"} <= set(at_limit)
    assert [len(form) for form in at_limit] == sorted((len(form) for form in at_limit), reverse=True)
    assert set(Origin("http://u:abc@proxy:3128", "proxy").secrets()) == {"u:abc", "dTphYmM="}


@pytest.mark.parametrize("url", BAD_URLS)
@pytest.mark.parametrize("option", ["base_url", "proxy"])
def test_password_in_a_bad_base_url_or_proxy_is_masked(url: str, option: str) -> None:
    expected = qa.InvalidBaseUrl if option == "base_url" else qa.InvalidOption
    with pytest.raises(expected) as caught:
        qa.Client(**{"base_url": "http://127.0.0.1:1", option: url}, trust_env=False)  # type: ignore[arg-type]
    shown = " ".join(texts_of(caught.value))
    assert "SECRET" not in shown
    assert "***" in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [f"socks5://user:{SECRET}@proxy:1080", f"https://user:{SECRET}@proxy:3128", f"user:{SECRET}@proxy:x"],
)
def test_password_in_an_unsupported_proxy_is_masked(url: str) -> None:
    with pytest.raises(qa.InvalidOption) as caught:
        qa.Client(base_url="http://127.0.0.1:1", proxy=url, trust_env=False)
    assert "SECRET" not in " ".join(texts_of(caught.value))
    assert "user:***@proxy" in str(caught.value)


def test_base_url_with_credentials_names_no_password() -> None:
    with pytest.raises(qa.InvalidBaseUrl) as caught:
        qa.Client(base_url=f"http://user:{SECRET}@example.com", trust_env=False)
    assert "SECRET" not in " ".join(texts_of(caught.value))


def test_password_in_a_bad_proxy_from_the_environment_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://user:{SECRET}@proxy:notaport")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with pytest.raises(qa.InvalidOption) as caught:
        qa.Client(base_url="http://example.com")
    assert "SECRET" not in " ".join(texts_of(caught.value))
    assert "user:***@proxy:notaport" in str(caught.value)


@pytest.mark.parametrize("where", range(6))
def test_headers_hide_a_piece_in_any_one_name_or_value_and_are_kept_when_none_holds_one(where: int) -> None:
    # The headers are scanned joined first: a piece in any single field must still be found,
    # and pieces that only meet across two fields are no piece of the key.
    hide = Redactor(KEY)
    texts = ["Content-Type", "application/json", "request-id", "req_1", "X-Other", "ok"]
    clean = qa.ResponseHeaders(zip(texts[::2], texts[1::2]))
    assert clean.redacted(hide) is clean
    split = qa.ResponseHeaders([("X-" + KEY[: PIECE - 1], KEY[PIECE - 1 : 2 * PIECE - 2])])
    assert split.redacted(hide) is split
    texts[where] += KEY[3 : 3 + PIECE]
    echoed = qa.ResponseHeaders(zip(texts[::2], texts[1::2]))
    shown = echoed.redacted(hide).items()
    assert KEY[3 : 3 + PIECE] not in repr(shown)
    assert "[redacted]" in shown[where // 2][where % 2]
    assert [pair for i, pair in enumerate(shown) if i != where // 2] == [
        pair for i, pair in enumerate(echoed.items()) if i != where // 2
    ]

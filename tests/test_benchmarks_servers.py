"""Tests of the benchmark's servers: the own server's framing and process, its TLS, nginx, the choice.

nginx and the ``openssl`` command are used where installed; a test that needs one is skipped
with the reason otherwise.
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import clients, nginx, servers, tls
from benchmarks.process import ROOT, ServerProcess, child_env
from benchmarks.server import (
    CORE_BODY,
    MAX_HEAD,
    MODELS_BODY,
    NOT_ALLOWED_BODY,
    NOT_FOUND_BODY,
    BadRequest,
    Parser,
)
from benchmarks.servers import start_own as start

POST = (
    b'POST /v1/core HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"a":1}'
)
GET = b"GET /v1/models HTTP/1.1\r\nHost: h\r\n\r\n"

needs_openssl = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="the openssl command is not installed"
)


def _nginx_or_none() -> str | None:
    try:
        found = nginx.find_nginx()
        nginx.version(found)
    except nginx.NginxNotFound:
        return None
    return found


needs_nginx = pytest.mark.skipif(_nginx_or_none() is None, reason="nginx (1.19.5+) is not installed")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tls.Certificates:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    return tls.make_certificates(tmp_path_factory.mktemp("certs"))


# -- the server's request framing ------------------------------------------------------------


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        pytest.param([POST], [(b"POST", b"/v1/core", True)], id="one-request"),
        pytest.param(
            [POST + GET], [(b"POST", b"/v1/core", True), (b"GET", b"/v1/models", True)], id="pipelined"
        ),
        pytest.param(
            [POST[i : i + 1] for i in range(len(POST))],
            [(b"POST", b"/v1/core", True)],
            id="one-byte-at-a-time",
        ),
        pytest.param(
            [POST[:30], POST[30:-3], POST[-3:] + GET[:5], GET[5:]],
            [
                (b"POST", b"/v1/core", True),
                (b"GET", b"/v1/models", True),
            ],
            id="split-across-reads",
        ),
        pytest.param([b"\r\n" + GET], [(b"GET", b"/v1/models", True)], id="leading-empty-line-ignored"),
        pytest.param(
            [b"GET /v1/models HTTP/1.0\r\n\r\n"], [(b"GET", b"/v1/models", False)], id="http-1.0-closes"
        ),
        pytest.param(
            [b"GET /v1/models HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"],
            [(b"GET", b"/v1/models", True)],
            id="http-1.0-keep-alive",
        ),
        pytest.param(
            [b"GET /x HTTP/1.1\r\nCONNECTION: Close\r\n\r\n"], [(b"GET", b"/x", False)], id="connection-close"
        ),
    ],
)
def test_parser_frames_requests_whatever_the_read_boundaries(
    chunks: list[bytes], expected: list[tuple[bytes, bytes, bool]]
) -> None:
    parser = Parser()
    got = []
    for chunk in chunks:
        got += parser.feed(chunk)
    assert got == expected


def test_parser_waits_for_the_whole_body_before_yielding_a_request() -> None:
    parser = Parser()
    assert parser.feed(POST[:-1]) == []
    assert parser.feed(POST[-1:]) == [(b"POST", b"/v1/core", True)]


def test_parser_keeps_a_parsed_head_while_its_body_arrives(monkeypatch: pytest.MonkeyPatch) -> None:
    # http.client's pattern: the head in one send, the body in the next, then more requests.
    from benchmarks import server

    parsed: list[bytes] = []
    real = server._head

    def counting(head: bytes) -> tuple[bytes, bytes, bool, int]:
        parsed.append(head)
        return real(head)

    monkeypatch.setattr(server, "_head", counting)
    parser = Parser()
    head, body = POST.split(b"\r\n\r\n")
    assert parser.feed(head + b"\r\n\r\n") == []
    assert parser.feed(body[:3]) == []
    assert parser.feed(body[3:] + GET) == [(b"POST", b"/v1/core", True), (b"GET", b"/v1/models", True)]
    assert len(parsed) == 2  # the POST's head once, the GET's once
    assert parser.feed(POST) == [(b"POST", b"/v1/core", True)]


@pytest.mark.parametrize(
    ("data", "status"),
    [
        pytest.param(b"POST /v1/core HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", b"501", id="chunked"),
        pytest.param(b"POST /v1/core HTTP/1.1\r\nContent-Length: x\r\n\r\n", b"400", id="bad-length"),
        pytest.param(b"POST /v1/core HTTP/1.1\r\nContent-Length: -1\r\n\r\n", b"400", id="negative-length"),
        pytest.param(b"NONSENSE\r\n\r\n", b"400", id="bad-request-line"),
        pytest.param(b"GET / HTTP/1.1\r\nX: " + b"a" * MAX_HEAD, b"431", id="head-too-large"),
    ],
)
def test_parser_rejects_what_it_cannot_frame(data: bytes, status: bytes) -> None:
    with pytest.raises(BadRequest) as caught:
        Parser().feed(data)
    assert caught.value.reply.startswith(b"HTTP/1.1 " + status)
    assert b"Connection: close\r\n" in caught.value.reply


# -- the server process ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with start() as running:
        yield running


@pytest.fixture(scope="module")
def wrong_server() -> Iterator[ServerProcess]:
    """A server whose answers are wrong (toxic false): every client must fail on them."""
    with start(wrong_answer=True) as running:
        yield running


def _read_responses(sock: socket.socket, count: int) -> list[tuple[bytes, bytes]]:
    """(status line, body) of ``count`` responses, all framed by Content-Length."""
    data = b""
    found: list[tuple[bytes, bytes]] = []
    while len(found) < count:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed after {len(found)} responses"
        data += chunk
        while b"\r\n\r\n" in data:
            head, _, rest = data.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            if len(rest) < length:
                break
            found.append((head.split(b"\r\n")[0], rest[:length]))
            data = rest[length:]
    return found


def _connect(url: str) -> socket.socket:
    host, _, port = url.partition("://")[2].rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    return sock


def test_server_answers_pipelined_requests_in_order_on_one_connection(server: ServerProcess) -> None:
    with _connect(server.url) as sock:
        sock.sendall(POST + GET + b"GET /nowhere HTTP/1.1\r\n\r\n" + b"GET /v1/core HTTP/1.1\r\n\r\n")
        responses = _read_responses(sock, 4)
    assert responses == [
        (b"HTTP/1.1 200 OK", CORE_BODY),
        (b"HTTP/1.1 200 OK", MODELS_BODY),
        (b"HTTP/1.1 404 Not Found", b'{"detail": "not found"}'),
        (b"HTTP/1.1 405 Method Not Allowed", b'{"detail": "method not allowed"}'),
    ]


def test_server_keeps_the_connection_across_requests_sent_in_pieces(server: ServerProcess) -> None:
    with _connect(server.url) as sock:
        for _ in range(3):
            sock.sendall(POST[:20])
            sock.sendall(POST[20:])
            assert _read_responses(sock, 1) == [(b"HTTP/1.1 200 OK", CORE_BODY)]


def test_server_counts_a_request_in_two_pieces_as_two_reads() -> None:
    # http.client's pattern, made deterministic: the body goes only once the head was read.
    head, body = POST.split(b"\r\n\r\n")
    with start() as running, _connect(running.url) as sock:
        first = running.counters()
        assert first is not None
        sock.sendall(head + b"\r\n\r\n")
        deadline, polls = time.monotonic() + 10, 0
        while True:  # each GET /_stats is a read of its own: count them out
            now = running.counters()
            polls += 1
            assert now is not None
            if now[1] - first[1] - polls >= 1:
                break
            assert time.monotonic() < deadline, "the server never read the head"
        sock.sendall(body + GET)  # completes the POST; a whole GET follows in the same read
        responses = _read_responses(sock, 2)
        last = running.counters()
    assert responses == [(b"HTTP/1.1 200 OK", CORE_BODY), (b"HTTP/1.1 200 OK", MODELS_BODY)]
    assert last is not None
    assert now[1] - first[1] - polls == 1  # the head alone
    assert last[1] - now[1] == 2  # the body with the GET, and the last /_stats request
    assert last[0] - first[0] == 2  # /_stats requests are not counted as requests


def test_server_answers_a_flood_of_pipelined_requests_it_cannot_send_at_once(server: ServerProcess) -> None:
    # More replies than the socket buffers hold while the client reads nothing: the server
    # must keep the rest and send it as the client reads, not drop or block on it.
    count = 3000
    with _connect(server.url) as sock:
        sock.sendall(GET * count)
        responses = _read_responses(sock, count)
    assert responses == [(b"HTTP/1.1 200 OK", MODELS_BODY)] * count


def test_server_closes_after_a_connection_close_request(server: ServerProcess) -> None:
    with _connect(server.url) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n" + GET)
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    assert data.count(b"HTTP/1.1 200 OK") == 1
    assert b"Connection: close\r\n" in data


def test_server_answers_a_bad_request_and_closes(server: ServerProcess) -> None:
    with _connect(server.url) as sock:
        sock.sendall(b"NONSENSE\r\n\r\n")
        data = sock.recv(65536)
        assert sock.recv(65536) == b""
    assert data.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"bad request line" in data


def test_server_body_holds_the_answers_every_client_checks() -> None:
    answers = json.loads(CORE_BODY)["answers"]
    clients.check(answers["toxic"], answers["tone"], answers["quality"])


def test_server_reports_its_request_count_when_stopped() -> None:
    with start() as running, _connect(running.url) as sock:
        sock.sendall(GET + GET)
        _read_responses(sock, 2)
    assert running.requests == 2
    assert running.process.returncode == 0
    assert running.name.startswith("benchmarks/server.py")


def test_server_stops_on_sigterm_and_still_reports() -> None:
    with start() as running:
        running.process.terminate()
        running.process.wait(timeout=10)
    assert running.process.returncode == 0
    assert running.requests == 0


# -- nginx ----------------------------------------------------------------------------------


def test_nginx_config_answers_like_the_own_server_and_skips_modules_left_out() -> None:
    text = nginx.config(Path("/d"), 8080, False, ("c.pem", "k.pem", 8443), "--without-http_uwsgi_module")
    assert "listen 127.0.0.1:8080;" in text
    assert "listen 127.0.0.1:8443 ssl;" in text
    assert "ssl_certificate c.pem;" in text
    assert f"return 200 '{CORE_BODY.decode()}';" in text
    assert f"return 200 '{MODELS_BODY.decode()}';" in text
    assert f"return 405 '{NOT_ALLOWED_BODY.decode()}';" in text
    assert f"return 404 '{NOT_FOUND_BODY.decode()}';" in text
    assert "scgi_temp_path /d/scgi;" in text
    assert "uwsgi_temp_path" not in text
    assert "daemon off;" in text
    assert "master_process off;" in text
    wrong = nginx.config(Path("/d"), 8080, True, None, "")
    assert '"toxic": false' in wrong
    assert " ssl;" not in wrong


def test_find_nginx_names_a_missing_explicit_binary() -> None:
    with pytest.raises(nginx.NginxNotFound, match="no-such-nginx-binary is not an executable"):
        nginx.find_nginx("no-such-nginx-binary")


def test_server_choice_falls_back_to_the_own_server_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(binary: object = None) -> str:
        raise nginx.NginxNotFound("nginx is not installed (apt-get install nginx-light)")

    monkeypatch.setattr(nginx, "find_nginx", missing)
    starters, note = servers.choose("auto")
    assert [s.key for s in starters] == ["own"]
    assert (
        note == "nginx not used (nginx is not installed (apt-get install nginx-light)): the own server only."
    )
    assert [s.key for s in servers.choose("own")[0]] == ["own"]
    for choice in ("nginx", "both"):
        with pytest.raises(nginx.NginxNotFound):
            servers.choose(choice)


def test_requiring_nginx_that_is_missing_exits_2_with_the_reason() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--server", "nginx", "--nginx", "no-such-nginx-binary"],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=20,
        check=False,
    )
    assert proc.returncode == 2
    assert "no-such-nginx-binary is not an executable" in proc.stderr


@needs_nginx
def test_nginx_answers_exactly_like_the_own_server(certs: tls.Certificates) -> None:
    requests = [("POST", "/v1/core"), ("GET", "/v1/models"), ("GET", "/v1/core"), ("GET", "/nowhere")]
    answers = {}
    for starter in servers.choose("both")[0]:
        with starter.start(tls=(certs.cert, certs.key)) as server:
            answers[starter.key] = _ask(server.url, requests)
            assert server.tls_url is not None
            answers[starter.key + " tls"] = _ask(server.tls_url, requests[:1], certs.ca)
            assert server.cpu_seconds() is not None or not Path("/proc").exists()
    assert answers["nginx"] == answers["own"]
    assert answers["nginx"][0] == (200, "application/json", CORE_BODY)
    assert answers["nginx tls"] == answers["own tls"] == [(200, "application/json", CORE_BODY)]


def _ask(url: str, requests: list[tuple[str, str]], ca: str | None = None) -> list[tuple[int, str, bytes]]:
    host, _, port = url.partition("://")[2].rpartition(":")
    if ca is None:
        conn: http.client.HTTPConnection = http.client.HTTPConnection(host, int(port), timeout=10)
    else:
        context = ssl.create_default_context(cafile=ca)
        conn = http.client.HTTPSConnection(host, int(port), context=context, timeout=10)
    found = []
    for method, path in requests:  # one kept-alive connection for all
        conn.request(method, path, b"{}" if method == "POST" else None)
        response = conn.getresponse()
        found.append((response.status, response.getheader("content-type", ""), response.read()))
    conn.close()
    return found

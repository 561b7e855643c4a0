"""TLS and proxy fixtures for the tests: a throwaway CA, an HTTPS fake service, an HTTP proxy.

* ``make_certs`` runs the ``openssl`` command to make a CA and server certificates signed by
  it; the certificates carry the extensions Python 3.13's ``VERIFY_X509_STRICT`` demands.
* ``TLSService`` answers ``/v1/core`` and ``/v1/models`` over TLS (``http.server`` handlers on
  sockets wrapped server side) and records what it received.
* ``Proxy`` is a forward proxy: ``CONNECT host:port`` opens a tunnel and pipes bytes both
  ways; an absolute-URI request (``POST http://host:port/path``) is forwarded to the origin
  and its response relayed. It records every request head it sees and can refuse tunnels.

Both servers bind 127.0.0.1 on an ephemeral port, accept in a thread of their own, serve each
connection in its own thread, and on ``close()`` shut every socket down and join every thread.
The proxy connects only to loopback addresses: a test must never send traffic elsewhere.
"""

from __future__ import annotations

import http.client
import http.server
import json
import selectors
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, cast
from urllib.parse import urlsplit

__all__ = ["Certs", "OpenSSLUnavailable", "Proxy", "SeenRequest", "TLSService", "hashed_dir", "make_certs"]

HOST = "127.0.0.1"
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
# Bounds every blocking socket call and join, so a bug fails a test instead of hanging it.
IO_TIMEOUT = 10.0
MAX_HEAD = 64 * 1024


class OpenSSLUnavailable(Exception):
    """The ``openssl`` command is missing or could not make the certificates."""


@dataclass(frozen=True)
class Certs:
    """PEM files of a throwaway CA and of certificates it signed.

    Attributes:
        ca: The CA certificate, to trust.
        server_cert: A server certificate for ``127.0.0.1`` and ``localhost``.
        server_key: Its private key.
        other_cert: A server certificate for ``other.invalid`` only (a hostname mismatch).
        other_key: Its private key.
    """

    ca: Path
    server_cert: Path
    server_key: Path
    other_cert: Path
    other_key: Path


_EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise OpenSSLUnavailable("no openssl command on PATH")
    try:
        done = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise OpenSSLUnavailable(f"openssl {args[0]} failed: {exc}") from exc
    if done.returncode != 0:
        raise OpenSSLUnavailable(f"openssl {args[0]} failed: {done.stderr.strip()}")


def _leaf(directory: Path, name: str, alt_names: str) -> tuple[Path, Path]:
    # Key identifiers and key usages are spelled out: X509_STRICT (Python 3.13+) rejects a
    # leaf without an authority key identifier.
    ext = directory / f"{name}.ext"
    ext.write_text(
        f"subjectAltName={alt_names}\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid\n"
    )
    _openssl(
        "req", "-new", *_EC_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-out", f"{name}.pem", "-extfile", ext.name,
        cwd=directory,
    )  # fmt: skip
    return directory / f"{name}.pem", directory / f"{name}.key"


def make_certs(directory: Path) -> Certs:
    """A new CA and two server certificates in ``directory``; raises ``OpenSSLUnavailable``."""
    _openssl(
        "req", "-x509", *_EC_KEY, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=qa_min test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    server_cert, server_key = _leaf(directory, "server", "IP:127.0.0.1,DNS:localhost")
    other_cert, other_key = _leaf(directory, "other", "DNS:other.invalid")
    return Certs(directory / "ca.pem", server_cert, server_key, other_cert, other_key)


def hashed_dir(ca: Path, directory: Path) -> Path:
    """``directory`` holding ``ca`` under its subject-hash name, as OpenSSL's ``capath`` lookup wants."""
    directory.mkdir(exist_ok=True)
    shutil.copy(ca, directory / ca.name)
    _openssl("rehash", ".", cwd=directory)
    return directory


@dataclass(frozen=True)
class SeenRequest:
    """A request head as a server or the proxy received it.

    Attributes:
        method: ``"POST"``, ``"GET"``, ``"CONNECT"``, ...
        target: The request-target as sent: ``host:port`` for CONNECT, an absolute URI for a
            request forwarded by the proxy, a path for a request to the origin.
        headers: The headers, names lowercased.
    """

    method: str
    target: str
    headers: Mapping[str, str]


def _headers(lines: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return headers


def _read_head(sock: socket.socket) -> tuple[str, str, list[str]] | None:
    """(method, target, header lines) of the next request, or None at end of stream.

    Read a byte at a time, so that nothing after the head (a TLS handshake inside a tunnel) is
    taken off the socket; test requests are a few hundred bytes.
    """
    data = bytearray()
    while not data.endswith(b"\r\n\r\n"):
        byte = sock.recv(1)
        if not byte or len(data) > MAX_HEAD:
            return None
        data += byte
    lines = data.decode("latin-1").split("\r\n")[:-2]
    method, target, _version = lines[0].split(" ", 2)
    return method, target, lines[1:]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n > 0:
        chunk = sock.recv(min(n, 65536))
        if not chunk:
            raise ConnectionError("peer closed mid-body")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _shutdown(sock: socket.socket) -> None:
    try:
        # The plain socket's shutdown also works on an SSLSocket, from any thread.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class _LoopbackServer:
    """Accept loop, per-connection threads and a clean close; subclasses implement ``_serve``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._seen: list[SeenRequest] = []
        self._closed = False
        self._stopping = threading.Event()
        self._listener = socket.create_server((HOST, 0))
        self.port: int = self._listener.getsockname()[1]
        # A socketpair wakes the selector portably; closing a socket another thread is
        # blocked on does not.
        self._wake_r, self._wake_w = socket.socketpair()
        self._accepter = threading.Thread(target=self._accept_loop, name=f"accept-{self.port}", daemon=True)
        self._accepter.start()

    @property
    def seen(self) -> list[SeenRequest]:
        """Every request head received so far, in order."""
        with self._lock:
            return list(self._seen)

    def _record(self, request: SeenRequest) -> None:
        with self._lock:
            self._seen.append(request)

    def _track(self, sock: socket.socket) -> bool:
        """Remember ``sock`` so ``close()`` can shut it down; False if already closing."""
        with self._lock:
            if self._closed:
                return False
            self._socks.add(sock)
            return True

    def _untrack(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.discard(sock)
        sock.close()

    def _accept_loop(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while True:
                for key, _ in selector.select():
                    if key.fileobj is self._wake_r:
                        return
                    conn, _ = self._listener.accept()
                    conn.settimeout(IO_TIMEOUT)
                    # http.server writes a response's head and body apart; without NODELAY the
                    # body waits behind Nagle's algorithm for the client's delayed ACK, 40 ms a
                    # call over TLS, as a server that set it (most do) would not make it wait.
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    if not self._track(conn):
                        conn.close()
                        return
                    thread = threading.Thread(target=self._run, args=(conn,), daemon=True)
                    with self._lock:
                        self._threads.append(thread)
                    thread.start()

    def _run(self, conn: socket.socket) -> None:
        try:
            self._serve(conn)
        except (OSError, ValueError):
            pass  # a peer that went away, or a socket shut down by close()
        finally:
            self._untrack(conn)

    def _serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def drop_connections(self) -> None:
        """Shut every open connection down, as a server ending idle keep-alives does, and wait."""
        with self._lock:
            socks = list(self._socks)
        for sock in socks:
            _shutdown(sock)
        deadline = time.monotonic() + IO_TIMEOUT
        while True:
            with self._lock:
                if not self._socks:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError("connections still open after drop_connections()")
            time.sleep(0.005)

    def close(self) -> None:
        """Stop accepting, shut every connection down and join every thread. Idempotent."""
        self._stopping.set()
        self._wake_w.send(b"\0")
        self._accepter.join(IO_TIMEOUT)
        with self._lock:
            self._closed = True
            socks, threads = list(self._socks), list(self._threads)
        for sock in socks:
            _shutdown(sock)
        for thread in threads:
            thread.join(IO_TIMEOUT)
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _answer(criteria: object) -> object:
    # Any well-shaped answer will do: yes for yes/no, the first option, the lowest level.
    if isinstance(criteria, list):
        return 0
    if isinstance(criteria, dict) and set(criteria) == {"true", "false"}:
        return True
    return next(iter(cast(dict[str, Any], criteria)))


class _ServiceHandler(http.server.BaseHTTPRequestHandler):
    """The two endpoints of the service, enough to make calls over TLS."""

    protocol_version = "HTTP/1.1"  # keep-alive, so pooling over TLS is exercised

    def log_message(self, format: str, *args: Any) -> None:
        pass

    @property
    def _owner(self) -> TLSService:
        return cast(TLSService, self.server)

    def _send_json(self, status: int, doc: object) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _record(self) -> None:
        headers = {name.lower(): value for name, value in self.headers.items()}
        self._owner._record(SeenRequest(self.command, self.path, headers))

    def do_POST(self) -> None:
        self._record()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/v1/core":
            self._send_json(404, {"detail": "not found"})
            return
        questions = json.loads(body)["questions"]
        answers = {name: _answer(question["criteria"]) for name, question in questions.items()}
        self._send_json(200, {"answers": answers, "usage": {"tls": True}})

    def do_GET(self) -> None:
        self._record()
        if self.path != "/v1/models":
            self._send_json(404, {"detail": "not found"})
            return
        self._send_json(200, {"models": [{"name": "judge-latest"}]})


class TLSService(_LoopbackServer):
    """The service over HTTPS on 127.0.0.1, with the given certificate.

    ``seen`` lists the requests that completed a TLS handshake; ``handshakes`` and
    ``handshake_failures`` count the connections whose handshake succeeded or failed (a
    client that did not trust the certificate).
    """

    def __init__(self, cert: Path, key: Path) -> None:
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(cert, key)
        self.handshakes = 0
        self.handshake_failures = 0
        super().__init__()

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self.port}"

    def _serve(self, conn: socket.socket) -> None:
        # wrap_socket takes the descriptor over: the TLS socket replaces ``conn`` for close().
        try:
            tls = self._context.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError):
            with self._lock:
                self.handshake_failures += 1
            return
        if not self._track(tls):
            tls.close()
            return
        with self._lock:
            self.handshakes += 1
        try:
            # BaseRequestHandler only hands ``server`` back to the handler, as its _owner.
            _ServiceHandler(tls, tls.getpeername(), cast(Any, self))
        finally:
            self._untrack(tls)

    def __enter__(self) -> TLSService:
        return self


class Proxy(_LoopbackServer):
    """A forward HTTP proxy to loopback addresses.

    Args:
        refuse_connect: A status to answer every CONNECT with (403, 407, ...) instead of
            opening the tunnel; None opens tunnels.
        hang_connect: Never answer a CONNECT (until ``close()``), as a stuck proxy would.
    """

    def __init__(self, refuse_connect: int | None = None, hang_connect: bool = False) -> None:
        self.refuse_connect = refuse_connect
        self.hang_connect = hang_connect
        super().__init__()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def __enter__(self) -> Proxy:
        return self

    def _serve(self, conn: socket.socket) -> None:
        upstream: socket.socket | None = None
        upstream_at: tuple[str, int] | None = None
        try:
            while True:
                head = _read_head(conn)
                if head is None:
                    return
                method, target, lines = head
                headers = _headers(lines)
                self._record(SeenRequest(method, target, headers))
                if method == "CONNECT":
                    self._tunnel(conn, target)
                    return
                url = urlsplit(target)
                if url.scheme != "http" or url.hostname not in LOOPBACK:
                    conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    return
                at = (url.hostname, url.port or 80)
                if upstream is None or upstream_at != at:
                    if upstream is not None:
                        self._untrack(upstream)
                    upstream, upstream_at = self._connect(*at), at
                body = _recv_exact(conn, int(headers.get("content-length", "0")))
                if not self._forward(conn, upstream, method, url.path, lines, body):
                    self._untrack(upstream)
                    upstream = None
        finally:
            if upstream is not None:
                self._untrack(upstream)

    def _connect(self, host: str, port: int) -> socket.socket:
        sock = socket.create_connection((host, port), timeout=IO_TIMEOUT)
        if not self._track(sock):
            sock.close()
            raise ConnectionError("the proxy is closing")
        return sock

    def _forward(
        self,
        conn: socket.socket,
        upstream: socket.socket,
        method: str,
        path: str,
        lines: list[str],
        body: bytes,
    ) -> bool:
        """Relay one request and its response; False if the origin closes the connection."""
        # A proxy consumes its own credentials and hop-by-hop headers; the rest goes on as sent.
        kept = [line for line in lines if line.partition(":")[0].strip().lower() not in _HOP_BY_HOP]
        head = "\r\n".join([f"{method} {path or '/'} HTTP/1.1", *kept]) + "\r\n\r\n"
        upstream.sendall(head.encode("latin-1") + body)
        response = http.client.HTTPResponse(upstream, method=method)
        response.begin()
        data = response.read()
        out = [f"HTTP/1.1 {response.status} {response.reason}"]
        out += [f"{k}: {v}" for k, v in response.getheaders() if k.lower() not in _RESPONSE_FRAMING]
        out.append(f"Content-Length: {len(data)}")
        conn.sendall(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + data)
        return not response.will_close

    def _tunnel(self, conn: socket.socket, target: str) -> None:
        host, _, port = target.rpartition(":")
        if self.hang_connect:
            self._stopping.wait(IO_TIMEOUT)
            return
        if self.refuse_connect is not None or host.strip("[]") not in LOOPBACK:
            status = self.refuse_connect or 403
            conn.sendall(b"HTTP/1.1 %d Refused\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" % status)
            return
        upstream = self._connect(host.strip("[]"), int(port))
        try:
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            _pipe(conn, upstream)
        finally:
            self._untrack(upstream)


_HOP_BY_HOP = frozenset({"proxy-authorization", "proxy-connection", "connection", "keep-alive"})
_RESPONSE_FRAMING = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive"})


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until either side closes (or ``close()`` shuts them down)."""
    with selectors.DefaultSelector() as selector:
        selector.register(a, selectors.EVENT_READ, b)
        selector.register(b, selectors.EVENT_READ, a)
        while True:
            events = selector.select(IO_TIMEOUT)
            if not events:
                return
            for key, _ in events:
                source = cast(socket.socket, key.fileobj)
                data = source.recv(65536)
                if not data:
                    return
                cast(socket.socket, key.data).sendall(data)

"""Real squid and tinyproxy processes for the tests, each with its own config in a temp dir.

Both listen on 127.0.0.1 on a free port and require Basic auth (``USER``/``PASSWORD``). A
missing binary, helper or ``openssl`` (for squid's htpasswd file) raises ``Unavailable`` with
the reason, for the tests to skip with it. ``stop()`` terminates the process and waits for it;
``terminate()`` only asks it to exit, for a ``stop()`` later to wait.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Optional

USER = "alice"
PASSWORD = "c0rrect-horse-pw"
START_TIMEOUT = 30.0  # squid takes a second or two; a loaded CI box more
HELPER_DIRS = ("/usr/lib/squid", "/usr/lib64/squid", "/usr/libexec/squid", "/usr/lib/squid3")


class Unavailable(Exception):
    """The proxy cannot run here; the message says why."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RealProxy:
    """A proxy process. Subclasses write the config and name the command."""

    name = ""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"qa-min-{self.name}-"))
        self.port = 0
        self._process: Optional[subprocess.Popen[bytes]] = None
        self._terminated = False  # SIGTERM sent: squid may take it for a second request to hurry

    def url(self, user: Optional[str] = USER, password: str = PASSWORD) -> str:
        auth = "" if user is None else f"{user}:{password}@"
        return f"http://{auth}127.0.0.1:{self.port}"

    def log(self) -> str:
        """The proxy's request log so far."""
        path = self.dir / self.log_name
        return path.read_text(errors="replace") if path.exists() else ""

    log_name = ""

    def command(self) -> list[str]:
        raise NotImplementedError

    def configure(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> RealProxy:
        try:
            for _ in range(3):  # another process may take the free port first
                self.port = _free_port()
                self.configure()
                if self._start():
                    return self
            raise Unavailable(f"{self.name} did not start: {self._output()[-500:]}")
        except BaseException:
            self.stop()
            raise

    def _start(self) -> bool:
        out = open(self.dir / "output.txt", "wb")  # noqa: SIM115 - the child writes to it
        with out:
            self._process = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + START_TIMEOUT
        pause = threading.Event()
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return True
            except OSError:
                pause.wait(0.05)
        return False

    def _output(self) -> str:
        path = self.dir / "output.txt"
        return path.read_text(errors="replace") if path.exists() else ""

    def terminate(self) -> None:
        """Ask the process to exit (SIGTERM) and return at once; ``stop()`` waits for it."""
        if self._process is not None and self._process.poll() is None and not self._terminated:
            self._process.terminate()
            self._terminated = True

    def stop(self) -> None:
        self.terminate()
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class Squid(RealProxy):
    name = "squid"
    log_name = "access.log"

    def __init__(self) -> None:
        binary = shutil.which("squid") or shutil.which("squid", path="/usr/sbin:/sbin")
        if binary is None:
            raise Unavailable("squid is not installed (apt-get install squid)")
        helper = next(
            (Path(d, "basic_ncsa_auth") for d in HELPER_DIRS if Path(d, "basic_ncsa_auth").exists()), None
        )
        if helper is None:
            raise Unavailable("squid's basic_ncsa_auth helper is not installed")
        if shutil.which("openssl") is None:
            raise Unavailable("no openssl command to hash the proxy password")
        self.binary, self.helper = binary, helper
        super().__init__()

    def command(self) -> list[str]:
        return [self.binary, "-N", "-f", str(self.dir / "squid.conf")]

    def configure(self) -> None:
        hashed = subprocess.run(
            ["openssl", "passwd", "-apr1", PASSWORD], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()
        (self.dir / "htpasswd").write_text(f"{USER}:{hashed}\n")
        d = self.dir
        (d / "squid.conf").write_text(
            f"http_port 127.0.0.1:{self.port}\n"
            f"pid_filename {d}/squid.pid\n"
            f"cache_log {d}/cache.log\n"
            f"access_log stdio:{d}/access.log\n"
            f"coredump_dir {d}\n"
            "cache deny all\n"
            "netdb_filename none\n"
            "pinger_enable off\n"
            "shutdown_lifetime 0 seconds\n"
            f"auth_param basic program {self.helper} {d}/htpasswd\n"
            "auth_param basic realm qa-min-test\n"
            "acl authed proxy_auth REQUIRED\n"
            "http_access allow authed\n"
            "http_access deny all\n"
        )
        # Started as root, squid works as its unprivileged user, which must reach these files.
        if os.geteuid() == 0:
            os.chmod(d, 0o777)
            for path in d.iterdir():
                os.chmod(path, 0o644)


class Tinyproxy(RealProxy):
    name = "tinyproxy"
    log_name = "tinyproxy.log"

    def __init__(self) -> None:
        binary = shutil.which("tinyproxy") or shutil.which("tinyproxy", path="/usr/sbin:/usr/bin")
        if binary is None:
            raise Unavailable("tinyproxy is not installed (apt-get install tinyproxy)")
        self.binary = binary
        super().__init__()

    def command(self) -> list[str]:
        return [self.binary, "-d", "-c", str(self.dir / "tinyproxy.conf")]

    def configure(self) -> None:
        (self.dir / "tinyproxy.conf").write_text(
            f"Port {self.port}\n"
            "Listen 127.0.0.1\n"
            "Timeout 30\n"
            "MaxClients 50\n"
            "Allow 127.0.0.1\n"
            f"BasicAuth {USER} {PASSWORD}\n"
            f'LogFile "{self.dir}/tinyproxy.log"\n'
            "LogLevel Connect\n"
            f'PidFile "{self.dir}/tinyproxy.pid"\n'
        )

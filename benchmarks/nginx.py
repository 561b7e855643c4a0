"""nginx as the benchmark's server, when it is installed: an independent, C-written reference.

``start()`` writes a configuration into a temporary directory and runs nginx in the foreground
as one process (``daemon off``, ``master_process off``, one worker's work), so its CPU time is
one process's, as the own server's is. Nothing outside the temporary directory is read or
written: no system configuration, no log or temp directory of the installation. nginx cannot
listen on port 0 and say which port it got, so a free port is found first by binding port 0.

It answers exactly what ``benchmarks.server`` answers (the bodies of ``benchmarks.common``),
with ``return``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from .common import CORE_BODY, MODELS_BODY, NOT_ALLOWED_BODY, NOT_FOUND_BODY, WRONG_BODY
from .process import ServerProcess, free_port, wait_listening

if TYPE_CHECKING:
    from collections.abc import Iterator

# Where distributions install it; /usr/sbin is often not on a non-root PATH.
SEARCHED = ("/usr/sbin", "/usr/local/sbin", "/usr/local/nginx/sbin", "/opt/homebrew/bin")
START_ATTEMPTS = 3  # another process may take the free port before nginx binds it

TEMPLATE = """\
daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
{temp_paths}
    server {{
        listen 127.0.0.1:{port};
{tls}
        default_type application/json;
        location = /v1/core {{
            if ($request_method != POST) {{ return 405 '{not_allowed}'; }}
            return 200 '{core}';
        }}
        location = /v1/models {{
            if ($request_method != GET) {{ return 405 '{not_allowed}'; }}
            return 200 '{models}';
        }}
        location / {{ return 404 '{not_found}'; }}
    }}
}}
"""


class NginxNotFound(Exception):
    """No usable nginx: not installed, too old, or it would not start."""


def find_nginx(explicit: Optional[str] = None) -> str:
    """The nginx executable: ``explicit``, else ``$NGINX``, else ``nginx`` on PATH or in an sbin.

    Raises:
        NginxNotFound: None was found.
    """
    candidate = explicit or os.environ.get("NGINX")
    if candidate:
        found = shutil.which(candidate)
        if found is None:
            raise NginxNotFound(f"{candidate} is not an executable")
        return found
    path = os.pathsep.join([os.environ.get("PATH", os.defpath), *SEARCHED])
    found = shutil.which("nginx", path=path)
    if found is None:
        raise NginxNotFound("nginx is not installed (apt-get install nginx-light, brew install nginx)")
    return found


def version(binary: str) -> tuple[str, str]:
    """(``nginx -V`` output, version such as ``1.22.1``).

    Raises:
        NginxNotFound: It does not run, or is older than 1.19.5 (no ``-e`` option).
    """
    proc = subprocess.run([binary, "-V"], capture_output=True, text=True, check=False)
    text = proc.stderr + proc.stdout
    match = re.search(r"nginx/(\d+)\.(\d+)\.(\d+)", text)
    if proc.returncode != 0 or match is None:
        raise NginxNotFound(f"{binary} -V failed: {text.strip()[:500]}")
    numbers = tuple(int(part) for part in match.groups())
    if numbers < (1, 19, 5):
        raise NginxNotFound(f"nginx {match.group(0)} is older than 1.19.5, which added -e")
    return text, ".".join(match.groups())


def config(
    directory: Path, port: int, wrong_answer: bool, tls: Optional[tuple[str, str, int]], build: str
) -> str:
    """The configuration text; ``tls`` is (certificate, key, port) for an HTTPS listener."""
    temp_paths = [f"    client_body_temp_path {directory}/client_body;"]
    for module in ("proxy", "fastcgi", "uwsgi", "scgi"):
        # A directive of a module left out of the build is a configuration error.
        if f"--without-http_{module}_module" not in build:
            temp_paths.append(f"    {module}_temp_path {directory}/{module};")
    tls_lines = ""
    if tls is not None:
        cert, key, tls_port = tls
        tls_lines = (
            f"        listen 127.0.0.1:{tls_port} ssl;\n"
            f"        ssl_certificate {cert};\n        ssl_certificate_key {key};"
        )
    return TEMPLATE.format(
        dir=directory,
        temp_paths="\n".join(temp_paths),
        port=port,
        tls=tls_lines,
        core=(WRONG_BODY if wrong_answer else CORE_BODY).decode(),
        models=MODELS_BODY.decode(),
        not_allowed=NOT_ALLOWED_BODY.decode(),
        not_found=NOT_FOUND_BODY.decode(),
    )


@contextlib.contextmanager
def start(
    wrong_answer: bool = False, tls: Optional[tuple[str, str]] = None, binary: Optional[str] = None
) -> Iterator[ServerProcess]:
    """Run nginx for the duration of a ``with`` block.

    Args:
        wrong_answer: Serve ``WRONG_BODY`` for ``POST /v1/core``.
        tls: (certificate file, key file): also serve HTTPS, at ``tls_url``.
        binary: The nginx executable (default: ``find_nginx()``).

    Raises:
        NginxNotFound: nginx is missing, too old, or did not start (its error log is included).
    """
    executable = find_nginx(binary)
    build, number = version(executable)
    with tempfile.TemporaryDirectory(prefix="qa-min-nginx-") as name:
        directory = Path(name)
        server = _launch(executable, directory, build, wrong_answer, tls, f"nginx {number}")
        try:
            yield server
        finally:
            server.stop()


def _launch(
    executable: str,
    directory: Path,
    build: str,
    wrong_answer: bool,
    tls: Optional[tuple[str, str]],
    name: str,
) -> ServerProcess:
    log = directory / "error.log"
    for _ in range(START_ATTEMPTS):
        ports = [free_port()] + ([free_port()] if tls is not None else [])
        tls_spec = None if tls is None else (tls[0], tls[1], ports[1])
        path = directory / "nginx.conf"
        path.write_text(config(directory, ports[0], wrong_answer, tls_spec, build))
        process = subprocess.Popen(
            [executable, "-p", str(directory), "-c", str(path), "-e", str(log)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        if wait_listening(process, ports):
            urls = [f"http://127.0.0.1:{ports[0]}"] + [f"https://127.0.0.1:{port}" for port in ports[1:]]
            return ServerProcess(process, urls, name, stop_signal=signal.SIGTERM)
        if process.poll() is None:
            process.kill()
        out, _ = process.communicate()
        errors = (log.read_text() if log.exists() else "") + (out or "")
        if "Address already in use" not in errors:
            break
    raise NginxNotFound(f"nginx did not start: {errors.strip()[-1000:]}")

"""Outside audit: what a library that embeds qa_min, or an AWS Lambda function, relies on.

SPEC sections 7 and 8, docs/install.md, docs/cancellation.md and docs/retries.md; each check
through both clients where it applies. What the other modules cover is not repeated here:
test_import (what ``import qa_min`` loads), test_vendoring (calls from a vendored copy, a zip,
a read-only directory with PYTHONDONTWRITEBYTECODE set), test_logging (the NullHandler),
test_faults (a pooled connection the server closed while idle, the threaded client).

  no global side effects: importing qa_min and qa_min.testing, making, using and closing both
      clients changes no logging handler, warnings filter, signal handler, socket default
      timeout, ssl default context, environment, sys.path, hook or atexit count, and leaves no
      thread and no file descriptor; on this Python, 3.9 and 3.13
      test_import_and_use_change_no_global_state
  a client dropped unused warns of nothing (docs/cancellation.md: only an unclosed socket does)
      test_unused_client_dropped_without_close_warns_of_nothing
  read-only filesystem, no HOME, bytecode writing left on, cwd and TMPDIR read-only: import,
      calls through both clients and the command line work and write no file
      test_read_only_filesystem_without_home_writes_no_file
  a Lambda freeze: an idle connection older than idle_timeout on the frozen clock is not reused;
      one whose server forgot it is replaced with attempts == what the server counted
      test_connection_older_than_idle_timeout_after_a_freeze_is_replaced
      test_connection_the_server_forgot_during_a_freeze_is_resent_once
  import cost, read off ``python -X importtime``: nothing outside the standard library, none of
      http.client, email, ssl, asyncio, concurrent.futures, logging; nor a first http:// call
      test_importtime_lists_only_standard_library_and_no_heavy_module
  vendored from a zip under another name: errors keep their vendored module path, pickle,
      and the testing module's MockTransport serves both clients
      test_vendored_zip_errors_pickle_under_their_own_module_path
"""

from __future__ import annotations

import asyncio
import gc
import glob
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest
from faultservers import OK_RESPONSE, RawServer, read_request
from support import no_sleep

import qa_min as qa
from qa_min import _aio, _connection
from qa_min.testing import FakeService

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "qa_min"
KEY = "k-0123456789"
TIMEOUT = 20


class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")


def interpreters() -> list[str]:
    """This Python, and the oldest and newest supported ones that pyenv holds, if any."""
    found = [sys.executable]
    for version in ("3.9", "3.13"):
        if sys.version_info[:2] == tuple(int(p) for p in version.split(".")):
            continue
        pattern = os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")
        found += sorted(glob.glob(pattern))[-1:]
    return found


def run_python(
    args: list[str], *, python: str = sys.executable, prefix: tuple[str, ...] = (), **options: Any
) -> Any:
    """Run a child interpreter; return the JSON its last stdout line holds."""
    done = subprocess.run(
        [*prefix, python, *args], capture_output=True, text=True, timeout=TIMEOUT, check=False, **options
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def copy_package(dest: Path) -> None:
    shutil.copytree(PACKAGE, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


# -- no global side effects -------------------------------------------------------------------

# Runs in the child (``-I -W error``). The application imports logging and asyncio itself after
# ``import qa_min``, so that what those stdlib imports do (logging's atexit hook, its lastResort
# handler) is not charged to qa_min, and what qa_min's own import does is seen alone first.
SIDE_EFFECTS = r"""
import atexit, gc, json, os, signal, socket, sys, threading, time, warnings
sys.path.insert(0, sys.argv[1])

def fake_connections_ended():
    # The fake serves each connection on a thread that closes its socket once the client hangs
    # up: wait for them (bounded), so the descriptors compared are the client's.
    deadline = time.monotonic() + 5
    while any(t.name.startswith("qa_min-fake-conn") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the fake's connection threads did not end"
        time.sleep(0.001)

def sockets():
    # The sockets this process holds (what a client could leak). Other descriptors come and go
    # with things that are not the client's: listdir's own, the fake's selector made by its
    # accept thread after start() returned.
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if target.startswith("socket:"):
            found.append(target)
    return sorted(found)

def state():
    fake_connections_ended()
    logging = sys.modules.get("logging")
    ssl = sys.modules.get("ssl")
    asyncio = sys.modules.get("asyncio")
    loggers = {}
    if logging:
        for name, lg in [("", logging.getLogger()), *logging.Logger.manager.loggerDict.items()]:
            if isinstance(lg, logging.Logger) and (lg.handlers or lg.level or not lg.propagate):
                loggers[name] = [[type(h).__name__ for h in lg.handlers], lg.level, lg.propagate]
    signals = {}
    for s in signal.Signals:
        if s not in (signal.SIGKILL, signal.SIGSTOP):
            signals[s.name] = repr(signal.getsignal(s))
    return {
        "loggers": loggers,
        "logging_disabled": logging.root.manager.disable if logging else 0,
        "warnings": [repr(f) for f in warnings.filters],
        "signals": signals,
        "socket_timeout": socket.getdefaulttimeout(),
        "ssl_context": ssl and ssl._create_default_https_context is ssl.create_default_context,
        "environ": dict(os.environ),
        "path": list(sys.path),
        "meta_path": [repr(f) for f in sys.meta_path],
        "threads": sorted(t.name for t in threading.enumerate()),
        "atexit": atexit._ncallbacks(),
        "hooks": [repr(sys.excepthook), repr(threading.excepthook), repr(sys.unraisablehook),
                  repr(sys.displayhook), repr(sys.gettrace()), repr(sys.getprofile())],
        "limits": [sys.getrecursionlimit(), sys.getswitchinterval(), gc.isenabled(), gc.get_threshold()],
        "cwd": os.getcwd(),
        "policy": None if asyncio is None else repr(asyncio.events._event_loop_policy),
        "sockets": sockets(),
    }

stages = {"start": state()}
import qa_min as qa
stages["import qa_min"] = state()
import asyncio, logging
asyncio.get_event_loop_policy()  # asyncio.run would make it
stages["app imports"] = state()
import qa_min.testing as testing
stages["import testing"] = state()

class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")

client = qa.Client(base_url="http://127.0.0.1:9", api_key="k-0123456789", trust_env=False)
aclient = qa.AsyncClient(base_url="http://127.0.0.1:9", api_key="k-0123456789", trust_env=False)
stages["clients made"] = state()
client.close()
asyncio.run(aclient.aclose())
stages["unused clients closed"] = state()

svc = testing.FakeService(api_key="k-0123456789").start()
stages["fake started"] = state()
with qa.Client(base_url=svc.url, api_key="k-0123456789", trust_env=False) as c:
    c.ask("Some text", Review)
    c.submit(c.list_models).result(timeout=10)
stages["client used and closed"] = state()

async def main():
    async with qa.AsyncClient(base_url=svc.url, api_key="k-0123456789", trust_env=False) as ac:
        await ac.ask("Some text", Review)
        await ac.list_models()

asyncio.run(main())
stages["async client used and closed"] = state()
svc.close()
stages["fake closed"] = state()
print(json.dumps(stages))
"""

# Stage -> the stage it must equal, except for what the note says may differ.
SAME_AS = {
    "import qa_min": "start",
    "import testing": "app imports",
    "clients made": "import testing",
    "unused clients closed": "import testing",
    "client used and closed": "fake started",
    "async client used and closed": "fake started",
    "fake closed": "import testing",
}


def fake_thread(name: str) -> bool:
    return name.startswith("qa_min-fake")


def differences(now: dict[str, Any], then: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, current in now.items():
        old, value = then[key], current
        if key == "threads":
            # The fake's per-connection threads end on their own once the client hangs up.
            value = [t for t in value if not fake_thread(t) or t == "qa_min-fake-accept"]
            old = [t for t in old if not fake_thread(t) or t == "qa_min-fake-accept"]
        if key == "loggers":
            # The library's logger, once it is first asked for: silent, level and propagation left alone.
            value = {
                k: v for k, v in value.items() if not (k == "qa_min" and v == [["NullHandler"], 0, True])
            }
        if value != old:
            out[key] = [old, value]
    return out


@pytest.fixture(scope="module", params=interpreters(), ids=lambda p: "py" + Path(p).name[6:] or "python")
def side_effects(request: pytest.FixtureRequest) -> dict[str, Any]:
    stages: dict[str, Any] = run_python(
        ["-I", "-W", "error", "-c", SIDE_EFFECTS, str(ROOT)], python=request.param
    )
    return stages


def test_import_and_use_change_no_global_state(side_effects: dict[str, Any]) -> None:
    found = {stage: differences(side_effects[stage], side_effects[base]) for stage, base in SAME_AS.items()}
    found = {stage: diff for stage, diff in found.items() if diff}
    # The fake's file descriptors close with it; the client's, with the client: compared above
    # through "sockets" (client used and closed == fake started).
    assert found == {}
    # The probe did observe: the library's logger exists once a call ran in a process with logging.
    assert side_effects["client used and closed"]["loggers"].get("qa_min") == [["NullHandler"], 0, True]
    assert "qa_min" not in side_effects["import qa_min"]["loggers"]


@pytest.mark.parametrize("kind", ["Client", "AsyncClient"])
def test_unused_client_dropped_without_close_warns_of_nothing(kind: str) -> None:
    # docs/cancellation.md: a dropped client warns of an unclosed socket; one that never opened
    # a socket has nothing to warn about, and must not make -W error applications fail.
    before = threading.active_count()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client = getattr(qa, kind)(base_url="http://127.0.0.1:9", api_key=KEY, trust_env=False)
        del client
        gc.collect()
    assert [str(w.message) for w in caught] == []
    assert threading.active_count() == before


# -- read-only filesystem, no HOME ------------------------------------------------------------

# Runs in the child: import, calls through both clients against a FakeService of the same copy,
# then the command line's demo and ask (against that fake) in the same interpreter's main().
READ_ONLY = r"""
import asyncio, contextlib, io, json, os, sys
sys.path.insert(0, sys.argv[1])
import qa_min as qa
from qa_min import testing
from qa_min._cli import main

class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")

with testing.FakeService(api_key="k-0123456789") as svc:
    with qa.Client(base_url=svc.url, api_key="k-0123456789") as client:
        sync = client.ask("Some text", Review).answers.toxic

    async def use():
        async with qa.AsyncClient(base_url=svc.url, api_key="k-0123456789") as aclient:
            return (await aclient.ask("Some text", Review)).answers.toxic

    aio = asyncio.run(use())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        codes = [
            main(["demo", "--json"]),
            main(["--base-url", svc.url, "--api-key", "k-0123456789", "--json", "ask", "Some text",
                  "--yes-no", "toxic", "The text insults someone", "The text insults no one"]),
        ]
print(json.dumps({"sync": sync, "aio": aio, "codes": codes, "home": os.environ.get("HOME"),
                  "dont_write_bytecode": sys.dont_write_bytecode, "out": len(out.getvalue())}))
"""


def listing(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def set_writable(root: Path, writable: bool) -> None:
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod((mode | stat.S_IWUSR) if writable else mode & ~0o222)


def drop_privileges() -> tuple[str, ...]:
    """A prefix that runs a command without the power to write where permissions forbid it."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: permissions do not bind")
    # Root keeps its uid (so it can still read /root's interpreter) but loses the capabilities
    # that override file permissions.
    prefix = (setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner", "--")
    # A container without CAP_SETPCAP cannot drop them: then this test cannot bind either.
    probe = subprocess.run([*prefix, "true"], capture_output=True, check=False, timeout=10)
    if probe.returncode != 0:
        pytest.skip(f"running as root and setpriv cannot drop capabilities here: {probe.stderr!r}")
    return prefix


@pytest.fixture
def read_only_tree(tmp_path: Path) -> Iterator[Path]:
    """tmp/site/qa_min (the package, no bytecode), tmp/cwd and tmp/tmp: all read-only."""
    copy_package(tmp_path / "site" / "qa_min")
    (tmp_path / "cwd").mkdir()
    (tmp_path / "tmp").mkdir()
    set_writable(tmp_path, False)
    try:
        yield tmp_path
    finally:
        set_writable(tmp_path, True)


def test_read_only_filesystem_without_home_writes_no_file(read_only_tree: Path) -> None:
    prefix = drop_privileges()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "SERVICE_", "HOME"))}
    env.update(TMPDIR=str(read_only_tree / "tmp"), TMP=str(read_only_tree / "tmp"), NO_PROXY="*")
    probe = [*prefix, sys.executable, "-c", "open('x', 'w')"]
    denied = subprocess.run(
        probe, cwd=read_only_tree / "cwd", capture_output=True, timeout=TIMEOUT, check=False
    )
    assert denied.returncode != 0  # the tree is read-only
    assert b"PermissionError" in denied.stderr
    before = listing(read_only_tree)

    # Not -I and not -B: a Lambda runtime writes bytecode where it can; here it cannot.
    found = run_python(
        ["-c", READ_ONLY, str(read_only_tree / "site")], prefix=prefix, cwd=read_only_tree / "cwd", env=env
    )

    assert found["sync"] == found["aio"]
    assert found["codes"] == [0, 0]
    assert found["home"] is None
    assert found["dont_write_bytecode"] is False
    assert found["out"] > 0
    assert listing(read_only_tree) == before


# -- a Lambda freeze --------------------------------------------------------------------------


class Counting:
    """A keep-alive server that answers every request OK and counts requests and connections;
    with ``forget_after`` set, a connection's request after that many is read and then reset,
    as a NAT that forgot the connection while the function was frozen answers it."""

    def __init__(self, forget_after: Optional[int] = None) -> None:
        self.forget_after = forget_after
        self.requests = 0
        self._lock = threading.Lock()

    def __call__(self, conn: socket.socket, stop: threading.Event) -> None:
        served = 0
        while read_request(conn):
            with self._lock:
                self.requests += 1
            if self.forget_after is not None and served >= self.forget_after:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                return
            served += 1
            conn.sendall(OK_RESPONSE)


async def no_async_sleep(seconds: float) -> None:
    """Backoff without waiting: a resend waits for nothing anyway, a retry would be seen in history."""


def ask_twice(kind: str, url: str, between: Any) -> qa.Diagnostics:
    """Ask once, run ``between()`` (the freeze), ask again; the second call's Diagnostics."""
    diagnostics = qa.Diagnostics()
    options: dict[str, Any] = {"base_url": url, "trust_env": False}
    if kind == "Client":
        with qa.Client(**options, sleep=no_sleep) as client:
            client.ask("Some text", Review)
            between()
            client.ask("Some text", Review, diagnostics=diagnostics)
        return diagnostics

    async def use() -> None:
        async with qa.AsyncClient(**options, sleep=no_async_sleep) as client:
            await client.ask("Some text", Review)
            between()
            await client.ask("Some text", Review, diagnostics=diagnostics)

    asyncio.run(use())
    return diagnostics


@pytest.mark.parametrize("kind", ["Client", "AsyncClient"])
def test_connection_older_than_idle_timeout_after_a_freeze_is_replaced(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/retries.md: idle age is measured on a clock that keeps counting while a Lambda is
    # frozen. The freeze is that clock jumping past idle_timeout (30 s by default).
    offset = [0.0]
    clock = _connection.idle_clock
    monkeypatch.setattr(_connection, "idle_clock", lambda: clock() + offset[0])
    monkeypatch.setattr(_aio, "idle_clock", lambda: clock() + offset[0])
    server = Counting()
    with RawServer(server) as raw:
        diagnostics = ask_twice(kind, raw.url, lambda: offset.__setitem__(0, 31.0))
        assert raw.connections == 2  # the old connection was not reused
    assert diagnostics.attempts == 1 == len(diagnostics.history)
    assert server.requests == 2


@pytest.mark.parametrize("kind", ["Client", "AsyncClient"])
def test_connection_the_server_forgot_during_a_freeze_is_resent_once(kind: str) -> None:
    # The connection looks alive on wake-up (no FIN came), the request goes out and is reset:
    # the caller sees an answer, and attempts counts both writes, as the server does.
    server = Counting(forget_after=1)
    with RawServer(server) as raw:
        diagnostics = ask_twice(kind, raw.url, lambda: None)
        assert raw.connections == 2
    assert server.requests == 3
    assert diagnostics.attempts == 2
    assert diagnostics.status == 200
    assert [a.status for a in diagnostics.history] == [None, 200]
    assert diagnostics.history[0].delay == 0  # a resend, not a retry after backoff


# -- import cost --------------------------------------------------------------------------------

IMPORT_THEN_CALL = r"""
import sys
sys.path.insert(0, sys.argv[1])
import qa_min as qa

class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")

with qa.Client(base_url=sys.argv[2], trust_env=False) as client:
    client.ask("Some text", Review)
"""

NEVER = ("http.client", "email", "ssl", "asyncio", "concurrent.futures", "logging", "threading", "random")


def test_importtime_lists_only_standard_library_and_no_heavy_module(svc: FakeService) -> None:
    # install.md: neither the import nor an http:// call loads these; threading, random and
    # logging only with a wait, a retry or an application that uses logging.
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-X", "importtime", "-c", IMPORT_THEN_CALL, str(ROOT), svc.url],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    names = [
        line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")
    ]
    names = [n for n in names if n != "imported package"]
    assert "qa_min._connection" in names  # the call ran and was timed
    assert len(svc.requests) == 1
    stdlib = getattr(sys, "stdlib_module_names", None)
    if stdlib is not None:
        outside = [n for n in names if n.split(".")[0] not in stdlib and n.split(".")[0] != "qa_min"]
        assert outside == []
    heavy = [n for n in names if n in NEVER or n.startswith(tuple(m + "." for m in NEVER))]
    assert heavy == []


# -- vendored from a zip --------------------------------------------------------------------------

VENDORED = r"""
import asyncio, json, pickle, sys
sys.path.insert(0, sys.argv[1])
from mylib._vendor import qa_min as qa
from mylib._vendor.qa_min import testing

class Review(qa.Questions):
    toxic = qa.YesNo("The text insults someone", "The text insults no one")

def handler(request):
    return testing.reply(404, {"detail": "no such model"})

transport = testing.MockTransport(handler)
found = {}
with qa.Client(transport=transport, api_key="k-0123456789") as client:
    try:
        client.ask("Some text", Review)
    except qa.NotFound as exc:
        error = exc
    copy = pickle.loads(pickle.dumps(error))
    clone = pickle.loads(pickle.dumps(client))
found["sync"] = [type(error).__module__, type(error).__qualname__, type(copy) is qa.NotFound,
                 copy.diagnostics.status, str(copy) == str(error), type(clone).__module__]

async def use():
    async with qa.AsyncClient(transport=transport, api_key="k-0123456789") as client:
        try:
            await client.ask("Some text", Review)
        except qa.NotFound as exc:
            return exc, pickle.loads(pickle.dumps(client))

error, aclone = asyncio.run(use())
copy = pickle.loads(pickle.dumps(error))
found["async"] = [type(error).__module__, type(error).__qualname__, type(copy) is qa.NotFound,
                  copy.diagnostics.status, str(copy) == str(error), type(aclone).__module__]
found["qa_min_loaded"] = sorted(m for m in sys.modules if m.split(".")[0] == "qa_min")
print(json.dumps(found))
"""


def test_vendored_zip_errors_pickle_under_their_own_module_path(tmp_path: Path) -> None:
    archive = tmp_path / "app.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("mylib/__init__.py", "")
        zf.writestr("mylib/_vendor/__init__.py", "")
        for path in sorted(PACKAGE.rglob("*.py")):
            zf.write(path, "mylib/_vendor/qa_min/" + path.relative_to(PACKAGE).as_posix())
    found = run_python(["-I", "-c", VENDORED, str(archive)], cwd=tmp_path)
    assert found["sync"] == [
        "mylib._vendor.qa_min._errors",
        "NotFound",
        True,
        404,
        True,
        "mylib._vendor.qa_min._client",
    ]
    assert found["async"] == [
        "mylib._vendor.qa_min._errors",
        "NotFound",
        True,
        404,
        True,
        "mylib._vendor.qa_min._aclient",
    ]
    assert found["qa_min_loaded"] == []

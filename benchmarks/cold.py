"""``python -m benchmarks cold``: what a new process pays up to its first answer.

A Lambda cold start is a whole process: interpreter start-up, imports, a client, the first
POST (with a TLS handshake over ``https://``). Each measured run is exactly that, a fresh
``python -c`` process timed from before it is spawned until it has been reaped, doing one of:

* ``raw``: ``import http.client, json``, an ``HTTP(S)Connection``, the POST, ``json.loads``;
* ``qa_core``: ``import qa_min``, ``Client(base_url=...)``, ``core()`` with a ``Request``;
* ``qa_ask``: ``import qa_min``, a ``Questions`` class, ``Client(base_url=...)``, ``ask()``.

All three send the same body (``common.PAYLOAD``) and check the same three answers. Over
``https://`` every process trusts a throwaway CA through ``SSL_CERT_FILE`` (``benchmarks.tls``),
so raw and qa_min build the same default context and make the same handshake. Each round runs
every client once per scheme, the order rotated round by round, and each qa_min run is
compared with the raw run of its own round: a slow spell moves both sides of a ratio.

Peak RSS is the child's own ``VmHWM`` (Linux), printed by the child as it ends: on Linux a
child's ``ru_maxrss`` includes its parent's memory from before ``exec``, so it would measure
the runner. Elsewhere ``ru_maxrss`` from ``wait4``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Optional

from . import common
from .common import ROOT, child_env

if TYPE_CHECKING:
    from collections.abc import Sequence
    from contextlib import AbstractContextManager
    from typing import Callable

    from .process import ServerProcess

NAMES = ("raw", "qa_core", "qa_ask")

# Ends every child: its own peak RSS, read without an import (an import would be measured).
_PEAK = """
try:
    with open("/proc/self/status", "rb") as _status:
        for _line in _status:
            if _line.startswith(b"VmHWM:"):
                print("PEAK_KIB", int(_line.split()[1]))
except OSError:
    pass
"""

_CHECK = """
if {toxic} is not True or {tone} != "formal" or type({quality}) is not int or {quality} != 2:
    raise SystemExit("wrong answer: " + repr(({toxic}, {tone}, {quality})))
"""


def child_code(name: str, url: str) -> str:
    """The source a measured child runs: what a cold start of ``name`` does against ``url``."""
    scheme, _, address = url.partition("://")
    host, _, port = address.rpartition(":")
    if name == "raw":
        kind = "HTTPSConnection" if scheme == "https" else "HTTPConnection"
        body = f"""\
import http.client, json
conn = http.client.{kind}({host!r}, {int(port)})
conn.request("POST", {common.PATH!r}, json.dumps({common.PAYLOAD!r}).encode(), {common.HEADERS!r})
response = conn.getresponse()
data = response.read()
if response.status != 200:
    raise SystemExit("HTTP %d: %r" % (response.status, data[:200]))
answers = json.loads(data)["answers"]
""" + _CHECK.format(toxic='answers["toxic"]', tone='answers["tone"]', quality='answers["quality"]')
    elif name == "qa_core":
        body = f"""\
import qa_min as qa
client = qa.Client(base_url={url!r})
request = qa.Request(
    {common.STATE!r},
    [
        qa.NamedQuestion("toxic", qa.YesNo({common.YES_NO["true"]!r}, {common.YES_NO["false"]!r})),
        qa.NamedQuestion("tone", qa.Choice({common.TONES!r})),
        qa.NamedQuestion("quality", qa.Score({common.LEVELS!r})),
    ],
)
answers = client.core(request).answers
""" + _CHECK.format(toxic='answers["toxic"]', tone='answers["tone"]', quality='answers["quality"]')
    elif name == "qa_ask":
        body = f"""\
import qa_min as qa

class Review(qa.Questions):
    toxic = qa.YesNo({common.YES_NO["true"]!r}, {common.YES_NO["false"]!r})
    tone = qa.Choice({common.TONES!r})
    quality = qa.Score({common.LEVELS!r})

client = qa.Client(base_url={url!r})
answers = client.ask({common.STATE!r}, Review).answers
""" + _CHECK.format(toxic="answers.toxic", tone="answers.tone", quality="answers.quality")
    else:
        raise ValueError(f"unknown cold-start client {name!r}")
    return body + _PEAK


class Run(NamedTuple):
    """One measured process: wall seconds from spawn to reaped, CPU seconds, peak RSS in KiB."""

    wall_s: float
    cpu_s: float
    peak_kib: float


class ColdFailed(Exception):
    """A child failed: an error, or a wrong answer."""


def run_child(python: str, code: str, env: dict[str, str]) -> Run:
    """Spawn, wait, time: one cold start.

    Raises:
        ColdFailed: The child exited with a non-zero status (its output is in the message).
    """
    started = time.perf_counter()
    proc = subprocess.Popen(
        [python, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    # wait4 rather than wait: the child's rusage, the fallback for its peak RSS.
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        raise ColdFailed(f"exit status {proc.returncode}:\n{text.strip()[-2000:]}")
    peak = None
    for line in text.splitlines():
        if line.startswith("PEAK_KIB "):
            peak = float(line.split()[1])
    if peak is None:
        peak = usage.ru_maxrss / 1024 if sys.platform == "darwin" else float(usage.ru_maxrss)
    return Run(wall, usage.ru_utime + usage.ru_stime, peak)


class ColdResults:
    """Runs by (scheme, client), in round order, so that index i of each list is round i."""

    def __init__(self, schemes: Sequence[str], names: Sequence[str]) -> None:
        self.schemes = list(schemes)
        self.names = list(names)
        self.runs: dict[tuple[str, str], list[Run]] = {(s, n): [] for s in schemes for n in names}

    def wall_ratios(self, scheme: str, name: str) -> list[float]:
        raw = self.runs[scheme, "raw"]
        return [run.wall_s / base.wall_s for run, base in zip(self.runs[scheme, name], raw)]

    def cpu_ratios(self, scheme: str, name: str) -> list[float]:
        raw = self.runs[scheme, "raw"]
        return [run.cpu_s / base.cpu_s for run, base in zip(self.runs[scheme, name], raw)]

    def rss_differences(self, scheme: str, name: str) -> list[float]:
        raw = self.runs[scheme, "raw"]
        return [(run.peak_kib - base.peak_kib) / 1024 for run, base in zip(self.runs[scheme, name], raw)]

    def median_wall_ms(self, scheme: str, name: str) -> float:
        return statistics.median(run.wall_s for run in self.runs[scheme, name]) * 1000

    def median_peak_mib(self, scheme: str, name: str) -> float:
        return statistics.median(run.peak_kib for run in self.runs[scheme, name]) / 1024


def measure(
    python: str,
    urls: dict[str, str],
    names: Sequence[str],
    rounds: int,
    env: dict[str, str],
    progress: bool = True,
) -> ColdResults:
    """``rounds`` rounds of every client over every scheme in ``urls``, orders rotated.

    Raises:
        ColdFailed: A child failed.
    """
    results = ColdResults(list(urls), names)
    codes = {(scheme, name): child_code(name, url) for scheme, url in urls.items() for name in names}

    def one(scheme: str, name: str) -> Run:
        try:
            return run_child(python, codes[scheme, name], env)
        except ColdFailed as exc:
            raise ColdFailed(f"{name} over {scheme}: {exc}") from None

    for scheme, name in codes:  # byte-compile, fill the page cache: no round pays for either
        one(scheme, name)
    for index in range(rounds):
        shift = index % len(names)
        order = [*names[shift:], *names[:shift]]
        for scheme in results.schemes if index % 2 == 0 else results.schemes[::-1]:
            for name in order:
                results.runs[scheme, name].append(one(scheme, name))
        if progress and (index + 1) % 10 == 0:
            print(f"cold: {index + 1}/{rounds} rounds", file=sys.stderr)
    return results


PROFILE_RUNS = 7


def import_profile(python: str, url: str, env: dict[str, str]) -> list[tuple[str, int, int]]:
    """Modules the qa_core child imports that the raw child does not.

    Returns:
        (module, self µs, cumulative µs), medians over ``PROFILE_RUNS`` runs under
        ``-X importtime`` (one run is at the mercy of a busy machine), largest self time first.
    """
    loaded: dict[str, dict[str, list[tuple[int, int]]]] = {"raw": {}, "qa_core": {}}
    for _ in range(PROFILE_RUNS):
        for name, modules in loaded.items():
            proc = subprocess.run(
                [python, "-X", "importtime", "-c", child_code(name, url)],
                capture_output=True,
                text=True,
                env=env,
                cwd=ROOT,
                check=False,
            )
            if proc.returncode != 0:
                raise ColdFailed(f"{name} under -X importtime: {proc.stderr.strip()[-2000:]}")
            for line in proc.stderr.splitlines():
                parts = line.split("|")
                if len(parts) == 3 and parts[1].strip().isdigit():
                    times = (int(parts[0].split(":")[1]), int(parts[1]))
                    modules.setdefault(parts[2].strip(), []).append(times)
    extra = [
        (module, int(statistics.median(t[0] for t in times)), int(statistics.median(t[1] for t in times)))
        for module, times in loaded["qa_core"].items()
        if module not in loaded["raw"]
    ]
    return sorted(extra, key=lambda item: -item[1])


def certificates(directory: Path) -> tuple[Optional[tuple[str, str]], Optional[str], str]:
    """Certificates for the run: ((cert, key), CA file, ""), or (None, None, why) without openssl."""
    from .tls import CertificateError, make_certificates

    try:
        certs = make_certificates(directory)
    except CertificateError as exc:
        return None, None, f"https:// not measured: {exc}"
    return (certs.cert, certs.key), certs.ca, ""


class Outcome(NamedTuple):
    """A cold-start run: the results, the server's name, notes for the report, the import profile."""

    results: ColdResults
    server: str
    notes: list[str]
    profile: list[tuple[str, int, int]]


def run(
    server_start: Callable[[Optional[tuple[str, str]]], AbstractContextManager[ServerProcess]],
    python: str,
    names: Sequence[str],
    rounds: int,
    explain: bool,
    progress: bool = True,
) -> Outcome:
    """Make certificates, start a server with HTTP (and HTTPS), measure.

    Raises:
        ColdFailed: A child failed.
    """
    with tempfile.TemporaryDirectory(prefix="qa-min-cold-") as name:
        tls, ca, note = certificates(Path(name))
        env = child_env({"SSL_CERT_FILE": ca} if ca else None)
        with server_start(tls) as server:
            urls = {"http": server.url}
            if server.tls_url is not None:
                urls["https"] = server.tls_url
            profile = import_profile(python, server.url, env) if explain else []
            results = measure(python, urls, names, rounds, env, progress)
            return Outcome(results, server.name, [note] if note else [], profile)

"""``python -m benchmarks asyncio``: K concurrent calls from one asyncio program, client against client.

The server (``serve`` below, its own process, so that it never shares the client's GIL) answers
``POST /v1/core`` 200 ms after each request, keep-alive. Each client runs in a fresh process
(``python -m benchmarks.aio client NAME HOST PORT K``): one warm-up call, then K calls started
at once with ``asyncio.gather``, each answer checked, while a ticker task that wants to wake
every 10 ms records how late it woke (the worst lag: how long the loop was blocked). Measured:
wall time of the K calls, CPU time of the process over them, peak RSS (VmHWM), threads of the
process (from /proc), worst lag. Rounds rotate the order of the clients; medians are reported,
with each client's ratio to the floor of its own round.

Clients: ``floor``, a raw ``asyncio.Protocol`` client with a keep-alive pool (about 80 lines,
below: the least any asyncio client can do); ``qa_min`` (``AsyncClient.ask``); ``aiohttp``
(no connection limit); ``httpx`` (``httpx.AsyncClient``, no connection limit). A client whose
package is missing is reported as such. This file imports only the standard library, qa_min
and those packages (extra ``bench``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

from .common import ROOT, child_env

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
SECTION = "asyncio"
CLIENTS = ("floor", "qa_min", "aiohttp", "httpx")
DELAY = 0.2  # seconds the server waits before each answer
BODY = json.dumps(
    {
        "state": "Some text",
        "questions": {"toxic": {"criteria": {"true": "insults someone", "false": "insults no one"}}},
        "model": "judge-latest",
    }
).encode()
ANSWER = b'{"answers": {"toxic": true}, "usage": {"input_tokens": 12}}'

# -- the server ---------------------------------------------------------------------------------


class _ServerConnection(asyncio.Protocol):
    """Reads requests (Content-Length bodies), answers each after ``DELAY``; keep-alive."""

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: Optional[asyncio.Transport] = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in self.buffer[:end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            asyncio.get_running_loop().call_later(DELAY, self.answer)

    def answer(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            self.transport.write(head % len(ANSWER) + ANSWER)


async def _serve() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_ServerConnection, "127.0.0.1", 0, backlog=8192)
    print(server.sockets[0].getsockname()[1], flush=True)
    await loop.run_in_executor(None, sys.stdin.read)  # until the runner closes our stdin


# -- the floor: a raw asyncio.Protocol client with a keep-alive pool --------------------------


class _FloorConnection(asyncio.Protocol):
    def __init__(self) -> None:
        self.buffer = b""
        self.waiter: Optional[asyncio.Future[bytes]] = None
        self.transport: Optional[asyncio.Transport] = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0 or self.waiter is None:
            return
        length = 0
        for line in self.buffer[:end].split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        if len(self.buffer) >= end + 4 + length:
            body, self.buffer = self.buffer[end + 4 : end + 4 + length], self.buffer[end + 4 + length :]
            waiter, self.waiter = self.waiter, None
            waiter.set_result(body)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc or ConnectionResetError("closed"))


class FloorClient:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.idle: list[_FloorConnection] = []
        self.request = (
            b"POST /v1/core HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (host.encode(), port, len(BODY), BODY)
        )

    async def call(self) -> bool:
        loop = asyncio.get_running_loop()
        while self.idle and self.idle[-1].closed:
            self.idle.pop()
        if self.idle:
            conn = self.idle.pop()
        else:
            _, conn = await loop.create_connection(_FloorConnection, self.host, self.port)
        conn.waiter = loop.create_future()
        assert conn.transport is not None
        conn.transport.write(self.request)
        body = await conn.waiter
        if len(self.idle) < 10:
            self.idle.append(conn)
        else:
            conn.transport.close()
        return json.loads(body)["answers"]["toxic"] is True

    async def close(self) -> None:
        for conn in self.idle:
            assert conn.transport is not None
            conn.transport.close()


# -- the clients --------------------------------------------------------------------------------


async def _qa_min(host: str, port: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
    import qa_min as qa

    class Review(qa.Questions):
        toxic = qa.YesNo("insults someone", "insults no one")

    client = qa.AsyncClient(base_url=f"http://{host}:{port}", model="judge-latest", trust_env=False)

    async def call() -> bool:
        return (await client.ask("Some text", Review)).answers.toxic is True

    return call, client.aclose


async def _aiohttp(host: str, port: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    url, headers = f"http://{host}:{port}/v1/core", {"Content-Type": "application/json"}

    async def call() -> bool:
        async with session.post(url, data=BODY, headers=headers) as response:
            return json.loads(await response.read())["answers"]["toxic"] is True

    return call, session.close


async def _httpx(host: str, port: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
    import httpx

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=10)
    client = httpx.AsyncClient(limits=limits, timeout=None, trust_env=False)
    url, headers = f"http://{host}:{port}/v1/core", {"Content-Type": "application/json"}

    async def call() -> bool:
        response = await client.post(url, content=BODY, headers=headers)
        return bool(response.json()["answers"]["toxic"] is True)

    return call, client.aclose


async def _floor(host: str, port: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
    client = FloorClient(host, port)
    return client.call, client.close


MAKERS = {"floor": _floor, "qa_min": _qa_min, "aiohttp": _aiohttp, "httpx": _httpx}


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0  # pragma: no cover - not Linux


async def _measure(name: str, host: str, port: int, k: int) -> dict[str, float]:
    call, close = await MAKERS[name](host, port)
    assert await call(), "wrong answer"
    lag = 0.0
    done = False

    async def ticker() -> None:
        nonlocal lag
        while not done:
            due = time.perf_counter() + 0.01
            await asyncio.sleep(0.01)
            lag = max(lag, time.perf_counter() - due)

    tick = asyncio.ensure_future(ticker())
    await asyncio.sleep(0.02)
    lag = 0.0
    cpu, wall = time.process_time(), time.perf_counter()
    answers = await asyncio.gather(*(call() for _ in range(k)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    threads = _status("Threads")
    done = True
    await tick
    await close()
    if not all(answers):
        raise SystemExit(f"{name}: a wrong answer")
    rss = _status("VmHWM") / 1024 if Path("/proc/self/status").exists() else 0.0
    if not rss:  # pragma: no cover - not Linux
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"wall": wall, "cpu": cpu, "rss": rss, "threads": threads, "lag": lag}


def child(argv: list[str]) -> int:
    name, host, port, k = argv[0], argv[1], int(argv[2]), int(argv[3])
    print(json.dumps(asyncio.run(_measure(name, host, port, k))))
    return 0


# -- the runner ---------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    return child_env()


def _available(name: str) -> bool:
    if name in ("floor", "qa_min"):
        return True
    probe = [sys.executable, "-c", f"import {name}"]
    return subprocess.run(probe, env=_env(), capture_output=True, check=False).returncode == 0


def _run_one(name: str, port: int, k: int, limit: float) -> Optional[dict[str, float]]:
    command = [sys.executable, "-m", "benchmarks.aio", "client", name, "127.0.0.1", str(port), str(k)]
    try:
        done = subprocess.run(
            command, env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=limit, check=False
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        raise SystemExit(f"benchmarks asyncio: {name} K={k} failed:\n{done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(clients: list[str], ks: list[int], rounds: int, limit: float) -> dict[str, Any]:
    """{K: {client: [sample, ...]}}, each round every client once per K, in a rotated order."""
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.aio", "serve"],
        env=_env(),
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    samples: dict[int, dict[str, list[Optional[dict[str, float]]]]] = {
        k: {c: [] for c in clients} for k in ks
    }
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        for number in range(rounds):
            for k in ks:
                order = clients[number % len(clients) :] + clients[: number % len(clients)]
                for name in order:
                    print(f"round {number + 1}/{rounds} K={k} {name}", file=sys.stderr, flush=True)
                    samples[k][name].append(_run_one(name, port, k, limit))
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(10)
    return samples


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def render(samples: dict[int, dict[str, list[Optional[dict[str, float]]]]], command: str, rounds: int) -> str:
    lines = [
        "## asyncio: K concurrent calls to a server answering after 200 ms",
        "",
        f"`{command}`; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} at the end; Python "
        f"{sys.version.split()[0]}; medians of {rounds}; each client in a fresh process, the server in"
        " its own.",
        "Wall: the K calls started at once with `asyncio.gather`; CPU: the client process's over them;"
        " RSS: its peak (VmHWM); threads: the process's, after the calls; lag: the worst lateness of a 10 ms"
        " ticker task. Ratios are to the floor of the same round (median of the per-round ratios).",
        "",
        "| K | client | wall s | x floor | CPU s | x floor | peak RSS MiB | threads | worst lag s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    medians: dict[tuple[int, str], dict[str, float]] = {}
    for k, by_client in samples.items():
        floor = by_client.get("floor", [])
        for name, runs in by_client.items():
            done = [r for r in runs if r is not None]
            if not done:
                lines.append(f"| {k:,} | {name} | timed out | | | | | | |")
                continue
            row = {key: _median([r[key] for r in done]) for key in ("wall", "cpu", "rss", "threads", "lag")}
            for key in ("wall", "cpu"):
                pairs = [r[key] / f[key] for r, f in zip(runs, floor) if r is not None and f is not None]
                row[f"{key}_x"] = _median(pairs)
            medians[k, name] = row
            lines.append(
                f"| {k:,} | {name} | {row['wall']:.2f} | {row['wall_x']:.2f} | {row['cpu']:.2f} |"
                f" {row['cpu_x']:.2f} | {row['rss']:.0f} | {row['threads']:.0f} | {row['lag']:.2f} |"
            )
    return "\n".join([*lines, "", *_verdicts(medians)])


def _verdicts(medians: dict[tuple[int, str], dict[str, float]]) -> list[str]:
    """The issue's targets for qa_min, each with the figure of this run and whether it holds."""
    at = medians.get((5000, "qa_min"))
    thousand = medians.get((1000, "qa_min"))
    aiohttp = medians.get((5000, "aiohttp"))
    if at is None:
        return []
    checks = [
        ("wall ≤ 1.5x the floor's", at["wall_x"] <= 1.5, f"{at['wall_x']:.2f}x"),
        ("CPU ≤ 1.6x the floor's", at["cpu_x"] <= 1.6, f"{at['cpu_x']:.2f}x"),
        ("peak RSS ≤ 75 MiB", at["rss"] <= 75, f"{at['rss']:.0f} MiB"),
        ("one thread", at["threads"] == 1, f"{at['threads']:.0f}"),
    ]
    if aiohttp is not None:
        checks.append(
            (
                "ahead of aiohttp",
                at["wall"] < aiohttp["wall"],
                f"{at['wall']:.2f} s vs {aiohttp['wall']:.2f} s",
            )
        )
    if thousand is not None:
        checks.append(("K = 1,000 in ≤ 0.5 s", thousand["wall"] <= 0.5, f"{thousand['wall']:.2f} s"))
    return [
        "qa_min against the targets (at K = 5,000 unless said): "
        + "; ".join(f"{what}: {figure} ({'met' if ok else 'NOT met'})" for what, ok, figure in checks)
        + "."
    ]


def write_section(path: Path, text: str) -> None:
    begin, end = f"<!-- begin {SECTION} -->", f"<!-- end {SECTION} -->"
    old = path.read_text() if path.exists() else ""
    block = f"{begin}\n{text}\n{end}"
    if begin in old and end in old:
        head, _, rest = old.partition(begin)
        new = head + block + rest.partition(end)[2]
    else:
        new = (old.rstrip() + "\n\n" if old.strip() else "") + block + "\n"
    path.write_text(new)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks asyncio", description=__doc__)
    parser.add_argument("--ks", default="100,1000,5000", help="concurrent calls, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians are reported (default 3)")
    parser.add_argument("--clients", default=",".join(CLIENTS), help=f"a subset of {','.join(CLIENTS)}")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds before a client run is given up")
    parser.add_argument("--output", default=str(RESULTS), help="the markdown file to update ('-': none)")
    args = parser.parse_args(argv)
    chosen = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = sorted(set(chosen) - set(CLIENTS))
    if unknown or args.rounds < 1:
        parser.error(f"unknown clients {unknown}" if unknown else "--rounds must be at least 1")
    if "floor" not in chosen:
        chosen.insert(0, "floor")
    missing = [c for c in chosen if not _available(c)]
    clients = [c for c in chosen if c not in missing]
    ks = [int(k) for k in args.ks.split(",")]
    samples = measure(clients, ks, args.rounds, args.limit)
    command = shlex.join(["python", "-m", "benchmarks", "asyncio", *argv])
    text = render(samples, command, args.rounds)
    if missing:
        text += f"\n\nNot installed, skipped: {', '.join(missing)} (`pip install -e '.[bench]'`)."
    print(text)
    if args.output != "-":
        write_section(Path(args.output), text)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        asyncio.run(_serve())
    elif sys.argv[1:2] == ["client"]:
        raise SystemExit(child(sys.argv[2:]))
    else:
        raise SystemExit(main(sys.argv[1:]))

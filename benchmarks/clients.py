"""One client's measurement, in a fresh process of its own.

    python -m benchmarks.clients CLIENT MODE URL [CALLS [WARMUP [THREADS]]]

CLIENT is one of ``MAKERS``; URL is the benchmark server's base URL. MODE:

* ``cpu``: WARMUP calls, then CALLS calls timed with ``time.process_time()`` (and wall time);
* ``threads``: THREADS threads share one client (raw: one ``HTTPConnection`` per thread); each
  makes a few warm-up calls, then together they make CALLS calls, timed on the wall clock;
* ``rss``: CALLS calls, then the peak resident set size (``peak_rss_kib``);
* ``profile``: WARMUP calls, then CALLS calls under ``cProfile`` (its default, wall-clock timer);
  prints the statistics, then the client library's own functions alone.

Prints one line, ``RESULT {json}``. Every call checks every answer (toxic is True, tone is
"formal" or ``Tone.formal``, quality is 2); a wrong one ends the process with exit status 2
and a message on stderr, any other error with a traceback and status 1.

This module is the baseline every client's memory is measured on top of, so it imports only
what each mode needs (``benchmarks.common`` loads nothing new), and nothing at run time from
``typing``.
"""

from __future__ import annotations

import sys
import time

from .common import HEADERS, LEVELS, PATH, PAYLOAD, STATE, TONES, YES_NO

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

    CallFn = Callable[[], None]


class WrongAnswer(Exception):
    """The server's answers are not the expected ones."""


def check(toxic: object, tone: object, quality: object, formal: object = "formal") -> None:
    """Raise ``WrongAnswer`` unless the answers are True, ``formal`` and 2."""
    if toxic is not True or tone != formal or type(quality) is not int or quality != 2:
        raise WrongAnswer(
            f"got toxic={toxic!r}, tone={tone!r}, quality={quality!r}; expected True, {formal!r}, 2"
        )


class Bench:
    """A client ready to call.

    Attributes:
        call: One checked call, for a single thread.
        for_thread: Returns the call function one of several threads uses.
        close: Releases the client's connections.
    """

    __slots__ = ("call", "close", "for_thread")

    def __init__(self, call: CallFn, for_thread: Callable[[], CallFn], close: Callable[[], object]) -> None:
        self.call = call
        self.for_thread = for_thread
        self.close = close


def _status_error(client: str, status: int, body: bytes) -> RuntimeError:
    return RuntimeError(f"{client}: HTTP {status}: {body[:200]!r}")


def make_raw(url: str, threads: int) -> Bench:
    """The floor: ``http.client`` + ``json``, one kept-alive ``HTTPConnection`` per thread."""
    import http.client
    import json

    host, _, port = url.partition("://")[2].rpartition(":")
    connections: list[http.client.HTTPConnection] = []

    def new_call() -> CallFn:
        conn = http.client.HTTPConnection(host.strip("[]"), int(port))
        connections.append(conn)

        def call() -> None:
            conn.request("POST", PATH, json.dumps(PAYLOAD).encode(), HEADERS)
            response = conn.getresponse()
            data = response.read()
            if response.status != 200:
                raise _status_error("raw", response.status, data)
            answers = json.loads(data)["answers"]
            check(answers["toxic"], answers["tone"], answers["quality"])

        return call

    def close() -> None:
        for conn in connections:
            conn.close()

    return Bench(new_call(), new_call, close)


def make_urllib3(url: str, threads: int) -> Bench:
    """``urllib3.PoolManager``, its pool sized to keep one connection per thread."""
    import json

    urllib3: Any = __import__("urllib3")
    # The default maxsize of 1 would open and drop a connection per call beyond the first thread.
    pool = urllib3.PoolManager(maxsize=max(1, threads))
    target = url + PATH

    def call() -> None:
        response = pool.request("POST", target, body=json.dumps(PAYLOAD).encode(), headers=HEADERS)
        if response.status != 200:
            raise _status_error("urllib3", response.status, response.data)
        answers = json.loads(response.data)["answers"]
        check(answers["toxic"], answers["tone"], answers["quality"])

    return Bench(call, lambda: call, pool.clear)


def make_requests(url: str, threads: int) -> Bench:
    """``requests.Session`` with its default adapter (10 pooled connections per host)."""
    import json

    requests: Any = __import__("requests")
    session = requests.Session()
    if threads > 10:
        session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=threads))
    target = url + PATH

    def call() -> None:
        response = session.post(target, data=json.dumps(PAYLOAD).encode(), headers=HEADERS)
        if response.status_code != 200:
            raise _status_error("requests", response.status_code, response.content)
        answers = json.loads(response.content)["answers"]
        check(answers["toxic"], answers["tone"], answers["quality"])

    return Bench(call, lambda: call, session.close)


def make_httpx(url: str, threads: int) -> Bench:
    """``httpx.Client`` with its default limits (20 keep-alive connections)."""
    import json

    httpx: Any = __import__("httpx")
    client = httpx.Client()
    target = url + PATH

    def call() -> None:
        response = client.post(target, content=json.dumps(PAYLOAD).encode(), headers=HEADERS)
        if response.status_code != 200:
            raise _status_error("httpx", response.status_code, response.content)
        answers = json.loads(response.content)["answers"]
        check(answers["toxic"], answers["tone"], answers["quality"])

    return Bench(call, lambda: call, client.close)


def make_qa_core(url: str, threads: int) -> Bench:
    """qa_min's ``core()`` with a ``Request`` built once."""
    import qa_min as qa

    client = qa.Client(base_url=url, max_idle_per_host=max(10, threads))
    request = qa.Request(
        STATE,
        [
            qa.NamedQuestion("toxic", qa.YesNo(YES_NO["true"], YES_NO["false"])),
            qa.NamedQuestion("tone", qa.Choice(TONES)),
            qa.NamedQuestion("quality", qa.Score(LEVELS)),
        ],
    )

    def call() -> None:
        answers = client.core(request).answers
        check(answers["toxic"], answers["tone"], answers["quality"])

    return Bench(call, lambda: call, client.close)


def make_qa_ask(url: str, threads: int) -> Bench:
    """qa_min's ``ask()`` with a typed ``Questions`` class, the tone an Enum."""
    import enum

    import qa_min as qa

    class Tone(enum.Enum):
        formal = TONES["formal"]
        casual = TONES["casual"]

    class Review(qa.Questions):
        toxic = qa.YesNo(YES_NO["true"], YES_NO["false"])
        tone = qa.Choice(Tone)
        quality = qa.Score(LEVELS)

    client = qa.Client(base_url=url, max_idle_per_host=max(10, threads))

    def call() -> None:
        answers = client.ask(STATE, Review).answers
        check(answers.toxic, answers.tone, answers.quality, Tone.formal)

    return Bench(call, lambda: call, client.close)


MAKERS: dict[str, Callable[[str, int], Bench]] = {
    "raw": make_raw,
    "urllib3": make_urllib3,
    "requests": make_requests,
    "httpx": make_httpx,
    "qa_core": make_qa_core,
    "qa_ask": make_qa_ask,
}

PROFILE_FILTERS = {
    "raw": r"http[/\\]client",
    "urllib3": r"urllib3[/\\]",
    "requests": r"requests[/\\]",
    "httpx": r"http(x|core)[/\\]",
    "qa_core": r"qa_min[/\\]",
    "qa_ask": r"qa_min[/\\]",
}
"""For ``profile``: a regex on file names selecting the client library's own functions."""


def _repeat(call: CallFn, count: int) -> None:
    for _ in range(count):
        call()


def measure_cpu(bench: Bench, calls: int, warmup: int) -> dict[str, float]:
    _repeat(bench.call, warmup)
    wall = time.perf_counter()
    cpu = time.process_time()
    _repeat(bench.call, calls)
    cpu = time.process_time() - cpu
    wall = time.perf_counter() - wall
    return {"cpu_us": cpu / calls * 1e6, "wall_us": wall / calls * 1e6, "requests": warmup + calls}


def measure_threads(bench: Bench, calls: int, warmup: int, threads: int) -> dict[str, float]:
    import threading

    shares = [calls // threads + (1 if i < calls % threads else 0) for i in range(threads)]
    per_thread_warmup = max(5, warmup // threads)
    started: list[float] = []
    barrier = threading.Barrier(threads, action=lambda: started.append(time.perf_counter()))
    errors: list[BaseException] = []

    def work(share: int) -> None:
        try:
            call = bench.for_thread()
            _repeat(call, per_thread_warmup)
            barrier.wait()
            _repeat(call, share)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    workers = [threading.Thread(target=work, args=(share,)) for share in shares]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started[0] if started else 0.0
    if errors:
        # A thread's own error, rather than the BrokenBarrierError it caused in the others.
        real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
        raise (real or errors)[0]
    return {
        "calls_per_s": calls / elapsed,
        "threads": threads,
        "requests": calls + per_thread_warmup * threads,
    }


def measure_rss(bench: Bench, calls: int) -> dict[str, float]:
    _repeat(bench.call, calls)
    return {"rss_kib": peak_rss_kib(), "requests": calls}


def peak_rss_kib() -> float:
    """This process's peak resident set size, in KiB.

    On Linux, ``VmHWM`` from ``/proc/self/status``: ``ru_maxrss`` survives ``exec``, so in a
    child it reports the parent's size whenever the parent was the larger. Elsewhere
    ``ru_maxrss`` (in bytes on macOS).
    """
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return float(line.split()[1])
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 if sys.platform == "darwin" else float(peak)


def profile(bench: Bench, client: str, calls: int, warmup: int) -> None:
    import cProfile
    import pstats

    _repeat(bench.call, warmup)
    profiler = cProfile.Profile()
    profiler.runcall(_repeat, bench.call, calls)
    stats = pstats.Stats(profiler, stream=sys.stdout).strip_dirs().sort_stats("cumulative")
    print(f"== {client}: {calls} calls, all functions by cumulative time (top 30)")
    stats.print_stats(30)
    # strip_dirs() dropped the paths the filter needs: reload without stripping.
    own = pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative")
    print(f"== {client}: the library's own functions by cumulative time (top 15)")
    own.print_stats(PROFILE_FILTERS[client], 15)
    print(f"== {client}: the library's own functions by internal time (top 15)")
    own.sort_stats("tottime").print_stats(PROFILE_FILTERS[client], 15)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in MAKERS or argv[1] not in ("cpu", "threads", "rss", "profile"):
        print(__doc__, file=sys.stderr)
        return 64
    client, mode, url = argv[:3]
    numbers = [int(value) for value in argv[3:6]]
    calls, warmup, threads = numbers + [2000, 200, 8][len(numbers) :]
    bench = MAKERS[client](url, threads if mode == "threads" else 1)
    try:
        if mode == "cpu":
            result = measure_cpu(bench, calls, warmup)
        elif mode == "threads":
            result = measure_threads(bench, calls, warmup, threads)
        elif mode == "rss":
            result = measure_rss(bench, calls)
        else:
            profile(bench, client, calls, warmup)
            return 0
    except WrongAnswer as exc:
        print(f"benchmarks.clients: {client}: wrong answer: {exc}", file=sys.stderr)
        return 2
    finally:
        bench.close()
    import json  # only now: the rss measurement is already taken

    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""``dltsched bench service``: the HTTP service under load and slow-loris connections, on 127.0.0.1 only.

Starts ``dltsched serve`` in a subprocess on a free loopback port, then at once sends ``--requests``
concurrent valid requests of ``--jobs`` jobs and opens ``--slow`` connections that send a request's
headers a few bytes a second. Reports: valid requests answered with a plan (and how many were cut short by
their time limit), latency p50/p95/max, slow connections the server closed and when, and the peak memory of
the server's process tree (RSS of the server process; PSS of it with its solver processes, from /proc).
Then the time-limit figures: one CP-SAT request per size with ``time_limit_s`` 0.01, and 5,000-job CP-SAT
requests with the default limit and with the server's largest (30 s), each with its wall time and whether
it came back ``partial``; the memory peaks cover them too.
Everything is bounded in count and time and stops by itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

from dltsched.engine.app.cli.main import emit

HOST = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _request(num_jobs: int, num_gpus: int, seed: int, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``POST /v1/schedule`` body: a generated instance's jobs, all arrived and queued."""
    from dltsched.engine.app.api import initial_state
    from dltsched.engine.app.service.models import state_to_request
    from dltsched.instances.generator import GeneratorSpec, generate_instance

    instance = generate_instance(GeneratorSpec(num_jobs=num_jobs,
                                               num_gpus=num_gpus, gpus_per_node=8, seed=seed))
    return state_to_request(initial_state(instance), config)


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _kib(path: str, key: str) -> int:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


class MemorySampler:
    """Peak RSS of the server process and peak PSS of its process tree, sampled every 0.1 s."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_rss_kib = 0
        self.peak_tree_pss_kib = 0
        self.peak_processes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.peak_rss_kib = max(self.peak_rss_kib, _kib(f"/proc/{self.pid}/status", "VmRSS:"))
            tree = _tree(self.pid)
            self.peak_processes = max(self.peak_processes, len(tree))
            pss = sum(_kib(f"/proc/{p}/smaps_rollup", "Pss:") for p in tree)
            self.peak_tree_pss_kib = max(self.peak_tree_pss_kib, pss)


async def _post(client: Any, url: str, body: bytes) -> tuple[int, float, dict[str, Any] | None]:
    start = time.perf_counter()
    try:
        r = await client.post(url, content=body, headers={"content-type": "application/json"})
    except Exception as err:  # a transport error is a request not answered
        return -1, time.perf_counter() - start, {"error": type(err).__name__}
    answer = r.json() if r.headers.get("content-type", "").startswith("application/json") else None
    return r.status_code, time.perf_counter() - start, answer


async def _slow_loris(port: int, limit_s: float) -> float | None:
    """Open a connection and send request headers a few bytes a second; seconds until the server closes it
    (None: still open after ``limit_s``)."""
    start = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection(HOST, port)
    except OSError:
        return None
    header = f"POST /v1/schedule HTTP/1.1\r\nHost: {HOST}\r\n".encode() + b"X-Pad: " + b"z" * 4000

    async def dribble() -> None:
        for i in range(0, len(header), 4):
            writer.write(header[i:i + 4])
            await writer.drain()
            await asyncio.sleep(1.0)

    sender = asyncio.create_task(dribble())
    try:
        while True:
            left = limit_s - (time.perf_counter() - start)
            if left <= 0:
                return None
            try:
                chunk = await asyncio.wait_for(reader.read(4096), timeout=left)
            except TimeoutError:
                return None
            if not chunk:
                return time.perf_counter() - start
    except (ConnectionError, OSError):
        return time.perf_counter() - start
    finally:
        sender.cancel()
        writer.close()


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _load(port: int, body: bytes, requests: int, slow: int, read_timeout_s: float) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=requests, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        url = f"http://{HOST}:{port}/v1/schedule"
        slow_tasks = [asyncio.create_task(_slow_loris(port, read_timeout_s + 60)) for _ in range(slow)]
        results = await asyncio.gather(*(_post(client, url, body) for _ in range(requests)))
        closed = await asyncio.gather(*slow_tasks)
    statuses: dict[str, int] = {}
    for status, _, _ in results:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    ok = [(t, a) for s, t, a in results if s == 200 and a is not None and "assignments" in a]
    latencies = [t for t, _ in ok]
    close_times = [c for c in closed if c is not None]
    return {
        "requests": requests, "answered_with_plan": len(ok), "statuses": statuses,
        "partial": sum(1 for _, a in ok if a and a.get("partial")),
        "fallback": sum(1 for _, a in ok if a and a.get("fallback")),
        "latency_p50_s": _quantile(latencies, 0.5), "latency_p95_s": _quantile(latencies, 0.95),
        "latency_max_s": max(latencies, default=None),
        "slow_connections": slow, "slow_closed": len(close_times),
        "slow_closed_within_timeout": sum(1 for c in close_times if c <= read_timeout_s + 2.0),
        "slow_close_p50_s": _quantile(close_times, 0.5), "slow_close_max_s": max(close_times, default=None),
    }


async def _at_concurrency(port: int, body: bytes, requests: int, concurrency: int) -> dict[str, Any]:
    """``requests`` requests, at most ``concurrency`` in flight: answers with a plan, wall time,
    requests/s."""
    import httpx

    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=300) as client:
        url = f"http://{HOST}:{port}/v1/schedule"

        async def one() -> tuple[int, float, dict[str, Any] | None]:
            async with gate:
                return await _post(client, url, body)

        started = time.perf_counter()
        results = await asyncio.gather(*(one() for _ in range(requests)))
        wall = time.perf_counter() - started
    ok = [answer for status, _, answer in results if status == 200 and answer and "assignments" in answer]
    return {"concurrency": concurrency, "requests": requests, "answered_with_plan": len(ok),
            "partial": sum(1 for a in ok if a.get("partial")),
            "fallback": sum(1 for a in ok if a.get("fallback")),
            "wall_s": round(wall, 3), "requests_per_s": round(requests / wall, 4)}


def _throughput(port: int, body: bytes, requests: int) -> dict[str, Any]:
    """Throughput with one request in flight, then two (the server solves two at once): the ratio is what a
    second solver slot buys on this machine. Only solves that finish count: each phase says how many answers
    were cut short by their time limit (``partial``) or came from the fallback policy."""
    one = asyncio.run(_at_concurrency(port, body, requests, 1))
    two = asyncio.run(_at_concurrency(port, body, requests, 2))
    return {"one_at_a_time": one, "two_at_a_time": two,
            "throughput_ratio_2_to_1": round(two["requests_per_s"] / one["requests_per_s"], 3)}


def _deadline_figures(port: int, sizes: list[tuple[int, int]]) -> list[dict[str, Any]]:
    import httpx

    out = []
    for num_jobs, num_gpus, limit in ([(j, g, 0.01) for j, g in sizes]
                                      + [(5000, 8192, None), (5000, 8192, 30.0)]):
        config: dict[str, Any] = {"backend": "cpsat"} | ({"time_limit_s": limit} if limit else {})
        body = json.dumps(_request(num_jobs, num_gpus, seed=11, config=config)).encode()
        start = time.perf_counter()
        r = httpx.post(f"http://{HOST}:{port}/v1/schedule", content=body,
                       headers={"content-type": "application/json"}, timeout=300)
        wall = time.perf_counter() - start
        answer = r.json()
        out.append({"jobs": num_jobs, "gpus": num_gpus, "backend": "cpsat",
                    "time_limit_s": answer.get("time_limit_s"),
                    "status_code": r.status_code, "wall_s": round(wall, 3),
                    "plan_status": answer.get("status"),
                    "partial": answer.get("partial"), "fallback_reason": answer.get("fallback_reason")})
    return out


@click.command("service")
@click.option("--requests", "num_requests", type=click.IntRange(1, 200), default=50, show_default=True,
              help="Concurrent valid requests.")
@click.option("--jobs", "num_jobs", type=click.IntRange(1, 5000), default=200, show_default=True,
              help="Jobs per request.")
@click.option("--gpus", "num_gpus", type=click.IntRange(1, 8192), default=256, show_default=True)
@click.option("--slow", "num_slow", type=click.IntRange(0, 500), default=100, show_default=True,
              help="Slow-loris connections opened beside them.")
@click.option("--read-timeout", "read_timeout_s", type=click.FloatRange(0.5, 60), default=10.0,
              show_default=True,
              help="The server's request read timeout.")
@click.option("--deadline-figures/--no-deadline-figures", default=True, show_default=True,
              help="Also time 0.01 s requests of 200 and 1,000 jobs and 5,000-job CP-SAT requests (1 s, 30 "
                   "s).")
@click.option("--time-limit", "time_limit_s", type=click.FloatRange(0, 30, min_open=True), default=None,
              help="time_limit_s of the concurrent requests (default: the server's, 1 s).")
@click.option("--throughput", "throughput_requests", type=click.IntRange(0, 200), default=0,
              show_default=True,
              help="Also send this many requests one at a time, then two at a time, and report the "
                   "throughput ratio (the server then solves at most two at once; give a --time-limit the "
                   "solves finish in).")
@click.option("--json", "as_json", is_flag=True)
def bench_service(num_requests: int, num_jobs: int, num_gpus: int, num_slow: int, read_timeout_s: float,
                  deadline_figures: bool, time_limit_s: float | None, throughput_requests: int,
                  as_json: bool) -> None:
    """The service under concurrent requests and slow-loris connections (127.0.0.1 only)."""
    import httpx

    port = _free_port()
    queue = max(64, num_requests)
    command = [sys.executable, "-m", "dltsched.engine.app.cli.main", "-q", "serve", "--host", HOST, "--port",
               str(port), "--read-timeout", str(read_timeout_s), "--max-queue", str(queue)]
    if throughput_requests:
        command += ["--max-concurrent", "2"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env={k: v for k, v in os.environ.items() if k != "DLTSCHED_TOKEN"})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://{HOST}:{port}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise click.ClickException(f"the service did not start: "
                                           f"{server.stderr.read().decode()[-500:]}"
                                           if server.stderr else "the service did not start")
            time.sleep(0.2)
        config = {"time_limit_s": time_limit_s} if time_limit_s else None
        body = json.dumps(_request(num_jobs, num_gpus, seed=7, config=config)).encode()
        with MemorySampler(server.pid) as memory:
            started = time.perf_counter()
            load = asyncio.run(_load(port, body, num_requests, num_slow, read_timeout_s))
            load["load_wall_s"] = round(time.perf_counter() - started, 3)
            deadlines = _deadline_figures(port, [(200, 256), (1000, 1024)]) if deadline_figures else []
            throughput = _throughput(port, body, throughput_requests) if throughput_requests else None
        result = {"command": " ".join(["dltsched", "bench", "service"] + sys.argv[3:]),
                  "jobs_per_request": num_jobs, "gpus": num_gpus, "read_timeout_s": read_timeout_s,
                  "request_time_limit_s": time_limit_s or 1.0,
                  "cpus": os.cpu_count(), **load, "deadline_requests": deadlines,
                  **({"throughput": throughput} if throughput else {}),
                  "server_peak_rss_mib": round(memory.peak_rss_kib / 1024, 1),
                  "server_tree_peak_pss_mib": round(memory.peak_tree_pss_kib / 1024, 1),
                  "server_tree_peak_processes": memory.peak_processes}
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    def human() -> None:
        for key, value in result.items():
            if key == "deadline_requests":
                for row in value:
                    click.echo(f"  time limit: {row}")
            else:
                click.echo(f"{key}: {value}")

    emit(result, as_json, human)

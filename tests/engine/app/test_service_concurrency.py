"""Two rounds solved at once by the HTTP service, shown by the order of recorded events, never by timing.

Each solve records ``start`` when a solver slot hands it to its worker process and ``end`` when the worker
answered; a gate holds every solve after its ``start`` until the test has seen both start, so two solves in
flight at once is a fact the events prove (a service that solved one request at a time would never record
the second ``start`` before the first ``end``, and the test would fail waiting for it). While both are held,
the health endpoint answers: the event loop is not blocked by solving.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from dltsched.engine.app.api import ConfiguredSolver
from dltsched.engine.app.service import server as service
from dltsched.engine.app.service.server import ServiceConfig, make_server


def _serve(config: ServiceConfig) -> tuple[str, Callable[[], None]]:
    server = make_server(config, "127.0.0.1", 0, log_level="warning")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the service did not start within 30 s"

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()

    return f"http://127.0.0.1:{sock.getsockname()[1]}", stop


def _body(seed: int) -> dict[str, Any]:
    jobs = [{"id": f"s{seed}-j{i}", "model": ("resnet18", "resnet50", "transformer")[i % 3], "batch_size": 64,
             "remaining_iterations": 1000 * (i + 1 + seed)} for i in range(6)]
    return {"cluster": {"nodes": [{"id": "a", "gpu_type": "v100", "num_gpus": 4}]}, "jobs": jobs,
            "config": {"backend": "cpsat", "time_limit_s": 20}}


def _wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.timeout(180)
def test_two_solves_run_at_once_and_the_event_loop_stays_free(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[str, str]] = []
    lock = threading.Lock()
    gate = threading.Event()
    real = service.solve_in_worker

    def recorded(state: Any, config: Any, deadline: float, **kwargs: Any) -> Any:
        name = state.jobs[0].job.id.split("-")[0]
        with lock:
            events.append(("start", name))
        assert gate.wait(60), "the test did not open the gate"
        # the gate held the deadline's clock too: give the solve its whole limit from now
        outcome = real(state, config, time.monotonic() + config.time_limit_s, **kwargs)
        with lock:
            events.append(("end", name))
        return outcome

    monkeypatch.setattr(service, "solve_in_worker", recorded)
    url, stop = _serve(ServiceConfig(solve=ConfiguredSolver.of(backend="cpsat"), max_concurrent_solves=2,
                                     max_time_limit_s=30.0))
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = [pool.submit(httpx.post, f"{url}/v1/schedule", json=_body(s), timeout=120)
                       for s in (0, 1)]
            _wait_for(lambda: len(events) == 2, "both solves to start")
            assert httpx.get(f"{url}/v1/health", timeout=10).status_code == 200  # the loop answers meanwhile
            assert "dltsched_solves_in_progress 2.0" in httpx.get(f"{url}/metrics", timeout=10).text
            gate.set()
            responses = [f.result() for f in futures]
    finally:
        gate.set()
        stop()
    assert [r.status_code for r in responses] == [200, 200]
    for seed, r in enumerate(responses):
        body = r.json()
        assert not body["fallback"] and body["status"] in ("optimal", "feasible")
        placed = {a["job_id"] for a in body["assignments"]}
        assert placed and placed | set(body["queued"]) == {j["id"] for j in _body(seed)["jobs"]}
    # both started before either ended: the two solves overlapped
    assert [kind for kind, _ in events] == ["start", "start", "end", "end"]
    assert {name for _, name in events[:2]} == {"s0", "s1"}


@pytest.mark.timeout(120)
def test_one_slot_solves_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``max_concurrent_solves=1`` the second solve starts only after the first ended."""
    events: list[str] = []
    lock = threading.Lock()
    real = service.solve_in_worker

    def recorded(state: Any, config: Any, deadline: float, **kwargs: Any) -> Any:
        with lock:
            events.append("start")
        outcome = real(state, config, deadline, **kwargs)
        with lock:
            events.append("end")
        return outcome

    monkeypatch.setattr(service, "solve_in_worker", recorded)
    url, stop = _serve(ServiceConfig(solve=ConfiguredSolver.of(backend="greedy"), max_concurrent_solves=1))
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = [pool.submit(httpx.post, f"{url}/v1/schedule",
                                   json=_body(s) | {"config": {"backend": "greedy"}}, timeout=120)
                       for s in (0, 1)]
            statuses = [f.result().status_code for f in futures]
    finally:
        stop()
    assert statuses == [200, 200]
    assert events == ["start", "end", "start", "end"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_bench_service_throughput_reports_one_and_two_at_a_time() -> None:
    import json

    from click.testing import CliRunner

    from dltsched.engine.app.cli.main import cli

    result = CliRunner().invoke(cli, ["bench", "service", "--requests", "1", "--jobs", "20", "--gpus", "16",
                                      "--slow", "0", "--no-deadline-figures", "--throughput", "4",
                                      "--time-limit", "20",
                                      "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)["throughput"]
    one, two = figures["one_at_a_time"], figures["two_at_a_time"]
    assert (one["concurrency"], two["concurrency"]) == (1, 2)
    assert one["answered_with_plan"] == two["answered_with_plan"] == 4
    assert one["fallback"] == two["fallback"] == 0  # solves that finished, not answers at the deadline
    assert figures["throughput_ratio_2_to_1"] == round(two["requests_per_s"] / one["requests_per_s"], 3)

"""Fixtures for the ecosystem tests: small instance files, seeded states, a live HTTP server."""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dltsched.engine.domain.model import Assignment, Cluster, ClusterState, Job, JobState, Node

MODELS = (("resnet18", 128), ("resnet50", 64), ("transformer", 128), ("lstm_lm", 20), ("recoder", 1024),
          ("a3c", 4))


def make_state(num_jobs: int, num_gpus: int, seed: int = 0, running_fraction: float = 0.3) -> ClusterState:
    """A seeded snapshot: 8-GPU nodes cycling v100/p100/k80; some jobs already running alone."""
    rng = random.Random(seed)
    types = ("v100", "p100", "k80")
    nodes = tuple(Node(f"n{i}", types[i % 3], min(8, num_gpus)) for i in range(max(1, num_gpus // 8)))
    cluster = Cluster(nodes)
    free = list(range(cluster.num_gpus))
    states = []
    for j in range(num_jobs):
        model, batch = rng.choice(MODELS)
        job = Job(f"j{j}", model, batch, rng.choice((500.0, 5000.0, 20000.0)), num_gpus=1,
                  freeze_allowed=rng.random() < 0.5, accuracy_budget=0.05)
        assignment = None
        if free and rng.random() < running_fraction:
            assignment = Assignment(job.id, (free.pop(0),))
        states.append(JobState(job, job.total_iterations * rng.uniform(0.2, 1.0), assignment=assignment))
    return ClusterState(0.0, cluster, tuple(states))


@pytest.fixture(scope="session", name="make_state")
def make_state_fixture() -> Callable[..., ClusterState]:
    return make_state


@pytest.fixture(scope="session")
def instance_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three small generated instance files (6 jobs, 4 GPUs each)."""
    from dltsched.instances.generator import GeneratorSpec, generate_instance
    from dltsched.instances.schema import save_instance

    out = tmp_path_factory.mktemp("instances")
    for seed in range(3):
        inst = generate_instance(GeneratorSpec(num_jobs=6, num_gpus=4, gpus_per_node=2, seed=seed,
                                               name=f"eco-{seed}"))
        save_instance(inst, out / f"eco-{seed}.json")
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def live_server() -> Iterator[str]:
    """Base URL of ``create_app()`` served by uvicorn on 127.0.0.1 in a background thread."""
    import httpx
    import uvicorn

    from dltsched.engine.app.service.server import ServiceConfig, create_app

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(ServiceConfig(max_body_bytes=1024 * 1024)),
                                           host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.1)
    else:
        pytest.fail("the service did not start within 30 s")
    yield url
    server.should_exit = True
    thread.join(timeout=10)

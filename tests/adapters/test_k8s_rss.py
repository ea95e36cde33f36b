"""Peak memory of ``dltsched serve`` under the extender abuse cases (a node claiming 100,000,000 GPUs,
malformed bodies, a 5,000-node NodeList, oversized bodies) and a loop of 10,000 filter calls with distinct
pods: the server's peak RSS (``VmHWM``) stays under 1 GB. A real server process, spoken to over HTTP.

Run: ``.venv/bin/python -m pytest -q -s -m slow tests/adapters/test_k8s_rss.py``"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")

from .test_k8s_bounds import MALFORMED  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]
LIMIT_KB = 1024 * 1024  # 1 GB


def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(key)


def _node(i: int, gpus: str = "8", images: int = 50) -> dict[str, Any]:
    return {"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": f"gpu-node-{i:05d}", "uid": f"uid-{i}", "labels": {
                "kubernetes.io/hostname": f"gpu-node-{i:05d}",
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "topology.kubernetes.io/zone": "zone-a"}},
            "status": {"allocatable": {"cpu": "95", "memory": "1150Gi", "nvidia.com/gpu": gpus,
                                       "pods": "110"},
                       "conditions": [{"type": t, "status": "False", "reason": "KubeletHasSufficient" + t,
                                       "lastHeartbeatTime": "2026-01-01T00:00:00Z"}
                                      for t in ("Memory", "Disk", "PID")],
                       "images": [{"names": [f"registry.example/team/image-{i}-{k}@sha256:{'a' * 64}",
                                             f"registry.example/team/image-{k}:v1.{k}"],
                                   "sizeBytes": 123456789}
                                  for k in range(images)]}}


def _pod(uid: str, gpus: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": f"pod-{uid}", "namespace": "t", "uid": uid, "annotations": {
        "dltsched.io/model": "resnet50", "dltsched.io/batch": "64", "dltsched.io/iters": "1000"}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).parent / "dltsched"
    proc = subprocess.Popen([str(exe), "serve", "--port", str(port), "--backend", "greedy", "--time-limit",
                             "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=os.environ | {"MPLCONFIGDIR": str(tmp_path_factory.mktemp("mpl"))})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/v1/health").status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
        time.sleep(0.3)
    yield url, proc.pid
    proc.terminate()
    proc.wait(30)


def test_peak_rss_under_abuse_and_a_10000_pod_loop(server: Any) -> None:
    url, pid = server
    report = {"start_mb": _status_kb(pid, "VmRSS") // 1024}
    with httpx.Client(timeout=120) as http:
        eight = {"items": [_node(i, images=2) for i in range(8)]}
        assert http.post(f"{url}/v1/k8s/filter",
                         json={"Pod": _pod("warm"), "Nodes": eight}).status_code == 200
        huge = http.post(f"{url}/v1/k8s/filter",
                         json={"Pod": _pod("x"), "Nodes": {"items": [_node(0, "100000000")]}})
        assert huge.status_code == 413 and "max_gpus_per_node" in huge.text
        statuses = [http.post(f"{url}/v1/k8s/filter", json=body).status_code for _, body, _ in MALFORMED]
        assert set(statuses) == {400}, statuses
        report["after_malformed_mb"] = _status_kb(pid, "VmHWM") // 1024
        for body in (b"[" + b"{}," * 33_000_000 + b"{}]", b"[" * 200_000 + b"]" * 200_000):
            answer = http.post(f"{url}/v1/k8s/filter", content=body,
                               headers={"content-type": "application/json"})
            assert answer.status_code in (400, 413), answer.status_code
        report["after_oversized_mb"] = _status_kb(pid, "VmHWM") // 1024
        nodes = json.dumps({"Pod": _pod("big"),
                            "Nodes": {"kind": "NodeList", "items": [_node(i) for i in range(5000)]}})
        report["nodelist_5000_mib"] = round(len(nodes) / 2 ** 20, 1)
        started = time.monotonic()
        answer = http.post(f"{url}/v1/k8s/filter", content=nodes,
                           headers={"content-type": "application/json"})
        report["nodelist_5000_s"] = round(time.monotonic() - started, 1)
        assert answer.status_code == 200 and len(answer.json()["Nodes"]["items"]) == 1
        del nodes
        report["after_nodelist_mb"] = _status_kb(pid, "VmHWM") // 1024
        names = [f"gpu-node-{i:05d}" for i in range(8)]
        started = time.monotonic()
        for i in range(10_000):
            answer = http.post(f"{url}/v1/k8s/filter",
                               json={"Pod": _pod(f"loop-{i}", 1 + i % 4), "NodeNames": names})
            assert answer.status_code == 200
        report["loop_10000_s"] = round(time.monotonic() - started, 1)
        report["loop_end_rss_mb"] = _status_kb(pid, "VmRSS") // 1024
    report["peak_mb"] = _status_kb(pid, "VmHWM") // 1024
    print("\nk8s RSS:", json.dumps(report))
    assert report["peak_mb"] * 1024 < LIMIT_KB

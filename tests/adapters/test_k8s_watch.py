"""``dltsched serve --k8s`` against an API server double (``k8s_apiserver``: list, watch and bind over HTTP,
spoken to by the official ``kubernetes`` client): nodes and pods are watched, binding goes through the API
server, finished pods free their GPUs without anyone reporting them, a restarted extender knows the cluster at
once, an expired watch lists again; and a scenario of 50 pods on 8 nodes of 3 GPU types driven the way
kube-scheduler drives an extender (filter, prioritize, bind with its wire format).

A real API server and kube-scheduler cannot be installed here: the double speaks the real HTTP shapes, but
admission, RBAC, field-selector corner cases and kube-scheduler's own queueing are not exercised."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from dltsched.engine.app.adapters.k8s import ExtenderSettings, K8sExtender
from dltsched.engine.app.service.k8s import K8sRoutes, K8sServing

pytest.importorskip("kubernetes")
fastapi = pytest.importorskip("fastapi")
testclient = pytest.importorskip("fastapi.testclient")

from dltsched.engine.app.adapters.k8s_watch import KubeWatcher, api_client, client_binder  # noqa: E402

from .k8s_apiserver import ApiServerDouble  # noqa: E402

PRODUCTS = {"a100": "NVIDIA-A100-SXM4-80GB", "v100": "Tesla-V100-SXM2-16GB", "t4": "Tesla-T4"}


def node(name: str, product: str, gpus: int) -> dict[str, Any]:
    return {"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": name,
                         "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": product}},
            "status": {"capacity": {"nvidia.com/gpu": str(gpus)},
                       "allocatable": {"cpu": "32", "nvidia.com/gpu": str(gpus)}}}


def pod(uid: str, gpus: int, model: str = "resnet50", iters: int = 2000, *, annotated: bool = True,
        node_name: str | None = None, step_s: float | None = None) -> dict[str, Any]:
    notes = {"dltsched.io/model": model, "dltsched.io/batch": "32",
             "dltsched.io/iters": str(iters)} if annotated else {}
    if step_s is not None:
        notes["dltsched.io/step-s"] = str(step_s)
    spec: dict[str, Any] = {"schedulerName": "dltsched", "containers": [
        {"name": "train", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": f"pod-{uid}", "namespace": "train", "uid": uid, "annotations": notes},
            "spec": spec, "status": {"phase": "Pending"}}


def wait_until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def start(api: ApiServerDouble, **settings: Any) -> tuple[K8sExtender, KubeWatcher]:
    client = api_client(host=api.url)
    ext = K8sExtender(ExtenderSettings(**settings), binder=client_binder(client))
    watcher = KubeWatcher(ext, client, scheduler_name="dltsched", watch_timeout_s=3, backoff_s=0.1).start()
    assert watcher.wait_synced(15)
    return ext, watcher


def test_watch_binds_and_sees_pods_end() -> None:
    with ApiServerDouble() as api:
        api.add_node(node("a1", PRODUCTS["a100"], 4))
        api.add_pod(pod("early", 2, node_name="a1"))  # bound before the extender started
        ext, watcher = start(api)
        try:
            assert ext.nodes["a1"].gpu_type == "a100-80gb" and ext.free_gpus("a1") == 2
            api.add_node(node("t1", PRODUCTS["t4"], 2))
            api.add_pod(pod("p1", 2))
            wait_until(lambda: "t1" in ext.nodes and "p1" in ext.pods and ext.pods["p1"].pending)
            # kube-scheduler with nodeCacheCapable: true sends names only
            body = ext.filter({"Pod": api.pod("p1"), "NodeNames": ["a1", "t1"]})
            (chosen,) = body["NodeNames"]
            assert ext.bind({"PodName": "pod-p1", "PodNamespace": "train", "PodUID": "p1",
                             "Node": chosen}) == {
                "Error": ""}
            assert api.bindings == [("train", "pod-p1", chosen)]
            wait_until(lambda: api.pod("p1")["spec"].get("nodeName") == chosen)
            assert ext.pods["p1"].node == chosen
            # a second bind of the same pod is refused by the API server, and said so
            assert "failed" in ext.bind({"PodName": "pod-p1", "PodNamespace": "train", "PodUID": "p1",
                                         "Node": chosen})["Error"]
            api.set_phase("early", "Succeeded")
            api.set_phase("p1", "Failed")
            wait_until(lambda: ext.gpus_in_use() == 0)
            assert ext.free_gpus("a1") == 4 and ext.free_gpus("t1") == 2
            api.delete("nodes", "t1")
            wait_until(lambda: "t1" not in ext.nodes)
        finally:
            watcher.stop()


def test_restart_and_expired_watch_list_again() -> None:
    with ApiServerDouble() as api:
        for i in range(3):
            api.add_node(node(f"v{i}", PRODUCTS["v100"], 4))
        api.add_pod(pod("run", 4, node_name="v0"))
        ext, watcher = start(api)
        watcher.stop()
        # a fresh extender (a restart) knows every node and every bound pod once listed
        ext2, watcher2 = start(api)
        try:
            assert set(ext2.nodes) == {"v0", "v1", "v2"} and ext2.free_gpus("v0") == 0
            api.forget_history()  # etcd compaction: the next watch from an old version gets 410 Gone
            api.delete("pods", "run")
            api.add_node(node("v3", PRODUCTS["v100"], 4))
            wait_until(lambda: "v3" in ext2.nodes and ext2.free_gpus("v0") == 4, timeout_s=20)
        finally:
            watcher2.stop()


def test_scenario_50_pods_8_nodes_3_gpu_types() -> None:
    """50 pods (1, 2 or 4 GPUs; 5 models; some with their own step time) arrive in waves on 8 nodes
    (3 A100 x4, 3 V100 x4, 2 T4 x2: 28 GPUs); each runs a few scheduling cycles, 6 of them fail; two pods of
    another scheduler hold GPUs too. kube-scheduler is played as it works: pending pods in order; filter
    (NodeNames: nodeCacheCapable) -> prioritize -> bind the best-scored passing node.

    Checked: every pod is bound exactly once and ends; no bind ever lands on a node the filter failed; no node
    is ever over-committed (counted from the API server's own objects); waits happen (GPUs are short) and each
    waiting pod is bound later; at the end the extender accounts 0 GPUs in use and every node fully free."""
    rng = random.Random(7)
    nodes = [("a1", "a100", 4), ("a2", "a100", 4), ("a3", "a100", 4), ("v1", "v100", 4), ("v2", "v100", 4),
             ("v3", "v100", 4), ("t1", "t4", 2), ("t2", "t4", 2)]
    capacity = {n: g for n, _, g in nodes}
    models = ["resnet50", "vgg16", "bert_base", "resnet18", "mobilenet_v2"]
    pods = []
    for i in range(50):
        gpus = rng.choice([1, 1, 2, 2, 4])
        step = round(rng.uniform(0.05, 0.5), 3) if i % 7 == 0 else None
        pods.append((f"p{i:02d}", gpus, rng.choice(models), rng.randint(2, 5), i % 9 == 4, step))
    with ApiServerDouble() as api:
        for name, kind, gpus in nodes:
            api.add_node(node(name, PRODUCTS[kind], gpus))
        api.add_pod(pod("other-a", 1, annotated=False, node_name="a3"))  # another scheduler's pods
        api.add_pod(pod("other-b", 2, annotated=False, node_name="v3"))
        ext, watcher = start(api, backend="cpsat", time_limit_s=1.0)
        app = fastapi.FastAPI()
        app.add_middleware(K8sRoutes, serving=K8sServing(ext))
        http = testclient.TestClient(app)
        try:
            arrived, runs_left, ended = 0, {}, set()
            waits: Counter[str] = Counter()
            last_reason: dict[str, Any] = {}
            for _cycle in range(400):
                if arrived < len(pods) and _cycle % 2 == 0:
                    for uid, gpus, model, _, _, step in pods[arrived:arrived + 5]:
                        api.add_pod(pod(uid, gpus, model, iters=rng.randint(500, 5000), step_s=step))
                    arrived += 5
                    wait_until(lambda a=arrived: all(
                        uid in ext.pods or uid in ended for uid, *_ in pods[:a]))
                for uid, (left, fail) in list(runs_left.items()):  # running pods advance; some end
                    if left <= 1:
                        api.set_phase(uid, "Failed" if fail else "Succeeded")
                        del runs_left[uid]
                        ended.add(uid)
                    else:
                        runs_left[uid] = (left - 1, fail)
                wait_until(lambda: all(u not in ext.pods for u in ended))
                pending = [p for p in pods[:arrived] if p[0] not in ended and p[0] not in runs_left]
                for uid, _, _, cycles, fail, _ in pending:
                    args = {"Pod": api.pod(uid), "NodeNames": [n for n, _, _ in nodes]}
                    body = http.post("/v1/k8s/filter", json=args).json()
                    passed = body["NodeNames"]
                    if not passed:
                        waits[uid] += 1
                        last_reason[uid] = body["FailedNodes"]
                        assert body["FailedNodes"], body
                        continue
                    scores = {h["Host"]: h["Score"]
                              for h in http.post("/v1/k8s/prioritize", json=args).json()}
                    best = max(passed, key=lambda n: scores[n])
                    answer = http.post("/v1/k8s/bind", json={"PodName": f"pod-{uid}", "PodNamespace": "train",
                                                             "PodUID": uid, "Node": best}).json()
                    assert answer == {"Error": ""}, answer
                    assert best in passed
                    used = Counter()
                    for p in api.objects["pods"].values():
                        if p["spec"].get("nodeName") and p["status"]["phase"] not in ("Succeeded", "Failed"):
                            limits = p["spec"]["containers"][0]["resources"]["limits"]
                            used[p["spec"]["nodeName"]] += int(limits["nvidia.com/gpu"])
                    assert all(used[n] <= capacity[n] for n in capacity), used
                    runs_left[uid] = (cycles, fail)
                if len(ended) == len(pods):
                    break
            api.set_phase("other-a", "Succeeded")
            api.delete("pods", "other-b")
            wait_until(lambda: ext.gpus_in_use() == 0)
            bound = Counter(name for _, name, _ in api.bindings)
            stuck = {p[0]: (p[1], last_reason.get(p[0])) for p in pods if p[0] not in ended}
            assert not stuck, (stuck, {n: ext.free_gpus(n) for n in capacity})
            assert len(ended) == 50 and set(bound) == {f"pod-{uid}" for uid, *_ in pods}
            assert set(bound.values()) == {1}  # every pod bound exactly once
            assert all(ext.free_gpus(n) == g for n, g in capacity.items())
            assert sum(waits.values()) > 0 and all(f"pod-{u}" in bound for u in waits)
            print(f"\nscenario: 50 pods on 8 nodes, {len(api.bindings)} binds, {sum(waits.values())} waits "
                  f"(of {len(waits)} pods), {sum(p[4] for p in pods)} failed, cycles {_cycle + 1}, "
                  f"GPUs in use at the end {ext.gpus_in_use()}; binds per type "
                  f"{dict(Counter(n[0] for _, _, n in api.bindings))}")
        finally:
            watcher.stop()

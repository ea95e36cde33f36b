"""Kubernetes scheduler-extender endpoints, fed payloads in kube-scheduler's extender shapes
(``k8s.io/kube-scheduler/extender/v1``: ExtenderArgs, ExtenderBindingArgs) through the FastAPI router."""

from __future__ import annotations

from typing import Any

import pytest

from dltsched.engine.app.adapters.k8s import K8sExtender, k8s_router, node_info, pod_gpus, pod_job_spec
from dltsched.engine.domain.errors import ValidationError

fastapi = pytest.importorskip("fastapi")
testclient = pytest.importorskip("fastapi.testclient")


def node(name: str, gpu_type: str | None, gpus: int) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name} | ({"dltsched.io/gpu-type": gpu_type} if gpu_type else {})
    return {"kind": "Node", "apiVersion": "v1", "metadata": {"name": name, "labels": labels},
            "status": {"capacity": {"cpu": "32", "nvidia.com/gpu": str(gpus)},
                       "allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": str(gpus)}}}


def pod(uid: str, gpus: int, annotated: bool = True, **notes: str) -> dict[str, Any]:
    ann = {"dltsched.io/model": "resnet50", "dltsched.io/batch": "64",
           "dltsched.io/iters": "5000"} if annotated else {}
    resources = {"limits": {"nvidia.com/gpu": str(gpus)},
                 "requests": {"cpu": "2"}} if gpus else {"requests": {"cpu": "1"}}
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": f"pod-{uid}", "namespace": "train", "uid": uid, "annotations": ann | notes},
            "spec": {"schedulerName": "default-scheduler",
                     "containers": [{"name": "trainer", "image": "trainer:1", "resources": resources}]}}


NODES = {"kind": "NodeList", "apiVersion": "v1", "metadata": {},
         "items": [node("gpu-v100", "v100", 4), node("gpu-a100", "a100", 4), node("cpu-only", None, 0)]}


@pytest.fixture
def bound() -> list[tuple[str, str, str, str]]:
    return []


@pytest.fixture
def client(bound: list[tuple[str, str, str, str]]) -> Any:
    app = fastapi.FastAPI()
    app.include_router(k8s_router(K8sExtender(binder=lambda *args: bound.append(args))))
    return testclient.TestClient(app)


def test_pod_and_node_readers() -> None:
    assert pod_gpus(pod("a", 3)) == 3 and pod_gpus(pod("b", 0)) == 0
    spec = pod_job_spec(pod("a", 1, **{"dltsched.io/step-s": "0.2"}))
    assert spec is not None and (spec.model, spec.batch_size, spec.iterations,
                                 spec.step_time_s) == ("resnet50", 64,
                                                                                                     5000.0,
                                                       0.2)
    assert pod_job_spec(pod("c", 1, annotated=False)) is None
    assert node_info(node("n", "v100", 8)).num_gpus == 8
    with pytest.raises(ValidationError, match="dltsched.io/iters"):
        pod_job_spec(pod("d", 1, annotated=False,
                         **{"dltsched.io/model": "resnet50", "dltsched.io/batch": "8"}))


def test_filter_passes_the_plans_node_only(client: Any) -> None:
    """Both GPU nodes fit 2 GPUs; the plan puts the pod on one of them (resnet50 is faster on the A100): only
    that node passes, the other fails with the plan's reason, so kube-scheduler cannot send it elsewhere."""
    answer = client.post("/v1/k8s/filter", json={"Pod": pod("p1", 2), "Nodes": NODES})
    assert answer.status_code == 200
    body = answer.json()
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["gpu-a100"]
    assert "dltsched plan places this pod on gpu-a100" in body["FailedNodes"]["gpu-v100"]
    assert set(body["FailedAndUnresolvableNodes"]) == {"cpu-only"} and body["Error"] == ""
    # a pod without dltsched annotations is filtered by free GPUs alone
    body = client.post("/v1/k8s/filter", json={"Pod": pod("x", 2, annotated=False), "Nodes": NODES}).json()
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["gpu-v100", "gpu-a100"]


def test_prioritize_scores_the_plans_node_highest(client: Any) -> None:
    answer = client.post("/v1/k8s/prioritize", json={"Pod": pod("p1", 2), "Nodes": NODES}).json()
    scores = {h["Host"]: h["Score"] for h in answer}
    assert set(scores) == {"gpu-v100", "gpu-a100", "cpu-only"}
    assert all(0 <= s <= 10 for s in scores.values())
    assert scores["cpu-only"] == 0 and max(scores.values()) == 10
    assert sorted(scores.values()).count(10) == 1  # exactly one node is the plan's


def test_bind_takes_gpus_and_finished_frees_them(client: Any, bound: list[tuple[str, str, str, str]]) -> None:
    client.post("/v1/k8s/filter", json={"Pod": pod("p1", 4), "Nodes": NODES})
    args = {"PodName": "pod-p1", "PodNamespace": "train", "PodUID": "p1", "Node": "gpu-a100"}
    assert client.post("/v1/k8s/bind", json=args).json() == {"Error": ""}
    assert bound == [("pod-p1", "train", "p1", "gpu-a100")]
    # node cache capable: names only; the bound pod holds every GPU of gpu-a100
    body = client.post("/v1/k8s/filter",
                       json={"Pod": pod("p2", 1), "NodeNames": ["gpu-v100", "gpu-a100"]}).json()
    assert body["NodeNames"] == ["gpu-v100"] and "0 free" in body["FailedNodes"]["gpu-a100"]
    prio = client.post("/v1/k8s/prioritize",
                       json={"Pod": pod("p2", 1), "NodeNames": ["gpu-v100", "gpu-a100"]}).json()
    assert {h["Host"]: h["Score"] for h in prio}["gpu-a100"] == 0
    assert client.post("/v1/k8s/finished", json={"PodUID": "p1"}).json() == {"PodUID": "p1", "known": True}
    body = client.post("/v1/k8s/filter",
                       json={"Pod": pod("p2", 1), "NodeNames": ["gpu-v100", "gpu-a100"]}).json()
    assert body["NodeNames"] == ["gpu-a100"] and body["FailedNodes"] == {
        "gpu-v100": "dltsched plan places this pod on gpu-a100"}  # the A100 is free again: the plan takes it


def test_pod_without_gpu_passes_everywhere(client: Any) -> None:
    body = client.post("/v1/k8s/filter", json={"Pod": pod("web", 0, annotated=False), "Nodes": NODES}).json()
    assert len(body["Nodes"]["items"]) == 3 and body["FailedNodes"] == {}
    prio = client.post("/v1/k8s/prioritize",
                       json={"Pod": pod("web", 0, annotated=False), "Nodes": NODES}).json()
    assert len(prio) == 3 and all(0 <= h["Score"] <= 10 for h in prio)


def test_unknown_node(client: Any) -> None:
    body = client.post("/v1/k8s/filter", json={"Pod": pod("p1", 1), "NodeNames": ["ghost"]}).json()
    assert body["NodeNames"] == [] and "unknown node" in body["FailedNodes"]["ghost"]
    answer = client.post("/v1/k8s/bind", json={"PodName": "pod-p1", "PodNamespace": "train", "PodUID": "p1",
                                                "Node": "ghost"})
    assert answer.status_code == 200 and "unknown" in answer.json()["Error"]


@pytest.mark.parametrize(("path", "body", "status", "says"), [
    ("/v1/k8s/filter", [1, 2], 422, "JSON object"),
    ("/v1/k8s/filter", {"Nodes": NODES}, 400, "ExtenderArgs.Pod"),
    ("/v1/k8s/filter", {"Pod": pod("p", 1)}, 400, "NodeNames"),
    ("/v1/k8s/prioritize", {"Pod": pod("p", 1, **{"dltsched.io/batch": "many"}), "Nodes": NODES}, 400,
     "batch"),
    ("/v1/k8s/filter", {"Pod": pod("p", 1), "Nodes": {"items": [{"metadata": {}}]}}, 400, "metadata.name"),
    ("/v1/k8s/bind", {"PodName": "x", "PodNamespace": "train", "Node": "gpu-v100"}, 400, "PodUID"),
    ("/v1/k8s/finished", {}, 400, "PodUID"),
])
def test_malformed_bodies_answer_4xx(client: Any, path: str, body: Any, status: int, says: str) -> None:
    answer = client.post(path, json=body)
    assert answer.status_code == status and says in answer.text


def test_not_json_is_422(client: Any) -> None:
    answer = client.post("/v1/k8s/filter", content=b"{not json", headers={"content-type": "application/json"})
    assert answer.status_code == 422


def test_bind_without_binder_or_with_a_failing_one_reports_error() -> None:
    ext = K8sExtender()
    ext.filter({"pod": pod("p1", 1), "nodes": NODES})  # lower-case keys, as Go's decoder accepts
    result = ext.bind({"PodName": "pod-p1", "PodNamespace": "train", "PodUID": "p1", "Node": "gpu-v100"})
    assert "no binder" in result["Error"]
    assert ext.free_gpus("gpu-v100") == 4  # nothing recorded when nothing was bound

    def refuse(*_: str) -> None:
        raise RuntimeError("403 Forbidden")

    ext.binder = refuse
    result = ext.bind({"PodName": "pod-p1", "PodNamespace": "train", "PodUID": "p1", "Node": "gpu-v100"})
    assert "403 Forbidden" in result["Error"] and ext.free_gpus("gpu-v100") == 4


def test_service_serves_the_extender_endpoints() -> None:
    """The service mounts the extender router: its error handlers answer bad bodies as 400."""
    from dltsched.engine.app.service.server import create_app

    app = create_app()
    client = testclient.TestClient(app)
    answer = client.post("/v1/k8s/filter", content=b"{not json", headers={"content-type": "application/json"})
    assert answer.status_code == 400
    answer = client.post("/v1/k8s/filter", json={"Nodes": NODES})
    assert answer.status_code == 400 and "ExtenderArgs.Pod" in answer.text
    assert client.post("/v1/k8s/filter", json={"Pod": pod("p1", 1), "Nodes": NODES}).status_code == 200


def test_pod_that_can_never_fit_is_unresolvable_with_the_reason() -> None:
    """gpt2 at batch 512 needs more memory than any GPU here: not 'wait' but 'never', so kube-scheduler
    does not retry it on every change."""
    ext = K8sExtender()
    big = pod("huge", 1, **{"dltsched.io/model": "gpt2", "dltsched.io/batch": "512"})
    body = ext.filter({"Pod": big, "Nodes": NODES})
    assert body["Nodes"]["items"] == [] and body["FailedNodes"] == {}
    assert "can never run" in body["FailedAndUnresolvableNodes"]["gpu-a100"]
    assert "memory" in body["FailedAndUnresolvableNodes"]["gpu-v100"]


def test_plan_makes_a_pod_wait_with_the_reason() -> None:
    """One A100 node with 2 GPUs, and two pending pods of 2 GPUs: a short one seen first and a long one. The
    plan (shortest predicted time first) gives the GPUs to the short one, so the long one's filter fails every
    node with the reason, and passes once the short one is bound and done."""
    ext = K8sExtender(binder=lambda *a: None)
    nodes = {"items": [node("a", "a100", 2)]}
    short = pod("short", 2, **{"dltsched.io/iters": "100"})
    long_ = pod("long", 2, **{"dltsched.io/iters": "100000"})
    assert ext.filter({"Pod": short, "Nodes": nodes})["Nodes"]["items"]  # seen first, would run
    body = ext.filter({"Pod": long_, "Nodes": nodes})
    assert body["Nodes"]["items"] == [] and "the pod waits" in body["FailedNodes"]["a"]
    assert "pod-short" in body["FailedNodes"]["a"]
    assert ext.bind({"PodName": "pod-short", "PodNamespace": "train", "PodUID": "short",
                     "Node": "a"}) == {"Error": ""}
    assert ext.filter({"Pod": long_, "Nodes": nodes})["FailedNodes"]["a"] == "pod needs 2 GPUs; 0 free"
    ext.finish("short")
    assert [n["metadata"]["name"]
            for n in ext.filter({"Pod": long_, "Nodes": nodes})["Nodes"]["items"]] == ["a"]

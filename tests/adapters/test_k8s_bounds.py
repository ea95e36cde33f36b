"""The extender under hostile or broken input: every malformed body is a 400 naming the field, every size over
a limit a 413 naming the limit, remembered state stays bounded, and GPU product labels map to catalog
types (an unknown one is named, never a silent default)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dltsched.engine.app.adapters.gpu_names import catalog_gpu_type
from dltsched.engine.app.adapters.k8s import (
    ExtenderLimits,
    ExtenderSettings,
    K8sExtender,
    LimitExceeded,
    node_info,
    quantity,
)
from dltsched.engine.app.service.k8s import K8sServing
from dltsched.engine.domain.errors import ValidationError

fastapi = pytest.importorskip("fastapi")
testclient = pytest.importorskip("fastapi.testclient")


def node(name: str, gpus: Any = "4", product: str = "Tesla-V100-SXM2-16GB") -> dict[str, Any]:
    return {"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
            "status": {"allocatable": {"cpu": "32", "nvidia.com/gpu": gpus}}}


def pod(uid: str, gpus: Any = "1", **notes: Any) -> dict[str, Any]:
    ann = {"dltsched.io/model": "resnet50", "dltsched.io/batch": "64", "dltsched.io/iters": "500"} | notes
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": f"pod-{uid}", "namespace": "t", "uid": uid,
                                                            "annotations": ann},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}


@pytest.fixture(scope="module")
def client() -> Any:
    app = fastapi.FastAPI()
    from dltsched.engine.app.service.k8s import K8sRoutes

    ext = K8sExtender(ExtenderSettings(backend="greedy", limits=ExtenderLimits(max_pods=50, max_nodes=100)))
    app.add_middleware(K8sRoutes, serving=K8sServing(ext, max_body_bytes=2_000_000, max_json_values=50_000))
    app.state.ext = ext
    return testclient.TestClient(app)


def args(p: Any = None, nodes: Any = None) -> dict[str, Any]:
    return {"Pod": p if p is not None else pod("u"),
            "Nodes": {"items": nodes if nodes is not None else [node("n1")]}}


def _with(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(base)
    keys = path.split("/")
    target = out
    for k in keys[:-1]:
        target = target[int(k)] if isinstance(target, list) else target[k]
    target[keys[-1] if not isinstance(target, list) else int(keys[-1])] = value
    return out


MALFORMED = [
    ("labels as a list", args(nodes=[_with(node("n1"), "metadata/labels", ["a", "b"])]), "metadata.labels"),
    ("labels as a string", args(nodes=[_with(node("n1"), "metadata/labels", "gpu=yes")]), "metadata.labels"),
    ("allocatable as a list", args(nodes=[_with(node("n1"), "status/allocatable", [4])]),
     "status.allocatable"),
    ("allocatable as a string", args(nodes=[_with(node("n1"), "status/allocatable", "4")]),
     "status.allocatable"),
    ("GPU quantity nan", args(nodes=[node("n1", "nan")]), "allocatable['nvidia.com/gpu']"),
    ("GPU quantity inf", args(nodes=[node("n1", "inf")]), "allocatable['nvidia.com/gpu']"),
    ("GPU quantity 1e400", args(nodes=[node("n1", "1e400")]), "allocatable['nvidia.com/gpu']"),
    ("GPU quantity 1.5", args(nodes=[node("n1", "1.5")]), "allocatable['nvidia.com/gpu']"),
    ("GPU quantity -2", args(nodes=[node("n1", -2)]), "allocatable['nvidia.com/gpu']"),
    ("GPU quantity an object", args(nodes=[node("n1", {"v": 1})]), "allocatable['nvidia.com/gpu']"),
    ("pod GPUs nan", args(pod("u", "nan")), "containers[0].resources.limits['nvidia.com/gpu']"),
    ("containers: 5", args(_with(pod("u"), "spec/containers", 5)), "Pod.spec.containers"),
    ("a container that is a string", args(_with(pod("u"), "spec/containers", ["x"])),
     "Pod.spec.containers[0]"),
    ("annotations as a list", args(_with(pod("u"), "metadata/annotations", ["dltsched.io/model"])),
     "Pod.metadata.annotations"),
    ("batch annotation inf", args(pod("u", **{"dltsched.io/batch": "inf"})), "dltsched.io/batch"),
    ("batch annotation 1e400", args(pod("u", **{"dltsched.io/batch": "1e400"})), "dltsched.io/batch"),
    ("iters annotation nan", args(pod("u", **{"dltsched.io/iters": "nan"})), "dltsched.io/iters"),
    ("annotation a number", args(pod("u", **{"dltsched.io/iters": 5})), "dltsched.io/iters"),
    ("metadata a list", args(_with(pod("u"), "metadata", [])), "Pod.metadata"),
    ("node a string", args(nodes=["n1"]), "ExtenderArgs.Nodes.items[0]"),
    ("Nodes a list", {"Pod": pod("u"), "Nodes": [node("n1")]}, "ExtenderArgs.Nodes"),
    ("NodeNames with a number", {"Pod": pod("u"), "NodeNames": ["n1", 7]}, "ExtenderArgs.NodeNames[1]"),
    ("node name too long", args(nodes=[node("n" * 300)]), "metadata.name"),
    ("product label not a string",
     args(nodes=[_with(node("n1"), "metadata/labels", {"nvidia.com/gpu.product": 1})]),
     "labels['nvidia.com/gpu.product']"),
]


@pytest.mark.parametrize(("case", "body", "field"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_bodies_are_400_naming_the_field(client: Any, case: str, body: dict[str, Any],
                                                   field: str) -> None:
    answer = client.post("/v1/k8s/filter", json=body)
    assert answer.status_code == 400, (case, answer.text)
    assert field in answer.json()["detail"] and answer.json()["errors"][0]["field"] == "body"


@pytest.mark.parametrize("verb", ["prioritize", "bind"])
def test_every_verb_answers_400_not_500(client: Any, verb: str) -> None:
    bad = {"PodName": ["x"], "PodNamespace": "t", "PodUID": "u", "Node": "n1"} if verb == "bind" else \
        args(_with(pod("u"), "spec/containers", 5))
    answer = client.post(f"/v1/k8s/{verb}", json=bad)
    assert answer.status_code == 400 and ("PodName" in answer.text or "containers" in answer.text)


def test_limits_are_413_naming_the_limit(client: Any) -> None:
    huge = client.post("/v1/k8s/filter", json=args(nodes=[node("big", "100000000")]))
    assert huge.status_code == 413 and "max_gpus_per_node" in huge.json()["detail"]
    many = client.post("/v1/k8s/filter", json=args(nodes=[node(f"n{i}", "1") for i in range(101)]))
    assert many.status_code == 413 and "at most 100" in many.json()["detail"]
    too_big = client.post("/v1/k8s/filter", content=b"[" + b"0," * 1_100_000 + b"0]",
                          headers={"content-type": "application/json"})
    assert too_big.status_code == 413 and "max_body_bytes" in too_big.json()["detail"]
    values = client.post("/v1/k8s/filter", content=b"[" + b"0," * 60_000 + b"0]",
                         headers={"content-type": "application/json"})
    assert values.status_code == 413 and "max_json_values" in values.json()["detail"]
    containers = client.post("/v1/k8s/filter", json=args(_with(pod("u"), "spec/containers",
                                                               [{"name": str(i)} for i in range(65)])))
    assert containers.status_code == 413 and "at most 64" in containers.json()["detail"]
    assert client.post("/v1/k8s/filter", content=b"{not json", headers={"content-type": "application/json"}
                       ).status_code == 400


def test_remembered_pods_are_a_bounded_lru_cleared_when_pods_end(client: Any) -> None:
    ext: K8sExtender = client.app.state.ext
    for i in range(120):
        assert client.post("/v1/k8s/filter", json=args(pod(f"lru{i}"))).status_code == 200
    assert len(ext.pods) == 50 and "lru119" in ext.pods and "lru0" not in ext.pods
    assert client.post("/v1/k8s/finished", json={"PodUID": "lru119"}).json()["known"]
    assert "lru119" not in ext.pods
    client.post("/v1/k8s/filter", json=args(pod("lru119")))
    assert "lru119" not in ext.pods  # an ended pod does not come back


def test_quantity_and_node_reader() -> None:
    assert quantity("8", "x", 16) == 8 and quantity(3, "x", 16) == 3 and quantity(2.0, "x", 16) == 2
    with pytest.raises(LimitExceeded, match="at most 16"):
        quantity("17", "x", 16)
    with pytest.raises(ValidationError, match="digits only"):
        quantity("4k", "x", 16)
    with pytest.raises(ValidationError, match="whole number"):
        quantity(True, "x", 16)


@pytest.mark.parametrize(("product", "expected"), [
    ("NVIDIA-A100-SXM4-80GB", "a100-80gb"), ("NVIDIA-A100-SXM4-40GB", "a100-40gb"),
    ("NVIDIA-A100-PCIE-40GB", "a100-pcie-40gb"), ("NVIDIA-A100-80GB-PCIe", "a100-pcie-80gb"),
    ("NVIDIA-H100-80GB-HBM3", "h100"), ("NVIDIA-H100-PCIe", "h100-pcie"), ("NVIDIA-H100-NVL", "h100-pcie"),
    ("NVIDIA-H200", "h200"), ("NVIDIA-H200-141GB-HBM3e", "h200"), ("NVIDIA-L4", "l4"), ("Tesla-T4", "t4"),
    ("Tesla-V100-SXM2-16GB", "v100"), ("Tesla-V100-SXM2-32GB", "v100-32gb"),
                                                   ("Tesla-V100-PCIE-16GB", "v100-pcie"),
    ("Tesla-V100-PCIE-32GB", "v100-pcie-32gb"), ("NVIDIA-A100-SXM4-80GB-SHARED", "a100-80gb"),
    ("NVIDIA-A10G", "a10"), ("a100", "a100-40gb"),
])
def test_gpu_product_labels_map_to_catalog_types(product: str, expected: str) -> None:
    assert catalog_gpu_type(product) == expected
    assert node_info(node("n", "2", product)).gpu_type == expected


@pytest.mark.parametrize("product",
                         ["NVIDIA-L40S", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "NVIDIA-A100-SXM4-64GB"])
def test_unknown_product_is_named_never_a_default(product: str) -> None:
    info = node_info(node("n", "2", product), default_gpu_type="v100")
    assert info.gpu_type is None and "nvidia.com/gpu.product" in (info.problem
                                                                  or "") and product in info.problem
    ext = K8sExtender()
    body = ext.filter({"Pod": pod("p"), "Nodes": {"items": [node("n", "2", product), node("ok", "2")]}})
    assert "nvidia.com/gpu.product" in body["FailedAndUnresolvableNodes"]["n"]
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["ok"]


def test_own_label_wins_and_unlabelled_gpu_node_needs_a_default() -> None:
    labelled = node("n", "2", "NVIDIA-L40S")
    labelled["metadata"]["labels"]["dltsched.io/gpu-type"] = "a40"
    assert node_info(labelled).gpu_type == "a40"
    bare = node("n", "2")
    bare["metadata"]["labels"] = {}
    assert "no nvidia.com/gpu.product" in (node_info(bare).problem or "")
    assert node_info(bare, default_gpu_type="t4").gpu_type == "t4"
    with pytest.raises(ValidationError, match="default_gpu_type"):
        ExtenderSettings(default_gpu_type="quantum-9000")


def test_refusals_are_counted_in_the_services_metrics() -> None:
    from dltsched.engine.app.service.server import create_app

    app = create_app(k8s=K8sServing(K8sExtender(), max_body_bytes=1000))
    http = testclient.TestClient(app)
    assert http.post("/v1/k8s/filter", content=b"[" + b"0," * 600 + b"0]",
                     headers={"content-type": "application/json"}).status_code == 413
    assert http.post("/v1/k8s/filter", json={"Pod": pod("u", "nan"), "NodeNames": []}).status_code == 400
    metrics = http.get("/metrics").text
    assert 'path="/v1/k8s/filter",status="413"} 1.0' in metrics
    assert 'path="/v1/k8s/filter",status="400"} 1.0' in metrics

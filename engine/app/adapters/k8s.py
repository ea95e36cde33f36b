"""Kubernetes scheduler-extender endpoints: kube-scheduler asks dltsched which nodes fit a GPU pod
(filter), how good each is (prioritize), and lets it bind the pod (bind).

The JSON is kube-scheduler's extender API (``k8s.io/kube-scheduler/extender/v1``): ``ExtenderArgs``
``{"Pod", "Nodes" | "NodeNames"}`` -> ``ExtenderFilterResult`` ``{"Nodes" | "NodeNames", "FailedNodes",
"FailedAndUnresolvableNodes", "Error"}``; -> ``HostPriorityList`` ``[{"Host", "Score"}]`` (0..10);
``ExtenderBindingArgs`` ``{"PodName", "PodNamespace", "PodUID", "Node"}`` -> ``ExtenderBindingResult``
``{"Error"}``. Keys are matched case-insensitively, as Go's decoder does.

A pod's GPUs are its containers' ``nvidia.com/gpu`` limits (or requests); its job from annotations
``dltsched.io/model``, ``dltsched.io/batch``, ``dltsched.io/iters`` and optionally ``dltsched.io/step-s``
(its measured seconds per step). A node's GPUs are its allocatable ``nvidia.com/gpu``, their type from the
label ``dltsched.io/gpu-type`` (else ``nvidia.com/gpu.product``, else the extender's default).

State between calls (:class:`K8sExtender`): the nodes last seen, the pods bound through ``bind`` (their
GPUs count as taken) and the pods reported finished (``POST /v1/k8s/finished``), whose GPUs are free again.
Prioritize solves a round with :func:`~dltsched.engine.app.api.solve_round` (bound pods running where they
are, the pod queued): the node the plan picks scores 10, other fitting nodes by predicted speed.
Binding calls ``binder`` (e.g. :func:`api_server_binder`); without one, bind records the placement and
answers an error, so configure ``bindVerb`` only with a binder.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dltsched.engine.app.adapters.slurm_parse import JobSpec
from dltsched.engine.domain.errors import ValidationError

log = logging.getLogger(__name__)

GPU_RESOURCE = "nvidia.com/gpu"
ANNOTATION = "dltsched.io/"
MAX_SCORE = 10


def _get(obj: Mapping[str, Any] | None, key: str, default: Any = None) -> Any:
    """``obj[key]`` matched case-insensitively (Go's JSON decoding), else ``default``."""
    if not isinstance(obj, Mapping):
        return default
    if key in obj:
        return obj[key]
    low = key.lower()
    return next((v for k, v in obj.items() if isinstance(k, str) and k.lower() == low), default)


def _quantity(value: Any, path: str) -> int:
    try:
        number = float(str(value))
    except ValueError:
        raise ValidationError(path, f"'{value}' not understood; must be a whole number of GPUs") from None
    if number < 0 or number != int(number):
        raise ValidationError(path, f"'{value}' not understood; must be a whole number of GPUs >= 0")
    return int(number)


def pod_gpus(pod: Mapping[str, Any]) -> int:
    """GPUs a pod asks for: the sum over its containers of ``nvidia.com/gpu`` limits (else requests)."""
    total = 0
    containers = _get(_get(pod, "spec", {}), "containers", []) or []
    for i, c in enumerate(containers):
        res = _get(c, "resources", {}) or {}
        value = _get(_get(res, "limits", {}) or {}, GPU_RESOURCE)
        value = _get(_get(res, "requests", {}) or {}, GPU_RESOURCE) if value is None else value
        total += _quantity(value, f"Pod.spec.containers[{i}].resources.{GPU_RESOURCE}") if value is not None else 0
    return total


def pod_job_spec(pod: Mapping[str, Any]) -> JobSpec | None:
    """The job a pod's ``dltsched.io/*`` annotations describe; ``None`` when it has none."""
    notes = _get(_get(pod, "metadata", {}), "annotations", {}) or {}
    mine = {k[len(ANNOTATION):]: str(v) for k, v in notes.items() if k.startswith(ANNOTATION)}
    if not mine:
        return None
    for key in ("model", "batch", "iters"):
        if key not in mine:
            raise ValidationError(f"Pod.metadata.annotations.{ANNOTATION}{key}", "missing; a dltsched pod needs "
                                  "model, batch and iters annotations")

    def number(key: str) -> float:
        try:
            value = float(mine[key])
        except ValueError:
            raise ValidationError(f"Pod.metadata.annotations.{ANNOTATION}{key}",
                                  f"'{mine[key]}' not understood; must be a number > 0") from None
        if not value > 0:
            raise ValidationError(f"Pod.metadata.annotations.{ANNOTATION}{key}", f"{mine[key]} must be > 0")
        return value

    return JobSpec(mine["model"], int(number("batch")), number("iters"),
                   number("step-s") if "step-s" in mine else None, mine.get("gpu-type"))


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    gpu_type: str | None
    num_gpus: int


def node_info(node: Mapping[str, Any]) -> NodeInfo:
    """Name, GPU type and allocatable GPUs of a ``v1.Node``."""
    meta = _get(node, "metadata", {}) or {}
    name = _get(meta, "name")
    if not isinstance(name, str) or not name:
        raise ValidationError("Nodes.items[].metadata.name", "missing; every node needs a name")
    labels = _get(meta, "labels", {}) or {}
    gpu_type = labels.get(ANNOTATION + "gpu-type") or labels.get("nvidia.com/gpu.product")
    alloc = _get(_get(node, "status", {}) or {}, "allocatable", {}) or {}
    count = _quantity(alloc.get(GPU_RESOURCE, 0), f"node {name}: status.allocatable.{GPU_RESOURCE}")
    return NodeInfo(name, gpu_type, count)


@dataclass
class PodRecord:
    uid: str
    name: str
    namespace: str
    gpus: int
    spec: JobSpec | None
    node: str | None = None
    bound_at: float | None = None


@dataclass(frozen=True, slots=True)
class ExtenderSettings:
    default_gpu_type: str = "v100"
    backend: str = "cpsat"
    objective: str = "jct"
    time_limit_s: float = 2.0
    predictors: str = "default"


class K8sExtender:
    """Extender state and the three verbs, on plain dicts (the router only adds HTTP)."""

    def __init__(self, settings: ExtenderSettings | None = None,
                 binder: Callable[[str, str, str, str], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings, self.binder, self.clock = settings or ExtenderSettings(), binder, clock
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodRecord] = {}
        self.finished: set[str] = set()
        self.lock = threading.Lock()

    # --- reading ExtenderArgs
    def _args(self, args: Mapping[str, Any]) -> tuple[PodRecord, list[str], list[Any] | None]:
        if not isinstance(args, Mapping):
            raise ValidationError("ExtenderArgs", "not understood; must be a JSON object")
        pod = _get(args, "Pod")
        if not isinstance(pod, Mapping):
            raise ValidationError("ExtenderArgs.Pod", "missing; kube-scheduler sends the pod being scheduled")
        meta = _get(pod, "metadata", {}) or {}
        uid = str(_get(meta, "uid") or f"{_get(meta, 'namespace', 'default')}/{_get(meta, 'name', '')}")
        record = PodRecord(uid, str(_get(meta, "name", "")), str(_get(meta, "namespace", "default")),
                           pod_gpus(pod), pod_job_spec(pod))
        known = self.pods.get(uid)
        if known is None or known.node is None:
            self.pods[uid] = record
        else:
            record = known
        node_list = _get(args, "Nodes")
        items: list[Any] | None = None
        if node_list is not None:
            items = _get(node_list, "items", []) or []
            if not isinstance(items, list):
                raise ValidationError("ExtenderArgs.Nodes.items", "not understood; must be a list of nodes")
            infos = [node_info(n) for n in items]
            self.nodes.update({i.name: i for i in infos})
            names = [i.name for i in infos]
        else:
            names = _get(args, "NodeNames")
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ValidationError("ExtenderArgs", "needs Nodes (a NodeList) or NodeNames (a list of names)")
        return record, names, items

    def free_gpus(self, node: str) -> int:
        taken = sum(p.gpus for p in self.pods.values() if p.node == node and p.uid not in self.finished)
        return self.nodes[node].num_gpus - taken

    # --- the verbs
    def filter(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``ExtenderArgs`` -> ``ExtenderFilterResult``: nodes with enough free GPUs pass."""
        with self.lock:
            pod, names, items = self._args(args)
            failed, unresolvable, passed = {}, {}, []
            for name in names:
                if name not in self.nodes:
                    failed[name] = "unknown node: dltsched has not seen it; send Nodes (nodeCacheCapable: false)"
                elif pod.gpus and self.nodes[name].num_gpus < pod.gpus:
                    unresolvable[name] = f"pod needs {pod.gpus} GPUs; node has {self.nodes[name].num_gpus}"
                elif pod.gpus and self.free_gpus(name) < pod.gpus:
                    failed[name] = f"pod needs {pod.gpus} GPUs; {self.free_gpus(name)} free"
                else:
                    passed.append(name)
            result: dict[str, Any] = {"FailedNodes": failed, "FailedAndUnresolvableNodes": unresolvable, "Error": ""}
            if items is not None:
                keep = set(passed)
                result["Nodes"] = {"kind": "NodeList", "apiVersion": "v1",
                                   "items": [n for n in items if node_info(n).name in keep]}
            else:
                result["NodeNames"] = passed
            return result

    def prioritize(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        """``ExtenderArgs`` -> ``HostPriorityList``: the plan's node 10; others by predicted speed (0..9);
        a pod without GPUs or dltsched annotations: best fit (fewest GPUs left over)."""
        with self.lock:
            pod, names, _ = self._args(args)
            fits = [n for n in names if n in self.nodes and self.free_gpus(n) >= pod.gpus]
            scores = dict.fromkeys(names, 0)
            if not fits:
                return [{"Host": n, "Score": 0} for n in names]
            if pod.gpus == 0 or pod.spec is None:
                spare = {n: self.free_gpus(n) - pod.gpus for n in fits}
                most = max(spare.values()) or 1
                scores |= {n: round(MAX_SCORE * (1 - spare[n] / (most + 1))) for n in fits}
            else:
                chosen, speed = self._decide(pod, fits)
                top = max(speed.values()) or 1.0
                scores |= {n: min(MAX_SCORE - 1, round((MAX_SCORE - 1) * speed[n] / top)) for n in fits}
                if chosen is not None:
                    scores[chosen] = MAX_SCORE
            return [{"Host": n, "Score": int(scores[n])} for n in names]

    def bind(self, args: Mapping[str, Any]) -> dict[str, str]:
        """``ExtenderBindingArgs`` -> ``ExtenderBindingResult``: record the placement, then bind via ``binder``."""
        if not isinstance(args, Mapping):
            raise ValidationError("ExtenderBindingArgs", "not understood; must be a JSON object")
        values = {k: _get(args, k) for k in ("PodName", "PodNamespace", "PodUID", "Node")}
        for key, value in values.items():
            if not isinstance(value, str) or (not value and key != "PodNamespace"):
                must = "a string" if key == "PodNamespace" else "a non-empty string"
                raise ValidationError(f"ExtenderBindingArgs.{key}", f"missing; must be {must}")
        name, namespace, uid, node = (str(values[k]) for k in ("PodName", "PodNamespace", "PodUID", "Node"))
        with self.lock:
            if node not in self.nodes:
                return {"Error": f"node '{node}' unknown to dltsched; it has not been offered in a filter call"}
            pod = self.pods.get(uid) or PodRecord(uid, name, namespace or "default", 0, None)
            if pod.gpus > self.free_gpus(node) and pod.node != node:
                return {"Error": f"node '{node}' has {self.free_gpus(node)} free GPUs; pod needs {pod.gpus}"}
            if self.binder is None:
                return {"Error": "dltsched has no binder configured; leave bindVerb out of the extender config "
                                 "or start the extender with a binder"}
            try:
                self.binder(name, namespace or "default", uid, node)
            except Exception as err:  # the API server's answer, passed back to kube-scheduler
                return {"Error": f"binding {namespace}/{name} to {node} failed: {err}"}
            pod.node, pod.bound_at = node, self.clock()
            self.pods[uid] = pod
            return {"Error": ""}

    def finish(self, uid: str) -> bool:
        """Mark a bound pod finished (its GPUs are free again); ``False`` when the pod is unknown."""
        with self.lock:
            pod = self.pods.pop(uid, None)
            if pod is None:
                return False
            self.finished.add(uid)
            return True

    # --- the one place that meets dltsched's domain types
    def _decide(self, pod: PodRecord, fits: Sequence[str]) -> tuple[str | None, dict[str, float]]:
        """Solve a round over the known nodes: bound pods run where they are, ``pod`` waits. Returns the
        node the plan puts ``pod`` on (``None``: not placed now) and its predicted speed on each fitting node."""
        from dltsched.engine.app import api
        from dltsched.engine.domain.model import (
            Assignment,
            Cluster,
            ClusterState,
            Job,
            JobState,
            Node,
            resolve_gpu_type,
        )

        def gpu_type(info: NodeInfo) -> str:
            try:
                return resolve_gpu_type(info.gpu_type or "").id
            except ValueError:
                return self.settings.default_gpu_type

        infos = [i for i in self.nodes.values() if i.num_gpus > 0]
        cluster = Cluster(tuple(Node(i.name, gpu_type(i), i.num_gpus) for i in infos))
        index = {i.name: k for k, i in enumerate(infos)}
        first = {name: cluster.node_first_gpu[k] for name, k in index.items()}
        preds = api.load_predictors(self.settings.predictors)
        assert pod.spec is not None
        job = Job(pod.uid, pod.spec.model, pod.spec.batch_size, pod.spec.iterations, num_gpus=pod.gpus)
        states, used = [], dict.fromkeys(first, 0)
        for other in self.pods.values():
            if other.node in first and other.uid not in self.finished and other.spec is not None and other.gpus:
                gpus = tuple(range(first[other.node] + used[other.node], first[other.node] + used[other.node] + other.gpus))
                used[other.node] += other.gpus
                j = Job(other.uid, other.spec.model, other.spec.batch_size, other.spec.iterations, num_gpus=other.gpus)
                states.append(JobState(j, j.total_iterations, assignment=Assignment(other.uid, gpus)))
        busy = {first[n] + k for n, u in used.items() for k in range(u)}
        foreign = {first[p.node] + used[p.node] + k for p in self.pods.values()  # bound pods dltsched cannot model
                   if p.node in first and p.uid not in self.finished and p.spec is None for k in range(p.gpus)}
        unfit = {g for name, k in index.items() if name not in fits for g in cluster.node_gpus(k)}
        state = ClusterState(self.clock(), cluster, (*states, JobState(job, job.total_iterations)),
                             down_gpus=frozenset((foreign | unfit) - busy))
        plan = api.solve_round(state, api.SolveConfig(backend=self.settings.backend, objective=self.settings.objective,
                                                      max_jobs_per_gpu=1, freeze_levels=(0,),
                                                      time_limit_s=self.settings.time_limit_s), predictors=preds)
        speed = {}
        for n in fits:
            step = preds.step_time.step_time_s(job, cluster.nodes[index[n]].gpu_type)
            speed[n] = 1.0 / step if step > 0 else 0.0
        placed = plan.by_job().get(pod.uid)
        if placed is None:
            return None, speed
        node_index = cluster.gpu_node[placed.gpus[0]]
        return cluster.nodes[node_index].id, speed


def api_server_binder(base_url: str, token_file: str | Path, ca_file: str | Path | bool = True,
                      timeout_s: float = 10.0) -> Callable[[str, str, str, str], None]:
    """A binder that POSTs a ``v1.Binding`` to the Kubernetes API server at ``base_url`` with the bearer token
    read from ``token_file`` (e.g. the extender pod's own service account)."""
    import httpx

    def bind(name: str, namespace: str, uid: str, node: str) -> None:
        token = Path(token_file).read_text().strip()
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace, "uid": uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        answer = httpx.post(f"{base_url}/api/v1/namespaces/{namespace}/pods/{name}/binding", json=body,
                            headers={"Authorization": f"Bearer {token}"}, verify=str(ca_file) if
                            isinstance(ca_file, Path | str) else ca_file, timeout=timeout_s)
        answer.raise_for_status()

    return bind


def k8s_router(extender: K8sExtender | None = None) -> Any:
    """A FastAPI ``APIRouter`` with ``POST /v1/k8s/filter``, ``/prioritize``, ``/bind`` and ``/finished``.
    Bad bodies answer 422 (not JSON, not an object) or 400 (a field that is wrong, named)."""
    from fastapi import APIRouter, Body, HTTPException

    ext = extender or K8sExtender()
    router = APIRouter(prefix="/v1/k8s", tags=["kubernetes"])

    def call(fn: Callable[[Any], Any], body: Any) -> Any:
        if not isinstance(body, dict):
            raise HTTPException(422, "body: not understood; must be a JSON object")
        try:
            return fn(body)
        except ValidationError as err:
            raise HTTPException(400, str(err)) from None

    @router.post("/filter")
    def filter_(body: Any = Body(...)) -> dict[str, Any]:  # noqa: B008 (FastAPI's way)
        return call(ext.filter, body)  # type: ignore[no-any-return]

    @router.post("/prioritize")
    def prioritize(body: Any = Body(...)) -> list[dict[str, Any]]:  # noqa: B008
        return call(ext.prioritize, body)  # type: ignore[no-any-return]

    @router.post("/bind")
    def bind(body: Any = Body(...)) -> dict[str, str]:  # noqa: B008
        return call(ext.bind, body)  # type: ignore[no-any-return]

    @router.post("/finished")
    def finished(body: Any = Body(...)) -> dict[str, Any]:  # noqa: B008
        uid = _get(body, "PodUID") if isinstance(body, dict) else None
        if not isinstance(uid, str) or not uid:
            raise HTTPException(400, "PodUID: missing; must be the finished pod's uid")
        return {"PodUID": uid, "known": ext.finish(uid)}

    router.extender = ext  # type: ignore[attr-defined]  # for callers that want the state
    return router

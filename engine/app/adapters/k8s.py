"""Kubernetes scheduler-extender: kube-scheduler asks dltsched which nodes a GPU pod may go to (filter), how
good each is (prioritize), and lets it bind the pod (bind).

The JSON is kube-scheduler's extender API (``k8s.io/kube-scheduler/extender/v1``): ``ExtenderArgs``
``{"Pod", "Nodes" | "NodeNames"}`` -> ``ExtenderFilterResult`` ``{"Nodes" | "NodeNames", "FailedNodes",
"FailedAndUnresolvableNodes", "Error"}``; -> ``HostPriorityList`` ``[{"Host", "Score"}]`` (0..10);
``ExtenderBindingArgs`` ``{"PodName", "PodNamespace", "PodUID", "Node"}`` -> ``ExtenderBindingResult``
``{"Error"}``. Keys are matched case-insensitively, as Go's decoder does.

A pod's GPUs are its containers' ``nvidia.com/gpu`` limits (or requests); its job from annotations
``dltsched.io/model``, ``dltsched.io/batch``, ``dltsched.io/iters`` and optionally ``dltsched.io/step-s``
(its measured seconds per step; it stands in for a model the catalogue does not know) and
``dltsched.io/gpu-type`` (the type it was measured on). A node's GPUs are its allocatable ``nvidia.com/gpu``;
their type comes from the label ``dltsched.io/gpu-type``, else NVIDIA GPU Feature Discovery's
``nvidia.com/gpu.product`` (``NVIDIA-A100-SXM4-80GB`` -> ``a100-80gb``, see :mod:`.gpu_names`), else the
extender's ``default_gpu_type`` when the operator set one. A product no catalog type matches makes the node
unresolvable for GPU pods, with the label named; it never silently becomes another type.

The plan. Filter solves a round over the pod's candidate nodes (those kube-scheduler offers that have the
GPUs, at most ``max_plan_nodes``; :meth:`K8sExtender.plan_for`): GPUs of bound pods are taken, and the
dltsched pods still pending (seen by the watch, or in a filter call within ``queue_ttl_s``; at most
``max_plan_pods``, oldest first) compete for the free ones. When the plan places the pod, only the plan's node
passes (the others fail with the reason, so kube-scheduler's own scores cannot send it elsewhere); when the
plan makes it wait, every node fails with the reason "dltsched plan: the pod waits ...", and kube-scheduler
retries it when the cluster changes. Pods without GPUs pass everywhere; GPU pods without annotations are
filtered by free GPUs only.

State. Nodes, and the pods bound (by ``bind`` or, with :mod:`.k8s_watch`, by anyone) hold their GPUs until
the pod ends (the watch sees it; ``POST /v1/k8s/finished`` reports it by hand). Everything remembered is
bounded (:class:`ExtenderLimits`): nodes and pods in LRU tables; a pod that ends leaves them at once. Every
request is bounded too: more nodes, GPUs or containers than the limits answer 413, and every field that is
malformed (a list for a map, a GPU quantity ``"nan"``, ``"inf"``, ``"1e400"``, a batch ``"inf"``) 400, both
naming the field.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dltsched.engine.app.adapters.gpu_names import catalog_gpu_type
from dltsched.engine.app.adapters.slurm_parse import JobSpec
from dltsched.engine.domain.errors import ValidationError

log = logging.getLogger(__name__)

GPU_RESOURCE = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
ANNOTATION = "dltsched.io/"
TYPE_LABEL = ANNOTATION + "gpu-type"
MAX_SCORE = 10
_NAME_CHARS = 253  # Kubernetes' longest object name (DNS subdomain)
_VALUE_CHARS = 256  # the longest label or annotation value dltsched reads


class LimitExceeded(ValidationError):
    """A request or the remembered state over one of :class:`ExtenderLimits` (answered 413)."""


@dataclass(frozen=True, slots=True)
class ExtenderLimits:
    """What one request may hold and what the extender remembers (each named in the error that enforces it).

    ``max_nodes``: nodes per NodeList or NodeNames, and nodes remembered; ``max_gpus_per_node``: a node's
    allocatable GPUs; ``max_gpus``: GPUs over all remembered nodes; ``max_pods``: pods remembered (LRU:
    pending ones go first, a pod that ends goes at once); ``max_containers``: containers per pod;
    ``max_plan_pods``: pending pods one plan weighs (the oldest first, the pod asked about always);
    ``max_plan_nodes``: candidate nodes one plan weighs (every GPU type in turn, most free GPUs first)."""

    max_nodes: int = 10_000
    max_gpus_per_node: int = 1024
    max_gpus: int = 65_536
    max_pods: int = 10_000
    max_containers: int = 64
    max_plan_pods: int = 64
    max_plan_nodes: int = 64

    def __post_init__(self) -> None:
        for name in ("max_nodes", "max_gpus_per_node", "max_gpus", "max_pods", "max_containers",
                     "max_plan_pods", "max_plan_nodes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(f"limits.{name}", f"{value!r} not understood; must be an integer >= 1")


# ----------------------------------------------------------------------------- reading kube-scheduler's JSON

def _get(obj: Any, key: str, default: Any = None) -> Any:
    """``obj[key]`` matched case-insensitively (Go's JSON decoding), else ``default``."""
    if not isinstance(obj, Mapping):
        return default
    if key in obj:
        return obj[key]
    low = key.lower()
    return next((v for k, v in obj.items() if isinstance(k, str) and k.lower() == low), default)


def _map(obj: Any, key: str, path: str) -> Mapping[str, Any]:
    """The object at ``obj[key]`` (``{}`` when absent or null); raises naming ``path`` when it is not one."""
    value = _get(obj, key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(path, f"{type(value).__name__} not understood; must be a JSON object (a map)")
    return value


def _name(value: Any, path: str, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise ValidationError(path, "missing; must be a non-empty string" if value in (None, "") else
                              f"{type(value).__name__} not understood; must be a string")
    if len(value) > _NAME_CHARS:
        raise ValidationError(path, f"{len(value)} characters; at most {_NAME_CHARS}")
    return value


def _label(labels: Mapping[str, Any], key: str, path: str) -> str | None:
    value = labels.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{path}['{key}']", f"{type(value).__name__} not understood; must be a string")
    if len(value) > _VALUE_CHARS:
        raise ValidationError(f"{path}['{key}']", f"{len(value)} characters; at most {_VALUE_CHARS}")
    return value


_WHOLE = re.compile(r"[0-9]{1,12}")


def quantity(value: Any, path: str, cap: int) -> int:
    """A whole GPU quantity (``4``, ``"4"``) in ``[0, cap]``; raises naming ``path`` for anything else
    (``"nan"``, ``"inf"``, ``"1e400"``, ``"1.5"``, a list) or :class:`LimitExceeded` over ``cap``."""
    if isinstance(value, bool) or not isinstance(value, int | str | float):
        raise ValidationError(path, f"{type(value).__name__} not understood; must be a whole number of GPUs")
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ValidationError(path, f"{value!r} not understood; must be a whole number of GPUs")
        value = int(value)
    if isinstance(value, str):
        text = value.strip()
        if not _WHOLE.fullmatch(text):
            shown = text[:40] + ("..." if len(text) > 40 else "")
            raise ValidationError(path,
                                  f"'{shown}' not understood; must be a whole number of GPUs (digits only)")
        value = int(text)
    if value < 0:
        raise ValidationError(path, f"{value} not understood; must be >= 0")
    if value > cap:
        raise LimitExceeded(path,
                            f"{value} GPUs; at most {cap} per node or pod (the extender's max_gpus_per_node)")
    return value


def pod_gpus(pod: Mapping[str, Any], limits: ExtenderLimits | None = None) -> int:
    """GPUs a pod asks for: the sum over its containers of ``nvidia.com/gpu`` limits (else requests)."""
    limits = limits or ExtenderLimits()
    containers = _get(_map(pod, "spec", "Pod.spec"), "containers")
    if containers is None:
        return 0
    if not isinstance(containers, list):
        raise ValidationError("Pod.spec.containers",
                              f"{type(containers).__name__} not understood; must be a list")
    if len(containers) > limits.max_containers:
        raise LimitExceeded("Pod.spec.containers",
                            f"{len(containers)} containers; at most {limits.max_containers}")
    total = 0
    for i, c in enumerate(containers):
        where = f"Pod.spec.containers[{i}]"
        if not isinstance(c, Mapping):
            raise ValidationError(where, f"{type(c).__name__} not understood; must be a JSON object")
        res = _map(c, "resources", f"{where}.resources")
        value = _map(res, "limits", f"{where}.resources.limits").get(GPU_RESOURCE)
        kind = "limits"
        if value is None:
            value, kind = _map(res, "requests", f"{where}.resources.requests").get(GPU_RESOURCE), "requests"
        if value is not None:
            total += quantity(value, f"{where}.resources.{kind}['{GPU_RESOURCE}']", limits.max_gpus_per_node)
    if total > limits.max_gpus_per_node:
        raise LimitExceeded("Pod.spec.containers", f"{total} GPUs in all; at most {limits.max_gpus_per_node}")
    return total


def _annotation_number(mine: Mapping[str, str], key: str, *, integer: bool = False,
                       most: float = 1e15) -> float:
    path = f"Pod.metadata.annotations['{ANNOTATION}{key}']"
    try:
        value = float(mine[key])
    except ValueError:
        raise ValidationError(path, f"'{mine[key][:40]}' not understood; must be a number > 0") from None
    if not math.isfinite(value) or not 0 < value <= most or (integer and value != int(value)):
        kind = "a whole number" if integer else "a finite number"
        raise ValidationError(path, f"'{mine[key][:40]}' not understood; must be {kind} in (0, {most:g}]")
    return value


def pod_job_spec(pod: Mapping[str, Any]) -> JobSpec | None:
    """The job a pod's ``dltsched.io/*`` annotations describe; ``None`` when it has none."""
    notes = _map(_map(pod, "metadata", "Pod.metadata"), "annotations", "Pod.metadata.annotations")
    mine = {}
    for k, v in notes.items():
        if isinstance(k, str) and k.startswith(ANNOTATION):
            where = f"Pod.metadata.annotations['{k}']"
            if not isinstance(v, str):
                raise ValidationError(where, f"{type(v).__name__} not understood; annotations are strings")
            if len(v) > _VALUE_CHARS:
                raise ValidationError(where, f"{len(v)} characters; at most {_VALUE_CHARS}")
            mine[k[len(ANNOTATION):]] = v
    if not mine:
        return None
    for key in ("model", "batch", "iters"):
        if key not in mine:
            raise ValidationError(f"Pod.metadata.annotations['{ANNOTATION}{key}']",
                                  "missing; a dltsched pod needs model, batch and iters annotations")
    return JobSpec(mine["model"], int(_annotation_number(mine, "batch", integer=True, most=1e7)),
                   _annotation_number(mine, "iters"),
                   _annotation_number(mine, "step-s", most=1e6) if "step-s" in mine else None,
                   mine.get("gpu-type"))


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node as dltsched plans it: its allocatable GPUs and their catalog type, or why it cannot be
    planned."""

    name: str
    gpu_type: str | None
    num_gpus: int
    problem: str | None = None


def node_info(node: Any, path: str = "Node", limits: ExtenderLimits | None = None,
              default_gpu_type: str | None = None) -> NodeInfo:
    """Name, GPU type and allocatable GPUs of a ``v1.Node``; a GPU node whose type label no catalog type
    matches gets ``problem`` (naming the label) instead of a type."""
    limits = limits or ExtenderLimits()
    if not isinstance(node, Mapping):
        raise ValidationError(path, f"{type(node).__name__} not understood; must be a v1.Node object")
    meta = _map(node, "metadata", f"{path}.metadata")
    name = _name(_get(meta, "name"), f"{path}.metadata.name")
    labels = _map(meta, "labels", f"{path}.metadata.labels")
    alloc = _map(_map(node, "status", f"{path}.status"), "allocatable", f"{path}.status.allocatable")
    count = quantity(alloc.get(GPU_RESOURCE, 0), f"{path}.status.allocatable['{GPU_RESOURCE}']",
                     limits.max_gpus_per_node)
    own = _label(labels, TYPE_LABEL, f"{path}.metadata.labels")
    product = _label(labels, PRODUCT_LABEL, f"{path}.metadata.labels")
    if count == 0:
        return NodeInfo(name, None, 0)
    for key, value in ((TYPE_LABEL, own), (PRODUCT_LABEL, product)):
        if value is not None:
            try:
                return NodeInfo(name, catalog_gpu_type(value), count)
            except ValueError as err:
                return NodeInfo(name, None, count,
                                f"node {name}: label {key}='{value}' is no catalog GPU type "
                                f"({str(err)[:160]}); label the node {TYPE_LABEL}=<catalog type>")
    if default_gpu_type is not None:
        return NodeInfo(name, default_gpu_type, count)
    return NodeInfo(name, None, count,
                    f"node {name}: no {PRODUCT_LABEL} or {TYPE_LABEL} label; label the node "
                    "or start the extender with a default GPU type")


# ----------------------------------------------------------------------------- the extender

@dataclass
class PodRecord:
    """What the extender knows of one GPU pod: identity, request, and where and when it was bound.

    Times are the extender's clock in seconds (``time.time()``).

    Parameters
    ----------
    uid
        The pod's Kubernetes UID.
    name
        The pod's name.
    namespace
        The pod's namespace.
    gpus
        GPUs the pod requests.
    spec
        The training job the pod's annotations describe; ``None`` when they describe none.
    node
        The node the pod is bound to; ``None`` while pending.
    bound_at
        When the pod was bound; ``None`` while pending.
    seen_at
        When the extender last heard of the pod.
    pending
        Whether the watch reports it pending (it competes in the plan until bound or gone).
    first_seen
        When the extender first heard of it (plans weigh the longest-waiting pods first).
    """

    uid: str
    name: str
    namespace: str
    gpus: int
    spec: JobSpec | None
    node: str | None = None
    bound_at: float | None = None
    seen_at: float = 0.0
    #: the watch reports it pending (it competes in the plan until bound or gone)
    pending: bool = False
    #: when the extender first heard of it (plans weigh the longest-waiting pods first)
    first_seen: float = 0.0


@dataclass(frozen=True, slots=True)
class ExtenderSettings:
    """How the scheduler extender plans: default GPU type, backend, objective and limits.

    Parameters
    ----------
    default_gpu_type
        GPU type assumed for a node that names none (a catalog id or alias); ``None``: such nodes are refused.
    backend
        Round backend the plans are solved with.
    objective
        Round objective.
    time_limit_s
        Wall-clock limit of one plan's solve, seconds.
    predictors
        Predictor bundle the plans price jobs with.
    queue_ttl_s
        How long a pod seen in a filter call competes in plans, seconds (the watch knows pending pods
        exactly).
    limits
        Size limits of what the extender accepts.
    """

    default_gpu_type: str | None = None
    backend: str = "cpsat"
    objective: str = "jct"
    time_limit_s: float = 2.0
    predictors: str = "default"
    #: a pod seen in a filter call competes in plans for this long (the watch knows pending pods exactly)
    queue_ttl_s: float = 300.0
    limits: ExtenderLimits = field(default_factory=ExtenderLimits)

    def __post_init__(self) -> None:
        if self.default_gpu_type is not None:
            try:
                object.__setattr__(self, "default_gpu_type", catalog_gpu_type(self.default_gpu_type))
            except ValueError as err:
                raise ValidationError("default_gpu_type", str(err)) from None
        if not (isinstance(self.queue_ttl_s, int | float) and math.isfinite(self.queue_ttl_s)
                and self.queue_ttl_s > 0):
            raise ValidationError("queue_ttl_s",
                                  f"{self.queue_ttl_s!r} not understood; must be a finite number > 0")


@dataclass(frozen=True, slots=True)
class Decision:
    """The plan's answer for one pod: the node it goes to now, or ``None`` and why it waits."""

    node: str | None
    reason: str
    speed: Mapping[str, float] = field(default_factory=dict)
    #: the pod can never run on these nodes (e.g. its memory exceeds every GPU's), not just not now
    never: bool = False


class K8sExtender:
    """Extender state and the three verbs, on plain dicts (the router only adds HTTP). Thread-safe."""

    def __init__(self, settings: ExtenderSettings | None = None,
                 binder: Callable[[str, str, str, str], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings, self.binder, self.clock = settings or ExtenderSettings(), binder, clock
        self.limits = self.settings.limits
        self.nodes: OrderedDict[str, NodeInfo] = OrderedDict()
        self.total_gpus = 0
        self.pods: OrderedDict[str, PodRecord] = OrderedDict()
        #: uids of pods that ended (bounded): a late filter or watch event does not bring them back
        self.ended: OrderedDict[str, None] = OrderedDict()
        self.lock = threading.RLock()
        self.version = 0  # bumped on every change a plan depends on
        self._cache: tuple[Any, Decision] | None = None

    # --- what the extender remembers (all bounded)
    def observe_node(self, info: NodeInfo) -> None:
        """Add or update a node from the watch or a filter call.

        Parameters
        ----------
        info
            The node's name, GPU type and GPU count.

        Raises
        ------
        LimitExceeded
            When the known nodes would hold more GPUs than the extender's ``max_gpus``.
        """
        with self.lock:
            old = self.nodes.get(info.name)
            gpus = self.total_gpus - (old.num_gpus if old else 0) + info.num_gpus
            if gpus > self.limits.max_gpus:
                raise LimitExceeded("Nodes",
                                    f"{gpus} GPUs over the known nodes; at most {self.limits.max_gpus} "
                                    "(the extender's max_gpus)")
            self.nodes[info.name] = info
            self.total_gpus = gpus
            self.nodes.move_to_end(info.name)
            while len(self.nodes) > self.limits.max_nodes:
                self.total_gpus -= self.nodes.popitem(last=False)[1].num_gpus
            if old != info:
                self.version += 1

    def forget_node(self, name: str) -> None:
        """Drop a node that left the cluster (an unknown name is ignored).

        Parameters
        ----------
        name
            The node's name.
        """
        with self.lock:
            old = self.nodes.pop(name, None)
            if old is not None:
                self.total_gpus -= old.num_gpus
                self.version += 1

    def remember_pod(self, record: PodRecord) -> PodRecord:
        """Add or refresh a pod (its binding, once known, is kept). Returns the record kept."""
        with self.lock:
            if record.uid in self.ended:
                return record
            known = self.pods.get(record.uid)
            if known is not None and known.node is not None and record.node is None:
                record = known
            elif known is None or _facts(known) != _facts(record):
                self.version += 1
            record.seen_at = self.clock()
            record.first_seen = known.first_seen if known is not None and known.first_seen else record.seen_at
            self.pods[record.uid] = record
            self.pods.move_to_end(record.uid)
            while len(self.pods) > self.limits.max_pods:
                victim = next((u for u, p in self.pods.items() if p.node is None), None)
                victim = victim if victim is not None else next(iter(self.pods))
                self.pods.pop(victim)
                self.version += 1
            return record

    def finish(self, uid: str) -> bool:
        """The pod ended (succeeded, failed, deleted): its GPUs are free, it is forgotten. ``False`` when
        unknown."""
        with self.lock:
            self.ended[uid] = None
            while len(self.ended) > self.limits.max_pods:
                self.ended.popitem(last=False)
            pod = self.pods.pop(uid, None)
            if pod is not None:
                self.version += 1
            return pod is not None

    def free_gpus(self, node: str) -> int:
        """GPUs of ``node`` that no bound pod holds.

        Parameters
        ----------
        node
            A known node's name.

        Returns
        -------
        int
            The node's GPU count less the GPUs of the pods bound to it.
        """
        with self.lock:
            taken = sum(p.gpus for p in self.pods.values() if p.node == node)
            return self.nodes[node].num_gpus - taken

    def gpus_in_use(self) -> int:
        """GPUs held by bound pods over all nodes (0 when every pod has ended)."""
        with self.lock:
            return sum(p.gpus for p in self.pods.values() if p.node is not None)

    # --- reading ExtenderArgs
    def _args(self, args: Any) -> tuple[PodRecord, list[str], list[Any] | None]:
        if not isinstance(args, Mapping):
            raise ValidationError("ExtenderArgs", "not understood; must be a JSON object")
        pod = _get(args, "Pod")
        if not isinstance(pod, Mapping):
            raise ValidationError("ExtenderArgs.Pod", "missing; kube-scheduler sends the pod being scheduled")
        record = pod_record(pod, self.limits)
        node_list = _get(args, "Nodes")
        items: list[Any] | None = None
        if node_list is not None:
            if not isinstance(node_list, Mapping):
                raise ValidationError("ExtenderArgs.Nodes", "not understood; must be a NodeList object")
            items = _get(node_list, "items") or []
            if not isinstance(items, list):
                raise ValidationError("ExtenderArgs.Nodes.items", "not understood; must be a list of nodes")
            if len(items) > self.limits.max_nodes:
                raise LimitExceeded("ExtenderArgs.Nodes.items",
                                    f"{len(items)} nodes; at most {self.limits.max_nodes}")
            infos = [node_info(n, f"ExtenderArgs.Nodes.items[{i}]", self.limits,
                               self.settings.default_gpu_type)
                     for i, n in enumerate(items)]
            for info in infos:
                self.observe_node(info)
            names = [i.name for i in infos]
        else:
            names = _get(args, "NodeNames")
            if not isinstance(names, list):
                raise ValidationError("ExtenderArgs",
                                      "needs Nodes (a NodeList) or NodeNames (a list of names)")
            if len(names) > self.limits.max_nodes:
                raise LimitExceeded("ExtenderArgs.NodeNames",
                                    f"{len(names)} nodes; at most {self.limits.max_nodes}")
            for i, n in enumerate(names):
                _name(n, f"ExtenderArgs.NodeNames[{i}]")
        if record.gpus and record.uid not in self.ended:
            record = self.remember_pod(record)
        return record, names, items

    # --- the verbs
    def filter(self, args: Any) -> dict[str, Any]:
        """``ExtenderArgs`` -> ``ExtenderFilterResult``: the plan's node passes; every node fails, with the
        reason, when the plan makes the pod wait."""
        with self.lock:
            pod, names, items = self._args(args)
            failed, unresolvable, fits = {}, {}, []
            for name in names:
                info = self.nodes.get(name)
                if info is None:
                    failed[name] = ("unknown node: dltsched has not seen it (start it with --k8s to watch "
                                    "nodes, or set nodeCacheCapable: false)")
                elif pod.gpus and info.problem is not None:
                    unresolvable[name] = info.problem
                elif pod.gpus and info.num_gpus < pod.gpus:
                    unresolvable[name] = f"pod needs {pod.gpus} GPUs; node has {info.num_gpus}"
                elif pod.gpus and self.free_gpus(name) < pod.gpus:
                    failed[name] = f"pod needs {pod.gpus} GPUs; {self.free_gpus(name)} free"
                else:
                    fits.append(name)
            passed = fits
            if pod.gpus and pod.spec is not None and fits:
                decision = self.plan_for(pod, fits)
                passed = [decision.node] if decision.node is not None else []
                (unresolvable if decision.never else failed).update(
                    {n: decision.reason for n in fits if n not in passed})
            result: dict[str, Any] = {"FailedNodes": failed, "FailedAndUnresolvableNodes": unresolvable,
                                      "Error": ""}
            if items is not None:
                keep = set(passed)
                result["Nodes"] = {"kind": "NodeList", "apiVersion": "v1", "metadata": {},
                                   "items": [n for n in items if _get(_get(n, "metadata"), "name") in keep]}
            else:
                result["NodeNames"] = passed
            return result

    def prioritize(self, args: Any) -> list[dict[str, Any]]:
        """``ExtenderArgs`` -> ``HostPriorityList``: the plan's node 10, other fitting nodes by predicted
        speed (0..9); a pod without GPUs or dltsched annotations: best fit (fewest GPUs left over)."""
        with self.lock:
            pod, names, _ = self._args(args)
            fits = [n for n in names if n in self.nodes and self.nodes[n].problem is None
                    and self.free_gpus(n) >= pod.gpus]
            scores = dict.fromkeys(names, 0)
            if not fits:
                return [{"Host": n, "Score": 0} for n in names]
            if pod.gpus == 0 or pod.spec is None:
                spare = {n: self.free_gpus(n) - pod.gpus for n in fits}
                most = max(spare.values()) or 1
                scores |= {n: round(MAX_SCORE * (1 - spare[n] / (most + 1))) for n in fits}
            else:
                decision = self.plan_for(pod, fits)
                top = max(decision.speed.values(), default=0.0) or 1.0
                scores |= {n: min(MAX_SCORE - 1, round((MAX_SCORE - 1) * decision.speed.get(n, 0.0) / top))
                           for n in fits}
                if decision.node is not None:
                    scores[decision.node] = MAX_SCORE
            return [{"Host": n, "Score": int(scores[n])} for n in names]

    def bind(self, args: Any) -> dict[str, str]:
        """``ExtenderBindingArgs`` -> ``ExtenderBindingResult``: bind via ``binder``, then record the
        placement."""
        if not isinstance(args, Mapping):
            raise ValidationError("ExtenderBindingArgs", "not understood; must be a JSON object")
        name = _name(_get(args, "PodName"), "ExtenderBindingArgs.PodName")
        namespace = _name(_get(args, "PodNamespace"), "ExtenderBindingArgs.PodNamespace",
                          required=False) or "default"
        uid = _name(_get(args, "PodUID"), "ExtenderBindingArgs.PodUID")
        node = _name(_get(args, "Node"), "ExtenderBindingArgs.Node")
        with self.lock:
            if node not in self.nodes:
                return {"Error": f"node '{node}' unknown to dltsched; it has not been offered "
                                 "in a filter call"}
            pod = self.pods.get(uid) or PodRecord(uid, name, namespace, 0, None)
            if pod.node != node and pod.gpus > self.free_gpus(node):
                return {"Error": f"node '{node}' has {self.free_gpus(node)} free GPUs; pod needs {pod.gpus}"}
            if self.binder is None:
                return {"Error": "dltsched has no binder configured; leave bindVerb out of the "
                                 "extender config or start the extender with --k8s (it binds "
                                 "through the API server)"}
            try:
                self.binder(name, namespace, uid, node)
            except Exception as err:  # noqa: BLE001 - the API server's answer, passed back to kube-scheduler
                return {"Error": f"binding {namespace}/{name} to {node} failed: {str(err)[:300]}"}
            if pod.gpus:
                pod.node, pod.bound_at, pod.pending = node, self.clock(), False
                self.remember_pod(pod)
                self.version += 1
            return {"Error": ""}

    # --- the one place that meets dltsched's domain types
    def plan_for(self, pod: PodRecord, fits: Sequence[str]) -> Decision:
        """Solve a round over the known nodes: bound pods' GPUs are taken, the pending dltsched pods compete.
        The plan's node for ``pod`` among ``fits``, or ``None`` and the reason it waits. Cached until the
        state changes."""
        key = (pod.uid, self.version, tuple(fits))
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        decision = self._solve(pod, fits)
        self._cache = (key, decision)
        return decision

    def _competitors(self, pod: PodRecord) -> list[PodRecord]:
        now, ttl = self.clock(), self.settings.queue_ttl_s
        waiting = [p for p in self.pods.values() if p.node is None and p.spec is not None and p.gpus and
                   p.uid != pod.uid and (p.pending or now - p.seen_at <= ttl)]
        waiting.sort(key=lambda p: p.first_seen)
        return [pod, *waiting[:self.limits.max_plan_pods - 1]]

    def _solve(self, pod: PodRecord, fits: Sequence[str]) -> Decision:
        from dltsched.engine.app import api
        from dltsched.engine.app.adapters.slurm_round import domain_job
        from dltsched.engine.app.measured import JobMeasurement, Measurements
        from dltsched.engine.domain.model import Cluster, ClusterState, JobState, Node
        from dltsched.formulations.pipeline import ConfiguredSolver

        infos = [self.nodes[n]
                 for n in plan_nodes(fits, self.nodes, self.free_gpus, self.limits.max_plan_nodes)]
        cluster = Cluster(tuple(Node(i.name, str(i.gpu_type), i.num_gpus) for i in infos))
        first = {i.name: cluster.node_first_gpu[k] for k, i in enumerate(infos)}
        used = dict.fromkeys(first, 0)
        for other in self.pods.values():
            if other.node in first:
                used[other.node] += other.gpus
        taken = {first[n] + k for n, u in used.items() for k in range(min(u, self.nodes[n].num_gpus))}
        states, measured = [], {}
        for p in self._competitors(pod):
            assert p.spec is not None
            try:
                job = domain_job(p.uid, p.spec, p.gpus, 0.0, ())
                if p.spec.step_time_s is not None:
                    key = catalog_gpu_type(p.spec.gpu_type) if p.spec.gpu_type else "*"
                    measured[p.uid] = JobMeasurement(step_time_s={key: p.spec.step_time_s})
            except (ValidationError, ValueError) as err:
                if p is pod:
                    return Decision(None,
                                    f"dltsched cannot price the pod: {err}; fix its dltsched.io annotations")
                continue
            states.append(JobState(job, job.total_iterations))
        state = ClusterState(self.clock(), cluster, tuple(states), down_gpus=frozenset(taken))
        preds = api.load_predictors(self.settings.predictors)
        config = ConfiguredSolver.of(backend=self.settings.backend, objective=self.settings.objective,
                                     max_jobs_per_gpu=1, freeze_levels=(0,),
                                     time_limit_s=self.settings.time_limit_s, allow_cross_node=False)
        try:
            plan = api.solve_round(state, config, predictors=preds,
                                   measurements=Measurements(measured).checked())
            speed = {}
            for n in fits:
                step = plan_step_time(preds, states[0].job, self.nodes[n].gpu_type, measured.get(pod.uid))
                speed[n] = 1.0 / step if step > 0 else 0.0
        except Exception as err:  # noqa: BLE001 - a pod the plan cannot weigh is filtered by free GPUs alone
            log.warning("pod %s/%s: plan failed (%s); filtered by free GPUs only", pod.namespace, pod.name,
                        err)
            return Decision(fits[0] if fits else None, f"dltsched plan failed: {str(err)[:200]}")
        placed = plan.by_job().get(pod.uid)
        message = str(getattr(plan, "message", "") or "")
        if placed is None and f"job '{pod.uid}'" in message:
            mine = next((part for part in re.split(r"(?=job ')", message)
                         if part.startswith(f"job '{pod.uid}'")), "")
            return Decision(None, f"dltsched: the pod can never run on these nodes: {mine.strip()[:300]}",
                            speed, never=True)
        if placed is None:
            others = [a.job_id for a in plan.assignments][:5]
            names = ", ".join(self.pods[u].name for u in others)
            who = f"; this round's free GPUs go to pods {names}" if others else ""
            return Decision(None, f"dltsched plan: the pod waits ({plan.status}){who}", speed)
        node = cluster.nodes[cluster.gpu_node[placed.gpus[0]]].id
        return Decision(node, f"dltsched plan places this pod on {node}", speed)


def plan_nodes(fits: Sequence[str], nodes: Mapping[str, NodeInfo], free: Callable[[str], int],
               most: int) -> list[str]:
    """The nodes a plan weighs: the pod's candidate nodes (kube-scheduler's, that have the GPUs), at most
    ``most`` of them: by GPU type in turn, most free GPUs first, so that every type stays in the choice."""
    by_type: dict[str, list[str]] = {}
    for name in fits:
        info = nodes.get(name)
        if info is not None and info.num_gpus > 0 and info.problem is None and info.gpu_type:
            by_type.setdefault(info.gpu_type, []).append(name)
    for names in by_type.values():
        names.sort(key=lambda n: (-free(n), n))
    out: list[str] = []
    for rank in range(max((len(v) for v in by_type.values()), default=0)):
        out += [names[rank] for names in by_type.values() if rank < len(names)]
        if len(out) >= most:
            break
    return sorted(out[:most], key=list(fits).index)


def _facts(pod: PodRecord) -> tuple[Any, ...]:
    """What a plan reads of a pod (not when it was last seen)."""
    return pod.gpus, pod.spec, pod.node, pod.pending


def plan_step_time(preds: Any, job: Any, gpu_type: str | None, measured: Any) -> float:
    """Seconds per step of ``job`` on ``gpu_type``: its own measurement where it has one for that type."""
    if measured is not None:
        step = measured.step_s(job, str(gpu_type))
        if step is not None:
            return float(step)
    from dltsched.engine.domain.model import MEASURED_ONLY

    if job.model == MEASURED_ONLY:
        return 0.0
    return float(preds.step_time.step_time_s(job, str(gpu_type)))


def pod_record(pod: Mapping[str, Any], limits: ExtenderLimits) -> PodRecord:
    """A ``v1.Pod`` (from kube-scheduler or the watch) as the extender remembers it."""
    meta = _map(pod, "metadata", "Pod.metadata")
    name = _name(_get(meta, "name", ""), "Pod.metadata.name", required=False)
    namespace = _name(_get(meta, "namespace", "default"), "Pod.metadata.namespace",
                      required=False) or "default"
    uid = _name(_get(meta, "uid"), "Pod.metadata.uid", required=False) or f"{namespace}/{name}"
    return PodRecord(uid, name, namespace, pod_gpus(pod, limits), pod_job_spec(pod))


def api_server_binder(base_url: str, token_file: str | Path, ca_file: str | Path | bool = True,
                      timeout_s: float = 10.0) -> Callable[[str, str, str, str], None]:
    """A binder that POSTs a ``v1.Binding`` to the Kubernetes API server at ``base_url`` with the bearer token
    read from ``token_file`` (e.g. the extender pod's own service account). ``dltsched serve --k8s`` binds
    with the official client instead (:func:`dltsched.engine.app.adapters.k8s_watch.client_binder`)."""
    import httpx

    def bind(name: str, namespace: str, uid: str, node: str) -> None:
        token = Path(token_file).read_text().strip()
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": namespace, "uid": uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        answer = httpx.post(f"{base_url}/api/v1/namespaces/{namespace}/pods/{name}/binding", json=body,
                            headers={"Authorization": f"Bearer {token}"}, verify=str(ca_file) if
                            isinstance(ca_file, Path | str) else ca_file, timeout=timeout_s)
        answer.raise_for_status()

    return bind


def k8s_router(extender: K8sExtender | None = None) -> Any:
    """A FastAPI ``APIRouter`` with ``POST /v1/k8s/filter``, ``/prioritize``, ``/bind`` and ``/finished``.
    Bad bodies answer 400 naming the field (422 when the body is not a JSON object), 413 over a limit."""
    from fastapi import APIRouter, Body, HTTPException

    ext = extender or K8sExtender()
    router = APIRouter(prefix="/v1/k8s", tags=["kubernetes"])

    def call(fn: Callable[[Any], Any], body: Any) -> Any:
        if not isinstance(body, dict):
            raise HTTPException(422, "body: not understood; must be a JSON object")
        try:
            return fn(body)
        except LimitExceeded as err:
            raise HTTPException(413, str(err)) from None
        except ValidationError as err:
            raise HTTPException(400, str(err)) from None
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError, RecursionError) as err:
            log.debug("k8s body not understood", exc_info=True)  # a shape no check above names
            raise HTTPException(400, f"body: not understood ({type(err).__name__}); "
                                     "see the extender API") from None

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
        if not isinstance(uid, str) or not uid or len(uid) > _NAME_CHARS:
            raise HTTPException(400, "PodUID: missing; must be the finished pod's uid")
        return {"PodUID": uid, "known": ext.finish(uid)}

    router.extender = ext  # type: ignore[attr-defined]  # for callers that want the state
    return router

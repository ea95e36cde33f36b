"""Domain model: GPU types, nodes, clusters, jobs and instances; plans and cluster-state snapshots
re-exported.

All types are frozen, slotted dataclasses validated in their constructors; errors are
:class:`~dltsched.engine.domain.errors.ValidationError` with a field path. GPUs of a cluster are addressed
by a global index ``0 .. cluster.num_gpus - 1``, node by node in the order of ``Cluster.nodes``.

This module is the one place to import domain types from: it re-exports the names of
:mod:`~dltsched.engine.domain.vocabulary` (:class:`Objective` and its :class:`Sense`, optimizers, name
resolution), :mod:`~dltsched.engine.domain.plan` (:class:`Plan`, :class:`Assignment`, :class:`PlanStatus`) and
:mod:`~dltsched.engine.domain.state` (:class:`ClusterState`, :class:`JobState`). :class:`Node`,
:class:`Cluster`, :class:`Job` and :class:`Instance` are defined here, and stay here: their module path is
part of a checkpoint's instance fingerprint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dltsched.engine.domain.catalog import GpuType
from dltsched.engine.domain.errors import ValidationError, check_non_negative, check_positive
from dltsched.engine.domain.plan import Assignment, Plan, PlanStatus
from dltsched.engine.domain.state import ClusterState, JobState
from dltsched.engine.domain.vocabulary import (
    DEFAULT_OBJECTIVE,
    MEASURED_ONLY,
    OBJECTIVES,
    OPTIMIZERS,
    Objective,
    Sense,
    resolve_gpu_type,
    resolve_model,
)

__all__ = [
    "DEFAULT_OBJECTIVE", "MEASURED_ONLY", "OBJECTIVES", "OPTIMIZERS", "Assignment", "Cluster", "ClusterState",
    "GpuType", "Instance", "Job", "JobState", "Node", "Objective", "Plan", "PlanStatus", "Sense",
    "resolve_gpu_type", "resolve_model",
]


@dataclass(frozen=True, slots=True)
class Node:
    """A server: ``num_gpus`` GPUs of one type, linked to other nodes at ``network_gbps``.

    Parameters
    ----------
    id
        The node's id, non-empty and unique in its cluster.
    gpu_type
        Its GPUs' type, an id or alias (a :class:`Cluster` stores the canonical id).
    num_gpus
        Its GPUs, >= 1.
    network_gbps
        Its link to the other nodes, Gbit/s.

    Raises
    ------
    ValidationError
        When ``id`` is empty or a number is not positive.
    """

    id: str
    gpu_type: str
    num_gpus: int
    network_gbps: float = 100.0

    def __post_init__(self) -> None:
        if not self.id:
            raise ValidationError("id", "empty; every node needs a non-empty id")
        check_positive("num_gpus", self.num_gpus, integer=True)
        check_positive("network_gbps", self.network_gbps)


@dataclass(frozen=True, slots=True)
class Cluster:
    """Nodes plus the specs of the GPU types they use.

    GPU ``g`` lives on node ``gpu_node[g]``; node ``i``'s GPUs start at ``node_first_gpu[i]``.

    Parameters
    ----------
    nodes
        At least one node, ids unique; their GPU types are stored as canonical ids.
    gpu_types
        Specs of the GPU types; a type the nodes name and this lacks is taken from the catalog.

    Raises
    ------
    ValidationError
        When there is no node, two nodes share an id or a node names a GPU type the catalog lacks.
    """

    nodes: tuple[Node, ...]
    gpu_types: Mapping[str, GpuType] = field(default_factory=dict)
    gpu_node: tuple[int, ...] = field(init=False, repr=False, compare=False)
    node_first_gpu: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _by_type: dict[str, int] = field(init=False, repr=False, compare=False)
    _nodes_of_type: dict[str, tuple[int, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        nodes = tuple(self.nodes)
        if not nodes:
            raise ValidationError("cluster.nodes", "empty; a cluster needs at least one node")
        types = dict(self.gpu_types)
        fixed: list[Node] = []
        seen: set[str] = set()
        for i, node in enumerate(nodes):
            if node.id in seen:
                raise ValidationError(f"cluster.nodes[{i}].id", f"duplicate node id '{node.id}'")
            seen.add(node.id)
            if node.gpu_type not in types:
                try:
                    spec = resolve_gpu_type(node.gpu_type)
                except ValueError as err:
                    raise ValidationError(f"cluster.nodes[{i}].gpu_type", str(err)) from None
                types.setdefault(spec.id, spec)
                if spec.id != node.gpu_type:
                    node = replace(node, gpu_type=spec.id)
            fixed.append(node)
        gpu_node: list[int] = []
        first: list[int] = []
        for i, node in enumerate(fixed):
            first.append(len(gpu_node))
            gpu_node.extend([i] * node.num_gpus)
        object.__setattr__(self, "nodes", tuple(fixed))
        object.__setattr__(self, "gpu_types", types)
        object.__setattr__(self, "gpu_node", tuple(gpu_node))
        object.__setattr__(self, "node_first_gpu", tuple(first))
        by_type: dict[str, int] = {}
        of_type: dict[str, list[int]] = {}
        for i, node in enumerate(fixed):
            by_type[node.gpu_type] = by_type.get(node.gpu_type, 0) + node.num_gpus
            of_type.setdefault(node.gpu_type, []).append(i)
        object.__setattr__(self, "_by_type", by_type)
        object.__setattr__(self, "_nodes_of_type", {t: tuple(v) for t, v in of_type.items()})

    @property
    def num_gpus(self) -> int:
        """GPUs in the cluster (indices ``0 .. num_gpus - 1``)."""
        return len(self.gpu_node)

    def gpu_type_of(self, gpu: int) -> str:
        """The GPU type of GPU ``gpu``.

        Parameters
        ----------
        gpu
            A global GPU index.

        Returns
        -------
        str
            Its type's canonical id.
        """
        return self.nodes[self.gpu_node[gpu]].gpu_type

    def node_gpus(self, node_index: int) -> range:
        """The GPU indices of node ``node_index``.

        Parameters
        ----------
        node_index
            The node's position in ``nodes``.

        Returns
        -------
        range
            Its GPUs' global indices.
        """
        start = self.node_first_gpu[node_index]
        return range(start, start + self.nodes[node_index].num_gpus)

    def nodes_of_type(self, gpu_type: str) -> tuple[int, ...]:
        """Indices of the nodes whose GPUs are of ``gpu_type``, ascending.

        Parameters
        ----------
        gpu_type
            A canonical GPU-type id.

        Returns
        -------
        tuple of int
            Positions in ``nodes`` (empty when no node has that type).
        """
        return self._nodes_of_type.get(gpu_type, ())

    def gpus_by_type(self) -> dict[str, int]:
        """Number of GPUs of each type.

        Returns
        -------
        dict of str to int
            Per GPU type, its GPUs (a fresh dict the caller may change).
        """
        return dict(self._by_type)

    def max_gpus_of_type(self, gpu_type: str) -> int:
        """GPUs of ``gpu_type`` in the cluster.

        Parameters
        ----------
        gpu_type
            A canonical GPU-type id.

        Returns
        -------
        int
            Its GPUs (0 when the cluster has none).
        """
        return self.gpus_by_type().get(gpu_type, 0)

    def memory_mib(self, gpu: int) -> float:
        """Memory of GPU ``gpu``.

        Parameters
        ----------
        gpu
            A global GPU index.

        Returns
        -------
        float
            Its memory, MiB.
        """
        memory_mib: float = self.gpu_types[self.gpu_type_of(gpu)].memory_mib
        return memory_mib

    @staticmethod
    def homogeneous(gpu_type: str, num_nodes: int, gpus_per_node: int = 8,
                    network_gbps: float = 100.0) -> Cluster:
        """A cluster of ``num_nodes`` identical nodes, named ``<type>-<i>``.

        Parameters
        ----------
        gpu_type
            The GPU type, an id or alias.
        num_nodes
            How many nodes.
        gpus_per_node
            GPUs per node.
        network_gbps
            Each node's link, Gbit/s.

        Returns
        -------
        Cluster
            The cluster.
        """
        spec = resolve_gpu_type(gpu_type)
        nodes = tuple(Node(f"{spec.id}-{i}", spec.id, gpus_per_node, network_gbps) for i in range(num_nodes))
        return Cluster(nodes)


@dataclass(frozen=True, slots=True)
class Job:
    """One deep-learning training job as submitted.

    Parameters
    ----------
    id
        The job's id, non-empty and unique in its instance.
    model
        A model-zoo id or alias (stored as the canonical id), or :data:`MEASURED_ONLY`.
    batch_size
        The global batch size, >= 1.
    total_iterations
        The work, in training steps at ``batch_size``, > 0.
    num_gpus
        GPUs, gang-scheduled (all or none, one GPU type).
    arrival_time_s
        When it is submitted, seconds, >= 0.
    amp
        Whether it trains in mixed precision.
    optimizer
        Its optimizer, one of :data:`OPTIMIZERS` (any case).
    dataset
        Its dataset, when known.
    weight
        Its weight in weighted objectives, > 0.
    freeze_allowed
        Whether the scheduler may freeze its layers.
    accuracy_budget
        The largest frozen penalty (fraction of each iteration's progress lost to freezing: useful
        progress x (1 - penalty)) its owner accepts when ``freeze_allowed``, in [0, 1).
    deadline_s
        Its deadline, seconds, > 0.
    gpu_types
        The GPU types it may run on, ids or aliases (stored as canonical ids); empty: any.
    gpu_fraction
        In (0, 1]; < 1 asks for a share of one GPU (traces with GPU sharing; needs ``num_gpus == 1``).
    hyperparameters
        Further training settings, by name.
    duration_hint_s
        The duration the trace recorded, when it did.

    Raises
    ------
    ValidationError
        Naming the field, when a value is out of range or a model, optimizer or GPU type is unknown.
    """

    id: str
    model: str
    batch_size: int
    total_iterations: float
    num_gpus: int = 1
    arrival_time_s: float = 0.0
    amp: bool = False
    optimizer: str = "sgd"
    dataset: str | None = None
    weight: float = 1.0
    freeze_allowed: bool = False
    accuracy_budget: float = 0.0
    deadline_s: float | None = None
    gpu_types: tuple[str, ...] = ()
    gpu_fraction: float = 1.0
    hyperparameters: tuple[tuple[str, float | str], ...] = ()
    duration_hint_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValidationError("id", f"{self.id!r} not understood; must be a non-empty string")
        try:
            model = self.model if self.model == MEASURED_ONLY else resolve_model(self.model)
        except ValueError as err:
            raise ValidationError("model", str(err)) from None
        if model != self.model:
            object.__setattr__(self, "model", model)
        check_positive("batch_size", self.batch_size, integer=True)
        check_positive("num_gpus", self.num_gpus, integer=True)
        check_positive("total_iterations", self.total_iterations)
        check_non_negative("arrival_time_s", self.arrival_time_s)
        check_positive("weight", self.weight)
        if self.optimizer.lower() not in OPTIMIZERS:
            raise ValidationError("optimizer", f"'{self.optimizer}' not understood; one of "
                                  f"{', '.join(OPTIMIZERS)}")
        if not 0.0 <= self.accuracy_budget < 1.0:
            raise ValidationError("accuracy_budget", f"{self.accuracy_budget!r} not understood; must be in "
                                  "[0, 1)")
        if self.deadline_s is not None:
            check_positive("deadline_s", self.deadline_s)
        if not 0.0 < self.gpu_fraction <= 1.0:
            raise ValidationError("gpu_fraction", f"{self.gpu_fraction!r} not understood; must be in (0, 1]")
        if self.gpu_fraction < 1.0 and self.num_gpus != 1:
            raise ValidationError("gpu_fraction", "a fractional GPU request needs num_gpus == 1")
        if self.gpu_types:
            resolved = []
            for i, g in enumerate(self.gpu_types):
                try:
                    resolved.append(resolve_gpu_type(g).id)
                except ValueError as err:
                    raise ValidationError(f"gpu_types[{i}]", str(err)) from None
            object.__setattr__(self, "gpu_types", tuple(resolved))

    @property
    def bytes_per_param(self) -> int:
        """Optimizer-state bytes per parameter beyond weight and gradient (FP32 master copies)."""
        state_bytes: int = OPTIMIZERS[self.optimizer.lower()]
        return state_bytes

    def hyperparameter(self, name: str, default: float | str | None = None) -> float | str | None:
        """The value of hyperparameter ``name``.

        Parameters
        ----------
        name
            The hyperparameter.
        default
            What to return when the job does not set it.

        Returns
        -------
        float or str or None
            Its value, or ``default``.
        """
        for key, value in self.hyperparameters:
            if key == name:
                return value
        return default



@dataclass(frozen=True, slots=True)
class Instance:
    """A scheduling instance: a cluster and the jobs that arrive at it.

    Parameters
    ----------
    name
        The instance's name.
    cluster
        The cluster.
    jobs
        At least one job, ids unique, each small enough for the cluster's GPUs of one (allowed) type.
    metadata
        Where it came from (source trace, generator command, seed).
    reference
        Reference values tests can assert (known optimum, bounds).

    Raises
    ------
    ValidationError
        When there is no job, two jobs share an id or a job needs more GPUs than the cluster has.
    """

    name: str
    cluster: Cluster
    jobs: tuple[Job, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    reference: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        jobs = tuple(self.jobs)
        object.__setattr__(self, "jobs", jobs)
        if not jobs:
            raise ValidationError("jobs", "empty; an instance needs at least one job")
        by_type = self.cluster.gpus_by_type()
        total = self.cluster.num_gpus
        seen: dict[str, int] = {}
        for i, job in enumerate(jobs):
            if job.id in seen:
                raise ValidationError(f"jobs[{i}].id", f"duplicate job id '{job.id}' (also "
                                      f"jobs[{seen[job.id]}])")
            seen[job.id] = i
            allowed = job.gpu_types or tuple(by_type)
            largest = max((by_type.get(t, 0) for t in allowed), default=0)
            if job.num_gpus > largest:
                where = f"GPUs of type {'/'.join(allowed)}" if job.gpu_types else "GPUs of one type"
                raise ValidationError(
                    f"jobs[{i}].num_gpus",
                    f"{job.num_gpus} is larger than the cluster ({largest} {where}, {total} in all); "
                    "shrink the job or grow the cluster",
                )

    def job(self, job_id: str) -> Job:
        """The job with id ``job_id``.

        Parameters
        ----------
        job_id
            The job's id.

        Returns
        -------
        Job
            The job.

        Raises
        ------
        KeyError
            When the instance has no such job.
        """
        for j in self.jobs:
            if j.id == job_id:
                return j
        raise KeyError(job_id)


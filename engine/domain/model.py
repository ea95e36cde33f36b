"""Domain model: GPU types, nodes, clusters, jobs, instances, plans and cluster-state snapshots.

All types are frozen, slotted dataclasses validated in their constructors; errors are
:class:`~dltsched.engine.domain.errors.ValidationError` with a field path. GPUs of a cluster are addressed
by a global index ``0 .. cluster.num_gpus - 1``, node by node in the order of ``Cluster.nodes``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from dltsched.engine.domain.catalog import GpuType, gpu_spec, model_catalog
from dltsched.engine.domain.errors import ValidationError, check_non_negative, check_positive

#: what a scheduling round can optimise (see ``dltsched.formulations.RoundOptions``): ``effective_progress``
#: (max, normalized throughput), ``jct`` (max, throughput relative to each job's remaining time: SRPT
#: generalised to co-location, GPU types and freezing, for low average job completion time),
#: ``weighted_completion`` and ``makespan`` (min)
OBJECTIVES = ("effective_progress", "jct", "weighted_completion", "makespan")
#: the objective every entry point uses when the caller names none (the embedding API, the service, the
#: optimizing policy): ``jct``, for low average job completion time
DEFAULT_OBJECTIVE = "jct"
#: ``Job.model`` of a job described by the caller's measurements alone (no model-zoo entry): predictors
#: cannot price it, so every number it needs comes from ``dltsched.engine.app.measured``
MEASURED_ONLY = "measured-only"


class PlanStatus(StrEnum):
    """How a plan came about (``Plan.status``; a ``str``, so ``plan.status == "optimal"`` holds).

    ``optimal`` | ``feasible`` (a solver stopped at its gap limit) | ``timeout`` (time limit, incumbent
    returned) | ``infeasible`` (some jobs can never be placed; the plan places the others) | ``heuristic``
    (a policy or heuristic decided) | ``fallback`` (the fallback policy decided: the solver gave nothing
    usable) | ``error``. ``dltsched.formulations.result`` keeps the solver's own termination and solution
    status apart, as Pyomo does.
    """

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    TIMEOUT = "timeout"
    HEURISTIC = "heuristic"
    FALLBACK = "fallback"
    ERROR = "error"


def resolve_gpu_type(name: str) -> GpuType:
    """The catalog's :class:`GpuType` for an id or alias (raises with close matches)."""
    return gpu_spec(name)


def resolve_model(name: str) -> str:
    """Canonical model-zoo id for a name or alias (raises with close matches)."""
    return model_catalog().resolve(name)


@dataclass(frozen=True, slots=True)
class Node:
    """A server: ``num_gpus`` GPUs of one type, linked to other nodes at ``network_gbps``."""

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

    ``gpu_types`` defaults to the catalog entries of the types the nodes name; node GPU types
    are stored as canonical ids. GPU ``g`` lives on node ``gpu_node[g]``.
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
        """The GPU type of GPU ``gpu``."""
        return self.nodes[self.gpu_node[gpu]].gpu_type

    def node_gpus(self, node_index: int) -> range:
        """The GPU indices of node ``node_index``."""
        start = self.node_first_gpu[node_index]
        return range(start, start + self.nodes[node_index].num_gpus)

    def nodes_of_type(self, gpu_type: str) -> tuple[int, ...]:
        """Indices of the nodes whose GPUs are of ``gpu_type``, ascending."""
        return self._nodes_of_type.get(gpu_type, ())

    def gpus_by_type(self) -> dict[str, int]:
        """Number of GPUs of each type (a fresh dict the caller may change)."""
        return dict(self._by_type)

    def max_gpus_of_type(self, gpu_type: str) -> int:
        """GPUs of ``gpu_type`` in the cluster (0 when it has none)."""
        return self.gpus_by_type().get(gpu_type, 0)

    def memory_mib(self, gpu: int) -> float:
        """Memory of GPU ``gpu``, MiB."""
        return self.gpu_types[self.gpu_type_of(gpu)].memory_mib

    @staticmethod
    def homogeneous(gpu_type: str, num_nodes: int, gpus_per_node: int = 8, network_gbps: float = 100.0) -> Cluster:
        """A cluster of ``num_nodes`` identical nodes."""
        spec = resolve_gpu_type(gpu_type)
        nodes = tuple(Node(f"{spec.id}-{i}", spec.id, gpus_per_node, network_gbps) for i in range(num_nodes))
        return Cluster(nodes)


@dataclass(frozen=True, slots=True)
class Job:
    """One deep-learning training job as submitted.

    ``num_gpus`` GPUs are gang-scheduled (all or none, one GPU type). ``total_iterations`` is the
    work in training steps at the job's batch size. ``accuracy_budget`` is the largest frozen
    penalty (fraction of each iteration's progress lost to freezing: useful progress x (1 - penalty)) the
    owner accepts when ``freeze_allowed``.
    ``gpu_fraction`` < 1 asks for a share of one GPU (traces with GPU sharing).
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
            raise ValidationError("optimizer", f"'{self.optimizer}' not understood; one of {', '.join(OPTIMIZERS)}")
        if not 0.0 <= self.accuracy_budget < 1.0:
            raise ValidationError("accuracy_budget", f"{self.accuracy_budget!r} not understood; must be in [0, 1)")
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
        return OPTIMIZERS[self.optimizer.lower()]

    def hyperparameter(self, name: str, default: float | str | None = None) -> float | str | None:
        """The value of hyperparameter ``name``, ``default`` when the job does not set it."""
        for key, value in self.hyperparameters:
            if key == name:
                return value
        return default


#: optimizer name -> bytes of optimizer state per parameter (FP32)
OPTIMIZERS: dict[str, int] = {"sgd": 0, "momentum": 4, "nesterov": 4, "adam": 8, "adamw": 8,
                              "adagrad": 4, "adadelta": 8, "rmsprop": 4, "lamb": 8}


@dataclass(frozen=True, slots=True)
class Instance:
    """A scheduling instance: a cluster and the jobs that arrive at it.

    ``metadata`` records where it came from (source trace, generator command, seed);
    ``reference`` holds reference values tests can assert (known optimum, bounds).
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
                raise ValidationError(f"jobs[{i}].id", f"duplicate job id '{job.id}' (also jobs[{seen[job.id]}])")
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
        """The job with id ``job_id`` (``KeyError`` when there is none)."""
        for j in self.jobs:
            if j.id == job_id:
                return j
        raise KeyError(job_id)


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where one job runs in a plan: its GPUs (global indices) and its freeze level."""

    job_id: str
    gpus: tuple[int, ...]
    freeze_level: int = 0

    def __post_init__(self) -> None:
        if not self.gpus:
            raise ValidationError(f"plan.{self.job_id}.gpus", "empty; an assignment needs >= 1 GPU")
        if len(set(self.gpus)) != len(self.gpus):
            raise ValidationError(f"plan.{self.job_id}.gpus", f"{self.gpus} names a GPU twice")
        if self.freeze_level < 0:
            raise ValidationError(f"plan.{self.job_id}.freeze_level", f"{self.freeze_level} must be >= 0")


@dataclass(frozen=True, slots=True)
class Plan:
    """A policy's decision for one round: which active jobs run where, at which freeze level.

    Active jobs not in ``assignments`` wait in the queue (a running job left out is preempted).
    ``status`` separates how the decision was reached: ``optimal``/``feasible``/``timeout`` from an
    exact solver, ``heuristic`` from a greedy policy, ``fallback`` when a solver gave nothing in time.
    """

    assignments: tuple[Assignment, ...] = ()
    status: str = PlanStatus.HEURISTIC
    objective: float | None = None
    bound: float | None = None
    gap: float | None = None
    solve_time_s: float = 0.0
    build_time_s: float = 0.0
    backend: str = ""
    fallback: bool = False
    message: str = ""
    #: ``True``: ``assignments`` only lists the jobs to start or move; every running job it does not list
    #: keeps its current placement (a non-preemptive policy's round costs O(changes), not O(running jobs)).
    #: An incremental plan cannot preempt. See :meth:`resolved`.
    incremental: bool = False
    #: per job id, where the round's numbers for it came from, e.g. ``{"step_time": "measured", "memory":
    #: "trusted", "colocation": "predicted"}`` (filled by the embedding API when the caller passes measurements)
    provenance: Mapping[str, Mapping[str, str]] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "assignments", tuple(self.assignments))
        try:
            PlanStatus(self.status)
        except ValueError:
            raise ValidationError("plan.status", f"'{self.status}' not understood; one of {', '.join(PlanStatus)}") from None
        ids = [a.job_id for a in self.assignments]
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise ValidationError("plan.assignments", f"job(s) {dup} placed more than once")

    def by_job(self) -> dict[str, Assignment]:
        """The assignments by job id."""
        return {a.job_id: a for a in self.assignments}

    def resolved(self, state: ClusterState) -> Plan:
        """The full plan: an incremental plan's new assignments plus the running jobs' current ones."""
        if not self.incremental:
            return self
        listed = {a.job_id for a in self.assignments}
        keep = tuple(s.assignment for s in state.running() if s.assignment is not None and s.job.id not in listed)
        return replace(self, assignments=keep + self.assignments, incremental=False)

    def colocation_groups(self) -> dict[int, tuple[str, ...]]:
        """GPU -> job ids sharing it, for every GPU that holds at least one job."""
        groups: dict[int, list[str]] = {}
        for a in self.assignments:
            for g in a.gpus:
                groups.setdefault(g, []).append(a.job_id)
        return {g: tuple(sorted(js)) for g, js in sorted(groups.items())}


@dataclass(frozen=True, slots=True)
class JobState:
    """An active (arrived, unfinished) job at snapshot time.

    ``assignment`` is where it runs now (``None``: queued). ``attained_service_s`` is GPU-seconds
    received so far (Tiresias' 2D attained service); ``progress`` is the finished fraction.
    """

    job: Job
    remaining_iterations: float
    attained_service_s: float = 0.0
    assignment: Assignment | None = None
    num_preemptions: int = 0
    first_start_s: float | None = None
    queued_since_s: float = 0.0

    @property
    def running(self) -> bool:
        """Whether the job holds GPUs."""
        return self.assignment is not None

    @property
    def progress(self) -> float:
        """The finished fraction of the job's iterations."""
        return 1.0 - self.remaining_iterations / self.job.total_iterations


@dataclass(frozen=True, slots=True)
class ClusterState:
    """What a policy sees at one decision point: time, cluster, and every active job.

    Ground-truth speeds are not part of it; policies estimate with predictors. ``down_gpus`` are on
    failed nodes and must not be used. When ``num_running`` is given (the simulator does), ``jobs``
    holds the running jobs first, then the queued ones in arrival order, so :meth:`running` and
    :meth:`queued` are slices; otherwise they filter (and :meth:`queued` sorts by arrival).
    ``free_gpus``, when given, lists per node the GPUs that are up and hold no job; ``gpu_jobs`` per GPU
    the ids of the running jobs on it, in the order they were placed; ``running_jobs`` the running jobs
    and ``placements`` their assignments, by id. The simulator keeps these incrementally, so a policy can
    read placements without snapshotting every running job's progress; without them the methods below
    derive them from ``jobs``. ``running_progress``, when given, returns the running jobs' states by id,
    each built when first read (see :meth:`running_states`); ``num_held_gpus`` counts the running jobs'
    GPUs (a GPU that k jobs share k times).
    """

    time_s: float
    cluster: Cluster
    jobs: Sequence[JobState]
    down_gpus: frozenset[int] = frozenset()
    num_running: int | None = None
    free_gpus: tuple[tuple[int, ...], ...] | None = None
    gpu_jobs: Sequence[tuple[str, ...]] | None = None
    running_jobs: Mapping[str, Job] | None = None
    placements: Mapping[str, Assignment] | None = None
    running_progress: Callable[[], Mapping[str, JobState]] | None = None
    num_held_gpus: int | None = None

    def free_gpus_by_node(self) -> tuple[tuple[int, ...], ...]:
        """Per node, the GPUs that are up and hold no running job."""
        if self.free_gpus is not None:
            return self.free_gpus
        busy = {g for s in self.running() if s.assignment is not None for g in s.assignment.gpus}
        skip = busy | self.down_gpus
        return tuple(tuple(g for g in self.cluster.node_gpus(i) if g not in skip)
                     for i in range(len(self.cluster.nodes)))

    def jobs_on_gpus(self) -> Sequence[tuple[str, ...]]:
        """Per GPU, the ids of the running jobs on it."""
        if self.gpu_jobs is not None:
            return self.gpu_jobs
        on: list[list[str]] = [[] for _ in range(self.cluster.num_gpus)]
        for s in self.running():
            if s.assignment is not None:
                for g in s.assignment.gpus:
                    on[g].append(s.job.id)
        return tuple(tuple(x) for x in on)

    def running_jobs_by_id(self) -> Mapping[str, Job]:
        """The running jobs by id (no progress snapshot)."""
        if self.running_jobs is not None:
            return self.running_jobs
        return {s.job.id: s.job for s in self.running()}

    def placements_by_id(self) -> Mapping[str, Assignment]:
        """The running jobs' assignments by id (no progress snapshot)."""
        if self.placements is not None:
            return self.placements
        return {s.job.id: s.assignment for s in self.running() if s.assignment is not None}

    def running_states(self) -> Mapping[str, JobState]:
        """The running jobs' states (progress at this instant) by id. Taking it reads every running job's
        progress, as iterating ``jobs`` does; a simulator builds each entry when it is first read, so a
        policy that looks at a few running jobs does not pay for all of them."""
        if self.running_progress is not None:
            return self.running_progress()
        return {s.job.id: s for s in self.running()}

    def gpus_exclusive(self) -> bool:
        """No GPU holds two running jobs and no running job holds a failed GPU (O(nodes) with
        ``num_held_gpus``): the GPUs the running jobs hold are exactly the busy ones."""
        held = self.num_held_gpus
        if held is None:
            held = sum(len(a.gpus) for a in self.placements_by_id().values())
        return held == self.cluster.num_gpus - len(self.down_gpus) - sum(map(len, self.free_gpus_by_node()))

    def available_by_type(self) -> dict[str, int]:
        """Number of GPUs of each type that are up (not on a failed node)."""
        out = self.cluster.gpus_by_type()
        for g in self.down_gpus:
            out[self.cluster.gpu_type_of(g)] -= 1
        return out

    def running(self) -> tuple[JobState, ...]:
        """The running jobs' states."""
        if self.num_running is not None:
            return tuple(self.jobs[: self.num_running])
        return tuple(s for s in self.jobs if s.assignment is not None)

    def queued(self) -> tuple[JobState, ...]:
        """Waiting jobs in arrival order (ties by job id)."""
        if self.num_running is not None:
            return tuple(self.jobs[self.num_running:])
        waiting = (s for s in self.jobs if s.assignment is None)
        return tuple(sorted(waiting, key=lambda s: (s.job.arrival_time_s, s.job.id)))

    def current_plan(self) -> Plan:
        """The running placement, as a plan."""
        return Plan(tuple(s.assignment for s in self.running() if s.assignment is not None))

    def gpu_load(self) -> list[int]:
        """Number of running jobs on each GPU."""
        return [len(on) for on in self.jobs_on_gpus()]

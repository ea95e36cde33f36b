"""Request and response models of the HTTP service (``POST /v1/schedule``) and their domain mapping.

Models forbid unknown fields, so a misspelt field is a 422 naming it rather than silently ignored. Types
are strict (pydantic strict mode): ``"64"`` or ``true`` is not a batch size, ``2.0`` is not a GPU count;
NaN and infinities are refused; every magnitude has bounds, and a 422 names the bound it broke. Domain
validation (model names, GPU types, placements) reports field paths such as ``jobs[3].model``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dltsched.engine.app.api import finite_or_none
from dltsched.engine.app.measured import GroupMeasurement, JobMeasurement, Measurements
from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import (
    DEFAULT_OBJECTIVE,
    MEASURED_ONLY,
    Assignment,
    Cluster,
    ClusterState,
    Job,
    JobState,
    Node,
    Plan,
)
from dltsched.formulations.pipeline import ConfiguredSolver

#: printable text without control characters (ids, names)
_PRINTABLE = r"^[^\x00-\x1f\x7f]+$"
_ID = Field(min_length=1, max_length=128, pattern=_PRINTABLE)
#: largest GPU index, GPU count or job count a request may name (the server's limits are lower)
MAX_GPUS = 8192
MAX_JOBS = 100_000
MAX_TIME_S = 1e12
#: shortest measured step time taken (no training step is faster; below it rates overflow to infinity)
MIN_STEP_TIME_S = 1e-6


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class NodeIn(_Strict):
    """A server with ``num_gpus`` GPUs of one type (catalog id or alias: ``v100``, ``a100-80gb``...)."""

    id: str = _ID
    gpu_type: str = Field(min_length=1, max_length=64, pattern=_PRINTABLE)
    num_gpus: int = Field(ge=1, le=1024, description="GPUs in this node (1..1024).")
    network_gbps: float = Field(default=100.0, gt=0, le=1e5)


class ClusterIn(_Strict):
    """The cluster of a request: its nodes and the GPUs that are down."""

    nodes: list[NodeIn] = Field(min_length=1, max_length=MAX_GPUS)
    down_gpus: list[int] = Field(default_factory=list, max_length=MAX_GPUS,
                                 description="GPUs on failed nodes (global indices).")


_GPU_KEY = Annotated[str, Field(min_length=1, max_length=64, pattern=_PRINTABLE)]


class MeasuredIn(_Strict):
    """What the caller measured of a job, per GPU type (catalog id or alias; ``"*"``: every type)."""

    step_time_s: dict[_GPU_KEY, Annotated[float, Field(ge=MIN_STEP_TIME_S, le=1e6)]] = Field(
        default_factory=dict, max_length=64, description="Isolated seconds per iteration on num_gpus GPUs of "
        "the type (at least a microsecond).")
    samples_per_s: dict[_GPU_KEY, Annotated[float, Field(gt=0, le=1e12)]] = Field(
        default_factory=dict, max_length=64, description="Isolated samples/s (instead of step_time_s).")
    memory_mib: dict[_GPU_KEY, Annotated[float, Field(gt=0, le=1e9)]] = Field(
        default_factory=dict, max_length=64, description="Peak memory of one worker, MiB.")
    utilization: dict[_GPU_KEY, Annotated[float, Field(gt=0, le=1)]] = Field(
        default_factory=dict, max_length=64, description="GPU busy fraction alone (prices unmeasured "
                                                         "co-location).")


class GroupIn(_Strict):
    """A measured co-located group: two or three jobs sharing one GPU of ``gpu_type``."""

    job_ids: list[Annotated[str, _ID]] = Field(min_length=2, max_length=3)
    gpu_type: str = Field(min_length=1, max_length=64, pattern=_PRINTABLE)
    speeds: list[Annotated[float, Field(gt=0, le=1.5)]] | None = Field(
        default=None, description="Each job's co-located / isolated throughput, in job_ids order.")
    step_time_s: list[Annotated[float, Field(ge=MIN_STEP_TIME_S, le=1e6)]] | None = Field(
        default=None, description="Or each job's seconds per iteration while co-located (at least a "
                                  "microsecond).")
    memory_mib: float | None = Field(default=None, gt=0, le=1e9)


class JobIn(_Strict):
    """An active job: queued (``current_gpus`` empty) or running on ``current_gpus``."""

    id: str = _ID
    model: str | None = Field(default=None, min_length=1, max_length=128, pattern=_PRINTABLE,
                              description="Model-zoo id or alias, e.g. resnet50; leave out for a job "
                              "described by its measurements alone (then measured.step_time_s or "
                              "samples_per_s is needed).")
    measured: MeasuredIn | None = Field(default=None, description="The caller's measurements; predictions "
                                        "fill only what is missing.")
    batch_size: int = Field(ge=1, le=1_000_000)
    num_gpus: int = Field(default=1, ge=1, le=MAX_GPUS)
    remaining_iterations: float = Field(gt=0, le=1e12)
    total_iterations: float | None = Field(default=None, gt=0, le=1e12,
                                           description="Defaults to remaining_iterations.")
    attained_service_s: float = Field(default=0.0, ge=0, le=MAX_TIME_S,
                                      description="GPU-seconds received so far.")
    current_gpus: list[int] = Field(default_factory=list, max_length=MAX_GPUS,
                                    description="Global GPU indices it runs on now.")
    current_freeze_level: int = Field(default=0, ge=0, le=1000)
    arrival_time_s: float = Field(default=0.0, ge=0, le=MAX_TIME_S)
    queued_since_s: float = Field(default=0.0, ge=0, le=MAX_TIME_S)
    num_preemptions: int = Field(default=0, ge=0, le=1_000_000)
    weight: float = Field(default=1.0, gt=0, le=1e6)
    amp: bool = False
    optimizer: str = Field(default="sgd", min_length=1, max_length=32, pattern=_PRINTABLE)
    freeze_allowed: bool = False
    accuracy_budget: float = Field(default=0.0, ge=0, lt=1)
    gpu_types: list[Annotated[str, Field(min_length=1, max_length=64, pattern=_PRINTABLE)]] = Field(
        default_factory=list, max_length=32, description="GPU types the job may run on (default: any).")


class ConfigIn(_Strict):
    """Per-request round settings (those of ``RoundOptions``); left out: the server's. ``time_limit_s`` is
    capped by the server's limit."""

    backend: str | None = Field(default=None, max_length=64,
                                description="auto | cpsat | milp | greedy | greedy:<policy>; default: the "
                                            "server's")
    objective: Literal["effective_progress", "jct", "weighted_completion", "makespan"] | None = Field(
        default=None, description=f"Default: the server's ({DEFAULT_OBJECTIVE} unless configured otherwise).")
    max_jobs_per_gpu: int | None = Field(default=None, ge=1, le=3)
    freeze_levels: int | list[int] | None = Field(default=None, description="A count of levels (1..64) or "
                                                  "the allowed levels (at most 64, each 0..1000).")
    round_s: float | None = Field(default=None, gt=0, le=1e7, description="Round length, seconds.")
    num_workers: int | None = Field(default=None, ge=1, le=64, description="Solver threads (with "
                                    "deterministic: false).")
    deterministic: bool | None = Field(default=None,
                                       description="Reproducible solves (one worker, work budget).")
    allow_cross_node: bool | None = Field(default=None,
                                          description="May a job larger than one node span nodes.")
    migration_penalty: float | None = Field(default=None, ge=0, le=1e6)
    starvation_weight: float | None = Field(default=None, ge=0, le=1e6)
    max_partners: int | None = Field(default=None, ge=1, le=64)
    max_nodes_per_unit: int | None = Field(default=None, ge=1, le=1024)
    relative_gap: float | None = Field(default=None, ge=0, le=1)
    length_weight: float | None = Field(default=None, ge=0, le=4, description="effective_progress only: "
                                        "weigh each job by its predicted remaining time to this power, "
                                        "longest first (makespan); 0: off.")
    stage_horizon_s: float | None = Field(default=None, ge=0, le=1e7, description="effective_progress and "
                                          "jct: credit a co-located job with its mean speed until it "
                                          "completes or this many seconds pass (multi-stage values); 0: "
                                          "first-stage speeds.")
    value_reference_s: float | None = Field(default=None, gt=0, le=1e10, description="jct: the remaining "
                                            "time a job's progress is scaled against, seconds; default: the "
                                            "round's median.")
    unknown_memory: Literal["predict", "trust"] = Field(
        default="predict", description="A job's unmeasured memory: predicted (options that do not fit are "
        "dropped) or trusted (not checked). Jobs without a model are always trusted.")
    time_limit_s: float | None = Field(default=None, gt=0, le=3600,
                                       description="Bounds the whole request, building included; capped by "
                                       "the server's limit. Past it the answer is the best plan so far or a "
                                       "greedy one (partial: true).")

    @field_validator("freeze_levels")
    @classmethod
    def _levels_bounded(cls, value: int | list[int] | None) -> int | list[int] | None:
        if isinstance(value, int) and not 1 <= value <= 64:
            raise ValueError(f"{value} levels; must be 1..64")
        if isinstance(value, list) and (not 1 <= len(value) <= 64 or any(not 0 <= v <= 1000 for v in value)):
            raise ValueError("must list 1..64 levels, each 0..1000")
        return value


class ScheduleRequest(_Strict):
    """One round to schedule: the time, the cluster, the jobs, measured co-located groups and the
    solver settings."""

    time_s: float = Field(default=0.0, ge=0, le=MAX_TIME_S)
    cluster: ClusterIn
    jobs: list[JobIn] = Field(default_factory=list, max_length=MAX_JOBS)
    measured_groups: list[GroupIn] = Field(default_factory=list, max_length=MAX_JOBS,
                                           description="Measured co-located groups.")
    config: ConfigIn = Field(default_factory=ConfigIn)


REQUEST_EXAMPLES: dict[str, dict[str, Any]] = {
    "small": {
        "summary": "Two nodes, three jobs (one running)",
        "value": {
            "time_s": 3600.0,
            "cluster": {"nodes": [{"id": "n0", "gpu_type": "v100", "num_gpus": 4},
                                  {"id": "n1", "gpu_type": "k80", "num_gpus": 4}]},
            "jobs": [
                {"id": "resnet-a", "model": "resnet50", "batch_size": 64, "remaining_iterations": 20000,
                 "total_iterations": 50000, "current_gpus": [0]},
                {"id": "lm-b", "model": "lstm_lm", "batch_size": 20, "num_gpus": 2,
                 "remaining_iterations": 8000, "freeze_allowed": True, "accuracy_budget": 0.02},
                {"id": "rl-c", "model": "a3c", "batch_size": 4, "remaining_iterations": 1000},
            ],
            "config": {"backend": "auto", "time_limit_s": 2.0},
        },
    },
    "measured": {
        "summary": "Your measurements first: a job without a model, a measured pair, memory trusted",
        "value": {
            "cluster": {"nodes": [{"id": "n0", "gpu_type": "v100", "num_gpus": 2},
                                  {"id": "n1", "gpu_type": "k80", "num_gpus": 2}]},
            "jobs": [
                {"id": "yours", "batch_size": 64, "remaining_iterations": 5000,
                 "measured": {"step_time_s": {"v100": 0.2, "k80": 0.9}, "utilization": {"v100": 0.6}}},
                {"id": "zoo", "model": "resnet50", "batch_size": 32, "remaining_iterations": 3000,
                 "measured": {"samples_per_s": {"v100": 300.0}}},
            ],
            "measured_groups": [{"job_ids": ["yours", "zoo"], "gpu_type": "v100", "speeds": [0.8, 0.75]}],
            "config": {"backend": "cpsat", "time_limit_s": 2.0, "round_s": 360, "unknown_memory": "trust"},
        },
    },
    "greedy": {
        "summary": "A greedy baseline decides (bounded latency)",
        "value": {
            "cluster": {"nodes": [{"id": "n0", "gpu_type": "p100", "num_gpus": 8}]},
            "jobs": [{"id": f"j{i}", "model": "resnet18", "batch_size": 128, "remaining_iterations": 5000}
                     for i in range(3)],
            "config": {"backend": "greedy:sjf"},
        },
    },
}


class AssignmentOut(BaseModel):
    """Where one job runs this round: its GPUs (global indices), their type and nodes, its freeze level."""

    job_id: str
    gpus: list[int]
    gpu_type: str
    nodes: list[str]
    freeze_level: int


class ColocationGroupOut(BaseModel):
    """Jobs sharing one GPU (global index) this round."""

    gpu: int
    job_ids: list[str]


class ScheduleResponse(BaseModel):
    """The plan of a round: solve status, backend and timing, the assignments and co-location groups,
    and where each job's numbers came from."""

    status: str = Field(description="optimal | feasible | timeout | heuristic | fallback | infeasible")
    backend: str
    fallback: bool = Field(description="The plan is the fallback policy's (solver failed or out of time).")
    partial: bool = Field(default=False, description="The time limit cut the request short: the plan is the "
                          "solver's best so far (status feasible/timeout) or the fallback policy's.")
    fallback_reason: str | None = Field(default=None, description="deadline | solver_failed | checker | "
                                        "worker_died, when fallback is true.")
    time_limit_s: float | None = Field(default=None, description="The time limit the request ran under.")
    message: str
    objective: float | None
    bound: float | None
    gap: float | None
    solve_time_s: float
    build_time_s: float
    wall_time_s: float
    assignments: list[AssignmentOut]
    colocation_groups: list[ColocationGroupOut]
    queued: list[str] = Field(description="Active jobs the plan leaves waiting.")
    colocation_fallbacks: list[str] = Field(
        default_factory=list, description="Co-located jobs priced on a predicted profile (no profile of the "
        "job on that GPU type): the co-location predictor's fallback, never silent.")
    provenance: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="Per job, where its numbers came from (step_time, memory, "
        "colocation: measured | predicted | scaled | trusted | utilization | time-sliced | alone); with "
        "measurements only.")


class FieldError(BaseModel):
    """One invalid field of a request (its path) and what is wrong with it."""

    field: str
    message: str


class Problem(BaseModel):
    """RFC 9457 problem details (``application/problem+json``)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[FieldError] = Field(default_factory=list)


def to_cluster(data: ClusterIn) -> Cluster:
    """The domain cluster of ``data``; an invalid node raises :class:`ValidationError` at its path."""
    nodes = []
    for i, n in enumerate(data.nodes):
        try:
            nodes.append(Node(n.id, n.gpu_type, n.num_gpus, n.network_gbps))
        except ValidationError as err:
            raise err.under(f"cluster.nodes[{i}]") from None
        except (ValueError, TypeError, OverflowError) as err:  # a domain check without a field path
            raise ValidationError(f"cluster.nodes[{i}]", str(err)) from None
    try:
        return Cluster(tuple(nodes))
    except ValidationError:
        raise
    except (ValueError, TypeError, OverflowError) as err:
        raise ValidationError("cluster", str(err)) from None


def to_job_state(i: int, data: JobIn, cluster: Cluster) -> JobState:
    """The domain job of ``jobs[i]`` (raises ValidationError with a ``jobs[i]...`` path)."""
    total = data.total_iterations if data.total_iterations is not None else data.remaining_iterations
    if data.remaining_iterations > total:
        raise ValidationError(f"jobs[{i}].remaining_iterations", f"{data.remaining_iterations} exceeds "
                              f"total_iterations={total}; send remaining <= total")
    try:
        job = Job(data.id, data.model or MEASURED_ONLY, data.batch_size, total, num_gpus=data.num_gpus,
                  arrival_time_s=data.arrival_time_s, amp=data.amp, optimizer=data.optimizer,
                  weight=data.weight,
                  freeze_allowed=data.freeze_allowed, accuracy_budget=data.accuracy_budget,
                  gpu_types=tuple(data.gpu_types))
        assignment = _assignment(data, cluster)
    except ValidationError as err:
        raise err.under(f"jobs[{i}]") from None
    except (ValueError, TypeError, OverflowError) as err:  # a domain check without a field path
        raise ValidationError(f"jobs[{i}]", str(err)) from None
    return JobState(job, data.remaining_iterations, data.attained_service_s, assignment, data.num_preemptions,
                    queued_since_s=data.queued_since_s)


def _assignment(data: JobIn, cluster: Cluster) -> Assignment | None:
    if not data.current_gpus:
        return None
    gpus = tuple(data.current_gpus)
    if any(not 0 <= g < cluster.num_gpus for g in gpus):
        raise ValidationError("current_gpus", f"{list(gpus)} outside the cluster's GPUs "
                                              f"0..{cluster.num_gpus - 1}")
    if len(set(gpus)) != len(gpus):
        raise ValidationError("current_gpus", f"{list(gpus)} names a GPU twice")
    if len(gpus) != data.num_gpus:
        raise ValidationError("current_gpus", f"{len(gpus)} GPU(s) given for num_gpus={data.num_gpus}")
    if len({cluster.gpu_type_of(g) for g in gpus}) > 1:
        raise ValidationError("current_gpus", f"{list(gpus)} mixes GPU types; a gang runs on one type")
    return Assignment(data.id, gpus, data.current_freeze_level)


def to_state(req: ScheduleRequest) -> ClusterState:
    """The :class:`ClusterState` of a request (duplicate ids and bad placements name their field)."""
    cluster = to_cluster(req.cluster)
    for g in req.cluster.down_gpus:
        if not 0 <= g < cluster.num_gpus:
            raise ValidationError("cluster.down_gpus", f"GPU {g} outside 0..{cluster.num_gpus - 1}")
    seen: dict[str, int] = {}
    states = []
    down = set(req.cluster.down_gpus)
    for i, job in enumerate(req.jobs):
        if job.id in seen:
            raise ValidationError(f"jobs[{i}].id", f"duplicate job id '{job.id}' (also jobs[{seen[job.id]}])")
        seen[job.id] = i
        if hit := sorted(down.intersection(job.current_gpus)):
            raise ValidationError(f"jobs[{i}].current_gpus", f"runs on down GPU(s) {hit}; a failed GPU's "
                                  "jobs stop with it: send the job queued (no current_gpus)")
        states.append(to_job_state(i, job, cluster))
    return ClusterState(req.time_s, cluster, tuple(states), frozenset(req.cluster.down_gpus))


#: ``ConfigIn`` fields that are ``RoundOptions`` fields of the same name
ROUND_SETTINGS = ("objective", "max_jobs_per_gpu", "freeze_levels", "round_s", "num_workers", "deterministic",
                  "allow_cross_node", "migration_penalty", "starvation_weight", "max_partners",
                  "max_nodes_per_unit",
                  "relative_gap", "value_reference_s", "length_weight", "stage_horizon_s")


def to_config(data: ConfigIn, default: ConfiguredSolver, max_time_limit_s: float) -> ConfiguredSolver:
    """The request's solver: its round settings over the server's, the time limit capped."""
    settings: dict[str, Any] = {name: getattr(data, name) for name in ROUND_SETTINGS
                                if getattr(data, name) is not None}
    if isinstance(settings.get("freeze_levels"), list):
        settings["freeze_levels"] = tuple(settings["freeze_levels"])
    settings["time_limit_s"] = min(data.time_limit_s or default.time_limit_s, max_time_limit_s)
    try:
        return ConfiguredSolver.of(options=default.options, backend=data.backend or default.backend,
                                   predictors=default.predictors, fallback_policy=default.fallback_policy,
                                   exact_max_jobs=default.exact_max_jobs, **settings)
    except ValidationError as err:
        raise err.under("config") from None


def to_measurements(req: ScheduleRequest) -> Measurements | None:
    """The request's measurements (per-job ``measured``, ``measured_groups``), checked; ``None`` when it has
    none."""
    jobs = {j.id: JobMeasurement(j.measured.step_time_s, j.measured.samples_per_s, j.measured.memory_mib,
                                 j.measured.utilization) for j in req.jobs if j.measured is not None}
    groups = tuple(GroupMeasurement(tuple(g.job_ids), g.gpu_type,
                                    None if g.speeds is None else tuple(g.speeds),
                                    None if g.step_time_s is None else tuple(g.step_time_s), g.memory_mib)
                   for g in req.measured_groups)
    if not jobs and not groups and req.config.unknown_memory == "predict" and all(j.model for j in req.jobs):
        return None
    index = {j.id: i for i, j in enumerate(req.jobs)}
    for i, g in enumerate(req.measured_groups):
        if missing := [j for j in g.job_ids if j not in index]:
            raise ValidationError(f"measured_groups[{i}].job_ids", f"{missing} name no job of the request")
    try:
        return Measurements(jobs, groups, req.config.unknown_memory).checked()
    except ValidationError as err:  # name the request's field, not the API's
        path = err.path
        for job_id, i in index.items():
            path = path.replace(f"measurements.jobs['{job_id}']", f"jobs[{i}].measured")
        raise ValidationError(path.replace("measurements.groups", "measured_groups"), err.problem) from None


def to_response(plan: Plan, state: ClusterState, wall_time_s: float, *, partial: bool = False,
                time_limit_s: float | None = None, fallback_reason: str | None = None) -> ScheduleResponse:
    """The answer of ``plan`` for ``state`` (``wall_time_s``: seconds the request took; ``partial``,
    ``time_limit_s`` and ``fallback_reason`` as :class:`ScheduleResponse` describes them)."""
    cluster = state.cluster
    placed = {a.job_id for a in plan.assignments}
    return ScheduleResponse(
        status=plan.status, backend=plan.backend, fallback=plan.fallback, partial=partial,
        fallback_reason=(fallback_reason or "solver_failed") if plan.fallback else None,
        time_limit_s=time_limit_s, message=plan.message,
        objective=finite_or_none(plan.objective), bound=finite_or_none(plan.bound),
        gap=finite_or_none(plan.gap),
        solve_time_s=plan.solve_time_s, build_time_s=plan.build_time_s, wall_time_s=wall_time_s,
        assignments=[AssignmentOut(job_id=a.job_id, gpus=list(a.gpus),
                                   gpu_type=cluster.gpu_type_of(a.gpus[0]),
                                   nodes=sorted({cluster.nodes[cluster.gpu_node[g]].id for g in a.gpus}),
                                   freeze_level=a.freeze_level) for a in plan.assignments],
        colocation_groups=[ColocationGroupOut(gpu=g, job_ids=list(js))
                           for g, js in plan.colocation_groups().items() if len(js) > 1],
        queued=[s.job.id for s in state.jobs if s.job.id not in placed],
        colocation_fallbacks=list(plan.colocation_fallbacks),
        provenance={job: dict(entry) for job, entry in plan.provenance.items()},
    )


def state_to_request(state: ClusterState, config: dict[str, object] | None = None) -> dict[str, object]:
    """The ``POST /v1/schedule`` JSON body for ``state`` (what a Python client sends)."""
    cluster = state.cluster
    jobs = []
    for s in state.jobs:
        job = s.job
        item: dict[str, object] = {
            "id": job.id, "model": None if job.model == MEASURED_ONLY else job.model,
            "batch_size": job.batch_size, "num_gpus": job.num_gpus,
            "remaining_iterations": s.remaining_iterations, "total_iterations": job.total_iterations,
            "attained_service_s": s.attained_service_s, "arrival_time_s": job.arrival_time_s,
            "queued_since_s": s.queued_since_s, "weight": job.weight, "amp": job.amp,
            "optimizer": job.optimizer,
            "freeze_allowed": job.freeze_allowed, "accuracy_budget": job.accuracy_budget,
            "gpu_types": list(job.gpu_types), "num_preemptions": s.num_preemptions}
        if s.assignment is not None:
            item |= {"current_gpus": list(s.assignment.gpus),
                     "current_freeze_level": s.assignment.freeze_level}
        jobs.append(item)
    nodes = [{"id": n.id, "gpu_type": n.gpu_type, "num_gpus": n.num_gpus, "network_gbps": n.network_gbps}
             for n in cluster.nodes]
    body: dict[str, object] = {"time_s": state.time_s,
                               "cluster": {"nodes": nodes, "down_gpus": sorted(state.down_gpus)},
                               "jobs": jobs}
    if config:
        body["config"] = config
    return body

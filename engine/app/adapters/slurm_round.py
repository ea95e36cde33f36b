"""One round of ``dltsched slurm``: the snapshot the daemon reads, the plan the solver makes of it, and the
``scontrol`` actions that carry the plan out. Pure functions of their arguments (the daemon in
:mod:`.slurm` owns the state and the commands)."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dltsched.engine.app.adapters.gpu_names import catalog_gpu_type
from dltsched.engine.app.adapters.slurm_parse import NOTE_MARK, JobSpec, SlurmNode
from dltsched.engine.app.adapters.slurm_reserve import Reservation, backfill, reserve, starving_job

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a job runs or is to run: a node and GPU indices on it, and for a gang job the other nodes."""

    node: str
    gpus: tuple[int, ...]
    others: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def per_node(self) -> dict[str, tuple[int, ...]]:
        """Node -> GPU indices, every node of the placement."""
        return {self.node: self.gpus, **dict(self.others)}

    @property
    def node_list(self) -> str:
        """The nodes as ``scontrol``'s ``NodeList=`` takes them."""
        return ",".join(self.per_node)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The dltsched jobs and the partition's nodes at one instant, as the daemon sees them."""

    time_s: float
    nodes: tuple[SlurmNode, ...]
    running: Mapping[str, Placement]  # includes released jobs Slurm has not started yet
    queued: tuple[str, ...]
    specs: Mapping[str, JobSpec]
    num_gpus: Mapping[str, int]
    submit_time: Mapping[str, float]
    start_time: Mapping[str, float]
    #: node -> GPU indices taken by jobs that are not dltsched's
    foreign: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    #: job -> the nodes its typed gres and ``--constraint`` allow (absent: every node)
    allowed: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: job -> nodes of a gang job (absent: 1)
    node_count: Mapping[str, int] = field(default_factory=dict)
    #: job -> iterations done, as the job reported them (a queued job: its checkpoint; absent: a running job's
    #: estimated from elapsed time, a queued job's none)
    progress: Mapping[str, float] = field(default_factory=dict)
    #: running job -> its measured seconds per step on the GPUs it runs on (absent: predicted)
    speed: Mapping[str, float] = field(default_factory=dict)
    #: jobs that take whole nodes (``--exclusive``, or a partition with ``OverSubscribe=EXCLUSIVE``)
    exclusive: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class RoundConfig:
    """How the daemon solves a round (passed to
    :meth:`~dltsched.formulations.pipeline.ConfiguredSolver.of`)."""

    backend: str = "cpsat"
    objective: str = "jct"
    time_limit_s: float = 5.0
    default_gpu_type: str = "v100"
    predictors: str = "default"
    #: a queued job that has waited this many times its predicted run time gets GPUs reserved (0: never)
    starvation_factor: float = 0.0


def node_gpu_type(node: SlurmNode, default: str) -> str:
    """The catalog type of a node's gres type (``default`` when its gres names none); raises
    ``ValueError``."""
    return catalog_gpu_type(node.gpu_type) if node.gpu_type else catalog_gpu_type(default)


def domain_job(job_id: str, spec: JobSpec, num_gpus: int, submit_s: float, types: Sequence[str]) -> Any:
    """The domain :class:`~dltsched.engine.domain.model.Job` of a job spec; a model the catalogue does not
    know becomes a measured-only job when the spec has its own step time (raises ``ValidationError``
    otherwise)."""
    from dltsched.engine.domain.errors import ValidationError
    from dltsched.engine.domain.model import MEASURED_ONLY, Job

    def job(model: str) -> Job:
        return Job(job_id, model, spec.batch_size, spec.iterations, num_gpus=num_gpus,
                   arrival_time_s=submit_s, weight=spec.weight, gpu_types=tuple(types))

    try:
        return job(spec.model)
    except ValidationError as err:
        if err.path != "model" or spec.step_time_s is None:
            raise
        # a model the catalogue does not know, with the job's own step time: priced by that alone
        return job(MEASURED_ONLY)


def job_measurements(snap: Snapshot, active: set[str], run_types: Mapping[str, str] | None = None) -> Any:
    """The jobs' own step times: the comment's ``step_s`` (on its ``gpu_type``, else every type), and a
    running job's measured speed on the GPU type it runs on (``run_types``), which wins over the comment
    there."""
    from dltsched.engine.app.measured import JobMeasurement, Measurements

    jobs = {}
    for job_id, spec in snap.specs.items():
        if job_id not in active:
            continue
        steps: dict[str, float] = {}
        if spec.step_time_s is not None:
            steps[catalog_gpu_type(spec.gpu_type) if spec.gpu_type else "*"] = spec.step_time_s
        measured, gpu_type = snap.speed.get(job_id), (run_types or {}).get(job_id)
        if measured is not None and gpu_type is not None:
            steps[gpu_type] = measured
        if steps:
            jobs[job_id] = JobMeasurement(step_time_s=steps)
    return Measurements(jobs, unknown_memory="predict").checked()


def price_problem(
    job_id: str, spec: JobSpec, num_gpus: int, node_count: int, types: Sequence[str], config: RoundConfig
) -> str | None:
    """Why the job cannot be priced or placed (one line for ``squeue``), or ``None`` when it can."""
    from dltsched.engine.app import api

    if not types:
        return "no node of the partition meets its gres type and --constraint"
    if num_gpus % node_count:
        return f"{num_gpus} GPUs over {node_count} nodes: not the same count on each"
    if spec.gpu_type is not None:
        try:
            catalog_gpu_type(spec.gpu_type)
        except ValueError as err:
            return f"comment gpu_type: {err}"
    try:
        job = domain_job(job_id, spec, num_gpus, 0.0, types)
    except Exception as err:  # noqa: BLE001 - the reason goes to the job, the round goes on
        if getattr(err, "path", None) == "model":
            return (
                f"unknown model '{spec.model}': add step_s=<measured seconds per step> to the comment, or "
                "name a model of the catalogue"
            )
        return f"{getattr(err, 'path', 'job')}: {getattr(err, 'problem', err)}"
    if spec.step_time_s is not None:
        return None
    step = api.load_predictors(config.predictors).step_time
    problems = []
    for gpu_type in types:
        try:
            if step.step_time_s(job, gpu_type) > 0:
                return None
        except Exception as err:  # noqa: BLE001
            problems.append(f"{gpu_type}: {err}")
    return (
        "cannot predict its step time ("
        + "; ".join(problems)[:200]
        + "); give step_s=<seconds> in the comment"
    )


def decide(
    snap: Snapshot, config: RoundConfig, warm_start: Any = None, *, pin_running: bool = True
) -> tuple[dict[str, Placement], Any]:
    """Solve the round of ``snap`` with :func:`~dltsched.engine.app.api.solve_round`: job -> placement for
    every job the plan runs, and the plan itself (the next round's warm start). The only function here
    that touches dltsched's domain types. Jobs must be priceable (:func:`price_problem`).

    ``pin_running``: running jobs stay where they are (their GPUs are simply taken), as without preemption;
    ``False`` lets the plan stop or move them (at the migration penalty)."""
    from dltsched.engine.app import api
    from dltsched.engine.app.measured import measured_predictors
    from dltsched.engine.domain.model import Assignment, Cluster, ClusterState, JobState, Node
    from dltsched.formulations.pipeline import ConfiguredSolver

    types: dict[str, str] = {}
    for n in snap.nodes:
        if n.num_gpus > 0:
            try:
                types[n.name] = node_gpu_type(n, config.default_gpu_type)
            except ValueError as err:
                log.warning("node %s left out: gres type %s", n.name, err)
    nodes = [n for n in snap.nodes if n.name in types]
    cluster = Cluster(tuple(Node(n.name, types[n.name], n.num_gpus) for n in nodes))
    first = {n.name: cluster.node_first_gpu[i] for i, n in enumerate(nodes)}
    where = {
        g: (n.name, g - first[n.name])
        for n in nodes
        for g in range(first[n.name], first[n.name] + n.num_gpus)
    }
    jobs = {}
    for job_id, spec in snap.specs.items():
        allowed = snap.allowed.get(job_id)
        job_types = sorted({types[n] for n in allowed if n in types}) if allowed is not None else []
        jobs[job_id] = domain_job(
            job_id, spec, snap.num_gpus[job_id], float(snap.submit_time[job_id]), job_types
        )
    base = api.load_predictors(config.predictors)
    active = {j for j in snap.queued if j in jobs} | {j for j, p in snap.running.items() if j in jobs}
    preds = measured_predictors(base, job_measurements(snap, active))
    held: set[int] = set()
    run_types: dict[str, str] = {}
    states = []
    for job_id, p in snap.running.items():
        gpus = tuple(
            first[node] + i
            for node, idx in p.per_node.items()
            if node in first
            for i in idx
            if i < cluster.nodes[cluster_index(cluster, node)].num_gpus
        )
        if job_id not in jobs or len(gpus) != jobs[job_id].num_gpus:
            continue  # on nodes outside the model: its GPUs are not ours to plan
        held.update(gpus)
        run_types[job_id] = cluster.gpu_type_of(gpus[0])
        if pin_running:
            continue
        spec, elapsed = snap.specs[job_id], max(0.0, snap.time_s - snap.start_time.get(job_id, snap.time_s))
        done = snap.progress.get(job_id)
        if done is None:
            done = elapsed / preds.step_time.step_time_s(jobs[job_id], run_types[job_id])
        left = max(spec.iterations * 0.01, spec.iterations - done)
        states.append(
            JobState(
                jobs[job_id],
                left,
                attained_service_s=elapsed * len(gpus),
                assignment=Assignment(job_id, gpus),
                first_start_s=snap.start_time.get(job_id),
                queued_since_s=float(snap.submit_time[job_id]),
            )
        )
    # a queued job whose Slurm request (its node count, the same GPU count on each) no free GPUs meet now
    # stays out of the solve: the round model would spread it over nodes, which Slurm cannot run, and the
    # GPUs it was given would stay idle this round
    free = _free_gpus(snap, set() if pin_running else set(snap.running))
    fitting = [j for j in snap.queued if _fits_now(snap, j, free, types)]
    states += [
        JobState(
            jobs[j],
            max(jobs[j].total_iterations * 0.01, jobs[j].total_iterations - snap.progress.get(j, 0.0)),
            queued_since_s=jobs[j].arrival_time_s,
        )
        for j in fitting
    ]
    down = {first[n.name] + i for n in nodes for i in range(n.num_gpus) if not n.usable}
    all_measured = measured_predictors(base, job_measurements(snap, active, run_types))
    node_types = {n.name: types[n.name] for n in nodes}
    reservation, run_s = _reservation(snap, config, jobs, all_measured, run_types, node_types)
    kept: set[int] = set()
    if reservation is not None:
        now = reservation.starts_now(snap.time_s)
        keep = reservation.per_node if now else reservation.withheld
        kept = {first[n] + g for n, idx in keep.items() for g in idx}
        if now:
            states = [s for s in states if s.job.id != reservation.job_id]
        log.info(
            "job %s waits longest for its run time: GPUs %s kept for it, from %+.0f s",
            reservation.job_id,
            dict(reservation.per_node),
            reservation.start_s - snap.time_s,
        )
    measured = job_measurements(snap, {s.job.id for s in states}, run_types)  # the jobs the solve decides
    down |= {
        first[name] + i
        for name, idx in snap.foreign.items()
        if name in first
        for i in idx
        if i < cluster.nodes[cluster_index(cluster, name)].num_gpus
    }
    state = ClusterState(
        snap.time_s,
        cluster,
        tuple(states),
        down_gpus=frozenset((down | held if pin_running else down - held) | kept),
    )
    solve = ConfiguredSolver.of(
        backend=config.backend,
        objective=config.objective,
        max_jobs_per_gpu=1,
        freeze_levels=(0,),
        time_limit_s=config.time_limit_s,
    )
    plan = api.solve_round(state, solve, warm_start=warm_start, predictors=base, measurements=measured)
    wanted: dict[str, dict[str, tuple[int, ...]]] = {}
    for a in plan.assignments:
        per: dict[str, list[int]] = {}
        for g in a.gpus:
            per.setdefault(where[g][0], []).append(where[g][1])
        wanted[a.job_id] = {k: tuple(sorted(v)) for k, v in per.items()}
    if pin_running:
        wanted.update({j: p.per_node for j, p in snap.running.items()})
    wanted.pop(reservation.job_id if reservation is not None else "", None)
    out = realize(snap, wanted, {g for g in down - held} | kept, where, types)
    if reservation is not None and reservation.starts_now(snap.time_s):
        out[reservation.job_id] = _placement(reservation.per_node)
    elif reservation is not None:
        waiting = [j for j in snap.queued if j not in out and j != reservation.job_id]
        limits = {j: snap.allowed.get(j) for j in waiting}
        early = backfill(reservation, snap.time_s, waiting, run_s, snap.num_gpus, snap.node_count, limits)
        out.update({j: _placement(per) for j, per in early.items()})
    log.info(
        "round: %d running, %d queued -> plan %s (%s, %.2fs), %d placed",
        len(snap.running),
        len(snap.queued),
        plan.status,
        plan.backend,
        plan.solve_time_s,
        len(out),
    )
    return out, plan


def _free_gpus(snap: Snapshot, movable: set[str]) -> dict[str, int]:
    """Node -> GPUs a queued job may take now: on usable nodes, not others', not held by running jobs (but
    those in ``movable``, which the plan may stop or move)."""
    taken = {n: set(idx) for n, idx in snap.foreign.items()}
    for job_id, p in snap.running.items():
        if job_id not in movable:
            for node, idx in p.per_node.items():
                taken.setdefault(node, set()).update(idx)
    return {
        n.name: n.num_gpus - len(taken.get(n.name, set()) & set(range(n.num_gpus)))
        for n in snap.nodes
        if n.usable
    }


def _fits_now(snap: Snapshot, job_id: str, free: Mapping[str, int], types: Mapping[str, str]) -> bool:
    """Whether ``free`` holds the job's request: its node count of one GPU type, within its allowed nodes,
    each with its GPUs per node free (a job taking whole nodes: every GPU of each)."""
    count = snap.node_count.get(job_id, 1)
    each = snap.num_gpus[job_id] // count
    allowed = snap.allowed.get(job_id)
    size = {n.name: n.num_gpus for n in snap.nodes}
    per_type: dict[str, int] = {}
    for node, n_free in free.items():
        need = size[node] if job_id in snap.exclusive else each
        if node in types and (allowed is None or node in allowed) and n_free >= max(need, 1):
            per_type[types[node]] = per_type.get(types[node], 0) + 1
    return any(n >= count for n in per_type.values())


def _reservation(
    snap: Snapshot,
    config: RoundConfig,
    jobs: Mapping[str, Any],
    preds: Any,
    run_types: Mapping[str, str],
    types: Mapping[str, str],
) -> tuple[Reservation | None, dict[str, float]]:
    """The reservation for the starving queued job, if one is (:mod:`.slurm_reserve`), and the queued jobs'
    predicted run times (s). Running jobs end after their remaining iterations (reported, else estimated from
    elapsed time) at their measured or predicted step time."""
    if config.starvation_factor <= 0 or not snap.queued:
        return None, {}

    def step_s(job_id: str, gpu_type: str) -> float:
        try:
            return float(preds.step_time.step_time_s(jobs[job_id], gpu_type))
        except Exception:  # noqa: BLE001 - a job that cannot be priced on a type does not run there
            return math.inf

    run_s = {}
    for j in snap.queued:
        if j in jobs:
            left = max(jobs[j].total_iterations * 0.01, jobs[j].total_iterations - snap.progress.get(j, 0.0))
            fits = [t for n, t in types.items() if snap.allowed.get(j) is None or n in snap.allowed[j]]
            run_s[j] = left * min((step_s(j, t) for t in set(fits)), default=math.inf)
    job_id = starving_job(snap.queued, snap.time_s, snap.submit_time, run_s, config.starvation_factor)
    if job_id is None:
        return None, run_s
    foreign = {n: set(idx) for n, idx in snap.foreign.items()}
    free_at = {
        n.name: [
            snap.time_s if n.usable and g not in foreign.get(n.name, ()) else math.inf
            for g in range(n.num_gpus)
        ]
        for n in snap.nodes
        if n.name in types
    }
    for k, p in snap.running.items():
        if k not in jobs or k not in run_types:
            continue
        step = step_s(k, run_types[k])
        elapsed = max(0.0, snap.time_s - snap.start_time.get(k, snap.time_s))
        done = snap.progress.get(k, elapsed / step if step > 0 else 0.0)
        end = snap.time_s + max(0.0, jobs[k].total_iterations - done) * step
        for node, idx in p.per_node.items():
            for g in idx:
                if node in free_at and g < len(free_at[node]) and math.isfinite(free_at[node][g]):
                    free_at[node][g] = end
    count = snap.node_count.get(job_id, 1)
    whole = job_id in snap.exclusive
    return reserve(
        job_id,
        snap.time_s,
        free_at,
        types,
        snap.num_gpus[job_id] // count,
        count,
        snap.allowed.get(job_id),
        whole,
    ), run_s


def cluster_index(cluster: Any, node: str) -> int:
    """The position of the node named ``node`` in ``cluster.nodes``.

    Parameters
    ----------
    cluster
        The round's cluster.
    node
        The node's id (its Slurm name).

    Returns
    -------
    int
        The index of the first node of ``cluster.nodes`` whose ``id`` is ``node``.
    """
    return next(i for i, n in enumerate(cluster.nodes) if n.id == node)


def realize(
    snap: Snapshot,
    wanted: Mapping[str, Mapping[str, tuple[int, ...]]],
    down: set[int],
    where: Mapping[int, tuple[str, int]],
    types: Mapping[str, str],
) -> dict[str, Placement]:
    """Placements Slurm can run from the plan's GPU sets: a job's nodes within its allowed set, a gang job on
    exactly its node count with the same GPU count on each. A plan placement that breaks that is moved to
    GPUs of the same type that nobody else takes, else the job waits this round."""
    size = {n.name: n.num_gpus for n in snap.nodes}
    taken: dict[str, set[int]] = {}
    for g in down:
        taken.setdefault(where[g][0], set()).add(where[g][1])
    for p in snap.running.values():
        for node, idx in p.per_node.items():
            taken.setdefault(node, set()).update(idx)
    out: dict[str, Placement] = {}
    retry = []

    def fits(job_id: str, per: Mapping[str, tuple[int, ...]]) -> bool:
        """Nobody holds the GPUs (an exclusive job: nobody holds anything on its nodes)."""
        if job_id in snap.exclusive:
            return not any(taken.get(n) for n in per)
        return not any(taken.get(n, set()) & set(i) for n, i in per.items())

    def take(job_id: str, per: Mapping[str, tuple[int, ...]]) -> None:
        for node, idx in per.items():
            taken.setdefault(node, set()).update(range(size[node]) if job_id in snap.exclusive else idx)

    for job_id, per in wanted.items():
        if job_id in snap.running:
            running = snap.running[job_id]
            out[job_id] = running if set(per) == set(running.per_node) else _placement(per)
            continue
        count = snap.node_count.get(job_id, 1)
        allowed = snap.allowed.get(job_id)
        each = snap.num_gpus[job_id] // count
        if (
            len(per) == count
            and all(len(i) == each for i in per.values())
            and (allowed is None or set(per) <= allowed)
            and fits(job_id, per)
        ):
            out[job_id] = _placement(per)
            take(job_id, per)
        else:
            retry.append((job_id, per))
    for job_id, per in retry:
        count, allowed = snap.node_count.get(job_id, 1), snap.allowed.get(job_id)
        each = snap.num_gpus[job_id] // count
        gpu_type = types.get(next(iter(per)))
        free = {
            n: [g for g in range(size[n]) if g not in taken.get(n, set())]
            for n in size
            if types.get(n) == gpu_type and (allowed is None or n in allowed)
        }
        need = {n: size[n] if job_id in snap.exclusive else each for n in free}
        fit = sorted(
            (n for n, f in free.items() if len(f) >= max(each, need[n])),
            key=lambda n: (n not in per, len(free[n]), n),
        )
        if len(fit) < count:
            log.info(
                "job %s: the plan's placement %s does not fit Slurm's request; it waits", job_id, dict(per)
            )
            continue
        chosen = {n: tuple(free[n][:each]) for n in fit[:count]}
        out[job_id] = _placement(chosen)
        take(job_id, chosen)
    return out


def _placement(per: Mapping[str, tuple[int, ...]]) -> Placement:
    (node, gpus), *rest = sorted(per.items())
    return Placement(node, tuple(gpus), tuple((n, tuple(i)) for n, i in rest))


# ----------------------------------------------------------------------------- plan -> scontrol


@dataclass(frozen=True, slots=True)
class Action:
    """One change to apply: ``start`` a held job on its nodes; ``signal`` a running job the plan stops (it
    may checkpoint); ``requeue`` it (held) after the grace period; ``hold`` a job pending unheld without
    dltsched's release; ``flag`` a held job that cannot be planned, with the reason (``reason``)."""

    kind: str
    job_id: str
    node: str = ""
    gpus: tuple[int, ...] = ()
    reason: str = ""
    #: ``flag``: the job's own comment, to which the reason is appended (so that ``squeue -o %k`` shows it)
    comment: str = ""

    def commands(self, time_limit: str | None = None, signal: str = "USR1") -> list[list[str]]:
        """The Slurm calls of this action, in order."""
        if self.kind == "start":
            update = ["scontrol", "update", f"JobId={self.job_id}", f"NodeList={self.node}"]
            update += [f"TimeLimit={time_limit}"] if time_limit else []
            return [update, ["scontrol", "release", self.job_id]]
        if self.kind == "signal":
            return [["scancel", f"--signal={signal}", "--full", self.job_id]]
        if self.kind == "requeue":
            return [["scontrol", "requeuehold", self.job_id]]
        if self.kind == "hold":
            return [["scontrol", "hold", self.job_id]]
        if self.kind == "flag":
            reason = self.reason.replace("\n", " ")[:250]
            out = (
                [["scontrol", "update", f"JobId={self.job_id}", f"Comment={self.comment}{NOTE_MARK}{reason}"]]
                if self.comment
                else []
            )
            return out + [["scontrol", "update", f"JobId={self.job_id}", f"AdminComment=dltsched: {reason}"]]
        raise ValueError(
            f"action kind '{self.kind}' not understood; one of start, signal, requeue, hold, flag"
        )


def plan_actions(
    snap: Snapshot,
    placements: Mapping[str, Placement],
    *,
    preempt: bool,
    signalled: Mapping[str, float] | None = None,
    grace_s: float = 0.0,
) -> list[Action]:
    """The actions that carry out ``placements``: start each queued job the plan places on GPUs that are
    free now (not held, not on an unusable node, not taken by others). With ``preempt``, each running job
    the plan stops or moves is signalled first and requeued (held) ``grace_s`` after its signal
    (``signalled``: job -> when it was signalled); its GPUs count as free once it is requeued."""
    signalled = signalled or {}
    busy: dict[str, set[int]] = {n.name: set(snap.foreign.get(n.name, ())) for n in snap.nodes}
    usable = {n.name for n in snap.nodes if n.usable}
    actions = []
    for job_id, p in snap.running.items():
        new = placements.get(job_id)
        stopped = new is None or new.per_node.keys() != p.per_node.keys()
        if preempt and stopped and job_id not in signalled:
            actions.append(Action("signal", job_id))
            if grace_s > 0:
                for node, idx in p.per_node.items():
                    busy.setdefault(node, set()).update(idx)
                continue
        if preempt and stopped and snap.time_s - signalled.get(job_id, snap.time_s) >= grace_s:
            actions.append(Action("requeue", job_id))
            continue
        for node, idx in p.per_node.items():
            busy.setdefault(node, set()).update(idx)
    size = {n.name: n.num_gpus for n in snap.nodes}
    for job_id in snap.queued:
        place = placements.get(job_id)
        if place is None or any(
            n not in usable or busy.get(n, set()) & set(i) for n, i in place.per_node.items()
        ):
            continue
        if job_id in snap.exclusive and any(busy.get(n) for n in place.per_node):
            continue  # whole nodes: nothing else may run there
        for node, idx in place.per_node.items():
            busy[node].update(range(size[node]) if job_id in snap.exclusive else idx)
        actions.append(
            Action("start", job_id, place.node_list, tuple(g for i in place.per_node.values() for g in i))
        )
    return actions

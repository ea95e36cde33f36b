"""Backend-neutral description of one scheduling round: options, GPU classes, jobs, coefficients.

A :class:`RoundProblem` holds numbers only (no solver types), so a round can be saved as JSON,
shared and re-solved by any backend. Jobs are referred to by their position in ``jobs``.
GPUs keep the cluster's global indices; a node is a GPU class (one type, interchangeable GPUs).
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import DEFAULT_OBJECTIVE, OBJECTIVES, Objective

FORMAT = "dltsched-round/1"
#: shortest remaining time the ``jct`` objective distinguishes (keeps job values within a bounded ratio)
JCT_MIN_REMAINING_S = 60.0


@dataclass(frozen=True, slots=True)
class RoundOptions:
    """How a round is modelled and solved.

    Objectives (maximisation form; see :meth:`RoundProblem.value_scale`): ``effective_progress`` = sum over
    placed jobs of weight x co-located speed x effective rate / reference rate; ``jct`` = the same with each
    job's term scaled by ``T_ref / T_j``, its predicted remaining time ``T_j`` relative to the round's median
    ``T_ref`` (``value_reference_s`` when given: a caller deciding some of its jobs passes the median over
    all of them, so that a job is worth the same whichever of its jobs the round holds): the rate at which
    the sum of the jobs' log remaining times falls, i.e. shortest remaining time first generalised to
    co-location, GPU types and freezing (for low average completion time); ``weighted_completion`` and
    ``makespan`` are minimised over predicted multi-stage completion times. ``length_weight`` ``w``
    (``effective_progress`` only; default 0: off) scales each job's term by ``(T_j / T_ref) ** w``, longest
    remaining time first (LPT), the makespan-oriented configuration: for a batch of jobs the makespan is set
    by the long ones, which the unweighted sum starts in no particular order.

    ``freeze_levels`` is either the allowed levels or a count ``n`` (levels spread evenly over the
    model's blocks). ``migration_penalty`` is charged per running job that moves or is preempted, as a
    fraction of that job's own value scale (see :meth:`RoundProblem.migration_cost`: objective units for
    every objective but ``jct``, where a long job's move costs as little as its progress is worth);
    ``starvation_weight`` (bonus per placed queued job and hour waited) is in objective units.
    ``round_s`` is the round length: a job left out is predicted to wait one round and then run alone.
    ``max_partners`` bounds the co-location partners enumerated per job (keeps groups O(jobs));
    ``max_nodes_per_unit`` bounds the nodes offered to a multi-GPU unit per type (see candidates).

    ``stage_horizon_s`` (``effective_progress`` and ``jct``): a co-located member's speed in its term is its
    mean speed until it completes or this many seconds pass (multi-stage values,
    :func:`~dltsched.formulations.interference.horizon_speeds`: survivors are credited with the speed-up they
    get as partners finish); 0 (the default) keeps the first-stage speeds. The measured reason for the default
    is in the ablation documentation.

    ``deterministic`` (the default) makes a solve reproducible bit for bit: CP-SAT runs one worker under a
    deterministic work budget derived from ``time_limit_s`` instead of a wall-clock limit, HiGHS one thread
    (see :mod:`dltsched.formulations.backends.cpsat`); ``False`` gives ``num_workers`` workers and a
    wall-clock limit (faster on a large round, but two runs may return different plans).
    """

    objective: Objective = DEFAULT_OBJECTIVE
    max_jobs_per_gpu: int = 2
    freeze_levels: tuple[int, ...] | int = 4
    time_limit_s: float = 10.0
    migration_penalty: float = 0.1
    starvation_weight: float = 0.0
    round_s: float = 300.0
    max_partners: int = 4
    relative_gap: float = 1e-4
    allow_cross_node: bool = True
    num_workers: int = 2
    max_nodes_per_unit: int = 4
    deterministic: bool = True
    value_reference_s: float | None = None
    length_weight: float = 0.0
    stage_horizon_s: float = 0.0

    def __post_init__(self) -> None:
        try:  # a name from a round file, the service or the API becomes the enum here, once
            object.__setattr__(self, "objective", Objective.named(self.objective))
        except ValueError:
            raise ValidationError("options.objective", f"'{self.objective}' not understood; one of "
                                  f"{', '.join(OBJECTIVES)}") from None
        if self.max_jobs_per_gpu not in (1, 2, 3):
            raise ValidationError("options.max_jobs_per_gpu",
                                  f"{self.max_jobs_per_gpu!r} not understood; must be 1, 2 or 3")
        levels = self.freeze_levels
        if isinstance(levels, list | tuple):
            levels = tuple(int(v) for v in levels)
            if not levels or min(levels) < 0:
                raise ValidationError("options.freeze_levels",
                                      f"{levels} not understood; non-empty levels >= 0")
            object.__setattr__(self, "freeze_levels", tuple(sorted(set(levels) | {0})))
        elif not isinstance(levels, int) or levels < 1:
            raise ValidationError("options.freeze_levels",
                                  f"{levels!r} not understood; a count >= 1 or a tuple of levels")
        for name in ("time_limit_s", "round_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValidationError(f"options.{name}", f"{value!r} not understood; must be > 0")
        for name in ("migration_penalty", "starvation_weight", "relative_gap"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValidationError(f"options.{name}", f"{value!r} not understood; must be >= 0")
        reference = self.value_reference_s
        if reference is not None and (isinstance(reference, bool) or not isinstance(reference, int | float)
                                      or not math.isfinite(reference) or reference <= 0):
            raise ValidationError("options.value_reference_s",
                                  f"{reference!r} not understood; a time > 0 s or none "
                                  "(the median over the round's jobs)")
        weight = self.length_weight
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight <= 4:
            raise ValidationError("options.length_weight",
                                  f"{weight!r} not understood; a number in [0, 4] (0: off)")
        if weight and self.objective is not Objective.EFFECTIVE_PROGRESS:
            raise ValidationError("options.length_weight",
                                  f"{weight!r} applies to objective effective_progress "
                                  f"only, not {self.objective}; "
                                  "set objective=effective_progress or length_weight=0")
        horizon = self.stage_horizon_s
        if (isinstance(horizon, bool) or not isinstance(horizon, int | float) or math.isnan(horizon)
                or horizon < 0):
            raise ValidationError("options.stage_horizon_s",
                                  f"{horizon!r} not understood; seconds >= 0 (0: first-stage "
                                  "speeds; inf: each job's whole remaining run)")
        if not isinstance(self.deterministic, bool):
            raise ValidationError("options.deterministic",
                                  f"{self.deterministic!r} not understood; true or false")
        for name in ("max_partners", "num_workers", "max_nodes_per_unit"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValidationError(f"options.{name}",
                                      f"{getattr(self, name)!r} not understood; must be >= 1")

    @property
    def minimize(self) -> bool:
        """Whether the objective is minimised (:attr:`Objective.sense`)."""
        return self.objective.minimize


@dataclass(frozen=True, slots=True)
class GpuNode:
    """One GPU class: the ``num_gpus`` GPUs ``first_gpu ..`` of one node, all of ``gpu_type``;
    ``down_gpus`` of them (failed, or held back by the caller) may not be used this round."""

    id: str
    gpu_type: str
    num_gpus: int
    first_gpu: int
    memory_mib: float
    down_gpus: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        down = tuple(sorted(set(self.down_gpus)))
        if any(g not in self.gpus for g in down):
            raise ValidationError(f"nodes['{self.id}'].down_gpus", f"{down} not all in this node's GPUs "
                                  f"{self.first_gpu}..{self.first_gpu + self.num_gpus - 1}")
        object.__setattr__(self, "down_gpus", down)

    @property
    def gpus(self) -> range:
        """Global indices of the node's GPUs, ``first_gpu`` to ``first_gpu + num_gpus - 1`` (down ones
        included)."""
        return range(self.first_gpu, self.first_gpu + self.num_gpus)

    @property
    def usable_gpus(self) -> int:
        """GPUs of the node a plan may use: all but the down ones."""
        return self.num_gpus - len(self.down_gpus)

    def up_gpus(self) -> tuple[int, ...]:
        """Indices of the node's usable GPUs, ascending."""
        return tuple(g for g in self.gpus if g not in self.down_gpus)


@dataclass(frozen=True, slots=True)
class NodeTypes:
    """Per GPU type of some nodes: their indices (ascending), the usable GPUs of the largest one, the usable
    GPUs in all, and the memory of one GPU."""

    nodes: dict[str, tuple[int, ...]]
    largest: dict[str, int]
    total: dict[str, int]
    memory_mib: dict[str, float]

    @staticmethod
    def of(nodes: tuple[GpuNode, ...]) -> NodeTypes:
        """Summarise ``nodes`` per GPU type.

        Parameters
        ----------
        nodes
            The GPU classes of a round, in the round's order (their positions are the indices kept).

        Returns
        -------
        NodeTypes
            Per type: the node indices, the usable GPUs of the largest node and in all, and the memory of
            one GPU in MiB (the first node's of that type).
        """
        of_type: dict[str, list[int]] = {}
        largest: dict[str, int] = {}
        total: dict[str, int] = {}
        memory: dict[str, float] = {}
        for i, n in enumerate(nodes):
            of_type.setdefault(n.gpu_type, []).append(i)
            largest[n.gpu_type] = max(largest.get(n.gpu_type, 0), n.usable_gpus)
            total[n.gpu_type] = total.get(n.gpu_type, 0) + n.usable_gpus
            memory.setdefault(n.gpu_type, n.memory_mib)
        return NodeTypes({t: tuple(ns) for t, ns in of_type.items()}, largest, total, memory)


@dataclass(frozen=True, slots=True)
class JobOption:
    """Coefficients of one job on one GPU type at one freeze level.

    ``cross_step_time_s`` is the step time spread over nodes (only set when the job is larger than
    every node of the type); ``frozen_penalty`` is the fraction of iterations lost to freezing.
    """

    gpu_type: str
    freeze_level: int
    step_time_s: float
    memory_mib: float
    frozen_penalty: float = 0.0
    cross_step_time_s: float | None = None

    def rate(self, cross: bool = False) -> float:
        """Effective progress in useful iterations per second."""
        step = self.cross_step_time_s if cross else self.step_time_s
        if step is None:
            raise ValidationError("options.cross_step_time_s", f"no cross-node step time on {self.gpu_type}")
        return (1.0 - self.frozen_penalty) / step


@dataclass(frozen=True, slots=True)
class RoundJob:
    """An active job as the round sees it.

    ``reference_rate`` (iterations/s) normalises progress: the best isolated rate at level 0.
    ``current_gpus`` is where it runs now (empty: queued); ``age_s`` how long it has waited.
    """

    id: str
    num_gpus: int
    weight: float
    remaining_iterations: float
    reference_rate: float
    options: tuple[JobOption, ...]
    age_s: float = 0.0
    current_gpus: tuple[int, ...] = ()
    current_freeze: int = 0

    @property
    def running(self) -> bool:
        """Whether the job holds GPUs now (``current_gpus`` not empty); a queued job does not."""
        return bool(self.current_gpus)


@dataclass(frozen=True, slots=True)
class ColocGroup:
    """Predicted behaviour of jobs sharing one GPU of ``gpu_type``: ``speeds[i]`` for ``jobs[i]``
    (relative to running alone) and the memory the group needs beyond its members' own memory.
    Only ``allowed`` groups may be placed; the others are sub-groups kept for multi-stage times."""

    jobs: tuple[int, ...]
    gpu_type: str
    speeds: tuple[float, ...]
    overhead_mib: float = 0.0
    allowed: bool = True


@dataclass(frozen=True, slots=True)
class Unplaceable:
    """A job that no plan can place, and why; ``while_down``: only because GPUs are down now."""

    job_id: str
    reason: str
    while_down: bool = False


@dataclass(frozen=True, slots=True)
class RoundProblem:
    """One round: options, GPU classes, jobs with per-option coefficients and co-location groups."""

    options: RoundOptions
    nodes: tuple[GpuNode, ...]
    jobs: tuple[RoundJob, ...]
    groups: tuple[ColocGroup, ...] = ()
    time_s: float = 0.0
    unplaceable: tuple[Unplaceable, ...] = ()
    _option_index: dict[tuple[int, str, int], JobOption] = field(init=False, repr=False, compare=False)
    _group_index: dict[tuple[tuple[int, ...], str], ColocGroup] = field(init=False, repr=False, compare=False)
    _value_scale: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _node_of: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _types: NodeTypes = field(init=False, repr=False, compare=False)
    _down: frozenset[int] = field(init=False, repr=False, compare=False)
    _value_speeds: dict[tuple[tuple[int, ...], str], tuple[float, ...]] = field(init=False, repr=False,
                                                                                 compare=False)
    _gpu_types: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _num_gpus: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValidationError("nodes", "empty; a round needs at least one node")
        types = {n.gpu_type for n in self.nodes}
        num_gpus = sum(n.num_gpus for n in self.nodes)
        index: dict[tuple[int, str, int], JobOption] = {}
        ids: set[str] = set()
        for j, job in enumerate(self.jobs):
            if job.id in ids:
                raise ValidationError(f"jobs[{j}].id", f"duplicate job id '{job.id}'")
            ids.add(job.id)
            if any(not 0 <= g < num_gpus for g in job.current_gpus):
                raise ValidationError(f"jobs[{j}].current_gpus",
                                      f"{job.current_gpus} outside 0..{num_gpus - 1}")
            for k, opt in enumerate(job.options):
                if opt.gpu_type not in types:
                    raise ValidationError(f"jobs[{j}].options[{k}].gpu_type",
                                          f"'{opt.gpu_type}' is not in the cluster")
                index[(j, opt.gpu_type, opt.freeze_level)] = opt
        groups: dict[tuple[tuple[int, ...], str], ColocGroup] = {}
        num_jobs = len(self.jobs)
        for i, group in enumerate(self.groups):
            members = group.jobs
            if len(members) == 2 and len(group.speeds) == 2 and 0 <= members[0] < members[1] < num_jobs:
                groups[(members, group.gpu_type)] = group  # a valid pair (the common case), checked at once
                continue
            if len(group.speeds) != len(group.jobs) or any(not 0 <= j < len(self.jobs) for j in group.jobs):
                raise ValidationError(f"groups[{i}]", "jobs and speeds must have one entry per known job")
            if list(group.jobs) != sorted(set(group.jobs)) or len(group.jobs) < 2:
                raise ValidationError(f"groups[{i}].jobs",
                                      f"{group.jobs} must be >= 2 sorted distinct job indices")
            groups[(group.jobs, group.gpu_type)] = group
        object.__setattr__(self, "_option_index", index)
        object.__setattr__(self, "_group_index", groups)
        object.__setattr__(self, "_value_scale", _value_scales(self.options.objective, self.jobs,
                                                               self.options.value_reference_s,
                                                               self.options.length_weight))
        object.__setattr__(self, "_node_of", tuple(n for n, node in enumerate(self.nodes) for _ in node.gpus))
        object.__setattr__(self, "_types", NodeTypes.of(self.nodes))
        object.__setattr__(self, "_down", frozenset(g for n in self.nodes for g in n.down_gpus))
        object.__setattr__(self, "_value_speeds", {})
        object.__setattr__(self, "_gpu_types", tuple(dict.fromkeys(n.gpu_type for n in self.nodes)))
        object.__setattr__(self, "_num_gpus", sum(n.num_gpus for n in self.nodes))

    @property
    def num_gpus(self) -> int:
        """GPUs of the cluster in all, down ones included (one past the highest global GPU index)."""
        return self._num_gpus

    def value_scale(self, job: int) -> float:
        """Factor on job ``job``'s progress term: 1, ``T_ref / T_j`` for the ``jct`` objective, or
        ``(T_j / T_ref) ** length_weight`` for ``effective_progress`` with a length weight."""
        return self._value_scale[job]

    def value_speeds(self, group: ColocGroup) -> tuple[float, ...]:
        """The speeds a maximised objective credits ``group``'s members with: the first-stage speeds, or with
        ``stage_horizon_s > 0`` each member's mean speed until it completes or the horizon passes (stages from
        the members' unfrozen rates; a sub-group the round has no speeds for keeps the first-stage speeds)."""
        horizon = self.options.stage_horizon_s
        if horizon == 0 or self.options.minimize:
            return group.speeds
        key = (group.jobs, group.gpu_type)
        hit = self._value_speeds.get(key)
        if hit is None:
            hit = self._stage_speeds(group, horizon)
            self._value_speeds[key] = hit
        return hit

    def _stage_speeds(self, group: ColocGroup, horizon_s: float) -> tuple[float, ...]:
        from dltsched.formulations.interference import horizon_speeds

        rates = []
        for j in group.jobs:
            options = [o for o in self.jobs[j].options if o.gpu_type == group.gpu_type]
            if not options:
                return group.speeds
            rates.append(min(options, key=lambda o: o.freeze_level).rate())
        subgroups = {}
        for size in range(2, len(group.jobs)):
            for active in combinations(range(len(group.jobs)), size):
                sub = self.group(tuple(group.jobs[a] for a in active), group.gpu_type)
                if sub is None:
                    return group.speeds
                subgroups[active] = sub.speeds
        subgroups[tuple(range(len(group.jobs)))] = group.speeds
        return horizon_speeds([self.jobs[j].remaining_iterations for j in group.jobs], rates,
                              lambda active: subgroups[active], horizon_s)

    def migration_cost(self, job: int) -> float:
        """What moving or preempting running job ``job`` costs, in objective units:
        ``migration_penalty x v x min(1, v)`` with ``v = value_scale(job)``: under ``jct`` a job longer than
        the round's median (``v = T_ref / T_j < 1``) pays that fraction again, because a move's gain lasts
        its whole remaining time while its cost is paid once (other objectives: ``v = 1``)."""
        v = self._value_scale[job]
        return self.options.migration_penalty * v * min(1.0, v)

    @property
    def running_migration_cost(self) -> float:
        """Sum of :meth:`migration_cost` over the running jobs (the cost if every one moved)."""
        return sum(self.migration_cost(j) for j, job in enumerate(self.jobs) if job.running)

    def option(self, job: int, gpu_type: str, freeze_level: int) -> JobOption | None:
        """The coefficients of job ``job`` on ``gpu_type`` at ``freeze_level``.

        Parameters
        ----------
        job
            Position of the job in ``jobs``.
        gpu_type
            GPU type name.
        freeze_level
            Leading layer blocks frozen (0: none).

        Returns
        -------
        JobOption or None
            The option, or ``None`` when the job has none there (it does not fit, or the level is not
            offered).
        """
        return self._option_index.get((job, gpu_type, freeze_level))

    def group(self, jobs: tuple[int, ...], gpu_type: str) -> ColocGroup | None:
        """The co-location group of ``jobs`` on one GPU of ``gpu_type``.

        Parameters
        ----------
        jobs
            Positions of the members in ``jobs``, in any order.
        gpu_type
            GPU type name.

        Returns
        -------
        ColocGroup or None
            The group (allowed or kept only for multi-stage times), or ``None`` when the round has no
            speeds for these jobs together there.
        """
        # members already in order (the usual case): one look-up
        found = self._group_index.get((jobs, gpu_type)) if isinstance(jobs, tuple) else None
        return found if found is not None else self._group_index.get((tuple(sorted(jobs)), gpu_type))

    def gpu_types(self) -> tuple[str, ...]:
        """The GPU types of the cluster, each once, in the order their first node appears."""
        return self._gpu_types

    def max_node_gpus(self, gpu_type: str) -> int:
        """Usable GPUs of the largest node of ``gpu_type`` (0: none up)."""
        return self._types.largest.get(gpu_type, 0)

    def down_gpus(self) -> frozenset[int]:
        """GPUs no plan may use this round."""
        return self._down

    @property
    def node_of(self) -> tuple[int, ...]:
        """Index of the node of every GPU."""
        return self._node_of

    def nodes_of_type(self, gpu_type: str) -> tuple[int, ...]:
        """Indices of the nodes of ``gpu_type``, ascending."""
        return self._types.nodes.get(gpu_type, ())

    def memory_mib_of(self, gpu_type: str) -> float:
        """Memory of one GPU of ``gpu_type``."""
        return self._types.memory_mib[gpu_type]

    def job_index(self) -> dict[str, int]:
        """Job id -> position of the job in ``jobs``."""
        return {job.id: j for j, job in enumerate(self.jobs)}

    def to_dict(self) -> dict[str, Any]:
        """The round as plain JSON-ready data (lists, dicts, numbers, strings) tagged with ``FORMAT``;
        :meth:`from_dict` reads it back."""
        data = {"format": FORMAT}
        data.update({name: _plain(getattr(self, name))
                     for name in ("time_s", "options", "nodes", "jobs", "groups", "unplaceable")})
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> RoundProblem:
        """Rebuild a round from the data :meth:`to_dict` wrote, validating it.

        Parameters
        ----------
        data
            The round's data, with ``format`` equal to ``FORMAT``.

        Returns
        -------
        RoundProblem
            The round.

        Raises
        ------
        ValidationError
            When the format is another, a field is missing or of the wrong shape, or a value is invalid.
        """
        if data.get("format") != FORMAT:
            raise ValidationError("format", f"{data.get('format')!r} not understood; expected '{FORMAT}'")
        try:
            jobs = tuple(
                RoundJob(**{**j, "options": tuple(JobOption(**o) for o in j["options"]),
                            "current_gpus": tuple(j["current_gpus"])})
                for j in data["jobs"])
            return RoundProblem(
                options=RoundOptions(**data["options"]),
                nodes=tuple(GpuNode(**{**n, "down_gpus": tuple(n.get("down_gpus", ()))})
                            for n in data["nodes"]),
                jobs=jobs,
                groups=tuple(ColocGroup(**{**g, "jobs": tuple(g["jobs"]), "speeds": tuple(g["speeds"])})
                             for g in data["groups"]),
                time_s=float(data["time_s"]),
                unplaceable=tuple(Unplaceable(**u) for u in data["unplaceable"]),
            )
        except (KeyError, TypeError) as err:
            raise ValidationError("round",
                                  f"malformed round JSON ({err}); write it with RoundProblem.save") from None

    def to_json(self) -> str:
        """The round as JSON text (:meth:`to_dict`, indented)."""
        return json.dumps(self.to_dict(), indent=1)

    def save(self, path: str | Path) -> None:
        """Write the round as JSON to ``path`` (replacing the file); :meth:`load` reads it back."""
        Path(path).write_text(self.to_json())

    @staticmethod
    def load(path: str | Path) -> RoundProblem:
        """Read a round :meth:`save` wrote.

        Parameters
        ----------
        path
            The round file.

        Returns
        -------
        RoundProblem
            The round.

        Raises
        ------
        ValidationError
            When the file holds JSON that is not a valid round.
        OSError
            When the file cannot be read.
        json.JSONDecodeError
            When the file is not JSON.
        """
        return RoundProblem.from_dict(json.loads(Path(path).read_text()))


def remaining_time_s(job: RoundJob) -> float:
    """Predicted time to finish alone at the job's reference rate, at least ``JCT_MIN_REMAINING_S``."""
    return max(JCT_MIN_REMAINING_S, job.remaining_iterations / job.reference_rate)


def _value_scales(objective: Objective, jobs: tuple[RoundJob, ...], reference_s: float | None,
                  length_weight: float = 0.0) -> tuple[float, ...]:
    longest_first = objective is Objective.EFFECTIVE_PROGRESS and length_weight > 0
    if (objective is not Objective.JCT and not longest_first) or not jobs:
        return (1.0,) * len(jobs)
    times = [remaining_time_s(j) for j in jobs]
    reference = median_remaining_s(times) if reference_s is None else max(JCT_MIN_REMAINING_S, reference_s)
    if longest_first:
        return tuple(j.num_gpus * (t / reference) ** length_weight for j, t in zip(jobs, times, strict=True))
    return tuple(reference / t for t in times)


def median_remaining_s(times: list[float]) -> float:
    """The median of remaining times (the ``jct`` objective's ``T_ref``)."""
    times = sorted(times)
    mid = len(times) // 2
    return times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2.0


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return {k: _plain(v) for k, v in asdict(value).items()}
    return value


def __getattr__(name: str) -> Any:
    if name == "MINIMIZE":  # the set of minimised objectives, before Objective knew its sense
        warnings.warn("dltsched.formulations.problem.MINIMIZE is deprecated and will be removed in 0.3.0; "
                      "use Objective.minimize (dltsched.engine.domain.model.Objective)", DeprecationWarning,
                      stacklevel=2)
        return frozenset(o for o in Objective if o.minimize)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Test helpers: table predictors with hand-picked numbers, snapshot/round builders, a checked-result assert.

Used by the formulations tests and by anyone who wants a round whose optimum can be worked out by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from dltsched.engine.domain.model import Assignment, Cluster, ClusterState, Job, JobState, Node
from dltsched.engine.domain.predictors import Predictors
from dltsched.formulations.build import build_round
from dltsched.formulations.checker import check_plan
from dltsched.formulations.problem import RoundOptions, RoundProblem
from dltsched.formulations.result import RoundResult

V100_MIB = 16 * 1024.0


@dataclass
class Tables:
    """Per job id: step time (s) and memory (MiB) per freeze level; penalties; pair speeds; per GPU type
    a factor on every step time (``type_factor``, default 1)."""

    step_s: dict[str, Sequence[float]] = field(default_factory=dict)
    memory: dict[str, Sequence[float]] = field(default_factory=dict)
    penalty: dict[str, Sequence[float]] = field(default_factory=dict)
    speeds: dict[tuple[str, ...], Sequence[float]] = field(default_factory=dict)
    default_speed: float = 0.6
    cross_factor: float = 1.5
    type_factor: dict[str, float] = field(default_factory=dict)

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None, *,
                    freeze_level: int = 0, num_nodes: int = 1) -> float:
        """Tabled seconds per iteration x the GPU type's factor (x the cross-node factor)."""
        cross = self.cross_factor if num_nodes > 1 else 1.0
        return self.step_s[job.id][freeze_level] * cross * self.type_factor.get(gpu_type, 1.0)

    def memory_mib(self, job: Job, gpu_type: str, *, freeze_level: int = 0) -> float:
        """Tabled memory at the freeze level, MiB (1000 when not tabled)."""
        return self.memory_mib_of(job.id)[freeze_level]

    def memory_mib_of(self, job_id: str) -> Sequence[float]:
        """The tabled memory of a job per freeze level, MiB (1000 each when not tabled).

        Parameters
        ----------
        job_id
            The job's id.

        Returns
        -------
        Sequence[float]
            MiB per freeze level.
        """
        return self.memory.get(job_id, [1000.0] * len(self.step_s[job_id]))

    def num_freeze_levels(self, job: Job) -> int:
        """Freeze levels tabled for the job."""
        return len(self.step_s[job.id])

    def frozen_penalty(self, job: Job, freeze_level: int, start_progress: float = 0.0) -> float:
        """Tabled accuracy penalty at the freeze level (0 when not tabled)."""
        return self.penalty.get(job.id, [0.0] * len(self.step_s[job.id]))[freeze_level]

    def colocated_speeds(self, jobs: Sequence[Job], gpu_type: str) -> tuple[float, ...]:
        """Tabled co-located speeds, in ``jobs``' order (``default_speed`` when not tabled)."""
        key = tuple(sorted(j.id for j in jobs))
        table = self.speeds.get(key)
        if table is None:
            return tuple(self.default_speed for _ in jobs)
        return tuple(table[key.index(j.id)] for j in jobs)

    def group_memory_mib(self, jobs: Sequence[Job], gpu_type: str) -> float:
        """The members' unfrozen memory summed, MiB."""
        return sum(self.memory_mib_of(j.id)[0] for j in jobs)

    def bundle(self) -> Predictors:
        """These tables as step-time, co-location and freezing predictors at once.

        Returns
        -------
        Predictors
            The bundle.
        """
        return Predictors(self, self, self)


def make_state(nodes: Sequence[tuple[str, int]], jobs: Sequence[Job],
               running: dict[str, tuple[int, ...]] | None = None, remaining: dict[str, float] | None = None,
               time_s: float = 0.0, down: Sequence[int] = ()) -> ClusterState:
    """A snapshot: ``nodes`` as (gpu type, count); ``running`` maps job id -> its GPUs now; ``down`` GPUs
    failed."""
    cluster = Cluster(tuple(Node(f"n{i}", t, k) for i, (t, k) in enumerate(nodes)))
    running = running or {}
    remaining = remaining or {}
    states = tuple(
        JobState(job, remaining.get(job.id, job.total_iterations),
                 assignment=Assignment(job.id, running[job.id]) if job.id in running else None)
        for job in jobs)
    return ClusterState(time_s, cluster, states, frozenset(down))


def job(job_id: str, num_gpus: int = 1, weight: float = 1.0, iterations: float = 100.0, **kw: object) -> Job:
    """A resnet50 job (batch 32) for tests.

    Parameters
    ----------
    job_id
        The job's id.
    num_gpus
        GPUs it needs.
    weight
        Its weight in the objective.
    iterations
        Iterations to run.
    **kw
        Other :class:`Job` fields.

    Returns
    -------
    Job
        The job.
    """
    return Job(job_id, "resnet50", 32, iterations, num_gpus=num_gpus, weight=weight,
               **kw)  # type: ignore[arg-type]


def make_round(tables: Tables, nodes: Sequence[tuple[str, int]], jobs: Sequence[Job],
               **kw: object) -> RoundProblem:
    """The round problem for ``jobs`` on ``nodes``, priced by ``tables``.

    Parameters
    ----------
    tables
        The predictors.
    nodes
        (GPU type, GPU count) per node.
    jobs
        The queued jobs.
    **kw
        ``options`` (a :class:`RoundOptions`; default: relative gap 0) and the arguments of ``make_state``.

    Returns
    -------
    RoundProblem
        The round.
    """
    options = kw.pop("options", RoundOptions(relative_gap=0.0))
    state = make_state(nodes, jobs, **kw)  # type: ignore[arg-type]
    return build_round(state, tables.bundle(), options)  # type: ignore[arg-type]


def checked(problem: RoundProblem, result: RoundResult) -> float:
    """Assert the plan passes the checker and its objective matches (1e-6 relative); return it."""
    report = check_plan(problem, result.plan)
    assert report.feasible, report.violations
    assert result.plan.objective is not None and report.objective is not None
    assert abs(result.plan.objective - report.objective) <= 1e-6 * max(1.0, abs(report.objective))
    return report.objective

"""Plans: a policy's decision for one round (which jobs run on which GPUs, at which freeze level) and how
it came about.

:mod:`dltsched.engine.domain.model` re-exports every name here; import them from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from dltsched.engine.domain.errors import ValidationError

if TYPE_CHECKING:
    from dltsched.engine.domain.state import ClusterState


class PlanStatus(StrEnum):
    """How a plan came about (``Plan.status``; a ``str``, so ``plan.status == "optimal"`` holds and JSON
    writes the plain name).

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


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where one job runs in a plan: its GPUs (global indices) and its freeze level.

    Parameters
    ----------
    job_id
        The job's id.
    gpus
        The GPUs it holds, global indices ``0 .. cluster.num_gpus - 1``; at least one, none twice.
    freeze_level
        How many of the model's layer groups are frozen (0: none).

    Raises
    ------
    ValidationError
        When ``gpus`` is empty or names a GPU twice, or ``freeze_level`` is negative.
    """

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

    Parameters
    ----------
    assignments
        Where each placed job runs; a job at most once.
    status
        How the plan came about.
    objective, bound, gap
        The solver's objective value, its best bound and their relative gap (``None``: no solver ran).
    solve_time_s, build_time_s
        Seconds spent solving and building the model.
    backend
        The solver backend that decided (empty: none).
    fallback
        Whether the fallback policy decided.
    message
        A note on how the plan came about (why a solver fell back, for instance).
    incremental
        ``True``: ``assignments`` only lists the jobs to start or move; every running job it does not list
        keeps its current placement (a non-preemptive policy's round costs O(changes), not O(running
        jobs)). An incremental plan cannot preempt. See :meth:`resolved`.
    provenance
        Per job id, where the round's numbers for it came from, e.g. ``{"step_time": "measured",
        "memory": "trusted", "colocation": "predicted"}`` (filled by the embedding API when the caller
        passes measurements). Not part of equality or the hash.
    colocation_fallbacks
        Ids of the co-located jobs whose co-location numbers rest on a fallback: the co-location predictor had
        no profile of the job on its GPU type and predicted it (filled by the optimizing policy, which also
        counts them in its solve log). Not part of equality or the hash.

    Raises
    ------
    ValidationError
        When a job is placed more than once.
    """

    assignments: tuple[Assignment, ...] = ()
    status: PlanStatus = PlanStatus.HEURISTIC
    objective: float | None = None
    bound: float | None = None
    gap: float | None = None
    solve_time_s: float = 0.0
    build_time_s: float = 0.0
    backend: str = ""
    fallback: bool = False
    message: str = ""
    incremental: bool = False
    provenance: Mapping[str, Mapping[str, str]] = field(default_factory=dict, compare=False, hash=False)
    colocation_fallbacks: tuple[str, ...] = field(default=(), compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "assignments", tuple(self.assignments))
        ids = [a.job_id for a in self.assignments]
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise ValidationError("plan.assignments", f"job(s) {dup} placed more than once")

    def by_job(self) -> dict[str, Assignment]:
        """The assignments by job id.

        Returns
        -------
        dict of str to Assignment
            Each placed job's assignment, by its id.
        """
        return {a.job_id: a for a in self.assignments}

    def resolved(self, state: ClusterState) -> Plan:
        """The full plan: an incremental plan's new assignments plus the running jobs' current ones.

        Parameters
        ----------
        state
            The snapshot the plan was decided on.

        Returns
        -------
        Plan
            This plan when it is not incremental; otherwise a full (not incremental) plan holding the
            running jobs it does not list where they run now, then its own assignments.
        """
        if not self.incremental:
            return self
        listed = {a.job_id for a in self.assignments}
        keep = tuple(s.assignment for s in state.running()
                     if s.assignment is not None and s.job.id not in listed)
        return replace(self, assignments=keep + self.assignments, incremental=False)

    def colocation_groups(self) -> dict[int, tuple[str, ...]]:
        """GPU -> job ids sharing it, for every GPU that holds at least one job.

        Returns
        -------
        dict of int to tuple of str
            Per GPU that holds a job (ascending), the ids of its jobs, sorted.
        """
        groups: dict[int, list[str]] = {}
        for a in self.assignments:
            for g in a.gpus:
                groups.setdefault(g, []).append(a.job_id)
        return {g: tuple(sorted(js)) for g, js in sorted(groups.items())}

"""One result type for every backend: the plan plus how the solve ended.

``termination`` (:class:`Termination`) says why the solver stopped (``optimal``, ``gap_limit``,
``time_limit``, ``infeasible``, ``error``, ``not_run``); ``solution_status`` (:class:`SolutionStatus`)
says what came back (``optimal``, ``feasible``, ``fallback``, ``none``), kept apart as in Pyomo.
``plan.status`` combines them for users: ``optimal`` | ``feasible`` (stopped at the gap limit) | ``timeout``
(time limit, incumbent returned) | ``fallback`` (greedy plan, nothing usable from the solver) | ``infeasible``
(some jobs can never be placed: ``infeasible_jobs`` names them; the plan places the others). Jobs that only
the GPUs down now keep out are in ``infeasible_jobs`` too (``while_down``) but leave the status alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dltsched.engine.domain.model import Plan
from dltsched.formulations.problem import Unplaceable


class Termination(StrEnum):
    """Why a backend stopped (Pyomo's termination condition, in the words of this project)."""

    OPTIMAL = "optimal"
    GAP_LIMIT = "gap_limit"
    TIME_LIMIT = "time_limit"
    INFEASIBLE = "infeasible"
    ERROR = "error"
    NOT_RUN = "not_run"  # a heuristic backend: no solver ran


class SolutionStatus(StrEnum):
    """What a backend returned (Pyomo's solution status)."""

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    FALLBACK = "fallback"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class RoundResult:
    """A solved round; ``plan`` carries status, objective, bound, gap, times, backend, fallback.

    Parameters
    ----------
    plan
        The round's plan.
    termination
        Why the backend stopped.
    solution_status
        What the backend returned.
    infeasible_jobs
        The jobs no plan can place (and those only down GPUs keep out, ``while_down``).
    num_candidates
        The candidate placements the backend chose from.
    stages
        Seconds per stage of the solve (see :func:`~dltsched.formulations.solve.solve_problem`).
    """

    plan: Plan
    termination: Termination
    solution_status: SolutionStatus
    infeasible_jobs: tuple[Unplaceable, ...] = ()
    num_candidates: int = 0
    stages: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready values: the plan's figures, termination, solution status, the jobs no plan
        can place and the assignments (enums as their plain names)."""
        plan = self.plan
        return {
            "status": str(plan.status), "objective": plan.objective, "bound": plan.bound, "gap": plan.gap,
            "solve_time_s": plan.solve_time_s, "build_time_s": plan.build_time_s, "backend": plan.backend,
            "fallback": plan.fallback, "termination": str(self.termination),
            "solution_status": str(self.solution_status),
            "message": plan.message, "num_candidates": self.num_candidates,
            "infeasible_jobs": [{"job_id": u.job_id, "reason": u.reason, "while_down": u.while_down}
                                for u in self.infeasible_jobs],
            "assignments": [{"job_id": a.job_id, "gpus": list(a.gpus), "freeze_level": a.freeze_level}
                            for a in plan.assignments],
        }


def relative_gap(objective: float, bound: float, minimize: bool) -> float:
    """``(bound - objective) / max(|objective|, |bound|)`` in the objective's sense, at least 0 (0 when both
    are 0).

    Never better than the truth: a bound or objective that is not finite (a solver stopped without a
    bound) gives ``inf``, not the 0 that ``max(0.0, inf / inf)`` would (``NaN`` compares false), and the
    gap is not clamped to 1 (a bound of the other sign can be more than 100% away).
    """
    if not (math.isfinite(objective) and math.isfinite(bound)):
        return math.inf
    diff = (objective - bound) if minimize else (bound - objective)
    scale = max(abs(objective), abs(bound))
    return 0.0 if scale < 1e-12 else max(0.0, diff / scale)

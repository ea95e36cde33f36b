"""The rolling-horizon optimizing policy: every round is a CP-SAT or MILP model over co-location and freezing.

At each decision point (arrival, completion, failure, or the ``round_interval_s`` tick) the policy builds
the round's :class:`~dltsched.formulations.RoundProblem` from the snapshot and the predictors, solves it
with the chosen backend under ``time_limit_s``, warm-started from its previous plan, checks the result
with the solver-independent checker and commits it. Events closer than ``min_interval_s`` to the last
solve are batched: running jobs stay, new arrivals start greedily on free GPUs, and the next solve
considers everything. A round that times out keeps the solver's best plan; with none, the greedy fallback.
Migration and preemption are priced by ``migration_penalty`` (the simulator also charges the
checkpoint-restore time of every moved job).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from dltsched.engine.domain import Assignment, ClusterState, Plan
from dltsched.engine.policies.greedy import place_exclusive
from dltsched.engine.policies.placement import Estimates
from dltsched.engine.predict import Predictors, default_predictors

log = logging.getLogger(__name__)


@dataclass
class OptimizingPolicy:
    """Rolling-horizon co-location + freezing optimizer (see module docstring)."""

    predictors: Predictors = field(default_factory=default_predictors)
    backend: str = "cpsat"
    objective: str = "effective_progress"
    max_jobs_per_gpu: int = 2
    freeze_levels: tuple[int, ...] | int = 4
    time_limit_s: float = 2.0
    migration_penalty: float = 0.1
    starvation_weight: float = 0.05
    min_interval_s: float = 0.0
    round_interval_s: float | None = 1800.0
    max_partners: int = 4
    name: str = "optimizing"
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from dltsched.formulations import RoundOptions

        self._options = RoundOptions(
            objective=self.objective, max_jobs_per_gpu=self.max_jobs_per_gpu, freeze_levels=self.freeze_levels,
            time_limit_s=self.time_limit_s, migration_penalty=self.migration_penalty,
            starvation_weight=self.starvation_weight, round_s=self.round_interval_s or 1800.0,
            max_partners=self.max_partners, **self.options)
        self._est = Estimates(self.predictors)
        self._last_plan: Plan | None = None
        self._last_solve_s = float("-inf")
        self.solve_log: list[dict[str, Any]] = []

    def schedule(self, state: ClusterState) -> Plan:
        if not state.jobs:
            return Plan()
        if state.time_s - self._last_solve_s < self.min_interval_s:
            return self._between_solves(state)
        plan = self._solve(state)
        self._last_plan = plan
        self._last_solve_s = state.time_s
        return plan

    def _between_solves(self, state: ClusterState) -> Plan:
        queued = sorted(state.queued(), key=lambda s: (s.job.arrival_time_s, s.job.id))
        return place_exclusive(state, queued, self._est, blocking=False)

    def _solve(self, state: ClusterState) -> Plan:
        from dltsched.formulations import build_round, check_plan, solve_round

        problem = build_round(state, self.predictors, self._options)
        warm = self._warm_start(state)
        result = solve_round(problem, self.backend, time_limit_s=self.time_limit_s, warm_start=warm)
        report = check_plan(problem, result.plan)
        plan = result.plan
        if not report.feasible:
            log.warning("round at t=%.0f s: solver plan failed the checker (%s); using the greedy fallback",
                        state.time_s, "; ".join(report.violations[:3]))
            plan = solve_round(problem, "greedy").plan
        self.solve_log.append({"time_s": state.time_s, "status": plan.status, "solve_time_s": plan.solve_time_s,
                               "build_time_s": plan.build_time_s, "gap": plan.gap, "jobs": len(state.jobs)})
        return Plan(tuple(a for a in plan.assignments), status=plan.status, objective=plan.objective,
                    bound=plan.bound, gap=plan.gap, solve_time_s=plan.solve_time_s, build_time_s=plan.build_time_s,
                    backend=plan.backend, fallback=plan.fallback, message=plan.message)

    def _warm_start(self, state: ClusterState) -> Plan | None:
        """The current placements (running jobs), which the last plan led to."""
        running = tuple(Assignment(s.job.id, s.assignment.gpus, s.assignment.freeze_level)
                        for s in state.jobs if s.assignment is not None)
        return Plan(running) if running else None

    def state_dict(self) -> dict[str, Any]:
        return {"last_solve_s": self._last_solve_s if self._last_solve_s != float("-inf") else None}

    def load_state_dict(self, data: dict[str, Any]) -> None:
        value = data.get("last_solve_s")
        self._last_solve_s = float("-inf") if value is None else float(value)

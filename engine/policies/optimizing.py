"""The rolling-horizon optimizing policy: every round is a CP-SAT or MILP model over co-location and freezing.

At each decision point (arrival, completion, failure, or the ``round_interval_s`` tick) the policy hands
the snapshot to :func:`dltsched.engine.api.solve_round`, which builds the round's
:class:`~dltsched.formulations.RoundProblem` from the predictors, solves it with ``config.backend`` under
``config.time_limit_s`` warm-started from the current placements, checks the plan with the
solver-independent checker and falls back to a greedy plan when the solver gives nothing usable. A round
that times out keeps the solver's best plan. Events closer than ``min_interval_s`` to the last solve are
batched: running jobs stay, new arrivals start greedily on free GPUs (shortest predicted remaining time
first under the ``jct`` objective, else in arrival order), and the next solve sees everything.
Migration and preemption are priced by ``config.migration_penalty``; the simulator also charges the
checkpoint-restore time of every moved job.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from dltsched.engine.api import SolveConfig, solve_round
from dltsched.engine.domain import ClusterState, JobState, Plan
from dltsched.engine.policies.greedy import place_exclusive
from dltsched.engine.policies.placement import Estimates
from dltsched.engine.predict import Predictors


@dataclass
class OptimizingPolicy:
    """Rolling-horizon co-location + freezing optimizer (see module docstring)."""

    config: SolveConfig = field(default_factory=lambda: SolveConfig(time_limit_s=2.0))
    predictors: Predictors | None = None
    min_interval_s: float = 0.0
    round_interval_s: float | None = 1800.0
    name: str = "optimizing"

    def __post_init__(self) -> None:
        if self.predictors is None:
            from dltsched.engine.api import load_predictors

            self.predictors = load_predictors(self.config.predictors)
        self._est = Estimates(self.predictors)
        self._last_solve_s = float("-inf")
        self.solve_log: list[dict[str, Any]] = []

    def schedule(self, state: ClusterState) -> Plan:
        if not state.jobs:
            return Plan()
        if state.time_s - self._last_solve_s < self.min_interval_s:
            return place_exclusive(state, self._between_solves_order(state), self._est, blocking=False)
        warm = state.current_plan() if any(s.assignment is not None for s in state.jobs) else None
        plan = solve_round(state, self.config, warm_start=warm, predictors=self.predictors)
        self._last_solve_s = state.time_s
        self.solve_log.append({"time_s": state.time_s, "status": plan.status, "solve_time_s": plan.solve_time_s,
                               "build_time_s": plan.build_time_s, "gap": plan.gap, "jobs": len(state.jobs)})
        return plan

    def _between_solves_order(self, state: ClusterState) -> Sequence[JobState]:
        queued = state.queued()
        if self.config.objective != "jct":
            return queued
        est = self._est

        def remaining_s(s: JobState) -> float:
            types = est.candidate_types(s.job, state.cluster)
            return s.remaining_iterations * est.step_time_s(s.job, types[0]) if types else math.inf

        return sorted(queued, key=lambda s: (remaining_s(s), s.job.arrival_time_s, s.job.id))

    def state_dict(self) -> dict[str, Any]:
        return {"last_solve_s": self._last_solve_s if self._last_solve_s != float("-inf") else None}

    def load_state_dict(self, data: dict[str, Any]) -> None:
        value = data.get("last_solve_s")
        self._last_solve_s = float("-inf") if value is None else float(value)


_CONFIG_FIELDS = {f.name for f in fields(SolveConfig)}


def optimizing_policy(predictors: Predictors | None = None, **options: Any) -> OptimizingPolicy:
    """Registry factory: ``options`` may mix :class:`SolveConfig` fields (backend, time_limit_s, ...) and
    policy fields (min_interval_s, round_interval_s, name)."""
    config_kw = {k: v for k, v in options.items() if k in _CONFIG_FIELDS}
    policy_kw = {k: v for k, v in options.items() if k not in _CONFIG_FIELDS}
    config = SolveConfig(**({"time_limit_s": 2.0} | config_kw))
    return OptimizingPolicy(config, predictors, **policy_kw)


def without_colocation(predictors: Predictors | None = None, **options: Any) -> OptimizingPolicy:
    """Ablation: the optimizing policy with one job per GPU (no co-location)."""
    return optimizing_policy(predictors, **({"name": "optimizing-nocoloc"} | options | {"max_jobs_per_gpu": 1}))


def without_freezing(predictors: Predictors | None = None, **options: Any) -> OptimizingPolicy:
    """Ablation: the optimizing policy with freezing disabled (freeze level 0 only)."""
    return optimizing_policy(predictors, **({"name": "optimizing-nofreeze"} | options | {"freeze_levels": (0,)}))

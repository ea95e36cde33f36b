"""The Tiresias policy that keeps its plan between unchanged rounds decides as the direct implementation.

``DirectTiresias`` is the policy as first written: every round sorts every job, rebuilds the GPU pool
and re-places every admitted job. The production policy skips rounds in which nothing happened and
starts from the free GPUs; on every round of seeded runs (with node failures) both must agree.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dltsched.engine.domain import Assignment, ClusterState, JobState, Plan
from dltsched.engine.faults import FaultConfig
from dltsched.engine.policies.placement import Estimates, GpuPool
from dltsched.engine.policies.tiresias import TiresiasPolicy
from dltsched.engine.predict import Predictors
from dltsched.engine.simulator import SimulationConfig, simulate
from dltsched.engine.truth import MeasuredTruth


@dataclass
class DirectTiresias:
    predictors: Predictors
    thresholds_gpu_s: tuple[float, ...] = (3600.0, 36000.0)
    starvation_factor: float = 8.0
    _est: Estimates = field(init=False)

    def __post_init__(self) -> None:
        self._est = Estimates(self.predictors)

    def queue_of(self, s: JobState, now_s: float) -> int:
        ran = s.attained_service_s / s.job.num_gpus
        if s.assignment is None and ran > 0 and now_s - s.queued_since_s > self.starvation_factor * ran:
            return 0
        return bisect.bisect_right(self.thresholds_gpu_s, s.attained_service_s)

    def schedule(self, state: ClusterState) -> Plan:
        order = sorted(state.jobs, key=lambda s: (self.queue_of(s, state.time_s), s.job.arrival_time_s, s.job.id))
        free = state.available_by_type()
        admitted: list[tuple[JobState, str]] = []
        for s in order:
            types = self._est.candidate_types(s.job, state.cluster)
            if s.assignment is not None:
                current = state.cluster.gpu_type_of(s.assignment.gpus[0])
                types = [current] + [t for t in types if t != current]
            for t in types:
                if free.get(t, 0) >= s.job.num_gpus:
                    free[t] -= s.job.num_gpus
                    admitted.append((s, t))
                    break
        pool = GpuPool.empty(state)
        placed: list[Assignment] = []
        for s, t in admitted:
            a = s.assignment
            if a is not None and state.cluster.gpu_type_of(a.gpus[0]) == t and pool.are_free(a.gpus):
                pool.occupy(s.job.id, a.gpus)
                placed.append(a)
        kept = {a.job_id for a in placed}
        for s, t in admitted:
            if s.job.id not in kept and (gpus := pool.take_free(s.job, t)) is not None:
                pool.occupy(s.job.id, gpus)
                placed.append(Assignment(s.job.id, gpus))
        return Plan(tuple(placed))


@dataclass
class Compare:
    fast: TiresiasPolicy
    direct: DirectTiresias
    name: str = "tiresias"
    round_interval_s: float | None = 300.0
    rounds: int = 0
    skipped: int = 0
    preemptions: int = 0

    def schedule(self, state: ClusterState) -> Plan:
        plan = self.fast.schedule(state)
        self.skipped += plan.incremental and not plan.assignments
        got = {a.job_id: a for a in plan.resolved(state).assignments}
        want = {a.job_id: a for a in self.direct.schedule(state).assignments}
        assert got == want, f"round {self.rounds} at t={state.time_s}: plans differ"
        self.preemptions += sum(1 for j in state.placements_by_id() if j not in got)
        self.rounds += 1
        return plan


FAULTS = FaultConfig(mtbf_s=20_000.0, mttr_s=600.0, checkpoint_interval_s=300.0)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), faults=st.booleans())
def test_tiresias_plans_equal_the_direct_ones(seed, faults, analytic, small_instance):
    inst = small_instance(seed, num_jobs=30, mean_gap_s=20.0)
    check = Compare(TiresiasPolicy(analytic, thresholds_gpu_s=(600.0, 6000.0)),
                    DirectTiresias(analytic, thresholds_gpu_s=(600.0, 6000.0)))
    cfg = SimulationConfig(seed=seed, faults=FAULTS if faults else None)
    result = simulate(inst, check, truth=MeasuredTruth(use_measurements=False), config=cfg)
    assert result.num_jobs_finished == len(inst.jobs)


def test_the_comparison_sees_skipped_rounds_and_preemptions(analytic, small_instance):
    """Guard for the test above: the runs do skip unchanged rounds and do preempt jobs."""
    skipped = preemptions = 0
    for seed in range(4):
        check = Compare(TiresiasPolicy(analytic, thresholds_gpu_s=(600.0, 6000.0)),
                        DirectTiresias(analytic, thresholds_gpu_s=(600.0, 6000.0)))
        simulate(small_instance(seed, num_jobs=30, mean_gap_s=20.0), check, truth=MeasuredTruth(use_measurements=False))
        skipped += check.skipped
        preemptions += check.preemptions
    assert skipped > 0 and preemptions > 0

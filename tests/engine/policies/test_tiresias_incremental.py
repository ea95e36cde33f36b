"""The Tiresias policy that keeps an index across rounds decides as the direct implementation.

``DirectTiresias`` is the policy as first written: every round sorts every job, rebuilds the GPU pool
and re-places every admitted job. The production policy skips rounds in which nothing happened, starts
from the free GPUs, and in full rounds walks an index it keeps across rounds; on every round of seeded
runs (node failures, out-of-memory crashes, starvation promotions, jobs changing queue and GPU type) both
must agree. A second check runs the production policy against its own full rounds done directly (every
job ranked, as before the index): the simulations must agree to the last bit, which also checks that the
simulator's lazy reads of running jobs' progress give the values of eager ones.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dltsched.engine.domain.model import Assignment, ClusterState, JobState, Plan
from dltsched.engine.domain.predictors import Predictors
from dltsched.engine.policies.placement import Estimates, GpuPool
from dltsched.engine.policies.tiresias.policy import TiresiasPolicy
from dltsched.engine.policies.tiresias.queues import RunningLine
from dltsched.engine.sim.faults import FaultConfig
from dltsched.engine.sim.simulator import SimulationConfig, simulate
from dltsched.engine.sim.truth import MeasuredTruth


@dataclass
class DirectTiresias:
    predictors: Predictors
    thresholds_gpu_s: tuple[float, ...] = (3600.0, 36000.0)
    starvation_factor: float = 8.0
    est: Estimates = field(init=False)

    def __post_init__(self) -> None:
        self.est = Estimates(self.predictors)

    def queue_of(self, s: JobState, now_s: float) -> int:
        ran = s.attained_service_s / s.job.num_gpus
        if s.assignment is None and ran > 0 and now_s - s.queued_since_s > self.starvation_factor * ran:
            return 0
        return bisect.bisect_right(self.thresholds_gpu_s, s.attained_service_s)

    def next_change_s(self, state: ClusterState) -> float:
        """The first instant after which some job's queue differs, if nothing else happens."""
        out = math.inf
        for s in state.jobs:
            ran = s.attained_service_s / s.job.num_gpus
            level = self.queue_of(s, state.time_s)
            if s.assignment is not None and level < len(self.thresholds_gpu_s):
                to_go_s = (self.thresholds_gpu_s[level] - s.attained_service_s) / s.job.num_gpus
                out = min(out, state.time_s + to_go_s)
            elif s.assignment is None and level > 0 and ran > 0:
                out = min(out, s.queued_since_s + self.starvation_factor * ran)
        return out

    def schedule(self, state: ClusterState) -> Plan:
        order = sorted(state.jobs,
                       key=lambda s: (self.queue_of(s, state.time_s), s.job.arrival_time_s, s.job.id))
        free = state.available_by_type()
        admitted: list[tuple[JobState, str]] = []
        for s in order:
            types = self.est.candidate_types(s.job, state.cluster)
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
    moves: int = 0
    promoted: int = 0
    full_unchanged: int = 0

    def schedule(self, state: ClusterState) -> Plan:
        before = self.fast.last_round
        plan = self.fast.schedule(state)
        full = self.fast.last_round is not None and self.fast.last_round is not before
        self.skipped += plan.incremental and not plan.assignments and not full
        got = {a.job_id: a for a in plan.resolved(state).assignments}
        want = {a.job_id: a for a in self.direct.schedule(state).assignments}
        assert got == want, f"round {self.rounds} at t={state.time_s}: plans differ"
        if full and self.fast.last_round.next_change_s > -math.inf:  # a full round that changed nothing
            assert self.fast.last_round.next_change_s == self.direct.next_change_s(state), \
                f"round {self.rounds}"
            self.full_unchanged += 1
        running = state.placements_by_id()
        self.preemptions += sum(1 for j in running if j not in got)
        type_of = state.cluster.gpu_type_of
        self.moves += sum(1 for j, a in running.items()
                          if j in got and type_of(got[j].gpus[0]) != type_of(a.gpus[0]))
        self.promoted += sum(1 for s in state.queued() if self.direct.queue_of(s, state.time_s) == 0
                             and bisect.bisect_right(self.direct.thresholds_gpu_s, s.attained_service_s) > 0)
        self.rounds += 1
        return plan


FAULTS = FaultConfig(mtbf_s=20_000.0, mttr_s=600.0, checkpoint_interval_s=300.0)

#: thresholds (GPU-s) and starvation factors that make jobs change queue and starve often in short runs
POLICY_KNOBS = st.sampled_from([((600.0, 6000.0), 8.0), ((300.0, 1200.0, 4800.0), 2.0), ((900.0,), 0.5)])


def _setup(analytic, small_instance, memory_trap, seed, under_memory,
           **kwargs):  # noqa: ANN001, ANN003, ANN202
    inst = small_instance(seed, num_jobs=40, **kwargs)
    return memory_trap(analytic, inst) if under_memory else (analytic, inst)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), faults=st.booleans(), under_memory=st.booleans(), knobs=POLICY_KNOBS,
       gpus_per_node=st.sampled_from([2, 4]), gap_s=st.sampled_from([5.0, 20.0]))
def test_tiresias_plans_equal_the_direct_ones(seed, faults, under_memory, knobs, gpus_per_node, gap_s,
                                              analytic,
                                               small_instance, memory_trap):
    preds, inst = _setup(analytic, small_instance, memory_trap, seed, under_memory,
                         gpus_per_node=gpus_per_node, mean_gap_s=gap_s)
    thresholds, factor = knobs
    check = Compare(TiresiasPolicy(preds, thresholds_gpu_s=thresholds, starvation_factor=factor),
                    DirectTiresias(preds, thresholds_gpu_s=thresholds, starvation_factor=factor))
    cfg = SimulationConfig(seed=seed, faults=FAULTS if faults else None, memory="oom")
    result = simulate(inst, check, truth=MeasuredTruth(use_measurements=False), config=cfg)
    assert result.num_jobs_finished == len(inst.jobs)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), faults=st.booleans(), under_memory=st.booleans(), knobs=POLICY_KNOBS)
def test_simulations_equal_those_of_direct_full_rounds(seed, faults, under_memory, knobs, analytic,
                                                       small_instance, memory_trap):
    preds, inst = _setup(analytic, small_instance, memory_trap, seed, under_memory, mean_gap_s=10.0)
    thresholds, factor = knobs
    cfg = SimulationConfig(seed=seed, faults=FAULTS if faults else None, memory="oom")
    truth = MeasuredTruth(use_measurements=False)
    fast = simulate(inst, TiresiasPolicy(preds, thresholds_gpu_s=thresholds, starvation_factor=factor),
                    truth=truth, config=cfg)
    previous = simulate(inst, TiresiasPolicy(preds, thresholds_gpu_s=thresholds, starvation_factor=factor,
                                       indexed=False),
                        truth=truth, config=cfg)
    assert fast.records == previous.records
    assert fast.placements == previous.placements
    assert (fast.num_rounds, fast.makespan_s, fast.oom_events) == (previous.num_rounds, previous.makespan_s,
                                                                   previous.oom_events)


def test_the_comparison_sees_what_it_must(analytic, small_instance, memory_trap):
    """Guard for the tests above: the runs skip unchanged rounds, preempt jobs, move jobs to another GPU
    type, promote starving jobs and crash some starts out of memory."""
    totals = dict.fromkeys(("skipped", "preemptions", "moves", "promoted", "full_unchanged", "oom"), 0)
    for seed in range(6):
        preds, inst = _setup(analytic, small_instance, memory_trap, seed, True, mean_gap_s=10.0)
        check = Compare(TiresiasPolicy(preds, thresholds_gpu_s=(300.0, 1200.0, 4800.0),
                                       starvation_factor=2.0),
                        DirectTiresias(preds, thresholds_gpu_s=(300.0, 1200.0, 4800.0),
                                       starvation_factor=2.0))
        result = simulate(inst, check,
                          truth=MeasuredTruth(use_measurements=False), config=SimulationConfig(memory="oom"))
        for name in ("skipped", "preemptions", "moves", "promoted", "full_unchanged"):
            totals[name] += getattr(check, name)
        totals["oom"] += result.oom_events
    assert all(totals.values()), totals


def test_line_counts_gpus_after_a_key_and_finds_the_first_job_left_short():
    line = RunningLine()
    for key, n in [((0, 1.0, "a"), 2), ((1, 0.0, "b"), 1), ((1, 5.0, "c"), 4), ((2, 0.0, "d"), 1)]:
        line.add(key, n)
    assert line.total() == 8
    assert line.after((0, 1.0, "a")) == 6 and line.after((1, 5.0, "c")) == 1 and line.after((9, 0.0, "")) == 0
    # 1 GPU short: 'a' keeps its GPUs (6 held after it), ..., 'd' is the first with none after it
    assert line.first_short(None, 1) == 3
    # 5 GPUs short: 'b' (4 + 1 after it) keeps its GPU; 'c' (1 after it) is the first left short
    assert line.first_short(None, 5) == 2 and line.first_short((1, 5.0, "c"), 5) == 3
    line.remove((1, 5.0, "c"))
    assert line.total() == 4 and line.first_short(None, 2) == 1


def test_jobs_started_or_stopped_outside_the_plans_are_indexed_afresh(analytic):
    """A caller that does not apply the plans (jobs start, stop and vanish on their own) still gets the
    direct implementation's plans."""
    from dltsched.engine.domain.model import Cluster, Job, Node

    cluster = Cluster((Node("v", "v100", 2), Node("k", "k80", 2)))
    jobs = [Job(f"j{i}", "resnet18", 32, 1000, arrival_time_s=float(i)) for i in range(8)]

    def state(t: float, running: dict[int, tuple[int, ...]], waiting: list[int]) -> ClusterState:
        return ClusterState(t, cluster, tuple(
            [JobState(jobs[i], 900, 30.0 * len(g), Assignment(f"j{i}", g)) for i, g in running.items()]
            + [JobState(jobs[i], 1000, 10.0 if i == 3 else 0.0, queued_since_s=float(i)) for i in waiting]))

    fast, direct = TiresiasPolicy(analytic,
                                  thresholds_gpu_s=(25.0,
                                                    )), DirectTiresias(analytic, thresholds_gpu_s=(25.0,))
    for s in (state(10.0, {}, [0, 1, 2, 3, 4, 5]),
              state(20.0, {1: (0,), 2: (2,)}, [0, 3, 4, 6]),  # j5 vanished, j6 arrived, j1 and j2 started
              state(30.0, {2: (2,), 3: (1,)}, [0, 1, 4, 6, 7]),  # j1 stopped, j3 started, all unplanned
              state(40.0, {0: (0,), 3: (1,)}, [1, 4, 6, 7])):
        got = {a.job_id: a for a in fast.schedule(s).resolved(s).assignments}
        assert got == {a.job_id: a for a in direct.schedule(s).assignments}, s.time_s

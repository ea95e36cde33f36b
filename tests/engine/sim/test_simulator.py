"""Simulator invariants for every baseline policy, plan validation, determinism, ground truth use."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dltsched.engine.app.registry import BASELINE_POLICIES, PAPER_POLICIES, make_policy
from dltsched.engine.domain.errors import InvalidPlanError
from dltsched.engine.domain.model import Assignment, ClusterState, Plan
from dltsched.engine.sim.simulator import SimulationConfig, Simulator, simulate
from dltsched.engine.sim.truth import MeasuredTruth

TRUTH = MeasuredTruth(use_measurements=False)


@dataclass
class Recorder:
    """Wraps a policy and checks every snapshot/plan pair it sees."""

    inner: object
    last_time: float = -1.0
    rounds: int = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def round_interval_s(self):
        return self.inner.round_interval_s

    def schedule(self, state: ClusterState) -> Plan:
        assert state.time_s >= self.last_time, "time moved backward"
        self.last_time = state.time_s
        ids = [s.job.id for s in state.jobs]
        assert len(ids) == len(set(ids)), "a job is active twice"
        derived = replace(state, gpu_jobs=None, running_jobs=None, placements=None, free_gpus=None)
        assert state.jobs_on_gpus() == derived.jobs_on_gpus(), "per-GPU jobs differ from the snapshot's"
        assert dict(state.running_jobs_by_id()) == dict(derived.running_jobs_by_id())
        assert dict(state.placements_by_id()) == dict(derived.placements_by_id())
        assert state.free_gpus_by_node() == derived.free_gpus_by_node(), \
            "free GPUs differ from the snapshot's"
        assert state.gpus_exclusive() == replace(derived, num_held_gpus=None).gpus_exclusive()
        plan = self.inner.schedule(state)
        load = [0] * state.cluster.num_gpus
        mem = [0.0] * state.cluster.num_gpus
        for a in plan.assignments:
            job = next(s.job for s in state.jobs if s.job.id == a.job_id)
            assert len(a.gpus) == job.num_gpus
            for g in a.gpus:
                load[g] += 1
                mem[g] += TRUTH.memory_mib(job, state.cluster.gpu_type_of(g), a.freeze_level)
        cap = getattr(self.inner, "max_jobs_per_gpu", 1)
        assert max(load) <= cap, "GPU capacity exceeded"
        for g, used in enumerate(mem):
            assert used <= state.cluster.memory_mib(g) + 1e-6, "GPU memory exceeded"
        self.rounds += 1
        return plan


@pytest.mark.parametrize("policy", BASELINE_POLICIES + PAPER_POLICIES)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000))
def test_invariants_every_job_finishes_once(policy, seed, analytic, small_instance):
    inst = small_instance(seed)
    rec = Recorder(make_policy(policy, predictors=analytic))
    result = simulate(inst, rec, truth=TRUTH)
    finished = [r.job_id for r in result.records]
    assert sorted(finished) == sorted(j.id for j in inst.jobs), "a job was lost or finished twice"
    assert rec.rounds > 0
    for r in result.records:
        job = inst.job(r.job_id)
        assert job.arrival_time_s <= r.first_start_s <= r.finish_s
    assert 0.0 < result.gpu_util <= 1.0


@pytest.mark.parametrize("policy", BASELINE_POLICIES + PAPER_POLICIES)
def test_same_seed_same_result(policy, analytic, small_instance):
    inst = small_instance(7, num_jobs=20)
    a = simulate(inst, make_policy(policy, predictors=analytic), truth=TRUTH, config=SimulationConfig(seed=3))
    b = simulate(inst, make_policy(policy, predictors=analytic), truth=TRUTH, config=SimulationConfig(seed=3))
    assert a.records == b.records


def test_queueing_when_cluster_is_full(analytic):
    """Jobs that arrive together on a 2-GPU cluster: FIFO runs them in order, later ones wait."""
    from dltsched.engine.domain.model import Cluster, Instance, Job, Node

    cluster = Cluster((Node("n", "v100", 2),))
    jobs = tuple(Job(f"j{i}", "resnet18", 128, 1000, num_gpus=2) for i in range(3))
    res = simulate(Instance("full", cluster, jobs), make_policy("fifo", predictors=analytic), truth=TRUTH)
    starts = sorted(r.first_start_s for r in res.records)
    assert starts[0] == 0.0 and starts[1] > 0.0 and starts[2] > starts[1]
    assert res.gpu_util == pytest.approx(1.0)


class BadPolicy:
    name = "bad"
    round_interval_s = None

    def __init__(self, plan_fn):
        self.plan_fn = plan_fn

    def schedule(self, state):
        return self.plan_fn(state)


@pytest.mark.parametrize(("plan_fn", "message"), [
    (lambda s: Plan(tuple(Assignment(x.job.id, (0,)) for x in s.jobs if x.job.num_gpus == 2)), "gang"),
    (lambda s: Plan(tuple(Assignment(x.job.id, (99,)) for x in s.jobs if x.job.num_gpus == 1)),
     "out of range"),
    (lambda s: Plan((Assignment("ghost", (0,)),)), "not active"),
    (lambda s: Plan(tuple(Assignment(x.job.id, (0, 4)) for x in s.jobs if x.job.num_gpus == 2)),
     "mixed GPU types"),
])
def test_invalid_plans_are_rejected_with_a_clear_error(plan_fn, message):
    from dltsched.engine.domain.model import Cluster, Instance, Job, Node

    cluster = Cluster((Node("a", "v100", 4), Node("b", "k80", 4)))
    jobs = (Job("j0", "resnet18", 32, 100, num_gpus=2), Job("j1", "resnet18", 32, 100))
    with pytest.raises(InvalidPlanError, match=message):
        Simulator(Instance("bad", cluster, jobs), BadPolicy(plan_fn), TRUTH).run()


def test_memory_overflow_rejected_or_oom():
    from dltsched.engine.domain.model import Cluster, Instance, Job, Node

    cluster = Cluster((Node("a", "k80", 1),))
    jobs = (Job("big1", "resnet50", 64, 100), Job("big2", "resnet50", 64, 100))
    pack = BadPolicy(lambda s: Plan(tuple(Assignment(x.job.id, (0,)) for x in s.jobs)))
    with pytest.raises(InvalidPlanError, match="memory"):
        Simulator(Instance("mem", cluster, jobs), pack, TRUTH, SimulationConfig(memory="reject")).run()
    # in "oom" mode (the default) the second job crashes at start and waits; this policy keeps packing, then
    # runs it alone
    res = Simulator(Instance("mem", cluster, jobs), pack, TRUTH).run()
    assert res.oom_events >= 1 and res.num_jobs_finished == 2


def test_moved_job_that_cannot_fit_its_new_gpu_type_is_requeued_once():
    """A running job moved to a GPU type too small for it alone crashes out of memory, leaves that type,
    and goes back to the queue exactly once, beside jobs already waiting (queue order kept)."""
    from dltsched.engine.domain.model import Cluster, Instance, Job, Node

    cluster = Cluster((Node("a", "v100", 1), Node("b", "k80", 1)))
    jobs = (Job("big", "resnet50", 128, 2000),  # 13.6 GB: fits a V100 (16 GB), not a K80 (12 GB)
            Job("w1", "resnet50", 128, 50, arrival_time_s=1.0, gpu_types=("v100",)),
            Job("w2", "resnet50", 128, 50, arrival_time_s=2.0, gpu_types=("v100",)))

    def plan(state):
        big = next((s for s in state.jobs if s.job.id == "big"), None)
        if big is None:  # big is done: the waiting jobs run one after the other on the V100
            if state.running() or not state.queued():
                return Plan(tuple(s.assignment for s in state.running()))
            return Plan((Assignment(state.queued()[0].job.id, (0,)),))
        if big.assignment is not None and "k80" in (big.job.gpu_types or ("k80",)):
            return Plan((Assignment("big", (1,)),))  # move it to the K80: out of memory there
        return Plan((Assignment("big", (0,)),))

    res = Simulator(Instance("move-oom", cluster, jobs), BadPolicy(plan), TRUTH,
                    SimulationConfig(memory="oom")).run()
    assert res.oom_events == 1
    assert sorted(r.job_id for r in res.records) == ["big", "w1", "w2"]
    finish = {r.job_id: r.finish_s for r in res.records}
    assert finish["big"] < finish["w1"] < finish["w2"]


def test_incremental_plan_moves_listed_running_jobs_and_keeps_the_others():
    """An incremental plan lists starts and moves only: a listed running job moves (one preemption,
    restore delay), an unlisted one keeps its GPU; ``Plan.resolved`` gives the full plan."""
    from dltsched.engine.domain.model import Cluster, Instance, Job, Node

    cluster = Cluster((Node("a", "v100", 3),))
    jobs = (Job("stay", "resnet18", 32, 3000), Job("move", "resnet18", 32, 3000),
            Job("late", "resnet18", 32, 10, arrival_time_s=5.0))
    seen: list[tuple[float, dict[str, tuple[int, ...]]]] = []

    def plan(state):
        seen.append((state.time_s, {j: a.gpus for j, a in state.placements_by_id().items()}))
        if state.time_s == 0.0:
            return Plan((Assignment("stay", (0,)), Assignment("move", (1,))), incremental=True)
        if state.time_s == 5.0:
            incremental = Plan((Assignment("move", (2,)), Assignment("late", (1,))), incremental=True)
            full = {a.job_id: a.gpus for a in incremental.resolved(state).assignments}
            assert full == {"stay": (0,), "move": (2,), "late": (1,)}
            return incremental
        return Plan(incremental=True)

    res = Simulator(Instance("inc", cluster, jobs), BadPolicy(plan), TRUTH).run()
    assert seen[1] == (5.0, {"stay": (0,), "move": (1,)})
    assert seen[2][1] == {"stay": (0,), "move": (2,)}  # after 'late' finished on GPU 1
    preempted = {r.job_id: r.preemptions for r in res.records}
    assert preempted == {"stay": 0, "move": 1, "late": 0}


def test_colocation_slows_jobs_by_ground_truth():
    """Two jobs packed on one GPU each run slower than alone (measured or modelled interference)."""
    from dltsched.engine.domain.model import Cluster, Instance, Job, Node

    cluster = Cluster((Node("a", "v100", 1),))
    alone = (Job("a", "resnet18", 32, 1000),)
    pair = (Job("a", "resnet18", 32, 1000), Job("b", "resnet18", 32, 1000))
    pack = BadPolicy(lambda s: Plan(tuple(Assignment(x.job.id, (0,)) for x in s.jobs)))
    t_alone = simulate(Instance("1", cluster, alone), pack, truth=TRUTH).makespan_s
    t_pair = simulate(Instance("2", cluster, pair), pack, truth=TRUTH).makespan_s
    assert t_alone < t_pair < 2 * t_alone + 1e-9


@pytest.mark.data
def test_measured_truth_uses_gavel_throughput(data_dir):
    """Isolated step time on a measured (model, batch, GPU) equals Gavel's 1/throughput."""
    from dltsched.engine.domain.model import Job
    from dltsched.instances.readers.gavel_throughputs import read_gavel_throughputs

    table = read_gavel_throughputs(data_dir=data_dir)
    truth = MeasuredTruth(data_dir=str(data_dir))
    checked = 0
    for (gpu, jt, scale, consolidated), steps_per_s in table.isolated.items():
        if scale == 1 and consolidated:
            job = Job("x", jt.model, jt.batch_size, 10, dataset=jt.dataset)
            assert truth.step_time_s(job, gpu, 1) == pytest.approx(1.0 / steps_per_s, rel=1e-9)
            checked += 1
    assert checked > 50


@pytest.mark.data
def test_truth_anchors_an_unmeasured_gpu_count_to_the_nearest_measured_one(data_dir):
    """Gavel measured A3C on one GPU only: a 4-GPU A3C iteration is the 1-GPU measurement times the
    fallback model's 4-GPU / 1-GPU ratio (not the roofline fallback alone, which is ~27x faster)."""
    from dltsched.engine.domain.model import Job

    truth = MeasuredTruth(data_dir=str(data_dir))
    job = Job("x", "a3c", 4, 10, num_gpus=4)
    one = truth.step_time_s(Job("x", "a3c", 4, 10), "v100", 1)
    ratio = truth._fallback_step(job, "v100", 4, 1, 0) / truth._fallback_step(job, "v100", 1, 1, 0)
    assert truth.step_time_s(job, "v100", 4) == pytest.approx(one * ratio, rel=1e-9)
    assert truth.step_time_s(job, "v100", 4) > 10 * truth._fallback_step(job, "v100", 4, 1, 0)


@pytest.mark.data
def test_measured_truth_uses_lucid_pairs_where_gavel_has_none(data_dir):
    """MobileNetV3 with ResNet-18 at batch 32 (FP32) was measured by Lucid: speed 0.983 for MobileNetV3."""
    import csv

    from dltsched.engine.domain.model import Job

    truth = MeasuredTruth(data_dir=str(data_dir))
    with (data_dir / "lucid" / "colocate_info.csv").open() as fh:
        row = next(r for r in csv.DictReader(fh) if r["model1"] == "MobileNetV3" and r["model2"] == "ResNet18"
                   and r["amp1"] == "0" and r["amp2"] == "0")
    a = Job("a", "mobilenet_v3", int(row["batchsize1"]), 1)
    b = Job("b", "resnet18", int(row["batchsize2"]), 1)
    speed_a, _ = truth.colocated_speeds([a, b], "v100")
    assert speed_a == pytest.approx(min(1.0, float(row["speed1"])))


@dataclass
class ProgressReader:
    """A policy with a round every 7.3 s (not a binary fraction: sums of steps round) that takes the running
    jobs' progress each round and reads all of it (``eager``, as snapshots did before reads were lazy) or none
    of it."""

    inner: object
    eager: bool
    name: str = "reader"
    round_interval_s: float = 7.3

    def schedule(self, state: ClusterState) -> Plan:
        progress = state.running_states()
        if self.eager:
            for job_id in progress:
                assert progress[job_id].assignment is not None
        return self.inner.schedule(state)


@pytest.mark.parametrize("policy", ["fifo", "gandiva"])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), faults=st.booleans())
def test_lazy_progress_reads_give_the_values_of_eager_ones(policy, seed, faults, analytic, small_instance):
    """A running job brought up to date late steps through every instant a round read progress at (hundreds
    here: long enough for the vectorized steps), and ends with exactly the values of eager reads."""
    from dltsched.engine.sim.faults import FaultConfig

    inst = small_instance(seed, num_jobs=20, mean_gap_s=120.0)
    cfg = SimulationConfig(seed=seed, memory="oom",
                           faults=FaultConfig(mtbf_s=20_000.0, mttr_s=600.0, checkpoint_interval_s=300.0)
                           if faults else None)
    runs = [simulate(inst, ProgressReader(make_policy(policy, predictors=analytic), eager), truth=TRUTH,
                     config=cfg)
            for eager in (False, True)]
    assert runs[0].records == runs[1].records
    assert runs[0].placements == runs[1].placements

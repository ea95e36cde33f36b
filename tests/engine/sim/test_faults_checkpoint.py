"""Node failures lose only un-checkpointed progress and never lose or duplicate a job; a crashed run
resumes from its checkpoint to the same final result."""

from __future__ import annotations

import json

import pytest

from dltsched.engine.app.registry import make_policy, policy_names
from dltsched.engine.sim.checkpoint import CheckpointError, CheckpointStore
from dltsched.engine.sim.faults import FaultConfig, FaultSchedule
from dltsched.engine.sim.simulator import SimulationConfig, Simulator
from dltsched.engine.sim.truth import MeasuredTruth

TRUTH = MeasuredTruth(use_measurements=False)
FAULTS = FaultConfig(mtbf_s=4 * 3600.0, mttr_s=900.0, checkpoint_interval_s=600.0)


def test_fault_schedule_is_seeded_and_alternates():
    a = FaultSchedule(FAULTS, seed=1, num_nodes=3)
    b = FaultSchedule(FAULTS, seed=1, num_nodes=3)
    events = []
    for _ in range(10):
        t = a.upcoming()
        assert t == b.upcoming()
        failed, repaired = a.step(t)
        assert (failed, repaired) == b.step(t)
        assert not set(failed) & set(repaired)
        events.append((t, failed, repaired))
    assert [e[0] for e in events] == sorted(e[0] for e in events), "time moved backward"
    assert FaultSchedule(FAULTS, seed=2, num_nodes=3).upcoming() != events[0][0]


#: the optimizing policies decide with a short time limit here (tiny rounds)
FAST = {"time_limit_s": 0.5}


@pytest.mark.parametrize("policy", policy_names())
def test_failures_requeue_jobs_without_losing_any(policy, analytic, small_instance):
    inst = small_instance(11, num_jobs=25)
    cfg = SimulationConfig(seed=5, faults=FAULTS)
    options = FAST if policy.startswith("optimizing") else {}
    res = Simulator(inst, make_policy(policy, predictors=analytic, **options), TRUTH, cfg).run()
    assert sorted(r.job_id for r in res.records) == sorted(j.id for j in inst.jobs)
    assert res.node_failures > 0
    assert res.fault_interruptions <= res.node_failures * inst.cluster.num_gpus


def test_failed_node_is_never_used_while_down(analytic, small_instance):
    inst = small_instance(3, num_jobs=30)
    seen = []

    class Watch:
        name = "fifo"
        round_interval_s = None

        def __init__(self):
            self.inner = make_policy("fifo", predictors=analytic)

        def schedule(self, state):
            plan = self.inner.schedule(state)
            for a in plan.assignments:
                assert not state.down_gpus.intersection(a.gpus)
            seen.append(len(state.down_gpus))
            return plan

    Simulator(inst, Watch(), TRUTH, SimulationConfig(seed=2, faults=FAULTS)).run()
    assert max(seen) > 0, "no round saw a failed node; the test needs a harsher fault process"


class Crash(Exception):
    pass


@pytest.mark.parametrize("policy", ["tiresias", "gandiva"])
def test_resume_after_crash_gives_the_same_result(policy, analytic, small_instance, tmp_path):
    inst = small_instance(21, num_jobs=30)
    ckpt = tmp_path / "sim.ckpt.json"
    cfg = SimulationConfig(seed=4, faults=FAULTS)
    full = Simulator(inst, make_policy(policy, predictors=analytic), TRUTH,
                     SimulationConfig(seed=4, faults=FAULTS)).run()

    rounds = {"n": 0}

    def crash_midway(_t, _finished):
        rounds["n"] += 1
        if rounds["n"] == 23:
            raise Crash

    with pytest.raises(Crash):
        Simulator(inst, make_policy(policy, predictors=analytic), TRUTH, cfg, on_round=crash_midway,
                  store=CheckpointStore(ckpt, 5)).run()
    assert ckpt.exists()
    resumed = Simulator(inst, make_policy(policy, predictors=analytic), TRUTH, cfg,
                        store=CheckpointStore(ckpt, 5)).run(resume=True)
    assert resumed.records == full.records
    assert resumed.makespan_s == full.makespan_s
    assert resumed.node_failures == full.node_failures


def test_resume_refuses_another_seed(analytic, small_instance, tmp_path):
    inst = small_instance(1, num_jobs=10)
    ckpt = tmp_path / "c.json"
    Simulator(inst, make_policy("fifo", predictors=analytic), TRUTH, SimulationConfig(seed=1),
              store=CheckpointStore(ckpt, 1)).run()
    with pytest.raises(CheckpointError, match="seed"):
        Simulator(inst, make_policy("fifo", predictors=analytic), TRUTH, SimulationConfig(seed=2),
                  store=CheckpointStore(ckpt, 1)).run(resume=True)


def test_resume_keeps_what_a_job_learned_from_running_out_of_memory(tmp_path):
    """A job that crashed out of memory on a GPU type no longer asks for that type, also after a resume."""
    from dltsched.engine.domain.model import Assignment, Cluster, Instance, Job, Node, Plan

    cluster = Cluster((Node("a", "v100", 1), Node("b", "k80", 1)))
    inst = Instance("oom-resume", cluster, (Job("big", "resnet50", 128, 2000),  # fits a V100, not a K80
                                            Job("small", "resnet18", 32, 200, arrival_time_s=1.0)))

    class MoveToK80:
        """Runs 'big' on the V100, then tries the K80 for as long as 'big' may use it."""

        name = "move-to-k80"
        round_interval_s = 10.0

        def schedule(self, state):
            jobs = {s.job.id: s for s in state.jobs}
            out = []
            if "big" in jobs:
                big = jobs["big"]
                k80_allowed = "k80" in (big.job.gpu_types or ("k80",))
                out.append(Assignment("big", (1,) if big.assignment is not None and k80_allowed else (0,)))
            if "small" in jobs and not (out and out[0].gpus == (1,)):
                out.append(Assignment("small", (1,)))
            return Plan(tuple(out))

    ckpt = tmp_path / "oom.ckpt.json"
    cfg = SimulationConfig(memory="oom")
    full = Simulator(inst, MoveToK80(), TRUTH, SimulationConfig(memory="oom")).run()
    assert full.oom_events == 1

    def crash_after_the_oom(_t, _finished):
        if json.loads(ckpt.read_text())["state"]["oom_events"] >= 1:
            raise Crash

    with pytest.raises(Crash):
        Simulator(inst, MoveToK80(), TRUTH, cfg, on_round=crash_after_the_oom,
                  store=CheckpointStore(ckpt, 1)).run()
    resumed = Simulator(inst, MoveToK80(), TRUTH, cfg, store=CheckpointStore(ckpt, 1)).run(resume=True)
    assert resumed.oom_events == 1
    assert resumed.records == full.records

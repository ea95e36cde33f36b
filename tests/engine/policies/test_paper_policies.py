"""The paper baselines: IceFrog picks freeze levels, Lucid packs by class, Gavel's LP respects capacity."""

from __future__ import annotations

import pytest

from dltsched.engine.app.registry import make_policy
from dltsched.engine.domain.model import Cluster, ClusterState, Job, JobState, Node


def _state(jobs, nodes=(("v", "v100", 2),), running=None):
    cluster = Cluster(tuple(Node(i, t, n) for i, t, n in nodes))
    running = running or {}
    states = tuple(JobState(j, j.total_iterations, assignment=running.get(j.id)) for j in jobs)
    return ClusterState(0.0, cluster, states)


def test_icefrog_freezes_only_within_budget(analytic):
    jobs = (Job("free", "resnet50", 64, 1000, freeze_allowed=True, accuracy_budget=0.2),
            Job("fixed", "resnet50", 64, 1000))
    plan = make_policy("icefrog", predictors=analytic).schedule(_state(jobs))
    levels = {a.job_id: a.freeze_level for a in plan.assignments}
    assert levels["fixed"] == 0
    assert levels["free"] > 0
    penalty = analytic.freezing.frozen_penalty(jobs[0], levels["free"], 0.0)
    assert penalty <= 0.2
    # the chosen level beats running unfrozen in effective progress
    unfrozen = analytic.effective_progress_rate(jobs[0], "v100", 0)
    assert analytic.effective_progress_rate(jobs[0], "v100", levels["free"]) > unfrozen


class ConstantColocation:
    """Every co-located job runs at ``speed``; memory from the analytic model."""

    def __init__(self, speed, memory):
        self.speed, self.memory = speed, memory

    def colocated_speeds(self, jobs, gpu_type):
        return tuple(self.speed for _ in jobs)

    def group_memory_mib(self, jobs, gpu_type):
        return sum(self.memory.memory_mib(j, gpu_type) for j in jobs)


@pytest.mark.parametrize(("speed", "packed"), [(0.97, True), (0.6, False)])
def test_lucid_packs_low_interference_jobs_only_when_no_gpu_is_free(analytic, speed, packed):
    """With the paper's absolute cut points (0.85, 0.95): speed 0.97 is class 0 (0 + 0 <= 2, packed), 0.6 is
    class 2 (2 + 2 > 2, not packed); the third job waits for a free GPU or a partner."""
    from dataclasses import replace

    preds = replace(analytic, colocation=ConstantColocation(speed, analytic.step_time))
    jobs = tuple(Job(f"j{i}", "neumf", 1024, 1000) for i in range(3))
    plan = make_policy("lucid", predictors=preds, class_thresholds=(0.85, 0.95)).schedule(_state(jobs))
    sizes = sorted(len(v) for v in plan.colocation_groups().values())
    assert sizes == ([1, 2] if packed else [1, 1])


class ModelSpeed(ConstantColocation):
    """Each job runs at its model's speed in any group."""

    def colocated_speeds(self, jobs, gpu_type):
        return tuple(self.speed.get(j.model, 0.5) for j in jobs)


@pytest.mark.parametrize(("thresholds", "partner"), [(None, "a"), ((0.85, 0.95), None)])
def test_lucid_classes_are_relative_to_the_job_types_seen(analytic, thresholds, partner):
    """neumf runs at 0.9 shared, resnet50 at 0.3 (Gavel-like speeds). Paper cut points: neumf class 1,
    resnet50 class 2, so a queued resnet50 job finds no partner (1 + 2 > 2). Relative cut points (quantiles of
    the two types at Lucid's label shares): neumf class 0, resnet50 class 1, so it joins the neumf job 'a'
    (0 + 1, preferred over the other resnet50 job's 1 + 1); 'a' runs much longer, so the pair is
    time-aware."""
    from dataclasses import replace

    from dltsched.engine.domain.model import Assignment

    preds = replace(analytic, colocation=ModelSpeed({"neumf": 0.9, "resnet50": 0.3}, analytic.step_time))
    jobs = (Job("a", "neumf", 256, 10**7), Job("b", "resnet50", 32, 1000), Job("c", "resnet50", 32, 1000))
    running = {"a": Assignment("a", (0,)), "b": Assignment("b", (1,))}
    options = {} if thresholds is None else {"class_thresholds": thresholds}
    plan = make_policy("lucid", predictors=preds, **options).schedule(_state(jobs, running=running))
    placed = {a.job_id: a.gpus for a in plan.assignments}
    assert placed.get("c") == (None if partner is None else placed[partner])


@pytest.mark.parametrize("colocation", [True, False])
def test_gavel_lp_never_overallocates(analytic, colocation):
    from dltsched.engine.policies.gavel_lp import GavelPolicy

    jobs = tuple(Job(f"j{i}", m, b, 1000, num_gpus=n)
                 for i, (m, b, n) in enumerate([("resnet18", 64, 1), ("lstm_lm", 20, 1), ("resnet50", 32, 2),
                                                ("transformer", 64, 1), ("recoder", 1024, 1)]))
    policy = GavelPolicy(predictors=analytic, colocation=colocation)
    state = _state(jobs, nodes=(("v", "v100", 2), ("k", "k80", 2)))
    _jobs, single, pairs = policy.allocation(state)
    for t, cap in state.cluster.gpus_by_type().items():
        used = sum(x * _jobs[i].job.num_gpus for (i, tt), x in single.items() if tt == t)
        used += sum(y for _i, _k, tt, y in pairs if tt == t)
        assert used <= cap + 1e-6
    plan = policy.schedule(state)
    load = state.gpu_load()
    for a in plan.assignments:
        for g in a.gpus:
            load[g] += 1
    assert max(load) <= (2 if colocation else 1)
    assert plan.assignments, "the LP placed nothing on an idle cluster"


def test_lucid_reference_partners_are_in_the_shipped_colocation_table():
    """Lucid's sensitivity classes come from measured-trained predictions, not the analytic fallback."""
    from dltsched.engine.app.registry import predictors
    from dltsched.engine.policies.lucid import _REFERENCE

    table = predictors("default").colocation
    if not hasattr(table, "fallbacks"):
        pytest.skip("the default predictors have no shipped co-location table here")
    for gpu in ("k80", "p100", "v100"):
        for m, b in _REFERENCE:
            table.colocated_speeds([Job("a", "resnet18", 64, 10), Job("b", m, b, 10)], gpu)
    assert table.fallbacks["analytic"] == 0

"""The makespan lower bound: the per-type work LP and the longest job, and no exclusive schedule beats it."""

from __future__ import annotations

import math

import pytest

from dltsched.engine.domain.model import Cluster, Instance, Job, Node
from dltsched.engine.sim.metrics import gang_bound_s, makespan_lower_bound_s, work_bound_s
from dltsched.engine.sim.simulator import SimulationConfig, simulate
from dltsched.engine.sim.truth import MeasuredTruth


def test_work_bound_divides_work_over_types_at_their_speeds() -> None:
    # one fast GPU (a: 1 h, b: 1 h) and one slow one (a: 4 h, b: 2 h). Moving a share x of b to the slow GPU:
    # fast does 1 + (1 - x) h, slow 2x h; equal when 2 - x = 2x -> x = 2/3, T = 4/3 h. On one type: total /
    # GPUs.
    jobs = [Job("a", "resnet18", 32, 1.0), Job("b", "resnet18", 32, 1.0)]
    times = {"a": {"fast": 3600.0, "slow": 4 * 3600.0}, "b": {"fast": 3600.0, "slow": 2 * 3600.0}}
    assert work_bound_s(jobs, times, {"fast": 1, "slow": 1}) == pytest.approx(4 / 3 * 3600.0)
    assert work_bound_s(jobs, {k: {"fast": v["fast"]} for k, v in times.items()},
                        {"fast": 2}) == pytest.approx(3600)


def test_proportional_jobs_share_a_row_without_moving_the_bound() -> None:
    # a and b do the same work per type up to a factor 3 (one class of the LP); c is faster on the slow
    # type. One row per job, worked out: a+b is 4 h fast / 8 h slow, c is 6 h fast / 3 h slow, one GPU of
    # each. Moving a share x of a+b to the slow GPU beside all of c: fast 4(1 - x), slow 8x + 3; equal at
    # x = 1/12, T = 11/3 h. Merging a and b into one row gives the same split, so the same bound.
    jobs = [Job("a", "resnet18", 32, 1.0), Job("b", "resnet18", 32, 1.0), Job("c", "resnet18", 32, 1.0)]
    times = {"a": {"fast": 3600.0, "slow": 2 * 3600.0}, "b": {"fast": 3 * 3600.0, "slow": 6 * 3600.0},
             "c": {"fast": 6 * 3600.0, "slow": 3 * 3600.0}}
    assert work_bound_s(jobs, times, {"fast": 1, "slow": 1}) == pytest.approx(11 / 3 * 3600.0, rel=1e-9)
    # a job only on one type stays its own row: c alone on the fast type adds its 6 h there
    only = times | {"c": {"fast": 6 * 3600.0}}
    # fast 4(1 - x) + 6, slow 8x: equal at x = 5/6, T = 20/3 h
    assert work_bound_s(jobs, only, {"fast": 1, "slow": 1}) == pytest.approx(20 / 3 * 3600.0, rel=1e-9)


def test_gangs_too_large_to_share_a_type_run_one_after_another() -> None:
    # a V100 type of 4 GPUs, a K80 type of 2. Job 1 (4 GPUs, 10 h) fits only the V100s; job 2 (2 GPUs) takes
    # 10 h on V100s, 100 h on K80s and cannot run beside job 1 on the V100s. Best: job 2 does 10% of its work
    # on K80s while job 1 runs, the rest (9 h) on V100s after it: 19 h. The bound finds T with
    # 10 + 10 (100 - T) / 90 = T -> T = 19 h; the work LP says 100/7 = 14.3 h.
    jobs = [Job("j1", "resnet18", 32, 1.0, num_gpus=4), Job("j2", "resnet18", 32, 1.0, num_gpus=2)]
    times = {"j1": {"v100": 10 * 3600.0}, "j2": {"v100": 10 * 3600.0, "k80": 100 * 3600.0}}
    gpus = {"v100": 4, "k80": 2}
    assert gang_bound_s(jobs, times, gpus) == pytest.approx(19 * 3600.0, rel=1e-6)
    assert work_bound_s(jobs, times, gpus) == pytest.approx(100 / 7 * 3600.0, rel=1e-6)
    cluster = Cluster((Node("a", "v100", 4), Node("b", "k80", 2)))
    inst = Instance("g", cluster, tuple(jobs))
    assert makespan_lower_bound_s(inst, times) == pytest.approx(19 * 3600.0, rel=1e-6)
    # jobs small enough to run side by side add nothing
    small = [Job("s1", "resnet18", 32, 1.0, num_gpus=2), Job("s2", "resnet18", 32, 1.0, num_gpus=2)]
    assert gang_bound_s(small, {"s1": {"v100": 3600.0}, "s2": {"v100": 3600.0}}, {"v100": 4}) == 0.0


def test_bound_is_the_larger_of_work_and_the_longest_job() -> None:
    cluster = Cluster((Node("n0", "v100", 4),))
    jobs = (Job("a", "resnet18", 32, 1.0), Job("b", "resnet18", 32, 1.0, arrival_time_s=100.0))
    inst = Instance("t", cluster, jobs)
    # work (10 + 1000) / 4 GPUs < b's arrival 100 s + 1000 s
    assert makespan_lower_bound_s(inst, {"a": {"v100": 10.0}, "b": {"v100": 1000.0}}) == pytest.approx(1100.0)
    assert math.isnan(makespan_lower_bound_s(inst, {}))  # nothing to bound


@pytest.mark.parametrize("seed", [0, 1])
def test_an_exclusive_schedule_never_beats_the_bound(seed: int) -> None:
    from dltsched.engine.app.registry import make_policy
    from dltsched.instances.generator import GeneratorSpec, generate_instance

    inst = generate_instance(GeneratorSpec(num_jobs=12, num_gpus=8, seed=seed, freeze_fraction=0.0))
    result = simulate(inst, make_policy("fifo"), truth=MeasuredTruth(use_measurements=False),
                      config=SimulationConfig(seed=seed))
    assert result.makespan_bound_s > 0
    assert result.makespan_s >= result.makespan_bound_s * (1 - 1e-9)
    assert result.makespan_gap == pytest.approx(result.makespan_s / result.makespan_bound_s - 1)

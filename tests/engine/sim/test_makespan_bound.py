"""The makespan lower bound: the per-type work LP and the longest job, and no exclusive schedule beats it."""

from __future__ import annotations

import math

import pytest

from dltsched.engine.domain.model import Cluster, Instance, Job, Node
from dltsched.engine.sim.metrics import makespan_lower_bound_s, work_bound_s
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

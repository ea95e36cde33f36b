"""Prediction-error knob, ablation variants and `dltsched bench simulate` rows."""

from __future__ import annotations

import json
import math

import pytest

from dltsched.engine.app.cli.main import main
from dltsched.engine.app.registry import make_policy
from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Job
from dltsched.engine.sim.simulator import simulate
from dltsched.engine.sim.truth import MeasuredTruth
from dltsched.predictors.noise import with_prediction_error


def test_prediction_error_is_fixed_per_job_and_of_the_asked_size(analytic):
    noisy = with_prediction_error(analytic, 0.2, seed=3)
    jobs = [Job(f"j{i}", "resnet18", 64, 100) for i in range(400)]
    ratios = [noisy.step_time.step_time_s(j, "v100") / analytic.step_time.step_time_s(j, "v100")
              for j in jobs]
    assert ratios[0] == noisy.step_time.step_time_s(jobs[0],
                                                    "v100") / analytic.step_time.step_time_s(jobs[0], "v100")
    spread = sum(abs(math.log(r)) for r in ratios) / len(ratios)
    assert 0.2 * 0.7 < spread < 0.2 * 0.9  # E|z| = 0.80 for z ~ N(0, 1)
    assert with_prediction_error(analytic, 0.0) is analytic
    speeds = noisy.colocation.colocated_speeds(jobs[:2], "v100")
    assert all(0 < s <= 1.0 for s in speeds)
    with pytest.raises(ValidationError, match="prediction_error"):
        with_prediction_error(analytic, -1)


def test_no_colocation_ablation_never_shares_a_gpu(analytic, small_instance):
    inst = small_instance(4, num_jobs=8)
    policy = make_policy("optimizing-nocoloc", predictors=analytic, time_limit_s=1.0)
    result = simulate(inst, policy, truth=MeasuredTruth(use_measurements=False))
    assert result.num_jobs_finished == 8
    spans: dict[int, list[tuple[float, float]]] = {}
    for p in result.placements:
        for g in p.gpus:
            spans.setdefault(g, []).append((p.start_s, p.end_s))
    for intervals in spans.values():
        intervals.sort()
        for (_s0, e0), (s1, _e1) in zip(intervals, intervals[1:], strict=False):
            assert s1 >= e0 - 1e-9, "two jobs overlapped on one GPU"


def test_no_freezing_ablation_never_freezes(analytic, small_instance):
    inst = small_instance(5, num_jobs=8)
    result = simulate(inst, make_policy("optimizing-nofreeze", predictors=analytic, time_limit_s=1.0),
                      truth=MeasuredTruth(use_measurements=False))
    assert result.num_jobs_finished == 8
    assert all(p.freeze_level == 0 for p in result.placements)


def test_bench_simulate_rows(capsys, repo_root):
    inst = str(repo_root / "instances" / "examples" / "tiny-6jobs-4gpus.json")
    assert main(["bench", "simulate", "--instance", inst, "--policy", "fifo", "--policy", "sjf",
                 "--seed", "0", "--seed", "1", "--predictors", "analytic", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["policy"] for r in rows] == ["fifo", "sjf"]
    for r in rows:
        for key in ("avg_jct_s", "p99_jct_s", "makespan_s", "gpu_util", "avg_jct_s_ci95", "seeds"):
            assert key in r
        assert r["num_jobs_finished"] == r["num_jobs"] == 6
        assert r["avg_jct_s_ci95"] == pytest.approx(0.0)  # an instance file does not change with the seed

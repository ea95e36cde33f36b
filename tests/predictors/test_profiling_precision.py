"""The profiler's stopping rule (median known to +-2% at 95%, or a time cap) and what its files say."""

from __future__ import annotations

import json
import math
import random

import pytest

from dltsched.predictors.profiling.precision import StoppingRule, median_interval, time_window


def test_median_interval_brackets_the_median_and_narrows_with_n():
    rng = random.Random(3)
    small = [rng.gauss(1.0, 0.1) for _ in range(30)]
    large = small + [rng.gauss(1.0, 0.1) for _ in range(570)]
    a, b = median_interval(small), median_interval(large)
    assert a.low_s <= a.median_s <= a.high_s and b.low_s <= b.median_s <= b.high_s
    assert b.half_width_rel < a.half_width_rel / 2  # ~1/sqrt(n): 20x the steps, ~4.5x narrower
    assert a.n == 30 and b.n == 600


def test_median_interval_covers_the_true_median_about_95_percent():
    rng = random.Random(7)
    hits = 0
    for _ in range(400):
        times = [rng.expovariate(1.0) for _ in range(41)]  # skewed; true median ln 2
        ci = median_interval(times)
        hits += ci.low_s <= math.log(2) <= ci.high_s
    assert 0.92 <= hits / 400 <= 0.995


def test_too_few_steps_have_no_interval():
    ci = median_interval([1.0, 2.0, 3.0])
    assert ci.median_s == 2.0 and math.isnan(ci.low_s) and ci.half_width_rel == math.inf


def _fake(step_s: float, noise: float, seed: int = 0):
    """A fake job stepping ``step_s`` +- ``noise`` (relative) and a clock that advances by each step."""
    rng, now = random.Random(seed), [0.0]

    def step() -> float:
        t = step_s * (1.0 + rng.uniform(-noise, noise))
        now[0] += t
        return t

    return step, lambda: now[0]


def test_a_quiet_long_job_stops_at_the_minimum_and_a_noisy_short_one_runs_longer():
    rule = StoppingRule(min_steps=30, precision=0.02, min_window_s=0.5, max_window_s=30.0)
    step, clock = _fake(0.2, 0.01)
    quiet, _ = time_window(step, rule, clock)
    assert len(quiet) == 30 and rule.stop_reason(quiet, 6.0) == "precision"
    step, clock = _fake(0.002, 0.6, seed=1)
    noisy, elapsed = time_window(step, rule, clock)
    assert len(noisy) > 100 and elapsed >= 0.5  # the 0.5 s window floor alone is ~250 steps
    assert median_interval(noisy).half_width_rel <= 0.02


def test_the_time_cap_ends_a_window_that_never_converges():
    rule = StoppingRule(min_steps=10, precision=0.001, min_window_s=0.0, max_window_s=1.0)
    step, clock = _fake(0.01, 0.9, seed=2)
    times, elapsed = time_window(step, rule, clock)
    assert 1.0 <= elapsed < 1.02 and rule.stop_reason(times, elapsed) == "time_cap"


def test_without_precision_the_window_is_exactly_min_steps():
    rule = StoppingRule(min_steps=7, precision=None)
    step, clock = _fake(0.01, 0.5)
    times, elapsed = time_window(step, rule, clock)
    assert len(times) == 7 and rule.stop_reason(times, elapsed) == "steps"


def test_a_window_held_open_times_on_until_released_never_past_the_cap():
    # a 4 ms job the rule alone stops after 30 steps (0.12 s); the utilisation window wants 3 s
    rule = StoppingRule(min_steps=30, precision=0.02, min_window_s=0.0, max_window_s=8.0)
    step, clock = _fake(0.004, 0.01)
    alone, _ = time_window(step, rule, clock)
    assert len(alone) == 30
    step, clock = _fake(0.004, 0.01)
    held, elapsed = time_window(step, rule, clock, keep_open=lambda: clock() < 3.0)
    assert 3.0 <= elapsed < 3.0 + 0.005  # released at 3 s, not at the rule's next check ten steps later
    assert len(held) == pytest.approx(750, abs=5) and rule.stop_reason(held, elapsed) == "precision"
    # held open for ever: the rule's time cap (--max-window) still ends it
    step, clock = _fake(0.004, 0.01)
    capped, elapsed = time_window(step, rule, clock, keep_open=lambda: True)
    assert 8.0 <= elapsed < 8.005 and rule.stop_reason(capped, elapsed) == "time_cap"
    # a job slower than the wanted window is not held at all: the rule has not stopped it yet
    step, clock = _fake(0.2, 0.01)
    slow, elapsed = time_window(step, rule, clock, keep_open=lambda: clock() < 3.0)
    assert len(slow) == 30 and elapsed == pytest.approx(6.0, rel=0.02)


@pytest.mark.parametrize("kwargs", [{"min_steps": 0}, {"precision": 1.5}, {"max_window_s": 0.0}])
def test_bad_rules_are_refused(kwargs):
    with pytest.raises(ValueError):
        StoppingRule(**kwargs)


def test_profile_file_without_scope_reads_as_compute(tmp_path):
    from dltsched.predictors.steptime.measurements import read_csv

    csv_text = "model,dataset,gpu,batch_size,num_gpus,step_time_s\nresnet18,cifar10,h200,128,1,0.009\n"
    (tmp_path / "steptime.csv").write_text(csv_text)
    assert read_csv(tmp_path / "steptime.csv")[0].scope == "iteration"  # no record: a whole iteration
    (tmp_path / "measurement.json").write_text(json.dumps({"command": "dltsched profile --job "
                                                                      "resnet18:128 --out x",
                                                           "files": ["steptime.csv"]}))
    assert read_csv(tmp_path / "steptime.csv")[0].scope == "compute"
    with_scope = csv_text.replace("step_time_s\n",
                                  "step_time_s,scope\n").replace("0.009\n", "0.009,fwd_bwd\n")
    (tmp_path / "steptime.csv").write_text(with_scope)
    assert read_csv(tmp_path / "steptime.csv")[0].scope == "fwd_bwd"  # a cell wins over the record


def test_mps_rows_keep_their_mode(tmp_path, capsys):
    from dltsched.predictors.colocation.samples import read_lucid_samples

    (tmp_path / "single_data.csv").write_text(
        "model,dataset,batchsize,amp,speed,gpu_util,gmem_util,gmem,gpu\n"
        "resnet50,imagenet,64,0,1950,94,5,8000,h200\nneumf,movielens,8192,0,3990000,96,1,1500,h200\n")
    header = (",model1,dataset1,gpu_num1,batchsize1,amp1,speed1,model2,dataset2,gpu_num2,batchsize2,amp2,"
              "speed2,gpu_util,gmem_util,gmem,gpu,sharing,gmem_source\n")
    row = "0,resnet50,imagenet,1,64,0,0.95,neumf,movielens,1,8192,0,1.03,92,6,9000,h200,{},nvml\n"
    (tmp_path / "colocate_info.csv").write_text(header + row.format("mps") + row.format("timeslice"))
    data = read_lucid_samples(tmp_path / "colocate_info.csv")
    assert sorted(s.sharing for s in data.samples) == ["mps", "timeslice"]  # not averaged together
    from dltsched.engine.app.cli.main import main

    assert main(["predict", "eval-colocation", str(tmp_path / "colocate_info.csv"), "--format", "lucid",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sharing"] == ["mps", "timeslice"]

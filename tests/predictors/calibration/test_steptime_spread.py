"""How well each profile pinned its step time: read from the timed steps or from the interval the profiler
reports, pooled over repeat runs, and weighing the step-time figures."""

from __future__ import annotations

import csv
import json
import math

import pytest

from dltsched.predictors.calibration.data import read_datasets, step_rel_sd
from dltsched.predictors.calibration.evaluate import SPREAD_FLOOR, spread_weight, summary
from dltsched.predictors.calibration.rows import IsolatedRow, mean_row


def test_spread_from_the_timed_steps_or_from_n_and_the_interval():
    steps = [0.009, 0.010, 0.011]  # mean 0.010, sd 0.001
    assert step_rel_sd({"step_times_s": steps}, 0.010) == pytest.approx(0.1)
    # 30 steps, 95% interval +-2% of a 10 ms step: each step spreads by 2% / 1.96 * sqrt(30)
    row = {"n": "30", "step_time_ci95_low_s": "0.0098", "step_time_ci95_high_s": "0.0102"}
    assert step_rel_sd(row, 0.010) == pytest.approx(0.02 / 1.96 * math.sqrt(30))
    one = {"n": "1", "step_time_ci95_low_s": "0.01", "step_time_ci95_high_s": "0.01"}
    assert step_rel_sd(one, 0.01) is None
    assert step_rel_sd({}, 0.01) is None


def test_repeat_runs_add_their_disagreement_to_the_spread():
    a = IsolatedRow("resnet18", "cifar10", 64, 0.010, step_time_rel_sd=0.02)
    b = IsolatedRow("resnet18", "cifar10", 64, 0.012, step_time_rel_sd=0.02)
    merged = mean_row([a, b])
    assert merged.step_time_s == pytest.approx(0.011)
    between = ((0.010 / 0.011 - 1) ** 2 + (0.012 / 0.011 - 1) ** 2) / 1
    assert merged.step_time_rel_sd == pytest.approx(math.sqrt(0.02**2 + between))
    assert mean_row([IsolatedRow("a3c", "pong", 4, 0.002)]).step_time_rel_sd is None


def test_noisy_measurements_weigh_less_and_the_plain_figure_stays():
    assert spread_weight(None) is None
    assert spread_weight(0.0) == pytest.approx(1 / SPREAD_FLOOR**2)
    assert spread_weight(0.0) > spread_weight(0.1)
    rows = [{"measured": 1.0, "calibrated": 1.1, "weight": spread_weight(0.0)},   # 10% off, tight
            {"measured": 1.0, "calibrated": 1.5, "weight": spread_weight(0.3)}]   # 50% off, noisy
    out = summary(rows, ["calibrated"])
    assert out["calibrated_mape"] == pytest.approx(30.0)
    assert 10.0 < out["calibrated_weighted_mape"] < 30.0
    # a profile without its steps gives no weighted figure rather than a partial one
    rows[1]["weight"] = None
    assert "calibrated_weighted_mape" not in summary(rows, ["calibrated"])


def test_a_profilers_csv_with_n_and_interval_carries_its_spread(tmp_path):
    folder = tmp_path / "h200"
    folder.mkdir()
    fields = ["model", "dataset", "gpu", "batch_size", "num_gpus", "step_time_s", "amp", "optimizer", "scope",
              "n", "step_time_ci95_low_s", "step_time_ci95_high_s"]
    with (folder / "steptime.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(fields)
        w.writerow(["resnet18", "cifar10", "h200", 64, 1, 0.01, 0, "sgd", "compute", 40, 0.0099, 0.0101])
    (folder / "measurement.json").write_text(json.dumps({"gpu": "h200", "sharing": "timeslice"}))
    (data,) = read_datasets([folder])
    assert data.isolated[0].step_time_rel_sd == pytest.approx(0.01 / 1.96 * math.sqrt(40))

"""Calibration's model choices and other layouts: the step-time form chosen by leave-one-model-out over the
fit's own rows, utilisation fitted in points, Gavel's throughput tables and Lucid's folders (marked not
shippable)."""

from __future__ import annotations

import csv
import json
import math
import random

import pytest

from dltsched.engine.app.cli.main import main
from dltsched.engine.domain.errors import ValidationError
from dltsched.predictors.calibration import isolated as iso
from dltsched.predictors.calibration import resources as res
from dltsched.predictors.calibration.data import read_datasets
from dltsched.predictors.calibration.model import fit_gpu

from .conftest import GPU, JOBS, TRUE_STEP


def _rows(params: dict[str, float], noise: float = 0.02, seed: int = 0,
          jobs: tuple[tuple[str, str, int], ...] = JOBS) -> list[iso.Row]:
    rng = random.Random(seed)
    out = []
    for model, dataset, batch in jobs:
        f = iso.job_features(model, dataset, batch, False, GPU, frozenset({"conv"}))
        step = iso.step_seconds(params, f, batch) * math.exp(rng.gauss(0.0, noise))
        out.append(iso.Row(model, batch, "compute", f, step))
    return out


def test_host_ops_count_a_recurrent_layer_once_and_the_optimizer_per_tensor():
    f = iso.job_features("lstm_lm", "wikitext2", 20, False, GPU)
    # cuDNN launches the recurrent kernels once per time step; the framework dispatches the layer once
    assert f["host_ops"] < f["launches"] / 5
    adam = iso.host_ops("resnet18", "cifar10", optimizer="adam")
    sgd = iso.host_ops("resnet18", "cifar10", optimizer="sgd")
    assert adam > sgd and iso.host_ops("resnet18", "cifar10", scope="fwd_bwd") < sgd
    assert iso.host_ops("resnet18", "cifar10", freeze_level=3) < sgd  # frozen layers: no backward ops


@pytest.mark.parametrize("form", list(iso.STEP_FORMS))
def test_the_step_form_the_data_follow_is_chosen_and_its_host_time_recovered(form):
    truth = _truth(form)
    rows = _rows(truth)
    fitted = iso.fit_step(rows)
    # host_ops is ops_and_launches at launch_us = 0, and these rows barely tell them apart (one recurrent
    # model): either may be kept for the other, never the overlapped form
    assert (fitted["overlap_power"], fitted["host_ops"]) == (truth["overlap_power"], truth["host_ops"])
    for r in rows:
        assert iso.step_seconds(fitted, r.features, r.batch) == pytest.approx(r.step_time_s, rel=0.25)
        if r.features["launches"] < 2 * r.features["host_ops"]:  # host time per op, beside the GPU's
            assert iso.host_seconds(fitted, r.features) == pytest.approx(iso.host_seconds(truth, r.features),
                                                                         rel=0.35)
    # the form the data follow predicts models it never saw better than the forms of another host term
    others = [f for f in iso.STEP_FORMS if iso.STEP_FORMS[f][1] != iso.STEP_FORMS[form][1]]
    assert all(iso.lomo_step_mape(rows, form) < iso.lomo_step_mape(rows, f) for f in others)


RECURRENT = (("deepspeech2", "librispeech", 20), ("lstm_lm", "wikitext2", 80))


def test_kernel_launches_of_recurrent_layers_cost_host_time_when_the_data_say_so():
    """Recurrent layers launch their kernels once per time step inside one framework op: on a GPU whose host
    pays per launch, ``launch_us`` moves from its prior towards the truth (a few rows hold it: the prior
    keeps part of its pull), and a held-out recurrent model is predicted closer with it."""
    rows = _rows(_truth("ops_and_launches"), jobs=JOBS + RECURRENT)
    fitted = iso.fit_step_form(rows, "ops_and_launches")
    assert iso.LAUNCH_US_PRIOR < fitted["launch_us"] < 6.0 * 1.35
    free = iso.fit_step_form(_rows(_truth("host_ops"), jobs=JOBS + RECURRENT), "ops_and_launches")
    assert free["launch_us"] < iso.LAUNCH_US_PRIOR < fitted["launch_us"]
    held = [r for r in rows if r.model == "lstm_lm"]
    train = [r for r in rows if r.model != "lstm_lm"]
    err = {f: max(abs(iso.step_seconds(iso.fit_step_form(train, f), r.features, r.batch) / r.step_time_s - 1)
                  for r in held) for f in ("host_ops", "ops_and_launches")}
    assert err["ops_and_launches"] < 0.1 < err["host_ops"]


def test_too_few_models_to_choose_keep_the_kept_form():
    rows = _rows({**TRUE_STEP, "overlap_power": 3.0, "host_ops": 0.0, "dispatch_us": 11.0}, jobs=JOBS[:3])
    fitted = iso.fit_step(rows)  # rows of the overlapped form, too few to leave the kept one for it
    assert len(rows) < iso.MIN_MODELS_TO_CHOOSE and iso.KEPT_FORM == "ops_and_launches"
    assert (fitted["overlap_power"], fitted["host_ops"]) == (1.0, 1.0) and fitted["launch_us"] > 0.0


def _truth(form: str) -> dict[str, float]:
    power, feature, launches = iso.STEP_FORMS[form]
    return {**TRUE_STEP, "overlap_power": power, "host_ops": float(feature == "host_ops"),
            "dispatch_us": 11.0 if form == "overlap" else 30.0, "launch_us": 6.0 if launches else 0.0}


def test_a_one_percent_reading_does_not_drag_every_utilisation_down():
    rows = _rows(TRUE_STEP, noise=0.0)
    truth = [100.0 * min(1.0, iso.gpu_seconds(TRUE_STEP, r.features) / r.step_time_s) for r in rows]
    noisy = [iso.Row(r.model, r.batch, r.scope, r.features, r.step_time_s, None, 1.0 if i == 0 else u)
             for i, (r, u) in enumerate(zip(rows, truth, strict=True))]
    params = res.fit_util(noisy, TRUE_STEP)
    got = [res.util_pct(params, iso.gpu_seconds(TRUE_STEP, r.features), r.features["launches"], r.step_time_s)
           for r in rows[1:]]
    assert max(abs(g - u) for g, u in zip(got, truth[1:], strict=True)) < 10.0  # points


def test_utilisation_is_fitted_in_the_ratio_form_and_its_factor_recovered():
    rows = _rows(TRUE_STEP, noise=0.0)

    def ratio(r, k):
        gpu = iso.gpu_seconds(TRUE_STEP, r.features)
        return 100.0 * min(1.0, k * gpu / max(iso.step_seconds(TRUE_STEP, r.features, r.batch), gpu))

    measured = [iso.Row(r.model, r.batch, r.scope, r.features, r.step_time_s, None, ratio(r, 0.8))
                for r in rows]
    params = res.fit_util(measured, TRUE_STEP)
    assert res.UTIL_FORM == "ratio" and set(params) == {"k"} and res.util_form(params) == "ratio"
    assert params["k"] == pytest.approx(0.8, abs=0.03)
    for r in rows:
        got = res.util_pct(params, iso.gpu_seconds(TRUE_STEP, r.features), r.features["launches"],
                           iso.step_seconds(TRUE_STEP, r.features, r.batch))
        assert got == pytest.approx(ratio(r, 0.8), abs=2.0)  # points
    assert set(res.fit_util(measured, TRUE_STEP, form="power")) == {"launch_busy_us", "gamma"}
    with pytest.raises(ValueError, match="utilisation form"):
        res.fit_util(measured, TRUE_STEP, form="linear")


def test_a_bundle_records_its_utilisation_form_and_an_old_one_reads_as_written(synthetic_dir):
    from dltsched.predictors.calibration.model import GpuCalibration

    entry = fit_gpu(read_datasets([synthetic_dir])).to_json()
    assert entry["utilisation_form"] == "ratio" and set(entry["utilisation"]) == {"k"}
    key = ("resnet18", "cifar10", 96, False)  # never profiled: the calibrated model answers
    new = GpuCalibration.from_json(GPU, json.loads(json.dumps(entry)))
    assert new.util_pct(key)[1] == "calibrated"
    # a bundle written before the field: power parameters, no utilisation_form
    old_entry = {k: v for k, v in entry.items() if k != "utilisation_form"}
    old_entry["utilisation"] = {"launch_busy_us": 3.0, "gamma": 0.5}
    old = GpuCalibration.from_json(GPU, old_entry)
    f = old.features(key)
    busy, step = iso.gpu_seconds(old.step, f), old.step_s(key)[0]
    power = 100.0 * min(1.0, ((busy + 3e-6 * f["launches"]) / step) ** 0.5)
    assert old.util_pct(key) == (pytest.approx(power), "calibrated")
    assert "utilisation_form" not in old_entry and old.to_json()["utilisation_form"] == "power"
    assert new.util_pct(key)[0] == pytest.approx(100.0 * min(1.0, new.util["k"] * busy / max(step, busy)))
    assert abs(power - new.util_pct(key)[0]) > 1.0  # the two forms differ here, so the test tells them apart
    with pytest.raises(ValueError, match="utilisation_form"):
        GpuCalibration.from_json(GPU, {**old_entry, "utilisation_form": "ratio"})


def _gavel_file(path):
    """A small Gavel throughput table: three job types alone on K80 and P100, pairs on K80 in both orders."""
    alone = {"ResNet-18 (batch size 64)": 20.0, "LM (batch size 20)": 50.0, "A3C": 10.0}
    table = {}
    for gpu, scale in (("k80", 1.0), ("p100", 3.0)):
        table[gpu] = {f"('{label}', 1)": {"null": rate * scale} for label, rate in alone.items()}
        table[gpu]["('ResNet-18 (batch size 64)', 2)"] = {"null": 30.0 * scale}
    k80 = table["k80"]
    k80["('ResNet-18 (batch size 64)', 1)"]["('LM (batch size 20)', 1)"] = [10.0, 30.0]
    k80["('LM (batch size 20)', 1)"]["('ResNet-18 (batch size 64)', 1)"] = [30.0, 10.0]
    k80["('A3C', 1)"]["('LM (batch size 20)', 1)"] = [0.0, 0.0]  # not measured
    path.write_text(json.dumps(table))
    return path


def test_gavel_throughputs_read_as_jobs_alone_and_pairs(tmp_path):
    data = {d.gpu: d for d in read_datasets([_gavel_file(tmp_path / "simulation_throughputs.json")])}
    assert sorted(data) == ["k80", "p100"] and {d.sharing for d in data.values()} == {"timeslice"}
    k80 = data["k80"]
    steps = {r.model: r for r in k80.isolated}
    # one GPU only: the scale-2 entry is not a job alone
    assert sorted(steps) == ["a3c", "lstm_lm", "resnet18"]
    assert steps["resnet18"].step_time_s == pytest.approx(1 / 20.0) and steps["resnet18"].scope == "iteration"
    assert steps["a3c"].optimizer == "adam"  # Gavel's A3C script trains with Adam
    assert len(k80.groups) == 1 and not data["p100"].groups  # both orders are one pair; [0, 0] is none
    pair = k80.groups[0]
    speeds = dict(zip((m[0] for m in pair.members), pair.speeds, strict=True))
    assert speeds == pytest.approx({"resnet18": 0.5, "lstm_lm": 0.6})
    assert k80.sources[0]["license"].startswith("MIT") and k80.sources[0]["shippable"] is True


def _lucid_folder(folder):
    folder.mkdir()
    with (folder / "single_data.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["model", "dataset", "batchsize", "amp", "speed", "gpu_util", "gmem_util", "gmem",
                    "label"])
        for model, dataset, speed, util, gmem in (("ResNet18", "CIFAR-10", 2000.0, 60.0, 2500.0),
                                                  ("VGG", "CIFAR-10", 1500.0, 70.0, 2800.0),
                                                  ("LSTM", "Wikitext2", 900.0, 80.0, 2100.0),
                                                  ("DCGAN", "LSUN", 1200.0, 50.0, 1900.0),
                                                  ("PointNet", "ShapeNet", 700.0, 55.0, 2300.0)):
            w.writerow([model, dataset, 32, 0, speed, util, 10.0, gmem, 0])
    with (folder / "colocate_info.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        cols = ["model", "dataset", "gpu_num", "batchsize", "amp", "speed"]
        w.writerow(["", *(f"{c}1" for c in cols), *(f"{c}2" for c in cols), "gpu_util", "gmem_util", "gmem"])
        pairs = (("ResNet18", "CIFAR-10", "VGG", "CIFAR-10"), ("LSTM", "Wikitext2", "DCGAN", "LSUN"),
                 ("ResNet18", "CIFAR-10", "PointNet", "ShapeNet"), ("VGG", "CIFAR-10", "LSTM", "Wikitext2"))
        for i, (m1, d1, m2, d2) in enumerate(pairs):
            w.writerow([i, m1, d1, 1, 32, 0, 0.7, m2, d2, 1, 32, 0, 0.8, 90.0, 20.0, 4000.0])
    return folder


def test_a_lucid_folder_needs_its_gpu_and_makes_a_bundle_that_is_not_shippable(tmp_path, capsys):
    folder = _lucid_folder(tmp_path / "lucid")
    with pytest.raises(ValidationError, match="--gpu"):
        read_datasets([folder])
    (data,) = read_datasets([folder], gpu="v100-32gb")
    assert data.gpu == "v100-32gb" and len(data.isolated) == 5 and len(data.groups) == 4
    assert data.isolated[0].step_time_s == pytest.approx(32 / 2000.0)
    assert data.sources[0]["shippable"] is False and "non-commercial" in data.sources[0]["license"]
    out = tmp_path / "lucid.json"
    assert main(["calibrate", str(folder), "--out", str(out), "--no-figures"]) == 2
    assert "--gpu" in capsys.readouterr().err
    assert main(["calibrate", str(folder), "--gpu", "v100-32gb", "--out", str(out), "--no-figures"]) == 0
    assert "NOT SHIPPABLE" in capsys.readouterr().out
    bundle = json.loads(out.read_text())
    assert bundle["shippable"] is False and bundle["restricted_by"] == [data.sources[0]["license"]]
    from dltsched.predictors.calibration.bundle import CalibrationBundle

    loaded = CalibrationBundle.load(out)
    assert not loaded.shippable and loaded.describe()["shippable"] is False
    assert "not shippable" in loaded.label


def test_a_step_form_and_busy_share_round_trip_through_the_bundle(synthetic_dir, tmp_path):
    from dltsched.predictors.calibration.bundle import CalibrationBundle, calibrate

    bundle = calibrate([synthetic_dir], figures=False)
    assert bundle["shippable"] is True
    out = tmp_path / "cal.json"
    out.write_text(json.dumps(bundle))
    loaded = CalibrationBundle.load(out).for_gpu(GPU)
    direct = fit_gpu(read_datasets([synthetic_dir]))
    assert loaded is not None and loaded.step == direct.step and loaded.busy_step == direct.busy_step
    key = ("resnet18", "cifar10", 96, False)  # never profiled
    assert loaded.predicted_step_s(key) == pytest.approx(direct.predicted_step_s(key))


def test_a_gpu_bound_by_its_host_is_calibrated_in_that_form_end_to_end(tmp_path, monkeypatch):
    from dltsched.engine.app.api import ConfiguredSolver
    from dltsched.engine.domain.model import ClusterState, JobState
    from dltsched.instances.schema import load_instance

    from . import conftest

    host_bound = {**TRUE_STEP, "overlap_power": 1.0, "host_ops": 1.0, "dispatch_us": 30.0}
    monkeypatch.setattr(conftest, "TRUE_STEP", host_bound)
    conftest.write_profiles(tmp_path / "h200", "timeslice", 0.02, 5)
    out = tmp_path / "cal.json"
    assert main(["calibrate", str(tmp_path / "h200"), "--out", str(out), "--no-figures"]) == 0
    raw = json.loads(out.read_text())["gpus"][GPU]
    assert raw["step_time"]["host_ops"] == 1.0 and raw["busy_step_time"]["host_ops"] == 0.0
    inst_path = tmp_path / "inst.json"
    assert main(["instance", "generate", "--jobs", "6", "--cluster", "h200:1x2", "--seed", "3",
                 "-o", str(inst_path)]) == 0
    inst = load_instance(inst_path)
    state = ClusterState(0.0, inst.cluster, tuple(JobState(j, j.total_iterations) for j in inst.jobs))
    plan = ConfiguredSolver.of(predictors=f"default@{out}", backend="greedy").solve(state)
    assert plan.assignments and all(plan.provenance[a.job_id]["calibration"].startswith("cal.json#")
                                    for a in plan.assignments)


def test_a_broken_gavel_table_is_one_clear_error(tmp_path, capsys):
    bad = tmp_path / "simulation_throughputs.json"
    bad.write_text('{"k80": {"(\'NoSuchModel\', 1)": {"null": 3.0}}}')
    assert main(["calibrate", str(bad), "--out", str(tmp_path / "x.json"), "--no-figures"]) == 2
    err = capsys.readouterr().err
    assert "Gavel" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1

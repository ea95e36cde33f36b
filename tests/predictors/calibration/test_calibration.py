"""Calibration from profile datasets: fits recover known parameters, sharing modes stay apart, the bundle
round-trips and prices exactly the GPU types it covers."""

from __future__ import annotations

import json

import pytest

from dltsched.engine.app.cli.main import main
from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Job
from dltsched.predictors.calibration import groups as grp
from dltsched.predictors.calibration.data import read_datasets
from dltsched.predictors.calibration.model import fit_gpu

from .conftest import SHARED_MIB, TRUE_MEMORY, TRUE_SPEED, TRUE_STEP


@pytest.fixture(scope="module")
def datasets(synthetic_dir):
    return read_datasets([synthetic_dir])


@pytest.fixture(scope="module")
def fitted(datasets):
    return fit_gpu(datasets)


def test_reader_keeps_gpu_and_sharing_modes_apart(datasets):
    assert [(d.gpu, d.sharing) for d in datasets] == [("h200", "mps"), ("h200", "timeslice")]
    assert all(d.tf32 == frozenset({"conv"}) for d in datasets)  # the record's cuDNN TF32 setting
    assert all(len(d.isolated) == 8 and {r.scope for r in d.isolated} == {"compute"} for d in datasets)


def test_step_fit_recovers_the_synthetic_gpu(fitted):
    # 8 jobs, 3% noise, parameters pulled towards the uncalibrated model: within 30% of the truth for the op
    # classes these jobs exercise, and the per-launch host time (the launch-bound jobs pin it)
    for name in ("s_conv", "dispatch_us"):
        assert fitted.step[name] == pytest.approx(TRUE_STEP[name], rel=0.3)


def test_memory_fit_is_exact_without_noise(fitted):
    # the shipped form fits the context alone (away from its 1.5 GiB prior) and takes the reserve as traced
    assert fitted.memory["context_mib"] == pytest.approx(TRUE_MEMORY["context_mib"], rel=0.02)
    assert fitted.memory["scale"] == TRUE_MEMORY["scale"] == 1.0


def test_group_models_per_sharing_mode(fitted):
    ts = fitted.sharing["timeslice"]
    assert fitted.sharing["mps"].groups == 11 and ts.groups == 11
    assert ts.shared_memory_mib == pytest.approx(SHARED_MIB, rel=0.02)
    for term in ("t_both", "t_partner"):
        assert ts.speed[term] == pytest.approx(TRUE_SPEED[term], abs=0.15)
    key = ("resnet18", "cifar10", 64, False)
    other = ("vgg16", "cifar10", 64, False)
    slow = fitted.group([key, other], "timeslice")["speeds"]
    fast = fitted.group([key, other], "mps")["speeds"]
    assert all(f > s for f, s in zip(fast, slow, strict=True))  # MPS measured faster: its own fit says so
    assert fitted.group([key, other], "nvlink-magic") is None


def test_a_third_job_slows_everyone_and_speeds_stay_in_bounds():
    a, b, c = grp.Member(0.9, 2000.0, 90.0), grp.Member(0.3, 1500.0, 40.0), grp.Member(0.6, 1800.0, 70.0)
    pair, triple = grp.speeds(TRUE_SPEED, [a, b]), grp.speeds(TRUE_SPEED, [a, b, c])
    assert all(0.0 < s <= 1.0 for s in (*pair, *triple))
    assert triple[0] < pair[0] and triple[1] < pair[1]
    assert grp.group_memory_mib(SHARED_MIB, [a, b, c]) == pytest.approx(5300.0 - 2 * SHARED_MIB)
    assert 90.0 <= grp.group_util_pct(1.0, [a, b, c]) <= 100.0


def test_measured_profile_wins_then_the_calibrated_model(fitted):
    key = ("resnet18", "cifar10", 64, False)
    measured, source = fitted.step_s(key)
    assert source == "measured" and measured == fitted.profiles[key].step_time_s
    unseen = ("resnet18", "cifar10", 256, False)
    predicted, source = fitted.step_s(unseen)
    assert source == "calibrated" and predicted > measured  # four times the batch takes longer
    assert fitted.step_s(key, freeze_level=2)[1] == "calibrated"  # the profile is of the unfrozen job


def test_calibrate_cli_writes_a_bundle_that_round_trips(synthetic_dir, tmp_path, capsys):
    out = tmp_path / "cal.json"
    assert main(["calibrate", str(synthetic_dir), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "h200" in text and "timeslice" in text and "mps" in text
    raw = json.loads(out.read_text())
    assert raw["format"] == "dltsched-calibration/1" and raw["fitted"]["step_time"]
    assert {s["path"] for s in raw["data"]} == {str(synthetic_dir), str(synthetic_dir / "mps")}
    fig = raw["gpus"]["h200"]["figures"]["timeslice"]
    step = fig["isolated_lomo"]["step_time_s"]
    # the synthetic GPU is not the default
    assert step["n"] == 8 and step["calibrated_mape"] < step["default_mape"]
    assert fig["groups_logo"]["memory_mib"]["calibrated_mape"] < 1.0  # exact memories: exact groups


def test_bundle_prices_covered_gpus_only(synthetic_dir, tmp_path):
    from dltsched.engine.app.registry import bundle_fields, check_predictors, predictors

    out = tmp_path / "cal.json"
    assert main(["calibrate", str(synthetic_dir), "--out", str(out), "--no-figures"]) == 0
    name = check_predictors(f"DEFAULT@{out}")
    assert name == f"default@{out}"  # the bundle name is lower-cased, the path kept
    base, cal = predictors("default"), predictors(name)
    job = Job(id="j", model="resnet18", batch_size=64, total_iterations=1.0, dataset="cifar10")
    other = Job(id="k", model="vgg16", batch_size=64, total_iterations=1.0, dataset="cifar10")
    measured = json.loads(out.read_text())["gpus"]["h200"]["profiles"]
    resnet = next(p for p in measured if p["model"] == "resnet18")
    assert cal.step_time.step_time_s(job, "h200") == pytest.approx(resnet["step_time_s"])
    assert cal.step_time.memory_mib(job, "h200") == pytest.approx(resnet["gmem_mib"])
    assert cal.step_time.step_time_s(job, "v100") == base.step_time.step_time_s(job, "v100")
    assert (cal.colocation.colocated_speeds([job, other], "v100")
            == base.colocation.colocated_speeds([job, other], "v100"))
    assert (cal.colocation.colocated_speeds([job, other], "h200")
            != base.colocation.colocated_speeds([job, other], "h200"))
    assert cal.colocation.colocation_sources([job, other], "h200") == ("measured", "measured")
    fields = bundle_fields(name)
    assert fields["calibration"].startswith("cal.json#") and "h200" in fields["calibration"]


@pytest.mark.parametrize("content, problem", [("{}", "format"), ("not json", "not JSON")])
def test_a_bad_bundle_is_one_clear_error(tmp_path, capsys, content, problem):
    from dltsched.engine.app.registry import check_predictors

    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(ValidationError, match=problem):
        check_predictors(f"default@{bad}")
    assert main(["solve", str(bad), "--calibration", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: calibration:") and err.count("\n") == 1


def test_calibrate_refuses_a_folder_without_profiles(tmp_path, capsys):
    assert main(["calibrate", str(tmp_path), "--out", str(tmp_path / "x.json")]) == 2
    assert "holds no profile dataset" in capsys.readouterr().err


def test_a_model_profiled_at_another_batch_size_lends_its_scale(fitted):
    unseen = ("transformer", "multi30k", 64, False)  # profiled at batch 32 only
    scale = fitted.model_scale["transformer"]
    assert set(fitted.model_scale) == {"resnet18", "vgg16", "mobilenet_v2", "lstm_lm", "neumf", "dcgan",
                                       "pointnet", "transformer"}
    assert fitted.predicted_step_s(unseen) == pytest.approx(
        fitted.predicted_step_s(unseen, model_scale=False) * scale)
    never = ("bert_base", "squad", 32, False)
    assert "bert_base" not in fitted.model_scale and fitted.step_s(never)[1] == "calibrated"


def test_steptime_csv_calibrates_jobs_alone_with_leave_one_job_out(tmp_path):
    from dltsched.predictors.calibration.data import read_datasets
    from dltsched.predictors.calibration.evaluate import cross_validate
    from dltsched.predictors.calibration.isolated import job_features, step_seconds

    rows = ["model,gpu,batch_size,num_gpus,step_time_s,dataset,scope"]
    for model, dataset, batches, bias in (("resnet18", "cifar10", (32, 64, 128), 1.3),
                                          ("vgg16", "cifar10", (32, 64), 0.8),
                                          ("lstm_lm", "wikitext2", (20, 40), 1.0)):
        for b in batches:
            f = job_features(model, dataset, b, False, "v100", frozenset(), "compute")
            rows.append(f"{model},v100,{b},1,{step_seconds(TRUE_STEP, f, b) * bias},{dataset},compute")
    path = tmp_path / "steps.csv"
    path.write_text("\n".join(rows) + "\n")
    (data,) = read_datasets([path])
    assert (data.gpu, data.sharing, len(data.isolated), data.groups) == ("v100", "timeslice", 7, ())
    fig = cross_validate([data])["timeslice"]["isolated_lojo"]["step_time_s"]
    # each model's own bias is learned from its other batch sizes: better than the same fold without it
    assert fig["n"] == 7 and fig["calibrated_mape"] < fig["calibrated_no_model_scale_mape"]


def test_api_plans_name_the_calibration_that_priced_them(synthetic_dir, tmp_path):
    from dltsched.engine.domain.model import ClusterState, JobState
    from dltsched.formulations.pipeline import ConfiguredSolver
    from dltsched.instances.schema import load_instance

    out = tmp_path / "cal.json"
    assert main(["calibrate", str(synthetic_dir), "--out", str(out), "--no-figures"]) == 0
    inst_path = tmp_path / "inst.json"
    assert main(["instance", "generate", "--jobs", "6", "--cluster", "h200:1x2,v100:1x2", "--seed", "3",
                 "-o", str(inst_path)]) == 0
    inst = load_instance(inst_path)
    state = ClusterState(0.0, inst.cluster, tuple(JobState(j, j.total_iterations) for j in inst.jobs))
    plan = ConfiguredSolver.of(predictors=f"default@{out}", backend="greedy").solve(state)
    placed = {a.job_id: inst.cluster.gpu_type_of(a.gpus[0]) for a in plan.assignments}
    assert placed
    for job_id, gpu_type in placed.items():
        said = plan.provenance[job_id]["calibration"]
        assert said.startswith("cal.json#")
        assert ("not covered (v100)" in said) == (gpu_type == "v100")


def test_experiment_files_take_a_calibration_relative_to_the_file(synthetic_dir, tmp_path):
    import shutil
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    shutil.copy(repo / "instances" / "examples" / "tiny-6jobs-4gpus.json", tmp_path / "tiny.json")
    assert main(["calibrate", str(synthetic_dir), "--out", str(tmp_path / "cal.json"), "--no-figures"]) == 0
    (tmp_path / "exp.toml").write_text('name = "cal"\npolicies = ["fifo"]\nseeds = [0]\ncalibration = '
                                       '"cal.json"\n[workload]\ninstance = "tiny.json"\n[outputs]\nfigures = '
                                       '[]\n')
    assert main(["experiment", "run", str(tmp_path / "exp.toml"), "-o", str(tmp_path / "out")]) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["predictors"]["name"] == f"default@{tmp_path / 'cal.json'}"
    assert results["predictors"]["calibration"].startswith("cal.json#")
    (tmp_path / "exp.toml").write_text(
        (tmp_path / "exp.toml").read_text().replace("cal.json", "missing.json"))
    assert main(["experiment", "run", str(tmp_path / "exp.toml"), "-o", str(tmp_path / "out2")]) == 2


def test_the_sharing_mode_is_chosen_with_the_calibration(synthetic_dir, tmp_path):
    from dltsched.engine.app.registry import bundle_fields, check_predictors, predictors

    out = tmp_path / "cal.json"
    assert main(["calibrate", str(synthetic_dir), "--out", str(out), "--no-figures"]) == 0
    jobs = [Job(id=m, model=m, batch_size=64, total_iterations=1.0, dataset="cifar10")
            for m in ("resnet18", "vgg16")]
    ts = predictors(check_predictors(f"default@{out}")).colocation.colocated_speeds(jobs, "h200")
    mps = predictors(check_predictors(f"default@{out}:mps")).colocation.colocated_speeds(jobs, "h200")
    assert all(m > t for m, t in zip(mps, ts, strict=True))
    assert ", mps;" in bundle_fields(f"default@{out}:mps")["calibration"]
    (tmp_path / "ts").mkdir()
    assert main(["calibrate", str(synthetic_dir), "--out", str(tmp_path / "ts.json"), "--no-figures"]) == 0
    raw = json.loads((tmp_path / "ts.json").read_text())
    for entry in raw["gpus"].values():
        entry["colocation"].pop("mps")
    (tmp_path / "ts.json").write_text(json.dumps(raw))
    with pytest.raises(ValidationError, match="no mps groups"):
        check_predictors(f"default@{tmp_path / 'ts.json'}:mps")


def test_eval_commands_price_covered_gpus_with_the_bundle(synthetic_dir, tmp_path, capsys):
    out = tmp_path / "cal.json"
    assert main(["calibrate", str(synthetic_dir), "--out", str(out), "--no-figures"]) == 0
    capsys.readouterr()
    # the same file the bundle was fitted on: every job priced by its own profile, flagged in-sample
    assert main(["predict", "eval-steptime", str(synthetic_dir / "steptime.csv"), "--calibration", str(out),
                 "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["in_sample"] and {r["source"] for r in got["rows"]} == {"measured"}
            and got["calibrated_n"] == 0)
    # new jobs on the covered GPU and one on another GPU
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "steps.csv").write_text("model,gpu,batch_size,num_gpus,step_time_s,dataset,scope\n"
                                     "resnet18,h200,256,1,0.02,cifar10,compute\n"
                                     "vgg16,v100,64,1,0.05,cifar10,compute\n")
    assert main(["predict", "eval-steptime", str(fresh / "steps.csv"),
                 "--calibration", str(out), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert not got["in_sample"] and [r["source"] for r in got["rows"]] == ["calibrated", "default"]
    assert got["calibrated_n"] == 1
    assert main(["predict", "eval-colocation", str(synthetic_dir / "colocate_info.csv"), "--format", "lucid",
                 "--calibration", str(out), "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["in_sample"] and scores["calibration"].startswith("cal.json#")
    assert scores["memory_mape"] < 1.0  # the synthetic groups follow the fitted memory rule exactly


def test_calibrate_one_sharing_mode(synthetic_dir, tmp_path, capsys):
    out = tmp_path / "ts.json"
    assert main(["calibrate", str(synthetic_dir), "--sharing", "timeslice",
                 "--out", str(out), "--no-figures"]) == 0
    raw = json.loads(out.read_text())
    assert (raw["gpus"]["h200"]["sharing_modes"] == ["timeslice"]
            and list(raw["gpus"]["h200"]["colocation"]) == ["timeslice"])
    assert main(["calibrate", str(synthetic_dir / "mps"), "--sharing", "timeslice", "--out", str(out)]) == 2
    assert "no timeslice datasets" in capsys.readouterr().err


def test_a_folder_of_csvs_alone_reads_like_groups_json(synthetic_dir, tmp_path):
    import shutil

    from dltsched.predictors.calibration.data import read_folder

    csvs = tmp_path / "csvs"
    shutil.copytree(synthetic_dir, csvs, ignore=shutil.ignore_patterns("mps"))
    (csvs / "groups.json").unlink()
    from_json, from_csv = read_folder(synthetic_dir), read_folder(csvs)
    assert from_csv.sharing == "timeslice" and from_csv.tf32 == from_json.tf32
    assert sorted(r.key for r in from_csv.isolated) == sorted(r.key for r in from_json.isolated)
    assert [g.members for g in from_csv.groups] == [g.members for g in from_json.groups]
    assert [s for g in from_csv.groups for s in g.speeds] == pytest.approx([s for g in from_json.groups
                                                                            for s in g.speeds])
    (csvs / "steptime.csv").unlink()  # Lucid's layout: single_data.csv with a gpu column
    lucid = read_folder(csvs)
    assert [r.step_time_s for r in lucid.isolated] == pytest.approx(
        [r.step_time_s for r in from_json.isolated])

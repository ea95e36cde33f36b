"""The ablation experiment: every decision switched off in turn, compared with the full policy seed by
seed."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from dltsched.engine.app.ablation import ablation_variants, exact_parts, paired_changes, type_blind
from dltsched.engine.app.cli.main import main
from dltsched.engine.app.experiments import load_experiment
from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Job
from dltsched.instances.finetune import finetune_mix
from dltsched.predictors import analytic_predictors

STEPTIME = """model,dataset,gpu,batch_size,num_gpus,step_time_s,amp,optimizer,peak_memory_mib,gpu_util
bert_base,squad,h200,32,1,0.17,0,sgd,7900,99
gpt2,wikitext103,h200,8,1,0.18,0,sgd,14000,99
lstm_lm,wikitext2,h200,20,1,0.005,0,sgd,400,93
"""
PAIRS = (",model1,dataset1,gpu_num1,batchsize1,amp1,speed1,model2,dataset2,gpu_num2,batchsize2,amp2,speed2,"
         "gpu_util,gmem_util,gmem,gpu,sharing,gmem_source\n"
         """0,bert_base,squad,1,32,0,0.9,lstm_lm,wikitext2,1,20,0,0.95,90,3,3000,h200,mps,nvml
""")


def test_variants_switch_off_one_decision_each() -> None:
    variants = ablation_variants({"time_limit_s": 1.0})
    assert variants["no-colocation"][1]["max_jobs_per_gpu"] == 1
    assert variants["no-freezing"][1]["freeze_levels"] == (0,)
    assert variants["multi-stage"][1]["stage_horizon_s"] > 0  # the full policy uses first-stage values
    assert variants["type-blind"][2] and variants["no-ordering"][1]["objective"] == "effective_progress"
    assert "first-stage" in ablation_variants({"stage_horizon_s": 300.0})
    assert "length_weight" not in ablation_variants({"objective": "effective_progress",
                                                     "length_weight": 1.0})["no-ordering"][1]


def test_type_blind_predicts_every_type_alike() -> None:
    preds = type_blind(analytic_predictors(), ["v100", "k80"])
    job = Job("a", "resnet18", 32, 10.0)
    assert preds.step_time.step_time_s(job, "v100") == pytest.approx(preds.step_time.step_time_s(job, "k80"))
    inner = analytic_predictors().step_time
    both = math.sqrt(inner.step_time_s(job, "v100") * inner.step_time_s(job, "k80"))
    assert preds.step_time.step_time_s(job, "v100") == pytest.approx(both)


def test_exact_parts_take_only_the_named_part_from_the_truth(tmp_path: Path) -> None:
    from dltsched.engine.sim.profile_truth import ProfileTruth

    (tmp_path / "steptime.csv").write_text(STEPTIME)
    (tmp_path / "colocate_info.csv").write_text(PAIRS)
    truth = ProfileTruth([tmp_path], "mps")
    preds = analytic_predictors()
    bert, lstm = Job("a", "bert_base", 32, 10.0), Job("b", "lstm_lm", 20, 10.0)
    speeds = exact_parts(preds, truth, ["speeds"])
    # measured pair
    assert speeds.colocation.colocated_speeds([bert, lstm], "h200") == pytest.approx((0.9, 0.95))
    assert speeds.step_time.step_time_s(bert, "h200") == preds.step_time.step_time_s(bert, "h200")
    assert speeds.colocation.group_memory_mib([bert, lstm], "h200") == preds.colocation.group_memory_mib(
        [bert, lstm], "h200")
    step = exact_parts(preds, truth, ["step"])
    assert step.step_time.step_time_s(bert, "h200") == pytest.approx(0.17)
    assert step.step_time.memory_mib(bert, "h200") == preds.step_time.memory_mib(bert, "h200")
    assert step.colocation.colocated_speeds([bert, lstm], "h200") == preds.colocation.colocated_speeds(
        [bert, lstm], "h200")
    mem = exact_parts(preds, truth, ["mem"])
    assert mem.step_time.memory_mib(bert, "h200") == pytest.approx(7900)
    assert exact_parts(preds, truth, []) is preds
    with pytest.raises(ValueError, match="speed"):
        exact_parts(preds, truth, ["speed"])


def test_the_heldout_calibration_has_no_row_of_the_finetune_models() -> None:
    exp = load_experiment(Path(__file__).parents[3]
                          / "instances/experiments/colocation-finetune-h200mps-heldout.toml")
    bundle = json.loads(Path(exp.predictor_set().split("@", 1)[1].rsplit(":", 1)[0]).read_text())
    fitted = json.dumps({k: v for k, v in bundle["gpus"]["h200"].items() if k != "figures"})
    assert "mps" in bundle["gpus"]["h200"]["sharing_modes"] and "resnet50" in fitted
    assert not any(m in fitted for m in ("bert_base", "gpt2", "transformer", "lstm_lm"))


def test_paired_changes_are_per_seed() -> None:
    runs = [{"policy": "optimizing", "seed": s, "avg_jct_s": 100.0 * (s + 1), "makespan_s": 10.0}
            for s in (0, 1)]
    runs += [{"policy": "x", "seed": s, "avg_jct_s": 110.0 * (s + 1), "makespan_s": 9.0 + s} for s in (0, 1)]
    (row,) = paired_changes(runs, ["x"])
    assert row["avg_jct_s_change"] == pytest.approx(0.10)
    assert row["avg_jct_s_change_ci95"] == pytest.approx(0.0)
    assert row["makespan_s_change"] == pytest.approx((-0.1 + 0.0) / 2) and row["makespan_s_change_ci95"] > 0


def test_finetune_mix_is_seeded_and_small() -> None:
    a, b = finetune_mix(30, "h200:1x8", seed=3), finetune_mix(30, "h200:1x8", seed=3)
    assert a.jobs == b.jobs and a.jobs != finetune_mix(30, "h200:1x8", seed=4).jobs
    assert all(j.num_gpus <= 2 for j in a.jobs) and a.cluster.num_gpus == 8
    with pytest.raises(ValidationError, match="arrival_rate_per_h"):
        finetune_mix(5, arrival_rate_per_h=0.0)


def test_ablation_experiment_on_a_profile_truth(tmp_path: Path) -> None:
    data = tmp_path / "h200"
    data.mkdir()
    (data / "steptime.csv").write_text(STEPTIME)
    (data / "colocate_info.csv").write_text(PAIRS)
    (data / "measurement.json").write_text(json.dumps({"sharing": "mps"}))
    exp = tmp_path / "abl.toml"
    exp.write_text(f"""
name = "abl"
policies = ["optimizing"]
ablation = true
seeds = [0, 1]
predictors = "analytic"
truth = ["{data}"]
memory = "oom"
[workload.finetune]
num_jobs = 8
cluster = "h200:1x2"
arrival_rate_per_h = 120
[options.optimizing]
time_limit_s = 0.2
[outputs]
figures = []
dir = "{tmp_path / 'out'}"
""")
    assert load_experiment(exp).spec.labels()[0] == "optimizing"
    assert main(["-q", "experiment", "run", str(exp), "--json"]) == 0
    with (tmp_path / "out" / "ablation.csv").open(newline="") as fh:
        rows = {r["policy"]: r for r in csv.DictReader(fh)}
    assert set(rows) == {"no-colocation", "no-freezing", "multi-stage", "type-blind", "no-ordering"}
    assert all(r["seeds"] == "2" and math.isfinite(float(r["avg_jct_s_change"])) for r in rows.values())
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["truth"]["kind"] == "profile" and results["truth"]["sharing"] == "mps"
    # one GPU type: a type-blind policy sees the same predictions and makes the same schedule
    assert float(rows["type-blind"]["avg_jct_s_change"]) == pytest.approx(0.0)
    for run in results["runs"]:
        assert run["num_jobs_finished"] == 8
        assert 0 < run["makespan_bound_s"] and math.isfinite(run["makespan_gap"])


def test_an_ablation_needs_the_optimizing_policy(tmp_path: Path) -> None:
    exp = tmp_path / "bad.toml"
    exp.write_text('name = "bad"\npolicies = ["fifo"]\nablation = true\n[workload]\ntrace = "philly"\n')
    with pytest.raises(ValidationError, match="ablation"):
        load_experiment(exp)


def test_experiment_settings_are_checked(tmp_path: Path) -> None:
    exp = tmp_path / "bad.toml"
    exp.write_text('name = "bad"\npolicies = ["fifo"]\nprofile_on_arrival_s = '
                   '-1\n[workload]\ntrace = "philly"\n')
    with pytest.raises(ValidationError, match="profile_on_arrival_s"):
        load_experiment(exp)
    exp.write_text('name = "bad"\npolicies = ["fifo"]\ntruth = '
                   f'["{tmp_path / "missing"}"]\n[workload]\ntrace = "philly"\n')
    with pytest.raises(ValidationError, match="truth"):
        load_experiment(exp)
    exp.write_text('name = "bad"\npolicies = ["optimizing"]\n[variants.x]\npolicy = '
                   '"nope"\n[workload]\ntrace = "philly"\n')
    with pytest.raises(ValidationError, match="variants.x.policy"):
        load_experiment(exp)
    exp.write_text('name = "bad"\npolicies = ["fifo"]\nprofile_every_type = true\n'
                   '[workload]\ntrace = "philly"\n')
    with pytest.raises(ValidationError, match="profile_every_type.*profile_on_arrival_s"):
        load_experiment(exp)

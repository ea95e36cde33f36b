"""The click commands, through CliRunner (mounted under ``dltsched predict`` by the predictors CLI)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dltsched.engine.app.cli.colocation import colocation, eval_colocation
from dltsched.predictors.colocation.metrics import GroupPrediction
from dltsched.predictors.colocation.table import ColocationTable


@pytest.fixture()
def table_path(tmp_path):
    table = ColocationTable({"k80|resnet18:32|resnet50:64": GroupPrediction((0.7, 0.4), None, 80.0)}, 3)
    path = tmp_path / "t.json"
    table.save(path)
    return str(path)


def test_colocation_prints_speed_step_time_memory_util(table_path) -> None:
    result = CliRunner().invoke(colocation, ["--gpu", "K80", "--job", "resnet18:32", "--job", "ResNet-50:64",
                                             "--model", table_path, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert [r["speed"] for r in out["jobs"]] == [0.7, 0.4]
    assert all(r["step_time_s"] > 0 for r in out["jobs"])
    assert out["memory_mib"] > 0 and out["gpu_util"] == 80.0  # memory: analytic (table has none)


def test_colocation_rejects_bad_jobs(table_path) -> None:
    result = CliRunner().invoke(colocation, ["--gpu", "k80", "--job", "resnet18", "--job", "resnet50:64",
                                             "--model", table_path])
    assert result.exit_code != 0 and "MODEL:BATCH" in str(result.exception)


@pytest.mark.data
def test_eval_colocation_on_gavel_pairs(table_path, data_dir) -> None:
    path = str(data_dir / "gavel" / "simulation_throughputs.json")
    result = CliRunner().invoke(eval_colocation, [path, "--format", "gavel", "--gpu", "p100",
                                                  "--model", table_path, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["n"] > 300 and out["speed_mape"] > 0 and out["memory_mape"] is None
    assert "resnet18" in out["per_model"]


def test_eval_colocation_scores_triples_beside_the_rules(tmp_path) -> None:
    (tmp_path / "single_data.csv").write_text(
        "model,dataset,batchsize,amp,speed,gpu_util,gmem_util,gmem,gpu\n"
        "resnet18,cifar10,32,0,1600,40,10,2000,h100\n"
        "vgg16,cifar10,64,0,1280,50,10,2500,h100\n"
        "lstm_lm,wikitext2,20,0,400,70,20,3000,h100\n")
    (tmp_path / "colocate3_info.csv").write_text(
        ",model1,dataset1,gpu_num1,batchsize1,amp1,speed1,model2,dataset2,gpu_num2,batchsize2,amp2,speed2,"
        "model3,dataset3,gpu_num3,batchsize3,amp3,speed3,gpu_util,gmem_util,gmem,gpu,sharing,gmem_source\n"
        "0,vgg16,cifar10,1,64,0,0.5,resnet18,cifar10,1,32,0,0.6,lstm_lm,wikitext2,1,20,0,0.7,95,9,8000,h100,"
        "timeslice,nvml\n")
    result = CliRunner().invoke(eval_colocation,
                                [str(tmp_path / "colocate3_info.csv"), "--format", "lucid", "--rules",
                                                  "--data-dir", str(tmp_path / "none"), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output[result.output.index("{"):])
    assert out["n"] == 1 and out["gpus"] == ["h100"] and out["group_sizes"] == [3]
    # 160% summed: every job at 100 / 160; memory 7500 against 8000 measured
    share = out["rules"]["util_share"]
    speeds, measured = [100 / 160] * 3, [0.7, 0.6, 0.5]
    assert share["speed_mape"] == pytest.approx(100 * sum(abs(p - a) / a
                                                          for p, a in zip(speeds, measured, strict=True)) / 3)
    assert share["memory_mape"] == pytest.approx(100 * 500 / 8000)
    assert share["util_mape"] == pytest.approx(500 / 95)
    assert "not scored" in out["rules"]["fitted_rules"]
    assert out["fallbacks"] == {} and out["speed_mape"] is not None  # every profile measured: no fallback

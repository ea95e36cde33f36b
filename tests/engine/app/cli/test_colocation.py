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

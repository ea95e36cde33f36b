"""``dltsched predict eval-steptime`` on the data folder: multi-GPU rows and leave-one-GPU-out."""

from __future__ import annotations

import json

import pytest

from dltsched.engine.app.cli.main import main

pytestmark = pytest.mark.data


def _eval(capsys, data_dir, *args):
    code = main(["predict", "eval-steptime", "--format", "gavel", "--data-dir", str(data_dir), "--json",
                 *args])
    return code, json.loads(capsys.readouterr().out)


def test_eval_multi_gpu_rows_only(capsys, data_dir):
    code, out = _eval(capsys, data_dir, "--min-scale", "2", "--max-scale", "8")
    assert code == 0 and out["n"] == 168 and {r["num_gpus"] for r in out["rows"]} == {2, 4, 8}
    assert out["mape"] < 19.5  # measured 18.2% with the shipped factors


def test_eval_leave_one_gpu_out_reports_each_gpu(capsys, data_dir):
    code, out = _eval(capsys, data_dir, "--leave-one-gpu-out")
    assert code == 0 and out["n"] == 78 and set(out["per_gpu"]) == {"k80", "p100", "v100"}
    assert sum(g["n"] for g in out["per_gpu"].values()) == 78
    assert all(0 < g["oracle_mape"] <= g["mape"] and g["oracle_scale"] > 0 for g in out["per_gpu"].values())

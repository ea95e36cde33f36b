"""``dltsched profile --plan``: what to profile on a new GPU within a budget, planned without a GPU."""

from __future__ import annotations

import json

from dltsched.engine.app.cli.main import main
from dltsched.predictors.calibration.plan import plan_profile


def test_plan_fits_the_budget_and_covers_op_classes_and_gpu_shares():
    models = ("resnet18", "vgg16", "bert_base", "lstm_lm", "neumf", "dcgan", "pointnet", "transformer")
    plan = plan_profile("h200", 300.0, models=models)
    assert 0 < plan["estimated_s"] <= 300.0
    assert len({j["family"] for j in plan["jobs"]}) >= 4
    assert len({j["dominant"] for j in plan["jobs"]}) >= 2  # e.g. conv- and launch-bound jobs
    assert min(j["busy"] for j in plan["jobs"]) < 0.5 < max(j["busy"] for j in plan["jobs"])
    assert plan["groups"] and all(2 <= len(g.split("+")) <= 3 for g in plan["groups"])
    assert plan["command"].startswith("dltsched profile --job ")
    small = plan_profile("h200", 60.0, models=models)
    assert len(small["jobs"]) + len(small["groups"]) < len(plan["jobs"]) + len(plan["groups"])


def test_plan_cli_prints_the_plan_and_runs_nothing(capsys, tmp_path):
    code = main(["profile", "--plan", "--budget", "120", "--model", "resnet18", "--model", "neumf",
                 "--model", "bert_base", "--model", "lstm_lm", "--json"])
    assert code == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["gpu"] == "h200" and plan["budget_s"] == 120.0 and plan["jobs"]
    assert not list(tmp_path.iterdir())
    assert main(["profile", "--plan", "--gpu", "h2000"]) == 2
    assert "--gpu" in capsys.readouterr().err

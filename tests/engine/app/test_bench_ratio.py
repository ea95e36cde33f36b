"""`bench simulate` divides each policy's simulation wall time by Tiresias's from the same run."""

from __future__ import annotations

import json

import pytest

from dltsched.engine.app.cli.main import main


def test_each_policy_gets_its_wall_time_ratio_to_tiresias(capsys: pytest.CaptureFixture[str],
                                                          repo_root) -> None:
    inst = str(repo_root / "instances" / "examples" / "tiny-6jobs-4gpus.json")
    assert main(["bench", "simulate", "--instance", inst, "--policy", "tiresias", "--policy", "fifo",
                 "--policy", "sjf", "--seed", "0", "--seed", "1", "--predictors", "analytic", "--json"]) == 0
    rows = {r["policy"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert "simulate_s_vs_tiresias" not in rows["tiresias"]
    for name in ("fifo", "sjf"):
        assert rows[name]["simulate_s_vs_tiresias"] == pytest.approx(rows[name]["simulate_s"]
                                                                      / rows["tiresias"]["simulate_s"])


def test_no_ratio_without_tiresias_in_the_run(capsys: pytest.CaptureFixture[str], repo_root) -> None:
    inst = str(repo_root / "instances" / "examples" / "tiny-6jobs-4gpus.json")
    assert main(["bench", "simulate", "--instance", inst, "--policy", "fifo",
                 "--predictors", "analytic"]) == 0
    assert "tiresias's in the same run" not in capsys.readouterr().out

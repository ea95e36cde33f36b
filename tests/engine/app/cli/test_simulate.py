"""`dltsched simulate`: JSON fields, the comparison table, and one-line errors with exit code 2."""

from __future__ import annotations

import json

import pytest

from dltsched.engine.app.cli.main import main

DEFAULT = "instances/examples/default.json"


@pytest.fixture(autouse=True)
def _in_repo(repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)


def test_simulate_one_policy_prints_required_fields(capsys):
    assert main(["simulate", "--instance", DEFAULT, "--policy", "fifo", "--predictors", "analytic",
                 "--json"]) == 0
    (out,) = json.loads(capsys.readouterr().out)["rows"]
    for key in ("policy", "avg_jct_s", "p99_jct_s", "makespan_s", "gpu_util", "num_jobs_finished"):
        assert key in out
    assert out["policy"] == "fifo"
    assert out["num_jobs_finished"] == out["num_jobs"]
    assert out["p99_jct_s"] >= out["avg_jct_s"] > 0


def test_simulate_all_prints_table(capsys):
    assert main(["simulate", "--instance", DEFAULT, "--predictors", "analytic"]) == 0
    out = capsys.readouterr().out
    for name in ("fifo", "sjf", "tiresias", "gandiva"):
        assert name in out


def test_records_and_output_file(tmp_path, capsys):
    target = tmp_path / "r.json"
    assert main(["simulate", "--instance", DEFAULT, "--policy", "gandiva", "--predictors", "analytic",
                 "--records", "-o", str(target), "--json"]) == 0
    (data,) = json.loads(target.read_text())["rows"]
    assert len(data["records"]) == data["num_jobs_finished"]
    assert data["placements"] and data["utilization"]


@pytest.mark.parametrize(("args", "needle"), [
    (["--policy", "fifox"], "fifo"),
    (["--instance", "missing.json"], "missing.json"),
])
def test_bad_input_one_line_exit_2(args, needle, capsys):
    argv = ["simulate", "--predictors",
            "analytic"] + (args if "--instance" in args else ["--instance", DEFAULT] + args)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_malformed_instance_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    assert main(["simulate", "--instance", str(bad), "--policy", "fifo"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1

"""`bench windows` times the optimizing policy beside its references in one run, per held-out window."""

from __future__ import annotations

import json

import pytest

from dltsched.engine.app.cli.bench_windows import HELD_OUT, TUNING, TUNING_MORE
from dltsched.engine.app.cli.main import main


def test_held_out_windows_are_five_and_exclude_the_tuning_one():
    assert len(HELD_OUT) == 5 and TUNING not in HELD_OUT
    assert all(500 <= w.jobs <= 1000 and 64 <= w.gpus <= 256 for w in HELD_OUT)
    assert len({w.start_s for w in HELD_OUT} | {TUNING.start_s}) == 6
    assert not {w.name for w in TUNING_MORE} & {w.name for w in HELD_OUT}
    assert not {w.start_s for w in TUNING_MORE} & {w.start_s for w in HELD_OUT}


@pytest.mark.data
def test_a_window_reports_ratios_of_the_same_run(capsys):
    assert main(["bench", "windows", "--window", "w1", "--max-jobs", "12", "--reference", "tiresias",
                 "--predictors", "analytic", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["window"] == "w1" and row["num_jobs"] == 12 and row["bundle"] == "analytic"
    opt, ref = row["optimizing"], row["tiresias"]
    assert row["optimizing_over_tiresias"] == pytest.approx(opt["simulate_s"] / ref["simulate_s"])
    assert opt["num_jobs_finished"] == ref["num_jobs_finished"] == 12
    assert 1 <= opt["solves"] <= opt["num_rounds"]
    assert 0.0 < opt["solver_s"] < opt["simulate_s"]
    assert opt["ms_per_round"] == pytest.approx(1e3 * opt["simulate_s"] / opt["num_rounds"])


@pytest.mark.data
def test_an_option_reaches_the_optimizing_policy_only(capsys):
    args = ["bench", "windows", "--window", "t2", "--max-jobs", "10", "--reference", "tiresias",
            "--predictors", "analytic", "--json"]
    assert main([*args, "--option", "arrival_share=0"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["window"] == "t2" and row["tiresias"]["num_jobs_finished"] == 10
    assert main([*args, "--option", "arival_share=0"]) == 2
    err = capsys.readouterr().err
    assert "arival_share" in err and "arrival_share" in err and "Traceback" not in err


def test_an_unknown_window_is_one_line_and_exit_2(capsys):
    assert main(["bench", "windows", "--window", "w9"]) == 2
    err = capsys.readouterr().err
    assert "w9" in err and "Traceback" not in err

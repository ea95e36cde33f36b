"""`bench simulate` puts predictor bundles side by side, and every row names its bundle."""

from __future__ import annotations

import json

from dltsched.engine.app.cli.main import main
from dltsched.engine.app.registry import default_bench_predictors


def test_rows_per_bundle_name_their_bundle_and_fit(capsys, repo_root):
    inst = str(repo_root / "instances" / "examples" / "tiny-6jobs-4gpus.json")
    assert main(["bench", "simulate", "--instance", inst, "--policy", "fifo", "--policy", "sjf", "--seed",
                 "0", "--predictors", "analytic", "--predictors", "default", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["predictors"], r["policy"]) for r in rows] == [("analytic", "fifo"), ("analytic", "sjf"),
                                                              ("default", "fifo"), ("default", "sjf")]
    assert {r["predictors"]: r["predictors_fit"] for r in rows} == {"analytic": "not fitted",
                                                                    "default": "in-sample"}
    assert all(r["num_jobs_finished"] == 6 for r in rows)


def test_table_shows_the_bundle_column(capsys, repo_root):
    inst = str(repo_root / "instances" / "examples" / "tiny-6jobs-4gpus.json")
    assert main(["bench", "simulate", "--instance", inst, "--policy", "fifo", "--predictors",
                 "analytic"]) == 0
    out = capsys.readouterr().out
    assert "bundle" in out and "analytic" in out and "fitted" in out


def test_unknown_bundle_is_one_line_and_exit_2(capsys, repo_root):
    inst = str(repo_root / "instances" / "examples" / "tiny-6jobs-4gpus.json")
    assert main(["bench", "simulate", "--instance", inst, "--predictors", "crosfit"]) == 2
    err = capsys.readouterr().err
    assert "crossfit" in err and "Traceback" not in err


def test_default_bundle_is_crossfit_only_when_the_truth_is_measured(monkeypatch, tmp_path):
    import dltsched.instances.datadir as datadir

    monkeypatch.delenv(datadir.ENV_VAR, raising=False)
    monkeypatch.setattr(datadir, "_candidates", lambda: [])
    assert default_bench_predictors() == "default"  # no data folder: no measurements to cross-fit on
    assert default_bench_predictors(str(tmp_path)) == "crossfit"


def test_an_option_goes_only_to_the_policies_that_take_it(capsys, repo_root):
    inst = str(repo_root / "instances" / "examples" / "tiny-6jobs-4gpus.json")
    assert main(["bench", "simulate", "--instance", inst, "--policy", "fifo", "--policy", "lucid",
                 "--predictors", "analytic", "--option", "class_thresholds=[0.85, 0.95]", "--json"]) == 0
    assert [r["policy"] for r in json.loads(capsys.readouterr().out)["rows"]] == ["fifo", "lucid"]


def test_crossfit_results_name_the_recipe_their_folds_were_fitted_with():
    from dltsched.engine.app.registry import bundle_fields, bundle_recipe
    from dltsched.predictors import crossfit

    assert bundle_recipe("crossfit") == f"{crossfit.RECIPE_VERSION}+{crossfit.STEPTIME_RECIPE}"
    assert bundle_recipe("default") == "" and bundle_recipe("analytic") == ""
    assert bundle_fields("crossfit") == {"predictors": "crossfit", "predictors_fit": "out-of-fold by model",
                                         "predictors_recipe": bundle_recipe("crossfit")}


def test_simulate_json_names_bundle_fit_and_recipe(capsys, repo_root):
    inst = str(repo_root / "instances" / "examples" / "tiny-6jobs-4gpus.json")
    assert main(["simulate", "--instance", inst, "--policy", "fifo", "--predictors", "default",
                 "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert (row["predictors"], row["predictors_fit"],
            row["predictors_recipe"]) == ("default", "in-sample", "")

"""``dltsched experiment run/show``: one TOML file -> runs, tables with 95% intervals, per-job CSV,
figures."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import shutil
import statistics
from pathlib import Path

import pytest
from scipy import stats

from dltsched.engine.app.cli.main import main
from dltsched.engine.app.experiments import load_experiment

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "instances" / "examples" / "tiny-6jobs-4gpus.json"
POLICIES = ("fifo", "gandiva")
SEEDS = (0, 1)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny experiment (shipped 6-job instance, 2 policies, 2 seeds, 20% prediction error so that the
    seeds differ), run once through the CLI."""
    folder = tmp_path_factory.mktemp("exp")
    shutil.copy(TINY, folder / "tiny.json")
    exp = _write(folder / "tiny.toml", f"""
name = "tiny"
policies = {json.dumps(list(POLICIES))}
seeds = {json.dumps(list(SEEDS))}
prediction_error = 0.2
[workload]
instance = "tiny.json"
[outputs]
dir = "{folder / 'out'}"
""")
    assert main(["-q", "experiment", "run", str(exp), "--json"]) == 0
    return exp, folder / "out"


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _direct(seed: int, capsys) -> dict[str, dict]:
    """The same runs through ``dltsched simulate`` directly."""
    capsys.readouterr()
    argv = ["simulate", "--instance", str(TINY), "--seed", str(seed), "--prediction-error", "0.2", "--json",
            "--records"]
    for p in POLICIES:
        argv += ["--policy", p]
    assert main(argv) == 0
    return {r["policy"]: r for r in json.loads(capsys.readouterr().out)["rows"]}


def test_outputs_exist_and_match_direct_simulation(experiment, capsys):
    exp, out = experiment
    names = {p.name for p in out.iterdir()}
    assert {"results.json", "runs.csv", "summary.csv", "records.csv", "jct_cdf.png", "utilization.png",
            "gantt_fifo.png", "gantt_gandiva.png"} <= names
    assert all((out / n).stat().st_size > 0 for n in names)
    runs = _csv(out / "runs.csv")
    records = _csv(out / "records.csv")
    assert [(r["policy"], int(r["seed"])) for r in runs] == [(p, s) for s in SEEDS for p in POLICIES]
    for seed in SEEDS:
        direct = _direct(seed, capsys)
        for policy in POLICIES:
            (run,) = [r for r in runs if r["policy"] == policy and int(r["seed"]) == seed]
            assert float(run["avg_jct_s"]) == pytest.approx(direct[policy]["avg_jct_s"], rel=1e-9)
            assert float(run["makespan_s"]) == pytest.approx(direct[policy]["makespan_s"], rel=1e-9)
            mine = {r["job_id"]: float(r["jct_s"]) for r in records if r["policy"] == policy
                    and int(r["seed"]) == seed}
            theirs = {r["job_id"]: r["jct_s"] for r in direct[policy]["records"]}
            assert mine.keys() == theirs.keys() and len(mine) == int(run["num_jobs_finished"])
            assert all(mine[j] == pytest.approx(theirs[j], rel=1e-9) for j in mine)


def test_summary_has_means_and_95_percent_intervals_over_seeds(experiment):
    _exp, out = experiment
    runs = _csv(out / "runs.csv")
    summary = {r["policy"]: r for r in _csv(out / "summary.csv")}
    assert list(summary) == list(POLICIES)
    for policy in POLICIES:
        values = [float(r["avg_jct_s"]) for r in runs if r["policy"] == policy]
        half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
        assert float(summary[policy]["avg_jct_s"]) == pytest.approx(statistics.fmean(values), rel=1e-9)
        assert float(summary[policy]["avg_jct_s_ci95"]) == pytest.approx(half, rel=1e-9, abs=1e-9)
    assert any(float(summary[p]["avg_jct_s_ci95"]) > 0 for p in POLICIES)  # prediction error: seeds differ


def test_results_record_the_file_predictors_and_versions(experiment):
    exp, out = experiment
    data = json.loads((out / "results.json").read_text())
    assert data["experiment"]["sha256"] == hashlib.sha256(exp.read_bytes()).hexdigest()
    assert data["predictors"]["name"] == "default" and data["predictors"]["step_time"]
    assert set(data["versions"]) >= {"dltsched", "ortools", "highspy"}
    assert data["gpu_types"] == ["v100", "v100", "p100", "p100"]
    assert len(data["runs"]) == len(POLICIES) * len(SEEDS)


def test_show_prints_the_plan_without_running(tmp_path, capsys):
    exp = _write(tmp_path / "e.toml", f"""
name = "plan"
policies = ["fifo", "optimizing"]
seeds = [3, 4, 5]
[workload]
instance = "{TINY}"
[options.optimizing]
backend = "milp"
time_limit_s = 1
[outputs]
dir = "{tmp_path / 'never'}"
figures = ["gantt"]
format = "svg"
""")
    assert main(["experiment", "show", str(exp), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["runs"] == [{"policy": p, "seed": s} for s in (3, 4, 5) for p in ("fifo", "optimizing")]
    assert info["options"] == {"optimizing": {"backend": "milp", "time_limit_s": 1}}
    assert info["outputs"]["files"][-2:] == ["gantt_fifo.svg", "gantt_optimizing.svg"]
    assert not (tmp_path / "never").exists()
    assert main(["experiment", "show", str(exp)]) == 0
    assert "6 runs: policies fifo, optimizing x seeds [3, 4, 5]" in capsys.readouterr().out


@pytest.mark.parametrize(("body", "message"), [
    ('name = "x"\npolicys = ["fifo"]\n[workload]\ninstance = "T"\n',
     "error: policys: unknown key; did you mean 'policies'? allowed: name, description, workload, policies,"),
    ('name = "x"\npolicies = ["fifo"]\n[workload]\ninstanse = "T"\n',
     "error: workload.instanse: unknown key; did you mean 'instance'? allowed: instance, generate, trace,"),
    ('name = "x"\npolicies = ["fifo"]\n[workload]\ninstance = "T"\n[outputs]\nfigures = ["gant"]\n',
     "error: outputs.figures.0: 'gant' not understood"),
    ('name = "x"\npolicies = ["fifo"]\n[workload]\ninstance = "T"\n[options.fifo]\nbackend = "milp"\n',
     "error: options.fifo: only the optimizing policies take options"),
    ('name = "x"\npolicies = ["fifo"]\n[workload]\ngenerate = { num_jobz = 3 }\n',
     "error: workload: generate.num_jobz: unknown key; allowed: num_jobs,"),
    ('name = "x"\npolicies = ["fifo"]\n[workload]\ninstance = "T"\ntrace = "philly"\n',
     "error: workload: give exactly one of instance, generate, trace"),
    ('name = "x"\npolicies = ["fifoo"]\n[workload]\ninstance = "T"\n',
     "error: policies: 'fifoo' not understood; did you mean fifo?"),
    ('name = "x"\npolicies = ["fifo"]\n[workload]\ninstance = "missing.json"\n',
     "error: workload.instance: "),
    ('name = "x"\npolicies = [fifo]\n', "error: EXP.toml: "),
])
def test_bad_files_exit_2_with_one_line(tmp_path, capsys, body, message):
    exp = _write(tmp_path / "bad.toml", body.replace('"T"', json.dumps(str(TINY))))
    for command in ("show", "run"):
        assert main(["experiment", command, str(exp)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(message) and err.count("\n") == 1, err


def test_generated_workload_is_redrawn_per_seed(tmp_path):
    exp = load_experiment(_write(tmp_path / "g.toml", """
name = "gen"
policies = ["fifo"]
seeds = [0, 1]
[workload.generate]
num_jobs = 5
num_gpus = 4
gpus_per_node = 2
"""))
    from dltsched.engine.app.experiments import load_workload

    first, second = load_workload(exp, 0), load_workload(exp, 1)
    assert len(first.jobs) == len(second.jobs) == 5 and first.cluster.num_gpus == 4
    assert [j.arrival_time_s for j in first.jobs] != [j.arrival_time_s for j in second.jobs]


def test_shipped_sample_experiments_validate():
    for path in sorted((REPO / "instances" / "experiments").glob("*.toml")):
        exp = load_experiment(path)
        assert exp.runs() and exp.spec.name

"""One vocabulary of policy and backend names: parsed once, accepted alike by the CLI, batch, experiment
files, the service and the API; a name not understood is one line with the close matches."""

from __future__ import annotations

import json

import pytest

from dltsched.engine.app.cli.main import main
from dltsched.engine.app.vocabulary import (
    BackendChoice,
    expand_policies,
    options_by_name,
    parse_backend,
    parse_policy,
)
from dltsched.engine.domain.errors import ValidationError

TINY = "instances/examples/tiny-4jobs-2gpus.json"
TINY6 = "instances/examples/tiny-6jobs-4gpus.json"


@pytest.fixture(autouse=True)
def _in_repo(repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)


@pytest.mark.parametrize(("text", "canonical", "name", "policy"), [
    ("cpsat", "cpsat", "cpsat", None),
    ("MILP", "milp", "milp", None),
    (" auto ", "auto", "auto", None),
    ("greedy", "greedy", "greedy", None),
    ("greedy:SJF", "greedy:sjf", "greedy", "sjf"),
])
def test_backend_names_parse_to_one_canonical_form(text, canonical, name, policy):
    choice = parse_backend(text)
    assert (str(choice), choice.name, choice.policy) == (canonical, name, policy)
    assert parse_backend(str(choice)) == choice


def test_auto_picks_the_exact_backend_up_to_a_size():
    auto = parse_backend("auto")
    assert auto.for_jobs(100, 100) == "cpsat" and auto.for_jobs(101, 100) == "greedy"
    assert BackendChoice("milp").for_jobs(10_000) == "milp"
    assert parse_backend("cpsat").exact and not parse_backend("greedy:sjf").exact and not auto.exact


@pytest.mark.parametrize(("text", "hint"), [("cpsta", "cpsat"), ("greedy:sfj", "sjf"), ("milp:sjf", "milp"),
                                            ("atuo", "auto")])
def test_unknown_backend_is_one_line_with_did_you_mean(text, hint):
    with pytest.raises(ValidationError) as info:
        parse_backend(text, "--backend")
    message = str(info.value)
    assert "\n" not in message and message.startswith("--backend: ") and f"did you mean {hint}" in message


@pytest.mark.parametrize(("text", "policy", "backend", "name"), [
    ("sjf", "sjf", None, "sjf"),
    ("Gavel", "gavel", None, "gavel"),
    ("dltsched", "optimizing", None, "dltsched"),
    ("dltsched:cpsat", "optimizing", "cpsat", "dltsched:cpsat"),
    ("dltsched:greedy:sjf", "optimizing", "greedy:sjf", "dltsched:greedy:sjf"),
    ("optimizing-nocoloc:auto", "optimizing-nocoloc", "auto", "optimizing-nocoloc:auto"),
])
def test_policy_names(text, policy, backend, name):
    choice = parse_policy(text)
    assert (choice.policy, None if choice.backend is None else str(choice.backend),
            choice.name) == (policy, backend,
                                                                                                   name)


@pytest.mark.parametrize(("text", "needle"),
                         [("fifi", "did you mean fifo"), ("dltsched:cpsta", "did you mean cpsat"),
                                              ("dltsced:milp", "did you mean dltsched"),
                                              ("sjf:cpsat", "only the optimizing policies take a backend")])
def test_unknown_policy_is_one_line(text, needle):
    with pytest.raises(ValidationError) as info:
        parse_policy(text)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_groups_expand_and_a_backend_is_given_once():
    names = [c.name for c in expand_policies(["baselines", "dltsched:milp"])]
    assert names == ["fifo", "sjf", "tiresias", "gandiva", "dltsched:milp"]
    assert options_by_name(["dltsched:milp"], {})["dltsched:milp"]["backend"] == "milp"
    with pytest.raises(ValidationError, match="given both"):
        options_by_name(["dltsched:milp"], {"backend": "cpsat"})


# ---- every entry point takes the same names -------------------------------------------------------------


def test_simulate_takes_a_policy_on_a_backend(capsys):
    assert main(["simulate", "--instance", TINY, "--policy", "dltsched:greedy", "--predictors", "analytic",
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["policy"] for r in rows] == ["dltsched:greedy"] and rows[0]["num_jobs_finished"] == 4


@pytest.mark.parametrize("backend", ["auto", "greedy:sjf", "AUTO"])
def test_solve_takes_every_backend_name(backend, capsys):
    assert main(["solve", TINY6, "--backend", backend, "--predictors", "analytic", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    expected = "cpsat" if backend.lower() == "auto" else "greedy:sjf"  # auto: a 6-job round goes to CP-SAT
    assert payload["backend"] == expected and payload["checked"]["feasible"]
    assert payload["objective"] == pytest.approx(payload["checked"]["objective"])


def test_solve_policy_backend_needs_an_instance(tmp_path, capsys):
    path = tmp_path / "round.json"
    assert main(["solve", TINY6, "--predictors", "analytic", "--save-round", str(path), "--json"]) == 0
    capsys.readouterr()
    assert main(["solve", str(path), "--backend", "greedy:sjf"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "instance file" in err[0]


@pytest.mark.parametrize("argv", [
    ["simulate", "--instance", TINY, "--policy", "dltsched:cpsta"],
    ["solve", TINY6, "--backend", "cpsta"],
    ["batch", TINY, "--mode", "solve", "--policy", "cpsta", "-o", "OUT"],
    ["batch", TINY, "--policy", "dltsched:cpsta", "-o", "OUT"],
    ["serve", "--backend", "cpsta", "--port", "0"],
    ["slurm", "--backend", "cpsta"],
    ["simulate", "--instance", TINY, "--policy", "dltsched", "--option", "backend=cpsta", "--predictors",
     "analytic"],
])
def test_every_command_refuses_a_misspelt_backend_alike(argv, tmp_path, capsys):
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'cpsta'" in err[0] and "not understood; did you mean cpsat?" in err[0], err


def test_batch_takes_canonical_names(tmp_path):
    from dltsched.engine.app.batch import discover, make_items

    items = make_items(discover(TINY), ("dltsched:greedy",), (0,), mode="simulate", time_limit_s=1.0,
                       predictors="analytic")
    from dltsched.engine.app.batch import run_item

    row = run_item(items[0])
    assert row["error"] == "" and row["policy"] == "dltsched:greedy" and row["num_jobs_finished"] == 4


def test_api_and_service_take_the_same_names():
    from dltsched.engine.app.api import simulate_instance
    from dltsched.engine.app.service.models import ConfigIn, to_config
    from dltsched.formulations.pipeline import ConfiguredSolver

    assert ConfiguredSolver(backend="AUTO").backend == "auto"
    assert ConfiguredSolver(backend="greedy:SJF").baseline_policy == "sjf"
    assert ConfiguredSolver(backend="auto", exact_max_jobs=3).backend_for(4) == "greedy"
    assert to_config(ConfigIn(backend="greedy:sjf"), ConfiguredSolver(), 10.0).backend == "greedy:sjf"
    with pytest.raises(ValidationError,
                       match=r"^config\.backend: 'cpsta' not understood; did you mean cpsat\?"):
        to_config(ConfigIn(backend="cpsta"), ConfiguredSolver(), 10.0)
    result = simulate_instance(TINY, "optimizing:greedy", predictors="analytic")
    assert result.policy == "optimizing:greedy" and result.num_jobs_finished == 4


def test_experiment_files_take_groups_and_backends():
    from dltsched.engine.app.experiments import Experiment

    spec = Experiment.model_validate({"name": "x", "workload": {"instance": TINY},
                                      "policies": ["baselines", "DLTSCHED:greedy"],
                                      "options": {"dltsched:greedy": {"time_limit_s": 1}}})
    assert spec.policies == ("fifo", "sjf", "tiresias", "gandiva", "dltsched:greedy")
    with pytest.raises(Exception, match="did you mean cpsat"):
        Experiment.model_validate({"name": "x", "workload": {"instance": TINY},
                                   "policies": ["dltsched:cpsta"]})

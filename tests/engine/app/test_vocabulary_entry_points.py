"""Every entry point takes the same policy and backend names and refuses the same bad ones, in one line: the
``simulate`` and ``batch`` commands (exit 2), experiment files and the embedding API (``ValidationError``),
the service (422)."""

from __future__ import annotations

import json

import pytest

from dltsched.engine.app.cli.main import main
from dltsched.engine.app.vocabulary import parse_policy
from dltsched.engine.domain.errors import ValidationError

TINY = "instances/examples/tiny-4jobs-2gpus.json"


@pytest.fixture(autouse=True)
def _in_repo(repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)


# ---- the same policy names, accepted and refused alike at every entry point -------------------------------

#: policy names every entry point takes (the optimizing policy on a backend among them)
GOOD_POLICIES = ("dltsched:cpsat", "Optimizing-NoColoc:greedy", "sjf")
#: (a misspelt policy name, the close match the one-line refusal suggests)
BAD_POLICIES = (("fifi", "did you mean fifo"), ("dltsched:cpsta", "did you mean cpsat"),
                ("sjf:cpsat", "only the optimizing policies take a backend"))


@pytest.mark.parametrize("name", GOOD_POLICIES)
def test_simulate_and_the_api_take_the_same_policy_names(name, capsys):
    from dltsched.engine.app.api import simulate_instance

    assert main(["simulate", "--instance", TINY, "--policy", name, "--predictors", "analytic", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)["rows"]
    result = simulate_instance(TINY, name, predictors="analytic")
    canonical = parse_policy(name).name
    assert (row["policy"] == result.policy == canonical
            and row["num_jobs_finished"] == result.num_jobs_finished == 4)


@pytest.mark.parametrize(("name", "needle"), BAD_POLICIES)
def test_every_entry_point_refuses_a_bad_policy_alike(name, needle, tmp_path, capsys):
    from dltsched.engine.app.api import simulate_instance
    from dltsched.engine.app.experiments import Experiment

    for argv in (["simulate", "--instance", TINY, "--policy", name],
                 ["batch", TINY, "--policy", name, "-o", str(tmp_path / "out")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], (argv, err)
    with pytest.raises(ValidationError, match=needle) as info:
        simulate_instance(TINY, name, predictors="analytic")
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=needle):
        Experiment.model_validate({"name": "x", "workload": {"instance": TINY}, "policies": [name]})


@pytest.mark.parametrize(("backend", "status", "expected"), [
    ("AUTO", 200, "cpsat"), ("greedy:SJF", 200, "greedy:sjf"), ("milp", 200, "milp"),
    ("cpsta", 422, "did you mean cpsat"), ("greedy:sfj", 422, "did you mean sjf"),
    ("milp:sjf", 422, "greedy:sjf"),
])
def test_service_takes_and_refuses_the_same_backend_names(backend, status, expected):
    from fastapi.testclient import TestClient

    from dltsched.engine.app.service.server import create_app

    body = {"cluster": {"nodes": [{"id": "n0", "gpu_type": "v100", "num_gpus": 2}]},
            "jobs": [{"id": "j0", "model": "resnet18", "batch_size": 32, "remaining_iterations": 100}],
            "config": {"backend": backend, "time_limit_s": 20.0}}  # room for the worker to start
    answer = TestClient(create_app(), raise_server_exceptions=False).post("/v1/schedule", json=body)
    assert answer.status_code == status, answer.text
    if status == 200:
        assert answer.json()["backend"] == expected
    else:
        detail = answer.json()["detail"]
        assert expected in detail and "config.backend" in detail and "\n" not in detail

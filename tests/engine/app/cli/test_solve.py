"""``dltsched solve`` and ``dltsched bench solve`` (tiny sizes)."""

from __future__ import annotations

import json

import pytest

from dltsched.engine.app.cli.main import main
from dltsched.engine.app.cli.solve import bench_solve
from dltsched.engine.app.registry import predictors
from dltsched.formulations import RoundOptions, RoundProblem, build_round, evaluate_objective
from dltsched.formulations.backends import EXACT_BACKENDS
from dltsched.formulations.bench import synthetic_state
from dltsched.formulations.testing import Tables, job, make_round


def _plan_of(payload: dict) -> object:
    from dltsched.engine.domain.model import Assignment, Plan

    return Plan(tuple(Assignment(a["job_id"], tuple(a["gpus"]), a["freeze_level"])
                      for a in payload["assignments"]))


def test_solve_round_json(tmp_path, capsys, backend: str) -> None:  # noqa: ANN001
    problem = build_round(synthetic_state(10, 16, seed=1), predictors("analytic"), RoundOptions())
    path = tmp_path / "round.json"
    problem.save(path)
    assert main(["solve", str(path), "--backend", backend, "--time-limit", "5", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    for key in ("status", "objective", "bound", "gap", "solve_time_s", "build_time_s"):
        assert key in payload
    assert payload["status"] in ("optimal", "feasible") and 0.0 <= payload["gap"] <= 1.0
    assert payload["checked"]["feasible"]
    assert evaluate_objective(RoundProblem.load(path),
                              _plan_of(payload)) == pytest.approx(payload["objective"], rel=1e-6)


def test_solve_reports_infeasible_round(tmp_path, capsys) -> None:  # noqa: ANN001
    tables = Tables(step_s={"ok": [1.0], "fat": [1.0]}, memory={"fat": [99999.0]})
    problem = make_round(tables, [("v100", 1)], [job("ok"), job("fat")])
    path = tmp_path / "round.json"
    problem.save(path)
    assert main(["solve", str(path), "--json"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: round infeasible") and "job 'fat'" in err
    payload = json.loads(out)
    assert payload["status"] == "infeasible" and payload["infeasible_jobs"][0]["job_id"] == "fat"
    assert payload["checked"]["feasible"]


def test_solve_bad_file_is_one_error_line(tmp_path, capsys) -> None:  # noqa: ANN001
    path = tmp_path / "bad.json"
    path.write_text('{"format": "dltsched-round/1", "jobs": []}')
    assert main(["solve", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1


def test_bench_solve_tiny_sizes(capsys) -> None:  # noqa: ANN001
    with pytest.raises(SystemExit) as exit_info:
        bench_solve.main(["--sizes", "6x8,12x16", "--repeats", "1", "--time-limit", "5", "--json"],
                         standalone_mode=True)
    assert exit_info.value.code == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert {(r["size"], r["backend"]) for r in rows} == {(s, b) for s in ("6x8", "12x16")
                                                         for b in EXACT_BACKENDS}
    for size in ("6x8", "12x16"):
        mine = [r for r in rows if r["size"] == size]
        assert sum(r["winner"] for r in mine) == 1
        assert all(r["gap"] is not None and r["gap"] <= 0.02 for r in mine)
    stages = ("round_build_s", "candidates_s", "start_s", "model_build_s", "solve_s", "mapping_s", "check_s")
    for r in rows:  # every stage of the round is reported, and the total holds them all
        assert all(r[k] >= 0.0 for k in stages) and r["solve_s"] > 0.0
        assert r["round_total_s"] >= sum(r[k] for k in stages) * (1 - 1e-6) - 1e-3
        assert r["min"]["round_total_s"] <= r["round_total_s"] <= r["max"]["round_total_s"]
        assert r["peak_rss_mib"] > 0.0


def test_bench_rejects_bad_size() -> None:
    with pytest.raises(ValueError, match="JOBSxGPUS"):
        bench_solve.main(["--sizes", "lots"], standalone_mode=False)


def test_solve_json_is_the_services_plan(capsys, monkeypatch, repo_root) -> None:  # noqa: ANN001
    """``solve --json`` carries every field of the service's answer, with the same values the service's
    conversion gives the same plan: GPU type and nodes per assignment, co-location groups, the queue."""
    monkeypatch.chdir(repo_root)
    from pathlib import Path

    from dltsched.engine.app.cli.solve import load_round_state
    from dltsched.engine.app.service.models import ScheduleResponse, to_response

    instance = Path("instances/examples/default.json")
    assert main(["solve", str(instance), "--objective", "effective_progress", "--predictors", "analytic",
                 "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert set(ScheduleResponse.model_fields) <= set(payload)
    ScheduleResponse.model_validate({k: payload[k] for k in ScheduleResponse.model_fields})
    # effective progress shares GPUs here (an optimum worth checking: the groups, not an empty list)
    assert payload["colocation_groups"] and payload["queued"] and payload["checked"]["feasible"]
    _problem, state, _bundle = load_round_state(instance, RoundOptions(), "analytic")
    service = to_response(_plan_of(payload), state, 0.0).model_dump()
    for key in ("assignments", "colocation_groups", "queued"):
        assert payload[key] == service[key], key
    placed = {a["job_id"] for a in payload["assignments"]}
    assert set(payload["queued"]) == {s.job.id for s in state.jobs} - placed


def test_solve_shows_queue_types_and_sharing(capsys, monkeypatch, repo_root) -> None:  # noqa: ANN001
    monkeypatch.chdir(repo_root)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["solve", "instances/examples/default.json", "--objective", "effective_progress",
                 "--predictors", "analytic", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert main(["solve", "instances/examples/default.json", "--objective", "effective_progress",
                 "--predictors", "analytic"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(map(len, lines)) <= 80
    assert f"queued ({len(payload['queued'])}): {payload['queued'][0]}" in out
    assert "v100 (8 GPUs), p100 (4 GPUs), k80 (4 GPUs)" in out
    group = payload["colocation_groups"][0]
    row = next(line.split() for line in lines if line.split()[:1] == [group["job_ids"][0]])
    assert group["job_ids"][1] in row  # "shares GPUs with" names the partner
    assert f"GPU {group['gpu']}: {' + '.join(group['job_ids'])}" in out

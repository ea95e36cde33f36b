"""Decomposed rounds: a checked plan, a bound no plan of the round beats, and the gap measured against it."""

from __future__ import annotations

import pytest

from dltsched.engine.domain.predictors import memoized
from dltsched.formulations.bench import synthetic_state
from dltsched.formulations.build import build_round
from dltsched.formulations.candidates import build_candidates
from dltsched.formulations.checker import check_plan
from dltsched.formulations.decompose import restrict, solve_decomposed, type_level
from dltsched.formulations.problem import RoundOptions
from dltsched.formulations.solve import solve_problem
from dltsched.predictors import analytic_predictors


@pytest.fixture(scope="module")
def asked():
    return memoized(analytic_predictors())


def test_plan_is_checked_and_its_bound_holds_the_whole_round(asked):
    options = RoundOptions(relative_gap=1e-4, time_limit_s=20.0)
    problem = build_round(synthetic_state(120, 128, seed=2), asked, options)
    decomposed = solve_decomposed(problem)
    whole = solve_problem(problem, "cpsat")
    assert check_plan(problem, decomposed.plan).feasible
    assert check_plan(problem, whole.plan).feasible
    plan = decomposed.plan
    assert plan.bound is not None and plan.objective is not None and plan.gap is not None
    assert whole.plan.objective <= plan.bound + 1e-6  # the LP relaxation bounds every plan of the round
    assert plan.objective <= plan.bound + 1e-6
    assert plan.gap == pytest.approx((plan.bound - plan.objective) / plan.bound, abs=1e-9)
    assert plan.objective >= 0.99 * whole.plan.objective  # within 1% of the undecomposed optimum here
    assert "LP relaxation" in plan.message and plan.backend == "decomposed"


def test_a_round_with_room_for_everyone_is_exact(asked):
    problem = build_round(synthetic_state(6, 64, seed=1, running_fraction=0.0), asked, RoundOptions())
    result = solve_decomposed(problem)
    assert check_plan(problem, result.plan).feasible
    assert result.plan.gap == 0.0 and "exact" in result.plan.message
    assert len(result.plan.assignments) == 6


def test_restricted_set_keeps_only_its_candidates(asked):
    cset = build_candidates(build_round(synthetic_state(30, 32, seed=4), asked, RoundOptions()))
    keep = [c for c, cand in enumerate(cset.candidates) if cand.gpu_type == "v100"]
    part = restrict(cset, keep)
    assert [part.candidates[i] for i in range(len(keep))] == [cset.candidates[c] for c in keep]
    assert all(part.candidates[i].jobs.count(j) == 1 for j, cands in enumerate(part.by_job) for i in cands)
    level = type_level(cset)
    assert len(level.job_type) == len(cset.problem.jobs)
    assert level.bound >= 0.0


def test_makespan_is_not_decomposed(asked):
    problem = build_round(synthetic_state(10, 16), asked, RoundOptions(objective="makespan"))
    with pytest.raises(ValueError, match="makespan"):
        solve_decomposed(problem)


def test_bench_solve_times_the_decomposed_round(capsys):
    import json

    from dltsched.engine.app.cli.solve import bench_solve

    with pytest.raises(SystemExit) as exit_info:
        bench_solve.main(["--sizes", "40x48", "--backend", "decomposed", "--repeats", "2", "--gap", "0.01",
                          "--json"], standalone_mode=True)
    assert exit_info.value.code == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["backend"] == "decomposed" and row["gap"] is not None and row["gap"] <= 0.01
    assert row["round_total_s"] >= row["model_build_s"] > 0.0  # the LP is the model's building

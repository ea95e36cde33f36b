"""CP-SAT's LP-first path stays exact: its bound bounds the optimum, the candidates it leaves out are in no
selection as good as its start, and every plan is within the round's gap of the optimum that CP-SAT proves
on the whole model (the path switched off, gap 0)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from dltsched.engine.app.registry import predictors
from dltsched.formulations.backends import SolveParams
from dltsched.formulations.backends.cpsat import CpSat, is_feasible
from dltsched.formulations.backends.relaxation import lp_relaxation
from dltsched.formulations.bench import synthetic_state
from dltsched.formulations.build import build_round
from dltsched.formulations.candidates import build_candidates
from dltsched.formulations.model import RoundModel
from dltsched.formulations.problem import RoundOptions
from dltsched.formulations.solve import solve_problem, starting_selection
from dltsched.formulations.testing import Tables, checked, job, make_round


class _Whole(CpSat):
    """CP-SAT on the whole model, no LP first."""

    lp_first = False


def _round(jobs: int, gpus: int, seed: int, gap: float = 1e-4) -> RoundModel:
    state = synthetic_state(jobs, gpus, seed=seed)
    options = RoundOptions(objective="jct", relative_gap=gap, time_limit_s=5.0)
    return RoundModel(build_candidates(build_round(state, predictors("analytic"), options)))


def _value(model: RoundModel, selected) -> float:
    return sum(model.gains[c] for c in selected)


def _optimum(model: RoundModel) -> float:
    exact = RoundModel(replace(model.cset, problem=replace(
        model.cset.problem, options=replace(model.options, relative_gap=0.0))))
    outcome = _Whole().solve(exact, SolveParams(20.0))
    assert outcome.termination == "optimal"
    return _value(model, outcome.selected)


ROUNDS = [(12, 16, 1), (30, 32, 2), (60, 64, 3), (90, 96, 4), (120, 128, 5)]


@pytest.mark.parametrize(("jobs", "gpus", "seed"), ROUNDS)
def test_every_plan_is_within_the_gap_of_the_optimum(jobs, gpus, seed):
    model = _round(jobs, gpus, seed)
    optimum = _optimum(model)
    start = starting_selection(model.cset, None)
    outcome = CpSat().solve(model, SolveParams(5.0, tuple(start)))
    value = _value(model, outcome.selected)
    assert is_feasible(model, outcome.selected)
    assert value >= optimum - model.options.relative_gap * abs(optimum)
    # the bound holds (CP-SAT rounds its integer-scaled bound: a hair below the optimum at worst)
    assert outcome.bound >= optimum - 1e-6 * abs(optimum)
    assert outcome.termination in ("optimal", "gap_limit")
    # the same plan on every run
    assert CpSat().solve(model, SolveParams(5.0, tuple(start))).selected == outcome.selected


@pytest.mark.parametrize(("jobs", "gpus", "seed"), ROUNDS[:3])
def test_the_lp_bound_bounds_the_optimum_and_fixing_keeps_every_optimum(jobs, gpus, seed):
    model = _round(jobs, gpus, seed)
    optimum = _optimum(model)
    relaxation = lp_relaxation(model)
    assert relaxation is not None
    assert relaxation.bound >= optimum - 1e-9 * abs(optimum)
    start = relaxation.rounded(model)
    assert is_feasible(model, start)
    incumbent = _value(model, start)
    kept = set(relaxation.kept_columns(incumbent, start))
    assert set(start) <= kept
    # every candidate left out is worth, in any selection holding it, less than the start
    for c in set(range(model.num_candidates)) - kept:
        assert relaxation.bound + relaxation.reduced[c] < incumbent
    # and the optimum of the kept candidates alone is the round's optimum
    assert _optimum(model.restricted(sorted(kept))) == pytest.approx(optimum, rel=1e-12)


def test_fixing_is_checked_against_every_selection_of_a_tiny_round():
    # 3 jobs, 2 GPUs: every feasible selection is enumerated; none worth at least the start uses a
    # candidate that the reduced costs left out
    tables = Tables(step_s={"a": [1.0], "b": [1.5], "c": [2.0]})
    problem = make_round(tables, [("v100", 2)], [job("a", weight=2.0), job("b"), job("c", weight=1.5)],
                         options=RoundOptions(max_jobs_per_gpu=2))
    model = RoundModel(build_candidates(problem))
    relaxation = lp_relaxation(model)
    assert relaxation is not None
    start = relaxation.rounded(model)
    incumbent = _value(model, start)
    kept = set(relaxation.kept_columns(incumbent, start))
    cols = range(model.num_candidates)
    best = max(_value(model, s) for k in range(len(cols) + 1) for s in itertools.combinations(cols, k)
               if is_feasible(model, s))
    assert relaxation.bound >= best - 1e-9
    for k in range(len(cols) + 1):
        for selection in itertools.combinations(cols, k):
            if is_feasible(model, selection) and _value(model, selection) >= incumbent:
                assert set(selection) <= kept


def test_a_round_its_lp_proves_needs_no_search():
    # two jobs, two free GPUs, one job per GPU: both placed alone is integral and optimal in the LP
    tables = Tables(step_s={"a": [1.0], "b": [1.0]})
    problem = make_round(tables, [("v100", 2)], [job("a", weight=2.0), job("b")],
                         options=RoundOptions(max_jobs_per_gpu=1))
    result = solve_problem(problem, "cpsat")
    assert "proved by the LP relaxation" in result.plan.message
    assert result.plan.status == "optimal"
    assert len(result.plan.assignments) == 2
    checked(problem, result)


def test_makespan_rounds_have_no_lp_first():
    model = _round(40, 48, 7)
    makespan = RoundModel(replace(model.cset, problem=replace(
        model.cset.problem, options=replace(model.options, objective="makespan"))))
    assert lp_relaxation(makespan) is None
    assert lp_relaxation(makespan, dual=True) is None


@pytest.mark.parametrize("dual", [False, True])
def test_the_dual_simplex_gives_the_same_lp_optimum(dual):
    model = _round(60, 64, 3)
    primal, other = lp_relaxation(model), lp_relaxation(model, dual=dual)
    assert other.bound == pytest.approx(primal.bound, rel=1e-9)
    assert is_feasible(model, other.rounded(model))


def test_large_rounds_solve_the_dual_lp_then_search_its_neighbourhood(monkeypatch):
    import dltsched.formulations.backends.cpsat as cpsat

    asked, searched = [], []
    monkeypatch.setattr(cpsat, "lp_relaxation", lambda model, dual=False, time_limit_s=None:
                        asked.append(dual) or lp_relaxation(model, dual=dual, time_limit_s=time_limit_s))
    inner = RoundModel.restricted  # every search over a subset of the candidates restricts the model first
    monkeypatch.setattr(RoundModel, "restricted", lambda self, columns:
                        searched.append(list(columns)) or inner(self, columns))
    monkeypatch.setattr(cpsat, "DUAL_SIMPLEX_FROM_JOBS", 60)
    model = _round(60, 32, 0)  # a round whose rounded LP start is not within the gap
    relaxation = lp_relaxation(model, dual=True)
    start = relaxation.rounded(model)
    assert relaxation.bound - _value(model, start) > model.options.relative_gap * relaxation.bound
    optimum = _optimum(model)
    asked.clear()
    searched.clear()
    outcome = CpSat().solve(model, SolveParams(5.0))
    assert asked == [True]
    # the neighbourhood first: smaller than the model, holding the LP's support and the start
    near = relaxation.neighbourhood(_value(model, start), start, cpsat.NEIGHBOURHOOD_SHARE)
    assert searched[0] == [c for c in near if c not in model.dominated or c in start]
    assert len(near) < model.num_candidates
    assert is_feasible(model, outcome.selected)
    assert _value(model, outcome.selected) >= optimum - model.options.relative_gap * abs(optimum)
    assert outcome.bound >= optimum - 1e-6 * abs(optimum)
    # rounds of fewer jobs: the primal simplex and no neighbourhood
    asked.clear()
    searched.clear()
    monkeypatch.setattr(cpsat, "DUAL_SIMPLEX_FROM_JOBS", 61)
    CpSat().solve(model, SolveParams(5.0))
    assert asked == [False] and len(searched) <= 1


def test_the_neighbourhood_grows_with_its_share():
    model = _round(60, 32, 0)
    relaxation = lp_relaxation(model)
    start = relaxation.rounded(model)
    value = _value(model, start)
    none, some, every = (relaxation.neighbourhood(value, start, share) for share in (0.0, 0.02, 1e9))
    support = {c for c, v in enumerate(relaxation.values) if v > 1e-6}
    assert set(none) == support | set(start) | {c for c, d in enumerate(relaxation.reduced) if d >= 0}
    assert set(none) <= set(some) <= set(every)
    assert every == list(range(model.num_candidates))
    assert len(some) < model.num_candidates


def test_the_old_name_of_the_lp_first_limit_warns():
    import dltsched.formulations.backends.cpsat as cpsat

    with pytest.warns(DeprecationWarning, match="DUAL_SIMPLEX_FROM_JOBS"):
        assert cpsat.LP_FIRST_BELOW_JOBS == cpsat.DUAL_SIMPLEX_FROM_JOBS


def test_a_start_that_breaks_a_row_is_not_used():
    model = _round(30, 32, 2)
    everything = tuple(range(model.num_candidates))
    assert not is_feasible(model, everything)
    outcome = CpSat().solve(model, SolveParams(5.0, everything))
    assert is_feasible(model, outcome.selected)


def test_the_restricted_search_has_the_full_lp(monkeypatch):
    # at CP-SAT's own linearization level, the implications its presolve derives on a restricted model
    # stay out of its LP: on the optimizing policy's rounds the bound stalled far above the optimum and the
    # searches ran out of budget below the gap
    from ortools.sat.python import cp_model_helper as cmh

    seen = []
    inner = cmh.SolveWrapper.set_parameters

    def recorded(self, parameters):
        seen.append(parameters.linearization_level)
        return inner(self, parameters)

    monkeypatch.setattr(cmh.SolveWrapper, "set_parameters", recorded)
    model = _round(60, 32, 0)  # a round whose rounded LP start is not within the gap
    relaxation = lp_relaxation(model)
    start = relaxation.rounded(model)
    assert relaxation.bound - _value(model, start) > model.options.relative_gap * relaxation.bound
    CpSat().solve(model, SolveParams(5.0, tuple(start)))
    assert seen == [2]


def test_the_lp_keeps_to_the_solves_wall_clock_limit(monkeypatch):
    import dltsched.formulations.backends.cpsat as cpsat

    model = _round(60, 32, 0)
    assert lp_relaxation(model, time_limit_s=0.0) is None  # out of time: no relaxation, no bound
    assert lp_relaxation(model, time_limit_s=0.0, dual=True) is None
    limits = []

    def recorded(model, dual=False, time_limit_s=None):
        limits.append(time_limit_s)
        return lp_relaxation(model, dual=dual, time_limit_s=time_limit_s)

    monkeypatch.setattr(cpsat, "lp_relaxation", recorded)
    CpSat().solve(model, SolveParams(5.0))
    assert limits == [max(cpsat.WALL_CAP_LEAST_S, 5.0 * cpsat.WALL_CAP_FACTOR)]  # deterministic: the cap
    free = RoundModel(replace(model.cset, problem=replace(
        model.cset.problem, options=replace(model.options, deterministic=False, num_workers=1))))
    limits.clear()
    outcome = CpSat().solve(free, SolveParams(5.0, spent_s=4.5))
    assert len(limits) == 1 and 0.0 < limits[0] <= 0.5  # what is left of the round's limit
    assert outcome.selected is None or is_feasible(free, outcome.selected)
    # no time left: the LP gives up, and the search still answers within its least time
    limits.clear()
    outcome = CpSat().solve(free, SolveParams(1.0, spent_s=5.0))
    assert limits[0] <= 0.011
    assert outcome.selected is None or is_feasible(free, outcome.selected)

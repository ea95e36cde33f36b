"""The round aggregated over interchangeable nodes: node classes, the aggregated LP's bound (equal to the
round's own relaxation where nodes are interchangeable, never below it), column generation's bounds, and the
decomposed plan against the undecomposed optimum, every plan through the checker."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import numpy as np
import pytest
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from dltsched.engine.domain.predictors import memoized
from dltsched.formulations.aggregate_types import aggregate, node_classes, solve_relaxation
from dltsched.formulations.backends import SolveParams, get_backend
from dltsched.formulations.backends.decomposed import round_greedily, type_level
from dltsched.formulations.backends.greedy import greedy_selection
from dltsched.formulations.bench import synthetic_state
from dltsched.formulations.build import build_round
from dltsched.formulations.candidates import build_candidates, objective_of
from dltsched.formulations.checker import check_plan
from dltsched.formulations.mapping import to_plan
from dltsched.formulations.model import RoundModel
from dltsched.formulations.problem import RoundOptions
from dltsched.formulations.solve import solve_problem
from dltsched.predictors import analytic_predictors


@pytest.fixture(scope="module")
def asked():
    return memoized(analytic_predictors())


def full_lp(cset) -> float:
    """The round's own LP relaxation (every row of its model, one column per candidate), solved whole."""
    rows, cols, vals, upper = [], [], [], []
    for r, row in enumerate(RoundModel(cset).linear_rows()):
        rows += [r] * len(row.cols)
        cols += row.cols
        vals += row.coefs
        upper.append(row.upper)
    matrix = coo_matrix((vals, (rows, cols)), shape=(len(upper), len(cset.candidates)))
    gains = np.array([c.gain for c in cset.candidates])
    result = linprog(-gains, A_ub=matrix, b_ub=np.array(upper), bounds=(0.0, 1.0), method="highs")
    assert result.status == 0
    return float(-result.fun)


def aggregated_lp(agg) -> float:
    """The aggregated model's LP solved whole (no column generation)."""
    result = linprog(-agg.gains, A_ub=agg.matrix, b_ub=agg.upper, bounds=(0.0, 1.0), method="highs")
    assert result.status == 0
    return float(-result.fun)


def test_empty_nodes_of_a_type_are_one_class_and_busy_nodes_their_own(asked):
    # 12 nodes of 8 GPUs cycling over 3 types; half the jobs run, first fit: the first nodes are busy
    problem = build_round(synthetic_state(10, 96, seed=3), asked, RoundOptions())
    cset = build_candidates(problem)
    classes, class_of = node_classes(cset)
    busy = {problem.node_of[g] for job in problem.jobs for g in job.current_gpus}
    assert busy and len(busy) < len(problem.nodes)
    for n in range(len(problem.nodes)):
        cls = classes[class_of[n]]
        assert n in cls.nodes and cls.gpu_type == problem.nodes[n].gpu_type
        if n in busy:
            assert cls.nodes == (n,)
        else:
            assert not busy & set(cls.nodes)
    free_types = {problem.nodes[n].gpu_type for n in range(len(problem.nodes)) if n not in busy}
    assert len(classes) == len(busy) + len(free_types)  # one class per type of empty nodes
    assert sum(c.capacity for c in classes) == sum(n.usable_gpus for n in problem.nodes)


@pytest.mark.parametrize("seed", [1, 2])
def test_interchangeable_nodes_aggregate_without_loosening_the_relaxation(asked, seed):
    # nothing runs and each type has 4 nodes, which every multi-GPU unit is offered (max_nodes_per_unit=4):
    # the nodes of a type are one class, and spreading a column evenly over its nodes gives a solution of
    # the round's own relaxation with the same value, so the two LPs are equal; 90 jobs want more GPUs
    # than the 96 there are, so capacity binds
    problem = build_round(synthetic_state(90, 96, seed=seed, running_fraction=0.0), asked, RoundOptions())
    cset = build_candidates(problem)
    agg = aggregate(cset)
    assert len(agg.classes) == 3
    # the round aggregates these classes itself (its ``class`` candidates): the model is the round's own
    assert not agg.merged
    assert agg.num_columns <= len(cset.candidates)  # the round may aggregate these classes itself
    whole = full_lp(cset)
    assert aggregated_lp(agg) == pytest.approx(whole, rel=1e-7)
    relax = solve_relaxation(agg, 60.0)
    assert relax.optimal and relax.bound == pytest.approx(whole, rel=1e-7)
    assert relax.value == pytest.approx(whole, rel=1e-7)


def test_busy_nodes_keep_the_round_relaxation_and_merged_ones_only_raise_it(asked):
    # running jobs: busy nodes are classes of their own; a large type's empty nodes merge although each
    # multi-GPU unit is offered only 4 of them, so the aggregated LP may exceed the round's, never fall below
    problem = build_round(synthetic_state(150, 256, seed=5), asked, RoundOptions())
    cset = build_candidates(problem)
    agg = aggregate(cset)
    whole = full_lp(cset)
    value = aggregated_lp(agg)
    assert value >= whole - 1e-6
    relax = solve_relaxation(agg, 60.0)
    assert relax.optimal and relax.bound == pytest.approx(value, rel=1e-7)
    assert relax.active < agg.num_columns  # columns never generated


def test_every_round_of_column_generation_gives_a_valid_bound(asked):
    # stopped after its first restricted LP (a stop gap of 50%), the bound is still above the LP optimum
    problem = build_round(synthetic_state(200, 128, seed=7), asked, RoundOptions())
    agg = aggregate(build_candidates(problem))
    optimum = aggregated_lp(agg)
    early = solve_relaxation(agg, 60.0, stop_gap=0.5)
    assert early.rounds == 1 and not early.optimal
    assert early.bound is not None and early.bound >= optimum - 1e-6
    assert early.value <= optimum + 1e-6  # the restricted LP is a restriction


def test_decomposed_plan_is_within_one_percent_of_the_undecomposed_optimum(asked):
    # more jobs than GPUs, nothing running: nodes merge into classes, the LP bound is the round's own; CP-SAT
    # proves the undecomposed optimum (gap 0), the decomposed plan must be within 1% of it and of its bound
    options = RoundOptions(relative_gap=0.01, time_limit_s=30.0)
    state = synthetic_state(140, 96, seed=4, running_fraction=0.0)
    problem = build_round(state, asked, options)
    exact = build_round(state, asked, replace(options, relative_gap=0.0))
    decomposed = solve_problem(problem, "decomposed")
    whole = solve_problem(exact, "cpsat", time_limit_s=60.0)
    assert check_plan(problem, decomposed.plan).feasible
    assert check_plan(exact, whole.plan).feasible
    plan, best = decomposed.plan, whole.plan
    assert best.status == "optimal" and best.objective is not None
    assert plan.bound is not None and plan.gap is not None
    assert best.objective <= plan.bound + 1e-6
    assert plan.gap <= 0.01
    assert plan.objective >= 0.99 * best.objective
    assert "node classes" in plan.message


def test_type_level_reports_its_aggregation(asked):
    problem = build_round(synthetic_state(90, 96, seed=1, running_fraction=0.0), asked, RoundOptions())
    level = type_level(build_candidates(problem))
    assert level.optimal and not level.merged and level.classes == 3 and level.nodes == 12
    assert level.active <= level.columns and level.rounds >= 1
    assert set(level.job_type) <= set(problem.gpu_types()) | {None}
    assert "3 node classes of 12 nodes" in level.describe()


@pytest.mark.parametrize("seed", [2, 6])
def test_rounding_on_fewer_candidates_is_the_plain_greedy_rounding(asked, seed):
    # the decomposed backend's rounding skips candidates the greedy would refuse anyway: same selection
    problem = build_round(synthetic_state(220, 128, seed=seed), asked, RoundOptions())
    cset = build_candidates(problem)
    level = type_level(cset)
    fast = round_greedily(cset, level)
    assert fast == greedy_selection(cset, first=level.by_value)
    assert len(fast) > 0 and len(fast) < len(level.by_value) + len(problem.jobs)
    plan = to_plan(cset, fast, status="heuristic", objective=objective_of(cset, fast))
    assert check_plan(problem, plan).feasible


def test_out_of_time_the_type_level_claims_no_bound_and_the_plan_is_still_checked(asked):
    problem = build_round(synthetic_state(60, 64, seed=8), asked, RoundOptions(relative_gap=0.01))
    cset = build_candidates(problem)
    relax = solve_relaxation(aggregate(cset), time_limit_s=0.0)
    assert relax.bound is None and relax.rounds == 0 and not relax.optimal
    outcome = get_backend("decomposed").solve(RoundModel(cset), SolveParams(time_limit_s=1e-9))
    assert outcome.bound is None and outcome.termination == "time_limit"
    assert "no bound proven in time" in outcome.message
    plan = to_plan(cset, outcome.selected, status="heuristic", objective=objective_of(cset, outcome.selected))
    assert check_plan(problem, plan).feasible


def test_classes_the_round_does_not_aggregate_merge_here_and_keep_the_relaxation(asked):
    # a 3-GPU gang does not divide 8-GPU nodes: the round keeps a candidate per node, the aggregated model
    # merges each type's 4 empty nodes into a class (every unit is offered all 4), and its LP is still the
    # round's own relaxation
    state = synthetic_state(90, 96, seed=2, running_fraction=0.0)
    first = state.jobs[0]
    jobs = (dataclasses.replace(first, job=dataclasses.replace(first.job, num_gpus=3)), *state.jobs[1:])
    problem = build_round(dataclasses.replace(state, jobs=jobs), asked, RoundOptions())
    cset = build_candidates(problem)
    assert not any(c.kind == "class" for c in cset.candidates)
    agg = aggregate(cset)
    assert agg.merged and len(agg.classes) == 3 and agg.num_columns < len(cset.candidates)
    whole = full_lp(cset)
    assert aggregated_lp(agg) == pytest.approx(whole, rel=1e-7)
    relax = solve_relaxation(agg, 60.0)
    assert relax.optimal and relax.bound == pytest.approx(whole, rel=1e-7)
    result = solve_problem(problem, "decomposed")
    assert check_plan(problem, result.plan).feasible
    assert "aggregated, at least the round's" in result.plan.message

"""The reported gap is never better than the truth (issue 19): no bound means no gap, never 0."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dltsched.formulations import RoundOptions
from dltsched.formulations.backends import BackendOutcome
from dltsched.formulations.candidates import build_candidates, objective_of
from dltsched.formulations.result import Termination
from dltsched.formulations.solve import finish, relative_gap
from dltsched.formulations.testing import Tables, job, make_round

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@pytest.mark.parametrize("bound", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("minimize", [False, True])
def test_no_finite_bound_is_an_infinite_gap_not_zero(bound: float, minimize: bool) -> None:
    # inf / inf is NaN and max(0.0, NaN) is 0.0: the bug this guards against reported such rounds as optimal
    assert relative_gap(5.0, bound, minimize) == math.inf


@given(objective=finite, bound=finite, minimize=st.booleans())
def test_gap_is_never_smaller_than_the_true_relative_distance(objective: float, bound: float,
                                                              minimize: bool) -> None:
    # how far the plan may be from the optimum
    truth = (objective - bound) if minimize else (bound - objective)
    scale = max(abs(objective), abs(bound))
    gap = relative_gap(objective, bound, minimize)
    assert gap >= 0.0
    if scale > 1e-12:
        assert gap * scale >= truth - 1e-9 * scale  # not clamped to 1, not rounded down


def test_a_timeout_without_a_bound_reports_no_gap() -> None:
    tables = Tables(step_s={"a": [1.0], "b": [1.0]})
    problem = make_round(tables, [("v100", 1)], [job("a", weight=2.0), job("b")],
                         options=RoundOptions(max_jobs_per_gpu=1))
    cset = build_candidates(problem)
    chosen = next(c for c, cand in enumerate(cset.candidates) if cand.jobs == (0,))
    outcome = BackendOutcome((chosen,), Termination.TIME_LIMIT, math.inf, 0.0, 1.0, "time limit, no bound")
    result = finish(cset, outcome, "milp", 0.0, [])
    assert result.plan.status == "timeout"
    assert result.plan.bound is None and result.plan.gap is None  # unknown, not 0.0
    assert result.plan.objective == pytest.approx(objective_of(cset, [chosen]))


def test_a_timeout_with_a_bound_reports_its_gap() -> None:
    tables = Tables(step_s={"a": [1.0], "b": [1.0]})
    problem = make_round(tables, [("v100", 1)], [job("a", weight=2.0), job("b")],
                         options=RoundOptions(max_jobs_per_gpu=1))
    cset = build_candidates(problem)
    chosen = next(c for c, cand in enumerate(cset.candidates) if cand.jobs == (1,))  # weight 1 of at most 2
    outcome = BackendOutcome((chosen,), Termination.TIME_LIMIT, 2.0, 0.0, 1.0)
    result = finish(cset, outcome, "milp", 0.0, [])
    assert result.plan.gap == pytest.approx(0.5)

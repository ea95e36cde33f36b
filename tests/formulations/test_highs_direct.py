"""HiGHS fed the sparse matrix directly (the ``highs`` backend; ``milp`` with ``solver="highspy"``) solves the
same model as through Pyomo: same optimum on every objective, every plan checked."""

from __future__ import annotations

import pytest

from dltsched.engine.app.registry import predictors
from dltsched.formulations.bench import synthetic_state
from dltsched.formulations.build import build_round
from dltsched.formulations.problem import RoundOptions
from dltsched.formulations.solve import solve_problem
from dltsched.formulations.testing import checked


@pytest.mark.parametrize("objective", ["jct", "effective_progress", "weighted_completion", "makespan"])
def test_direct_highs_reaches_the_pyomo_optimum(objective):
    problem = build_round(synthetic_state(30, 32, seed=4), predictors("analytic"),
                          RoundOptions(objective=objective, relative_gap=0.0, time_limit_s=60.0))
    direct = solve_problem(problem, "highs")
    through_milp = solve_problem(problem, "milp", solver="highspy")
    pyomo = solve_problem(problem, "pyomo")
    assert direct.plan.status == pyomo.plan.status == "optimal"
    assert checked(problem, direct) == pytest.approx(checked(problem, pyomo), rel=1e-6)
    assert direct.plan.gap == 0.0
    assert through_milp.plan.assignments == direct.plan.assignments and through_milp.plan.backend == "milp"

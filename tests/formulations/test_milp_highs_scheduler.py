"""The MILP backend solves after another HiGHS user in the same process ran with a different thread count.

HiGHS sizes one task scheduler per process at its first solve; a later solve asking for another thread
count stopped at once with status ``unknown`` and the round fell back to greedy (seen with cvxpy solving
through HiGHS first, highspy 1.12 to 1.16). The backend now resets the scheduler and solves again.
"""

from __future__ import annotations

import pytest

from dltsched.formulations import RoundOptions, solve_problem
from dltsched.formulations.testing import Tables, checked, job, make_round


def _other_highs_user(threads: int) -> None:
    highspy = pytest.importorskip("highspy")
    highspy.Highs.resetGlobalScheduler(True)  # as if this user were the first HiGHS run of the process
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", threads)
    h.addVar(0.0, 1.0)
    h.changeColIntegrality(0, highspy.HighsVarType.kInteger)
    h.changeColCost(0, -1.0)
    h.run()
    assert h.getModelStatus() == highspy.HighsModelStatus.kOptimal


@pytest.mark.parametrize("other_threads", [1, 3])  # num_workers is 2: fewer and more threads
def test_milp_solves_after_a_highs_run_with_other_threads(other_threads: int) -> None:
    # one GPU, one job per GPU: the heavier job a (weight 2) runs -> objective 2.0, as in test_round_backends.
    options = RoundOptions(max_jobs_per_gpu=1, relative_gap=0.0)
    tables = Tables(step_s={"a": [1.0], "b": [1.0]})
    problem = make_round(tables, [("v100", 1)], [job("a", weight=2.0), job("b")], options=options)
    _other_highs_user(other_threads)
    result = solve_problem(problem, "milp")
    assert result.plan.status == "optimal" and not result.plan.fallback, result.plan.message
    assert checked(problem, result) == pytest.approx(2.0)
    assert [a.job_id for a in result.plan.assignments] == ["a"]

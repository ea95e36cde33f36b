"""HiGHS fed the candidate set's sparse matrix directly through highspy (``passModel``), without Pyomo.

The same model as :mod:`dltsched.formulations.backends.milp` (one binary per candidate, exact floating-point
coefficients, the rows of :func:`~dltsched.formulations.backends.rows.model_rows`), built from index lists in
one pass: the ``milp`` backend with ``solver="highspy"``. Determinism as there: one thread by default; a
round is reproducible when it ends on its gap.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from dltsched.formulations.backends import BackendOutcome
from dltsched.formulations.backends.rows import model_rows, saved_by_placing
from dltsched.formulations.candidates import CandidateSet
from dltsched.formulations.result import Termination


def solve(cset: CandidateSet, *, time_limit_s: float, hint: Sequence[int], spent_s: float = 0.0) -> BackendOutcome:
    """Solve ``cset`` with HiGHS through highspy within what is left of the round's ``time_limit_s`` after
    ``spent_s`` seconds and the model's building; ``hint`` (a complete feasible selection) is the MIP start."""
    import highspy
    import numpy as np

    start = time.perf_counter()
    num = len(cset.candidates)
    makespan = cset.problem.options.objective == "makespan"
    rows = model_rows(cset, every_type_row=False)
    lower = [-math.inf if r.lower is None else r.lower for r in rows]
    upper = [math.inf if r.upper is None else r.upper for r in rows]
    index = [r.cols for r in rows]
    value = [r.coefs for r in rows]
    if makespan:  # M + sum saved_c x_c >= wait_j
        for j, cands in enumerate(cset.by_job):
            index.append([*cands, num])
            value.append([*saved_by_placing(cset, j), 1.0])
            lower.append(cset.unplaced_completion_s[j])
            upper.append(math.inf)
    lp = highspy.HighsLp()
    lp.num_col_ = num + makespan
    lp.num_row_ = len(index)
    cost = [c.gain for c in cset.candidates] + ([-1.0] if makespan else [])
    lp.col_cost_ = np.asarray(cost, dtype=float)
    lp.col_lower_ = np.zeros(num + makespan)
    lp.col_upper_ = np.asarray([1.0] * num + ([math.inf] if makespan else []))
    lp.row_lower_ = np.asarray(lower, dtype=float)
    lp.row_upper_ = np.asarray(upper, dtype=float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = num + makespan
    lp.a_matrix_.num_row_ = len(index)
    lp.a_matrix_.start_ = np.concatenate(([0], np.cumsum([len(i) for i in index]))).astype(np.int32)
    lp.a_matrix_.index_ = np.fromiter((c for i in index for c in i), dtype=np.int32)
    lp.a_matrix_.value_ = np.fromiter((v for vs in value for v in vs), dtype=float)
    lp.integrality_ = [highspy.HighsVarType.kInteger] * num + ([highspy.HighsVarType.kContinuous] if makespan else [])
    lp.sense_ = highspy.ObjSense.kMaximize
    engine = highspy.Highs()
    engine.setOptionValue("output_flag", False)
    engine.passModel(lp)
    if hint:
        chosen = np.zeros(num + makespan)
        chosen[list(hint)] = 1.0
        if makespan:
            chosen[num] = 1e30  # repaired by HiGHS when the start is completed
        solution = highspy.HighsSolution()
        solution.col_value = chosen
        solution.value_valid = True
        engine.setSolution(solution)
    options = cset.problem.options
    build_s = time.perf_counter() - start
    engine.setOptionValue("time_limit", max(0.01, float(time_limit_s) - spent_s - build_s))
    engine.setOptionValue("mip_rel_gap", options.relative_gap)
    engine.setOptionValue("mip_abs_gap", 1e-9)
    engine.setOptionValue("threads", 1 if options.deterministic else options.num_workers)
    engine.setOptionValue("random_seed", 0)
    began = time.perf_counter()
    engine.run()
    solve_s = time.perf_counter() - began
    status = engine.getModelStatus()
    info = engine.getInfo()
    found = info.primal_solution_status == 2  # kSolutionStatusFeasible
    statuses = highspy.HighsModelStatus
    if status == statuses.kOptimal:
        exact = info.mip_gap <= 1e-9 or abs(info.mip_dual_bound - info.objective_function_value) <= 1e-9 * max(
            1.0, abs(info.mip_dual_bound))
        termination = Termination.OPTIMAL if exact else Termination.GAP_LIMIT
    elif status == statuses.kTimeLimit:
        termination = Termination.TIME_LIMIT
    elif status in (statuses.kInfeasible, statuses.kUnboundedOrInfeasible):
        termination = Termination.INFEASIBLE
    else:
        termination = Termination.ERROR
    if not found:
        return BackendOutcome(None, termination, None, build_s, solve_s, f"highspy: {engine.modelStatusToString(status)}")
    values = engine.getSolution().col_value
    selected = tuple(c for c in range(num) if values[c] > 0.5)
    bound = info.mip_dual_bound
    return BackendOutcome(selected, termination, bound if math.isfinite(bound) else None, build_s, solve_s)

"""HiGHS fed the round model's sparse matrix directly through highspy (``passModel``), without Pyomo.

One binary per candidate, exact floating-point coefficients, the model's rows without the redundant ones,
built from index lists in one pass. Determinism: one thread by default (``RoundOptions.deterministic``).
HiGHS has no deterministic work limit for MIPs, so a round is reproducible when it ends on its gap
(``optimal`` or ``gap_limit``); one stopped by the wall-clock limit may differ between runs. Use the CP-SAT
backend for runs that must repeat bit for bit; ``deterministic=False`` gives ``num_workers`` threads.
"""

from __future__ import annotations

import importlib.util
import math
import time
from typing import Any

from dltsched.formulations.backends.base import (
    Backend,
    BackendOutcome,
    SolveParams,
    Stop,
    register,
    remaining_s,
    termination,
)
from dltsched.formulations.model import RoundModel, row_arrays


@register
class Highs(Backend):
    """HiGHS through highspy (see the module docstring)."""

    name = "highs"
    exact = True

    def available(self) -> bool:
        """Whether highspy is installed."""
        return importlib.util.find_spec("highspy") is not None

    def solve(self, model: RoundModel, params: SolveParams) -> BackendOutcome:
        """Solve within what is left of the round's ``time_limit_s`` after ``spent_s`` and the model's
        building; the hint (a complete feasible selection) is the MIP start."""
        import highspy

        if params.solver not in (None, "highs", "highspy"):
            raise ValueError(f"solver: '{params.solver}' not understood for backend highs; leave it out")
        start = time.perf_counter()
        engine = highspy.Highs()  # type: ignore[no-untyped-call]
        engine.setOptionValue("output_flag", False)
        engine.passModel(highs_lp(model))
        if params.hint:
            engine.setSolution(mip_start(model, params.hint))
            if start_needs_presolve_off(model):
                engine.setOptionValue("presolve", "off")
        options = model.options
        build_s = time.perf_counter() - start
        engine.setOptionValue("time_limit", remaining_s(params, build_s))
        engine.setOptionValue("mip_rel_gap", options.relative_gap)
        engine.setOptionValue("mip_abs_gap", 1e-9)
        engine.setOptionValue("threads", 1 if options.deterministic else options.num_workers)
        engine.setOptionValue("random_seed", 0)
        began = time.perf_counter()
        engine.run()
        solve_s = time.perf_counter() - began
        status = engine.getModelStatus()
        info = engine.getInfo()
        statuses = highspy.HighsModelStatus
        stop = {statuses.kOptimal: Stop.CONVERGED, statuses.kTimeLimit: Stop.TIME_LIMIT,
                statuses.kInfeasible: Stop.INFEASIBLE, statuses.kUnboundedOrInfeasible: Stop.INFEASIBLE,
                }.get(status, Stop.OTHER)
        ended = termination(stop, info.objective_function_value, info.mip_dual_bound, gap=info.mip_gap)
        if info.primal_solution_status != 2:  # kSolutionStatusFeasible
            return BackendOutcome(None, ended, None, build_s, solve_s,
                                  f"highspy: {engine.modelStatusToString(status)}")
        values = engine.getSolution().col_value
        selected = tuple(c for c in range(model.num_candidates) if values[c] > 0.5)
        bound = info.mip_dual_bound
        return BackendOutcome(selected, ended, bound if math.isfinite(bound) else None, build_s, solve_s)


def highs_lp(model: RoundModel) -> Any:
    """The model as a ``highspy.HighsLp``: row-wise sparse matrix, maximised, candidates integer in [0, 1]."""
    import highspy
    import numpy as np

    num = model.num_candidates
    width = model.num_columns
    rows = model.linear_rows()
    lp = highspy.HighsLp()
    lp.num_col_ = width
    lp.num_row_ = len(rows)
    lp.col_cost_ = np.asarray([*model.gains, *([-1.0] if width > num else [])], dtype=float)
    lp.col_lower_ = np.zeros(width)
    lp.col_upper_ = np.asarray([1.0] * num + [math.inf] * (width - num))
    lp.row_lower_ = np.asarray([-math.inf if r.lower is None else r.lower for r in rows], dtype=float)
    lp.row_upper_ = np.asarray([math.inf if r.upper is None else r.upper for r in rows], dtype=float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = width
    lp.a_matrix_.num_row_ = len(rows)
    lp.a_matrix_.start_, _, lp.a_matrix_.index_, lp.a_matrix_.value_ = row_arrays(rows)
    kinds = highspy.HighsVarType
    lp.integrality_ = [kinds.kInteger] * num + [kinds.kContinuous] * (width - num)
    lp.sense_ = highspy.ObjSense.kMaximize
    return lp


def mip_start(model: RoundModel, hint: tuple[int, ...]) -> Any:
    """A ``highspy.HighsSolution`` with the hinted candidates at 1, the others at 0, and ``M`` at the
    latest completion they give (a complete, feasible start)."""
    import highspy
    import numpy as np

    chosen = np.zeros(model.num_columns)
    chosen[list(hint)] = 1.0
    if model.makespan_column is not None:  # the start's own makespan: a start HiGHS must repair it may drop
        chosen[model.makespan_column] = start_makespan_s(model, hint)
    solution = highspy.HighsSolution()
    solution.col_value = chosen
    solution.value_valid = True
    return solution


def start_makespan_s(model: RoundModel, hint: tuple[int, ...]) -> float:
    """The least ``M`` the makespan rows allow when exactly the ``hint`` candidates are chosen."""
    chosen = set(hint)
    return max((row.wait_s + sum(f - row.wait_s for c, f in zip(row.cols, row.finish_s, strict=True)
                                 if c in chosen) for row in model.makespan_rows), default=0.0)


def start_needs_presolve_off(model: RoundModel) -> bool:
    """Whether a MIP start must go with HiGHS's presolve off: with the makespan column, HiGHS (1.16) given
    a start and presolving may report a better optimum than the solution it returns (the start itself), so
    the round would keep a worse plan than the one HiGHS proved; without presolve it returns what it found."""
    return model.makespan_column is not None

"""A backend in one file: the round model solved by SciPy's MILP (HiGHS inside SciPy).

Importing the module registers it as ``toy``; ``pytest -p toy_backend --backends toy`` (with this folder on
``PYTHONPATH``) runs every backend test on it, as ``test_toy_backend.py`` does.
"""

from __future__ import annotations

import math
import time

import numpy as np

from dltsched.formulations.backends import Backend, BackendOutcome, SolveParams, register
from dltsched.formulations.backends.base import Stop, remaining_s, termination
from dltsched.formulations.model import RoundModel


@register
class ScipyMilp(Backend):
    """``scipy.optimize.milp`` over the model's rows; the hint is not used."""

    name = "toy"
    exact = True

    def solve(self, model: RoundModel, params: SolveParams) -> BackendOutcome:
        """Maximise the model's objective subject to its rows (SciPy minimises: the costs are negated)."""
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import csr_matrix

        began = time.perf_counter()
        num, width = model.num_candidates, model.num_columns
        rows = model.linear_rows()
        cost = -np.array([*model.gains, *([-1.0] * (width - num))])
        constraints = []
        if rows:
            at = ([i for i, r in enumerate(rows) for _ in r.cols], [c for r in rows for c in r.cols])
            matrix = csr_matrix(([v for r in rows for v in r.coefs], at), shape=(len(rows), width))
            lower = [-math.inf if r.lower is None else r.lower for r in rows]
            upper = [math.inf if r.upper is None else r.upper for r in rows]
            constraints.append(LinearConstraint(matrix, lower, upper))
        build_s = time.perf_counter() - began
        result = milp(cost, integrality=[1] * num + [0] * (width - num), constraints=constraints,
                      bounds=Bounds(0.0, [1.0] * num + [math.inf] * (width - num)),
                      options={"time_limit": remaining_s(params, build_s),
                               "mip_rel_gap": model.options.relative_gap})
        solve_s = time.perf_counter() - began - build_s
        stop = {0: Stop.CONVERGED, 1: Stop.TIME_LIMIT, 2: Stop.INFEASIBLE}.get(result.status, Stop.OTHER)
        if result.x is None:
            return BackendOutcome(None, termination(stop), None, build_s, solve_s, result.message)
        bound = -result.mip_dual_bound
        ended = termination(stop, -result.fun, bound, gap=result.mip_gap)
        selected = tuple(c for c in range(num) if result.x[c] > 0.5)
        return BackendOutcome(selected, ended, bound, build_s, solve_s)

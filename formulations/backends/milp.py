"""The round model as a Pyomo MILP, solved by any Pyomo solver: HiGHS through Pyomo's persistent interface
by default.

The same columns, rows and objective as every backend (one binary per candidate, exact floating-point
coefficients, the model's rows without the redundant ones). ``solver`` names another Pyomo solver
(``gurobi_persistent``, ``scip``, ``cbc``, ``cplex`` ...) when installed; ``solver="highspy"`` is the
``highs`` backend (HiGHS fed the matrix without Pyomo). The registered name is ``pyomo``; ``milp`` is the
same backend under its former name.

Determinism (``RoundOptions.deterministic``, the default): HiGHS runs one thread; a round is reproducible
when it ends on its gap (see :mod:`~dltsched.formulations.backends.highs`).
"""

from __future__ import annotations

import importlib.util
import time
from typing import Any

from dltsched.formulations.backends.base import (
    Backend,
    BackendOutcome,
    SolveParams,
    Stop,
    get_backend,
    legacy_solve,
    register,
    remaining_s,
    termination,
)
from dltsched.formulations.backends.highs import mip_start, start_needs_presolve_off
from dltsched.formulations.model import RoundModel


@register
class Pyomo(Backend):
    """A Pyomo solver, HiGHS by default (see the module docstring)."""

    name = "pyomo"
    aliases = ("milp",)
    exact = True

    def available(self) -> bool:
        """Whether Pyomo and highspy (its default solver) are installed."""
        return all(importlib.util.find_spec(m) is not None for m in ("pyomo", "highspy"))

    def solve(self, model: RoundModel, params: SolveParams) -> BackendOutcome:
        """Build the Pyomo model and solve it with ``params.solver`` (default HiGHS, persistent) within what
        is left of the round's ``time_limit_s`` after ``spent_s`` and the model's building (Pyomo's first
        import, once per process, is not charged to the round)."""
        name = (params.solver or "highs").lower()
        if name == "highspy":
            return get_backend("highs").solve(model, params)
        import pyomo.environ  # noqa: F401 - registers the solver plugins

        start = time.perf_counter()
        pyomo_model = build_model(model)
        build_s = time.perf_counter() - start
        if name in ("highs", "appsi_highs"):
            return _solve_highs(pyomo_model, model, params, build_s)
        return _solve_other(pyomo_model, name, model, params, build_s)


#: the former module-level entry point, kept for a release
solve = legacy_solve("pyomo")


def build_model(model: RoundModel) -> Any:
    """The Pyomo ``ConcreteModel`` of ``model``: ``x`` (binary per candidate), ``makespan`` (with that
    objective), ``rows`` (a constraint list) and a maximised ``objective``."""
    import pyomo.environ as pyo

    m = pyo.ConcreteModel("dltsched_round")
    m.x = pyo.Var(range(model.num_candidates), domain=pyo.Binary)
    columns = list(m.x.values())
    if model.makespan_column is not None:
        m.makespan = pyo.Var(domain=pyo.NonNegativeReals)
        columns.append(m.makespan)
    m.rows = pyo.ConstraintList()
    for row in model.linear_rows():
        body = pyo.quicksum(columns[c] if k == 1.0 else k * columns[c]
                            for c, k in zip(row.cols, row.coefs, strict=True))
        if row.upper is not None:
            m.rows.add(body <= row.upper)
        if row.lower is not None:
            m.rows.add(row.lower - body <= 0)
    gain = pyo.quicksum(g * m.x[c] for c, g in enumerate(model.gains) if g)
    m.objective = pyo.Objective(expr=gain - m.makespan if model.makespan_column is not None else gain + 0,
                                sense=pyo.maximize)
    return m


def _solve_highs(m: Any, model: RoundModel, params: SolveParams, build_s: float) -> BackendOutcome:
    import highspy
    from pyomo.contrib.solver.solvers.highs import Highs

    start = time.perf_counter()
    opt = Highs()
    opt.set_instance(m)
    extra: dict[str, str] = {}
    if params.hint:
        _set_start(opt, m, model, params.hint)
        if start_needs_presolve_off(model):
            extra["presolve"] = "off"
    build_s += time.perf_counter() - start
    options = model.options
    threads = 1 if options.deterministic else options.num_workers
    for attempt in range(2):
        results = opt.solve(m, time_limit=remaining_s(params, build_s), rel_gap=options.relative_gap,
                            threads=threads, load_solutions=False, raise_exception_on_nonoptimal_result=False,
                            solver_options={"mip_abs_gap": 1e-9, **extra})
        if attempt or results.termination_condition.name != "unknown":
            break
        # HiGHS keeps one task scheduler per process, sized by the first solve that runs in it; a later solve
        # asking for another thread count stops at once with status unknown (e.g. after cvxpy solved with
        # HiGHS in the same process). Reset the scheduler and solve once more.
        highspy.Highs.resetGlobalScheduler(True)
    return _outcome(m, results, build_s, results.timing_info.wall_time)


def _set_start(opt: Any, m: Any, model: RoundModel, hint: tuple[int, ...]) -> None:
    """The MIP start of :func:`~dltsched.formulations.backends.highs.mip_start`, in Pyomo's column order."""
    solution = mip_start(model, hint)
    start = solution.col_value
    index = opt._pyomo_var_to_solver_var_map  # noqa: SLF001 - Pyomo keeps no public column map
    values = [0.0] * len(index)
    for c in range(model.num_candidates):
        values[index[id(m.x[c])]] = start[c]
    if model.makespan_column is not None:
        values[index[id(m.makespan)]] = start[model.makespan_column]
    solution.col_value = values
    opt._solver_model.setSolution(solution)  # noqa: SLF001


def _solve_other(m: Any, name: str, model: RoundModel, params: SolveParams, build_s: float) -> BackendOutcome:
    from pyomo.contrib.solver.common.factory import SolverFactory

    try:
        opt = SolverFactory(name)
    except Exception:  # noqa: BLE001 - Pyomo raises a bare error for unknown names
        opt = None
    if opt is None:  # ... or returns None
        raise ValueError(f"solver: '{name}' not understood by Pyomo's solver factory; try highs, "
                         "gurobi_persistent, scip or ipopt")
    if not opt.available():
        raise ValueError(f"solver: '{name}' is not installed here; leave it out to use HiGHS")
    results = opt.solve(m, time_limit=remaining_s(params, build_s), rel_gap=model.options.relative_gap,
                        load_solutions=False, raise_exception_on_nonoptimal_result=False)
    return _outcome(m, results, build_s, results.timing_info.wall_time or 0.0)


def _outcome(m: Any, results: Any, build_s: float, solve_s: float) -> BackendOutcome:
    from pyomo.contrib.solver.common.results import SolutionStatus, TerminationCondition

    cond = results.termination_condition
    stop = {TerminationCondition.convergenceCriteriaSatisfied: Stop.CONVERGED,
            TerminationCondition.maxTimeLimit: Stop.TIME_LIMIT,
            TerminationCondition.provenInfeasible: Stop.INFEASIBLE,
            TerminationCondition.infeasibleOrUnbounded: Stop.INFEASIBLE}.get(cond, Stop.OTHER)
    ended = termination(stop, results.incumbent_objective, results.objective_bound)
    if results.solution_status not in (SolutionStatus.optimal, SolutionStatus.feasible):
        return BackendOutcome(None, ended, None, build_s, solve_s, f"pyomo: {cond.name}")
    values = results.solution_loader.get_vars([m.x[c] for c in range(len(m.x))])
    selected = tuple(c for c in range(len(m.x)) if values[m.x[c]] > 0.5)
    return BackendOutcome(selected, ended, results.objective_bound, build_s, solve_s)

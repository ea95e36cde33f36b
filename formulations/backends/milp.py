"""Pyomo MILP of a candidate set, solved by HiGHS through Pyomo's persistent interface.

Same decisions, constraints and objective as the CP-SAT model (one binary per candidate), with
exact floating-point coefficients. ``solver`` names another Pyomo solver (``gurobi_persistent``,
``scip``, ``cbc``, ``cplex`` ...) when installed; HiGHS is the default. ``solver="highspy"`` skips Pyomo:
HiGHS gets the sparse matrix directly (:mod:`dltsched.formulations.backends.highs_direct`), the same model
built several times faster.

Determinism (``RoundOptions.deterministic``, the default): HiGHS runs one thread. HiGHS has no
deterministic work limit for MIPs, so a round is reproducible when it ends on its gap (``optimal`` or
``gap_limit``); one stopped by the wall-clock ``time_limit_s`` (``timeout``) may differ between runs. Use the
CP-SAT backend for runs that must repeat bit for bit; ``deterministic=False`` gives ``num_workers`` threads.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from dltsched.formulations.backends import BackendOutcome, capacity_limits, capacity_rows, stays_by_slot
from dltsched.formulations.candidates import CandidateSet
from dltsched.formulations.result import Termination


def solve(cset: CandidateSet, *, time_limit_s: float, hint: Sequence[int], solver: str | None = None,
          spent_s: float = 0.0) -> BackendOutcome:
    """Build the Pyomo model of ``cset`` and solve it with ``solver`` (default HiGHS, persistent; ``highspy``:
    HiGHS without Pyomo, see the module docstring) within what
    is left of the round's ``time_limit_s`` after ``spent_s`` seconds and the model's building (Pyomo's first
    import, once per process, is not charged to the round)."""
    if (solver or "").lower() == "highspy":
        from dltsched.formulations.backends import highs_direct

        return highs_direct.solve(cset, time_limit_s=time_limit_s, hint=hint, spent_s=spent_s)
    import pyomo.environ  # noqa: F401

    start = time.perf_counter()
    model = build_model(cset)
    build_s = time.perf_counter() - start
    time_limit_s = max(0.01, time_limit_s - spent_s - build_s)
    name = (solver or "highs").lower()
    if name in ("highs", "appsi_highs"):
        return _solve_highs(model, cset, time_limit_s, hint, build_s)
    return _solve_other(model, name, cset, time_limit_s, build_s)


def build_model(cset: CandidateSet) -> Any:
    import pyomo.environ as pyo

    model = pyo.ConcreteModel("dltsched_round")
    model.x = pyo.Var(range(len(cset.candidates)), domain=pyo.Binary)
    model.rows = pyo.ConstraintList()
    add_one_placement_per_job(model, cset)
    add_capacity(model, cset)
    add_slot_rules(model, cset)
    makespan = add_makespan(model, cset)
    gain = pyo.quicksum(c.gain * model.x[i] for i, c in enumerate(cset.candidates) if c.gain)
    model.objective = pyo.Objective(expr=gain - makespan if makespan is not None else gain + 0, sense=pyo.maximize)
    return model


def add_one_placement_per_job(model: Any, cset: CandidateSet) -> None:
    import pyomo.environ as pyo

    for cands in cset.by_job:
        if len(cands) > 1:
            model.rows.add(pyo.quicksum(model.x[c] for c in cands) <= 1)


def add_capacity(model: Any, cset: CandidateSet) -> None:
    """Usable GPUs per node (multi-GPU units and kept slots) and per type (everything)."""
    import pyomo.environ as pyo

    per_node, per_type = capacity_rows(cset)
    node_limit, type_limit = capacity_limits(cset)
    for n, terms in per_node.items():
        if sum(k for _, k in terms) > node_limit[n]:
            model.rows.add(pyo.quicksum(k * model.x[c] for c, k in terms) <= node_limit[n])
    for gpu_type, terms in per_type.items():
        if sum(k for _, k in terms) > type_limit[gpu_type]:
            model.rows.add(pyo.quicksum(k * model.x[c] for c, k in terms) <= type_limit[gpu_type])


def add_slot_rules(model: Any, cset: CandidateSet) -> None:
    """A slot is kept by at most one unit; slots that overlap are not both kept."""
    import pyomo.environ as pyo

    stays = stays_by_slot(cset)
    for cands in stays.values():
        if len(cands) > 1:
            model.rows.add(pyo.quicksum(model.x[c] for c in cands) <= 1)
    for p, q in cset.slot_conflicts:
        model.rows.add(pyo.quicksum(model.x[c] for c in [*stays.get(p, []), *stays.get(q, [])]) <= 1)


def add_makespan(model: Any, cset: CandidateSet) -> Any:
    """``M >= completion of every job`` (placed: its candidate's; left out: wait + run alone)."""
    import pyomo.environ as pyo

    if cset.problem.options.objective != "makespan":
        return None
    model.makespan = pyo.Var(domain=pyo.NonNegativeReals)
    for j, cands in enumerate(cset.by_job):
        wait = cset.unplaced_completion_s[j]
        saved = pyo.quicksum(
            (wait - cset.candidates[c].completion_s[cset.candidates[c].jobs.index(j)]) * model.x[c] for c in cands)
        model.rows.add(model.makespan >= wait - saved)
    return model.makespan


def _solve_highs(model: Any, cset: CandidateSet, time_limit_s: float, hint: Sequence[int],
                 build_s: float) -> BackendOutcome:
    import highspy
    from pyomo.contrib.solver.solvers.highs import Highs

    start = time.perf_counter()
    opt = Highs()
    opt.set_instance(model)
    if hint:
        _set_start(opt, model, hint, highspy)
    loaded_s = time.perf_counter() - start
    build_s += loaded_s
    time_limit_s = max(0.01, time_limit_s - loaded_s)
    options = cset.problem.options
    threads = 1 if options.deterministic else options.num_workers
    for attempt in range(2):
        results = opt.solve(model, time_limit=time_limit_s, rel_gap=options.relative_gap, threads=threads,
                            load_solutions=False, raise_exception_on_nonoptimal_result=False,
                            solver_options={"mip_abs_gap": 1e-9})
        if attempt or results.termination_condition.name != "unknown":
            break
        # HiGHS keeps one task scheduler per process, sized by the first solve that runs in it; a later solve
        # asking for another thread count stops at once with status unknown (highspy 1.12 to 1.16, e.g. after
        # cvxpy solved with HiGHS in the same process). Reset the scheduler and solve once more.
        highspy.Highs.resetGlobalScheduler(True)
    return _outcome(model, results, build_s, results.timing_info.wall_time)


def _set_start(opt: Any, model: Any, hint: Sequence[int], highspy: Any) -> None:
    """A MIP start for HiGHS: hinted candidates 1, the rest 0 (``M`` left to HiGHS)."""
    chosen = set(hint)
    index = opt._pyomo_var_to_solver_var_map  # noqa: SLF001 - Pyomo keeps no public column map
    values = [0.0] * len(index)
    for c in range(len(model.x)):
        values[index[id(model.x[c])]] = 1.0 if c in chosen else 0.0
    if hasattr(model, "makespan"):
        values[index[id(model.makespan)]] = 1e30  # repaired by HiGHS when the start is completed
    solution = highspy.HighsSolution()
    solution.col_value = values
    solution.value_valid = True
    opt._solver_model.setSolution(solution)  # noqa: SLF001


def _solve_other(model: Any, name: str, cset: CandidateSet, time_limit_s: float, build_s: float) -> BackendOutcome:
    import pyomo.environ  # noqa: F401 - registers the solver plugins
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
    results = opt.solve(model, time_limit=time_limit_s, rel_gap=cset.problem.options.relative_gap,
                        load_solutions=False, raise_exception_on_nonoptimal_result=False)
    return _outcome(model, results, build_s, results.timing_info.wall_time or 0.0)


def _outcome(model: Any, results: Any, build_s: float, solve_s: float) -> BackendOutcome:
    from pyomo.contrib.solver.common.results import SolutionStatus, TerminationCondition

    cond = results.termination_condition
    if cond == TerminationCondition.convergenceCriteriaSatisfied:
        bound, incumbent = results.objective_bound, results.incumbent_objective
        exact = bound is not None and incumbent is not None and bound - incumbent <= 1e-9 * max(1.0, abs(bound))
        termination = Termination.OPTIMAL if exact else Termination.GAP_LIMIT
    elif cond == TerminationCondition.maxTimeLimit:
        termination = Termination.TIME_LIMIT
    elif cond in (TerminationCondition.provenInfeasible, TerminationCondition.infeasibleOrUnbounded):
        termination = Termination.INFEASIBLE
    else:
        termination = Termination.ERROR
    if results.solution_status not in (SolutionStatus.optimal, SolutionStatus.feasible):
        return BackendOutcome(None, termination, None, build_s, solve_s, f"pyomo: {cond.name}")
    values = results.solution_loader.get_vars([model.x[c] for c in range(len(model.x))])
    selected = tuple(c for c in range(len(model.x)) if values[model.x[c]] > 0.5)
    return BackendOutcome(selected, termination, results.objective_bound, build_s, solve_s)

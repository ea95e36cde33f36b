"""``solve_problem``: one round problem -> candidates -> backend -> concrete plan, with a greedy start and
fallback.

The whole round pipeline of a cluster snapshot (build, solve, check, fall back) is
:mod:`dltsched.formulations.decide`.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence

from dltsched.engine.domain.model import Plan, PlanStatus
from dltsched.formulations.backends import BackendOutcome, SolveParams, get_backend, hint_from_plan
from dltsched.formulations.backends.base import legacy_solve
from dltsched.formulations.backends.greedy import greedy_selection
from dltsched.formulations.candidates import CandidateSet, build_candidates, objective_of, to_reported
from dltsched.formulations.mapping import to_plan
from dltsched.formulations.model import RoundModel
from dltsched.formulations.problem import RoundProblem
from dltsched.formulations.result import RoundResult, SolutionStatus, Termination, relative_gap

#: below this share of the time limit left after building, the solver is not started: the start is the plan
MIN_SOLVE_SHARE = 0.05


def solve_problem(problem: RoundProblem, backend: str = "cpsat", *, time_limit_s: float | None = None,
                  warm_start: Plan | None = None, solver: str | None = None,
                  started_s: float | None = None) -> RoundResult:
    """Solve one round with ``backend`` (a name of :data:`~dltsched.formulations.backends.BACKENDS`).

    ``time_limit_s`` defaults to ``problem.options.time_limit_s``; ``solver`` names the Pyomo solver
    for ``pyomo`` (alias ``milp``; default HiGHS). The round's starting selection is the better of
    ``warm_start`` (e.g. the last round's plan) extended greedily and the plain greedy one: every backend
    gets it as its hint (MILP solvers use it as their MIP start; CP-SAT, see its module); when the solver
    returns nothing feasible in time it
    is the plan, with ``status="fallback"`` and ``fallback=True``, and when the solver's incumbent is worse
    (a time limit hit early in the search) the plan keeps the start, saying so in its message.

    The time limit bounds the whole round from ``started_s`` (default: this call), building included: the
    solver gets what the candidates, the starting selection and its own model left of it. An anytime answer:
    the starting selection is ready before the solver runs, and when less than :data:`MIN_SOLVE_SHARE` of the
    limit is left the solver is not started and the start is the plan (``status="fallback"``, saying why).
    Deterministic solves (``RoundOptions.deterministic``) keep their deterministic work budget, so that a
    round repeats bit for bit; their wall-clock cap (see :mod:`~dltsched.formulations.backends.cpsat`) is
    what building shortens.

    Parameters
    ----------
    problem
        The round (see :func:`~dltsched.formulations.build.build_round`).
    backend
        A name of :data:`~dltsched.formulations.backends.BACKENDS`.
    time_limit_s
        Wall-clock limit of the round from ``started_s``; default ``problem.options.time_limit_s``.
    warm_start
        A plan to start from; the starting selection is the better of it (extended greedily) and the greedy
        one.
    solver
        The Pyomo solver of ``pyomo`` / ``milp`` (default HiGHS).
    started_s
        ``time.perf_counter()`` when the round began (e.g. before
        :func:`~dltsched.formulations.build.build_round`); default: now.

    Returns
    -------
    RoundResult
        The plan (status, objective, bound, gap, timings), the solver's termination and solution status,
        the jobs that cannot be placed, the number of candidates and the seconds per stage (``stages``:
        ``candidates_s``, ``start_s``, ``model_build_s``, ``solve_s``, ``mapping_s``). Check the plan with
        :func:`~dltsched.formulations.checker.check_plan` before using it.

    Raises
    ------
    ValueError
        When ``backend`` is unknown or ``time_limit_s`` is not > 0.
    """
    began = time.perf_counter()
    limit = problem.options.time_limit_s if time_limit_s is None else time_limit_s
    if limit <= 0:
        raise ValueError(f"time_limit_s: {limit} not understood; must be > 0")
    engine = get_backend(backend)
    cset = build_candidates(problem)
    candidates_s = time.perf_counter() - began
    if not cset.candidates:  # nothing can be placed: the empty plan is the only one, hence optimal
        empty = BackendOutcome((), Termination.OPTIMAL, None, 0.0, 0.0, "no candidate placements")
        return finish(cset, empty, backend, candidates_s, [], {"candidates_s": candidates_s})
    start = starting_selection(cset, warm_start)
    start_s = time.perf_counter() - began - candidates_s
    left = limit - (time.perf_counter() - (began if started_s is None else started_s))
    if left < MIN_SOLVE_SHARE * limit and not (problem.options.deterministic and engine.work_limited):
        why = f"round time limit of {limit:g} s spent before solving: the greedy start is the plan"
        outcome = BackendOutcome(None, Termination.TIME_LIMIT, None, 0.0, 0.0, why)
    else:
        params = SolveParams(limit, tuple(start), solver, limit - left)
        outcome = engine.solve(RoundModel(cset), params)
    stages = {"candidates_s": candidates_s, "start_s": start_s, "model_build_s": outcome.build_time_s,
              "solve_s": outcome.solve_time_s}
    return finish(cset, outcome, backend, candidates_s + start_s, start, stages)


def starting_selection(cset: CandidateSet, warm_start: Plan | None) -> list[int]:
    """A complete feasible selection to start from: the better of the warm plan's candidates extended
    greedily and the plain greedy selection (by the round's objective)."""
    options = [greedy_selection(cset)]
    if warm_start is not None:
        options.append(greedy_selection(cset, first=hint_from_plan(cset, warm_start)))
    sign = -1.0 if cset.problem.options.minimize else 1.0
    return max(options, key=lambda selected: sign * objective_of(cset, selected))


def load_backend(name: str) -> object:
    """Deprecated: the registered backend object is :func:`~dltsched.formulations.backends.get_backend`'s;
    this returns its former module-level ``solve`` function."""
    warnings.warn("load_backend() is deprecated; use dltsched.formulations.backends.get_backend()",
                  DeprecationWarning, stacklevel=2)
    get_backend(name)
    return legacy_solve(name)


#: the greedy heuristic's former module-level entry point, kept for a release
solve_greedy = legacy_solve("greedy")


def finish(cset: CandidateSet, outcome: BackendOutcome, backend: str, prepare_s: float,
           start: Sequence[int], stages: dict[str, float] | None = None) -> RoundResult:
    """Map the outcome to a plan with status, objective, bound and gap (``start``, the solver's starting
    selection, when it returned none); ``stages`` (seconds per stage) gain ``mapping_s``."""
    began = time.perf_counter()
    problem = cset.problem
    build_s = prepare_s + outcome.build_time_s
    fallback = outcome.selected is None
    selected = list(start) if fallback else list(outcome.selected or ())
    objective = objective_of(cset, selected)
    message = outcome.message
    if not fallback and start:  # a solver stopped by its time limit may hold a worse incumbent than the start
        sign = -1.0 if problem.options.minimize else 1.0
        begun = objective_of(cset, start)
        if sign * (begun - objective) > 1e-9 * max(1.0, abs(objective)):
            selected, objective = list(start), begun
            kept = "kept the starting selection: better than the solver's incumbent"
            message = "; ".join(filter(None, (message, kept)))
    bound = None if fallback or outcome.bound is None else to_reported(cset, outcome.bound)
    if bound is not None and not math.isfinite(bound):  # stopped without a bound: the gap is unknown
        bound = None
    gap = None if bound is None else relative_gap(objective, bound, problem.options.minimize)
    status, solution = _status(outcome.termination, fallback, backend)
    if status == PlanStatus.OPTIMAL and gap is not None:
        gap = 0.0 if gap < 1e-6 else gap
    never = [u for u in problem.unplaceable if not u.while_down]
    blocked = [u for u in problem.unplaceable if u.while_down]
    if never:
        status = PlanStatus.INFEASIBLE
        names = "; ".join(f"job '{u.job_id}': {u.reason}" for u in never)
        message = f"round infeasible, these jobs can never be placed: {names}"
    if blocked:
        names = "; ".join(f"job '{u.job_id}': {u.reason}" for u in blocked)
        message = "; ".join(filter(None, (message, f"waiting for down GPUs: {names}")))
    plan = to_plan(cset, selected, status=status, objective=objective, bound=bound, gap=gap,
                   solve_time_s=outcome.solve_time_s, build_time_s=build_s, backend=backend,
                   fallback=fallback, message=message)
    stages = {**(stages or {}), "mapping_s": time.perf_counter() - began}
    return RoundResult(plan, outcome.termination, solution, problem.unplaceable, len(cset.candidates), stages)


def _status(termination: str, fallback: bool, backend: str) -> tuple[PlanStatus, SolutionStatus]:
    if fallback:
        return PlanStatus.FALLBACK, SolutionStatus.FALLBACK
    if not get_backend(backend).exact:
        return PlanStatus.HEURISTIC, SolutionStatus.FEASIBLE
    return {Termination.OPTIMAL: (PlanStatus.OPTIMAL, SolutionStatus.OPTIMAL),
            Termination.GAP_LIMIT: (PlanStatus.FEASIBLE, SolutionStatus.FEASIBLE)}.get(
        Termination(termination), (PlanStatus.TIMEOUT, SolutionStatus.FEASIBLE))

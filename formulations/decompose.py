"""Large rounds by decomposition: the ``decomposed`` backend
(:mod:`~dltsched.formulations.backends.decomposed`, which says how it works) and :func:`solve_decomposed`, one
round solved with it."""

from __future__ import annotations

from dltsched.formulations.backends.base import legacy_solve
from dltsched.formulations.backends.decomposed import Decomposed, Decomposition, restrict, type_level
from dltsched.formulations.problem import RoundProblem
from dltsched.formulations.result import RoundResult
from dltsched.formulations.solve import solve_problem

__all__ = ["Decomposed", "Decomposition", "restrict", "solve_decomposed", "type_level"]

#: the former module-level entry point, kept for a release
solve = legacy_solve("decomposed")


def solve_decomposed(problem: RoundProblem, *, time_limit_s: float | None = None,
                     started_s: float | None = None) -> RoundResult:
    """:func:`~dltsched.formulations.solve.solve_problem` with the ``decomposed`` backend: the plan's
    ``bound`` is the LP's and its ``gap`` is measured against it; its message says whether it is exact.

    Parameters
    ----------
    problem
        The round.
    time_limit_s
        Wall-clock limit of the round; default ``problem.options.time_limit_s``.
    started_s
        ``time.perf_counter()`` when the round began; default: now.

    Returns
    -------
    RoundResult
        The round's result, its plan unchecked (see :func:`~dltsched.formulations.checker.check_plan`).
    """
    return solve_problem(problem, "decomposed", time_limit_s=time_limit_s, started_s=started_s)

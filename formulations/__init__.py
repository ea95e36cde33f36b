"""Per-round optimisation: backend-neutral RoundProblem, CP-SAT and Pyomo/HiGHS models,
multi-stage interference, solver-independent checker and greedy fallback.

Importing this package is cheap: OR-Tools and Pyomo load only when a backend runs.
"""

from dltsched.formulations.build import build_round
from dltsched.formulations.checker import CheckReport, check_plan, evaluate_objective
from dltsched.formulations.problem import RoundOptions, RoundProblem
from dltsched.formulations.result import RoundResult
from dltsched.formulations.solve import solve_round

__all__ = ["CheckReport", "RoundOptions", "RoundProblem", "RoundResult", "build_round", "check_plan",
           "evaluate_objective", "solve_round"]

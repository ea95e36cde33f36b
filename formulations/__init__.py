"""Per-round optimisation: backend-neutral RoundProblem, CP-SAT and Pyomo/HiGHS models,
multi-stage interference, solver-independent checker and greedy fallback, and the one round
pipeline over them (:mod:`dltsched.formulations.pipeline`).

Importing this package is cheap: its public names load from their modules on first access (PEP 562),
and OR-Tools and Pyomo load only when a backend runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dltsched.formulations.build import build_round
    from dltsched.formulations.checker import CheckReport, check_plan, evaluate_objective
    from dltsched.formulations.pipeline import ConfiguredSolver, decide_round
    from dltsched.formulations.problem import RoundOptions, RoundProblem
    from dltsched.formulations.result import RoundResult
    from dltsched.formulations.solve import solve_problem

#: public name -> the module that defines it
_EXPORTS = {
    "build_round": "dltsched.formulations.build",
    "CheckReport": "dltsched.formulations.checker",
    "check_plan": "dltsched.formulations.checker",
    "evaluate_objective": "dltsched.formulations.checker",
    "RoundOptions": "dltsched.formulations.problem",
    "RoundProblem": "dltsched.formulations.problem",
    "RoundResult": "dltsched.formulations.result",
    "solve_problem": "dltsched.formulations.solve",
    "decide_round": "dltsched.formulations.pipeline",
    "ConfiguredSolver": "dltsched.formulations.pipeline",
}

__all__ = ["CheckReport", "ConfiguredSolver", "RoundOptions", "RoundProblem", "RoundResult", "build_round",
           "check_plan", "decide_round", "evaluate_objective", "solve_problem"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

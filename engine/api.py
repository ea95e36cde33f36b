"""Deprecated path of the embedding API (removed in 0.3.0): import from :mod:`dltsched.engine`
(``solve_round``, ``RoundOptions``, ``ConfiguredSolver``, ``simulate_instance``, ...) or
:mod:`dltsched.engine.app.api`."""

from __future__ import annotations

import warnings

from dltsched.engine.app.api import (
    DEFAULT_OPTIONS,
    RoundOptions,
    SolveConfig,
    initial_state,
    optimizing_policy,
    plan_to_dict,
    simulate_instance,
    solve_round,
)
from dltsched.formulations.pipeline import ConfiguredSolver

warnings.warn("dltsched.engine.api is deprecated and will be removed in 0.3.0; import "
              "solve_round, RoundOptions, ConfiguredSolver, ... from dltsched.engine (all of them: "
              "dltsched.engine.app.api)", DeprecationWarning, stacklevel=2)

__all__ = ["DEFAULT_OPTIONS", "ConfiguredSolver", "RoundOptions", "SolveConfig", "initial_state",
           "optimizing_policy", "plan_to_dict", "simulate_instance", "solve_round"]

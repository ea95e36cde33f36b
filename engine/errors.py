"""Deprecated path of the error types (removed in 0.3.0): import them from
:mod:`dltsched.engine.domain.errors`."""

from __future__ import annotations

import warnings

from dltsched.engine.domain.errors import (
    DataNotFoundError,
    DltschedError,
    InfeasibleRoundError,
    InvalidPlanError,
    SimulationStalledError,
    ValidationError,
)

warnings.warn("dltsched.engine.errors is deprecated and will be removed in 0.3.0; import the errors from "
              "dltsched.engine.domain.errors", DeprecationWarning, stacklevel=2)

__all__ = ["DataNotFoundError", "DltschedError", "InfeasibleRoundError", "InvalidPlanError",
           "SimulationStalledError", "ValidationError"]

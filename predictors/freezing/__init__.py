"""IceFrog-style layer freezing: freeze tables and the frozen-penalty model (no torch)."""

from dltsched.predictors.freezing.model import FreezeRow, IceFrogFreezing, penalty_parameters

__all__ = ["FreezeRow", "IceFrogFreezing", "penalty_parameters"]

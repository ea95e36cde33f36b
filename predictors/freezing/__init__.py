"""IceFrog-style layer freezing: freeze tables and the frozen-penalty model (no torch); the published-results
penalty the simulator's ground truth uses, and a predictor scaled from it (:mod:`.published`)."""

from dltsched.predictors.freezing.model import FreezeRow, IceFrogFreezing, penalty_parameters
from dltsched.predictors.freezing.published import PublishedFreezing, ScaledFreezing

__all__ = ["FreezeRow", "IceFrogFreezing", "PublishedFreezing", "ScaledFreezing", "penalty_parameters"]

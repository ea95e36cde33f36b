"""DeletePop-style operator-level step-time and memory predictor (no torch at prediction time)."""

from dltsched.predictors.steptime.model import DeletePopStepTime, MemoryFitError, StepBreakdown, load_factors

__all__ = ["DeletePopStepTime", "MemoryFitError", "StepBreakdown", "load_factors"]

"""Deprecated path of the predictor protocols and bundle (removed in 0.3.0): import them from
:mod:`dltsched.engine.domain.predictors`."""

from __future__ import annotations

import warnings

from dltsched.engine.domain.predictors import (
    ColocationPredictor,
    FreezingPredictor,
    MemoryObservations,
    Predictors,
    StepTimePredictor,
    learned_memory_mib,
    memory_kind,
    memory_observations_version,
    observing_memory,
)

warnings.warn("dltsched.engine.predict is deprecated and will be removed in 0.3.0; import Predictors and the "
              "predictor protocols from dltsched.engine.domain.predictors", DeprecationWarning, stacklevel=2)

__all__ = ["ColocationPredictor", "FreezingPredictor", "MemoryObservations", "Predictors",
           "StepTimePredictor", "learned_memory_mib", "memory_kind", "memory_observations_version",
           "observing_memory"]

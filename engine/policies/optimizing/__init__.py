"""The rolling-horizon optimizing policy, in three parts:

- :mod:`~dltsched.engine.policies.optimizing.policy`: :class:`OptimizingPolicy`, which hands solving rounds to
  its :class:`~dltsched.engine.domain.protocols.RoundSolver` and starts jobs between them;
- :mod:`~dltsched.engine.policies.optimizing.trigger`: when a round solves and which jobs it holds
  (:class:`~dltsched.engine.policies.optimizing.trigger.WorkingSet`);
- :mod:`~dltsched.engine.policies.optimizing.cache`: the predictions and round prices kept across decisions
  (:class:`~dltsched.engine.policies.optimizing.cache.PredictionCache`, one invalidation rule).

``colocation_fallbacks`` moved to :mod:`dltsched.formulations.pipeline` (the old name warns).
"""

from __future__ import annotations

import warnings
from typing import Any

from dltsched.engine.policies.optimizing.cache import PredictionCache
from dltsched.engine.policies.optimizing.policy import (
    AUTO_INTERVAL_GPUS,
    AUTO_INTERVAL_S,
    SHORTCUTS_ABOVE_GPUS,
    OptimizingPolicy,
)
from dltsched.engine.policies.optimizing.trigger import Idle, WorkingSet, sharing_groups

__all__ = ["AUTO_INTERVAL_GPUS", "AUTO_INTERVAL_S", "SHORTCUTS_ABOVE_GPUS", "Idle", "OptimizingPolicy",
           "PredictionCache", "WorkingSet", "sharing_groups"]


def __getattr__(name: str) -> Any:
    if name == "colocation_fallbacks":
        warnings.warn("dltsched.engine.policies.optimizing.colocation_fallbacks is deprecated and will be "
                      "removed in 0.3.0; import it from dltsched.formulations.pipeline", DeprecationWarning,
                      stacklevel=2)
        from dltsched.formulations.pipeline import colocation_fallbacks

        return colocation_fallbacks
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

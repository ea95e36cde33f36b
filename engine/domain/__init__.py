"""The domain layer: model, errors, protocols, predictor protocols and catalogs. Imports nothing above it.

Import domain types from :mod:`dltsched.engine.domain.model`. Reading them from this package
(``from dltsched.engine.domain import Job``), the path before the layered layout, still works with a
``DeprecationWarning`` until 0.3.0.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

#: the domain types this package gave before they moved to ``dltsched.engine.domain.model``
_MOVED = frozenset({
    "DEFAULT_OBJECTIVE", "MEASURED_ONLY", "OBJECTIVES", "OPTIMIZERS", "Assignment", "Cluster", "ClusterState",
    "GpuType", "Instance", "Job", "JobState", "Node", "Plan", "PlanStatus", "resolve_gpu_type",
    "resolve_model",
})


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        warnings.warn(f"dltsched.engine.domain.{name} is deprecated and will be removed in 0.3.0; import it "
                      "from dltsched.engine.domain.model", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module("dltsched.engine.domain.model"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

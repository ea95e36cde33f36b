"""dltsched.engine: the domain model, simulator, policies, metrics, CLI and the embedding API.

Importing this package loads nothing: the embedding API's names (:func:`solve_round`, :class:`RoundOptions`,
:class:`ConfiguredSolver`, :class:`Measurements`, :class:`JobMeasurement`, :class:`GroupMeasurement`,
:func:`simulate_instance`, :func:`plan_to_dict`; ``SolveConfig``, deprecated) are resolved from
:mod:`dltsched.engine.app.api` on first access (PEP 562), so ``import dltsched.engine.domain.model`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dltsched.engine.app.api import (
        ConfiguredSolver,
        RoundOptions,
        SolveConfig,
        plan_to_dict,
        simulate_instance,
        solve_round,
    )
    from dltsched.engine.app.measured import GroupMeasurement, JobMeasurement, Measurements

__all__ = ["ConfiguredSolver", "GroupMeasurement", "JobMeasurement", "Measurements", "RoundOptions", "SolveConfig",
           "plan_to_dict", "simulate_instance", "solve_round"]
_MEASURED = frozenset({"GroupMeasurement", "JobMeasurement", "Measurements"})


def __getattr__(name: str) -> Any:
    if name in __all__:
        module = "dltsched.engine.app.measured" if name in _MEASURED else "dltsched.engine.app.api"
        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

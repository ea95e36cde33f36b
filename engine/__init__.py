"""dltsched.engine: the domain model, simulator, policies, metrics, CLI and the embedding API.

The package wires its layers: it registers the simulator's measured ground truth
(:class:`~dltsched.engine.sim.truth.MeasuredTruth`, loaded on first use) as the one instance readers and the
generator convert trace durations with (:func:`~dltsched.engine.domain.protocols.register_ground_truth`), so
they need not import the simulator; and the application's round services
(:func:`~dltsched.engine.domain.protocols.register_round_services`: names of policies, backends and predictor
bundles, measurements), so the round pipeline need not import the application. Importing this package loads
nothing else: the embedding API's names
(:func:`solve_round`, :class:`RoundOptions`, :class:`ConfiguredSolver`, :class:`Measurements`,
:class:`JobMeasurement`, :class:`GroupMeasurement`, :func:`simulate_instance`, :func:`plan_to_dict`;
``SolveConfig``, deprecated) are resolved from
:mod:`dltsched.engine.app.api` (``ConfiguredSolver``: :mod:`dltsched.formulations.pipeline`) on first access
(PEP 562), so ``import dltsched.engine.domain.model`` stays cheap. ``__version__`` is the installed version.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dltsched.engine.domain.protocols import (
    GroundTruth,
    RoundServices,
    register_ground_truth,
    register_round_services,
)

if TYPE_CHECKING:
    from dltsched.engine.app.api import (
        RoundOptions,
        SolveConfig,
        plan_to_dict,
        simulate_instance,
        solve_round,
    )
    from dltsched.engine.app.measured import GroupMeasurement, JobMeasurement, Measurements
    from dltsched.formulations.pipeline import ConfiguredSolver


def _measured_truth(data_dir: str | None) -> GroundTruth:
    """The simulator's ground truth: Gavel's measurements in ``data_dir``, else the package's copy of them."""
    from dltsched.engine.sim.truth import MeasuredTruth

    return MeasuredTruth(data_dir=data_dir)


register_ground_truth(_measured_truth)


def _round_services() -> RoundServices:
    """The application's round services: policy and backend names, predictor bundles, measurements."""
    from dltsched.engine.app.api import ROUND_SERVICES

    return ROUND_SERVICES


register_round_services(_round_services)

__all__ = ["ConfiguredSolver", "GroupMeasurement", "JobMeasurement", "Measurements", "RoundOptions",
           "SolveConfig",
           "plan_to_dict", "simulate_instance", "solve_round"]
_MEASURED = frozenset({"GroupMeasurement", "JobMeasurement", "Measurements"})


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("dltsched")
        except PackageNotFoundError:  # run from a source tree that was never installed
            return "0+unknown"
    if name in __all__:
        module = "dltsched.engine.app.measured" if name in _MEASURED else \
            "dltsched.formulations.pipeline" if name == "ConfiguredSolver" else "dltsched.engine.app.api"
        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

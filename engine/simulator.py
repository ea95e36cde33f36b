"""Deprecated path of the simulator (removed in 0.3.0): import it from
:mod:`dltsched.engine.sim.simulator`."""

from __future__ import annotations

import warnings

from dltsched.engine.sim.simulator import SimulationConfig, Simulator, simulate

warnings.warn("dltsched.engine.simulator is deprecated and will be removed in 0.3.0; import "
              "simulate, Simulator and SimulationConfig from dltsched.engine.sim.simulator",
              DeprecationWarning, stacklevel=2)

__all__ = ["SimulationConfig", "Simulator", "simulate"]

"""Simulation settings and the policy protocol the simulator drives (no simulator code here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from dltsched.engine.sim.faults import FaultConfig

if TYPE_CHECKING:
    from collections.abc import Callable

    from dltsched.engine.domain.model import ClusterState, Instance, Plan
    from dltsched.engine.domain.protocols import GroundTruth

#: simulated seconds in ten years: the default bound on a run's simulated time
TEN_YEARS_S = 10 * 365.25 * 86400.0


class Policy(Protocol):
    """A scheduling policy: pure function of a snapshot. ``round_interval_s`` asks for periodic rounds."""

    name: str
    round_interval_s: float | None

    def schedule(self, state: ClusterState) -> Plan: ...


@dataclass(frozen=True, slots=True)
class SimulationConfig:
    """Simulator options; ``seed`` feeds every random choice (policies get it too).

    ``memory``: ``"oom"`` (a misfit crashes and is re-queued, see :mod:`dltsched.engine.sim.simulator`) or ``"reject"`` (raise).
    ``max_time_s``: simulated seconds after the first arrival a run may last; a run that would go beyond
    raises. ``max_stalled_iterations``: loop iterations without any progress before the run raises."""

    seed: int = 0
    memory: Literal["reject", "oom"] = "oom"
    max_time_s: float = TEN_YEARS_S
    max_stalled_iterations: int = 1000
    utilization_samples: int = 400
    faults: FaultConfig | None = None



class RunSetup(Protocol):
    """What a run is of (:class:`dltsched.engine.sim.simulator.Simulator` is one): read-only here."""

    @property
    def instance(self) -> Instance: ...

    @property
    def policy(self) -> Policy: ...

    @property
    def truth(self) -> GroundTruth: ...

    @property
    def config(self) -> SimulationConfig: ...

    @property
    def store(self) -> Any: ...

    @property
    def on_round(self) -> Callable[[float, int], None] | None: ...

"""Simulation settings and the policy protocol the simulator drives (no simulator code here)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.sim.faults import FaultConfig
from dltsched.engine.sim.lengths import LENGTH_MODES, Lengths

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

    def schedule(self, state: ClusterState) -> Plan:
        """The plan for one round from the cluster snapshot ``state``: which jobs run where, co-located and
        frozen how."""


@dataclass(frozen=True, slots=True)
class SimulationConfig:
    """Simulator options; ``seed`` feeds every random choice (policies get it too).

    ``memory``: ``"oom"`` (a misfit crashes and is re-queued, see :mod:`dltsched.engine.sim.simulator`) or
    ``"reject"`` (raise). ``max_time_s``: simulated seconds after the first arrival a run may last; a run that
    would go beyond raises. ``max_stalled_iterations``: loop iterations without any progress (or node failures
    without durable progress) before the run raises. ``max_wall_s``: wall-clock seconds a run may take before
    it raises (``None``: the ``max_sim_wall_s`` cap of :mod:`dltsched.engine.domain.limits`); not part of a
    checkpoint's fingerprint."""

    seed: int = 0
    memory: Literal["reject", "oom"] = "oom"
    max_time_s: float = TEN_YEARS_S
    max_stalled_iterations: int = 1000
    max_wall_s: float | None = None
    utilization_samples: int = 400
    faults: FaultConfig | None = None
    #: what policies are told of job lengths: ``known`` | ``unknown`` | ``estimate``
    #: (:mod:`dltsched.engine.sim.lengths`); ``length_error`` is the log-normal sigma of ``estimate``
    lengths: Lengths = "known"
    length_error: float = 0.5
    #: profiling on arrival (:mod:`dltsched.engine.sim.profiling`); ``None``: policies see predictions only
    profiling: ProfilingConfig | None = None

    def __post_init__(self) -> None:
        if self.max_wall_s is not None and not (isinstance(self.max_wall_s, int | float)
                                                and self.max_wall_s > 0
                                                and math.isfinite(self.max_wall_s)):
            raise ValidationError("max_wall_s", f"{self.max_wall_s!r} not understood; seconds > 0")
        if self.lengths not in LENGTH_MODES:
            raise ValidationError("lengths",
                                  f"{self.lengths!r} not understood; one of {', '.join(LENGTH_MODES)}")
        if not (isinstance(self.length_error, int | float) and math.isfinite(self.length_error)
                and 0.0 <= self.length_error <= 5.0):
            raise ValidationError("length_error", f"{self.length_error!r} not understood; a number in [0, 5]")


@dataclass(frozen=True, slots=True)
class ProfilingConfig:
    """Profiling on arrival: after ``profile_s`` seconds of progress on a GPU type a job's isolated step time,
    peak memory and GPU utilisation there are measured (log-normal noise of sigma ``noise``), and so are the
    speeds of a co-located group after ``profile_s`` seconds together. ``all_types``: besides, every job is
    measured alone on each GPU type of the cluster at its GPU count, ``profile_s`` per type one after another
    from its arrival, on GPUs set aside for profiling (as Gavel and Sia profile jobs on each type)."""

    profile_s: float = 300.0
    noise: float = 0.03
    all_types: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.profile_s, int | float) and math.isfinite(self.profile_s)
                and self.profile_s >= 0):
            raise ValidationError("profile_s", f"{self.profile_s!r} not understood; seconds >= 0")
        if not (isinstance(self.noise, int | float) and math.isfinite(self.noise)
                and 0.0 <= self.noise <= 1.0):
            raise ValidationError("profile_noise", f"{self.noise!r} not understood; a number in [0, 1]")



class RunSetup(Protocol):
    """What a run is of (:class:`dltsched.engine.sim.simulator.Simulator` is one): read-only here."""

    @property
    def instance(self) -> Instance:
        """The cluster and workload being simulated."""

    @property
    def policy(self) -> Policy:
        """The scheduling policy."""

    @property
    def truth(self) -> GroundTruth:
        """The ground truth that advances jobs."""

    @property
    def config(self) -> SimulationConfig:
        """The simulation's settings."""

    @property
    def store(self) -> Any:
        """Where checkpoints go (a ``RunStore``); ``None`` for none."""

    @property
    def on_round(self) -> Callable[[float, int], None] | None:
        """Called after each round with the simulated time (s) and the round's number; ``None`` for none."""

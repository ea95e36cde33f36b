"""Seeded node failures and restarts.

Each node alternates up and down periods: up for an exponential time with mean ``mtbf_s`` (mean time
between failures), then down for an exponential time with mean ``mttr_s`` (mean time to repair). The
k-th cycle of node n draws from its own generator seeded by ``(seed, n, k)``, so the schedule is
identical however far a run has got, which keeps resumed simulations on the same trajectory.
Jobs on a failing node lose the progress made since their last checkpoint (taken every
``checkpoint_interval_s`` of running time, and whenever they are preempted) and return to the queue.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from dltsched.engine.domain.errors import ValidationError


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """Failure process parameters (all in seconds)."""

    mtbf_s: float = 7 * 24 * 3600.0
    mttr_s: float = 1800.0
    checkpoint_interval_s: float = 1800.0

    def __post_init__(self) -> None:
        for name in ("mtbf_s", "mttr_s", "checkpoint_interval_s"):
            value = getattr(self, name)
            if not value > 0 or not math.isfinite(value):
                raise ValidationError(f"faults.{name}",
                                      f"{value!r} not understood; must be a finite number > 0")


@dataclass(slots=True)
class FaultSchedule:
    """Lazily drawn up/down periods of every node (see module docstring)."""

    config: FaultConfig
    seed: int
    num_nodes: int
    start_s: float = 0.0
    cycle: list[int] = field(default_factory=list)
    #: (fail_at_s, back_at_s) of each node's current cycle
    window: list[tuple[float, float]] = field(default_factory=list)
    down: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        if not self.cycle:
            self.cycle = [0] * self.num_nodes
            self.window = [self._draw(n, 0, self.start_s) for n in range(self.num_nodes)]

    def _draw(self, node: int, k: int, from_s: float) -> tuple[float, float]:
        rng = random.Random(f"{self.seed}/{node}/{k}")
        fail = from_s + rng.expovariate(1.0 / self.config.mtbf_s)
        return fail, fail + rng.expovariate(1.0 / self.config.mttr_s)

    def upcoming(self) -> float:
        """Time of the next failure (of an up node) or repair (of a down node)."""
        return min((back if n in self.down else fail for n, (fail, back) in enumerate(self.window)),
                   default=math.inf)

    def step(self, now_s: float) -> tuple[list[int], list[int]]:
        """Advance to ``now_s``; return (nodes that failed, nodes that came back)."""
        failed, repaired = [], []
        for n in range(self.num_nodes):
            fail, back = self.window[n]
            if n in self.down and now_s >= back:
                self.down.discard(n)
                repaired.append(n)
                self.cycle[n] += 1
                self.window[n] = self._draw(n, self.cycle[n], back)
                fail, back = self.window[n]
            if n not in self.down and now_s >= fail:
                self.down.add(n)
                failed.append(n)
        return failed, repaired

    def state_dict(self) -> dict[str, object]:
        """The schedule's position as plain JSON data (for checkpoints).

        Returns
        -------
        dict[str, object]
            Cycle position, open down windows (start, end in seconds) and nodes down now.
        """
        return {"cycle": list(self.cycle), "window": [list(w) for w in self.window],
                "down": sorted(self.down)}

    def load_state_dict(self, data: dict[str, list]) -> None:  # type: ignore[type-arg]
        """Restore a position written by :meth:`state_dict`.

        Parameters
        ----------
        data
            What :meth:`state_dict` returned.
        """
        self.cycle = [int(c) for c in data["cycle"]]
        self.window = [(float(a), float(b)) for a, b in data["window"]]
        self.down = {int(n) for n in data["down"]}

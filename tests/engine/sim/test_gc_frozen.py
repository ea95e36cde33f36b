"""A run leaves long-lived objects out of the garbage collector's full passes, and frees its garbage."""

from __future__ import annotations

import gc
import weakref
from dataclasses import dataclass, field

from dltsched.engine.domain.model import Cluster, ClusterState, Instance, Job, Node, Plan
from dltsched.engine.policies.greedy import FifoPolicy
from dltsched.engine.sim.simulator import simulate
from dltsched.engine.sim.truth import MeasuredTruth

TRUTH = MeasuredTruth(use_measurements=False)


class _Node:
    """An object that can be part of a reference cycle (and be the target of a weak reference)."""

    def __init__(self) -> None:
        self.other: _Node | None = None


@dataclass
class Probe(FifoPolicy):
    """FIFO that, at each round, keeps one object, drops one cycle and runs a full collection, noting
    whether the collector froze what survived and freed the cycle."""

    kept: list[object] = field(default_factory=list)
    frozen_grew: list[bool] = field(default_factory=list)
    cycles_freed: list[bool] = field(default_factory=list)
    callbacks: list[int] = field(default_factory=list)

    def schedule(self, state: ClusterState) -> Plan:
        self.kept.append([object() for _ in range(10)])
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        dead = weakref.ref(a)
        del a, b
        before = gc.get_freeze_count()
        gc.collect()
        self.cycles_freed.append(dead() is None)
        self.frozen_grew.append(gc.get_freeze_count() > before)
        self.callbacks.append(len(gc.callbacks))
        return super().schedule(state)


def test_survivors_of_a_full_collection_are_frozen_and_cycles_still_freed_then_all_restored() -> None:
    inst = Instance("four", Cluster((Node("v0", "v100", 2),)),
                    tuple(Job(f"j{i}", "resnet18", 32, 200, arrival_time_s=60.0 * i) for i in range(4)))
    frozen_before, callbacks_before = gc.get_freeze_count(), list(gc.callbacks)
    probe = Probe()
    result = simulate(inst, probe, truth=TRUTH)
    assert result.num_jobs_finished == len(inst.jobs)
    assert probe.frozen_grew and all(probe.frozen_grew), "a full collection in a run froze nothing"
    assert all(probe.cycles_freed), "a cycle dropped in a run outlived a full collection"
    assert all(n == len(callbacks_before) + 1 for n in probe.callbacks), "no collector callback in the run"
    assert gc.callbacks == callbacks_before, "the run left its collector callback behind"
    assert gc.get_freeze_count() == frozen_before == 0, "the run left objects frozen"

"""Arrival settings of a simulated workload.

``batch``: every job of the window arrives at time 0, the batch setting in which ISACPP (IEEE TPDS 36(8),
2025) reports makespan: what matters is when the last job finishes, not how long each waited.
"""

from __future__ import annotations

from dataclasses import replace

from dltsched.engine.domain.model import Instance


def batch_arrivals(instance: Instance) -> Instance:
    """``instance`` with every job arriving at time 0 (arrival-ordered policies such as FIFO then take them in
    job-id order, the simulator's tie-break)."""
    jobs = instance.jobs
    return replace(instance, name=f"{instance.name}-batch",
                   jobs=tuple(replace(j, arrival_time_s=0.0) for j in jobs),
                   metadata={**instance.metadata, "arrivals": "batch"})

"""Reference step times that turn trace durations into iterations (and back).

A trace says how long a job ran; an instance needs its work in iterations. Readers and the
generator divide the duration by the job's isolated step time on a reference GPU type, taken from
the simulator's own ground truth (:class:`~dltsched.engine.sim.truth.MeasuredTruth`: Gavel's measured
steps/s where present, its analytic fallback elsewhere), so a job simulated alone on the reference
GPU runs about as long as it did in the trace.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from dltsched.engine.domain.model import Job
from dltsched.engine.sim.truth import MeasuredTruth
from dltsched.instances.datadir import find_data_dir


@dataclass(frozen=True, slots=True)
class ReferenceStepTime:
    """Isolated step time on one GPU type; ``source`` says where the numbers come from."""

    truth: MeasuredTruth
    source: str

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None) -> float:
        n = job.num_gpus if num_gpus is None else num_gpus
        return self.truth.step_time_s(job, gpu_type, n, 1 if n <= 8 else (n + 7) // 8)


def reference_step_time(data_dir: str | os.PathLike[str] | None = None) -> ReferenceStepTime:
    """Gavel-measured step times when the data folder is found, else the analytic fallback."""
    base = find_data_dir(data_dir, required=False)
    if base is None:
        return ReferenceStepTime(MeasuredTruth(use_measurements=False), "analytic fallback (no data folder)")
    return ReferenceStepTime(
        MeasuredTruth(data_dir=str(base)), "gavel measured (simulation_throughputs.json)"
    )

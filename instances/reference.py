"""Reference step times that turn trace durations into iterations (and back).

A trace says how long a job ran; an instance needs its work in iterations. Readers and the
generator divide the duration by the job's isolated step time on a reference GPU type, taken from
a ground truth (:class:`~dltsched.engine.domain.protocols.GroundTruth`). By default it is the one the
engine registers, the simulator's own (:class:`~dltsched.engine.sim.truth.MeasuredTruth`: Gavel's
measured steps/s where present, its analytic fallback elsewhere), so a job simulated alone on the
reference GPU runs about as long as it did in the trace; this module takes it through the protocol
and does not import the simulator.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from dltsched.engine.domain.model import Job
from dltsched.engine.domain.protocols import GroundTruth, GroundTruthFactory, ground_truth_factory
from dltsched.instances.datadir import find_data_dir


@dataclass(frozen=True, slots=True)
class ReferenceStepTime:
    """Isolated step time on one GPU type; ``source`` says where the numbers come from.

    Parameters
    ----------
    truth
        The ground truth the step times come from.
    source
        Where its numbers come from, in words (recorded in instance metadata).
    """

    truth: GroundTruth
    source: str

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None) -> float:
        """The isolated step time of ``job`` on ``gpu_type``.

        Parameters
        ----------
        job
            The job.
        gpu_type
            The GPU type.
        num_gpus
            The GPU count (default: the job's); more than 8 spread over nodes of 8.

        Returns
        -------
        float
            Seconds per iteration.
        """
        n = job.num_gpus if num_gpus is None else num_gpus
        return self.truth.step_time_s(job, gpu_type, n, 1 if n <= 8 else (n + 7) // 8)


def reference_step_time(data_dir: str | os.PathLike[str] | None = None, *,
                        truth: GroundTruthFactory | None = None) -> ReferenceStepTime:
    """Measured step times: the data folder's when one is found, else the package's copy of Gavel's table.

    Parameters
    ----------
    data_dir
        The data folder (default: found automatically; none found: the packaged Gavel table).
    truth
        Builds the ground truth from the folder (``None`` when there is none); default: the registered
        one (:func:`~dltsched.engine.domain.protocols.ground_truth_factory`, the simulator's).

    Returns
    -------
    ReferenceStepTime
        The step times and their source.

    Raises
    ------
    LookupError
        When no ``truth`` is given and none is registered.
    """
    make = truth if truth is not None else ground_truth_factory()
    base = find_data_dir(data_dir, required=False)
    if base is None:
        return ReferenceStepTime(make(None), "gavel measured (packaged copy)")
    return ReferenceStepTime(make(str(base)), "gavel measured (simulation_throughputs.json)")

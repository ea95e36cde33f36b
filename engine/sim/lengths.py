"""What policies are told about a job's length (``SimulationConfig.lengths``).

``known`` (the default): every policy sees each job's true total iterations and remaining work, as the
published schedulers that assume it (SJF, Gavel's JCT policies, ISACPP) do.

``unknown``: the setting Tiresias assumes (Gu et al., NSDI 2019). A policy sees no job's true length: the
snapshot's :class:`~dltsched.engine.domain.model.Job` carries an estimated ``total_iterations`` (and no
``duration_hint_s``), and ``remaining_iterations`` is the estimate minus the work done. The estimate is a
prior that learns from attained service: it starts at the median total iterations of the instance's jobs (what
an operator knows from the cluster's history, never the job's own length) and doubles whenever the work done
reaches half of it, so a job that has run long is expected to run as long again (the heavy-tailed prior
behind least-attained-service; the doubling mirrors Tiresias' exponentially spaced queues and changes a job's
estimate a logarithmic number of times).

``estimate``: the user states a length, off by a log-normal factor ``exp(length_error * z)``, z ~ N(0, 1)
drawn per job from the seed and the job id (median-unbiased; ``length_error`` 0.5 puts a third of the
estimates more than 1.65x off). A job that outruns its estimate gets it doubled until it exceeds the work
done.

The true length still drives the simulation (the ground truth); only the snapshots change. Estimates are a
function of the seed, the job and its remaining work, so a resumed run rebuilds them without saved state.
"""

from __future__ import annotations

import math
from dataclasses import replace
from statistics import median
from typing import Literal

from dltsched.engine.domain.hashing import hash_normal
from dltsched.engine.domain.model import Job

Lengths = Literal["known", "unknown", "estimate"]
LENGTH_MODES: tuple[str, ...] = ("known", "unknown", "estimate")


class LengthEstimates:
    """The lengths policies see under ``unknown`` or ``estimate`` (see module docstring)."""

    __slots__ = ("mode", "error", "seed", "prior", "_views")

    def __init__(self, mode: Lengths, error: float, seed: int, jobs: tuple[Job, ...]) -> None:
        self.mode = mode
        self.error = error
        self.seed = seed
        self.prior = float(median(j.total_iterations for j in jobs)) if jobs else 1.0
        #: job id -> (the job it was made from, estimated total, the job as policies see it)
        self._views: dict[str, tuple[Job, float, Job]] = {}

    def initial_total(self, job: Job) -> float:
        """The estimated total iterations before the job has run."""
        if self.mode == "unknown":
            return self.prior
        return job.total_iterations * math.exp(self.error * hash_normal(f"length|{self.seed}|{job.id}"))

    def estimate(self, job: Job, remaining: float) -> tuple[float, float]:
        """(estimated remaining iterations, estimated total) of ``job`` with ``remaining`` true iterations
        left."""
        done = job.total_iterations - remaining
        floor = 2.0 * done if self.mode == "unknown" else done
        total = self.initial_total(job)
        while total <= floor:
            total *= 2.0
        return total - done, total

    def visible(self, job: Job, remaining: float) -> tuple[Job, float]:
        """The job as policies see it (estimated total, no duration hint) and its estimated remaining work."""
        left, total = self.estimate(job, remaining)
        hit = self._views.get(job.id)
        if hit is None or hit[0] is not job or hit[1] != total:
            hit = self._views[job.id] = (job, total,
                                         replace(job, total_iterations=total, duration_hint_s=None))
        return hit[2], left

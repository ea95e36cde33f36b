"""Controlled prediction error, to measure how schedule quality degrades when predictions are wrong.

:func:`with_prediction_error` wraps a predictor bundle so that every predicted step time and every
predicted co-located speed is multiplied by ``exp(error * z)``, ``z ~ N(0, 1)``, drawn once per
(job, GPU type) - or per (group, GPU type) for speeds - from a generator keyed by ``seed``. The same job
always gets the same error (a biased predictor, as in production), so ``error = 0.2`` means predictions
about 20% off, in either direction. Memory and frozen penalties are left exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.hashing import hash_normal
from dltsched.engine.domain.model import Job
from dltsched.engine.domain.predictors import ColocationPredictor, Predictors, StepTimePredictor


def _factor(error: float, seed: int, *keys: str) -> float:
    return math.exp(error * hash_normal("|".join((str(seed), *keys))))


@dataclass(frozen=True, slots=True)
class NoisyStepTime:
    """Step times off by a fixed log-normal factor per (job, GPU type)."""

    base: StepTimePredictor
    error: float
    seed: int = 0

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None, *,
                    freeze_level: int = 0, num_nodes: int = 1) -> float:
        """Seconds per iteration: the base's times a seeded error factor (the
        :class:`~dltsched.engine.domain.predictors.StepTimePredictor` protocol)."""
        exact = self.base.step_time_s(job, gpu_type, num_gpus, freeze_level=freeze_level, num_nodes=num_nodes)
        return exact * _factor(self.error, self.seed, "step", job.id, gpu_type)

    def memory_mib(self, job: Job, gpu_type: str, *, freeze_level: int = 0) -> float:
        """Peak GPU memory of one worker, MiB: the base's, unchanged (the
        :class:`~dltsched.engine.domain.predictors.StepTimePredictor` protocol)."""
        return self.base.memory_mib(job, gpu_type, freeze_level=freeze_level)


@dataclass(frozen=True, slots=True)
class NoisyColocation:
    """Co-located speeds off by a fixed log-normal factor per (job, partners, GPU type), capped at 1."""

    base: ColocationPredictor
    error: float
    seed: int = 0

    def colocated_speeds(self, jobs: Sequence[Job], gpu_type: str) -> tuple[float, ...]:
        """Co-located speeds relative to running alone: the base's times a seeded error, at most 1 (the
        :class:`~dltsched.engine.domain.predictors.ColocationPredictor` protocol)."""
        exact = self.base.colocated_speeds(jobs, gpu_type)
        group = ",".join(sorted(j.id for j in jobs))
        return tuple(min(1.0, s * _factor(self.error, self.seed, "speed", j.id, group, gpu_type))
                     for j, s in zip(jobs, exact, strict=True))

    def group_memory_mib(self, jobs: Sequence[Job], gpu_type: str) -> float:
        """The group's GPU memory, MiB: the base's, unchanged (the
        :class:`~dltsched.engine.domain.predictors.ColocationPredictor` protocol)."""
        return self.base.group_memory_mib(jobs, gpu_type)


def with_prediction_error(predictors: Predictors, error: float, seed: int = 0) -> Predictors:
    """``predictors`` with step-time and co-location predictions off by ``error`` (see module docstring)."""
    if not 0.0 <= error <= 2.0 or not math.isfinite(error):
        raise ValidationError("prediction_error",
                              f"{error!r} not understood; must be in [0, 2] (0.2 = about 20%)")
    if error == 0.0:
        return predictors
    return replace(predictors, step_time=NoisyStepTime(predictors.step_time, error, seed),
                   colocation=NoisyColocation(predictors.colocation, error, seed))

"""The predictor bundle that uses profiles: :func:`profiled` (see :mod:`dltsched.engine.domain.profiles`)."""

from __future__ import annotations

from collections.abc import Sequence

from dltsched.engine.domain.model import Job
from dltsched.engine.domain.predictors import ColocationPredictor, Predictors, StepTimePredictor
from dltsched.engine.domain.profiles import IsolatedProfile, current_profiles


def _isolated(job: Job, gpu_type: str) -> IsolatedProfile | None:
    book = current_profiles()
    return None if book is None else book.isolated(job.id, gpu_type)


class _ProfiledStepTime:
    def __init__(self, inner: StepTimePredictor) -> None:
        self.inner = inner

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None, *,
                    freeze_level: int = 0, num_nodes: int = 1) -> float:
        predicted: float = self.inner.step_time_s(job, gpu_type, num_gpus, freeze_level=freeze_level,
                                                  num_nodes=num_nodes)
        p = _isolated(job, gpu_type)
        if p is None:
            return predicted
        at_profile: float = self.inner.step_time_s(job, gpu_type, p.num_gpus, num_nodes=p.num_nodes)
        measured: float = p.step_time_s
        return predicted * measured / at_profile

    def memory_mib(self, job: Job, gpu_type: str, *, freeze_level: int = 0) -> float:
        predicted: float = self.inner.memory_mib(job, gpu_type, freeze_level=freeze_level)
        p = _isolated(job, gpu_type)
        if p is None:
            return predicted
        measured: float = p.memory_mib
        if freeze_level == 0:
            return measured
        unfrozen: float = self.inner.memory_mib(job, gpu_type)
        return predicted * measured / unfrozen


class _ProfiledColocation:
    def __init__(self, inner: ColocationPredictor) -> None:
        self.inner = inner

    def colocated_speeds(self, jobs: Sequence[Job], gpu_type: str) -> tuple[float, ...]:
        book = current_profiles()
        if book is not None and len(jobs) > 1:
            hit: tuple[float, ...] | None = book.colocated([j.id for j in jobs], gpu_type)
            if hit is not None:
                return hit
        return tuple(self.inner.colocated_speeds(jobs, gpu_type))

    def group_memory_mib(self, jobs: Sequence[Job], gpu_type: str) -> float:
        memory_mib: float = self.inner.group_memory_mib(jobs, gpu_type)
        return memory_mib


def profiled(predictors: Predictors) -> Predictors:
    """``predictors`` using the current run's profiles where they exist (see the module docstring).

    Parameters
    ----------
    predictors
        The bundle asked for everything no profile answers.

    Returns
    -------
    Predictors
        The same protocols, answering from :func:`~dltsched.engine.domain.profiles.current_profiles` first.
    """
    return Predictors(_ProfiledStepTime(predictors.step_time), _ProfiledColocation(predictors.colocation),
                      predictors.freezing)

"""Exact predictions: a predictor bundle that reads the simulator's ground truth (for "with exact predictions"
experiments only; a real scheduler never sees the truth)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dltsched.engine.domain.model import Job
from dltsched.engine.domain.predictors import FreezingPredictor, Predictors
from dltsched.engine.sim.truth import GroundTruth


@dataclass(frozen=True, slots=True)
class _TruthStepTime:
    truth: GroundTruth

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None, *, freeze_level: int = 0,
                    num_nodes: int = 1) -> float:
        return self.truth.step_time_s(job, gpu_type, num_gpus or job.num_gpus, num_nodes, freeze_level)

    def memory_mib(self, job: Job, gpu_type: str, *, freeze_level: int = 0) -> float:
        return self.truth.memory_mib(job, gpu_type, freeze_level)


@dataclass(frozen=True, slots=True)
class _TruthColocation:
    truth: GroundTruth

    def colocated_speeds(self, jobs: Sequence[Job], gpu_type: str) -> tuple[float, ...]:
        return self.truth.colocated_speeds(jobs, gpu_type)

    def group_memory_mib(self, jobs: Sequence[Job], gpu_type: str) -> float:
        return sum(self.truth.memory_mib(j, gpu_type) for j in jobs)


def _freezing_of(truth: Any) -> FreezingPredictor:
    while not hasattr(truth, "freezing"):
        truth = truth.base
    return truth.freezing  # type: ignore[no-any-return]


def exact_predictors(truth: GroundTruth) -> Predictors:
    """Predictors that answer with ``truth`` (step time, memory, co-located speeds, frozen penalty)."""
    return Predictors(_TruthStepTime(truth), _TruthColocation(truth), _freezing_of(truth))


__all__ = ["exact_predictors"]

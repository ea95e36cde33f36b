"""Tiresias-style discretized two-dimensional least-attained-service (2D-LAS), preemptive.

Follows Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep Learning", NSDI'19: a job's
priority is its attained service in GPU-seconds (GPUs x time run), discretized into queues by
``thresholds_gpu_s``; within a queue jobs are served first come, first served. Every round (events plus a
lease of ``round_interval_s``) the jobs are taken in priority order and admitted while GPUs of a type
they fit on remain; admitted running jobs keep their GPUs, the rest are preempted. A job that waited
longer than ``starvation_factor`` times its last run time returns to the top queue (the paper's
STARVELIMIT promotion).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from dltsched.engine.domain import Assignment, ClusterState, JobState, Plan
from dltsched.engine.policies.placement import Estimates, GpuPool
from dltsched.engine.predict import Predictors, default_predictors


@dataclass
class TiresiasPolicy:
    """Discretized 2D-LAS with preemption (see module docstring)."""

    predictors: Predictors = field(default_factory=default_predictors)
    thresholds_gpu_s: tuple[float, ...] = (3600.0, 36000.0)
    starvation_factor: float = 8.0
    name: str = "tiresias"
    round_interval_s: float | None = 300.0

    def __post_init__(self) -> None:
        self._est = Estimates(self.predictors)

    def queue_of(self, s: JobState, now_s: float) -> int:
        waited = now_s - s.queued_since_s
        ran = s.attained_service_s / s.job.num_gpus
        if s.assignment is None and ran > 0 and waited > self.starvation_factor * ran:
            return 0
        return bisect.bisect_right(self.thresholds_gpu_s, s.attained_service_s)

    def schedule(self, state: ClusterState) -> Plan:
        order = sorted(state.jobs, key=lambda s: (self.queue_of(s, state.time_s), s.job.arrival_time_s, s.job.id))
        free = state.available_by_type()
        admitted: list[tuple[JobState, str]] = []
        for s in order:
            types = self._est.candidate_types(s.job, state.cluster)
            if s.assignment is not None:
                current = state.cluster.gpu_type_of(s.assignment.gpus[0])
                types = [current] + [t for t in types if t != current]
            for t in types:
                if free.get(t, 0) >= s.job.num_gpus:
                    free[t] -= s.job.num_gpus
                    admitted.append((s, t))
                    break
        pool = GpuPool.empty(state)
        placed: list[Assignment] = []
        for s, t in admitted:  # running jobs keep their GPUs when they stay on the same type
            a = s.assignment
            if a is not None and state.cluster.gpu_type_of(a.gpus[0]) == t and pool.are_free(a.gpus):
                pool.occupy(s.job.id, a.gpus)
                placed.append(a)
        kept = {a.job_id for a in placed}
        for s, t in admitted:
            if s.job.id in kept:
                continue
            gpus = pool.take_free(s.job, t)
            if gpus is not None:
                pool.occupy(s.job.id, gpus)
                placed.append(Assignment(s.job.id, gpus))
        return Plan(tuple(placed))

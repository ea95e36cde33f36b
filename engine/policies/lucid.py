"""Lucid-style interference-aware packing.

Follows Hu et al., "Lucid: A Non-intrusive, Scalable and Interpretable Scheduler for Deep Learning
Training Jobs", ASPLOS'23: every job gets an interference-sensitivity class from its predicted mean
co-located speed against a reference set of partners (class 2 if < 0.85, 1 if < 0.95, else 0: Lucid's own
thresholds); queued jobs are served shortest-predicted-first on free GPUs, and when none are free a
single-GPU job is packed with a running single-GPU job only if their classes sum to at most
``max_class_sum`` and the pair fits in memory, preferring the partner of the lowest class. Non-preemptive.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dltsched.engine.domain.model import Assignment, ClusterState, Job, Plan
from dltsched.engine.domain.predictors import Predictors
from dltsched.engine.policies.placement import Estimates, GpuPool
from dltsched.predictors import available_predictors

#: reference partners for the sensitivity classes (Gavel's models at common batch sizes)
_REFERENCE = (("resnet18", 64), ("resnet50", 32), ("transformer", 64), ("lstm_lm", 20), ("recoder", 1024))


@dataclass
class LucidPolicy:
    """Interference-class packing with shortest-first service (see module docstring)."""

    predictors: Predictors = field(default_factory=available_predictors)
    max_class_sum: int = 2
    memory_margin: float = 0.9
    name: str = "lucid"
    round_interval_s: float | None = None
    max_jobs_per_gpu: int = 2

    def __post_init__(self) -> None:
        self._est = Estimates(self.predictors)
        self._class: dict[tuple[str, str], int] = {}

    def sensitivity_class(self, job: Job, gpu_type: str) -> int:
        key = (job.id, gpu_type)
        if key not in self._class:
            speeds = [self.predictors.colocation.colocated_speeds([job, Job("_ref", m, b, 1)], gpu_type)[0]
                      for m, b in _REFERENCE]
            mean = sum(speeds) / len(speeds)
            self._class[key] = 2 if mean < 0.85 else 1 if mean < 0.95 else 0
        return self._class[key]

    def schedule(self, state: ClusterState) -> Plan:
        jobs = {s.job.id: s.job for s in state.jobs}
        pool = GpuPool.empty(state)
        placed: list[Assignment] = []
        for s in state.running():
            assert s.assignment is not None
            pool.occupy(s.job.id, s.assignment.gpus)
            placed.append(s.assignment)

        def remaining_s(job_id: str, remaining: float) -> float:
            types = self._est.candidate_types(jobs[job_id], state.cluster)
            return remaining * self._est.step_time_s(jobs[job_id], types[0]) if types else float("inf")

        order = sorted(state.queued(), key=lambda s: (remaining_s(s.job.id, s.remaining_iterations),
                                                      s.job.arrival_time_s, s.job.id))
        for s in order:
            gpus = None
            for gtype in self._est.candidate_types(s.job, state.cluster):
                gpus = pool.take_free(s.job, gtype)
                if gpus is not None:
                    break
            if gpus is None and s.job.num_gpus == 1:
                gpus = self._partner_gpu(s.job, pool, jobs, state)
            if gpus is not None:
                pool.occupy(s.job.id, gpus)
                placed.append(Assignment(s.job.id, gpus))
        return Plan(tuple(placed))

    def _partner_gpu(self, job: Job, pool: GpuPool, jobs: dict[str, Job], state: ClusterState) -> tuple[int, ...] | None:
        best: tuple[int, int] | None = None
        for g in range(state.cluster.num_gpus):
            on = pool.jobs_on[g]
            if len(on) != 1 or jobs[on[0]].num_gpus != 1:
                continue
            gtype = state.cluster.gpu_type_of(g)
            if job.gpu_types and gtype not in job.gpu_types:
                continue
            partner = jobs[on[0]]
            classes = self.sensitivity_class(job, gtype) + self.sensitivity_class(partner, gtype)
            if classes > self.max_class_sum:
                continue
            cap = state.cluster.gpu_types[gtype].memory_mib * self.memory_margin
            if self._est.memory_mib(job, gtype) + self._est.memory_mib(partner, gtype) > cap:
                continue
            if best is None or classes < best[0]:
                best = (classes, g)
        return None if best is None else (best[1],)

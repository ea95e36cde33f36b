"""Gandiva-style greedy packing: exclusive GPUs while they last, then co-location when memory fits.

Follows Xiao et al., "Gandiva: Introspective Cluster Scheduling for Deep Learning", OSDI'18, in the
parts that matter for throughput: queued jobs (arrival order) start on free GPUs; when none are free, a
job is packed onto GPUs that hold fewer than ``max_jobs_per_gpu`` jobs, if the group fits in memory
(with a ``memory_margin``) and the predicted sum of normalized speeds exceeds 1 (packing helps; Gandiva's
introspection). When GPUs free up, packed jobs migrate to them (Gandiva's unpacking by migration).
Non-preemptive otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dltsched.engine.domain import Assignment, ClusterState, Job, JobState, Plan
from dltsched.engine.policies.placement import Estimates, GpuPool
from dltsched.engine.predict import Predictors, default_predictors


@dataclass
class GandivaPolicy:
    """Greedy packing with introspection and unpacking (see module docstring)."""

    predictors: Predictors = field(default_factory=default_predictors)
    max_jobs_per_gpu: int = 2
    memory_margin: float = 0.9
    name: str = "gandiva"
    round_interval_s: float | None = None

    def __post_init__(self) -> None:
        self._est = Estimates(self.predictors)

    def _pack_gain(self, job: Job, gpus: tuple[int, ...], pool: GpuPool, jobs: dict[str, Job], gtype: str) -> float:
        """Predicted speed sum minus the number of groups on these GPUs (> 0: packing helps)."""
        worst = float("inf")
        for g in gpus:
            group = [jobs[j] for j in pool.jobs_on[g]] + [job]
            speeds = self.predictors.colocation.colocated_speeds(group, gtype)
            worst = min(worst, sum(speeds) - 1.0)
        return worst

    def _fits(self, job: Job, gpus: tuple[int, ...], pool: GpuPool, jobs: dict[str, Job], gtype: str) -> bool:
        cap = pool.cluster.gpu_types[gtype].memory_mib * self.memory_margin
        for g in gpus:
            used = sum(self._est.memory_mib(jobs[j], gtype) for j in pool.jobs_on[g])
            if used + self._est.memory_mib(job, gtype) > cap or len(pool.jobs_on[g]) >= self.max_jobs_per_gpu:
                return False
        return True

    def _pack(self, s: JobState, pool: GpuPool, jobs: dict[str, Job], state: ClusterState) -> tuple[int, ...] | None:
        best: tuple[float, tuple[int, ...]] | None = None
        for gtype in self._est.candidate_types(s.job, state.cluster):
            shared = [g for g in range(state.cluster.num_gpus)
                      if state.cluster.gpu_type_of(g) == gtype and 0 < len(pool.jobs_on[g]) < self.max_jobs_per_gpu]
            if s.job.num_gpus > 1:
                continue  # gang jobs are not packed: one slow worker would stall the whole gang
            for g in shared:
                gpus = (g,)
                if not self._fits(s.job, gpus, pool, jobs, gtype):
                    continue
                gain = self._pack_gain(s.job, gpus, pool, jobs, gtype)
                if gain > 0 and (best is None or gain > best[0]):
                    best = (gain, gpus)
        return None if best is None else best[1]

    def schedule(self, state: ClusterState) -> Plan:
        jobs = {s.job.id: s.job for s in state.jobs}
        pool = GpuPool.empty(state)
        placed: dict[str, Assignment] = {}
        for s in state.running():
            assert s.assignment is not None
            pool.occupy(s.job.id, s.assignment.gpus)
            placed[s.job.id] = s.assignment
        self._unpack(state, pool, placed)
        for s in state.queued():
            gpus = None
            for gtype in self._est.candidate_types(s.job, state.cluster):
                gpus = pool.take_free(s.job, gtype)
                if gpus is not None:
                    break
            if gpus is None:
                gpus = self._pack(s, pool, jobs, state)
            if gpus is not None:
                pool.occupy(s.job.id, gpus)
                placed[s.job.id] = Assignment(s.job.id, gpus)
        return Plan(tuple(placed.values()))

    def _unpack(self, state: ClusterState, pool: GpuPool, placed: dict[str, Assignment]) -> None:
        """Move the later of two packed single-GPU jobs to a free GPU of the same type."""
        for g in range(state.cluster.num_gpus):
            if len(pool.jobs_on[g]) < 2:
                continue
            mover = pool.jobs_on[g][-1]
            job = next(s.job for s in state.jobs if s.job.id == mover)
            if job.num_gpus != 1:
                continue
            target = pool.take_free(job, state.cluster.gpu_type_of(g))
            if target is None:
                continue
            pool.jobs_on[g].remove(mover)
            pool.occupy(mover, target)
            placed[mover] = Assignment(mover, target, placed[mover].freeze_level)

"""ISACPP-style greedy placement by predicted multi-stage interference.

Follows the scheduling rule of ISACPP (IEEE TPDS 36(8), 2025): each queued job (arrival order) goes to the
GPU where it adds the least predicted job-time, computed with the multi-stage interference model
(:func:`dltsched.formulations.interference.simulate_stages`): the jobs on a GPU share it in stages between
successive completions, survivors speeding up as others finish. The added job-time of placing job j on
GPU g is ``sum(completion times with j) - sum(completion times without j)``, which counts j's own run time
on g's type (so faster types win) and the slowdown it inflicts. A job is only co-located when the
predicted speeds of the group sum to at least 1 (no throughput lost) and the group fits in memory.
Multi-GPU jobs take free GPUs only (a gang runs at its slowest worker). Non-preemptive.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from dltsched.engine.domain.model import Assignment, ClusterState, Job, JobState, Plan
from dltsched.engine.domain.predictors import Predictors, memoized
from dltsched.engine.policies.placement import Estimates, GpuPool
from dltsched.predictors import available_predictors


@dataclass
class IsacppPolicy:
    """Minimum multi-stage interference placement (see module docstring).

    Parameters
    ----------
    predictors
        What the policy may know of jobs (step time, memory, co-location, freezing predictions).
    max_jobs_per_gpu
        Jobs sharing one GPU at most.
    memory_margin
        Share of a GPU's memory a packing may fill.
    name
        The policy's name in results.
    round_interval_s
        A round at least this often, seconds (``None``: on arrivals and completions only).
    """

    predictors: Predictors = field(default_factory=available_predictors)
    max_jobs_per_gpu: int = 2
    memory_margin: float = 0.9
    name: str = "isacpp"
    round_interval_s: float | None = None

    def __post_init__(self) -> None:
        self._asked = memoized(self.predictors)  # rounds ask about the same jobs again and again
        self._est = Estimates(self._asked)

    def _job_time(self, group: list[tuple[Job, float]], gpu_type: str) -> float:
        """Sum of predicted completion times of ``(job, remaining iterations)`` sharing one GPU."""
        from dltsched.formulations.pipeline import simulate_stages

        if not group:
            return 0.0
        jobs = [j for j, _ in group]
        rates = [1.0 / self._est.step_time_s(j, gpu_type) for j in jobs]

        def speeds(active: tuple[int, ...]) -> tuple[float, ...]:
            return tuple(self._asked.colocation.colocated_speeds([jobs[i] for i in active], gpu_type))

        return sum(simulate_stages([w for _, w in group], rates, speeds).completion_s)

    def _shared_ok(self, group: list[Job], gpu_type: str, cap_mib: float) -> bool:
        if sum(self._est.memory_mib(j, gpu_type) for j in group) > cap_mib * self.memory_margin:
            return False
        return sum(self._asked.colocation.colocated_speeds(group, gpu_type)) >= 1.0

    def _best_gpu(self, s: JobState, pool: GpuPool, residents: dict[str, float], jobs: dict[str, Job],
                  state: ClusterState, shared: _SharedGpus) -> tuple[int, ...] | None:
        cluster = state.cluster
        best: tuple[float, tuple[int, ...]] | None = None
        types = self._est.candidate_types(s.job, cluster)
        for gtype in types:  # an empty GPU of each type, evaluated once
            gpus = pool.take_free(s.job, gtype)
            if gpus is not None:
                added = self._job_time([(s.job, s.remaining_iterations)], gtype)
                if best is None or added < best[0]:
                    best = (added, gpus)
        if s.job.num_gpus > 1:
            return None if best is None else best[1]
        seen: dict[tuple[str, tuple[str, ...]], float] = {}
        for g in shared.open:  # ascending: ties go to the lowest GPU, as a scan over every GPU would
            gtype = shared.types[g]
            if gtype not in types:
                continue
            on = pool.jobs_on[g]
            key = (gtype, tuple(on))
            if key not in seen:
                group = [jobs[j] for j in on] + [s.job]
                if not self._shared_ok(group, gtype, cluster.gpu_types[gtype].memory_mib):
                    seen[key] = float("inf")
                else:
                    before = shared.before.get(key)
                    if before is None:
                        before = shared.before[key] = self._job_time([(jobs[j], residents[j]) for j in on],
                                                                     gtype)
                    seen[key] = self._job_time([*((jobs[j], residents[j]) for j in on),
                                                (s.job, s.remaining_iterations)], gtype) - before
            if best is None or seen[key] < best[0]:
                best = (seen[key], (g,))
        return None if best is None or best[0] == float("inf") else best[1]

    def schedule(self, state: ClusterState) -> Plan:
        """The plan of one round: every placement: running jobs stay, each queued job on the GPUs where the
        predicted interference is least."""
        jobs = {s.job.id: s.job for s in state.jobs}
        residents = {s.job.id: s.remaining_iterations for s in state.jobs}
        pool = GpuPool.empty(state)
        placed: list[Assignment] = []
        for s in state.running():
            assert s.assignment is not None
            pool.occupy(s.job.id, s.assignment.gpus)
            placed.append(s.assignment)
        shared = _SharedGpus.of(state, pool, jobs, self.max_jobs_per_gpu)
        for s in state.queued():
            gpus = self._best_gpu(s, pool, residents, jobs, state, shared)
            if gpus is not None:
                pool.occupy(s.job.id, gpus)
                placed.append(Assignment(s.job.id, gpus))
                shared.update(gpus, pool, jobs, self.max_jobs_per_gpu)
        return Plan(tuple(placed))


@dataclass
class _SharedGpus:
    """One round's GPUs a single-GPU job could join (holding 1 to ``max_jobs_per_gpu - 1`` single-GPU jobs),
    ascending, kept up to date as jobs are placed, with each GPU's type and the predicted job-time of the
    groups already met (a group's residents do not change within a round)."""

    types: list[str]
    open: list[int]
    before: dict[tuple[str, tuple[str, ...]], float] = field(default_factory=dict)

    @staticmethod
    def _joinable(g: int, pool: GpuPool, jobs: dict[str, Job], max_jobs: int) -> bool:
        on = pool.jobs_on.get(g)
        return bool(on) and len(on) < max_jobs and all(jobs[j].num_gpus == 1 for j in on)

    @classmethod
    def of(cls, state: ClusterState, pool: GpuPool, jobs: dict[str, Job], max_jobs: int) -> _SharedGpus:
        cluster = state.cluster
        types = [cluster.gpu_type_of(g) for g in range(cluster.num_gpus)]
        return cls(types, [g for g in sorted(pool.jobs_on) if cls._joinable(g, pool, jobs, max_jobs)])

    def update(self, gpus: tuple[int, ...], pool: GpuPool, jobs: dict[str, Job], max_jobs: int) -> None:
        for g in gpus:
            i = bisect.bisect_left(self.open, g)
            listed = i < len(self.open) and self.open[i] == g
            joinable = self._joinable(g, pool, jobs, max_jobs)
            if listed and not joinable:
                del self.open[i]
            elif joinable and not listed:
                self.open.insert(i, g)

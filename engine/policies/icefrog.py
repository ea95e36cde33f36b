"""IceFrog-style greedy scheduling with layer freezing.

Follows the scheduling side of IceFrog (IEEE TPDS 36(6), 2025): jobs whose owners allow freezing run with
the freeze level that maximizes *effective progress* = layer-aware throughput x (1 - frozen penalty),
within their accuracy budget, re-chosen every round as training progresses (later freezing costs less
accuracy). Jobs are served shortest-predicted-remaining-time first on exclusive GPUs with backfilling;
freezing also lowers memory, so a job that does not fit unfrozen may fit frozen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dltsched.engine.domain.model import Assignment, ClusterState, Job, JobState, Plan
from dltsched.engine.domain.predictors import Predictors, learned_memory_mib
from dltsched.engine.policies.placement import Estimates, GpuPool
from dltsched.predictors import available_predictors


@dataclass
class IceFrogPolicy:
    """Greedy SJF with per-job freeze levels chosen for effective progress (see module docstring).

    Parameters
    ----------
    predictors
        What the policy may know of jobs (step time, memory, co-location, freezing predictions).
    max_freeze_levels
        Freeze levels tried per job (``None``: all the freezing predictor offers).
    name
        The policy's name in results.
    round_interval_s
        A round at least this often, seconds (``None``: on arrivals and completions only).
    """

    predictors: Predictors = field(default_factory=available_predictors)
    max_freeze_levels: int | None = None
    name: str = "icefrog"
    round_interval_s: float | None = 1800.0

    def __post_init__(self) -> None:
        self._est = Estimates(self.predictors)
        self._memo: dict[tuple[str, str, int], tuple[float, float]] = {}

    def _levels(self, job: Job) -> range:
        if not job.freeze_allowed:
            return range(1)
        n = self.predictors.freezing.num_freeze_levels(job)
        return range(n if self.max_freeze_levels is None else min(n, self.max_freeze_levels))

    def _cost(self, job: Job, gpu_type: str, level: int) -> tuple[float, float]:
        """(step time, memory) at a freeze level, memoized."""
        key = (job.id, gpu_type, level)
        if key not in self._memo:
            st = self.predictors.step_time
            self._memo[key] = (st.step_time_s(job, gpu_type, freeze_level=level),
                               st.memory_mib(job, gpu_type, freeze_level=level))
        step, memory = self._memo[key]
        return step, learned_memory_mib(memory, job, gpu_type, level) * job.gpu_fraction

    def best_level(self, s: JobState, gpu_type: str, memory_cap_mib: float) -> tuple[int, float] | None:
        """Freeze level with the highest effective progress rate that fits, and that rate.

        Parameters
        ----------
        s
            The job.
        gpu_type
            The GPU type.
        memory_cap_mib
            The memory the job may use per GPU, MiB.

        Returns
        -------
        tuple of (int, float) or None
            The level and its rate (iterations per second times one minus the accuracy penalty); ``None`` when
            no level fits within the memory and the job's accuracy budget.
        """
        best: tuple[int, float] | None = None
        for level in self._levels(s.job):
            step, mem = self._cost(s.job, gpu_type, level)
            if mem > memory_cap_mib:
                continue
            penalty = self.predictors.freezing.frozen_penalty(s.job, level, s.progress) if level else 0.0
            if penalty > s.job.accuracy_budget and level:
                continue
            rate = (1.0 - penalty) / step
            if best is None or rate > best[1]:
                best = (level, rate)
        return best

    def _choice(self, s: JobState, state: ClusterState) -> list[tuple[float, str, int]]:
        """(predicted remaining time, type, level) per usable GPU type, best first."""
        by_type = state.cluster.gpus_by_type()
        out = []
        for t in s.job.gpu_types or tuple(by_type):
            if by_type.get(t, 0) < s.job.num_gpus:
                continue
            best = self.best_level(s, t, state.cluster.gpu_types[t].memory_mib)
            if best is not None:
                out.append((s.remaining_iterations / best[1], t, best[0]))
        return sorted(out)

    def schedule(self, state: ClusterState) -> Plan:
        """The plan of one round: every placement, each with its freeze level."""
        pool = GpuPool.empty(state)
        placed: list[Assignment] = []
        for s in state.running():
            a = s.assignment
            assert a is not None
            pool.occupy(s.job.id, a.gpus)
            gtype = state.cluster.gpu_type_of(a.gpus[0])
            best = self.best_level(s, gtype, state.cluster.gpu_types[gtype].memory_mib)
            level = best[0] if best is not None else a.freeze_level
            placed.append(Assignment(a.job_id, a.gpus, level))
        queued = [(self._choice(s, state), s) for s in state.queued()]
        queued.sort(key=lambda cs: (cs[0][0][0] if cs[0] else float("inf"), cs[1].job.arrival_time_s,
                                    cs[1].job.id))
        for choices, s in queued:
            for _remaining, gtype, level in choices:
                gpus = pool.take_free(s.job, gtype)
                if gpus is not None:
                    pool.occupy(s.job.id, gpus)
                    placed.append(Assignment(s.job.id, gpus, level))
                    break
        return Plan(tuple(placed))

"""Tiresias-style discretized two-dimensional least-attained-service (2D-LAS), preemptive.

Follows Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep Learning", NSDI'19: a job's
priority is its attained service in GPU-seconds (GPUs x time run), discretized into queues by
``thresholds_gpu_s``; within a queue jobs are served first come, first served. Every round (events plus a
lease of ``round_interval_s``) the jobs are taken in priority order and admitted while GPUs of a type
they fit on remain; admitted running jobs keep their GPUs, the rest are preempted. A job that waited
longer than ``starvation_factor`` times its last run time returns to the top queue (the paper's
STARVELIMIT promotion).

Cost of a round: priorities change only at known instants (a running job's attained service reaching a
threshold, a waiting job's promotion), so a round in which nothing happened since the last one (same
placements, same queue, no such instant passed, last plan changed nothing) keeps the plan in O(1) plus a
comparison of placements; other rounds are O(active jobs), starting from the free GPUs.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dltsched.engine.domain import Assignment, ClusterState, JobState, Plan
from dltsched.engine.policies.placement import Estimates, GpuPool
from dltsched.engine.predict import Predictors, default_predictors


@dataclass(frozen=True, slots=True)
class _Seen:
    """What the last round saw and decided: enough to tell that nothing has changed since."""

    cluster_id: int
    time_s: float
    queue: Sequence[JobState]
    placements: Mapping[str, Assignment]
    down: frozenset[int]
    next_change_s: float


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
        self._seen: _Seen | None = None

    def queue_of(self, s: JobState, now_s: float) -> int:
        waited = now_s - s.queued_since_s
        ran = s.attained_service_s / s.job.num_gpus
        if s.assignment is None and ran > 0 and waited > self.starvation_factor * ran:
            return 0
        return bisect.bisect_right(self.thresholds_gpu_s, s.attained_service_s)

    def _changes_at_s(self, s: JobState, level: int, now_s: float) -> float:
        """When ``s``'s queue can next change if nothing else happens: its attained service reaching the
        next threshold (running), or its starvation promotion (waiting)."""
        if s.assignment is not None:
            if level >= len(self.thresholds_gpu_s):
                return math.inf
            return now_s + (self.thresholds_gpu_s[level] - s.attained_service_s) / len(s.assignment.gpus)
        ran = s.attained_service_s / s.job.num_gpus
        if level == 0 or ran <= 0:
            return math.inf
        return s.queued_since_s + self.starvation_factor * ran

    def _unchanged(self, state: ClusterState) -> bool:
        """Nothing happened since the last round, whose plan changed nothing: the same plan holds."""
        seen = self._seen
        if seen is None or seen.cluster_id != id(state.cluster) or state.time_s < seen.time_s:
            return False
        margin = 1e-9 * max(1.0, abs(seen.next_change_s))  # decide afresh on (or near) a change instant
        return (state.time_s < seen.next_change_s - margin and state.down_gpus == seen.down
                and state.queued() is seen.queue and state.placements_by_id() == seen.placements)

    def _starts_without_contention(self, state: ClusterState) -> Plan | None:
        """When every waiting job fits on its first-choice GPU type in the free GPUs, the priority order
        cannot matter: every running job keeps its GPUs (its current type comes first and keeps room)
        and the waiting jobs start in priority order. ``None`` when that does not hold."""
        queued = state.queued()
        if not queued:
            return Plan(incremental=True)
        pool = GpuPool.current(state)
        placements = state.placements_by_id()
        busy = sum(len(a.gpus) for a in placements.values())
        if busy != state.cluster.num_gpus - len(state.down_gpus) - sum(pool.free_by_type.values()):
            return None  # jobs share GPUs: counts of GPUs and of jobs' GPUs differ; decide in full
        need = dict.fromkeys(pool.free_by_type, 0)
        first: list[tuple[tuple[int, float, str], JobState, str]] = []
        now = state.time_s
        for s in queued:
            types = self._est.candidate_types(s.job, state.cluster)
            if not types:
                return None
            need[types[0]] += s.job.num_gpus
            if need[types[0]] > pool.free_by_type[types[0]]:
                return None
            first.append(((self.queue_of(s, now), s.job.arrival_time_s, s.job.id), s, types[0]))
        starts = []
        for _, s, t in sorted(first, key=lambda x: x[0]):
            gpus = pool.take_free(s.job, t)
            assert gpus is not None  # counted above
            pool.occupy(s.job.id, gpus)
            starts.append(Assignment(s.job.id, gpus))
        return Plan(tuple(starts), incremental=True)

    def schedule(self, state: ClusterState) -> Plan:
        if self._unchanged(state):
            return Plan(incremental=True)
        quick = self._starts_without_contention(state)
        if quick is not None:
            self._seen = None
            return quick
        now = state.time_s
        keyed = sorted(((self.queue_of(s, now), s.job.arrival_time_s, s.job.id), s) for s in state.jobs)
        free = state.available_by_type()
        admitted: list[tuple[JobState, str]] = []
        next_change = math.inf
        for (level, _, _), s in keyed:
            next_change = min(next_change, self._changes_at_s(s, level, now))
            types = self._est.candidate_types(s.job, state.cluster)
            if s.assignment is not None:
                current = state.cluster.gpu_type_of(s.assignment.gpus[0])
                types = [current] + [t for t in types if t != current]
            for t in types:
                if free.get(t, 0) >= s.job.num_gpus:
                    free[t] -= s.job.num_gpus
                    admitted.append((s, t))
                    break
        placed = self._place(state, admitted)
        unchanged = placed == state.placements_by_id()
        self._seen = _Seen(id(state.cluster), now, state.queued(), placed, state.down_gpus,
                           next_change if unchanged else -math.inf)
        return Plan(tuple(placed.values()))

    def _place(self, state: ClusterState, admitted: list[tuple[JobState, str]]) -> dict[str, Assignment]:
        """Admitted running jobs keep their GPUs when they stay on the same type; the others (and the
        admitted waiting jobs) take free GPUs, in priority order."""
        placed: dict[str, Assignment] = {}
        claimed: set[int] = set()
        for s, t in admitted:
            a = s.assignment
            if a is not None and state.cluster.gpu_type_of(a.gpus[0]) == t and claimed.isdisjoint(a.gpus):
                placed[s.job.id] = a
                claimed.update(a.gpus)
        pool = GpuPool.current(state)
        for job_id, a in state.placements_by_id().items():
            if job_id not in placed:  # stopped or moved: its GPUs are free unless a kept job shares them
                pool.release(g for g in a.gpus if g not in claimed and g not in state.down_gpus)
        for s, t in admitted:
            if s.job.id in placed:
                continue
            gpus = pool.take_free(s.job, t)
            if gpus is not None:
                pool.occupy(s.job.id, gpus)
                placed[s.job.id] = Assignment(s.job.id, gpus)
        return placed

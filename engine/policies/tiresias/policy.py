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
comparison of placements, and a round in which every waiting job fits on free GPUs starts them without
ranking anyone. Other rounds use an index kept across rounds
(:class:`~dltsched.engine.policies.tiresias.index.AttainedServiceIndex`): waiting jobs grouped by
what admission reads of them (GPU count, GPU types by preference) and queue, in arrival order; running jobs
per GPU type in priority order, with the GPUs held from each position on. The admission walk then visits
only the waiting jobs it admits (and, per group, the first it does not: no later one fits either) and the
running jobs that lose their GPUs; the others keep theirs in bulk. Queue changes come from heaps of the
instants they happen at, and a running job's attained service is read only near a threshold. Such a round
costs O((changes + groups) log jobs), plus passes over the placements at C speed.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from dltsched.engine.domain.model import Assignment, Cluster, ClusterState, Job, JobState, Plan
from dltsched.engine.domain.predictors import Predictors, memory_observations_version
from dltsched.engine.policies.placement import Estimates, GpuPool
from dltsched.engine.policies.tiresias.index import AttainedServiceIndex
from dltsched.engine.policies.tiresias.queues import RunningLine
from dltsched.predictors import available_predictors

#: the plan of a round that changes nothing (plans are immutable: one serves every such round)
_KEEP = Plan(incremental=True)


@dataclass(frozen=True, slots=True)
class LastRound:
    """What the last full round saw and decided: enough to tell that nothing has changed since.

    Parameters
    ----------
    cluster_id
        ``id`` of the round's cluster.
    time_s
        The round's instant.
    queue
        The round's queue (compared by identity).
    placements
        The placements the round decided.
    down
        The GPUs down at the round.
    next_change_s
        The first instant a job's queue changes if nothing else happens; ``-inf`` when the round's plan
        changed something (the next round decides afresh).
    """

    cluster_id: int
    time_s: float
    queue: Sequence[JobState]
    placements: Mapping[str, Assignment]
    down: frozenset[int]
    next_change_s: float


@dataclass
class TiresiasPolicy:
    """Discretized 2D-LAS with preemption (see module docstring).

    Parameters
    ----------
    predictors
        What the policy may know of jobs (memory and speed estimates decide the GPU types a job fits on).
    thresholds_gpu_s
        Attained-service queue limits in GPU-seconds, ascending.
    starvation_factor
        A waiting job that waited longer than this many times its last run time returns to the top queue.
    name
        The policy's name in results.
    round_interval_s
        The lease: a round at least this often (``None``: on events only).
    indexed
        Full rounds walk the index kept across rounds (``True``) or rank every job directly (``False``: the
        reference the index is checked against; same plans, slower).
    """

    predictors: Predictors = field(default_factory=available_predictors)
    thresholds_gpu_s: tuple[float, ...] = (3600.0, 36000.0)
    starvation_factor: float = 8.0
    name: str = "tiresias"
    round_interval_s: float | None = 300.0
    indexed: bool = True

    def __post_init__(self) -> None:
        self._est = Estimates(self.predictors)
        self._seen: LastRound | None = None
        self._compared: tuple[LastRound | None, Mapping[str, Assignment] | None, bool] = (None, None, False)
        self._index: AttainedServiceIndex | None = None
        self._memory_seen = 0  # memory_observations_version() when the index was built

    @property
    def last_round(self) -> LastRound | None:
        """What the last full round saw and decided (``None`` after a round that was not a full one)."""
        return self._seen

    def queue_of(self, s: JobState, now_s: float) -> int:
        """The queue ``s`` is in at ``now_s``.

        Parameters
        ----------
        s
            The job.
        now_s
            The instant.

        Returns
        -------
        int
            0 for a waiting job that starved (the top queue), else the number of thresholds its attained
            service reached.
        """
        waited = now_s - s.queued_since_s
        ran = s.attained_service_s / s.job.num_gpus
        if s.assignment is None and ran > 0 and waited > self.starvation_factor * ran:
            return 0
        return bisect.bisect_right(self.thresholds_gpu_s, s.attained_service_s)

    def changes_at_s(self, s: JobState, level: int, now_s: float) -> float:
        """When ``s``'s queue can next change if nothing else happens.

        Parameters
        ----------
        s
            The job.
        level
            Its queue at ``now_s`` (:meth:`queue_of`).
        now_s
            The instant.

        Returns
        -------
        float
            Its attained service reaching the next threshold (running), or its starvation promotion
            (waiting); ``inf`` when neither can happen.
        """
        if s.assignment is not None:
            if level >= len(self.thresholds_gpu_s):
                return math.inf
            return now_s + (self.thresholds_gpu_s[level] - s.attained_service_s) / len(s.assignment.gpus)
        ran = s.attained_service_s / s.job.num_gpus
        if level == 0 or ran <= 0:
            return math.inf
        return s.queued_since_s + self.starvation_factor * ran

    def candidate_types(self, job: Job, cluster: Cluster) -> Sequence[str]:
        """The GPU types ``job`` fits on, fastest first.

        Parameters
        ----------
        job
            The job.
        cluster
            The cluster.

        Returns
        -------
        Sequence of str
            The types, by the policy's estimates.
        """
        return self._est.candidate_types(job, cluster)

    def _unchanged(self, state: ClusterState) -> bool:
        """Nothing happened since the last round, whose plan changed nothing: the same plan holds."""
        seen = self._seen
        if seen is None or seen.cluster_id != id(state.cluster) or state.time_s < seen.time_s:
            return False
        margin = 1e-9 * max(1.0, abs(seen.next_change_s))  # decide afresh on (or near) a change instant
        if not (state.time_s < seen.next_change_s - margin and state.down_gpus == seen.down
                and state.queued() is seen.queue):
            return False
        placements = state.placements_by_id()  # a simulator reuses the mapping while placements do not change
        if self._compared[0] is not seen or self._compared[1] is not placements:
            self._compared = (seen, placements, placements == seen.placements)
        return self._compared[2]

    def _starts_without_contention(self, state: ClusterState, pool: GpuPool, exclusive: bool) -> Plan | None:
        """When every waiting job fits on its first-choice GPU type in the free GPUs (``pool``, which this
        takes from when it returns a plan), the priority order cannot matter: every running job keeps its
        GPUs (its current type comes first and keeps room) and the waiting jobs start in priority order.
        ``None`` when that does not hold."""
        queued = state.queued()
        if not exclusive:
            return None  # jobs share GPUs: decide in full
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
            # started, or crashed out of memory: look again at the next full round
            if self._index is not None:
                self._index.touched[s.job.id] = s.job.arrival_time_s
        return Plan(tuple(starts), incremental=True)

    def schedule(self, state: ClusterState) -> Plan:
        """The plan of one round: incremental (the starts only) when every running job keeps its GPUs, else
        every placement."""
        if (seen := memory_observations_version()) != self._memory_seen:  # a crash measured real memory:
            self._memory_seen = seen  # the GPU types jobs fit on may have changed, so index and judge afresh
            self._index, self._seen = None, None
        if self._unchanged(state):
            return _KEEP
        if not state.queued():
            self._seen = None
            return _KEEP
        pool = GpuPool.current(state)
        exclusive = state.gpus_exclusive()
        quick = self._starts_without_contention(state, pool, exclusive)
        if quick is not None:
            self._seen = None
            return quick
        placed, next_change, starts = self._full_round(state, pool, exclusive)
        unchanged = starts == () if starts is not None else placed == state.placements_by_id()
        self._seen = LastRound(id(state.cluster), state.time_s, state.queued(), placed, state.down_gpus,
                               next_change if unchanged else -math.inf)
        if starts is not None:  # every running job keeps its GPUs: the same plan, listing only the starts
            return Plan(starts, incremental=True)
        return Plan(tuple(placed.values()))

    # -- full rounds ----------------------------------------------------------------------------------

    def _full_round(self, state: ClusterState, pool: GpuPool,
                    exclusive: bool) -> tuple[dict[str, Assignment], float, tuple[Assignment, ...] | None]:
        """The placements of a round that ranks the jobs, the next instant a queue changes, and the starts
        when every running job keeps its GPUs (``None`` otherwise)."""
        if exclusive and self.indexed:
            return self._decide(state, pool)
        self._index = None  # jobs share GPUs (not a state this policy makes): rank every job directly
        return *self.decide_directly(state), None

    def _decide(self, state: ClusterState,
                pool: GpuPool) -> tuple[dict[str, Assignment], float, tuple[Assignment, ...] | None]:
        """:meth:`_full_round` from the index. Admitted running jobs keep their GPUs; the others' GPUs are
        freed and the admitted jobs without GPUs take free ones, in priority order."""
        progress = state.running_states()  # a full round reads the running jobs' attained service (lazily)
        idx = self._indexed(state, progress)
        next_change = min(idx.promote(state.time_s), idx.cross(progress, state.time_s))
        displaced, starts = idx.admit(state)
        placements = state.placements_by_id()
        placed = placements.copy() if isinstance(placements, MappingProxyType) else dict(placements)
        for job_id in displaced:
            pool.release(g for g in placements[job_id].gpus if g not in state.down_gpus)
            del placed[job_id]
            idx.touched[job_id] = idx.running[job_id].key[1]
        new: list[Assignment] = []
        for job, t in starts:
            gpus = pool.take_free(job, t)
            if gpus is not None:
                pool.occupy(job.id, gpus)
                placed[job.id] = Assignment(job.id, gpus)
                new.append(placed[job.id])
            idx.touched[job.id] = job.arrival_time_s
        return placed, next_change, None if displaced else tuple(new)

    def _indexed(self, state: ClusterState, progress: Mapping[str, JobState]) -> AttainedServiceIndex:
        """The index brought up to ``state`` (built afresh when there is none for this cluster and time, or
        when jobs started or stopped other than by this policy's plans)."""
        idx = self._index
        fresh = idx is None or not idx.serves(state)
        while True:
            if fresh or idx is None:
                idx = self._index = AttainedServiceIndex(self, id(state.cluster),
                                                         len(self.thresholds_gpu_s) + 1, state.time_s)
                idx.lines = {t: RunningLine() for t in state.cluster.gpu_types}
            if idx.refresh(state, progress, fresh=fresh):
                return idx
            self._index, fresh = None, True  # jobs started or stopped other than by this policy's plans

    def decide_directly(self, state: ClusterState) -> tuple[dict[str, Assignment], float]:
        """A full round from the snapshot alone (for states whose jobs share GPUs): every job ranked.

        Parameters
        ----------
        state
            The snapshot of the cluster and its jobs.

        Returns
        -------
        placements : dict of str to Assignment
            The placements the round decides, by job id.
        next_change_s : float
            The first instant a job's queue changes if nothing else happens.
        """
        now = state.time_s
        keyed = sorted(((self.queue_of(s, now), s.job.arrival_time_s, s.job.id), s) for s in state.jobs)
        free = state.available_by_type()
        admitted: list[tuple[JobState, str]] = []
        next_change = math.inf
        for (level, _, _), s in keyed:
            next_change = min(next_change, self.changes_at_s(s, level, now))
            types = self._est.candidate_types(s.job, state.cluster)
            if s.assignment is not None:
                current = state.cluster.gpu_type_of(s.assignment.gpus[0])
                types = [current] + [t for t in types if t != current]
            for t in types:
                if free.get(t, 0) >= s.job.num_gpus:
                    free[t] -= s.job.num_gpus
                    admitted.append((s, t))
                    break
        placed: dict[str, Assignment] = {}
        claimed: set[int] = set()
        for s, t in admitted:  # admitted running jobs keep their GPUs unless a kept job holds them
            a = s.assignment
            if a is not None and state.cluster.gpu_type_of(a.gpus[0]) == t and claimed.isdisjoint(a.gpus):
                placed[s.job.id] = a
                claimed.update(a.gpus)
        pool = GpuPool.current(state)
        for job_id, a in state.placements_by_id().items():
            if job_id not in placed:  # stopped or moved: its GPUs are free unless a kept job shares them
                pool.release(g for g in a.gpus if g not in claimed and g not in state.down_gpus)
        for s, t in admitted:
            if s.job.id not in placed and (gpus := pool.take_free(s.job, t)) is not None:
                pool.occupy(s.job.id, gpus)
                placed[s.job.id] = Assignment(s.job.id, gpus)
        return placed, next_change


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
ranking anyone. Other rounds use an index kept across rounds (:class:`_Index`): waiting jobs grouped by
what admission reads of them (GPU count, GPU types by preference) and queue, in arrival order; running jobs
per GPU type in priority order, with the GPUs held from each position on. The admission walk then visits
only the waiting jobs it admits (and, per group, the first it does not: no later one fits either) and the
running jobs that lose their GPUs; the others keep theirs in bulk. Queue changes come from heaps of the
instants they happen at, and a running job's attained service is read only near a threshold. Such a round
costs O((changes + groups) log jobs), plus passes over the placements at C speed.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, count
from operator import sub
from types import MappingProxyType

from dltsched.engine.domain.model import Assignment, ClusterState, Job, JobState, Plan
from dltsched.engine.domain.predictors import Predictors, memory_observations_version
from dltsched.engine.policies.placement import Estimates, GpuPool
from dltsched.predictors import available_predictors

#: a job's priority: (queue, arrival, id), smallest first
_Key = tuple[int, float, str]
#: what admission reads of a waiting job: its GPU count and the GPU types it fits on, fastest first
_Group = tuple[int, tuple[str, ...]]


def _arrival_key(s: JobState) -> tuple[float, str]:
    return s.job.arrival_time_s, s.job.id


@dataclass(frozen=True, slots=True)
class _Seen:
    """What the last round saw and decided: enough to tell that nothing has changed since."""

    cluster_id: int
    time_s: float
    queue: Sequence[JobState]
    placements: Mapping[str, Assignment]
    down: frozenset[int]
    next_change_s: float


@dataclass(slots=True)
class _Waiting:
    state: JobState
    group: _Group
    level: int
    promote_at_s: float  # the starvation promotion instant, inf when none is pending


@dataclass(slots=True)
class _Running:
    job_id: str
    assignment: Assignment
    gpu_type: str
    key: _Key
    crossing_s: float  # when the attained service reaches the next threshold (as of the last read); inf at the top


@dataclass(slots=True)
class _Line:
    """The running jobs on one GPU type in priority order, with ``-(GPUs held from position i on)``."""

    keys: list[_Key] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    _neg_from: list[int] | None = None

    def add(self, key: _Key, n: int) -> None:
        i = bisect.bisect_left(self.keys, key)
        self.keys.insert(i, key)
        self.gpus.insert(i, n)
        self._neg_from = None

    def remove(self, key: _Key) -> None:
        i = bisect.bisect_left(self.keys, key)
        del self.keys[i], self.gpus[i]
        self._neg_from = None

    def neg_from(self) -> list[int]:
        if self._neg_from is None:
            neg = list(accumulate(reversed(self.gpus), sub, initial=0))
            neg.reverse()
            self._neg_from = neg
        return self._neg_from

    def total(self) -> int:
        return -self.neg_from()[0]

    def after(self, key: _Key) -> int:
        """GPUs held by the jobs after ``key``."""
        return -self.neg_from()[bisect.bisect_right(self.keys, key)]

    def first_short(self, key: _Key | None, deficit: int) -> int | None:
        """Position of the first job after ``key`` (from the start: ``None``) that no longer fits when its type
        is ``deficit`` GPUs short: the jobs after it hold fewer than ``deficit`` GPUs."""
        neg = self.neg_from()
        lo = 0 if key is None else bisect.bisect_right(self.keys, key)
        j = bisect.bisect_right(neg, -deficit, lo=lo + 1) - 1
        return j if j < len(self.keys) else None


@dataclass
class _Index:
    """The jobs as of the last full round, brought up to date at the next one (see module docstring).

    Between full rounds, only plans (which record the jobs they start or stop in ``touched``), arrivals,
    completions and node failures change where jobs are: the jobs to look at again are ``touched``, the
    queue's arrivals after ``last_key`` and the running jobs that finished or lost their node since (those
    indexed as running that no longer run). A state sequence in which jobs start or stop otherwise (not the
    simulator's) is caught by counts, and the index is built afresh."""

    cluster_id: int
    levels: int
    time_s: float
    waiting: dict[str, _Waiting] = field(default_factory=dict)
    #: per group, per queue: the waiting jobs' (arrival, id), ascending
    groups: dict[_Group, list[list[tuple[float, str]]]] = field(default_factory=dict)
    promotions: list[tuple[float, float, str]] = field(default_factory=list)  # heap of (instant, arrival, id)
    running: dict[str, _Running] = field(default_factory=dict)
    lines: dict[str, _Line] = field(default_factory=dict)
    crossings: list[tuple[float, int, _Running]] = field(default_factory=list)  # heap of (instant, seq, job)
    #: jobs to look at again (started or stopped since the last full round): their arrival instants
    touched: dict[str, float] = field(default_factory=dict)
    last_key: tuple[float, str] = (-math.inf, "")
    seq: count = field(default_factory=count)

    def drop(self, job_id: str) -> None:
        w = self.waiting.pop(job_id, None)
        if w is not None:
            lists = self.groups[w.group]
            del lists[w.level][bisect.bisect_left(lists[w.level], (w.state.job.arrival_time_s, job_id))]
            if not any(lists):
                del self.groups[w.group]
        r = self.running.pop(job_id, None)
        if r is not None:
            self.lines[r.gpu_type].remove(r.key)

    def move(self, w: _Waiting, level: int) -> None:
        key = (w.state.job.arrival_time_s, w.state.job.id)
        lists = self.groups[w.group]
        del lists[w.level][bisect.bisect_left(lists[w.level], key)]
        bisect.insort(lists[level], key)
        w.level = level


@dataclass
class TiresiasPolicy:
    """Discretized 2D-LAS with preemption (see module docstring)."""

    predictors: Predictors = field(default_factory=available_predictors)
    thresholds_gpu_s: tuple[float, ...] = (3600.0, 36000.0)
    starvation_factor: float = 8.0
    name: str = "tiresias"
    round_interval_s: float | None = 300.0

    def __post_init__(self) -> None:
        self._est = Estimates(self.predictors)
        self._seen: _Seen | None = None
        self._compared: tuple[_Seen | None, Mapping[str, Assignment] | None, bool] = (None, None, False)
        self._index: _Index | None = None
        self._memory_seen = 0  # memory_observations_version() when the index was built

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
            if self._index is not None:  # started, or crashed out of memory: look again at the next full round
                self._index.touched[s.job.id] = s.job.arrival_time_s
        return Plan(tuple(starts), incremental=True)

    def schedule(self, state: ClusterState) -> Plan:
        if (seen := memory_observations_version()) != self._memory_seen:  # a crash measured real memory:
            self._memory_seen = seen  # the GPU types jobs fit on may have changed, so index and judge afresh
            self._index, self._seen = None, None
        if self._unchanged(state):
            return Plan(incremental=True)
        if not state.queued():
            self._seen = None
            return Plan(incremental=True)
        pool = GpuPool.current(state)
        exclusive = state.gpus_exclusive()
        quick = self._starts_without_contention(state, pool, exclusive)
        if quick is not None:
            self._seen = None
            return quick
        placed, next_change, starts = self._full_round(state, pool, exclusive)
        unchanged = starts == () if starts is not None else placed == state.placements_by_id()
        self._seen = _Seen(id(state.cluster), state.time_s, state.queued(), placed, state.down_gpus,
                           next_change if unchanged else -math.inf)
        if starts is not None:  # every running job keeps its GPUs: the same plan, listing only the starts
            return Plan(starts, incremental=True)
        return Plan(tuple(placed.values()))

    # -- full rounds ----------------------------------------------------------------------------------

    def _full_round(self, state: ClusterState, pool: GpuPool,
                    exclusive: bool) -> tuple[dict[str, Assignment], float, tuple[Assignment, ...] | None]:
        """The placements of a round that ranks the jobs, the next instant a queue changes, and the starts
        when every running job keeps its GPUs (``None`` otherwise)."""
        if exclusive:
            return self._decide(state, pool)
        self._index = None  # jobs share GPUs (not a state this policy makes): rank every job directly
        return *self._decide_directly(state), None

    def _decide(self, state: ClusterState,
                pool: GpuPool) -> tuple[dict[str, Assignment], float, tuple[Assignment, ...] | None]:
        """:meth:`_full_round` from the index. Admitted running jobs keep their GPUs; the others' GPUs are
        freed and the admitted jobs without GPUs take free ones, in priority order."""
        progress = state.running_states()  # a full round reads the running jobs' attained service (lazily)
        idx = self._refresh(state, progress)
        next_change = min(self._promote(idx, state.time_s), self._cross(idx, progress, state.time_s))
        displaced, starts = self._admit(idx, state)
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

    def _refresh(self, state: ClusterState, progress: Mapping[str, JobState]) -> _Index:
        """The index brought up to ``state``: the jobs started, stopped, arrived or finished since the last
        full round are looked up again (every job when there is no index for this cluster and time)."""
        now, queue, placements = state.time_s, state.queued(), state.placements_by_id()
        running_jobs = state.running_jobs_by_id()
        idx = self._index
        if idx is None or idx.cluster_id != id(state.cluster) or now < idx.time_s:
            idx = self._index = _Index(id(state.cluster), len(self.thresholds_gpu_s) + 1, now)
            idx.lines = {t: _Line() for t in state.cluster.gpu_types}
            look = {s.job.id: s.job.arrival_time_s for s in queue}
            look.update((j, job.arrival_time_s) for j, job in running_jobs.items())
        else:
            look = idx.touched
            arrived = queue[bisect.bisect_right(queue, idx.last_key, key=_arrival_key):]
            look.update((s.job.id, s.job.arrival_time_s) for s in arrived)

        def resolve(job_id: str, arrival_s: float) -> None:
            asg = placements.get(job_id)
            if asg is not None:
                r = idx.running.get(job_id)
                if r is None or r.assignment is not asg:
                    idx.drop(job_id)
                    self._add_running(idx, progress[job_id], state)
                return
            i = bisect.bisect_left(queue, (arrival_s, job_id), key=_arrival_key)
            if i < len(queue) and queue[i].job.id == job_id:
                w = idx.waiting.get(job_id)
                if w is None or w.state is not queue[i]:
                    idx.drop(job_id)
                    self._add_waiting(idx, queue[i], state)
            else:
                idx.drop(job_id)  # finished

        for job_id, arrival in look.items():
            resolve(job_id, arrival)
        if idx.running.keys() != placements.keys():  # jobs finished or lost their node since
            for job_id in idx.running.keys() - placements.keys():
                resolve(job_id, idx.running[job_id].key[1])
        if idx.running.keys() != placements.keys() or len(idx.waiting) != len(queue):
            self._index = None  # jobs started or stopped other than by this policy's plans: index afresh
            return self._refresh(state, progress)
        idx.touched, idx.time_s = {}, now
        if queue:
            idx.last_key = max(idx.last_key, _arrival_key(queue[-1]))
        return idx

    def _add_waiting(self, idx: _Index, s: JobState, state: ClusterState) -> None:
        group = (s.job.num_gpus, tuple(self._est.candidate_types(s.job, state.cluster)))
        level = self.queue_of(s, state.time_s)
        w = idx.waiting[s.job.id] = _Waiting(s, group, level, self._changes_at_s(s, level, state.time_s))
        lists = idx.groups.get(group)
        if lists is None:
            lists = idx.groups[group] = [[] for _ in range(idx.levels)]
        bisect.insort(lists[level], (s.job.arrival_time_s, s.job.id))
        if w.promote_at_s < math.inf:
            heapq.heappush(idx.promotions, (w.promote_at_s, s.job.arrival_time_s, s.job.id))

    def _add_running(self, idx: _Index, s: JobState, state: ClusterState) -> None:
        assert s.assignment is not None
        level = self.queue_of(s, state.time_s)
        r = _Running(s.job.id, s.assignment, state.cluster.gpu_type_of(s.assignment.gpus[0]),
                     (level, s.job.arrival_time_s, s.job.id), self._changes_at_s(s, level, state.time_s))
        idx.running[r.job_id] = r
        idx.lines[r.gpu_type].add(r.key, len(r.assignment.gpus))
        if r.crossing_s < math.inf:
            heapq.heappush(idx.crossings, (r.crossing_s, next(idx.seq), r))

    def _promote(self, idx: _Index, now_s: float) -> float:
        """Waiting jobs that starved until ``now_s`` move to the top queue; returns the next promotion instant."""
        heap = idx.promotions
        horizon = now_s + 1e-9 * max(1.0, abs(now_s))  # no later instant can be due (rounding of the test)
        later = []
        while heap and heap[0][0] <= horizon:
            entry = heapq.heappop(heap)
            w = idx.waiting.get(entry[2])
            if w is None or w.promote_at_s != entry[0]:
                continue  # stale
            if self.queue_of(w.state, now_s) == 0:
                idx.move(w, 0)
                w.promote_at_s = math.inf
            else:
                later.append(entry)
        for entry in later:
            heapq.heappush(heap, entry)
        while heap and ((w := idx.waiting.get(heap[0][2])) is None or w.promote_at_s != heap[0][0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def _cross(self, idx: _Index, progress: Mapping[str, JobState], now_s: float) -> float:
        """Running jobs whose attained service reached a threshold move to their new queue; returns the next
        instant one will (exactly as :meth:`_changes_at_s` gives it from the attained service now). Stored
        instants are exact as of their job's last read; reads of one job between two reads of it add rounding
        far below ``slack``, so only jobs within it of now (or of the first instant) are read again."""
        heap = idx.crossings
        slack = 1.0 + 1e-9 * max(1.0, abs(now_s))

        def valid(entry: tuple[float, int, _Running]) -> bool:
            return idx.running.get(entry[2].job_id) is entry[2] and entry[2].crossing_s == entry[0]

        def read(r: _Running) -> JobState:
            s = progress[r.job_id]
            level = self.queue_of(s, now_s)
            if level != r.key[0]:
                idx.lines[r.gpu_type].remove(r.key)
                r.key = (level, r.key[1], r.key[2])
                idx.lines[r.gpu_type].add(r.key, len(r.assignment.gpus))
            r.crossing_s = self._changes_at_s(s, level, now_s)
            return s

        again: list[_Running] = []
        while heap and heap[0][0] <= now_s + slack:
            entry = heapq.heappop(heap)
            if valid(entry):
                read(entry[2])
                again.append(entry[2])
        for r in again:
            if r.crossing_s < math.inf:
                heapq.heappush(heap, (r.crossing_s, next(idx.seq), r))
        while heap and not valid(heap[0]):
            heapq.heappop(heap)
        if not heap:
            return math.inf
        near = []
        first = heap[0][0]
        while heap and heap[0][0] <= first + 2 * slack:
            entry = heapq.heappop(heap)
            if valid(entry):
                read(entry[2])
                near.append(entry[2])
        for r in near:
            heapq.heappush(heap, (r.crossing_s, next(idx.seq), r))
        return min(r.crossing_s for r in near)

    def _admit(self, idx: _Index, state: ClusterState) -> tuple[list[str], list[tuple[Job, str]]]:
        """The admission walk in priority order: the running jobs that lose their GPUs, and the jobs to place
        (admitted waiting jobs, and running jobs admitted on another GPU type), in priority order.

        ``short[t]``: GPUs of type ``t`` not yet taken minus those held by the running jobs not yet passed.
        While it is >= 0, every running job on ``t`` keeps its GPUs; below 0, the first one the jobs after it
        leave short (:meth:`_Line.first_short`) is the next one on ``t`` to visit; no other needs a visit."""
        lines = idx.lines
        short = {t: up - lines[t].total() for t, up in state.available_by_type().items()}
        version = dict.fromkeys(short, 0)
        waiting: list[tuple[_Key, _Group, int, int]] = []  # heap: the next job of each group
        losing: list[tuple[_Key, int, str, int, int]] = []  # heap: (key, seq, type, version, position)
        seq = count()

        def push_group(group: _Group, level: int, pos: int) -> None:
            lists = idx.groups[group]
            while level < idx.levels:
                if pos < len(lists[level]):
                    arrival, job_id = lists[level][pos]
                    heapq.heappush(waiting, ((level, arrival, job_id), group, level, pos))
                    return
                level, pos = level + 1, 0

        def push_losing(t: str, after: _Key | None) -> None:
            version[t] += 1
            if short[t] < 0 and (i := lines[t].first_short(after, -short[t])) is not None:
                heapq.heappush(losing, (lines[t].keys[i], next(seq), t, version[t], i))

        def take(types: Sequence[str], n: int, key: _Key) -> str | None:
            for t in types:
                if short[t] + lines[t].after(key) >= n:
                    short[t] -= n
                    if short[t] < 0:
                        push_losing(t, key)
                    return t
            return None

        for group in idx.groups:
            if group[1]:
                push_group(group, 0, 0)
        for t in short:
            push_losing(t, None)
        running_jobs = state.running_jobs_by_id()
        displaced: list[str] = []
        starts: list[tuple[Job, str]] = []
        while waiting or losing:
            if losing and (not waiting or losing[0][0] < waiting[0][0]):
                key, _, t, ver, i = heapq.heappop(losing)
                if ver != version[t]:
                    continue
                job, n = running_jobs[key[2]], lines[t].gpus[i]
                short[t] += n
                displaced.append(job.id)
                got = take([u for u in self._est.candidate_types(job, state.cluster) if u != t], n, key)
                if got is not None:
                    starts.append((job, got))
                push_losing(t, key)
            else:
                key, group, level, pos = heapq.heappop(waiting)
                got = take(group[1], group[0], key)
                if got is not None:  # else no later job of the group fits either: free GPUs only shrink
                    starts.append((idx.waiting[key[2]].state.job, got))
                    push_group(group, level, pos + 1)
        return displaced, starts

    def _decide_directly(self, state: ClusterState) -> tuple[dict[str, Assignment], float]:
        """A full round from the snapshot alone (for states whose jobs share GPUs): every job ranked."""
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


"""The attained-service index the Tiresias policy keeps across rounds.

The index holds the jobs as of the last full round: waiting jobs grouped by what admission reads of them
(GPU count, GPU types by preference) and queue, in arrival order; running jobs per GPU type in priority
order (:class:`~dltsched.engine.policies.tiresias.queues.RunningLine`), with the GPUs held from each
position on; heaps of the instants at which a waiting job's starvation promotion falls due and a running
job's attained service crosses a threshold.
:meth:`AttainedServiceIndex.admit` walks it in priority order, visiting only the waiting jobs it admits
(and, per group, the first it does not: no later one fits either) and the running jobs that lose their
GPUs. What a job's queue is and which GPU types it fits on is the policy's to say
(:class:`~dltsched.engine.policies.tiresias.queues.Ranking`).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import count

from dltsched.engine.domain.model import Assignment, ClusterState, Job, JobState
from dltsched.engine.policies.tiresias.queues import Group, Key, Ranking, RunningLine


def _arrival_key(s: JobState) -> tuple[float, str]:
    return s.job.arrival_time_s, s.job.id


@dataclass(slots=True)
class _Waiting:
    """A waiting job in the index: its state, its group, its queue and its pending promotion instant."""

    state: JobState
    group: Group
    level: int
    promote_at_s: float  # the starvation promotion instant, inf when none is pending


@dataclass(slots=True)
class _Running:
    """A running job in the index: its placement, GPU type, priority and next threshold crossing."""

    job_id: str
    assignment: Assignment
    gpu_type: str
    key: Key
    # when the attained service reaches the next threshold (as of the last read); inf at the top
    crossing_s: float


@dataclass
class AttainedServiceIndex:
    """The jobs as of the last full round, brought up to date at the next one (see the module docstring).

    Between full rounds, only plans (which record the jobs they start or stop in ``touched``), arrivals,
    completions and node failures change where jobs are: the jobs to look at again are ``touched``, the
    queue's arrivals after ``last_key`` and the running jobs that finished or lost their node since (those
    indexed as running that no longer run). A state sequence in which jobs start or stop otherwise (not the
    simulator's) is caught by counts, and the index is built afresh.

    Parameters
    ----------
    ranking
        The policy: queues, their change instants and the GPU types jobs fit on.
    cluster_id
        ``id`` of the cluster the index is for.
    levels
        The number of queues.
    time_s
        The instant of the last full round.
    """

    ranking: Ranking
    cluster_id: int
    levels: int
    time_s: float
    waiting: dict[str, _Waiting] = field(default_factory=dict, init=False)
    #: per group, per queue: the waiting jobs' (arrival, id), ascending
    groups: dict[Group, list[list[tuple[float, str]]]] = field(default_factory=dict, init=False)
    # heap (instant, arrival, id)
    promotions: list[tuple[float, float, str]] = field(default_factory=list, init=False)
    running: dict[str, _Running] = field(default_factory=dict, init=False)
    lines: dict[str, RunningLine] = field(default_factory=dict, init=False)  # per GPU type
    # heap (instant, seq, job)
    crossings: list[tuple[float, int, _Running]] = field(default_factory=list, init=False)
    #: jobs to look at again (started or stopped since the last full round): their arrival instants
    touched: dict[str, float] = field(default_factory=dict, init=False)
    last_key: tuple[float, str] = field(default=(-math.inf, ""), init=False)
    seq: count = field(default_factory=count, init=False)

    def serves(self, state: ClusterState) -> bool:
        """Whether the index can be brought up to ``state`` (same cluster, not earlier).

        Parameters
        ----------
        state
            The snapshot of this round.

        Returns
        -------
        bool
            ``True`` when :meth:`refresh` may be called with it.
        """
        return self.cluster_id == id(state.cluster) and state.time_s >= self.time_s

    def drop(self, job_id: str) -> None:
        """Forget ``job_id`` (waiting or running; nothing when it is not indexed).

        Parameters
        ----------
        job_id
            The job.
        """
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
        """Move the waiting job ``w`` to queue ``level``.

        Parameters
        ----------
        w
            An indexed waiting job.
        level
            Its new queue.
        """
        key = (w.state.job.arrival_time_s, w.state.job.id)
        lists = self.groups[w.group]
        del lists[w.level][bisect.bisect_left(lists[w.level], key)]
        bisect.insort(lists[level], key)
        w.level = level

    def refresh(self, state: ClusterState, progress: Mapping[str, JobState], *, fresh: bool) -> bool:
        """Bring the index up to ``state``: the jobs started, stopped, arrived or finished since the last
        full round are looked up again (every job when ``fresh``).

        Parameters
        ----------
        state
            The snapshot of this round (:meth:`serves` it).
        progress
            The running jobs' states, by id (their attained service is read only near a threshold).
        fresh
            Whether the index is new (empty): then every job is indexed.

        Returns
        -------
        bool
            ``False`` when jobs started or stopped other than by the policy's plans: the index no longer
            matches ``state`` and must be built afresh.
        """
        now, queue, placements = state.time_s, state.queued(), state.placements_by_id()
        if fresh:
            look = {s.job.id: s.job.arrival_time_s for s in queue}
            look.update((j, job.arrival_time_s) for j, job in state.running_jobs_by_id().items())
        else:
            look = self.touched
            arrived = queue[bisect.bisect_right(queue, self.last_key, key=_arrival_key):]
            look.update((s.job.id, s.job.arrival_time_s) for s in arrived)

        def resolve(job_id: str, arrival_s: float) -> None:
            asg = placements.get(job_id)
            if asg is not None:
                r = self.running.get(job_id)
                if r is None or r.assignment is not asg:
                    self.drop(job_id)
                    self.add_running(progress[job_id], state)
                return
            i = bisect.bisect_left(queue, (arrival_s, job_id), key=_arrival_key)
            if i < len(queue) and queue[i].job.id == job_id:
                w = self.waiting.get(job_id)
                if w is None or w.state is not queue[i]:
                    self.drop(job_id)
                    self.add_waiting(queue[i], state)
            else:
                self.drop(job_id)  # finished

        for job_id, arrival in look.items():
            resolve(job_id, arrival)
        differ = self.running.keys() != placements.keys()
        if differ:  # jobs finished or lost their node since
            for job_id in self.running.keys() - placements.keys():
                resolve(job_id, self.running[job_id].key[1])
            differ = self.running.keys() != placements.keys()
        if differ or len(self.waiting) != len(queue):
            return False
        self.touched, self.time_s = {}, now
        if queue:
            self.last_key = max(self.last_key, _arrival_key(queue[-1]))
        return True

    def add_waiting(self, s: JobState, state: ClusterState) -> None:
        """Index the waiting job ``s``.

        Parameters
        ----------
        s
            A job in ``state``'s queue, not indexed.
        state
            The snapshot of this round.
        """
        group = (s.job.num_gpus, tuple(self.ranking.candidate_types(s.job, state.cluster)))
        level = self.ranking.queue_of(s, state.time_s)
        w = self.waiting[s.job.id] = _Waiting(s, group, level,
                                              self.ranking.changes_at_s(s, level, state.time_s))
        lists = self.groups.get(group)
        if lists is None:
            lists = self.groups[group] = [[] for _ in range(self.levels)]
        bisect.insort(lists[level], (s.job.arrival_time_s, s.job.id))
        if w.promote_at_s < math.inf:
            heapq.heappush(self.promotions, (w.promote_at_s, s.job.arrival_time_s, s.job.id))

    def add_running(self, s: JobState, state: ClusterState) -> None:
        """Index the running job ``s``.

        Parameters
        ----------
        s
            A job placed in ``state``, not indexed.
        state
            The snapshot of this round.
        """
        assert s.assignment is not None
        level = self.ranking.queue_of(s, state.time_s)
        r = _Running(s.job.id, s.assignment, state.cluster.gpu_type_of(s.assignment.gpus[0]),
                    (level, s.job.arrival_time_s, s.job.id),
                     self.ranking.changes_at_s(s, level, state.time_s))
        self.running[r.job_id] = r
        self.lines[r.gpu_type].add(r.key, len(r.assignment.gpus))
        if r.crossing_s < math.inf:
            heapq.heappush(self.crossings, (r.crossing_s, next(self.seq), r))

    def promote(self, now_s: float) -> float:
        """Move the waiting jobs that starved until ``now_s`` to the top queue.

        Parameters
        ----------
        now_s
            The instant of this round.

        Returns
        -------
        float
            The next promotion instant (``inf``: none pending).
        """
        heap = self.promotions
        horizon = now_s + 1e-9 * max(1.0, abs(now_s))  # no later instant can be due (rounding of the test)
        later = []
        while heap and heap[0][0] <= horizon:
            entry = heapq.heappop(heap)
            w = self.waiting.get(entry[2])
            if w is None or w.promote_at_s != entry[0]:
                continue  # stale
            if self.ranking.queue_of(w.state, now_s) == 0:
                self.move(w, 0)
                w.promote_at_s = math.inf
            else:
                later.append(entry)
        for entry in later:
            heapq.heappush(heap, entry)
        while heap and ((w := self.waiting.get(heap[0][2])) is None or w.promote_at_s != heap[0][0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def cross(self, progress: Mapping[str, JobState], now_s: float) -> float:
        """Move the running jobs whose attained service reached a threshold to their new queue.

        Stored instants are exact as of their job's last read; reads of one job between two reads of it add
        rounding far below ``slack``, so only jobs within it of now (or of the first instant) are read again.

        Parameters
        ----------
        progress
            The running jobs' states, by id.
        now_s
            The instant of this round.

        Returns
        -------
        float
            The next instant a running job changes queue, exactly as :meth:`Ranking.changes_at_s` gives it
            from the attained service now (``inf``: none will).
        """
        heap = self.crossings
        slack = 1.0 + 1e-9 * max(1.0, abs(now_s))

        def valid(entry: tuple[float, int, _Running]) -> bool:
            return self.running.get(entry[2].job_id) is entry[2] and entry[2].crossing_s == entry[0]

        def read(r: _Running) -> JobState:
            s = progress[r.job_id]
            level = self.ranking.queue_of(s, now_s)
            if level != r.key[0]:
                self.lines[r.gpu_type].remove(r.key)
                r.key = (level, r.key[1], r.key[2])
                self.lines[r.gpu_type].add(r.key, len(r.assignment.gpus))
            r.crossing_s = self.ranking.changes_at_s(s, level, now_s)
            return s

        again: list[_Running] = []
        while heap and heap[0][0] <= now_s + slack:
            entry = heapq.heappop(heap)
            if valid(entry):
                read(entry[2])
                again.append(entry[2])
        for r in again:
            if r.crossing_s < math.inf:
                heapq.heappush(heap, (r.crossing_s, next(self.seq), r))
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
            heapq.heappush(heap, (r.crossing_s, next(self.seq), r))
        return min(r.crossing_s for r in near)

    def admit(self, state: ClusterState) -> tuple[list[str], list[tuple[Job, str]]]:
        """The admission walk in priority order.

        ``short[t]``: GPUs of type ``t`` not yet taken minus those held by the running jobs not yet passed.
        While it is >= 0, every running job on ``t`` keeps its GPUs; below 0, the first one the jobs after it
        leave short (:meth:`RunningLine.first_short`) is the next one on ``t`` to visit; no other needs a
        visit.

        Parameters
        ----------
        state
            The snapshot the index was refreshed to.

        Returns
        -------
        displaced : list of str
            The running jobs that lose their GPUs.
        starts : list of (Job, str)
            The jobs to place and the GPU type for each (admitted waiting jobs, and running jobs admitted on
            another GPU type), in priority order.
        """
        lines = self.lines
        short = {t: up - lines[t].total() for t, up in state.available_by_type().items()}
        version = dict.fromkeys(short, 0)
        waiting: list[tuple[Key, Group, int, int]] = []  # heap: the next job of each group
        losing: list[tuple[Key, int, str, int, int]] = []  # heap: (key, seq, type, version, position)
        seq = count()

        def push_group(group: Group, level: int, pos: int) -> None:
            lists = self.groups[group]
            while level < self.levels:
                if pos < len(lists[level]):
                    arrival, job_id = lists[level][pos]
                    heapq.heappush(waiting, ((level, arrival, job_id), group, level, pos))
                    return
                level, pos = level + 1, 0

        def push_losing(t: str, after: Key | None) -> None:
            version[t] += 1
            if short[t] < 0 and (i := lines[t].first_short(after, -short[t])) is not None:
                heapq.heappush(losing, (lines[t].keys[i], next(seq), t, version[t], i))

        def take(types: Sequence[str], n: int, key: Key) -> str | None:
            for t in types:
                if short[t] + lines[t].after(key) >= n:
                    short[t] -= n
                    if short[t] < 0:
                        push_losing(t, key)
                    return t
            return None

        for group in self.groups:
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
                got = take([u for u in self.ranking.candidate_types(job, state.cluster) if u != t], n, key)
                if got is not None:
                    starts.append((job, got))
                push_losing(t, key)
            else:
                key, group, level, pos = heapq.heappop(waiting)
                got = take(group[1], group[0], key)
                if got is not None:  # else no later job of the group fits either: free GPUs only shrink
                    starts.append((self.waiting[key[2]].state.job, got))
                    push_group(group, level, pos + 1)
        return displaced, starts

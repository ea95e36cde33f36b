"""When the optimizing policy solves a round, and which jobs the round holds.

A round solves only when something changed that a solve has not seen - its *trigger*, which the solve
log records per solve (``trigger``; ``OptimizingPolicy.triggers`` counts them):

- ``new_waiting``: a job waits that no solve has seen waiting (an arrival, or a job that a failure, an
  out-of-memory crash or a preemption sent back to the queue);
- ``movers``: a running job could move (see below), and the last solve is ``round_interval_s`` ago: on a
  large cluster movers wait for the periodic round (or for a ``new_waiting`` solve, which sees them too) -
  some GPU frees up every few minutes, and re-solving at each for jobs that might move to it would cost a
  solve per completion. A mover a solve kept in place counts again only when its placement changes or more
  GPUs of a type it could move to faster are idle than that solve saw;
- ``changed``: jobs have waited since a solve ``round_interval_s`` ago *and* the round's inputs changed
  since that solve: a job finished or arrived, GPUs went down or came back, or the run measured a new
  memory peak (:func:`~dltsched.engine.domain.predictors.memory_observations_version`) or a new profile
  (profiling on arrival, :func:`~dltsched.engine.domain.profiles.current_profiles`).

A tick in which only the clock moved re-uses the last plan (``skipped_solves`` counts these ticks):
re-solving such a state gives the same plan but for the clock's effect on remaining times, which only makes
running jobs worth more.

Working set. When idle GPUs hold every waiting job alone at once (greedily) on a large cluster, a solving
round decides about the waiting jobs and the movers' groups only (scope ``roomy``); every other running job
keeps its GPUs, which the round sees as unavailable. Otherwise a round decides about every active job
(``all``), or, when more than ``max_round_jobs`` are active, about that many (``capped``): the most urgent
waiting jobs - at least half the set, or all the room the running jobs leave - and running jobs worth
reconsidering, jobs sharing GPUs together: first the *movers* (jobs sharing GPUs while idle GPUs of their
type or a faster one could hold them, or jobs on a slower type than one whose idle GPUs could hold them, in
one node unless they are larger than every node of that type), then the longest predicted remaining time
first (the candidates for preemption); at most twice as many running jobs as waiting ones, plus the movers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dltsched.engine.domain.model import Assignment, ClusterState, Job, JobState, Plan
from dltsched.engine.domain.predictors import memory_observations_version
from dltsched.engine.domain.profiles import current_profiles
from dltsched.engine.policies.greedy import place_exclusive
from dltsched.engine.policies.optimizing.cache import PredictionCache

#: what a solve saw besides the clock: active job ids, down GPUs, memory-measurement version, profiles
RoundInputs = tuple[frozenset[str], frozenset[int], int, int]


def round_inputs(state: ClusterState) -> RoundInputs:
    """What a solve's inputs change with besides the clock.

    Parameters
    ----------
    state
        The cluster snapshot.

    Returns
    -------
    tuple
        The active jobs, the down GPUs, the run's memory-measurement version and its count of profiles
        measured on arrival (running jobs' placements change only by the policy's own plans).
    """
    active = frozenset(state.placements_by_id()).union(s.job.id for s in state.queued())
    book = current_profiles()
    return active, frozenset(state.down_gpus), memory_observations_version(), 0 if book is None else len(book)


@dataclass(frozen=True, slots=True)
class Idle:
    """Per GPU type: idle GPUs (up, holding no job) in all, most idle in one node, and the largest node.

    Parameters
    ----------
    total
        Idle GPUs per type.
    in_one_node
        The most idle GPUs of the type in one node.
    largest_node
        The GPUs of the type's largest node.
    """

    total: dict[str, int]
    in_one_node: dict[str, int]
    largest_node: dict[str, int]

    @staticmethod
    def of(state: ClusterState) -> Idle:
        """The idle GPUs of ``state``.

        Parameters
        ----------
        state
            The cluster snapshot.

        Returns
        -------
        Idle
            Its summary per GPU type.
        """
        total: dict[str, int] = {}
        one: dict[str, int] = {}
        largest: dict[str, int] = {}
        for node, free in zip(state.cluster.nodes, state.free_gpus_by_node(), strict=True):
            t, n = node.gpu_type, len(free)
            if t in total:
                total[t] += n
                if n > one[t]:
                    one[t] = n
                if node.num_gpus > largest[t]:
                    largest[t] = node.num_gpus
            else:
                total[t], one[t], largest[t] = n, n, node.num_gpus
        return Idle(total, one, largest)

    def grew_since(self, seen: dict[str, int]) -> bool:
        """Whether some GPU type of ``seen`` has more idle GPUs now.

        Parameters
        ----------
        seen
            Idle GPUs per type at an earlier round.

        Returns
        -------
        bool
            True when one of them grew.
        """
        return any(self.total.get(t, 0) > n for t, n in seen.items())

    def can_hold(self, gpu_type: str, num_gpus: int) -> bool:
        """Whether a gang of ``num_gpus`` fits the idle GPUs of ``gpu_type`` as a placement would use them.

        Parameters
        ----------
        gpu_type
            The GPU type.
        num_gpus
            The gang's size.

        Returns
        -------
        bool
            True when it fits (in one node, unless it is larger than every node of the type).
        """
        if num_gpus <= self.largest_node.get(gpu_type, 0):
            return self.in_one_node.get(gpu_type, 0) >= num_gpus
        return self.total.get(gpu_type, 0) >= num_gpus


def _shared_gpu_groups(gpu_sets: Sequence[Sequence[int]]) -> list[list[int]]:
    """Indices of ``gpu_sets`` grouped so that sets sharing any GPU are in one group (stable order,
    union-find)."""
    parent = list(range(len(gpu_sets)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[int, int] = {}
    shared = False
    for i, gpus in enumerate(gpu_sets):
        for g in gpus:
            o = owner.setdefault(g, i)
            if o != i:
                parent[root(i)] = root(o)
                shared = True
    if not shared:
        return [[i] for i in range(len(gpu_sets))]
    groups: dict[int, list[int]] = {}
    for i in range(len(gpu_sets)):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


def _sharing_ids(placements: Mapping[str, Assignment]) -> list[list[str]]:
    """Running job ids grouped so that jobs sharing any GPU are in one group (stable order)."""
    ids = list(placements)
    return [[ids[i] for i in g] for g in _shared_gpu_groups([placements[k].gpus for k in ids])]


def sharing_groups(running: Sequence[JobState]) -> list[list[JobState]]:
    """Running jobs grouped so that jobs sharing any GPU are in one group.

    Parameters
    ----------
    running
        The running jobs.

    Returns
    -------
    list of list of JobState
        The groups, in the order of their first job.
    """
    gpu_sets = [s.assignment.gpus if s.assignment else () for s in running]
    return [[running[i] for i in g] for g in _shared_gpu_groups(gpu_sets)]


class WorkingSet:
    """When the policy solves and which jobs its rounds hold (see the module), and what the solves saw.

    Parameters
    ----------
    cache
        The policy's predictions (candidate types, remaining times, greedy estimates).
    """

    def __init__(self, cache: PredictionCache) -> None:
        self.cache = cache
        self.last_solve_s = float("-inf")
        #: running jobs that could move, as the last :meth:`trigger` found them
        self.movers: set[str] = set()
        #: movers a solve kept where they were: their GPUs and the idle GPUs per type the solve saw
        self.declined: dict[str, tuple[tuple[int, ...], dict[str, int]]] = {}
        self.idle_seen: dict[str, int] = {}  # idle GPUs per type at the last trigger
        self.seen_waiting: frozenset[str] = frozenset()  # jobs waiting at the last solve
        self.seen_inputs: RoundInputs | None = None  # what the last solve saw besides the clock
        #: which jobs the last selection holds: ``all`` active, the ``roomy`` set or the ``capped`` one
        self.scope = "all"
        self.skipped_solves = 0  #: periodic ticks that re-used the last plan: nothing but the clock changed
        self._idle_of: tuple[object, object, Idle] | None = None  # the last snapshot's free GPUs and summary

    def trigger(self, state: ClusterState, *, round_interval_s: float | None, at_scale: bool) -> str | None:
        """What triggers a solve now (see the module); finds the movers.

        Parameters
        ----------
        state
            The cluster snapshot.
        round_interval_s
            The periodic round's interval (``None``: none).
        at_scale
            Whether the cluster takes the shortcuts of a large one (movers wait for the periodic round).

        Returns
        -------
        str or None
            ``new_waiting``, ``movers`` or ``changed``; ``None``: no solve.
        """
        idle = self.idle(state)
        now = state.placements_by_id()
        specs = state.running_jobs_by_id()
        self.idle_seen = dict(idle.total)
        self.declined = {k: (gpus, seen) for k, (gpus, seen) in self.declined.items()
                         if k in now and now[k].gpus == gpus and not idle.grew_since(seen)}
        self.movers = set()
        # movers first; only placements are read, not the running jobs' progress; on exclusive GPUs every
        # job is a group of its own
        exclusive = state.gpus_exclusive()
        for ids in ([k] for k in now) if exclusive else _sharing_ids(now):
            if len(ids) == 1 and self.cache.on_fastest(specs[ids[0]], now[ids[0]], state):
                continue
            if not all(k in self.declined for k in ids) \
                    and self.could_move([(specs[k], now[k]) for k in ids], idle, state):
                self.movers.update(ids)
        movers = len(self.movers)
        waiting = state.queued()
        stale = round_interval_s is not None and state.time_s - self.last_solve_s >= round_interval_s
        news = any(s.job.id not in self.seen_waiting for s in waiting)
        if movers and not news and not stale and at_scale:  # movers wait for the periodic round
            movers = 0
            self.movers = set()
        trigger = "new_waiting" if news else "movers" if movers else "changed"
        if not news and not movers:
            if not (waiting and stale):
                return None  # nothing new waits, nobody moves
            if round_inputs(state) == self.seen_inputs:
                self.skipped_solves += 1
                return None  # only the clock moved
        return trigger

    def select(self, state: ClusterState, *, max_round_jobs: int | None, at_scale: bool,
               urgency: Callable[[ClusterState], Sequence[JobState]],
               ) -> tuple[ClusterState, tuple[Assignment, ...]]:
        """The round's jobs (see the module) and the assignments of the running jobs left out.

        Parameters
        ----------
        state
            The cluster snapshot (after :meth:`trigger`, whose movers it reads).
        max_round_jobs
            The most jobs a round holds (``None``: every active job).
        at_scale
            Whether the cluster takes the shortcuts of a large one (roomy rounds).
        urgency
            The waiting jobs of a state, most urgent first.

        Returns
        -------
        tuple
            The round's state (the left-out jobs' GPUs down in it) and the left-out assignments.
        """
        cap = max_round_jobs
        waiting = state.queued()
        movers = len(self.movers)
        roomy = 3 * len(waiting) + movers
        if roomy < len(state.jobs) and (cap is None or roomy < cap) and at_scale \
                and self._roomy(state, waiting):
            self.scope, cap = "roomy", roomy
        else:
            self.scope = "all" if cap is None or len(state.jobs) <= cap else "capped"
        if self.scope == "all":
            return state, ()
        assert cap is not None
        running = state.running()
        shared = [[s] for s in running] if state.gpus_exclusive() else sharing_groups(running)
        groups = [(not any(s.job.id in self.movers for s in g), g) for g in shared]
        queued = urgency(state)
        take_queued = min(len(queued), max(cap - len(running), cap // 2))
        groups.sort(key=lambda entry: (entry[0], -max(self.cache.remaining_s(s, state) for s in entry[1])))
        room = min(cap - take_queued, 2 * take_queued + movers)
        chosen: list[JobState] = []
        kept: list[Assignment] = []
        held: set[int] = set()
        for _, group in groups:
            if len(chosen) + len(group) <= room:
                chosen.extend(group)
            else:
                for s in group:
                    kept.append(s.assignment)  # type: ignore[arg-type]
                    held.update(s.assignment.gpus)  # type: ignore[union-attr]
        chosen.extend(queued[:take_queued])
        return ClusterState(state.time_s, state.cluster, tuple(chosen), state.down_gpus | held), tuple(kept)

    def solved(self, state: ClusterState, round_state: ClusterState, plan: Plan) -> None:
        """Record a solve: its time, what it saw, and the movers it kept in place.

        Parameters
        ----------
        state
            The snapshot the policy decided.
        round_state
            The round the solver decided (:meth:`select`).
        plan
            The solver's plan for it.
        """
        self.last_solve_s = state.time_s
        self.seen_waiting = frozenset(s.job.id for s in round_state.queued())
        self.seen_inputs = round_inputs(state)
        placed, now = plan.by_job(), state.placements_by_id()
        for job_id in sorted(self.movers):
            if job_id in placed and set(placed[job_id].gpus) == set(now[job_id].gpus):
                self.declined[job_id] = (now[job_id].gpus, self._seen_for(job_id, state))

    def _roomy(self, state: ClusterState, waiting: Sequence[JobState]) -> bool:
        """Idle GPUs hold every waiting job alone at once (greedily, on a type it fits)."""
        if not waiting:
            return True
        started = place_exclusive(state, waiting, self.cache.estimates, blocking=True)
        return len(started.assignments) == len(waiting)

    def could_move(self, group: Sequence[tuple[Job, Assignment]], idle: Idle, state: ClusterState) -> bool:
        """Whether a job of ``group`` (running jobs sharing GPUs) could run faster elsewhere now.

        Parameters
        ----------
        group
            The jobs and their placements.
        idle
            The idle GPUs (:meth:`idle`).
        state
            The cluster snapshot.

        Returns
        -------
        bool
            True when the idle GPUs of its own type (when it shares its GPUs) or of a faster one can hold it
            (in one node, unless it is larger than every node of that type).
        """
        for job, assignment in group:
            types = self.cache.estimates.candidate_types(job, state.cluster)
            now = state.cluster.gpu_type_of(assignment.gpus[0])
            better = types[: types.index(now) + (len(group) > 1)] if now in types else types
            if any(idle.can_hold(t, job.num_gpus) for t in better):
                return True
        return False

    def _seen_for(self, job_id: str, state: ClusterState) -> dict[str, int]:
        """The idle GPUs the last trigger saw of the types running job ``job_id`` could move to faster: the
        types faster than its own, and its own when it shares its GPUs (more idle GPUs of another type
        cannot speed it up)."""
        placements = state.placements_by_id()
        job, assignment = state.running_jobs_by_id()[job_id], placements[job_id]
        types = self.cache.estimates.candidate_types(job, state.cluster)
        now = state.cluster.gpu_type_of(assignment.gpus[0])
        on = state.jobs_on_gpus()
        shared = any(k != job_id for g in assignment.gpus for k in on[g])
        better = types[: types.index(now) + shared] if now in types else types
        return {t: self.idle_seen.get(t, 0) for t in better}

    def idle(self, state: ClusterState) -> Idle:
        """:meth:`Idle.of`, re-used while the snapshot's free GPUs are the same object (nothing changed).

        Parameters
        ----------
        state
            The cluster snapshot.

        Returns
        -------
        Idle
            Its idle GPUs.
        """
        free = state.free_gpus_by_node()
        if self._idle_of is None or self._idle_of[0] is not free or self._idle_of[1] is not state.cluster:
            self._idle_of = (free, state.cluster, Idle.of(state))
        return self._idle_of[2]

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to trigger as this one would (JSON-ready).

        Returns
        -------
        dict
            The last solve's time, the declined movers and what the last solve saw.
        """
        seen = self.seen_inputs
        return {"last_solve_s": self.last_solve_s if self.last_solve_s != float("-inf") else None,
                "declined": {k: {"gpus": list(gpus), "idle": dict(idle)}
                             for k, (gpus, idle) in sorted(self.declined.items())},
                "seen_waiting": sorted(self.seen_waiting),
                "seen_inputs": None if seen is None else {
                    "jobs": sorted(seen[0]), "down_gpus": sorted(seen[1]), "memory_version": seen[2],
                    "profiles": seen[3]}}

    def load_state_dict(self, data: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict`'s output.

        Parameters
        ----------
        data
            What :meth:`state_dict` gave.
        """
        value = data.get("last_solve_s")
        self.last_solve_s = float("-inf") if value is None else float(value)
        self.declined = {k: (tuple(d["gpus"]), {t: int(n) for t, n in d["idle"].items()})
                         for k, d in data.get("declined", {}).items()}
        self.seen_waiting = frozenset(data.get("seen_waiting", ()))
        seen = data.get("seen_inputs")
        self.seen_inputs = None if seen is None else (
            frozenset(seen["jobs"]), frozenset(int(g) for g in seen["down_gpus"]),
            int(seen["memory_version"]), int(seen.get("profiles", 0)))

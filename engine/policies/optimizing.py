"""The rolling-horizon optimizing policy: every round is a CP-SAT or MILP model over co-location and freezing.

At each decision point (arrival, completion, failure, or the ``round_interval_s`` tick) the policy hands
the snapshot to its :class:`~dltsched.engine.domain.protocols.RoundSolver` (the application passes
:class:`dltsched.engine.app.api.ConfiguredSolver`, i.e. :func:`dltsched.engine.app.api.solve_round`), which builds the round's
:class:`~dltsched.formulations.RoundProblem` from the predictors, solves it with ``config.backend`` under
``config.time_limit_s`` warm-started from the current placements, checks the plan with the
solver-independent checker and falls back to a greedy plan when the solver gives nothing usable. A round
that times out keeps the solver's best plan. Events closer than ``min_interval_s`` (``auto``, the default:
300 s up to 128 GPUs, 300 s per 128 GPUs above: 2,400 s at 1,024) to the last solve are
batched: running jobs stay, new arrivals start as settled starts (below) when they can, else greedily on free GPUs (shortest predicted remaining time
first under the ``jct`` objective, longest first under the makespan configuration ``effective_progress`` with a
``length_weight``, else in arrival order), and the next solve sees everything.
Migration and preemption are priced by ``config.migration_penalty``; the simulator also charges the
checkpoint-restore time of every moved job.

Working set: a round solves only when something changed that a solve has not seen - its *trigger*, which
the solve log records per solve (``trigger``; :attr:`OptimizingPolicy.triggers` counts them):

- ``new_waiting``: a job waits that no solve has seen waiting (an arrival, or a job that a failure, an
  out-of-memory crash or a preemption sent back to the queue);
- ``movers``: a running job could move (see below), and the last solve is ``round_interval_s`` ago: movers
  wait for the periodic round (or for a ``new_waiting`` solve, which sees them too) - on a large cluster
  some GPU frees up every few minutes, and re-solving at each for jobs that might move to it would cost a
  solve per completion (a mover a solve kept in place counts again only when more GPUs of a type it could
  move to are idle than that solve saw);
- ``changed``: jobs have waited since a solve ``round_interval_s`` ago *and* the round's inputs changed
  since that solve: a job finished or arrived, GPUs went down or came back, or the run measured a new
  memory peak (:func:`~dltsched.engine.domain.predictors.memory_observations_version`) or a new profile
  (profiling on arrival, :func:`~dltsched.engine.domain.profiles.current_profiles`).

A solve triggered by ``new_waiting`` alone (no movers) is skipped when every waiting job can start alone on
idle GPUs at its best unfrozen option - the GPU type on which it progresses fastest at freeze level 0
(:func:`~dltsched.formulations.build.best_alone`), in one node when a node of the type is large enough - all
at once, most urgent first: they start there (``settled_starts`` counts these decision points). Placing such a
job takes only idle GPUs, and no plan values its type higher; what a solve could still change is its freeze
level, which the next solve revisits. Freezing is left to the solves, which weigh it against the other jobs:
starting jobs frozen without one (a mispredicted frozen penalty unweighed) cost the cross-fitted 64-GPU Philly
window 2.3x its makespan. On a cluster with room to spare (the full
Philly trace on 1,024 GPUs keeps them 23-36% busy) most arrivals start this way.

A tick in which only the clock moved re-uses the last plan (running jobs stay; waiting jobs start greedily
on free GPUs, as between solves): re-solving such a state gives the same plan but for the clock's
effect on remaining times, which only makes running jobs worth more (``skipped_solves`` counts these ticks).
When idle GPUs hold every waiting job alone at once (greedily), a solving round decides about the waiting
jobs and the movers' groups only; every other running job keeps its GPUs, which the round sees as
unavailable (a round then costs what its few jobs cost, not what the cluster's running jobs do; it gives
up preempting or joining a running job that is no mover, which pays only when GPUs are short). Otherwise a
solving round decides about every
active job, or, when more than ``max_round_jobs`` are active (``None``: no limit), about that many. The
set then holds the most urgent waiting jobs (shortest predicted remaining time first under the ``jct``
objective, else arrival order) - at least half the set, or all the room the running jobs leave - and
running jobs worth reconsidering, jobs sharing GPUs together: first the *movers* (jobs sharing GPUs
while idle GPUs of their type or a faster one could hold them, or jobs on a slower type than one whose
idle GPUs could hold them, in one node unless they are larger than every node of that type),
then the longest predicted remaining time first (the candidates for preemption); at most twice as many
running jobs as waiting ones, plus the movers. The other running jobs keep their GPUs, which the round
sees as unavailable. A mover that a solve kept where it was (the move did not pay) triggers no solve
again until its placement changes or more GPUs of a type it could move to faster are idle than that solve saw. Predictions are memoized per job across rounds.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Assignment, ClusterState, Job, JobState, Plan
from dltsched.engine.domain.predictors import Predictors, memoized, memory_observations_version
from dltsched.engine.domain.profiles import current_profiles
from dltsched.engine.domain.protocols import RoundSolver
from dltsched.engine.policies.greedy import place_exclusive
from dltsched.engine.policies.placement import Estimates, GpuPool
from dltsched.formulations.build import best_alone, node_classes, reference_rate
from dltsched.formulations.problem import (
    JCT_MIN_REMAINING_S,
    JobOption,
    NodeTypes,
    RoundOptions,
    median_remaining_s,
)
from dltsched.predictors import available_predictors

log = logging.getLogger(__name__)

#: the ``auto`` cadence (see :class:`OptimizingPolicy`): a solve at most every ``AUTO_INTERVAL_S`` per
#: ``AUTO_INTERVAL_GPUS`` GPUs (at least ``AUTO_INTERVAL_S``), so that the solves of a simulated hour cost about
#: as much on a large cluster, whose events come faster, as on a small one
AUTO_INTERVAL_GPUS = 128
AUTO_INTERVAL_S = 300.0
#: clusters above this many GPUs use the speed shortcuts (:meth:`OptimizingPolicy._at_scale`)
SHORTCUTS_ABOVE_GPUS = 256


@dataclass
class OptimizingPolicy:
    """Rolling-horizon co-location + freezing optimizer (see module docstring).

    ``solver`` decides the solving rounds (the registry's factory,
    :func:`dltsched.engine.app.api.optimizing_policy`, passes one built from its solve settings);
    ``predictors`` price the rounds and the greedy starts between them (default: the packaged ones).
    """

    solver: RoundSolver
    predictors: Predictors | None = None
    min_interval_s: float | str = "auto"
    round_interval_s: float | None = 1800.0
    max_round_jobs: int | None = 256
    name: str = "optimizing"
    shortcuts_above_gpus: int = SHORTCUTS_ABOVE_GPUS

    def __post_init__(self) -> None:
        cap = self.max_round_jobs
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 2):
            raise ValidationError("max_round_jobs", f"{cap!r} not understood; an integer >= 2, or none for every "
                                  "active job")
        gap = self.min_interval_s
        if gap != "auto" and (isinstance(gap, bool) or not isinstance(gap, int | float) or not 0 <= gap < math.inf):
            raise ValidationError("min_interval_s", f"{gap!r} not understood; seconds >= 0, or auto (300 s per 128 "
                                  "GPUs, at least 300 s)")
        if self.predictors is None:
            self.predictors = available_predictors()
        self._asked = memoized(self.predictors)  # rounds ask about the same jobs again and again
        self._est = Estimates(self._asked)
        self._last_solve_s = float("-inf")
        self._movers: set[str] = set()  # running jobs that could move, as the last working set found them
        #: movers a solve kept where they were: their GPUs and the idle GPUs per type the solve saw
        self._declined: dict[str, tuple[tuple[int, ...], dict[str, int]]] = {}
        self._idle_seen: dict[str, int] = {}  # idle GPUs per type at the last working set
        self._seen_waiting: frozenset[str] = frozenset()  # jobs waiting at the last solve
        #: what the last solve saw: active job ids, down GPUs, the run's memory-measurement version
        self._seen_inputs: tuple[frozenset[str], frozenset[int], int, int] | None = None
        self.solve_log: list[dict[str, Any]] = []
        self.triggers: dict[str, int] = {}  #: solves per trigger (see the module docstring)
        self.skipped_solves = 0  #: periodic ticks that re-used the last plan: nothing but the clock changed
        #: decision points at which every waiting job started alone at its best option on idle GPUs, unsolved
        self.settled_starts = 0
        #: which jobs the last working set holds: ``all`` active, the ``roomy`` set or the ``capped`` one
        self._scope = "all"
        self._options = getattr(self.solver, "options", None)  # the rounds' RoundOptions, when the solver has them
        self._rates: dict[str, float | None] = {}  # reference rate per job, for the node types and memory version:
        self._rates_version: tuple[int, int] | None = None
        self._best: dict[tuple[Any, ...], JobOption | None] = {}  # best option alone per waiting job and inputs
        self._fastest: dict[tuple[str, tuple[int, ...], int], bool] = {}  # alone on its fastest type, per placement
        self._idle_of: tuple[Any, Any, _Idle] | None = None  # the last snapshot's free GPUs and their summary
        self._classes: tuple[int, frozenset[int], NodeTypes] | None = None  # node types per cluster and down GPUs

    def schedule(self, state: ClusterState) -> Plan:
        if not state.jobs:
            return Plan()
        if state.time_s - self._last_solve_s < self._min_interval(state):
            return self._start_greedily(state)
        trigger = self._trigger(state)
        if trigger is None:  # nothing new waits, nobody could move, nothing changed
            return self._start_greedily(state)
        if trigger == "new_waiting" and self._at_scale(state):
            plan, settled = self._settled_starts(state)
            if settled:  # every new waiting job starts at its best option: no solve can do better for it
                self.settled_starts += 1
                return plan
        round_state, kept = self._select(state)
        warm = round_state.current_plan() if any(s.assignment is not None for s in round_state.jobs) else None
        plan = self._round_solver(state).solve(round_state, warm_start=warm, predictors=self._asked)
        self._last_solve_s = state.time_s
        self._seen_waiting = frozenset(s.job.id for s in round_state.queued())
        self._seen_inputs = _inputs(state)
        self.triggers[trigger] = self.triggers.get(trigger, 0) + 1
        placed, now = plan.by_job(), state.placements_by_id()
        for job_id in sorted(self._movers):
            if job_id in placed and set(placed[job_id].gpus) == set(now[job_id].gpus):
                self._declined[job_id] = (now[job_id].gpus, self._seen_for(job_id, state))
        if kept:
            plan = replace(plan, assignments=plan.assignments + kept)
        if kept or not getattr(self.solver, "marks_colocation_fallbacks", False):
            fallbacks = colocation_fallbacks(self._asked.colocation, plan, state)
        else:  # the solver marked them on this very plan: not priced twice
            fallbacks = plan.colocation_fallbacks
        if fallbacks:  # the predictor warns once per model and GPU type; the plan names the jobs every round
            plan = replace(plan, colocation_fallbacks=fallbacks)
            log.info("round at %.0f s: co-location of %d job(s) rests on predicted profiles (no profile on their "
                     "GPU type): %s", state.time_s, len(fallbacks), ", ".join(fallbacks[:5]) +
                     (", ..." if len(fallbacks) > 5 else ""))
        self.solve_log.append({"time_s": state.time_s, "status": plan.status, "solve_time_s": plan.solve_time_s,
                               "build_time_s": plan.build_time_s, "gap": plan.gap, "jobs": len(round_state.jobs),
                               "active_jobs": len(state.jobs), "waiting_jobs": len(state.queued()),
                               "movers": len(self._movers), "trigger": trigger, "scope": self._scope,
                               "colocation_fallbacks": len(fallbacks)})
        return plan

    def _start_greedily(self, state: ClusterState) -> Plan:
        """Running jobs stay; waiting jobs start on free GPUs, most urgent first, at freeze level 0 (see module
        docstring). Starting them at their best options alone here instead (fastest type and freeze level) cost
        the 64-GPU Philly window 12% avg JCT and 2.6x the makespan (seed 0, in-sample): between solves nothing
        weighs one job's best option against the next job's."""
        if not state.queued() or not any(state.free_gpus_by_node()):
            return Plan(incremental=True)
        return place_exclusive(state, self._between_solves_order(state), self._est, blocking=False)

    def _settled_starts(self, state: ClusterState) -> tuple[Plan, bool]:
        """Waiting jobs, most urgent first, alone on idle GPUs at their best unfrozen option (the fastest GPU type a
        round offers them at freeze level 0, :func:`~dltsched.formulations.build.best_alone`; in one node when one
        of the type is large enough). A job a solve has seen waiting is skipped (that solve let it wait); the
        first job no solve has seen that cannot start so ends the attempt (later ones might take the GPUs a solve
        would give it). Returns the starts and whether every waiting job no solve has seen started so."""
        options = self._options
        if not isinstance(options, RoundOptions):
            return Plan(incremental=True), False
        # unfrozen only: freezing is left to the solves, which weigh it against the other jobs; unweighed frozen
        # starts, or roomy solves for them, cost the cross-fitted 64-GPU Philly window 2.3x its makespan (seed 0)
        options = replace(options, freeze_levels=1)
        types = self._node_types(state)
        pool = GpuPool.current(state)
        placed: list[Assignment] = []
        for s in self._between_solves_order(state):
            gpus = None
            if s.job.gpu_fraction >= 1.0:
                key = (s.job.id, s.remaining_iterations, id(types), memory_observations_version(), _profiles())
                if key not in self._best:
                    if len(self._best) > 100_000:
                        self._best.clear()
                    self._best[key] = best_alone(s, state.time_s, types, self._asked, options)
                best = self._best[key]
                if best is not None:
                    gpus = pool.take_free(s.job, best.gpu_type)
                    if gpus is not None and best.cross_step_time_s is None \
                            and len({state.cluster.gpu_node[g] for g in gpus}) > 1:
                        gpus = None
                if gpus is not None:
                    pool.occupy(s.job.id, gpus)
                    placed.append(Assignment(s.job.id, gpus, best.freeze_level))  # type: ignore[union-attr]
                    continue
            if s.job.id not in self._seen_waiting:  # a job a solve has seen waiting blocks nobody: it was decided
                return Plan(incremental=True), False
        return Plan(tuple(placed), incremental=True), True

    def _round_solver(self, state: ClusterState) -> RoundSolver:
        """The solver of a ``roomy`` round under ``jct``: the jobs' value scale relative to the median predicted
        remaining time over every active job, not only the round's (see module docstring)."""
        with_options = getattr(self.solver, "with_options", None)
        if self._scope != "roomy" or self.solver.objective != "jct" or with_options is None \
                or not isinstance(self._options, RoundOptions):
            return self.solver
        types = self._node_types(state)
        version = (id(types), memory_observations_version())
        if self._rates_version != version:
            self._rates, self._rates_version = {}, version
        times = []
        for s in state.jobs:
            if s.job.id not in self._rates:
                self._rates[s.job.id] = reference_rate(s, types, self._asked, self._options)  # type: ignore[arg-type]
            rate = self._rates[s.job.id]
            if rate:
                times.append(max(JCT_MIN_REMAINING_S, s.remaining_iterations / rate))
        return with_options(value_reference_s=median_remaining_s(times)) if times else self.solver  # type: ignore[no-any-return]

    def _node_types(self, state: ClusterState) -> NodeTypes:
        down = frozenset(state.down_gpus)
        if self._classes is None or self._classes[0] != id(state.cluster) or self._classes[1] != down:
            self._classes = (id(state.cluster), down, NodeTypes.of(node_classes(state)))
        return self._classes[2]

    def _remaining_s(self, s: JobState, state: ClusterState) -> float:
        """Predicted time to finish alone: on its current GPU type when running, else its fastest type."""
        if s.assignment is not None:
            return s.remaining_iterations * self._est.step_time_s(s.job, state.cluster.gpu_type_of(s.assignment.gpus[0]))
        types = self._est.candidate_types(s.job, state.cluster)
        return s.remaining_iterations * self._est.step_time_s(s.job, types[0]) if types else math.inf

    def _working_set(self, state: ClusterState) -> tuple[ClusterState, tuple[Assignment, ...], str | None]:
        """The round's jobs (see module docstring), the assignments of the running jobs left out, and what
        triggers the solve (``None`` and no jobs: no solve)."""
        trigger = self._trigger(state)
        if trigger is None:
            return ClusterState(state.time_s, state.cluster, ()), (), None
        round_state, kept = self._select(state)
        return round_state, kept, trigger

    def _trigger(self, state: ClusterState) -> str | None:
        """What triggers a solve now (see module docstring; ``None``: no solve); finds the movers."""
        idle = self._idle(state)
        now = state.placements_by_id()
        specs = state.running_jobs_by_id()
        self._idle_seen = dict(idle.total)
        self._declined = {k: (gpus, seen) for k, (gpus, seen) in self._declined.items()
                          if k in now and now[k].gpus == gpus and not idle.grew_since(seen)}
        self._movers = set()
        for ids in _sharing_ids(now):  # movers first; only placements are read, not the running jobs' progress
            if len(ids) == 1 and self._on_fastest(specs[ids[0]], now[ids[0]], state):
                continue
            if not all(k in self._declined for k in ids) \
                    and self._could_move([(specs[k], now[k]) for k in ids], idle, state):
                self._movers.update(ids)
        movers = len(self._movers)
        waiting = state.queued()
        stale = self.round_interval_s is not None and state.time_s - self._last_solve_s >= self.round_interval_s
        news = any(s.job.id not in self._seen_waiting for s in waiting)
        if movers and not news and not stale and self._at_scale(state):  # movers wait for the periodic round
            movers = 0
            self._movers = set()
        trigger = "new_waiting" if news else "movers" if movers else "changed"
        if not news and not movers:
            if not (waiting and stale):
                return None  # nothing new waits, nobody moves
            if _inputs(state) == self._seen_inputs:
                self.skipped_solves += 1
                return None  # only the clock moved
        return trigger

    def _at_scale(self, state: ClusterState) -> bool:
        """Whether the cluster is large enough for the shortcuts that trade schedule quality for speed: starts
        without a solve, roomy rounds, movers waiting for the periodic round (more than
        ``shortcuts_above_gpus`` GPUs, default :data:`SHORTCUTS_ABOVE_GPUS`). On the 64-GPU Philly window they cost up to 12% avg JCT and 2.5x the
        makespan (jobs waiting for GPUs that greedy starts between solves kept taking); on the full trace at
        1,024 GPUs they make the run minutes instead of hours."""
        return state.cluster.num_gpus > self.shortcuts_above_gpus

    def _min_interval(self, state: ClusterState) -> float:
        """``min_interval_s``; ``auto``: :data:`AUTO_INTERVAL_S` per :data:`AUTO_INTERVAL_GPUS` GPUs, at least that."""
        if self.min_interval_s == "auto":
            return AUTO_INTERVAL_S * max(1.0, state.cluster.num_gpus / AUTO_INTERVAL_GPUS)
        return float(self.min_interval_s)

    def _select(self, state: ClusterState) -> tuple[ClusterState, tuple[Assignment, ...]]:
        """The round's jobs (see module docstring) and the assignments of the running jobs left out."""
        cap = self.max_round_jobs
        waiting = state.queued()
        movers = len(self._movers)
        roomy = 3 * len(waiting) + movers
        if roomy < len(state.jobs) and (cap is None or roomy < cap) and self._at_scale(state) \
                and self._roomy(state, waiting):
            self._scope, cap = "roomy", roomy
        else:
            self._scope = "all" if cap is None or len(state.jobs) <= cap else "capped"
        if self._scope == "all":
            return state, ()
        assert cap is not None
        running = state.running()
        groups = [(not any(s.job.id in self._movers for s in g), g) for g in sharing_groups(running)]
        queued = self._between_solves_order(state)
        take_queued = min(len(queued), max(cap - len(running), cap // 2))
        groups.sort(key=lambda entry: (entry[0], -max(self._remaining_s(s, state) for s in entry[1])))
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

    def _roomy(self, state: ClusterState, waiting: Sequence[JobState]) -> bool:
        """Idle GPUs hold every waiting job alone at once (greedily, on a type it fits)."""
        if not waiting:
            return True
        started = place_exclusive(state, waiting, self._est, blocking=True)
        return len(started.assignments) == len(waiting)

    def _could_move(self, group: Sequence[tuple[Job, Assignment]], idle: _Idle, state: ClusterState) -> bool:
        """A job could run faster elsewhere now: it shares GPUs and the idle GPUs of its own type or a
        faster one can hold it, or a faster type's idle GPUs can hold it (one node, unless it is larger
        than every node of that type)."""
        for job, assignment in group:
            types = self._est.candidate_types(job, state.cluster)
            now = state.cluster.gpu_type_of(assignment.gpus[0])
            better = types[: types.index(now) + (len(group) > 1)] if now in types else types
            if any(idle.can_hold(t, job.num_gpus) for t in better):
                return True
        return False

    def _seen_for(self, job_id: str, state: ClusterState) -> dict[str, int]:
        """The idle GPUs the last working set saw of the types running job ``job_id`` could move to faster: the
        types faster than its own, and its own when it shares its GPUs (more idle GPUs of another type
        cannot speed it up)."""
        placements = state.placements_by_id()
        job, assignment = state.running_jobs_by_id()[job_id], placements[job_id]
        types = self._est.candidate_types(job, state.cluster)
        now = state.cluster.gpu_type_of(assignment.gpus[0])
        shared = any(k != job_id and not set(a.gpus).isdisjoint(assignment.gpus) for k, a in placements.items())
        better = types[: types.index(now) + shared] if now in types else types
        return {t: self._idle_seen.get(t, 0) for t in better}

    def _on_fastest(self, job: Job, assignment: Assignment, state: ClusterState) -> bool:
        """A job alone on its GPUs of its fastest type (it could not move faster; remembered per placement)."""
        key = (job.id, assignment.gpus, memory_observations_version())
        hit = self._fastest.get(key)
        if hit is None:
            types = self._est.candidate_types(job, state.cluster)
            if len(self._fastest) > 100_000:
                self._fastest.clear()
            hit = self._fastest[key] = bool(types) and state.cluster.gpu_type_of(assignment.gpus[0]) == types[0]
        return hit

    def _idle(self, state: ClusterState) -> _Idle:
        """:meth:`_Idle.of`, re-used while the snapshot's free GPUs are the same object (nothing changed)."""
        free = state.free_gpus_by_node()
        if self._idle_of is None or self._idle_of[0] is not free or self._idle_of[1] is not state.cluster:
            self._idle_of = (free, state.cluster, _Idle.of(state))
        return self._idle_of[2]

    def _between_solves_order(self, state: ClusterState) -> Sequence[JobState]:
        """Waiting jobs by urgency: shortest predicted remaining time first under ``jct``, longest first under
        ``effective_progress`` with a ``length_weight`` (the makespan configuration), else arrival order."""
        queued = state.queued()
        if self.solver.objective != "jct":
            if isinstance(self._options, RoundOptions) and self._options.length_weight > 0:
                return sorted(queued, key=lambda s: (-self._remaining_s(s, state), s.job.arrival_time_s, s.job.id))
            return queued
        return sorted(queued, key=lambda s: (self._remaining_s(s, state), s.job.arrival_time_s, s.job.id))

    def state_dict(self) -> dict[str, Any]:
        return {"last_solve_s": self._last_solve_s if self._last_solve_s != float("-inf") else None,
                "declined": {k: {"gpus": list(gpus), "idle": dict(seen)}
                             for k, (gpus, seen) in sorted(self._declined.items())},
                "seen_waiting": sorted(self._seen_waiting),
                "seen_inputs": None if self._seen_inputs is None else {
                    "jobs": sorted(self._seen_inputs[0]), "down_gpus": sorted(self._seen_inputs[1]),
                    "memory_version": self._seen_inputs[2], "profiles": self._seen_inputs[3]}}

    def load_state_dict(self, data: dict[str, Any]) -> None:
        value = data.get("last_solve_s")
        self._last_solve_s = float("-inf") if value is None else float(value)
        self._declined = {k: (tuple(d["gpus"]), {t: int(n) for t, n in d["idle"].items()})
                          for k, d in data.get("declined", {}).items()}
        self._seen_waiting = frozenset(data.get("seen_waiting", ()))
        seen = data.get("seen_inputs")
        self._seen_inputs = None if seen is None else (frozenset(seen["jobs"]), frozenset(int(g) for g in seen["down_gpus"]),
                                                       int(seen["memory_version"]), int(seen.get("profiles", 0)))


def _profiles() -> int:
    """How many profiles the run has measured on arrival (0 without profiling)."""
    book = current_profiles()
    return 0 if book is None else len(book)


def _inputs(state: ClusterState) -> tuple[frozenset[str], frozenset[int], int, int]:
    """What a solve's inputs change with besides the clock: the active jobs, the down GPUs, the run's
    memory measurements and its profiles measured on arrival (running jobs' placements change only by the
    policy's own plans)."""
    active = frozenset(state.placements_by_id()).union(s.job.id for s in state.queued())
    book = current_profiles()
    return active, frozenset(state.down_gpus), memory_observations_version(), 0 if book is None else len(book)


@dataclass(frozen=True, slots=True)
class _Idle:
    """Per GPU type: idle GPUs (up, holding no job) in all, most idle in one node, and the largest node."""

    total: dict[str, int]
    in_one_node: dict[str, int]
    largest_node: dict[str, int]

    @staticmethod
    def of(state: ClusterState) -> _Idle:
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
        return _Idle(total, one, largest)

    def grew_since(self, seen: dict[str, int]) -> bool:
        """Some GPU type of ``seen`` (idle GPUs per type at an earlier round) has more idle GPUs now."""
        return any(self.total.get(t, 0) > n for t, n in seen.items())

    def can_hold(self, gpu_type: str, num_gpus: int) -> bool:
        """A gang of ``num_gpus`` fits the idle GPUs of ``gpu_type`` as a placement would use them."""
        if num_gpus <= self.largest_node.get(gpu_type, 0):
            return self.in_one_node.get(gpu_type, 0) >= num_gpus
        return self.total.get(gpu_type, 0) >= num_gpus


def _shared_gpu_groups(gpu_sets: Sequence[Sequence[int]]) -> list[list[int]]:
    """Indices of ``gpu_sets`` grouped so that sets sharing any GPU are in one group (stable order, union-find)."""
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
    """Running jobs grouped so that jobs sharing any GPU are in one group (stable order)."""
    gpu_sets = [s.assignment.gpus if s.assignment else () for s in running]
    return [[running[i] for i in g] for g in _shared_gpu_groups(gpu_sets)]


def colocation_fallbacks(colocation: Any, plan: Plan, state: ClusterState) -> tuple[str, ...]:
    """Ids of the jobs sharing a GPU in ``plan`` whose co-location numbers rest on a fallback: the co-location
    predictor (found through the wrappers' ``inner``) reports them ``predicted``: it had no profile of the job on
    that GPU type and predicted its step time, memory and utilisation (``colocation_sources``, the profile model's
    per-job sources; ``partial``, a profile with some values predicted, is not a fallback). Empty when the
    predictor reports no sources."""
    sources = None
    for _ in range(8):  # memo, profiled and measured wrappers
        sources = getattr(colocation, "colocation_sources", None)
        if sources is not None or not hasattr(colocation, "inner"):
            break
        colocation = colocation.inner
    if sources is None:
        return ()
    jobs = {s.job.id: s.job for s in state.jobs}
    out: set[str] = set()
    for gpu, members in plan.resolved(state).colocation_groups().items():
        group = [jobs[j] for j in members if j in jobs]
        if len(group) < 2:
            continue
        try:
            found = sources(group, state.cluster.gpu_type_of(gpu))
        except ValidationError:  # a group larger than the predictor answers for: not priced by it either
            continue
        out.update(j.id for j, src in zip(group, found, strict=True) if src == "predicted")
    return tuple(sorted(out))

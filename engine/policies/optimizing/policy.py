"""The rolling-horizon optimizing policy: every round is a CP-SAT or MILP model over co-location and freezing.

At each decision point (arrival, completion, failure, or the ``round_interval_s`` tick) the policy hands
the snapshot to its :class:`~dltsched.engine.domain.protocols.RoundSolver` (the application passes the round
pipeline's :class:`~dltsched.formulations.pipeline.ConfiguredSolver`), which builds the round's
:class:`~dltsched.formulations.RoundProblem` from the predictors, solves it with its backend under its time
limit warm-started from the current placements, checks the plan with the solver-independent checker and
falls back to a greedy plan when the solver gives nothing usable. A round that times out keeps the
solver's best plan. Migration and preemption are priced by the rounds' ``migration_penalty``; the simulator
also charges the checkpoint-restore time of every moved job.

Which decision points solve, and which jobs a solving round holds, is the working set's
(:mod:`dltsched.engine.policies.optimizing.trigger`); what the policy predicts and prices between solves
is kept by its prediction cache (:mod:`dltsched.engine.policies.optimizing.cache`).

Events closer than ``min_interval_s`` (``auto``, the default: 300 s up to 128 GPUs, 300 s per 128 GPUs
above) to the last solve are batched: running jobs stay, new arrivals start as settled
starts (below) when they can, else greedily on free GPUs (shortest predicted remaining time first under the
``jct`` objective, longest first under the makespan configuration ``effective_progress`` with a
``length_weight``, else in arrival order), and the next solve sees everything. A decision point that
triggers no solve does the same.

Batched arrivals. A solve triggered by ``new_waiting`` waits while the jobs no solve has seen waiting are
fewer than ``arrival_share`` (5%) of the active jobs and the last solve is less than ``round_interval_s``
ago: they start greedily on free GPUs meanwhile (as between solves; ``batched_arrivals`` counts these
decision points), and the solve comes when enough of them wait or at the periodic round. A lone arrival
changes a round of many jobs little; solving each one cost the policy most of its time on busy windows
(``docs/speed.md``: up to 40% fewer solves on the Philly windows measured there, average JCT within 1%).

Settled starts. A solve triggered by ``new_waiting`` alone (no movers) is skipped when the waiting jobs can
start alone on idle GPUs at their best options, all at once, most urgent first: they start there
(``settled_starts`` counts these decision points). A job's best option is the one at which it progresses
fastest alone (:func:`~dltsched.formulations.pipeline.best_alone`), placed in one node when a node of its type
is large enough. Placing such a job takes only idle GPUs, and no objective values its placement higher.

- Up to ``shortcuts_above_gpus`` GPUs, exactly: only when every waiting job is one no solve has seen (nothing
  else waits, so nobody else could want those GPUs), at its best option over the freeze levels the rounds
  offer - the option a solve gives it.
- On a larger cluster, at its best unfrozen option (freeze level 0), skipping waiting jobs a solve has seen
  (that solve let them wait): what a solve could still change is the freeze level, which the next solve
  revisits. Freezing is left to the solves, which weigh it against the other jobs.

Freeze levels between solves. Up to ``shortcuts_above_gpus`` GPUs, a running job that may freeze and holds
its GPUs alone runs at its best freeze level where it is: at each decision point without a solve, and for the
running jobs a solving round leaves out, the policy prices it again once it has run ``refreeze_step`` (2%) of
its work since it was last priced there (at its predicted unfrozen speed: no job's progress is read before
then), and changes its level in place (a freeze change keeps the job's GPUs: no restart) when another level
of its GPU type progresses faster
(:meth:`~dltsched.engine.policies.optimizing.cache.PredictionCache.best_in_place`). That is the level a solve
keeping it there would choose: its frozen penalty falls as it progresses, so later levels pay off later, and
a job's term in every objective grows with its rate. Before, only solves moved a job's level, so how often
jobs froze followed how often the policy solved (``refrozen`` counts the changes).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Assignment, ClusterState, JobState, Plan
from dltsched.engine.domain.predictors import Predictors
from dltsched.engine.domain.protocols import RoundSolver
from dltsched.engine.policies.greedy import place_exclusive
from dltsched.engine.policies.optimizing.cache import PredictionCache
from dltsched.engine.policies.optimizing.trigger import WorkingSet
from dltsched.engine.policies.placement import GpuPool
from dltsched.formulations.pipeline import (
    JCT_MIN_REMAINING_S,
    RoundOptions,
    colocation_fallbacks,
    median_remaining_s,
)
from dltsched.predictors import available_predictors

log = logging.getLogger("dltsched.engine.policies.optimizing")

#: the ``auto`` cadence (see :class:`OptimizingPolicy`): a solve at most every ``AUTO_INTERVAL_S`` per
#: ``AUTO_INTERVAL_GPUS`` GPUs (at least ``AUTO_INTERVAL_S``), so that the solves of a simulated hour cost
#: about as much on a large cluster, whose events come faster, as on a small one
AUTO_INTERVAL_GPUS = 128
AUTO_INTERVAL_S = 300.0
#: clusters above this many GPUs use the speed shortcuts (settled starts, roomy rounds, movers waiting for
#: the periodic round): they trade schedule quality for speed
SHORTCUTS_ABOVE_GPUS = 256
#: batched arrivals (see :class:`OptimizingPolicy`): a solve for new waiting jobs alone waits, up to
#: ``round_interval_s`` after the last solve, until they are at least this share of the active jobs
ARRIVAL_SHARE = 0.05
#: freeze levels between solves (see :class:`OptimizingPolicy`): a running job is priced again once it has run
#: this share of its work (at its predicted speed) since it was last priced where it runs
REFREEZE_STEP = 0.02
#: what the policy asks of its solver (:class:`~dltsched.engine.domain.protocols.RoundSolver`)
ROUND_SOLVER_MEMBERS = ("objective", "options", "with_options", "marks_colocation_fallbacks", "solve")


@dataclass
class OptimizingPolicy:
    """Rolling-horizon co-location + freezing optimizer (see the module docstring).

    Parameters
    ----------
    solver
        Decides the solving rounds (the registry's factory, :func:`dltsched.engine.app.api.optimizing_policy`,
        passes a :class:`~dltsched.formulations.pipeline.ConfiguredSolver` built from its solve settings).
    predictors
        Price the rounds and the greedy starts between them (default: the packaged ones).
    min_interval_s
        Seconds between solves at least; ``auto``: 300 s per 128 GPUs, at least 300 s.
    round_interval_s
        The periodic round's interval (``None``: none).
    max_round_jobs
        The most jobs a solving round holds (``None``: every active job).
    name
        The policy's name in results.
    shortcuts_above_gpus
        Clusters above this many GPUs take the speed shortcuts (:data:`SHORTCUTS_ABOVE_GPUS`).
    arrival_share
        Batched arrivals: a solve for new waiting jobs waits until they are this share of the active jobs,
        or the periodic round (:data:`ARRIVAL_SHARE`; 0: every arrival is solved at once).
    refreeze_step
        Freeze levels between solves: the share of a running job's work it runs (at its predicted speed) after
        it was last priced where it runs before it is priced again (:data:`REFREEZE_STEP`; 0: at every
        decision point; 1: never, only solves change freeze levels).

    Raises
    ------
    ValidationError
        When ``max_round_jobs``, ``min_interval_s``, ``arrival_share`` or ``refreeze_step`` is not understood,
        or ``solver``
        lacks a member of :class:`~dltsched.engine.domain.protocols.RoundSolver`.
    """

    solver: RoundSolver[RoundOptions]
    predictors: Predictors | None = None
    min_interval_s: float | str = "auto"
    round_interval_s: float | None = 1800.0
    max_round_jobs: int | None = 256
    name: str = "optimizing"
    shortcuts_above_gpus: int = SHORTCUTS_ABOVE_GPUS
    arrival_share: float = ARRIVAL_SHARE
    refreeze_step: float = REFREEZE_STEP

    def __post_init__(self) -> None:
        cap = self.max_round_jobs
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 2):
            raise ValidationError("max_round_jobs", f"{cap!r} not understood; an integer >= 2, or none for "
                                  "every active job")
        gap = self.min_interval_s
        if gap != "auto" and (isinstance(gap, bool) or not isinstance(gap, int | float)
                              or not 0 <= gap < math.inf):
            raise ValidationError("min_interval_s", f"{gap!r} not understood; seconds >= 0, or auto (300 s "
                                  "per 128 GPUs, at least 300 s)")
        share = self.arrival_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 1:
            raise ValidationError("arrival_share", f"{share!r} not understood; a share of the active jobs in "
                                  "[0, 1] (0: every arrival is solved at once)")
        step = self.refreeze_step
        if isinstance(step, bool) or not isinstance(step, int | float) or not 0 <= step <= 1:
            raise ValidationError("refreeze_step", f"{step!r} not understood; a share of a job's work in "
                                  "[0, 1] (0: at every decision point; 1: only solves change freeze levels)")
        missing = [m for m in ROUND_SOLVER_MEMBERS if not hasattr(self.solver, m)]
        if missing:
            raise ValidationError("solver", f"{type(self.solver).__name__} lacks {', '.join(missing)}; a "
                                  f"round solver declares {', '.join(ROUND_SOLVER_MEMBERS)} (RoundSolver)")
        if self.predictors is None:
            self.predictors = available_predictors()
        self.cache = PredictionCache(self.predictors)
        self.working_set = WorkingSet(self.cache)
        self.solve_log: list[dict[str, Any]] = []
        self.triggers: dict[str, int] = {}  #: solves per trigger (see the working set)
        #: decision points at which every waiting job started alone at its best option on idle GPUs, unsolved
        self.settled_starts = 0
        #: decision points whose new waiting jobs waited for more arrivals (or the periodic round), unsolved
        self.batched_arrivals = 0
        #: running jobs whose freeze level changed in place between solves (or while a round left them out)
        self.refrozen = 0
        #: per running job that may freeze, where it was last priced (its GPUs, level) and when it is next
        self._freeze_priced: dict[str, tuple[tuple[int, ...], int, float]] = {}

    @property
    def skipped_solves(self) -> int:
        """Periodic ticks that re-used the last plan: nothing but the clock changed."""
        return self.working_set.skipped_solves

    def schedule(self, state: ClusterState) -> Plan:
        """The plan for ``state``: a solved round, settled starts, or greedy starts between solves.

        Parameters
        ----------
        state
            The cluster snapshot.

        Returns
        -------
        Plan
            The plan (``incremental`` between solves: running jobs stay).
        """
        if not state.jobs:
            return Plan()
        work = self.working_set
        at_scale = self._at_scale(state)
        if state.time_s - work.last_solve_s < self._min_interval(state):
            return self._start_greedily(state, at_scale)
        trigger = work.trigger(state, round_interval_s=self.round_interval_s, at_scale=at_scale)
        if trigger is None:  # nothing new waits, nobody could move, nothing changed
            return self._start_greedily(state, at_scale)
        if trigger == "new_waiting" and (at_scale or not work.movers):
            plan, settled = self._settled_starts(state, at_scale)
            if settled:  # every new waiting job starts at its best option: no solve can do better for it
                self.settled_starts += 1
                return plan if at_scale else self._refreeze(state, plan)
        if trigger == "new_waiting" and self._batched(state):
            self.batched_arrivals += 1
            return self._start_greedily(state, at_scale)
        round_state, kept = work.select(state, max_round_jobs=self.max_round_jobs, at_scale=at_scale,
                                        urgency=self._between_solves_order)
        warm = round_state.current_plan() if any(s.assignment is not None for s in round_state.jobs) else None
        plan = self._round_solver(state).solve(round_state, warm_start=warm, predictors=self.cache.predictors)
        work.solved(state, round_state, plan)
        self.triggers[trigger] = self.triggers.get(trigger, 0) + 1
        if kept:
            plan = replace(plan, assignments=plan.assignments + kept)
            if not at_scale:
                plan = self._refreeze(state, plan, only={a.job_id for a in kept})
        if kept or not self.solver.marks_colocation_fallbacks:
            fallbacks = colocation_fallbacks(self.cache.predictors.colocation, plan, state)
        else:  # the solver marked them on this very plan: not priced twice
            fallbacks = plan.colocation_fallbacks
        if fallbacks:  # the predictor warns once per model and GPU type; the plan names the jobs every round
            plan = replace(plan, colocation_fallbacks=fallbacks)
            log.info("round at %.0f s: co-location of %d job(s) rests on predicted profiles (no profile on "
                     "their GPU type): %s", state.time_s, len(fallbacks), ", ".join(fallbacks[:5]) +
                     (", ..." if len(fallbacks) > 5 else ""))
        self.solve_log.append({"time_s": state.time_s, "status": plan.status,
                               "solve_time_s": plan.solve_time_s, "build_time_s": plan.build_time_s,
                               "gap": plan.gap, "jobs": len(round_state.jobs),
                               "active_jobs": len(state.jobs), "waiting_jobs": len(state.queued()),
                               "movers": len(work.movers), "trigger": trigger, "scope": work.scope,
                               "colocation_fallbacks": len(fallbacks)})
        return plan

    def next_round(self, state: ClusterState) -> tuple[ClusterState, tuple[Assignment, ...], str | None]:
        """The round a solve would decide now, without solving it.

        Parameters
        ----------
        state
            The cluster snapshot.

        Returns
        -------
        tuple
            The round's state, the assignments of the running jobs left out of it, and what triggers the
            solve (``None`` and no jobs: no solve).
        """
        at_scale = self._at_scale(state)
        trigger = self.working_set.trigger(state, round_interval_s=self.round_interval_s, at_scale=at_scale)
        if trigger is None:
            return ClusterState(state.time_s, state.cluster, ()), (), None
        round_state, kept = self.working_set.select(state, max_round_jobs=self.max_round_jobs,
                                                    at_scale=at_scale, urgency=self._between_solves_order)
        return round_state, kept, trigger

    def _start_greedily(self, state: ClusterState, at_scale: bool) -> Plan:
        """Running jobs stay (up to ``shortcuts_above_gpus`` GPUs at their best freeze levels, see the module
        docstring); waiting jobs start on free GPUs, most urgent first, at freeze level 0. Between solves
        nothing weighs one job's best option against the next job's, so they do not start at their best
        options alone here."""
        if not state.queued() or not any(state.free_gpus_by_node()):
            plan = Plan(incremental=True)
        else:
            plan = place_exclusive(state, self._between_solves_order(state), self.cache.estimates,
                                   blocking=False)
        return plan if at_scale else self._refreeze(state, plan)

    def _refreeze(self, state: ClusterState, plan: Plan, only: set[str] | None = None) -> Plan:
        """``plan`` with the running jobs that hold their GPUs alone at their best freeze levels there (see
        the module docstring); ``only``: these jobs alone (a round's left-out jobs, which ``plan`` keeps)."""
        if self.refreeze_step >= 1:
            return plan
        specs = state.running_jobs_by_id()
        freezing = [k for k, job in specs.items() if job.freeze_allowed and (only is None or k in only)]
        if not freezing:
            return plan
        placements = state.placements_by_id()
        on = state.jobs_on_gpus()
        priced, now = self._freeze_priced, state.time_s
        progress: Any = None
        types: Any = None
        changes: dict[str, Assignment] = {}
        for k in freezing:
            a = placements[k]
            last = priced.get(k)
            if last is not None and last[0] == a.gpus and last[1] == a.freeze_level and now < last[2]:
                continue
            if any(len(on[g]) > 1 for g in a.gpus):
                continue  # a co-located job's level is weighed with its partners': left to the solves
            if progress is None:
                progress, types = state.running_states(), self.cache.node_types(state)
            gpu_type = state.cluster.gpu_type_of(a.gpus[0])
            best = self.cache.best_in_place(progress[k], types, gpu_type, self.solver.options) \
                if gpu_type in types.total else None
            level = a.freeze_level if best is None else best.freeze_level
            job = specs[k]  # priced again once it has run refreeze_step of its work at its predicted speed
            priced[k] = (a.gpus, level,
                         now + self.refreeze_step * job.total_iterations * self.cache.estimates.step_time_s(
                             job, gpu_type))
            if level != a.freeze_level:
                changes[k] = Assignment(k, a.gpus, level)
        if len(priced) > 2 * len(specs) + 64:  # forget finished jobs
            self._freeze_priced = {k: v for k, v in priced.items() if k in specs}
        if not changes:
            return plan
        self.refrozen += len(changes)
        if only is None:
            return replace(plan, assignments=plan.assignments + tuple(changes.values()))
        return replace(plan, assignments=tuple(changes.get(a.job_id, a) for a in plan.assignments))

    def _settled_starts(self, state: ClusterState, at_scale: bool) -> tuple[Plan, bool]:
        """Waiting jobs, most urgent first, alone on idle GPUs at their best options (in one node when one
        of the type is large enough; see the module docstring). Up to ``shortcuts_above_gpus`` GPUs, only
        when no solve has seen any of them, at the freeze levels the rounds offer; on a larger cluster
        unfrozen, and a job a solve has seen waiting is skipped (that solve let it wait). The first job no
        solve has seen that cannot start so ends the attempt (later ones might take the GPUs a solve would
        give it). Returns the starts and whether every waiting job no solve has seen started so."""
        seen_waiting = self.working_set.seen_waiting
        options = self.solver.options
        if at_scale:  # unfrozen only: freezing is left to the solves, which weigh it against the other jobs
            options = replace(options, freeze_levels=1)
        elif any(s.job.id in seen_waiting for s in state.queued()):
            return Plan(incremental=True), False
        cache = self.cache
        types = cache.node_types(state)
        pool = GpuPool.current(state)
        placed: list[Assignment] = []
        for s in self._between_solves_order(state):
            gpus = None
            if s.job.gpu_fraction >= 1.0:
                best = cache.best_alone(s, state.time_s, types, options)
                if best is not None:
                    gpus = pool.take_free(s.job, best.gpu_type)
                    if gpus is not None and best.cross_step_time_s is None \
                            and len({state.cluster.gpu_node[g] for g in gpus}) > 1:
                        gpus = None
                if gpus is not None:
                    pool.occupy(s.job.id, gpus)
                    placed.append(Assignment(s.job.id, gpus, best.freeze_level))  # type: ignore[union-attr]
                    continue
            if s.job.id not in seen_waiting:  # a job a solve has seen waiting blocks nobody: it was decided
                return Plan(incremental=True), False
        return Plan(tuple(placed), incremental=True), True

    def _batched(self, state: ClusterState) -> bool:
        """Whether the jobs no solve has seen waiting wait for more (batched arrivals, see the module
        docstring): fewer than ``arrival_share`` of the active jobs, and the last solve less than
        ``round_interval_s`` ago."""
        work, interval = self.working_set, self.round_interval_s
        if not self.arrival_share or interval is None or state.time_s - work.last_solve_s >= interval:
            return False
        seen = work.seen_waiting
        new = sum(1 for s in state.queued() if s.job.id not in seen)
        return new < self.arrival_share * len(state.jobs)

    def _round_solver(self, state: ClusterState) -> RoundSolver[RoundOptions]:
        """The solver of a ``roomy`` round under ``jct``: the jobs' value scale relative to the median
        predicted remaining time over every active job, not only the round's (see the working set)."""
        if self.working_set.scope != "roomy" or self.solver.objective != "jct":
            return self.solver
        options = self.solver.options
        types = self.cache.node_types(state)
        times = []
        for s in state.jobs:
            rate = self.cache.reference_rate(s, types, options)
            if rate:
                times.append(max(JCT_MIN_REMAINING_S, s.remaining_iterations / rate))
        return self.solver.with_options(value_reference_s=median_remaining_s(times)) if times else self.solver

    def _at_scale(self, state: ClusterState) -> bool:
        """Whether the cluster is large enough for the shortcuts that trade schedule quality for speed: starts
        without a solve, roomy rounds, movers waiting for the periodic round (more than
        ``shortcuts_above_gpus`` GPUs, default :data:`SHORTCUTS_ABOVE_GPUS`)."""
        return state.cluster.num_gpus > self.shortcuts_above_gpus

    def _min_interval(self, state: ClusterState) -> float:
        """``min_interval_s``; ``auto``: :data:`AUTO_INTERVAL_S` per :data:`AUTO_INTERVAL_GPUS` GPUs, at
        least that."""
        if self.min_interval_s == "auto":
            return AUTO_INTERVAL_S * max(1.0, state.cluster.num_gpus / AUTO_INTERVAL_GPUS)
        return float(self.min_interval_s)

    def _between_solves_order(self, state: ClusterState) -> Sequence[JobState]:
        """Waiting jobs by urgency: shortest predicted remaining time first under ``jct``, longest first under
        ``effective_progress`` with a ``length_weight`` (the makespan configuration), else arrival order."""
        if self.solver.objective != "jct":
            if self.solver.options.length_weight > 0:
                return self.cache.queue_order(state, longest_first=True)
            return state.queued()
        return self.cache.queue_order(state, longest_first=False)

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to decide as this one would (JSON-ready; the caches are rebuilt).

        Returns
        -------
        dict
            The working set's state (:meth:`WorkingSet.state_dict`) and, per running job that may freeze,
            where it was last priced and when it is priced next (``freeze_priced``).
        """
        return self.working_set.state_dict() | {"freeze_priced": {
            k: {"gpus": list(gpus), "level": level, "next_s": t}
            for k, (gpus, level, t) in sorted(self._freeze_priced.items())}}

    def load_state_dict(self, data: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`'s output.

        Parameters
        ----------
        data
            What :meth:`state_dict` gave.
        """
        self.working_set.load_state_dict(data)
        self._freeze_priced = {k: (tuple(int(g) for g in d["gpus"]), int(d["level"]), float(d["next_s"]))
                               for k, d in data.get("freeze_priced", {}).items()}

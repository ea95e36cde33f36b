"""The optimizing policy's prediction cache: what it asks the predictors and the round's pricing, once.

A policy that decides every few minutes asks about the same jobs again and again. :class:`PredictionCache`
holds every answer the policy keeps across decisions: the memoized predictors the rounds are priced with,
the greedy estimates (step time, memory, candidate GPU types), and the round prices of the pipeline
(:mod:`dltsched.formulations.pipeline`: node types, a job's best option alone, its reference rate).

Invalidation rule: an answer is kept under everything it depends on besides the predictors, which are fixed
for the cache's life, so a kept answer is what asking again would give:

- node types: the cluster object and its down GPUs;
- a job's best option alone: the job, its remaining iterations, the node types, the run's memory-measurement
  version (:func:`~dltsched.engine.domain.predictors.memory_observations_version`), its profile count
  (:func:`~dltsched.engine.domain.profiles.current_profiles`) and the round settings;
- a running job's best option where it runs (:meth:`PredictionCache.best_in_place`): not kept (it moves with
  the job's progress), but what it is priced from is (:class:`~dltsched.formulations.pipeline.KeptOptions`:
  the job's options at its last progress, its predicted memory and step times per GPU type and freeze level),
  per job object, profile version and GPU type, under the node types object, the round settings and the
  memory version; the node types of one GPU type it is priced on are kept per node types object;
- a job's reference rate: the job, under the node types and the memory version of the last ask (a change of
  either drops every rate);
- whether a running job sits on its fastest type: the job, its GPUs and the memory version;
- the waiting jobs by predicted remaining time: the queue (a simulator hands the same tuple while it does not
  change), and each waiting job's predicted remaining time per job and remaining iterations, under the
  cluster object and the memory version.

A memo that grows past :attr:`PredictionCache.MAX_ENTRIES` entries is emptied.
"""

from __future__ import annotations

import math
from typing import Any

from dltsched.engine.domain.model import Assignment, ClusterState, Job, JobState
from dltsched.engine.domain.predictors import Predictors, memoized, memory_observations_version
from dltsched.engine.domain.profiles import current_profiles, profile_version
from dltsched.engine.policies.placement import Estimates
from dltsched.formulations.pipeline import (
    JobOption,
    KeptOptions,
    NodeTypes,
    RoundOptions,
    best_alone,
    node_types,
    reference_rate,
)


def _profiles() -> int:
    """How many profiles the run has measured on arrival (0 without profiling)."""
    book = current_profiles()
    return 0 if book is None else len(book)


class PredictionCache:
    """The predictions and round prices the optimizing policy keeps across decisions (see the module).

    Parameters
    ----------
    predictors
        The predictors every answer comes from; the cache asks them through :func:`memoized`.
    """

    #: entries a memo keeps at most; when full, it is emptied
    MAX_ENTRIES = 100_000

    def __init__(self, predictors: Predictors) -> None:
        #: the memoized predictors the rounds are priced with (rounds ask about the same jobs again and again)
        self.predictors = memoized(predictors)
        #: the greedy estimates (step time, memory, candidate types) between solves
        self.estimates = Estimates(self.predictors)
        self._classes: tuple[int, frozenset[int], NodeTypes] | None = None
        self._rates: dict[str, float | None] = {}
        self._rates_version: tuple[int, int] | None = None
        self._best: dict[tuple[Any, ...], JobOption | None] = {}
        self._fastest: dict[tuple[str, tuple[int, ...], int], bool] = {}
        #: the last queue ordered by :meth:`queue_order`; each waiting job's predicted remaining time, by job
        #: and remaining iterations
        self._order: tuple[object, tuple[int, int, bool], tuple[JobState, ...]] | None = None
        self._waiting_left: dict[tuple[str, float], float] = {}
        self._order_version: tuple[int, int] | None = None
        #: the node types of the last ask of :meth:`best_in_place`, its settings and memory version, its
        #: one-type node types and, per (job id, GPU type), what is kept of the job's options there
        self._one_type: tuple[NodeTypes, tuple[RoundOptions, int], dict[str, NodeTypes],
                              dict[tuple[str, str], tuple[Job, int, KeptOptions]]] | None = None

    def best_in_place(self, js: JobState, types: NodeTypes, gpu_type: str,
                      options: RoundOptions) -> JobOption | None:
        """The option at which ``js`` progresses fastest alone on GPUs of ``gpu_type``: its best freeze level
        there (:func:`~dltsched.formulations.pipeline.best_alone` on that type's nodes alone).

        Parameters
        ----------
        js
            The job (its progress prices its frozen levels).
        types
            The node types (:meth:`node_types`).
        gpu_type
            The GPU type it runs on.
        options
            The round settings the option must meet.

        Returns
        -------
        JobOption or None
            The option; ``None``: no option of the type fits.
        """
        context = (options, memory_observations_version())
        if self._one_type is None or self._one_type[0] is not types or self._one_type[1] != context \
                or len(self._one_type[3]) > self.MAX_ENTRIES:
            self._one_type = (types, context, {}, {})
        per_type, kept = self._one_type[2], self._one_type[3]
        one = per_type.get(gpu_type)
        if one is None:
            one = per_type[gpu_type] = NodeTypes({gpu_type: types.nodes[gpu_type]},
                                                 {gpu_type: types.largest[gpu_type]},
                                                 {gpu_type: types.total[gpu_type]},
                                                 {gpu_type: types.memory_mib[gpu_type]})
        job, version = js.job, profile_version(js.job.id)
        entry = kept.get((job.id, gpu_type))
        if entry is None or entry[0] is not job or entry[1] != version:
            entry = kept[(job.id, gpu_type)] = (job, version, KeptOptions(self.predictors))
        return best_alone(js, 0.0, one, self.predictors, options, kept=entry[2])

    def node_types(self, state: ClusterState) -> NodeTypes:
        """The GPU classes of ``state`` per type (:func:`~dltsched.formulations.pipeline.node_types`).

        Parameters
        ----------
        state
            The cluster snapshot.

        Returns
        -------
        NodeTypes
            The same object while the cluster and its down GPUs are the same.
        """
        down = frozenset(state.down_gpus)
        if self._classes is None or self._classes[0] != id(state.cluster) or self._classes[1] != down:
            self._classes = (id(state.cluster), down, node_types(state))
        return self._classes[2]

    def best_alone(self, js: JobState, time_s: float, types: NodeTypes,
                   options: RoundOptions) -> JobOption | None:
        """The option at which ``js`` progresses fastest alone
        (:func:`~dltsched.formulations.pipeline.best_alone`).

        Parameters
        ----------
        js
            The job.
        time_s
            The decision's time.
        types
            The node types (:meth:`node_types`).
        options
            The round settings the option must meet.

        Returns
        -------
        JobOption or None
            The option; ``None``: no option fits.
        """
        key = (js.job.id, js.remaining_iterations, id(types), memory_observations_version(), _profiles(),
               options.freeze_levels)
        if key not in self._best:
            if len(self._best) > self.MAX_ENTRIES:
                self._best.clear()
            self._best[key] = best_alone(js, time_s, types, self.predictors, options)
        return self._best[key]

    def reference_rate(self, js: JobState, types: NodeTypes, options: RoundOptions) -> float | None:
        """The rate a round normalises ``js``'s progress by
        (:func:`~dltsched.formulations.pipeline.reference_rate`).

        Parameters
        ----------
        js
            The job.
        types
            The node types (:meth:`node_types`).
        options
            The round settings.

        Returns
        -------
        float or None
            Iterations per second; ``None``: the round cannot place the job.
        """
        version = (id(types), memory_observations_version())
        if self._rates_version != version:
            self._rates, self._rates_version = {}, version
        if js.job.id not in self._rates:
            self._rates[js.job.id] = reference_rate(js, types, self.predictors, options)
        return self._rates[js.job.id]

    def on_fastest(self, job: Job, assignment: Assignment, state: ClusterState) -> bool:
        """Whether ``job`` runs on GPUs of its fastest type (it could not move faster).

        Parameters
        ----------
        job
            The running job.
        assignment
            Its placement.
        state
            The cluster snapshot.

        Returns
        -------
        bool
            True when its GPUs are of the first of its candidate types.
        """
        key = (job.id, assignment.gpus, memory_observations_version())
        hit = self._fastest.get(key)
        if hit is None:
            types = self.estimates.candidate_types(job, state.cluster)
            if len(self._fastest) > self.MAX_ENTRIES:
                self._fastest.clear()
            now = state.cluster.gpu_type_of(assignment.gpus[0])
            hit = self._fastest[key] = bool(types) and now == types[0]
        return hit

    def queue_order(self, state: ClusterState, *, longest_first: bool) -> tuple[JobState, ...]:
        """The waiting jobs by predicted remaining time (:meth:`remaining_s`), shortest first (longest first
        with ``longest_first``), ties by arrival and id: what sorting them with that key gives, without
        predicting a job again while its remaining iterations, the cluster and the memory version are the
        same.

        Parameters
        ----------
        state
            The cluster snapshot.
        longest_first
            Longest predicted remaining time first.

        Returns
        -------
        tuple of JobState
            The waiting jobs in that order.
        """
        queued = state.queued()
        version = (id(state.cluster), memory_observations_version())
        seen = self._order
        if seen is not None and seen[0] is queued and seen[1] == (*version, longest_first):
            return seen[2]
        if version != self._order_version or len(self._waiting_left) > 4 * len(queued) + 1024:
            self._waiting_left, self._order_version = {}, version
        left = self._waiting_left
        sign = -1.0 if longest_first else 1.0
        decorated = []
        for s in queued:
            key = (s.job.id, s.remaining_iterations)
            seconds = left.get(key)
            if seconds is None:
                seconds = left[key] = self.remaining_s(s, state)
            decorated.append(((sign * seconds, s.job.arrival_time_s, s.job.id), s))
        decorated.sort(key=lambda entry: entry[0])
        order = tuple(s for _, s in decorated)
        self._order = (queued, (*version, longest_first), order)
        return order

    def remaining_s(self, js: JobState, state: ClusterState) -> float:
        """Predicted time for ``js`` to finish alone: on its current GPU type when running, else its fastest.

        Parameters
        ----------
        js
            The job.
        state
            The cluster snapshot.

        Returns
        -------
        float
            Seconds; infinite when no GPU type of the cluster can run it.
        """
        est = self.estimates
        if js.assignment is not None:
            now = state.cluster.gpu_type_of(js.assignment.gpus[0])
            return js.remaining_iterations * est.step_time_s(js.job, now)
        types = est.candidate_types(js.job, state.cluster)
        return js.remaining_iterations * est.step_time_s(js.job, types[0]) if types else math.inf

"""Build a :class:`RoundProblem` from a cluster-state snapshot and the predictors.

Coefficients: per (job, GPU type, freeze level) step time, memory and frozen penalty; per allowed
co-location group its speeds and extra memory. Groups are pre-enumerated so that the model stays
O(jobs): jobs of equal GPU count are ordered by isolated speed and each job is paired with
neighbours and with jobs from the opposite end of that order (complementary demand), keeping the
``max_partners`` partners of the highest summed speed; a pair slower in sum than one job alone is
never allowed. Jobs already sharing GPUs keep their group allowed so that they can stay.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import replace
from itertools import combinations

from dltsched.engine.domain.model import ClusterState, Job, JobState
from dltsched.engine.domain.predictors import (
    Predictors,
    ask_colocated_many,
    is_order_symmetric,
    memory_observations_version,
)
from dltsched.engine.domain.profiles import current_profiles
from dltsched.formulations.problem import (
    ColocGroup,
    GpuNode,
    JobOption,
    NodeTypes,
    RoundJob,
    RoundOptions,
    RoundProblem,
    Unplaceable,
)


def build_round(state: ClusterState, predictors: Predictors,
                options: RoundOptions | None = None) -> RoundProblem:
    """The :class:`RoundProblem` of ``state`` with coefficients from ``predictors``.

    See the module docstring for how co-location groups are chosen.

    Parameters
    ----------
    state
        The cluster snapshot: active jobs, their placements, down GPUs.
    predictors
        Step-time, co-location and freezing predictors that give the coefficients.
    options
        Objective, co-location and freezing limits (default :class:`RoundOptions`).

    Returns
    -------
    RoundProblem
        The backend-neutral round, ready for any backend.
    """
    options = options or RoundOptions()
    nodes = node_classes(state)
    jobs: list[RoundJob] = []
    unplaceable: list[Unplaceable] = []
    types = NodeTypes.of(nodes)
    all_up = NodeTypes.of(tuple(replace(n, down_gpus=()) for n in nodes)) if state.down_gpus else types
    kept = GroupPrices.of(predictors)
    offers = None if kept is None else kept.offers(types, options)
    versions = None if offers is None else current_profiles()
    for js in state.jobs:
        if offers is None:
            job, reason = _round_job(js, state.time_s, types, predictors, options)
        else:
            version = 0 if versions is None else versions.version(js.job.id)
            hit = offers.get(id(js.job))
            if hit is None or hit[0] is not js.job or hit[1] != version or not hit[2].kept_for(predictors):
                hit = offers[id(js.job)] = (js.job, version, KeptOptions(predictors))
            job, reason = _as_round_job(js, state.time_s, *hit[2].options(js, types, predictors, options))
        if job is None:
            while_down = all_up is not types \
                and _round_job(js, state.time_s, all_up, predictors, options)[0] is not None
            unplaceable.append(Unplaceable(js.job.id, reason, while_down))
        else:
            jobs.append(job)
    states = {s.job.id: s.job for s in state.jobs}
    groups: tuple[ColocGroup, ...] = ()
    if options.max_jobs_per_gpu > 1:
        groups = _groups(jobs, [states[j.id] for j in jobs], nodes, predictors, options)
    return RoundProblem(options, nodes, tuple(jobs), groups, state.time_s, tuple(unplaceable))


def node_classes(state: ClusterState) -> tuple[GpuNode, ...]:
    """The round's GPU classes of ``state``: one per node, its down GPUs marked.

    Part of the pipeline's pricing API (:mod:`dltsched.formulations.pipeline`).

    Parameters
    ----------
    state
        The cluster snapshot.

    Returns
    -------
    tuple of GpuNode
        One per node, in the cluster's order.
    """
    cluster = state.cluster
    down = state.down_gpus
    return tuple(
        GpuNode(node.id, node.gpu_type, node.num_gpus, cluster.node_first_gpu[i],
                cluster.gpu_types[node.gpu_type].memory_mib,
                tuple(g for g in cluster.node_gpus(i) if g in down) if down else ())
        for i, node in enumerate(cluster.nodes))


def best_alone(js: JobState, time_s: float, types: NodeTypes, predictors: Predictors,
               options: RoundOptions, *, kept: KeptOptions | None = None) -> JobOption | None:
    """The option (GPU type, freeze level) at which ``js`` progresses fastest running alone.

    As a round of ``options`` would offer it (memory, accuracy budget, gang size; the cross-node rate when
    the job is larger than every node of the type); ties go to the first in the round's option order. No
    objective of :data:`~dltsched.engine.domain.model.OBJECTIVES` values a job's placement above this
    option's: each job's term grows with its rate, and sharing a GPU only slows its members (the optimizing
    policy starts a waiting job here without a solve when idle GPUs hold it). Part of the pipeline's pricing
    API (:mod:`dltsched.formulations.pipeline`).

    Parameters
    ----------
    js
        The job.
    time_s
        The decision's time (the option does not depend on it).
    types
        The round's GPU classes per type (:func:`~dltsched.formulations.pipeline.node_types`).
    predictors
        The predictors that price the options.
    options
        The round settings the option must meet.
    kept
        What is kept of the job's options between asks (:class:`KeptOptions`; the same answer): the caller
        keeps one per job object and profile version under the same ``types``, ``options`` and memory
        measurements.

    Returns
    -------
    JobOption or None
        The fastest option; ``None``: the round offers the job none.
    """
    if kept is None:
        opts, _ = _job_options(js, types, predictors, options)
    else:
        opts, _ = kept.options(js, types, predictors, options)
    if not opts:
        return None
    return max(opts, key=lambda o: o.rate(o.cross_step_time_s is not None))


def reference_rate(js: JobState, types: NodeTypes, predictors: Predictors,
                   options: RoundOptions) -> float | None:
    """The rate a round of ``options`` on GPU classes ``types`` normalises ``js``'s progress by.

    :attr:`~dltsched.formulations.problem.RoundJob.reference_rate`: the best isolated rate at freeze level 0.
    Part of the pipeline's pricing API (:mod:`dltsched.formulations.pipeline`).

    Parameters
    ----------
    js
        The job.
    types
        The round's GPU classes per type (:func:`~dltsched.formulations.pipeline.node_types`).
    predictors
        The predictors that price the options.
    options
        The round settings.

    Returns
    -------
    float or None
        Iterations per second; ``None``: the round cannot place the job.
    """
    job, _ = _round_job(js, 0.0, types, predictors, options)
    return None if job is None else job.reference_rate


def _gang_size(job: Job) -> int:
    """GPUs a job needs; a fractional request is a one-GPU job that may co-locate."""
    return 1 if job.gpu_fraction < 1.0 else job.num_gpus


def freeze_levels(job: Job, predictors: Predictors, options: RoundOptions) -> tuple[int, ...]:
    """Freeze levels the round offers ``job`` (before the accuracy-budget filter)."""
    if not job.freeze_allowed:
        return (0,)
    num = predictors.freezing.num_freeze_levels(job)
    wanted = options.freeze_levels
    if isinstance(wanted, int):
        return tuple(sorted({i * num // wanted for i in range(min(wanted, num))}))
    return tuple(level for level in wanted if level < num)


def _round_job(js: JobState, time_s: float, summary: NodeTypes, predictors: Predictors,
               options: RoundOptions) -> tuple[RoundJob | None, str]:
    return _as_round_job(js, time_s, *_job_options(js, summary, predictors, options))


class KeptOptions:
    """What a round derives about one job's options, kept between rounds: the options (and why none) at the
    job's last progress, and per (GPU type, freeze level) the predicted memory, step time and cross-node step
    time (asked as :func:`_job_options` asks them). The options depend on the job's progress only through the
    frozen penalty (none without freezing), so they are kept per progress; the predictions are what the same
    predictors answer for the same job object and profile version under the same GPU classes, round
    settings and memory measurements (the caller keys a kept entry on all of these,
    :meth:`GroupPrices.offers`). An entry keeps the answers of the step-time and freezing predictors it is
    made with; asked with others, it answers from scratch and keeps nothing (so that rounds decided side by
    side with other predictors never mix their answers).

    Parameters
    ----------
    predictors
        The predictors whose answers it keeps.
    """

    __slots__ = ("last", "predicted", "levels", "owner")

    def __init__(self, predictors: Predictors) -> None:
        #: (progress, options, why none) of the last ask
        self.last: tuple[float, tuple[JobOption, ...], str] | None = None
        #: (GPU type, level) -> (memory MiB, step s or None when the memory does not fit, cross-node step s)
        self.predicted: dict[tuple[str, int], tuple[float, float | None, float | None]] = {}
        self.levels: tuple[int, ...] | None = None
        self.owner = (predictors.step_time, predictors.freezing)

    def kept_for(self, predictors: Predictors) -> bool:
        """Whether this entry keeps the answers of ``predictors`` (the same step-time and freezing
        predictors it was made with)."""
        return self.owner[0] is predictors.step_time and self.owner[1] is predictors.freezing

    def options(self, js: JobState, types: NodeTypes, predictors: Predictors,
                options: RoundOptions) -> tuple[tuple[JobOption, ...], str]:
        """:func:`_job_options` of ``js`` (the same values), from what is kept where it still holds."""
        if not self.kept_for(predictors):
            return _job_options(js, types, predictors, options)
        progress = js.progress if js.job.freeze_allowed else 0.0
        last = self.last
        if last is None or last[0] != progress:
            last = self.last = (progress, *_job_options(js, types, predictors, options, self))
        return last[1], last[2]


def _job_options(js: JobState, summary: NodeTypes, predictors: Predictors,
                 options: RoundOptions, kept: KeptOptions | None = None) -> tuple[tuple[JobOption, ...], str]:
    """The options a round offers ``js`` and, when none, why; the options depend on the job's progress only
    through the frozen penalty (none without freezing). ``kept``: the job's predictions kept between rounds
    (read and filled; the same values as asking)."""
    job = js.job
    predicted = None if kept is None else kept.predicted
    size = _gang_size(job)
    types = job.gpu_types or tuple(summary.total)
    opts: list[JobOption] = []
    reasons: list[str] = []
    levels: tuple[int, ...] | None = None
    penalties: dict[int, float] = {}
    for gpu_type in types:
        if gpu_type not in summary.total:
            reasons.append(f"no {gpu_type} GPUs in the cluster")
            continue
        largest, total = summary.largest[gpu_type], summary.total[gpu_type]
        if not total:
            reasons.append(f"every {gpu_type} GPU is down")
            continue
        single = size <= largest
        if not single and not (options.allow_cross_node and size <= total):
            reasons.append(f"needs {size} GPUs, {gpu_type} nodes have at most {largest} ({total} in all)")
            continue
        memory_limit = summary.memory_mib[gpu_type]
        fitting = 0
        if levels is None:
            if kept is not None and kept.levels is not None:
                levels = kept.levels
            else:
                levels = freeze_levels(job, predictors, options)
                if kept is not None:
                    kept.levels = levels
        for level in levels:
            penalty = penalties.get(level)
            if penalty is None:  # asked once per level: it does not depend on the GPU type
                penalty = penalties[level] = \
                    predictors.freezing.frozen_penalty(job, level, js.progress) if level else 0.0
            if penalty > job.accuracy_budget + 1e-12:
                continue
            hit = None if predicted is None else predicted.get((gpu_type, level))
            memory = predictors.step_time.memory_mib(job, gpu_type, freeze_level=level) if hit is None \
                else hit[0]
            if memory > memory_limit:
                if predicted is not None and hit is None:
                    predicted[(gpu_type, level)] = (memory, None, None)
                continue
            fitting += 1
            if hit is not None and hit[1] is not None:
                step, cross = hit[1], hit[2]
            else:
                step = predictors.step_time.step_time_s(job, gpu_type, size, freeze_level=level)
                cross = None
                if not single:
                    cross = predictors.step_time.step_time_s(job, gpu_type, size, freeze_level=level,
                                                             num_nodes=math.ceil(size / largest))
                if predicted is not None:
                    predicted[(gpu_type, level)] = (memory, step, cross)
            opts.append(JobOption(gpu_type, level, step if single else cross or step, memory, penalty,
                                  cross))
        if not fitting:
            reasons.append(f"memory above {memory_limit:.0f} MiB of {gpu_type} at every allowed freeze level")
    return tuple(opts), "; ".join(reasons) or "no allowed GPU type"


def _as_round_job(js: JobState, time_s: float, opts: tuple[JobOption, ...], reason: str
                  ) -> tuple[RoundJob | None, str]:
    if not opts:
        return None, reason
    job = js.job
    unfrozen = [o for o in opts if o.freeze_level == 0] or opts
    reference = max(o.rate(o.cross_step_time_s is not None) for o in unfrozen)
    current = js.assignment
    return RoundJob(
        id=job.id, num_gpus=_gang_size(job), weight=job.weight, remaining_iterations=js.remaining_iterations,
        reference_rate=reference, options=opts,
        age_s=max(0.0, time_s - js.queued_since_s) if current is None else 0.0,
        current_gpus=tuple(sorted(current.gpus)) if current else (),
        current_freeze=current.freeze_level if current else 0,
    ), ""


def _common_types(a: RoundJob, b: RoundJob) -> list[str]:
    types_b = {o.gpu_type for o in b.options}
    return list(dict.fromkeys(o.gpu_type for o in a.options if o.gpu_type in types_b))


class _JobMemory:
    """Per (job, GPU type), asked once per round: the level-0 memory predicted for a job alone on the type
    (a group's overhead is the group's memory beyond its members' own) and its least memory over its options;
    and the prices of groups kept across rounds (:class:`GroupPrices`) when the predictors keep them."""

    def __init__(self, jobs: list[RoundJob], specs: list[Job], predictors: Predictors) -> None:
        self.jobs, self.specs, self.predictors = jobs, specs, predictors
        self._own: dict[tuple[int, str], float] = {}
        #: per job and GPU type, the least memory over its options
        self.least_mib: list[dict[str, float]] = []
        for job in jobs:
            least: dict[str, float] = {}
            for o in job.options:
                if o.gpu_type not in least or o.memory_mib < least[o.gpu_type]:
                    least[o.gpu_type] = o.memory_mib
            self.least_mib.append(least)
        self.prices = GroupPrices.of(predictors)
        #: per job, its GPU types in option order and as a set
        self.types = [tuple(dict.fromkeys(o.gpu_type for o in job.options)) for job in jobs]
        self.type_sets = [frozenset(t) for t in self.types]
        if self.prices is not None:
            book = current_profiles()
            versions = [0] * len(specs) if book is None else [book.version(j.id) for j in specs]
            self.memory_version = memory_observations_version()
            #: per job, the number its prices are kept under (:meth:`GroupPrices.kind`)
            self.kinds = self.prices.kinds_of(specs, versions)

    def own(self, m: int, gpu_type: str) -> float:
        key = (m, gpu_type)
        if key not in self._own:
            self._own[key] = self.predictors.step_time.memory_mib(self.specs[m], gpu_type)
        return self._own[key]

    def least(self, m: int, gpu_type: str) -> float:
        return self.least_mib[m][gpu_type]


#: options kept for one job: the job, its profile version, what is kept of its options
_Offer = tuple[Job, int, KeptOptions]
#: a pair's fitting GPU types, each with its speeds and memory overhead (MiB)
_Fits = list[tuple[str, tuple[float, ...], float]]
#: (signature, signature) -> the pair's fitting types and best summed speed (GroupPrices.pair_verdicts)
_Verdicts = dict[tuple[int, int], tuple[_Fits, float]]


class GroupPrices:
    """Co-location prices (speeds, memory overhead) of groups, kept across rounds on memoized predictors.

    Memoized predictors (:func:`~dltsched.engine.domain.predictors.memoized`) answer the same for the same
    job objects; a round asks about the same pairs again and again, and asking the predictors costs more
    than the rest of building. A group's prices are kept under its GPU type and its members' kinds
    (:meth:`kind`): what a job is (model, batch size, precision, optimizer, dataset, GPU count and fraction,
    freezing, GPU types, hyper-parameters), not which job it is, while no profile of the job was measured in
    the run; a job with a measured profile is its own kind, per profile version. An entry holds the version of
    the run's memory measurements it was priced at and is used only at that version, so that it is exactly
    what asking again would give (the invalidation rule): the predictors answer from what a job is, never
    from its id, its amount of work, weight, deadline or arrival. Part of the pipeline's pricing API
    (:mod:`dltsched.formulations.pipeline`); :func:`build_round` keeps and reads it.
    """

    #: entries kept at most; when full, all are dropped
    MAX_ENTRIES = 500_000

    def __init__(self) -> None:
        #: (GPU type, member kinds...) -> (memory version, speeds, memory overhead MiB)
        self.entries: dict[tuple[object, ...], tuple[int, tuple[float, ...], float]] = {}
        self._kinds: dict[Hashable, int] = {}
        self._offers: dict[int, _Offer] = {}
        self._offer_context: tuple[object, ...] | None = None
        #: a round job's pricing signature (its kind, GPU types in option order, least memory per type) ->
        #: its number; (signature, signature) -> what a round's scan concluded of the pair: its fitting types
        #: with their prices and its best summed speed (:meth:`pair_verdicts`)
        self._signatures: dict[tuple[object, ...], int] = {}
        self._verdicts: _Verdicts = {}
        self._verdict_context: tuple[object, ...] | None = None

    def kind(self, job: Job, profile_version: int = 0) -> int:
        """The number ``job``'s prices are kept under: equal for two jobs the predictors cannot tell apart.

        Parameters
        ----------
        job
            The job.
        profile_version
            How many profiles of the job were measured in the run (0: none; the job's kind is then what it
            is; else the job itself at that version).

        Returns
        -------
        int
            The kind, numbered in order of first use.
        """
        key: Hashable = (job.model, job.batch_size, job.num_gpus, job.amp, job.optimizer, job.dataset,
                         job.freeze_allowed, job.accuracy_budget, job.gpu_types, job.gpu_fraction,
                         job.hyperparameters) if profile_version == 0 else (job, profile_version)
        found = self._kinds.get(key)
        if found is None:
            found = self._kinds[key] = len(self._kinds)
        return found

    def kinds_of(self, jobs: list[Job], profile_versions: list[int]) -> list[int]:
        """:meth:`kind` of each of a round's jobs; when ``MAX_ENTRIES`` kinds are numbered, every kind and
        entry is dropped first (between rounds only, so that a round's numbers stay unambiguous).

        Parameters
        ----------
        jobs
            The round's jobs.
        profile_versions
            Each job's profile version in the run.

        Returns
        -------
        list of int
            The kinds, in the order of ``jobs``.
        """
        if len(self._kinds) >= self.MAX_ENTRIES:
            self._kinds.clear()
            self.clear()
        return [self.kind(job, v) for job, v in zip(jobs, profile_versions, strict=True)]

    def pair_verdicts(self, kinds: list[int], types: list[tuple[str, ...]], least_mib: list[dict[str, float]],
                      memory_version: int, memory_mib: dict[str, float]) -> tuple[list[int], _Verdicts]:
        """Each round job's pricing signature, and what earlier scans concluded of pairs of signatures.

        A job's signature is its kind, its GPU types in option order and its least memory on each: two jobs of
        one signature pair up alike with any job in a round's scan. A pair's verdict is its fitting GPU types
        with their speeds and memory overhead, and its best summed speed (0: none fits); it reads nothing
        else but the GPU memory per type and the version of the run's memory measurements, and the verdicts
        are dropped when either changes. The numbers and the verdicts returned belong together (a
        concurrent round that drops them starts new ones).

        Parameters
        ----------
        kinds
            Each job's kind (:meth:`kinds_of`).
        types
            Each job's GPU types in its options' order.
        least_mib
            Each job's least memory over its options per GPU type, MiB.
        memory_version
            The version of the run's memory measurements.
        memory_mib
            The round's GPU memory per type, MiB.

        Returns
        -------
        tuple
            The signatures, in the order of the jobs, and the verdicts by pair of signatures, to read and
            fill.
        """
        context = (memory_version, tuple(sorted(memory_mib.items())))
        if context != self._verdict_context or len(self._verdicts) >= self.MAX_ENTRIES:
            self._verdicts, self._verdict_context = {}, context
        if len(self._signatures) >= self.MAX_ENTRIES:
            self._signatures, self._verdicts = {}, {}
        numbers, verdicts = self._signatures, self._verdicts
        out = []
        for kind, own, least in zip(kinds, types, least_mib, strict=True):
            key = (kind, own, *[least[t] for t in own])
            found = numbers.get(key)
            if found is None:
                found = numbers[key] = len(numbers)
            out.append(found)
        return out, verdicts

    def offers(self, types: NodeTypes, options: RoundOptions) -> dict[int, _Offer]:
        """The options offered to jobs, kept per job object: (the job, its profile version, what is kept of
        its options, :class:`KeptOptions`) by ``id(job)``; valid for the same GPU classes, round settings and
        version of the run's memory measurements, dropped when any of these changes.

        Parameters
        ----------
        types
            The round's GPU classes per type.
        options
            The round settings.

        Returns
        -------
        dict
            The kept options, to read and fill.
        """
        context = (tuple(types.largest.items()), tuple(types.total.items()), tuple(types.memory_mib.items()),
                   options, memory_observations_version())
        if context != self._offer_context or len(self._offers) >= self.MAX_ENTRIES:
            self._offers.clear()
            self._offer_context = context
        return self._offers

    def clear(self) -> None:
        """Drop every entry and pair verdict (the kinds stay numbered)."""
        self.entries.clear()
        self._signatures, self._verdicts = {}, {}

    @staticmethod
    def of(predictors: Predictors) -> GroupPrices | None:
        """The prices kept with ``predictors``' co-location predictor.

        Parameters
        ----------
        predictors
            The predictors a round is built with.

        Returns
        -------
        GroupPrices or None
            The prices, created on first use; ``None``: the co-location predictor is not memoized.
        """
        colocation = predictors.colocation
        if not hasattr(colocation, "group_prices"):
            return None
        found = colocation.group_prices
        if not isinstance(found, GroupPrices):
            found = colocation.group_prices = GroupPrices()
        return found


def _group_on(members: tuple[int, ...], gpu_type: str, memory: _JobMemory, allowed: bool) -> ColocGroup:
    prices = memory.prices
    if prices is None:
        return _priced(members, gpu_type, memory, allowed)
    kinds = memory.kinds
    if len(members) == 2:  # the common case, spelled out
        key: tuple[object, ...] = (gpu_type, kinds[members[0]], kinds[members[1]])
    else:
        key = (gpu_type, *(kinds[m] for m in members))
    hit = prices.entries.get(key)
    if hit is not None and hit[0] == memory.memory_version:
        return ColocGroup(members, gpu_type, hit[1], hit[2], allowed)
    group = _priced(members, gpu_type, memory, allowed)
    if len(prices.entries) >= GroupPrices.MAX_ENTRIES:
        prices.clear()
    prices.entries[key] = (memory.memory_version, group.speeds, group.overhead_mib)
    return group


def _priced(members: tuple[int, ...], gpu_type: str, memory: _JobMemory, allowed: bool) -> ColocGroup:
    return ColocGroup(members, gpu_type, *_price(members, gpu_type, memory), allowed)


def _price(members: tuple[int, ...], gpu_type: str, memory: _JobMemory) -> tuple[tuple[float, ...], float]:
    """A group's speeds and memory overhead (MiB: its memory beyond its members' own), asked alone."""
    group = [memory.specs[m] for m in members]
    colocation = memory.predictors.colocation
    speeds = tuple(float(s) for s in colocation.colocated_speeds(group, gpu_type))
    own = sum(memory.own(m, gpu_type) for m in members)
    return speeds, max(0.0, colocation.group_memory_mib(group, gpu_type) - own)


def _fits(group: ColocGroup, memory: _JobMemory, memory_mib: float) -> bool:
    least = sum(memory.least(m, group.gpu_type) for m in group.jobs)
    return least + group.overhead_mib <= memory_mib


def _groups(jobs: list[RoundJob], specs: list[Job], nodes: tuple[GpuNode, ...], predictors: Predictors,
            options: RoundOptions) -> tuple[ColocGroup, ...]:
    memory = {n.gpu_type: n.memory_mib for n in nodes}
    asked = _JobMemory(jobs, specs, predictors)
    # per pair with a fitting type: each such type, its speeds and memory overhead
    found: dict[tuple[int, int], _Fits] = {}
    partners: dict[int, list[tuple[float, int]]] = defaultdict(list)  # (-speed, partner)
    # prices by (GPU type, member kinds): the kept ones, or the round's own (each job its own kind)
    verdicts, signatures = None, None
    if asked.prices is not None:
        entries, kinds, version = asked.prices.entries, asked.kinds, asked.memory_version
        signatures, verdicts = asked.prices.pair_verdicts(kinds, asked.types, asked.least_mib, version,
                                                          memory)
    else:
        entries, kinds, version = {}, list(range(len(jobs))), 0
    # pairs with a type never priced wait, and their prices are asked for all together
    waiting: list[tuple[int, int]] = []
    _scan_pairs(_pair_candidates(jobs, options.max_partners), asked, entries, kinds, version, memory, found,
                partners, waiting, verdicts, signatures)
    if waiting:
        _price_pairs(waiting, asked, entries, kinds, version)
        _scan_pairs(waiting, asked, entries, kinds, version, memory, found, partners, None, verdicts,
                    signatures)
    # per job, its best partners: highest total speed first, ties to the lower index
    keep = {j: {b for _, b in sorted(p)[: options.max_partners]} for j, p in partners.items()}
    allowed: dict[tuple[tuple[int, ...], str], ColocGroup] = {}
    for pair, fits in found.items():
        if pair[1] in keep[pair[0]] or pair[0] in keep[pair[1]]:
            for gpu_type, speeds, overhead in fits:
                allowed[(pair, gpu_type)] = ColocGroup(pair, gpu_type, speeds, overhead, True)
    if options.max_jobs_per_gpu == 3:
        _add_triples(allowed, keep, asked, memory)
    _add_current_groups(allowed, asked, options.max_jobs_per_gpu)
    n = len(jobs)
    if options.max_jobs_per_gpu == 2 or all(len(k[0]) == 2 for k in allowed):
        # pairs only: sort by one number per pair (same order, faster)
        return tuple(allowed[k] for k in sorted(allowed, key=lambda k: (k[0][0] * n + k[0][1], k[1])))
    return tuple(allowed[k] for k in sorted(allowed))


#: prices by (GPU type, member kinds): (memory version, speeds, memory overhead MiB)
_Entries = dict[tuple[object, ...], tuple[int, tuple[float, ...], float]]


def _scan_pairs(pairs: Iterable[tuple[int, int]], asked: _JobMemory, entries: _Entries, kinds: list[int],
                version: int, memory: dict[str, float], found: dict[tuple[int, int], _Fits],
                partners: dict[int, list[tuple[float, int]]],
                waiting: list[tuple[int, int]] | None, verdicts: _Verdicts | None = None,
                signatures: list[int] | None = None) -> None:
    """Each pair's fitting types and best summed speed (into ``found`` and ``partners``) from the prices in
    ``entries``; a pair with a type not priced goes to ``waiting`` (``None``: it is priced here, one by one).
    With ``verdicts``, a pair of job signatures already judged is not judged again, and each pair judged is
    kept there (:meth:`GroupPrices.pair_verdicts`). The round's hottest loop."""
    fitting: _Fits = []
    types, type_sets, least = asked.types, asked.type_sets, asked.least_mib
    signature: tuple[int, int] | None = None
    for a, b in pairs:
        if verdicts is not None:
            signature = (signatures[a], signatures[b])  # type: ignore[index]
            verdict = verdicts.get(signature)
            if verdict is not None:
                if verdict[1]:
                    found[(a, b)] = verdict[0]
                    partners[a].append((-verdict[1], b))
                    partners[b].append((-verdict[1], a))
                continue
        best = 0.0
        shared = type_sets[b]
        least_a, least_b = least[a], least[b]
        ka, kb = kinds[a], kinds[b]
        for gpu_type in types[a]:  # the types the two share, in a's option order
            if gpu_type not in shared:
                continue
            hit = entries.get((gpu_type, ka, kb))
            if hit is not None and hit[0] == version:
                speeds, overhead = hit[1], hit[2]
            elif waiting is not None:
                waiting.append((a, b))
                fitting = []
                break
            else:  # dropped by the kept prices' bound meanwhile
                group = _group_on((a, b), gpu_type, asked, True)
                speeds, overhead = group.speeds, group.overhead_mib
            total = speeds[0] + speeds[1]
            if total > 1.0 and least_a[gpu_type] + least_b[gpu_type] + overhead <= memory[gpu_type]:
                fitting.append((gpu_type, speeds, overhead))
                if total > best:
                    best = total
        else:
            if best:
                found[(a, b)] = fitting
                if signature is not None:
                    verdicts[signature] = (fitting, best)  # type: ignore[index]
                fitting = []
                partners[a].append((-best, b))
                partners[b].append((-best, a))
            else:
                if signature is not None:
                    verdicts[signature] = ([], 0.0)  # type: ignore[index]
                if fitting:
                    fitting = []


def _price_pairs(pairs: list[tuple[int, int]], asked: _JobMemory, entries: _Entries, kinds: list[int],
                 version: int) -> None:
    """Price every (pair, shared GPU type) of ``pairs`` missing from ``entries`` and keep it there: one call
    of the co-location predictor's ``colocated_many`` for all of them where it has one (the same answers as
    asking ``colocated_speeds`` and ``group_memory_mib`` group by group), else one by one. When the predictor
    says its pairs are symmetric in member order (``order_symmetric()``), a pair priced the other way round
    (kept, or asked in this call) is not asked: its speeds swapped are the answer, and the memory overhead is
    the same (the group's memory less the members' own, summed in either order: the same float)."""
    wanted: dict[tuple[object, ...], tuple[tuple[int, int], str]] = {}
    mirrored: dict[tuple[object, ...], tuple[object, ...]] = {}  # key -> the same pair the other way round
    symmetric = is_order_symmetric(asked.predictors.colocation)
    types, type_sets = asked.types, asked.type_sets
    for a, b in pairs:
        ka, kb = kinds[a], kinds[b]
        for gpu_type in types[a]:
            if gpu_type in type_sets[b]:
                key: tuple[object, ...] = (gpu_type, ka, kb)
                if key in wanted or key in mirrored:
                    continue
                hit = entries.get(key)
                if hit is not None and hit[0] == version:
                    continue
                if symmetric and ka != kb:
                    back: tuple[object, ...] = (gpu_type, kb, ka)
                    hit = entries.get(back)
                    if back in wanted or (hit is not None and hit[0] == version):
                        mirrored[key] = back
                        continue
                wanted[key] = ((a, b), gpu_type)
    kept = asked.prices is not None
    priced = dict(zip(wanted, _pair_prices(list(wanted.values()), asked), strict=True))
    for key, back in mirrored.items():
        speeds, overhead = priced[back] if back in priced else entries[back][1:]
        priced[key] = ((speeds[1], speeds[0]), overhead)
    for key, (speeds, overhead) in priced.items():
        if kept and len(entries) >= GroupPrices.MAX_ENTRIES:
            entries.clear()
        entries[key] = (version, speeds, overhead)


def _pair_prices(groups: list[tuple[tuple[int, ...], str]], asked: _JobMemory
                 ) -> list[tuple[tuple[float, ...], float]]:
    """Speeds and memory overhead (MiB) of each (members, GPU type), as :func:`_price` gives them."""
    asking = [([asked.specs[m] for m in members], gpu_type) for members, gpu_type in groups]
    answers = ask_colocated_many(asked.predictors.colocation, asking)
    out = []
    for (members, gpu_type), (speeds, memory_mib) in zip(groups, answers, strict=True):
        own = sum(asked.own(m, gpu_type) for m in members)
        out.append((tuple(float(s) for s in speeds), max(0.0, memory_mib - own)))
    return out


def _pair_candidates(jobs: list[RoundJob], partners: int) -> set[tuple[int, int]]:
    """Pairs of equal-size jobs: neighbours in speed order and their mirror images."""
    by_size: dict[int, list[int]] = defaultdict(list)
    for j, job in enumerate(jobs):
        by_size[job.num_gpus].append(j)
    import numpy as np

    window = partners + 1
    codes = []
    total = len(jobs)
    for members in by_size.values():
        order = np.array(sorted(members, key=lambda j: (jobs[j].reference_rate, jobs[j].id)), dtype=np.int64)
        n = len(order)
        p = np.arange(n)[:, None]
        near = p + np.arange(1, window + 1)[None, :]  # the next ``window`` in speed order
        far = (n - 1 - p) + np.arange(-window, window + 1)[None, :]  # around the mirror image
        for q in (near, far):
            qs = np.broadcast_to(p, q.shape)
            keep = (q >= 0) & (q < n) & (q != qs)
            a, b = order[qs[keep]], order[q[keep]]
            codes.append(np.minimum(a, b) * total + np.maximum(a, b))
    if not codes:
        return set()
    unique = np.unique(np.concatenate(codes))
    return set(zip((unique // total).tolist(), (unique % total).tolist(), strict=True))


def _add_triples(allowed: dict[tuple[tuple[int, ...], str], ColocGroup], keep: dict[int, set[int]],
                 asked: _JobMemory, memory: dict[str, float]) -> None:
    pairs = {key for key in allowed}
    for (a, b), gpu_type in sorted(pairs):
        for c in sorted(keep.get(a, set()) & keep.get(b, set())):
            members = tuple(sorted((a, b, c)))
            if c in (a, b) or (members, gpu_type) in allowed:
                continue
            if not all((sub, gpu_type) in pairs for sub in combinations(members, 2)):
                continue
            group = _group_on(members, gpu_type, asked, True)
            if sum(group.speeds) > max(sum(allowed[(s, gpu_type)].speeds) for s in combinations(members, 2)) \
                    and _fits(group, asked, memory[gpu_type]):
                allowed[(members, gpu_type)] = group


def _add_current_groups(allowed: dict[tuple[tuple[int, ...], str], ColocGroup], asked: _JobMemory,
                        max_jobs: int) -> None:
    """Groups running now (jobs on identical GPU sets) stay allowed, with their sub-groups."""
    jobs = asked.jobs
    by_gpus: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for j, job in enumerate(jobs):
        if job.current_gpus:
            by_gpus[job.current_gpus].append(j)
    for members_list in by_gpus.values():
        members = tuple(sorted(members_list))
        if not 2 <= len(members) <= max_jobs:
            continue
        types = [t for t in _common_types(jobs[members[0]], jobs[members[-1]])
                 if all(any(o.gpu_type == t for o in jobs[m].options) for m in members)]
        for gpu_type in types:
            allowed[(members, gpu_type)] = _group_on(members, gpu_type, asked, True)
            for sub in combinations(members, 2) if len(members) == 3 else ():
                if (sub, gpu_type) not in allowed:
                    allowed[(sub, gpu_type)] = _group_on(sub, gpu_type, asked, False)

"""Co-location from job profiles: a physics-shaped base, corrected by trees learned on measured groups.

Inputs per job: its isolated profile on this GPU type (step time, memory, SM utilisation, memory-
bandwidth utilisation where measured); where a value is missing it is predicted (step time and memory
by the step-time predictor, SM utilisation as the analytic busy fraction: compute or memory-traffic
time over the step time) and the job's ``source`` says so. Catalog features of the model (FLOPs,
activations, batch size, precision), the GPU's specs and the job's analytic busy fraction (its graph's compute
or activation traffic at the GPU's peak over its step time, :func:`~.profile_rows.log_busy`: low for an input-
or host-bound job) go to the corrections.

Physics-shaped base (``u`` = isolated SM utilisation / 100, ``U`` = sum over the group):

- speed of each job ``min(1, 1 / U) ** alpha``: time slicing of a GPU that ``U`` of work keeps busy, with the
  exponent ``alpha`` fitted to the training data (least absolute log error);
- group memory = sum of isolated memories (each process keeps its own context and allocator);
- group utilisation = ``min(100, 100 U)`` under a learned correction; a model without one (no utilisation
  measured in training: the shipped one) predicts the busy time of independent members,
  ``100 (1 - prod(1 - u_i))`` (see :data:`UTIL_UNION`).

Learned corrections (gradient-boosted trees, :mod:`.jsontrees`) fit the log ratio of the measured
value to the base, on features of the job and its partners (sum of partners' utilisation, bandwidth
shares, step times, memory). A job's log speed is then averaged with a second opinion: trees on the pair
rows of :func:`~.features.pair_rows` correcting ``log min(1, 100 / sum of measured util)`` (see
:data:`PAIR_TREES`), which out of fold beats either alone. Every prediction is then clamped to the physical
bounds: speed in (0, 1]; memory between the largest member and 1.25x the sum; utilisation at most 100% and at
most the sum of the members'.

Groups of three or more are predicted by the same model: the base and every feature are defined for
any group size (sums over partners), so a third job raises ``U`` and the base slows everyone; the
trees were fitted on pairs only (no three-job group was ever measured here) and see a partner sum
beyond most of their training range, where they extend their outermost leaves. The group is then
bounded by its sub-groups (the same model on the group without each member): a further job never
speeds the others up, frees no memory and idles no GPU time, so each job's speed is at most its speed in
every sub-group, memory and utilisation at least every sub-group's (the design notes of the documentation
say how often the unbounded model broke that order). Three-job figures are therefore the base plus
pair-learned corrections within those bounds, not a validated prediction.

A fallback is never silent: every predicted profile value is counted in ``fallbacks`` (by kind), the
first per (GPU, model) is logged at warning level, and each prediction carries per-job ``sources``.
No torch is needed; a model saves to and loads from one JSON file (never pickle).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import ChainMap, Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Job
from dltsched.engine.domain.profiles import ProfileBook, current_profiles
from dltsched.predictors.colocation.features import (
    CONTENTION_LOG_SPEED,
    Group,
    check_group,
    gpu_features,
    group_of,
    job_features,
    pair_features,
    resolve_gpu,
)
from dltsched.predictors.colocation.features import (
    JOB_FEATURES as PAIR_JOB_FEATURES,
)
from dltsched.predictors.colocation.jsontrees import JsonTrees, StackedTrees, fit_trees
from dltsched.predictors.colocation.metrics import GroupPrediction
from dltsched.predictors.colocation.profile_rows import (
    GROUP_FEATURES,
    JOB_FEATURES,
    NUMPY_FROM,
    JobVector,
    ResolvedProfile,
    cross_gpu,
    feature_lists,
    feature_rows,
    job_consts,
    log_busy,
    real_gpu,
)
from dltsched.predictors.colocation.samples import ColocDataset, IsolatedProfile, JobSpec, without_absent
from dltsched.predictors.profiles import JobProfile

log = logging.getLogger(__name__)

FORMAT = "dltsched-colocation-profile/2"
#: the format before the base's exponent was fitted (read with ``alpha`` = 1)
FORMAT_1 = "dltsched-colocation-profile/1"
SHIPPED = "table_profile_gavel.json"
#: upper bound of group memory over the summed isolated memory
MEMORY_OVER_SUM = 1.25
SPEED_FLOOR = 0.02
#: the group feature the utilisation base is 100x of (capped at 100%): the summed isolated utilisation
UTIL_BASE = GROUP_FEATURES.index("u_total")
GROUP_U_PREDICTED = GROUP_FEATURES.index("u_predicted")
#: A model with no utilisation correction (trained where no group utilisation was measured: the shipped,
#: Gavel- trained one) predicts a group's utilisation as ``100 (1 - prod(1 - u_i))`` (``u_i`` capped at 0.99):
#: the busy time of independent members, at least the busiest member's and at most ``min(100, sum)``,
#: non-decreasing in every member and in the group's size. On Lucid's 1,017 valid pairs (no fitting) 15.59%
#: MAPE against 27.03% for ``min(100, sum)``; the time-sharing law ``min(100, sum of u_i x speed_i)`` scores
#: 25.15% there even with the measured speeds. A model with a correction keeps ``min(100, sum)`` as its base:
#: with the trees on top, Lucid's leave-one-model-out folds give 12.9% MAPE on the valid rows against 13.15%
#: with the union as the base.
UTIL_UNION = GROUP_FEATURES.index("u_union")
UTIL_UNCORRECTED = "rule 100 (1 - prod(1 - u_i)) without a utilisation correction"
#: A model whose speed corrections were fitted on analytic utilisation only (the shipped, Gavel-trained one)
#: has never seen a group whose utilisations were all measured: its exponent and trees describe the analytic
#: busy fraction's relation to Gavel's speeds, not a measured utilisation's. Such groups get the rule ``min(1,
#: 100 / sum of measured utilisation)`` (``alpha`` = 1, no trees). On Lucid's pairs (never used to train it)
#: the shipped model's speed MAPE is 9.54% this way against 36.56% with the Gavel corrections applied.
UNSEEN_MEASURED_UTIL = "rule min(1, 100 / sum of measured util)"
MAX_REMEMBERED = 200_000
#: The second speed opinion (``pair_speed_trees``): trees of :class:`~.baselines.GbtBaseline`'s kind on its
#: pair rows (:func:`~.features.pair_rows`: the catalog's model sizes, the members' profiles and their
#: step-time ratios across GPUs, the time-slicing prior ``log min(1, 100 / sum of measured util)`` they
#: correct), fed the same resolved profiles as the base (utilisation only where measured). The predicted log
#: speed is the ``pair_weight``-weighted mean of both before the bounds. Out of fold, speed MAPE with weight
#: 0.5 against 0 (no pair trees): Lucid leave-one-model-out 6.62 against 6.91% on the valid rows, Gavel
#: leave-one-GPU-out 17.81 against 19.17%, leave-one-model-out 14.37 against 15.83%. Depth 6 keeps 10,000
#: group predictions within budget (unbounded trees grow 20 levels deep, 3-4x slower per call) at no cost out
#: of fold (unbounded: 6.63 / 17.86 / 14.45%).
PAIR_TREES: dict[str, Any] = {"max_iter": 100, "learning_rate": 0.1, "max_depth": 6, "min_samples_leaf": 20,
                              "loss": "squared_error", "l2_regularization": 0.0}
#: Weight of the E-GGAT's log speed (:mod:`.egat_numpy`: the graph network over the members' operator graphs,
#: fitted on the same pairs) against the base plus corrections and pair trees, before the bounds. Fixed at 1/2
#: beforehand, not chosen on held-out figures. Out of fold (the network retrained per fold; the same rows),
#: Gavel speed MAPE: leave-one-model-out 12.31% against 14.50% without it (the E-GGAT alone 12.40%),
#: leave-one-GPU-out 17.68% against 18.03% (alone 18.71%). Groups the network cannot read (a GPU or model it
#: cannot featurize) keep the rest alone, and groups that take the rule :data:`UNSEEN_MEASURED_UTIL` take it
#: without the network (trained on Gavel, it never saw a measured utilisation either).
EGGAT_WEIGHT = 0.5
#: the utilisation trees grow leaf-wise (up to 31 leaves) on squared error: on Lucid's leave-one-model-out
#: folds 12.8% MAPE on the valid pairs against 13.9% with the speed trees' depth-3, absolute-error setting
UTIL_TREES: dict[str, Any] = {"max_depth": None, "loss": "squared_error", "max_iter": 200}
#: group features the utilisation correction may only rise with: each is non-decreasing in every member's
#: isolated utilisation, so the predicted utilisation (a non-decreasing base times the exponential of a
#: correction non-decreasing in them, capped by the non-decreasing min(100, sum)) never falls when a member's
#: utilisation rises. On Lucid's leave-one-model-out folds 12.78% MAPE on the valid pairs against 12.81%
#: unconstrained.
UTIL_MONOTONE = ("u_total", "u_max", "u_min", "u_union", "u_of_slowest")
UTIL_MONOTONIC_CST = tuple(1 if name in UTIL_MONOTONE else 0 for name in GROUP_FEATURES)


@dataclass(frozen=True, slots=True)
class ColocationEstimate:
    """One group's prediction with where its inputs came from (one ``sources`` entry per job)."""

    speeds: tuple[float, ...]
    memory_mib: float
    gpu_util: float
    sources: tuple[str, ...]

    @property
    def fallback(self) -> bool:
        """Whether any job's profile was (partly) predicted rather than measured."""
        return any(s != "measured" for s in self.sources)

    def as_group_prediction(self) -> GroupPrediction:
        """The estimate without its sources.

        Returns
        -------
        GroupPrediction
            Speeds, memory (MiB) and GPU utilisation (%).
        """
        return GroupPrediction(self.speeds, self.memory_mib, self.gpu_util)



@dataclass(slots=True)
class ProfileColocation:
    """Co-location from profiles (see module docstring): a ``GroupPredictor`` for evaluation and the engine's
    ``ColocationPredictor`` (``colocated_speeds``, ``group_memory_mib``) for scheduling.

    ``profiles`` are the measured isolated profiles it knows at schedule time (keyed like
    :attr:`ColocDataset.isolated`); ``predict`` uses the data's profiles instead.
    """

    max_jobs: int = 3
    max_iter: int = 150
    learning_rate: float = 0.05
    max_depth: int = 3
    min_samples_leaf: int = 20
    loss: str = "absolute_error"
    seed: int = 0
    profiles: Mapping[tuple[str, JobSpec], IsolatedProfile] = field(default_factory=dict)
    speed_trees: JsonTrees | None = None
    memory_trees: JsonTrees | None = None
    util_trees: JsonTrees | None = None
    #: exponent of the time-slicing base, ``min(1, 1 / U) ** alpha``, fitted (least absolute log error)
    alpha: float = 1.0
    #: whether the speed corrections saw groups whose every utilisation was measured; when not (Gavel: no
    #: utilisation measured, every one analytic), such groups get the base alone at ``alpha`` = 1 (see
    #: :data:`UNSEEN_MEASURED_UTIL`)
    measured_util_trained: bool = True
    record: dict[str, Any] = field(default_factory=dict)
    fallbacks: Counter[str] = field(default_factory=Counter)
    step_time: Any = None
    #: raise instead of predicting a job's step time (a job with no profile on the GPU)
    strict: bool = False
    #: weight of the pair trees' log speed (``PAIR_TREES``) against the base plus corrections; 0: not fitted
    pair_weight: float = 0.5
    pair_speed_trees: JsonTrees | None = None
    #: the trained E-GGAT run in numpy (:class:`~.egat_numpy.NumpyEggat`) and the weight of its log speed
    #: against the rest (see :data:`EGGAT_WEIGHT`); ``None`` or 0: not used
    eggat: Any = None
    eggat_weight: float = 0.0
    #: where the E-GGAT's weights live, for the file: the packaged checkpoint's name, or a path beside the
    #: file
    eggat_checkpoint: str | None = None
    _resolved: dict[Any, Any] = field(default_factory=dict)  # resolved profiles and per-job numbers
    _warned: set[tuple[str, str]] = field(default_factory=set)
    _groups: dict[tuple[str, tuple[JobSpec, ...]], ColocationEstimate] = field(default_factory=dict)
    _stacks: dict[str, StackedTrees] = field(default_factory=dict)  # see _stacked
    _by_fields: dict[tuple[Any, ...], ColocationEstimate] = field(default_factory=dict)  # see estimate

    # ------------------------------------------------------------------ profiles
    def _step_time(self) -> Any:
        if self.step_time is None:
            from dltsched.predictors.colocation.baselines import default_step_time

            self.step_time = default_step_time()
        return self.step_time

    def resolve(self, gpu: str, job: JobSpec, isolated: Mapping[tuple[str, JobSpec], IsolatedProfile],
                memo: dict[Any, Any]) -> ResolvedProfile:
        """The job's profile on ``gpu`` from ``isolated``, missing values predicted and counted in
        ``fallbacks``."""
        key = (gpu, job)
        found = memo.get(key)
        if found is not None:
            return found
        iso = isolated.get(key)
        # a job without a dataset: the model's only profile at this batch
        if iso is None and job.dataset is None:
            same = [p for (g, j), p in isolated.items() if g == gpu and (j.model, j.batch_size, j.amp)
                    == (job.model, job.batch_size, job.amp)]
            iso = same[0] if len(same) == 1 else None
        iso = iso or IsolatedProfile()
        predicted = set()
        step = iso.step_time_s
        if step is None:
            if self.strict:
                raise ValidationError("profiles",
                                      f"no profile of {job.label} on {gpu} (strict mode); give its "
                                                  "measured profile or leave strict mode off to predict it")
            from dltsched.predictors.colocation.baselines import as_job

            step = self._step_time().step_time_s(as_job(job), real_gpu(gpu), 1)
            predicted.add("step_time_s")
        memory = iso.memory_mib
        if memory is None:
            from dltsched.predictors.colocation.baselines import as_job

            memory = self._step_time().memory_mib(as_job(job), real_gpu(gpu))
            predicted.add("memory_mib")
        util = iso.gpu_util
        if util is None:
            from dltsched.predictors.colocation.baselines import AnalyticContention

            util = 100.0 * AnalyticContention(step_time=self._step_time()).busy_fraction(job, gpu, step)
            predicted.add("gpu_util")
        found = ResolvedProfile(float(step), float(memory), float(min(100.0, max(1.0, util))),
                                iso.mem_bw_util, frozenset(predicted))
        memo[key] = found
        for name in sorted(predicted):
            self.fallbacks[f"predicted_{name}"] += 1
        if "step_time_s" in predicted and (gpu, job.model) not in self._warned:
            self._warned.add((gpu, job.model))
            log.warning("co-location: no profile of %s on %s; its step time, memory and "
                        "utilisation are predicted (counted in fallbacks)", job.label, gpu)
        return found

    # ------------------------------------------------------------------ features
    def job_vector(self, gpu: str, job: JobSpec, isolated: Mapping[tuple[str, JobSpec], IsolatedProfile],
             memo: dict[Any, Any]) -> JobVector:
        """The job's resolved profile and its per-job numbers (computed once per GPU and job type)."""
        found = memo.get((gpu, job, "vector"))
        if found is None:
            p = self.resolve(gpu, job, isolated, memo)
            gflops, act, params, layers = job_consts(job)
            log_batch = math.log(job.batch_size)
            found = JobVector(p, job.model, p.gpu_util / 100.0,
                              p.mem_bw_util / 100.0 if p.mem_bw_util is not None else math.nan,
                              math.log(p.step_time_s), p.memory_mib, log_batch, float(job.amp), gflops, act,
                              params, layers, *cross_gpu(job, isolated), gflops + log_batch,
                              log_busy(gpu, job, p.step_time_s))
            memo[(gpu, job, "vector")] = found
        return found  # type: ignore[no-any-return]

    def _rows(self, groups: Sequence[Group], isolated: Mapping[tuple[str, JobSpec], IsolatedProfile],
              memo: dict[Any, Any], few: bool = False
              ) -> tuple[np.ndarray, np.ndarray, list[list[ResolvedProfile]], list[str]]:
        """Per-job rows, per-group rows (:mod:`.profile_rows`), the members' resolved profiles and the groups'
        canonical GPU ids; fewer than :data:`NUMPY_FROM` groups (the engine asks one at a time), or any number
        with ``few``, are built in plain Python."""
        names: dict[str, str] = {}
        gpus = [names.get(g.gpu) or names.setdefault(g.gpu, resolve_gpu(g.gpu)) for g in groups]
        vectors = [[self.job_vector(gpu, j, isolated, memo) for j in g.jobs]
                   for g, gpu in zip(groups, gpus, strict=True)]
        if not few and len(groups) >= NUMPY_FROM:
            jobs, grows = feature_rows(vectors, gpus)
        else:
            job_list, group_list = feature_lists(vectors, gpus)
            jobs, grows = np.asarray(job_list, dtype=float), np.asarray(group_list, dtype=float)
        return jobs, grows, [[v.profile for v in vs] for vs in vectors], gpus

    @staticmethod
    def _pair_rows(groups: Sequence[Group], gpus: Sequence[str], profs: Sequence[Sequence[ResolvedProfile]],
                   isolated: Mapping[tuple[str, JobSpec], IsolatedProfile],
                   memo: dict[Any, Any]) -> np.ndarray:
        """:func:`~.features.pair_rows` of every job, from the members' resolved profiles (step time and
        memory measured or predicted, utilisation only where measured) and ``isolated`` for the other GPUs'
        step times; each job's own part is kept in ``memo``."""
        rows = []
        for g, gpu, ps in zip(groups, gpus, profs, strict=True):
            own, mine = [], []
            for j, p in zip(g.jobs, ps, strict=True):
                found = memo.get((gpu, j, "pair"))
                if found is None:
                    iso = IsolatedProfile(p.step_time_s, p.memory_mib,
                                          None if "gpu_util" in p.predicted else p.gpu_util, p.mem_bw_util)
                    both = ChainMap({(gpu, j): iso}, isolated)  # type: ignore[arg-type]
                    found = memo[(gpu, j, "pair")] = ([*job_features(j, iso), *pair_features(gpu, j, both)],
                                                      iso)
                own.append(found[0])
                mine.append(found[1])
            rows.extend(pair_rows_of(gpu, g.jobs, own, mine))
        return np.asarray(rows, dtype=float)

    # ------------------------------------------------------------------ fitting
    def fit(self, train: ColocDataset) -> ProfileColocation:
        """Fit the corrections on every sample of ``train`` in which every job evidently ran."""
        data = without_absent(train)
        groups = [group_of(s) for s in data.samples]
        memo: dict[Any, Any] = {}
        jobs, grows, profs, gpus = self._rows(groups, data.isolated, memo)
        base = jobs[:, -1]
        log_speeds = np.log([v for s in data.samples for v in s.speeds])
        self.alpha = _fit_alpha(base, log_speeds)
        self.measured_util_trained = bool((grows[:, GROUP_U_PREDICTED] == 0).any())
        y_speed = log_speeds - self.alpha * base
        kw = {"max_iter": self.max_iter, "learning_rate": self.learning_rate, "max_depth": self.max_depth,
              "min_samples_leaf": self.min_samples_leaf, "loss": self.loss, "seed": self.seed}
        self.speed_trees = fit_trees(jobs, y_speed, **kw)
        if self.pair_weight > 0:
            prows = self._pair_rows(groups, gpus, profs, data.isolated, memo)
            self.pair_speed_trees = fit_trees(prows, log_speeds - prows[:, CONTENTION_LOG_SPEED],
                                              **PAIR_TREES, seed=self.seed)
        else:
            self.pair_speed_trees = None
        mem_idx = [i for i, s in enumerate(data.samples) if s.memory_mib is not None
                   and not any("memory_mib" in p.predicted for p in profs[i])]
        self.memory_trees = fit_trees(grows[mem_idx],
                                      [math.log(data.samples[i].memory_mib /  # type: ignore[operator]
                                                                sum(p.memory_mib for p in profs[i]))
                                       for i in mem_idx],
                                      **kw) if len(mem_idx) >= 2 * self.min_samples_leaf else None
        util_idx = [i for i, s in enumerate(data.samples) if s.gpu_util is not None and s.gpu_util > 0]
        self.util_trees = None
        if len(util_idx) >= 2 * self.min_samples_leaf:
            util_logs = [math.log(data.samples[i].gpu_util /  # type: ignore[operator]
                                  min(100.0, 100.0 * grows[i, UTIL_BASE])) for i in util_idx]
            self.util_trees = fit_trees(grows[util_idx], util_logs, **{**kw, **UTIL_TREES},
                                        monotonic_cst=UTIL_MONOTONIC_CST)
        self.fallbacks.clear()
        self.eggat, self.eggat_checkpoint = None, None  # a network fitted on other data must not ride along
        return self

    # ------------------------------------------------------------------ prediction
    def estimate_groups(self, groups: Sequence[Group],
                        isolated: Mapping[tuple[str, JobSpec],
                                          IsolatedProfile] | None = None) -> list[ColocationEstimate]:
        """Predictions with per-job sources; ``isolated`` defaults to the predictor's own ``profiles``."""
        if not groups:
            return []
        for g in groups:
            check_group(g, self.max_jobs)
        if isolated is None:
            isolated, memo = self.profiles, self._resolved
        else:
            memo = {}
        return self._estimate(groups, isolated, memo)

    def _estimate(self, groups: Sequence[Group], isolated: Mapping[tuple[str, JobSpec], IsolatedProfile],
                  memo: dict[Any, Any]) -> list[ColocationEstimate]:
        """:meth:`estimate_groups` on checked groups; groups of three or more are then bounded by their
        sub-groups (:meth:`_bounded_by_subgroups`)."""
        out = self._estimate_flat(groups, isolated, memo)
        larger = [i for i, g in enumerate(groups) if len(g.jobs) > 2]
        if larger:
            subs = {i: [Group(groups[i].gpu, groups[i].jobs[:k] + groups[i].jobs[k + 1:])
                        for k in range(len(groups[i].jobs))] for i in larger}
            unique = list(dict.fromkeys(g for gs in subs.values() for g in gs))  # pairs recur across triples
            found = dict(zip(unique, self._estimate(unique, isolated, memo), strict=True))
            for i, gs in subs.items():
                out[i] = _bounded_by_subgroups(out[i], [found[g] for g in gs])
        return out

    def _estimate_flat(self, groups: Sequence[Group], isolated: Mapping[tuple[str, JobSpec], IsolatedProfile],
                       memo: dict[Any, Any], few: bool = False) -> list[ColocationEstimate]:
        """Every group's prediction from its own rows (see the module docstring); fewer than
        :data:`NUMPY_FROM` groups (the engine asks one at a time), or any number with ``few``, take
        :meth:`_estimate_few` (each group's numbers then the same to the last bit as when it is asked
        alone)."""
        jobs, grows, profs, gpus = self._rows(groups, isolated, memo, few)
        prows = self._pair_rows(groups, gpus, profs, isolated,
                                memo) if self.pair_speed_trees is not None else None
        if few and len(groups) > 1 and self.eggat is not None and self.eggat_weight > 0:
            # the network group by group: its products over several groups differ in the last bits
            each = [self._eggat_log_speeds([g], [gpu], [ps], isolated, memo)
                    for g, gpu, ps in zip(groups, gpus, profs, strict=True)]
            eggat = np.concatenate([e for e in each if e is not None])
        else:
            eggat = self._eggat_log_speeds(groups, gpus, profs, isolated, memo)
        if few or len(groups) < NUMPY_FROM:
            return self._estimate_few(jobs, grows, prows, profs, eggat)
        log_speed = self.alpha * jobs[:,
                                      -1] + (self.speed_trees.predict(jobs) if self.speed_trees is not None
                                             else 0.0)
        if prows is not None:
            pair = self.pair_speed_trees.predict(prows) + prows[:,
                                                                CONTENTION_LOG_SPEED]  # type: ignore[union-attr]
            log_speed = (1.0 - self.pair_weight) * log_speed + self.pair_weight * pair
        if eggat is not None:
            log_speed = np.where(np.isnan(eggat), log_speed, (1.0 - self.eggat_weight) * log_speed
                                 + self.eggat_weight * np.nan_to_num(eggat))
        # groups unlike any it was fitted on: the rule (UNSEEN_MEASURED_UTIL)
        if not self.measured_util_trained:
            measured = np.repeat(grows[:, GROUP_U_PREDICTED] == 0, [len(ps) for ps in profs])
            log_speed = np.where(measured, jobs[:, -1], log_speed)
        # plain floats: cheaper to read one by one
        speeds = np.clip(np.exp(log_speed), SPEED_FLOOR, 1.0).tolist()
        zeros = [0.0] * len(groups)
        mem_corr = self.memory_trees.predict(grows).tolist() if self.memory_trees is not None else zeros
        util_corr = self.util_trees.predict(grows).tolist() if self.util_trees is not None else zeros
        base_util = self._base_util(grows)
        out, k = [], 0
        for i, ps in enumerate(profs):
            n = len(ps)
            out.append(self._group_estimate(ps, speeds[k:k + n], mem_corr[i], base_util[i], util_corr[i]))
            k += n
        return out

    def _base_util(self, grows: np.ndarray) -> list[float]:
        """Each group's utilisation before its correction: ``min(100, 100 U)`` under utilisation trees;
        without them (no utilisation was measured in training) the union rule (:data:`UTIL_UNCORRECTED`)."""
        if self.util_trees is not None:
            return np.minimum(100.0, 100.0 * grows[:, UTIL_BASE]).tolist()
        return (100.0 * grows[:, UTIL_UNION]).tolist()

    @staticmethod
    def _group_estimate(ps: Sequence[ResolvedProfile], speeds: Sequence[float], mem_corr: float,
                        base_util: float, util_corr: float) -> ColocationEstimate:
        """One group's estimate within the physical bounds (see the module docstring)."""
        total = sum(p.memory_mib for p in ps)
        memory = min(max(total * math.exp(mem_corr), max(p.memory_mib for p in ps)), MEMORY_OVER_SUM * total)
        cap = min(100.0, sum(p.gpu_util for p in ps))
        util = min(cap, max(0.1, base_util * math.exp(util_corr)))
        return ColocationEstimate(tuple(speeds), memory, util, tuple(p.source for p in ps))

    def _eggat_log_speeds(self, groups: Sequence[Group], gpus: Sequence[str],
                          profs: Sequence[Sequence[ResolvedProfile]],
                          isolated: Mapping[tuple[str, JobSpec], IsolatedProfile],
                          memo: dict[Any, Any]) -> np.ndarray | None:
        """The E-GGAT's log speed of every job (``None`` without one; NaN for the jobs of a group it cannot
        read: a GPU or model it cannot featurize, counted in ``fallbacks``). It sees the members' resolved
        step times (measured or predicted, as the pair trees do), memory and utilisation only where measured
        and only if its training saw them measured (:meth:`~.egat_numpy.NumpyEggat.saw`; the shipped network
        saw neither), and ``isolated`` for the other GPUs' step times; each job's graph block is kept in
        ``memo``."""
        if self.eggat is None or self.eggat_weight <= 0:
            return None
        from dltsched.predictors.colocation.egat_numpy import check_eggat_group

        readable, views, out = [], [], []
        memory_seen, util_seen = self.eggat.saw("iso_memory_gib"), self.eggat.saw("iso_util")
        for g, gpu, ps in zip(groups, gpus, profs, strict=True):
            group = Group(gpu, g.jobs)
            try:
                check_eggat_group(group, self.eggat.max_jobs, self.eggat.gpus)
            except ValidationError:
                self.fallbacks["eggat_unreadable_group"] += 1
                out.append(len(g.jobs))
                continue
            own = {(gpu, j): IsolatedProfile(p.step_time_s,
                                             p.memory_mib if memory_seen and "memory_mib" not in p.predicted
                                             else None,
                                             p.gpu_util if util_seen and "gpu_util" not in p.predicted
                                             else None, p.mem_bw_util)
                   for j, p in zip(g.jobs, ps, strict=True)}
            readable.append(group)
            views.append(ChainMap(own, isolated))  # type: ignore[arg-type]
            out.append(-len(g.jobs))
        found = self.eggat.log_speeds(readable, views, memo=memo.setdefault("eggat", {})).tolist()
        speeds, k = [], 0
        for n in out:
            if n < 0:
                speeds.extend(found[k:k - n])
                k -= n
            else:
                speeds.extend([math.nan] * n)
        return np.asarray(speeds, dtype=float)

    def _estimate_few(self, jobs: np.ndarray, grows: np.ndarray, prows: np.ndarray | None,
                      profs: Sequence[Sequence[ResolvedProfile]], eggat: np.ndarray | None = None
                      ) -> list[ColocationEstimate]:
        """:meth:`_estimate_flat` for a few groups: every ensemble in one walk (:meth:`_stacked`) over rows
        that join each job's row, its pair row and its group's row, and the rest in plain floats (numpy's
        fixed costs outweigh its speed on a few rows)."""
        stack, names = self._stacked()
        blocks = [jobs] if prows is None else [jobs, prows]
        if "memory" in names or "util" in names:
            blocks.append(np.repeat(grows, [len(ps) for ps in profs], axis=0))
        zeros = [0.0] * len(jobs)
        cols = stack.predict(np.hstack(blocks)).T.tolist() if stack is not None else []
        corr = dict(zip(names, cols, strict=True))
        speed_corr, pair_corr = corr.get("speed", zeros), corr.get("pair", zeros)
        mem_corr, util_corr = corr.get("memory", zeros), corr.get("util", zeros)
        base = jobs[:, -1].tolist()
        contention = prows[:, CONTENTION_LOG_SPEED].tolist() if prows is not None else zeros
        rule = ((grows[:, GROUP_U_PREDICTED] == 0).tolist() if not self.measured_util_trained
                else [False] * len(grows))
        base_util = self._base_util(grows)
        alpha, weight = self.alpha, self.pair_weight
        nets, net_weight = (eggat.tolist() if eggat is not None
                            else zeros), self.eggat_weight if eggat is not None else 0.0
        out, k = [], 0
        for i, ps in enumerate(profs):
            speeds = []
            for j in range(k, k + len(ps)):
                if rule[i]:  # groups unlike any it was fitted on: the rule (UNSEEN_MEASURED_UTIL)
                    log_speed = base[j]
                else:
                    log_speed = alpha * base[j] + speed_corr[j]
                    if prows is not None:
                        log_speed = (1.0 - weight) * log_speed + weight * (pair_corr[j] + contention[j])
                    if net_weight and not math.isnan(nets[j]):
                        log_speed = (1.0 - net_weight) * log_speed + net_weight * nets[j]
                speeds.append(min(1.0, max(SPEED_FLOOR, math.exp(log_speed))))
            out.append(self._group_estimate(ps, speeds, mem_corr[k], base_util[i], util_corr[k]))
            k += len(ps)
        return out

    def _stacked(self) -> tuple[StackedTrees | None, tuple[str, ...]]:
        """Every fitted ensemble as one :class:`~.jsontrees.StackedTrees` on rows of job features, then pair
        features (where pair trees are fitted), then group features (where memory or utilisation trees are),
        and the ensembles' names in its columns' order; rebuilt when the trees change (a refit)."""
        named = [(n, t) for n, t in (("speed", self.speed_trees), ("pair", self.pair_speed_trees),
                                     ("memory", self.memory_trees), ("util", self.util_trees))
                 if t is not None and t.trees]
        found = self._stacks.get("all")
        if found is not None and len(found.parts) == len(named) and all(
                a is b for a, (_, b) in zip(found.parts, named, strict=True)):
            return found, tuple(n for n, _ in named)
        if not named:
            return None, ()
        group_at = len(JOB_FEATURES) + (self.pair_speed_trees.num_features
                                        if self.pair_speed_trees is not None else 0)
        offsets = {"speed": 0, "pair": len(JOB_FEATURES), "memory": group_at, "util": group_at}
        found = self._stacks["all"] = StackedTrees(tuple(t for _, t in named),
                                                   tuple(offsets[n] for n, _ in named))
        return found, tuple(n for n, _ in named)

    def predict(self, groups: Sequence[Group], data: ColocDataset) -> list[GroupPrediction]:
        """:class:`~.metrics.GroupPredictor` interface: ``data.isolated`` supplies the profiles."""
        return [e.as_group_prediction() for e in self.estimate_groups(groups, data.isolated)]

    # ------------------------------------------------------------------ engine interface
    def estimate(self, jobs: Sequence[Job], gpu_type: str) -> ColocationEstimate:
        """One group of engine jobs on ``gpu_type`` with per-job sources (its own ``profiles``; remembered per
        group, at most ``MAX_REMEMBERED`` groups). Inside a run that profiles jobs on arrival
        (:func:`~dltsched.engine.domain.profiles.current_profiles`), a member measured alone on one GPU of
        ``gpu_type`` in this run enters with that measurement (step time, memory, utilisation) instead of the
        predictor's own profile or prediction for its job type."""
        book = current_profiles()
        # the remembered groups by the members' own fields first (no JobSpec to build and hash)
        if book is None:
            key = (gpu_type, *[(j.model, j.batch_size, j.amp, j.dataset) for j in jobs])
            found = self._by_fields.get(key)
            if found is None:
                found = self._remembered(gpu_type, tuple(_spec(j) for j in jobs))
                if len(self._by_fields) >= MAX_REMEMBERED:
                    self._by_fields.clear()
                self._by_fields[key] = found
            return found
        specs = tuple(_spec(j) for j in jobs)
        measured = _measured_in_run(book, jobs, specs, gpu_type)
        if measured:
            group = Group(gpu_type, specs)
            check_group(group, self.max_jobs)
            return self._estimate([group], ChainMap(measured, self.profiles), {})[0]  # type: ignore[arg-type]
        return self._remembered(gpu_type, specs)

    def estimate_many(self, groups: Sequence[tuple[Sequence[Job], str]]) -> list[ColocationEstimate]:
        """:meth:`estimate` of each (jobs, GPU type), the same estimates as asking one group at a time; the
        pairs not yet remembered are estimated together first, in their members' canonical order, in one walk
        of the trees (:meth:`_estimate_few`: each row's numbers do not depend on the other rows)."""
        if current_profiles() is not None:
            return [self.estimate(jobs, gpu_type) for jobs, gpu_type in groups]
        out: list[ColocationEstimate | None] = []
        missing: list[int] = []
        remembered = self._by_fields  # read by the members' fields, as estimate() reads them
        for jobs, gpu_type in groups:
            found = remembered.get((gpu_type, *[(j.model, j.batch_size, j.amp, j.dataset) for j in jobs]))
            if found is None:
                missing.append(len(out))
            out.append(found)
        if missing:
            self._remember_pairs([groups[i] for i in missing])
            for i in missing:
                out[i] = self.estimate(*groups[i])
        return out  # type: ignore[return-value]

    def colocated_many(self, groups: Sequence[tuple[Sequence[Job], str]]
                       ) -> list[tuple[tuple[float, ...], float]]:
        """Per (jobs, GPU type): the group's co-located speeds and its GPU memory in MiB, the answers of
        :meth:`colocated_speeds` and :meth:`group_memory_mib` (estimated together, :meth:`estimate_many`)."""
        return [(e.speeds, e.memory_mib) for e in self.estimate_many(groups)]

    def order_symmetric(self) -> bool:
        """Whether a pair's answers with its members the other way round are the same numbers, the speeds
        swapped: while no profile is measured in the run, every pair is estimated in its members' canonical
        order and its speeds put back in the caller's (:meth:`_remembered`); a pair with a member measured in
        the run is estimated in the order asked.

        Returns
        -------
        bool
            ``True``: the answers of ``(b, a)`` are those of ``(a, b)`` with the speeds swapped.
        """
        return current_profiles() is None

    def _remember_pairs(self, groups: Sequence[tuple[Sequence[Job], str]]) -> None:
        """Estimate and remember, in one call, every pair of ``groups`` not remembered yet in its members'
        canonical order (what :meth:`_remembered` would estimate one at a time)."""
        wanted: dict[tuple[str, tuple[JobSpec, ...]], None] = {}
        for jobs, gpu_type in groups:
            if len(jobs) != 2:
                continue
            specs = (_spec(jobs[0]), _spec(jobs[1]))
            if _order_key(specs[1]) < _order_key(specs[0]):
                specs = (specs[1], specs[0])
            key = (gpu_type, specs)
            if key not in self._groups and key not in wanted:
                try:
                    check_group(Group(gpu_type, specs), self.max_jobs)
                except ValidationError:
                    continue  # left to estimate(), which raises it in its turn
                wanted[key] = None
        if len(wanted) < 2:
            return
        found = self._estimate_flat([Group(gpu, specs) for gpu, specs in wanted], self.profiles,
                                    self._resolved, few=True)
        for key, estimate in zip(wanted, found, strict=True):
            if len(self._groups) >= MAX_REMEMBERED:
                self._groups.clear()
            self._groups[key] = estimate

    def _remembered(self, gpu_type: str, specs: tuple[JobSpec, ...]) -> ColocationEstimate:
        """One group from the remembered ones, else estimated and remembered; a larger group's sub-groups come
        from the remembered ones too (the engine asks about the same pairs again and again). A group not yet
        remembered in this order is estimated in its members' sorted order and its speeds and sources put back
        in the caller's order: the same jobs in another order are the same group (every feature is a sum,
        maximum or share over the members; only the last bits of a sum over three can differ)."""
        key = (gpu_type, specs)
        found = self._groups.get(key)
        if found is None:
            order = sorted(range(len(specs)), key=lambda i: _order_key(specs[i]))
            if order != sorted(order):
                canonical = self._remembered(gpu_type, tuple(specs[i] for i in order))
                at = {i: k for k, i in enumerate(order)}  # caller's index -> position in the sorted group
                found = ColocationEstimate(tuple(canonical.speeds[at[i]] for i in range(len(specs))),
                                           canonical.memory_mib, canonical.gpu_util,
                                           tuple(canonical.sources[at[i]] for i in range(len(specs))))
            else:
                group = Group(gpu_type, specs)
                check_group(group, self.max_jobs)
                subs = [specs[:k] + specs[k + 1:] for k in range(len(specs))] if len(specs) > 2 else []
                # sub-pairs not yet remembered are estimated in the same call (one walk of the trees for all)
                pairs = [s for s in dict.fromkeys(subs) if len(s) == 2 and (gpu_type, s) not in self._groups]
                found, *more = self._estimate_flat([group, *(Group(gpu_type, s) for s in pairs)],
                                                   self.profiles, self._resolved)
                for s, e in zip(pairs, more, strict=True):
                    self._groups[(gpu_type, s)] = e
                if subs:
                    found = _bounded_by_subgroups(found, [self._remembered(gpu_type, s) for s in subs])
            if len(self._groups) >= MAX_REMEMBERED:
                self._groups.clear()
            self._groups[key] = found
        return found

    def colocated_speeds(self, jobs: Sequence[Job], gpu_type: str) -> tuple[float, ...]:
        """Co-located speeds relative to running alone, from the jobs' profiles (the
        :class:`~dltsched.engine.domain.predictors.ColocationPredictor` protocol)."""
        return self.estimate(jobs, gpu_type).speeds

    def group_memory_mib(self, jobs: Sequence[Job], gpu_type: str) -> float:
        """The group's GPU memory, MiB, from the jobs' profiles (the
        :class:`~dltsched.engine.domain.predictors.ColocationPredictor` protocol)."""
        return self.estimate(jobs, gpu_type).memory_mib

    def colocation_sources(self, jobs: Sequence[Job], gpu_type: str) -> tuple[str, ...]:
        """Per job, where its profile in this group's prediction came from: ``measured``, ``partial`` (some
        values predicted) or ``predicted`` (no profile on ``gpu_type``: a fallback). The engine marks plans
        with it."""
        return self.estimate(jobs, gpu_type).sources

    def with_profiles(self, profiles: Mapping[tuple[str, JobSpec], IsolatedProfile]) -> ProfileColocation:
        """The same fitted model using ``profiles`` at schedule time (a fresh fallback count)."""
        return ProfileColocation(self.max_jobs, self.max_iter, self.learning_rate, self.max_depth,
                                 self.min_samples_leaf, self.loss, self.seed, dict(profiles),
                                 self.speed_trees, self.memory_trees, self.util_trees, self.alpha,
                                 self.measured_util_trained, dict(self.record), step_time=self.step_time,
                                 strict=self.strict, pair_weight=self.pair_weight,
                                 pair_speed_trees=self.pair_speed_trees, eggat=self.eggat,
                                 eggat_weight=self.eggat_weight, eggat_checkpoint=self.eggat_checkpoint)

    def with_job_profiles(self, profiles: Iterable[JobProfile]) -> ProfileColocation:
        """The same fitted model with the caller's measured profiles added to (and replacing) its own;
        profiles marked ``predicted`` are ignored (the model predicts what is missing itself, and counts
        it)."""
        merged = dict(self.profiles)
        merged.update(isolated_from_profiles(profiles))
        return self.with_profiles(merged)

    # ------------------------------------------------------------------ files
    def to_json(self) -> dict[str, Any]:
        """The fitted model as plain JSON data: hyper-parameters, profiles and tree ensembles.

        Returns
        -------
        dict[str, Any]
            What :meth:`from_json` reads.
        """
        def trees(t: JsonTrees | None) -> dict[str, Any] | None:
            return t.to_json() if t is not None else None

        hyper = {"max_iter": self.max_iter, "learning_rate": self.learning_rate, "max_depth": self.max_depth,
                 "min_samples_leaf": self.min_samples_leaf, "loss": self.loss, "seed": self.seed,
                 "pair_weight": self.pair_weight}
        profiles = [[gpu, job.model, job.batch_size, job.amp, job.dataset, p.step_time_s, p.memory_mib,
                     p.gpu_util, p.mem_bw_util] for (gpu, job), p in sorted(self.profiles.items())]
        return {"format": FORMAT, "max_jobs": self.max_jobs, "hyper": hyper, "record": self.record,
                "job_features": list(JOB_FEATURES), "group_features": list(GROUP_FEATURES),
                "alpha": self.alpha, "measured_util_trained": self.measured_util_trained,
                "speed": trees(self.speed_trees), "memory": trees(self.memory_trees),
                "util": trees(self.util_trees), "pair_speed": trees(self.pair_speed_trees),
                "profiles": profiles,
                "eggat": ({"checkpoint": self.eggat_checkpoint, "weight": self.eggat_weight}
                          if self.eggat is not None and self.eggat_checkpoint else None)}

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model to ``path`` as compact JSON."""
        Path(path).write_text(json.dumps(self.to_json(), separators=(",", ":")))

    @classmethod
    def from_json(cls, raw: dict[str, Any], folder: str | os.PathLike[str] | None = None, *,
                  eggat: bool = True) -> ProfileColocation:
        """A model from its JSON; an ``eggat`` entry names its network's checkpoint, read from ``folder`` (the
        file's own) when it is there, else from the package (the shipped network). ``eggat=False``: the
        network is left unread (the model :meth:`without_eggat` gives)."""
        if raw.get("format") not in (FORMAT, FORMAT_1):
            raise ValidationError("format", f"{raw.get('format')!r} not understood; expected {FORMAT}")
        if raw.get("job_features") != list(JOB_FEATURES) or raw.get("group_features") != list(GROUP_FEATURES):
            raise ValidationError("job_features",
                                  "the file's features differ from this version's; retrain it "
                                                  "with `dltsched predict train-colocation`")

        def trees(t: dict[str, Any] | None) -> JsonTrees | None:
            return JsonTrees.from_json(t) if t is not None else None

        profiles = {(gpu, JobSpec(model, batch, bool(amp), dataset)): IsolatedProfile(step, mem, util, bw)
                    for gpu, model, batch, amp, dataset, step, mem, util, bw in raw.get("profiles", [])}
        model = cls(int(raw["max_jobs"]), **raw.get("hyper", {}), profiles=profiles,
                    speed_trees=trees(raw["speed"]), alpha=float(raw.get("alpha", 1.0)),
                    measured_util_trained=bool(raw.get("measured_util_trained", True)),
                    memory_trees=trees(raw.get("memory")), util_trees=trees(raw.get("util")),
                    record=raw.get("record", {}), pair_speed_trees=trees(raw.get("pair_speed")))
        net = raw.get("eggat") if eggat else None
        if net:
            model.attach_eggat(_read_eggat(str(net["checkpoint"]), folder), float(net["weight"]),
                               str(net["checkpoint"]))
        return model

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ProfileColocation:
        """A model written by :meth:`save` (files it names are found beside ``path``)."""
        return cls.from_json(json.loads(Path(path).read_text()), Path(path).parent)

    def attach_eggat(self, eggat: Any, weight: float = 0.5,
                     checkpoint: str | None = None) -> ProfileColocation:
        """Blend ``eggat`` (a :class:`~.egat_numpy.NumpyEggat` fitted on the same data as the trees) into the
        speeds with ``weight`` (see :data:`EGGAT_WEIGHT`); ``checkpoint``: its file's name, for
        :meth:`save`."""
        if not 0.0 <= weight <= 1.0:
            raise ValidationError("eggat_weight", f"{weight!r} not understood; must be in [0, 1]")
        self.eggat, self.eggat_weight, self.eggat_checkpoint = eggat, weight, checkpoint
        self._groups.clear()
        self._by_fields.clear()
        return self

    def without_eggat(self) -> ProfileColocation:
        """The same model without its E-GGAT (the profile base, trees and pair trees alone)."""
        return self.with_profiles(self.profiles).attach_eggat(None, 0.0)


_PAIR_STEP = PAIR_JOB_FEATURES.index("log_iso_step_s")


def pair_rows_of(gpu: str, jobs: Sequence[JobSpec], own: Sequence[Sequence[float]],
                    profiles: Sequence[IsolatedProfile]) -> list[list[float]]:
    """:func:`~.features.pair_rows_from` for the groups of two or three jobs this model predicts, with the
    same sums in the same order (so the same rows; the tests compare them) and fewer fixed costs per call."""
    head = gpu_features(gpu)
    n = len(own)
    utils = [p.gpu_util for p in profiles]
    measured = all(u is not None for u in utils)
    rows = []
    for i, feats in enumerate(own):
        rest = [o for k, o in enumerate(own) if k != i]
        others: Sequence[float] = rest[0] if n == 2 else [sum(v) for v in zip(*rest, strict=True)]
        same = float(any(j.model == jobs[i].model for k, j in enumerate(jobs) if k != i))
        if measured:
            total = max(1.0,
                        float(sum([utils[i],
                                   *(u for k, u in enumerate(utils) if k != i)])))  # type: ignore[misc]
            contention = (math.log(min(1.0, 100.0 / total)), total / 100.0, 0.0)
        else:
            contention = (0.0, 0.0, 1.0)
        rows.append([*head, *feats, *others, feats[_PAIR_STEP] - others[_PAIR_STEP] / (n - 1), same,
                     *contention, float(n)])
    return rows


def _bounded_by_subgroups(group: ColocationEstimate,
                          without: Sequence[ColocationEstimate]) -> ColocationEstimate:
    """A group of ``n`` >= 3 jobs bounded by its ``n`` sub-groups (``without[k]``: the group without job
    ``k``): a further job never speeds the others up, frees no memory and idles no GPU time, so each job's
    speed is at most its speed in every sub-group, and the memory and utilisation at least every sub-group's
    (still within their own bounds: a sub-group's memory is below 1.25x the group's sum, its utilisation below
    the group's cap)."""
    speeds = list(group.speeds)
    for k, sub in enumerate(without):
        others = [j for j in range(len(speeds)) if j != k]
        for j, v in zip(others, sub.speeds, strict=True):
            speeds[j] = min(speeds[j], v)
    return ColocationEstimate(tuple(speeds), max(group.memory_mib, *(s.memory_mib for s in without)),
                              max(group.gpu_util, *(s.gpu_util for s in without)), group.sources)


def _fit_alpha(base: np.ndarray, log_speeds: np.ndarray) -> float:
    """The exponent in [0, 1.5] (steps of 0.05) whose scaled base is closest to the measured log speeds (least
    absolute error): how strongly summed utilisation slows jobs in this data, before the trees'
    corrections."""
    grid = np.linspace(0.0, 1.5, 31)
    errors = np.abs(log_speeds[None, :] - grid[:, None] * base[None, :]).sum(axis=1)
    return float(grid[int(errors.argmin())])


def _read_eggat(name: str, folder: str | os.PathLike[str] | None) -> Any:
    """The network a model file names: beside the file when it is there, else the packaged checkpoint."""
    from dltsched.predictors.colocation.egat_numpy import SHIPPED_EGGAT, NumpyEggat, shipped_eggat

    if folder is not None and (Path(folder) / name).is_file():
        return NumpyEggat.load(Path(folder) / name)
    if name == SHIPPED_EGGAT:
        return shipped_eggat()
    raise ValidationError("eggat",
                          f"checkpoint '{name}' not found beside the model file ({folder}); keep the "
                                   "E-GGAT's .safetensors with its table_profile_*.json")


def isolated_from_profiles(profiles: Iterable[JobProfile]) -> dict[tuple[str, JobSpec], IsolatedProfile]:
    """Measured :class:`~dltsched.predictors.profiles.JobProfile` s keyed the way co-location data keys
    them."""
    return {(p.key.gpu, JobSpec(p.key.model, p.key.batch_size, p.key.amp, p.key.dataset)):
            IsolatedProfile(p.step_time_s, p.memory_mib, p.gpu_util, p.mem_bw_util)
            for p in profiles if p.source == "measured"}


def _order_key(spec: JobSpec) -> tuple[Any, ...]:
    """A job type's place in a group's canonical order (a dataset may be ``None`` beside a named one)."""
    return spec.model, spec.batch_size, spec.amp, spec.dataset is not None, spec.dataset or ""


def _spec(job: Job) -> JobSpec:
    return JobSpec(job.model, job.batch_size, job.amp, job.dataset)


def _measured_in_run(book: ProfileBook, jobs: Sequence[Job], specs: Sequence[JobSpec],
                     gpu_type: str) -> dict[tuple[str, JobSpec], IsolatedProfile]:
    """The members' isolated profiles measured in this run on one GPU of ``gpu_type`` (utilisation in %),
    keyed the way the predictor's own profiles are."""
    out: dict[tuple[str, JobSpec], IsolatedProfile] = {}
    for job, spec in zip(jobs, specs, strict=True):
        p = book.isolated(job.id, gpu_type)
        if p is not None and p.num_gpus == 1:
            out[(gpu_type, spec)] = IsolatedProfile(p.step_time_s, p.memory_mib,
                                                    None if p.utilization is None else 100.0 * p.utilization)
    return out


@cache
def _shipped_raw() -> dict[str, Any]:
    return json.loads(resources.files("dltsched.predictors.colocation").joinpath(SHIPPED).read_text())


def shipped_profile_predictor(*, strict: bool = False, eggat: bool = True) -> ProfileColocation:
    """The packaged model: corrections fitted on Gavel's MIT-licensed pairs, Gavel's isolated profiles, and
    (``eggat``) the E-GGAT its file names."""
    model = ProfileColocation.from_json(_shipped_raw(), eggat=eggat)
    model.strict = strict
    return model

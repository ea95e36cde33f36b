"""Co-location from job profiles: a physics-shaped base, corrected by trees learned on measured groups.

Inputs per job: its isolated profile on this GPU type (step time, memory, SM utilisation, memory-
bandwidth utilisation where measured); where a value is missing it is predicted (step time and memory
by the step-time predictor, SM utilisation as the analytic busy fraction: compute or memory-traffic
time over the step time) and the job's ``source`` says so. Catalog features of the model (FLOPs,
activations, batch size, precision) and the GPU's specs go to the corrections.

Physics-shaped base (``u`` = isolated SM utilisation / 100, ``U`` = sum over the group):

- speed of each job ``min(1, 1 / U)``: time slicing of a GPU that ``U`` of work keeps busy;
- group memory = sum of isolated memories (each process keeps its own context and allocator);
- group utilisation = ``min(100, 100 U)``.

Learned corrections (gradient-boosted trees, :mod:`.jsontrees`) fit the log ratio of the measured
value to the base, on features of the job and its partners (sum of partners' utilisation, bandwidth
shares, step times, memory). Every prediction is then clamped to the physical bounds: speed in
(0, 1]; memory between the largest member and 1.25x the sum; utilisation at most 100% and at most the
sum of the members'.

Groups of three or more are predicted by the same model: the base and every feature are defined for
any group size (sums over partners), so a third job raises ``U`` and the base slows everyone; the
trees were fitted on pairs only (no three-job group was ever measured here) and see a partner sum
beyond most of their training range, where they extend their outermost leaves. Three-job figures are
therefore the base plus pair-learned corrections, not a validated prediction.

A fallback is never silent: every predicted profile value is counted in ``fallbacks`` (by kind), the
first per (GPU, model) is logged at warning level, and each prediction carries per-job ``sources``.
No torch is needed; a model saves to and loads from one JSON file (never pickle).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from dltsched.engine.domain.catalog import gpu_spec, model_spec
from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Job
from dltsched.predictors.colocation.features import Group, check_group, group_of, resolve_gpu
from dltsched.predictors.colocation.jsontrees import JsonTrees, fit_trees
from dltsched.predictors.colocation.metrics import GroupPrediction
from dltsched.predictors.colocation.samples import (
    LUCID_GPU,
    LUCID_PROXY_GPU,
    ColocDataset,
    IsolatedProfile,
    JobSpec,
    without_absent,
)
from dltsched.predictors.profiles import JobProfile

log = logging.getLogger(__name__)

FORMAT = "dltsched-colocation-profile/1"
SHIPPED = "table_profile_gavel.json"
#: upper bound of group memory over the summed isolated memory
MEMORY_OVER_SUM = 1.25
SPEED_FLOOR = 0.02
MAX_REMEMBERED = 200_000
#: batches of at least this many groups build their features with numpy (2-3x faster on 10,000 groups; 13x
#: slower for one group at a time)
NUMPY_FROM = 32
#: the utilisation trees grow leaf-wise (up to 31 leaves) on squared error: on Lucid's leave-one-model-out folds
#: 12.8% MAPE on the valid pairs against 13.9% with the speed trees' depth-3, absolute-error setting
UTIL_TREES: dict[str, Any] = {"max_depth": None, "loss": "squared_error", "max_iter": 200}
#: GPUs whose isolated step times describe a job's compute/memory character, as ratios to the last
REFERENCE_GPUS = ("k80", "p100", "v100")

JOB_FEATURES = ("u", "u_partners", "u_total", "bw", "bw_partners", "log_step_s", "log_step_over_partners",
                "memory_share", "partners_memory_share", "log_batch", "amp", "same_model", "group_size",
                "log_gflops_sample", "log_act_mib_sample", "log_gpu_tflops", "log_gpu_bandwidth", "u_predicted",
                "log_step_k80_over_v100", "log_step_p100_over_v100", "log_params_m", "layers_10",
                "partners_log_gflops_step", "partners_log_params_m", "partners_k80_over_v100",
                "partners_p100_over_v100", "base_log_speed")
GROUP_FEATURES = ("u_total", "u_max", "u_min", "u_union", "bw_total", "bw_max", "memory_share", "max_memory_share",
                  "group_size", "mean_log_step_s", "log_gpu_bandwidth", "memory_predicted", "u_predicted",
                  "min_log_step_s", "max_log_step_s", "mean_log_batch", "amp_share", "mean_log_gflops_sample",
                  "mean_log_act_mib_sample", "u_of_slowest")


@dataclass(frozen=True, slots=True)
class ResolvedProfile:
    """A job's profile on one GPU with every value present; ``predicted`` names the values that were not measured."""

    step_time_s: float
    memory_mib: float
    gpu_util: float
    mem_bw_util: float | None
    predicted: frozenset[str] = frozenset()

    @property
    def source(self) -> str:
        """``measured`` (every value measured), ``partial`` (some predicted) or ``predicted`` (no profile)."""
        if not self.predicted:
            return "measured"
        return "predicted" if "step_time_s" in self.predicted else "partial"


@dataclass(frozen=True, slots=True)
class _JobVector:
    """Per (GPU, job type): the resolved profile and the numbers every group row is built from."""

    profile: ResolvedProfile
    model: str
    u: float
    bw: float
    log_step: float
    memory_mib: float
    log_batch: float
    amp: float
    gflops: float
    act: float
    params: float
    layers: float
    k80_ratio: float
    p100_ratio: float
    gflops_step: float

    #: the per-job numbers, in the order of :attr:`numbers`
    NUMBERS: ClassVar[tuple[str, ...]] = ("u", "bw", "log_step", "memory_mib", "log_batch", "amp", "gflops", "act",
                                          "params", "layers", "k80_ratio", "p100_ratio", "gflops_step",
                                          "u_predicted", "memory_predicted")

    @property
    def u_predicted(self) -> float:
        return float("gpu_util" in self.profile.predicted)

    @property
    def memory_predicted(self) -> bool:
        return "memory_mib" in self.profile.predicted

    @property
    def numbers(self) -> tuple[float, ...]:
        predicted = self.profile.predicted
        return (self.u, self.bw, self.log_step, self.memory_mib, self.log_batch, self.amp, self.gflops, self.act,
                self.params, self.layers, self.k80_ratio, self.p100_ratio, self.gflops_step,
                float("gpu_util" in predicted), float("memory_mib" in predicted))


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
        return GroupPrediction(self.speeds, self.memory_mib, self.gpu_util)


def _real_gpu(gpu: str) -> str:
    return LUCID_PROXY_GPU if gpu == LUCID_GPU else gpu


@cache
def _gpu_consts(gpu: str) -> tuple[float, float, float]:
    spec = gpu_spec(_real_gpu(gpu))
    return spec.memory_gib * 1024.0, math.log(spec.fp32_tflops), math.log(spec.memory_bandwidth_gbs)


@cache
def _job_consts(job: JobSpec) -> tuple[float, float, float, float]:
    """log forward GFLOPs and activation MiB per sample, log parameters (M), layers / 10, from the catalog."""
    spec = model_spec(job.model)
    data = spec.dataset(job.dataset)
    half = 0.5 if job.amp else 1.0
    return (math.log(data.fwd_gflops), math.log(max(1e-6, data.activation_mib * half)), math.log(spec.params_m),
            spec.layers / 10.0)


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


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
    record: dict[str, Any] = field(default_factory=dict)
    fallbacks: Counter[str] = field(default_factory=Counter)
    step_time: Any = None
    _resolved: dict[Any, Any] = field(default_factory=dict)  # resolved profiles and per-job numbers
    _warned: set[tuple[str, str]] = field(default_factory=set)
    _groups: dict[tuple[str, tuple[JobSpec, ...]], ColocationEstimate] = field(default_factory=dict)

    # ------------------------------------------------------------------ profiles
    def _step_time(self) -> Any:
        if self.step_time is None:
            from dltsched.predictors.colocation.baselines import default_step_time

            self.step_time = default_step_time()
        return self.step_time

    def resolve(self, gpu: str, job: JobSpec, isolated: Mapping[tuple[str, JobSpec], IsolatedProfile],
                memo: dict[Any, Any]) -> ResolvedProfile:
        """The job's profile on ``gpu`` from ``isolated``, missing values predicted and counted in ``fallbacks``."""
        key = (gpu, job)
        found = memo.get(key)
        if found is not None:
            return found
        iso = isolated.get(key)
        if iso is None and job.dataset is None:  # a job without a dataset: the model's only profile at this batch
            same = [p for (g, j), p in isolated.items() if g == gpu and (j.model, j.batch_size, j.amp)
                    == (job.model, job.batch_size, job.amp)]
            iso = same[0] if len(same) == 1 else None
        iso = iso or IsolatedProfile()
        predicted = set()
        step = iso.step_time_s
        if step is None:
            from dltsched.predictors.colocation.baselines import as_job

            step = self._step_time().step_time_s(as_job(job), _real_gpu(gpu), 1)
            predicted.add("step_time_s")
        memory = iso.memory_mib
        if memory is None:
            from dltsched.predictors.colocation.baselines import as_job

            memory = self._step_time().memory_mib(as_job(job), _real_gpu(gpu))
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
            log.warning("co-location: no profile of %s on %s; its step time, memory and utilisation are predicted "
                        "(counted in fallbacks)", job.label, gpu)
        return found

    # ------------------------------------------------------------------ features
    def _job(self, gpu: str, job: JobSpec, isolated: Mapping[tuple[str, JobSpec], IsolatedProfile],
             memo: dict[Any, Any]) -> _JobVector:
        """The job's resolved profile and its per-job numbers (computed once per GPU and job type)."""
        found = memo.get((gpu, job, "vector"))
        if found is None:
            p = self.resolve(gpu, job, isolated, memo)
            gflops, act, params, layers = _job_consts(job)
            log_batch = math.log(job.batch_size)
            found = _JobVector(p, job.model, p.gpu_util / 100.0,
                               p.mem_bw_util / 100.0 if p.mem_bw_util is not None else math.nan,
                               math.log(p.step_time_s), p.memory_mib, log_batch, float(job.amp), gflops, act, params,
                               layers, *self._cross_gpu(job, isolated), gflops + log_batch)
            memo[(gpu, job, "vector")] = found
        return found  # type: ignore[no-any-return]

    def _rows(self, groups: Sequence[Group], isolated: Mapping[tuple[str, JobSpec], IsolatedProfile],
              memo: dict[Any, Any]) -> tuple[np.ndarray, np.ndarray, list[list[ResolvedProfile]]]:
        """Per-job rows (:data:`JOB_FEATURES`), per-group rows (:data:`GROUP_FEATURES`), resolved profiles.

        Groups are padded to the largest size and every feature is computed with numpy at once; padded slots
        are left out of every sum (``np.where``, so that a member's missing value, NaN, still spreads). Fewer
        than :data:`NUMPY_FROM` groups (the engine asks one at a time) go through :meth:`_rows_loop`."""
        if len(groups) < NUMPY_FROM:
            return self._rows_loop(groups, isolated, memo)
        gpus: dict[str, str] = {}
        vectors, gpu_rows, resolved_all, models = [], [], [], []
        names: dict[str, int] = {}
        for g in groups:
            gpu = gpus.get(g.gpu) or gpus.setdefault(g.gpu, resolve_gpu(g.gpu))
            vs = [self._job(gpu, j, isolated, memo) for j in g.jobs]
            resolved_all.append([v.profile for v in vs])
            vectors.append([v.numbers for v in vs])
            models.append([names.setdefault(v.model, len(names)) for v in vs])
            gpu_rows.append(_gpu_consts(gpu))
        size = max(len(v) for v in vectors)
        count = len(groups)
        mask = np.zeros((count, size), dtype=bool)
        x = np.zeros((count, size, len(_JobVector.NUMBERS)))
        model = np.full((count, size), -1, dtype=np.int64)
        for n, (vs, ms) in enumerate(zip(vectors, models, strict=True)):
            mask[n, :len(vs)] = True
            x[n, :len(vs)] = vs
            model[n, :len(ms)] = ms
        f = {name: x[:, :, k] for k, name in enumerate(_JobVector.NUMBERS)}
        consts = np.asarray(gpu_rows)
        gpu_mem, log_tflops, log_bw = consts[:, 0], consts[:, 1], consts[:, 2]
        sizes = mask.sum(axis=1).astype(float)

        def total(values: np.ndarray) -> np.ndarray:
            return np.where(mask, values, 0.0).sum(axis=1)

        tot = {name: total(f[name]) for name in ("u", "bw", "memory_mib", "log_step", "log_batch", "amp", "gflops",
                                                  "act")}
        base = np.log(np.minimum(1.0, 1.0 / tot["u"]))
        columns = []
        for i in range(size):
            others = mask & (np.arange(size) != i)[None, :]

            def partners(name: str, others: np.ndarray = others) -> np.ndarray:
                return np.where(others, f[name], 0.0).sum(axis=1)

            same = ((model == model[:, i:i + 1]) & others).any(axis=1).astype(float)
            cols = [f["u"][:, i], partners("u"), tot["u"], f["bw"][:, i], partners("bw"), f["log_step"][:, i],
                    f["log_step"][:, i] - partners("log_step") / (sizes - 1), f["memory_mib"][:, i] / gpu_mem,
                    partners("memory_mib") / gpu_mem, f["log_batch"][:, i], f["amp"][:, i], same, sizes,
                    f["gflops"][:, i], f["act"][:, i], log_tflops, log_bw, f["u_predicted"][:, i],
                    f["k80_ratio"][:, i], f["p100_ratio"][:, i], f["params"][:, i], f["layers"][:, i],
                    partners("gflops_step"), partners("params"), partners("k80_ratio"), partners("p100_ratio"), base]
            columns.append(np.stack(cols, axis=1))
        job_rows = np.stack(columns, axis=1)[mask]  # group by group, jobs in order
        u_max = np.where(mask, f["u"], -np.inf).max(axis=1)
        u_min = np.where(mask, f["u"], np.inf).min(axis=1)
        union = 1.0 - np.where(mask, 1.0 - np.minimum(0.99, f["u"]), 1.0).prod(axis=1)
        bw_max = np.where(np.isnan(tot["bw"]), np.nan, np.where(mask, f["bw"], -np.inf).max(axis=1))
        mem_max = np.where(mask, f["memory_mib"], -np.inf).max(axis=1)
        logs = np.where(mask, f["log_step"], -np.inf)
        slowest = logs.argmax(axis=1)
        group_rows = np.stack([tot["u"], u_max, u_min, union, tot["bw"], bw_max, tot["memory_mib"] / gpu_mem,
                               mem_max / tot["memory_mib"], sizes, tot["log_step"] / sizes, log_bw,
                               np.where(mask, f["memory_predicted"], 0.0).max(axis=1),
                               np.where(mask, f["u_predicted"], 0.0).max(axis=1),
                               np.where(mask, f["log_step"], np.inf).min(axis=1), logs.max(axis=1),
                               tot["log_batch"] / sizes, tot["amp"] / sizes, tot["gflops"] / sizes, tot["act"] / sizes,
                               f["u"][np.arange(count), slowest]], axis=1)
        return job_rows, group_rows, resolved_all

    def _rows_loop(self, groups: Sequence[Group], isolated: Mapping[tuple[str, JobSpec], IsolatedProfile],
              memo: dict[Any, Any]) -> tuple[np.ndarray, np.ndarray, list[list[ResolvedProfile]]]:
        """:meth:`_rows` in plain Python, one group at a time (fewer fixed costs than numpy for a few groups)."""
        job_rows: list[list[float]] = []
        group_rows: list[list[float]] = []
        resolved_all = []
        gpus: dict[str, str] = {}
        for g in groups:
            gpu = gpus.get(g.gpu) or gpus.setdefault(g.gpu, resolve_gpu(g.gpu))
            vs = [self._job(gpu, j, isolated, memo) for j in g.jobs]
            resolved_all.append([v.profile for v in vs])
            gpu_mem, log_tflops, log_bw = _gpu_consts(gpu)
            n = len(vs)
            total_u = sum(v.u for v in vs)
            total_bw = sum(v.bw for v in vs)
            total_mem = sum(v.memory_mib for v in vs)
            total_log = sum(v.log_step for v in vs)
            base = math.log(min(1.0, 1.0 / total_u))
            for i, v in enumerate(vs):
                partners = vs[:i] + vs[i + 1:]
                same = float(any(o.model == v.model for o in partners))
                job_rows.append([v.u, total_u - v.u, total_u, v.bw, sum(o.bw for o in partners), v.log_step,
                                 v.log_step - (total_log - v.log_step) / (n - 1), v.memory_mib / gpu_mem,
                                 (total_mem - v.memory_mib) / gpu_mem, v.log_batch, v.amp, same, float(n), v.gflops,
                                 v.act, log_tflops, log_bw, v.u_predicted, v.k80_ratio, v.p100_ratio, v.params,
                                 v.layers, sum(o.gflops_step for o in partners), sum(o.params for o in partners),
                                 sum(o.k80_ratio for o in partners), sum(o.p100_ratio for o in partners), base])
            us = [v.u for v in vs]
            logs = [v.log_step for v in vs]
            union = 1.0 - math.prod(1.0 - min(0.99, u) for u in us)
            group_rows.append([total_u, max(us), min(us), union, total_bw, max(v.bw for v in vs)
                               if not math.isnan(total_bw) else math.nan, total_mem / gpu_mem,
                               max(v.memory_mib for v in vs) / total_mem, float(n), total_log / n, log_bw,
                               float(any(v.memory_predicted for v in vs)), float(any(v.u_predicted for v in vs)),
                               min(logs), max(logs), sum(v.log_batch for v in vs) / n, sum(v.amp for v in vs) / n,
                               sum(v.gflops for v in vs) / n, sum(v.act for v in vs) / n,
                               us[max(range(n), key=logs.__getitem__)]])
        return np.asarray(job_rows, dtype=float), np.asarray(group_rows, dtype=float), resolved_all

    @staticmethod
    def _cross_gpu(job: JobSpec, isolated: Mapping[tuple[str, JobSpec], IsolatedProfile]) -> tuple[float, float]:
        """log step time on K80 and P100 over V100 (NaN where unmeasured): how compute- or bandwidth-bound."""
        steps = [isolated.get((g, job)) for g in REFERENCE_GPUS]
        if any(p is None or not p.step_time_s for p in steps):
            return math.nan, math.nan
        last = math.log(steps[-1].step_time_s)  # type: ignore[union-attr,arg-type]
        return (math.log(steps[0].step_time_s) - last,  # type: ignore[union-attr,arg-type]
                math.log(steps[1].step_time_s) - last)  # type: ignore[union-attr,arg-type]

    # ------------------------------------------------------------------ fitting
    def fit(self, train: ColocDataset) -> ProfileColocation:
        """Fit the corrections on every sample of ``train`` in which every job evidently ran."""
        data = without_absent(train)
        groups = [group_of(s) for s in data.samples]
        memo: dict[Any, Any] = {}
        jobs, grows, profs = self._rows(groups, data.isolated, memo)
        base = jobs[:, -1]
        y_speed = np.log([v for s in data.samples for v in s.speeds]) - base
        kw = {"max_iter": self.max_iter, "learning_rate": self.learning_rate, "max_depth": self.max_depth,
              "min_samples_leaf": self.min_samples_leaf, "loss": self.loss, "seed": self.seed}
        self.speed_trees = fit_trees(jobs, y_speed, **kw)
        mem_idx = [i for i, s in enumerate(data.samples) if s.memory_mib is not None
                   and not any("memory_mib" in p.predicted for p in profs[i])]
        self.memory_trees = fit_trees(grows[mem_idx], [math.log(data.samples[i].memory_mib /  # type: ignore[operator]
                                                                sum(p.memory_mib for p in profs[i])) for i in mem_idx],
                                      **kw) if len(mem_idx) >= 2 * self.min_samples_leaf else None
        util_idx = [i for i, s in enumerate(data.samples) if s.gpu_util is not None and s.gpu_util > 0]
        self.util_trees = fit_trees(grows[util_idx], [math.log(data.samples[i].gpu_util /  # type: ignore[operator]
                                                              min(100.0, 100.0 * grows[i, 0])) for i in util_idx],
                                    **{**kw, **UTIL_TREES}) if len(util_idx) >= 2 * self.min_samples_leaf else None
        self.fallbacks.clear()
        return self

    # ------------------------------------------------------------------ prediction
    def estimate_groups(self, groups: Sequence[Group],
                        isolated: Mapping[tuple[str, JobSpec], IsolatedProfile] | None = None) -> list[ColocationEstimate]:
        """Predictions with per-job sources; ``isolated`` defaults to the predictor's own ``profiles``."""
        if not groups:
            return []
        for g in groups:
            check_group(g, self.max_jobs)
        if isolated is None:
            isolated, memo = self.profiles, self._resolved
        else:
            memo = {}
        jobs, grows, profs = self._rows(groups, isolated, memo)
        log_speed = jobs[:, -1] + (self.speed_trees.predict(jobs) if self.speed_trees is not None else 0.0)
        speeds = np.clip(np.exp(log_speed), SPEED_FLOOR, 1.0)
        mem_corr = self.memory_trees.predict(grows) if self.memory_trees is not None else np.zeros(len(groups))
        util_corr = self.util_trees.predict(grows) if self.util_trees is not None else np.zeros(len(groups))
        out, k = [], 0
        for i, (g, ps) in enumerate(zip(groups, profs, strict=True)):
            n = len(g.jobs)
            mems = [p.memory_mib for p in ps]
            memory = min(max(sum(mems) * math.exp(mem_corr[i]), max(mems)), MEMORY_OVER_SUM * sum(mems))
            cap = min(100.0, sum(p.gpu_util for p in ps))
            util = min(cap, max(0.1, min(100.0, 100.0 * grows[i, 0]) * math.exp(util_corr[i])))
            out.append(ColocationEstimate(tuple(float(v) for v in speeds[k:k + n]), float(memory), float(util),
                                          tuple(p.source for p in ps)))
            k += n
        return out

    def predict(self, groups: Sequence[Group], data: ColocDataset) -> list[GroupPrediction]:
        """:class:`~.metrics.GroupPredictor` interface: ``data.isolated`` supplies the profiles."""
        return [e.as_group_prediction() for e in self.estimate_groups(groups, data.isolated)]

    # ------------------------------------------------------------------ engine interface
    def estimate(self, jobs: Sequence[Job], gpu_type: str) -> ColocationEstimate:
        """One group of engine jobs on ``gpu_type`` with per-job sources (its own ``profiles``; remembered per
        group, at most ``MAX_REMEMBERED`` groups)."""
        key = (gpu_type, tuple(_spec(j) for j in jobs))
        found = self._groups.get(key)
        if found is None:
            found = self.estimate_groups([Group(gpu_type, key[1])])[0]
            if len(self._groups) >= MAX_REMEMBERED:
                self._groups.clear()
            self._groups[key] = found
        return found

    def colocated_speeds(self, jobs: Sequence[Job], gpu_type: str) -> tuple[float, ...]:
        return self.estimate(jobs, gpu_type).speeds

    def group_memory_mib(self, jobs: Sequence[Job], gpu_type: str) -> float:
        return self.estimate(jobs, gpu_type).memory_mib

    def with_profiles(self, profiles: Mapping[tuple[str, JobSpec], IsolatedProfile]) -> ProfileColocation:
        """The same fitted model using ``profiles`` at schedule time (a fresh fallback count)."""
        return ProfileColocation(self.max_jobs, self.max_iter, self.learning_rate, self.max_depth,
                                 self.min_samples_leaf, self.loss, self.seed, dict(profiles), self.speed_trees,
                                 self.memory_trees, self.util_trees, dict(self.record), step_time=self.step_time)

    def with_job_profiles(self, profiles: Iterable[JobProfile]) -> ProfileColocation:
        """The same fitted model with the caller's measured profiles added to (and replacing) its own; profiles
        marked ``predicted`` are ignored (the model predicts what is missing itself, and counts it)."""
        merged = dict(self.profiles)
        merged.update(isolated_from_profiles(profiles))
        return self.with_profiles(merged)

    # ------------------------------------------------------------------ files
    def to_json(self) -> dict[str, Any]:
        def trees(t: JsonTrees | None) -> dict[str, Any] | None:
            return t.to_json() if t is not None else None

        hyper = {"max_iter": self.max_iter, "learning_rate": self.learning_rate, "max_depth": self.max_depth,
                 "min_samples_leaf": self.min_samples_leaf, "loss": self.loss, "seed": self.seed}
        profiles = [[gpu, job.model, job.batch_size, job.amp, job.dataset, p.step_time_s, p.memory_mib, p.gpu_util,
                     p.mem_bw_util] for (gpu, job), p in sorted(self.profiles.items())]
        return {"format": FORMAT, "max_jobs": self.max_jobs, "hyper": hyper, "record": self.record,
                "job_features": list(JOB_FEATURES), "group_features": list(GROUP_FEATURES),
                "speed": trees(self.speed_trees), "memory": trees(self.memory_trees), "util": trees(self.util_trees),
                "profiles": profiles}

    def save(self, path: str | os.PathLike[str]) -> None:
        Path(path).write_text(json.dumps(self.to_json(), separators=(",", ":")))

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ProfileColocation:
        if raw.get("format") != FORMAT:
            raise ValidationError("format", f"{raw.get('format')!r} not understood; expected {FORMAT}")
        if raw.get("job_features") != list(JOB_FEATURES) or raw.get("group_features") != list(GROUP_FEATURES):
            raise ValidationError("job_features", "the file's features differ from this version's; retrain it "
                                                  "with `dltsched predict train-colocation`")

        def trees(t: dict[str, Any] | None) -> JsonTrees | None:
            return JsonTrees.from_json(t) if t is not None else None

        profiles = {(gpu, JobSpec(model, batch, bool(amp), dataset)): IsolatedProfile(step, mem, util, bw)
                    for gpu, model, batch, amp, dataset, step, mem, util, bw in raw.get("profiles", [])}
        return cls(int(raw["max_jobs"]), **raw.get("hyper", {}), profiles=profiles, speed_trees=trees(raw["speed"]),
                   memory_trees=trees(raw.get("memory")), util_trees=trees(raw.get("util")), record=raw.get("record", {}))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ProfileColocation:
        return cls.from_json(json.loads(Path(path).read_text()))


def isolated_from_profiles(profiles: Iterable[JobProfile]) -> dict[tuple[str, JobSpec], IsolatedProfile]:
    """Measured :class:`~dltsched.predictors.profiles.JobProfile` s keyed the way co-location data keys them."""
    return {(p.key.gpu, JobSpec(p.key.model, p.key.batch_size, p.key.amp, p.key.dataset)):
            IsolatedProfile(p.step_time_s, p.memory_mib, p.gpu_util, p.mem_bw_util)
            for p in profiles if p.source == "measured"}


def _spec(job: Job) -> JobSpec:
    return JobSpec(job.model, job.batch_size, job.amp, job.dataset)


@cache
def _shipped_raw() -> dict[str, Any]:
    return json.loads(resources.files("dltsched.predictors.colocation").joinpath(SHIPPED).read_text())


def train_profile_table(out_dir: str | os.PathLike[str], dataset: str = "gavel",
                        data_dir: str | os.PathLike[str] | None = None, seed: int = 0,
                        figures: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fit a :class:`ProfileColocation` on every valid sample of ``dataset``, keep its isolated profiles, and write
    ``table_profile_<dataset>.json`` into ``out_dir``; returns the record. A Lucid-trained file (non-commercial
    data) is refused inside the package folder."""
    import time

    from dltsched.predictors.colocation.samples import read_dataset

    out = Path(out_dir).resolve()
    package = Path(__file__).resolve().parents[2]  # the folder holding engine/, predictors/, instances/
    inside = any(out == package / sub or (package / sub) in out.parents
                 for sub in ("engine", "formulations", "predictors", "instances"))
    if dataset != "gavel" and inside:
        raise ValidationError("out", f"'{out}' is inside the package; a model trained on {dataset} data may not be "
                                     "shipped (non-commercial licence): write it elsewhere")
    data = read_dataset(dataset, data_dir)
    start = time.perf_counter()
    model = ProfileColocation(seed=seed).fit(data)
    model.profiles = dict(data.isolated)
    model.record = {"data": dataset, "samples": len(without_absent(data)), "dropped_absent": len(data) - len(
        without_absent(data)), "seed": seed, "train_s": round(time.perf_counter() - start, 1),
        "gpus_trained": list(data.gpus()), "profiles": len(data.isolated),
        "groups_over_2": "the same model: physics base over the whole group plus pair-learned corrections; "
                         "no group of three was measured",
        "figures": figures or {},
        "license": "Gavel data, MIT" if dataset == "gavel" else f"{dataset} data, non-commercial: do not ship"}
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"table_profile_{dataset}.json"
    model.save(path)
    return {**model.record, "path": str(path)}


def time_profile_colocation(groups: int = 10_000, seed: int = 0) -> dict[str, float]:
    """Seconds for ``groups`` predictions of the shipped profile model: 2- and 3-job groups of Gavel's job types
    and of jobs without a profile, on K80/P100/V100/A100, in one batch call and one call per group (the
    engine's ``colocated_speeds`` + ``group_memory_mib``), each on a fresh model (nothing remembered)."""
    import random
    import time

    model = shipped_profile_predictor()
    specs = sorted({job for _, job in model.profiles} | {JobSpec("mobilenet_v2", 64), JobSpec("vgg16", 128)})
    gpus = ("k80", "p100", "v100", "a100-40gb")
    rng = random.Random(seed)
    work = [Group(rng.choice(gpus), tuple(rng.choice(specs) for _ in range(rng.choice((2, 3)))))
            for _ in range(groups)]
    start = time.perf_counter()
    model.estimate_groups(work)
    batch_s = time.perf_counter() - start
    fresh = shipped_profile_predictor()
    jobs = [(tuple(Job(f"j{i}", j.model, j.batch_size, 1.0, amp=j.amp, dataset=j.dataset)
                   for i, j in enumerate(g.jobs)), g.gpu) for g in work]
    start = time.perf_counter()
    for members, gpu in jobs:
        fresh.colocated_speeds(members, gpu)
        fresh.group_memory_mib(members, gpu)
    single_s = time.perf_counter() - start
    return {"profile_groups": groups, "profile_batch_seconds": batch_s, "profile_per_call_seconds": single_s,
            "profile_distinct_groups": len({(g.gpu, g.jobs) for g in work})}


def shipped_profile_predictor() -> ProfileColocation:
    """The packaged model: corrections fitted on Gavel's MIT-licensed pairs, Gavel's isolated profiles."""
    return ProfileColocation.from_json(_shipped_raw())

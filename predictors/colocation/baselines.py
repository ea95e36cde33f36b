"""Baselines the graph model must beat, all as :class:`~.metrics.GroupPredictor` s.

0. :class:`ConstantBaseline` (training means) and :class:`PerModelMeanBaseline` (mean speed of each
   model in training; memory = sum of the isolated memories, the "summing isolated memory" rule);
1. :class:`AnalyticContention`: shares of compute and memory bandwidth from a step-time predictor
   (time slicing: ``speed_i = 1 / (1 + sum_{j != i} busy_j)``, busy = the larger of compute and
   memory-traffic time over the isolated step time);
2. :class:`GbtBaseline`: gradient-boosted trees on pair features (isolated profiles, contention prior);
3. :class:`UtilShareRule`: profile rules with nothing fitted: speed ``min(1, 100 / sum of isolated util)``,
   memory = sum of isolated memory, utilisation ``min(100, sum of isolated util)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dltsched.engine.domain.catalog import gpu_spec, model_spec
from dltsched.engine.domain.model import Job
from dltsched.engine.domain.predictors import StepTimePredictor
from dltsched.predictors.colocation.features import (
    CONTENTION_LOG_SPEED,
    Group,
    group_of,
    group_row,
    pair_rows,
    profile_of,
    summed_isolated_memory_mib,
    union_util,
)
from dltsched.predictors.colocation.metrics import GroupPrediction
from dltsched.predictors.colocation.samples import LUCID_GPU, LUCID_PROXY_GPU, ColocDataset, JobSpec


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass(slots=True)
class ConstantBaseline:
    """Predicts the training means of speed, memory and utilisation for every group."""

    speed: float = 1.0
    memory_mib: float | None = None
    gpu_util: float | None = None

    def fit(self, train: ColocDataset) -> ConstantBaseline:
        """Fit on ``train``: the mean speed, memory and utilisation of every sample; returns this
        predictor."""
        self.speed = _mean([v for s in train.samples for v in s.speeds]) or 1.0
        self.memory_mib = _mean([s.memory_mib for s in train.samples if s.memory_mib is not None])
        self.gpu_util = _mean([s.gpu_util for s in train.samples if s.gpu_util is not None])
        return self

    def predict(self, groups: Sequence[Group], data: ColocDataset) -> list[GroupPrediction]:
        """One :class:`GroupPrediction` a group (speeds, memory MiB, utilisation %): the training means."""
        return [GroupPrediction((self.speed,) * len(g.jobs), self.memory_mib, self.gpu_util) for g in groups]


@dataclass(slots=True)
class PerModelMeanBaseline:
    """Mean speed of each model in training (global mean for unseen models); memory = sum of isolated."""

    by_model: dict[str, float] = field(default_factory=dict)
    constant: ConstantBaseline = field(default_factory=ConstantBaseline)

    def fit(self, train: ColocDataset) -> PerModelMeanBaseline:
        """Fit on ``train``: the mean speed of each model; returns this predictor."""
        self.constant.fit(train)
        speeds: dict[str, list[float]] = {}
        for s in train.samples:
            for job, v in zip(s.jobs, s.speeds, strict=True):
                speeds.setdefault(job.model, []).append(v)
        self.by_model = {m: sum(v) / len(v) for m, v in speeds.items()}
        return self

    def predict(self, groups: Sequence[Group], data: ColocDataset) -> list[GroupPrediction]:
        """One :class:`GroupPrediction` a group (speeds, memory MiB, utilisation %): each model's mean, memory
        summed over the members."""
        out = []
        for g in groups:
            speeds = tuple(self.by_model.get(j.model, self.constant.speed) for j in g.jobs)
            memory = summed_isolated_memory_mib(g, data.isolated) or self.constant.memory_mib
            out.append(GroupPrediction(speeds, memory, self.constant.gpu_util))
        return out


@dataclass(slots=True)
class UtilShareRule:
    """Rules from isolated profiles alone (see module docstring); ``None`` where a profile value is
    unmeasured."""

    def fit(self, train: ColocDataset) -> UtilShareRule:
        """Fit on ``train``: nothing to learn, a rule; returns this predictor."""
        return self

    def predict(self, groups: Sequence[Group], data: ColocDataset) -> list[GroupPrediction]:
        """One :class:`GroupPrediction` a group (speeds, memory MiB, utilisation %): every job slowed to 100%
        over the summed isolated utilisation."""
        out = []
        for g in groups:
            profiles = [profile_of(data.isolated, g.gpu, j) for j in g.jobs]
            utils = [p.gpu_util if p is not None else None for p in profiles]
            total = sum(u for u in utils if u is not None) if None not in utils else None
            speed = min(1.0, 100.0 / max(total, 1e-9)) if total is not None else 1.0
            out.append(GroupPrediction((speed,) * len(g.jobs), summed_isolated_memory_mib(g, data.isolated),
                                       min(100.0, total) if total is not None else None))
        return out


def default_step_time() -> StepTimePredictor:
    """The teammate's DeletePop step-time predictor when present, else the analytic roofline."""
    try:
        from dltsched.predictors.steptime import DeletePopStepTime  # type: ignore[attr-defined]

        return DeletePopStepTime()  # type: ignore[no-any-return]
    except (ImportError, AttributeError):
        from dltsched.predictors.analytic import AnalyticStepTime

        return AnalyticStepTime()


def as_job(job: JobSpec, index: int = 0) -> Job:
    """A scheduler :class:`Job` of ``job``'s type (one iteration), for predictors that take jobs.

    Parameters
    ----------
    job
        The job type.
    index
        Makes the job's id (``j<index>``) unique within a group.

    Returns
    -------
    Job
        The job.
    """
    return Job(f"j{index}", job.model, job.batch_size, 1.0, amp=job.amp, dataset=job.dataset)


@dataclass(slots=True)
class AnalyticContention:
    """Time-slicing contention from a step-time predictor (measured isolated step time when known)."""

    step_time: Any = field(default_factory=default_step_time)
    compute_efficiency: float = 0.35
    memory_efficiency: float = 0.6

    def fit(self, train: ColocDataset) -> AnalyticContention:
        """Fit on ``train``: nothing to learn, analytic; returns this predictor."""
        return self

    def busy_fraction(self, job: JobSpec, gpu: str, measured_step_s: float | None) -> float:
        """Fraction of its isolated step that the job keeps the GPU's compute or memory busy."""
        spec = gpu_spec(LUCID_PROXY_GPU if gpu == LUCID_GPU else gpu)
        data = model_spec(job.model).dataset(job.dataset)
        peak = (spec.fp16_tensor_tflops if job.amp else spec.fp32_tflops) * 1e12
        compute_s = 3.0 * data.fwd_gflops * 1e9 * job.batch_size / (self.compute_efficiency * peak)
        act_bytes = data.activation_mib * 1024.0 * 1024.0 * job.batch_size * (0.5 if job.amp else 1.0)
        memory_s = 4.0 * act_bytes / (self.memory_efficiency * spec.memory_bandwidth_gbs * 1e9)
        step_s = measured_step_s or self.step_time.step_time_s(as_job(job), spec.id, 1)
        return min(1.0, max(compute_s, memory_s) / step_s)

    def predict(self, groups: Sequence[Group], data: ColocDataset) -> list[GroupPrediction]:
        """One :class:`GroupPrediction` a group (speeds, memory MiB, utilisation %): from each job's busy
        share of compute and bandwidth."""
        out = []
        for g in groups:
            gpu = LUCID_PROXY_GPU if g.gpu == LUCID_GPU else g.gpu
            busy = []
            for j in g.jobs:
                prof = profile_of(data.isolated, g.gpu, j)
                busy.append(self.busy_fraction(j, g.gpu, prof.step_time_s if prof else None))
            total = sum(busy)
            speeds = tuple(1.0 / (1.0 + total - b) for b in busy)
            memory = sum(self.step_time.memory_mib(as_job(j, i), gpu) for i, j in enumerate(g.jobs))
            out.append(GroupPrediction(speeds, memory, 100.0 * min(1.0, total)))
        return out


@dataclass(slots=True)
class GbtBaseline:
    """Gradient-boosted trees on pair features (:func:`~.features.pair_rows`), predicting log speed.

    Memory: with ``memory="summed_isolated"`` (default) the summed isolated memory times the median
    training ratio of group to summed memory (robust to the outliers of Lucid's measurements: a tree
    model on the log ratio scores worse on held-out models); ``memory="gbt"`` fits trees to that log
    ratio. GPU utilisation: trees on group features. Groups without isolated memory get no memory.
    With ``residual`` (default) the trees fit residuals over parameter-free priors wherever isolated
    utilisation is known (Lucid): log speed over time slicing, ``log min(1, 100 / total isolated util)``,
    and group utilisation over the union ``100 (1 - prod(1 - u_i / 100))``; trees cannot extrapolate
    to a held-out model's profile, the priors can.
    """

    max_iter: int = 200
    learning_rate: float = 0.05
    seed: int = 0
    memory: str = "summed_isolated"
    residual: bool = True
    threads: int = 1
    _models: dict[str, Any] = field(default_factory=dict)
    _memory_log_ratio: float | None = None

    def __post_init__(self) -> None:
        if self.memory not in ("summed_isolated", "gbt"):
            raise ValueError(f"memory={self.memory!r} not understood; one of 'summed_isolated', 'gbt'")

    def _new(self) -> Any:
        from sklearn.ensemble import HistGradientBoostingRegressor

        return HistGradientBoostingRegressor(max_iter=self.max_iter, learning_rate=self.learning_rate,
                                             random_state=self.seed)

    def fit(self, train: ColocDataset) -> GbtBaseline:
        """Fit on ``threads`` OpenMP threads (sklearn's default of all cores thrashes on a loaded CPU)."""
        from threadpoolctl import threadpool_limits

        with threadpool_limits(self.threads):
            return self._fit(train)

    def _fit(self, train: ColocDataset) -> GbtBaseline:
        x, y = [], []
        for s in train.samples:
            rows = pair_rows(group_of(s), train.isolated)
            x.extend(rows)
            y.extend(math.log(v) - self._speed_prior(r) for v, r in zip(s.speeds, rows, strict=True))
        self._models = {"speed": self._new().fit(x, y)}
        ratios = sorted(r for s in train.samples if (r := _memory_log_ratio(s, train)) is not None)
        self._memory_log_ratio = ratios[len(ratios) // 2] if ratios else None
        if self.memory == "gbt" and ratios:
            rows = [(group_row(group_of(s), train.isolated), r) for s in train.samples
                    if (r := _memory_log_ratio(s, train)) is not None]
            self._models["memory_mib"] = self._new().fit([r[0] for r in rows], [r[1] for r in rows])
        rows = [(group_row(group_of(s), train.isolated), s.gpu_util - self._util_prior(group_of(s), train))
                for s in train.samples if s.gpu_util is not None]
        if rows:
            self._models["gpu_util"] = self._new().fit([r[0] for r in rows], [r[1] for r in rows])
        return self

    def predict(self, groups: Sequence[Group], data: ColocDataset) -> list[GroupPrediction]:
        """One :class:`GroupPrediction` a group (speeds, memory MiB, utilisation %): the fitted trees, on at
        most ``threads`` threads."""
        from threadpoolctl import threadpool_limits

        with threadpool_limits(self.threads):
            return self._predict(groups, data)

    def _speed_prior(self, row: Sequence[float]) -> float:
        return row[CONTENTION_LOG_SPEED] if self.residual else 0.0

    def _util_prior(self, group: Group, data: ColocDataset) -> float:
        prior = union_util(group, data.isolated) if self.residual else None
        return prior or 0.0

    def _predict(self, groups: Sequence[Group], data: ColocDataset) -> list[GroupPrediction]:
        if not groups:
            return []
        rows = [r for g in groups for r in pair_rows(g, data.isolated)]  # one tree call for every group
        log_speeds = [v + self._speed_prior(r)
                      for v, r in zip(self._models["speed"].predict(rows), rows, strict=True)]
        group_rows = [group_row(g, data.isolated) for g in groups]
        mem_ratio = (self._models["memory_mib"].predict(group_rows).tolist() if "memory_mib" in self._models
                     else None)
        utils = self._models["gpu_util"].predict(group_rows).tolist() if "gpu_util" in self._models else None
        out, k = [], 0
        for i, g in enumerate(groups):
            speeds = tuple(math.exp(v) for v in log_speeds[k:k + len(g.jobs)])
            k += len(g.jobs)
            base = summed_isolated_memory_mib(g, data.isolated)
            ratio = mem_ratio[i] if mem_ratio is not None else self._memory_log_ratio
            memory = base * math.exp(ratio) if base and ratio is not None else None
            util = utils[i] + self._util_prior(g, data) if utils is not None else None
            out.append(GroupPrediction(speeds, memory, util))
        return out


def _memory_log_ratio(sample: Any, data: ColocDataset) -> float | None:
    """log(group memory / summed isolated memory), or ``None`` where either is unmeasured."""
    base = summed_isolated_memory_mib(group_of(sample), data.isolated)
    return math.log(sample.memory_mib / base) if sample.memory_mib and base else None

"""Feature rows of the profile co-location model (:mod:`.profiled`): per-job and per-group numbers.

A job's resolved profile on one GPU (:class:`ResolvedProfile`: every value present, the predicted ones
named) and the catalog's description of its model give one :class:`JobVector`; a group's rows are sums,
maxima and shares over its members (:data:`JOB_FEATURES` per job, :data:`GROUP_FEATURES` per group).
:func:`feature_rows` builds them for many groups at once with numpy (groups padded to the largest size;
padded slots are left out of every sum), :func:`feature_rows_loop` one group at a time in plain Python
(fewer fixed costs for the engine's single-group calls); the tests check that both agree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import ClassVar

import numpy as np

from dltsched.engine.domain.catalog import gpu_spec, model_spec
from dltsched.predictors.colocation.samples import LUCID_GPU, LUCID_PROXY_GPU, IsolatedProfile, JobSpec

#: batches of at least this many groups build their features with numpy (2-3x faster on 10,000 groups; 13x
#: slower for one group at a time)
NUMPY_FROM = 32
#: GPUs whose isolated step times describe a job's compute/memory character, as ratios to the last
REFERENCE_GPUS = ("k80", "p100", "v100")

JOB_FEATURES = ("u", "u_partners", "u_total", "bw", "bw_partners", "log_step_s", "log_step_over_partners",
                "memory_share", "partners_memory_share", "log_batch", "amp", "same_model", "group_size",
                "log_gflops_sample", "log_act_mib_sample", "log_gpu_tflops", "log_gpu_bandwidth",
                "u_predicted", "log_step_k80_over_v100", "log_step_p100_over_v100", "log_params_m",
                "layers_10", "partners_log_gflops_step", "partners_log_params_m", "partners_k80_over_v100",
                "partners_p100_over_v100", "log_busy", "partners_max_log_busy", "base_log_speed")
GROUP_FEATURES = ("u_total", "u_max", "u_min", "u_union", "bw_total", "bw_max", "memory_share",
                  "max_memory_share", "group_size", "mean_log_step_s", "log_gpu_bandwidth",
                  "memory_predicted", "u_predicted", "min_log_step_s", "max_log_step_s", "mean_log_batch",
                  "amp_share", "mean_log_gflops_sample", "mean_log_act_mib_sample", "u_of_slowest",
                  "max_log_busy", "min_log_busy")


@dataclass(frozen=True, slots=True)
class ResolvedProfile:
    """A job's profile on one GPU with every value present; ``predicted`` names the values that were not
    measured."""

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
class JobVector:
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
    #: log of the analytic busy fraction, uncapped (:func:`log_busy`)
    busy: float = 0.0

    #: the per-job numbers, in the order of :attr:`numbers`
    NUMBERS: ClassVar[tuple[str, ...]] = ("u", "bw", "log_step", "memory_mib", "log_batch", "amp", "gflops",
                                          "act", "params", "layers", "k80_ratio", "p100_ratio", "gflops_step",
                                          "u_predicted", "memory_predicted", "busy")

    @property
    def u_predicted(self) -> float:
        """1.0 when the profile's GPU utilisation was predicted rather than measured, else 0.0."""
        return float("gpu_util" in self.profile.predicted)

    @property
    def memory_predicted(self) -> bool:
        """Whether the profile's memory was predicted rather than measured."""
        return "memory_mib" in self.profile.predicted

    @property
    def numbers(self) -> tuple[float, ...]:
        """The vector's numbers in the order group rows read them (flags for predicted values included)."""
        predicted = self.profile.predicted
        return (self.u, self.bw, self.log_step, self.memory_mib, self.log_batch, self.amp, self.gflops,
                self.act, self.params, self.layers, self.k80_ratio, self.p100_ratio, self.gflops_step,
                float("gpu_util" in predicted), float("memory_mib" in predicted), self.busy)


def real_gpu(gpu: str) -> str:
    """The catalog GPU whose spec sheet stands for ``gpu`` (Lucid's unrecorded GPU has a proxy)."""
    return LUCID_PROXY_GPU if gpu == LUCID_GPU else gpu


@cache
def gpu_consts(gpu: str) -> tuple[float, float, float]:
    """A GPU type's memory (MiB), log FP32 TFLOPS and log memory bandwidth (GB/s)."""
    spec = gpu_spec(real_gpu(gpu))
    return spec.memory_gib * 1024.0, math.log(spec.fp32_tflops), math.log(spec.memory_bandwidth_gbs)


@cache
def job_consts(job: JobSpec) -> tuple[float, float, float, float]:
    """log forward GFLOPs and activation MiB per sample, log parameters (M), layers / 10, from the catalog."""
    spec = model_spec(job.model)
    data = spec.dataset(job.dataset)
    half = 0.5 if job.amp else 1.0
    return (math.log(data.fwd_gflops), math.log(max(1e-6, data.activation_mib * half)),
            math.log(spec.params_m), spec.layers / 10.0)


@cache
def _log_work_s(gpu: str, job: JobSpec) -> float:
    """log of the larger of the job's step compute time at the GPU's peak (three times the forward FLOPs) and
    its activation traffic time at the GPU's peak bandwidth (four passes over the activations)."""
    spec = gpu_spec(real_gpu(gpu))
    data = model_spec(job.model).dataset(job.dataset)
    peak = (spec.fp16_tensor_tflops if job.amp else spec.fp32_tflops) * 1e12
    compute_s = 3.0 * data.fwd_gflops * 1e9 * job.batch_size / peak
    traffic_s = 4.0 * data.activation_mib * 1048576.0 * job.batch_size * (0.5 if job.amp else 1.0) / (
        spec.memory_bandwidth_gbs * 1e9)
    return math.log(max(compute_s, traffic_s, 1e-9))


def log_busy(gpu: str, job: JobSpec, step_time_s: float) -> float:
    """log of the analytic busy fraction, uncapped: the job's compute (or activation traffic) time at the
    GPU's peak over its isolated step time. From the catalog's graph and the GPU's spec sheet, so it exists
    for a job never seen; far below the other jobs' it marks an input- or host-bound job (a busy-looking SM
    utilisation that the work cannot explain), far above a job that runs faster than its graph says."""
    return _log_work_s(gpu, job) - math.log(step_time_s)


def cross_gpu(job: JobSpec, isolated: Mapping[tuple[str, JobSpec], IsolatedProfile]) -> tuple[float, float]:
    """log step time on K80 and P100 over V100 (NaN where unmeasured): how compute- or bandwidth-bound."""
    steps = [isolated.get((g, job)) for g in REFERENCE_GPUS]
    if any(p is None or not p.step_time_s for p in steps):
        return math.nan, math.nan
    last = math.log(steps[-1].step_time_s)  # type: ignore[union-attr,arg-type]
    return (math.log(steps[0].step_time_s) - last,  # type: ignore[union-attr,arg-type]
            math.log(steps[1].step_time_s) - last)  # type: ignore[union-attr,arg-type]


def feature_rows(groups: Sequence[Sequence[JobVector]], gpus: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per-job rows (:data:`JOB_FEATURES`, group by group, jobs in order) and per-group rows
    (:data:`GROUP_FEATURES`) of ``groups`` (each a group's members' vectors) on ``gpus`` (canonical ids)."""
    vectors = [[v.numbers for v in vs] for vs in groups]
    names: dict[str, int] = {}
    models = [[names.setdefault(v.model, len(names)) for v in vs] for vs in groups]
    gpu_rows = [gpu_consts(g) for g in gpus]
    size = max(len(v) for v in vectors)
    count = len(vectors)
    mask = np.zeros((count, size), dtype=bool)
    x = np.zeros((count, size, len(JobVector.NUMBERS)))
    model = np.full((count, size), -1, dtype=np.int64)
    for n, (vs, ms) in enumerate(zip(vectors, models, strict=True)):
        mask[n, :len(vs)] = True
        x[n, :len(vs)] = vs
        model[n, :len(ms)] = ms
    f = {name: x[:, :, k] for k, name in enumerate(JobVector.NUMBERS)}
    consts = np.asarray(gpu_rows)
    gpu_mem, log_tflops, log_bw = consts[:, 0], consts[:, 1], consts[:, 2]
    sizes = mask.sum(axis=1).astype(float)

    def total(values: np.ndarray) -> np.ndarray:
        return np.where(mask, values, 0.0).sum(axis=1)

    tot = {name: total(f[name])
           for name in ("u", "bw", "memory_mib", "log_step", "log_batch", "amp", "gflops",
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
                partners("gflops_step"), partners("params"), partners("k80_ratio"), partners("p100_ratio"),
                f["busy"][:, i], np.where(others, f["busy"], -np.inf).max(axis=1), base]
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
                           tot["log_batch"] / sizes, tot["amp"] / sizes, tot["gflops"] / sizes,
                           tot["act"] / sizes, f["u"][np.arange(count), slowest],
                           np.where(mask, f["busy"], -np.inf).max(axis=1),
                           np.where(mask, f["busy"], np.inf).min(axis=1)], axis=1)
    return job_rows, group_rows


def feature_rows_loop(groups: Sequence[Sequence[JobVector]],
                      gpus: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`feature_rows` in plain Python, one group at a time (fewer fixed costs than numpy for a few
    groups)."""
    job_rows, group_rows = feature_lists(groups, gpus)
    return np.asarray(job_rows, dtype=float), np.asarray(group_rows, dtype=float)


def feature_lists(groups: Sequence[Sequence[JobVector]], gpus: Sequence[str]) -> tuple[list[list[float]],
                                                                                        list[list[float]]]:
    """:func:`feature_rows_loop` as lists of rows (for callers that join them with rows of their own)."""
    job_rows: list[list[float]] = []
    group_rows: list[list[float]] = []
    for vs, gpu in zip(groups, gpus, strict=True):
        gpu_mem, log_tflops, log_bw = gpu_consts(gpu)
        n = len(vs)
        total_u = sum(v.u for v in vs)
        total_bw = sum(v.bw for v in vs)
        total_mem = sum(v.memory_mib for v in vs)
        total_log = sum(v.log_step for v in vs)
        base = math.log(min(1.0, 1.0 / total_u))
        for i, v in enumerate(vs):
            # partners' sums added up as feature_rows adds them (the same rows to the last bit; the trees were
            # fitted on those)
            if n == 2:  # the one partner's own numbers (a sum over one partner is its value)
                o = vs[1 - i]
                same = float(o.model == v.model)
                p_u, p_log, p_mem = o.u, o.log_step, o.memory_mib
                p_bw, p_gflops, p_params, p_k80, p_p100, p_busy = (o.bw, o.gflops_step, o.params, o.k80_ratio,
                                                                   o.p100_ratio, o.busy)
            else:
                partners = [*vs[:i], *vs[i + 1:]]
                same = float(any(o.model == v.model for o in partners))
                p_u, p_log, p_mem = (sum(o.u for o in partners), sum(o.log_step for o in partners),
                                     sum(o.memory_mib for o in partners))
                p_bw, p_gflops, p_params = (sum(o.bw for o in partners), sum(o.gflops_step for o in partners),
                                            sum(o.params for o in partners))
                p_k80, p_p100, p_busy = (sum(o.k80_ratio for o in partners),
                                         sum(o.p100_ratio for o in partners), max(o.busy for o in partners))
            job_rows.append([v.u, p_u, total_u, v.bw, p_bw, v.log_step, v.log_step - p_log / (n - 1),
                             v.memory_mib / gpu_mem, p_mem / gpu_mem, v.log_batch, v.amp, same, float(n),
                             v.gflops, v.act, log_tflops, log_bw, v.u_predicted, v.k80_ratio, v.p100_ratio,
                             v.params, v.layers, p_gflops, p_params, p_k80, p_p100, v.busy, p_busy, base])
        us = [v.u for v in vs]
        logs = [v.log_step for v in vs]
        union = 1.0 - math.prod(1.0 - min(0.99, u) for u in us)
        group_rows.append([total_u, max(us), min(us), union, total_bw, max(v.bw for v in vs)
                           if not math.isnan(total_bw) else math.nan, total_mem / gpu_mem,
                           max(v.memory_mib for v in vs) / total_mem, float(n), total_log / n, log_bw,
                           float(any(v.memory_predicted for v in vs)), float(any(v.u_predicted for v in vs)),
                           min(logs), max(logs), sum(v.log_batch for v in vs) / n, sum(v.amp for v in vs) / n,
                           sum(v.gflops for v in vs) / n, sum(v.act for v in vs) / n,
                           us[max(range(n), key=logs.__getitem__)], max(v.busy for v in vs),
                           min(v.busy for v in vs)])
    return job_rows, group_rows

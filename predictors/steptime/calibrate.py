"""Fitting the step-time predictor's factors on whole-iteration measurements, and evaluating it.

Stage 1 fits, on single-GPU rows, everything of :mod:`model` at once by robust non-linear least
squares on relative errors (soft-L1 loss, so large residuals weigh about linearly, close to
minimising the mean absolute percentage error):

- global inverse efficiencies of the work terms, the CPU time per kernel launch and a fixed step
  overhead, shared by every GPU (weak prior: typical efficiencies);
- per GPU with measurements, a multiplier per :data:`model.GPU_TERMS` (its compute groups' kernel
  efficiency, each pulled towards the GPU's common compute scale, which is pulled weakly towards 1, so
  that a group the GPU has no rows of moves with its other groups; and its DRAM efficiency, pulled
  towards 1). Afterwards each global value is rescaled
  to the GPU with the median multiplier, so that one odd GPU does not bias unmeasured GPUs;
- per measurement setup (``source``) and GPU, the ``per_step`` and ``per_sample`` speeds of the
  machines hosting that GPU type (pulled towards 1; their geometric mean per setup is 1, so a GPU
  without rows gets the average machine);
- per workload and setup, the input-pipeline terms ``per_step_s + per_sample_s * batch`` (pulled
  towards 0, so that GPU work explains what it can).

Kernel-time rows (Orion's per-kernel sums on a V100, :attr:`Measurement.kernel_time`) are predicted
by the GPU time alone: they pin the GPU-side terms apart from the host and dispatch terms.

Stage 2 fits the communication coefficients on multi-GPU rows (Gavel scale 2-8), all else fixed.

Leave-one-GPU-out (:func:`leave_one_gpu_out`) drops every row of the held-out GPU, from every
source (step times and kernel sums alike), before fitting: the GPU gets no multipliers, host
speeds or communication terms, and rests on its spec sheet and, where DeepBench measured it, its
GEMM / convolution / LSTM kernel efficiencies relative to the mean over DeepBench's GPUs. Those are
operator microbenchmarks, not step times, so a held-out GPU keeps them.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.optimize import least_squares, nnls

from dltsched.engine.domain.model import Job
from dltsched.predictors.steptime.aggregates import COMPUTE_GROUPS, aggregates
from dltsched.predictors.steptime.measurements import Measurement
from dltsched.predictors.steptime.model import (
    COMM_FEATURES,
    DEFAULT_COMM_COEFFICIENTS,
    FORMAT_VERSION,
    GPU_TERMS,
    HOST_SPEEDS,
    OVERLAP_POWER,
    RECURRENT_POWER,
    WORK_TERMS,
    DeletePopStepTime,
    comm_features,
    gpu_spec_checked,
    host_key,
    learned_root,
    work_terms,
)
from dltsched.predictors.zoo.graphs import resolve

#: prior inverse efficiencies of the work terms (typical achieved fractions of the spec sheet)
PRIOR_INVERSE_EFFICIENCY = {"conv": 1.4, "gemm": 1.4, "rnn": 2.0, "memory": 1.25, "bound": 1.25}
PRIOR_DISPATCH_US = 10.0
_PRIOR_WEIGHT = 0.01  # on log(inverse efficiency / prior): a tie-breaker only
_GPU_WEIGHT = 0.1  # on log(per-GPU multiplier / the GPU's common compute scale); memory: on log(multiplier)
_SUPPORT_SHARE = 0.1  # share of a workload's GPU work in a group that makes it inform the group
_COMMON_WEIGHT = 0.01  # on a GPU's common compute scale (geometric mean of its compute-group multipliers)
_SPEED_WEIGHT = 0.3  # on log(host speed): machines differ, but host terms should not mimic GPU work
_HOST_WEIGHT = 0.03  # on host terms (units of 10 ms, 0.1 ms per sample): GPU work explains what it can first
_IDENTIFY_WEIGHT = 3.0  # on the mean log host speed of each setup
_LOSS_SCALE = 0.03  # relative errors below ~3% count quadratically, larger ones about linearly
_STEP_UNIT_S, _SAMPLE_UNIT_S = 1e-2, 1e-4  # host parameters are fitted in these units (values O(1))
_MIN_FACTOR = 1e-3
_RIDGE = 1e-3  # stage 2: pulls communication coefficients towards their prior where data say little
_PER_GPU_RIDGE = 0.05
_IRLS_ITERATIONS = 8
_IRLS_FLOOR = 0.02
_N_COMPUTE = len(COMPUTE_GROUPS)
#: columns of the design's work matrix
_COLUMNS = (*WORK_TERMS, "recurrent")


def job_of(m: Measurement) -> Job:
    """The job of a measurement; a ``seq_len`` without a dataset picks the model's ``seq<N>`` dataset."""
    dataset = m.dataset
    if dataset is None and m.seq_len is not None:
        from dltsched.engine.domain.catalog import model_spec

        if f"seq{m.seq_len}" in model_spec(m.model).datasets:
            dataset = f"seq{m.seq_len}"
    return Job(id=f"{m.model}-{m.gpu}-{m.batch_size}", model=m.model, batch_size=m.batch_size,
               total_iterations=1.0, num_gpus=m.num_gpus, amp=m.amp, optimizer=m.optimizer, dataset=dataset)


def relative_kernel_efficiency(raw: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per GPU and kernel kind: efficiency over the mean of that kind across the GPUs measured."""
    kinds = {k for per_kind in raw.values() for k in per_kind}
    mean = {k: statistics.fmean(e[k] for e in raw.values() if k in e) for k in kinds}
    return {g: {k: round(v / mean[k], 4) for k, v in per_kind.items()} for g, per_kind in raw.items()}


@dataclass(frozen=True, slots=True)
class _Design:
    """Stage-1 inputs: spec-time work per row, and the indices of its GPU, setup and workload."""

    work: np.ndarray  # rows x _COLUMNS, seconds at 100% efficiency
    kernels: np.ndarray
    kernel_time: np.ndarray  # rows whose target is the GPU time alone
    batch: np.ndarray
    y: np.ndarray
    gpus: tuple[str, ...]
    gpu: np.ndarray
    cells: tuple[tuple[str, str], ...]  # (source, gpu) with whole-step rows
    cell: np.ndarray  # index into cells (0 for kernel-time rows, unused)
    workloads: tuple[tuple[str, str, str], ...]  # (source, model, dataset) with whole-step rows
    workload: np.ndarray
    support: dict[tuple[str, str], tuple[str, ...]]  # (gpu, compute group) -> workloads "model/dataset" in it


def _design(rows: Sequence[Measurement], efficiency: dict[str, dict[str, float]]) -> _Design:
    work, kernels, gpu_ids, cells, loads = [], [], [], [], []
    for m in rows:
        model, dataset = resolve(m.model, m.dataset)
        gpu = gpu_spec_checked(m.gpu)
        w = work_terms(job_of(m), model, dataset, gpu, 0, efficiency.get(gpu.id))
        work.append([w[t] for t in _COLUMNS])
        kernels.append(w["kernels"])
        gpu_ids.append(gpu.id)
        cells.append(None if m.kernel_time else (m.source, gpu.id))
        loads.append(None if m.kernel_time else (m.source, model, dataset))
    gpus = tuple(sorted(set(gpu_ids)))
    cell_keys = tuple(sorted({c for c in cells if c is not None}))
    load_keys = tuple(sorted({w for w in loads if w is not None}))
    return _Design(np.array(work), np.array(kernels), np.array([m.kernel_time for m in rows]),
                   np.array([m.batch_size for m in rows], float), np.array([m.step_time_s for m in rows]),
                   gpus, np.array([gpus.index(g) for g in gpu_ids]), cell_keys,
                   np.array([cell_keys.index(c) if c else 0 for c in cells]), load_keys,
                   np.array([load_keys.index(w) if w else 0 for w in loads]),
                   _group_support(rows, np.array(work), gpus, gpu_ids))


def _group_support(rows: Sequence[Measurement], work: np.ndarray, gpus: tuple[str, ...],
                   gpu_ids: Sequence[str]) -> dict[tuple[str, str], tuple[str, ...]]:
    """Per GPU and compute group, the workloads (``model/dataset``) that spend at least
    :data:`_SUPPORT_SHARE` of their GPU work in that group on that GPU (at the prior efficiencies)."""
    prior = np.array([PRIOR_INVERSE_EFFICIENCY[t] for t in WORK_TERMS])
    spec = work[:, :len(WORK_TERMS)] * prior
    share = spec[:, :_N_COMPUTE] / np.maximum(spec.sum(axis=1, keepdims=True), 1e-30)
    seen: dict[tuple[str, str], set[str]] = {}
    for m, g, row in zip(rows, gpu_ids, share, strict=True):
        model, dataset = resolve(m.model, m.dataset)
        for j, group in enumerate(COMPUTE_GROUPS):
            if row[j] >= _SUPPORT_SHARE:
                seen.setdefault((g, group), set()).add(f"{model}/{dataset}")
    return {k: tuple(sorted(v)) for k, v in sorted(seen.items())}


def _single_workload_groups(d: _Design, efficiency: dict[str, dict[str, float]]) -> dict[str, dict[str, Any]]:
    """Per GPU, the compute groups only one workload informs (:func:`_group_support`), with that workload
    and the GPU's common scale over its groups that several workloads inform (geometric mean; groups
    without such a scale are left out). The fitted multiplier of such a group holds for that workload;
    every other workload gets the common scale (``model.DeletePopStepTime.gpu_terms``): one workload
    cannot tell a group's efficiency on a GPU from its own quirks (K80's recurrent group, from lstm_lm
    alone, was 8x its other groups and put DeepSpeech2 at 66 s a step)."""
    out: dict[str, dict[str, Any]] = {}
    for gpu in d.gpus:
        mult = efficiency.get(gpu, {})
        shared = [mult[g] for g in COMPUTE_GROUPS if len(d.support.get((gpu, g), ())) >= 2 and g in mult]
        singles = {g: d.support[(gpu, g)][0] for g in COMPUTE_GROUPS if len(d.support.get((gpu, g), ())) == 1}
        if shared and singles:
            common = float(np.exp(np.mean(np.log(shared))))
            out[gpu] = {g: {"workload": w, "shared": round(common, 5)} for g, w in singles.items()}
    return out


def _single_workload_efficiency(d: _Design, theta: dict[str, float]) -> dict[str, dict[str, Any]]:
    """The compute groups only one workload informs on every GPU together (:func:`_group_support`), with
    that workload and the GEMM group's inverse efficiency (where GEMM is not informed by several workloads
    either: the geometric mean of the groups that are).
    The fitted efficiency of such a group holds for that workload; every other workload gets the shared one
    (``model.DeletePopStepTime.gpu_terms``): with DeepSpeech2 held out, lstm_lm alone set the recurrent
    efficiency at 9x the full fit's (its own slowness, which its host terms absorb when another recurrent
    model is fitted too), and DeepSpeech2 was predicted 8x too slow."""
    workloads: dict[str, set[str]] = {g: set() for g in COMPUTE_GROUPS}
    for (_gpu, group), loads in d.support.items():
        workloads[group].update(loads)
    several = [g for g in COMPUTE_GROUPS if len(workloads[g]) >= 2]
    if not several:
        return {}
    shared = (theta["gemm"] if "gemm" in several
              else float(np.exp(np.mean(np.log([theta[g] for g in several])))))
    return {g: {"workload": next(iter(loads)), "shared": round(float(shared), 5)}
            for g, loads in workloads.items() if len(loads) == 1}


class _Params:
    """Slices of the stage-1 parameter vector."""

    def __init__(self, d: _Design) -> None:
        sizes = {"theta": len(WORK_TERMS), "dispatch": 1, "overhead": 1, "gpu": len(GPU_TERMS) * len(d.gpus),
                 "per_step": len(d.cells), "per_sample": len(d.cells), "host": 2 * len(d.workloads)}
        self.slices, start = {}, 0
        for name, size in sizes.items():
            self.slices[name] = slice(start, start + size)
            start += size
        self.size = start
        self.shape_gpu = (len(d.gpus), len(GPU_TERMS))

    def get(self, x: np.ndarray, name: str) -> np.ndarray:
        return x[self.slices[name]]


def _predict(d: _Design, p: _Params, x: np.ndarray) -> np.ndarray:
    theta, mult = p.get(x, "theta"), p.get(x, "gpu").reshape(p.shape_gpu)[d.gpu]
    dram = mult[:, -1]
    compute = d.work[:, :_N_COMPUTE] * theta[:_N_COMPUTE] * mult[:, :_N_COMPUTE]
    recurrent = d.work[:, -1] * theta[_N_COMPUTE] * dram
    rnn = (compute[:, -1] ** RECURRENT_POWER + recurrent**RECURRENT_POWER) ** (1.0 / RECURRENT_POWER)
    memory = (d.work[:, _N_COMPUTE] * theta[_N_COMPUTE]
              + d.work[:, _N_COMPUTE + 1] * theta[_N_COMPUTE + 1]) * dram
    gpu_s = compute[:, :-1].sum(axis=1) + rnn + memory
    per_step, per_sample = p.get(x, "per_step")[d.cell], p.get(x, "per_sample")[d.cell]
    dispatch_s = d.kernels * p.get(x, "dispatch")[0] * 1e-6 * per_step
    busy = (gpu_s**OVERLAP_POWER + dispatch_s**OVERLAP_POWER) ** (1.0 / OVERLAP_POWER)
    host = p.get(x, "host").reshape(-1, 2)
    pipeline = (per_step * host[d.workload, 0] * _STEP_UNIT_S
                + per_sample * host[d.workload, 1] * _SAMPLE_UNIT_S * d.batch)
    step = busy + p.get(x, "overhead")[0] * 1e-3 + pipeline
    return np.where(d.kernel_time, gpu_s, step)


def _residuals(x: np.ndarray, d: _Design, p: _Params, prior: np.ndarray) -> np.ndarray:
    sources = sorted({s for s, _g in d.cells})
    identify = [np.log(p.get(x, kind))[[i for i, (s, _g) in enumerate(d.cells) if s == src]].mean()
                for kind in HOST_SPEEDS for src in sources]
    return np.concatenate([(_predict(d, p, x) - d.y) / d.y,
                           _PRIOR_WEIGHT * np.log(p.get(x, "theta") / prior),
                           *_gpu_priors(np.log(p.get(x, "gpu")).reshape(p.shape_gpu)),
                           _SPEED_WEIGHT * np.log(p.get(x, "per_step")),
                           _SPEED_WEIGHT * np.log(p.get(x, "per_sample")),
                           _HOST_WEIGHT * p.get(x, "host"),
                           _IDENTIFY_WEIGHT * np.array(identify)])


def _gpu_priors(log_mult: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Residuals of the per-GPU multipliers: each compute group's pulled towards the GPU's common compute
    scale (so that a group with no rows on a GPU moves with the GPU's other groups, not to the average GPU),
    the common scale weakly towards 1, the DRAM multiplier towards 1."""
    common = log_mult[:, :_N_COMPUTE].mean(axis=1, keepdims=True)
    return (np.concatenate([(_GPU_WEIGHT * (log_mult[:, :_N_COMPUTE] - common)).ravel(),
                            _GPU_WEIGHT * log_mult[:, _N_COMPUTE:].ravel()]),
            _COMMON_WEIGHT * common.ravel())


def _fit_stage1(d: _Design) -> tuple[_Params, np.ndarray]:
    p = _Params(d)
    prior = np.array([PRIOR_INVERSE_EFFICIENCY[t] for t in WORK_TERMS])
    x0, lower = np.empty(p.size), np.full(p.size, _MIN_FACTOR)
    for name, value in (("theta", prior), ("dispatch", PRIOR_DISPATCH_US), ("overhead", 0.5), ("gpu", 1.0),
                        ("per_step", 1.0), ("per_sample", 1.0), ("host", 0.3)):
        x0[p.slices[name]] = value
    for name in ("overhead", "host"):
        lower[p.slices[name]] = 0.0
    sol = least_squares(_residuals, x0, bounds=(lower, np.inf), loss="soft_l1", f_scale=_LOSS_SCALE,
                        args=(d, p, prior), max_nfev=2000)
    return p, sol.x


def fit(measurements: Sequence[Measurement],
        kernel_efficiency: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    """Fitted factors (``factors.json``) from measurements and DeepBench efficiencies.

    Single-GPU rows fit the compute, dispatch and host terms; multi-GPU rows, if any, the communication terms.
    """
    efficiency = relative_kernel_efficiency(kernel_efficiency or {})
    rows = [m for m in measurements if m.num_gpus == 1]
    if all(m.kernel_time for m in rows):
        raise ValueError("no single-GPU whole-step measurements to calibrate on")
    d = _design(rows, efficiency)
    p, x = _fit_stage1(d)
    mult = p.get(x, "gpu").reshape(p.shape_gpu)
    typical = dict(zip(GPU_TERMS, np.median(mult, axis=0), strict=True))  # GPUs without rows: the median GPU
    theta = {t: v * typical[t if t in GPU_TERMS else "memory"]
             for t, v in zip(WORK_TERMS, p.get(x, "theta"), strict=True)}
    host_speed: dict[str, dict[str, dict[str, float]]] = {}
    for i, (source, gpu) in enumerate(d.cells):
        host_speed.setdefault(source, {})[gpu] = {k: round(float(p.get(x, k)[i]), 5) for k in HOST_SPEEDS}
    host = p.get(x, "host").reshape(-1, 2)
    factors: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "inverse_efficiency": {t: round(float(v), 5) for t, v in theta.items()},
        "dispatch_us": round(float(p.get(x, "dispatch")[0]), 4),
        "step_overhead_s": round(float(p.get(x, "overhead")[0]) * 1e-3, 7),
        "kernel_efficiency": efficiency,
        "gpu_efficiency": {g: {t: round(float(mult[i, j] / typical[t]), 5) for j, t in enumerate(GPU_TERMS)}
                           for i, g in enumerate(d.gpus)},
        "single_workload_groups": {},
        "sources": sorted(host_speed),
        "host_speed": host_speed,
        "host_overhead": {host_key(*w): {"per_step_s": round(float(h[0]) * _STEP_UNIT_S, 7),
                                         "per_sample_s": round(float(h[1]) * _SAMPLE_UNIT_S, 9)}
                          for w, h in zip(d.workloads, host, strict=True)},
    }
    factors["single_workload_groups"] = _single_workload_groups(d, factors["gpu_efficiency"])
    factors["single_workload_efficiency"] = _single_workload_efficiency(d, factors["inverse_efficiency"])
    multi = [m for m in measurements if m.num_gpus > 1]
    if multi:
        factors.update(_fit_comm(factors, multi))
    factors["fitted_on"] = sorted({f"{m.source}:{gpu_spec_checked(m.gpu).id}" for m in [*rows, *multi]})
    factors["num_measurements"] = len(rows) + len(multi)
    return factors


def _irls(x: np.ndarray, target: np.ndarray, scale: np.ndarray, prior: np.ndarray,
          ridge: float | np.ndarray) -> np.ndarray:
    """Non-negative ``c`` minimising ``mean |x c - target| / scale`` (+ ridge towards ``prior``)."""
    weights = np.ones(len(target))
    ridge = np.broadcast_to(ridge, prior.shape)
    reg_a, reg_b = np.diag(ridge), ridge * prior
    coef = prior
    for _ in range(_IRLS_ITERATIONS):
        w = (weights / scale)[:, None]
        coef, _res = nnls(np.vstack([x * w, reg_a]), np.concatenate([target * w[:, 0], reg_b]))
        rel_error = np.abs(x @ coef - target) / scale
        weights = 1.0 / np.sqrt(np.maximum(rel_error, _IRLS_FLOOR))
    return coef


def _fit_comm(factors: dict[str, Any], rows: Sequence[Measurement]) -> dict[str, Any]:
    """Stage 2: communication coefficients from multi-GPU rows, compute factors fixed (global, then per
    GPU)."""
    predictor = DeletePopStepTime(factors=factors)
    single = np.array([replace(predictor, host_source=m.source).step_time_s(job_of(m), m.gpu, 1)
                       for m in rows])
    x = np.stack([_comm_row(m, predictor.hop_latency_s) for m in rows])
    y = np.array([m.step_time_s for m in rows])
    prior = np.array([DEFAULT_COMM_COEFFICIENTS[k] for k in COMM_FEATURES])
    global_coef = _irls(x, y - single, y, prior, _RIDGE)
    gpus = np.array([gpu_spec_checked(m.gpu).id for m in rows])
    per_gpu = {g: _irls(x[gpus == g], (y - single)[gpus == g], y[gpus == g], global_coef, _PER_GPU_RIDGE)
               for g in sorted(set(gpus))}
    return {"comm_coefficients": _rounded_comm(global_coef),
            "per_gpu_comm": {g: _rounded_comm(c) for g, c in per_gpu.items()}}


def _comm_row(m: Measurement, hop_latency_s: float) -> np.ndarray:
    gpu = gpu_spec_checked(m.gpu)
    grad_bytes = aggregates(*resolve(m.model, m.dataset)).param_bytes[0]
    feats = comm_features(grad_bytes, m.num_gpus, gpu.intra_node_bandwidth_gbs, hop_latency_s)
    return np.array([feats[k] for k in COMM_FEATURES])


def _rounded_comm(coef: np.ndarray) -> dict[str, float]:
    return {k: round(float(c), 5) for k, c in zip(COMM_FEATURES, coef, strict=True)}


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Accuracy of step-time predictions against measurements."""

    n: int
    mape: float
    p90_ape: float
    rows: tuple[dict[str, Any], ...]

    def summary(self) -> dict[str, Any]:
        """The headline figures: row count, mean and 90th-percentile absolute percentage error."""
        return {"n": self.n, "mape": self.mape, "p90_ape": self.p90_ape}


def evaluate(predictor: DeletePopStepTime, measurements: Sequence[Measurement]) -> Evaluation:
    """MAPE and 90th-percentile absolute percentage error (in %) with per-row predictions.

    Each row uses the input-pipeline terms of its own measurement setup (``Measurement.source``) where fitted.
    """
    rows, errors = [], []
    for m in measurements:
        step = replace(predictor, host_source=m.source or None).breakdown(job_of(m),
                                                                          m.gpu, m.num_gpus, scope=m.scope)
        pred = step.compute_s + step.memory_s if m.kernel_time else step.step_time_s
        ape = abs(pred - m.step_time_s) / m.step_time_s * 100.0
        errors.append(ape)
        rows.append({"model": m.model, "dataset": m.dataset, "gpu": m.gpu, "batch_size": m.batch_size,
                     "num_gpus": m.num_gpus, "amp": m.amp, "source": m.source, "measured_s": m.step_time_s,
                     "predicted_s": pred, "ape": ape})
    if not errors:
        raise ValueError("no measurements to evaluate")
    return Evaluation(len(errors), float(np.mean(errors)), float(np.percentile(errors, 90)), tuple(rows))


def oracle_scale(measured_s: Sequence[float], predicted_s: Sequence[float]) -> float:
    """The one factor on ``predicted_s`` that minimises the MAPE against ``measured_s``.

    ``sum |c p - y| / y`` is minimised by the median of ``y / p`` weighted by ``p / y``.
    """
    y, p = np.asarray(measured_s, float), np.asarray(predicted_s, float)
    ratio, weight = y / p, p / y
    order = np.argsort(ratio)
    cumulative = np.cumsum(weight[order])
    return float(ratio[order][np.searchsorted(cumulative, cumulative[-1] / 2.0)])


def leave_one_gpu_out(train: Sequence[Measurement], test: Sequence[Measurement],
                      kernel_efficiency: dict[str, dict[str, float]] | None = None,
                      base: DeletePopStepTime | None = None, new_jobs: bool = False) -> dict[str, Any]:
    """For each GPU of ``test``: fit on ``train`` without any row of that GPU, evaluate on ``test`` rows of
    it.

    Every row of the held-out GPU leaves ``train`` (step times of every source and kernel sums);
    its DeepBench kernel efficiencies (operator microbenchmarks) stay. Per GPU, ``oracle_scale``
    is the one factor that would fit the held-out GPU best and ``oracle_mape`` the MAPE with it:
    what is left once the GPU's overall speed is known, i.e. the error of the model's shape.

    ``transfer``: one-profile transfer (:mod:`transfer`) of each held-out row from the same workload's
    measured step on each other GPU, every rule on the same pairs, with the fold's fit (the job's
    rows on the other GPUs are in it: the profile is partly known to the fit). ``new_jobs``: also
    ``transfer_new_jobs``, the same pairs with the job's model left out of the fit too (one fit per
    held-out GPU and model): the profile is then all the predictor knows of the job.
    """
    from dltsched.predictors.steptime import transfer

    base = base or DeletePopStepTime()
    per_gpu: dict[str, Any] = {}
    all_rows: list[dict[str, Any]] = []
    oracle_apes: list[float] = []
    records: list[dict[str, Any]] = []
    new_records: list[dict[str, Any]] = []
    def root(m: Measurement) -> str:  # GPUs sharing a fit (V100-32GB, PCIe variants) are held out together
        return learned_root(gpu_spec_checked(m.gpu).id)

    for gpu in sorted({root(m) for m in test}):
        fold = [m for m in train if root(m) != gpu]
        factors = fit(fold, kernel_efficiency)
        held = [m for m in test if root(m) == gpu]
        ev = evaluate(replace(base, factors=factors), held)
        others = [m for m in test if root(m) != gpu]
        records.extend(transfer_records(replace(base, factors=factors), held, others, gpu))
        if new_jobs:
            for model in sorted({canonical_model(m.model) for m in held}):
                mine = [m for m in held if canonical_model(m.model) == model]
                if any(transfer_workload(o) == transfer_workload(m) for m in mine for o in others):
                    new = fit([m for m in fold if canonical_model(m.model) != model], kernel_efficiency)
                    new_records.extend(transfer_records(replace(base, factors=new), mine, others, gpu))
        y, pred = [r["measured_s"] for r in ev.rows], [r["predicted_s"] for r in ev.rows]
        scale = oracle_scale(y, pred)
        apes = [abs(scale * p - m) / m * 100.0 for m, p in zip(y, pred, strict=True)]
        per_gpu[gpu] = {**ev.summary(), "oracle_scale": scale, "oracle_mape": float(np.mean(apes))}
        all_rows.extend(ev.rows)
        oracle_apes.extend(apes)
    apes = [r["ape"] for r in all_rows]
    summary = transfer.summarize(records)  # transfer_mape: transfer_s's default for a fitted workload (blend)
    out = {"n": len(apes), "mape": float(np.mean(apes)), "p90_ape": float(np.percentile(apes, 90)),
           "oracle_mape": float(np.mean(oracle_apes)),
           "transfer_n": summary["n"], "transfer_mape": summary["blend"], "transfer": summary,
           "per_gpu": per_gpu, "rows": all_rows}
    if new_jobs:
        out["transfer_new_jobs"] = transfer.summarize(new_records)
    return out


def canonical_model(name: str) -> str:
    """Zoo id of a measured model name (``resolve``; a name the zoo does not know stays as given)."""
    from dltsched.engine.domain.catalog import model_catalog

    try:
        return model_catalog().get(name).id
    except ValueError:
        return name


def transfer_workload(m: Measurement) -> tuple[Any, ...]:
    """What a measurement on another GPU must share with a row to transfer to it (the same job and batch)."""
    return (m.source, m.model, m.dataset, m.batch_size, m.num_gpus, m.amp, m.scope)


def profile_key(m: Measurement) -> tuple[Any, ...]:
    """The same job on the same GPU at any batch size: the measurements one profile fits over."""
    return (m.source, m.model, m.dataset, m.num_gpus, m.amp, m.scope, m.gpu)


def roofline_s(m: Measurement) -> float:
    """The plain roofline step of a measured row: the graph's kernels (forward, backward) at its GPU's
    spec-sheet peak and bandwidth, nothing fitted (:func:`opgraph.roofline_step_s`)."""
    from dltsched.predictors.steptime.opgraph import roofline_step_s

    job = job_of(m)
    return roofline_step_s(job.model, job.dataset, m.batch_size, gpu_spec_checked(m.gpu), bool(m.amp))


def transfer_records(predictor: DeletePopStepTime, held: Sequence[Measurement], others: Sequence[Measurement],
                     held_out: str) -> list[dict[str, Any]]:
    """Every rule of :func:`transfer.rule_predictions` for each held-out row from the same workload's
    measured step on each other GPU (``profile``: from all its batch sizes measured on that GPU)."""
    from dltsched.predictors.steptime.transfer import rule_predictions

    by_workload: dict[tuple[Any, ...], list[Measurement]] = {}
    by_profile: dict[tuple[Any, ...], list[Measurement]] = {}
    for m in others:
        by_workload.setdefault(transfer_workload(m), []).append(m)
        by_profile.setdefault(profile_key(m), []).append(m)
    memo: dict[Measurement, tuple[float, float]] = {}

    def parts(p: DeletePopStepTime, m: Measurement) -> tuple[float, float]:
        if m not in memo:
            b = p.breakdown(job_of(m), m.gpu, m.num_gpus, scope=m.scope)
            memo[m] = (b.overhead_s, b.step_time_s - b.overhead_s)
        return memo[m]

    out = []
    for m in held:
        p = replace(predictor, host_source=m.source or None)
        for src in by_workload.get(transfer_workload(m), ()):
            profile = [(*parts(p, o), o.step_time_s) for o in by_profile[profile_key(src)]]
            rules = rule_predictions(src.step_time_s, parts(p, src), parts(p, m),
                                     (roofline_s(src), roofline_s(m)),
                                     (gpu_spec_checked(src.gpu).fp32_tflops,
                                      gpu_spec_checked(m.gpu).fp32_tflops),
                                     profile)
            out.append({"source": m.source, "held_out": held_out, "from_gpu": learned_root(
                gpu_spec_checked(src.gpu).id), "model": m.model, "batch_size": m.batch_size,
                "measured_s": m.step_time_s, "profile_s": src.step_time_s, **rules})
    return out

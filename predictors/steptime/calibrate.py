"""Fitting the step-time predictor's achievable-efficiency factors, and evaluating it.

The step time is linear in the spec-normalised work terms of :func:`model.features` plus a
per-model host term (input pipeline, environment simulation: ``per_step_s + per_sample_s *
batch``, a property of the model, not of the GPU). Each stage minimises the mean absolute relative
error (iteratively reweighted non-negative least squares) over whole-iteration measurements:

1. on single-GPU rows (Gavel scale 1, Zeus): global inverse efficiencies (spec-sheet scaled,
   shared by all GPUs), with the host terms strongly regularised so that the GPU-side terms
   explain what they can; then the host terms alone, on what is left;
2. per GPU with measurements: its own inverse efficiencies and a host-speed factor, host terms
   fixed, pulled towards the global values where its rows say little;
3. on multi-GPU rows (Gavel scale 2-8), everything else fixed: the communication coefficients,
   globally and per GPU.

Any other GPU, and a GPU held out, uses the global factors (and host speed 1). DeepBench GEMM /
convolution / LSTM efficiencies scale the compute peak per GPU and class (relative to their mean
over the GPUs DeepBench measured; other GPUs use 1). They are kernel microbenchmarks, not step
times, so a GPU held out keeps them.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.optimize import nnls

from dltsched.engine.domain import Job
from dltsched.predictors.steptime.aggregates import aggregates
from dltsched.predictors.steptime.measurements import Measurement
from dltsched.predictors.steptime.model import (
    COMM_FEATURES,
    DEFAULT_COMM_COEFFICIENTS,
    FEATURES,
    DeletePopStepTime,
    _gpu,
    comm_features,
    features,
    host_key,
    optimizer_passes,
)
from dltsched.predictors.zoo.graphs import resolve

FORMAT_VERSION = 2
_RIDGE = 1e-3  # pulls coefficients towards their prior where data say little
_PER_GPU_RIDGE = 0.05  # stage 2: pull towards the global coefficients
_HOST_RIDGE = 0.2  # stage 1: host terms explain only what the GPU-side terms cannot
_IRLS_ITERATIONS = 8
_IRLS_FLOOR = 0.02  # relative errors below 2% weigh as 2% (keeps the L1 reweighting stable)
_HOST_STEP_UNIT_S = 1e-2  # host columns are scaled so that their coefficients are O(1)
_HOST_SAMPLE_UNIT_S = 1e-4


def job_of(m: Measurement) -> Job:
    return Job(id=f"{m.model}-{m.gpu}-{m.batch_size}", model=m.model, batch_size=m.batch_size,
               total_iterations=1.0, num_gpus=m.num_gpus, amp=m.amp, optimizer=m.optimizer, dataset=m.dataset)


def _key(m: Measurement) -> str:
    return host_key(*resolve(m.model, m.dataset))


def _row(m: Measurement, efficiency: dict[str, dict[str, float]]) -> np.ndarray:
    model, dataset = resolve(m.model, m.dataset)
    gpu = _gpu(m.gpu)
    f = features(aggregates(model, dataset), gpu, m.batch_size, m.amp, 0, optimizer_passes(job_of(m)),
                 efficiency.get(gpu.id))
    return np.array([f[k] for k in FEATURES])


def _host_rows(rows: Sequence[Measurement], keys: Sequence[str]) -> np.ndarray:
    """Design columns of the per-model host terms: (per step, per sample) for each key."""
    out = np.zeros((len(rows), 2 * len(keys)))
    index = {k: i for i, k in enumerate(keys)}
    for r, m in enumerate(rows):
        i = index[_key(m)]
        out[r, 2 * i], out[r, 2 * i + 1] = _HOST_STEP_UNIT_S, _HOST_SAMPLE_UNIT_S * m.batch_size
    return out


def relative_kernel_efficiency(raw: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per GPU and kernel kind: efficiency over the mean of that kind across the GPUs measured."""
    kinds = {k for per_kind in raw.values() for k in per_kind}
    mean = {k: statistics.fmean(e[k] for e in raw.values() if k in e) for k in kinds}
    return {g: {k: round(v / mean[k], 4) for k, v in per_kind.items()} for g, per_kind in raw.items()}


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


def _fit_gpu(x: np.ndarray, host_s: np.ndarray, y: np.ndarray, global_coef: np.ndarray) -> dict[str, float]:
    """Stage 2 for one GPU: its inverse efficiencies and host-speed factor (prior: global, 1)."""
    coef = _irls(np.hstack([x, host_s[:, None]]), y, y, np.append(global_coef, 1.0), _PER_GPU_RIDGE)
    return {**_rounded(coef[:-1]), "host": round(float(coef[-1]), 5)}


def _rounded(coef: np.ndarray) -> dict[str, float]:
    return {k: round(float(c), 5) for k, c in zip(FEATURES, coef, strict=True)}


def fit(measurements: Sequence[Measurement],
        kernel_efficiency: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    """Fitted factors (``factors.json``) from measurements and DeepBench efficiencies.

    Single-GPU rows fit the compute and host terms; multi-GPU rows, if any, the communication terms.
    """
    efficiency = relative_kernel_efficiency(kernel_efficiency or {})
    rows = [m for m in measurements if m.num_gpus == 1]
    if not rows:
        raise ValueError("no single-GPU measurements to calibrate on")
    keys = sorted({_key(m) for m in rows})
    x = np.stack([_row(m, efficiency) for m in rows])
    host_x = _host_rows(rows, keys)
    y = np.array([m.step_time_s for m in rows])
    global_coef, host_coef = _fit_global(x, host_x, y)
    host_s = host_x @ host_coef
    gpus = np.array([_gpu(m.gpu).id for m in rows])
    per_gpu = {g: _fit_gpu(x[gpus == g], host_s[gpus == g], y[gpus == g], global_coef) for g in sorted(set(gpus))}
    host = {k: {"per_step_s": round(float(host_coef[2 * i]) * _HOST_STEP_UNIT_S, 7),
                "per_sample_s": round(float(host_coef[2 * i + 1]) * _HOST_SAMPLE_UNIT_S, 9)}
            for i, k in enumerate(keys)}
    factors = {"format_version": FORMAT_VERSION, "coefficients": _rounded(global_coef),
               "kernel_efficiency": efficiency, "per_gpu": per_gpu, "host_overhead": host}
    multi = [m for m in measurements if m.num_gpus > 1]
    if multi:
        factors.update(_fit_comm(factors, multi))
    factors["fitted_on"] = sorted({f"{m.source}:{_gpu(m.gpu).id}" for m in [*rows, *multi]})
    factors["num_measurements"] = len(rows) + len(multi)
    return factors


def _fit_global(x: np.ndarray, host_x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stage 1: global inverse efficiencies (host terms regularised hard), then host terms on the rest."""
    n, n_host = x.shape[1], host_x.shape[1]
    prior = np.concatenate([np.ones(n), np.zeros(n_host)])
    ridge = np.concatenate([np.full(n, _RIDGE), np.full(n_host, _HOST_RIDGE)])
    global_coef = _irls(np.hstack([x, host_x]), y, y, prior, ridge)[:n]
    return global_coef, _irls(host_x, y - x @ global_coef, y, np.zeros(n_host), _RIDGE)


def _fit_comm(factors: dict[str, Any], rows: Sequence[Measurement]) -> dict[str, Any]:
    """Stage 3: communication coefficients from multi-GPU rows, compute factors fixed (global, then per GPU)."""
    predictor = DeletePopStepTime(factors=factors)
    single = np.array([predictor.step_time_s(job_of(m), m.gpu, 1) for m in rows])
    x = np.stack([_comm_row(m, predictor.hop_latency_s) for m in rows])
    y = np.array([m.step_time_s for m in rows])
    prior = np.array([DEFAULT_COMM_COEFFICIENTS[k] for k in COMM_FEATURES])
    global_coef = _irls(x, y - single, y, prior, _RIDGE)
    gpus = np.array([_gpu(m.gpu).id for m in rows])
    per_gpu = {g: _irls(x[gpus == g], (y - single)[gpus == g], y[gpus == g], global_coef, _PER_GPU_RIDGE)
               for g in sorted(set(gpus))}
    return {"comm_coefficients": _rounded_comm(global_coef),
            "per_gpu_comm": {g: _rounded_comm(c) for g, c in per_gpu.items()}}


def _comm_row(m: Measurement, hop_latency_s: float) -> np.ndarray:
    gpu = _gpu(m.gpu)
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
        return {"n": self.n, "mape": self.mape, "p90_ape": self.p90_ape}


def evaluate(predictor: DeletePopStepTime, measurements: Sequence[Measurement]) -> Evaluation:
    """MAPE and 90th-percentile absolute percentage error (in %) with per-row predictions."""
    rows, errors = [], []
    for m in measurements:
        pred = predictor.step_time_s(job_of(m), m.gpu, m.num_gpus)
        ape = abs(pred - m.step_time_s) / m.step_time_s * 100.0
        errors.append(ape)
        rows.append({"model": m.model, "dataset": m.dataset, "gpu": m.gpu, "batch_size": m.batch_size,
                     "num_gpus": m.num_gpus, "amp": m.amp, "measured_s": m.step_time_s, "predicted_s": pred,
                     "ape": ape})
    if not errors:
        raise ValueError("no measurements to evaluate")
    return Evaluation(len(errors), float(np.mean(errors)), float(np.percentile(errors, 90)), tuple(rows))


def leave_one_gpu_out(train: Sequence[Measurement], test: Sequence[Measurement],
                      kernel_efficiency: dict[str, dict[str, float]] | None = None,
                      base: DeletePopStepTime | None = None) -> dict[str, Any]:
    """For each GPU of ``test``: fit on ``train`` without that GPU, evaluate on ``test`` rows of it."""
    base = base or DeletePopStepTime()
    per_gpu, all_rows = {}, []
    for gpu in sorted({_gpu(m.gpu).id for m in test}):
        factors = fit([m for m in train if _gpu(m.gpu).id != gpu], kernel_efficiency)
        ev = evaluate(replace(base, factors=factors), [m for m in test if _gpu(m.gpu).id == gpu])
        per_gpu[gpu] = ev.summary()
        all_rows.extend(ev.rows)
    apes = [r["ape"] for r in all_rows]
    return {"n": len(apes), "mape": float(np.mean(apes)), "p90_ape": float(np.percentile(apes, 90)),
            "per_gpu": per_gpu}

"""Fitting the step-time predictor's achievable-efficiency factors, and evaluating it.

The step time is linear in the spec-normalised work terms of :func:`model.features`, so the
inverse efficiencies are a non-negative least-squares fit of relative error over whole-iteration
measurements (Gavel isolated scale 1, Zeus). DeepBench GEMM efficiencies scale the compute peak
per GPU (relative to their mean; GPUs without DeepBench rows use 1). GPUs with measurements get their
own coefficient vector; any other GPU, and a GPU held out, uses the global fit with spec-sheet
scaling (peak FLOPs, bandwidth) only.
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
from dltsched.predictors.steptime.model import FEATURES, DeletePopStepTime, _gpu, features, optimizer_passes
from dltsched.predictors.zoo.graphs import resolve

FORMAT_VERSION = 1
_RIDGE = 1e-3  # pulls coefficients towards 1 (= spec efficiency) where data say little


def job_of(m: Measurement) -> Job:
    return Job(id=f"{m.model}-{m.gpu}-{m.batch_size}", model=m.model, batch_size=m.batch_size,
               total_iterations=1.0, num_gpus=m.num_gpus, amp=m.amp, optimizer=m.optimizer, dataset=m.dataset)


def _row(m: Measurement, gemm: dict[str, float]) -> np.ndarray:
    model, dataset = resolve(m.model, m.dataset)
    gpu = _gpu(m.gpu)
    f = features(aggregates(model, dataset), gpu, m.batch_size, m.amp, 0, optimizer_passes(job_of(m)),
                 gemm.get(gpu.id, 1.0))
    return np.array([f[k] for k in FEATURES])


def relative_gemm_efficiency(raw: dict[str, float]) -> dict[str, float]:
    mean = statistics.fmean(raw.values()) if raw else 1.0
    return {g: round(v / mean, 4) for g, v in raw.items()}


def _nnls(rows: Sequence[Measurement], gemm: dict[str, float]) -> dict[str, float]:
    """Inverse efficiencies minimising the squared relative error over ``rows`` (ridge towards 1)."""
    x = np.stack([_row(m, gemm) for m in rows])
    y = np.array([m.step_time_s for m in rows])
    n = len(FEATURES)
    a = np.vstack([x / y[:, None], _RIDGE * np.eye(n)])
    b = np.concatenate([np.ones(len(rows)), _RIDGE * np.ones(n)])
    coef, _res = nnls(a, b)
    return {k: round(float(c), 5) for k, c in zip(FEATURES, coef, strict=True)}


def fit(measurements: Sequence[Measurement], gemm_efficiency: dict[str, float] | None = None) -> dict[str, Any]:
    """Fitted factors (the ``factors.json`` payload) from single-GPU measurements."""
    gemm = relative_gemm_efficiency(gemm_efficiency or {})
    rows = [m for m in measurements if m.num_gpus == 1]
    if not rows:
        raise ValueError("no single-GPU measurements to calibrate on")
    factors: dict[str, Any] = {"format_version": FORMAT_VERSION, "coefficients": _nnls(rows, gemm),
                               "gemm_efficiency": gemm, "per_gpu": {}}
    for gpu in sorted({_gpu(m.gpu).id for m in rows}):
        factors["per_gpu"][gpu] = _nnls([m for m in rows if _gpu(m.gpu).id == gpu], gemm)
    factors["fitted_on"] = sorted({f"{m.source}:{_gpu(m.gpu).id}" for m in rows})
    factors["num_measurements"] = len(rows)
    return factors


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
                      gemm_efficiency: dict[str, float] | None = None,
                      base: DeletePopStepTime | None = None) -> dict[str, Any]:
    """For each GPU of ``test``: fit on ``train`` without that GPU, evaluate on ``test`` rows of it."""
    base = base or DeletePopStepTime()
    per_gpu, all_rows = {}, []
    for gpu in sorted({_gpu(m.gpu).id for m in test}):
        factors = fit([m for m in train if _gpu(m.gpu).id != gpu], gemm_efficiency)
        ev = evaluate(replace(base, factors=factors), [m for m in test if _gpu(m.gpu).id == gpu])
        per_gpu[gpu] = ev.summary()
        all_rows.extend(ev.rows)
    apes = [r["ape"] for r in all_rows]
    return {"n": len(apes), "mape": float(np.mean(apes)), "p90_ape": float(np.percentile(apes, 90)),
            "per_gpu": per_gpu}

"""Whole-step time from the kernel model: the operator graph's kernels plus fitted host terms.

One step of one worker (scope :data:`model.SCOPES`)::

    gpu      = (kernel * K(batch, GPU) + optimizer * O(GPU)) * g[GPU]  (K: sum of predicted kernels,
                                                                      forward and backward; O: the
                                                                      optimizer's parameter passes at
                                                                      the spec bandwidth)
    busy     = smooth max(gpu, dispatch_us * launches)               (the host enqueues asynchronously)
    step     = busy + fixed_s[source]                                (scope compute and iteration)
             + per_step_s[w] + per_sample_s[w] * batch               (scope iteration only: input pipeline)

``K`` comes from :mod:`opgraph` and :mod:`kernels` (never below the roofline, learned on measured
kernels of other GPUs); a GPU enters only through its spec sheet. The fitted terms (:func:`fit`,
robust least squares on relative errors over whole-step measurements) are few and shared by
every GPU: the scale of kernel time (launch gaps, kernels the graph does not list), of the
optimizer, the CPU time per launch, a fixed per-step cost per measurement setup (framework,
optimizer bookkeeping, host; its median for setups never seen); per workload ``w`` (setup, model,
dataset, GPUs, AMP) measured on some GPU a scale of its GPU time (pulled towards 1: what the graph
misses of that workload, the same on every GPU) and, measured with its input pipeline, the input
terms (pulled towards 0, so that GPU work explains what it can). Workloads never measured get
neither. Per GPU measured in the fit, a scale ``g`` of its GPU time, fitted after everything else on
what is left (the geometric mean of measured / predicted over its rows, shrunk towards 1: what the
kernel model misses of that GPU, such as the sustained clock of a power-limited card); GPUs never
measured get 1, so they enter a prediction through their spec sheet alone and the rest of the fit
is the same as without the scales, and a measured GPU's own bias leaves one-profile transfers from
it. (Fitted jointly instead, the scales drew the shared terms away from what holds for unseen GPUs:
leave-one-GPU-out 26.8% -> 29.4%.)
Scope ``fwd_bwd`` is ``kernel * K`` alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dltsched.engine.domain.model import GpuType, Job
from dltsched.predictors.steptime.aggregates import aggregates
from dltsched.predictors.steptime.kernels import KernelModel, kernel_gpu, load_kernel_model
from dltsched.predictors.steptime.opgraph import kernel_times, step_kernel_s

#: version of the ``kernel_step`` block of the factors
KERNEL_STEP_VERSION = 1
#: prior values of the fitted scalars
PRIOR = {"kernel": 1.0, "optimizer": 1.5, "dispatch_us": 8.0}
_OVERLAP_POWER = 3.0
_LOSS_SCALE = 0.05
_PRIOR_WEIGHT = 0.3  # on log(scalar / prior)
_SCALE_WEIGHT = 0.1  # on log(per-workload scale of GPU time)
_GPU_SCALE_SHRINK = 5.0  # pseudo-rows at scale 1 in each per-GPU scale
_INPUT_WEIGHT = 0.02  # on input terms (units of 10 ms and 0.1 ms per sample)
#: kernels one optimizer step launches per trainable parameter tensor (PyTorch's per-tensor loops)
OPTIMIZER_KERNELS = {"sgd": 1, "momentum": 2, "nesterov": 2, "adagrad": 3, "rmsprop": 4, "adam": 5,
                     "adamw": 6, "adadelta": 5, "lamb": 8}


def workload_key(source: str, model_id: str, dataset: str, amp: bool) -> str:
    """Key of a workload's fitted terms: setup, canonical model and dataset, AMP (per-GPU terms: the
    same for any number of data-parallel workers)."""
    return f"{source}:{model_id}/{dataset}:{int(bool(amp))}"


def kernel_work(job: Job, model_id: str, dataset: str, gpu: GpuType, freeze_level: int = 0,
                scope: str = "iteration", kernel_model: KernelModel | None = None,
                tf32: frozenset[str] = frozenset()) -> dict[str, float]:
    """Unscaled work of one step: ``kernel_s`` (sum of predicted kernels), ``optimizer_s`` (parameter
    passes at the spec bandwidth; 0 for ``fwd_bwd``) and ``launches`` (kernels per step). ``tf32``: the
    GEMM-like op classes run in TF32 (:func:`~.opgraph.kernel_times`)."""
    km = kernel_model or load_kernel_model()
    kt = kernel_times(km, model_id, dataset, kernel_gpu(gpu), bool(job.amp), tf32)
    agg = aggregates(model_id, dataset)
    kernel_s = step_kernel_s(kt, job.batch_size, freeze_level)
    launches = kt.launches_fwd + float(kt.launches_bwd[freeze_level:].sum())
    if scope == "fwd_bwd":
        return {"kernel_s": kernel_s, "optimizer_s": 0.0, "launches": launches}
    passes = 3.0 + 2.0 * job.bytes_per_param / 4.0
    optimizer_s = agg.param_bytes[freeze_level] * passes / (gpu.memory_bandwidth_gbs * 1e9)
    launches += agg.param_tensors[freeze_level] * OPTIMIZER_KERNELS.get(job.optimizer.lower(), 2)
    return {"kernel_s": kernel_s, "optimizer_s": optimizer_s, "launches": launches}


def busy_s(gpu_s: float, dispatch_s: float) -> float:
    """Smooth maximum of GPU time and CPU dispatch time (they overlap)."""
    return (gpu_s**_OVERLAP_POWER + dispatch_s**_OVERLAP_POWER) ** (1.0 / _OVERLAP_POWER)


def predict_terms(params: dict[str, Any], work: dict[str, float], source: str, workload: str, batch: int,
                  scope: str, gpu_key: str = "") -> dict[str, float]:
    """Seconds per term of one step: ``gpu``, ``dispatch`` (not hidden), ``fixed``, ``input``.
    ``gpu_key``: the GPU's fitted-scale key (its learned root id); GPUs without one get 1."""
    gpu = (params["kernel"] * work["kernel_s"] + params["optimizer"] * work["optimizer_s"]) * params.get(
        "scale", {}).get(workload, 1.0) * params.get("gpu_scale", {}).get(gpu_key, 1.0)
    if scope == "fwd_bwd":
        return {"gpu": gpu, "dispatch": 0.0, "fixed": 0.0, "input": 0.0}
    dispatch = busy_s(gpu, params["dispatch_us"] * 1e-6 * work["launches"]) - gpu
    fixed = params["fixed_s"].get(source, params["fixed_default_s"])
    inp = params["input"].get(workload) if scope == "iteration" else None
    pipeline = 0.0 if inp is None else inp[0] + inp[1] * batch
    return {"gpu": gpu, "dispatch": dispatch, "fixed": float(fixed), "input": float(pipeline)}


def fit(rows: Sequence[tuple[Any, ...]]) -> dict[str, Any]:
    """Fit the scalars, the per-setup fixed costs, the per-workload input terms and scales and the
    per-GPU scales.

    ``rows``: ``(work, source, workload, batch, scope, measured_s[, gpu_key])`` with ``work`` from
    :func:`kernel_work`; rows without ``gpu_key`` fit no GPU scale. Robust (soft-L1) least squares on
    relative errors with weak priors.
    """
    from scipy.optimize import least_squares

    if not rows:
        raise ValueError("no step-time rows to fit the kernel step model on")
    sources = sorted({r[1] for r in rows if r[4] != "fwd_bwd"})
    workloads = sorted({r[2] for r in rows if r[4] == "iteration"})
    scaled = sorted({r[2] for r in rows})
    n_z = len(scaled)
    z_idx = {w: i for i, w in enumerate(scaled)}
    zl = np.array([z_idx[r[2]] for r in rows])
    gpu_keys = sorted({r[6] for r in rows if len(r) > 6 and r[6]})
    g_idx = {g: i for i, g in enumerate(gpu_keys)}
    gl = np.array([g_idx.get(r[6], -1) if len(r) > 6 else -1 for r in rows])
    n_s, n_w = len(sources), len(workloads)
    s_idx, w_idx = {s: i for i, s in enumerate(sources)}, {w: i for i, w in enumerate(workloads)}
    kernel = np.array([r[0]["kernel_s"] for r in rows])
    opt = np.array([r[0]["optimizer_s"] for r in rows])
    launches = np.array([r[0]["launches"] for r in rows])
    batch = np.array([r[3] for r in rows], dtype=float)
    y = np.array([r[5] for r in rows])
    fwd_bwd = np.array([r[4] == "fwd_bwd" for r in rows])
    src = np.array([s_idx.get(r[1], -1) for r in rows])
    wl = np.array([w_idx.get(r[2], -1) if r[4] == "iteration" else -1 for r in rows])
    prior = np.log([PRIOR["kernel"], PRIOR["optimizer"], PRIOR["dispatch_us"]])

    def pick(block: np.ndarray, index: np.ndarray, default: float) -> np.ndarray:
        """``block[index]`` where ``index >= 0``, else ``default`` (also when the block is empty)."""
        return np.where(index >= 0, block[np.maximum(index, 0)] if len(block) else default, default)

    def predict(x: np.ndarray) -> np.ndarray:
        a, b, d = np.exp(x[:3])
        fixed = pick(x[3:3 + n_s], src, 0.0) ** 2
        per_step = pick(x[3 + n_s:3 + n_s + n_w], wl, 0.0) ** 2
        per_sample = pick(x[3 + n_s + n_w:3 + n_s + 2 * n_w], wl, 0.0) ** 2
        gpu = (a * kernel + b * opt) * np.exp(x[3 + n_s + 2 * n_w:][zl])
        busy = (gpu**_OVERLAP_POWER + (d * 1e-6 * launches) ** _OVERLAP_POWER) ** (1.0 / _OVERLAP_POWER)
        host = fixed + per_step * 1e-2 + per_sample * 1e-4 * batch
        return np.where(fwd_bwd, gpu, busy + host)

    def residuals(x: np.ndarray) -> np.ndarray:
        rel = predict(x) / y - 1.0
        reg = np.concatenate([_PRIOR_WEIGHT * (x[:3] - prior), _INPUT_WEIGHT * x[3 + n_s:3 + n_s + 2 * n_w],
                              _SCALE_WEIGHT * x[3 + n_s + 2 * n_w:]])
        return np.concatenate([rel, reg])

    x0 = np.concatenate([prior, np.full(n_s, 0.1), np.full(2 * n_w, 0.3), np.zeros(n_z)])
    sol = least_squares(residuals, x0, loss="soft_l1", f_scale=_LOSS_SCALE, max_nfev=400)
    x = sol.x
    log_left = np.log(y / predict(x))
    gpu_scale = {g: float(math.exp(log_left[gl == i].sum() / ((gl == i).sum() + _GPU_SCALE_SHRINK)))
                 for i, g in enumerate(gpu_keys)}
    fixed = {s: float(x[3 + i] ** 2) for i, s in enumerate(sources)}
    return {"version": KERNEL_STEP_VERSION, "kernel": float(math.exp(x[0])),
            "optimizer": float(math.exp(x[1])), "dispatch_us": float(math.exp(x[2])), "fixed_s": fixed,
            "fixed_default_s": float(np.median(list(fixed.values()))) if fixed else 0.0,
            "input": {w: (float(x[3 + n_s + i] ** 2 * 1e-2), float(x[3 + n_s + n_w + i] ** 2 * 1e-4))
                      for i, w in enumerate(workloads)},
            "scale": {w: float(math.exp(x[3 + n_s + 2 * n_w + i])) for i, w in enumerate(scaled)},
            "gpu_scale": gpu_scale}

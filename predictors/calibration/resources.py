"""What jobs alone on one GPU teach about their memory and utilisation (the step time is :mod:`.isolated`'s).

**Memory** is NVML's used memory of the whole GPU while the job runs alone (what packing needs)::

    memory_mib = context_mib + scale * reserved_mib + rnn * rnn_reserve_mib

``reserved_mib`` is what PyTorch's caching allocator reserves for the training step: the step traced on the
meta device and its allocations replayed through a model of the allocator
(:mod:`dltsched.predictors.zoo.memtrace`), so weights, gradients, the tensors saved for backward, the
transient tensors at the peak and the allocator's segment rounding and fragmentation are counted, not
fitted. Optimizer state is added per trainable parameter (SGD without momentum none, momentum one copy,
Adam two); a frozen layer drops its gradients and saved activations. ``context_mib`` is the CUDA context
and the libraries' workspaces; ``rnn_reserve_mib`` the reserve cuDNN's recurrent kernels keep for backward
(its size per hidden unit is an estimate, so the calibration may scale it). Models without a trace fall back
to the operator graph's weights and saved activations. The fit is robust least squares on relative
errors, each parameter pulled towards the uncalibrated value (``scale = 1``, ``rnn = 0``).

**Utilisation** (NVML's GPU utilisation alone, %)::

    util = 100 * min(1, ((gpu + launch_busy_s * launches) / step) ** gamma)

with ``gpu`` the calibrated GPU seconds of the step and ``step`` the measured step time where there is one,
else the calibrated prediction; fitted by robust least squares on errors in percentage points (not
relative ones: NVML reads anywhere from 1% to 96% for jobs whose steps take a few milliseconds, and a
relative error against a 1% reading outweighs every other row), pulled towards ``gamma = 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

_MIB = 1024.0 * 1024.0
#: AMP: an FP16 copy of the weights beside the FP32 master, activations mostly in FP16
AMP_WEIGHTS, AMP_ACTIVATIONS = 1.5, 0.6


def memory_features(model: str, dataset: str, batch: int, amp: bool, freeze_level: int,
                    bytes_per_param: float) -> dict[str, float]:
    """The memory features of one job (MiB): ``reserved_mib`` (the caching allocator's reserve for the
    step, or the graph's weights and saved activations where the model has no trace), ``rnn_reserve_mib``,
    ``traced`` (1 where traced), and the graph's ``weights_mib`` (weights, gradients and optimizer state)
    and ``activations_mib``."""
    from dltsched.predictors.steptime.aggregates import aggregates
    from dltsched.predictors.zoo.memory import has_trace, traced_bytes

    agg = aggregates(model, dataset)
    trainable = agg.param_bytes[freeze_level]
    state = trainable * bytes_per_param / 4.0
    out = {"weights_mib": (agg.param_bytes_total * (AMP_WEIGHTS if amp else 1.0) + trainable + state) / _MIB,
           "activations_mib": agg.activation_bytes[freeze_level] * batch * (AMP_ACTIVATIONS if amp else 1.0)
           / _MIB}
    if not has_trace(model, dataset):
        return out | {"reserved_mib": out["weights_mib"] + out["activations_mib"], "rnn_reserve_mib": 0.0,
                      "traced": 0.0}
    t = traced_bytes(model, dataset, batch)
    # frozen layers keep no gradients and save no activations; optimizer state per trainable parameter
    frozen = (agg.param_bytes[0] - trainable
              + (agg.activation_bytes[0] - agg.activation_bytes[freeze_level]) * batch)
    reserved = max(t["static_bytes"], t["reserved_bytes"] - frozen) + state
    if amp:
        reserved = (t["static_bytes"] * AMP_WEIGHTS
                    + (reserved - t["static_bytes"]) * AMP_ACTIVATIONS)
    return out | {"reserved_mib": reserved / _MIB, "rnn_reserve_mib": t["rnn_reserve_bytes"] / _MIB,
                  "traced": 1.0}


MEMORY_PARAMS = ("context_mib", "scale", "rnn")
#: each parameter's pull towards the uncalibrated value, against relative errors of the rows
MEMORY_PRIOR_WEIGHT = {"context_mib": 0.05, "scale": 0.3, "rnn": 0.3}


def default_memory_params() -> dict[str, float]:
    """The uncalibrated memory model: the traced reserve as it is and the default context."""
    from dltsched.predictors.steptime.model import DeletePopStepTime

    return {"context_mib": DeletePopStepTime().workspace_mib, "scale": 1.0, "rnn": 0.0}


def memory_mib(params: dict[str, float], f: dict[str, float]) -> float:
    """Calibrated NVML memory (MiB) of a job alone with features ``f`` (module docstring; a bundle written
    before the traced reserve holds ``weights`` and ``activations`` scales of the graph's bytes instead)."""
    if "weights" in params:
        return (params["context_mib"] + params["weights"] * f["weights_mib"]
                + params["activations"] * f["activations_mib"])
    return (params["context_mib"] + params.get("scale", 1.0) * f["reserved_mib"]
            + params.get("rnn", 0.0) * f["rnn_reserve_mib"])


def fit_memory(rows: Sequence[Any]) -> dict[str, float]:
    """The memory parameters fitted on the rows with a measured NVML memory (defaults without any)."""
    from dltsched.predictors.calibration.isolated import _robust as robust_fit

    got = [r for r in rows if r.gmem_mib]
    prior = default_memory_params()
    if not got:
        return prior
    reserved = np.array([r.features["reserved_mib"] for r in got])
    rnn = np.array([r.features["rnn_reserve_mib"] for r in got])
    measured = np.array([float(r.gmem_mib) for r in got])
    # unknowns scaled to order one: context in GiB, log scale, rnn share
    x0 = np.array([prior["context_mib"] / 1024.0, 0.0, 0.0])
    weights = np.array([MEMORY_PRIOR_WEIGHT[n] for n in MEMORY_PARAMS])

    def unpack(x: np.ndarray) -> dict[str, float]:
        return {"context_mib": float(x[0] * 1024.0), "scale": float(np.exp(x[1])), "rnn": float(x[2])}

    def residuals(x: np.ndarray) -> np.ndarray:
        p = unpack(x)
        pred = p["context_mib"] + p["scale"] * reserved + p["rnn"] * rnn
        return np.concatenate([pred / measured - 1.0, weights * (x - x0)])

    return unpack(robust_fit(residuals, x0))


UTIL_PARAMS = ("launch_busy_us", "gamma")


def util_pct(params: dict[str, float], busy_s: float, launches: float, step_s: float) -> float:
    """Calibrated NVML utilisation (%) of a job alone whose GPU work takes ``busy_s`` of ``step_s``."""
    x = (busy_s + params["launch_busy_us"] * 1e-6 * launches) / max(step_s, 1e-12)
    return 100.0 * min(1.0, max(x, 1e-6) ** params["gamma"])


def fit_util(rows: Sequence[Any], step_params: dict[str, float]) -> dict[str, float]:
    """The utilisation parameters fitted on rows with a measured utilisation (the step model's GPU seconds;
    errors in percentage points, module docstring)."""
    from dltsched.predictors.calibration.isolated import _robust as robust_fit
    from dltsched.predictors.calibration.isolated import gpu_seconds

    got = [r for r in rows if r.gpu_util is not None and r.scope != "fwd_bwd"]
    prior = {"launch_busy_us": 2.0, "gamma": 1.0}
    if not got:
        return prior
    x0 = np.log([prior[n] for n in UTIL_PARAMS])

    busy = np.array([gpu_seconds(step_params, r.features, r.scope) for r in got])
    launches = np.array([r.features["launches"] for r in got])
    step = np.array([r.step_time_s for r in got])
    measured = np.array([float(r.gpu_util or 0.0) for r in got])

    def residuals(x: np.ndarray) -> np.ndarray:
        launch_us, gamma = np.exp(x)
        share = np.maximum((busy + launch_us * 1e-6 * launches) / step, 1e-6)
        points = np.minimum(1.0, share**gamma) - measured / 100.0
        return np.concatenate([points, 0.1 * (x - x0)])

    return {n: float(v) for n, v in zip(UTIL_PARAMS, np.exp(robust_fit(residuals, x0)), strict=True)}

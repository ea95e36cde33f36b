"""The shipped memory traces of the zoo's training steps (``memory_trace.json``), read without torch.

``dltsched.predictors.zoo.memtrace`` (needs torch) writes the file: for every (model, dataset), the bytes
of one SGD training step traced on the meta device at the batch sizes :data:`BATCHES` and any others its
record lists under ``batch`` (the module docstring of ``memtrace`` says what is counted).
:func:`traced_bytes` interpolates them piecewise linearly in the batch size; :func:`reserve_mib` is a job's
reserve (frozen layers, optimizer state, AMP), to which a process adds its context
(:data:`DEFAULT_CONTEXT_MIB` uncalibrated).
"""

from __future__ import annotations

import bisect
import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
#: batch sizes every step is traced at; other batch sizes are interpolated (or extrapolated) linearly
BATCHES = (2, 16, 64, 256)
FIELDS = ("static_bytes", "peak_bytes", "reserved_bytes", "rnn_reserve_bytes", "conv_col_bytes")


def trace_path() -> Path:
    """Where the shipped memory trace file lives (inside the package)."""
    return Path(str(resources.files("dltsched.predictors.zoo").joinpath("memory_trace.json")))


@cache
def read_traces() -> dict[str, Any]:
    """The shipped memory traces, by model and dataset (empty when the file is missing); read once."""
    path = trace_path()
    if not path.is_file():
        return {}
    raw = json.loads(path.read_text())
    if raw.get("format_version") != FORMAT_VERSION:
        return {}
    return dict(raw["models"])


def has_trace(model: str, dataset: str) -> bool:
    """Whether the shipped file traces canonical ``model`` on ``dataset``."""
    return dataset in read_traces().get(model, {})


def traced_bytes(model: str, dataset: str, batch: float) -> dict[str, float]:
    """The traced bytes of one step of canonical ``model`` on ``dataset`` at ``batch`` (:data:`FIELDS`),
    piecewise linear in the batch size through the traced points (never below the static bytes); a
    ``KeyError`` where the file has no trace of them (see :func:`has_trace`)."""
    rec = read_traces()[model][dataset]
    batches = rec.get("batch", BATCHES)
    i = max(0, min(len(batches) - 2, bisect.bisect_right(batches, batch) - 1))
    (b0, b1), out = batches[i:i + 2], {}
    for name in FIELDS:
        y0, y1 = rec[name][i:i + 2]
        out[name] = y0 + (y1 - y0) * (batch - b0) / (b1 - b0)
    out["peak_bytes"] = max(out["peak_bytes"], out["static_bytes"])
    out["reserved_bytes"] = max(out["reserved_bytes"], out["peak_bytes"])
    for name in ("rnn_reserve_bytes", "conv_col_bytes"):
        out[name] = max(0.0, out[name])
    return out


#: the default context (MiB) of a training process on a recent stack (CUDA 12-13, cuDNN 9, PyTorch 2): the
#: CUDA context with the cuBLAS and cuDNN handles loaded and cuBLAS's workspaces, before the first tensor.
#: About 1.4-1.5 GiB on the H200 profiles; Lucid's V100 measurements imply more (about 2 GiB)
DEFAULT_CONTEXT_MIB = 1536.0
#: AMP: an FP16 copy of the weights beside the FP32 master, activations mostly in FP16
AMP_WEIGHTS, AMP_ACTIVATIONS = 1.5, 0.6
_MIB = 1024.0 * 1024.0


def reserve_mib(model: str, dataset: str, batch: float, amp: bool = False, freeze_level: int = 0,
                bytes_per_param: float = 0.0) -> float | None:
    """What the caching allocator reserves for one training step of canonical ``model`` on ``dataset``
    (MiB; ``None`` where the shipped file has no trace of it): the traced reserve of an SGD step, less the
    gradients and saved activations of the layers frozen below ``freeze_level``, plus ``bytes_per_param``
    of optimizer state per trainable parameter (4 bytes: one FP32 copy, as momentum keeps); AMP keeps an FP16
    copy of the weights and its activations mostly in FP16."""
    if not has_trace(model, dataset):
        return None
    from dltsched.predictors.steptime.aggregates import aggregates

    agg = aggregates(model, dataset)
    trainable = agg.param_bytes[freeze_level]
    state = trainable * bytes_per_param / 4.0
    t = traced_bytes(model, dataset, batch)
    frozen = (agg.param_bytes[0] - trainable
              + (agg.activation_bytes[0] - agg.activation_bytes[freeze_level]) * batch)
    reserved = max(t["static_bytes"], t["reserved_bytes"] - frozen) + state
    if amp:
        reserved = t["static_bytes"] * AMP_WEIGHTS + (reserved - t["static_bytes"]) * AMP_ACTIVATIONS
    return reserved / _MIB

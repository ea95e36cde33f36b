"""The shipped memory traces of the zoo's training steps (``memory_trace.json``), read without torch.

``dltsched.predictors.zoo.memtrace`` (needs torch) writes the file: for every (model, dataset), the bytes
of one SGD training step traced on the meta device at the batch sizes :data:`BATCHES` and any others its
record lists under ``batch`` (the module docstring of ``memtrace`` says what is counted).
:func:`traced_bytes` interpolates them piecewise linearly in the batch size.
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

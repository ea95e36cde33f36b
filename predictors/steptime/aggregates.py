"""Per-(model, dataset) cost aggregates of the shipped operator graphs, by op class and freeze level.

A prediction then needs a few dozen flops: forward sums over all ops, backward sums over the
trainable suffix (layers >= freeze level) read from suffix tables. No torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from dltsched.predictors.zoo.graphs import COLUMNS, graph_record

#: classes timed by FLOPs / achievable peak; the others by bytes / achievable bandwidth
COMPUTE_CLASSES = ("conv", "matmul", "attention", "rnn")
_MEMORY_BWD_FACTOR = 2.0  # backward of a memory-bound op reads saved input + grad out, writes grad in
_COL = {c: i for i, c in enumerate(COLUMNS)}


@dataclass(frozen=True, slots=True)
class Aggregates:
    """Per-sample totals of one graph; index ``[k]`` of a suffix table = sum over layers >= k."""

    num_layers: int
    fwd_flops: dict[str, float]  # compute class -> forward FLOPs
    bwd_flops: dict[str, tuple[float, ...]]  # compute class -> suffix of backward FLOPs
    fwd_bytes: float  # memory-bound classes, forward bytes read + written
    bwd_bytes: tuple[float, ...]
    fwd_kernels: int
    bwd_kernels: tuple[int, ...]
    activation_bytes: tuple[float, ...]  # suffix of stored activations (trainable layers only)
    param_bytes: tuple[float, ...]  # suffix of parameter bytes (trainable weights)
    param_bytes_total: float


def _suffix(values: list[float]) -> tuple[float, ...]:
    out = [0.0] * (len(values) + 1)
    for i in range(len(values) - 1, -1, -1):
        out[i] = out[i + 1] + values[i]
    return tuple(out)


@cache
def aggregates(model: str, dataset: str) -> Aggregates:
    """Aggregates of the shipped graph of canonical ``model`` on ``dataset``."""
    rec = graph_record(model, dataset)
    n = rec["num_layers"]
    fwd = dict.fromkeys(COMPUTE_CLASSES, 0.0)
    bwd = {c: [0.0] * n for c in COMPUTE_CLASSES}
    fwd_bytes, bwd_bytes = 0.0, [0.0] * n
    bwd_kernels, acts, params = [0.0] * n, [0.0] * n, [0.0] * n
    for row in rec["nodes"]:
        cls, layer = row[_COL["op_class"]], row[_COL["layer"]]
        moved = row[_COL["bytes_read"]] + row[_COL["bytes_written"]]
        if cls in COMPUTE_CLASSES:
            fwd[cls] += row[_COL["fwd_flops"]]
            bwd[cls][layer] += row[_COL["bwd_flops"]]
            bwd_kernels[layer] += 2
        else:
            fwd_bytes += moved
            bwd_bytes[layer] += _MEMORY_BWD_FACTOR * moved
            bwd_kernels[layer] += 1
        acts[layer] += row[_COL["activation_bytes"]]
        params[layer] += row[_COL["param_bytes"]]
    scale = rec["param_bytes_total"] / max(sum(params), 1.0)  # tied weights counted once
    return Aggregates(n, fwd, {c: _suffix(v) for c, v in bwd.items()}, fwd_bytes, _suffix(bwd_bytes),
                      len(rec["nodes"]), tuple(int(x) for x in _suffix(bwd_kernels)), _suffix(acts),
                      tuple(p * scale for p in _suffix(params)), float(rec["param_bytes_total"]))

"""Per-(model, dataset) cost tables of the shipped operator graphs, by work group and freeze level.

Each operator runs once forward and, when its layer is trainable (layer >= freeze level), once
backward. On a given GPU an operator of a compute class (conv, matmul, attention, rnn) is timed by
its FLOPs when it is compute-bound and by its activation bytes when it is memory-bound: the
roofline decides from its per-sample arithmetic intensity and the GPU's ridge point (reference
efficiencies :data:`REFERENCE_INVERSE_EFFICIENCY`). Compute-class operators on the memory side
(depthwise and thin convolutions, small matmuls) are kept apart from the always memory-bound
classes (norms, element-wise, pooling): their kernels reach a different share of the bandwidth.
A recurrent layer also re-reads its hidden-to-hidden weights at every time step (the per-step
matmul of a small batch is bound by that traffic, whatever the batch), see :func:`recurrent_steps`.
A prediction then needs a few dozen flops: :func:`work_table` sums the graph once per (GPU, AMP,
kernel efficiencies) and keeps suffix tables over the freeze level. No torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache

from dltsched.predictors.zoo.graphs import COLUMNS, graph_record

#: op classes timed by FLOPs over an achievable peak when compute-bound
COMPUTE_CLASSES = ("conv", "matmul", "attention", "rnn")
#: compute work groups: each has its own achievable efficiency (attention runs GEMM kernels)
COMPUTE_GROUPS = ("conv", "gemm", "rnn")
GROUP_OF = {"conv": "conv", "matmul": "gemm", "attention": "gemm", "rnn": "rnn"}
#: roofline classification: inverse efficiencies a typical operator reaches (compute, memory)
REFERENCE_INVERSE_EFFICIENCY = (1.4, 1.25)
_MEMORY_BWD_FACTOR = 2.0  # backward reads the saved input and the output gradient, writes the input gradient
#: share of a recurrent layer's weights re-read at every time step (hidden-to-hidden matrices, input size ~
# hidden)
RECURRENT_WEIGHT_SHARE = 0.5
_COL = {c: i for i, c in enumerate(COLUMNS)}


@dataclass(frozen=True, slots=True)
class Aggregates:
    """Per-op costs of one graph (per sample, except parameter bytes) and per-layer suffix sums.

    Index ``[k]`` of a suffix table = sum over layers >= k (the trainable part at freeze level k).
    """

    num_layers: int
    # (class, layer, fwd, bwd FLOPs, act, param B)
    ops: tuple[tuple[str, int, float, float, float, float], ...]
    activation_bytes: tuple[float, ...]  # suffix of activations stored for backward
    param_bytes: tuple[float, ...]  # suffix of trainable parameter bytes
    param_tensors: tuple[int, ...]  # suffix of trainable parameter tensors (weight and bias per op)
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
    acts, params, tensors = [0.0] * n, [0.0] * n, [0.0] * n
    ops = []
    for row in rec["nodes"]:
        cls, layer = row[_COL["op_class"]], row[_COL["layer"]]
        moved = row[_COL["bytes_read"]] + row[_COL["bytes_written"]]
        ops.append((cls, layer, float(row[_COL["fwd_flops"]]), float(row[_COL["bwd_flops"]]), float(moved),
                    float(row[_COL["param_bytes"]])))
        acts[layer] += row[_COL["activation_bytes"]]
        params[layer] += row[_COL["param_bytes"]]
        tensors[layer] += 2 if row[_COL["param_bytes"]] > 0 else 0
    scale = rec["param_bytes_total"] / max(sum(params), 1.0)  # tied weights counted once
    return Aggregates(n, tuple(ops), _suffix(acts), tuple(p * scale for p in _suffix(params)),
                      tuple(int(t) for t in _suffix(tensors)), float(rec["param_bytes_total"]))


def recurrent_steps(fwd_flops: float, param_bytes: float) -> float:
    """Time steps of a recurrent operator: its forward FLOPs are 2 x steps x parameters (FP32)."""
    return 2.0 * fwd_flops / param_bytes if param_bytes > 0 else 0.0


@dataclass(frozen=True, slots=True)
class WorkTable:
    """Spec-time work of one graph on one GPU, as suffix tables over the freeze level ``k``.

    ``compute_s[group][k]``, ``memory_s[k]`` (memory-bound classes) and ``bound_s[k]`` (compute
    classes on the memory side of the roofline): seconds per sample at the spec peak / bandwidth
    (forward of every op plus backward of trainable ops); ``weight_s[k]``: seconds per step to read
    the weights (forward, backward) and write the weight gradients; ``recurrent_s[k]``: seconds per
    step to re-read recurrent weights at every time step (forward, and backward of trainable
    layers); ``kernels[k]``: kernels per step.
    """

    compute_s: dict[str, tuple[float, ...]]
    memory_s: tuple[float, ...]
    bound_s: tuple[float, ...]
    weight_s: tuple[float, ...]
    recurrent_s: tuple[float, ...]
    kernels: tuple[int, ...]


@lru_cache(maxsize=8192)
def work_table(model: str, dataset: str, peak_flops: tuple[float, ...], bandwidth: float,
               activation_scale: float) -> WorkTable:
    """Work of ``model`` on a GPU with per-group achievable peaks ``peak_flops`` (order of
    :data:`COMPUTE_GROUPS`, FLOP/s) and ``bandwidth`` (B/s); activations scaled by ``activation_scale``
    (0.5 with AMP; recurrent weights too)."""
    agg = aggregates(model, dataset)
    n = agg.num_layers
    peak = dict(zip(COMPUTE_GROUPS, peak_flops, strict=True))
    ref_compute, ref_memory = REFERENCE_INVERSE_EFFICIENCY
    fwd = dict.fromkeys(COMPUTE_GROUPS, 0.0)
    bwd = {g: [0.0] * n for g in COMPUTE_GROUPS}
    # forward total and per-layer backward of: memory classes, bound compute ops, weights, recurrent weights
    fwd_other = dict.fromkeys(("memory", "bound", "weight", "recurrent"), 0.0)
    bwd_other = {k: [0.0] * n for k in fwd_other}
    fwd_kernels, bwd_kernels = 0, [0.0] * n
    for cls, layer, f, fb, moved, weights in agg.ops:
        moved_s = moved * activation_scale / bandwidth
        group = GROUP_OF.get(cls)
        if group is not None and f / peak[group] * ref_compute >= moved_s * ref_memory:
            fwd[group] += f / peak[group]
            bwd[group][layer] += fb / peak[group]
        else:
            kind = "memory" if group is None else "bound"
            fwd_other[kind] += moved_s
            bwd_other[kind][layer] += _MEMORY_BWD_FACTOR * moved_s
        fwd_other["weight"] += weights / bandwidth
        bwd_other["weight"][layer] += 2.0 * weights / bandwidth
        if cls == "rnn":  # one pass over the hidden-to-hidden weights per step forward, one backward
            reread_s = (recurrent_steps(f, weights) * RECURRENT_WEIGHT_SHARE * weights * activation_scale
                        / bandwidth)
            fwd_other["recurrent"] += reread_s
            bwd_other["recurrent"][layer] += reread_s
        fwd_kernels += 1
        bwd_kernels[layer] += 2 if group is not None else 1
    other = {k: tuple(fwd_other[k] + b for b in _suffix(bwd_other[k])) for k in fwd_other}
    return WorkTable({g: tuple(fwd[g] + b for b in _suffix(bwd[g])) for g in COMPUTE_GROUPS}, other["memory"],
                     other["bound"], other["weight"], other["recurrent"],
                     tuple(int(fwd_kernels + b) for b in _suffix(bwd_kernels)))

"""Kernel time of one training step from the operator graph and the kernel model (no torch).

Each operator of a shipped graph (:mod:`dltsched.predictors.zoo.graphs`) becomes the kernels it
launches, forward and, for trainable layers, backward, in the GEMM / vector views of
:mod:`kernels`; their times come from the kernel model (:class:`kernels.KernelModel`, never below
the roofline). The graph stores per-sample costs without shapes; the GEMM view is recovered from
them exactly where the op has weights (linear, conv: ``tokens = 2 flops / param_bytes``, in and out
widths from the activation bytes) and by a stated assumption elsewhere:

- ``matmul`` without weights: square outputs (``m = n``), as attention scores;
- ``attention`` (SDPA): two batched GEMMs and a softmax over ``heads = width / 64``, the unfused
  path of the traced models (NeuSight's traces run it unfused);
- ``rnn`` (cuDNN's layout): the input projection as one GEMM over every time step and the
  recurrent ``batch x h`` by ``h x 4h`` GEMM and the gates once per step (input width ~ hidden,
  steps from the FLOPs); backward the transposed GEMMs, the weight gradients over all steps;
- norms are ``layernorm``-class kernels, pooling, embeddings and reductions element-wise ones
  (softmax-like reductions ``softmax``), of rows of :data:`VECTOR_COLS`.

Backward: a GEMM op launches its data-gradient and weight-gradient GEMMs (transposed shapes), a
vector op one element-wise kernel of its size (NeuSight's convention). Kernel times per layer are
tabled on a grid of batch sizes (:data:`BATCH_GRID`) once per (graph, GPU, math mode), and a
prediction interpolates in log-log: fast, and exact on the grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dltsched.predictors.steptime.kernels import Kernel, KernelGpu, KernelModel, gemm_kernel, vector_kernel
from dltsched.predictors.zoo.graphs import COLUMNS, graph_record

_COL = {c: i for i, c in enumerate(COLUMNS)}
#: batch sizes at which kernel times are tabled (interpolated log-log between them)
BATCH_GRID = tuple(2**i for i in range(18))
#: row width of a vector kernel whose shape the graph does not give
VECTOR_COLS = 1024.0
#: head width of attention ops (heads = width / HEAD_DIM)
HEAD_DIM = 64.0
_SOFTMAX_LIKE = frozenset({"softmax", "_softmax", "log_softmax", "_log_softmax", "cross_entropy_loss",
                           "logsumexp", "nll_loss", "nll_loss_nd"})
_HEAVY = frozenset({"gelu", "tanh", "sigmoid", "silu", "pow", "exp", "log", "erf", "mish", "softplus",
                    "hardswish", "elu", "div", "sqrt", "rsqrt"})
_GEMM_CLASSES = frozenset({"bmm", "linear", "conv"})
#: include the kernel data's per-call floor in each kernel of a step (False: kernel bodies only; the
#: host's per-launch cost is the step model's dispatch term)
STEP_FLOOR = False


@dataclass(frozen=True, slots=True)
class OpKernels:
    """Kernels of one op at one batch size: (kernel, count) pairs forward and backward."""

    layer: int
    forward: tuple[tuple[Kernel, float], ...]
    backward: tuple[tuple[Kernel, float], ...]


def _vector(cls: str, op: str, elements: float) -> Kernel:
    elements = max(elements, 1.0)
    cols = min(VECTOR_COLS, elements)
    return vector_kernel(cls, op, max(elements / cols, 1.0), cols)


def _gemm(cls: str, b: float, m: float, n: float, k: float, elem: float) -> Kernel:
    m, n, k, b = max(m, 1.0), max(n, 1.0), max(k, 1.0), max(b, 1.0)
    if cls == "conv":
        return Kernel("conv", "conv", 2.0 * m * n * k, elem * (m * k + k * n + m * n), 1.0, m, n, k)
    return gemm_kernel(cls, b, m, n, k, elem)


def op_kernels(row: list, batch: float, elem: float = 4.0) -> OpKernels:  # noqa: C901 - one rule per op class
    """Kernels of one graph row (:data:`COLUMNS`) at ``batch`` samples; ``elem`` bytes per element."""
    op, cls, layer = row[_COL["op"]], row[_COL["op_class"]], int(row[_COL["layer"]])
    f = float(row[_COL["fwd_flops"]])
    r, w, p = (float(row[_COL[c]]) for c in ("bytes_read", "bytes_written", "param_bytes"))
    fw: list[tuple[Kernel, float]] = []
    bw: list[tuple[Kernel, float]] = []
    if cls in ("conv", "matmul") and p > 0 and f > 0:
        tokens = 2.0 * f / p  # flops = 2 tokens * in * out, params = in * out (4-byte elements)
        width_in, width_out = r / 4.0 / tokens, w / 4.0 / tokens
        depth = p / 4.0 / max(width_out, 1.0)  # reduction depth (in * kernel area / groups)
        kind = "conv" if cls == "conv" else "linear"
        m = batch * tokens
        fw.append((_gemm(kind, 1, m, width_out, depth, elem), 1.0))
        bw += [(_gemm(kind, 1, m, depth, width_out, elem), 1.0),
               (_gemm(kind, 1, depth, width_out, m, elem), 1.0)]
        del width_in
    elif cls == "matmul" and f > 0 and w > 0 and r > 0:
        k = f / 2.0 / (w / 4.0)
        mn = 2.0 * w * k / r  # m = n
        groups = max(w / 4.0 / mn**2, 1.0 / batch)
        fw.append((_gemm("bmm", batch * groups, mn, mn, k, elem), 1.0))
        bw += [(_gemm("bmm", batch * groups, mn, k, mn, elem), 1.0),
               (_gemm("bmm", batch * groups, k, mn, mn, elem),
                                                                       1.0)]
    elif cls == "attention" and f > 0 and r > 0:
        seq = (f / 4.0) / (r / 12.0)
        width = r / 12.0 / max(seq, 1.0)
        heads = max(width / HEAD_DIM, 1.0)
        hd = width / heads
        g = batch * heads
        fw += [(_gemm("bmm", g, seq, seq, hd, elem), 1.0),
               (_vector("softmax", "softmax", g * seq * seq), 1.0),
               (_gemm("bmm", g, seq, hd, seq, elem), 1.0)]
        bw += [(_gemm("bmm", g, seq, hd, seq, elem), 2.0), (_gemm("bmm", g, seq, seq, hd, elem), 2.0),
               (_vector("elementwise", "mul", g * seq * seq), 2.0)]
    elif cls == "rnn" and f > 0 and p > 0:
        steps = max(2.0 * f / p, 1.0)
        hidden = math.sqrt(p / 4.0 / 8.0)  # 4h x (in + h) weights with in ~ h
        gates = 4.0 * hidden
        tokens = batch * steps
        # cuDNN: the input projection as one GEMM over every time step, the recurrent one per step
        fw += [(_gemm("linear", 1, tokens, gates, hidden, elem), 1.0),
               (_gemm("linear", 1, batch, gates, hidden, elem), steps),
               (_vector("elementwise", "tanh", batch * gates), steps)]
        bw += [(_gemm("linear", 1, tokens, hidden, gates, elem), 1.0),
               (_gemm("linear", 1, hidden, gates, tokens, elem), 2.0),
               (_gemm("linear", 1, batch, hidden, gates, elem), steps),
               (_vector("elementwise", "mul", batch * gates), steps)]
    else:
        elements = batch * max(w, r) / 4.0
        if elements < 1.0 or op in ("zeros", "ones", "arange", "full", "new_zeros", "new_ones"):
            return OpKernels(layer, (), ())
        if cls == "norm":
            fw.append((_vector("layernorm", "ln", elements), 1.0))
            bw += [(_vector("layernorm", "ln", elements), 1.0),
                   (_vector("elementwise", "mul", elements), 1.0)]
        elif op in _SOFTMAX_LIKE:
            fw.append((_vector("softmax", "softmax", elements), 1.0))
            bw.append((_vector("elementwise", "mul", elements), 1.0))
        else:
            binary = r > 1.5 * w
            name = op if op in _HEAVY else ("add" if binary else "addu")
            name = {"sigmoid": "tanh", "silu": "gelu", "exp": "tanh", "log": "tanh", "erf": "gelu",
                    "mish": "gelu", "softplus": "tanh", "hardswish": "gelu", "elu": "tanh", "sqrt": "powu",
                    "rsqrt": "powu"}.get(name, name)
            fw.append((_vector("elementwise", name, elements), 1.0))
            bw.append((_vector("elementwise", "mul", elements), 1.0))
    return OpKernels(layer, tuple(fw), tuple(bw))


def _math_kernel(kn: Kernel, amp: bool) -> Kernel:
    if not amp:
        return kn
    return Kernel(kn.op_class, kn.op, kn.flops, kn.bytes / 2.0, kn.batch, kn.m, kn.n, kn.k)


@dataclass(frozen=True, slots=True)
class KernelTimes:
    """Kernel seconds of one graph on one GPU: ``forward[g, layer]`` and ``backward[g, layer]`` at
    :data:`BATCH_GRID` ``[g]``, and kernel launches per step (forward, backward by layer)."""

    forward: np.ndarray
    backward: np.ndarray
    launches_fwd: float
    launches_bwd: np.ndarray


def kernel_times(model: KernelModel, model_id: str, dataset: str, gpu: KernelGpu, amp: bool = False,
                 tf32: frozenset[str] = frozenset()) -> KernelTimes:
    """Kernel seconds of every layer at every grid batch size (cached per kernel model object).
    ``tf32``: GEMM-like op classes (``conv``, ``linear``, ``bmm``) run in TF32 without AMP (on GPUs
    with TF32 tensor cores; elsewhere their FP32 peak)."""
    key = (id(model), model_id, dataset, gpu, amp, tf32)
    hit = _CACHE.get(key)
    if hit is None or hit[0] is not model:
        if len(_CACHE) > 4096:
            _CACHE.clear()
        hit = _CACHE[key] = (model, _kernel_times(model, model_id, dataset, gpu, amp, tf32))
    return hit[1]


_CACHE: dict[tuple[object, ...], tuple[KernelModel, KernelTimes]] = {}


def _kernel_times(model: KernelModel, model_id: str, dataset: str, gpu: KernelGpu, amp: bool,
                  tf32: frozenset[str]) -> KernelTimes:
    rec = graph_record(model_id, dataset)
    n_layers = int(rec["num_layers"])
    # repeated layers have identical ops: time each distinct op shape once, then count it per layer
    shapes: dict[tuple[Any, ...], int] = {}
    occurrences = []
    for row in rec["nodes"]:
        shape = tuple(0 if i == _COL["layer"] else v for i, v in enumerate(row))
        occurrences.append((shapes.setdefault(shape, len(shapes)), int(row[_COL["layer"]])))
    per_layer = np.zeros((len(shapes), n_layers))
    for s, layer in occurrences:
        per_layer[s, layer] += 1.0
    kernels: list[Kernel] = []
    where: list[tuple[int, int, int, float]] = []  # grid index, shape, 0 fwd / 1 bwd, count
    launches = np.zeros((2, len(shapes)))
    elem = 2.0 if amp else 4.0
    for g, batch in enumerate(BATCH_GRID):
        for shape, s in shapes.items():
            ok = op_kernels(list(shape), float(batch), elem)
            for phase, items in ((0, ok.forward), (1, ok.backward)):
                for kn, count in items:
                    kernels.append(_math_kernel(kn, amp))
                    where.append((g, s, phase, count))
                    if g == 0:
                        launches[phase, s] += count
    times = np.zeros(len(kernels))
    by_mode: dict[str, list[int]] = {}
    for i, kn in enumerate(kernels):
        if kn.op_class in _GEMM_CLASSES:
            by_mode.setdefault("fp16" if amp else "tf32" if kn.op_class in tf32 else "fp32", []).append(i)
    other = [i for i, kn in enumerate(kernels) if kn.op_class not in _GEMM_CLASSES]
    for mode, gemm in by_mode.items():
        times[gemm] = model.predict_s([kernels[i] for i in gemm], gpu, mode, floor=STEP_FLOOR)
    if other:
        times[other] = model.predict_s([kernels[i] for i in other], gpu, "fp32", floor=STEP_FLOOR)
    per_shape = np.zeros((2, len(BATCH_GRID), len(shapes)))
    idx = np.asarray(where, dtype=float).reshape(-1, 4)
    np.add.at(per_shape, (idx[:, 2].astype(int), idx[:, 0].astype(int), idx[:, 1].astype(int)),
              times * idx[:, 3])
    launches_layer = launches @ per_layer
    return KernelTimes(per_shape[0] @ per_layer, per_shape[1] @ per_layer, float(launches_layer[0].sum()),
                       launches_layer[1])


def interpolate(grid_values: np.ndarray, batch: float) -> float:
    """Log-log interpolation of values tabled on :data:`BATCH_GRID` (linear extrapolation beyond)."""
    logs = np.log2(np.maximum(grid_values, 1e-12))
    x = math.log2(max(batch, 1.0))
    top = len(BATCH_GRID) - 1
    if x >= top:
        return float(grid_values[-1] * batch / BATCH_GRID[-1])
    i = int(x)
    frac = x - i
    return float(2.0 ** (logs[i] * (1.0 - frac) + logs[i + 1] * frac))


def step_kernel_s(times: KernelTimes, batch: float, freeze_level: int = 0, backward: bool = True) -> float:
    """Kernel seconds of forward (all layers) and backward (layers >= ``freeze_level``) at ``batch``."""
    per_grid = times.forward.sum(axis=1)
    if backward:
        per_grid = per_grid + times.backward[:, freeze_level:].sum(axis=1)
    return interpolate(per_grid, batch)


def roofline_step_s(model: str, dataset: str | None, batch_size: int, gpu: Any, amp: bool = False) -> float:
    """Sum of the graph's kernels (forward, backward) at ``gpu``'s (a catalog ``GpuType``) spec-sheet peak
    and bandwidth, nothing fitted: the plain roofline step."""
    from dltsched.predictors.steptime.kernels import kernel_gpu
    from dltsched.predictors.zoo.graphs import resolve

    model_id, ds = resolve(model, dataset)
    return step_kernel_s(kernel_times(KernelModel({}), model_id, ds, kernel_gpu(gpu), bool(amp)), batch_size)

"""Peak GPU memory of a training step, traced on the meta device (CPU only, no real memory): the shipped
``memory_trace.json`` that the memory predictors read without torch.

One SGD training step (zero the gradients, forward, backward, optimizer step) runs :data:`STEPS` times
under a dispatch mode that follows every storage the step allocates (a storage is freed when the last
tensor on it dies) and replays them through :class:`~.allocator.CachingAllocator`: the highest allocated
bytes of the last step are what ``torch.cuda.max_memory_allocated`` reports after warm-up, and the
allocator's reserve what NVML sees of the process beyond its CUDA context, both without the libraries'
own buffers (cuBLAS and cuDNN workspaces). Where eager CUDA runs another kernel than the meta device
would, the trace takes the CUDA one, for FP32 on a recent GPU:

- attention (``scaled_dot_product_attention``) runs the memory-efficient kernel (saves its output and the
  log-sum-exp, not the attention matrix);
- dropout is the fused kernel (saves a one-byte mask, not a float one);
- ``nn.LSTM``/``nn.GRU``/``nn.RNN`` are cuDNN's recurrent kernels: they save their input, output and a
  reserve of :data:`RNN_RESERVE_UNITS` hidden-size values per layer, direction, step and sample; the
  reserve's bytes are also kept apart (``rnn_reserve_bytes``) for a calibration to scale. Forward and
  backward each hold a transient workspace while they run: the input projection of every time step of one
  layer, :data:`RNN_WORKSPACE_GATES` hidden-size values per direction, step and sample (on an H200 it
  brings DeepSpeech2's traced peak to within 0.1% of ``max_memory_allocated``).

- a convolution whose input channels are not a multiple of :data:`CONV_CHANNEL_ALIGN` (the stem of an image
  or spectrogram model: 1 or 3 channels) holds a workspace of its lowered (im2col) input while it runs
  forward and while it computes its weight gradient: such inputs do not fit the implicit-GEMM kernels,
  and the H200 profiles read that much more reserve (DeepSpeech2 +1.5 GiB against its 41x11 stem's
  1.7 GiB lowered input, ResNet-50 +0.43 GiB against its 7x7 stem's 0.45 GiB) and nothing of it at the
  peak allocation (both run when little else is allocated). A hypothesis the two rows suggest, not a
  documented cuDNN rule.

Each (model, dataset) is traced at the batch sizes :data:`BATCHES`; a predictor interpolates linearly
(:func:`dltsched.predictors.zoo.memory.traced_bytes`). ``conv_col_bytes`` is the largest lowered
(im2col) input of a convolution in the step, a measure of the workspace a convolution may ask for.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from dltsched.predictors.zoo import nets_cnn, nets_gen_rl, nets_hf, nets_seq  # noqa: F401 - registers builders
from dltsched.predictors.zoo.allocator import CachingAllocator, rounded
from dltsched.predictors.zoo.memory import BATCHES, FORMAT_VERSION, trace_path
from dltsched.predictors.zoo.nets_base import BUILDERS, Built

#: hidden-size values cuDNN keeps per layer, direction, time step and sample for backward (gates and states)
RNN_RESERVE_UNITS = {"LSTM": 6, "GRU": 5, "RNN_TANH": 2, "RNN_RELU": 2}
#: hidden-size values per direction, time step and sample of the workspace cuDNN's recurrent kernels hold
#: while a layer runs forward or backward (the gates' input projections of every step)
RNN_WORKSPACE_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
#: input channels a convolution needs a multiple of to run without a lowered-input workspace
CONV_CHANNEL_ALIGN = 4
#: training steps traced: the allocator's reserve settles after the first two
STEPS = 3


class _Tracker(TorchDispatchMode):
    """Every storage the step allocates, replayed through the caching allocator; the highest live bytes
    since :meth:`reset`."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, Any] = {}
        self.allocator = CachingAllocator()
        self.peak = 0
        self.conv_col = 0
        self.rnn_reserve = 0

    def add(self, t: Any) -> None:
        if not isinstance(t, torch.Tensor):
            return
        storage = t.untyped_storage()
        key = storage._cdata
        if key not in self.live:
            self.live[key] = StorageWeakRef(storage)
            self.allocator.malloc(key, int(storage.nbytes()))

    def sweep(self) -> None:
        for key in [k for k, ref in self.live.items() if ref.expired()]:
            del self.live[key]
            self.allocator.free(key)

    def reset(self) -> None:
        self.sweep()
        self.peak = self.allocator.allocated

    def _convolution(self, args: Any, out: torch.Tensor) -> None:
        x, w, transposed = args[0], args[1], args[6]
        kernel = math.prod(w.shape[2:])
        pixels = (x.numel() // x.shape[1]) if transposed else (out.numel() // out.shape[1])
        col = pixels * w.shape[1] * kernel * x.element_size()
        self.conv_col = max(self.conv_col, col)
        if not transposed and x.shape[1] % CONV_CHANNEL_ALIGN:
            self._workspace(col)

    def _workspace(self, nbytes: int) -> None:
        """A buffer held while one kernel runs: allocated now, freed before the next op."""
        key = ("workspace", self.allocator.allocated)
        self.allocator.malloc(key, nbytes)
        self.peak = max(self.peak, self.allocator.allocated)
        self.allocator.free(key)

    def _convolution_backward(self, args: Any) -> None:
        grad_out, x, w, transposed, mask = args[0], args[1], args[2], args[7], args[10]
        if transposed or not mask[1] or not x.shape[1] % CONV_CHANNEL_ALIGN:
            return
        pixels = grad_out.numel() // grad_out.shape[1]
        self._workspace(pixels * w.shape[1] * math.prod(w.shape[2:]) * x.element_size())

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.sweep()  # what the autograd engine released before this op
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            self.add(t)
        self.peak = max(self.peak, self.allocator.allocated)
        if func is torch.ops.aten.convolution.default:  # the output first, then the kernel's workspace
            self._convolution(args, out)
        elif func is torch.ops.aten.convolution_backward.default:
            self._convolution_backward(args)
        return out


class _CudnnRnn(torch.autograd.Function):
    """Shapes and saved buffers of cuDNN's recurrent kernels (values are never computed)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, reserve_numel: int, hidden_numel: int, features: int,
                workspace_numel: int, *weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        workspace = x.new_empty(workspace_numel)  # noqa: F841 - held while the kernel runs
        out = x.new_empty(x.shape[0], x.shape[1], features)
        reserve = x.new_empty(reserve_numel)
        ctx.workspace_numel = workspace_numel
        ctx.save_for_backward(x, out, reserve, *weights)
        return out, x.new_empty(hidden_numel)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        x, _out, _reserve, *weights = ctx.saved_tensors
        workspace = x.new_empty(ctx.workspace_numel)
        out = (x.new_empty(x.shape), None, None, None, None, *(w.new_empty(w.shape) for w in weights))
        del workspace
        return out


def _make_rnn_forward(tracker: _Tracker) -> Any:
    def forward(self: Any, input: torch.Tensor, hx: Any = None) -> Any:
        x = input.transpose(0, 1) if self.batch_first else input
        steps, batch = x.shape[0], x.shape[1]
        dirs = 2 if self.bidirectional else 1
        reserve = self.num_layers * dirs * steps * batch * RNN_RESERVE_UNITS[self.mode] * self.hidden_size
        tracker.rnn_reserve += reserve * x.element_size()
        hidden = self.num_layers * dirs * batch * self.hidden_size
        workspace = dirs * steps * batch * RNN_WORKSPACE_GATES[self.mode] * self.hidden_size
        out, hy = _CudnnRnn.apply(x, reserve, hidden, dirs * self.hidden_size, workspace, *self._flat_weights)
        out = out.transpose(0, 1) if self.batch_first else out
        h = hy.view(self.num_layers * dirs, batch, self.hidden_size)
        return out, ((h, h) if self.mode == "LSTM" else h)

    return forward


def _efficient_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Any = None,
                         dropout_p: float = 0.0, is_causal: bool = False, scale: Any = None,
                         enable_gqa: bool = False) -> torch.Tensor:
    bias = attn_mask
    if bias is not None and bias.dtype == torch.bool:
        bias = torch.zeros_like(bias, dtype=q.dtype).masked_fill_(bias.logical_not(), float("-inf"))
    if bias is not None and bias.dim() == 4:
        bias = bias.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, bias, True, dropout_p, is_causal,
                                                                 scale=scale)[0]


def _fused_dropout(input: torch.Tensor, p: float = 0.5, training: bool = True,
                   inplace: bool = False) -> torch.Tensor:
    if not training or p == 0.0:
        return input
    return torch.native_dropout(input, p, True)[0]


@contextmanager
def _cuda_kernels(tracker: _Tracker) -> Iterator[None]:
    """The CUDA kernels' memory behaviour in place of the meta device's (module docstring)."""
    saved = (F.scaled_dot_product_attention, F.dropout, nn.LSTM.forward, nn.GRU.forward, nn.RNN.forward)
    rnn = _make_rnn_forward(tracker)
    F.scaled_dot_product_attention, F.dropout = _efficient_attention, _fused_dropout  # type: ignore[assignment]
    nn.LSTM.forward = nn.GRU.forward = nn.RNN.forward = rnn  # type: ignore[method-assign]
    try:
        yield
    finally:
        (F.scaled_dot_product_attention, F.dropout, nn.LSTM.forward, nn.GRU.forward,  # type: ignore[misc]
         nn.RNN.forward) = saved


def trace_built(built: Built, batch: int) -> dict[str, float]:
    """Bytes of one SGD training step of ``built`` (made on the meta device) at ``batch``: ``static_bytes``
    (parameters and buffers), ``peak_bytes`` (highest allocated bytes of the last step), ``reserved_bytes``
    (the caching allocator's reserve after :data:`STEPS` steps), ``rnn_reserve_bytes``, ``conv_col_bytes``."""
    tracker = _Tracker()
    with torch.device("meta"):
        inputs = built.make_inputs(batch)
    module = built.module.train()
    optimizer = torch.optim.SGD(module.parameters(), lr=1e-3)
    for t in (*module.parameters(), *module.buffers(), *inputs):
        tracker.add(t)
    static = sum(rounded(int(t.untyped_storage().nbytes()))
                 for t in (*module.parameters(), *module.buffers()))
    with warnings.catch_warnings(), _cuda_kernels(tracker):
        warnings.simplefilter("ignore")
        for _ in range(STEPS):  # the last step is the steady state (the first has no gradients to free)
            tracker.reset()
            tracker.rnn_reserve = 0
            with tracker:
                optimizer.zero_grad(set_to_none=True)
                module(*inputs).backward()
                optimizer.step()
    return {"static_bytes": float(static), "peak_bytes": float(tracker.peak),
            "reserved_bytes": float(tracker.allocator.peak_reserved),
            "rnn_reserve_bytes": float(tracker.rnn_reserve), "conv_col_bytes": float(tracker.conv_col)}


def trace_step(model: str, dataset: str, batch: int) -> dict[str, float]:
    """:func:`trace_built` of zoo ``model`` on ``dataset`` at ``batch``."""
    with torch.device("meta"):
        built = BUILDERS[model][0](dataset)
    return trace_built(built, batch)


def trace_model(model: str, batches: dict[str, list[int]] | None = None) -> dict[str, dict[str, list[Any]]]:
    """Every dataset of ``model`` traced at its batch sizes in ``batches`` (default :data:`BATCHES`):
    dataset -> field -> one value per batch (and ``batch`` where they are not :data:`BATCHES`)."""
    from dltsched.engine.domain.catalog import model_catalog

    out: dict[str, dict[str, list[Any]]] = {}
    for dataset in model_catalog().get(model).datasets:
        sizes = list((batches or {}).get(dataset, BATCHES))
        rows = [trace_step(model, dataset, b) for b in sizes]
        rec: dict[str, list[Any]] = {k: [float(f"{r[k]:.6g}") for r in rows] for k in rows[0]}
        out[dataset] = rec if sizes == list(BATCHES) else {"batch": sizes, **rec}
    return out


def _write(path: Path, models: dict[str, Any]) -> None:
    payload = {"format_version": FORMAT_VERSION, "batches": list(BATCHES),
               "models": dict(sorted(models.items()))}
    path.write_text(json.dumps(payload, separators=(",", ":")) + "\n")


def build_memory_trace(models: tuple[str, ...] = (), workers: int = 2, path: Path | None = None) -> str:
    """Trace ``models`` (default: every model with a builder) into the shipped file, each record at the batch
    sizes it already lists (:data:`BATCHES` for a new one), keeping the other models already there; the file
    is rewritten as each model is done."""
    from concurrent.futures import ProcessPoolExecutor

    path = path or trace_path()
    todo = models or tuple(BUILDERS)
    merged = json.loads(path.read_text())["models"] if path.is_file() else {}
    sizes = [{d: [int(b) for b in rec["batch"]] for d, rec in merged.get(m, {}).items() if "batch" in rec}
             for m in todo]
    if workers <= 1:
        for model, batches in zip(todo, sizes, strict=True):
            merged[model] = trace_model(model, batches)
            _write(path, merged)
        return str(path)
    with ProcessPoolExecutor(workers) as pool:
        for model, traced in zip(todo, pool.map(trace_model, todo, sizes), strict=True):
            merged[model] = traced
            _write(path, merged)
    return str(path)


def add_batches(models: tuple[str, ...], batches: tuple[int, ...], path: Path | None = None) -> str:
    """Trace ``models`` (already in the shipped file) at ``batches`` too and merge the points into their
    records (``batch`` lists each record's batch sizes); a batch size a model cannot train at is left out."""
    path = path or trace_path()
    merged = json.loads(path.read_text())["models"]
    for model in models:
        for dataset, rec in merged[model].items():
            points = dict(zip(rec.get("batch", BATCHES), ({k: rec[k][i] for k in rec if k != "batch"}
                                                          for i in range(len(rec["peak_bytes"]))),
                              strict=True))
            for b in batches:
                if b in points:
                    continue
                try:
                    traced = trace_step(model, dataset, b)
                except ValueError:  # a batch the model cannot train at (batch norm over one sample)
                    continue
                points[b] = {k: float(f"{v:.6g}") for k, v in traced.items()}
            order = sorted(points)
            merged[model][dataset] = {"batch": order, **{k: [points[b][k] for b in order]
                                                         for k in points[order[0]]}}
        _write(path, merged)
    return str(path)

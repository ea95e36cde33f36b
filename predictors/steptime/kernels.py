"""Operator-level kernel-time model (NeuSight-style), bounded by the roofline.

Per op class (:data:`OP_CLASSES`) the time of one kernel is

    t = floor + t_roof * exp(max(log r_min, f(x)))    t_roof = max(flops / peak, bytes / bandwidth)

where ``t_roof`` is the roofline time on the GPU's spec sheet, ``r_min`` is 1 (a prediction can never
be faster than physics) except for convolutions, whose bound is the roofline at Winograd's
F(2x2, 3x3) multiplication count (2.25x fewer than direct: cuDNN picks Winograd for most 3x3
convolutions, and measured kernels run up to 2.24x faster than the direct-FLOP roofline), and ``f``
is a small gradient-boosted tree ensemble over GPU-normalised features (:data:`CLASS_FEATURES`):
waves of output tiles over the SMs and the tail wave's occupancy, the op's own dimensions, and for
GEMMs the log roofline time, the op's intensity against the GPU's ridge point and how well the
output fills its tiles. ``floor`` is the per-call cost of the measurement (launch and timing; 24 to
58 us in NeuSight's data, by GPU host and op class) taken as the lowest over the GPUs fitted on
(:data:`FLOOR_STATISTIC`);
``f`` is learned on the time above that floor (NeuSight's microbenchmarks, five GPUs, plus the
kernels timed inside whole models by NeuSight's traces, above their own 10 us floor:
:func:`neusight.trace_kernel_samples`) with scikit-learn and shipped as plain arrays
(:data:`KERNEL_MODEL_FILE`); prediction needs numpy only. Whole steps (:mod:`opgraph`) use the
kernel body without the floor: kernels of a training step are queued asynchronously, and the host's
per-launch cost is a term of its own there.

Math modes: FP32 on CUDA cores by default; ``math="tf32"`` (Ampere and later; cuDNN's default for
convolutions) and ``math="fp16"`` (tensor cores with AMP) swap the compute peak for the tensor-core
one and halve the bytes for fp16. NeuSight's kernels are FP32 (their A100 kernels are ``sgemm`` and
``scudnn``), so only the FP32 path is validated on measured kernels.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from dltsched.engine.domain.errors import ValidationError

KERNEL_MODEL_FILE = "kernel_model.json"
KERNEL_FORMAT_VERSION = 2
#: op class -> NeuSight kernel folders measured for it
OP_CLASSES: dict[str, tuple[str, ...]] = {
    "bmm": ("bmm",), "linear": ("linear",), "conv": ("conv",),
    "elementwise": ("add", "addu", "mul", "mulu", "div", "divu", "pow", "powu", "gelu", "relu", "tanh"),
    "softmax": ("softmax",), "layernorm": ("ln",),
}
#: element-wise ops reading two tensors (the others read one tensor and a scalar)
BINARY_OPS = frozenset({"add", "mul", "div", "pow"})
#: element-wise ops with a transcendental or multi-instruction body
HEAVY_OPS = frozenset({"pow", "powu", "gelu", "tanh", "div", "divu"})
#: output tile edge used to count waves of thread blocks (a typical GEMM/implicit-GEMM tile)
TILE = 128
#: NeuSight device-config file name (GPU label in the kernel CSVs) for each GPU measured
NEUSIGHT_GPUS = {"Tesla P100-PCIE-16GB": "p100", "Tesla P4": "p4", "Tesla T4": "t4",
                 "Tesla V100-PCIE-32GB": "v100-pcie-32gb", "NVIDIA A100-PCIE-40GB": "a100-pcie-40gb",
                 "NVIDIA A100 80GB PCIe": "a100-pcie-80gb"}
#: SM counts where NeuSight's device config is wrong: the Tesla P4 (GP104) has 20 SMs of 128 FP32 cores, its
#: config lists 40 of 64 (grid blocks / "Blocks per SM" in NeuSight's own P4 kernel rows give 20; so does the
#: catalog). Waves of tiles over the SMs were off by 2x on P4 without it.
NEUSIGHT_SM_COUNT = {"Tesla P4": 20}
MATH_MODES = ("fp32", "tf32", "fp16")
#: op classes timed on the math mode's peak (the others run FP32 CUDA-core code)
GEMM_CLASSES = frozenset({"bmm", "linear", "conv"})


def gpu_family(gpu_id: str) -> str:
    """GPUs held out together (NeuSight measured convolutions on an A100-80GB, the rest on an A100-40GB)."""
    return "a100" if gpu_id.startswith("a100") else gpu_id


@dataclass(frozen=True, slots=True)
class KernelGpu:
    """What the kernel model needs of a GPU: SMs, FP32 / TF32 / FP16 tensor peaks (TFLOPS) and DRAM bandwidth
    (GB/s)."""

    id: str
    sm_count: int
    fp32_tflops: float
    memory_bandwidth_gbs: float
    tf32_tflops: float = 0.0
    fp16_tflops: float = 0.0
    l2_mib: float = 6.0

    def peak_flops(self, math_mode: str) -> float:
        """Peak FLOP/s in ``math_mode`` (``fp32``, ``tf32`` or ``fp16``; a GPU without the tensor mode
        falls back to FP32); another mode raises :class:`ValidationError`."""
        if math_mode not in MATH_MODES:
            raise ValidationError("math", f"{math_mode!r} not understood; one of {', '.join(MATH_MODES)}")
        tflops = {"fp32": self.fp32_tflops, "tf32": self.tf32_tflops or self.fp32_tflops,
                  "fp16": self.fp16_tflops or self.fp32_tflops}[math_mode]
        return tflops * 1e12


#: architectures whose tensor cores run TF32 (at half their FP16 dense rate)
TF32_ARCHITECTURES = frozenset({"ampere", "ada", "hopper", "blackwell"})


#: L2 cache (MiB) of catalog GPUs (vendor whitepapers); others get :data:`DEFAULT_L2_MIB`
L2_MIB = {"k80": 1.5, "m40": 3, "p100": 4, "p4": 2, "gtx1080ti": 2.75, "titanxp": 3, "v100": 6,
          "v100-32gb": 6,
          "v100-pcie": 6, "v100-pcie-32gb": 6, "t4": 4, "rtx2080ti": 5.5, "rtx6000": 6, "rtx3090": 6,
          "a10": 6, "a40": 6, "rtx4090": 72, "l4": 48, "a100-40gb": 40, "a100-80gb": 40, "a100-pcie-40gb": 40,
          "a100-pcie-80gb": 40, "h100": 50, "h100-pcie": 50, "h200": 50}
DEFAULT_L2_MIB = 6.0


def kernel_gpu(gpu: Any) -> KernelGpu:
    """The :class:`KernelGpu` of a catalog :class:`~dltsched.engine.domain.model.GpuType`."""
    tf32 = gpu.fp16_tensor_tflops / 2.0 if gpu.architecture in TF32_ARCHITECTURES else 0.0
    return KernelGpu(gpu.id, int(gpu.sm_count), float(gpu.fp32_tflops), float(gpu.memory_bandwidth_gbs), tf32,
                     float(gpu.fp16_tensor_tflops), L2_MIB.get(gpu.id, DEFAULT_L2_MIB))


@dataclass(frozen=True, slots=True)
class Kernel:
    """One kernel: op class, op name (element-wise kind), FLOPs, DRAM bytes and its GEMM view
    (``batch`` independent ``m x n`` outputs with reduction depth ``k``; element-wise ops: ``m`` rows of
    ``n``)."""

    op_class: str
    op: str
    flops: float
    bytes: float
    batch: float
    m: float
    n: float
    k: float


def gemm_kernel(op_class: str, b: float, m: float, n: float, k: float, elem_bytes: float = 4.0) -> Kernel:
    """Batched GEMM ``b x (m x k) @ (k x n)``."""
    shared_weight = op_class == "linear"
    w = k * n * (1 if shared_weight else b)
    return Kernel(op_class, op_class, 2.0 * b * m * n * k,
                  elem_bytes * (b * m * k + w + b * m * n), b, m, n, k)


def conv_kernel(b: float, cin: float, cout: float, ksize: float, size: float, stride: float, pad: float,
                elem_bytes: float = 4.0) -> Kernel:
    """2-D convolution of square ``size`` inputs and ``ksize`` kernels, as implicit GEMM
    (``m`` = output pixels, ``n`` = output channels, ``k`` = ``cin * ksize^2``)."""
    out = max(1.0, math.floor((size + 2 * pad - ksize) / stride) + 1)
    m, n, k = b * out * out, cout, cin * ksize * ksize
    io = b * cin * size * size + cout * k + m * n
    return Kernel("conv", "conv", 2.0 * m * n * k, elem_bytes * io, 1.0, m, n, k)


def vector_kernel(op_class: str, op: str, rows: float, cols: float, elem_bytes: float = 4.0) -> Kernel:
    """Element-wise, softmax or layer norm over ``rows x cols`` (reads inputs once, writes once)."""
    n = rows * cols
    tensors = 3.0 if op in BINARY_OPS else 2.0
    flops = n * (8.0 if op_class != "elementwise" or op in HEAVY_OPS else 1.0)
    return Kernel(op_class, op, flops, elem_bytes * tensors * n, 1.0, rows, cols, 1.0)


def roofline_s(kernel: Kernel, gpu: KernelGpu, math_mode: str = "fp32") -> tuple[float, float]:
    """Compute and memory time of ``kernel`` at the spec sheet's peak (seconds)."""
    mode = math_mode if kernel.op_class in ("bmm", "linear", "conv") else "fp32"
    return kernel.flops / gpu.peak_flops(mode), kernel.bytes / (gpu.memory_bandwidth_gbs * 1e9)


FEATURES = ("log_t_roof", "log_ridge_ratio", "log_waves", "tail_occupancy", "log_m", "log_n", "log_k",
            "log_batch", "binary", "heavy", "log_bytes_per_l2", "log_flops",
            # the GPU's own spec sheet, beyond its peaks (per-SM resources)
            "log_l2_per_sm", "log_bw_per_sm", "log_sm",
            # waves and tail occupancy of 64 x 64 tiles (smaller problems get smaller tiles from cuBLAS)
            "log_waves_64", "tail_occupancy_64", "log_k_per_tile",
            # share of the padded output tiles' area that is the output (1: the shape tiles exactly)
            "tile_fill", "tile_fill_64",
            # NeuSight's normalisation: one output tile's compute and memory time at the per-SM peaks
            "log_tile_compute", "log_tile_memory")
#: features of the op's shape and its launch over the SMs only (no roofline time, no L2 fit)
SHAPE_FEATURES = ("log_waves", "tail_occupancy", "log_m", "log_n", "log_k", "log_batch", "binary", "heavy",
                  "log_flops")
#: features per op class, chosen by leave-one-GPU-out on NeuSight's kernels (``predict eval-kernels``):
#: without the absolute roofline time and the L2 fit the vector classes extrapolate to GPUs outside the
#: training range (A100's 40 MiB L2) far better (softmax 20.4 -> 18.3%, layer norm 16.1 -> 12.3%,
#: element-wise 18.1 -> 16.2%, convolutions 22.7 -> 22.3%); the GEMMs keep them (linear 24.6 -> 28.8% without)
#: GEMMs also see how well their output tiles the shape (``tile_fill``: the models' aligned shapes tile
#: exactly where NeuSight's random shapes waste part of a tile row; NeuSight labels 18.1 -> 17.0%)
_FILL = ("tile_fill", "tile_fill_64")
CLASS_FEATURES: dict[str, tuple[str, ...]] = {"bmm": FEATURES[:12] + _FILL, "linear": FEATURES[:12] + _FILL,
                                              "conv": SHAPE_FEATURES + _FILL,
                                              "elementwise": SHAPE_FEATURES, "softmax": SHAPE_FEATURES,
                                              "layernorm": SHAPE_FEATURES}
#: fastest prediction per op class as a fraction of the roofline time (convolutions: Winograd F(2x2, 3x3))
MIN_ROOFLINE_RATIO = {"conv": 1.0 / 2.25}
#: percentile of a GPU's measured latencies of an op class taken as its per-call floor
FLOOR_PERCENTILE = 1.0
#: how the model's per-call floor of an op class is drawn from the fitted GPUs' floors: the lowest. The floor
#: is the host's launch-and-timing cost (P100's and V100's hosts add 5-25 us to the others') and no spec
#: sheet tells it, so the fastest host seen stands for an unseen GPU. Chosen by an inner leave-one-GPU-out
#: over the four fitted GPUs (lowest, median, 25th percentile, geometric mean: the lowest in 27 of 30 folds;
#: ``scripts/kernel_variants.py --inner-floor``); held out (``predict eval-kernels``), element-wise
#: 16.1 -> 13.6%, softmax 19.8 -> 16.8%, conv 22.4 -> 20.6%, linear 24.0 -> 23.7%, layer norm 12.2 -> 12.0%,
#: bmm 23.8 -> 23.7% (``scripts/kernel_variants.py --floor=median`` gives the old figures)
FLOOR_STATISTIC = "min"
FLOOR_STATISTICS = {"min": np.min, "median": np.median}
#: the part above the floor is counted as at least this fraction of the measured latency
MIN_ABOVE_FLOOR = 0.05


def _arrays(kernels: Sequence[Kernel]) -> dict[str, np.ndarray]:
    cols = np.array([(kn.flops, kn.bytes, kn.batch, kn.m, kn.n, kn.k, kn.op in BINARY_OPS, kn.op in HEAVY_OPS,
                      kn.op_class in GEMM_CLASSES) for kn in kernels], dtype=float).reshape(len(kernels), 9)
    return dict(zip(("flops", "bytes", "batch", "m", "n",
                     "k", "binary", "heavy", "gemm"), cols.T, strict=True))


def _roofline_arrays(a: dict[str, np.ndarray], gpu: KernelGpu,
                     math_mode: str) -> tuple[np.ndarray, np.ndarray]:
    peak = np.where(a["gemm"] > 0, gpu.peak_flops(math_mode), gpu.peak_flops("fp32"))
    return a["flops"] / peak, a["bytes"] / (gpu.memory_bandwidth_gbs * 1e9)


def features(kernels: Sequence[Kernel], gpu: KernelGpu, math_mode: str = "fp32") -> np.ndarray:
    """Feature matrix (:data:`FEATURES`) of ``kernels`` on ``gpu`` (vectorised)."""
    if not kernels:
        return np.zeros((0, len(FEATURES)))
    return _features(_arrays(kernels), gpu, math_mode)


def _fill(x: np.ndarray, tile: float) -> np.ndarray:
    """Share of ``ceil(x / tile)`` tiles that ``x`` fills."""
    return x / (np.ceil(x / tile) * tile)


def _features(a: dict[str, np.ndarray], gpu: KernelGpu, math_mode: str) -> np.ndarray:
    tc, tm = _roofline_arrays(a, gpu, math_mode)
    gemm_tiles = a["batch"] * np.ceil(a["m"] / TILE) * np.ceil(a["n"] / TILE)
    vector_tiles = np.ceil(a["m"] * a["n"] / (TILE * 32))  # 128-thread blocks of 32 elements
    tiles = np.where(a["gemm"] > 0, gemm_tiles, vector_tiles)
    waves = tiles / gpu.sm_count
    tail = tiles / (np.ceil(waves) * gpu.sm_count)
    peak_per_sm = gpu.peak_flops(math_mode) / gpu.sm_count
    tiles64 = np.where(a["gemm"] > 0, a["batch"] * np.ceil(a["m"] / 64) * np.ceil(a["n"] / 64),
                       np.ceil(a["m"] * a["n"] / (64 * 32)))
    waves64 = tiles64 / gpu.sm_count
    tail64 = tiles64 / (np.ceil(waves64) * gpu.sm_count)
    return np.column_stack([np.log10(np.maximum(tc, tm)),
                            np.log10(np.maximum(tc, 1e-15) / np.maximum(tm, 1e-15)), np.log10(waves), tail,
                            np.log10(a["m"]), np.log10(a["n"]), np.log10(a["k"]), np.log10(a["batch"]),
                            a["binary"], a["heavy"],
                            # L2 fit only for vector kernels: GEMMs tile through shared memory
                            # (leave-one-GPU-out
                            # linear 28.3 -> 25.7%, bmm 25.1 -> 24.5% without it)
                            np.where(a["gemm"] > 0, 0.0, np.log10(a["bytes"] / (gpu.l2_mib * 1048576.0))),
                            np.log10(np.maximum(a["flops"], 1.0)),
                            *(np.full(len(tc), v) for v in (
                                math.log10(gpu.l2_mib / gpu.sm_count),
                                math.log10(gpu.memory_bandwidth_gbs / gpu.sm_count),
                                math.log10(gpu.sm_count))),
                            np.log10(waves64), tail64, np.log10(a["k"] / TILE),
                            _fill(a["m"], TILE) * _fill(a["n"], TILE), _fill(a["m"], 64) * _fill(a["n"], 64),
                            np.log10(2.0 * TILE * TILE * a["k"] / (peak_per_sm)),
                            np.log10(4.0 * (TILE * TILE + 2.0 * TILE * a["k"])
                                     / (gpu.memory_bandwidth_gbs * 1e9 / gpu.sm_count))])


# ----------------------------------------------------------------------------------------------
# The shipped model: one tree ensemble per op class, as arrays


@dataclass(frozen=True)
class TreeEnsemble:
    """A gradient-boosted regression tree ensemble exported from scikit-learn (numpy evaluation)."""

    init: float
    rate: float
    feature: np.ndarray  # (trees, nodes); -2 at leaves
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The ensemble's prediction for each row of the feature matrix ``x``."""
        n = x.shape[0]
        out = np.full(n, self.init)
        rows = np.arange(n)
        for t in range(self.feature.shape[0]):
            node = np.zeros(n, dtype=np.int64)
            feat, thr, left, right = self.feature[t], self.threshold[t], self.left[t], self.right[t]
            while True:
                f = feat[node]
                inner = f >= 0
                if not inner.any():
                    break
                go_left = x[rows, np.where(inner, f, 0)] <= thr[node]
                node = np.where(inner, np.where(go_left, left[node], right[node]), node)
            out += self.rate * self.value[t][node]
        return out

    def to_json(self) -> dict[str, Any]:
        """The ensemble as the kernel model file stores it."""
        return {"init": self.init, "rate": self.rate, "feature": self.feature.tolist(),
                "threshold": self.threshold.tolist(), "left": self.left.tolist(),
                "right": self.right.tolist(), "value": np.round(self.value, 6).tolist()}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> TreeEnsemble:
        """The ensemble of a kernel model file's entry ``raw`` (the inverse of :meth:`to_json`)."""
        return cls(float(raw["init"]), float(raw["rate"]), np.asarray(raw["feature"], dtype=np.int64),
                   np.asarray(raw["threshold"], dtype=float), np.asarray(raw["left"], dtype=np.int64),
                   np.asarray(raw["right"], dtype=np.int64), np.asarray(raw["value"], dtype=float))


#: tree-ensemble settings (small: it must generalise to GPUs it has not seen)
GBM_PARAMS: dict[str, Any] = {"max_iter": 120, "max_depth": 5, "learning_rate": 0.08, "min_samples_leaf": 40,
                              "loss": "squared_error", "early_stopping": False, "random_state": 0}


def fit_ensemble(x: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None,
                 **overrides: Any) -> TreeEnsemble:
    """Fit ``y = log(t / t_roof)`` on features ``x`` (scikit-learn's histogram GBM with :data:`GBM_PARAMS`
    and ``overrides``; rows weighted by ``sample_weight``) and export the trees."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):  # small fits: threads only contend
        gbm = HistGradientBoostingRegressor(**(GBM_PARAMS | overrides)).fit(x, y, sample_weight=sample_weight)
    trees = [p[0].nodes for p in gbm._predictors]  # noqa: SLF001 - the fitted trees, exported as arrays
    width = max(len(t) for t in trees)

    def pad(get: Any, fill: float) -> np.ndarray:
        out = np.full((len(trees), width), fill)
        for i, t in enumerate(trees):
            out[i, : len(t)] = get(t)
        return out

    feature = pad(lambda t: np.where(t["is_leaf"], -2, t["feature_idx"]), -2).astype(np.int64)
    init = float(np.asarray(gbm._baseline_prediction).ravel()[0])  # noqa: SLF001
    return TreeEnsemble(init, 1.0, feature, pad(lambda t: t["num_threshold"], 0.0),
                        pad(lambda t: t["left"], 0).astype(np.int64),
                        pad(lambda t: t["right"], 0).astype(np.int64),
                        pad(lambda t: t["value"], 0.0))


@dataclass(frozen=True)
class KernelModel:
    """Per-op-class tree ensembles, the features each uses and the per-call floor of the measurements;
    :meth:`predict_s` is bounded below by :func:`lower_bound_s`."""

    ensembles: dict[str, TreeEnsemble]
    fitted_on: tuple[str, ...] = ()
    floor_s: dict[str, float] = field(default_factory=dict)
    class_features: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def predict_s(self, kernels: Sequence[Kernel], gpu: KernelGpu, math_mode: str = "fp32",
                  floor: bool = True) -> np.ndarray:
        """Predicted seconds of each kernel (never below :func:`lower_bound_s`); ``floor=False`` leaves
        out the measurement's per-call floor (the kernel body alone, as queued in a training step)."""
        out = np.zeros(len(kernels))
        by_class: dict[str, list[int]] = {}
        for i, kn in enumerate(kernels):
            by_class.setdefault(kn.op_class, []).append(i)
        for cls, idx in by_class.items():
            a = _arrays([kernels[i] for i in idx])
            roof = np.maximum(*_roofline_arrays(a, gpu, math_mode))
            ens = self.ensembles.get(cls)
            low = math.log(MIN_ROOFLINE_RATIO.get(cls, 1.0))
            if ens is None:
                slow = np.zeros(len(idx))
            else:
                cols = [FEATURES.index(f) for f in self.class_features.get(cls, FEATURES)]
                slow = np.maximum(ens.predict(_features(a, gpu, math_mode)[:, cols]), low)
            out[idx] = roof * np.exp(slow) + (self.floor_s.get(cls, 0.0) if floor else 0.0)
        return out

    def to_json(self) -> dict[str, Any]:
        """The model as the kernel model file stores it, with its format version and fit settings."""
        return {"format_version": KERNEL_FORMAT_VERSION, "fitted_on": list(self.fitted_on),
                "features": {k: list(self.class_features.get(k, FEATURES)) for k in self.ensembles},
                "floor_s": self.floor_s, "min_roofline_ratio": MIN_ROOFLINE_RATIO,
                "gbm": {k: v for k, v in GBM_PARAMS.items() if k != "random_state"},
                "ensembles": {k: v.to_json() for k, v in self.ensembles.items()}}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> KernelModel:
        """The model of a kernel model file's content ``raw``; another format version raises
        :class:`ValidationError` (refit it)."""
        if raw.get("format_version") != KERNEL_FORMAT_VERSION:
            raise ValidationError("kernel_model", f"format_version {raw.get('format_version')}; expected "
                                                  f"{KERNEL_FORMAT_VERSION}: rerun 'dltsched predict "
                                                  "fit-kernels'")
        return cls({k: TreeEnsemble.from_json(v) for k, v in raw["ensembles"].items()},
                   tuple(raw["fitted_on"]), {k: float(v) for k, v in raw["floor_s"].items()},
                   {k: tuple(v) for k, v in raw["features"].items()})


def lower_bound_s(kernel: Kernel, gpu: KernelGpu, math_mode: str = "fp32") -> float:
    """The fastest a kernel model may predict: the roofline time (convolutions: at Winograd's
    multiplication count, :data:`MIN_ROOFLINE_RATIO`)."""
    return max(roofline_s(kernel, gpu, math_mode)) * MIN_ROOFLINE_RATIO.get(kernel.op_class, 1.0)


def kernel_model_path() -> Path:
    """Path of the packaged kernel model file."""
    return Path(str(resources.files("dltsched.predictors.steptime").joinpath(KERNEL_MODEL_FILE)))


@cache
def load_kernel_model(path: str | None = None) -> KernelModel:
    """The shipped kernel model (or one written by ``dltsched predict fit-kernels --output``)."""
    return KernelModel.from_json(json.loads(Path(path or kernel_model_path()).read_text()))


# ----------------------------------------------------------------------------------------------
# NeuSight's kernel measurements


@dataclass(frozen=True, slots=True)
class KernelSample:
    """One measured kernel; ``floor_s``: the per-call cost of its measurement where it is not that of
    NeuSight's microbenchmarks (None: the microbenchmarks' floor of its op class and GPU)."""

    gpu: str
    kernel: Kernel
    latency_s: float
    floor_s: float | None = None


def neusight_gpus(data_dir: str | os.PathLike[str] | None = None) -> dict[str, KernelGpu]:
    """NeuSight's device configs (GPU label -> specs). Tensor peaks are not in them (FP32 data only)."""
    from dltsched.instances.datadir import data_file

    out = {}
    for path in sorted(data_file("neusight", "device_configs", data_dir=data_dir).glob("*.json")):
        raw = json.loads(path.read_text())
        gpu_id = NEUSIGHT_GPUS.get(raw["Device"], path.stem.lower())
        out[raw["Device"]] = KernelGpu(gpu_id, NEUSIGHT_SM_COUNT.get(raw["Device"], int(raw["Num_Sm"])),
                                       float(raw["SingleFLOPs"]) / 1e3, float(raw["Mem_Bw"]),
                                       l2_mib=float(raw["L2Cache"]))
    return out


def _kernel_of(op: str, row: dict[str, str]) -> Kernel:
    if op in ("bmm", "linear"):
        return gemm_kernel(op, *(float(row[c]) for c in "BMNK"))
    if op == "conv":
        return conv_kernel(*(float(row[c]) for c in ("B", "Input_Channel", "Output_Channel", "Kernel_Szie",
                                                     "Input_Size", "Stride", "Padding")))
    cls = "softmax" if op == "softmax" else "layernorm" if op == "ln" else "elementwise"
    return vector_kernel(cls, op, float(row["B"]), float(row["H"]))


def neusight_kernels(data_dir: str | os.PathLike[str] | None = None,
                     op_classes: Iterable[str] = tuple(OP_CLASSES)) -> list[KernelSample]:
    """Every single-kernel latency of NeuSight's microbenchmarks (``collect/<op>/p2.1.0/<GPU>.csv``)."""
    from dltsched.instances.datadir import data_file

    gpus = neusight_gpus(data_dir)
    base = data_file("neusight", "kernels", "collect", data_dir=data_dir)
    out = []
    for cls in op_classes:
        for op in OP_CLASSES[cls]:
            for path in sorted((base / op / "p2.1.0").glob("*.csv")):
                with path.open(newline="") as fh:
                    for row in csv.DictReader(fh):
                        latency = float(row["Latency"])
                        if latency > 0:
                            out.append(KernelSample(gpus[row["Device"]].id,
                                                    _kernel_of(op, row), latency * 1e-3))
    return out


#: most training kernels per op class and GPU (a seeded random subset; keeps fits to seconds)
MAX_TRAIN_PER_GPU = 2500


def _subsample(rows: list[KernelSample], cap: int) -> list[KernelSample]:
    out = []
    rng = np.random.default_rng(0)
    for gpu_id in sorted({s.gpu for s in rows}):
        mine = [s for s in rows if s.gpu == gpu_id]
        keep = sorted(rng.choice(len(mine), size=min(cap, len(mine)), replace=False))
        out.extend(mine[i] for i in keep)
    return out


def floors(samples: Sequence[KernelSample]) -> dict[tuple[str, str], float]:
    """Per (op class, GPU): the :data:`FLOOR_PERCENTILE` percentile of its measured latencies."""
    groups: dict[tuple[str, str], list[float]] = {}
    for s in samples:
        groups.setdefault((s.kernel.op_class, s.gpu), []).append(s.latency_s)
    return {k: float(np.percentile(v, FLOOR_PERCENTILE)) for k, v in groups.items()}


def fit(samples: Sequence[KernelSample], gpus: dict[str, KernelGpu],
        max_per_gpu: int = MAX_TRAIN_PER_GPU, extra: Sequence[KernelSample] = (),
        extra_weight: float = 1.0) -> KernelModel:
    """One tree ensemble per op class on ``log((measured - floor) / roofline)`` over the class's
    :data:`CLASS_FEATURES`; the model's floor per class is the lowest of the GPUs' floors
    (:data:`FLOOR_STATISTIC`).

    ``extra`` (kernels measured inside whole models: :func:`neusight.trace_kernel_samples`) join every
    class's rows after the subsampling, each weighing ``extra_weight`` rows, with their own floor."""
    ensembles, floor_by = {}, {}
    per_gpu_floor = floors(samples)
    for cls in OP_CLASSES:
        rows = _subsample([s for s in samples if s.kernel.op_class == cls], max_per_gpu)
        if not rows:
            continue
        n_bench = len(rows)
        rows += [s for s in extra if s.kernel.op_class == cls and s.gpu in gpus]
        cols = [FEATURES.index(f) for f in CLASS_FEATURES[cls]]
        x = np.zeros((len(rows), len(cols)))
        for gpu_id in {s.gpu for s in rows}:
            idx = [i for i, s in enumerate(rows) if s.gpu == gpu_id]
            x[idx] = features([rows[i].kernel for i in idx], gpus[gpu_id])[:, cols]
        roof = np.array([max(roofline_s(s.kernel, gpus[s.gpu])) for s in rows])
        lat = np.array([s.latency_s for s in rows])
        floor = np.array([per_gpu_floor[(cls, s.gpu)] if s.floor_s is None else s.floor_s for s in rows])
        y = np.log(np.maximum(lat - floor, MIN_ABOVE_FLOOR * lat) / roof)
        weight = np.where(np.arange(len(rows)) < n_bench, 1.0, extra_weight)
        ensembles[cls] = fit_ensemble(x, y, weight if len(rows) > n_bench else None)
        floor_by[cls] = float(FLOOR_STATISTICS[FLOOR_STATISTIC]([v for (c, _g), v in per_gpu_floor.items()
                                                                  if c == cls]))
    return KernelModel(ensembles, tuple(sorted({s.gpu for s in samples})), floor_by,
                       {cls: CLASS_FEATURES[cls] for cls in ensembles})


def _score(table: dict[str, dict[str, Any]], cls: str, held: str, model: KernelModel,
           by_id: dict[str, KernelGpu], test: Sequence[KernelSample], train: Sequence[KernelSample]) -> None:
    y = np.array([s.latency_s for s in test])
    pred = model.predict_s([s.kernel for s in test], by_id[held])
    roof = np.array([max(roofline_s(s.kernel, by_id[held])) for s in test])
    eff = float(np.median([max(roofline_s(s.kernel, by_id[s.gpu])) / s.latency_s for s in train]))
    entry = table.setdefault(cls, {"per_gpu": {}, "apes": [], "roof_apes": [], "eff_apes": []})
    apes, roof_apes = np.abs(pred - y) / y * 100.0, np.abs(roof - y) / y * 100.0
    eff_apes = np.abs(roof / eff - y) / y * 100.0
    entry["per_gpu"][held] = {"n": len(test), "mape": float(apes.mean()),
                              "roofline_mape": float(roof_apes.mean()),
                              "efficiency_mape": float(eff_apes.mean()),
                              "median_ratio": float(np.median(pred / y))}
    entry["apes"].extend(apes)
    entry["roof_apes"].extend(roof_apes)
    entry["eff_apes"].extend(eff_apes)


def leave_one_gpu_out(samples: Sequence[KernelSample], gpus: dict[str, KernelGpu],
                      models: dict[str, KernelModel] | None = None, extra: Sequence[KernelSample] = (),
                      extra_weight: float = 1.0) -> dict[str, Any]:
    """Per op class and held-out GPU: MAPE of the kernel model fitted on the other GPUs, of the plain
    roofline, and of the roofline times one efficiency per class (median fitted on the other GPUs).

    ``models``, when given, receives the model fitted without each GPU (keyed by that GPU).
    The held-out GPU enters only through its spec sheet (SMs, peaks, bandwidth, L2); ``extra`` kernels
    (:func:`fit`) of the other GPUs join each fit, never those of the held-out GPU, and are not scored.
    """
    by_id = {g.id: g for g in gpus.values()}
    table: dict[str, dict[str, Any]] = {}
    for family in sorted({gpu_family(s.gpu) for s in samples}):
        train = [s for s in samples if gpu_family(s.gpu) != family]
        model = fit(train, by_id, extra=[s for s in extra if gpu_family(s.gpu) != family],
                    extra_weight=extra_weight)
        for held in sorted({s.gpu for s in samples if gpu_family(s.gpu) == family}):
            if models is not None:
                models[held] = model
            for cls in OP_CLASSES:
                test = [s for s in samples if s.gpu == held and s.kernel.op_class == cls]
                if test:
                    _score(table, cls, held, model, by_id, test,
                           [s for s in train if s.kernel.op_class == cls])
    out = {}
    for cls, e in table.items():
        out[cls] = {"n": len(e["apes"]), "mape": float(np.mean(e["apes"])),
                    "p90_ape": float(np.percentile(e["apes"], 90)),
                    "roofline_mape": float(np.mean(e["roof_apes"])),
                    "efficiency_mape": float(np.mean(e["eff_apes"])), "per_gpu": e["per_gpu"]}
    return out

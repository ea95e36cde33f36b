"""DeletePop-style operator-level step-time and memory predictor (no torch at prediction time).

One training iteration on one GPU is the sum over operators of computation time (FLOPs over the
achievable peak of the op class and precision), memory-access time (bytes over achievable
bandwidth) and kernel launches, plus the optimizer step (parameter traffic), a fixed per-step
framework overhead and, for calibrated models, a host term of the model's input pipeline
(``per_step_s + per_sample_s * batch``, scaled by the host-speed factor of the GPU's machines).
The frozen prefix (layers < freeze level) skips its backward and optimizer update. Data-parallel
jobs add the exposed all-reduce time of the trainable gradients: fitted shares of a ring
all-reduce and of a shared-bus transfer (see :func:`comm_features`). Coefficients (inverse
efficiencies, host and communication terms) come from ``factors.json`` (``dltsched predict
calibrate-steptime``); ``job.batch_size`` is the batch of one GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from dltsched.engine.domain import GpuType, Job
from dltsched.engine.errors import DltschedError, ValidationError
from dltsched.predictors.steptime.aggregates import COMPUTE_CLASSES, Aggregates, aggregates
from dltsched.predictors.zoo.graphs import resolve

_MIB = 1024.0 * 1024.0
FEATURES = (*COMPUTE_CLASSES, "memory", "optimizer", "launch", "overhead")
FACTORS_FILE = "factors.json"
COMM_FEATURES = ("ring", "shared_bus")
#: used when the factors carry no fitted communication coefficients (70% achievable ring bandwidth)
DEFAULT_COMM_COEFFICIENTS = {"ring": 1.0 / 0.7, "shared_bus": 0.0}
#: compute class -> DeepBench kernel kind whose measured efficiency scales its peak
KERNEL_KIND = {"conv": "conv", "matmul": "gemm", "attention": "gemm", "rnn": "lstm"}


class MemoryFitError(DltschedError, ValueError):
    """A job whose predicted memory exceeds the GPU's memory."""


def factors_path() -> Path:
    return Path(str(resources.files("dltsched.predictors.steptime").joinpath(FACTORS_FILE)))


@cache
def load_factors(path: str | None = None) -> dict[str, Any]:
    """The fitted factors (default: the shipped ``factors.json``)."""
    return json.loads(Path(path or factors_path()).read_text())


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """Predicted time of one iteration split by cause, and peak memory of one worker."""

    step_time_s: float
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float
    memory_mib: float

    def as_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


def _gpu(name: str) -> GpuType:
    from dltsched.instances.catalog import gpu_spec

    try:
        return gpu_spec(name)
    except ValueError as err:
        raise ValidationError("gpu_type", str(err)) from None


def _check_freeze(agg: Aggregates, model: str, freeze_level: int) -> None:
    if not isinstance(freeze_level, int) or not 0 <= freeze_level < agg.num_layers:
        raise ValidationError("freeze_level", f"{freeze_level!r} not understood; must be in "
                                              f"[0, {agg.num_layers - 1}] for {model}")


def features(agg: Aggregates, gpu: GpuType, batch_size: int, amp: bool, freeze_level: int,
             optimizer_passes: float, kernel_efficiency: dict[str, float] | None = None) -> dict[str, float]:
    """Spec-normalised work terms whose weighted sum (weights = inverse efficiencies) is the step time.

    ``kernel_efficiency`` (kernel kind -> relative achievable efficiency of this GPU, 1 = average
    GPU) scales the peak of each compute class; see :data:`KERNEL_KIND`.
    """
    k = freeze_level
    eff = kernel_efficiency or {}
    peak = (gpu.fp16_tensor_tflops if amp else gpu.fp32_tflops) * 1e12
    bandwidth = gpu.memory_bandwidth_gbs * 1e9
    out = {c: (agg.fwd_flops[c] + agg.bwd_flops[c][k]) * batch_size / (peak * eff.get(KERNEL_KIND[c], 1.0))
           for c in COMPUTE_CLASSES}
    out["memory"] = (agg.fwd_bytes + agg.bwd_bytes[k]) * batch_size * (0.5 if amp else 1.0) / bandwidth
    out["optimizer"] = agg.param_bytes[k] * optimizer_passes / bandwidth
    out["launch"] = 1e-6 * (agg.fwd_kernels + agg.bwd_kernels[k])
    out["overhead"] = 1e-3
    return out


def host_key(model: str, dataset: str) -> str:
    """Key of a (canonical model, dataset) pair in the factors' ``host_overhead`` table."""
    return f"{model}/{dataset}"


def host_overhead_s(factors: dict[str, Any], model: str, dataset: str, batch_size: int) -> float:
    """Fitted host (input pipeline) time of one step; 0 for models without measurements."""
    host = factors.get("host_overhead", {}).get(host_key(model, dataset))
    return host["per_step_s"] + host["per_sample_s"] * batch_size if host else 0.0


def comm_features(grad_bytes: float, num_gpus: int, link_gbs: float, hop_latency_s: float) -> dict[str, float]:
    """All-reduce work terms of one step: ring (dedicated links) and shared bus (PCIe switch, host).

    ``ring`` is the bandwidth-optimal ring time ``2 (n-1)/n * bytes / link`` plus hop latencies;
    ``shared_bus`` is ``(n-1) * bytes / link``, the time when all workers share one link.
    """
    if num_gpus <= 1:
        return dict.fromkeys(COMM_FEATURES, 0.0)
    link_bytes_per_s = link_gbs * 1e9
    ring = 2.0 * (num_gpus - 1) / num_gpus * grad_bytes / link_bytes_per_s + 2.0 * (num_gpus - 1) * hop_latency_s
    return {"ring": ring, "shared_bus": (num_gpus - 1) * grad_bytes / link_bytes_per_s}


def optimizer_passes(job: Job) -> float:
    """Parameter-sized memory passes of one optimizer step: read weight and grad, write weight, state r/w."""
    return 3.0 + 2.0 * job.bytes_per_param / 4.0


@dataclass(frozen=True, slots=True)
class DeletePopStepTime:
    """Operator-level step-time and memory predictor; implements ``StepTimePredictor``.

    ``factors`` defaults to the shipped fit: per-GPU inverse efficiencies, host-speed and
    communication factors where measurements exist, else the global ones with spec-sheet scaling.
    """

    factors: dict[str, Any] = field(default_factory=lambda: load_factors())
    workspace_mib: float = 450.0
    hop_latency_s: float = 20e-6
    network_gbps: float = 100.0

    def _resolve(self, job: Job, gpu_type: str, freeze_level: int) -> tuple[Aggregates, GpuType, float]:
        """Aggregates of the job's graph, the GPU spec and the job's fitted host time per step."""
        model, dataset = resolve(job.model, job.dataset)
        agg = aggregates(model, dataset)
        _check_freeze(agg, model, freeze_level)
        return agg, _gpu(gpu_type), host_overhead_s(self.factors, model, dataset, job.batch_size)

    def _terms(self, job: Job, agg: Aggregates, gpu: GpuType, freeze_level: int) -> dict[str, float]:
        f = self.factors
        feats = features(agg, gpu, job.batch_size, job.amp, freeze_level, optimizer_passes(job),
                         f.get("kernel_efficiency", {}).get(gpu.id))
        coef = f.get("per_gpu", {}).get(gpu.id, f["coefficients"])
        return {name: value * coef[name] for name, value in feats.items()}

    def _host_speed(self, gpu: GpuType) -> float:
        """Host-time factor of the machines hosting ``gpu`` (fitted per GPU with measurements, else 1)."""
        return self.factors.get("per_gpu", {}).get(gpu.id, {}).get("host", 1.0)

    def comm_s(self, agg: Aggregates, gpu: GpuType, num_gpus: int, num_nodes: int, freeze_level: int) -> float:
        """Exposed all-reduce time of the trainable gradients (fitted share of ring + shared-bus terms)."""
        f = self.factors
        coef = f.get("per_gpu_comm", {}).get(gpu.id, f.get("comm_coefficients", DEFAULT_COMM_COEFFICIENTS))
        link_gbs = gpu.intra_node_bandwidth_gbs if num_nodes <= 1 else self.network_gbps / 8.0
        feats = comm_features(agg.param_bytes[freeze_level], num_gpus, link_gbs, self.hop_latency_s)
        return sum(coef[k] * v for k, v in feats.items())

    def breakdown(self, job: Job, gpu_type: str, num_gpus: int | None = None, *, freeze_level: int = 0,
                  num_nodes: int = 1, check_memory: bool = False) -> StepBreakdown:
        """Step time split into compute / memory / communication / overhead, and memory of one worker."""
        agg, gpu, host_s = self._resolve(job, gpu_type, freeze_level)
        n = job.num_gpus if num_gpus is None else num_gpus
        if not isinstance(n, int) or n < 1:
            raise ValidationError("num_gpus", f"{n!r} not understood; must be an integer >= 1")
        terms = self._terms(job, agg, gpu, freeze_level)
        compute = sum(terms[c] for c in COMPUTE_CLASSES)
        memory = terms["memory"] + terms["optimizer"]
        overhead = terms["launch"] + terms["overhead"] + host_s * self._host_speed(gpu)
        comm = self.comm_s(agg, gpu, n, num_nodes, freeze_level)
        mem = self._memory_mib(job, agg, freeze_level)
        if check_memory and mem > gpu.memory_mib:
            raise MemoryFitError(f"job '{job.id}': {job.model} at batch size {job.batch_size} needs "
                                 f"{mem:.0f} MiB > {gpu.memory_mib:.0f} MiB on {gpu.id}; use a smaller batch size, "
                                 "--amp, a higher freeze level or a larger GPU")
        return StepBreakdown(compute + memory + comm + overhead, compute, memory, comm, overhead, mem)

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None, *,
                    freeze_level: int = 0, num_nodes: int = 1) -> float:
        return self.breakdown(job, gpu_type, num_gpus, freeze_level=freeze_level, num_nodes=num_nodes).step_time_s

    def _memory_mib(self, job: Job, agg: Aggregates, freeze_level: int) -> float:
        trainable = agg.param_bytes[freeze_level]
        weights = agg.param_bytes_total * (1.5 if job.amp else 1.0)  # AMP keeps an FP16 copy too
        grads_and_state = trainable * (1.0 + job.bytes_per_param / 4.0)
        acts = agg.activation_bytes[freeze_level] * job.batch_size * (0.6 if job.amp else 1.0)
        return (weights + grads_and_state + acts) / _MIB + self.workspace_mib

    def memory_mib(self, job: Job, gpu_type: str, *, freeze_level: int = 0) -> float:
        agg, _gpu_spec, _host_s = self._resolve(job, gpu_type, freeze_level)
        return self._memory_mib(job, agg, freeze_level)

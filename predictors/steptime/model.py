"""DeletePop-style operator-level step-time and memory predictor (no torch at prediction time).

One training iteration on one GPU is the sum over operators of computation time (FLOPs over the
achievable peak of the op class and precision), memory-access time (bytes over achievable
bandwidth) and kernel launches, plus the optimizer step (parameter traffic) and a fixed per-step
overhead. The frozen prefix (layers < freeze level) skips its backward and optimizer update.
Data-parallel jobs add a ring all-reduce of the trainable gradients, partly hidden behind the
backward pass. Coefficients (inverse efficiencies) come from ``factors.json``
(``dltsched predict calibrate-steptime``); ``job.batch_size`` is the batch of one GPU.
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

_MIB = 1024.0 * 1024.0
FEATURES = (*COMPUTE_CLASSES, "memory", "optimizer", "launch", "overhead")
FACTORS_FILE = "factors.json"


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
             optimizer_passes: float, gemm_efficiency: float = 1.0) -> dict[str, float]:
    """Spec-normalised work terms whose weighted sum (weights = inverse efficiencies) is the step time."""
    k = freeze_level
    peak = (gpu.fp16_tensor_tflops if amp else gpu.fp32_tflops) * 1e12 * gemm_efficiency
    bandwidth = gpu.memory_bandwidth_gbs * 1e9
    out = {c: (agg.fwd_flops[c] + agg.bwd_flops[c][k]) * batch_size / peak for c in COMPUTE_CLASSES}
    out["memory"] = (agg.fwd_bytes + agg.bwd_bytes[k]) * batch_size * (0.5 if amp else 1.0) / bandwidth
    out["optimizer"] = agg.param_bytes[k] * optimizer_passes / bandwidth
    out["launch"] = 1e-6 * (agg.fwd_kernels + agg.bwd_kernels[k])
    out["overhead"] = 1e-3
    return out


def optimizer_passes(job: Job) -> float:
    """Parameter-sized memory passes of one optimizer step: read weight and grad, write weight, state r/w."""
    return 3.0 + 2.0 * job.bytes_per_param / 4.0


@dataclass(frozen=True, slots=True)
class DeletePopStepTime:
    """Operator-level step-time and memory predictor; implements ``StepTimePredictor``.

    ``factors`` defaults to the shipped fit: per-GPU inverse efficiencies where measurements
    exist, else the global ones with spec-sheet scaling.
    """

    factors: dict[str, Any] = field(default_factory=lambda: load_factors())
    workspace_mib: float = 450.0
    allreduce_efficiency: float = 0.7
    overlap: float = 0.5
    hop_latency_s: float = 20e-6
    network_gbps: float = 100.0

    def _resolve(self, job: Job, gpu_type: str, freeze_level: int) -> tuple[Aggregates, GpuType]:
        from dltsched.predictors.zoo.graphs import resolve

        model, dataset = resolve(job.model, job.dataset)
        agg = aggregates(model, dataset)
        _check_freeze(agg, model, freeze_level)
        return agg, _gpu(gpu_type)

    def _terms(self, job: Job, agg: Aggregates, gpu: GpuType, freeze_level: int) -> dict[str, float]:
        f = self.factors
        feats = features(agg, gpu, job.batch_size, job.amp, freeze_level, optimizer_passes(job),
                         f.get("gemm_efficiency", {}).get(gpu.id, 1.0))
        coef = f.get("per_gpu", {}).get(gpu.id, f["coefficients"])
        return {name: value * coef[name] for name, value in feats.items()}

    def comm_s(self, job: Job, agg: Aggregates, gpu: GpuType, num_gpus: int, num_nodes: int, freeze_level: int,
               backward_s: float) -> float:
        """Exposed ring all-reduce time of the trainable gradients."""
        if num_gpus <= 1:
            return 0.0
        link_gbs = gpu.intra_node_bandwidth_gbs if num_nodes <= 1 else self.network_gbps / 8.0
        grad_bytes = agg.param_bytes[freeze_level]
        ring = 2.0 * (num_gpus - 1) / num_gpus * grad_bytes / (self.allreduce_efficiency * link_gbs * 1e9)
        ring += 2.0 * (num_gpus - 1) * self.hop_latency_s
        return max(ring - self.overlap * backward_s, (1.0 - self.overlap) * ring)

    def breakdown(self, job: Job, gpu_type: str, num_gpus: int | None = None, *, freeze_level: int = 0,
                  num_nodes: int = 1, check_memory: bool = False) -> StepBreakdown:
        """Step time split into compute / memory / communication / overhead, and memory of one worker."""
        agg, gpu = self._resolve(job, gpu_type, freeze_level)
        n = job.num_gpus if num_gpus is None else num_gpus
        if not isinstance(n, int) or n < 1:
            raise ValidationError("num_gpus", f"{n!r} not understood; must be an integer >= 1")
        terms = self._terms(job, agg, gpu, freeze_level)
        compute = sum(terms[c] for c in COMPUTE_CLASSES)
        memory = terms["memory"] + terms["optimizer"]
        overhead = terms["launch"] + terms["overhead"]
        bwd_share = sum(agg.bwd_flops[c][freeze_level] for c in COMPUTE_CLASSES) / max(
            sum(agg.fwd_flops[c] + agg.bwd_flops[c][freeze_level] for c in COMPUTE_CLASSES), 1.0)
        comm = self.comm_s(job, agg, gpu, n, num_nodes, freeze_level, bwd_share * compute)
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
        agg, _gpu_spec = self._resolve(job, gpu_type, freeze_level)
        return self._memory_mib(job, agg, freeze_level)

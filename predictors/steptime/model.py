"""DeletePop-style operator-level step-time and memory predictor (no torch at prediction time).

One training iteration on one GPU, from the operator graph (see :mod:`aggregates`):

- GPU time: per operator, forward and (trainable layers) backward, computation time (FLOPs over
  the spec peak, times the fitted inverse efficiency of its work group conv / gemm / rnn) or, for
  memory-bound operators, memory-access time (bytes over the spec bandwidth, times the memory
  inverse efficiency); plus weight and weight-gradient traffic and the optimizer step.
- CPU dispatch: kernels per step (forward, backward, per-tensor optimizer updates) times the fitted
  framework time per launch. The host enqueues asynchronously, so the two overlap:
  ``busy = (gpu^p + dispatch^p)^(1/p)`` with :data:`OVERLAP_POWER` (a smooth maximum).
- Input pipeline: for workloads measured in the calibration data, a fitted host term
  ``per_step_s + per_sample_s * batch`` of that measurement setup, scaled by the host speed of the
  machines hosting this GPU type in that setup (1 for other GPU types); added to ``busy``.
- Data-parallel jobs add the exposed all-reduce time of the trainable gradients (fitted shares of
  a ring all-reduce and of a shared-bus transfer, see :func:`comm_features`).

The frozen prefix (layers < freeze level) skips its backward and optimizer update. Coefficients
come from ``factors.json`` (``dltsched predict calibrate-steptime``): global inverse efficiencies
scale every GPU's spec sheet; GPUs with measurements also get fitted multipliers. ``job.batch_size``
is the batch of one GPU.
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
from dltsched.predictors.steptime.aggregates import COMPUTE_GROUPS, Aggregates, aggregates, work_table
from dltsched.predictors.zoo.graphs import resolve

_MIB = 1024.0 * 1024.0
FACTORS_FILE = "factors.json"
FORMAT_VERSION = 3
#: GPU work terms, each with a fitted inverse efficiency (1 = spec peak / bandwidth)
WORK_TERMS = (*COMPUTE_GROUPS, "memory")
#: compute group -> DeepBench kernel kind whose measured efficiency scales its peak
KERNEL_KIND = {"conv": "conv", "gemm": "gemm", "rnn": "lstm"}
#: exponent of the smooth maximum of GPU time and CPU dispatch time
OVERLAP_POWER = 3.0
#: kernels one optimizer step launches per trainable parameter tensor (PyTorch per-tensor loops)
OPTIMIZER_KERNELS = {"sgd": 1, "momentum": 2, "nesterov": 2, "adagrad": 3, "rmsprop": 4, "adam": 5, "adamw": 6,
                     "adadelta": 5, "lamb": 8}
COMM_FEATURES = ("ring", "shared_bus")
#: used when the factors carry no fitted communication coefficients (70% achievable ring bandwidth)
DEFAULT_COMM_COEFFICIENTS = {"ring": 1.0 / 0.7, "shared_bus": 0.0}


class MemoryFitError(DltschedError, ValueError):
    """A job whose predicted memory exceeds the GPU's memory."""


def factors_path() -> Path:
    return Path(str(resources.files("dltsched.predictors.steptime").joinpath(FACTORS_FILE)))


@cache
def load_factors(path: str | None = None) -> dict[str, Any]:
    """The fitted factors (default: the shipped ``factors.json``)."""
    factors = json.loads(Path(path or factors_path()).read_text())
    if factors.get("format_version") != FORMAT_VERSION:
        raise ValidationError("factors", f"{path or factors_path()} has format_version "
                                         f"{factors.get('format_version')}; expected {FORMAT_VERSION}: "
                                         "rerun 'dltsched predict calibrate-steptime'")
    return factors


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """Predicted time of one iteration split by cause, and peak memory of one worker.

    ``compute_s + memory_s`` is the GPU time; ``overhead_s`` is the CPU dispatch time not hidden
    behind GPU work plus the input pipeline.
    """

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


def optimizer_passes(job: Job) -> float:
    """Parameter-sized memory passes of one optimizer step: read weight and grad, write weight, state r/w."""
    return 3.0 + 2.0 * job.bytes_per_param / 4.0


def work_terms(job: Job, model: str, dataset: str, gpu: GpuType, freeze_level: int,
               kernel_efficiency: dict[str, float] | None = None) -> dict[str, float]:
    """Spec-time work of one step: seconds per :data:`WORK_TERMS` at 100% efficiency, and ``kernels``.

    ``kernel_efficiency`` (kernel kind -> relative achievable efficiency of this GPU, 1 = average
    GPU) scales the peak of each compute group; see :data:`KERNEL_KIND`.
    """
    k, batch = freeze_level, job.batch_size
    eff = kernel_efficiency or {}
    peak = (gpu.fp16_tensor_tflops if job.amp else gpu.fp32_tflops) * 1e12
    bandwidth = gpu.memory_bandwidth_gbs * 1e9
    table = work_table(model, dataset, tuple(peak * eff.get(KERNEL_KIND[g], 1.0) for g in COMPUTE_GROUPS),
                       bandwidth, 0.5 if job.amp else 1.0)
    agg = aggregates(model, dataset)
    out = {g: table.compute_s[g][k] * batch for g in COMPUTE_GROUPS}
    out["memory"] = (table.memory_s[k] * batch + table.weight_s[k]
                     + agg.param_bytes[k] * optimizer_passes(job) / bandwidth)
    out["kernels"] = float(table.kernels[k] + agg.param_tensors[k] * OPTIMIZER_KERNELS.get(job.optimizer.lower(), 2))
    return out


def host_key(source: str, model: str, dataset: str) -> str:
    """Key of a workload's input-pipeline terms in the factors' ``host_overhead`` table."""
    return f"{source}:{model}/{dataset}"


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


def combine(gpu_s: float, dispatch_s: float) -> float:
    """Busy time of one step: smooth maximum of GPU time and CPU dispatch time (they overlap)."""
    return (gpu_s**OVERLAP_POWER + dispatch_s**OVERLAP_POWER) ** (1.0 / OVERLAP_POWER)


@dataclass(frozen=True, slots=True)
class DeletePopStepTime:
    """Operator-level step-time and memory predictor; implements ``StepTimePredictor``.

    ``factors`` defaults to the shipped fit. ``host_source`` names the measurement setup whose
    input-pipeline terms to use when a workload was measured by several (default: the factors'
    ``sources`` order); workloads never measured get none.
    """

    factors: dict[str, Any] = field(default_factory=lambda: load_factors())
    host_source: str | None = None
    workspace_mib: float = 450.0
    hop_latency_s: float = 20e-6
    network_gbps: float = 100.0

    def _resolve(self, job: Job, gpu_type: str, freeze_level: int) -> tuple[str, str, Aggregates, GpuType]:
        model, dataset = resolve(job.model, job.dataset)
        agg = aggregates(model, dataset)
        _check_freeze(agg, model, freeze_level)
        return model, dataset, agg, _gpu(gpu_type)

    def gpu_terms(self, job: Job, model: str, dataset: str, gpu: GpuType, freeze_level: int) -> dict[str, float]:
        """Fitted seconds of each work term on ``gpu``, and ``dispatch`` (CPU launch time)."""
        f = self.factors
        work = work_terms(job, model, dataset, gpu, freeze_level, f.get("kernel_efficiency", {}).get(gpu.id))
        mult = f.get("per_gpu", {}).get(gpu.id, {})
        out = {t: work[t] * f["inverse_efficiency"][t] * mult.get(t, 1.0) for t in WORK_TERMS}
        out["dispatch"] = work["kernels"] * f["dispatch_us"] * 1e-6
        return out

    def host_s(self, model: str, dataset: str, gpu: GpuType, batch_size: int) -> float:
        """Fitted input-pipeline time of one step (0 for workloads never measured), plus the fixed step overhead."""
        f = self.factors
        order = [self.host_source] if self.host_source else []
        for source in (*order, *f.get("sources", ())):
            host = f.get("host_overhead", {}).get(host_key(source, model, dataset))
            if host:
                speed = f.get("host_speed", {}).get(source, {}).get(gpu.id, 1.0)
                return f["step_overhead_s"] + speed * (host["per_step_s"] + host["per_sample_s"] * batch_size)
        return float(f["step_overhead_s"])

    def calibration_basis(self, gpu_type: str) -> str:
        """What the predictions for ``gpu_type`` rest on: its own step-time measurements, or its
        spec sheet with or without DeepBench kernel efficiencies."""
        gpu, f = _gpu(gpu_type), self.factors
        setups = sorted(label.split(":")[0] for label in f.get("fitted_on", ()) if label.endswith(f":{gpu.id}"))
        if gpu.id in f.get("per_gpu", {}):
            return f"fitted on its step-time measurements ({', '.join(setups)})"
        if gpu.id in f.get("kernel_efficiency", {}):
            return "spec sheet scaled by its DeepBench kernel efficiencies"
        return "spec sheet only"

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
        model, dataset, agg, gpu = self._resolve(job, gpu_type, freeze_level)
        n = job.num_gpus if num_gpus is None else num_gpus
        if not isinstance(n, int) or n < 1:
            raise ValidationError("num_gpus", f"{n!r} not understood; must be an integer >= 1")
        if not isinstance(num_nodes, int) or num_nodes < 1:
            raise ValidationError("num_nodes", f"{num_nodes!r} not understood; must be an integer >= 1")
        terms = self.gpu_terms(job, model, dataset, gpu, freeze_level)
        compute = sum(terms[g] for g in COMPUTE_GROUPS)
        memory = terms["memory"]
        exposed_dispatch = combine(compute + memory, terms["dispatch"]) - compute - memory
        overhead = exposed_dispatch + self.host_s(model, dataset, gpu, job.batch_size)
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
        _model, _dataset, agg, _gpu_spec = self._resolve(job, gpu_type, freeze_level)
        return self._memory_mib(job, agg, freeze_level)

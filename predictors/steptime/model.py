"""DeletePop-style operator-level step-time and memory predictor (no torch at prediction time).

One training iteration on one GPU, from the operator graph (see :mod:`aggregates`):

- GPU time: per operator, forward and (trainable layers) backward, computation time (FLOPs over
  the spec peak, times the fitted inverse efficiency of its work group conv / gemm / rnn) or, for
  memory-bound operators, memory-access time (bytes over the spec bandwidth, times the inverse
  efficiency of the memory classes or, for compute-class operators on the memory side of the
  roofline, of ``bound``); plus weight and weight-gradient traffic and the optimizer step. A
  recurrent layer's time is the larger (smoothly) of its FLOP time and its per-time-step re-reading
  of the recurrent weights, which bounds small batches.
- CPU dispatch: kernels per step (forward, backward, per-tensor optimizer updates) times the fitted
  framework time per launch. The host enqueues asynchronously, so the two overlap:
  ``busy = (gpu^p + dispatch^p)^(1/p)`` with :data:`OVERLAP_POWER` (a smooth maximum).
- Input pipeline: for workloads measured in the calibration data, a fitted host term
  ``per_step_s + per_sample_s * batch`` of that measurement setup; added to ``busy``. A workload
  never measured gets the terms :func:`host_model` predicts for the setup (``host_source``, else
  the factors' first source) from what a cluster knows before running it: a robust line of the
  setup's fitted per-step terms over kernels per step, and one of its per-sample terms over the
  input bytes per sample.
- Host machines: a setup's machines hosting one GPU type have two fitted speeds (1 = the setup's
  average machine): ``per_step`` scales the CPU dispatch and the per-step input term (one CPU
  thread), ``per_sample`` the per-sample input term (the data loader's throughput).
- Data-parallel jobs add the exposed all-reduce time of the trainable gradients (fitted shares of
  a ring all-reduce and of a shared-bus transfer, see :func:`comm_features`).

The frozen prefix (layers < freeze level) skips its backward and optimizer update. Coefficients
come from ``factors.json`` (``dltsched predict calibrate-steptime``): global inverse efficiencies
scale every GPU's spec sheet; GPUs with step-time measurements also get fitted multipliers per
:data:`GPU_TERMS` (a compute group that one workload alone was fitted on, ``single_workload_groups``,
holds for that workload; the GPU's other workloads get its common scale; likewise a global inverse
efficiency that one workload alone informs, ``single_workload_efficiency``, holds for that workload and
the others get GEMM's). ``job.batch_size`` is the batch of one GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from dltsched.engine.domain.errors import DltschedError, ValidationError
from dltsched.engine.domain.model import GpuType, Job
from dltsched.predictors.steptime.aggregates import COMPUTE_GROUPS, Aggregates, aggregates, work_table
from dltsched.predictors.zoo.graphs import resolve

_MIB = 1024.0 * 1024.0
FACTORS_FILE = "factors.json"
FORMAT_VERSION = 4
#: GPU work terms, each with a fitted global inverse efficiency (1 = spec peak / bandwidth)
WORK_TERMS = (*COMPUTE_GROUPS, "memory", "bound")
#: per-GPU multipliers fitted on a GPU's step times: compute groups, and its DRAM traffic
#: (``memory`` scales the memory, bound and recurrent-weight terms)
GPU_TERMS = (*COMPUTE_GROUPS, "memory")
#: exponent of the smooth maximum of a recurrent layer's FLOP time and recurrent-weight traffic
RECURRENT_POWER = 4.0
#: compute group -> DeepBench kernel kind whose measured efficiency scales its peak
KERNEL_KIND = {"conv": "conv", "gemm": "gemm", "rnn": "lstm"}
#: exponent of the smooth maximum of GPU time and CPU dispatch time
OVERLAP_POWER = 3.0
#: kernels one optimizer step launches per trainable parameter tensor (PyTorch per-tensor loops)
OPTIMIZER_KERNELS = {"sgd": 1, "momentum": 2, "nesterov": 2, "adagrad": 3, "rmsprop": 4, "adam": 5,
                     "adamw": 6, "adadelta": 5, "lamb": 8}
COMM_FEATURES = ("ring", "shared_bus")
#: host machine speeds per setup and GPU type
HOST_SPEEDS = ("per_step", "per_sample")
#: what a measured step time covers: ``iteration`` (with the input pipeline), ``compute`` (input
#: excluded: forward, backward, optimizer, host dispatch) or ``fwd_bwd`` (forward and backward only)
SCOPES = ("iteration", "compute", "fwd_bwd")
#: GPU types that share what was learned for another (same chip and clocks; only the memory size differs)
LEARNED_AS = {"v100-32gb": "v100", "v100-pcie-32gb": "v100-pcie", "v100-pcie": "v100",
              "a100-pcie-80gb": "a100-pcie-40gb", "a100-pcie-40gb": "a100-40gb", "a100-80gb": "a100-40gb"}
#: architectures whose tensor cores run TF32 at half their dense FP16 rate
TF32_ARCHITECTURES = frozenset({"ampere", "ada", "hopper", "blackwell"})
#: used when the factors carry no fitted communication coefficients (70% achievable ring bandwidth)
DEFAULT_COMM_COEFFICIENTS = {"ring": 1.0 / 0.7, "shared_bus": 0.0}


#: fewest measured workloads of a setup for a fitted slope of the per-step host term over kernels
HOST_MODEL_MIN_WORKLOADS = 3

#: remembered step times (see :meth:`DeletePopStepTime.step_time_s`); cleared when full
_STEP_MEMO: dict[tuple[Any, ...], tuple[dict[str, Any], float]] = {}
_STEP_MEMO_SIZE = 200_000
#: work terms per job shape and GPU as (intercept, slope in the batch size), see ``gpu_terms``
_WORK_MEMO: dict[tuple[Any, ...], tuple[dict[str, Any], dict[str, tuple[float, float]]]] = {}
#: :func:`host_model` per factors object (keyed by id, the object kept to check identity)
_HOST_MODEL_MEMO: dict[int, tuple[dict[str, Any], dict[str, dict[str, float]]]] = {}


class MemoryFitError(DltschedError, ValueError):
    """A job whose predicted memory exceeds the GPU's memory."""


def factors_path() -> Path:
    """Path of the packaged step-time factors file."""
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
    behind GPU work plus the fixed per-step host cost (``host_s``) plus the input pipeline
    (``input_s``, scope ``iteration`` only).
    """

    step_time_s: float
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float
    memory_mib: float
    host_s: float = 0.0
    input_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        """The breakdown's fields by name (seconds; ``memory_mib`` in MiB)."""
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


def gpu_spec_checked(name: str) -> GpuType:
    """The catalog spec of GPU type ``name``; an unknown name raises :class:`ValidationError` at
    ``gpu_type``."""
    from dltsched.engine.domain.catalog import gpu_spec

    try:
        return gpu_spec(name)
    except ValueError as err:
        raise ValidationError("gpu_type", str(err)) from None


def _check_freeze(agg: Aggregates, model: str, freeze_level: int) -> None:
    if not isinstance(freeze_level, int) or not 0 <= freeze_level < agg.num_layers:
        raise ValidationError("freeze_level", f"{freeze_level!r} not understood; must be in "
                                              f"[0, {agg.num_layers - 1}] for {model}")


def learned_id(gpu_id: str, table: dict[str, Any]) -> str:
    """``gpu_id`` if ``table`` holds it, else the GPU whose fit it shares (:data:`LEARNED_AS`)."""
    seen = gpu_id
    while seen not in table and seen in LEARNED_AS:
        seen = LEARNED_AS[seen]
    return seen if seen in table else gpu_id


def learned_root(gpu_id: str) -> str:
    """The GPU at the end of ``gpu_id``'s :data:`LEARNED_AS` chain (held out together)."""
    while gpu_id in LEARNED_AS:
        gpu_id = LEARNED_AS[gpu_id]
    return gpu_id


def check_scope(scope: str) -> str:
    """``scope`` if it is one of :data:`SCOPES`; else raises :class:`ValidationError`."""
    if scope not in SCOPES:
        raise ValidationError("scope", f"{scope!r} not understood; one of {', '.join(SCOPES)}")
    return scope


def compute_peaks(job: Job, gpu: GpuType, tf32_matmul: bool = False,
                  tf32_conv: bool = False) -> dict[str, float]:
    """Peak FLOP/s per compute group: FP16 tensor cores with AMP; otherwise FP32, except TF32 tensor
    cores on Ampere and later for convolutions with ``tf32_conv`` (cuDNN's default) and for GEMMs and
    recurrent layers with ``tf32_matmul`` (PyTorch's default before 1.12). Both are off by default:
    calibrating with TF32 convolutions made leave-one-GPU-out worse (Zeus's A40 shows no speed-up)."""
    if job.amp:
        return dict.fromkeys(COMPUTE_GROUPS, gpu.fp16_tensor_tflops * 1e12)
    tf32 = (max(gpu.fp32_tflops, gpu.fp16_tensor_tflops / 2.0) if gpu.architecture in TF32_ARCHITECTURES
            else 0.0)
    on = {"conv": tf32_conv, "gemm": tf32_matmul, "rnn": tf32_matmul}
    return {g: (tf32 if tf32 and on[g] else gpu.fp32_tflops) * 1e12 for g in COMPUTE_GROUPS}


def optimizer_passes(job: Job) -> float:
    """Parameter-sized memory passes of one optimizer step: read weight and grad, write weight, state r/w."""
    return 3.0 + 2.0 * job.bytes_per_param / 4.0


def work_terms(job: Job, model: str, dataset: str, gpu: GpuType, freeze_level: int,
               kernel_efficiency: dict[str, float] | None = None, *, optimizer: bool = True,
               tf32_matmul: bool = False, tf32_conv: bool = False) -> dict[str, float]:
    """Spec-time work of one step: seconds per :data:`WORK_TERMS` at 100% efficiency, ``recurrent``
    (recurrent-weight traffic) and ``kernels``.

    ``kernel_efficiency`` (kernel kind -> relative achievable efficiency of this GPU, 1 = average
    GPU) scales the peak of each compute group; see :data:`KERNEL_KIND`. ``optimizer=False`` leaves
    out the optimizer step (scope ``fwd_bwd``).
    """
    k, batch = freeze_level, job.batch_size
    eff = kernel_efficiency or {}
    peaks = compute_peaks(job, gpu, tf32_matmul, tf32_conv)
    bandwidth = gpu.memory_bandwidth_gbs * 1e9
    table = work_table(model, dataset, tuple(peaks[g] * eff.get(KERNEL_KIND[g], 1.0) for g in COMPUTE_GROUPS),
                       bandwidth, 0.5 if job.amp else 1.0)
    agg = aggregates(model, dataset)
    out = {g: table.compute_s[g][k] * batch for g in COMPUTE_GROUPS}
    opt = 1.0 if optimizer else 0.0
    out["memory"] = (table.memory_s[k] * batch + table.weight_s[k]
                     + opt * agg.param_bytes[k] * optimizer_passes(job) / bandwidth)
    out["bound"] = table.bound_s[k] * batch
    out["recurrent"] = table.recurrent_s[k]
    out["kernels"] = float(table.kernels[k]
                           + opt * agg.param_tensors[k] * OPTIMIZER_KERNELS.get(job.optimizer.lower(), 2))
    return out


def host_key(source: str, model: str, dataset: str) -> str:
    """Key of a workload's input-pipeline terms in the factors' ``host_overhead`` table."""
    return f"{source}:{model}/{dataset}"


def workload_kernels(model: str, dataset: str) -> float:
    """Kernels of one training step of a workload's graph (forward, backward, one SGD update per
    parameter tensor): the feature of :func:`host_model`, known before the workload ever runs."""
    # kernels do not depend on peaks
    table = work_table(model, dataset, (1.0,) * len(COMPUTE_GROUPS), 1.0, 1.0)
    return float(table.kernels[0] + aggregates(model, dataset).param_tensors[0])


@cache
def input_bytes(model: str, dataset: str) -> float:
    """Bytes per sample the graph's first operator reads: the input a data loader produces and copies
    to the GPU (for an embedding, the rows it gathers)."""
    from dltsched.predictors.zoo.graphs import graph_record

    nodes = graph_record(model, dataset)["nodes"]
    return float(nodes[0][5]) if nodes else 0.0


def _robust_line(x: Any, y: Any) -> float:
    """Non-negative Theil-Sen slope of ``y`` over ``x`` (0 with fewer than :data:`HOST_MODEL_MIN_WORKLOADS`
    points or no spread in ``x``)."""
    import numpy as np

    if len(x) < HOST_MODEL_MIN_WORKLOADS or np.ptp(x) <= 0:
        return 0.0
    from scipy.stats import theilslopes

    return max(0.0, float(theilslopes(y, x).slope))


def host_model(factors: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per measurement setup, the input-pipeline terms of a workload it never measured, learned
    across the workloads it did (the factors' ``host_overhead``):

    - ``per_step_s + per_kernel_s * kernels``: the Theil-Sen line (median of pairwise slopes,
      robust to a workload such as an RL job whose environment runs on the CPU) of the fitted
      per-step terms over :func:`workload_kernels`; slope and intercept are kept non-negative.
      Fewer than :data:`HOST_MODEL_MIN_WORKLOADS` workloads: no slope, the median per-step term.
    - ``per_sample_s + per_input_byte_s * input_bytes``: the same robust line of the fitted per-sample
      terms over :func:`input_bytes` (no slope with too few workloads or no spread: the median).
    """
    hit = _HOST_MODEL_MEMO.get(id(factors))
    if hit is not None and hit[0] is factors:
        return hit[1]
    import numpy as np

    rows: dict[str, list[tuple[float, float, float]]] = {}
    for key, terms in factors.get("host_overhead", {}).items():
        setup, workload = key.split(":", 1)
        model, dataset = workload.rsplit("/", 1)
        try:
            kernels = workload_kernels(model, dataset)
        except (KeyError, ValueError):  # a workload whose graph is not shipped says nothing here
            continue
        rows.setdefault(setup, []).append((kernels, input_bytes(model, dataset), float(terms["per_step_s"]),
                                           float(terms["per_sample_s"])))
    out = {}
    for setup, points in rows.items():
        x, inputs, step, sample = (np.array(c) for c in zip(*points, strict=True))
        slope, per_byte = _robust_line(x, step), _robust_line(inputs, sample)
        out[setup] = {"per_step_s": max(0.0, float(np.median(step - slope * x))), "per_kernel_s": slope,
                      "per_sample_s": max(0.0, float(np.median(sample - per_byte * inputs))),
                      "per_input_byte_s": per_byte, "workloads": float(len(points))}
    if len(_HOST_MODEL_MEMO) >= 64:
        _HOST_MODEL_MEMO.clear()
    _HOST_MODEL_MEMO[id(factors)] = (factors, out)
    return out


def comm_features(grad_bytes: float, num_gpus: int,
                  link_gbs: float, hop_latency_s: float) -> dict[str, float]:
    """All-reduce work terms of one step: ring (dedicated links) and shared bus (PCIe switch, host).

    ``ring`` is the bandwidth-optimal ring time ``2 (n-1)/n * bytes / link`` plus hop latencies;
    ``shared_bus`` is ``(n-1) * bytes / link``, the time when all workers share one link.
    """
    if num_gpus <= 1:
        return dict.fromkeys(COMM_FEATURES, 0.0)
    link_bytes_per_s = link_gbs * 1e9
    ring = (2.0 * (num_gpus - 1) / num_gpus * grad_bytes / link_bytes_per_s
            + 2.0 * (num_gpus - 1) * hop_latency_s)
    return {"ring": ring, "shared_bus": (num_gpus - 1) * grad_bytes / link_bytes_per_s}


def combine(gpu_s: float, dispatch_s: float) -> float:
    """Busy time of one step: smooth maximum of GPU time and CPU dispatch time (they overlap)."""
    return (gpu_s**OVERLAP_POWER + dispatch_s**OVERLAP_POWER) ** (1.0 / OVERLAP_POWER)


def recurrent_time(flop_s: float, reread_s: float) -> float:
    """Time of the recurrent layers: smooth maximum of FLOP time and recurrent-weight traffic."""
    return (flop_s**RECURRENT_POWER + reread_s**RECURRENT_POWER) ** (1.0 / RECURRENT_POWER)


#: what can time a step's GPU work (:class:`DeletePopStepTime`'s ``gpu_model``)
GPU_MODELS = ("auto", "groups", "kernels")

#: how much of a measured step on another GPU :meth:`DeletePopStepTime.transfer_s` takes (geometric weight),
#: for a workload the factors were fitted on and for a new one alike (leave-one-GPU-out, new jobs: whole
#: 51.2 / 37.5%, halfway 43.1 / 36.1%, no profile 39.3 / 39.3% on Gavel / Zeus; README)
TRANSFER_WEIGHT = 0.5


@dataclass(frozen=True, slots=True)
class DeletePopStepTime:
    """Operator-level step-time and memory predictor; implements ``StepTimePredictor``.

    ``factors`` defaults to the shipped fit. ``host_source`` names the measurement setup whose
    input-pipeline terms to use when a workload was measured by several (default: the factors'
    ``sources`` order); workloads never measured get none.

    ``gpu_model`` picks what times the GPU work: ``"groups"`` (the graph's work per group at the
    calibrated efficiencies), ``"kernels"`` (every kernel of the graph, forward and backward, timed by
    the kernel model and summed, with the host terms of the factors' ``kernel_step`` block; see
    :mod:`kernelstep`) or ``"auto"`` (default): groups on a GPU whose step times the factors were
    fitted on, kernels on any other when the factors carry a ``kernel_step`` block
    (:meth:`gpu_model_for`). Leave-one-GPU-out the kernel step model is the better of the two on 4 of
    the 5 held-out GPUs (README), and fitted GPUs keep the in-sample fit the simulations replay.
    ``kernel_model``: a kernel-model file (default: the shipped one).

    Memory (``memory_mib``): the graph's weights, gradients, optimizer state and saved activations plus
    ``workspace_mib``; with ``traced_memory`` a zoo model with a shipped memory trace is instead its
    caching-allocator reserve for the step plus a 1.5 GiB CUDA context
    (:func:`dltsched.predictors.zoo.memory.reserve_mib`: 2.9% MAPE on the H200 jobs alone against 46.8%;
    off by default until the simulator's analytic memory truth and the recorded simulations move with it).
    """

    factors: dict[str, Any] = field(default_factory=lambda: load_factors())
    host_source: str | None = None
    gpu_model: str = "auto"
    kernel_model: str | None = None
    tf32_matmul: bool = False
    tf32_conv: bool = False
    workspace_mib: float = 450.0
    traced_memory: bool = False
    hop_latency_s: float = 20e-6
    network_gbps: float = 100.0

    def _resolve(self, job: Job, gpu_type: str, freeze_level: int) -> tuple[str, str, Aggregates, GpuType]:
        model, dataset = resolve(job.model, job.dataset)
        agg = aggregates(model, dataset)
        _check_freeze(agg, model, freeze_level)
        return model, dataset, agg, gpu_spec_checked(gpu_type)

    def gpu_terms(self, job: Job, model: str, dataset: str, gpu: GpuType, freeze_level: int,
                  scope: str = "iteration") -> dict[str, float]:
        """Fitted GPU seconds of the compute groups (``rnn``: FLOPs or recurrent-weight traffic, whichever
        bounds) and of ``memory`` (memory and bound terms), and ``kernels`` per step."""
        f = self.factors
        kern, gpu_eff = f.get("kernel_efficiency", {}), f.get("gpu_efficiency", {})
        # every work term is linear in the batch size: remember intercept and slope per job shape and GPU
        key = (id(f), model, dataset, gpu, freeze_level, scope != "fwd_bwd", self.tf32_matmul, self.tf32_conv,
               job.amp, job.optimizer)
        hit = _WORK_MEMO.get(key)
        if hit is None or hit[0] is not f:
            one, two = (work_terms(replace(job, batch_size=b), model, dataset, gpu, freeze_level,
                                   kern.get(learned_id(gpu.id, kern)), optimizer=scope != "fwd_bwd",
                                   tf32_matmul=self.tf32_matmul, tf32_conv=self.tf32_conv) for b in (1, 2))
            if len(_WORK_MEMO) >= _STEP_MEMO_SIZE:
                _WORK_MEMO.clear()
            hit = _WORK_MEMO[key] = (f, {k: (2.0 * one[k] - two[k], two[k] - one[k]) for k in one})
        work = {k: a + b * job.batch_size for k, (a, b) in hit[1].items()}
        theta, mult = f["inverse_efficiency"], gpu_eff.get(learned_id(gpu.id, gpu_eff), {})
        single = f.get("single_workload_groups", {}).get(learned_id(gpu.id, gpu_eff), {})
        if single:  # a group fitted on one workload alone holds for it; others get the GPU's common scale
            mult = {**mult, **{g: v["shared"] for g,
                               v in single.items() if v["workload"] != f"{model}/{dataset}"}}
        alone = f.get("single_workload_efficiency", {})
        if alone:  # the same for a group that one workload alone informs on every GPU: others get GEMM's
            theta = {**theta, **{g: v["shared"] for g,
                                 v in alone.items() if v["workload"] != f"{model}/{dataset}"}}
        dram = mult.get("memory", 1.0)
        out = {g: work[g] * theta[g] * mult.get(g, 1.0) for g in COMPUTE_GROUPS}
        out["rnn"] = recurrent_time(out["rnn"], work["recurrent"] * theta["memory"] * dram)
        out["memory"] = (work["memory"] * theta["memory"] + work["bound"] * theta["bound"]) * dram
        out["kernels"] = work["kernels"]
        return out

    def setup(self, model: str, dataset: str) -> str | None:
        """The measurement setup whose input-pipeline terms this workload gets (``host_source`` first,
        then the factors' ``sources``); None for a workload never measured."""
        order = [self.host_source] if self.host_source else []
        host = self.factors.get("host_overhead", {})
        return next((s for s in (*order, *self.factors.get("sources", ()))
                     if host_key(s, model, dataset) in host), None)

    def default_setup(self) -> str | None:
        """The setup whose machines run a workload never measured: ``host_source``, else the factors'
        first source (None without any)."""
        return self.host_source or next(iter(self.factors.get("sources", ())), None)

    def host_terms(self, model: str, dataset: str, kernels: float) -> tuple[str | None, float, float]:
        """Setup, per-step and per-sample input-pipeline terms of a workload with ``kernels`` per step:
        fitted where its setup measured it, else predicted by :func:`host_model` for
        :meth:`default_setup` (0 where that setup has no fitted workload)."""
        setup = self.setup(model, dataset)
        if setup is not None:
            host = self.factors["host_overhead"][host_key(setup, model, dataset)]
            return setup, float(host["per_step_s"]), float(host["per_sample_s"])
        setup = self.default_setup()
        learned = host_model(self.factors).get(setup or "")
        if learned is None:
            return setup, 0.0, 0.0
        return (setup, learned["per_step_s"] + learned["per_kernel_s"] * kernels,
                learned["per_sample_s"] + learned["per_input_byte_s"] * input_bytes(model, dataset))

    def host_speeds(self, setup: str | None, gpu: GpuType) -> dict[str, float]:
        """``per_step`` and ``per_sample`` speed of the machines hosting ``gpu`` in ``setup`` (1: average)."""
        table = self.factors.get("host_speed", {}).get(setup or "", {})
        speeds = table.get(learned_id(gpu.id, table), {})
        return {k: float(speeds.get(k, 1.0)) for k in HOST_SPEEDS}

    def cpu_s(self, kernels: float, model: str, dataset: str, gpu: GpuType, batch_size: int,
              scope: str = "iteration") -> tuple[float, float, float]:
        """CPU time of one step: dispatch of ``kernels``, the fixed per-step host cost, and the input
        pipeline (scope ``iteration`` only; :meth:`host_terms`: predicted for workloads never
        measured), at the speeds of the machine hosting ``gpu``."""
        f = self.factors
        setup, per_step_s, per_sample_s = self.host_terms(model, dataset, kernels)
        speed = self.host_speeds(setup, gpu)
        dispatch = kernels * f["dispatch_us"] * 1e-6 * speed["per_step"]
        fixed = float(f["step_overhead_s"]) * speed["per_step"]
        if scope != "iteration":
            return dispatch, fixed, 0.0
        return dispatch, fixed, (speed["per_step"] * per_step_s
                                 + speed["per_sample"] * per_sample_s * batch_size)

    def gpu_model_for(self, gpu_type: str) -> str:
        """``"groups"`` or ``"kernels"``: what times the GPU work on ``gpu_type`` (``gpu_model="auto"``:
        groups where the factors were fitted on the GPU's step times or carry no ``kernel_step`` block,
        e.g. a cross-fitted fold's; kernels elsewhere)."""
        if self.gpu_model not in GPU_MODELS:
            raise ValidationError("gpu_model", f"{self.gpu_model!r} not understood; one of "
                                               f"{', '.join(GPU_MODELS)}")
        if self.gpu_model != "auto":
            return self.gpu_model
        fitted = self.factors.get("gpu_efficiency", {})
        gpu_id = gpu_spec_checked(gpu_type).id
        return ("groups" if learned_id(gpu_id, fitted) in fitted or "kernel_step" not in self.factors
                else "kernels")

    def calibration_basis(self, gpu_type: str) -> str:
        """What the predictions for ``gpu_type`` rest on: its own step-time measurements, the kernel
        model (from the GPU's measured kernels or its spec sheet alone), or its spec sheet with or
        without DeepBench kernel efficiencies."""
        gpu, f = gpu_spec_checked(gpu_type), self.factors
        learned = learned_id(gpu.id, f.get("gpu_efficiency", {}))
        shared = f" (shared with {learned})" if learned != gpu.id else ""
        setups = sorted(label.split(":")[0] for label in f.get("fitted_on", ())
                        if label.endswith(f":{learned}"))
        if learned in f.get("gpu_efficiency", {}):
            return f"fitted on its step-time measurements ({', '.join(setups)}){shared}"
        if self.gpu_model_for(gpu.id) == "kernels":
            from dltsched.predictors.steptime.kernels import gpu_family, load_kernel_model

            fitted_families = {gpu_family(learned_root(g))
                               for g in load_kernel_model(self.kernel_model).fitted_on}
            if gpu_family(learned_root(gpu.id)) in fitted_families:
                return "kernel model fitted on its measured kernels (NeuSight)"
            return "kernel model from its spec sheet"
        if learned_id(gpu.id, f.get("kernel_efficiency", {})) in f.get("kernel_efficiency", {}):
            return "spec sheet scaled by its DeepBench kernel efficiencies"
        return "spec sheet only"

    def comm_s(self, agg: Aggregates, gpu: GpuType, num_gpus: int,
               num_nodes: int, freeze_level: int) -> float:
        """Exposed all-reduce time of the trainable gradients (fitted share of ring + shared-bus terms)."""
        if num_gpus <= 1:
            return 0.0
        f = self.factors
        per_gpu = f.get("per_gpu_comm", {})
        coef = per_gpu.get(learned_id(gpu.id, per_gpu), f.get("comm_coefficients", DEFAULT_COMM_COEFFICIENTS))
        link_gbs = gpu.intra_node_bandwidth_gbs if num_nodes <= 1 else self.network_gbps / 8.0
        feats = comm_features(agg.param_bytes[freeze_level], num_gpus, link_gbs, self.hop_latency_s)
        return sum(coef[k] * v for k, v in feats.items())

    def breakdown(self, job: Job, gpu_type: str, num_gpus: int | None = None, *, freeze_level: int = 0,
                  num_nodes: int = 1, check_memory: bool = False, scope: str = "iteration") -> StepBreakdown:
        """Step time split into compute / memory / communication / overhead, and memory of one worker.

        ``scope`` (:data:`SCOPES`) says what the step covers: ``iteration`` adds the input pipeline,
        ``compute`` leaves it out, ``fwd_bwd`` also leaves out the optimizer step and the all-reduce.
        """
        check_scope(scope)
        model, dataset, agg, gpu = self._resolve(job, gpu_type, freeze_level)
        n = job.num_gpus if num_gpus is None else num_gpus
        if not isinstance(n, int) or n < 1:
            raise ValidationError("num_gpus", f"{n!r} not understood; must be an integer >= 1")
        if not isinstance(num_nodes, int) or num_nodes < 1:
            raise ValidationError("num_nodes", f"{num_nodes!r} not understood; must be an integer >= 1")
        if self.gpu_model_for(gpu.id) == "kernels":
            return self._kernel_breakdown(job, model, dataset, agg, gpu, n, num_nodes, freeze_level, scope,
                                          check_memory)
        terms = self.gpu_terms(job, model, dataset, gpu, freeze_level, scope)
        compute = sum(terms[g] for g in COMPUTE_GROUPS)
        memory = terms["memory"]
        dispatch, fixed, pipeline = self.cpu_s(terms["kernels"], model, dataset, gpu, job.batch_size, scope)
        overhead = combine(compute + memory, dispatch) - compute - memory + fixed + pipeline
        comm = 0.0 if scope == "fwd_bwd" else self.comm_s(agg, gpu, n, num_nodes, freeze_level)
        mem = self._checked_memory(job, agg, gpu, freeze_level, check_memory)
        return StepBreakdown(compute + memory + comm + overhead, compute, memory, comm,
                             overhead, mem, fixed, pipeline)

    def _checked_memory(self, job: Job, agg: Aggregates, gpu: GpuType,
                        freeze_level: int, check: bool) -> float:
        mem = self._memory_mib(job, agg, freeze_level)
        if check and mem > gpu.memory_mib:
            raise MemoryFitError(f"job '{job.id}': {job.model} at batch size {job.batch_size} needs "
                                 f"{mem:.0f} MiB > {gpu.memory_mib:.0f} MiB on {gpu.id}; use a smaller batch "
                                 "size, --amp, a higher freeze level or a larger GPU")
        return mem

    def kernel_step_params(self) -> dict[str, Any]:
        """The factors' ``kernel_step`` block (fitted by ``dltsched predict fit-kernel-step``)."""
        params = self.factors.get("kernel_step")
        if params is None:
            raise ValidationError("factors", "no 'kernel_step' block for gpu_model='kernels': run "
                                             "'dltsched predict fit-kernel-step'")
        return params

    def _kernel_breakdown(self, job: Job, model: str, dataset: str, agg: Aggregates, gpu: GpuType, n: int,
                          num_nodes: int, freeze_level: int, scope: str, check_memory: bool) -> StepBreakdown:
        from dltsched.predictors.steptime.kernels import load_kernel_model
        from dltsched.predictors.steptime.kernelstep import kernel_work, predict_terms, workload_key

        params = self.kernel_step_params()
        tf32 = frozenset(({"conv"} if self.tf32_conv else set())
                         | ({"linear", "bmm"} if self.tf32_matmul else set()))
        work = kernel_work(job, model, dataset, gpu, freeze_level, scope,
                           load_kernel_model(self.kernel_model), tf32)
        source = self.kernel_source(params, model, dataset, job.amp)
        terms = predict_terms(params, work, source,
                              workload_key(source, model, dataset, job.amp),
                              job.batch_size, scope, learned_root(gpu.id))
        optimizer = params["optimizer"] * work["optimizer_s"] * (terms["gpu"] / max(
            params["kernel"] * work["kernel_s"] + params["optimizer"] * work["optimizer_s"], 1e-15))
        compute, memory = terms["gpu"] - optimizer, optimizer
        overhead = terms["dispatch"] + terms["fixed"] + terms["input"]
        comm = 0.0 if scope == "fwd_bwd" else self.comm_s(agg, gpu, n, num_nodes, freeze_level)
        mem = self._checked_memory(job, agg, gpu, freeze_level, check_memory)
        return StepBreakdown(compute + memory + comm + overhead, compute, memory, comm, overhead, mem,
                             terms["fixed"], terms["input"])

    def kernel_source(self, params: dict[str, Any], model: str, dataset: str, amp: bool) -> str:
        """The measurement setup whose workload terms a job gets: ``host_source`` first, then any setup
        that measured this workload, else ``host_source`` or ``""`` (no workload terms)."""
        from dltsched.predictors.steptime.kernelstep import workload_key

        order = [self.host_source] if self.host_source else []
        order += sorted(params.get("fixed_s", {}))
        for source in order:
            key = workload_key(source, model, dataset, amp)
            if key in params.get("scale", {}) or key in params.get("input", {}):
                return source
        return self.host_source or ""

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None, *,
                    freeze_level: int = 0, num_nodes: int = 1, scope: str = "iteration") -> float:
        """``breakdown(...).step_time_s``, remembered per (predictor settings, job shape, GPU, placement):
        a scheduler asks the same pairs round after round. The factors are never changed in place."""
        key = (id(self.factors), self.host_source, self.gpu_model, self.kernel_model, self.tf32_matmul,
               self.tf32_conv, self.hop_latency_s, self.network_gbps, job.model, job.dataset, job.batch_size,
               job.num_gpus, job.amp, job.optimizer, gpu_type, num_gpus, freeze_level, num_nodes, scope)
        try:
            hit = _STEP_MEMO.get(key)
        except TypeError:  # an unhashable argument: breakdown names the field
            hit, key = None, None
        if hit is not None and hit[0] is self.factors:
            return hit[1]
        value = self.breakdown(job, gpu_type, num_gpus, freeze_level=freeze_level, num_nodes=num_nodes,
                               scope=scope).step_time_s
        if key is not None:
            if len(_STEP_MEMO) >= _STEP_MEMO_SIZE:
                _STEP_MEMO.clear()
            _STEP_MEMO[key] = (self.factors, value)
        return value

    def transfer_s(self, job: Job, gpu_type: str, measured: list[tuple[str, int, float]],
                   num_gpus: int | None = None, *, num_nodes: int = 1, scope: str = "iteration",
                   weight: float | None = None) -> float:
        """Step time on ``gpu_type`` given measured steps of the same job elsewhere (Habitat-style).

        ``measured``: ``(gpu, batch_size, seconds)`` of ``job`` (at ``job.num_gpus``). The predictor
        splits each step into a host part ``H`` (dispatch not hidden, per-step host cost, input
        pipeline: the same on any GPU) and a GPU part ``G`` (kernels, optimizer, all-reduce). The
        measurements fit one scale of the GPU part, the host part kept (:func:`transfer.fit_transfer`;
        batch sizes tell the fixed from the per-sample host cost). ``weight`` (default
        :data:`TRANSFER_WEIGHT`, for a workload the factors were fitted on and for one they were not
        alike) blends the result with the prediction without them (:func:`transfer.blend`,
        geometrically): ``1`` takes the measurements whole, ``0`` ignores them.

        Measurements on ``gpu_type`` itself are what the job does there: by default only they are used,
        whole (weight 1), and one at the job's own batch size (and GPU count) is returned as measured
        (the mean of several).
        """
        import math
        import statistics

        from dltsched.predictors.steptime.transfer import blend, fit_transfer

        if not measured:
            raise ValidationError("measured", "give at least one GPU:BATCH:SECONDS measurement")
        if weight is not None and not 0.0 <= weight <= 1.0:
            raise ValidationError("weight", f"{weight!r} not understood; a number from 0 to 1")
        for gpu, batch, seconds in measured:
            if not isinstance(batch, int) or batch < 1 or not (isinstance(seconds, (int, float))
                                                               and math.isfinite(seconds) and seconds > 0):
                raise ValidationError("measured", f"{gpu}:{batch}:{seconds} not understood; "
                                                  "need GPU:BATCH:SECONDS with BATCH >= 1 and finite SECONDS "
                                                  "> 0")
        if weight is None:
            target_id = gpu_spec_checked(gpu_type).id
            here = [(g, b, t) for g, b, t in measured if gpu_spec_checked(g).id == target_id]
            exact = [t for _g, b, t in here if b == job.batch_size]
            if exact and (num_gpus is None or num_gpus == job.num_gpus):
                return float(statistics.fmean(exact))
            if here:
                measured, weight = here, 1.0
            else:
                weight = TRANSFER_WEIGHT
        rows = []
        for gpu, batch, seconds in measured:
            b = self.breakdown(replace(job, batch_size=batch), gpu, num_nodes=num_nodes, scope=scope)
            rows.append((b.overhead_s, b.step_time_s - b.overhead_s, float(seconds)))
        target = self.breakdown(job, gpu_type, num_gpus, num_nodes=num_nodes, scope=scope)
        fitted = fit_transfer(rows, target.overhead_s, target.step_time_s - target.overhead_s)
        return blend(fitted, target.step_time_s, weight)

    def knows(self, job: Job) -> bool:
        """Whether the factors were fitted on measurements of ``job``'s workload (model and dataset; with
        ``gpu_model="kernels"`` also its AMP setting)."""
        model, dataset = resolve(job.model, job.dataset)
        if self.gpu_model != "kernels":
            return self.setup(model, dataset) is not None
        from dltsched.predictors.steptime.kernelstep import workload_key

        params = self.kernel_step_params()
        key = workload_key(self.kernel_source(params, model, dataset, job.amp), model, dataset, job.amp)
        return key in params.get("scale", {}) or key in params.get("input", {})

    def _memory_mib(self, job: Job, agg: Aggregates, freeze_level: int) -> float:
        if self.traced_memory:
            from dltsched.predictors.zoo.memory import DEFAULT_CONTEXT_MIB, reserve_mib

            model, dataset = resolve(job.model, job.dataset)
            reserve = reserve_mib(model, dataset, job.batch_size, job.amp, freeze_level, job.bytes_per_param)
            if reserve is not None:
                return reserve + DEFAULT_CONTEXT_MIB
        trainable = agg.param_bytes[freeze_level]
        weights = agg.param_bytes_total * (1.5 if job.amp else 1.0)  # AMP keeps an FP16 copy too
        grads_and_state = trainable * (1.0 + job.bytes_per_param / 4.0)
        acts = agg.activation_bytes[freeze_level] * job.batch_size * (0.6 if job.amp else 1.0)
        return (weights + grads_and_state + acts) / _MIB + self.workspace_mib

    def memory_mib(self, job: Job, gpu_type: str, *, freeze_level: int = 0) -> float:
        """GPU memory of ``job`` on one GPU of ``gpu_type`` at ``freeze_level`` (MiB)."""
        _model, _dataset, agg, _gpu_spec = self._resolve(job, gpu_type, freeze_level)
        return self._memory_mib(job, agg, freeze_level)

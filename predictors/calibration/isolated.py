"""What jobs alone on one GPU teach: step-time corrections on top of the kernel model, memory,
utilisation.

**Step time** (one worker, scope ``compute``: synthetic inputs already on the GPU)::

    gpu  = s_conv K_conv + s_gemm K_gemm + s_vector K_vector + s_opt O
    step = smooth max(gpu, dispatch_us * n) + fixed_s      (+ input_s + per_sample_s * batch, scope iteration)
    smooth max(a, b) = (a ** p + b ** p) ** (1 / p)        (the form: p and what n counts)

with ``K`` the kernel model's kernels of each op class, forward and backward, and ``O`` the optimizer's
passes at the spec bandwidth (TF32 where the record says). Each scale is a correction of the op class's
kernels on this GPU (conv: convolutions; gemm: linear and batched matmul; vector: element-wise, norms,
softmax), fitted with the host time and the fixed per-step cost by robust least squares on relative errors,
each pulled towards the uncalibrated kernel step model's value (:data:`PRIOR_WEIGHT` on its log), so an op
class the data barely exercise keeps the default. How the host's work meets the GPU's is one of three forms
(:data:`STEP_FORMS`):

- ``overlap`` (the uncalibrated model's): the host enqueues kernels while the GPU runs, ``n`` = kernel
  launches, ``p = 3`` (a smooth maximum);
- ``host_ops``: each framework op costs the host a fixed time the step waits for, ``n`` = the ops the
  framework dispatches (every op forward, one autograd op backward per op of a trainable layer, the
  optimizer's per-tensor ops; a cuDNN recurrent layer is one op however many kernels it launches), ``p = 1``
  (a sum: eager training of small kernels is bound by the host);
- ``ops_and_launches``: ``host_ops`` plus ``launch_us`` per kernel launch (the driver's host time to enqueue
  a kernel, which a library such as cuDNN pays for every kernel it launches inside one framework op: a
  recurrent layer launches its kernels once per time step), pulled towards :data:`LAUNCH_US_PRIOR`.

:func:`fit_step` fits every form and keeps :data:`KEPT_FORM` unless another form's leave-one-model-out error
over the rows it is given is lower by more than one standard error of their paired per-model difference
(:func:`~.nested.kept_within_se`; then the lowest), with :data:`MIN_MODELS_TO_CHOOSE` models or more (fewer
keep it without a choice), so a held-out model never takes part in choosing the form that prices it, and a few
models whose errors differ by chance do not switch it (:mod:`.stepforms`: that choice nested, and over every
fit variant of :class:`StepFitOptions` tried). Scope ``fwd_bwd`` is ``gpu`` without the optimizer; the input
terms are fitted only where rows of scope ``iteration`` were measured (profiles of synthetic inputs have
none), the per-sample one only where some model was timed at two batch sizes or more
(:func:`per_sample_identified`). A mixed-precision job's host ops and launches count the casts of its weights
(:func:`amp_casts`).

**Memory** and **utilisation** alone: :mod:`.resources`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from dltsched.engine.domain.model import Job

#: op classes of the kernel model, grouped into the scales fitted per GPU
CLASS_GROUPS: dict[str, frozenset[str]] = {"conv": frozenset({"conv"}), "gemm": frozenset({"linear", "bmm"}),
                                           "vector": frozenset({"elementwise", "layernorm", "softmax"})}
STEP_PARAMS = (*(f"s_{g}" for g in CLASS_GROUPS), "s_optimizer", "dispatch_us", "fixed_s")
#: the forms of host work against GPU work that :func:`fit_step` chooses between (module docstring):
#: name -> (overlap power, feature counted by ``dispatch_us``, whether ``launch_us`` per launch is added);
#: a fit stores ``overlap_power``, ``host_ops`` (1 where the form counts framework ops) and ``launch_us``
STEP_FORMS: dict[str, tuple[float, str, bool]] = {"overlap": (3.0, "launches", False),
                                                   "host_ops": (1.0, "host_ops", False),
                                                   "ops_and_launches": (1.0, "host_ops", True)}
#: host time (us) of one kernel launch that ``launch_us`` is pulled towards: the CUDA driver's enqueue of a
#: kernel takes a few microseconds of CPU time, whoever launches it
LAUNCH_US_PRIOR = 3.0
#: the form :func:`fit_step` keeps unless the rows say otherwise beyond noise: the one that prices both host
#: costs a step can wait for (the framework's ops and a library's launches inside one op)
KEPT_FORM = "ops_and_launches"
#: whether a mixed-precision job's features count the casts of its weights (:func:`amp_casts`)
AMP_CASTS = True
#: fewest models in a fit for :func:`fit_step` to choose the form by leave-one-model-out
MIN_MODELS_TO_CHOOSE = 4
#: weight of the pull of each fitted log-parameter towards the uncalibrated model's value
PRIOR_WEIGHT = 0.3
#: soft-L1 scale of the relative residuals
LOSS_SCALE = 0.05
_OVERLAP_POWER = 3.0
_MIB = 1024.0 * 1024.0


class _MaskedKernelModel:
    """The kernel model with every kernel outside ``classes`` timed at zero (one op-class group's share)."""

    def __init__(self, base: Any, classes: frozenset[str]) -> None:
        self.base, self.classes = base, classes

    def predict_s(self, kernels: Sequence[Any], gpu: Any, math_mode: str = "fp32",
                  floor: bool = True) -> np.ndarray:
        out = self.base.predict_s(kernels, gpu, math_mode, floor)
        return out * np.array([k.op_class in self.classes for k in kernels], dtype=float)


@cache
def _masked(group: str) -> _MaskedKernelModel:
    from dltsched.predictors.steptime.kernels import load_kernel_model

    return _MaskedKernelModel(load_kernel_model(), CLASS_GROUPS[group])


def _job(model: str, dataset: str, batch: int, amp: bool) -> Job:
    return Job(id="calibration", model=model, batch_size=batch, total_iterations=1.0, dataset=dataset,
               amp=amp)


_FEATURE_MEMO: dict[tuple[Any, ...], dict[str, float]] = {}


def job_features(model: str, dataset: str, batch: int, amp: bool, gpu: str,
                 tf32: frozenset[str] = frozenset(), scope: str = "compute", freeze_level: int = 0,
                 optimizer: str = "sgd") -> dict[str, float]:
    """Kernel seconds per op-class group (``K_conv``...), ``optimizer_s``, ``launches`` and ``host_ops`` of
    one step, and the memory features (``weights_mib``: weights, gradients and optimizer state;
    ``activations_mib``)."""
    key = (model, dataset, batch, amp, gpu, tf32, scope, freeze_level, optimizer)
    hit = _FEATURE_MEMO.get(key)
    if hit is not None:
        return hit
    from dataclasses import replace

    from dltsched.predictors.steptime.kernels import kernel_gpu, load_kernel_model
    from dltsched.predictors.steptime.kernelstep import kernel_work
    from dltsched.predictors.steptime.model import gpu_spec_checked
    from dltsched.predictors.steptime.opgraph import kernel_times, step_kernel_s

    spec = gpu_spec_checked(gpu)
    job = replace(_job(model, dataset, batch, amp), optimizer=optimizer)
    work = kernel_work(job, model, dataset, spec, freeze_level, scope, load_kernel_model(), tf32)
    casts = amp_casts(model, dataset, freeze_level) if amp and AMP_CASTS else 0.0
    out = {"optimizer_s": work["optimizer_s"], "launches": work["launches"] + casts,
           "host_ops": host_ops(model, dataset, freeze_level, scope, optimizer) + casts}
    for group in CLASS_GROUPS:
        masked: Any = _masked(group)
        kt = kernel_times(masked, model, dataset, kernel_gpu(spec), bool(amp), tf32)
        out[f"K_{group}"] = step_kernel_s(kt, batch, freeze_level)
    out |= memory_features(model, dataset, batch, amp, freeze_level, job.bytes_per_param)
    if len(_FEATURE_MEMO) > 100_000:
        _FEATURE_MEMO.clear()
    _FEATURE_MEMO[key] = out
    return out


def memory_features(model: str, dataset: str, batch: int, amp: bool, freeze_level: int,
                    bytes_per_param: float) -> dict[str, float]:
    """The memory features of one job (MiB): ``reserved_mib`` (the caching allocator's reserve for the
    step, :func:`~dltsched.predictors.zoo.memory.reserve_mib`, or the graph's weights and saved activations
    where the model has no trace), ``rnn_reserve_mib``, ``traced`` (1 where traced), and the graph's
    ``weights_mib`` (weights, gradients and optimizer state) and ``activations_mib``."""
    from dltsched.predictors.steptime.aggregates import aggregates
    from dltsched.predictors.zoo.memory import AMP_ACTIVATIONS, AMP_WEIGHTS, reserve_mib, traced_bytes

    agg = aggregates(model, dataset)
    trainable = agg.param_bytes[freeze_level]
    state = trainable * bytes_per_param / 4.0
    out = {"weights_mib": (agg.param_bytes_total * (AMP_WEIGHTS if amp else 1.0) + trainable + state) / _MIB,
           "activations_mib": agg.activation_bytes[freeze_level] * batch * (AMP_ACTIVATIONS if amp else 1.0)
           / _MIB}
    reserved = reserve_mib(model, dataset, batch, amp, freeze_level, bytes_per_param)
    if reserved is None:
        return out | {"reserved_mib": out["weights_mib"] + out["activations_mib"], "rnn_reserve_mib": 0.0,
                      "traced": 0.0}
    rnn = traced_bytes(model, dataset, batch)["rnn_reserve_bytes"] / _MIB
    return out | {"reserved_mib": reserved, "rnn_reserve_mib": rnn, "traced": 1.0}


def amp_casts(model: str, dataset: str, freeze_level: int = 0) -> float:
    """Ops (each one kernel) that mixed precision adds to a step: every weight tensor cast to half
    precision forward, and the cast's backward for each trainable one."""
    from dltsched.predictors.steptime.aggregates import aggregates

    tensors = aggregates(model, dataset).param_tensors
    return float(tensors[0] + tensors[freeze_level])


def host_ops(model: str, dataset: str, freeze_level: int = 0, scope: str = "compute",
             optimizer: str = "sgd") -> float:
    """Ops the framework dispatches in one step: each op of the graph forward, one autograd op backward per
    op of a trainable layer, and (unless ``fwd_bwd``) the optimizer's per-tensor ops of the trainable
    tensors."""
    from dltsched.predictors.steptime.aggregates import aggregates
    from dltsched.predictors.steptime.kernelstep import OPTIMIZER_KERNELS
    from dltsched.predictors.zoo.graphs import COLUMNS, graph_record

    layer = COLUMNS.index("layer")
    nodes = graph_record(model, dataset)["nodes"]
    ops = float(len(nodes) + sum(1 for n in nodes if int(n[layer]) >= freeze_level))
    if scope != "fwd_bwd":
        per_tensor = OPTIMIZER_KERNELS.get(optimizer.lower(), 2)
        ops += aggregates(model, dataset).param_tensors[freeze_level] * per_tensor
    return ops


def default_step_params() -> dict[str, float]:
    """The uncalibrated kernel step model's values of :data:`STEP_PARAMS` (a GPU it was never fitted on)."""
    from dltsched.predictors.steptime.model import load_factors

    p = load_factors()["kernel_step"]
    out = {f"s_{g}": float(p["kernel"]) for g in CLASS_GROUPS}
    out |= {"s_optimizer": float(p["optimizer"]), "dispatch_us": float(p["dispatch_us"]),
            "fixed_s": float(p["fixed_default_s"]), "overlap_power": _OVERLAP_POWER, "host_ops": 0.0,
            "launch_us": 0.0}
    return out


def gpu_seconds(params: dict[str, float], f: dict[str, float], scope: str = "compute") -> float:
    """Calibrated GPU seconds of one step (kernels and, unless ``fwd_bwd``, the optimizer)."""
    gpu = sum(params[f"s_{g}"] * f[f"K_{g}"] for g in CLASS_GROUPS)
    return gpu + (0.0 if scope == "fwd_bwd" else params["s_optimizer"] * f["optimizer_s"])


def host_seconds(params: dict[str, float], f: dict[str, float]) -> float:
    """Host seconds of one step in the fit's form: ``dispatch_us`` per framework op (``host_ops`` forms) or
    per kernel launch (``overlap``), plus ``launch_us`` per kernel launch where the form has it."""
    per = f["host_ops" if params.get("host_ops") else "launches"]
    return 1e-6 * (params["dispatch_us"] * per + params.get("launch_us", 0.0) * f["launches"])


def step_seconds(params: dict[str, float], f: dict[str, float], batch: int, scope: str = "compute") -> float:
    """Calibrated step time of one worker (see the module docstring)."""
    gpu = gpu_seconds(params, f, scope)
    if scope == "fwd_bwd":
        return gpu
    dispatch = host_seconds(params, f)
    power = params.get("overlap_power", _OVERLAP_POWER)
    busy = (gpu**power + dispatch**power) ** (1.0 / power)
    step = busy + params["fixed_s"]
    if scope == "iteration":
        step += params.get("input_s", 0.0) + params.get("per_sample_s", 0.0) * batch
    return step


@dataclass(frozen=True, slots=True)
class Row:
    """One measured job alone, with its features (and the seconds its utilisation window covered, where
    the profile records them)."""

    model: str
    batch: int
    scope: str
    features: dict[str, float]
    step_time_s: float
    gmem_mib: float | None = None
    gpu_util: float | None = None
    step_rel_sd: float | None = None
    amp: bool = False
    util_window_s: float | None = None


@dataclass(frozen=True, slots=True)
class StepFitOptions:
    """How :func:`fit_step_form` fits: the pull of each log-parameter towards the uncalibrated value, the
    per-launch host time ``launch_us`` is pulled towards, residuals as relative errors or logs of the ratio,
    and (``spread_floor``) each row weighted by ``spread_floor / sqrt(spread_floor ** 2 + s ** 2)``, ``s``
    the relative spread of its timed steps (weight 1 where unknown)."""

    prior_weight: float = PRIOR_WEIGHT
    launch_prior_us: float = LAUNCH_US_PRIOR
    log_space: bool = False
    spread_floor: float | None = None

    def weights(self, rows: Sequence[Row]) -> np.ndarray:
        """Each row's weight in the fit."""
        if self.spread_floor is None:
            return np.ones(len(rows))
        f = self.spread_floor
        return np.array([1.0 if r.step_rel_sd is None else f / math.sqrt(f * f + r.step_rel_sd**2)
                         for r in rows])


#: the fit :func:`fit_step` makes of every form
DEFAULT_FIT = StepFitOptions()


def robust_fit(residuals: Any, x0: np.ndarray) -> np.ndarray:
    """The parameters minimising ``residuals`` from ``x0``: least squares with a soft-L1 loss (scale
    :data:`LOSS_SCALE`), so a few rows far off weigh less than their squares."""
    from scipy.optimize import least_squares

    return np.asarray(least_squares(residuals, x0, loss="soft_l1", f_scale=LOSS_SCALE, max_nfev=2000).x)


def _columns(rows: Sequence[Row]) -> dict[str, np.ndarray]:
    """The rows' features as arrays (one entry per row), with ``batch``, ``step`` and scope masks."""
    cols = {k: np.array([r.features[k] for r in rows]) for k in rows[0].features}
    cols["batch"] = np.array([float(r.batch) for r in rows])
    cols["step"] = np.array([r.step_time_s for r in rows])
    cols["fwd_bwd"] = np.array([r.scope == "fwd_bwd" for r in rows])
    cols["iteration"] = np.array([r.scope == "iteration" for r in rows])
    return cols


def _step_array(p: dict[str, float], c: dict[str, np.ndarray]) -> np.ndarray:
    """:func:`step_seconds` of every row of :func:`_columns` at once."""
    kernels = sum(p[f"s_{g}"] * c[f"K_{g}"] for g in CLASS_GROUPS)
    gpu = kernels + np.where(c["fwd_bwd"], 0.0, p["s_optimizer"] * c["optimizer_s"])
    dispatch = 1e-6 * (p["dispatch_us"] * c["host_ops" if p.get("host_ops") else "launches"]
                       + p.get("launch_us", 0.0) * c["launches"])
    power = p.get("overlap_power", _OVERLAP_POWER)
    busy = (gpu**power + dispatch**power) ** (1.0 / power) + p["fixed_s"]
    pipeline = p.get("input_s", 0.0) + p.get("per_sample_s", 0.0) * c["batch"]
    busy = busy + np.where(c["iteration"], pipeline, 0.0)
    return np.where(c["fwd_bwd"], gpu, busy)


def per_sample_identified(rows: Sequence[Row]) -> bool:
    """Whether ``rows`` pin a per-sample input cost: some model timed as whole iterations at two batch sizes
    or more. Across models alone it is confounded with every per-model difference the kernel model misses
    (one batch size per model, a fitted per-sample cost priced other batch sizes up to 20 times too slow)."""
    batches: dict[str, set[int]] = {}
    for r in rows:
        if r.scope == "iteration":
            batches.setdefault(r.model, set()).add(r.batch)
    return any(len(b) > 1 for b in batches.values())


def fit_step_form(rows: Sequence[Row], form: str, options: StepFitOptions | None = None) -> dict[str, float]:
    """The step-time parameters of one overlap form fitted on ``rows`` (module docstring), as ``options`` say
    (the defaults: relative errors, unweighted, :data:`PRIOR_WEIGHT`, :data:`LAUNCH_US_PRIOR`)."""
    opt = options or DEFAULT_FIT
    prior = {**default_step_params(), "launch_us": opt.launch_prior_us}
    power, feature, launches = STEP_FORMS[form]
    names = [*STEP_PARAMS, *(["launch_us"] if launches else [])]
    iteration = any(r.scope == "iteration" for r in rows)
    per_sample = iteration and per_sample_identified(rows)
    x0 = np.log([prior[n] for n in names])
    cols = _columns(rows)

    def unpack(x: np.ndarray) -> dict[str, float]:
        out = {"launch_us": 0.0}
        out |= {n: float(math.exp(v)) for n, v in zip(names, x[:len(names)], strict=True)}
        out["overlap_power"], out["host_ops"] = power, float(feature == "host_ops")
        if iteration:
            out["input_s"] = float(x[len(names)] ** 2 * 1e-2)
            out["per_sample_s"] = float(x[len(names) + 1] ** 2 * 1e-4) if per_sample else 0.0
        return out

    weights = opt.weights(rows)

    def residuals(x: np.ndarray) -> np.ndarray:
        ratio = _step_array(unpack(x), cols) / cols["step"]
        rel = weights * (np.log(np.maximum(ratio, 1e-9)) if opt.log_space else ratio - 1.0)
        reg = opt.prior_weight * (x[:len(names)] - x0)
        extra = 0.02 * x[len(names):] if iteration else np.zeros(0)
        return np.concatenate([rel, reg, extra])

    start = np.concatenate([x0, [0.3, 0.3]]) if iteration else x0
    return unpack(robust_fit(residuals, start))


def lomo_step_apes(rows: Sequence[Row], form: str, options: StepFitOptions | None = None
                   ) -> dict[str, list[float]]:
    """Per model of ``rows``, the absolute percentage errors of its rows predicted in the form ``form``
    (:data:`STEP_FORMS`) fitted on every other model's rows."""
    out = {}
    for model in sorted({r.model for r in rows}):
        params = fit_step_form([r for r in rows if r.model != model], form, options)
        cols = _columns([r for r in rows if r.model == model])
        out[model] = [float(a) for a in 100.0 * np.abs(_step_array(params, cols) / cols["step"] - 1.0)]
    return out


def lomo_step_mape(rows: Sequence[Row], form: str, options: StepFitOptions | None = None) -> float:
    """Leave-one-model-out MAPE (%) of the form ``form`` (:data:`STEP_FORMS`) over ``rows``: each model
    predicted by a fit on the others."""
    return float(np.mean([a for v in lomo_step_apes(rows, form, options).values() for a in v]))


def choose_step_form(rows: Sequence[Row]) -> str:
    """The form :func:`fit_step` fits on ``rows`` (module docstring)."""
    from dltsched.predictors.calibration.nested import kept_within_se

    if len({r.model for r in rows}) < MIN_MODELS_TO_CHOOSE:
        return KEPT_FORM
    forms = [KEPT_FORM, *(f for f in STEP_FORMS if f != KEPT_FORM)]
    return forms[kept_within_se([lomo_step_apes(rows, f) for f in forms])]


_STEP_MEMO: dict[tuple[Any, ...], dict[str, float]] = {}


def fit_step(rows: Sequence[Row]) -> dict[str, float]:
    """The step-time parameters fitted on ``rows`` in the form :func:`choose_step_form` takes (module
    docstring); the defaults where there are none."""
    if not rows:
        return default_step_params()
    key = tuple((r.model, r.batch, r.scope, r.step_time_s, tuple(sorted(r.features.items()))) for r in rows)
    hit = _STEP_MEMO.get(key)
    if hit is not None:
        return dict(hit)
    out = fit_step_form(rows, choose_step_form(rows))
    if len(_STEP_MEMO) > 1_000:
        _STEP_MEMO.clear()
    _STEP_MEMO[key] = out
    return dict(out)

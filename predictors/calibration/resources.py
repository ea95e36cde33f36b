"""What jobs alone on one GPU teach about their memory and utilisation (the step time is :mod:`.isolated`'s).

**Memory** is NVML's used memory of the whole GPU while the job runs alone (what packing needs)::

    memory_mib = context_mib + reserved_mib

``reserved_mib`` is what PyTorch's caching allocator reserves for the training step: the step traced on the
meta device and its allocations replayed through a model of the allocator
(:mod:`dltsched.predictors.zoo.memtrace`), so weights, gradients, the tensors saved for backward, the
transient tensors at the peak, cuDNN's recurrent reserve and workspace, and the allocator's segment rounding
and fragmentation are counted, not fitted. Optimizer state is added per trainable parameter (SGD without
momentum none, momentum one copy, Adam two); a frozen layer drops its gradients and saved activations.
``context_mib`` is what every process pays whatever it trains: the CUDA context, the cuBLAS and cuDNN
handles, their kernels and cuBLAS's workspace. It depends on the GPU, the driver and the libraries, not on
the job, so it is the one parameter a calibration fits (:data:`MEMORY_FORM`), by robust least squares on
relative errors, pulled towards :data:`DEFAULT_CONTEXT_MIB`. Models without a trace fall back to the
operator graph's weights and saved activations. Bundles may also carry a ``scale`` of the reserve and an
``rnn`` share of cuDNN's recurrent reserve (the forms :data:`MEMORY_FORMS` compares; earlier bundles fitted
them) and are read as written.

**Utilisation** (NVML's GPU utilisation alone, %), the ``ratio`` form the calibration fits::

    util = 100 * min(1, k * gpu / max(step, gpu))

with ``gpu`` the calibrated GPU seconds of the step and ``step`` the calibrated step time (the fit and the
prediction both use the step model's prediction), one factor ``k`` fitted by robust least squares on errors
in percentage points (not relative ones: NVML reads anywhere from 1% to 96% for jobs whose steps take a few
milliseconds, and a relative error against a 1% reading outweighs every other row), pulled towards
``k = 1``. Bundles written before it carry the ``power`` form (no ``utilisation_form`` field) and read as
they were written::

    util = 100 * min(1, ((gpu + launch_busy_s * launches) / step) ** gamma)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import dltsched.predictors.calibration.nested as nested
from dltsched.predictors.calibration.isolated import gpu_seconds, robust_fit, step_seconds
from dltsched.predictors.zoo.memory import DEFAULT_CONTEXT_MIB

MEMORY_PARAMS = ("context_mib", "scale", "rnn")
#: each parameter's pull towards the uncalibrated value, against relative errors of the rows
MEMORY_PRIOR_WEIGHT = {"context_mib": 0.05, "scale": 0.3, "rnn": 0.3}

def default_memory_params() -> dict[str, float]:
    """The uncalibrated memory model: the traced reserve as it is and the default context."""
    return {"context_mib": DEFAULT_CONTEXT_MIB, "scale": 1.0, "rnn": 0.0}


def memory_mib(params: dict[str, float], f: dict[str, float]) -> float:
    """Calibrated NVML memory (MiB) of a job alone with features ``f`` (module docstring; a bundle written
    before the traced reserve holds ``weights`` and ``activations`` scales of the graph's bytes instead)."""
    if "weights" in params:
        return (params["context_mib"] + params["weights"] * f["weights_mib"]
                + params["activations"] * f["activations_mib"])
    return (params["context_mib"] + params.get("scale", 1.0) * f["reserved_mib"]
            + params.get("rnn", 0.0) * f["rnn_reserve_mib"])


#: the memory forms compared on the profiles, each by the parameters it fits (the others keep their
#: uncalibrated value): ``graph`` scales the operator graph's weights and saved activations (no trace);
#: the ``trace`` forms fit the context and, or not, a scale of the traced reserve and the recurrent term
MEMORY_FORMS: dict[str, tuple[str, ...]] = {
    "graph": ("context_mib", "weights", "activations"),
    "trace": ("context_mib", "scale", "rnn"),
    "trace_no_rnn": ("context_mib", "scale"),
    "trace_no_scale": ("context_mib", "rnn"),
    "trace_context_only": ("context_mib",),
    "trace_uncalibrated": (),
}
#: the form every calibration fits: the context alone, the traced reserve taken as it is (module docstring;
#: docs/memory.md gives its figures beside the nested figure of choosing among the forms)
MEMORY_FORM = "trace_context_only"


def _fit_graph(got: Sequence[Any]) -> dict[str, float]:
    """The earlier form: log-scales of the context, the graph's weights and its activations, pulled
    towards the uncalibrated values."""
    prior = {"context_mib": default_memory_params()["context_mib"], "weights": 1.0, "activations": 1.0}
    names = MEMORY_FORMS["graph"]
    x0 = np.log([prior[n] for n in names])
    w = np.array([r.features["weights_mib"] for r in got])
    a = np.array([r.features["activations_mib"] for r in got])
    measured = np.array([float(r.gmem_mib) for r in got])

    def residuals(x: np.ndarray) -> np.ndarray:
        c, sw, sa = np.exp(x)
        return np.concatenate([(c + sw * w + sa * a) / measured - 1.0, 0.1 * (x - x0)])

    return {n: float(v) for n, v in zip(names, np.exp(robust_fit(residuals, x0)), strict=True)}


def fit_memory(rows: Sequence[Any], form: str = MEMORY_FORM) -> dict[str, float]:
    """The memory parameters of ``form`` (:data:`MEMORY_FORMS`) fitted on the rows with a measured NVML
    memory (defaults without any)."""
    got = [r for r in rows if r.gmem_mib]
    prior = default_memory_params()
    free = MEMORY_FORMS[form]
    if form == "graph":
        return _fit_graph(got) if got else {**prior, "weights": 1.0, "activations": 1.0}
    if not got or not free:
        return prior
    reserved = np.array([r.features["reserved_mib"] for r in got])
    rnn = np.array([r.features["rnn_reserve_mib"] for r in got])
    measured = np.array([float(r.gmem_mib) for r in got])
    # unknowns scaled to order one: context in GiB, log scale, rnn share
    to_x: dict[str, Callable[[float], float]] = {"context_mib": lambda v: v / 1024.0,
                                                 "scale": lambda v: float(np.log(v)), "rnn": lambda v: v}
    from_x: dict[str, Callable[[float], float]] = {"context_mib": lambda x: x * 1024.0,
                                                   "scale": lambda x: float(np.exp(x)), "rnn": lambda x: x}
    x0 = np.array([to_x[n](prior[n]) for n in free])
    weights = np.array([MEMORY_PRIOR_WEIGHT[n] for n in free])

    def unpack(x: np.ndarray) -> dict[str, float]:
        return prior | {n: float(from_x[n](v)) for n, v in zip(free, x, strict=True)}

    def residuals(x: np.ndarray) -> np.ndarray:
        p = unpack(x)
        pred = p["context_mib"] + p["scale"] * reserved + p["rnn"] * rnn
        return np.concatenate([pred / measured - 1.0, weights * (x - x0)])

    return unpack(robust_fit(residuals, x0))


def _memory_apes(params: dict[str, float], rows: Sequence[Any]) -> list[float]:
    """The absolute percentage errors of the rows with a measured memory."""
    return [100.0 * abs(memory_mib(params, r.features) / r.gmem_mib - 1.0) for r in rows if r.gmem_mib]


def _measured(rows: Sequence[Any], scored: Sequence[Any] | None) -> list[Any]:
    return [r for r in (rows if scored is None else scored) if r.gmem_mib]


def memory_lomo_apes(rows: Sequence[Any], form: str,
                     scored: Sequence[Any] | None = None) -> dict[str, list[float]]:
    """Per model, the absolute percentage errors of its rows in ``scored`` (default: ``rows``) with a
    measured memory, predicted by ``form`` fitted on the rows of every other model."""
    return nested.lomo_apes(rows, form, fit_memory, _memory_apes, _measured(rows, scored))


def choose_memory_form(rows: Sequence[Any], forms: Sequence[str] = tuple(MEMORY_FORMS)) -> str:
    """The form with the lowest leave-one-model-out memory MAPE over ``rows`` (the first of equals)."""
    return nested.choose(rows, forms, fit_memory, _memory_apes)


def memory_nested_lomo_apes(rows: Sequence[Any], forms: Sequence[str] = tuple(MEMORY_FORMS),
                            scored: Sequence[Any] | None = None
                            ) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Per held-out model of ``scored`` (default: ``rows``), the absolute percentage errors of its rows when
    the form is chosen by leave-one-model-out on the other models' rows alone (:func:`choose_memory_form`)
    and fitted on them; and the form each outer fold chose. The honest figure of a choice among forms."""
    return nested.nested_lomo_apes(rows, forms, fit_memory, _memory_apes, _measured(rows, scored))


#: the utilisation forms and their parameters; ``ratio`` is what the calibration fits, ``power`` the form
#: of bundles written before it (read as written)
UTIL_FORMS: dict[str, tuple[str, ...]] = {"ratio": ("k",), "power": ("launch_busy_us", "gamma")}
UTIL_FORM = "ratio"
UTIL_PARAMS = UTIL_FORMS[UTIL_FORM]


def util_form(params: dict[str, float]) -> str:
    """The utilisation form whose parameters ``params`` are (``ratio`` where it has ``k``, else ``power``)."""
    return "ratio" if "k" in params else "power"


def util_pct(params: dict[str, float], busy_s: float, launches: float, step_s: float) -> float:
    """Calibrated NVML utilisation (%) of a job alone whose GPU work takes ``busy_s`` of ``step_s`` (the form
    that ``params`` belong to: :func:`util_form`)."""
    if util_form(params) == "ratio":
        return 100.0 * min(1.0, params["k"] * busy_s / max(step_s, busy_s, 1e-12))
    x = (busy_s + params["launch_busy_us"] * 1e-6 * launches) / max(step_s, 1e-12)
    return 100.0 * min(1.0, max(x, 1e-6) ** params["gamma"])


def fit_util(rows: Sequence[Any], step_params: dict[str, float], form: str = UTIL_FORM) -> dict[str, float]:
    """The utilisation parameters of ``form`` fitted on rows with a measured utilisation (the step model's
    GPU seconds; errors in percentage points, module docstring). ``ratio`` divides by the step model's
    step time (what a job never measured gets), ``power`` by the measured one (as it was fitted before)."""
    if form not in UTIL_FORMS:
        raise ValueError(f"utilisation form {form!r}: use one of {sorted(UTIL_FORMS)}")
    names = UTIL_FORMS[form]
    got = [r for r in rows if r.gpu_util is not None and r.scope != "fwd_bwd"]
    prior = {"launch_busy_us": 2.0, "gamma": 1.0, "k": 1.0}
    if not got:
        return {n: prior[n] for n in names}
    x0 = np.log([prior[n] for n in names])

    busy = np.array([gpu_seconds(step_params, r.features, r.scope) for r in got])
    launches = np.array([r.features["launches"] for r in got])
    measured = np.array([float(r.gpu_util or 0.0) for r in got])
    if form == "ratio":
        step = np.array([step_seconds(step_params, r.features, r.batch, r.scope) for r in got])

        def residuals(x: np.ndarray) -> np.ndarray:
            points = np.minimum(1.0, np.exp(x[0]) * busy / np.maximum(np.maximum(step, busy), 1e-12))
            return np.concatenate([points - measured / 100.0, 0.1 * (x - x0)])
    else:
        step = np.array([r.step_time_s for r in got])

        def residuals(x: np.ndarray) -> np.ndarray:
            launch_us, gamma = np.exp(x)
            share = np.maximum((busy + launch_us * 1e-6 * launches) / step, 1e-6)
            points = np.minimum(1.0, share**gamma) - measured / 100.0
            return np.concatenate([points, 0.1 * (x - x0)])

    return {n: float(v) for n, v in zip(names, np.exp(robust_fit(residuals, x0)), strict=True)}

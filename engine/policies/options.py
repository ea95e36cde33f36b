"""Typed options of every registered policy (pydantic models), checked before a policy is built.

Each policy declares the options a user may set (``--option KEY=VALUE`` on the command line, keyword
arguments of :func:`dltsched.engine.app.registry.make_policy`) as a strict pydantic model: no string or
bool where a number is meant, no NaN or infinity, every magnitude bounded. An unknown key, a key the
policy does not take, or a value of the wrong type or out of range is one
:class:`~dltsched.engine.domain.errors.ValidationError` naming the option and what is allowed. Only the
options given are passed on; the policy's own defaults fill the rest.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator

from dltsched.engine.domain.errors import ValidationError

#: longest interval between decision rounds, and longest wait before batching events: 10^7 s (~116 days)
MAX_INTERVAL_S = 1e7
#: longest solver time limit per round: one day
MAX_TIME_LIMIT_S = 86_400.0

_STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)


class PolicyOptions(BaseModel):
    """Options every policy takes."""

    model_config = _STRICT
    round_interval_s: float | None = Field(
        None, gt=0, le=MAX_INTERVAL_S,
        description="seconds between periodic decision rounds (none: only at arrivals and completions)")


class FifoOptions(PolicyOptions):
    """The options of FIFO (``--option KEY=VALUE``); each field describes itself."""

    backfill: bool = Field(False, description="start later jobs that fit while the head of the queue waits")


class SjfOptions(PolicyOptions):
    """The options of SJF (``--option KEY=VALUE``); each field describes itself."""

    pass


class _Packing(PolicyOptions):
    max_jobs_per_gpu: int = Field(2, ge=1, le=3, description="jobs sharing one GPU at most")
    memory_margin: float = Field(0.9, gt=0, le=1, description="share of GPU memory a packing may fill")


class GandivaOptions(_Packing):
    """The options of Gandiva (``--option KEY=VALUE``); each field describes itself."""

    pass


class IsacppOptions(_Packing):
    """The options of ISACPP (``--option KEY=VALUE``); each field describes itself."""

    pass


class LucidOptions(_Packing):
    """The options of Lucid (``--option KEY=VALUE``); each field describes itself."""

    max_class_sum: int = Field(2, ge=0, le=6, description="largest sum of sensitivity classes on one GPU")
    class_thresholds: tuple[float, float] | None = Field(
        None, description="mean co-located speeds below which a job is class 2 and class 1 (the paper: 0.85, "
                          "0.95); none: the quantiles of the job types seen, at Lucid's label shares")

    @field_validator("class_thresholds")
    @classmethod
    def _ordered(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is not None and not 0.0 < value[0] <= value[1] <= 1.0:
            raise ValueError("must be two speeds with 0 < first <= second <= 1")
        return value


class GavelOptions(_Packing):
    """The options of Gavel (``--option KEY=VALUE``); each field describes itself."""

    pair_candidates: int = Field(2, ge=1, le=64, description="co-location partners tried per job")
    colocation: bool = Field(True, description="allow space sharing")


class IceFrogOptions(PolicyOptions):
    """The options of IceFrog (``--option KEY=VALUE``); each field describes itself."""

    max_freeze_levels: int | None = Field(None, ge=0, le=64, description="freeze levels tried (none: all)")


class TiresiasOptions(PolicyOptions):
    """The options of Tiresias (``--option KEY=VALUE``); each field describes itself."""

    thresholds_gpu_s: tuple[float, ...] = Field(
        (3600.0, 36000.0), min_length=1, max_length=16,
                                                description="attained-service queue limits, GPU-seconds")
    starvation_factor: float = Field(8.0, gt=0, le=1e6,
                                     description="promote a job waiting this many times its run")

    @field_validator("thresholds_gpu_s")
    @classmethod
    def _ascending(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 < v <= 1e12 for v in value) or list(value) != sorted(value):
            raise ValueError("must be ascending numbers in (0, 1e12]")
        return value


class _Solver(PolicyOptions):
    backend: str = Field("cpsat", max_length=64, description="cpsat | milp | greedy | greedy:<policy> | auto")
    objective: str = Field("jct", max_length=64, description="round objective")
    length_weight: float = Field(0.0, ge=0, le=4,
                                 description="effective_progress only: weigh each job by its "
                                 "predicted remaining time to this power, longest first (makespan; 0: off)")
    stage_horizon_s: float = Field(0.0, ge=0, le=MAX_INTERVAL_S,
                                   description="effective_progress and jct: credit a "
                                   "co-located job with its mean speed until it completes or this "
                                   "many seconds pass, as partners finish (multi-stage values; 0: "
                                   "first-stage speeds)")
    time_limit_s: float = Field(1.0, gt=0, le=MAX_TIME_LIMIT_S, description="solver time limit per round, s")
    migration_penalty: float = Field(0.1, ge=0, le=1e6, description="price of moving or preempting a job")
    fallback_policy: str = Field("sjf", max_length=64,
                                 description="policy deciding a round the solver misses")
    exact_max_jobs: int = Field(100, ge=1, le=1_000_000,
                                description="backend auto: exact solver up to this size")
    min_interval_s: float | Literal["auto"] = Field(
        "auto", description="batch events closer than this to the last solve, seconds >= 0 "
                            "(auto: 300 s per 128 GPUs, at least 300 s)")
    max_round_jobs: int | None = Field(256, ge=2, le=1_000_000, description="jobs one solve decides at most")
    shortcuts_above_gpus: int = Field(256, ge=0, le=1_000_000,
                                      description="clusters above this many GPUs start "
                                      "arrivals without a solve, solve roomy rounds and let movers wait")
    arrival_share: float = Field(0.05, ge=0, le=1,
                                 description="a solve for new waiting jobs alone waits (up to "
                                 "round_interval_s after the last) until they are this share of the active "
                                 "jobs (0: at once)")
    refreeze_step: float = Field(0.02, ge=0, le=1,
                                 description="up to shortcuts_above_gpus GPUs, a running job alone on its "
                                 "GPUs is priced again for its best freeze level there once it has run this "
                                 "share of its work (0: every decision point; 1: only solves change levels)")
    deterministic: bool = Field(True,
                                description="reproducible solves (one worker, deterministic time budget)")

    @field_validator("min_interval_s")
    @classmethod
    def _interval(cls, value: float | str) -> float | str:
        if not isinstance(value, str) and not 0 <= value <= MAX_INTERVAL_S:
            raise ValueError(f"must be auto or seconds in [0, {MAX_INTERVAL_S:g}]")
        return value


class _Freezing(BaseModel):
    model_config = _STRICT
    freeze_levels: tuple[int, ...] | int = Field(4,
                                                 description="count of freeze levels, or the allowed levels")

    @field_validator("freeze_levels")
    @classmethod
    def _levels(cls, value: tuple[int, ...] | int) -> tuple[int, ...] | int:
        levels = (value,) if isinstance(value, int) else value
        if not levels or any(not 0 <= v <= 64 for v in levels):
            raise ValueError("must be a count 0..64 or a non-empty list of levels 0..64")
        return value


class _Colocation(BaseModel):
    model_config = _STRICT
    max_jobs_per_gpu: int = Field(2, ge=1, le=3, description="jobs sharing one GPU at most")


class OptimizingOptions(_Solver, _Freezing, _Colocation):
    """The options of the optimizing policy (``--option KEY=VALUE``); each field describes itself."""

    pass


class NoColocationOptions(_Solver, _Freezing):
    """The ablation fixes max_jobs_per_gpu=1, so it does not take that option."""


class NoFreezingOptions(_Solver, _Colocation):
    """The ablation fixes freeze_levels=(0,), so it does not take that option."""


#: policy name -> its option model (policies registered elsewhere without one take no options)
POLICY_OPTIONS: dict[str, type[PolicyOptions]] = {
    "fifo": FifoOptions,
    "sjf": SjfOptions,
    "tiresias": TiresiasOptions,
    "gandiva": GandivaOptions,
    "icefrog": IceFrogOptions,
    "isacpp": IsacppOptions,
    "lucid": LucidOptions,
    "gavel": GavelOptions,
    "optimizing": OptimizingOptions,
    "optimizing-nocoloc": NoColocationOptions,
    "optimizing-nofreeze": NoFreezingOptions,
}

_RULES = {
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "finite_number": "must be finite",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "tuple_type": "must be a list",
    "string_too_long": "must be a short string",
}
_BOUNDS = {"greater_than_equal": ">= {ge}", "greater_than": "> {gt}", "less_than": "< {lt}",
           "less_than_equal": "<= {le}", "too_short": "at least {min_length} item(s)",
           "too_long": "at most {max_length} item(s)"}


def option_names(model: type[BaseModel] | None) -> tuple[str, ...]:
    """The option keys ``model`` takes (none without a model).

    Parameters
    ----------
    model
        A policy's options model.

    Returns
    -------
    tuple of str
        The keys, sorted.
    """
    return tuple(sorted(model.model_fields)) if model is not None else ()


def _key(key: Any) -> str:
    text = str(key)
    return text if text.isprintable() and len(text) <= 40 else _short(text)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_options(policy: str, model: type[BaseModel] | None, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` checked against ``model``.

    Parameters
    ----------
    policy
        The policy's name (for messages).
    model
        Its options model (``None``: it takes no options).
    options
        The options given.

    Returns
    -------
    dict of str to Any
        The given keys with their checked values.

    Raises
    ------
    ValidationError
        ``option KEY: ...`` naming the allowed keys (an unknown key) or the rule (a bad value).
    """
    allowed = option_names(model)
    for key in options:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            taken = f"allowed: {', '.join(allowed)}" if allowed else "it takes no options"
            raise ValidationError(f"option {_key(key)}", f"not an option of policy '{policy}'; {hint}{taken}")
    if model is None or not options:
        return {}
    try:
        checked = model.model_validate(dict(options))
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        loc = [p for p in first["loc"] if isinstance(p, str) and p in allowed] or [str(first["loc"][0])]
        kind, ctx = first["type"], first.get("ctx", {})
        if kind in _BOUNDS:
            rule = "must be " + _BOUNDS[kind].format(**ctx)
        elif kind == "value_error":
            rule = str(ctx.get("error", first["msg"]))
        else:
            union = {"int_type", "float_type", "tuple_type",
                     "none_required"} if len(first["loc"]) > 1 else set()
            rule = _RULES.get(kind, first["msg"]) if kind not in union else "has the wrong type"
        field = model.model_fields[loc[0]] if loc[0] in model.model_fields else None
        what = f" ({field.description})" if field is not None and field.description else ""
        return _raise(f"option {loc[0]}", f"{_short(options.get(loc[0]))} not understood; {rule}{what}")
    return {k: getattr(checked, k) for k in options}


def _raise(path: str, problem: str) -> dict[str, Any]:
    raise ValidationError(path, problem)

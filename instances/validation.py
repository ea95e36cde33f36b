"""The instance JSON format (version 1), validation half: pydantic models, limits, JSON Schema, messages.

The pydantic models only check shapes and ranges (:mod:`dltsched.engine.domain.model` checks meaning:
catalog names, sizes, duplicates); :func:`convert_pydantic_error` turns pydantic's errors into one-line
:class:`~dltsched.engine.domain.errors.ValidationError`, e.g. ``jobs[3].num_gpus: 0 not understood; must be >=
1``. The published schema is ``instances/schema/instance-v1.schema.json`` (see :func:`json_schema`). Loading,
converting to the domain model and saving are in :mod:`dltsched.instances.schema`.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from dltsched.engine.domain.errors import ValidationError

FORMAT = "dltsched-instance"
VERSION = 1
SCHEMA_FILE = ("schema", "instance-v1.schema.json")

_STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

# ---- bounds of every magnitude (the error message names the limit) -------------------------
#: GPUs in one node
MAX_GPUS_PER_NODE = 1024
#: nodes in one cluster, and GPUs in all
MAX_NODES = 100_000
MAX_CLUSTER_GPUS = 1_000_000
#: jobs in one instance
MAX_JOBS = 1_000_000
#: work of one job, iterations (10^10: years of training at the fastest step times)
MAX_ITERATIONS = 1e10
#: every time in seconds (arrival, deadline, duration hint): 10^9 s, about 31 years
MAX_TIME_S = 1e9
MAX_BATCH_SIZE = 1_000_000
#: GPU memory, GiB
MAX_MEMORY_GIB = 10_000.0
#: bandwidths (Gbit/s, GB/s) and throughputs (TFLOP/s)
MAX_RATE = 1e6
#: characters in an id or a name; items in a list of names
MAX_TEXT = 256
MAX_NAMES = 256
#: nesting depth of metadata and reference objects
MAX_DEPTH = 32

#: ids and names: printable text, no control characters (tabs, newlines, escapes)
_PRINTABLE = r"^[^\x00-\x1f\x7f-\x9f]*$"


def _name(description: str | None = None) -> Any:
    return Field(min_length=1, max_length=MAX_TEXT, pattern=_PRINTABLE, description=description)


def _text(default: Any = ..., description: str | None = None) -> Any:
    return Field(default, max_length=MAX_TEXT, pattern=_PRINTABLE, description=description)


def check_json_value(value: Any, path: str = "", depth: int = 0) -> None:
    """Refuse a NaN or infinite number anywhere in ``value``, or nesting deeper than :data:`MAX_DEPTH`
    (free-form metadata).

    Parameters
    ----------
    value
        A parsed JSON value.
    path
        Its field path, for messages.
    depth
        Its nesting depth.

    Raises
    ------
    ValidationError
        Naming the path of the first such value.
    """
    if depth > MAX_DEPTH:
        raise ValidationError(path, f"nested deeper than {MAX_DEPTH} levels; flatten it")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValidationError(path, f"{value!r} not understood; numbers must be finite")
    if isinstance(value, dict):
        for k, v in value.items():
            check_json_value(v, f"{path}.{k}" if path else str(k), depth + 1)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            check_json_value(v, f"{path}[{i}]", depth + 1)


class NodeModel(BaseModel):
    """One server: ``num_gpus`` GPUs of one type."""

    model_config = _STRICT
    id: str = _name()
    gpu_type: str = _name("GPU catalog id or alias, or a custom gpu_types id")
    num_gpus: int = Field(ge=1, le=MAX_GPUS_PER_NODE)
    network_gbps: float = Field(100.0, gt=0, le=MAX_RATE, description="inter-node link, Gbit/s")


class GpuTypeModel(BaseModel):
    """A GPU type's spec-sheet values. The predictors and the simulator price catalog GPU types only, so an
    entry must be a catalog type with the catalog's values (anything else is refused at load)."""

    model_config = _STRICT
    id: str = _name()
    name: str = _text()
    architecture: str = _text()
    memory_gib: float = Field(gt=0, le=MAX_MEMORY_GIB)
    memory_bandwidth_gbs: float = Field(gt=0, le=MAX_RATE)
    fp32_tflops: float = Field(gt=0, le=MAX_RATE)
    fp16_tensor_tflops: float = Field(gt=0, le=MAX_RATE)
    sm_count: int = Field(ge=1, le=1_000_000)
    interconnect: str = _text()
    intra_node_bandwidth_gbs: float = Field(gt=0, le=MAX_RATE)
    aliases: list[Annotated[str, _name()]] = Field(default_factory=list, max_length=MAX_NAMES)


class ClusterModel(BaseModel):
    """Nodes, plus specs of their GPU types (catalog types only; see ``GpuTypeModel``)."""

    model_config = _STRICT
    nodes: list[NodeModel] = Field(min_length=1, max_length=MAX_NODES)
    gpu_types: list[GpuTypeModel] = Field(default_factory=list, max_length=MAX_NAMES)

    @pydantic.model_validator(mode="after")
    def _total_gpus(self) -> ClusterModel:
        total = sum(n.num_gpus for n in self.nodes)
        if total > MAX_CLUSTER_GPUS:
            raise ValueError(f"{total} GPUs in all; a cluster holds at most {MAX_CLUSTER_GPUS}")
        return self


class JobModel(BaseModel):
    """One training job; work is ``total_iterations`` or ``epochs`` x ``iterations_per_epoch``."""

    model_config = ConfigDict(
        **_STRICT,
        json_schema_extra={
            "oneOf": [
                {
                    "required": ["total_iterations"],
                    "not": {"anyOf": [{"required": ["epochs"]}, {"required": ["iterations_per_epoch"]}]},
                },
                {"required": ["epochs", "iterations_per_epoch"], "not": {"required": ["total_iterations"]}},
            ]
        },
    )
    id: str = _name()
    model: str = _name("model-zoo id or alias")
    batch_size: int = Field(ge=1, le=MAX_BATCH_SIZE)
    num_gpus: int = Field(1, ge=1, le=MAX_CLUSTER_GPUS)
    total_iterations: float | None = Field(None, gt=0, le=MAX_ITERATIONS)
    epochs: float | None = Field(None, gt=0, le=MAX_ITERATIONS)
    iterations_per_epoch: float | None = Field(None, gt=0, le=MAX_ITERATIONS)
    arrival_time_s: float = Field(0.0, ge=0, le=MAX_TIME_S)
    amp: bool = False
    optimizer: str = _text("sgd")
    dataset: str | None = _text(None)
    weight: float = Field(1.0, gt=0, le=1e6)
    freeze_allowed: bool = False
    accuracy_budget: float = Field(0.0, ge=0, lt=1)
    deadline_s: float | None = Field(None, gt=0, le=MAX_TIME_S)
    gpu_types: list[Annotated[str, _name()]] = Field(
        default_factory=list, max_length=MAX_NAMES, description="allowed GPU types (empty: any)")
    gpu_fraction: float = Field(1.0, gt=0, le=1)
    hyperparameters: dict[Annotated[str, _name()], float | Annotated[str, _text()]] = Field(
        default_factory=dict, max_length=MAX_NAMES)
    duration_hint_s: float | None = Field(None, ge=0, le=MAX_TIME_S,
                                          description="duration in the source trace")

    @pydantic.model_validator(mode="after")
    def _work(self) -> JobModel:
        if self.epochs is not None and self.iterations_per_epoch is not None \
                and self.epochs * self.iterations_per_epoch > MAX_ITERATIONS:
            raise ValueError("epochs x iterations_per_epoch is "
                             f"{self.epochs * self.iterations_per_epoch:.3g}; "
                             f"must be <= {MAX_ITERATIONS:.0e} iterations")
        return self


class InstanceModel(BaseModel):
    """A dltsched scheduling instance, format version 1."""

    model_config = ConfigDict(**_STRICT, title="dltsched instance v1")
    format: Literal["dltsched-instance"]
    version: Literal[1]
    name: str = _name()
    metadata: dict[str, Any] = Field(default_factory=dict)
    reference: dict[str, Any] = Field(default_factory=dict)
    cluster: ClusterModel
    jobs: list[JobModel] = Field(min_length=1, max_length=MAX_JOBS)

    @pydantic.field_validator("metadata", "reference")
    @classmethod
    def _finite(cls, value: dict[str, Any], info: pydantic.ValidationInfo) -> dict[str, Any]:
        check_json_value(value, str(info.field_name))  # raises ValidationError, passed on as it is
        return value


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the format, as generated from the pydantic models.

    Returns
    -------
    dict of str to Any
        The schema (draft 2020-12).
    """
    schema = InstanceModel.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:dltsched:instance:v1",
        **schema,
    }


def shipped_schema_path() -> Path:
    """Where the published schema file lives in the package.

    Returns
    -------
    Path
        ``instances/schema/instance-v1.schema.json``.
    """
    return Path(str(resources.files("dltsched.instances").joinpath(*SCHEMA_FILE)))


# ---- pydantic errors -> one-line ValidationError -------------------------------------------

_MODELS_BY_PATH: dict[tuple[str, ...], type[BaseModel]] = {
    (): InstanceModel,
    ("cluster",): ClusterModel,
    ("cluster", "nodes"): NodeModel,
    ("cluster", "gpu_types"): GpuTypeModel,
    ("jobs",): JobModel,
}
_UNION_TAGS = {"float", "str", "int", "bool"}
_RULES = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be finite",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "model_type": "must be an object",
    "dict_type": "must be an object",
    "list_type": "must be a list",
    "string_too_short": "must be a non-empty string",
    "string_pattern_mismatch": "must be printable text (no control characters)",
    "literal_error": "",
}


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _unknown_field(loc: tuple[Any, ...]) -> str:
    model = _MODELS_BY_PATH.get(tuple(p for p in loc[:-1] if isinstance(p, str)))
    allowed = list(model.model_fields) if model else []
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"unknown field; {hint}allowed: {', '.join(allowed)}"


def short_repr(value: Any) -> str:
    """A value as messages quote it: its ``repr``, cut to a readable length.

    Parameters
    ----------
    value
        The value.

    Returns
    -------
    str
        The text.
    """
    if isinstance(value, dict | list) and len(value) > 3:
        return f"{type(value).__name__} of {len(value)} items"
    try:
        text = repr(value)
    except ValueError:  # an integer too long to print
        return "a number too large"
    return text if len(text) <= 60 else text[:57] + "..."


def _rule(kind: str, ctx: Mapping[str, Any]) -> str:
    bounds = {
        "greater_than_equal": ">= {ge}",
        "greater_than": "> {gt}",
        "less_than": "< {lt}",
        "less_than_equal": "<= {le}",
    }
    if kind in bounds:
        return "must be " + bounds[kind].format(**ctx)
    if kind == "literal_error":
        return f"must be {ctx['expected']}"
    if kind == "too_short":
        return f"must have at least {ctx['min_length']} item(s)"
    if kind == "too_long":
        return f"must have at most {ctx['max_length']} item(s)"
    if kind == "string_too_long":
        return f"must be at most {ctx['max_length']} characters"
    if kind == "value_error":
        return str(ctx.get("error", ""))
    return _RULES.get(kind, "")


def convert_pydantic_error(err: pydantic.ValidationError) -> ValidationError:
    """The first problem of a pydantic error, as a one-line :class:`ValidationError`.

    Parameters
    ----------
    err
        The error.

    Returns
    -------
    ValidationError
        Its field path and the rule, e.g. ``jobs[3].num_gpus: 0 not understood; must be >= 1``.
    """
    first = err.errors()[0]
    cause = first.get("ctx", {}).get("error")
    if isinstance(cause, ValidationError):
        return cause
    loc = tuple(first["loc"])
    union = bool(loc) and loc[-1] in _UNION_TAGS
    if union:
        loc = loc[:-1]
    path = _path(loc)
    kind = first["type"]
    if kind == "missing":
        return ValidationError(path, "missing; this field is required")
    if kind == "extra_forbidden":
        return ValidationError(path, _unknown_field(loc))
    rule = "must be a number or a string" if union else (_rule(kind, first.get("ctx", {})) or first["msg"])
    if kind == "value_error":
        return ValidationError(path, rule)
    return ValidationError(path, f"{short_repr(first.get('input'))} not understood; {rule}")


# ---- strict JSON with field paths ----------------------------------------------------------


class _NonFinite:
    """Where the parser met ``NaN``, ``Infinity`` or a number beyond float range (its text)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class _DuplicateKeys(dict):  # type: ignore[type-arg]
    """An object in which ``key`` was given more than once."""

    key: str = ""


class _LongInteger:
    """Where the parser met an integer too long to read (its number of digits)."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits


#: the longest integer literal read (Python's own limit on converting text to int)
MAX_INT_DIGITS = 4300


def _first_problem(value: Any, path: str, depth: int = 0) -> tuple[str, str] | None:
    """Path and problem of the first marker the strict parser left in ``value``."""
    if isinstance(value, _NonFinite):
        return path, f"{value.text[:40]} not understood; numbers must be finite (at most about 1.8e308)"
    if isinstance(value, _LongInteger):
        return path, f"an integer of {value.digits} digits not understood; at most {MAX_INT_DIGITS} digits"
    if depth > 2 * MAX_DEPTH + 64:
        return None
    if isinstance(value, _DuplicateKeys):
        key = value.key
        return (f"{path}.{key}" if path else key), "given twice in one object; give each key once"
    if isinstance(value, dict):
        for k, v in value.items():
            found = _first_problem(v, f"{path}.{k}" if path else str(k), depth + 1)
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _first_problem(v, f"{path}[{i}]", depth + 1)
            if found:
                return found
    return None


def parse_strict_json(text: str, where: str) -> Any:
    """Strict JSON, every refusal naming the field: NaN, Infinity, a number beyond float range, an integer of
    more than :data:`MAX_INT_DIGITS` digits or a key given twice are reported at their path
    (``jobs[0].total_iterations``), with ``where`` (a file name) in the message; malformed text, deep nesting
    and integers too long to read name ``where``.

    Parameters
    ----------
    text
        The JSON text.
    where
        What the text is (a file name, ``body``), for messages.

    Returns
    -------
    Any
        The parsed value.

    Raises
    ------
    ValidationError
        When the text is not strict JSON.
    """
    import json

    marked = False

    def constant(name: str) -> Any:
        nonlocal marked
        marked = True
        return _NonFinite(name)

    def number(token: str) -> Any:
        value = float(token)
        return value if math.isfinite(value) else constant(token)

    def integer(token: str) -> Any:
        nonlocal marked
        digits = len(token.lstrip("-"))
        if digits <= MAX_INT_DIGITS:
            return int(token)
        marked = True
        return _LongInteger(digits)

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal marked
        out = dict(items)
        if len(out) == len(items):
            return out
        seen: set[str] = set()
        dup = _DuplicateKeys(out)
        dup.key = next(k for k, _ in items if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        marked = True
        return dup

    try:
        data = json.loads(text, parse_constant=constant, parse_float=number, parse_int=integer,
                          object_pairs_hook=pairs)
    except json.JSONDecodeError as err:
        problem = (": empty file" if not text.strip()
                   else f" at line {err.lineno}, column {err.colno}: {err.msg}")
        raise ValidationError(where, f"malformed JSON{problem}") from None
    except RecursionError:
        raise ValidationError(where, "JSON nested too deeply to read; flatten it") from None
    except ValueError as err:  # e.g. an integer of more than 4300 digits
        problem = "an integer with more than 4300 digits" if "digits" in str(err) else str(err)
        raise ValidationError(where, f"JSON not understood: {problem}") from None
    if marked:
        found = _first_problem(data, "")
        if found is not None:
            path, problem = found
            raise ValidationError(path or where, f"{problem} (in {where})" if path else problem)
    return data


# ---- what the predictors and the simulator can use -----------------------------------------


def check_usable(model: InstanceModel) -> None:
    """The checks beyond shape that every reader of an instance runs (``instance validate`` as ``simulate``,
    ``solve`` and the embedding API): custom GPU types must be usable end to end, and they are not, since the
    predictors and the ground truth price catalog GPU types only. So a ``cluster.gpu_types`` entry must be a
    catalog type with the catalog's spec (a copy, harmless); an id given twice, a type the catalog lacks and
    a catalog type with other values are refused, naming the entry.

    Parameters
    ----------
    model
        The validated file.

    Raises
    ------
    ValidationError
        Naming the first unusable entry.
    """
    from dltsched.engine.domain.catalog import gpu_catalog

    catalog = gpu_catalog()
    seen: dict[str, int] = {}
    for k, g in enumerate(model.cluster.gpu_types):
        for name in (g.id, *g.aliases):
            key = name.strip().lower()
            if key in seen and seen[key] != k:
                raise ValidationError(f"cluster.gpu_types[{k}].id",
                                      f"duplicate GPU type id or alias '{name}' (also "
                                      f"cluster.gpu_types[{seen[key]}]); give each type once")
            seen[key] = k
    fields = sorted((f for f in GpuTypeModel.model_fields if f not in ("id", "aliases")),
                    key=lambda f: f != "memory_gib")
    for k, g in enumerate(model.cluster.gpu_types):
        where = f"cluster.gpu_types[{k}]"
        try:
            canonical = catalog.resolve(g.id)
        except ValueError:
            raise ValidationError(f"{where}.id",
                                  f"custom GPU type '{g.id}' cannot be scheduled: the predictors and "
                                  "the simulator price catalog GPU types only; name a catalog "
                                  "type in the nodes "
                                  f"(known: {', '.join(sorted(catalog.items))})") from None
        spec = catalog.items[canonical]
        differ = [f for f in fields if getattr(g, f) != getattr(spec, f)]
        if differ:
            shown = ", ".join(f"{f} {getattr(g, f)!r} (catalog {getattr(spec, f)!r})" for f in differ[:3])
            raise ValidationError(where,
                                  f"redefines catalog GPU type '{canonical}': {shown}; leave it out to use "
                                  "the catalog's spec (the predictors and the simulator use the catalog's)")


def check_datasets(inst: Any) -> None:
    """Each job's dataset is one its model knows (the predictors price a model on a dataset).

    Parameters
    ----------
    inst
        The instance.

    Raises
    ------
    ValidationError
        At ``jobs[i].dataset``, listing the model's datasets.
    """
    from dltsched.engine.domain.catalog import model_spec

    for i, job in enumerate(inst.jobs):
        if job.dataset is None:
            continue
        try:
            model_spec(job.model).dataset(job.dataset)
        except ValueError:
            known = sorted(model_spec(job.model).datasets)
            raise ValidationError(f"jobs[{i}].dataset", f"'{job.dataset}' not known for model '{job.model}'; "
                                  f"one of {', '.join(known)} (or leave it out)") from None

"""The instance JSON format (version 1): pydantic I/O models, JSON Schema, load and save.

A file looks like ``{"format": "dltsched-instance", "version": 1, "name", "metadata", "reference",
"cluster": {"nodes": [...], "gpu_types": [...]}, "jobs": [...]}``; each job gives its work either
as ``total_iterations`` or as ``epochs`` x ``iterations_per_epoch``. The pydantic models only
check shapes and ranges; :mod:`dltsched.engine.domain` checks meaning (catalog names, sizes,
duplicates). Every problem is raised as one-line
:class:`~dltsched.engine.errors.ValidationError`, e.g. ``jobs[3].num_gpus: 0 not understood; must be >= 1``.
The published schema is ``instances/schema/instance-v1.schema.json`` (see :func:`json_schema`).
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from dltsched.engine.domain import Cluster, GpuType, Instance, Job, Node
from dltsched.engine.errors import ValidationError

FORMAT = "dltsched-instance"
VERSION = 1
SCHEMA_FILE = ("schema", "instance-v1.schema.json")

_STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


class NodeModel(BaseModel):
    """One server: ``num_gpus`` GPUs of one type."""

    model_config = _STRICT
    id: str = Field(min_length=1)
    gpu_type: str = Field(min_length=1, description="GPU catalog id or alias, or a custom gpu_types id")
    num_gpus: int = Field(ge=1)
    network_gbps: float = Field(100.0, gt=0, description="inter-node link, Gbit/s")


class GpuTypeModel(BaseModel):
    """A GPU type that is not in the catalog (spec-sheet values)."""

    model_config = _STRICT
    id: str = Field(min_length=1)
    name: str
    architecture: str
    memory_gib: float = Field(gt=0)
    memory_bandwidth_gbs: float = Field(gt=0)
    fp32_tflops: float = Field(gt=0)
    fp16_tensor_tflops: float = Field(gt=0)
    sm_count: int = Field(ge=1)
    interconnect: str
    intra_node_bandwidth_gbs: float = Field(gt=0)
    aliases: list[str] = Field(default_factory=list)


class ClusterModel(BaseModel):
    """Nodes, plus specs of GPU types the catalog does not know."""

    model_config = _STRICT
    nodes: list[NodeModel] = Field(min_length=1)
    gpu_types: list[GpuTypeModel] = Field(default_factory=list)


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
    id: str = Field(min_length=1)
    model: str = Field(min_length=1, description="model-zoo id or alias")
    batch_size: int = Field(ge=1)
    num_gpus: int = Field(1, ge=1)
    total_iterations: float | None = Field(None, gt=0)
    epochs: float | None = Field(None, gt=0)
    iterations_per_epoch: float | None = Field(None, gt=0)
    arrival_time_s: float = Field(0.0, ge=0)
    amp: bool = False
    optimizer: str = "sgd"
    dataset: str | None = None
    weight: float = Field(1.0, gt=0)
    freeze_allowed: bool = False
    accuracy_budget: float = Field(0.0, ge=0, lt=1)
    deadline_s: float | None = Field(None, gt=0)
    gpu_types: list[str] = Field(default_factory=list, description="allowed GPU types (empty: any)")
    gpu_fraction: float = Field(1.0, gt=0, le=1)
    hyperparameters: dict[str, float | str] = Field(default_factory=dict)
    duration_hint_s: float | None = Field(None, ge=0, description="duration in the source trace")


class InstanceModel(BaseModel):
    """A dltsched scheduling instance, format version 1."""

    model_config = ConfigDict(**_STRICT, title="dltsched instance v1")
    format: Literal["dltsched-instance"]
    version: Literal[1]
    name: str = Field(min_length=1)
    metadata: dict[str, Any] = Field(default_factory=dict)
    reference: dict[str, Any] = Field(default_factory=dict)
    cluster: ClusterModel
    jobs: list[JobModel] = Field(min_length=1)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the format, as generated from the pydantic models."""
    schema = InstanceModel.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:dltsched:instance:v1",
        **schema,
    }


def shipped_schema_path() -> Path:
    """Where the published schema file lives in the package."""
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


def _short_repr(value: Any) -> str:
    text = repr(value)
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
    return _RULES.get(kind, "")


def convert_pydantic_error(err: pydantic.ValidationError) -> ValidationError:
    """The first problem of a pydantic error, as a one-line :class:`ValidationError`."""
    first = err.errors()[0]
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
    return ValidationError(path, f"{_short_repr(first.get('input'))} not understood; {rule}")


# ---- dict <-> domain --------------------------------------------------------------------------


def _total_iterations(job: JobModel) -> float:
    by_epochs = job.epochs is not None or job.iterations_per_epoch is not None
    if job.total_iterations is not None and by_epochs:
        raise ValidationError(
            "total_iterations", "given together with epochs/iterations_per_epoch; give only one of them"
        )
    if job.total_iterations is not None:
        return job.total_iterations
    if job.epochs is None or job.iterations_per_epoch is None:
        raise ValidationError(
            "total_iterations", "missing; give total_iterations, or epochs and iterations_per_epoch"
        )
    return job.epochs * job.iterations_per_epoch


def _job(job: JobModel, i: int) -> Job:
    try:
        return Job(
            id=job.id,
            model=job.model,
            batch_size=job.batch_size,
            total_iterations=_total_iterations(job),
            num_gpus=job.num_gpus,
            arrival_time_s=job.arrival_time_s,
            amp=job.amp,
            optimizer=job.optimizer,
            dataset=job.dataset,
            weight=job.weight,
            freeze_allowed=job.freeze_allowed,
            accuracy_budget=job.accuracy_budget,
            deadline_s=job.deadline_s,
            gpu_types=tuple(job.gpu_types),
            gpu_fraction=job.gpu_fraction,
            hyperparameters=tuple(job.hyperparameters.items()),
            duration_hint_s=job.duration_hint_s,
        )
    except ValidationError as err:
        raise err.under(f"jobs[{i}]") from None


def _cluster(model: ClusterModel) -> Cluster:
    custom = {}
    for k, g in enumerate(model.gpu_types):
        try:
            custom[g.id] = GpuType(**{**g.model_dump(), "aliases": tuple(g.aliases)})
        except ValidationError as err:
            raise ValidationError(f"cluster.gpu_types[{k}]", err.problem) from None
    nodes = []
    for k, n in enumerate(model.nodes):
        try:
            nodes.append(Node(n.id, n.gpu_type, n.num_gpus, n.network_gbps))
        except ValidationError as err:
            raise err.under(f"cluster.nodes[{k}]") from None
    return Cluster(tuple(nodes), custom)


def instance_from_model(model: InstanceModel) -> Instance:
    """Domain :class:`Instance` from a validated :class:`InstanceModel`."""
    cluster = _cluster(model.cluster)
    jobs = tuple(_job(j, i) for i, j in enumerate(model.jobs))
    return Instance(model.name, cluster, jobs, dict(model.metadata), dict(model.reference))


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise FileNotFoundError(f"instance file '{path}' not found; pass an existing .json file") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValidationError(
            str(path), f"malformed JSON at line {err.lineno}, column {err.colno}: {err.msg}"
        ) from None


def load_instance(source: str | os.PathLike[str] | Mapping[str, Any]) -> Instance:
    """Read and validate an instance from a JSON file path or an already-parsed dict."""
    raw = dict(source) if isinstance(source, Mapping) else _read_json(Path(source))
    if not isinstance(raw, dict):
        raise ValidationError("", f"top level is {type(raw).__name__}; an instance must be a JSON object")
    if raw.get("format", FORMAT) == FORMAT and raw.get("version") not in (None, VERSION):
        raise ValidationError(
            "version", f"{raw['version']!r} not understood; this dltsched reads version {VERSION}"
        )
    try:
        model = InstanceModel.model_validate(raw)
    except pydantic.ValidationError as err:
        raise convert_pydantic_error(err) from None
    return instance_from_model(model)


_JOB_DEFAULTS: dict[str, Any] = {
    "amp": False,
    "optimizer": "sgd",
    "dataset": None,
    "weight": 1.0,
    "freeze_allowed": False,
    "accuracy_budget": 0.0,
    "deadline_s": None,
    "gpu_types": [],
    "gpu_fraction": 1.0,
    "hyperparameters": {},
    "duration_hint_s": None,
}


def job_to_dict(job: Job) -> dict[str, Any]:
    """A job as a format-v1 dict; optional fields equal to their default are left out."""
    out: dict[str, Any] = {
        "id": job.id,
        "model": job.model,
        "batch_size": job.batch_size,
        "num_gpus": job.num_gpus,
        "total_iterations": job.total_iterations,
        "arrival_time_s": job.arrival_time_s,
    }
    values = {
        "amp": job.amp,
        "optimizer": job.optimizer,
        "dataset": job.dataset,
        "weight": job.weight,
        "freeze_allowed": job.freeze_allowed,
        "accuracy_budget": job.accuracy_budget,
        "deadline_s": job.deadline_s,
        "gpu_types": list(job.gpu_types),
        "gpu_fraction": job.gpu_fraction,
        "hyperparameters": dict(job.hyperparameters),
        "duration_hint_s": job.duration_hint_s,
    }
    out.update({k: v for k, v in values.items() if v != _JOB_DEFAULTS[k]})
    return out


def _custom_gpu_types(cluster: Cluster) -> list[dict[str, Any]]:
    from dltsched.instances.catalog import gpu_catalog

    catalog = gpu_catalog().items
    out = []
    for gid, spec in cluster.gpu_types.items():
        if catalog.get(gid) != spec:
            fields = {f: getattr(spec, f) for f in GpuTypeModel.model_fields}
            out.append({**fields, "aliases": list(spec.aliases)})
    return out


def instance_to_dict(inst: Instance) -> dict[str, Any]:
    """The instance as a format-v1 dict (``load_instance`` of it gives back an equal instance)."""
    cluster: dict[str, Any] = {
        "nodes": [
            {"id": n.id, "gpu_type": n.gpu_type, "num_gpus": n.num_gpus, "network_gbps": n.network_gbps}
            for n in inst.cluster.nodes
        ]
    }
    custom = _custom_gpu_types(inst.cluster)
    if custom:
        cluster["gpu_types"] = custom
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": inst.name,
        "metadata": dict(inst.metadata),
        "reference": dict(inst.reference),
        "cluster": cluster,
        "jobs": [job_to_dict(j) for j in inst.jobs],
    }


def dumps_instance(inst: Instance) -> str:
    """Canonical JSON text of an instance: one job per line, so diffs stay readable."""
    data = instance_to_dict(inst)
    jobs = data.pop("jobs")
    head = json.dumps(data, indent=2)
    lines = ",\n".join("    " + json.dumps(j) for j in jobs)
    return head[:-2] + ',\n  "jobs": [\n' + lines + "\n  ]\n}\n"


def save_instance(inst: Instance, path: str | os.PathLike[str]) -> Path:
    """Write ``inst`` as JSON to ``path`` (folders are created); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(dumps_instance(inst))
    return p

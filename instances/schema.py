"""The instance JSON format (version 1): load, convert to the domain model, and save.

A file looks like ``{"format": "dltsched-instance", "version": 1, "name", "metadata", "reference",
"cluster": {"nodes": [...], "gpu_types": [...]}, "jobs": [...]}``; each job gives its work either
as ``total_iterations`` or as ``epochs`` x ``iterations_per_epoch``. Validation (pydantic models, limits,
JSON Schema, one-line messages) is in :mod:`dltsched.instances.validation`; this module re-exports its
public names, so ``dltsched.instances.schema`` stays the one import for the format. Every problem is raised
as one-line :class:`~dltsched.engine.domain.errors.ValidationError`, e.g.
``jobs[3].num_gpus: 0 not understood; must be >= 1``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pydantic

from dltsched.engine.domain.errors import ValidationError, write_text_file
from dltsched.engine.domain.model import Cluster, GpuType, Instance, Job, Node
from dltsched.instances.validation import (
    FORMAT,
    MAX_BATCH_SIZE,
    MAX_CLUSTER_GPUS,
    MAX_DEPTH,
    MAX_GPUS_PER_NODE,
    MAX_ITERATIONS,
    MAX_JOBS,
    MAX_MEMORY_GIB,
    MAX_NAMES,
    MAX_NODES,
    MAX_RATE,
    MAX_TEXT,
    MAX_TIME_S,
    SCHEMA_FILE,
    VERSION,
    ClusterModel,
    GpuTypeModel,
    InstanceModel,
    JobModel,
    NodeModel,
    check_datasets,
    check_json_value,
    check_usable,
    convert_pydantic_error,
    json_schema,
    parse_strict_json,
    shipped_schema_path,
    short_repr,
)

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
    """Domain :class:`Instance` from a validated :class:`InstanceModel`.

    Parameters
    ----------
    model
        The validated file.

    Returns
    -------
    Instance
        The instance (the domain model checks meaning: catalog names, sizes, duplicates; and what the
        predictors and the simulator can use: catalog GPU types only, each job's dataset known for its model).
    """
    check_usable(model)
    cluster = _cluster(model.cluster)
    jobs = tuple(_job(j, i) for i, j in enumerate(model.jobs))
    inst = Instance(model.name, cluster, jobs, dict(model.metadata), dict(model.reference))
    check_datasets(inst)
    return inst


def parse_json_text(text: str, where: str) -> Any:
    """Strict JSON: NaN, Infinity, numbers beyond float range and a key given twice in one object are refused
    with the field's path; deep nesting and integers too long to read are one :class:`ValidationError`
    naming ``where``.

    Parameters
    ----------
    text
        The JSON text.
    where
        What the text is (a file name), for messages.

    Returns
    -------
    Any
        The parsed value.

    Raises
    ------
    ValidationError
        When the text is not strict JSON.
    """
    return parse_strict_json(text, where)


def _read_json(path: Path) -> Any:
    from dltsched.engine.domain.limits import read_limited

    try:
        data = read_limited(path, str(path))
    except FileNotFoundError:
        raise FileNotFoundError(f"instance file '{path}' not found; pass an existing .json file") from None
    except IsADirectoryError:
        raise ValidationError(str(path), "is a folder; pass a .json file") from None
    return parse_json_text(data.decode("utf-8"), str(path))


def load_instance(source: str | os.PathLike[str] | Mapping[str, Any]) -> Instance:
    """Read and validate an instance from a JSON file path or an already-parsed dict.

    Parameters
    ----------
    source
        A file path, or the parsed file.

    Returns
    -------
    Instance
        The instance.

    Raises
    ------
    ValidationError
        One line naming the first problem: a missing or unreadable file, bad JSON, an unknown format or
        version, a field out of shape or range, or a meaning the domain model refuses.
    """
    raw = dict(source) if isinstance(source, Mapping) else _read_json(Path(source))
    if not isinstance(raw, dict):
        raise ValidationError("", f"top level is {type(raw).__name__}; an instance must be a JSON object")
    version = raw.get("version")
    if raw.get("format",
               FORMAT) == FORMAT and (version is not None
                                      and (type(version) is not int or version != VERSION)):
        raise ValidationError(
            "version", f"{short_repr(version)} not understood; this dltsched reads version {VERSION}"
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
    """A job as a format-v1 dict; optional fields equal to their default are left out.

    Parameters
    ----------
    job
        The job.

    Returns
    -------
    dict of str to Any
        The dict.
    """
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
    from dltsched.engine.domain.catalog import gpu_catalog

    catalog = gpu_catalog().items
    out = []
    for gid, spec in cluster.gpu_types.items():
        if catalog.get(gid) != spec:
            fields = {f: getattr(spec, f) for f in GpuTypeModel.model_fields}
            out.append({**fields, "aliases": list(spec.aliases)})
    return out


def instance_to_dict(inst: Instance) -> dict[str, Any]:
    """The instance as a format-v1 dict (``load_instance`` of it gives back an equal instance).

    Parameters
    ----------
    inst
        The instance.

    Returns
    -------
    dict of str to Any
        The dict.
    """
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
    """Canonical JSON text of an instance: one job per line, so diffs stay readable.

    Parameters
    ----------
    inst
        The instance.

    Returns
    -------
    str
        The text.
    """
    data = instance_to_dict(inst)
    jobs = data.pop("jobs")
    head = json.dumps(data, indent=2, allow_nan=False)
    lines = ",\n".join("    " + json.dumps(j, allow_nan=False) for j in jobs)
    return head[:-2] + ',\n  "jobs": [\n' + lines + "\n  ]\n}\n"


def save_instance(inst: Instance, path: str | os.PathLike[str]) -> Path:
    """Write ``inst`` as JSON to ``path`` (folders are created).

    Parameters
    ----------
    inst
        The instance.
    path
        The file.

    Returns
    -------
    Path
        The path written.
    """
    return write_text_file(path, dumps_instance(inst))


__all__ = [
    # validation (re-exported: dltsched.instances.schema is the one import for the format)
    "FORMAT", "MAX_BATCH_SIZE", "MAX_CLUSTER_GPUS", "MAX_DEPTH", "MAX_GPUS_PER_NODE", "MAX_ITERATIONS",
           "MAX_JOBS",
    "MAX_MEMORY_GIB", "MAX_NAMES", "MAX_NODES", "MAX_RATE", "MAX_TEXT", "MAX_TIME_S", "SCHEMA_FILE",
           "VERSION",
    "ClusterModel", "GpuTypeModel", "InstanceModel", "JobModel", "NodeModel", "check_json_value",
    "convert_pydantic_error", "json_schema", "shipped_schema_path",
    # load, convert, save
    "dumps_instance", "instance_from_model", "instance_to_dict", "job_to_dict", "load_instance",
           "parse_json_text",
    "save_instance",
]

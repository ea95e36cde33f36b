"""Reading Slurm for ``dltsched slurm``: the job-comment convention (``dltsched:model=..,batch=..,iters=..``)
and the answers of ``squeue --json`` / ``sinfo --json`` (OpenAPI v0.0.38 shapes, Slurm 22.05), with Slurm's
host-list and gres strings. Pure functions; ``tests/adapters/data`` holds answers recorded from a real Slurm."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dltsched.engine.domain.errors import ValidationError

COMMENT_PREFIX = "dltsched:"
#: job states in which a job holds its resources
ACTIVE_STATES = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"})
#: node states and flags under which a node takes no new job
UNUSABLE_NODE = frozenset({"DOWN", "DRAIN", "DRAINING", "DRAINED", "FAIL", "FAILING", "NOT_RESPONDING",
                           "MAINTENANCE", "REBOOT_REQUESTED", "INVALID", "FUTURE", "UNKNOWN", "POWERED_DOWN"})


# ----------------------------------------------------------------------------- the comment convention

@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a job's ``--comment`` says about it."""

    model: str
    batch_size: int
    iterations: float
    step_time_s: float | None = None
    gpu_type: str | None = None
    weight: float = 1.0


_SPEC_KEYS = {"model", "batch", "iters", "step_s", "gpu_type", "weight"}


def parse_comment(comment: str | None) -> JobSpec | None:
    """The :class:`JobSpec` of a ``dltsched:key=value,...`` comment; ``None`` for any other comment.

    Raises :class:`ValidationError` naming the key when a dltsched comment is malformed."""
    text = (comment or "").strip()
    if not text.startswith(COMMENT_PREFIX):
        return None
    fields_: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text[len(COMMENT_PREFIX):].split(","))):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise ValidationError("comment", f"'{part}' not understood; write key=value")
        if key not in _SPEC_KEYS:
            raise ValidationError(f"comment.{key}", f"unknown key; known: {', '.join(sorted(_SPEC_KEYS))}")
        fields_[key] = value
    for key in ("model", "batch", "iters"):
        if key not in fields_:
            raise ValidationError(f"comment.{key}", "missing; a dltsched comment needs model, batch and iters")

    def number(key: str, kind: Callable[[str], Any] = float) -> Any:
        try:
            value = kind(fields_[key])
        except ValueError:
            raise ValidationError(f"comment.{key}", f"'{fields_[key]}' not understood; must be a number") from None
        if not value > 0:
            raise ValidationError(f"comment.{key}", f"{fields_[key]} not understood; must be > 0")
        return value

    return JobSpec(model=fields_["model"], batch_size=number("batch", int), iterations=number("iters"),
                   step_time_s=number("step_s") if "step_s" in fields_ else None,
                   gpu_type=fields_.get("gpu_type"), weight=number("weight") if "weight" in fields_ else 1.0)


def format_comment(spec: JobSpec) -> str:
    """The comment that :func:`parse_comment` reads back as ``spec``."""
    parts = [f"model={spec.model}", f"batch={spec.batch_size}", f"iters={spec.iterations:g}"]
    parts += [f"step_s={spec.step_time_s:g}"] if spec.step_time_s is not None else []
    parts += [f"gpu_type={spec.gpu_type}"] if spec.gpu_type else []
    parts += [f"weight={spec.weight:g}"] if spec.weight != 1.0 else []
    return COMMENT_PREFIX + ",".join(parts)


# ----------------------------------------------------------------------------- Slurm's answers

@dataclass(frozen=True, slots=True)
class SlurmNode:
    name: str
    gpu_type: str | None
    num_gpus: int
    usable: bool
    partitions: tuple[str, ...]
    used_gpus: tuple[int, ...] = ()
    state: str = ""


@dataclass(frozen=True, slots=True)
class SlurmJob:
    job_id: str
    state: str
    partition: str
    comment: str
    num_gpus: int
    held: bool
    submit_time: int
    start_time: int = 0
    end_time: int = 0
    restart_count: int = 0
    #: node -> GPU indices Slurm gave the job there (running jobs only)
    gpus: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    reason: str = ""


def expand_hostlist(text: str) -> list[str]:
    """``dl[1-3],gpu7`` -> ``['dl1', 'dl2', 'dl3', 'gpu7']`` (Slurm's host-list syntax, one bracket level)."""
    out: list[str] = []
    for prefix, inner, plain in re.findall(r"([^,\[]*)\[([^\]]*)\]|([^,\[\]]+)", text or ""):
        if plain:
            out.append(plain.strip())
            continue
        for item in inner.split(","):
            lo, _, hi = item.partition("-")
            width = len(lo)
            out.extend(f"{prefix}{i:0{width}d}" for i in range(int(lo), int(hi or lo) + 1))
    return [h for h in out if h]


def parse_index_list(text: str) -> tuple[int, ...]:
    """``0-1,3`` -> ``(0, 1, 3)``; ``N/A`` or empty -> ``()``."""
    out: list[int] = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item or not item[0].isdigit():
            continue
        lo, _, hi = item.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return tuple(out)


_GRES = re.compile(r"gpu(?::(?P<type>[A-Za-z][\w.-]*))?:(?P<count>\d+)(?:\([^)]*?IDX:(?P<idx>[^)]*)\))?")


def parse_gres(text: str | None) -> tuple[str | None, int, tuple[int, ...]]:
    """GPU type, count and indices of a gres string (``gpu:v100:4``, ``gres:gpu:2``, ``gpu:v100:2(IDX:0-1)``)."""
    gpu_type: str | None = None
    count, idx = 0, ()  # type: tuple[int, tuple[int, ...]]
    for m in _GRES.finditer(text or ""):
        gpu_type = gpu_type or m.group("type")
        count += int(m.group("count"))
        idx += parse_index_list(m.group("idx") or "")
    return gpu_type, count, idx


def _answer(text: str, key: str, command: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValidationError(command, f"answer is not JSON ({err}); is this Slurm >= 21.08 with --json?") from None
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        raise ValidationError(command, f"answer has no '{key}' list")
    if data.get("errors"):
        raise ValidationError(command, f"Slurm reports errors: {data['errors']}")
    return data[key]  # type: ignore[no-any-return]


def parse_squeue_json(text: str) -> list[SlurmJob]:
    """The jobs of a ``squeue --json`` answer."""
    jobs = []
    for j in _answer(text, "jobs", "squeue --json"):
        nodes = expand_hostlist(j.get("nodes") or "")
        per_node = [parse_gres(d) for d in j.get("gres_detail") or []]
        gpus = {n: g[2] for n, g in zip(nodes, per_node, strict=False)}
        req = parse_gres(j.get("tres_per_node") or "")[1] * max(1, int(j.get("node_count") or 1))
        req = req or parse_gres(j.get("tres_per_job") or "")[1]
        reason = str(j.get("state_reason") or "")
        jobs.append(SlurmJob(
            job_id=str(j["job_id"]), state=str(j.get("job_state") or ""), partition=str(j.get("partition") or ""),
            comment=str(j.get("comment") or ""), num_gpus=req or sum(len(g) for g in gpus.values()),
            held=str(j.get("job_state")) == "PENDING" and (reason.startswith("JobHeld") or j.get("priority") == 0),
            submit_time=int(j.get("submit_time") or 0), start_time=int(j.get("start_time") or 0),
            end_time=int(j.get("end_time") or 0), restart_count=int(j.get("restart_cnt") or 0), gpus=gpus,
            reason=reason))
    return jobs


def parse_sinfo_json(text: str) -> list[SlurmNode]:
    """The nodes of a ``sinfo --json`` answer (one entry per node)."""
    nodes: dict[str, SlurmNode] = {}
    for n in _answer(text, "nodes", "sinfo --json"):
        gpu_type, count, _ = parse_gres(n.get("gres"))
        words = {str(n.get("state") or "").upper(), *(str(f).upper() for f in n.get("state_flags") or [])}
        nodes[n["name"]] = SlurmNode(
            name=n["name"], gpu_type=gpu_type, num_gpus=count, usable=not words & UNUSABLE_NODE,
            partitions=tuple(n.get("partitions") or ()), used_gpus=parse_gres(n.get("gres_used"))[2],
            state="+".join(sorted(w for w in words if w)))
    return list(nodes.values())

"""Reading Slurm for ``dltsched slurm``: the job-comment convention (``dltsched:model=..,batch=..,iters=..``)
and the answers of ``squeue --json`` / ``sinfo --json``, with Slurm's host-list, gres and constraint strings.

Slurm 22.05 to 24.x answer in different shapes, all read here:

- v0.0.38 (22.05): plain strings and integers; ``job_state: "PENDING"``; node ``state: "idle"`` with
  ``state_flags: ["DRAIN"]``; node ``features`` a comma-separated string.
- v0.0.39 (23.02) and later: job and node states are lists (``job_state: ["PENDING"]``,
  ``state: ["IDLE", "DRAIN"]``); numbers are ``{"set", "infinite", "number"}`` objects; features lists;
  a ``hold`` flag; ``tres_per_node`` as ``gres/gpu:a100:2`` (23.11+).
- v0.0.40 / v0.0.41 / v0.0.42 (23.11, 24.05, 24.11): as v0.0.39, with ``job_resources`` nodes and the
  comment possibly an object (``{"job": ..., "administrator": ..., "system": ...}``).

Pure functions; ``tests/adapters/data`` holds answers recorded from a real Slurm 22.05 and fixtures in each
later version's documented shape."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dltsched.engine.domain.errors import ValidationError

COMMENT_PREFIX = "dltsched:"
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


#: what the daemon appends to the comment of a job it cannot plan: ``<spec> # dltsched: <reason>``
NOTE_MARK = " # dltsched: "


def strip_note(comment: str | None) -> str:
    """The comment without the daemon's note (the job's own description)."""
    return (comment or "").split(NOTE_MARK, 1)[0].strip()


def parse_comment(comment: str | None) -> JobSpec | None:
    """The :class:`JobSpec` of a ``dltsched:key=value,...`` comment (the daemon's ``# dltsched: ...`` note
    after it ignored); ``None`` for any other comment.

    Raises :class:`ValidationError` naming the key when a dltsched comment is malformed."""
    text = strip_note(comment)
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
            raise ValidationError(
                f"comment.{key}", "missing; a dltsched comment needs model, batch and iters"
            )

    def number(key: str, kind: Callable[[str], Any] = float) -> Any:
        try:
            value = kind(fields_[key])
        except ValueError:
            raise ValidationError(
                f"comment.{key}", f"'{fields_[key]}' not understood; must be a number"
            ) from None
        if not value > 0:
            raise ValidationError(f"comment.{key}", f"{fields_[key]} not understood; must be > 0")
        return value

    return JobSpec(
        model=fields_["model"],
        batch_size=number("batch", int),
        iterations=number("iters"),
        step_time_s=number("step_s") if "step_s" in fields_ else None,
        gpu_type=fields_.get("gpu_type"),
        weight=number("weight") if "weight" in fields_ else 1.0,
    )


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
    """A node as Slurm reports it (``sinfo --json``).

    Parameters
    ----------
    name
        The node's Slurm name.
    gpu_type
        The GPU type its gres names (``gpu:a100:4``), as Slurm spells it; ``None`` where the gres names none.
    num_gpus
        The GPUs its gres configures.
    usable
        Whether jobs may start on it (not down, drained, failing, ...).
    partitions
        The partitions it belongs to.
    used_gpus
        The GPU indices jobs hold on it now.
    state
        Slurm's states of the node, joined by ``+`` (``IDLE``, ``MIXED+DRAIN``, ...).
    features
        Its active features (its configured ones where Slurm reports no active ones).
    full
        No CPU or no memory is left for another job.
    """

    name: str
    gpu_type: str | None
    num_gpus: int
    usable: bool
    partitions: tuple[str, ...]
    used_gpus: tuple[int, ...] = ()
    state: str = ""
    features: tuple[str, ...] = ()
    #: no CPU or no memory left for another job (an exclusive job holds it whole, or its cores are all taken)
    full: bool = False


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """A job as Slurm reports it (``squeue --json``).

    Parameters
    ----------
    job_id
        Slurm's job id.
    state
        Its base state (``PENDING``, ``RUNNING``, ...).
    partition
        The partition it was submitted to.
    comment
        Its comment (``--comment``), where a job may describe itself to dltsched.
    num_gpus
        The GPUs it asks for, over all its nodes.
    held
        Whether it is pending and held (Slurm's hold flag, a ``JobHeld...`` reason or priority 0).
    submit_time
        When it was submitted, in seconds since the Unix epoch.
    start_time
        When it started (or is expected to), in seconds since the Unix epoch; 0: unknown.
    end_time
        When it ended (or is expected to), in seconds since the Unix epoch; 0: unknown.
    restart_count
        How many times Slurm has requeued and restarted it.
    gpus
        Node -> the GPU indices Slurm gave the job there (running jobs; ``()`` where Slurm does not say).
    reason
        Slurm's reason it is pending (``JobHeldUser``, ``Resources``, ...); "" for none.
    node_count
        The nodes it asks for (a gang job: ``num_gpus // node_count`` GPUs on each).
    gpu_type
        The GPU type of a typed gres request (``--gres=gpu:a100:2``), as Slurm spells it.
    constraint
        The ``--constraint`` feature expression ("" for none).
    flags
        Slurm's state flags beside the base state (``COMPLETING``, ``REQUEUED``, ...).
    exclusive
        The job asked for whole nodes (``--exclusive``): no other job may share them.
    """

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
    #: node -> GPU indices Slurm gave the job there (running jobs; ``()`` where Slurm does not say)
    gpus: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    reason: str = ""
    #: nodes the job asks for (a gang job: ``num_gpus // node_count`` GPUs on each)
    node_count: int = 1
    #: the GPU type of a typed gres request (``--gres=gpu:a100:2``), as Slurm spells it
    gpu_type: str | None = None
    #: the ``--constraint`` feature expression ("" for none)
    constraint: str = ""
    #: Slurm's state flags beside the base state (``COMPLETING``, ``REQUEUED``, ...)
    flags: frozenset[str] = frozenset()
    #: the job asked for whole nodes (``--exclusive``): no other job may share them
    exclusive: bool = False


#: base state a job is in while it still holds (or takes) its nodes' resources
ACTIVE_STATES = frozenset(
    {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING", "STAGE_OUT"}
)
#: states that are pending and held under another name (requeued held, special exit)
HELD_STATES = frozenset({"REQUEUE_HOLD", "SPECIAL_EXIT"})
_BASE_STATES = (
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
)


def number(value: Any, default: int = 0) -> int:
    """An integer field in any version's shape: ``5``, ``"5"``, ``null``, or ``{"set", "infinite", "number"}``
    (not set or infinite: ``default``)."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite", False):
            return default
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return default
    try:
        out = float(value)
    except (TypeError, ValueError):
        return default
    return int(out) if out == out and abs(out) < 2**62 else default


def text(value: Any) -> str:
    """A string field: a string, or v0.0.40+'s comment object (its ``job`` part)."""
    if isinstance(value, Mapping):
        value = value.get("job") or ""
    return "" if value is None else str(value)


def words(value: Any) -> list[str]:
    """A list-or-comma-string field (states, features) as upper/plain words."""
    if value is None:
        return []
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    return [str(v).strip() for v in items if str(v).strip()]


def job_state(value: Any) -> tuple[str, frozenset[str]]:
    """The effective state and the flags of a job: ``"RUNNING"`` (v0.0.38) or ``["RUNNING", "COMPLETING"]``
    (v0.0.39+). A job completing or configuring holds its resources and reads as ``COMPLETING`` /
    ``CONFIGURING``; one requeued held (``REQUEUE_HOLD``, ``SPECIAL_EXIT``) as held ``PENDING``."""
    items = [w.upper() for w in words(value)]
    flags = frozenset(items)
    for state in ("COMPLETING", "CONFIGURING"):
        if state in flags:
            return state, flags
    if flags & HELD_STATES:
        return "PENDING", flags | {"HELD"}
    if "REQUEUED" in flags and "PENDING" in flags:
        return "PENDING", flags
    base = next((w for w in items if w in _BASE_STATES), items[0] if items else "")
    return base, flags


def expand_hostlist(text_: str) -> list[str]:
    """``dl[1-3],gpu7`` -> ``['dl1', 'dl2', 'dl3', 'gpu7']`` (Slurm's host-list syntax, one bracket level)."""
    out: list[str] = []
    for prefix, inner, plain in re.findall(r"([^,\[]*)\[([^\]]*)\]|([^,\[\]]+)", text_ or ""):
        if plain:
            out.append(plain.strip())
            continue
        for item in inner.split(","):
            lo, _, hi = item.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                continue
            width = len(lo)
            out.extend(
                f"{prefix}{i:0{width}d}" for i in range(int(lo), min(int(hi or lo), int(lo) + 100_000) + 1)
            )
    return [h for h in out if h]


def parse_index_list(text_: str) -> tuple[int, ...]:
    """``0-1,3`` -> ``(0, 1, 3)``; ``N/A`` or empty -> ``()``."""
    out: list[int] = []
    for item in (text_ or "").split(","):
        item = item.strip()
        lo, _, hi = item.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            continue
        out.extend(range(int(lo), min(int(hi or lo), int(lo) + 4096) + 1))
    return tuple(out)


_GRES = re.compile(
    r"gpu(?::(?P<type>[A-Za-z][\w.-]*?))?(?:[:=](?P<count>\d+))?(?:\([^)]*?IDX:(?P<idx>[^)]*)\)|(?=[,(\s]|$))"
)


def parse_gres(text_: str | None) -> tuple[str | None, int, tuple[int, ...]]:
    """GPU type, count and indices of a gres string: ``gpu:v100:4``, ``gres:gpu:2``, ``gres/gpu:a100:2``
    (23.11+), ``gres/gpu=2``, ``gpu:v100:2(IDX:0-1)``, ``gpu:a100:4(S:0-1)``."""
    gpu_type: str | None = None
    count, idx = 0, ()  # type: tuple[int, tuple[int, ...]]
    for m in _GRES.finditer(text_ or ""):
        found = parse_index_list(m.group("idx") or "")
        if m.group("count") is None and m.group("idx") is None:
            continue
        gpu_type = gpu_type or m.group("type")
        count += int(m.group("count")) if m.group("count") is not None else len(found)
        idx += found
    return gpu_type, count, idx


def constraint_features(constraint: str) -> list[set[str]] | None:
    """A ``--constraint`` expression as alternatives of required feature sets (``a100&ib|h100`` ->
    ``[{a100, ib}, {h100}]``); ``None`` for syntax beyond AND/OR (counts, brackets are read loosely)."""
    expr = (constraint or "").strip()
    if not expr:
        return []
    if re.search(r"[^\w.&|,\[\]()*-]", expr):
        return None
    expr = re.sub(r"\*\d+", "", expr).replace("[", "").replace("]", "").replace("(", "").replace(")", "")
    return [{f for f in re.split(r"[&,]", alt) if f} for alt in expr.split("|")]


def satisfies(features: tuple[str, ...], constraint: str) -> bool:
    """Whether a node with ``features`` meets a job's ``--constraint`` (unreadable constraints: never)."""
    alternatives = constraint_features(constraint)
    if alternatives is None:
        return False
    return not alternatives or any(need <= set(features) for need in alternatives)


def _answer(text_: str, key: str, command: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(text_)
    except json.JSONDecodeError as err:
        raise ValidationError(
            command, f"answer is not JSON ({err}); is this Slurm >= 21.08 with --json?"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        raise ValidationError(command, f"answer has no '{key}' list")
    if data.get("errors"):
        raise ValidationError(command, f"Slurm reports errors: {data['errors']}")
    return [item for item in data[key] if isinstance(item, dict)]


def _job_nodes(j: Mapping[str, Any]) -> list[str]:
    listed = j.get("nodes")
    if not isinstance(listed, str) or not listed:
        res = j.get("job_resources")
        inner = res.get("nodes") if isinstance(res, Mapping) else None
        listed = inner.get("list") if isinstance(inner, Mapping) else inner
        if not isinstance(listed, str):
            listed = ""
    return expand_hostlist(listed)


def parse_job(j: Mapping[str, Any]) -> SlurmJob:
    """One job of a ``squeue --json`` answer, any version's shape."""
    state, flags = job_state(j.get("job_state"))
    nodes = _job_nodes(j)
    details = [parse_gres(d) for d in j.get("gres_detail") or [] if isinstance(d, str)]
    gpus = {n: (details[i][2] if i < len(details) else ()) for i, n in enumerate(nodes)}
    node_count = max(1, number(j.get("node_count"), 1), len(nodes) if state != "PENDING" else 1)
    per_node_type, per_node, _ = parse_gres(text(j.get("tres_per_node")))
    job_type, per_job, _ = parse_gres(text(j.get("tres_per_job")))
    requested = per_node * node_count or per_job
    reason = text(j.get("state_reason"))
    hold = j.get("hold")
    held = state == "PENDING" and (
        bool(hold)
        if isinstance(hold, bool)
        else (reason.startswith("JobHeld") or number(j.get("priority"), 1) == 0)
    )
    held = held or (state == "PENDING" and "HELD" in flags)
    return SlurmJob(
        job_id=str(number(j.get("job_id")) or text(j.get("job_id"))),
        state=state,
        partition=text(j.get("partition")),
        comment=text(j.get("comment")),
        num_gpus=requested or sum(len(g) for g in gpus.values()),
        held=held,
        submit_time=number(j.get("submit_time")),
        start_time=number(j.get("start_time")),
        end_time=number(j.get("end_time")),
        restart_count=number(j.get("restart_cnt")),
        gpus=gpus,
        reason=reason,
        node_count=node_count,
        gpu_type=per_node_type or job_type,
        constraint=text(j.get("features")),
        flags=flags,
        exclusive=job_exclusive(j),
    )


def job_exclusive(j: Mapping[str, Any]) -> bool:
    """Whether a job asked for whole nodes: ``shared`` is ``"none"`` (22.05) or lists ``none`` (23.02+), or
    ``exclusive`` says so (24.x: ``["true"]``, ``["user"]``, ``["mcs"]``, ``["topo"]``; read as whole
    nodes)."""
    shared = {w.lower() for w in words(j.get("shared"))}
    exclusive = {w.lower() for w in words(j.get("exclusive"))} - {"false", "0", "no"}
    return "none" in shared or bool(exclusive)


def parse_oversubscribe(text_: str) -> str:
    """A partition's ``OverSubscribe`` from ``sinfo -h -o %h`` (``no``, ``exclusive``, ``yes:4``,
    ``force:4``) as ``NO``, ``EXCLUSIVE``, ``YES`` or ``FORCE``; ``""`` for an answer not understood."""
    first = (text_ or "").split()[:1]
    word = first[0].split(":")[0].upper() if first else ""
    return word if word in ("NO", "EXCLUSIVE", "YES", "FORCE") else ""


def parse_squeue_json(text_: str) -> list[SlurmJob]:
    """The jobs of a ``squeue --json`` answer (Slurm 22.05 to 24.x)."""
    return [parse_job(j) for j in _answer(text_, "jobs", "squeue --json") if j.get("job_id") is not None]


def _node_full(n: Mapping[str, Any], states: set[str]) -> bool:
    """No CPU or no memory left on the node (all of it allocated), as Slurm counts it."""
    cpus, alloc_cpus = number(n.get("cpus")), number(n.get("alloc_cpus"))
    memory, alloc_memory = number(n.get("real_memory")), number(n.get("alloc_memory"))
    return "ALLOCATED" in states or 0 < cpus <= alloc_cpus or 0 < memory <= alloc_memory


def parse_sinfo_json(text_: str) -> list[SlurmNode]:
    """The nodes of a ``sinfo --json`` answer (one entry per node; Slurm 22.05 to 24.x)."""
    nodes: dict[str, SlurmNode] = {}
    for n in _answer(text_, "nodes", "sinfo --json"):
        name = text(n.get("name"))
        if not name:
            continue
        gpu_type, count, _ = parse_gres(text(n.get("gres")))
        states = {w.upper() for w in (*words(n.get("state")), *words(n.get("state_flags")))}
        features = tuple(words(n.get("active_features")) or words(n.get("features")))
        # gres_used is what Slurm's allocator goes by: GPUs it lists stay taken even on an idle node (Slurm
        # 22.05 keeps listing them there after a slurmd restart, and will not allocate them)
        nodes[name] = SlurmNode(
            name=name,
            gpu_type=gpu_type,
            num_gpus=count,
            usable=not states & UNUSABLE_NODE,
            partitions=tuple(words(n.get("partitions"))),
            used_gpus=parse_gres(text(n.get("gres_used")))[2],
            state="+".join(sorted(states)),
            features=features,
            full=_node_full(n, states),
        )
    return list(nodes.values())

"""Save and restore a running simulation, so a crashed or killed run resumes on the same trajectory.

A checkpoint is one JSON file (never pickle)::

    {"format": "dltsched-sim-checkpoint", "version": 2, "checksum": "sha256:...",
     "fingerprint": {...}, "state": {...}}

``state`` is :meth:`dltsched.engine.sim.simulator.RunState.to_dict` (clock, every active job's progress and
placement, finished records, metric accumulators, the fault schedule, the policy's own state). ``checksum``
is the SHA-256 of the canonical JSON (sorted keys, no spaces, no NaN) of ``fingerprint`` and ``state``.
``fingerprint`` holds one hash per thing that changes the result: the instance (every field of every job
and node), the policy (its name and every option, e.g. the optimizing policy's solve settings and freeze
levels), its predictors (their parameters and weights), the seed, the fault process, the memory mode, the
other simulation settings and the ground truth (its settings and measured tables); a run resumes only
from a checkpoint whose fingerprint is its own, and the error names what differs.

Every way a file can be unusable - missing permissions, empty, truncated, binary, not JSON, NaN, nested
too deep, another format or version, a checksum that does not match, a foreign fingerprint, a state of the
wrong shape or one that breaks an invariant (a job finished twice, negative remaining work, a clock that is
not finite, counts that do not add up) - raises one :class:`CheckpointError` naming the file and the
problem. Writes are atomic and durable: a temporary file in the same folder, flushed and fsynced, renamed
over the checkpoint, then the folder fsynced; temporary files a killed writer left behind are removed when
the next run starts.

This module uses the simulator's public API only (:class:`~dltsched.engine.sim.simulator.Simulator`,
:class:`~dltsched.engine.sim.simulator.RunStore`); the simulator does not import it.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict
from pydantic import ValidationError as PydanticValidationError

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.sim.simulator import RunState, SimulationConfig, Simulator

FORMAT = "dltsched-sim-checkpoint"
VERSION = 2
#: a checkpoint larger than this is refused before it is read (a 100,000-job run writes about 100 MB)
MAX_BYTES = 2 * 1024**3
#: names of attributes that hold caches or logs, not settings: left out of the fingerprint
_NOT_SETTINGS = ("cache", "memo", "solve_log")


class CheckpointError(ValidationError):
    """A checkpoint file that cannot be resumed from: ``file`` and the ``problem`` in one line."""

    def __init__(self, file: str | os.PathLike[str], problem: str) -> None:
        self.file = str(file)
        super().__init__(f"checkpoint '{file}'", problem)


# -- fingerprint ----------------------------------------------------------------------------------------


_PLAIN = (type(None), bool, int, float, str)


def _plain(obj: Any, depth: int = 0) -> bool:
    """A number, text or a short tuple of them: its ``repr`` is its value, in every process."""
    if isinstance(obj, _PLAIN):
        return True
    return type(obj) is tuple and depth < 3 and all(_plain(v, depth + 1) for v in obj)


def _plain_digest(items: Any) -> str:
    return hashlib.sha256(repr(items).encode()).hexdigest()


class _Describer:
    """JSON-ready descriptions of values: settings, tables and weights (arrays and plain tables by digest).

    Objects met twice (the same predictors inside a policy and inside its memo) are described once."""

    def __init__(self) -> None:
        self.memo: dict[int, Any] = {}
        self.keep: list[Any] = []  # keeps the memo's objects alive, so their ids stay theirs

    def __call__(self, obj: Any, depth: int = 0, seen: frozenset[int] = frozenset()) -> Any:
        if isinstance(obj, _PLAIN):
            return repr(obj) if isinstance(obj, float) else obj
        if id(obj) in seen:
            return "<cycle>"
        hit = self.memo.get(id(obj))
        if hit is None:
            hit = self.memo[id(obj)] = self._describe(obj, depth, seen | {id(obj)})
            self.keep.append(obj)
        return hit

    def _describe(self, obj: Any, depth: int, seen: frozenset[int]) -> Any:  # noqa: C901 - one case per kind
        if depth > 60:
            return f"<{type(obj).__qualname__} nested too deep>"
        if isinstance(obj, enum.Enum):
            return f"{type(obj).__qualname__}.{obj.name}"
        if isinstance(obj, bytes | bytearray | memoryview):
            return {"bytes": hashlib.sha256(bytes(obj)).hexdigest()}
        if isinstance(obj, os.PathLike):
            return os.fspath(obj)
        module = type(obj).__module__
        if module == "numpy" or module.startswith("numpy."):
            import numpy as np

            if isinstance(obj, np.ndarray):
                data = np.ascontiguousarray(obj)
                return {"array": str(data.dtype), "shape": list(data.shape),
                        "sha256": hashlib.sha256(data.tobytes()).hexdigest() if data.dtype != object
                        else self(data.tolist(), depth + 1, seen)}
            if isinstance(obj, np.generic):
                return self(obj.item(), depth + 1, seen)
        if module.startswith("torch") and hasattr(obj, "detach"):
            return self(obj.detach().cpu().numpy(), depth + 1, seen)
        if callable(obj) and hasattr(obj, "__qualname__") and not dataclasses.is_dataclass(obj):
            return f"{getattr(obj, '__module__', '')}.{obj.__qualname__}"
        if isinstance(obj, Mapping):
            if all(_plain(k) and _plain(v) for k, v in obj.items()):
                try:
                    return {"plain-map": _plain_digest(sorted(obj.items()))}
                except TypeError:  # keys of mixed types
                    return {"plain-map": _plain_digest(sorted(obj.items(), key=repr))}
            items = [[self(k, depth + 1, seen), self(v, depth + 1, seen)] for k, v in obj.items()]
            return {"map": sorted(items, key=lambda kv: json.dumps(kv[0], sort_keys=True))}
        if isinstance(obj, list | tuple):
            if len(obj) > 8 and all(_plain(v) for v in obj):
                return {"plain-seq": _plain_digest(list(obj))}
            return [self(v, depth + 1, seen) for v in obj]
        if isinstance(obj, set | frozenset):
            return {"set": sorted((self(v, depth + 1, seen) for v in obj), key=lambda v: json.dumps(v, sort_keys=True))}
        fields: dict[str, Any] = {}
        if hasattr(obj, "__dict__"):
            fields.update(vars(obj))
        for cls in type(obj).__mro__:
            for name in getattr(cls, "__slots__", ()):
                if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                    fields[name] = getattr(obj, name)
        if not fields:
            try:
                state = obj.__getstate__()
            except Exception:  # noqa: BLE001 - an object without state is described by its type
                state = None
            if isinstance(state, dict | tuple | list):
                fields = {"state": state}
        kept = {k: self(v, depth + 1, seen) for k, v in sorted(fields.items())
                if not any(word in k.lower() for word in _NOT_SETTINGS)}
        return {"type": f"{module}.{type(obj).__qualname__}", "fields": kept}


def _digest(obj: Any, describe: _Describer | None = None) -> str:
    text = json.dumps((describe or _Describer())(obj), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def fingerprint(sim: Simulator) -> dict[str, str]:
    """One hash per thing that changes ``sim``'s result (see the module docstring).

    Take it before the run starts: policies and predictors are then in their initial state."""
    cfg = sim.config
    predictors = getattr(sim.policy, "predictors", None)
    others = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(SimulationConfig)
              if f.name not in ("seed", "memory", "faults")}
    describe = _Describer()
    return {
        "instance": _digest(sim.instance, describe),
        "policy": str(getattr(sim.policy, "name", type(sim.policy).__qualname__)),
        "policy_options": _digest({k: v for k, v in _policy_fields(sim.policy).items() if v is not predictors},
                                  describe),
        "predictors": _digest(predictors, describe),
        "seed": str(cfg.seed),
        "faults": _digest(cfg.faults, describe),
        "memory": str(cfg.memory),
        "simulation": _digest(others, describe),
        "truth": _digest(sim.truth, describe),
    }


def _policy_fields(policy: Any) -> dict[str, Any]:
    out = dict(vars(policy)) if hasattr(policy, "__dict__") else {}
    for cls in type(policy).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if hasattr(policy, name):
                out[name] = getattr(policy, name)
    return {"type": f"{type(policy).__module__}.{type(policy).__qualname__}", **out}


_WHAT = {"instance": "instance (its jobs or cluster)", "policy": "policy", "policy_options": "policy options",
         "predictors": "predictors (their settings or weights)", "seed": "seed", "faults": "fault settings",
         "memory": "memory mode", "simulation": "simulation settings", "truth": "ground truth (settings or data)"}


# -- envelope -------------------------------------------------------------------------------------------


def _canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def checksum(fingerprint: Mapping[str, str], state: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``{"fingerprint": ..., "state": ...}``."""
    return "sha256:" + hashlib.sha256(_canonical_json({"fingerprint": fingerprint, "state": state})).hexdigest()


def seal(fingerprint: Mapping[str, str], state: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint envelope of ``state`` (what :func:`write_checkpoint` writes)."""
    return {"format": FORMAT, "version": VERSION, "checksum": checksum(fingerprint, state),
            "fingerprint": dict(fingerprint), "state": state}


def write_checkpoint(path: str | os.PathLike[str], fingerprint: Mapping[str, str], state: Mapping[str, Any]) -> None:
    """Write the envelope of ``state`` to ``path`` atomically and durably (see the module docstring)."""
    target = Path(path)
    try:
        data = _canonical_json(seal(fingerprint, state))
    except (ValueError, TypeError) as err:  # NaN or a foreign type in the state: a bug, not a user error
        raise CheckpointError(target, f"run state cannot be saved as JSON: {err}") from None
    tmp: str | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        tmp = None
        _fsync_dir(target.parent)
    except OSError as err:
        raise CheckpointError(target, f"cannot be written: {err.strerror or err}") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform without directory handles: the rename is as durable as it gets
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_stale_temp_files(path: str | os.PathLike[str]) -> list[Path]:
    """Delete temporary files a killed writer of ``path`` left in its folder; returns them."""
    target = Path(path)
    if not target.parent.is_dir():
        return []
    stale = [*target.parent.glob(f".{target.name}.*.tmp"), *target.parent.glob(f"{target.name}*.tmp")]
    for f in stale:
        f.unlink(missing_ok=True)
    return stale


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def read_checkpoint(path: str | os.PathLike[str], sim: Simulator,
                    expected: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The checked run state in ``path`` for ``sim`` (whose fingerprint is ``expected``, taken before the
    run started; computed here when not given). Raises :class:`CheckpointError` for any unusable file."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_BYTES:
            raise CheckpointError(p, f"{size} bytes, more than the {MAX_BYTES} a checkpoint may have")
        raw = p.read_bytes()
    except OSError as err:
        raise CheckpointError(p, f"cannot be read: {err.strerror or err}") from None
    if not raw.strip():
        raise CheckpointError(p, "is empty (a write was interrupted?); delete it to start afresh")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise CheckpointError(p, "is not text (binary or damaged); delete it to start afresh") from None
    except json.JSONDecodeError as err:
        raise CheckpointError(p, f"is not valid JSON (truncated or damaged) at line {err.lineno} "
                                 f"column {err.colno}: {err.msg}; delete it to start afresh") from None
    except RecursionError:
        raise CheckpointError(p, "is nested too deeply to be a checkpoint") from None
    except ValueError as err:
        raise CheckpointError(p, f"is not valid JSON: {err}") from None
    try:
        return _check(p, data, sim, expected)
    except CheckpointError:
        raise
    except RecursionError:
        raise CheckpointError(p, "is nested too deeply to be a checkpoint") from None
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:
        raise CheckpointError(p, f"does not hold a usable run state ({type(err).__name__}: {err})") from None


def _check(p: Path, data: Any, sim: Simulator, expected: Mapping[str, str] | None) -> dict[str, Any]:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(p, f"is not a dltsched simulation checkpoint (no \"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION:
        raise CheckpointError(p, f"is version {data.get('version')!r}; this dltsched reads version {VERSION} "
                                 "only; delete it to start afresh")
    if set(data) != {"format", "version", "checksum", "fingerprint", "state"}:
        raise CheckpointError(p, f"has fields {sorted(data)}; a checkpoint has format, version, checksum, "
                                 "fingerprint and state")
    fp, state = data["fingerprint"], data["state"]
    if not isinstance(fp, dict) or not isinstance(state, dict):
        raise CheckpointError(p, "fingerprint and state must be JSON objects")
    if data["checksum"] != checksum(fp, state):
        raise CheckpointError(p, "checksum does not match its content (the file was changed or damaged); "
                                 "delete it to start afresh")
    mine = dict(expected) if expected is not None else fingerprint(sim)
    differ = [k for k in mine if fp.get(k) != mine[k]] + [k for k in fp if k not in mine]
    if differ:
        what = ", ".join(_WHAT.get(str(k)) or str(k) for k in differ)
        detail = "".join(f"; {k} was '{fp.get(k)}', now '{mine[k]}'" for k in ("policy", "seed", "memory")
                         if k in differ)
        raise CheckpointError(p, f"was written by a run with a different {what}{detail}; resume with the same "
                                 "instance, policy, options, predictors, seed, faults and ground truth, or "
                                 "delete it")
    try:
        checked = _State.model_validate(state)
    except PydanticValidationError as err:
        first = err.errors()[0]
        where = "state" + "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in first["loc"])
        raise CheckpointError(p, f"{where}: {first['msg']} (got {_short(first.get('input'))})") from None
    problem = _invariant_problem(checked, sim)
    if problem:
        raise CheckpointError(p, f"inconsistent run state: {problem}")
    return state


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- state schema and invariants ------------------------------------------------------------------------

Finite = Annotated[float, Strict(), Field(allow_inf_nan=False)]
NonNegative = Annotated[float, Strict(), Field(ge=0.0, allow_inf_nan=False)]
Fraction = Annotated[float, Strict(), Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Count = Annotated[int, Strict(), Field(ge=0)]
Text = Annotated[str, Strict()]
#: JSON arrays of fixed length (strict mode alone takes only Python tuples; the items stay strict)
Pair = Annotated[tuple[Finite, Finite], Strict(False)]
HeapEntry = Annotated[tuple[Finite, Count, Text, Count], Strict(False)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Placement(_Model):
    gpus: list[Count] = Field(min_length=1)
    freeze_level: Count


class _Active(_Model):
    id: str
    gpu_types: list[str]
    remaining: NonNegative
    attained_s: NonNegative
    assignment: _Placement | None
    rate: NonNegative
    ready_at: Finite
    preemptions: Count
    first_start: Finite | None
    queued_since: Finite
    penalty: Fraction
    placed_at: Finite
    ckpt_remaining: NonNegative
    failures: Count
    blind_ooms: Count
    synced_at: Finite
    version: Count


class _Record(_Model):
    job_id: str
    arrival_s: Finite
    first_start_s: Finite
    finish_s: Finite
    num_gpus: Annotated[int, Field(ge=1)]
    preemptions: Count
    attained_gpu_s: NonNegative
    weight: Finite


class _Interval(_Model):
    job_id: str
    gpus: list[Count]
    start_s: Finite
    end_s: Finite
    freeze_level: Count


class _Faults(_Model):
    cycle: list[int]
    window: list[Pair]
    down: list[Count]


class _State(_Model):
    time: Finite
    next_arrival: Count
    rounds: Count
    last_round: Finite | None
    busy_gpu_s: NonNegative
    oom_events: Count
    node_failures: Count
    fault_interruptions: Count
    decision_times: list[NonNegative]
    util_trace: list[Annotated[tuple[Finite, Fraction], Strict(False)]]
    ideal_s: dict[str, NonNegative]
    finished: list[_Record]
    intervals: list[_Interval]
    gpu_jobs: list[list[str]]
    active: list[_Active]
    running: list[str]
    read_at: list[Finite]
    finish_heap: list[HeapEntry]
    seq: Count
    faults: _Faults | None
    policy_state: dict[str, Any] | None
    #: [model, batch size, amp, dataset, optimizer, GPU type, freeze level, peak MiB] per learned peak
    memory_observations: list[Annotated[tuple[Text, Count, bool, Text | None, Text, Text, Count, NonNegative],
                                        Strict(False)]]
    retry_round: bool


def _dupe(ids: list[str]) -> str | None:
    seen: set[str] = set()
    for i in ids:
        if i in seen:
            return i
        seen.add(i)
    return None


def _invariant_problem(s: _State, sim: Simulator) -> str | None:  # noqa: C901 - one check after the other
    """The first broken invariant of ``s`` against ``sim``'s instance, or ``None``."""
    inst, cluster = sim.instance, sim.instance.cluster
    jobs = {j.id: j for j in inst.jobs}
    arrivals = sorted(inst.jobs, key=lambda j: (j.arrival_time_s, j.id))
    if s.next_arrival > len(arrivals):
        return f"{s.next_arrival} jobs arrived, but the instance has {len(arrivals)}"
    finished = [r.job_id for r in s.finished]
    active = [a.id for a in s.active]
    if (twice := _dupe(finished)) is not None:
        return f"job '{twice}' finished twice ({len(finished)} finished records)"
    if (twice := _dupe(active)) is not None:
        return f"job '{twice}' is active twice"
    if both := sorted(set(finished) & set(active)):
        return f"job '{both[0]}' is both finished and active"
    arrived = {j.id for j in arrivals[:s.next_arrival]}
    if unknown := sorted((set(finished) | set(active)) - arrived):
        return f"job '{unknown[0]}' is finished or active but {'not in the instance' if unknown[0] not in jobs else 'has not arrived'}"
    if len(finished) + len(active) != s.next_arrival:
        return (f"{len(finished)} finished + {len(active)} active jobs, but {s.next_arrival} have arrived "
                "(a job was lost)")
    if s.last_round is not None and s.last_round > s.time:
        return f"last round at {s.last_round} s is after the clock ({s.time} s)"
    if s.next_arrival and s.time < arrivals[0].arrival_time_s:
        return f"clock {s.time} s is before the first arrival ({arrivals[0].arrival_time_s} s)"
    if s.next_arrival < len(arrivals) and arrivals[s.next_arrival].arrival_time_s <= s.time and s.rounds:
        return f"job '{arrivals[s.next_arrival].id}' arrived at or before the clock but is not admitted"
    if len(s.decision_times) != s.rounds:
        return f"{len(s.decision_times)} decision times for {s.rounds} rounds"
    for r in s.finished:
        job = jobs[r.job_id]
        if r.arrival_s != job.arrival_time_s or not r.arrival_s <= r.first_start_s <= r.finish_s <= s.time:
            return (f"finished record of job '{r.job_id}' does not fit its arrival at {job.arrival_time_s} s "
                    f"and the clock ({s.time} s)")
    if len(s.gpu_jobs) != cluster.num_gpus:
        return f"{len(s.gpu_jobs)} GPUs in the state, the cluster has {cluster.num_gpus}"
    types = set(cluster.gpu_types)
    by_id = {a.id: a for a in s.active}
    holders: dict[int, list[str]] = {}
    for a in s.active:
        job = jobs[a.id]
        if a.remaining > job.total_iterations * (1 + 1e-9):
            return f"job '{a.id}' has {a.remaining} iterations left of {job.total_iterations}"
        allowed = set(job.gpu_types or types)
        if (not a.gpu_types and job.gpu_types) or not set(a.gpu_types) <= allowed:
            return f"job '{a.id}' may use GPU types {a.gpu_types}, not a part of its {sorted(allowed)}"
        if a.assignment is not None:
            gpus = a.assignment.gpus
            if len(gpus) != job.num_gpus or len(set(gpus)) != len(gpus):
                return f"job '{a.id}' holds GPUs {gpus}, it needs {job.num_gpus} distinct ones"
            if any(g >= cluster.num_gpus for g in gpus):
                return f"job '{a.id}' holds GPUs {gpus}, outside 0..{cluster.num_gpus - 1}"
            for g in gpus:
                holders.setdefault(g, []).append(a.id)
    if (twice := _dupe(s.running)) is not None:
        return f"job '{twice}' is running twice"
    placed = {a.id for a in s.active if a.assignment is not None}
    if set(s.running) != placed:
        odd = sorted(set(s.running) ^ placed)[0]
        return f"job '{odd}' is {'running without GPUs' if odd in s.running else 'placed but not running'}"
    for g, on in enumerate(s.gpu_jobs):
        if sorted(on) != sorted(holders.get(g, [])):
            return f"GPU {g} lists jobs {on}, the running jobs place {sorted(holders.get(g, []))} there"
    for t, seq, job_id, version in s.finish_heap:
        if job_id not in placed or seq > s.seq or by_id[job_id].version != version or t < s.time - 1e-6 * max(1.0, s.time):
            return f"completion entry ({t}, {seq}, '{job_id}', {version}) matches no running job"
    if s.read_at != sorted(s.read_at) or (s.read_at and s.read_at[-1] > s.time):
        return "progress read instants are out of order or after the clock"
    if (s.faults is None) != (sim.config.faults is None):
        return "fault state present without a fault process, or missing with one"
    if (s.policy_state is not None) != hasattr(sim.policy, "state_dict"):
        return f"policy state {'present for a policy that keeps none' if s.policy_state is not None else 'missing'}"
    if s.faults is not None and any(n >= len(cluster.nodes) for n in s.faults.down):
        return f"failed nodes {s.faults.down} outside the cluster's {len(cluster.nodes)} nodes"
    return None


def restore(path: str | os.PathLike[str], sim: Simulator, expected: Mapping[str, str] | None = None) -> RunState:
    """A run of ``sim`` restored from the checkpoint at ``path`` (checked by :func:`read_checkpoint`)."""
    state = read_checkpoint(path, sim, expected)
    run = sim.start()
    try:
        run.from_dict(state)
    except RecursionError:
        raise CheckpointError(path, "is nested too deeply to be a checkpoint") from None
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:
        raise CheckpointError(path, f"does not hold a usable run state ({type(err).__name__}: {err})") from None
    return run


# -- store ----------------------------------------------------------------------------------------------


class CheckpointStore:
    """A :class:`~dltsched.engine.sim.simulator.RunStore` writing ``path`` every ``every_rounds`` rounds.

    ``Simulator(..., store=CheckpointStore(path)).run(resume=True)`` continues from ``path`` when it
    exists (after checking it) and starts afresh otherwise."""

    def __init__(self, path: str | os.PathLike[str], every_rounds: int = 200) -> None:
        if isinstance(every_rounds, bool) or not isinstance(every_rounds, int) or every_rounds < 1:
            raise ValidationError("checkpoint_every_rounds", f"{every_rounds!r} not understood; an integer >= 1")
        self.path = Path(path)
        self.every_rounds = every_rounds
        self._fingerprint: dict[str, str] | None = None

    def start(self, sim: Simulator, *, resume: bool) -> RunState | None:
        self._fingerprint = fingerprint(sim)
        remove_stale_temp_files(self.path)
        if not resume or not self.path.exists():
            return None
        return restore(self.path, sim, self._fingerprint)

    def save(self, state: dict[str, Any]) -> None:
        if self._fingerprint is None:
            raise RuntimeError("CheckpointStore.save before start")
        write_checkpoint(self.path, self._fingerprint, state)

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

This module uses the public API of the simulator and its run state only
(:class:`~dltsched.engine.sim.simulator.Simulator`, :class:`~dltsched.engine.sim.simulator.RunStore`,
:meth:`~dltsched.engine.sim.run_state.RunState.to_dict` / ``from_dict``, and
:func:`~dltsched.engine.sim.run_state_schema.check_state` for the state's schema and invariants); the
simulator does not import it.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
import time
from collections.abc import Mapping
from operator import attrgetter
from pathlib import Path
from typing import Any

from dltsched.engine.domain.errors import ValidationError, write_atomically
from dltsched.engine.domain.limits import read_limited
from dltsched.engine.domain.model import Instance, Job
from dltsched.engine.sim.run_state_schema import check_state
from dltsched.engine.sim.simulator import SimulationConfig, SimulationRun, Simulator

FORMAT = "dltsched-sim-checkpoint"
VERSION = 2
#: the default cap on a checkpoint's size (a 100,000-job run writes about 100 MB); the cap in force is
#: ``max_checkpoint_mib`` of :mod:`dltsched.engine.domain.limits` (``DLTSCHED_MAX_CHECKPOINT_MIB``)
MAX_BYTES = 2 * 1024**3
#: the fields of a job, in the order the instance digest reads them
_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job))
#: names of attributes that hold caches or logs, not settings: left out of the fingerprint
_NOT_SETTINGS = ("cache", "memo", "solve_log")


class CheckpointError(ValidationError):
    """A checkpoint file that cannot be resumed from: ``file`` and the ``problem`` in one line."""

    def __init__(self, file: str | os.PathLike[str], problem: str) -> None:
        self.file = str(file)
        super().__init__(f"checkpoint '{file}'", problem)


# -- fingerprint ----------------------------------------------------------------------------------------


_PLAIN = (type(None), bool, int, float, str)
_PLAIN_TYPES = frozenset(_PLAIN)


def _plain(obj: Any, depth: int = 0) -> bool:
    """A number, text or a short tuple of them: its ``repr`` is its value, in every process."""
    kind = type(obj)
    if kind in _PLAIN_TYPES:  # the common case, without isinstance's walk of the class tree
        return True
    if kind is tuple:
        return depth < 3 and all(_plain(v, depth + 1) for v in obj)
    return isinstance(obj, _PLAIN)


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
            return {"set": sorted((self(v, depth + 1, seen) for v in obj),
                                  key=lambda v: json.dumps(v, sort_keys=True))}
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


def _instance_digest(inst: Instance, describe: _Describer) -> str:
    """The instance's digest: its jobs as the ``repr`` of their field values (plain numbers, text and tuples
    of them: exact, and fast for long traces), the rest described field by field."""
    values = attrgetter(*_JOB_FIELDS)
    jobs = hashlib.sha256(repr([values(j) for j in inst.jobs]).encode()).hexdigest()
    rest = {f.name: getattr(inst, f.name) for f in dataclasses.fields(inst) if f.name != "jobs"}
    return _digest({"jobs": jobs, **rest}, describe)


def fingerprint(sim: Simulator) -> dict[str, str]:
    """One hash per thing that changes ``sim``'s result (see the module docstring).

    Take it before the run starts: policies and predictors are then in their initial state."""
    cfg = sim.config
    predictors = getattr(sim.policy, "predictors", None)
    others = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(SimulationConfig)
              if f.name not in ("seed", "memory", "faults", "max_wall_s")}
    describe = _Describer()
    return {
        "instance": _instance_digest(sim.instance, describe),
        "policy": str(getattr(sim.policy, "name", type(sim.policy).__qualname__)),
        "policy_options": _digest({k: v for k, v in _policy_fields(sim.policy).items()
                                   if v is not predictors},
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
         "memory": "memory mode", "simulation": "simulation settings",
         "truth": "ground truth (settings or data)"}


# -- envelope -------------------------------------------------------------------------------------------


def _canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def checksum(fingerprint: Mapping[str, str], state: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``{"fingerprint": ..., "state": ...}``."""
    return "sha256:" + hashlib.sha256(_canonical_json({"fingerprint": fingerprint,
                                                       "state": state})).hexdigest()


def seal(fingerprint: Mapping[str, str], state: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint envelope of ``state`` (what :func:`write_checkpoint` writes)."""
    return {"format": FORMAT, "version": VERSION, "checksum": checksum(fingerprint, state),
            "fingerprint": dict(fingerprint), "state": state}


def write_checkpoint(path: str | os.PathLike[str], fingerprint: Mapping[str, str],
                     state: Mapping[str, Any]) -> None:
    """Write the envelope of ``state`` to ``path`` atomically and durably (see the module docstring)."""
    target = Path(path)
    try:
        data = _canonical_json(seal(fingerprint, state))
    except (ValueError, TypeError) as err:  # NaN or a foreign type in the state: a bug, not a user error
        raise CheckpointError(target, f"run state cannot be saved as JSON: {err}") from None
    try:
        write_atomically(target, data)
    except OSError as err:
        raise CheckpointError(target, f"cannot be written: {err.strerror or err}") from None


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
        _check_regular(p)
        raw = read_limited(p, f"checkpoint '{p}'", cap="max_checkpoint_mib", text=False)
    except ValidationError as err:
        raise CheckpointError(p, err.problem) from None
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


def _check_regular(p: Path) -> None:
    """A checkpoint is a regular file (it is replaced by renaming a new one over it): never a device, a pipe
    or a folder, which could be read without end or clobbered."""
    if (p.exists() or p.is_symlink()) and not p.is_file():
        raise CheckpointError(p, "is not a regular file (a device, a pipe or a folder); give a file path")


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
        raise CheckpointError(p,
                              f"was written by a run with a different {what}{detail}; resume with the same "
                                 "instance, policy, options, predictors, seed, faults and ground truth, or "
                                 "delete it")
    problem = check_state(state, sim)
    if problem:
        raise CheckpointError(p, problem)
    return state


def restore(path: str | os.PathLike[str], sim: Simulator,
            expected: Mapping[str, str] | None = None) -> SimulationRun:
    """A run of ``sim`` restored from the checkpoint at ``path`` (checked by :func:`read_checkpoint`)."""
    state = read_checkpoint(path, sim, expected)
    run = sim.start()
    try:
        run.from_dict(state)
    except RecursionError:
        raise CheckpointError(path, "is nested too deeply to be a checkpoint") from None
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:
        raise CheckpointError(path,
                              f"does not hold a usable run state ({type(err).__name__}: {err})") from None
    return run


# -- store ----------------------------------------------------------------------------------------------


#: the default share of a run's wall-clock time that checkpoint writes may take
DEFAULT_MAX_OVERHEAD = 0.03
#: what the first write is expected to cost, seconds (a small file synced to disk), before one is measured
FIRST_WRITE_GUESS_S = 0.01


class CheckpointStore:
    """A :class:`~dltsched.engine.sim.simulator.RunStore` writing ``path``.

    ``Simulator(..., store=CheckpointStore(path)).run(resume=True)`` continues from ``path`` when it
    exists (after checking it) and starts afresh otherwise.

    When it writes: with ``every_rounds`` (an integer >= 1), every that many rounds, whatever it costs. By
    default (``every_rounds=None``) after a round whenever the writes so far, plus one more as costly as the
    last (the run state gathered, encoded, written and synced to disk; with a quarter more for a growing
    state; 10 ms before the first), stay within ``max_overhead`` of the wall-clock time since the run started:
    writes take at most that share of the run (3% by default), a cheap run saves every round and a costly
    state less often. A run resumes from its last write either way, on the same trajectory."""

    def __init__(self, path: str | os.PathLike[str], every_rounds: int | None = None, *,
                 max_overhead: float = DEFAULT_MAX_OVERHEAD) -> None:
        if every_rounds is not None and (isinstance(every_rounds, bool) or not isinstance(every_rounds, int)
                                         or every_rounds < 1):
            raise ValidationError("checkpoint_every_rounds",
                                  f"{every_rounds!r} not understood; an integer >= 1")
        if isinstance(max_overhead, bool) or not isinstance(max_overhead,
                                                            int | float) or not 0 < max_overhead <= 1:
            raise ValidationError("checkpoint_max_overhead",
                                  f"{max_overhead!r} not understood; a fraction in (0, 1]")
        self.path = Path(path)
        self.every_rounds = every_rounds or 1
        self.max_overhead = None if every_rounds is not None else float(max_overhead)
        #: writes made, and the wall-clock seconds they took
        self.writes = 0
        self.write_s = 0.0
        self._fingerprint: dict[str, str] | None = None
        self._started = time.perf_counter()
        self._last_cost = FIRST_WRITE_GUESS_S
        self._asked_at = 0.0

    def due(self, rounds: int) -> bool:
        """Whether the run should save after round ``rounds`` (see the class docstring)."""
        if rounds % self.every_rounds:
            return False
        now = time.perf_counter()
        if self.max_overhead is not None and \
                self.write_s + 1.25 * self._last_cost > self.max_overhead * (now - self._started):
            return False
        self._asked_at = now
        return True

    def start(self, sim: Simulator, *, resume: bool) -> SimulationRun | None:
        """Open the file store for ``sim``; with ``resume`` and an existing file, the run it holds (see
        ``RunStore``)."""
        self._started = time.perf_counter()
        self._fingerprint = fingerprint(sim)
        _check_regular(self.path)
        remove_stale_temp_files(self.path)
        if not resume or not self.path.exists():
            return None
        return restore(self.path, sim, self._fingerprint)

    def save(self, state: dict[str, Any]) -> None:
        """Write the run's state atomically and record how long it took (see ``RunStore``).

        Raises
        ------
        RuntimeError
            When called before :meth:`start`.
        """
        if self._fingerprint is None:
            raise RuntimeError("CheckpointStore.save before start")
        write_checkpoint(self.path, self._fingerprint, state)
        now = time.perf_counter()
        self._last_cost = now - self._asked_at if self._asked_at else 0.0
        self.write_s += self._last_cost
        self.writes += 1

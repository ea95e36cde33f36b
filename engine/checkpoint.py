"""Save and restore a running simulation, so a crashed or interrupted run resumes on the same trajectory.

The checkpoint is plain JSON (never pickle), written atomically (temp file + rename). It holds the clock,
every active job's progress and placement, finished records, metric accumulators, the fault schedule and,
when the policy has ``state_dict()``/``load_state_dict()``, the policy's own state. It names the instance by
a fingerprint and refuses to resume a different instance, policy or seed.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dltsched.engine.domain import Assignment, Instance
from dltsched.engine.errors import ValidationError
from dltsched.engine.metrics import JobRecord, PlacementInterval
from dltsched.engine.predict import MemoryObservations

if TYPE_CHECKING:
    from dltsched.engine.simulator import _Run

FORMAT = "dltsched-sim-checkpoint"
VERSION = 1


def instance_fingerprint(inst: Instance) -> str:
    """A short hash of the cluster and the jobs' ids, arrivals, sizes and work."""
    h = hashlib.sha256()
    for node in inst.cluster.nodes:
        h.update(f"{node.id}|{node.gpu_type}|{node.num_gpus};".encode())
    for j in inst.jobs:
        h.update(f"{j.id}|{j.model}|{j.batch_size}|{j.num_gpus}|{j.total_iterations}|{j.arrival_time_s};".encode())
    return h.hexdigest()[:16]


def _asg(a: Assignment | None) -> list[Any] | None:
    return None if a is None else [list(a.gpus), a.freeze_level]


def save_checkpoint(run: _Run, path: str | os.PathLike[str]) -> None:
    """Write ``run``'s state to ``path`` atomically."""
    run.sync_all()
    active = [{
        "id": a.job.id, "remaining": a.remaining, "attained_s": a.attained_s, "assignment": _asg(a.assignment),
        "gpu_types": list(a.job.gpu_types),  # fewer than submitted after an out-of-memory crash
        "ready_at": a.ready_at, "preemptions": a.preemptions, "first_start": a.first_start,
        "queued_since": a.queued_since, "penalty": a.penalty, "placed_at": a.placed_at,
        "ckpt_remaining": a.ckpt_remaining, "failures": a.failures, "blind_ooms": a.blind_ooms,
    } for a in run.active.values()]
    policy_state = run.policy.state_dict() if hasattr(run.policy, "state_dict") else None
    data = {
        "format": FORMAT, "version": VERSION, "instance": instance_fingerprint(run.inst),
        "policy": run.policy.name, "seed": run.cfg.seed, "time": run.time, "next_arrival": run.next_arrival,
        "last_round": run.last_round if run.last_round != float("-inf") else None, "rounds": run.rounds,
        "busy_gpu_s": run.busy_gpu_s, "oom_events": run.oom_events, "node_failures": run.node_failures,
        "fault_interruptions": run.fault_interruptions, "decision_times": run.decision_times,
        "util_trace": run.util_trace, "ideal_s": run.ideal_s,
        "finished": [asdict(r) for r in run.finished],
        "intervals": [asdict(p) for p in run.intervals],
        "gpu_jobs": run.gpu_jobs, "active": active,
        "faults": run.faults.state_dict() if run.faults is not None else None,
        "policy_state": policy_state,
        # peaks measured by crashes out of memory, and whether the policy decides again at once after one
        "memory_observations": run.memory_seen.to_list(), "retry_round": run._learned_this_round,
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, target)


def load_checkpoint(run: _Run, path: str | os.PathLike[str]) -> bool:
    """Restore ``run`` from ``path``; ``False`` if there is no checkpoint yet."""
    from dltsched.engine.simulator import _Active

    p = Path(path)
    if not p.exists():
        return False
    data = json.loads(p.read_text())
    if data.get("format") != FORMAT or data.get("version") != VERSION:
        raise ValidationError("checkpoint", f"'{p}' is not a dltsched simulation checkpoint (version {VERSION})")
    for key, mine in (("instance", instance_fingerprint(run.inst)), ("policy", run.policy.name), ("seed", run.cfg.seed)):
        if data[key] != mine:
            raise ValidationError(f"checkpoint.{key}", f"'{data[key]}' differs from this run's '{mine}'; "
                                  "resume with the same instance, policy and seed, or delete the checkpoint")
    jobs = {j.id: j for j in run.inst.jobs}
    run.time = data["time"]
    run.next_arrival = data["next_arrival"]
    run.last_round = data["last_round"] if data["last_round"] is not None else float("-inf")
    run.rounds = data["rounds"]
    run.busy_gpu_s = data["busy_gpu_s"]
    run.oom_events = data["oom_events"]
    run.node_failures = data["node_failures"]
    run.fault_interruptions = data["fault_interruptions"]
    run.decision_times = list(data["decision_times"])
    run.util_trace = [tuple(x) for x in data["util_trace"]]  # type: ignore[misc]
    run.ideal_s = dict(data["ideal_s"])
    run.finished = [JobRecord(**r) for r in data["finished"]]
    run.memory_seen = MemoryObservations.from_list(data.get("memory_observations", []))
    run._learned_this_round = bool(data.get("retry_round", False))
    run.intervals = [PlacementInterval(**{**p_, "gpus": tuple(p_["gpus"])}) for p_ in data["intervals"]]
    run.gpu_jobs = [list(x) for x in data["gpu_jobs"]]
    run.active = {}
    for a in data["active"]:
        asg = a["assignment"]
        job = jobs[a["id"]]
        if tuple(a.get("gpu_types", job.gpu_types)) != job.gpu_types:
            job = replace(job, gpu_types=tuple(a["gpu_types"]))
        run.active[a["id"]] = _Active(
            job, a["remaining"], a["attained_s"],
            None if asg is None else Assignment(a["id"], tuple(asg[0]), asg[1]),
            0.0, a["ready_at"], a["preemptions"], a["first_start"], a["queued_since"], a["penalty"],
            a["placed_at"], a["ckpt_remaining"], a["failures"], a.get("blind_ooms", 0))
    if run.faults is not None and data["faults"] is not None:
        run.faults.load_state_dict(data["faults"])
    if data["policy_state"] is not None and hasattr(run.policy, "load_state_dict"):
        run.policy.load_state_dict(data["policy_state"])
    run.started = True
    run.rebuild_queue()
    run.num_busy_gpus = sum(1 for jobs in run.gpu_jobs if jobs)
    run._update_rates()
    return True

"""The schema and invariants of a saved run state (:meth:`dltsched.engine.sim.run_state.RunState.to_dict`).

:func:`check_state` is what a state read back from a file must pass before
:meth:`~dltsched.engine.sim.run_state.RunState.from_dict` restores it: every field of the right type and range
(pydantic, strict), and the invariants that tie the fields to each other and to the run's instance (no job
lost or finished twice, GPU lists that match the placements, a completion heap that matches running jobs).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict
from pydantic import ValidationError as PydanticValidationError

from dltsched.engine.sim.config import RunSetup

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


class RunStateSchema(_Model):
    """The shape of :meth:`RunState.to_dict`'s data."""

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
    #: profiling on arrival: ["isolated", job, GPU type, GPUs, nodes, step s, MiB, util] / ["colocated",
    #: [jobs], GPU type, [speeds]] rows (:meth:`dltsched.engine.domain.profiles.ProfileBook.to_list`)
    profiles: list[list[Any]] | None = None


def _dupe(ids: list[str]) -> str | None:
    seen: set[str] = set()
    for i in ids:
        if i in seen:
            return i
        seen.add(i)
    return None


def invariant_problem(s: RunStateSchema,
                      sim: RunSetup) -> str | None:  # noqa: C901 - one check after the other
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
        why = "not in the instance" if unknown[0] not in jobs else "has not arrived"
        return f"job '{unknown[0]}' is finished or active but {why}"
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
        if (job_id not in placed or seq > s.seq or by_id[job_id].version != version
                or t < s.time - 1e-6 * max(1.0, s.time)):
            return f"completion entry ({t}, {seq}, '{job_id}', {version}) matches no running job"
    if s.read_at != sorted(s.read_at) or (s.read_at and s.read_at[-1] > s.time):
        return "progress read instants are out of order or after the clock"
    if s.profiles is not None and (problem := _profiles_problem(s.profiles, jobs)):
        return problem
    if (s.faults is None) != (sim.config.faults is None):
        return "fault state present without a fault process, or missing with one"
    if (s.policy_state is not None) != hasattr(sim.policy, "state_dict"):
        what = "present for a policy that keeps none" if s.policy_state is not None else "missing"
        return f"policy state {what}"
    if s.faults is not None and any(n >= len(cluster.nodes) for n in s.faults.down):
        return f"failed nodes {s.faults.down} outside the cluster's {len(cluster.nodes)} nodes"
    return None


def check_state(state: dict[str, Any], sim: RunSetup) -> str | None:
    """The first problem of ``state`` as a saved run of ``sim`` (a field's path and what is wrong, or a
    broken invariant), or ``None`` when :meth:`~dltsched.engine.sim.run_state.RunState.from_dict` may restore
    it."""
    try:
        checked = RunStateSchema.model_validate(state)
    except PydanticValidationError as err:
        first = err.errors()[0]
        where = "state" + "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in first["loc"])
        return f"{where}: {first['msg']} (got {_short(first.get('input'))})"
    problem = invariant_problem(checked, sim)
    return f"inconsistent run state: {problem}" if problem else None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _profiles_problem(rows: list[list[Any]], jobs: dict[str, Any]) -> str | None:
    """The first malformed profile row, or ``None``."""
    for row in rows:
        ok = False
        if len(row) == 8 and row[0] == "isolated":
            _, j, t, n, nodes, step, mem, util = row
            ok = (j in jobs and isinstance(t, str) and all(isinstance(x, int) and x >= 1 for x in (n, nodes))
                  and all(isinstance(x, int | float) and x > 0 for x in (step, mem))
                  and (util is None or isinstance(util, int | float) and 0 <= util <= 1))
        elif len(row) == 4 and row[0] == "colocated":
            _, ids, t, speeds = row
            ok = (isinstance(ids, list) and isinstance(speeds, list) and len(ids) == len(speeds) >= 2
                  and all(i in jobs for i in ids) and isinstance(t, str)
                  and all(isinstance(x, int | float) and 0 < x <= 1 for x in speeds))
        if not ok:
            return f"profile row {_short(row)} is not a profile of this instance's jobs"
    return None

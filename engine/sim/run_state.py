"""The state of one simulation run as data: jobs' progress and placements, queue, clock, metric accumulators.

:class:`RunState` holds every field of a run and turns it into JSON-ready data and back
(:meth:`RunState.to_dict`, :meth:`RunState.from_dict`); :mod:`dltsched.engine.sim.checkpoint` saves and
restores runs through these two methods only, and :mod:`dltsched.engine.sim.run_state_schema` checks a saved
state before it is restored. The behaviour lives in subclasses, one concern per module: lazy progress
(:mod:`~dltsched.engine.sim.progress`), snapshots (:mod:`~dltsched.engine.sim.snapshot`), plan validation,
placement and memory checks (:mod:`~dltsched.engine.sim.placing`) and the event loop
(:mod:`~dltsched.engine.sim.simulator`). One class split over modules by concern keeps the hot loop's
attribute access as it was (no indirection), so the trajectory stays bit for bit the same.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from operator import attrgetter
from typing import Any

import numpy as np

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Assignment, Job, JobState
from dltsched.engine.domain.predictors import MemoryObservations
from dltsched.engine.domain.profiles import ProfileBook
from dltsched.engine.sim.config import RunSetup
from dltsched.engine.sim.faults import FaultSchedule
from dltsched.engine.sim.lengths import LengthEstimates
from dltsched.engine.sim.metrics import JobRecord, PlacementInterval

#: the fields of finished records and placement intervals in their JSON form, read in one call each
#: (``dataclasses.asdict`` deep-copies field by field: most of the cost of saving a long run)
_RECORD_FIELDS = tuple(f.name for f in fields(JobRecord))
_INTERVAL_FIELDS = tuple(f.name for f in fields(PlacementInterval))
_record_values = attrgetter(*_RECORD_FIELDS)
_interval_values = attrgetter(*_INTERVAL_FIELDS)


@dataclass(slots=True)
class ActiveJob:
    """A job the simulator has admitted and not finished: its progress and where it runs.

    Times are simulated seconds.

    Parameters
    ----------
    job
        The job.
    remaining
        Useful iterations still to run.
    attained_s
        GPU service attained so far (GPU-seconds).
    assignment
        Where it runs now; ``None`` while queued.
    rate
        Useful iterations per second at the current placement.
    ready_at
        When progress starts after the restore delay.
    preemptions
        How often it was preempted or migrated.
    first_start
        When it first ran; ``None`` before.
    queued_since
        When it last entered the queue.
    penalty
        The frozen-layer accuracy penalty at its current freeze level.
    placed_at
        When it was placed where it runs now.
    ckpt_remaining
        Remaining iterations at its last checkpoint.
    failures
        How often it crashed (node faults, out of memory).
    blind_ooms
        Crashes out of memory that taught nothing new.
    """

    job: Job
    remaining: float
    attained_s: float = 0.0
    assignment: Assignment | None = None
    rate: float = 0.0  # useful iterations per second at the current placement
    ready_at: float = 0.0  # progress starts after the restore delay
    preemptions: int = 0
    first_start: float | None = None
    queued_since: float = 0.0
    penalty: float = 0.0
    placed_at: float = 0.0
    ckpt_remaining: float = 0.0  # remaining iterations at the last checkpoint
    failures: int = 0
    blind_ooms: int = 0  # crashes out of memory that taught nothing new (see ``_MAX_BLIND_OOMS``)
    synced_at: float = 0.0  # ``remaining`` and ``attained_s`` are exact at this instant (running jobs)
    version: int = 0  # bumps when the job's completion time changes; stale heap entries are skipped

    def to_dict(self) -> dict[str, Any]:
        """The job's state as JSON-ready data (what :meth:`from_dict` reads).

        Returns
        -------
        dict[str, Any]
            Field -> value; the job itself by id (and its remaining GPU types).
        """
        asg = self.assignment
        return {"id": self.job.id, "gpu_types": list(self.job.gpu_types),  # fewer than submitted after an OOM
                "remaining": self.remaining, "attained_s": self.attained_s,
                "assignment": None if asg is None
                else {"gpus": list(asg.gpus), "freeze_level": asg.freeze_level},
                "rate": self.rate, "ready_at": self.ready_at, "preemptions": self.preemptions,
                "first_start": self.first_start, "queued_since": self.queued_since, "penalty": self.penalty,
                "placed_at": self.placed_at, "ckpt_remaining": self.ckpt_remaining, "failures": self.failures,
                "blind_ooms": self.blind_ooms, "synced_at": self.synced_at, "version": self.version}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], job: Job) -> ActiveJob:
        """Restore a state written by :meth:`to_dict`.

        Parameters
        ----------
        data
            What :meth:`to_dict` returned.
        job
            The instance's job of that id (its GPU types are narrowed to the saved ones).

        Returns
        -------
        ActiveJob
            The restored job state.
        """
        if tuple(data["gpu_types"]) != job.gpu_types:
            job = replace(job, gpu_types=tuple(data["gpu_types"]))
        asg = data["assignment"]
        return cls(job, float(data["remaining"]), float(data["attained_s"]),
                   None if asg is None else Assignment(job.id, tuple(asg["gpus"]), int(asg["freeze_level"])),
                   float(data["rate"]), float(data["ready_at"]), int(data["preemptions"]),
                   None if data["first_start"] is None else float(data["first_start"]),
                   float(data["queued_since"]), float(data["penalty"]), float(data["placed_at"]),
                   float(data["ckpt_remaining"]), int(data["failures"]), int(data["blind_ooms"]),
                   float(data["synced_at"]), int(data["version"]))



class RunState:
    """Every field of one simulation in progress; :meth:`to_dict` / :meth:`from_dict` (see module
    docstring)."""

    def __init__(self, sim: RunSetup) -> None:
        self.sim = sim
        self.inst = sim.instance
        self.cluster = sim.instance.cluster
        self.truth = sim.truth
        self.policy = sim.policy
        self.cfg = sim.config
        self.lengths = (LengthEstimates(self.cfg.lengths, self.cfg.length_error, self.cfg.seed,
                                        self.inst.jobs)
                        if self.cfg.lengths != "known" else None)
        self.arrivals = sorted(self.inst.jobs, key=lambda j: (j.arrival_time_s, j.id))
        self._gpus_per_node = max((n.num_gpus for n in self.cluster.nodes), default=1)
        self.next_arrival = 0
        self.active: dict[str, ActiveJob] = {}
        self.running: dict[str, ActiveJob] = {}
        #: queued jobs' (arrival, id) keys and snapshots, kept sorted by arrival
        self.queue_keys: list[tuple[float, str]] = []
        self.queue_snaps: list[JobState] = []
        self._queue_tuple: tuple[JobState, ...] | None = None
        self._mem: dict[tuple[str, str, int], float] = {}
        self.num_busy_gpus = 0
        self.num_held_gpus = 0  # (job, GPU) pairs of the running jobs
        self.finished: list[JobRecord] = []
        self.time = 0.0
        self.gpu_jobs: list[list[str]] = [[] for _ in range(self.cluster.num_gpus)]
        #: per node, the GPUs that hold no job and are up, and the job ids on each of its GPUs; nodes in
        #: ``_stale_nodes`` are recomputed at the next snapshot, which reuses the tuples of the others
        self._free: list[tuple[int, ...]] = [()] * len(self.cluster.nodes)
        self._occupancy: list[tuple[tuple[str, ...], ...]] = [()] * len(self.cluster.nodes)
        self._stale_nodes: set[int] = set(range(len(self.cluster.nodes)))
        self._node_views: tuple[tuple[tuple[int, ...], ...], Sequence[tuple[str, ...]]] = ((), ())
        self._oom_this_round = False
        self._learned_this_round = False  # a crash out of memory this round measured something new
        #: the running jobs and their assignments by id, kept in step with ``running``; once a snapshot has
        #: them (``_shared``), they are copied before they change, so a snapshot never sees them change
        self._running_jobs: dict[str, Job] = {}
        self._placements: dict[str, Assignment] = {}
        self._shared: tuple[Mapping[str, Job], Mapping[str, Assignment]] | None = None
        self._dirty_gpus: set[int] = set()
        #: instants at which a round read the running jobs' progress, ascending (see :meth:`_sync`)
        self._read_at: list[float] = []
        self._read_array = np.empty(1024)  # ``_read_at`` in its first entries, for long replays
        #: (finish time, sequence, job id, version) of running jobs; stale entries are skipped
        self._finish_heap: list[tuple[float, int, str, int]] = []
        self._seq = 0
        self.busy_gpu_s = 0.0
        self.util_trace: list[tuple[float, float]] = []
        self.decision_times: list[float] = []
        self.oom_events = 0
        self.memory_seen = MemoryObservations()  # peaks measured by out-of-memory crashes in this run
        self.profiles = ProfileBook()  # measured by profiling on arrival (``cfg.profiling``), else empty
        self.last_round = -math.inf
        self.ideal_s: dict[str, float] = {}
        self._ideal_memo: dict[str, tuple[Job, float]] = {}  # active jobs' ideal run time, by job object
        self.intervals: list[PlacementInterval] = []
        self.rounds = 0
        self.node_failures = 0
        self.fault_interruptions = 0
        self.started = False
        first = self.arrivals[0].arrival_time_s if self.arrivals else 0.0
        self.faults = (FaultSchedule(self.cfg.faults, self.cfg.seed, len(self.cluster.nodes), start_s=first)
                       if self.cfg.faults is not None else None)
        self._check_jobs_fit()

    def _check_jobs_fit(self) -> None:
        """Every job must fit, alone, on some GPU type it may use (ground-truth memory)."""
        by_type = self.cluster.gpus_by_type()
        memo: dict[tuple[str, int, bool, str | None, str], bool] = {}
        bad: list[str] = []
        for job in self.inst.jobs:
            ok = False
            for t in job.gpu_types or tuple(by_type):
                key = (job.model, job.batch_size, job.amp, job.dataset, t)
                if key not in memo:
                    cap = self.cluster.gpu_types[t].memory_mib
                    memo[key] = self.truth.memory_mib(job, t, 0) * job.gpu_fraction <= cap
                if by_type.get(t, 0) >= job.num_gpus and memo[key]:
                    ok = True
                    break
            if not ok:
                bad.append(job.id)
        if bad:
            raise ValidationError(
                "jobs", f"{len(bad)} job(s) fit in the memory of no GPU type they may use: {bad[:5]}"
                f"{' ...' if len(bad) > 5 else ''}; lower their batch size or add larger GPUs")


    def _enqueue(self, a: ActiveJob) -> None:
        key = (a.job.arrival_time_s, a.job.id)
        i = bisect.bisect_left(self.queue_keys, key)
        self.queue_keys.insert(i, key)
        self.queue_snaps.insert(i, self.job_state(a, None))
        self._queue_tuple = None

    def job_state(self, a: ActiveJob, assignment: Assignment | None) -> JobState:
        """``a`` as policies see it now (with ``lengths`` not ``known``: its estimated length, see
        :mod:`dltsched.engine.sim.lengths`)."""
        if self.lengths is None:
            return JobState(a.job, a.remaining, a.attained_s, assignment, a.preemptions, a.first_start,
                            a.queued_since)
        job, left = self.lengths.visible(a.job, a.remaining)
        return JobState(job, left, a.attained_s, assignment, a.preemptions, a.first_start, a.queued_since)

    def policy_job(self, a: ActiveJob) -> Job:
        """The job of ``a`` as policies see it (its true spec unless lengths are not ``known``)."""
        return a.job if self.lengths is None else self.lengths.visible(a.job, a.remaining)[0]

    def _queue_index(self, a: ActiveJob) -> int | None:
        """Position of ``a`` in the arrival-ordered queue, ``None`` when it is not queued."""
        key = (a.job.arrival_time_s, a.job.id)
        i = bisect.bisect_left(self.queue_keys, key)
        return i if i < len(self.queue_keys) and self.queue_keys[i] == key else None

    def _dequeue(self, a: ActiveJob) -> None:
        i = self._queue_index(a)
        if i is None:
            raise RuntimeError(f"simulator: job '{a.job.id}' is not queued")
        del self.queue_keys[i]
        del self.queue_snaps[i]
        self._queue_tuple = None

    # -- run state as data -----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The whole state of the run as JSON-ready data (finite floats; ``from_dict`` restores it).

        Nothing is brought up to date for it: running jobs keep their lazy progress (``synced_at`` and the
        read instants after the earliest of them), the completion heap keeps its order, so a run that
        saves its state follows the same trajectory, bit for bit, as one that does not."""
        since = min((a.synced_at for a in self.running.values()), default=self.time)
        reads = self._read_at[bisect.bisect_right(self._read_at, since):]
        heap = sorted(entry for entry in self._finish_heap
                      if (a := self.running.get(entry[2])) is not None and a.version == entry[3])
        return {
            "time": self.time, "next_arrival": self.next_arrival, "rounds": self.rounds,
            "last_round": self.last_round if math.isfinite(self.last_round) else None,
            "busy_gpu_s": self.busy_gpu_s, "oom_events": self.oom_events, "node_failures": self.node_failures,
            "fault_interruptions": self.fault_interruptions, "decision_times": list(self.decision_times),
            "util_trace": [list(x) for x in self.util_trace], "ideal_s": dict(self.ideal_s),
            "finished": [dict(zip(_RECORD_FIELDS, _record_values(r), strict=True)) for r in self.finished],
            "intervals": [dict(zip(_INTERVAL_FIELDS, _interval_values(p),
                                   strict=True)) | {"gpus": list(p.gpus)}
                          for p in self.intervals],
            "gpu_jobs": [list(x) for x in self.gpu_jobs],
            "active": [a.to_dict() for a in self.active.values()],
            "running": list(self.running), "read_at": reads,
            "finish_heap": [list(entry) for entry in heap], "seq": self._seq,
            "faults": self.faults.state_dict() if self.faults is not None else None,
            "policy_state": self.policy.state_dict() if hasattr(self.policy, "state_dict") else None,
            # peaks measured by crashes out of memory, and whether the policy decides again at once after one
            "memory_observations": self.memory_seen.to_list(), "retry_round": self._learned_this_round,
            "profiles": self.profiles.to_list() if self.cfg.profiling is not None else None,
        }

    def from_dict(self, data: Mapping[str, Any]) -> None:
        """Restore a state of :meth:`to_dict` into this fresh run (same instance, policy and settings).

        ``data`` is trusted to be well formed (:mod:`dltsched.engine.sim.checkpoint` checks files before);
        a malformed one raises ``KeyError``/``TypeError``/``ValueError``."""
        jobs = {j.id: j for j in self.inst.jobs}
        self.time = float(data["time"])
        self.next_arrival = int(data["next_arrival"])
        self.rounds = int(data["rounds"])
        self.last_round = -math.inf if data["last_round"] is None else float(data["last_round"])
        self.busy_gpu_s = float(data["busy_gpu_s"])
        self.oom_events = int(data["oom_events"])
        self.node_failures = int(data["node_failures"])
        self.fault_interruptions = int(data["fault_interruptions"])
        self.decision_times = [float(x) for x in data["decision_times"]]
        self.util_trace = [(float(t), float(u)) for t, u in data["util_trace"]]
        self.ideal_s = {str(k): float(v) for k, v in data["ideal_s"].items()}
        self.finished = [JobRecord(**r) for r in data["finished"]]
        self.intervals = [PlacementInterval(**{**p, "gpus": tuple(p["gpus"])}) for p in data["intervals"]]
        self.gpu_jobs = [[str(j) for j in x] for x in data["gpu_jobs"]]
        self.active = {a["id"]: ActiveJob.from_dict(a, jobs[a["id"]]) for a in data["active"]}
        self.running = {k: self.active[k] for k in data["running"]}
        self.queue_keys, self.queue_snaps = [], []
        self._queue_tuple = None
        for a in self.active.values():
            if a.assignment is None:
                self._enqueue(a)
        self._stale_nodes = set(range(len(self.cluster.nodes)))
        self._running_jobs = {k: self.policy_job(a) for k, a in self.running.items()}
        self._placements = {k: a.assignment for k, a in self.running.items() if a.assignment is not None}
        self._shared = None
        self._dirty_gpus = set()
        self._read_at = [float(t) for t in data["read_at"]]
        self._read_array = np.empty(max(1024, 2 * len(self._read_at)))
        self._read_array[:len(self._read_at)] = self._read_at
        self._finish_heap = [(float(t), int(q), str(j), int(v)) for t, q, j, v in data["finish_heap"]]
        heapq.heapify(self._finish_heap)
        self._seq = int(data["seq"])
        self.num_busy_gpus = sum(1 for on in self.gpu_jobs if on)
        self.num_held_gpus = sum(map(len, self.gpu_jobs))
        if self.faults is not None and data["faults"] is not None:
            self.faults.load_state_dict(data["faults"])
        if data["policy_state"] is not None and hasattr(self.policy, "load_state_dict"):
            self.policy.load_state_dict(data["policy_state"])
        self.memory_seen = MemoryObservations.from_list(data["memory_observations"])
        self._learned_this_round = bool(data["retry_round"])
        profiles = data.get("profiles")
        self.profiles = ProfileBook.from_list(profiles) if profiles is not None else ProfileBook()
        self.started = True


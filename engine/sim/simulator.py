"""Discrete-event cluster simulator. It owns the clock; policies only see snapshots and predictions.

At every event (arrivals, completions, and a policy's optional round interval) the simulator hands a
frozen :class:`~dltsched.engine.domain.model.ClusterState` to the policy, validates the returned
:class:`~dltsched.engine.domain.model.Plan` (capacity, gang, GPU types, memory) and applies it: new jobs start,
moved jobs migrate, jobs left out are preempted. Jobs then advance at **ground-truth** rates
(:mod:`dltsched.engine.sim.truth`): isolated step time x co-located speed (a gang job runs at its slowest
worker) x (1 - frozen penalty). A job that (re)starts pays a checkpoint-restore delay before it progresses.

Memory (``memory="oom"``, the default): as in a real cluster, a job that does not fit beside the jobs on its
GPUs by the ground-truth memory model crashes out of memory at start and returns to the queue; its measured
peak (and that of the jobs it met on the GPU) is recorded in the run's
:class:`~dltsched.engine.domain.predictors.MemoryObservations`, which every memory prediction a policy makes during the
run is raised to (:func:`~dltsched.engine.domain.predictors.learned_memory_mib`), and the policy decides again at once
(the crash costs no simulated time). A crash that measures nothing new (the policy ignores what was measured)
waits for the next event; after ``_MAX_BLIND_OOMS`` of them for one job the run stops with
:class:`~dltsched.engine.domain.errors.InvalidPlanError`.
``memory="reject"`` is the strict check: any plan that overfills a GPU raises.

Guards: a run whose loop stops moving (``max_stalled_iterations`` iterations in which the clock moves by less
than a millisecond and no job arrives, finishes or has its memory measured, e.g. a round interval of 0) or whose simulated time
would pass ``max_time_s`` after the first arrival (default 10 years) raises
:class:`~dltsched.engine.domain.errors.SimulationStalledError` naming the policy and the state.

Run state: :meth:`Simulator.start` gives the run (:class:`RunState`) before its first event;
``RunState.to_dict()`` is the whole state as JSON-ready data and ``RunState.from_dict()`` restores it into
a fresh run of the same instance, policy and settings, on the same trajectory bit for bit (the lazy
progress bookkeeping, the completion heap and the running order are part of it). A :class:`RunStore`
(:class:`dltsched.engine.sim.checkpoint.CheckpointStore` writes files) receives that state every
``every_rounds`` rounds; this module knows nothing of files.
"""

from __future__ import annotations

import bisect
import heapq
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from itertools import compress
from operator import is_not
from types import MappingProxyType
from typing import Any, Literal, Protocol, overload

import numpy as np

from dltsched.engine.domain.errors import InvalidPlanError, SimulationStalledError, ValidationError
from dltsched.engine.domain.model import Assignment, ClusterState, Instance, Job, JobState, Plan
from dltsched.engine.domain.predictors import MemoryObservations, observing_memory
from dltsched.engine.sim.faults import FaultConfig, FaultSchedule
from dltsched.engine.sim.metrics import JobRecord, PlacementInterval, SimulationResult, summarize
from dltsched.engine.sim.truth import GroundTruth, MeasuredTruth

_EPS_ITER = 1e-6
#: simulated seconds in ten years: the default bound on a run's simulated time
TEN_YEARS_S = 10 * 365.25 * 86400.0
#: crashes out of memory of one job where its (and its GPU neighbours') footprint was already measured
_MAX_BLIND_OOMS = 100
#: the clock moving by less than this (seconds) is no progress for the stall guard
_MIN_CLOCK_STEP_S = 1e-3


class RunStore(Protocol):
    """Where a run's state goes every ``every_rounds`` rounds, and comes back from on resume.

    ``start`` is called once, before the first event, with the simulator (still untouched by the run); it
    returns the run to continue (``sim.start()`` restored by ``from_dict``), or ``None`` to start afresh.
    ``save`` gets :meth:`RunState.to_dict`."""

    every_rounds: int

    def start(self, sim: Simulator, *, resume: bool) -> RunState | None: ...

    def save(self, state: dict[str, Any]) -> None: ...


class Policy(Protocol):
    """A scheduling policy: pure function of a snapshot. ``round_interval_s`` asks for periodic rounds."""

    name: str
    round_interval_s: float | None

    def schedule(self, state: ClusterState) -> Plan: ...


def restore_time_s(job: Job) -> float:
    """Checkpoint-restore delay when a job (re)starts: 10 s start-up + weights and optimizer state
    read back at 500 MB/s (none for a job's very first start)."""
    from dltsched.engine.domain.catalog import model_spec

    state_bytes = model_spec(job.model).params_m * 1e6 * (8.0 + job.bytes_per_param)
    return 10.0 + state_bytes / 500e6


@dataclass(slots=True)
class _Active:
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
        asg = self.assignment
        return {"id": self.job.id, "gpu_types": list(self.job.gpu_types),  # fewer than submitted after an OOM
                "remaining": self.remaining, "attained_s": self.attained_s,
                "assignment": None if asg is None else {"gpus": list(asg.gpus), "freeze_level": asg.freeze_level},
                "rate": self.rate, "ready_at": self.ready_at, "preemptions": self.preemptions,
                "first_start": self.first_start, "queued_since": self.queued_since, "penalty": self.penalty,
                "placed_at": self.placed_at, "ckpt_remaining": self.ckpt_remaining, "failures": self.failures,
                "blind_ooms": self.blind_ooms, "synced_at": self.synced_at, "version": self.version}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], job: Job) -> _Active:
        if tuple(data["gpu_types"]) != job.gpu_types:
            job = replace(job, gpu_types=tuple(data["gpu_types"]))
        asg = data["assignment"]
        return cls(job, float(data["remaining"]), float(data["attained_s"]),
                   None if asg is None else Assignment(job.id, tuple(asg["gpus"]), int(asg["freeze_level"])),
                   float(data["rate"]), float(data["ready_at"]), int(data["preemptions"]),
                   None if data["first_start"] is None else float(data["first_start"]), float(data["queued_since"]),
                   float(data["penalty"]), float(data["placed_at"]), float(data["ckpt_remaining"]),
                   int(data["failures"]), int(data["blind_ooms"]), float(data["synced_at"]), int(data["version"]))


@dataclass(frozen=True, slots=True)
class SimulationConfig:
    """Simulator options; ``seed`` feeds every random choice (policies get it too).

    ``memory``: ``"oom"`` (a misfit crashes and is re-queued, see the module docstring) or ``"reject"`` (raise).
    ``max_time_s``: simulated seconds after the first arrival a run may last; a run that would go beyond
    raises. ``max_stalled_iterations``: loop iterations without any progress before the run raises."""

    seed: int = 0
    memory: Literal["reject", "oom"] = "oom"
    max_time_s: float = TEN_YEARS_S
    max_stalled_iterations: int = 1000
    utilization_samples: int = 400
    faults: FaultConfig | None = None


@dataclass(slots=True)
class Simulator:
    """Runs one policy over one instance. ``run()`` returns a :class:`SimulationResult`."""

    instance: Instance
    policy: Policy
    truth: GroundTruth = field(default_factory=MeasuredTruth)
    config: SimulationConfig = SimulationConfig()
    on_round: Callable[[float, int], None] | None = None
    #: receives the run state every ``store.every_rounds`` rounds (see :class:`RunStore`)
    store: RunStore | None = None

    def start(self) -> RunState:
        """A fresh run of this simulator, before its first event (``run()`` continues it)."""
        return _Run(self)

    def run(self, *, resume: bool = False) -> SimulationResult:
        """Simulate to the end; with ``resume``, continue from the state ``store`` returns, if any."""
        run = self.store.start(self, resume=resume) if self.store is not None else None
        return (run or _Run(self)).run()


class _RunningStates(Mapping[str, JobState]):
    """The running jobs' states at one round, by id, each built when first read (see :meth:`_Run._sync`).

    Taking it (:meth:`take`) counts as the round reading every running job's progress; reading it after the
    round raises."""

    __slots__ = ("_run", "_round", "_built", "_taken")

    def __init__(self, run: _Run) -> None:
        self._run = run
        self._round = run.rounds
        self._built: dict[str, JobState] = {}
        self._taken = False

    def take(self) -> _RunningStates:
        if not self._taken:
            self._taken = True
            self._run._read_running()
        return self

    def __getitem__(self, job_id: str) -> JobState:
        hit = self._built.get(job_id)
        if hit is None:
            run = self._run
            if run.rounds != self._round:
                raise RuntimeError("a round's snapshot of the running jobs was read after the round")
            a = run.running[job_id]
            run._sync(a)
            hit = self._built[job_id] = JobState(a.job, a.remaining, a.attained_s, a.assignment, a.preemptions,
                                                 a.first_start, a.queued_since)
        return hit

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._run.running))

    def __len__(self) -> int:
        return len(self._run.running)


class _Jobs(Sequence[JobState]):
    """The jobs of a snapshot: running ones (built on first use) then the queue (a ready tuple).

    A policy that only reads the queue (:meth:`ClusterState.queued`) never pays for snapshotting the
    running jobs, which keeps a round of a non-preemptive policy independent of the running-set size."""

    __slots__ = ("_make_running", "_num_running", "_queue", "_all")

    def __init__(self, make_running: Callable[[], tuple[JobState, ...]], num_running: int,
                 queue: tuple[JobState, ...]) -> None:
        self._make_running = make_running
        self._num_running = num_running
        self._queue = queue
        self._all: tuple[JobState, ...] | None = None

    def _full(self) -> tuple[JobState, ...]:
        if self._all is None:
            self._all = self._make_running() + self._queue
        return self._all

    def __len__(self) -> int:
        return self._num_running + len(self._queue)

    @overload
    def __getitem__(self, i: int) -> JobState: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[JobState, ...]: ...

    def __getitem__(self, i: int | slice) -> JobState | tuple[JobState, ...]:
        if isinstance(i, slice) and i.start == self._num_running and i.stop is None and i.step is None:
            return self._queue
        return self._full()[i]

    def __iter__(self) -> Iterator[JobState]:
        return iter(self._full())

    def __bool__(self) -> bool:
        return len(self) > 0


class _Run:
    """One simulation in progress (public as :data:`RunState`: ``run``, ``to_dict``, ``from_dict``)."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.inst = sim.instance
        self.cluster = sim.instance.cluster
        self.truth = sim.truth
        self.policy = sim.policy
        self.cfg = sim.config
        self.arrivals = sorted(self.inst.jobs, key=lambda j: (j.arrival_time_s, j.id))
        self._gpus_per_node = max((n.num_gpus for n in self.cluster.nodes), default=1)
        self.next_arrival = 0
        self.active: dict[str, _Active] = {}
        self.running: dict[str, _Active] = {}
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
        self._occupancy: list[tuple[str, ...]] = [()] * self.cluster.num_gpus
        self._stale_nodes: set[int] = set(range(len(self.cluster.nodes)))
        self._node_views: tuple[tuple[tuple[int, ...], ...], tuple[tuple[str, ...], ...]] = ((), ())
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
        self.last_round = -math.inf
        self.ideal_s: dict[str, float] = {}
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

    # -- main loop ----------------------------------------------------------------------------------

    def run(self) -> SimulationResult:
        with observing_memory(self.memory_seen):
            return self._run()

    def _run(self) -> SimulationResult:
        started = time.perf_counter()
        if self.arrivals and not self.started:
            self.time = self.arrivals[0].arrival_time_s
        self.started = True
        interval = getattr(self.policy, "round_interval_s", None)
        origin = self.arrivals[0].arrival_time_s if self.arrivals else 0.0
        stalled, last_progress, last_clock = 0, self._progress(), self.time
        while self.next_arrival < len(self.arrivals) or self.active:
            changed = self._admit_arrivals()
            changed |= self._complete()
            changed |= self._fault_events()
            due = interval is not None and self.time >= self.last_round + interval - 1e-9
            if changed or due or self._learned_this_round:  # a crash measured memory: decide again at once
                self._round()
                self._check_progress()
            if self.next_arrival >= len(self.arrivals) and not self.active:
                break
            t_next = self.time if self._learned_this_round else self._next_event_time(interval)
            if not math.isfinite(t_next):
                stuck = sorted(self.active)[:5]
                raise InvalidPlanError(
                    f"policy '{self.policy.name}' left {len(self.active)} job(s) waiting with nothing running "
                    f"(e.g. {stuck}); every plan must eventually run each job"
                )
            if t_next - origin > self.cfg.max_time_s:
                raise SimulationStalledError(
                    f"policy '{self.policy.name}': simulated time would pass max_time_s={self.cfg.max_time_s:.4g} s "
                    f"({self.cfg.max_time_s / TEN_YEARS_S * 10:.3g} years) after the first arrival, {self._where()}; "
                    "the instance's work is too large (total_iterations?) or raise max_time_s")
            progress = self._progress()
            if progress != last_progress or self.time > last_clock + _MIN_CLOCK_STEP_S:
                stalled, last_progress, last_clock = 0, progress, self.time
            else:
                stalled += 1
            if stalled >= self.cfg.max_stalled_iterations:
                raise SimulationStalledError(
                    f"policy '{self.policy.name}': no progress in {stalled} iterations of the event loop, "
                    f"{self._where()}; the clock advances by less than {_MIN_CLOCK_STEP_S} s (a round interval of "
                    "0?) and no job arrives, finishes or learns its memory")
            self._advance(t_next)
        self.sync_all()
        wall = time.perf_counter() - started
        return summarize(
            policy=self.policy.name, instance=self.inst, records=self.finished, busy_gpu_s=self.busy_gpu_s,
            util_trace=self.util_trace, decision_times_s=self.decision_times, wall_time_s=wall,
            num_oom=self.oom_events, unfinished=len(self.active) + len(self.arrivals) - self.next_arrival,
            ideal_s=self.ideal_s, placements=self.intervals, node_failures=self.node_failures,
            utilization_samples=self.cfg.utilization_samples,
            fault_interruptions=self.fault_interruptions,
        )

    def _progress(self) -> tuple[int, int, int]:
        """What moves when a run advances, apart from the clock: finished and arrived jobs, measured memory."""
        return len(self.finished), self.next_arrival, self.memory_seen.changes

    def _where(self) -> str:
        """The run's state in words, for an error message."""
        return (f"at clock {self.time:.6g} s with {len(self.queue_keys)} job(s) queued, {len(self.running)} "
                f"running, {len(self.finished)} finished, {len(self.arrivals) - self.next_arrival} yet to arrive")

    def _check_progress(self) -> None:
        """A policy that runs nothing while every GPU is free and nothing else will happen is stuck. A plan
        whose starts all crashed out of memory was no idle plan: the next round retries (and, without a
        next round, the main loop reports the jobs left waiting)."""
        if not self.active or self.next_arrival < len(self.arrivals):
            return
        if self.running or self._oom_this_round or (self.faults is not None and self.faults.down):
            return
        stuck = sorted(self.active)[:5]
        raise InvalidPlanError(
            f"policy '{self.policy.name}' runs none of the {len(self.active)} waiting job(s) (e.g. {stuck}) "
            "on an idle cluster; every plan must eventually run each job")

    def _fault_events(self) -> bool:
        """Apply node failures and repairs due now; jobs on failed nodes roll back to their checkpoint."""
        if self.faults is None:
            return False
        failed, repaired = self.faults.step(self.time)
        for n in failed:
            self.node_failures += 1
            gpus = set(self.cluster.node_gpus(n))
            for a in list(self.running.values()):
                if a.assignment is not None and gpus & set(a.assignment.gpus):
                    self._release(a)
                    a.remaining = a.ckpt_remaining
                    a.failures += 1
                    a.queued_since = self.time
                    self._enqueue(a)
                    self.fault_interruptions += 1
        self._stale_nodes.update(failed, repaired)
        if failed:
            self._update_rates([])
        return bool(failed or repaired)

    def _ideal_s(self, job: Job) -> float:
        """Run time alone on the job's GPUs of the fastest allowed type (Themis' fair baseline)."""
        by_type = self.cluster.gpus_by_type()
        types = [t for t in (job.gpu_types or by_type) if by_type.get(t, 0) >= job.num_gpus]
        nodes = max(1, math.ceil(job.num_gpus / self._gpus_per_node))
        return min(self.truth.step_time_s(job, t, job.num_gpus, nodes) for t in types) * job.total_iterations

    def _admit_arrivals(self) -> bool:
        changed = False
        while self.next_arrival < len(self.arrivals) and self.arrivals[self.next_arrival].arrival_time_s <= self.time:
            job = self.arrivals[self.next_arrival]
            total = float(job.total_iterations)
            if job.arrival_time_s - self.arrivals[0].arrival_time_s + self._ideal_s(job) > self.cfg.max_time_s:
                raise SimulationStalledError(
                    f"job '{job.id}': {self._ideal_s(job):.4g} s of work alone on its fastest GPU type, beyond "
                    f"max_time_s={self.cfg.max_time_s:.4g} s of simulated time ({self.cfg.max_time_s / TEN_YEARS_S * 10:.3g}"
                    " years); lower its total_iterations or raise max_time_s")
            a = _Active(job, total, queued_since=job.arrival_time_s, ckpt_remaining=total)
            self.active[job.id] = a
            self._enqueue(a)
            self.next_arrival += 1
            changed = True
        return changed

    def _enqueue(self, a: _Active) -> None:
        key = (a.job.arrival_time_s, a.job.id)
        i = bisect.bisect_left(self.queue_keys, key)
        self.queue_keys.insert(i, key)
        self.queue_snaps.insert(i, JobState(a.job, a.remaining, a.attained_s, None, a.preemptions,
                                            a.first_start, a.queued_since))
        self._queue_tuple = None

    def _queue_index(self, a: _Active) -> int | None:
        """Position of ``a`` in the arrival-ordered queue, ``None`` when it is not queued."""
        key = (a.job.arrival_time_s, a.job.id)
        i = bisect.bisect_left(self.queue_keys, key)
        return i if i < len(self.queue_keys) and self.queue_keys[i] == key else None

    def _dequeue(self, a: _Active) -> None:
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
            "finished": [asdict(r) for r in self.finished],
            "intervals": [asdict(p) | {"gpus": list(p.gpus)} for p in self.intervals],
            "gpu_jobs": [list(x) for x in self.gpu_jobs],
            "active": [a.to_dict() for a in self.active.values()],
            "running": list(self.running), "read_at": reads,
            "finish_heap": [list(entry) for entry in heap], "seq": self._seq,
            "faults": self.faults.state_dict() if self.faults is not None else None,
            "policy_state": self.policy.state_dict() if hasattr(self.policy, "state_dict") else None,
            # peaks measured by crashes out of memory, and whether the policy decides again at once after one
            "memory_observations": self.memory_seen.to_list(), "retry_round": self._learned_this_round,
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
        self.active = {a["id"]: _Active.from_dict(a, jobs[a["id"]]) for a in data["active"]}
        self.running = {k: self.active[k] for k in data["running"]}
        self.queue_keys, self.queue_snaps = [], []
        self._queue_tuple = None
        for a in self.active.values():
            if a.assignment is None:
                self._enqueue(a)
        self._stale_nodes = set(range(len(self.cluster.nodes)))
        self._running_jobs = {k: a.job for k, a in self.running.items()}
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
        self.started = True

    # -- progress (lazy: a running job's progress is brought up to date only when it is needed) --------

    def _sync(self, a: _Active) -> None:
        """Bring ``a.remaining``/``a.attained_s`` up to ``self.time`` at its current rate.

        A round that reads the running jobs' progress records its instant in ``_read_at`` instead of
        bringing every running job up to it; a job steps through the instants recorded since its last sync
        first, in order, so its values are bit-identical to those of syncing it at each of them."""
        reads = self._read_at
        if a.assignment is not None and reads and reads[-1] > a.synced_at:
            start = bisect.bisect_right(reads, a.synced_at)
            if self.faults is not None:
                for t in reads[start:]:
                    self._step(a, t)
            elif len(reads) - start < 48 or not _replay_with_numpy(a, self._read_array[start:len(reads)]):
                self._replay(a, reads[start:])
        self._step(a, self.time)

    def _replay(self, a: _Active, instants: list[float]) -> None:
        """:meth:`_step` to each of ``instants`` (ascending, after ``a.synced_at``) without faults, inlined:
        the same operations on the same values (``max`` spelled out)."""
        assert a.assignment is not None
        n = len(a.assignment.gpus)
        attained, remaining, rate, ready, t_last = a.attained_s, a.remaining, a.rate, a.ready_at, a.synced_at
        for t_to in instants:
            attained += (t_to - t_last) * n
            if rate > 0:
                t_from = t_last if t_last > ready else ready
                if t_to > t_from:
                    left = remaining - rate * (t_to - t_from)
                    remaining = left if left > 0.0 else 0.0
            t_last = t_to
        a.attained_s, a.remaining, a.synced_at = attained, remaining, t_last

    def _step(self, a: _Active, t_to: float) -> None:
        """Progress of ``a`` from its last sync to ``t_to`` at its current rate."""
        t_last = a.synced_at
        if t_to <= t_last or a.assignment is None:
            a.synced_at = max(t_last, t_to)
            return
        a.attained_s += (t_to - t_last) * len(a.assignment.gpus)
        t_from = max(a.ready_at, t_last)
        if t_to > t_from and a.rate > 0:
            if self.faults is not None:
                self._periodic_checkpoint(a, t_from, t_to)
            a.remaining = max(0.0, a.remaining - a.rate * (t_to - t_from))
        a.synced_at = t_to

    def sync_all(self) -> None:
        """Every running job's progress brought up to now (before a snapshot or a checkpoint)."""
        for a in self.running.values():
            self._sync(a)

    def _finish_time(self, a: _Active) -> float:
        return max(a.ready_at, a.synced_at) + a.remaining / a.rate if a.rate > 0 else math.inf

    def _schedule_finish(self, a: _Active) -> None:
        a.version += 1
        t = self._finish_time(a)
        if math.isfinite(t):
            self._seq += 1
            heapq.heappush(self._finish_heap, (t, self._seq, a.job.id, a.version))

    def _valid_top(self) -> tuple[float, int, str, int] | None:
        heap = self._finish_heap
        while heap:
            t, _, job_id, version = heap[0]
            a = self.running.get(job_id)
            if a is not None and a.version == version:
                return heap[0]
            heapq.heappop(heap)
        return None

    def _complete(self) -> bool:
        done: list[_Active] = []
        while (top := self._valid_top()) is not None and top[0] <= self.time + 1e-9 * max(1.0, self.time):
            heapq.heappop(self._finish_heap)
            a = self.running[top[2]]
            self._sync(a)
            a.remaining = 0.0
            done.append(a)
        for a in done:
            self._release(a)
            del self.active[a.job.id]
            assert a.first_start is not None
            self.ideal_s[a.job.id] = self._ideal_s(a.job)
            self.finished.append(JobRecord(a.job.id, a.job.arrival_time_s, a.first_start, self.time,
                                           a.job.num_gpus, a.preemptions, a.attained_s, a.job.weight))
        if done:
            self._update_rates([])
        return bool(done)

    def _next_event_time(self, interval: float | None) -> float:
        t = math.inf
        if self.next_arrival < len(self.arrivals):
            t = self.arrivals[self.next_arrival].arrival_time_s
        top = self._valid_top()
        if top is not None:
            t = min(t, top[0])
        if interval is not None and self.active:
            t = min(t, self.last_round + interval)
        if self.faults is not None and (self.active or self.next_arrival < len(self.arrivals)):
            t = min(t, self.faults.upcoming())
        return max(t, self.time)

    def _advance(self, t_next: float) -> None:
        dt = t_next - self.time
        if dt > 0:
            busy = self.num_busy_gpus
            self.busy_gpu_s += busy * dt
            self.util_trace.append((self.time, busy / self.cluster.num_gpus))
        self.time = t_next

    def _periodic_checkpoint(self, a: _Active, t_from: float, t_to: float) -> None:
        """Record the job's remaining work at the last checkpoint instant in (t_from, t_to]."""
        assert self.faults is not None
        every = self.faults.config.checkpoint_interval_s
        origin = max(a.ready_at, a.placed_at)
        k = math.floor((t_to - origin) / every)
        instant = origin + k * every
        if k >= 1 and instant > t_from:
            a.ckpt_remaining = max(0.0, a.remaining - a.rate * (instant - t_from))

    # -- rounds -------------------------------------------------------------------------------------

    def _read_running(self) -> None:
        """This round reads the running jobs' progress: each is brought up to now when next synced."""
        if self.running and (not self._read_at or self._read_at[-1] != self.time):
            self._read_at.append(self.time)
            if len(self._read_at) > len(self._read_array):
                self._read_array = np.concatenate((self._read_array, np.empty(len(self._read_array))))
            self._read_array[len(self._read_at) - 1] = self.time

    def _gpu_views(self, down: frozenset[int]) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[str, ...], ...]]:
        """Per node the free GPUs, and per GPU its jobs, recomputed for the stale nodes only."""
        if self._stale_nodes:
            on = self.gpu_jobs
            for i in self._stale_nodes:
                gpus = self.cluster.node_gpus(i)
                self._free[i] = tuple(g for g in gpus if not on[g] and g not in down)
                self._occupancy[gpus.start:gpus.stop] = map(tuple, on[gpus.start:gpus.stop])
            self._stale_nodes.clear()
            self._node_views = (tuple(self._free), tuple(self._occupancy))
        return self._node_views

    def _unshare(self) -> None:
        """Copy the running jobs' and placements' dicts before changing them if a snapshot has them."""
        if self._shared is not None:
            self._running_jobs = dict(self._running_jobs)
            self._placements = dict(self._placements)
            self._shared = None

    def _state(self) -> ClusterState:
        down: frozenset[int] = frozenset()
        if self.faults is not None and self.faults.down:
            down = frozenset(g for n in self.faults.down for g in self.cluster.node_gpus(n))
        if self._queue_tuple is None:
            self._queue_tuple = tuple(self.queue_snaps)
        if self._shared is None:
            self._shared = (MappingProxyType(self._running_jobs), MappingProxyType(self._placements))
        running = _RunningStates(self)
        jobs = _Jobs(lambda: tuple(running.take().values()), len(self.running), self._queue_tuple)
        return ClusterState(self.time, self.cluster, jobs, down, len(self.running), *self._gpu_views(down),
                            *self._shared, running.take, self.num_held_gpus)

    def _touch(self, g: int) -> None:
        """GPU ``g``'s set of jobs changed: its node's cached views and its jobs' rates are stale."""
        self._stale_nodes.add(self.cluster.gpu_node[g])
        self._dirty_gpus.add(g)

    def _round(self) -> None:
        state = self._state()
        t0 = time.perf_counter()
        plan = self.policy.schedule(state)
        self.decision_times.append(time.perf_counter() - t0)
        self.last_round = self.time
        self._apply(plan, state.down_gpus)
        self.rounds += 1
        store = self.sim.store
        if store is not None and self.rounds % store.every_rounds == 0:
            store.save(self.to_dict())
        if self.sim.on_round is not None:
            self.sim.on_round(self.time, len(self.finished))

    def _validate(self, plan: Plan, down: frozenset[int]) -> tuple[dict[str, Assignment], list[str]]:
        """The plan by job, and (in plan order) the jobs whose entry is not their current assignment itself;
        raises on an entry that cannot be applied. Entries that are the current assignment cost O(1) each, at
        C speed, so a full plan that changes little costs little."""
        wanted = plan.by_job()
        changed = list(compress(wanted, map(is_not, map(self._placements.get, wanted), wanted.values())))
        n = self.cluster.num_gpus
        for job_id in changed:
            asg = wanted[job_id]
            act = self.active.get(job_id)
            if act is None:
                raise InvalidPlanError(f"plan places job '{job_id}', which is not active (finished or not arrived)")
            if act.assignment is not None and (asg is act.assignment or asg == act.assignment):
                continue  # unchanged placement of a running job: valid when it was applied
            job = act.job
            if len(asg.gpus) != job.num_gpus:
                raise InvalidPlanError(
                    f"job '{job_id}': gang of {job.num_gpus} GPU(s) placed on {len(asg.gpus)}; all or none")
            if any(not 0 <= g < n for g in asg.gpus):
                raise InvalidPlanError(f"job '{job_id}': GPU index out of range 0..{n - 1} in {asg.gpus}")
            if down and down.intersection(asg.gpus):
                raise InvalidPlanError(f"job '{job_id}': placed on GPU(s) {sorted(down.intersection(asg.gpus))} "
                                       "of a failed node")
            types = {self.cluster.gpu_type_of(g) for g in asg.gpus}
            if len(types) != 1:
                raise InvalidPlanError(f"job '{job_id}': placed on mixed GPU types {sorted(types)}; one type per job")
            if job.gpu_types and not types <= set(job.gpu_types):
                raise InvalidPlanError(f"job '{job_id}': GPU type {types.pop()} not in its allowed {job.gpu_types}")
        return wanted, changed

    def _apply(self, plan: Plan, down: frozenset[int] = frozenset()) -> None:
        """Preempt or move running jobs the plan changes, then start jobs that fit in memory."""
        wanted, changed_ids = self._validate(plan, down)
        if plan.incremental:  # listed running jobs move; the others keep their GPUs
            moving = [a for job_id in changed_ids
                      if (a := self.running.get(job_id)) is not None and a.assignment is not None
                      and wanted[job_id].gpus != a.assignment.gpus]
        else:  # running jobs whose entry is not their assignment itself, in running order
            ids = list(self.running)
            moving = []
            for job_id in compress(ids, map(is_not, map(wanted.get, ids), map(self._placements.__getitem__, ids))):
                a = self.running[job_id]
                new = wanted.get(job_id)
                if new is None or a.assignment is None or new.gpus != a.assignment.gpus:
                    moving.append(a)
        for a in moving:
            self._release(a)
            a.preemptions += 1
            a.queued_since = self.time
            a.ckpt_remaining = a.remaining  # preemption checkpoints the job
        changed: list[_Active] = []
        for job_id in changed_ids:  # freeze-level changes in place
            new = wanted[job_id]
            a = self.active[job_id]
            old = a.assignment
            if old is not None and new is not old and new.freeze_level != old.freeze_level:
                self._sync(a)
                self.intervals.append(PlacementInterval(job_id, old.gpus, a.placed_at, self.time, old.freeze_level))
                a.placed_at = self.time
                a.penalty = self.truth.frozen_penalty(a.job, new.freeze_level, 1.0 - a.remaining / a.job.total_iterations)
                a.assignment = new
                self._unshare()
                self._placements[job_id] = new
                changed.append(a)
        moved_ids = {a.job.id for a in moving}
        starts = [(j, wanted[j]) for j in changed_ids if self.active[j].assignment is None]
        self._learned_this_round = False
        started = self._fit_memory(starts)
        self._oom_this_round = len(started) < len(starts)
        for job_id, asg in started:
            a = self.active[job_id]
            if job_id not in moved_ids:
                self._dequeue(a)
            a.ready_at = self.time + (restore_time_s(a.job) if a.first_start is not None else 0.0)
            if a.first_start is None:
                a.first_start = self.time
            a.placed_at = self.time
            a.synced_at = self.time
            a.penalty = self.truth.frozen_penalty(a.job, asg.freeze_level, 1.0 - a.remaining / a.job.total_iterations)
            a.assignment = asg
            self.running[job_id] = a
            self._unshare()
            self._running_jobs[job_id] = a.job
            self._placements[job_id] = asg
            for g in asg.gpus:
                if not self.gpu_jobs[g]:
                    self.num_busy_gpus += 1
                self.gpu_jobs[g].append(job_id)
                self.num_held_gpus += 1
                self._touch(g)
        started_ids = {j for j, _ in started}
        for a in moving:
            if a.job.id not in started_ids:
                self._enqueue(a)
        self._update_rates(changed)

    def _memory(self, job_id: str, gpu_type: str, level: int) -> float:
        key = (job_id, gpu_type, level)
        hit = self._mem.get(key)
        if hit is None:
            job = self.active[job_id].job
            hit = self._mem[key] = self.truth.memory_mib(job, gpu_type, level) * job.gpu_fraction
        return hit

    def _fit_memory(self, starts: list[tuple[str, Assignment]]) -> list[tuple[str, Assignment]]:
        """The starts that fit beside the jobs staying on their GPUs (ground-truth memory); the others
        raise (``memory="reject"``) or crash out of memory and stay queued (``memory="oom"``). A job that
        does not fit a GPU type even alone learns it: that type leaves its allowed types, as a user
        would resubmit it after the crash."""
        used: dict[int, float] = {}

        def used_on(g: int, gtype: str) -> float:
            if g not in used:
                total = 0.0
                for j in self.gpu_jobs[g]:
                    asg = self.active[j].assignment
                    total += self._memory(j, gtype, asg.freeze_level if asg is not None else 0)
                used[g] = total
            return used[g]

        accepted: list[tuple[str, Assignment]] = []
        for job_id, asg in starts:
            gtype = self.cluster.gpu_type_of(asg.gpus[0])
            cap = self.cluster.gpu_types[gtype].memory_mib
            need = self._memory(job_id, gtype, asg.freeze_level)
            full = [g for g in asg.gpus if used_on(g, gtype) + need > cap]
            if full:
                if self.cfg.memory == "reject":
                    g = full[0]
                    raise InvalidPlanError(
                        f"GPU {g} ({gtype}, {cap:.0f} MiB of memory): job '{job_id}' needs {need:.0f} MiB with "
                        f"{used[g]:.0f} MiB already used by {self.gpu_jobs[g] + [j for j, a in accepted if g in a.gpus]}")
                self.oom_events += 1
                self._learn_memory(job_id, asg, gtype, full, accepted)
                if need > cap:
                    self._exclude_type(self.active[job_id], gtype)
                continue
            for g in asg.gpus:
                used[g] += need
            accepted.append((job_id, asg))
        return accepted

    def _learn_memory(self, job_id: str, asg: Assignment, gtype: str, full: list[int],
                      accepted: list[tuple[str, Assignment]]) -> None:
        """After ``job_id`` crashed out of memory on GPUs ``full``: its measured peak and that of the jobs
        it met there are known from now on. A crash that teaches nothing new is the policy ignoring what
        was measured; after ``_MAX_BLIND_OOMS`` of them for one job the run stops."""
        a = self.active[job_id]
        learned = self.memory_seen.record(a.job, gtype, asg.freeze_level,
                                          self.truth.memory_mib(a.job, gtype, asg.freeze_level))
        levels = {j: b.freeze_level for j, b in accepted}
        for g in full:
            for j in {*self.gpu_jobs[g], *(j for j, b in accepted if g in b.gpus)}:
                other = self.active[j]
                level = other.assignment.freeze_level if other.assignment is not None else levels[j]
                learned |= self.memory_seen.record(other.job, gtype, level,
                                                   self.truth.memory_mib(other.job, gtype, level))
        if learned:
            self._learned_this_round = True
            return
        a.blind_ooms += 1
        if a.blind_ooms >= _MAX_BLIND_OOMS:
            raise InvalidPlanError(
                f"policy '{self.policy.name}' placed job '{job_id}' on {gtype} GPU(s) {list(asg.gpus)} at freeze "
                f"level {asg.freeze_level}, where it crashed out of memory {a.blind_ooms} times with its measured "
                f"footprint known ({self._memory(job_id, gtype, asg.freeze_level):.0f} MiB); a policy must use "
                "predictors.learned_memory_mib (its memory estimates ignore the measured peaks)")

    def _exclude_type(self, a: _Active, gtype: str) -> None:
        """After an out-of-memory crash alone on ``gtype``, the job no longer asks for that type."""
        types = tuple(t for t in (a.job.gpu_types or tuple(self.cluster.gpu_types)) if t != gtype)
        if not types:
            return
        queued = self._queue_index(a) is not None  # a preempted job re-starting is in neither set
        if queued:
            self._dequeue(a)
        a.job = replace(a.job, gpu_types=types)
        if queued:
            self._enqueue(a)

    def _release(self, a: _Active) -> None:
        if a.assignment is None:
            return
        self._sync(a)
        self.intervals.append(PlacementInterval(a.job.id, a.assignment.gpus, a.placed_at, self.time,
                                                a.assignment.freeze_level))
        for g in a.assignment.gpus:
            if a.job.id in self.gpu_jobs[g]:
                self.gpu_jobs[g].remove(a.job.id)
                self.num_held_gpus -= 1
                self._touch(g)
                if not self.gpu_jobs[g]:
                    self.num_busy_gpus -= 1
        a.assignment = None
        a.rate = 0.0
        a.version += 1
        self.running.pop(a.job.id, None)
        self._unshare()
        self._running_jobs.pop(a.job.id, None)
        self._placements.pop(a.job.id, None)

    def _update_rates(self, changed: list[_Active] | None = None) -> None:
        """New ground-truth rates for the running jobs whose GPUs' co-location changed (all of them when
        ``changed`` is ``None``, e.g. after a restore), and for the jobs in ``changed``."""
        if changed is None:
            todo = dict(self.running)
        else:
            todo = {a.job.id: a for a in changed if a.assignment is not None}
            for g in self._dirty_gpus:
                for j in self.gpu_jobs[g]:
                    todo[j] = self.running[j]
        self._dirty_gpus = set()
        cluster = self.cluster
        speed_cache: dict[tuple[str, ...], tuple[float, ...]] = {}
        for a in todo.values():
            asg = a.assignment
            assert asg is not None
            gtype = cluster.gpu_type_of(asg.gpus[0])
            nodes = len({cluster.gpu_node[g] for g in asg.gpus}) if len(asg.gpus) > 1 else 1
            step = self.truth.step_time_s(a.job, gtype, len(asg.gpus), nodes, asg.freeze_level)
            speed = 1.0
            for g in asg.gpus:
                group = tuple(self.gpu_jobs[g])
                if len(group) > 1:
                    if group not in speed_cache:
                        jobs = [self.active[j].job for j in group]
                        speed_cache[group] = self.truth.colocated_speeds(jobs, gtype)
                    speed = min(speed, speed_cache[group][group.index(a.job.id)])
            rate = speed * (1.0 - a.penalty) / step
            if changed is None or rate != a.rate:
                self._sync(a)
                a.rate = rate
                self._schedule_finish(a)


#: the run state's public name (see the module docstring)
RunState = _Run


def _replay_with_numpy(a: _Active, t: np.ndarray) -> bool:
    """:meth:`_Run._replay` to the instants ``t`` as array operations: the same terms, summed in the same order
    (``np.cumsum`` adds one term after the other, unlike ``np.sum``); ``False``, with ``a`` unchanged, when the
    remaining work reaches 0 on the way (the loop clamps it there)."""
    assert a.assignment is not None
    before = np.empty_like(t)
    before[0], before[1:] = a.synced_at, t[:-1]
    attained = np.cumsum(np.concatenate(((a.attained_s,), (t - before) * len(a.assignment.gpus))))[-1]
    remaining = a.remaining
    if a.rate > 0:
        t_from = np.maximum(before, a.ready_at)
        runs = t > t_from
        if runs.any():
            steps = np.cumsum(np.concatenate(((remaining,), -(a.rate * (t[runs] - t_from[runs])))))
            if not (steps[1:] > 0.0).all():
                return False
            remaining = float(steps[-1])
    a.attained_s, a.remaining, a.synced_at = float(attained), remaining, float(t[-1])
    return True


def simulate(instance: Instance, policy: Policy, *, truth: GroundTruth | None = None,
             config: SimulationConfig | None = None) -> SimulationResult:
    """Simulate ``policy`` on ``instance`` with ground truth ``truth`` (default: measured)."""
    sim = Simulator(instance, policy, truth or MeasuredTruth(), config or SimulationConfig())
    return sim.run()


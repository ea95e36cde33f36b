"""Discrete-event cluster simulator. It owns the clock; policies only see snapshots and predictions.

At every event (arrivals, completions, and a policy's optional round interval) the simulator hands a
frozen :class:`~dltsched.engine.domain.model.ClusterState` to the policy, validates the returned
:class:`~dltsched.engine.domain.model.Plan` (capacity, gang, GPU types, memory) and applies it: new jobs
start, moved jobs migrate, jobs left out are preempted. Jobs then advance at **ground-truth** rates
(:mod:`dltsched.engine.sim.truth`): isolated step time x co-located speed (a gang job runs at its slowest
worker) x (1 - frozen penalty). A job that (re)starts pays a checkpoint-restore delay before it progresses.

Memory (``memory="oom"``, the default): as in a real cluster, a job that does not fit beside the jobs on its
GPUs by the ground-truth memory model crashes out of memory at start and returns to the queue; its measured
peak (and that of the jobs it met on the GPU) is recorded in the run's
:class:`~dltsched.engine.domain.predictors.MemoryObservations`, which every memory prediction a policy makes
during the run is raised to (:func:`~dltsched.engine.domain.predictors.learned_memory_mib`), and the policy
decides again at once (the crash costs no simulated time). A crash that measures nothing new (the policy
ignores what was measured) waits for the next event; after ``MAX_BLIND_OOMS`` of them for one job the run
stops with
:class:`~dltsched.engine.domain.errors.InvalidPlanError`.
``memory="reject"`` is the strict check: any plan that overfills a GPU raises.

Guards: a run that has taken ``max_wall_s`` seconds of wall-clock time (default: the ``max_sim_wall_s`` cap of
:mod:`dltsched.engine.domain.limits`, 6 hours), a run whose fault process fails nodes faster than jobs reach
a checkpoint (``max_stalled_iterations`` node failures with no job finishing, arriving or checkpointing
progress), a run whose loop stops moving (``max_stalled_iterations`` iterations in which the clock moves by
less than a millisecond and no job arrives, finishes or has its memory measured, e.g. a round interval of 0)
or whose simulated time would pass ``max_time_s`` after the first arrival (default 10 years) raises
:class:`~dltsched.engine.domain.errors.SimulationStalledError` naming the policy and the state.

Run state: :meth:`Simulator.start` gives the run (:class:`RunState`) before its first event;
``RunState.to_dict()`` is the whole state as JSON-ready data and ``RunState.from_dict()`` restores it into
a fresh run of the same instance, policy and settings, on the same trajectory bit for bit (the lazy
progress bookkeeping, the completion heap and the running order are part of it). A :class:`RunStore`
(:class:`dltsched.engine.sim.checkpoint.CheckpointStore` writes files) receives that state every
``every_rounds`` rounds; this module knows nothing of files.

Layout: this module is the event loop (:class:`SimulationRun`); the run's fields and their JSON form are
:class:`~dltsched.engine.sim.run_state.RunState`, lazy progress :mod:`~dltsched.engine.sim.progress`,
snapshots :mod:`~dltsched.engine.sim.snapshot`, plan application and memory checks
:mod:`~dltsched.engine.sim.placing`, settings :mod:`~dltsched.engine.sim.config`.

What policies see beyond predictions is a setting: job lengths known, unknown or estimated
(:mod:`~dltsched.engine.sim.lengths`), and profiles measured on arrival, fed to the run's
:class:`~dltsched.engine.domain.profiles.ProfileBook` at each round (:mod:`~dltsched.engine.sim.profiling`).
"""

from __future__ import annotations

import gc
import heapq
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from dltsched.engine.domain.errors import InvalidPlanError, SimulationStalledError
from dltsched.engine.domain.limits import limit
from dltsched.engine.domain.model import Instance, Job
from dltsched.engine.domain.predictors import observing_memory
from dltsched.engine.domain.profiles import observing_profiles
from dltsched.engine.sim.config import TEN_YEARS_S, Policy, SimulationConfig
from dltsched.engine.sim.metrics import JobRecord, SimulationResult, summarize
from dltsched.engine.sim.placing import MAX_BLIND_OOMS, PlacingRun, restore_time_s
from dltsched.engine.sim.profiling import take_profiles
from dltsched.engine.sim.run_state import ActiveJob, RunState
from dltsched.engine.sim.truth import GroundTruth, MeasuredTruth

__all__ = ["MAX_BLIND_OOMS", "TEN_YEARS_S", "Policy", "RunState", "RunStore", "SimulationConfig",
           "SimulationRun", "Simulator", "restore_time_s", "simulate"]

#: the clock moving by less than this (seconds) is no progress for the stall guard
_MIN_CLOCK_STEP_S = 1e-3


class RunStore(Protocol):
    """Where a run's state goes every ``every_rounds`` rounds, and comes back from on resume.

    ``start`` is called once, before the first event, with the simulator (still untouched by the run); it
    returns the run to continue (``sim.start()`` restored by ``from_dict``), or ``None`` to start afresh.
    ``save`` gets :meth:`RunState.to_dict`. A store may also have ``due(rounds) -> bool``, asked after each
    round instead of counting ``every_rounds`` (e.g. to save by wall-clock time)."""

    every_rounds: int

    def start(self, sim: Simulator, *, resume: bool) -> SimulationRun | None:
        """Open the store for ``sim`` and, when resuming, restore the run it holds.

        Parameters
        ----------
        sim
            The simulator about to run.
        resume
            Whether to continue from a stored run if there is one.

        Returns
        -------
        SimulationRun or None
            The restored run; ``None`` for a fresh start.
        """

    def save(self, state: dict[str, Any]) -> None:
        """Store the run's state.

        Parameters
        ----------
        state
            The run state (its public ``to_dict`` form).
        """


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

    def start(self) -> SimulationRun:
        """A fresh run of this simulator, before its first event (``run()`` continues it)."""
        return SimulationRun(self)

    def run(self, *, resume: bool = False) -> SimulationResult:
        """Simulate to the end; with ``resume``, continue from the state ``store`` returns, if any."""
        run = self.store.start(self, resume=resume) if self.store is not None else None
        return (run or SimulationRun(self)).run()


class SimulationRun(PlacingRun):
    """One simulation in progress: the event loop over :class:`~dltsched.engine.sim.run_state.RunState`."""

    # declared per module: type checkers do not follow the package mapping to the base class
    last_round: float
    started: bool
    #: node failures in a row without durable progress, and that progress (the fault-churn guard)
    _churn: int
    _durable: tuple[int, int, float]
    _ideal_memo: dict[str, tuple[Job, float]]

    def run(self) -> SimulationResult:
        """Run to the end (observing memory, and profiles when the configuration asks for profiling).

        Returns
        -------
        SimulationResult
            Per-job records and the run's metrics.
        """
        with observing_memory(self.memory_seen), _setup_frozen():
            if self.cfg.profiling is None:
                return self._run()
            with observing_profiles(self.profiles):
                return self._run()

    def _run(self) -> SimulationResult:
        started = time.perf_counter()
        if self.arrivals and not self.started:
            self.time = self.arrivals[0].arrival_time_s
        self.started = True
        interval = getattr(self.policy, "round_interval_s", None)
        origin = self.arrivals[0].arrival_time_s if self.arrivals else 0.0
        stalled, last_progress, last_clock = 0, self._progress(), self.time
        max_wall_s = self.cfg.max_wall_s if self.cfg.max_wall_s is not None else limit("max_sim_wall_s")
        self._churn, self._durable = 0, self._durable_progress()
        while self.next_arrival < len(self.arrivals) or self.active:
            if time.perf_counter() - started > max_wall_s:
                raise SimulationStalledError(
                    f"policy '{self.policy.name}': stopped after {max_wall_s:g} s of wall-clock "
                    "time (max_wall_s), "
                    f"{self._where()}; raise the cap (simulate --max-wall-s, or "
                    "DLTSCHED_MAX_SIM_WALL_S), or give --checkpoint to continue a long run in steps")
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
                    f"policy '{self.policy.name}' left {len(self.active)} job(s) waiting with "
                    "nothing running "
                    f"(e.g. {stuck}); every plan must eventually run each job"
                )
            if t_next - origin > self.cfg.max_time_s:
                raise SimulationStalledError(
                    f"policy '{self.policy.name}': simulated time would pass "
                    f"max_time_s={self.cfg.max_time_s:.4g} s "
                    f"({self.cfg.max_time_s / TEN_YEARS_S * 10:.3g} years) after the first arrival, "
                    f"{self._where()}; "
                    "the instance's work is too large (total_iterations?) or raise max_time_s")
            progress = self._progress()
            if progress != last_progress or self.time > last_clock + _MIN_CLOCK_STEP_S:
                stalled, last_progress, last_clock = 0, progress, self.time
            else:
                stalled += 1
            if stalled >= self.cfg.max_stalled_iterations:
                raise SimulationStalledError(
                    f"policy '{self.policy.name}': no progress in {stalled} iterations of the event loop, "
                    f"{self._where()}; the clock advances by less than {_MIN_CLOCK_STEP_S} s (a "
                    "round interval of 0?) and no job arrives, finishes or learns its memory")
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
            truth=str(getattr(self.truth, "kind", type(self.truth).__name__)),
            truth_sources=tuple(getattr(self.truth, "sources", ())),
            times_s={j.id: self._times_by_type(j) for j in self.inst.jobs},
        )

    def _progress(self) -> tuple[int, int, int]:
        """What moves when a run advances, apart from the clock: finished and arrived jobs, measured
        memory."""
        return len(self.finished), self.next_arrival, self.memory_seen.changes

    def _where(self) -> str:
        """The run's state in words, for an error message."""
        return (f"at clock {self.time:.6g} s with {len(self.queue_keys)} job(s) queued, {len(self.running)} "
                f"running, {len(self.finished)} finished, "
                f"{len(self.arrivals) - self.next_arrival} yet to arrive")

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
        interrupted = self.fault_interruptions
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
        if self.fault_interruptions > interrupted:
            self._check_fault_churn()
        return bool(failed or repaired)

    def _durable_progress(self) -> tuple[int, int, float]:
        """What a node failure cannot take back: finished and arrived jobs, and the work the active jobs had
        done at their last checkpoints."""
        done = sum(a.job.total_iterations - a.ckpt_remaining for a in self.active.values())
        return len(self.finished), self.next_arrival, done

    def _check_fault_churn(self) -> None:
        """A fault process that fails nodes faster than jobs reach a checkpoint rolls every job back forever
        while the clock moves on: after ``max_stalled_iterations`` node failures in a row that interrupt jobs
        without durable progress the run stops, naming the fault settings."""
        durable = self._durable_progress()
        if durable[:2] != self._durable[:2] or durable[2] > self._durable[2]:
            self._churn, self._durable = 0, durable
            return
        self._churn += 1
        if self._churn >= self.cfg.max_stalled_iterations:
            assert self.faults is not None
            f = self.faults.config
            raise SimulationStalledError(
                f"policy '{self.policy.name}': no job finished or reached a checkpoint in "
                f"{self._churn} node failures, "
                f"{self._where()}; faults mtbf_s={f.mtbf_s:g} s fail nodes before jobs checkpoint "
                f"(checkpoint_interval_s={f.checkpoint_interval_s:g} s, mttr_s={f.mttr_s:g} s): "
                "raise MTBF_S or lower CHECKPOINT_INTERVAL_S in --faults")

    def _times_by_type(self, job: Job) -> dict[str, float]:
        """Run time alone on the job's GPUs of each allowed type it fits (ground truth), for the makespan
        bound."""
        by_type = self.cluster.gpus_by_type()
        nodes = max(1, math.ceil(job.num_gpus / self._gpus_per_node))
        return {t: self.truth.step_time_s(job, t, job.num_gpus, nodes) * job.total_iterations
                for t in (job.gpu_types or by_type) if by_type.get(t, 0) >= job.num_gpus}

    def _ideal_s(self, job: Job) -> float:
        """Run time alone on the job's GPUs of the fastest allowed type (Themis' fair baseline); asked at
        arrival and again at completion, computed once per job object (kept until the job finishes)."""
        hit = self._ideal_memo.get(job.id)
        if hit is not None and hit[0] is job:
            return hit[1]
        value = self._ideal_uncached(job)
        self._ideal_memo[job.id] = (job, value)
        return value

    def _ideal_uncached(self, job: Job) -> float:
        by_type = self.cluster.gpus_by_type()
        types = [t for t in (job.gpu_types or by_type) if by_type.get(t, 0) >= job.num_gpus]
        nodes = max(1, math.ceil(job.num_gpus / self._gpus_per_node))
        return min(self.truth.step_time_s(job, t, job.num_gpus, nodes) for t in types) * job.total_iterations

    def _admit_arrivals(self) -> bool:
        changed = False
        while (self.next_arrival < len(self.arrivals)
               and self.arrivals[self.next_arrival].arrival_time_s <= self.time):
            job = self.arrivals[self.next_arrival]
            total = float(job.total_iterations)
            if (job.arrival_time_s - self.arrivals[0].arrival_time_s + self._ideal_s(job)
                    > self.cfg.max_time_s):
                raise SimulationStalledError(
                    f"job '{job.id}': {self._ideal_s(job):.4g} s of work alone on its fastest "
                    "GPU type, beyond "
                    f"max_time_s={self.cfg.max_time_s:.4g} s of simulated time "
                    f"({self.cfg.max_time_s / TEN_YEARS_S * 10:.3g}"
                    " years); lower its total_iterations or raise max_time_s")
            a = ActiveJob(job, total, queued_since=job.arrival_time_s, ckpt_remaining=total)
            self.active[job.id] = a
            self._enqueue(a)
            self.next_arrival += 1
            changed = True
        return changed

    def _complete(self) -> bool:
        done: list[ActiveJob] = []
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
            hit = self._ideal_memo.pop(a.job.id, None)  # asked at its arrival
            ideal = hit[1] if hit is not None and hit[0] is a.job else self._ideal_uncached(a.job)
            self.ideal_s[a.job.id] = ideal
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


    def _round(self) -> None:
        if self.cfg.profiling is not None:
            take_profiles(self)
        state = self._state()
        t0 = time.perf_counter()
        plan = self.policy.schedule(state)
        self.decision_times.append(time.perf_counter() - t0)
        self.last_round = self.time
        self._apply(plan, state.down_gpus)
        self.rounds += 1
        store = self.sim.store
        if store is not None and (store.due(self.rounds) if hasattr(store, "due")
                                  else self.rounds % store.every_rounds == 0):
            store.save(self.to_dict())
        if self.sim.on_round is not None:
            self.sim.on_round(self.time, len(self.finished))



@contextmanager
def _setup_frozen() -> Iterator[None]:
    """Objects alive when a run starts (the instance, the predictors and their tables) are left out of the
    cyclic garbage collector's passes until it ends (:func:`gc.freeze`), and so is every object that
    survives one of the run's full collections (frozen right after it, :func:`_freeze_survivors`): a long
    run's full collections otherwise scan the same long-lived objects (memoised predictions and prices,
    finished jobs' records) again and again. What a full collection leaves is reachable, so nothing is frozen
    as garbage; nothing is freed later than reference counting frees it; cycles among frozen objects that
    become garbage wait for the end of the run. Nested or concurrent runs: the outermost restores."""
    global _frozen_depth
    with _frozen_lock:
        if _frozen_depth == 0:
            gc.freeze()
            gc.callbacks.append(_freeze_survivors)
        _frozen_depth += 1
    try:
        yield
    finally:
        with _frozen_lock:
            _frozen_depth -= 1
            if _frozen_depth == 0:
                gc.callbacks.remove(_freeze_survivors)
                gc.unfreeze()


def _freeze_survivors(phase: str, info: dict[str, int]) -> None:
    """A garbage-collector callback: after a full collection (generation 2), the objects it left, all
    reachable, join the frozen ones."""
    if phase == "stop" and info.get("generation") == 2:
        gc.freeze()


_frozen_lock = threading.Lock()
_frozen_depth = 0


def simulate(instance: Instance, policy: Policy, *, truth: GroundTruth | None = None,
             config: SimulationConfig | None = None) -> SimulationResult:
    """Simulate ``policy`` on ``instance`` with ground truth ``truth`` (default: measured)."""
    sim = Simulator(instance, policy, truth or MeasuredTruth(), config or SimulationConfig())
    return sim.run()


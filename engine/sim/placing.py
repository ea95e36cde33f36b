"""Applying a policy's plan: validation (gang, GPU range and type, failed nodes), preemption and migration,
freeze-level changes, memory checks against the ground truth (crash out of memory or reject), and the
ground-truth rates of the running jobs after every change.

Memory (``memory="oom"``, the default): a job that does not fit beside the jobs on its GPUs crashes out of
memory at start and returns to the queue; its measured peak (and that of the jobs it met on the GPU) is
recorded in the run's :class:`~dltsched.engine.domain.predictors.MemoryObservations`. A crash that measures
nothing new counts as blind; after ``MAX_BLIND_OOMS`` of them for one job the run stops with
:class:`~dltsched.engine.domain.errors.InvalidPlanError`. ``memory="reject"`` raises on any overfilled GPU.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import compress
from operator import is_not

from dltsched.engine.domain.errors import InvalidPlanError
from dltsched.engine.domain.model import Assignment, Job, Plan
from dltsched.engine.sim.metrics import PlacementInterval
from dltsched.engine.sim.run_state import ActiveJob
from dltsched.engine.sim.snapshot import SnapshotRun

#: crashes out of memory of one job where its (and its GPU neighbours') footprint was already measured
MAX_BLIND_OOMS = 100


def restore_time_s(job: Job) -> float:
    """Checkpoint-restore delay when a job (re)starts: 10 s start-up + weights and optimizer state
    read back at 500 MB/s (none for a job's very first start)."""
    from dltsched.engine.domain.catalog import model_spec

    state_bytes = model_spec(job.model).params_m * 1e6 * (8.0 + job.bytes_per_param)
    return 10.0 + state_bytes / 500e6


class PlacingRun(SnapshotRun):
    """:class:`~dltsched.engine.sim.snapshot.SnapshotRun` plus plan application (see module docstring)."""

    # declared per module: type checkers do not follow the package mapping to the base class
    _dirty_gpus: set[int]

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
                raise InvalidPlanError(f"plan places job '{job_id}', which is not active "
                                       "(finished or not arrived)")
            if act.assignment is not None and (asg is act.assignment or asg == act.assignment):
                continue  # unchanged placement of a running job: valid when it was applied
            job = act.job
            if len(asg.gpus) != job.num_gpus:
                raise InvalidPlanError(
                    f"job '{job_id}': gang of {job.num_gpus} GPU(s) placed on {len(asg.gpus)}; all or none")
            if any(not 0 <= g < n for g in asg.gpus):
                raise InvalidPlanError(f"job '{job_id}': GPU index out of range 0..{n - 1} in {asg.gpus}")
            if down and down.intersection(asg.gpus):
                raise InvalidPlanError(f"job '{job_id}': placed on GPU(s) "
                                       f"{sorted(down.intersection(asg.gpus))} "
                                       "of a failed node")
            types = {self.cluster.gpu_type_of(g) for g in asg.gpus}
            if len(types) != 1:
                raise InvalidPlanError(f"job '{job_id}': placed on mixed GPU types {sorted(types)}; "
                                       "one type per job")
            if job.gpu_types and not types <= set(job.gpu_types):
                raise InvalidPlanError(f"job '{job_id}': GPU type {types.pop()} not in its "
                                       f"allowed {job.gpu_types}")
        return wanted, changed

    def _apply(self, plan: Plan, down: frozenset[int] = frozenset()) -> None:
        """Preempt or move running jobs the plan changes, then start jobs that fit in memory."""
        if plan.incremental and not plan.assignments:  # nothing changes (most rounds between decisions)
            self._learned_this_round = self._oom_this_round = False
            if self._dirty_gpus:
                self._update_rates([])
            return
        wanted, changed_ids = self._validate(plan, down)
        if plan.incremental:  # listed running jobs move; the others keep their GPUs
            moving = [a for job_id in changed_ids
                      if (a := self.running.get(job_id)) is not None and a.assignment is not None
                      and wanted[job_id].gpus != a.assignment.gpus]
        else:  # running jobs whose entry is not their assignment itself, in running order
            ids = list(self.running)
            moving = []
            for job_id in compress(ids,
                                   map(is_not, map(wanted.get, ids), map(self._placements.__getitem__, ids))):
                a = self.running[job_id]
                new = wanted.get(job_id)
                if new is None or a.assignment is None or new.gpus != a.assignment.gpus:
                    moving.append(a)
        for a in moving:
            self._release(a)
            a.preemptions += 1
            a.queued_since = self.time
            a.ckpt_remaining = a.remaining  # preemption checkpoints the job
        changed: list[ActiveJob] = []
        for job_id in changed_ids:  # freeze-level changes in place
            new = wanted[job_id]
            a = self.active[job_id]
            old = a.assignment
            if old is not None and new is not old and new.freeze_level != old.freeze_level:
                self._sync(a)
                self.intervals.append(PlacementInterval(job_id, old.gpus, a.placed_at, self.time,
                                                        old.freeze_level))
                a.placed_at = self.time
                a.penalty = self.truth.frozen_penalty(a.job, new.freeze_level,
                                                      1.0 - a.remaining / a.job.total_iterations)
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
            a.penalty = self.truth.frozen_penalty(a.job, asg.freeze_level,
                                                  1.0 - a.remaining / a.job.total_iterations)
            a.assignment = asg
            self.running[job_id] = a
            self._unshare()
            self._running_jobs[job_id] = self.policy_job(a)
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
                        f"GPU {g} ({gtype}, {cap:.0f} MiB of memory): job '{job_id}' needs "
                        f"{need:.0f} MiB with "
                        f"{used[g]:.0f} MiB already used by "
                        f"{self.gpu_jobs[g] + [j for j, a in accepted if g in a.gpus]}")
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
        was measured; after ``MAX_BLIND_OOMS`` of them for one job the run stops."""
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
        if a.blind_ooms >= MAX_BLIND_OOMS:
            raise InvalidPlanError(
                f"policy '{self.policy.name}' placed job '{job_id}' on {gtype} GPU(s) "
                f"{list(asg.gpus)} at freeze "
                f"level {asg.freeze_level}, where it crashed out of memory {a.blind_ooms} times "
                "with its measured "
                f"footprint known ({self._memory(job_id, gtype, asg.freeze_level):.0f} MiB); a "
                "policy must use predictors.learned_memory_mib (its memory estimates ignore "
                "the measured peaks)")

    def _exclude_type(self, a: ActiveJob, gtype: str) -> None:
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

    def _release(self, a: ActiveJob) -> None:
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

    def _update_rates(self, changed: list[ActiveJob] | None = None) -> None:
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



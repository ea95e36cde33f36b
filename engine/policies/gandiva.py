"""Gandiva-style greedy packing: exclusive GPUs while they last, then co-location when memory fits.

Follows Xiao et al., "Gandiva: Introspective Cluster Scheduling for Deep Learning", OSDI'18, in the
parts that matter for throughput: queued jobs (arrival order) start on free GPUs; when none are free, a
job is packed onto GPUs that hold fewer than ``max_jobs_per_gpu`` jobs, if the group fits in memory
(with a ``memory_margin``) and the predicted sum of normalized speeds exceeds 1 (packing helps; Gandiva's
introspection). When GPUs free up, packed jobs migrate to them (Gandiva's unpacking by migration).
Non-preemptive otherwise.

Cost of a round: plans are incremental (starts and moves only); the GPUs that can be shared are kept
across rounds, grouped by the kinds of jobs they hold, and updated from the GPUs whose occupancy changed,
so a round costs O(changed GPUs + queued jobs x kinds of resident groups), not O(GPUs x queued jobs).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import is_not

from dltsched.engine.domain.model import Assignment, ClusterState, Job, Plan
from dltsched.engine.domain.predictors import Predictors, memoized, memory_observations_version
from dltsched.engine.policies.placement import Estimates, GpuPool
from dltsched.predictors import available_predictors

#: what a GPU holds, as far as packing is concerned: its GPU type and a number standing for its jobs' kinds
#: (see :func:`_kind`; numbered so that the many lookups per round hash an int, not nested tuples)
_Residents = tuple[str, int]
_UNSEEN = object()


def _kind(job: Job) -> tuple[object, ...]:
    """What predictors read of a job, apart from its identity and its work. Pairings of jobs of the same
    kinds are judged once: exact for predictors that depend on nothing else; under the prediction-error
    knob (a bias per job id) a pairing is judged with the errors of the first jobs of those kinds."""
    return (job.model, job.batch_size, job.amp, job.dataset, job.num_gpus, job.optimizer, job.gpu_fraction,
            job.hyperparameters)


@dataclass
class _Round:
    """The GPUs' occupancy during one round: the snapshot's, plus this round's starts and moves."""

    state: ClusterState
    pool: GpuPool
    on: Sequence[tuple[str, ...]]
    running: Mapping[str, Job]
    numbers: dict[tuple[str, tuple[tuple[object, ...], ...]], int]  # kinds of residents -> their number
    started: dict[str, Job] = field(default_factory=dict)
    changed: dict[int, tuple[str, ...]] = field(default_factory=dict)

    def job(self, job_id: str) -> Job:
        hit = self.started.get(job_id)
        return self.running[job_id] if hit is None else hit

    def jobs_on(self, g: int) -> tuple[str, ...]:
        return self.changed.get(g, self.on[g])

    def put(self, job_id: str, gpus: tuple[int, ...]) -> None:
        self.pool.occupy(job_id, gpus)
        for g in gpus:
            self.changed[g] = (*self.jobs_on(g), job_id)

    def take_away(self, job_id: str, g: int) -> None:
        self.changed[g] = tuple(j for j in self.jobs_on(g) if j != job_id)

    def residents_key(self, g: int, on: tuple[str, ...]) -> _Residents:
        gtype = self.state.cluster.gpu_type_of(g)
        return gtype, self.numbers.setdefault((gtype, tuple(_kind(self.job(j)) for j in on)),
                                              len(self.numbers))


@dataclass
class _Occupancy:
    """The snapshot's shared GPUs (two jobs or more) and packing targets (at least one and fewer than K
    jobs, by GPU type and kinds of residents, ascending indices, and the first of them), for the occupancy
    ``on``.

    Kept across rounds and brought up to date from the GPUs whose occupancy tuple changed (the simulator
    reuses the tuples of unchanged GPUs). A round's own starts and moves are an overlay
    (:meth:`best_per_key`), never written here."""

    k: int
    cluster_id: int
    time_s: float
    on: Sequence[tuple[str, ...]] = ()
    targets: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    first: dict[str, dict[int, int]] = field(default_factory=dict)
    key_of: dict[int, _Residents] = field(default_factory=dict)
    shared: list[int] = field(default_factory=list)

    def sync(self, rnd: _Round) -> None:
        self.time_s = rnd.state.time_s
        if rnd.on is self.on:
            return
        old = self.on if len(self.on) == len(rnd.on) else ((),) * len(rnd.on)
        for g in compress(range(len(rnd.on)), map(is_not, rnd.on, old)):
            now, before = rnd.on[g], old[g]
            if now == before:
                continue
            self._drop_target(g)
            if 0 < len(now) < self.k:
                key = self.key_of[g] = rnd.residents_key(g, now)
                gpus = self.targets.setdefault(key[0], {}).setdefault(key[1], [])
                bisect.insort(gpus, g)
                self.first.setdefault(key[0], {})[key[1]] = gpus[0]
            if (len(now) >= 2) != (len(before) >= 2):
                if len(now) >= 2:
                    bisect.insort(self.shared, g)
                else:
                    self.shared.remove(g)
        self.on = rnd.on

    def _drop_target(self, g: int) -> None:
        key = self.key_of.pop(g, None)
        if key is not None:
            gpus = self.targets[key[0]][key[1]]
            gpus.remove(g)
            if gpus:
                self.first[key[0]][key[1]] = gpus[0]
            else:
                del self.targets[key[0]][key[1]], self.first[key[0]][key[1]]

    def best_per_key(self, rnd: _Round, gtype: str) -> dict[int, int]:
        """The lowest-index packing target of ``gtype`` per kinds of residents (by number), with this round's
        changes."""
        out = dict(self.first.get(gtype, {}))
        for g in rnd.changed:  # GPUs this round changed are no longer the snapshot's targets
            key = self.key_of.get(g)
            if key is not None and key[0] == gtype and out.get(key[1]) == g:
                later = next((h for h in self.targets[gtype][key[1]] if h not in rnd.changed), None)
                if later is None:
                    del out[key[1]]
                else:
                    out[key[1]] = later
        for g, on in rnd.changed.items():
            if 0 < len(on) < self.k and rnd.state.cluster.gpu_type_of(g) == gtype:
                number = rnd.residents_key(g, on)[1]
                if number not in out or g < out[number]:
                    out[number] = g
        return out


@dataclass
class GandivaPolicy:
    """Greedy packing with introspection and unpacking (see module docstring).

    Parameters
    ----------
    predictors
        What the policy may know of jobs (step time, memory, co-location, freezing predictions).
    max_jobs_per_gpu
        Jobs sharing one GPU at most.
    memory_margin
        Share of a GPU's memory a packing may fill.
    name
        The policy's name in results.
    round_interval_s
        A round at least this often, seconds (``None``: on arrivals and completions only).
    """

    predictors: Predictors = field(default_factory=available_predictors)
    max_jobs_per_gpu: int = 2
    memory_margin: float = 0.9
    name: str = "gandiva"
    round_interval_s: float | None = None

    def __post_init__(self) -> None:
        self._asked = memoized(self.predictors)  # rounds ask about the same jobs again and again
        self._est = Estimates(self._asked)
        #: (GPU type, job kind) -> residents (by number) -> predicted gain of packing, None when it does not
        #: fit
        self._verdicts: dict[tuple[str, tuple[object, ...]], dict[int, float | None]] = {}
        self._numbers: dict[tuple[str, tuple[tuple[object, ...], ...]], int] = {}
        self._kept: _Occupancy | None = None
        self._memory_seen = 0  # memory_observations_version() when the verdicts were judged

    def _occupancy(self, rnd: _Round) -> _Occupancy:
        """The snapshot's occupancy (kept from the last round when it is the same cluster and time moved
        forward; rebuilt otherwise)."""
        occ = self._kept
        if occ is None or occ.cluster_id != id(rnd.state.cluster) or rnd.state.time_s < occ.time_s:
            occ = self._kept = _Occupancy(self.max_jobs_per_gpu, id(rnd.state.cluster), rnd.state.time_s)
        occ.sync(rnd)
        return occ

    def _verdict(self, job: Job, residents: Sequence[Job], gtype: str, cap_mib: float) -> float | None:
        """Predicted speed sum of the group minus 1 (> 0: packing helps); ``None`` if it does not fit."""
        used = sum(self._est.memory_mib(r, gtype) for r in residents) + self._est.memory_mib(job, gtype)
        if used > cap_mib:
            return None
        return sum(self._asked.colocation.colocated_speeds([*residents, job], gtype)) - 1.0

    def _pack(self, job: Job, rnd: _Round, occ: _Occupancy) -> int | None:
        """The shared GPU with the largest positive predicted gain for ``job``: fastest type first, the
        lowest index on ties."""
        best: tuple[float, int] | None = None
        kind = _kind(job)
        cluster = rnd.state.cluster
        for gtype in self._est.candidate_types(job, cluster):
            verdicts = self._verdicts.setdefault((gtype, kind), {})
            cap = cluster.gpu_types[gtype].memory_mib * self.memory_margin
            in_type: tuple[float, int] | None = None
            for key, g in occ.best_per_key(rnd, gtype).items():
                gain = verdicts.get(key, _UNSEEN)
                if gain is _UNSEEN:
                    gain = verdicts[key] = self._verdict(job, [rnd.job(j) for j in rnd.jobs_on(g)], gtype,
                                                         cap)
                if gain is not None and gain > 0 and (  # type: ignore[operator]
                        in_type is None or (gain, -g) > (in_type[0], -in_type[1])):
                    in_type = (gain, g)  # type: ignore[assignment]
            if in_type is not None and (best is None or in_type[0] > best[0]):
                best = in_type
        return None if best is None else best[1]

    def schedule(self, state: ClusterState) -> Plan:
        """The plan of one round: the changed placements (incremental), packing jobs onto shared GPUs when
        predicted to gain."""
        if (seen := memory_observations_version()) != self._memory_seen:  # a crash measured real memory
            self._verdicts.clear()
            self._memory_seen = seen
        rnd = _Round(state, GpuPool.current(state), state.jobs_on_gpus(), state.running_jobs_by_id(),
                     self._numbers)
        changes: dict[str, Assignment] = {}
        occ: _Occupancy | None = None
        if any(rnd.pool.free_by_type.values()):
            occ = self._occupancy(rnd)
            self._unpack(rnd, occ, state.placements_by_id(), changes)
        failed: set[tuple[object, ...]] = set()  # kinds of single-GPU jobs that found no GPU to share
        most_free = max(rnd.pool.free_by_type.values(), default=0)
        for s in state.queued():
            job = s.job
            gpus: tuple[int, ...] | None = None
            if job.num_gpus <= most_free:
                for gtype in self._est.candidate_types(job, state.cluster):
                    gpus = rnd.pool.take_free(job, gtype)
                    if gpus is not None:
                        break
            if gpus is None and job.num_gpus == 1:  # gang jobs are not packed: one slow worker stalls all
                kind = (*_kind(job), *job.gpu_types)
                if kind in failed:
                    continue
                if occ is None:
                    occ = self._occupancy(rnd)
                g = self._pack(job, rnd, occ)
                if g is None:
                    failed.add(kind)
                    continue
                gpus = (g,)
            if gpus is None:
                continue
            rnd.started[job.id] = job
            rnd.put(job.id, gpus)
            most_free = max(rnd.pool.free_by_type.values(), default=0)
            changes[job.id] = Assignment(job.id, gpus)
            failed.clear()  # a GPU changed: what failed before may fit now
        return Plan(tuple(changes.values()), incremental=True)

    def _unpack(self, rnd: _Round, occ: _Occupancy, placements: Mapping[str, Assignment],
                changes: dict[str, Assignment]) -> None:
        """Move the later of two packed single-GPU jobs to a free GPU of the same type."""
        cluster = rnd.state.cluster
        for g in list(occ.shared):
            mover = rnd.jobs_on(g)[-1]
            job = rnd.job(mover)
            if job.num_gpus != 1:
                continue
            target = rnd.pool.take_free(job, cluster.gpu_type_of(g))
            if target is None:
                if not any(rnd.pool.free_by_type.values()):
                    return
                continue
            rnd.take_away(mover, g)
            rnd.put(mover, target)
            changes[mover] = Assignment(mover, target, placements[mover].freeze_level)

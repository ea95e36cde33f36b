"""Lucid-style interference-aware packing.

Follows Hu et al., "Lucid: A Non-intrusive, Scalable and Interpretable Scheduler for Deep Learning
Training Jobs", ASPLOS'23, and its simulator (``simulation/policy/lucid.py``, ``analyzer/analyzer.py``):

- **Sharing score.** Every job type gets a class from its mean co-located speed against a set of partners:
  Lucid labels class 2 below 0.85, class 1 below 0.95, else 0, cut points set on its own measurements of
  small jobs on one GPU type. On a population that co-locates worse (Gavel's measured pairs, the ground
  truth here) every job falls in class 2 at those absolute cut points, no pair qualifies, and Lucid
  degenerates into shortest-first without packing (the design notes of the documentation give the
  figures). So by default (``class_thresholds=None``) the cut points are the quantiles of the mean speeds
  of the job types seen so far (per GPU type) at Lucid's label shares (lowest 25/66 of types class 2,
  next 16/66 class 1, the rest 0): the same relative rule on this population.
  ``class_thresholds=(0.85, 0.95)`` gives the paper's absolute rule.
- **Order.** Queued jobs by priority = predicted duration x GPU count, smallest first.
- **Pairing** (``job_pair_picker_time_aware``): a queued job shares the GPUs of a running job with the same
  GPU count that runs alone there, if their classes sum to at most ``max_class_sum`` (2), the pair fits in
  memory, and the job's priority is at most twice the partner's; the first such partner (lowest class here).
- **When.** Lucid packs only while its throughput forecast says the cluster is busy (Prescient Adaptive
  Sharing); here: only when no GPU of a type the job may use is free. Non-preemptive.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from dltsched.engine.domain.model import Assignment, ClusterState, Job, Plan
from dltsched.engine.domain.predictors import Predictors, memoized
from dltsched.engine.policies.placement import Estimates, GpuPool
from dltsched.predictors import available_predictors

#: reference partners for the sensitivity classes (Gavel's models at common batch sizes)
_REFERENCE = (("resnet18", 64), ("resnet50", 32), ("transformer", 64), ("lstm_lm", 20), ("recoder", 1024))
#: Lucid's absolute class cut points on mean co-located speed (class 2 below the first, 1 below the second)
PAPER_THRESHOLDS = (0.85, 0.95)
#: shares of Lucid's 66 labelled job types in classes 2 and 1 (25 and 16; 25 are class 0)
LABEL_SHARES = (25 / 66, 16 / 66)


def _kind(job: Job) -> tuple[object, ...]:
    return job.model, job.batch_size, job.amp, job.dataset


@dataclass
class LucidPolicy:
    """Interference-class packing with GPU-time-first service (see module docstring).

    Parameters
    ----------
    predictors
        The predictors the classes and memory checks ask.
    max_class_sum
        Largest sum of the sensitivity classes of the jobs sharing one GPU.
    memory_margin
        Fraction of a GPU's memory the predicted memory of its jobs may fill.
    name
        The policy's name in results.
    round_interval_s
        Seconds between periodic rounds; ``None``: rounds only at arrivals and completions.
    max_jobs_per_gpu
        Most jobs sharing one GPU.
    class_thresholds
        Class cut points on mean co-located speed (``PAPER_THRESHOLDS`` are Lucid's); ``None``: the
        quantiles of the job types seen at Lucid's label shares.
    """

    predictors: Predictors = field(default_factory=available_predictors)
    max_class_sum: int = 2
    memory_margin: float = 0.9
    name: str = "lucid"
    round_interval_s: float | None = None
    max_jobs_per_gpu: int = 2
    class_thresholds: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        self._asked = memoized(self.predictors)  # rounds ask about the same jobs again and again
        self._est = Estimates(self._asked)
        self._mean: dict[tuple[object, ...], float] = {}  # (job kind, GPU type) -> mean co-located speed
        self._seen: dict[str, list[float]] = {}  # GPU type -> sorted mean speeds of the job kinds seen

    def mean_speed(self, job: Job, gpu_type: str) -> float:
        """Predicted mean normalized speed of ``job`` sharing a GPU with each reference partner.

        Parameters
        ----------
        job
            The job.
        gpu_type
            A catalog GPU type.

        Returns
        -------
        float
            The mean of its co-located speeds relative to running alone.
        """
        key = (*_kind(job), gpu_type)
        if key not in self._mean:
            speeds = [self._asked.colocation.colocated_speeds([job, Job("_ref", m, b, 1)], gpu_type)[0]
                      for m, b in _REFERENCE]
            self._mean[key] = mean = sum(speeds) / len(speeds)
            bisect.insort(self._seen.setdefault(gpu_type, []), mean)
        return self._mean[key]

    def thresholds(self, gpu_type: str) -> tuple[float, float]:
        """Class cut points on ``gpu_type``: the paper's, or the population quantiles at Lucid's label shares.

        Parameters
        ----------
        gpu_type
            A catalog GPU type.

        Returns
        -------
        tuple[float, float]
            Mean co-located speeds below which a job is class 2, and class 1.
        """
        if self.class_thresholds is not None:
            return self.class_thresholds
        seen = self._seen.get(gpu_type) or [1.0]
        n = len(seen)
        low = seen[min(n - 1, int(LABEL_SHARES[0] * n))]
        mid = seen[min(n - 1, int((LABEL_SHARES[0] + LABEL_SHARES[1]) * n))]
        return low, mid

    def sensitivity_class(self, job: Job, gpu_type: str) -> int:
        """Lucid's interference-sensitivity class of ``job`` on ``gpu_type``.

        Parameters
        ----------
        job, gpu_type
            The job and the catalog GPU type it would share.

        Returns
        -------
        int
            0 (barely slowed by a partner), 1 or 2 (most slowed), by the job's mean co-located speed against
            the class cut points.
        """
        mean = self.mean_speed(job, gpu_type)
        low, mid = self.thresholds(gpu_type)
        return 2 if mean < low else 1 if mean < mid else 0

    def schedule(self, state: ClusterState) -> Plan:
        """The round's plan: running jobs stay where they are; the queue is packed, sharing GPUs between
        compatible classes."""
        jobs = {s.job.id: s.job for s in state.jobs}
        for s in state.jobs:  # every job type in view joins the population the relative cut points come from
            for gtype in self._est.candidate_types(s.job, state.cluster):
                self.mean_speed(s.job, gtype)
        pool = GpuPool.empty(state)
        placed: list[Assignment] = []
        for s in state.running():
            assert s.assignment is not None
            pool.occupy(s.job.id, s.assignment.gpus)
            placed.append(s.assignment)
        order = sorted(state.queued(),
                       key=lambda s: (self.priority(s.job, state), s.job.arrival_time_s, s.job.id))
        holders: _Holders | None = None  # who holds which GPUs; read again only after a placement
        for s in order:
            gpus = None
            for gtype in self._est.candidate_types(s.job, state.cluster):
                gpus = pool.take_free(s.job, gtype)
                if gpus is not None:
                    break
            if gpus is None:
                holders = holders or _holders(pool, state.cluster.num_gpus)
                gpus = self._partner_gpus(s.job, holders, jobs, state)
            if gpus is not None:
                pool.occupy(s.job.id, gpus)
                placed.append(Assignment(s.job.id, gpus))
                holders = None
        return Plan(tuple(placed))

    def priority(self, job: Job, state: ClusterState) -> float:
        """Lucid's priority: predicted duration (on the fastest type it may use) x GPU count.

        Parameters
        ----------
        job
            The job.
        state
            The cluster snapshot (which GPU types exist).

        Returns
        -------
        float
            GPU-seconds; lower runs first, ``inf`` when no GPU type fits the job.
        """
        types = self._est.candidate_types(job, state.cluster)
        if not types:
            return float("inf")
        return job.total_iterations * self._est.step_time_s(job, types[0]) * job.num_gpus

    def _partner_gpus(self, job: Job, holders: _Holders, jobs: dict[str, Job],
                      state: ClusterState) -> tuple[int, ...] | None:
        best: tuple[int, tuple[int, ...]] | None = None
        held_by, shared = holders
        for partner_id, held in held_by.items():
            partner = jobs[partner_id]
            if partner_id in shared or partner.num_gpus != job.num_gpus or len(held) != job.num_gpus:
                continue  # Lucid pairs two jobs of one GPU count, the partner alone on its GPUs
            gpus = tuple(held)
            gtype = state.cluster.gpu_type_of(gpus[0])
            if job.gpu_types and gtype not in job.gpu_types:
                continue
            classes = self.sensitivity_class(job, gtype) + self.sensitivity_class(partner, gtype)
            if classes > self.max_class_sum:
                continue
            if self.priority(job, state) > 2.0 * self.priority(partner, state):
                continue
            cap = state.cluster.gpu_types[gtype].memory_mib * self.memory_margin
            if self._est.memory_mib(job, gtype) + self._est.memory_mib(partner, gtype) > cap:
                continue
            if best is None or classes < best[0]:
                best = (classes, gpus)
        return None if best is None else best[1]


#: per job on some GPU, its GPUs (jobs in order of their lowest GPU), and the jobs that share a GPU
_Holders = tuple[dict[str, list[int]], set[str]]


def _holders(pool: GpuPool, num_gpus: int) -> _Holders:
    held_by: dict[str, list[int]] = {}
    shared: set[str] = set()
    for g in range(num_gpus):
        on = pool.jobs_on.get(g, ())
        for job_id in on:
            held_by.setdefault(job_id, []).append(g)
            if len(on) > 1:
                shared.add(job_id)
    return held_by, shared

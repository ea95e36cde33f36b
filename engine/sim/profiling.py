"""Profiling on arrival (``SimulationConfig.profiling``): the simulator measures jobs as they run.

Once a running job has made ``profile_s`` seconds of progress on a GPU type (since its placement there, after
its restore delay), its isolated step time (at its GPU count and node spread, freeze level 0), peak memory and
GPU utilisation there are measured from the ground truth with log-normal noise of sigma ``noise`` (drawn from
the seed, the job and the GPU type, so a resumed run measures the same), as Gavel, Lucid and Sia profile a job
on arrival. Likewise a group of jobs sharing a GPU, once all of them have run there together for
``profile_s``: each member's co-located speed. With ``all_types``, every job is also measured alone on each
GPU type of the cluster, at its own GPU count, once ``profile_s`` per type has passed since its arrival (the
types one after another, on GPUs set aside for profiling). The measurements go into the run's
:class:`~dltsched.engine.domain.profiles.ProfileBook` through its
:class:`~dltsched.engine.domain.profiles.ProfileSink` protocol - never the truth object itself - and the
policies' predictors (wrapped by :func:`dltsched.engine.domain.profiled.profiled`) use them from the next
decision on. Measurements are taken at decision points, so one is seen at the first round after its window.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dltsched.engine.domain.hashing import hash_normal
from dltsched.engine.domain.profiles import IsolatedProfile

if TYPE_CHECKING:
    from dltsched.engine.sim.placing import PlacingRun


def _noisy(value: float, sigma: float, key: str) -> float:
    return value * math.exp(sigma * hash_normal(key)) if sigma > 0 else value


def take_profiles(run: PlacingRun) -> int:
    """Record every profile whose window has passed by ``run.time``; returns how many were new."""
    cfg = run.cfg.profiling
    assert cfg is not None
    book, truth, cluster, now, seed = run.profiles, run.truth, run.cluster, run.time, run.cfg.seed
    window, sigma = cfg.profile_s, cfg.noise
    new = 0
    since: dict[str, float] = {}
    for job_id, a in run.running.items():
        asg = a.assignment
        if asg is None:
            continue
        start = max(a.ready_at, a.placed_at)
        since[job_id] = start
        gtype = cluster.gpu_type_of(asg.gpus[0])
        if now - start < window or book.has_isolated(job_id, gtype):
            continue
        job = a.job
        nodes = len({cluster.gpu_node[g] for g in asg.gpus}) if len(asg.gpus) > 1 else 1
        key = f"profile|{seed}|{job_id}|{gtype}"
        step = _noisy(truth.step_time_s(job, gtype, len(asg.gpus), nodes, 0), sigma, key + "|step")
        memory = _noisy(truth.memory_mib(job, gtype, 0), sigma, key + "|memory")
        util_of = getattr(truth, "gpu_utilization", None)
        util = None if util_of is None else min(1.0, _noisy(util_of(job, gtype), sigma, key + "|util"))
        new += book.record_isolated(job, gtype, IsolatedProfile(len(asg.gpus), nodes, step, memory, util))
    if cfg.all_types:
        new += _profile_every_type(run, window * len(cluster.gpus_by_type()))
    seen: set[tuple[str, ...]] = set()
    for g, on in enumerate(run.gpu_jobs):
        if len(on) < 2:
            continue
        group = tuple(on)
        if group in seen:
            continue
        seen.add(group)
        gtype = cluster.gpu_type_of(g)
        if now - max(since[j] for j in group) < window or book.has_colocated(group, gtype):
            continue
        jobs = [run.active[j].job for j in group]
        speeds = truth.colocated_speeds(jobs, gtype)
        key = f"profile|{seed}|{'+'.join(sorted(group))}|{gtype}"
        noisy = [min(1.0, _noisy(s, sigma, f"{key}|{j}")) for j, s in zip(group, speeds, strict=True)]
        new += book.record_colocated(jobs, gtype, noisy)
    return new


def _profile_every_type(run: PlacingRun, after_s: float) -> int:
    """Measure every job that arrived ``after_s`` ago or more alone on each GPU type it lacks, at its own GPU
    count on as few nodes as that type's nodes allow (a type with too few GPUs for it is skipped)."""
    cfg = run.cfg.profiling
    assert cfg is not None
    book, truth, seed, cluster = run.profiles, run.truth, run.cfg.seed, run.cluster
    util_of = getattr(truth, "gpu_utilization", None)
    per_node = {t: max(len(cluster.node_gpus(n)) for n in cluster.nodes_of_type(t))
                for t in cluster.gpus_by_type()}
    new = 0
    for job_id, a in run.active.items():
        job = a.job
        if run.time - job.arrival_time_s < after_s:
            continue
        for gtype in sorted(per_node):
            if book.has_isolated(job_id, gtype) or job.num_gpus > cluster.max_gpus_of_type(gtype):
                continue
            nodes = -(-job.num_gpus // per_node[gtype])
            key = f"profile|{seed}|{job_id}|{gtype}|every"
            step = _noisy(truth.step_time_s(job, gtype, job.num_gpus, nodes, 0), cfg.noise, key + "|step")
            memory = _noisy(truth.memory_mib(job, gtype, 0), cfg.noise, key + "|memory")
            util = util_of(job, gtype) if util_of is not None else None
            util = None if util is None else min(1.0, _noisy(util, cfg.noise, key + "|util"))
            new += book.record_isolated(job, gtype, IsolatedProfile(job.num_gpus, nodes, step, memory, util))
    return new

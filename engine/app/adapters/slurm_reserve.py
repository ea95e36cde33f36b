"""The guard against starving a job in ``dltsched slurm``: a reservation for the job that has waited longest
relative to its own run time, with backfill around it (Slurm's own backfill does the same for the job at the
head of its queue).

Rounds place jobs on the GPUs that are free now, and the ``jct`` objective prefers short, narrow jobs: as they
come and go, no node ever empties for a job that needs a whole one, which then waits until nothing else is
left (the makespan of a batch is set by it). So once a queued job has waited ``starvation_factor`` times its
predicted run time, it gets the nodes predicted to free up first for it (running jobs' remaining iterations
from their progress reports, times their measured or predicted step time). Their GPUs that are free now are
kept from other jobs, except jobs predicted to end before the reservation starts; when they all are free, the
job starts there. Pure functions of their arguments.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Reservation:
    """GPUs kept for one starving job.

    Parameters
    ----------
    job_id
        The job they are kept for.
    per_node
        Node -> the GPU indices it will run on.
    start_s
        When they are predicted to be free, all of them (the round's time: it starts now).
    withheld
        Node -> the GPU indices among them that are free now (kept from other jobs but backfill).
    """

    job_id: str
    per_node: Mapping[str, tuple[int, ...]]
    start_s: float
    withheld: Mapping[str, tuple[int, ...]]

    def starts_now(self, now_s: float) -> bool:
        """Whether every GPU it needs is free now."""
        return self.start_s <= now_s


def starving_job(
    queued: Sequence[str],
    now_s: float,
    submit_s: Mapping[str, float],
    run_s: Mapping[str, float],
    factor: float,
) -> str | None:
    """The queued job that has waited longest relative to its predicted run time, among those that waited
    at least ``factor`` times it (``None``: none did, or ``factor`` is 0)."""
    if factor <= 0:
        return None
    waits = {j: now_s - submit_s[j] for j in queued if j in run_s and j in submit_s}
    starving = [j for j, w in waits.items() if w >= factor * run_s[j]]
    return max(starving, key=lambda j: (waits[j] / max(run_s[j], 1e-9), waits[j], j), default=None)


def reserve(
    job_id: str,
    now_s: float,
    free_at: Mapping[str, Sequence[float]],
    types: Mapping[str, str],
    per_node_gpus: int,
    node_count: int,
    allowed: frozenset[str] | None,
    whole: bool = False,
) -> Reservation | None:
    """The reservation for ``job_id``: ``node_count`` nodes of one GPU type (within ``allowed``) on which
    ``per_node_gpus`` GPUs (``whole``: all of them, for a job that takes whole nodes) are free soonest.
    ``free_at``: node -> per GPU index, when it is predicted to be free (``now_s`` or earlier: free now;
    ``inf``: not to be counted on). ``None`` when no node ever fits."""
    best: tuple[float, str, list[str]] | None = None
    by_type: dict[str, list[tuple[float, str]]] = {}
    for node, times in free_at.items():
        if node not in types or (allowed is not None and node not in allowed) or len(times) < per_node_gpus:
            continue
        ready = max(times) if whole else sorted(times)[per_node_gpus - 1]
        if math.isfinite(ready):
            by_type.setdefault(types[node], []).append((max(ready, now_s), node))
    for gpu_type, ready_nodes in sorted(by_type.items()):
        if len(ready_nodes) < node_count:
            continue
        chosen = sorted(ready_nodes)[:node_count]
        start = max(t for t, _ in chosen)
        if best is None or start < best[0]:
            best = (start, gpu_type, [n for _, n in chosen])
    if best is None:
        return None
    start, _, nodes = best
    per_node, withheld = {}, {}
    for node in sorted(nodes):
        order = sorted(range(len(free_at[node])), key=lambda g: (free_at[node][g], g))[:per_node_gpus]
        per_node[node] = tuple(sorted(order))
        kept = range(len(free_at[node])) if whole else per_node[node]
        withheld[node] = tuple(g for g in kept if free_at[node][g] <= now_s)
    return Reservation(job_id, per_node, start, withheld)


def backfill(
    reservation: Reservation,
    now_s: float,
    candidates: Sequence[str],
    run_s: Mapping[str, float],
    gpus: Mapping[str, int],
    node_count: Mapping[str, int],
    allowed: Mapping[str, frozenset[str] | None],
) -> dict[str, dict[str, tuple[int, ...]]]:
    """Jobs that may use the reservation's withheld GPUs because they are predicted to end before it starts:
    shortest first, single-node jobs, each on GPUs of one withheld node. Job -> node -> GPU indices."""
    left = {n: list(idx) for n, idx in reservation.withheld.items()}
    slack = reservation.start_s - now_s
    out: dict[str, dict[str, tuple[int, ...]]] = {}
    for job_id in sorted(candidates, key=lambda j: (run_s.get(j, math.inf), j)):
        if run_s.get(job_id, math.inf) > slack or node_count.get(job_id, 1) != 1:
            continue
        need = gpus[job_id]
        fits = [
            n
            for n, free in sorted(left.items())
            if len(free) >= need and n in (allowed.get(job_id) or {n})
        ]
        if fits:
            node = fits[0]
            out[job_id] = {node: tuple(left[node][:need])}
            left[node] = left[node][need:]
    return out

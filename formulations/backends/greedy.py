"""Greedy heuristic and fallback: best gain per GPU first, within capacity; always feasible (maybe empty)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from operator import attrgetter

import numpy as np

from dltsched.formulations.backends.base import Backend, BackendOutcome, SolveParams, register
from dltsched.formulations.candidates import CandidateSet, node_classes_of
from dltsched.formulations.model import RoundModel, capacity_limits
from dltsched.formulations.result import Termination


@register
class Greedy(Backend):
    """The greedy heuristic as a backend: no bound, no solver; ``params`` are not used."""

    name = "greedy"
    exact = False

    def solve(self, model: RoundModel, params: SolveParams) -> BackendOutcome:
        """The greedy selection of :func:`greedy_selection`."""
        start = time.perf_counter()
        selected = tuple(greedy_selection(model.cset))
        return BackendOutcome(selected, Termination.NOT_RUN, None, 0.0, time.perf_counter() - start,
                              "greedy heuristic")


def greedy_selection(cset: CandidateSet, first: Sequence[int] = ()) -> list[int]:
    """Candidates taken greedily by gain per GPU (ties: fewer GPUs, then order), capacity-safe; the
    ``first`` candidates (e.g. a previous plan's) are tried before all others, in their order."""
    problem = cset.problem
    makespan = problem.options.objective == "makespan"
    node_left, type_left = capacity_limits(cset)
    class_left = [cls.capacity for cls in node_classes_of(cset)]
    used_jobs: set[int] = set()
    kept: set[int] = set()
    clashes: dict[int, set[int]] = {}  # slot -> the slots it overlaps
    for p, q in cset.slot_conflicts:
        clashes.setdefault(p, set()).add(q)
        clashes.setdefault(q, set()).add(p)
    selected: list[int] = []
    # by gain per GPU, descending, ties in candidate order (numpy: the same quotients, a stable sort)
    cands = cset.candidates
    per_gpu = -np.fromiter(map(attrgetter("gain"), cands), dtype=np.float64, count=len(cands)) \
        / np.fromiter(map(attrgetter("num_gpus"), cands), dtype=np.float64, count=len(cands))
    if first:
        per_gpu[list(set(first))] = np.nan  # dropped below
    ranked = np.argsort(per_gpu, kind="stable")
    rest = ranked[:len(cands) - len(set(first))].tolist() if first else ranked.tolist()
    order = [*dict.fromkeys(first), *rest]
    for c in order:
        cand = cset.candidates[c]
        if used_jobs & set(cand.jobs) or type_left[cand.gpu_type] < cand.num_gpus:
            continue
        if cand.gain < 0 or (makespan and any(t > cset.unplaced_completion_s[j]
                                              for j, t in zip(cand.jobs, cand.completion_s, strict=True))):
            continue
        if cand.kind == "stay":
            slot = cset.slots[cand.where]
            if cand.where in kept or not kept.isdisjoint(clashes.get(cand.where, ())):
                continue
            if any(node_left[n] < k for n, k in slot.node_gpus):
                continue
            for n, k in slot.node_gpus:
                node_left[n] -= k
            kept.add(cand.where)
        elif cand.kind == "node":
            if node_left[cand.where] < cand.num_gpus:
                continue
            node_left[cand.where] -= cand.num_gpus
        elif cand.kind == "class":
            if class_left[cand.where] < cand.num_gpus:
                continue
            class_left[cand.where] -= cand.num_gpus
        type_left[cand.gpu_type] -= cand.num_gpus
        used_jobs.update(cand.jobs)
        selected.append(c)
    return selected

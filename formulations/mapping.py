"""Turn chosen candidates (counts per GPU class) into concrete GPU indices, deterministically.

Kept slots keep their GPUs; down GPUs are never given out; multi-GPU units take free GPUs of their node,
then units on an aggregated node class take the first node of the class with room, largest first
(first-fit decreasing, which the class's sizes make exact: :mod:`~dltsched.formulations.aggregate`), then
cross-node units and one-GPU units take the remaining free GPUs of their type, lowest index first. A unit
holding a running job that the model moves avoids landing on exactly that job's current GPUs when it can.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from dltsched.engine.domain.model import Assignment, Plan
from dltsched.formulations.aggregate import place_in_class
from dltsched.formulations.candidates import Candidate, CandidateKind, CandidateSet, node_classes_of
from dltsched.formulations.problem import RoundProblem

_ORDER = {CandidateKind.STAY: 0, CandidateKind.NODE: 1, CandidateKind.CLASS: 2, CandidateKind.CROSS: 3,
          CandidateKind.TYPE: 4}


def to_plan(cset: CandidateSet, selected: Sequence[int], **fields: object) -> Plan:
    """The plan of ``selected`` candidates; ``fields`` fill the plan's status, objective, ..."""
    problem = cset.problem
    node_of = problem.node_of
    chosen = sorted((cset.candidates[c] for c in selected),
                    key=lambda c: (_ORDER[c.kind], -c.num_gpus, c.jobs))
    taken = {g for c in chosen if c.kind == "stay" for g in cset.slots[c.where].gpus}
    unusable = taken | problem.down_gpus()
    free = [[g for g in node.gpus if g not in unusable] for node in problem.nodes]  # per node, ascending
    classes = node_classes_of(cset) if any(c.kind == CandidateKind.CLASS for c in chosen) else ()
    assignments: list[Assignment] = []
    first: dict[str, int] = {}
    for cand in chosen:
        if cand.kind == CandidateKind.STAY:
            gpus = cset.slots[cand.where].gpus
        elif cand.kind == CandidateKind.CLASS:
            node = place_in_class(classes[cand.where], free, cand.num_gpus)
            gpus = _pick(free[node][: cand.num_gpus + 1], cand.num_gpus, _avoid(cset, cand))
            for g in gpus:
                free[node_of[g]].remove(g)
        else:
            gpus = _pick(_pool(problem, free, cand, first), cand.num_gpus, _avoid(cset, cand))
            for g in gpus:
                free[node_of[g]].remove(g)
        assignments += [Assignment(problem.jobs[j].id, tuple(gpus), f)
                        for j, f in zip(cand.jobs, cand.freeze, strict=True)]
    order = problem.job_index()
    plan = Plan(tuple(sorted(assignments, key=lambda a: order[a.job_id])))
    return replace(plan, **fields)  # type: ignore[arg-type]


def _pool(problem: RoundProblem, free: list[list[int]], cand: Candidate,
          first: dict[str, int] | None = None) -> list[int]:
    """The lowest free GPUs where ``cand`` may go (its node, or every node of its type in index order, hence
    ascending), one more than it needs where there are (all that :func:`_pick` looks at); ``first``: per
    type, where its first node with free GPUs may be (kept across calls while ``free`` only shrinks)."""
    if cand.kind == CandidateKind.NODE:
        return free[cand.where][: cand.num_gpus + 1]
    pool: list[int] = []
    nodes = problem.nodes_of_type(cand.gpu_type)
    skip = 0 if first is None else first.get(cand.gpu_type, 0)
    while skip < len(nodes) and not free[nodes[skip]]:  # nodes already full add nothing (free only shrinks)
        skip += 1
    if first is not None:
        first[cand.gpu_type] = skip
    for i in range(skip, len(nodes)):
        pool.extend(free[nodes[i]])
        if len(pool) > cand.num_gpus:
            break
    return pool


def _avoid(cset: CandidateSet, cand: Candidate) -> set[tuple[int, ...]]:
    return {cset.problem.jobs[j].current_gpus for j in cand.jobs if cset.problem.jobs[j].running}


def _pick(pool: list[int], count: int, avoid: set[tuple[int, ...]]) -> tuple[int, ...]:
    if len(pool) < count:
        raise RuntimeError(f"capacity bookkeeping broken: {count} GPUs wanted, {len(pool)} free")
    gpus = tuple(pool[:count])
    if gpus in avoid and len(pool) > count:
        gpus = (*pool[: count - 1], pool[count])
    return gpus

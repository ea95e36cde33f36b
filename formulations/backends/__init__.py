"""What a backend is (a function from a candidate set to chosen candidates and solve figures), and the
one table of backends: :data:`BACKENDS`, from which every list of backend names is derived."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from dltsched.engine.domain.model import Plan
    from dltsched.formulations.candidates import CandidateSet


@dataclass(frozen=True, slots=True)
class BackendEntry:
    """One backend: its ``"module:function"`` (imported on first use, so ortools and pyomo load lazily)
    and whether it solves the round exactly (proves optimality within the gap limit) or heuristically."""

    target: str
    exact: bool


#: backend name -> entry; the one registry of backends (CLI choices, the API's accepted names and the
#: test suite's ``--backends`` all come from here)
BACKENDS: dict[str, BackendEntry] = {
    "cpsat": BackendEntry("dltsched.formulations.backends.cpsat:solve", exact=True),
    "milp": BackendEntry("dltsched.formulations.backends.milp:solve", exact=True),
    "greedy": BackendEntry("dltsched.formulations.solve:solve_greedy", exact=False),
    # large rounds: the LP relaxation rounded, placed per GPU type; its bound is the LP's (not exact: no proof
    # of optimality within the gap limit, but a true gap)
    "decomposed": BackendEntry("dltsched.formulations.decompose:solve", exact=False),
}

#: the backends that solve a round exactly
EXACT_BACKENDS: tuple[str, ...] = tuple(name for name, entry in BACKENDS.items() if entry.exact)


@dataclass(frozen=True, slots=True)
class BackendOutcome:
    """Chosen candidates (``None``: no solution), termination, and the bound in maximisation form
    (an upper bound on ``sum gain [- makespan]``, before the constant migration term)."""

    selected: tuple[int, ...] | None
    termination: str
    bound: float | None
    build_time_s: float
    solve_time_s: float
    message: str = ""


class Backend(Protocol):
    """``time_limit_s`` bounds the whole round, of which ``spent_s`` seconds went before the call (building):
    a wall-clock limit is what is left; CP-SAT's deterministic budget stays whole (see its module)."""

    def __call__(self, cset: CandidateSet, *, time_limit_s: float, hint: Sequence[int],
                 solver: str | None = None, spent_s: float = 0.0) -> BackendOutcome: ...


def capacity_limits(cset: CandidateSet) -> tuple[list[int], dict[str, int]]:
    """Usable GPUs per node and per GPU type (down GPUs excluded): the right-hand sides of capacity."""
    per_node = [node.usable_gpus for node in cset.problem.nodes]
    per_type: dict[str, int] = defaultdict(int)
    for node in cset.problem.nodes:
        per_type[node.gpu_type] += node.usable_gpus
    return per_node, dict(per_type)


def capacity_rows(cset: CandidateSet) -> tuple[dict[int, list[tuple[int, int]]], dict[str, list[tuple[int, int]]]]:
    """(node -> [(candidate, GPUs used on it)], type -> [(candidate, GPUs)]): the capacity constraints."""
    per_node: dict[int, list[tuple[int, int]]] = defaultdict(list)
    per_type: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for c, cand in enumerate(cset.candidates):
        per_type[cand.gpu_type].append((c, cand.num_gpus))
        if cand.kind == "node":
            per_node[cand.where].append((c, cand.num_gpus))
        elif cand.kind == "stay":
            for n, k in cset.slots[cand.where].node_gpus:
                per_node[n].append((c, k))
    return per_node, per_type


def stays_by_slot(cset: CandidateSet) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for c, cand in enumerate(cset.candidates):
        if cand.kind == "stay":
            out[cand.where].append(c)
    return out


def hint_from_plan(cset: CandidateSet, plan: Plan) -> list[int]:
    """Candidates matching a previous plan's placements (freeze levels may differ); others ignored."""
    problem = cset.problem
    index = problem.job_index()
    node_of = problem.node_of
    lookup = {(c.jobs, c.gpu_type, c.kind, c.where): i for i, c in enumerate(cset.candidates)}
    slot_of = {s.gpus: p for p, s in enumerate(cset.slots)}
    units: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for a in plan.assignments:
        if a.job_id in index and all(0 <= g < problem.num_gpus for g in a.gpus):
            units[tuple(sorted(a.gpus))].append(index[a.job_id])
    out = []
    for gpus, members in units.items():
        jobs = tuple(sorted(members))
        gpu_type = problem.nodes[node_of[gpus[0]]].gpu_type
        nodes = {node_of[g] for g in gpus}
        keys = []
        if gpus in slot_of:
            keys.append((jobs, gpu_type, "stay", slot_of[gpus]))
        if len(gpus) == 1:
            keys.append((jobs, gpu_type, "type", -1))
        elif len(nodes) == 1:
            keys.append((jobs, gpu_type, "node", nodes.pop()))
        else:
            keys.append((jobs, gpu_type, "cross", -1))
        found = next((lookup[k] for k in keys if k in lookup), None)
        if found is not None:
            out.append(found)
    return out

"""The round's backends: objects over the one :class:`~dltsched.formulations.model.RoundModel`, registered
by :func:`register` (see :mod:`~dltsched.formulations.backends.base`).

Built in: ``cpsat`` (OR-Tools CP-SAT), ``highs`` (HiGHS through highspy), ``pyomo`` (any Pyomo solver, HiGHS
by default; also known as ``milp``), ``greedy`` (the heuristic) and ``decomposed`` (large rounds: the LP
relaxation rounded, placed per GPU type). A new backend is one module with one class under ``@register``;
importing the module registers it.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from dltsched.formulations.backends.base import (
    REGISTRY,
    Backend,
    BackendOutcome,
    SolveParams,
    backend_names,
    get_backend,
    register,
)

if TYPE_CHECKING:
    from dltsched.engine.domain.model import Plan
    from dltsched.formulations.candidates import CandidateSet

__all__ = ["BACKENDS", "EXACT_BACKENDS", "REGISTRY", "Backend", "BackendOutcome", "SolveParams",
           "backend_names", "get_backend", "hint_from_plan", "register"]

_MOVED = {"capacity_limits": "dltsched.formulations.model", "capacity_rows": "dltsched.formulations.model",
          "stays_by_slot": "dltsched.formulations.model"}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import importlib

        warnings.warn(f"dltsched.formulations.backends.{name} moved to {_MOVED[name]}", DeprecationWarning,
                      stacklevel=2)
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def hint_from_plan(cset: CandidateSet, plan: Plan) -> list[int]:
    """Candidates matching a previous plan's placements (freeze levels may differ); others ignored."""
    from dltsched.formulations.aggregate import class_of
    from dltsched.formulations.candidates import node_classes_of

    problem = cset.problem
    index = problem.job_index()
    node_of = problem.node_of
    lookup = {(c.jobs, c.gpu_type, c.kind, c.where): i for i, c in enumerate(cset.candidates)}
    slot_of = {s.gpus: p for p, s in enumerate(cset.slots)}
    aggregated = class_of(node_classes_of(cset))
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
            node = nodes.pop()
            keys.append((jobs, gpu_type, "node", node))
            if node in aggregated:
                keys.append((jobs, gpu_type, "class", aggregated[node]))
        else:
            keys.append((jobs, gpu_type, "cross", -1))
        found = next((lookup[k] for k in keys if k in lookup), None)
        if found is not None:
            out.append(found)
    return out


# the built-in backends register themselves on import (their solvers load on first use)
from dltsched.formulations.backends import cpsat, highs, milp, greedy, decomposed  # noqa: E402, F401, I001

#: backend name (aliases included) -> backend: every name the registry accepts
BACKENDS = REGISTRY
#: the exact backends, each once by its own name (the test suite's and ``bench solve``'s default set)
EXACT_BACKENDS: tuple[str, ...] = backend_names(exact=True, aliases=False)

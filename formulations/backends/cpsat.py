"""CP-SAT translation of a candidate set: one Boolean per candidate, integer-scaled coefficients.

Coefficients are scaled to integers (the largest to about 1e7); the objective reported to users is
re-computed in floating point from the chosen candidates, the bound is scaled back.

CP-SAT gets no solution hint: on these models it searches better without one. Measured on the
synthetic 1,000-job / 1,024-GPU round of ``bench solve`` (10 s, 2 workers, ``jct`` objective): no hint
2,115.7 (gap 0.6%); the complete greedy selection as hint 1,863.9 (no better than the hint); the
running jobs' placements as a partial hint 1,400.3. ``solve_problem`` keeps its starting selection as
the plan when CP-SAT returns nothing in time.

Determinism (``RoundOptions.deterministic``, the default): CP-SAT with several workers, or stopped by a
wall-clock limit, returns whatever the search had found when the clock ran out, so two runs of the same
round can differ and a simulation with the optimizing policy does not repeat (avg JCT 2,989.3 vs 3,000.8 s
on the medium example before this setting). Deterministic solves use one worker and stop on CP-SAT's
*deterministic time* (a count of work, the same on every run): ``time_limit_s`` seconds buy
:data:`DETERMINISTIC_TIME_PER_S` units each, about what one worker does in a second on the 2-core
development machine under load (measured: 0.07 units in 1 s with 2 workers, 0.10 units in 0.9 s with 1 on
the 200-job / 256-GPU round of ``bench solve``). A wall-clock cap of :data:`WALL_CAP_FACTOR` x
``time_limit_s`` only guards against a machine far slower than that; a round stopped by it is not
reproducible and says so in its message. The cost: one worker instead of two, and on a fast machine a
round may stop earlier than its wall-clock limit would have (figures in the README). ``deterministic=False``
restores ``num_workers`` workers under a wall-clock limit.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from dltsched.formulations.backends import BackendOutcome, capacity_limits, capacity_rows, stays_by_slot
from dltsched.formulations.candidates import CandidateSet
from dltsched.formulations.result import Termination

_TARGET = 1e7
#: deterministic-time units CP-SAT may spend per second of ``time_limit_s`` in deterministic mode
DETERMINISTIC_TIME_PER_S = 0.1
#: in deterministic mode, the wall-clock cap is this many times ``time_limit_s``
WALL_CAP_FACTOR = 10.0


def solve(cset: CandidateSet, *, time_limit_s: float, hint: Sequence[int], solver: str | None = None) -> BackendOutcome:
    """Solve ``cset`` with CP-SAT (``solver`` must be ``None`` or ``"cpsat"``; ``hint`` is not used, see
    the module docstring)."""
    from ortools.sat.python import cp_model

    if solver not in (None, "cpsat", "cp-sat"):
        raise ValueError(f"solver: '{solver}' not understood for backend cpsat; leave it out")
    start = time.perf_counter()
    model = cp_model.CpModel()
    x = [model.new_bool_var(f"x{c}") for c in range(len(cset.candidates))]
    scale = _scale(cset)
    add_one_placement_per_job(model, x, cset)
    add_capacity(model, x, cset)
    add_slot_rules(model, x, cset)
    makespan = add_makespan(model, x, cset, scale)
    set_objective(model, x, cset, scale, makespan)
    build_s = time.perf_counter() - start
    engine = cp_model.CpSolver()
    options = cset.problem.options
    det_budget = float(time_limit_s) * DETERMINISTIC_TIME_PER_S
    if options.deterministic:
        engine.parameters.num_workers = 1
        engine.parameters.max_deterministic_time = det_budget
        engine.parameters.max_time_in_seconds = float(time_limit_s) * WALL_CAP_FACTOR
    else:
        engine.parameters.max_time_in_seconds = float(time_limit_s)
        engine.parameters.num_workers = options.num_workers
    engine.parameters.relative_gap_limit = options.relative_gap
    status = engine.solve(model)
    solve_s = engine.wall_time
    capped = (options.deterministic and status not in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
              and engine.deterministic_time < det_budget)
    note = "stopped by the wall-clock cap, not the deterministic budget: not reproducible" if capped else ""
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        selected = tuple(c for c in range(len(x)) if engine.boolean_value(x[c]))
        if status == cp_model.OPTIMAL:
            termination = (Termination.OPTIMAL if engine.objective_value >= engine.best_objective_bound - 0.5
                           else Termination.GAP_LIMIT)
        else:
            termination = Termination.TIME_LIMIT
        return BackendOutcome(selected, termination, engine.best_objective_bound / scale, build_s, solve_s, note)
    termination = {cp_model.INFEASIBLE: Termination.INFEASIBLE, cp_model.UNKNOWN: Termination.TIME_LIMIT}.get(
        status, Termination.ERROR)
    return BackendOutcome(None, termination, None, build_s, solve_s,
                          "; ".join(filter(None, (engine.status_name(status), note))))


def _scale(cset: CandidateSet) -> float:
    largest = max((abs(c.gain) for c in cset.candidates), default=0.0)
    if cset.problem.options.objective == "makespan":
        largest = max(largest, *cset.unplaced_completion_s) if cset.unplaced_completion_s else largest
    return _TARGET / max(largest, 1e-12)


def add_one_placement_per_job(model: Any, x: list[Any], cset: CandidateSet) -> None:
    for cands in cset.by_job:
        if len(cands) > 1:
            model.add_at_most_one(x[c] for c in cands)


def add_capacity(model: Any, x: list[Any], cset: CandidateSet) -> None:
    """Usable GPUs per node (multi-GPU units and kept slots) and per type (everything)."""
    per_node, per_type = capacity_rows(cset)
    node_limit, type_limit = capacity_limits(cset)
    for n, terms in per_node.items():
        if sum(k for _, k in terms) > node_limit[n]:
            model.add(sum(k * x[c] for c, k in terms) <= node_limit[n])
    for gpu_type, terms in per_type.items():
        model.add(sum(k * x[c] for c, k in terms) <= type_limit[gpu_type])


def add_slot_rules(model: Any, x: list[Any], cset: CandidateSet) -> None:
    """A slot is kept by at most one unit; slots that overlap are not both kept."""
    stays = stays_by_slot(cset)
    for cands in stays.values():
        if len(cands) > 1:
            model.add_at_most_one(x[c] for c in cands)
    for p, q in cset.slot_conflicts:
        model.add(sum(x[c] for c in stays.get(p, [])) + sum(x[c] for c in stays.get(q, [])) <= 1)


def add_makespan(model: Any, x: list[Any], cset: CandidateSet, scale: float) -> Any:
    """``M >= completion of every job`` (placed: its candidate's; left out: wait + run alone)."""
    if cset.problem.options.objective != "makespan":
        return None
    waits = [round(w * scale) for w in cset.unplaced_completion_s]
    latest = max([*cset.unplaced_completion_s, *(t for c in cset.candidates for t in c.completion_s)], default=0.0)
    makespan = model.new_int_var(0, round(latest * scale) + 1, "makespan")
    for j, cands in enumerate(cset.by_job):
        saved = []
        for c in cands:
            cand = cset.candidates[c]
            done = cand.completion_s[cand.jobs.index(j)]
            saved.append(waits[j] - round(done * scale))
        model.add(makespan >= waits[j] - sum(s * x[c] for s, c in zip(saved, cands, strict=True)))
    return makespan


def set_objective(model: Any, x: list[Any], cset: CandidateSet, scale: float, makespan: Any) -> None:
    terms = sum(round(cand.gain * scale) * x[c] for c, cand in enumerate(cset.candidates) if cand.gain)
    model.maximize(terms - makespan if makespan is not None else terms)

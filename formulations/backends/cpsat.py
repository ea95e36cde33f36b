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
the 200-job / 256-GPU round of ``bench solve``). The rate is 0.2, not 0.1: at 0.1 the 1,000-job / 1,024-GPU
round of ``bench solve`` (10 s limit) found no plan in its 1.0 unit and fell back to the greedy start; at 0.2
it reaches a 1% gap in about 3 s, and smaller rounds stop on their gap long before the budget. A wall-clock cap of :data:`WALL_CAP_FACTOR` x
``time_limit_s`` only guards against a machine far slower than that; a round stopped by it is not
reproducible and says so in its message. The cost: one worker instead of two, and on a fast machine a
round may stop earlier than its wall-clock limit would have (figures in the README). ``deterministic=False``
restores ``num_workers`` workers under a wall-clock limit.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from dltsched.formulations.backends import BackendOutcome
from dltsched.formulations.backends.rows import model_rows
from dltsched.formulations.candidates import CandidateSet
from dltsched.formulations.result import Termination

_TARGET = 1e7
#: deterministic-time units CP-SAT may spend per second of ``time_limit_s`` in deterministic mode
DETERMINISTIC_TIME_PER_S = 0.2
#: CP-SAT's own gap limit as a fraction of the requested one (see :func:`solve`)
GAP_MARGIN = 0.9
#: in deterministic mode, the wall-clock cap is this many times ``time_limit_s``
WALL_CAP_FACTOR = 10.0
#: the least wall-clock time a solve is given (a round whose building took its whole limit)
_LEAST_S = 0.01


def solve(cset: CandidateSet, *, time_limit_s: float, hint: Sequence[int], solver: str | None = None,
          spent_s: float = 0.0) -> BackendOutcome:
    """Solve ``cset`` with CP-SAT (``solver`` must be ``None`` or ``"cpsat"``; ``hint`` is not used, see
    the module docstring). The wall-clock limit (non-deterministic) or cap (deterministic) is what is left of
    the round's after ``spent_s`` seconds and the model's building; the deterministic budget is whole."""
    from ortools.sat.python import cp_model

    if solver not in (None, "cpsat", "cp-sat"):
        raise ValueError(f"solver: '{solver}' not understood for backend cpsat; leave it out")
    start = time.perf_counter()
    model = cp_model.CpModel()
    model.proto.parse_text_format(model_text(cset))
    num = len(cset.candidates)
    build_s = time.perf_counter() - start
    engine = cp_model.CpSolver()
    options = cset.problem.options
    spent = spent_s + build_s
    det_budget = float(time_limit_s) * DETERMINISTIC_TIME_PER_S
    if options.deterministic:
        engine.parameters.num_workers = 1
        engine.parameters.max_deterministic_time = det_budget
        engine.parameters.max_time_in_seconds = max(_LEAST_S, float(time_limit_s) * WALL_CAP_FACTOR - spent)
    else:
        engine.parameters.max_time_in_seconds = max(_LEAST_S, float(time_limit_s) - spent)
        engine.parameters.num_workers = options.num_workers
    # CP-SAT measures its gap on the integer-scaled objective; the gap reported (and promised) is on the real
    # objective re-computed from the chosen candidates. A 10% margin keeps the one within the other (1,000-job
    # round, limit 1%: reported 1.02% without the margin, 0.91% with it).
    engine.parameters.relative_gap_limit = options.relative_gap * GAP_MARGIN
    status = engine.solve(model)
    solve_s = engine.wall_time
    capped = (options.deterministic and status not in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
              and engine.deterministic_time < det_budget)
    note = "stopped by the wall-clock cap, not the deterministic budget: not reproducible" if capped else ""
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        values = engine.response_proto.solution
        selected = tuple(c for c, v in zip(range(num), values, strict=False) if v)
        if status == cp_model.OPTIMAL:
            termination = (Termination.OPTIMAL if engine.objective_value >= engine.best_objective_bound - 0.5
                           else Termination.GAP_LIMIT)
        else:
            termination = Termination.TIME_LIMIT
        return BackendOutcome(selected, termination, engine.best_objective_bound / _scale(cset), build_s, solve_s,
                              note)
    termination = {cp_model.INFEASIBLE: Termination.INFEASIBLE, cp_model.UNKNOWN: Termination.TIME_LIMIT}.get(
        status, Termination.ERROR)
    return BackendOutcome(None, termination, None, build_s, solve_s,
                          "; ".join(filter(None, (engine.status_name(status), note))))


def _scale(cset: CandidateSet) -> float:
    largest = max((abs(c.gain) for c in cset.candidates), default=0.0)
    if cset.problem.options.objective == "makespan":
        largest = max(largest, *cset.unplaced_completion_s) if cset.unplaced_completion_s else largest
    return _TARGET / max(largest, 1e-12)


_LOWEST, _HIGHEST = -(2**63), 2**63 - 1


def _linear(cols: Sequence[int], coefs: Sequence[int], lower: int, upper: int) -> str:
    return (f"constraints {{ linear {{ vars: {' vars: '.join(map(str, cols))} "
            f"coeffs: {' coeffs: '.join(map(str, coefs))} domain: {lower} domain: {upper} }} }}")


def _at_most_one(cols: Sequence[int]) -> str:
    return f"constraints {{ at_most_one {{ literals: {' literals: '.join(map(str, cols))} }} }}"


def model_text(cset: CandidateSet) -> str:
    """The CP-SAT model of ``cset`` in protobuf text format, written from the index lists of
    :func:`~dltsched.formulations.backends.rows.model_rows` in one pass and parsed by CP-SAT in C++ (a Python
    call per variable and term costs several times more on large rounds). Coefficients are integer-scaled;
    the objective maximises the gains (minus the makespan variable, the last one)."""
    num = len(cset.candidates)
    scale = _scale(cset)
    lines = ["variables { domain: 0 domain: 1 }\n" * num]
    for row in model_rows(cset):
        if row.at_most_one:
            lines.append(_at_most_one(row.cols))
        else:
            lines.append(_linear(row.cols, [round(k) for k in row.coefs], _LOWEST, round(row.upper or 0)))
    cols = [c for c, cand in enumerate(cset.candidates) if cand.gain]
    coefs = [-round(cset.candidates[c].gain * scale) for c in cols]  # maximise: CP-SAT minimises -gain
    if cset.problem.options.objective == "makespan":
        makespan = num
        waits = [round(w * scale) for w in cset.unplaced_completion_s]
        latest = max([*cset.unplaced_completion_s, *(t for c in cset.candidates for t in c.completion_s)],
                     default=0.0)
        lines.insert(1, f"variables {{ domain: 0 domain: {round(latest * scale) + 1} }}\n")
        for j, cands in enumerate(cset.by_job):  # M + sum saved_c x_c >= wait_j
            saved = [waits[j] - round(cset.candidates[c].completion_s[cset.candidates[c].jobs.index(j)] * scale)
                     for c in cands]
            lines.append(_linear([*cands, makespan], [*saved, 1], waits[j], _HIGHEST))
        cols.append(makespan)
        coefs.append(1)
    if cols:
        lines.append(f"objective {{ vars: {' vars: '.join(map(str, cols))} scaling_factor: -1 "
                     f"coeffs: {' coeffs: '.join(map(str, coefs))} }}")
    return "\n".join(lines)

"""The ``decomposed`` backend, for large rounds: the round's LP relaxation, rounded, and placed
per GPU type when the rounding is not within the gap.

1. **LP relaxation.** Every row of the round (each job at most once, node and type capacity, kept slots) over
   0 <= x <= 1, solved by HiGHS. Its optimum bounds every plan of the round, so the gap the plan reports is a
   true gap, and the plan says when it is exact (its objective meets the bound).
2. **Rounding.** The LP's candidates taken greedily in decreasing LP value, then whatever else fits.
3. **Placement per GPU type**, only when the rounding is not within ``relative_gap`` of the bound. A round's
   constraints tie GPU types together only through "each job at most once", so each job goes to the type
   that holds most of its LP mass (a job the LP leaves out: where it alone is worth most per GPU) and each
   type is solved by CP-SAT on the candidates whose members all went there, the types side by side in threads
   (CP-SAT releases the interpreter while it searches). The union satisfies every row of the round; a greedy
   pass adds what still fits, and the better of this and the rounding is the plan.

Like every backend's, the plan goes through the independent checker (:mod:`~dltsched.formulations.pipeline`).
The ``makespan`` objective (one variable couples every job) is not decomposed: ``ValueError``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from dltsched.formulations.backends.base import (
    Backend,
    BackendOutcome,
    SolveParams,
    get_backend,
    register,
)
from dltsched.formulations.backends.greedy import greedy_selection
from dltsched.formulations.candidates import CandidateSet, objective_of, to_reported
from dltsched.formulations.model import RoundModel
from dltsched.formulations.result import Termination, relative_gap


@dataclass(frozen=True, slots=True)
class Decomposition:
    """What the type level decided: the LP bound (maximisation form), each job's type (``None``: none of its
    units fits any type), the candidates in decreasing LP value (those above 0) and the LP's seconds."""

    bound: float
    job_type: tuple[str | None, ...]
    by_value: tuple[int, ...]
    lp_s: float


def type_level(cset: CandidateSet | RoundModel) -> Decomposition:
    """Solve the LP relaxation of the round (every row of its model, see the module docstring) with HiGHS and
    assign each job to a GPU type."""
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    began = time.perf_counter()
    model = cset if isinstance(cset, RoundModel) else RoundModel(cset)
    cset = model.cset
    problem = cset.problem
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    upper: list[float] = []
    for r, row in enumerate(model.linear_rows()):
        rows += [r] * len(row.cols)
        cols += row.cols
        vals += row.coefs
        upper.append(float(row.upper if row.upper is not None else np.inf))
    num = len(cset.candidates)
    gains = np.array([c.gain for c in cset.candidates])
    matrix = coo_matrix((vals, (rows, cols)), shape=(len(upper), num)).tocsr()
    result = linprog(-gains, A_ub=matrix, b_ub=np.array(upper), bounds=(0.0, 1.0), method="highs")
    if result.status != 0:
        raise RuntimeError(f"LP relaxation of the round failed: {result.message}")
    mass: list[dict[str, float]] = [defaultdict(float) for _ in problem.jobs]
    alone: list[tuple[float, str] | None] = [None] * len(problem.jobs)
    for cand, x in zip(cset.candidates, result.x, strict=True):
        if x > 1e-9:
            for j in cand.jobs:
                mass[j][cand.gpu_type] += float(x)
        if len(cand.jobs) == 1:  # a job the LP leaves out goes where it alone is worth most per GPU
            j, value = cand.jobs[0], (cand.gain / cand.num_gpus, cand.gpu_type)
            if alone[j] is None or value > alone[j]:  # type: ignore[operator]
                alone[j] = value
    job_type = tuple(max(m.items(), key=lambda item: (item[1], item[0]))[0] if m else
                     (alone[j][1] if alone[j] is not None else None)  # type: ignore[index]
                     for j, m in enumerate(mass))
    by_value = tuple(sorted((c for c in range(num) if result.x[c] > 1e-9), key=lambda c: (-result.x[c], c)))
    return Decomposition(float(-result.fun), job_type, by_value, time.perf_counter() - began)


def restrict(cset: CandidateSet, keep: Sequence[int]) -> CandidateSet:
    """``cset`` with only the candidates ``keep`` (ascending); slots and their conflicts stay."""
    local = {c: i for i, c in enumerate(keep)}
    by_job = tuple(tuple(local[c] for c in cands if c in local) for cands in cset.by_job)
    return CandidateSet(cset.problem, tuple(cset.candidates[c] for c in keep), cset.slots,
                        cset.slot_conflicts, by_job, cset.unplaced_completion_s)


@register
class Decomposed(Backend):
    """The decomposition as a backend (see the module docstring): the chosen candidates, the LP bound (its
    build time is the LP's), and whether the plan is exact. The hint is not used."""

    name = "decomposed"
    exact = False

    def available(self) -> bool:
        """Whether SciPy (the LP) and CP-SAT (the parts) are available."""
        import importlib.util

        return all(importlib.util.find_spec(m) is not None for m in ("scipy", "ortools"))

    def solve(self, model: RoundModel, params: SolveParams) -> BackendOutcome:
        """Decompose and solve (see the class); ``params.solver`` must be ``None`` or ``"cpsat"``."""
        cset = model.cset
        problem = cset.problem
        if problem.options.objective == "makespan":
            raise ValueError("objective: 'makespan' is not decomposed (one variable couples every job); "
                             "solve the round whole")
        if params.solver not in (None, "cpsat", "cp-sat"):
            raise ValueError(f"solver: '{params.solver}' not understood for backend decomposed; leave it out")
        level = type_level(model)
        began = time.perf_counter()
        sign = -1.0 if problem.options.minimize else 1.0
        bound = to_reported(cset, level.bound)
        # the LP rounded: its candidates by value first
        selected = greedy_selection(cset, first=level.by_value)
        parts: dict[str, CandidateSet] = {}
        minimize = problem.options.minimize
        if relative_gap(objective_of(cset, selected), bound, minimize) > problem.options.relative_gap:
            by_type: dict[str, list[int]] = defaultdict(list)
            for c, cand in enumerate(cset.candidates):
                if all(level.job_type[j] == cand.gpu_type for j in cand.jobs):
                    by_type[cand.gpu_type].append(c)
            parts = {t: restrict(cset, keep) for t, keep in sorted(by_type.items())}
            inner = get_backend("cpsat")
            part_params = SolveParams(params.time_limit_s, spent_s=params.spent_s + level.lp_s)

            def place(part: CandidateSet) -> list[int]:
                outcome = inner.solve(RoundModel(part), part_params)
                return list(outcome.selected) if outcome.selected is not None else greedy_selection(part)

            with ThreadPoolExecutor(max_workers=max(1, len(parts))) as pool:
                chosen = dict(zip(parts, pool.map(place, parts.values()), strict=True))
            union = sorted(by_type[t][i] for t, picked in chosen.items() for i in picked)
            # keeps the union (feasible) and adds what still fits
            placed = greedy_selection(cset, first=union)
            if sign * objective_of(cset, placed) > sign * objective_of(cset, selected):
                selected = placed
        gap = relative_gap(objective_of(cset, selected), bound, minimize)
        exact = gap <= 1e-9
        termination = Termination.OPTIMAL if exact else (
            Termination.GAP_LIMIT if gap <= problem.options.relative_gap else Termination.TIME_LIMIT)
        how = f"placed per GPU type ({len(parts)} part(s))" if parts else "the LP rounded greedily"
        verdict = "exact, the objective meets the LP bound" if exact else "gap measured against the LP bound"
        message = f"LP relaxation ({level.lp_s:.3f} s), {how}: {verdict}"
        return BackendOutcome(tuple(selected), termination, level.bound, level.lp_s,
                              time.perf_counter() - began, message)

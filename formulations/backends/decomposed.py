"""The ``decomposed`` backend, for large rounds: a type-level LP over interchangeable nodes, rounded, and
placed per GPU type when the rounding is not within the gap.

1. **Type level.** The round aggregated over its node classes (:mod:`~dltsched.formulations.aggregate_types`:
   nodes of one type with the same free GPUs and nobody running are one class, one column per unit, type and
   class), its LP relaxation solved by column generation with HiGHS. Its optimum bounds every plan of the
   round (it equals the round's own LP relaxation when no class merges nodes a unit is not offered), so the
   gap the plan reports is a true gap, and the plan says when it is exact (its objective meets the bound).
   Column generation stops once its bound is within a tenth of ``relative_gap`` of the restricted LP.
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
from dataclasses import dataclass, field, replace

import numpy as np

from dltsched.formulations.aggregate_types import AggregatedRound, aggregate, solve_relaxation
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

#: column generation stops once its bound is within this share of ``relative_gap`` of the restricted LP
LP_GAP_SHARE = 0.1


@dataclass(frozen=True, slots=True)
class Decomposition:
    """What the type level decided: the bound (maximisation form; ``None``: none proven in time), each job's
    type (``None``: none of its units fits any type), the candidates in decreasing LP value (those above 0),
    the LP's seconds, and how the LP was aggregated and solved (node classes and nodes, columns of the
    aggregated model and of the restricted LP at the end, restricted LPs solved, whether the LP is solved to
    its optimum, whether a class merges nodes)."""

    bound: float | None
    job_type: tuple[str | None, ...]
    by_value: tuple[int, ...]
    lp_s: float
    classes: int = 0
    nodes: int = 0
    columns: int = 0
    active: int = 0
    rounds: int = 0
    optimal: bool = True
    merged: bool = False
    aggregated: AggregatedRound | None = field(default=None, repr=False, compare=False)

    def describe(self) -> str:
        """One line: the aggregation and how far the LP went."""
        lp = ("solved" if self.optimal else "stopped near its optimum" if self.bound is not None
              else "unsolved")
        return (f"type-level LP over {self.classes} node classes of {self.nodes} nodes, {self.columns} "
                f"columns ({self.active} generated in {self.rounds} rounds, {lp}, {self.lp_s:.3f} s)")


def type_level(cset: CandidateSet | RoundModel, *, time_limit_s: float = float("inf"),
               seed: Sequence[int] = (), stop_gap: float = 0.0) -> Decomposition:
    """Solve the round's aggregated LP relaxation (see the module docstring); assign each job to a GPU type.

    Parameters
    ----------
    cset
        The round's candidates (or its model).
    time_limit_s
        Wall-clock limit of the LP.
    seed
        Candidates to start column generation with (e.g. a greedy plan's).
    stop_gap
        Stop once the bound is within this relative gap of the restricted LP (0: solve the LP).

    Returns
    -------
    Decomposition
        The bound, each job's type and the candidates by LP value.
    """
    began = time.perf_counter()
    cset = cset.cset if isinstance(cset, RoundModel) else cset
    problem = cset.problem
    agg = aggregate(cset)
    seed_cols = agg.column_of[np.asarray(seed, dtype=np.int64)] if len(seed) else None
    left = time_limit_s - (time.perf_counter() - began)  # the aggregation counts against the limit
    relax = solve_relaxation(agg, left, seed=seed_cols, stop_gap=stop_gap)
    types = problem.gpu_types()
    values = relax.values
    matrix = agg.matrix
    num_jobs = len(problem.jobs)
    entries = matrix.indices < num_jobs
    entry_col = np.repeat(np.arange(agg.num_columns), np.diff(matrix.indptr))[entries]
    entry_job = matrix.indices[entries]
    # each job's LP mass per type; a job the LP leaves out goes where it alone is worth most per GPU
    mass = np.zeros((num_jobs, len(types)))
    np.add.at(mass, (entry_job, agg.types[entry_col]), values[entry_col])
    alone = np.full((num_jobs, len(types)), -np.inf)
    single = np.bincount(entry_col, minlength=agg.num_columns)[entry_col] == 1
    np.maximum.at(alone, (entry_job[single], agg.types[entry_col[single]]),
                  (agg.gains / agg.sizes)[entry_col[single]])
    has_mass = mass.max(axis=1) > 1e-9 if num_jobs else np.zeros(0, dtype=bool)
    job_type = tuple(
        types[int(np.argmax(mass[j]))] if has_mass[j] else
        (types[int(np.argmax(alone[j]))] if np.isfinite(alone[j]).any() else None) for j in range(num_jobs))
    used = np.flatnonzero(values > 1e-9)
    by_value = tuple(c for col in used[np.lexsort((used, -values[used]))].tolist() for c in agg.members(col))
    return Decomposition(relax.bound, job_type, by_value, time.perf_counter() - began, len(agg.classes),
                         len(problem.nodes), agg.num_columns, relax.active, relax.rounds, relax.optimal,
                         agg.merged, agg)


def round_greedily(cset: CandidateSet, level: Decomposition) -> list[int]:
    """The LP rounded: :func:`~dltsched.formulations.backends.greedy.greedy_selection` with the LP's
    candidates first (``level.by_value``), the same selection computed on fewer candidates. The LP's
    candidates are taken first on their own; of the rest only those that could still be taken go to the
    second pass (none of their jobs placed, no more GPUs than their type has left: both only shrink as the
    greedy goes on)."""
    agg = level.aggregated
    if agg is None:
        return list(greedy_selection(cset, first=level.by_value))
    first = list(dict.fromkeys(level.by_value))
    ascending = sorted(first)
    rank = {c: i for i, c in enumerate(ascending)}
    picked = greedy_selection(restrict(cset, ascending), first=[rank[c] for c in first])
    taken = [ascending[i] for i in picked]
    problem = cset.problem
    num_jobs = len(problem.jobs)
    used = np.zeros(num_jobs, dtype=bool)
    type_index = {t: i for i, t in enumerate(problem.gpu_types())}
    left = np.zeros(len(type_index))
    for node in problem.nodes:
        left[type_index[node.gpu_type]] += node.usable_gpus
    for c in taken:
        used[list(cset.candidates[c].jobs)] = True
        col = agg.column_of[c]
        left[agg.types[col]] -= agg.sizes[col]
    matrix = agg.matrix
    entries = matrix.indices < num_jobs
    entry_col = np.repeat(np.arange(agg.num_columns), np.diff(matrix.indptr))[entries]
    blocked = np.bincount(entry_col, weights=used[matrix.indices[entries]], minlength=agg.num_columns) > 0
    open_col = ~blocked & (agg.sizes <= left[agg.types]) & (agg.gains >= 0)
    eligible = open_col[agg.column_of]
    eligible[first] = False
    eligible[taken] = True
    keep = np.flatnonzero(eligible).tolist()
    local = {c: i for i, c in enumerate(keep)}
    return [keep[i] for i in greedy_selection(restrict(cset, keep), first=[local[c] for c in taken])]


def restrict(cset: CandidateSet, keep: Sequence[int]) -> CandidateSet:
    """``cset`` with only the candidates ``keep`` (ascending); slots and their conflicts stay."""
    local = {c: i for i, c in enumerate(keep)}
    by_job = tuple(tuple(local[c] for c in cands if c in local) for cands in cset.by_job)
    return replace(cset, candidates=tuple(cset.candidates[c] for c in keep), by_job=by_job)


@register
class Decomposed(Backend):
    """The decomposition as a backend (see the module docstring): the chosen candidates, the LP bound (its
    build time is the type level's), and whether the plan is exact. The hint (the round's starting selection)
    seeds the LP's columns and is the plan when the rounding is worse."""

    name = "decomposed"
    exact = False

    def available(self) -> bool:
        """Whether HiGHS (the LP), SciPy (its matrix) and CP-SAT (the parts) are available."""
        import importlib.util

        return all(importlib.util.find_spec(m) is not None for m in ("highspy", "scipy", "ortools"))

    def solve(self, model: RoundModel, params: SolveParams) -> BackendOutcome:
        """Decompose and solve (see the class); ``params.solver`` must be ``None`` or ``"cpsat"``."""
        cset = model.cset
        problem = cset.problem
        if problem.options.objective == "makespan":
            raise ValueError("objective: 'makespan' is not decomposed (one variable couples every job); "
                             "solve the round whole")
        if params.solver not in (None, "cpsat", "cp-sat"):
            raise ValueError(f"solver: '{params.solver}' not understood for backend decomposed; leave it out")
        began = time.perf_counter()
        minimize = problem.options.minimize
        level = type_level(model, time_limit_s=max(0.0, params.time_limit_s - params.spent_s),
                           seed=params.hint, stop_gap=LP_GAP_SHARE * problem.options.relative_gap)
        sign = -1.0 if minimize else 1.0
        bound = None if level.bound is None else to_reported(cset, level.bound)
        # the LP rounded: its candidates by value first
        selected = round_greedily(cset, level)
        if params.hint and sign * objective_of(cset, params.hint) > sign * objective_of(cset, selected):
            selected = list(params.hint)
        parts: dict[str, CandidateSet] = {}
        gap = float("inf") if bound is None else relative_gap(objective_of(cset, selected), bound, minimize)
        left = params.time_limit_s - params.spent_s - (time.perf_counter() - began)
        if gap > problem.options.relative_gap and left > 0:
            by_type: dict[str, list[int]] = defaultdict(list)
            for c, cand in enumerate(cset.candidates):
                if all(level.job_type[j] == cand.gpu_type for j in cand.jobs):
                    by_type[cand.gpu_type].append(c)
            parts = {t: restrict(cset, keep) for t, keep in sorted(by_type.items())}
            inner = get_backend("cpsat")
            part_params = SolveParams(params.time_limit_s,
                                      spent_s=params.time_limit_s - left + (time.perf_counter() - began))

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
        gap = float("inf") if bound is None else relative_gap(objective_of(cset, selected), bound, minimize)
        exact = gap <= 1e-9
        termination = Termination.OPTIMAL if exact else (
            Termination.GAP_LIMIT if gap <= problem.options.relative_gap else Termination.TIME_LIMIT)
        how = f"placed per GPU type ({len(parts)} part(s))" if parts else "the LP rounded greedily"
        verdict = ("exact, the objective meets the LP bound" if exact else "no bound proven in time"
                   if bound is None else "gap measured against the LP bound")
        relaxation = "the round's own" if not level.merged else "aggregated, at least the round's"
        message = f"LP relaxation ({relaxation}; {level.describe()}), {how}: {verdict}"
        bound = level.bound
        if exact and bound is not None and cset.problem.options.objective != "makespan":
            # the objective meets the bound: reported as met, not off by the sums' rounding
            bound = sum(cset.candidates[c].gain for c in selected)
        return BackendOutcome(tuple(selected), termination, bound, level.lp_s,
                              time.perf_counter() - began - level.lp_s, message)

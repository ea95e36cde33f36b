"""CP-SAT translation of the round model: one Boolean per candidate, integer-scaled coefficients.

Coefficients are scaled to integers (the largest to about 1e7); the objective reported to users is
re-computed in floating point from the chosen candidates, the bound is scaled back.

Determinism (``RoundOptions.deterministic``, the default): CP-SAT with several workers, or stopped by a
wall-clock limit, returns whatever the search had found when the clock ran out, so two runs of the same
round can differ. Deterministic solves use one worker and stop on CP-SAT's *deterministic time* (a count of
work, the same on every run): ``time_limit_s`` seconds buy :data:`DETERMINISTIC_TIME_PER_S` units each. A
wall-clock cap of :data:`WALL_CAP_FACTOR` x ``time_limit_s``, at least :data:`WALL_CAP_LEAST_S`, only guards
against a machine far slower than that. The cap is the solve's own: the wall seconds spent building the
round are not taken from it (a loaded machine stretches them, and a cap they shortened stopped solves that
another run of the same simulation finished). A round stopped by it is not reproducible and says so in its
message. ``deterministic=False`` gives
``num_workers`` workers under a wall-clock limit. How these figures were chosen: ``docs/backends.md``.

Search settings (:data:`SEARCH_PARAMETERS`, every solve): the full LP relaxation with cuts at the root
(``linearization_level=2``), no probing in presolve, no merging of large at-most-one/linear overlaps
(``find_big_linear_overlap``) and one presolve pass. On these set-packing models with knapsack rows the LP
bound is nearly tight; the overlap merge rewrote the rows into a weaker relaxation and probing cost more than
it found. Measured on the 1,000-job / 1,024-GPU round of ``bench solve`` (gap limit 1%): CP-SAT's defaults
spent 1.76 deterministic units and stopped 0.50% below the proven optimum; these settings spend 0.06 units
and stop 0.09% below it (``docs/round-speed.md``). Rounds of fewer than :data:`FULL_LP_FROM_JOBS` jobs (the
optimizing policy's working sets) keep CP-SAT's own linearization level: there the full LP bought no speed
and, on held-out Philly windows, moved the average JCT by more than 1% (``docs/speed.md``).

LP first (:attr:`CpSat.lp_first`, not with the makespan objective): the round's LP relaxation is solved with
HiGHS (:mod:`~dltsched.formulations.backends.relaxation`), giving a proven bound ``U``, reduced costs and a
start: the better of the round's starting selection and the LP solution rounded greedily. A start within the
gap of ``U`` is the plan, with no search. Otherwise every candidate that the reduced costs rule out of any
selection as good as the start is left out (the optimum stays: exact), and CP-SAT searches the rest from the
start with the full LP relaxation (at CP-SAT's own linearization level its LP left out the implications its
presolve derived on such restricted models, and the searches stalled). The plan's bound is the smaller of
``U`` and CP-SAT's. On the optimizing policy's rounds this takes about 40% off the search CPU, the LP
included (``docs/round-search.md``). The LP keeps to the solve's wall-clock limit (the deterministic mode's
cap, or what is left of the round's limit); out of time, it gives nothing and CP-SAT searches the whole model.

Rounds of :data:`DUAL_SIMPLEX_FROM_JOBS` jobs or more solve the LP with the dual simplex method (the primal
one, right for the policy's rounds, took three times as long on a thousand jobs), and when the rounded LP is
not within the gap, CP-SAT first searches the LP's *neighbourhood* (:meth:`Relaxation.neighbourhood
<dltsched.formulations.backends.relaxation.Relaxation.neighbourhood>`: the candidates the LP or the start
uses, and those whose reduced cost falls short by at most :data:`NEIGHBOURHOOD_SHARE` of the start's
distance to ``U``), with :data:`NEIGHBOURHOOD_BUDGET` of the round's time. What it finds is the start of
the rest; when it is within the gap of ``U`` it is the plan, proven by ``U``. Without the LP first, CP-SAT's
root LP on rounds of a thousand jobs and some 20,000 candidates took 3-6 s whenever the cluster was a little
short of GPUs (``docs/round-speed.md``).

On the whole model, the hint (the round's starting selection) is handed to CP-SAT as a solution hint when
:attr:`CpSat.use_hint` is set; the registered backend leaves it unset, as it searches better without one
(``docs/backends.md``). With the LP first, the start (that hint or the rounded LP solution) is the
restricted search's hint. ``solve_problem`` keeps its starting selection as the plan when CP-SAT returns
nothing in time.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar

from dltsched.formulations.backends.base import (
    Backend,
    BackendOutcome,
    SolveParams,
    Stop,
    legacy_solve,
    register,
    remaining_s,
    termination,
)
from dltsched.formulations.backends.relaxation import lp_relaxation
from dltsched.formulations.model import RoundModel

if TYPE_CHECKING:
    from ortools.sat.python.cp_model_helper import CpModelProto

_TARGET = 1e7
#: deterministic-time units CP-SAT may spend per second of ``time_limit_s`` in deterministic mode
DETERMINISTIC_TIME_PER_S = 0.2
#: CP-SAT's own gap limit as a fraction of the requested one: CP-SAT measures its gap on the integer-scaled
#: objective, the gap reported (and promised) is on the real objective re-computed from the chosen candidates
GAP_MARGIN = 0.9
#: in deterministic mode, the wall-clock cap is at least this many seconds
WALL_CAP_LEAST_S = 60.0
#: in deterministic mode, the wall-clock cap is this many times ``time_limit_s``
WALL_CAP_FACTOR = 10.0
#: CP-SAT parameters set on every solve (see the module docstring); a subclass may change them
SEARCH_PARAMETERS: dict[str, int | bool] = {"linearization_level": 2, "cp_model_probing_level": 0,
                                           "find_big_linear_overlap": False, "max_presolve_iterations": 1}
#: rounds of fewer jobs than this keep CP-SAT's own ``linearization_level`` (see the module docstring)
FULL_LP_FROM_JOBS = 512
#: rounds of this many jobs or more solve their LP relaxation with the dual simplex method and, when its
#: rounding is not within the gap, search its neighbourhood first (see the module docstring)
DUAL_SIMPLEX_FROM_JOBS = 512
#: the neighbourhood of a large round's LP: the candidates whose reduced cost is within this share of the
#: rounding's distance to the bound (besides those the LP or the start uses)
NEIGHBOURHOOD_SHARE = 0.02
#: the share of the round's time limit (its deterministic budget, or the wall-clock time left) that the
#: neighbourhood's search may spend
NEIGHBOURHOOD_BUDGET = 0.5
#: the least wall-clock time a solve is given (a round whose building took its whole limit)
_LEAST_S = 0.01


@register
class CpSat(Backend):
    """OR-Tools CP-SAT (see the module docstring)."""

    name = "cpsat"
    exact = True
    work_limited = True
    #: hand the hint to CP-SAT as a solution hint
    use_hint = False
    #: leave the model's dominated candidates (:attr:`RoundModel.dominated`) out of the written model
    leave_out_dominated = True
    #: solve the LP relaxation first, prove the round with it or fix columns by reduced cost, then search
    #: (see the module docstring); not with :attr:`use_hint`
    lp_first = True
    #: CP-SAT parameters set on every solve (default :data:`SEARCH_PARAMETERS`)
    search_parameters: ClassVar[dict[str, int | bool]] = SEARCH_PARAMETERS

    def available(self) -> bool:
        """Whether OR-Tools is installed."""
        return importlib.util.find_spec("ortools") is not None

    def solve(self, model: RoundModel, params: SolveParams) -> BackendOutcome:
        """Solve with CP-SAT (``params.solver`` must be ``None`` or ``"cpsat"``). The wall-clock limit
        (non-deterministic) or cap (deterministic) is what is left of the round's after ``params.spent_s``
        and the model's building; the deterministic budget is whole. With :attr:`lp_first`, the LP
        relaxation comes first (see the module docstring)."""
        if params.solver not in (None, "cpsat", "cp-sat"):
            raise ValueError(f"solver: '{params.solver}' not understood for backend cpsat; leave it out")
        start = time.perf_counter()
        large = len(model.cset.problem.jobs) >= DUAL_SIMPLEX_FROM_JOBS
        relaxation = None
        if self.lp_first and not self.use_hint:  # the LP within the solve's wall-clock limit or cap
            relaxation = lp_relaxation(model, dual=large, time_limit_s=_wall_limit_s(model, params))
        if relaxation is None:
            columns = None
            if self.leave_out_dominated and not self.use_hint and model.dominated:
                columns = [c for c in range(model.num_candidates) if c not in model.dominated]
            return self._search(model, columns, params.hint if self.use_hint else (), params, start)
        hint = params.hint if params.hint and is_feasible(model, params.hint) else ()
        selected = relaxation.rounded(model, hint)
        incumbent = sum(model.gains[c] for c in selected)
        bound = relaxation.bound
        dominated = model.dominated if self.leave_out_dominated else frozenset()
        proved = "proved by the LP relaxation"
        if large and not self._within_gap(model, incumbent, bound):  # the LP's neighbourhood first
            near = relaxation.neighbourhood(incumbent, selected, NEIGHBOURHOOD_SHARE)
            starting = set(selected)
            near = [c for c in near if c not in dominated or c in starting]
            spent = replace(params, spent_s=params.spent_s + time.perf_counter() - start)
            found = self._search(model, near, selected, _share_of(spent, NEIGHBOURHOOD_BUDGET),
                                 time.perf_counter(), full_lp=True).selected
            if found is not None and (value := sum(model.gains[c] for c in found)) > incumbent:
                selected, incumbent = list(found), value
                proved = (f"the LP relaxation's neighbourhood searched ({len(near)} candidates), "
                          "proved by the LP bound")
        if self._within_gap(model, incumbent, bound):
            ended = termination(Stop.CONVERGED, incumbent, bound, tolerance=0.0, relative=1e-9)
            return BackendOutcome(tuple(sorted(selected)), ended, bound, 0.0, time.perf_counter() - start,
                                  proved)
        chosen = set(selected)
        kept = relaxation.kept_columns(incumbent, selected)
        columns = [c for c in kept if c not in dominated or c in chosen]
        relaxed_s = time.perf_counter() - start
        searched = replace(params, spent_s=params.spent_s + relaxed_s)  # the LP's seconds leave the clock
        outcome = self._search(model, columns, selected, searched, time.perf_counter(), full_lp=True)
        outcome = replace(outcome, solve_time_s=outcome.solve_time_s + relaxed_s)
        if outcome.selected is None:  # nothing in time: the start, which the LP bound still bounds
            return replace(outcome, selected=tuple(sorted(selected)), bound=bound)
        return replace(outcome, bound=bound if outcome.bound is None else min(bound, outcome.bound))

    @staticmethod
    def _within_gap(model: RoundModel, incumbent: float, bound: float) -> bool:
        """Whether a selection worth ``incumbent`` is within the round's gap of the bound ``bound``."""
        return bool(bound - incumbent <= model.options.relative_gap * GAP_MARGIN * abs(bound))

    def _search(self, model: RoundModel, columns: list[int] | None, hint: Sequence[int], params: SolveParams,
                start: float, *, full_lp: bool = False) -> BackendOutcome:
        """CP-SAT's search over ``model``'s ``columns`` (``None``: all) from the complete feasible selection
        ``hint`` (may be empty); ``full_lp``: the full LP relaxation whatever the round's size."""
        from ortools.sat.python import cp_model_helper as cmh

        full = model
        if columns is not None:
            model = model.restricted(columns)
            position = {c: i for i, c in enumerate(columns)}
            hint = [position[c] for c in hint]
        scale = _scale(model)
        proto = model_proto(model, hint, scale=scale)
        build_s = time.perf_counter() - start
        parameters = cmh.SatParameters()
        options = model.options
        det_budget = float(params.time_limit_s) * DETERMINISTIC_TIME_PER_S
        parameters.max_time_in_seconds = _wall_limit_s(model, params, build_s)
        if options.deterministic:
            parameters.num_workers = 1
            parameters.max_deterministic_time = det_budget
        else:
            parameters.num_workers = options.num_workers
        parameters.relative_gap_limit = options.relative_gap * GAP_MARGIN
        small = len(full.cset.problem.jobs) < FULL_LP_FROM_JOBS and not full_lp
        for name, value in self.search_parameters.items():
            if not (small and name == "linearization_level"):
                setattr(parameters, name, value)
        # the solver's own wrapper, as ``CpSolver.solve`` calls it, without the Python model object around
        # the proto (whose construction costs as much as a small round's whole model)
        wrapper = cmh.SolveWrapper()
        wrapper.set_parameters(parameters)
        response = wrapper.solve(proto)  # type: ignore[no-untyped-call]
        status = response.status
        solve_s = response.wall_time
        capped = (options.deterministic and status not in (cmh.OPTIMAL, cmh.INFEASIBLE)
                  and response.deterministic_time < det_budget)
        note = ("stopped by the wall-clock cap, not the deterministic budget: not reproducible" if capped
                else "")
        stop = {cmh.OPTIMAL: Stop.CONVERGED, cmh.FEASIBLE: Stop.TIME_LIMIT, cmh.UNKNOWN: Stop.TIME_LIMIT,
                cmh.INFEASIBLE: Stop.INFEASIBLE}.get(status, Stop.OTHER)
        if status in (cmh.OPTIMAL, cmh.FEASIBLE):
            values = response.solution
            selected = tuple(c for c, v in zip(range(model.num_candidates), values, strict=False) if v)
            if columns is not None:
                selected = tuple(columns[c] for c in selected)
            ended = termination(stop, response.objective_value, response.best_objective_bound, tolerance=0.5,
                                relative=0.0)
            bound = response.best_objective_bound / scale
            return BackendOutcome(selected, ended, bound, build_s, solve_s, note)
        return BackendOutcome(None, termination(stop), None, build_s, solve_s,
                              "; ".join(filter(None, (cmh.CpSolverStatus(status).name, note))))


def _wall_limit_s(model: RoundModel, params: SolveParams, build_s: float = 0.0) -> float:
    """The wall-clock seconds a solve may take: the deterministic mode's cap, or what is left of the round's
    limit after ``params.spent_s`` and ``build_s`` (see the module docstring)."""
    if model.options.deterministic:
        return float(max(WALL_CAP_LEAST_S, float(params.time_limit_s) * WALL_CAP_FACTOR))
    return float(remaining_s(params, build_s, _LEAST_S))


def _share_of(params: SolveParams, share: float) -> SolveParams:
    """``params`` with ``share`` of what is left of its time: of the wall-clock time left after ``spent_s``,
    and so of the deterministic budget, which ``time_limit_s`` gives whole."""
    left = max(0.0, float(params.time_limit_s) - params.spent_s)
    return replace(params, time_limit_s=params.spent_s + share * left)


def is_feasible(model: RoundModel, selected: Sequence[int]) -> bool:
    """Whether the selection ``selected`` keeps every row of ``model`` (the makespan rows aside)."""
    chosen = set(selected)
    for row in model.rows:
        used = sum(k for c, k in zip(row.cols, row.coefs, strict=True) if c in chosen)
        if row.upper is not None and used > row.upper + 1e-9:
            return False
    return True


#: the former module-level entry point, kept for a release
solve = legacy_solve("cpsat")


def _scale(model: RoundModel) -> float:
    cset = model.cset
    largest = max(map(abs, model.gains), default=0.0)
    if model.makespan_column is not None and cset.unplaced_completion_s:
        largest = max(largest, *cset.unplaced_completion_s)
    return _TARGET / max(largest, 1e-12)


_LOWEST, _HIGHEST = -(2**63), 2**63 - 1

#: 2**k Boolean variables per k, parsed once: a model's variables are merged from them (parsing one
#: ``variables`` entry per candidate cost as much as the rest of a small round's model)
_BOOLEAN_COPIES: list[CpModelProto] = []


def boolean_variables(num: int) -> CpModelProto:
    """A fresh ``CpModelProto`` holding ``num`` Boolean variables (domain [0, 1]) and nothing else."""
    from ortools.sat.python import cp_model_helper as cmh

    if not _BOOLEAN_COPIES:
        one = cmh.CpModelProto()
        one.parse_text_format("variables { domain: [0, 1] }")
        _BOOLEAN_COPIES.append(one)
    proto = cmh.CpModelProto()
    k = 0
    while num:
        while len(_BOOLEAN_COPIES) <= k:
            twice = cmh.CpModelProto()
            twice.copy_from(_BOOLEAN_COPIES[-1])
            twice.merge_from(_BOOLEAN_COPIES[-1])
            _BOOLEAN_COPIES.append(twice)
        if num & 1:
            proto.merge_from(_BOOLEAN_COPIES[k])
        num >>= 1
        k += 1
    return proto


def model_proto(model: RoundModel, hint: Sequence[int] = (), *, scale: float | None = None) -> CpModelProto:
    """The CP-SAT model of ``model`` (a ``CpModelProto``): what :func:`model_text` writes, its variables
    merged from parsed copies and the rest parsed from text by CP-SAT in C++."""
    makespan = model.makespan_column
    proto = boolean_variables(model.num_candidates)
    if makespan is not None:  # the makespan column comes after the candidates' columns
        upper = round(model.makespan_upper_s * (_scale(model) if scale is None else scale)) + 1
        proto.merge_text_format(f"variables {{ domain: [0, {upper}] }}")
    proto.merge_text_format(_constraints_text(model, hint, scale))
    return proto


def _listed(values: Sequence[int]) -> str:
    """Integers in the text format's list syntax (shorter to write and parse than one field per value)."""
    return str(values if type(values) is list else list(values))


def _linear(cols: Sequence[int], coefs: Sequence[int], lower: int, upper: int) -> str:
    return (f"constraints {{ linear {{ vars: {_listed(cols)} coeffs: {_listed(coefs)} "
            f"domain: [{lower}, {upper}] }} }}")


def _at_most_one(cols: Sequence[int]) -> str:
    return f"constraints {{ at_most_one {{ literals: {_listed(cols)} }} }}"


def model_text(model: RoundModel, hint: Sequence[int] = ()) -> str:
    """The CP-SAT model of ``model`` in protobuf text format, written from its rows (redundant ones
    included) in one pass and parsed by CP-SAT in C++ (a Python call per variable and term costs several
    times more on large rounds). Coefficients are integer-scaled; the objective maximises the gains (minus
    the makespan column, the last one). ``hint``: candidates set to 1 in a complete solution hint."""
    lines = ["variables { domain: [0, 1] }\n" * model.num_candidates]
    if model.makespan_column is not None:
        lines.append(f"variables {{ domain: [0, {round(model.makespan_upper_s * _scale(model)) + 1}] }}\n")
    lines.append(_constraints_text(model, hint))
    return "".join(lines)


def _constraints_text(model: RoundModel, hint: Sequence[int] = (), scale: float | None = None) -> str:
    """Everything of :func:`model_text` but the variables."""
    num = model.num_candidates
    scale = _scale(model) if scale is None else scale
    lines = []
    for row in model.rows:
        if row.at_most_one:
            lines.append(_at_most_one(row.cols))
        else:
            lines.append(_linear(row.cols, list(map(round, row.coefs)), _LOWEST, round(row.upper or 0)))
    cols = [c for c, gain in enumerate(model.gains) if gain]
    coefs = [-round(model.gains[c] * scale) for c in cols]  # maximise: CP-SAT minimises -gain
    makespan = model.makespan_column
    if makespan is not None:
        for job_row in model.makespan_rows:  # M + sum saved_c x_c >= wait_j, each time rounded on its own
            wait = round(job_row.wait_s * scale)
            saved = [wait - round(t * scale) for t in job_row.finish_s]
            lines.append(_linear([*job_row.cols, makespan], [*saved, 1], wait, _HIGHEST))
        cols.append(makespan)
        coefs.append(1)
    if cols:
        lines.append(f"objective {{ vars: {_listed(cols)} scaling_factor: -1 coeffs: {_listed(coefs)} }}")
    if hint:
        chosen = set(hint)
        lines.append(f"solution_hint {{ vars: {_listed(range(num))} "
                     f"values: {_listed([1 if c in chosen else 0 for c in range(num)])} }}")
    return "\n".join(lines)


def __getattr__(name: str) -> object:
    """The former name of :data:`DUAL_SIMPLEX_FROM_JOBS`, kept for a release."""
    if name == "LP_FIRST_BELOW_JOBS":
        import warnings

        warnings.warn("LP_FIRST_BELOW_JOBS is deprecated: every round solves its LP relaxation first now; "
                      "DUAL_SIMPLEX_FROM_JOBS says from how many jobs with the dual simplex method",
                      DeprecationWarning, stacklevel=2)
        return DUAL_SIMPLEX_FROM_JOBS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

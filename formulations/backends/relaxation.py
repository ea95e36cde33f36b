"""The round's LP relaxation, solved first: a proven bound, a rounded start, and the columns it rules out.

Every row of the round model (:mod:`~dltsched.formulations.model`, without the makespan objective) is
``sum a_rc x_c <= b_r`` with ``a, b >= 0``. For any row multipliers ``y >= 0`` and any 0/1 selection ``x``,

    gain . x  =  y . A x + d . x  <=  y . b + sum_c max(0, d_c) x_c  <=  U,   d = gain - y A,
    U = y . b + sum_c max(0, d_c),

so ``U`` bounds the round's optimum, and a selection holding column ``c`` with ``d_c < 0`` is worth at most
``U + d_c``. With ``y`` the LP's row duals (HiGHS, one thread: the same answer every run) ``U`` is the LP
optimum; the bound is re-computed here from ``y`` alone, clipped to ``y >= 0``, so it holds whatever the
LP solver's tolerances. Given a feasible selection worth ``incumbent``, every column with
``U + d_c < incumbent`` is in no selection worth as much, hence in no optimum: the model restricted to the
other columns has the same optimum, and any bound proved on it bounds the full round (reduced-cost fixing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dltsched.formulations.model import RoundModel, row_arrays

#: a column is ruled out only when it falls short of the incumbent by more than this share of it (floating
#: point in ``U`` and ``d``: their sums are exact to about 1e-13 of their size)
FIXING_MARGIN = 1e-9


@dataclass(frozen=True, slots=True)
class Relaxation:
    """What the LP relaxation of a round says.

    Attributes
    ----------
    bound
        ``U`` of the module docstring: an upper bound on the round's optimum.
    reduced
        ``d_c`` per candidate column: a selection holding ``c`` is worth at most ``bound + min(0, d_c)``.
    values
        The LP's optimal ``x_c`` (between 0 and 1).
    """

    bound: float
    reduced: np.ndarray
    values: np.ndarray

    def rounded(self, model: RoundModel, hint: Sequence[int] = ()) -> list[int]:
        """A feasible selection: the better of ``hint`` (a feasible selection, may be empty) and the
        candidates taken greedily in the order of their LP values (ties: gain), then by gain per GPU."""
        from dltsched.formulations.backends.greedy import greedy_selection  # registers the greedy backend

        gains = np.asarray(model.gains)
        order = [c for c in np.lexsort((-gains, -self.values)).tolist() if self.values[c] > 1e-6]
        rounded: list[int] = greedy_selection(model.cset, first=order)
        if hint and float(gains[list(hint)].sum()) >= float(gains[rounded].sum()):
            return list(hint)
        return rounded

    def neighbourhood(self, incumbent: float, selected: Sequence[int], share: float) -> list[int]:
        """The columns (ascending) near the LP optimum: those the LP uses (value above 0), those of
        ``selected`` (a feasible selection worth ``incumbent``), and those whose reduced cost falls short by
        at most ``share`` of the distance from ``incumbent`` to the bound. A heuristic neighbourhood: it may
        leave out every optimum (unlike :meth:`kept_columns`); what is found in it is a start."""
        room = share * max(0.0, self.bound - incumbent)
        near = np.flatnonzero((self.values > 1e-6) | (self.reduced >= -room)).tolist()
        return sorted({*near, *selected})

    def kept_columns(self, incumbent: float, selected: Sequence[int]) -> list[int]:
        """The columns (ascending) that may be in a selection worth at least ``incumbent``, the value of the
        feasible selection ``selected`` (always kept)."""
        room = self.bound - incumbent + FIXING_MARGIN * max(1.0, abs(incumbent))
        kept: list[int] = np.flatnonzero(self.reduced >= -room).tolist()
        return sorted({*kept, *selected})


def lp_relaxation(model: RoundModel, *, dual: bool = False, time_limit_s: float | None = None
                  ) -> Relaxation | None:
    """Solve the LP relaxation of ``model`` (rows that cannot bind left out) with HiGHS on one thread, by the
    primal simplex method or (``dual``) the dual one, within ``time_limit_s`` wall-clock seconds (``None``:
    no limit); ``None`` with the makespan objective (its rows are not of the form above) or when HiGHS finds
    no optimum in time."""
    import highspy

    if model.makespan_column is not None:
        return None
    rows = model.linear_rows()
    if any(r.lower is not None or r.upper is None for r in rows):
        return None
    num = model.num_candidates
    starts, sizes, index, value = row_arrays(rows)
    upper = np.fromiter((r.upper for r in rows), dtype=np.float64, count=len(rows))
    if (upper < 0).any() or (value < 0).any():
        return None
    gains = np.asarray(model.gains, dtype=np.float64)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = num, len(rows)
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = gains, np.zeros(num), np.ones(num)
    lp.row_lower_, lp.row_upper_ = np.full(len(rows), -np.inf), upper
    matrix = lp.a_matrix_
    matrix.format_ = highspy.MatrixFormat.kRowwise
    matrix.num_col_, matrix.num_row_ = num, len(rows)
    matrix.start_, matrix.index_, matrix.value_ = starts, index, value
    lp.sense_ = highspy.ObjSense.kMaximize
    engine = _quiet_highs()
    engine.setOptionValue("output_flag", False)
    engine.setOptionValue("threads", 1)
    engine.setOptionValue("random_seed", 0)
    if time_limit_s is not None:
        engine.setOptionValue("time_limit", max(0.0, float(time_limit_s)))
    # no presolve; primal simplex from x = 0 (feasible: b >= 0) on the policy's rounds: half the time of
    # HiGHS's defaults there; ``dual`` (rounds of a thousand jobs): a third of the primal method's time there
    engine.setOptionValue("presolve", "off")
    engine.setOptionValue("simplex_strategy", 1 if dual else 4)
    engine.passModel(lp)
    engine.run()
    if engine.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    solution = engine.getSolution()
    duals = np.asarray(solution.row_dual, dtype=np.float64)
    tried = []
    for y in (np.maximum(duals, 0.0), np.maximum(-duals, 0.0)):  # whichever sign convention HiGHS used
        reduced = gains - np.bincount(index, weights=np.repeat(y, sizes) * value, minlength=num)
        tried.append((float(y @ upper + np.maximum(reduced, 0.0).sum()), reduced))
    bound, reduced = min(tried, key=lambda pair: pair[0])
    return Relaxation(bound, reduced, np.asarray(solution.col_value, dtype=np.float64))


def _quiet_highs() -> Any:
    """A HiGHS engine that writes nothing: highspy's ``Highs`` prints a banner to stdout when first made
    (which would corrupt a command's JSON output); its base class does not."""
    from highspy import _core

    maker = getattr(_core, "_Highs", None)
    if maker is None:  # pragma: no cover - another highspy layout
        import highspy

        maker = highspy.Highs
    return maker()

"""The round model of a candidate set: columns, rows and objective, stated once and read by every backend.

Columns: candidate ``c`` is column ``c`` (0 or 1); with the ``makespan`` objective one more column ``M``
(the last, at least 0). Objective: maximise ``sum gain_c x_c`` (``- M`` with ``makespan``).

Rows, in this order:

1. at most one candidate per job;
2. usable GPUs per node (multi-GPU units and kept slots, where the candidates could exceed them), per
   aggregated node class (its ``class`` candidates, where they could exceed its GPUs) and per GPU type
   (every candidate; a row the candidates cannot exceed is marked ``redundant``);
3. a slot kept by at most one unit; overlapping slots not both kept;
4. with ``makespan``: ``M + sum_c (wait_j - finish_jc) x_c >= wait_j`` per job ``j`` (a job left out
   finishes at ``wait_j``: one round later, then alone), kept apart as :class:`MakespanRow` so that a
   backend scaling to integers rounds the times themselves.

A backend translates these rows; it states no constraint of its own. The rows are built on first use, so a
backend that never reads them (the greedy heuristic) never pays for them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from itertools import chain
from operator import attrgetter
from typing import Any

from dltsched.formulations.candidates import (
    CandidateKind,
    CandidateSet,
    member_alone_as_good,
    node_classes_of,
)
from dltsched.formulations.problem import RoundOptions

#: the kinds compared by identity in the loops over candidates
_NODE, _STAY, _CLASS = CandidateKind.NODE, CandidateKind.STAY, CandidateKind.CLASS


@dataclass(frozen=True, slots=True)
class Row:
    """``lower <= sum coefs[i] x[cols[i]] <= upper``.

    Attributes
    ----------
    cols
        The columns of the row's terms.
    coefs
        Their coefficients.
    lower, upper
        The bounds; ``None``: none on that side.
    at_most_one
        Every coefficient is 1 and ``upper`` is 1 (a set-packing row).
    redundant
        The candidates cannot violate the row; a backend may leave it out.
    """

    cols: tuple[int, ...]
    coefs: tuple[float, ...]
    lower: float | None
    upper: float | None
    at_most_one: bool = False
    redundant: bool = False


@dataclass(frozen=True, slots=True)
class MakespanRow:
    """``M + sum_c (wait_s - finish_s[c]) x_c >= wait_s`` for one job: ``M`` is at least its completion.

    Attributes
    ----------
    job
        The job's index in the round.
    cols
        The job's candidates.
    finish_s
        When the job finishes on each of them, predicted.
    wait_s
        When it finishes if left out.
    """

    job: int
    cols: tuple[int, ...]
    finish_s: tuple[float, ...]
    wait_s: float

    def as_row(self, makespan_column: int) -> Row:
        """The row over the candidates and the makespan column, with floating-point coefficients."""
        saved = tuple(self.wait_s - t for t in self.finish_s)
        return Row((*self.cols, makespan_column), (*saved, 1.0), self.wait_s, None)


@dataclass(frozen=True)
class RoundModel:
    """The model of one round (see the module docstring), built from its candidate set.

    Attributes
    ----------
    cset
        The candidate set; candidate ``c`` is column ``c``.
    """

    cset: CandidateSet

    @property
    def options(self) -> RoundOptions:
        """The round's options (objective, gap, time limit, determinism, workers)."""
        return self.cset.problem.options

    @property
    def num_candidates(self) -> int:
        """The number of 0/1 columns."""
        return len(self.cset.candidates)

    @property
    def makespan_column(self) -> int | None:
        """The column ``M`` (the last) with the ``makespan`` objective, else ``None``."""
        return self.num_candidates if self.options.objective == "makespan" else None

    @property
    def num_columns(self) -> int:
        """Candidates plus the makespan column, if any."""
        return self.num_candidates + (self.makespan_column is not None)

    @cached_property
    def gains(self) -> tuple[float, ...]:
        """The objective coefficient of each candidate (maximised; ``M``, if any, has -1)."""
        return tuple(map(attrgetter("gain"), self.cset.candidates))

    @cached_property
    def rows(self) -> tuple[Row, ...]:
        """Rows 1 to 3 of the module docstring (redundant ones included), in that order."""
        cset = self.cset
        rows = [Row(cands, (1.0,) * len(cands), None, 1.0, True) for cands in cset.by_job if len(cands) > 1]
        per_node, per_type = capacity_rows(cset)
        node_limit, type_limit = capacity_limits(cset)
        for n, terms in per_node.items():
            cols, used = zip(*terms, strict=True)
            if sum(used) > node_limit[n]:
                rows.append(Row(cols, tuple(map(float, used)), None, float(node_limit[n])))
        class_rows = class_capacity_rows(cset)
        classes = node_classes_of(cset) if class_rows else ()
        for k, terms in class_rows.items():
            cols, used = zip(*terms, strict=True)
            if sum(used) > classes[k].capacity:
                rows.append(Row(cols, tuple(map(float, used)), None, float(classes[k].capacity)))
        for gpu_type, terms in per_type.items():
            limit = type_limit[gpu_type]
            cols, used = zip(*terms, strict=True)
            rows.append(Row(cols, tuple(map(float, used)), None, float(limit), redundant=sum(used) <= limit))
        stays = stays_by_slot(cset)
        rows += [_packing(tuple(cands)) for cands in stays.values() if len(cands) > 1]
        for p, q in cset.slot_conflicts:
            both = (*stays.get(p, ()), *stays.get(q, ()))
            if both:
                rows.append(Row(both, (1.0,) * len(both), None, 1.0))
        return tuple(rows)

    @cached_property
    def makespan_rows(self) -> tuple[MakespanRow, ...]:
        """Row 4 of the module docstring, one per job (empty without the ``makespan`` objective)."""
        if self.makespan_column is None:
            return ()
        cands = self.cset.candidates
        return tuple(
            MakespanRow(j, tuple(cols), tuple(cands[c].completion_s[cands[c].jobs.index(j)] for c in cols),
                        self.cset.unplaced_completion_s[j])
            for j, cols in enumerate(self.cset.by_job))

    @cached_property
    def makespan_upper_s(self) -> float:
        """The latest completion any job can have: an upper bound on ``M``."""
        cset = self.cset
        return max([*cset.unplaced_completion_s, *(t for c in cset.candidates for t in c.completion_s)],
                   default=0.0)

    @cached_property
    def dominated(self) -> frozenset[int]:
        """Co-location candidates that a candidate of one of their members alone replaces at no loss: the
        same GPU type and place (kind and location, a kept slot included) and a gain at least as high. The
        member's candidate is in a subset of the group's rows with the same coefficients (its job's row, the
        same GPUs of the same node, class, slot and type), so every selection with the group stays feasible,
        and no worse, with the member instead: an optimum without them exists. Empty with the ``makespan``
        objective, where a member's completion counts on its own. The round's own candidates
        (:func:`~dltsched.formulations.candidates.build_candidates`) hold none; a set from elsewhere may."""
        if self.makespan_column is not None:
            return frozenset()
        cands = self.cset.candidates
        best: dict[tuple[int, str, str, int], float] = {}
        groups = []
        for c, cand in enumerate(cands):
            if len(cand.jobs) > 1:
                groups.append(c)
                continue
            key = (cand.jobs[0], cand.gpu_type, cand.kind, cand.where)
            found = best.get(key)
            if found is None or cand.gain > found:
                best[key] = cand.gain
        return frozenset(c for c in groups if member_alone_as_good(best, cands[c]))

    def restricted(self, columns: Sequence[int]) -> RoundModel:
        """The model of the candidates ``columns`` only (ascending): column ``i`` of it is ``columns[i]``
        here; its rows are those of the smaller candidate set (a capacity row they cannot exceed is left
        out or marked redundant)."""
        cset = self.cset
        cands = tuple(cset.candidates[c] for c in columns)
        by_job: list[list[int]] = [[] for _ in cset.by_job]
        for c, cand in enumerate(cands):
            for j in cand.jobs:
                by_job[j].append(c)
        return RoundModel(replace(cset, candidates=cands, by_job=tuple(map(tuple, by_job))))

    def linear_rows(self, redundant: bool = False) -> list[Row]:
        """Every row, the makespan rows as plain rows; ``redundant``: keep the rows that cannot bind."""
        rows = [r for r in self.rows if redundant or not r.redundant]
        if self.makespan_column is not None:
            rows += [r.as_row(self.makespan_column) for r in self.makespan_rows]
        return rows


def row_arrays(rows: Sequence[Row]) -> tuple[Any, Any, Any, Any]:
    """``rows`` as a row-wise sparse matrix: ``(starts, sizes, index, value)``, NumPy arrays of the rows'
    offsets (``len(rows) + 1``, int32), their numbers of terms (int32), the terms' columns (int32) and
    coefficients (float64)."""
    import numpy as np

    sizes = np.fromiter((len(r.cols) for r in rows), dtype=np.int32, count=len(rows))
    starts = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum(sizes, out=starts[1:])
    index = np.fromiter(chain.from_iterable(r.cols for r in rows), dtype=np.int32, count=int(starts[-1]))
    value = np.fromiter(chain.from_iterable(r.coefs for r in rows), dtype=np.float64, count=int(starts[-1]))
    return starts, sizes, index, value


def _packing(cols: tuple[int, ...]) -> Row:
    return Row(cols, (1.0,) * len(cols), None, 1.0, at_most_one=True)


def _capacity(terms: list[tuple[int, int]], limit: int, *, redundant: bool) -> Row:
    return Row(tuple(c for c, _ in terms), tuple(float(k) for _, k in terms), None, float(limit),
               redundant=redundant)


def capacity_limits(cset: CandidateSet) -> tuple[list[int], dict[str, int]]:
    """Usable GPUs per node and per GPU type (down GPUs excluded): the right-hand sides of capacity."""
    per_node = [node.usable_gpus for node in cset.problem.nodes]
    per_type: dict[str, int] = defaultdict(int)
    for node in cset.problem.nodes:
        per_type[node.gpu_type] += node.usable_gpus
    return per_node, dict(per_type)


def capacity_rows(
        cset: CandidateSet) -> tuple[dict[int, list[tuple[int, int]]], dict[str, list[tuple[int, int]]]]:
    """(node -> [(candidate, GPUs used on it)], type -> [(candidate, GPUs)]): the capacity constraints."""
    per_node: dict[int, list[tuple[int, int]]] = defaultdict(list)
    per_type: dict[str, list[tuple[int, int]]] = defaultdict(list)
    slots = cset.slots
    for c, cand in enumerate(cset.candidates):
        term = (c, cand.num_gpus)
        per_type[cand.gpu_type].append(term)
        kind = cand.kind
        if kind == _NODE:
            per_node[cand.where].append(term)
        elif kind == _STAY:
            for n, k in slots[cand.where].node_gpus:
                per_node[n].append((c, k))
    return per_node, per_type


def class_capacity_rows(cset: CandidateSet) -> dict[int, list[tuple[int, int]]]:
    """Aggregated node class -> [(candidate, GPUs)] of its ``class`` candidates: a class's capacity row."""
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for c, cand in enumerate(cset.candidates):
        if cand.kind == _CLASS:
            out[cand.where].append((c, cand.num_gpus))
    return out


def stays_by_slot(cset: CandidateSet) -> dict[int, list[int]]:
    """Slot -> the candidates that keep it."""
    out: dict[int, list[int]] = defaultdict(list)
    for c, cand in enumerate(cset.candidates):
        if cand.kind == _STAY:
            out[cand.where].append(c)
    return out

"""The round aggregated over interchangeable nodes: the type level of the ``decomposed`` backend.

**Node classes.** Nodes of one GPU type with the same GPUs, none down and nobody running there are
interchangeable: a plan that uses one can use any other. Such nodes form one class; every other node is a
class of its own.

**Columns.** Candidates that differ only in which node of a class they use become one column (the same unit,
freeze levels and type, hence the same gain), carrying the list of its candidates; a one-GPU unit already has
one candidate per type, a unit kept where it runs (a ``stay``) keeps its own column, and a candidate on an
aggregated class of the round (:mod:`~dltsched.formulations.aggregate`, whose classes lie within these) is the
column of its class. The model has one column per (unit, type, class) instead of one per (unit, node).

**Rows**, those of the round model (:mod:`~dltsched.formulations.model`) summed over each class: each job at
most once; usable GPUs per class (where its columns could exceed them) and per type; a slot kept by at most
one unit (left out where one job is in every unit that keeps it: its own row says as much), overlapping
slots not both kept.

**Bound.** Every plan of the round (every solution of its LP relaxation, even) gives a solution of this
model's relaxation with the same objective (sum its candidates' values per column), so the aggregated LP
optimum bounds the round's optimum. The two relaxations are *equal* when every class's nodes are all offered
to each unit using the class (a round where a unit sees every node, or whose classes are single nodes):
spread each column's value evenly over the class's nodes and every node carries ``1/size`` of its class's
load. With a unit offered only some nodes of a large class
(:attr:`~dltsched.formulations.problem.RoundOptions.max_nodes_per_unit`) it can be higher, never lower: the
gap measured against it is a true gap, at worst pessimistic.

The matrix is assembled with NumPy (one pass per candidate attribute); the LP is solved by column generation
with HiGHS (:func:`solve_relaxation`), every round of which gives a valid bound, within a time limit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import chain, repeat
from operator import attrgetter
from typing import Any

import numpy as np

from dltsched.formulations.aggregate import NodeClass, empty_nodes_by_shape
from dltsched.formulations.candidates import CandidateKind, CandidateSet, node_classes_of

__all__ = ["AggregatedRound", "Relaxation", "aggregate", "node_classes", "solve_relaxation"]

_NODE, _STAY, _CLASS = CandidateKind.NODE, CandidateKind.STAY, CandidateKind.CLASS


def node_classes(cset: CandidateSet) -> tuple[tuple[NodeClass, ...], tuple[int, ...]]:
    """The node classes of a round, in the order of their first node, and the class of every node.

    A node is *busy* when a running job holds one of its GPUs or one of its GPUs is down; busy nodes are
    classes of their own, the others are grouped by (GPU type, GPUs). Every class of
    :func:`~dltsched.formulations.aggregate.empty_node_classes` (those the candidates may name) lies within
    one of these; these also group empty nodes whose gang sizes do not divide (a relaxation, not a placement).
    """
    problem = cset.problem
    shape_of = {n: shape for shape, ns in empty_nodes_by_shape(problem).items() for n in ns}
    members: dict[tuple[str, int] | int, list[int]] = {}
    for n in range(len(problem.nodes)):
        members.setdefault(shape_of.get(n, n), []).append(n)
    classes = tuple(NodeClass(problem.nodes[ns[0]].gpu_type, tuple(ns), problem.nodes[ns[0]].usable_gpus)
                    for ns in members.values())
    class_of = [0] * len(problem.nodes)
    for k, cls in enumerate(classes):
        for n in cls.nodes:
            class_of[n] = k
    return classes, tuple(class_of)


@dataclass(frozen=True, slots=True)
class AggregatedRound:
    """A round's aggregated model (see the module docstring).

    Attributes
    ----------
    cset
        The round's candidates.
    classes
        The node classes.
    class_of
        The class of every node.
    order, starts
        The candidates by column: column ``k``'s are ``order[starts[k]:starts[k + 1]]``, ascending (see
        :meth:`members`).
    column_of
        Per candidate, its column.
    gains
        Per column, the gain of its candidates (maximisation form).
    sizes
        Per column, the GPUs it uses.
    types
        Per column, the index of its GPU type in ``cset.problem.gpu_types()``.
    matrix
        The rows over the columns (SciPy CSC).
    upper
        The rows' right-hand sides (every row is ``<=``).
    merged
        Whether a candidate on one node lies in a class of several (its node's row is then summed into its
        class's): else the model's relaxation is the round's own (the round's aggregated classes are its own).
    """

    cset: CandidateSet
    classes: tuple[NodeClass, ...]
    class_of: tuple[int, ...]
    order: np.ndarray
    starts: np.ndarray
    column_of: np.ndarray
    gains: np.ndarray
    sizes: np.ndarray
    types: np.ndarray
    matrix: Any
    upper: np.ndarray
    merged: bool

    @property
    def num_columns(self) -> int:
        """Columns of the aggregated model."""
        return len(self.starts) - 1

    def members(self, column: int) -> tuple[int, ...]:
        """The candidates of ``column``, ascending."""
        return tuple(self.order[self.starts[column]:self.starts[column + 1]].tolist())



def aggregate(cset: CandidateSet) -> AggregatedRound:
    """Aggregate a round's candidates over its node classes (see the module docstring)."""
    from scipy.sparse import coo_matrix

    problem = cset.problem
    classes, class_of = node_classes(cset)
    types = problem.gpu_types()
    type_index = {t: i for i, t in enumerate(types)}
    num_jobs = len(problem.jobs)
    cands = cset.candidates
    count = len(cands)
    codes = {_NODE: 0, _CLASS: 1, _STAY: 2}
    kind = np.fromiter(map(codes.get, map(attrgetter("kind"), cands), repeat(3)), dtype=np.int64, count=count)
    where = np.fromiter(map(attrgetter("where"), cands), dtype=np.int64, count=count)
    type_of = np.fromiter(map(type_index.__getitem__, map(attrgetter("gpu_type"), cands)), dtype=np.int64,
                          count=count)
    class_arr = np.asarray(class_of, dtype=np.int64)
    theirs = node_classes_of(cset)  # the classes ``class`` candidates name: sets of empty nodes, within ours
    their_first = np.array([cls.nodes[0] for cls in theirs] or [0], dtype=np.int64)
    cls = np.full(count, -1, dtype=np.int64)
    on_node, on_class = kind == 0, kind == 1
    cls[on_node] = class_arr[where[on_node]]
    cls[on_class] = class_arr[their_first[where[on_class]]]
    # a unit's candidates on the nodes of one class are one column: the same unit (its members and freeze
    # levels are the same objects in all its candidates: a unit whose are not keeps a column per node,
    # which changes nothing but the model's size), type and class
    label = np.arange(count)
    merge = np.flatnonzero(cls >= 0)
    if len(merge):
        ids = np.array([(id(cands[c].jobs), id(cands[c].freeze)) for c in merge.tolist()], dtype=np.uint64)
        keys = np.column_stack([ids, type_of[merge].astype(np.uint64), cls[merge].astype(np.uint64)])
        _, first_at, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        label[merge] = merge[first_at][inverse.ravel()]
    reps, column_of = np.unique(label, return_inverse=True)  # representatives in candidate order
    column_of = column_of.ravel().astype(np.int64)
    num_cols = len(reps)
    order = np.argsort(column_of, kind="stable")
    starts = np.searchsorted(column_of[order], np.arange(num_cols + 1))
    first = [cands[r] for r in reps.tolist()]
    gains = np.fromiter(map(attrgetter("gain"), first), dtype=float, count=num_cols)
    sizes = np.fromiter(map(attrgetter("num_gpus"), first), dtype=float, count=num_cols)
    col_types = type_of[reps]
    # 1. each job at most once: the members of each column
    lengths = np.fromiter(map(len, map(attrgetter("jobs"), first)), dtype=np.int64, count=num_cols)
    job_rows = np.fromiter(chain.from_iterable(c.jobs for c in first), dtype=np.int64,
                           count=int(lengths.sum()))
    parts_r: list[np.ndarray] = [job_rows]
    parts_c: list[np.ndarray] = [np.repeat(np.arange(num_cols), lengths)]
    parts_v: list[np.ndarray] = [np.ones(len(job_rows))]
    upper: list[float] = [1.0] * num_jobs
    # the GPUs each column takes of each class: a unit on a node or class, a kept slot on its nodes
    col_cls = cls[reps]
    placed = np.flatnonzero(col_cls >= 0)
    load_cls: list[int] = col_cls[placed].tolist()
    load_col: list[int] = placed.tolist()
    load_gpus: list[float] = sizes[placed].tolist()
    stays_of_slot: dict[int, list[int]] = {}
    slots = cset.slots
    for col in np.flatnonzero(kind[reps] == 2).tolist():
        slot = first[col].where
        stays_of_slot.setdefault(slot, []).append(col)
        for n, k in slots[slot].node_gpus:
            load_cls.append(class_of[n])
            load_col.append(col)
            load_gpus.append(k)
    # 2. usable GPUs per class (where its columns could exceed them) and per type
    if load_cls:
        cls_arr, col_arr, gpu_arr = np.array(load_cls), np.array(load_col), np.array(load_gpus, dtype=float)
        capacity = np.array([c.capacity for c in classes], dtype=float)
        binding = np.flatnonzero(np.bincount(cls_arr, weights=gpu_arr, minlength=len(classes)) > capacity)
        row_of_class = np.full(len(classes), -1)
        row_of_class[binding] = len(upper) + np.arange(len(binding))
        upper += capacity[binding].tolist()
        keep = row_of_class[cls_arr] >= 0
        parts_r.append(row_of_class[cls_arr[keep]])
        parts_c.append(col_arr[keep])
        parts_v.append(gpu_arr[keep])
    type_total = [0.0] * len(types)
    for node in problem.nodes:
        type_total[type_index[node.gpu_type]] += node.usable_gpus
    parts_r.append(len(upper) + col_types)
    parts_c.append(np.arange(num_cols))
    parts_v.append(sizes)
    upper += type_total
    # 3. a slot kept by at most one unit (implied by row 1 where one job is in every unit that keeps it, as
    # in a slot of one running job); overlapping slots not both kept
    packs = [stays for stays in stays_of_slot.values() if len(stays) > 1
             and not set.intersection(*(set(first[col].jobs) for col in stays))]
    for p, q in cset.slot_conflicts:
        both = [*stays_of_slot.get(p, ()), *stays_of_slot.get(q, ())]
        if both:
            packs.append(both)
    for stays in packs:
        parts_r.append(np.full(len(stays), len(upper)))
        parts_c.append(np.array(stays))
        parts_v.append(np.ones(len(stays)))
        upper.append(1.0)
    matrix = coo_matrix((np.concatenate(parts_v), (np.concatenate(parts_r), np.concatenate(parts_c))),
                        shape=(len(upper), num_cols)).tocsc()
    sizes_of_class = np.array([len(k.nodes) for k in classes], dtype=np.int64)
    merged = bool(np.any(sizes_of_class[cls[on_node]] > 1))
    return AggregatedRound(cset, classes, class_of, order, starts, column_of, gains, sizes, col_types, matrix,
                           np.array(upper), merged)


@dataclass(frozen=True, slots=True)
class Relaxation:
    """The aggregated LP's answer.

    Attributes
    ----------
    bound
        A bound (maximisation form) on every plan of the round: the least dual bound met on the way (the LP
        optimum when ``optimal``); ``None`` when none was proven in time.
    value
        The restricted LP's optimum (maximisation form) at the end.
    values
        Per column, its value in the restricted LP (0 for columns never added).
    optimal
        Whether no column could improve the restricted LP: ``value`` is the LP optimum.
    seconds
        Wall-clock seconds in all.
    rounds
        Restricted LPs solved.
    active
        Columns in the restricted LP at the end.
    """

    bound: float | None
    value: float
    values: np.ndarray
    optimal: bool
    seconds: float
    rounds: int
    active: int


#: reduced costs below this are taken as 0 (HiGHS's own dual tolerance is 1e-7)
REDUCED_COST_TOL = 1e-7


def solve_relaxation(agg: AggregatedRound, time_limit_s: float, *, seed: np.ndarray | None = None,
                     threads: int = 1, stop_gap: float = 0.0) -> Relaxation:
    """Solve the aggregated model's LP relaxation (``0 <= y <= 1``) by column generation with HiGHS.

    The restricted LP starts from every job alone (its one-job columns) and the ``seed`` columns (e.g. a
    greedy plan's: the smallest start measured fastest at 1,000-10,000 jobs, co-location entering by
    pricing); each round prices every column with the restricted LP's row duals (one sparse product)
    and adds each job's best column of positive reduced cost, and HiGHS goes on from its last basis. Every
    round gives a valid bound, whatever the columns left out: the restricted duals, each job's dual raised
    by the largest reduced cost among its columns (so that every column is priced out). It ends when no
    column prices out (the bound is the LP optimum), when the restricted LP's optimum is within ``stop_gap``
    of the bound (relative), or at ``time_limit_s``.

    Parameters
    ----------
    agg
        The aggregated round.
    time_limit_s
        Wall-clock limit.
    seed
        Columns to start with.
    threads
        HiGHS threads.
    stop_gap
        Relative gap between the restricted LP's optimum and the bound at which to stop (0: at the optimum).

    Returns
    -------
    Relaxation
        The bound, the restricted LP's values and how it ended.
    """
    import highspy

    began = time.perf_counter()
    num = agg.num_columns
    if num == 0:
        return Relaxation(0.0, 0.0, np.zeros(0), True, 0.0, 0, 0)
    matrix = agg.matrix
    num_jobs = len(agg.cset.problem.jobs)
    gains = agg.gains
    # the job of each (column, member) entry: the job rows come first
    entries = matrix.indices < num_jobs
    entry_col = np.repeat(np.arange(num), np.diff(matrix.indptr))[entries]
    entry_job = matrix.indices[entries]
    # every job alone: its one-job columns (and the seed's)
    active = np.bincount(entry_col, minlength=num) == 1
    if seed is not None:
        active[seed] = True
    # the core class: highspy's Python wrapper enables its callbacks on construction, which writes HiGHS's
    # banner to standard output before any option can silence it (and would break a --json output)
    engine = highspy._Highs()  # type: ignore[attr-defined]
    engine.setOptionValue("output_flag", False)
    engine.setOptionValue("threads", threads)
    engine.setOptionValue("random_seed", 0)
    rows = len(agg.upper)
    engine.addRows(rows, np.full(rows, -highspy.kHighsInf), agg.upper, 0, np.zeros(0, dtype=np.int32),
                   np.zeros(0, dtype=np.int32), np.zeros(0))
    added = np.zeros(0, dtype=np.int64)  # the restricted LP's columns, in HiGHS's order

    def add(cols: np.ndarray) -> None:
        nonlocal added
        sub = matrix[:, cols]
        engine.addCols(len(cols), -gains[cols], np.zeros(len(cols)), np.ones(len(cols)), sub.nnz,
                       sub.indptr[:-1].astype(np.int32), sub.indices.astype(np.int32), sub.data)
        added = np.concatenate([added, cols])

    add(np.flatnonzero(active))
    best: float | None = None
    value = 0.0
    values = np.zeros(num)
    rounds = 0
    optimal = False
    while True:
        left = time_limit_s - (time.perf_counter() - began)
        if left <= 0:
            break
        engine.setOptionValue("time_limit", left)
        engine.run()
        rounds += 1
        if engine.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            break
        solution = engine.getSolution()
        value = -engine.getInfo().objective_function_value
        values = np.zeros(num)
        values[added] = solution.col_value
        duals = np.maximum(0.0, -np.asarray(solution.row_dual))
        reduced = gains - matrix.T @ duals
        positive = np.maximum(reduced, 0.0)
        dual_value = float(agg.upper @ duals)
        # every column priced out by raising each job's dual: by its columns' largest reduced cost, or by its
        # inactive columns' only, the active ones paying through their upper bounds (both bounds are valid)
        per_job = np.zeros(num_jobs)
        np.maximum.at(per_job, entry_job, positive[entry_col])
        outside = np.zeros(num_jobs)
        np.maximum.at(outside, entry_job, np.where(active, 0.0, positive)[entry_col])
        bound = min(dual_value + float(per_job.sum()),
                    dual_value + float(positive[active].sum()) + float(outside.sum()))
        best = bound if best is None else min(best, bound)
        candidates = np.flatnonzero((reduced > REDUCED_COST_TOL) & ~active)
        if not len(candidates):
            optimal = True
            break
        if best - value <= stop_gap * max(abs(best), abs(value)):
            break
        # each job's best column of positive reduced cost
        mine = np.isin(entry_col, candidates)
        col, job = entry_col[mine], entry_job[mine]
        pick = np.lexsort((-reduced[col], job))
        first = np.ones(len(pick), dtype=bool)
        first[1:] = job[pick][1:] != job[pick][:-1]
        new = np.unique(col[pick][first])
        active[new] = True
        add(new)
    return Relaxation(best, value, values, optimal, time.perf_counter() - began, rounds, int(active.sum()))

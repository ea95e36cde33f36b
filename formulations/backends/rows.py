"""The rows of a candidate set's model as index lists, built once in one pass: what CP-SAT (as protobuf text)
and HiGHS (as a sparse matrix) are given, so that no backend states a constraint term by term in Python.

Columns: candidate ``c`` is column ``c`` (0/1); with the ``makespan`` objective one more column ``M`` (last).
Rows, in this order: at most one candidate per job; usable GPUs per node (multi-GPU units and kept slots,
where the candidates could exceed them) and per type (everything); a slot kept by at most one unit;
overlapping slots not both kept; ``M + sum saved_c x_c >= wait_j`` per job (makespan only).
"""

from __future__ import annotations

from dataclasses import dataclass

from dltsched.formulations.backends import capacity_limits, capacity_rows, stays_by_slot
from dltsched.formulations.candidates import CandidateSet


@dataclass(frozen=True, slots=True)
class Row:
    """``lower <= sum coefs[i] x[cols[i]] <= upper`` (``None``: no bound on that side); ``at_most_one``: every
    coefficient is 1 and ``upper`` is 1."""

    cols: list[int]
    coefs: list[float]
    lower: float | None
    upper: float | None
    at_most_one: bool = False


def model_rows(cset: CandidateSet, every_type_row: bool = True) -> list[Row]:
    """The rows of ``cset`` without the makespan rows (see the module docstring). ``every_type_row``: state the
    per-type capacity also where the candidates cannot exceed it (CP-SAT's model always has; HiGHS's does not
    need to)."""
    rows = [Row(list(cands), [1.0] * len(cands), None, 1.0, True) for cands in cset.by_job if len(cands) > 1]
    per_node, per_type = capacity_rows(cset)
    node_limit, type_limit = capacity_limits(cset)
    for n, terms in per_node.items():
        if sum(k for _, k in terms) > node_limit[n]:
            rows.append(Row([c for c, _ in terms], [float(k) for _, k in terms], None, float(node_limit[n])))
    for gpu_type, terms in per_type.items():
        if every_type_row or sum(k for _, k in terms) > type_limit[gpu_type]:
            rows.append(Row([c for c, _ in terms], [float(k) for _, k in terms], None, float(type_limit[gpu_type])))
    stays = stays_by_slot(cset)
    rows += [Row(list(cands), [1.0] * len(cands), None, 1.0, True) for cands in stays.values() if len(cands) > 1]
    for p, q in cset.slot_conflicts:
        both = [*stays.get(p, []), *stays.get(q, [])]
        if both:
            rows.append(Row(both, [1.0] * len(both), None, 1.0))
    return rows


def saved_by_placing(cset: CandidateSet, job: int) -> list[float]:
    """Per candidate of ``job`` (``cset.by_job[job]``): how much earlier it finishes than if left out."""
    wait = cset.unplaced_completion_s[job]
    return [wait - cset.candidates[c].completion_s[cset.candidates[c].jobs.index(job)] for c in cset.by_job[job]]

"""Deprecated: the rows of a round are :class:`~dltsched.formulations.model.RoundModel`'s."""

from __future__ import annotations

import warnings

from dltsched.formulations.candidates import CandidateSet
from dltsched.formulations.model import RoundModel, Row

__all__ = ["Row", "model_rows", "saved_by_placing"]


def model_rows(cset: CandidateSet, every_type_row: bool = True) -> list[Row]:
    """Deprecated: ``RoundModel(cset).linear_rows(redundant=every_type_row)`` without the makespan rows."""
    warnings.warn("backends.rows.model_rows is deprecated; use dltsched.formulations.model.RoundModel",
                  DeprecationWarning, stacklevel=2)
    return [r for r in RoundModel(cset).rows if every_type_row or not r.redundant]


def saved_by_placing(cset: CandidateSet, job: int) -> list[float]:
    """Deprecated: per candidate of ``job``, how much earlier it finishes than if left out (the makespan
    row's coefficients, ``RoundModel(cset).makespan_rows``)."""
    warnings.warn("backends.rows.saved_by_placing is deprecated; use dltsched.formulations.model.RoundModel",
                  DeprecationWarning, stacklevel=2)
    wait, cands = cset.unplaced_completion_s[job], cset.candidates
    return [wait - cands[c].completion_s[cands[c].jobs.index(job)] for c in cset.by_job[job]]

"""Deprecated: HiGHS through highspy is the ``highs`` backend, :mod:`dltsched.formulations.backends.highs`."""

from __future__ import annotations

from dltsched.formulations.backends.base import legacy_solve

#: the former module-level entry point, kept for a release
solve = legacy_solve("highs")

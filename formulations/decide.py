"""Deprecated path of the round pipeline (removed in 0.3.0): import :func:`decide_round` from
:mod:`dltsched.formulations.pipeline`."""

from __future__ import annotations

import warnings

from dltsched.formulations.pipeline import decide_round

warnings.warn("dltsched.formulations.decide is deprecated and will be removed in 0.3.0; import decide_round "
              "from dltsched.formulations.pipeline", DeprecationWarning, stacklevel=2)

__all__ = ["decide_round"]

"""Predictors: DeletePop step time, IceFrog freezing, co-location, and the model zoo's graphs.

Importing this package and calling :func:`default_predictors` needs no torch.
"""

from __future__ import annotations

from typing import Any


def default_predictors() -> Any:
    """The packaged predictor bundle (``engine.predict.Predictors``): DeletePop step time, IceFrog
    freezing, and the co-location predictor of ``predictors.colocation`` when it loads (else analytic)."""
    from dltsched.engine.predict import Predictors
    from dltsched.predictors.freezing import IceFrogFreezing
    from dltsched.predictors.steptime import DeletePopStepTime

    step = DeletePopStepTime()
    try:
        from dltsched.predictors.colocation import default_colocation_predictor

        colocation = default_colocation_predictor()
    except (ImportError, AttributeError):
        from dltsched.engine.analytic import AnalyticColocation

        colocation = AnalyticColocation()
    return Predictors(step, colocation, IceFrogFreezing(step))


__all__ = ["default_predictors"]

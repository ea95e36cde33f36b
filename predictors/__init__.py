"""Predictors: DeletePop step time, IceFrog freezing, co-location, and the model zoo's graphs.

Importing this package and calling :func:`default_predictors` needs no torch.
"""

from __future__ import annotations

import logging
from typing import Any


def default_predictors(*, eggat: bool = False) -> Any:
    """The packaged predictor bundle (``engine.predict.Predictors``): DeletePop step time, IceFrog
    freezing, and the co-location predictor of ``predictors.colocation`` when it loads (else analytic);
    ``eggat``: with the E-GGAT blended into its speeds."""
    from dltsched.engine.domain.predictors import Predictors
    from dltsched.predictors.freezing import IceFrogFreezing
    from dltsched.predictors.steptime import DeletePopStepTime

    step = DeletePopStepTime()
    try:
        from dltsched.predictors.colocation import default_colocation_predictor

        colocation = default_colocation_predictor(eggat=eggat)
    except (ImportError, AttributeError):
        from dltsched.predictors.analytic import AnalyticColocation

        colocation = AnalyticColocation()
    return Predictors(step, colocation, IceFrogFreezing(step))


def analytic_predictors() -> Any:
    """The catalog-based analytic bundle (``engine.analytic``): no trained data needed."""
    from dltsched.engine.domain.predictors import Predictors
    from dltsched.predictors.analytic import AnalyticColocation, AnalyticFreezing, AnalyticStepTime

    step = AnalyticStepTime()
    return Predictors(step, AnalyticColocation(step), AnalyticFreezing())


def available_predictors() -> Any:
    """The packaged predictors (:func:`default_predictors`) when they load, else the analytic ones
    (:func:`analytic_predictors`, with a warning): what policies use when given no predictors."""
    try:
        return default_predictors()
    except (ImportError, AttributeError, OSError, ValueError) as err:
        logging.getLogger(__name__).warning("packaged predictors unavailable (%s); using the analytic ones",
                                            err)
        return analytic_predictors()


def eggat_predictors() -> Any:
    """:func:`default_predictors` with the shipped E-GGAT blended into the co-location speeds (bundle
    ``default+eggat``)."""
    return default_predictors(eggat=True)


__all__ = ["analytic_predictors", "available_predictors", "default_predictors", "eggat_predictors"]

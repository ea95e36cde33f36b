"""The round pipeline: build -> solve -> check -> fallback, the one way a round is decided.

:func:`decide_round` builds the round of a cluster snapshot from the predictors
(:func:`~dltsched.formulations.build.build_round`), solves it with a backend of the registry
(:func:`~dltsched.formulations.solve.solve_problem`), has the solver-independent checker
(:func:`~dltsched.formulations.checker.check_plan`) accept the plan, and otherwise returns the plan of the
``fallback`` it is given, saying why. The embedding API (:func:`dltsched.engine.app.api.solve_round`) passes a
baseline policy as the fallback; this module knows no policy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import ClusterState, Plan
from dltsched.engine.domain.predictors import Predictors
from dltsched.formulations.build import build_round
from dltsched.formulations.checker import check_plan
from dltsched.formulations.problem import RoundOptions
from dltsched.formulations.solve import solve_problem

log = logging.getLogger(__name__)


def decide_round(state: ClusterState, predictors: Predictors, options: RoundOptions, backend: str, *,
                 fallback: Callable[[str], Plan], warm_start: Plan | None = None,
                 fallback_name: str = "fallback") -> Plan:
    """Decide the round of ``state`` with ``backend``; the checker has the last word.

    Parameters
    ----------
    state
        The cluster snapshot: active jobs, their placements, down GPUs.
    predictors
        Predictors that give the round's coefficients.
    options
        Objective, co-location and freezing limits, time limit.
    backend
        A name of :data:`~dltsched.formulations.backends.BACKENDS`.
    fallback
        Called with the reason when the backend fails or the checker rejects its plan; returns the plan to
        use instead (the API's is a baseline policy's plan marked ``status="fallback"``).
    warm_start
        A plan to start from (e.g. the previous round's); a hint only.
    fallback_name
        How the log names the fallback.

    Returns
    -------
    Plan
        The backend's plan when the checker accepts it, else ``fallback(reason)``.

    Raises
    ------
    ValidationError
        Invalid input (raised, never turned into a fallback).
    """
    began = time.perf_counter()  # options.time_limit_s bounds the whole round, building included
    try:
        problem = build_round(state, predictors, options)
        result = solve_problem(problem, backend, time_limit_s=options.time_limit_s, warm_start=warm_start,
                               started_s=began)
        report = check_plan(problem, result.plan)
    except ValidationError:
        raise
    except Exception as err:  # a solver crash must not take the scheduler down
        log.warning("backend %s failed (%s: %s); using %s", backend, type(err).__name__, err, fallback_name)
        return fallback(f"{backend} failed: {type(err).__name__}: {err}")
    if not report.feasible:  # the independent checker has the last word on every solver result
        log.warning("backend %s returned a plan the checker rejects (%s); using %s", backend,
                    "; ".join(report.violations[:3]), fallback_name)
        return fallback(f"{backend} plan failed the checker: {report.violations[0]}")
    return result.plan

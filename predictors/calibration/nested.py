"""Leave-one-model-out errors of a fit, and the nested figure of choosing among fits by them.

A *choice* is whatever selects a fit (a step-time variant, a memory form); ``fit(rows, choice)`` fits it on
rows, ``score(params, rows)`` gives the absolute percentage errors of those rows under the fitted
parameters. Choosing by leave-one-model-out error over the very rows that then score the choice flatters it;
the honest figure is nested: each model is held out, the choice is made by leave-one-model-out over the other
models alone, fitted on them and scored on the held-out model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

C = TypeVar("C")
Apes = dict[str, list[float]]
Fit = Callable[[Sequence[Any], C], Any]
Score = Callable[[Any, Sequence[Any]], list[float]]

__all__ = ["Apes", "choose", "lomo_apes", "mean_ape", "nested_lomo_apes"]


def lomo_apes(rows: Sequence[Any], choice: C, fit: Fit[C], score: Score,
              scored: Sequence[Any] | None = None) -> Apes:
    """Per model of ``scored`` (default: ``rows``), the errors of its rows there under ``choice`` fitted on
    the rows of every other model."""
    scored = rows if scored is None else scored
    return {model: score(fit([r for r in rows if r.model != model], choice),
                         [r for r in scored if r.model == model])
            for model in sorted({r.model for r in scored})}


def mean_ape(apes: Apes) -> float:
    """The mean of every error (infinite without any)."""
    flat = [a for v in apes.values() for a in v]
    return math.fsum(flat) / len(flat) if flat else math.inf


def choose(rows: Sequence[Any], choices: Sequence[C], fit: Fit[C], score: Score) -> C:
    """The choice with the lowest leave-one-model-out error over ``rows`` (the first of equals)."""
    return min(choices, key=lambda c: mean_ape(lomo_apes(rows, c, fit, score)))


def nested_lomo_apes(rows: Sequence[Any], choices: Sequence[C], fit: Fit[C], score: Score,
                     scored: Sequence[Any] | None = None) -> tuple[Apes, dict[str, C]]:
    """Per model of ``scored`` (default: ``rows``), the errors of its rows when the choice is made by
    :func:`choose` on the other models' rows alone and fitted on them; and the choice of each outer fold."""
    scored = rows if scored is None else scored
    apes: Apes = {}
    picks: dict[str, C] = {}
    for model in sorted({r.model for r in scored}):
        train = [r for r in rows if r.model != model]
        picks[model] = choose(train, choices, fit, score)
        apes[model] = score(fit(train, picks[model]), [r for r in scored if r.model == model])
    return apes, picks

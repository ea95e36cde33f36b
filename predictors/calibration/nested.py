"""Leave-one-model-out errors of a fit, and the nested figure of choosing among fits by them.

A *choice* is whatever selects a fit (a step-time variant, a memory form); ``fit(rows, choice)`` fits it on
rows, ``score(params, rows)`` gives the absolute percentage errors of those rows under the fitted
parameters. Choosing by leave-one-model-out error over the very rows that then score the choice flatters it;
the honest figure is nested: each model is held out, the choice is made by leave-one-model-out over the other
models alone, fitted on them and scored on the held-out model.

How the choice is made is a *rule* over the leave-one-model-out errors of every choice: :func:`best` takes the
lowest mean; :func:`kept_within_se` keeps the first choice (the one preferred before any figure) unless
another beats it by more than one standard error of their paired per-model difference, and then takes the
best. Among choices that differ by less than the noise of a few held-out models the lowest mean is chance,
and a nested figure shows what chasing it costs (the "one-standard-error rule" of cross-validation).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

C = TypeVar("C")
Apes = dict[str, list[float]]
Fit = Callable[[Sequence[Any], C], Any]
Score = Callable[[Any, Sequence[Any]], list[float]]
#: a rule: the index of the choice taken, from each choice's leave-one-model-out errors (in the given order)
Rule = Callable[[Sequence[Apes]], int]

__all__ = ["Apes", "Rule", "best", "choose", "kept_within_se", "lomo_apes", "mean_ape", "nested_lomo_apes",
           "nested_lomo_apes_by_rule"]


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


def best(table: Sequence[Apes]) -> int:
    """The choice with the lowest mean error (the first of equals)."""
    return min(range(len(table)), key=lambda i: mean_ape(table[i]))


def kept_within_se(table: Sequence[Apes], k: float = 1.0) -> int:
    """The first choice, unless :func:`best` beats it by more than ``k`` standard errors of the mean of their
    per-model differences (each model's mean error; models of both); then the best."""
    top = best(table)
    if top == 0:
        return 0
    first = {m: math.fsum(v) / len(v) for m, v in table[0].items() if v}
    other = {m: math.fsum(v) / len(v) for m, v in table[top].items() if v}
    diff = [first[m] - other[m] for m in first if m in other]
    if len(diff) < 2:
        return top
    mean = math.fsum(diff) / len(diff)
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in diff) / (len(diff) - 1))
    return 0 if mean <= k * sd / math.sqrt(len(diff)) else top


def choose(rows: Sequence[Any], choices: Sequence[C], fit: Fit[C], score: Score, rule: Rule = best) -> C:
    """The choice ``rule`` takes from the leave-one-model-out errors over ``rows`` (default: the lowest)."""
    return choices[rule([lomo_apes(rows, c, fit, score) for c in choices])]


def nested_lomo_apes(rows: Sequence[Any], choices: Sequence[C], fit: Fit[C], score: Score,
                     scored: Sequence[Any] | None = None, rule: Rule = best) -> tuple[Apes, dict[str, C]]:
    """Per model of ``scored`` (default: ``rows``), the errors of its rows when the choice is made by
    :func:`choose` (with ``rule``) on the other models' rows alone and fitted on them; and the choice of each
    outer fold."""
    return nested_lomo_apes_by_rule(rows, choices, fit, score, scored, {"": rule})[""]


def nested_lomo_apes_by_rule(rows: Sequence[Any], choices: Sequence[C], fit: Fit[C], score: Score,
                             scored: Sequence[Any] | None, rules: dict[str, Rule]
                             ) -> dict[str, tuple[Apes, dict[str, C]]]:
    """:func:`nested_lomo_apes` of each of ``rules`` at once (the inner errors computed once per fold)."""
    scored = rows if scored is None else scored
    out: dict[str, tuple[Apes, dict[str, C]]] = {name: ({}, {}) for name in rules}
    for model in sorted({r.model for r in scored}):
        train = [r for r in rows if r.model != model]
        held = [r for r in scored if r.model == model]
        table = [lomo_apes(train, c, fit, score) for c in choices]
        fitted: dict[int, list[float]] = {}
        for name, rule in rules.items():
            i = rule(table)
            if i not in fitted:
                fitted[i] = score(fit(train, choices[i]), held)
            out[name][0][model] = fitted[i]
            out[name][1][model] = choices[i]
    return out

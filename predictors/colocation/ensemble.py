"""Ensembles of group predictors: weighted geometric mean of speeds, weighted mean of memory and util.

The shipped table is exported from ``EnsemblePredictor((GbtBaseline(), EggatPredictor(...)))``:
trees and the graph network err differently on unseen models, so their mean errs less than
either (see the record's figures).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dltsched.engine.domain.errors import ValidationError
from dltsched.predictors.colocation.features import Group
from dltsched.predictors.colocation.metrics import GroupPrediction
from dltsched.predictors.colocation.samples import ColocDataset


def combine(predictions: Sequence[GroupPrediction], weights: Sequence[float]) -> GroupPrediction:
    """Weighted geometric mean of speeds; weighted mean of memory and utilisation where members give them."""
    total = sum(weights)
    speeds = tuple(math.exp(sum(w * math.log(p.speeds[i])
                                for p, w in zip(predictions, weights, strict=True)) / total)
                   for i in range(len(predictions[0].speeds)))

    def mean(values: list[tuple[float | None, float]]) -> float | None:
        known = [(v, w) for v, w in values if v is not None]
        return sum(v * w for v, w in known) / sum(w for _, w in known) if known else None

    return GroupPrediction(speeds,
                           mean([(p.memory_mib, w) for p, w in zip(predictions, weights, strict=True)]),
                           mean([(p.gpu_util, w) for p, w in zip(predictions, weights, strict=True)]))


@dataclass(slots=True)
class EnsemblePredictor:
    """Fits every member on the same data; predicts their combination (see :func:`combine`)."""

    members: tuple[Any, ...]
    weights: tuple[float, ...] = ()
    record: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.members:
            raise ValidationError("members", "no members; an ensemble needs at least one predictor")
        if not self.weights:
            self.weights = (1.0,) * len(self.members)
        if len(self.weights) != len(self.members) or any(w < 0
                                                         for w in self.weights) or not sum(self.weights):
            raise ValidationError("weights", f"{self.weights!r} not understood; one weight >= 0 per member, "
                                             "not all 0")

    def fit(self, train: ColocDataset) -> EnsemblePredictor:
        """Fit on ``train``: every member; returns this predictor."""
        for member in self.members:
            member.fit(train)
        return self

    def predict(self, groups: Sequence[Group], data: ColocDataset) -> list[GroupPrediction]:
        """One :class:`GroupPrediction` a group (speeds, memory MiB, utilisation %): the members' predictions,
        weighted."""
        outputs = [member.predict(groups, data) for member in self.members]
        return [combine([out[i] for out in outputs], self.weights) for i in range(len(groups))]


@dataclass(slots=True)
class PairwiseComposition:
    """Groups of more than two jobs composed from ``base``'s pair predictions (no such group was measured).

    Each partner adds the extra time it causes in its pair: ``1 / s_i = 1 + sum_j (1 / s_i(i, j) - 1)``,
    the time-slicing form of the analytic model. Trained on pairs only, the models themselves predict
    three-job speeds about as high as pair speeds (mean 0.51-0.59 vs 0.57 measured in pairs on Gavel's
    GPUs): the group size never varies in training. Memory and utilisation are ``base``'s direct
    predictions for the whole group; pairs pass through unchanged.
    """

    base: Any
    record: dict[str, Any] = field(default_factory=dict)

    def fit(self, train: ColocDataset) -> PairwiseComposition:
        """Fit on ``train``: the base predictor; returns this predictor."""
        self.base.fit(train)
        return self

    def predict(self, groups: Sequence[Group], data: ColocDataset) -> list[GroupPrediction]:
        """One :class:`GroupPrediction` a group (speeds, memory MiB, utilisation %): larger groups composed
        from the base's pairs."""
        direct = self.base.predict(groups, data)
        pairs = sorted({Group(g.gpu, tuple(sorted((a, b)))) for g in groups if len(g.jobs) > 2
                        for n, a in enumerate(g.jobs) for b in g.jobs[n + 1:]}, key=lambda p: (p.gpu, p.jobs))
        speed = {}
        for pair, pred in zip(pairs, self.base.predict(pairs, data) if pairs else [], strict=True):
            speed[(pair.gpu, pair.jobs[0], pair.jobs[1])] = pred.speeds[0]
            speed[(pair.gpu, pair.jobs[1], pair.jobs[0])] = pred.speeds[1]
        out = []
        for g, d in zip(groups, direct, strict=True):
            if len(g.jobs) > 2:
                extra = [sum(1.0 / speed[(g.gpu, a, b)] - 1.0 for m, b in enumerate(g.jobs) if m != n)
                         for n, a in enumerate(g.jobs)]
                d = GroupPrediction(tuple(1.0 / (1.0 + e) for e in extra), d.memory_mib, d.gpu_util)
            out.append(d)
        return out

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

from dltsched.engine.errors import ValidationError
from dltsched.predictors.colocation.features import Group
from dltsched.predictors.colocation.metrics import GroupPrediction
from dltsched.predictors.colocation.samples import ColocDataset


def combine(predictions: Sequence[GroupPrediction], weights: Sequence[float]) -> GroupPrediction:
    """Weighted geometric mean of speeds; weighted mean of memory and utilisation where members give them."""
    total = sum(weights)
    speeds = tuple(math.exp(sum(w * math.log(p.speeds[i]) for p, w in zip(predictions, weights, strict=True)) / total)
                   for i in range(len(predictions[0].speeds)))

    def mean(values: list[tuple[float | None, float]]) -> float | None:
        known = [(v, w) for v, w in values if v is not None]
        return sum(v * w for v, w in known) / sum(w for _, w in known) if known else None

    return GroupPrediction(speeds, mean([(p.memory_mib, w) for p, w in zip(predictions, weights, strict=True)]),
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
        if len(self.weights) != len(self.members) or any(w < 0 for w in self.weights) or not sum(self.weights):
            raise ValidationError("weights", f"{self.weights!r} not understood; one weight >= 0 per member, "
                                             "not all 0")

    def fit(self, train: ColocDataset) -> EnsemblePredictor:
        for member in self.members:
            member.fit(train)
        return self

    def predict(self, groups: Sequence[Group], data: ColocDataset) -> list[GroupPrediction]:
        outputs = [member.predict(groups, data) for member in self.members]
        return [combine([out[i] for out in outputs], self.weights) for i in range(len(groups))]

"""Gradient-boosted regression trees as plain JSON, evaluated with numpy (no pickle, no sklearn at schedule time).

:func:`fit_trees` fits sklearn's ``HistGradientBoostingRegressor`` (numeric features; NaN = missing)
and copies its trees into a :class:`JsonTrees`: per tree the node arrays (feature, threshold,
where missing values go, children, leaf values; the learning rate is already in the leaf values).
:meth:`JsonTrees.predict` walks every row down every tree at once, level by level; the tests check
it against sklearn's own predictions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class JsonTrees:
    """A fitted tree ensemble: ``baseline + sum of the trees' leaf values``."""

    baseline: float
    num_features: int
    trees: tuple[dict[str, tuple[float, ...] | tuple[int, ...]], ...]
    _stacked: tuple[np.ndarray, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Stack the trees' node arrays (padded to the largest tree) so that every tree is walked at once."""
        width = max((len(t["value"]) for t in self.trees), default=1)

        def stack(name: str, dtype: Any, pad: Any) -> np.ndarray:
            out = np.full((max(1, len(self.trees)), width), pad, dtype=dtype)
            for n, t in enumerate(self.trees):
                out[n, :len(t[name])] = t[name]
            return out

        object.__setattr__(self, "_stacked", (
            stack("feature", np.int64, 0), stack("threshold", float, 0.0), stack("missing_left", bool, True),
            stack("left", np.int64, 0), stack("right", np.int64, 0), stack("leaf", bool, True),
            stack("value", float, 0.0)))

    def predict(self, x: Any) -> np.ndarray:
        rows = np.asarray(x, dtype=float)
        if rows.ndim != 2 or rows.shape[1] != self.num_features:
            raise ValueError(f"rows of shape {rows.shape} not understood; expected (n, {self.num_features})")
        if not self.trees:
            return np.full(rows.shape[0], self.baseline)
        feature, threshold, missing_left, left, right, leaf, value = self._stacked
        trees = np.arange(feature.shape[0])[None, :]
        node = np.zeros((rows.shape[0], feature.shape[0]), dtype=np.int64)
        row = np.arange(rows.shape[0])[:, None]
        while True:
            inner = ~leaf[trees, node]
            if not inner.any():
                break
            values = rows[row, feature[trees, node]]
            go_left = np.where(np.isnan(values), missing_left[trees, node], values <= threshold[trees, node])
            node = np.where(inner, np.where(go_left, left[trees, node], right[trees, node]), node)
        return self.baseline + value[trees, node].sum(axis=1)

    def to_json(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "num_features": self.num_features,
                "trees": [{k: list(v) for k, v in t.items()} for t in self.trees]}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> JsonTrees:
        keys = ("feature", "threshold", "missing_left", "left", "right", "leaf", "value")
        trees = []
        for n, t in enumerate(raw["trees"]):
            if set(t) != set(keys):
                raise ValueError(f"tree {n}: keys {sorted(t)} not understood; expected {sorted(keys)}")
            trees.append({k: tuple(t[k]) for k in keys})
        return cls(float(raw["baseline"]), int(raw["num_features"]), tuple(trees))


def fit_trees(x: Sequence[Sequence[float]], y: Sequence[float], *, max_iter: int = 150, learning_rate: float = 0.05,
              max_depth: int | None = 3, min_samples_leaf: int = 20, l2_regularization: float = 1.0,
              loss: str = "squared_error", seed: int = 0, threads: int = 1) -> JsonTrees:
    """Fit ``HistGradientBoostingRegressor`` (``loss``: ``squared_error`` or ``absolute_error``; no early stopping) on ``threads`` threads; return its trees.

    A feature missing in every row is fitted as 0 (sklearn cannot bin it; a constant is never split on)."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    model = HistGradientBoostingRegressor(max_iter=max_iter, learning_rate=learning_rate, max_depth=max_depth,
                                          min_samples_leaf=min_samples_leaf, l2_regularization=l2_regularization,
                                          loss=loss, early_stopping=False, random_state=seed)
    with threadpool_limits(threads):
        rows = np.array(x, dtype=float)
        rows[:, np.isnan(rows).all(axis=0)] = 0.0
        model.fit(rows, np.asarray(y, dtype=float))
    return from_sklearn(model)


def from_sklearn(model: Any) -> JsonTrees:
    """The trees of a fitted single-output ``HistGradientBoostingRegressor`` with numeric features only."""
    trees = []
    for (predictor,) in model._predictors:  # one predictor per iteration for regression
        nodes = predictor.nodes
        if nodes["is_categorical"].any():
            raise ValueError("categorical splits not supported; pass numeric features only")
        trees.append({"feature": tuple(int(v) for v in nodes["feature_idx"]),
                      "threshold": tuple(float(v) for v in nodes["num_threshold"]),
                      "missing_left": tuple(int(v) for v in nodes["missing_go_to_left"]),
                      "left": tuple(int(v) for v in nodes["left"]), "right": tuple(int(v) for v in nodes["right"]),
                      "leaf": tuple(int(v) for v in nodes["is_leaf"]), "value": tuple(float(v) for v in nodes["value"])})
    return JsonTrees(float(np.ravel(model._baseline_prediction)[0]), int(model.n_features_in_), tuple(trees))

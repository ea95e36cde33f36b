"""Gradient-boosted regression trees as plain JSON, evaluated with numpy (no pickle, no sklearn at schedule time).

:func:`fit_trees` fits sklearn's ``HistGradientBoostingRegressor`` (numeric features; NaN = missing)
and copies its trees into a :class:`JsonTrees`: per tree the node arrays (feature, threshold,
where missing values go, children, leaf values; the learning rate is already in the leaf values).
:meth:`JsonTrees.predict` walks every row down every tree at once, level by level, on the trees' nodes
laid end to end; the tests check it against sklearn's own predictions.
"""

from __future__ import annotations

import math
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
    _flat: tuple[Any, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Lay every tree's nodes end to end; leaves point to themselves, so that every row walks the same
        number of levels (the deepest tree's depth) with no test for having arrived."""
        feature, threshold, missing_left, left, right, value, roots = [], [], [], [], [], [], []
        depth = 0
        for t in self.trees:
            offset = len(value)
            roots.append(offset)
            leaf = t["leaf"]
            for n in range(len(t["value"])):
                at_leaf = bool(leaf[n])
                feature.append(0 if at_leaf else int(t["feature"][n]))
                threshold.append(math.inf if at_leaf else float(t["threshold"][n]))
                missing_left.append(True if at_leaf else bool(t["missing_left"][n]))
                left.append(offset + (n if at_leaf else int(t["left"][n])))
                right.append(offset + (n if at_leaf else int(t["right"][n])))
                value.append(float(t["value"][n]))
            depth = max(depth, _depth(t))
        object.__setattr__(self, "_flat", (
            np.asarray(feature, dtype=np.int64), np.asarray(threshold, dtype=float), np.asarray(missing_left, dtype=bool),
            np.asarray(left, dtype=np.int64), np.asarray(right, dtype=np.int64), np.asarray(value, dtype=float),
            np.asarray(roots, dtype=np.int64), depth))

    def predict(self, x: Any) -> np.ndarray:
        rows = np.ascontiguousarray(x, dtype=float)
        if rows.ndim != 2 or rows.shape[1] != self.num_features:
            raise ValueError(f"rows of shape {rows.shape} not understood; expected (n, {self.num_features})")
        feature, threshold, missing_left, left, right, value, roots, depth = self._flat
        if not len(roots):
            return np.full(rows.shape[0], self.baseline)
        flat = rows.ravel()
        start = (np.arange(rows.shape[0], dtype=np.int64) * self.num_features)[:, None]
        node = np.broadcast_to(roots, (rows.shape[0], len(roots))).copy()
        for _ in range(depth):
            values = flat[start + feature[node]]
            go_left = (values <= threshold[node]) | (np.isnan(values) & missing_left[node])
            node = np.where(go_left, left[node], right[node])
        return self.baseline + value[node].sum(axis=1)

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


def _depth(tree: dict[str, Any]) -> int:
    """Number of splits on the longest path from the root to a leaf."""
    deepest, stack = 0, [(0, 0)]
    while stack:
        n, d = stack.pop()
        if tree["leaf"][n]:
            deepest = max(deepest, d)
        else:
            stack += [(int(tree["left"][n]), d + 1), (int(tree["right"][n]), d + 1)]
    return deepest


def fit_trees(x: Sequence[Sequence[float]], y: Sequence[float], *, max_iter: int = 150, learning_rate: float = 0.05,
              max_depth: int | None = 3, min_samples_leaf: int = 20, l2_regularization: float = 1.0,
              loss: str = "squared_error", seed: int = 0, threads: int = 1,
              monotonic_cst: Sequence[int] | None = None) -> JsonTrees:
    """Fit ``HistGradientBoostingRegressor`` (``loss``: ``squared_error`` or ``absolute_error``; no early stopping) on ``threads`` threads; return its trees.

    ``monotonic_cst``: per feature 1 (prediction non-decreasing in it), -1 (non-increasing) or 0 (free).
    A feature missing in every row is fitted as 0 (sklearn cannot bin it; a constant is never split on)."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    model = HistGradientBoostingRegressor(max_iter=max_iter, learning_rate=learning_rate, max_depth=max_depth,
                                          min_samples_leaf=min_samples_leaf, l2_regularization=l2_regularization,
                                          loss=loss, early_stopping=False, random_state=seed,
                                          monotonic_cst=None if monotonic_cst is None else list(monotonic_cst))
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

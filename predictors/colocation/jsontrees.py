"""Gradient-boosted regression trees as plain JSON, evaluated with numpy (no pickle, no sklearn at schedule
time).

:func:`fit_trees` fits sklearn's ``HistGradientBoostingRegressor`` (numeric features; NaN = missing)
and copies its trees into a :class:`JsonTrees`: per tree the node arrays (feature, threshold,
where missing values go, children, leaf values; the learning rate is already in the leaf values).
:meth:`JsonTrees.predict` walks every row down every tree at once, level by level, on the trees' nodes
laid end to end (a few rows decide every node first, with one comparison); :class:`StackedTrees` walks several
ensembles at once for the engine's one-group calls. The tests check both against sklearn's own predictions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: at most this many rows decide every node at once before walking (cheaper per call; more rows look up only
#: the nodes they reach)
FEW_ROWS = 12


@dataclass(frozen=True, slots=True)
class _Nodes:
    """Trees' nodes laid end to end; leaves point to themselves, so that every row walks the same number of
    levels (the deepest tree's depth) with no test for having arrived. A node's two children sit side by side
    in ``child`` (right at ``2 n``, left at ``2 n + 1``)."""

    feature: np.ndarray
    threshold: np.ndarray
    missing_left: np.ndarray
    child: np.ndarray
    value: np.ndarray
    roots: np.ndarray
    depth: int
    #: nodes ``[0, internal)`` split; the leaves follow them
    internal: int
    #: per (rows, columns), for a few rows: where each row's value for each split sits in the rows laid end to
    #: end, each split's left and right child numbered across rows (row r's nodes from r x nodes on), and
    #: every node's next node with the leaves' filled in (each its own)
    _few: dict[tuple[int, ...], tuple[np.ndarray, ...]] = field(init=False, repr=False, default_factory=dict)

    @classmethod
    def of(cls, parts: Sequence[tuple[JsonTrees, int]]) -> _Nodes:
        """The nodes of every ensemble in ``parts``, each reading its features from its offset on; the splits
        are numbered before the leaves (a few rows then decide the splits only)."""
        feature: list[int] = []
        threshold: list[float] = []
        missing_left: list[bool] = []
        child: list[int] = []
        value: list[float] = []
        roots: list[int] = []
        leaves: list[bool] = []
        depth = 0
        for trees, first in parts:
            for t in trees.trees:
                offset = len(value)
                roots.append(offset)
                leaf = t["leaf"]
                for n in range(len(t["value"])):
                    at_leaf = bool(leaf[n])
                    leaves.append(at_leaf)
                    feature.append(first if at_leaf else first + int(t["feature"][n]))
                    threshold.append(math.inf if at_leaf else float(t["threshold"][n]))
                    missing_left.append(True if at_leaf else bool(t["missing_left"][n]))
                    child += [offset + (n if at_leaf else int(t["right"][n])),
                              offset + (n if at_leaf else int(t["left"][n]))]
                    value.append(float(t["value"][n]))
                depth = max(depth, _depth(t))
        is_leaf = np.asarray(leaves, dtype=bool)
        order = np.concatenate((np.flatnonzero(~is_leaf), np.flatnonzero(is_leaf))).astype(np.intp)
        renumber = np.empty_like(order)
        renumber[order] = np.arange(len(order), dtype=np.intp)
        return cls(np.asarray(feature, dtype=np.intp)[order], np.asarray(threshold, dtype=float)[order],
                   np.asarray(missing_left, dtype=bool)[order],
                   renumber[np.asarray(child, dtype=np.intp).reshape(-1, 2)[order]].ravel(),
                   np.asarray(value, dtype=float)[order], renumber[np.asarray(roots, dtype=np.intp)], depth,
                   int((~is_leaf).sum()))

    def _few_rows(self, shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
        found = self._few.get(shape)
        if found is None:
            count, size, splits = shape[0], len(self.value), self.internal
            offset = (np.arange(count, dtype=np.intp) * size)[:, None]
            jump = np.broadcast_to(np.arange(size, dtype=np.intp), (count, size)) + offset
            columns = (np.arange(count, dtype=np.intp) * shape[1])[:, None]
            found = self._few[shape] = (self.feature[:splits] + columns,
                                        self.child[1:2 * splits:2] + offset,
                                        self.child[0:2 * splits:2] + offset, jump, offset,
                                        self.threshold[:splits].copy(), self.missing_left[:splits].copy())
        return found

    def leaves(self, rows: np.ndarray) -> np.ndarray:
        """Each row's leaf value in every tree, ``(rows, trees)``. Up to :data:`FEW_ROWS` rows (the engine's
        single groups) decide every split for every row first (one comparison over all splits, giving each
        node's next node for that row), then take ``depth`` steps of one look-up each; more rows take
        ``depth`` steps that look up only the nodes they are at."""
        feature, threshold, missing_left, child, roots = (self.feature, self.threshold, self.missing_left,
                                                           self.child, self.roots)
        count = rows.shape[0]
        if count <= FEW_ROWS:
            at, left, right, template, offset, split_threshold, split_missing = self._few_rows(rows.shape)
            values = np.ravel(rows)[at]  # (rows, splits): the value each split tests
            go_left = values <= split_threshold
            missing = np.isnan(values)
            if missing.any():
                go_left |= missing & split_missing
            jump = template.copy()
            jump[:, :self.internal] = np.where(go_left, left, right)
            jump = jump.ravel()
            node = roots + offset
            for _ in range(self.depth):
                node = jump[node]
            return self.value[node - offset]  # type: ignore[no-any-return]
        flat = np.ascontiguousarray(rows).ravel()
        start = (np.arange(count, dtype=np.intp) * rows.shape[1])[:, None]
        node = np.broadcast_to(roots, (count, len(roots)))
        for _ in range(self.depth):
            values = flat[start + feature[node]]
            at = 2 * node
            go_left = (values <= threshold[node]) | (np.isnan(values) & missing_left[node])
            node = child[at + go_left]
        return self.value[node]  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class StackedTrees:
    """Several fitted ensembles evaluated in one walk, on rows that lay their features side by side (ensemble
    ``k`` reads its features from ``offsets[k]`` on): one call where a caller predicting a few rows would make
    one per ensemble. :meth:`predict` gives one column per ensemble, each equal to the ensemble's own
    prediction."""

    parts: tuple[JsonTrees, ...]
    offsets: tuple[int, ...]
    _flat: _Nodes = field(init=False, repr=False, compare=False)
    _starts: np.ndarray = field(init=False, repr=False, compare=False)
    _baselines: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.parts) != len(self.offsets) or any(not t.trees for t in self.parts):
            raise ValueError("one offset per ensemble, and every ensemble with at least one tree")
        object.__setattr__(self, "_flat", _Nodes.of(list(zip(self.parts, self.offsets, strict=True))))
        object.__setattr__(self, "_starts", np.cumsum([0, *(len(t.trees) for t in self.parts[:-1])]))
        object.__setattr__(self, "_baselines", np.asarray([t.baseline for t in self.parts]))

    @property
    def num_features(self) -> int:
        """Columns a row must have: the widest ensemble's offset plus its feature count."""
        return max(o + t.num_features for t, o in zip(self.parts, self.offsets, strict=True))

    def predict(self, x: Any) -> np.ndarray:
        """Every ensemble's prediction for each row.

        Parameters
        ----------
        x
            Rows of features, shape (n, at least :attr:`num_features`).

        Returns
        -------
        np.ndarray
            Shape (n, ensembles): column ``k`` is ensemble ``k``'s prediction.

        Raises
        ------
        ValueError
            When ``x`` is not two-dimensional or has too few columns.
        """
        rows = np.asarray(x, dtype=float)
        if rows.ndim != 2 or rows.shape[1] < self.num_features:
            raise ValueError(f"rows of shape {rows.shape} not understood; expected (n, {self.num_features})")
        return self._baselines + np.add.reduceat(self._flat.leaves(rows), self._starts, axis=1)


@dataclass(frozen=True, slots=True)
class JsonTrees:
    """A fitted tree ensemble: ``baseline + sum of the trees' leaf values``."""

    baseline: float
    num_features: int
    trees: tuple[dict[str, tuple[float, ...] | tuple[int, ...]], ...]
    _flat: _Nodes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_flat", _Nodes.of([(self, 0)]))

    def predict(self, x: Any) -> np.ndarray:
        """Every row down every tree at once (see :meth:`_Nodes.leaves`)."""
        rows = np.asarray(x, dtype=float)
        if rows.ndim != 2 or rows.shape[1] != self.num_features:
            raise ValueError(f"rows of shape {rows.shape} not understood; expected (n, {self.num_features})")
        if not self.trees:
            return np.full(rows.shape[0], self.baseline)
        return self.baseline + self._flat.leaves(rows).sum(axis=1)

    def to_json(self) -> dict[str, Any]:
        """The ensemble as plain JSON data (what :meth:`from_json` reads).

        Returns
        -------
        dict[str, Any]
            Baseline, feature count and the trees' node arrays.
        """
        return {"baseline": self.baseline, "num_features": self.num_features,
                "trees": [{k: list(v) for k, v in t.items()} for t in self.trees]}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> JsonTrees:
        """An ensemble from :meth:`to_json`'s data.

        Parameters
        ----------
        raw
            The JSON data.

        Returns
        -------
        JsonTrees
            The ensemble.

        Raises
        ------
        ValueError
            When a tree does not have exactly the node arrays expected.
        """
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


def fit_trees(x: Sequence[Sequence[float]], y: Sequence[float], *, max_iter: int = 150,
              learning_rate: float = 0.05, max_depth: int | None = 3, min_samples_leaf: int = 20,
              l2_regularization: float = 1.0, loss: str = "squared_error", seed: int = 0, threads: int = 1,
              monotonic_cst: Sequence[int] | None = None) -> JsonTrees:
    """Fit ``HistGradientBoostingRegressor`` (``loss``: ``squared_error`` or ``absolute_error``; no early
    stopping) on ``threads`` threads; return its trees.

    ``monotonic_cst``: per feature 1 (prediction non-decreasing in it), -1 (non-increasing) or 0 (free).
    A feature missing in every row is fitted as 0 (sklearn cannot bin it; a constant is never split on)."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    model = HistGradientBoostingRegressor(max_iter=max_iter, learning_rate=learning_rate, max_depth=max_depth,
                                          min_samples_leaf=min_samples_leaf,
                                          l2_regularization=l2_regularization, loss=loss,
                                          early_stopping=False, random_state=seed,
                                          monotonic_cst=None if monotonic_cst is None
                                          else list(monotonic_cst))
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
                      "left": tuple(int(v) for v in nodes["left"]),
                      "right": tuple(int(v) for v in nodes["right"]),
                      "leaf": tuple(int(v) for v in nodes["is_leaf"]),
                      "value": tuple(float(v) for v in nodes["value"])})
    return JsonTrees(float(np.ravel(model._baseline_prediction)[0]), int(model.n_features_in_), tuple(trees))

"""Seeded train/test splits that test generalisation, not memorisation.

- leave-one-model-out: every group that contains the held-out model is in the test set, so the
  model is never seen co-located during training (its isolated profile stays an input);
- leave-one-GPU-out: every group on the held-out GPU is in the test set;
- random pair split: unordered groups (never one ordering of a pair in train and the other in test).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from dltsched.engine.domain.errors import ValidationError
from dltsched.predictors.colocation.samples import ColocDataset

SPLIT_KINDS = ("model", "gpu", "random")


@dataclass(frozen=True, slots=True)
class Split:
    """One fold: training and test data, and what was held out."""

    kind: str
    held_out: str
    train: ColocDataset
    test: ColocDataset


def leave_one_model_out(data: ColocDataset, model: str) -> Split:
    """Test = every group containing ``model``; train = the rest."""
    if model not in data.models():
        raise ValidationError("held_out",
                              f"model '{model}' not in the data; one of {', '.join(data.models())}")
    test = [s for s in data.samples if model in s.models]
    train = [s for s in data.samples if model not in s.models]
    return Split("model", model, data.subset(train), data.subset(test))


def leave_one_gpu_out(data: ColocDataset, gpu: str) -> Split:
    """Test = every group on ``gpu``; train = groups on the other GPUs."""
    if gpu not in data.gpus():
        raise ValidationError("held_out", f"GPU '{gpu}' not in the data; one of {', '.join(data.gpus())}")
    return Split("gpu", gpu, data.subset(s for s in data.samples if s.gpu != gpu),
                 data.subset(s for s in data.samples if s.gpu == gpu))


def random_split(data: ColocDataset, seed: int, test_fraction: float = 0.2) -> Split:
    """A seeded random split of the (already unordered) groups."""
    if not 0.0 < test_fraction < 1.0:
        raise ValidationError("test_fraction", f"{test_fraction!r} not understood; must be in (0, 1)")
    order = list(range(len(data.samples)))
    random.Random(seed).shuffle(order)
    n_test = max(1, round(test_fraction * len(order)))
    test_idx = set(order[:n_test])
    return Split("random", f"seed={seed}",
                 data.subset(s for i, s in enumerate(data.samples) if i not in test_idx),
                 data.subset(s for i, s in enumerate(data.samples) if i in test_idx))


def folds(data: ColocDataset, kind: str, seed: int = 0, num_random: int = 3) -> Iterator[Split]:
    """Every fold of one split kind: one per model, one per GPU, or ``num_random`` seeded splits.

    Folds whose training set would be empty (one GPU only) are skipped.
    """
    if kind == "model":
        splits = (leave_one_model_out(data, m) for m in data.models())
    elif kind == "gpu":
        splits = (leave_one_gpu_out(data, g) for g in data.gpus())
    elif kind == "random":
        splits = (random_split(data, seed + i) for i in range(num_random))
    else:
        raise ValidationError("split", f"'{kind}' not understood; one of {', '.join(SPLIT_KINDS)}")
    for split in splits:
        if len(split.train) and len(split.test):
            yield split

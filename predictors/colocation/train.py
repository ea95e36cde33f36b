"""Training, inference and checkpoints of the E-GGAT co-location model (needs torch).

:class:`EggatPredictor` is a :class:`~.metrics.GroupPredictor`: every hyper-parameter is a
constructor argument, training is seeded (same seed and data, same weights), and checkpoints are
one safetensors file whose metadata holds the JSON config and a record of data, split, seed and
figures. Heads without labels in training (memory and utilisation on Gavel) predict ``None``.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from dltsched.engine.domain.errors import ValidationError
from dltsched.predictors.colocation.egat import EGGAT, collate, group_graph
from dltsched.predictors.colocation.egat_numpy import NumpyEggat, check_eggat_group, head_predictions
from dltsched.predictors.colocation.features import (
    Group,
    group_of,
    summed_isolated_memory_mib,
)
from dltsched.predictors.colocation.metrics import GroupPrediction
from dltsched.predictors.colocation.profiled import EGGAT_WEIGHT, ProfileColocation
from dltsched.predictors.colocation.samples import ColocDataset, JobSpec, without_absent


@dataclass(frozen=True, slots=True)
class EggatConfig:
    """Hyper-parameters of the network and its training.

    The defaults are the setting every reported figure and the shipped model use, chosen small enough to
    cross-validate every fold on a 2-core CPU (the design notes of the documentation give the timings and
    the larger settings tried).
    """

    hidden: int = 32
    heads: int = 4
    num_layers: int = 2
    dropout: float = 0.0
    epochs: int = 30
    batch_size: int = 32
    learning_rate: float = 3e-3
    weight_decay: float = 1e-4
    seed: int = 0
    max_jobs: int = 3
    threads: int = 1


@dataclass(slots=True)
class EggatPredictor:
    """E-GGAT wrapped for fitting, predicting and saving (see module docstring)."""

    config: EggatConfig = field(default_factory=EggatConfig)
    has_memory: bool = False
    has_util: bool = False
    gpus: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    record: dict[str, Any] = field(default_factory=dict)
    net: EGGAT | None = None

    def _new_net(self) -> EGGAT:
        c = self.config
        return EGGAT(c.hidden, c.heads, c.num_layers, c.dropout)

    def fit(self, train: ColocDataset) -> EggatPredictor:
        """Train on every sample of ``train`` (seeded; ``config.threads`` CPU threads)."""
        c = self.config
        torch.set_num_threads(c.threads)
        torch.manual_seed(c.seed)
        rng = random.Random(c.seed)
        graphs = [group_graph(group_of(s), train.isolated) for s in train.samples]
        self.has_memory = any(s.memory_mib is not None for s in train.samples)
        self.has_util = any(s.gpu_util is not None for s in train.samples)
        self.gpus, self.models = train.gpus(), train.models()
        self.net = self._new_net()
        self.net.set_normalization(torch.cat([g.x for g in graphs]), torch.cat([g.glob for g in graphs]))
        labels = [self._labels(s, train) for s in train.samples]
        residuals = [v - p for g, lab in zip(graphs, labels, strict=True)
                     for v, p in zip(lab[0], g.speed_prior.tolist(),
                                                                                          strict=True)]
        mem = [lab[1] for lab in labels if not math.isnan(lab[1])]
        self.net.init_output_bias(_median(residuals), _median(mem) if mem else 0.0)
        opt = torch.optim.AdamW(self.net.parameters(), lr=c.learning_rate, weight_decay=c.weight_decay)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(1, c.epochs))
        order = list(range(len(graphs)))
        self.net.train()
        for _ in range(c.epochs):
            rng.shuffle(order)
            for start in range(0, len(order), c.batch_size):
                idx = order[start:start + c.batch_size]
                opt.zero_grad()
                loss = self._loss(collate([graphs[i] for i in idx]), [labels[i] for i in idx])
                loss.backward()
                opt.step()
            sched.step()
        self.net.eval()
        return self

    @staticmethod
    def _labels(s: Any, data: ColocDataset) -> tuple[list[float], float, float]:
        """(log speeds, log memory ratio or NaN, util fraction or NaN)."""
        base = summed_isolated_memory_mib(group_of(s), data.isolated)
        mem = math.log(s.memory_mib / base) if s.memory_mib is not None and base else math.nan
        util = s.gpu_util / 100.0 if s.gpu_util is not None else math.nan
        return [math.log(v) for v in s.speeds], mem, util

    def _loss(self, batch: Any, labels: Sequence[tuple[list[float], float, float]]) -> torch.Tensor:
        assert self.net is not None
        log_speed, log_mem, util = self.net(batch)
        y_speed = torch.tensor([v for lab in labels for v in lab[0]])
        loss = (log_speed - y_speed).abs().mean()
        for pred, y in ((log_mem, torch.tensor([lab[1] for lab in labels])),
                        (torch.log(util.clamp_min(1e-3)),
                         torch.log(torch.tensor([lab[2] for lab in labels])))):
            mask = ~torch.isnan(y)
            if mask.any():
                loss = loss + (pred[mask] - y[mask]).abs().mean()
        return loss

    def check(self, group: Group) -> None:
        """Clear errors for inputs it cannot featurize (:func:`~.egat_numpy.check_eggat_group`)."""
        check_eggat_group(group, self.config.max_jobs, self.gpus)

    def meta(self) -> dict[str, Any]:
        """What a checkpoint's metadata holds besides the weights."""
        return {"config": asdict(self.config), "has_memory": self.has_memory, "has_util": self.has_util,
                "gpus": list(self.gpus), "models": list(self.models), "record": self.record}

    def to_numpy(self) -> NumpyEggat:
        """The trained network as a :class:`~.egat_numpy.NumpyEggat` (the same predictions, no torch)."""
        if self.net is None:
            raise ValidationError("model", "not trained; call fit() or load a checkpoint")
        return NumpyEggat.from_meta({k: v.detach().cpu().numpy() for k, v in self.net.state_dict().items()},
                                    self.meta())

    def predict(self, groups: Sequence[Group], data: ColocDataset,
                chunk: int = 2048) -> list[GroupPrediction]:
        """Predictions for ``groups``; ``data.isolated`` supplies the isolated profiles."""
        if self.net is None:
            raise ValidationError("model", "not trained; call fit() or load a checkpoint")
        for g in groups:
            self.check(g)
        out: list[GroupPrediction] = []
        with torch.no_grad():
            for start in range(0, len(groups), chunk):
                part = groups[start:start + chunk]
                log_speed, log_mem, util = self.net(collate([group_graph(g, data.isolated) for g in part]))
                out += head_predictions(part, log_speed.exp().tolist(), log_mem.tolist(), util.tolist(),
                                        data.isolated, self.has_memory, self.has_util)
        return out

    def config_dict(self) -> dict[str, Any]:
        """The network's hyper-parameters as a plain dict.

        Returns
        -------
        dict[str, Any]
            Field -> value of :class:`EggatConfig`.
        """
        return asdict(self.config)

    def save(self, path: str | os.PathLike[str]) -> None:
        """One safetensors file: weights, and JSON config/record in its metadata (never pickle)."""
        from safetensors.torch import save_file

        assert self.net is not None
        state = {k: v.contiguous() for k, v in self.net.state_dict().items()}
        save_file(state, str(path), metadata={"dltsched": json.dumps(self.meta())})

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> EggatPredictor:
        """A predictor saved as safetensors, with its configuration and record from the file's metadata.

        Parameters
        ----------
        path
            The ``.safetensors`` file.

        Returns
        -------
        EggatPredictor
            The predictor, weights loaded.
        """
        from safetensors import safe_open
        from safetensors.torch import load_file

        with safe_open(str(path), framework="pt") as fh:
            meta = json.loads((fh.metadata() or {})["dltsched"])
        pred = cls(EggatConfig(**meta["config"]), meta["has_memory"], meta["has_util"], tuple(meta["gpus"]),
                   tuple(meta["models"]), meta["record"])
        pred.net = pred._new_net()
        pred.net.load_state_dict(load_file(str(path)))
        pred.net.eval()
        return pred


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


def all_groups(gpus: Sequence[str], jobs: Sequence[JobSpec], max_jobs: int) -> list[Group]:
    """Every unordered group of 2..``max_jobs`` of ``jobs`` (with repetition) on each GPU."""
    from itertools import combinations_with_replacement

    ordered = sorted(set(jobs))
    return [Group(gpu, combo) for gpu in gpus for k in range(2, max_jobs + 1)
            for combo in combinations_with_replacement(ordered, k)]


#: the weights an inner split chooses from (``ProfileWithEggat(weight=None)``)
WEIGHT_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(slots=True)
class ProfileWithEggat:
    """The profile model (:class:`~.profiled.ProfileColocation`) with an E-GGAT fitted on the same data
    blended into its speeds at ``weight`` (:data:`~.profiled.EGGAT_WEIGHT`): what bundle ``default+eggat``
    predicts with. Fitting needs torch; predictions run the network in numpy
    (:class:`~.egat_numpy.NumpyEggat`), within the profile model's bounds.

    ``weight=None`` chooses it from :data:`WEIGHT_GRID` by leave-one-model-out inside the training data (both
    models refitted per inner fold; the lowest pooled speed MAPE, ties to the smaller weight), never by a
    held-out score; the choice is kept in ``chosen``.
    """

    weight: float | None = EGGAT_WEIGHT
    config: EggatConfig = field(default_factory=EggatConfig)
    model: ProfileColocation | None = None
    eggat: EggatPredictor | None = None
    chosen: dict[str, Any] = field(default_factory=dict)

    def fit(self, train: ColocDataset) -> ProfileWithEggat:
        """Fit on ``train``: the profile model with the network as one more input; returns this predictor."""
        weight = self.weight if self.weight is not None else self._inner_weight(train)
        self.eggat = EggatPredictor(self.config).fit(without_absent(train))
        profile = ProfileColocation(seed=self.config.seed).fit(train)
        self.model = profile.attach_eggat(self.eggat.to_numpy(), weight)
        return self

    def _inner_weight(self, train: ColocDataset) -> float:
        from dltsched.predictors.colocation.metrics import scores
        from dltsched.predictors.colocation.splits import folds

        preds: dict[float, list[GroupPrediction]] = {w: [] for w in WEIGHT_GRID}
        samples = []
        for split in folds(train, "model", self.config.seed):
            inner = ProfileWithEggat(WEIGHT_GRID[-1], self.config).fit(split.train)
            assert inner.model is not None
            groups = [group_of(s) for s in split.test.samples]
            samples.extend(split.test.samples)
            for w in WEIGHT_GRID:
                preds[w].extend(inner.model.attach_eggat(inner.model.eggat, w).predict(groups, split.test))
        mape = {w: scores(samples, p)["speed_mape"] for w, p in preds.items()}
        best = min(WEIGHT_GRID, key=lambda w: (mape[w] if mape[w] is not None else math.inf, w))
        self.chosen = {"weight": best, "inner_speed_mape": {str(w): round(v, 2) for w, v in mape.items()
                                                            if v is not None}}
        return best

    def predict(self, groups: Sequence[Group], data: ColocDataset) -> list[GroupPrediction]:
        """One :class:`GroupPrediction` a group (speeds, memory MiB, utilisation %) from the fitted model.

        Raises
        ------
        ValidationError
            When called before :meth:`fit`.
        """
        if self.model is None:
            raise ValidationError("model", "not trained; call fit()")
        return self.model.predict(groups, data)

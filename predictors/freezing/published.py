"""The frozen penalty the simulator's ground truth uses, calibrated on published freezing results, and a
predictor that is a known multiple of it (for mismatch sweeps).

Meaning of a frozen penalty ``p`` (everywhere in dltsched): the fraction of each iteration's training progress
that freezing costs. A job frozen at a level makes useful progress at ``(1 - p)`` times its layer-aware
throughput, i.e. it needs ``1 / (1 - p)`` times the iterations (``p / (1 - p)`` extra) to reach the accuracy
it would reach unfrozen. The owner's ``accuracy_budget`` bounds ``p``.

:class:`PublishedFreezing` (the ground truth): ``p = a_family * f**1.5 * (1 - s)**2``, capped at 0.5, with
``f`` the frozen fraction of the model's blocks (freeze level / blocks) and ``s`` the training progress when
freezing starts. Published results, and how they set the constants (each result reads an accuracy change as
lost progress, our assumption):

* FreezeOut (Brock et al., arXiv:1706.04983, 2017), CIFAR, layers frozen progressively from half-way through
  training (t0 = 0.5): up to 20% less wall-clock time at a 3% accuracy loss for DenseNets, no loss for
  ResNets, no gain for VGG. A CNN freezing half its blocks at s = 0.5 costs 3%: ``a_cnn * 0.5**1.5 * 0.5**2 =
  0.03``, ``a_cnn = 0.34``.
* Egeria (Wang et al., EuroSys 2023, arXiv:2201.06227): freezing the front layers once they have converged
  gives 19%-43% training speedup "without sacrificing accuracy". At the late points it freezes (s >= 0.6,
  f <= 0.5) the CNN curve gives at most 0.34 * 0.354 * 0.16 = 1.9%, within run-to-run accuracy noise.
* AutoFreeze (Liu et al., arXiv:2102.01386, 2021): BERT fine-tuning with adaptive block freezing, up to 2.55x
  faster on one GPU "without affecting model accuracy": transformers tolerate more freezing,
  ``a_transformer = 0.12`` (three quarters of the blocks frozen at s = 0.3 cost 0.12 * 0.65 * 0.49 = 3.8%).
* IceFrog (IEEE TPDS 36(6), 2025): the penalty grows super-linearly with the frozen fraction and falls the
  later freezing starts; we take that shape (exponents 1.5 and 2) and no number from it.

RNN, GAN and RL models have no published freezing result we know of: they use the CNN constant with a margin
(``a = 0.45``). The policies' default freezing predictor
(:class:`~dltsched.predictors.freezing.IceFrogFreezing`, ``penalty.json``) is an independent reading of the
same papers with another shape (``a f**p (1 - s)**q``, larger constants): for ResNet-50 (18 blocks) at 9
frozen blocks from s = 0.5 it predicts 0.10 where the truth is 0.030; at 4 blocks from s = 0 0.040 where the
truth is 0.036; at 17 blocks from s = 0 0.71 where it is 0.31. It is an estimate, as a real one would be, not
the truth.

:class:`ScaledFreezing` predicts ``scale`` times the truth's penalty (levels from another predictor): with
``scale`` 0.5, 1 and 2 it is the mismatch sweep of ``simulate --freeze-penalty-scale``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dltsched.engine.domain.model import Job
from dltsched.engine.domain.predictors import FreezingPredictor

#: a_family of the ground-truth penalty (see the module docstring)
PUBLISHED_CONSTANTS: dict[str, float] = {"cnn": 0.34, "transformer": 0.12, "rnn": 0.45, "gan": 0.45,
                                         "rl": 0.45}
#: the largest penalty the ground truth gives
MAX_PENALTY = 0.5


@dataclass(frozen=True, slots=True)
class PublishedFreezing:
    """Ground-truth frozen penalty calibrated on FreezeOut, Egeria and AutoFreeze (see the module
    docstring)."""

    constants: dict[str, float] = field(default_factory=lambda: dict(PUBLISHED_CONSTANTS))
    default: float = 0.34
    max_penalty: float = MAX_PENALTY

    def num_freeze_levels(self, job: Job) -> int:
        """Freeze levels of the job: the model's layer count (the
        :class:`~dltsched.engine.domain.predictors.FreezingPredictor` protocol)."""
        from dltsched.engine.domain.catalog import model_spec

        return model_spec(job.model).layers

    def frozen_penalty(self, job: Job, freeze_level: int, start_progress: float = 0.0) -> float:
        """Accuracy penalty in [0, 1) of the freeze level, by the published constant of its family (the
        :class:`~dltsched.engine.domain.predictors.FreezingPredictor` protocol)."""
        from dltsched.engine.domain.catalog import model_spec

        if freeze_level <= 0:
            return 0.0
        spec = model_spec(job.model)
        frac = min(freeze_level / spec.layers, 1.0)
        s = min(max(start_progress, 0.0), 1.0)
        a = self.constants.get(spec.family, self.default)
        return min(a * frac**1.5 * (1.0 - s) ** 2, self.max_penalty)


@dataclass(frozen=True, slots=True)
class ScaledFreezing:
    """Predicts ``scale`` x the ground truth's penalty (capped below 1); levels come from ``levels``."""

    levels: FreezingPredictor
    scale: float = 1.0
    reference: PublishedFreezing = field(default_factory=PublishedFreezing)

    def __post_init__(self) -> None:
        from dltsched.engine.domain.errors import ValidationError

        if not 0.0 <= self.scale <= 100.0:
            raise ValidationError("freeze_penalty_scale",
                                  f"{self.scale!r} not understood; a number in [0, 100]")

    def num_freeze_levels(self, job: Job) -> int:
        """Freeze levels of the job: the wrapped predictor's (the
        :class:`~dltsched.engine.domain.predictors.FreezingPredictor` protocol)."""
        return self.levels.num_freeze_levels(job)

    def frozen_penalty(self, job: Job, freeze_level: int, start_progress: float = 0.0) -> float:
        """Accuracy penalty in [0, 1) of the freeze level: the reference's x ``scale``, at most 0.99 (the
        :class:`~dltsched.engine.domain.predictors.FreezingPredictor` protocol)."""
        return min(0.99, self.scale * self.reference.frozen_penalty(job, freeze_level, start_progress))

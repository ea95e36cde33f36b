"""Shared pieces of the zoo's torch models: the registry of builders and the ``Built`` record.

A builder takes a dataset name and returns a :class:`Built`: a module whose ``forward(*inputs)``
returns the training loss, a function making example inputs for a batch size, and the module-path
prefixes of the freezable blocks in freeze order (block ``i`` = freeze-level unit ``i``).
Only graph extraction imports this module (it needs torch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True, slots=True)
class Built:
    """A zoo model ready for export: loss-returning module, input maker, block prefixes."""

    module: nn.Module
    make_inputs: Callable[[int], tuple[torch.Tensor, ...]]
    blocks: tuple[str, ...]


Builder = Callable[[str], Built]

#: model id -> (builder, datasets it knows)
BUILDERS: dict[str, tuple[Builder, tuple[str, ...]]] = {}


def register(model: str, *datasets: str) -> Callable[[Builder], Builder]:
    """Decorator adding a builder for ``model`` on ``datasets``."""

    def deco(fn: Builder) -> Builder:
        BUILDERS[model] = (fn, datasets)
        return fn

    return deco


#: image datasets -> (channels, side, classes)
IMAGE_DATASETS: dict[str, tuple[int, int, int]] = {
    "cifar10": (3, 32, 10),
    "cifar100": (3, 32, 100),
    "imagenet": (3, 224, 1000),
}


class Classifier(nn.Module):
    """Runs ``layers`` in order and returns the cross-entropy loss against integer labels."""

    def __init__(self, layers: list[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The layers in order, then cross-entropy against the labels. Returns the training loss (a
        scalar)."""
        for layer in self.layers:
            x = layer(x)
        return F.cross_entropy(x, y)


def sequential_blocks(n: int, prefix: str = "layers") -> tuple[str, ...]:
    """Block prefixes ``prefix.0`` to ``prefix.<n-1>``.

    Parameters
    ----------
    n
        Number of blocks.
    prefix
        The container's attribute name.

    Returns
    -------
    tuple[str, ...]
        The prefixes.
    """
    return tuple(f"{prefix}.{i}" for i in range(n))


def image_classifier(layers: list[nn.Module], dataset: str) -> Built:
    """A :class:`Built` for a layer list on an image dataset of :data:`IMAGE_DATASETS`."""
    channels, side, classes = IMAGE_DATASETS[dataset]

    def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
        return torch.randn(batch, channels, side, side), torch.randint(0, classes, (batch,))

    return Built(Classifier(layers), make_inputs, sequential_blocks(len(layers)))


def conv_bn(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1,
            act: type[nn.Module] | None = nn.ReLU) -> nn.Sequential:
    """Conv (no bias) + BatchNorm + optional activation, 'same' padding."""
    mods: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                             nn.BatchNorm2d(cout)]
    if act is not None:
        mods.append(act())
    return nn.Sequential(*mods)


class Head(nn.Module):
    """Global average pool, flatten, optional dropout, linear classifier."""

    def __init__(self, cin: int, classes: int, hidden: int = 0, act: type[nn.Module] = nn.ReLU) -> None:
        super().__init__()
        mods: list[nn.Module] = [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        if hidden:
            mods += [nn.Linear(cin, hidden), act(), nn.Dropout(0.2)]
            cin = hidden
        mods.append(nn.Linear(cin, classes))
        self.net = nn.Sequential(*mods)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Pool and classify. Returns class logits (batch, classes)."""
        return self.net(x)

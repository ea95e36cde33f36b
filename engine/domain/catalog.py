"""GPU and model catalogs: canonical ids, aliases and spec-sheet values.

Both catalogs are JSON files shipped in ``instances/data``. Names resolve case-insensitively and
ignore ``-``, ``_``, spaces and dots, so ``"V100-16GB"``, ``"v100_16gb"`` and ``"V100M16"`` all
resolve to ``v100``. Unknown names raise :class:`UnknownNameError` listing the close matches.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Generic, TypeVar

from dltsched.engine.domain.errors import check_positive

T = TypeVar("T")

_DATA = "dltsched.instances"


@dataclass(frozen=True, slots=True)
class GpuType:
    """Spec of one GPU model (public spec-sheet values; see ``instances/data/gpus.json``).

    Parameters
    ----------
    id
        The canonical id, e.g. ``v100``.
    name
        The product name.
    architecture
        The architecture, e.g. ``volta``.
    memory_gib
        Memory, GiB.
    memory_bandwidth_gbs
        Memory bandwidth, GB/s.
    fp32_tflops, fp16_tensor_tflops
        Peak FP32 and FP16 tensor throughput, TFLOP/s.
    sm_count
        Streaming multiprocessors.
    interconnect
        The intra-node link, e.g. ``nvlink``.
    intra_node_bandwidth_gbs
        Its bandwidth, GB/s.
    aliases
        Other names it is known by.

    Raises
    ------
    ValidationError
        When a number is not positive.
    """

    id: str
    name: str
    architecture: str
    memory_gib: float
    memory_bandwidth_gbs: float
    fp32_tflops: float
    fp16_tensor_tflops: float
    sm_count: int
    interconnect: str
    intra_node_bandwidth_gbs: float
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("memory_gib", "memory_bandwidth_gbs", "fp32_tflops", "fp16_tensor_tflops",
                     "intra_node_bandwidth_gbs"):
            check_positive(f"gpu_types.{self.id}.{name}", getattr(self, name))
        check_positive(f"gpu_types.{self.id}.sm_count", self.sm_count, integer=True)

    @property
    def memory_mib(self) -> float:
        """Memory, MiB."""
        return self.memory_gib * 1024.0


class UnknownNameError(ValueError):
    """A GPU or model name that is not in the catalog; the message lists close matches."""


def normalize_name(name: str) -> str:
    """Lower-case and drop separators so that spellings of one name compare equal.

    Parameters
    ----------
    name
        A name.

    Returns
    -------
    str
        Its normal form.
    """
    return re.sub(r"[\s\-_./()]", "", name.lower())


@dataclass(frozen=True, slots=True)
class DatasetSpec:
    """Coarse per-sample cost of a model on one dataset (analytic fallback only).

    Parameters
    ----------
    fwd_gflops
        Forward pass, GFLOP per sample.
    activation_mib
        Activations kept for the backward pass, MiB per sample.
    """

    fwd_gflops: float
    activation_mib: float


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One model of the zoo: its family, aliases and coarse per-sample costs.

    Parameters
    ----------
    id
        The canonical id, e.g. ``resnet50``.
    family
        Its family (``cnn``, ``transformer``, ...).
    aliases
        Other names it is known by.
    default_dataset
        The dataset a job trains on when it names none.
    datasets
        Per-sample costs per dataset.
    params_m
        Parameters, millions.
    layers
        Layers (the unit of freezing).
    default_batch_size
        The batch size per GPU a job uses when it names none.
    """

    id: str
    family: str
    aliases: tuple[str, ...]
    default_dataset: str
    datasets: dict[str, DatasetSpec]
    params_m: float
    layers: int
    default_batch_size: int

    def dataset(self, name: str | None) -> DatasetSpec:
        """The per-sample costs on dataset ``name``.

        Parameters
        ----------
        name
            The dataset (``None``: the default one).

        Returns
        -------
        DatasetSpec
            Its costs.

        Raises
        ------
        UnknownNameError
            When the model has no such dataset.
        """
        key = self.default_dataset if name is None else name.lower()
        if key not in self.datasets:
            raise UnknownNameError(
                f"model '{self.id}': dataset '{name}' not known; one of {sorted(self.datasets)}"
            )
        return self.datasets[key]


class _Catalog(Generic[T]):
    def __init__(self, kind: str, items: dict[str, T], aliases: dict[str, str]) -> None:
        self.kind = kind
        self.items = items
        self._aliases = aliases

    def resolve(self, name: str) -> str:
        """Canonical id for ``name``; raises :class:`UnknownNameError` with close matches."""
        if name in self.items:
            return name
        key = normalize_name(str(name))
        if key in self._aliases:
            return self._aliases[key]
        close = difflib.get_close_matches(key, list(self._aliases), n=4, cutoff=0.6)
        hints = sorted({self._aliases[c] for c in close})
        hint = f"; did you mean {', '.join(repr(h) for h in hints)}?" if hints else ""
        raise UnknownNameError(
            f"unknown {self.kind} '{name}'{hint} (known: {', '.join(sorted(self.items))})"
        )

    def get(self, name: str) -> T:
        return self.items[self.resolve(name)]

    def ids(self) -> tuple[str, ...]:
        return tuple(self.items)


def _read(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(resources.files(_DATA).joinpath("data", name).read_text())
    return data


@cache
def gpu_catalog() -> _Catalog[GpuType]:
    """The GPU catalog (``instances/data/gpus.json``), read once.

    Returns
    -------
    _Catalog of GpuType
        Lookup by id or alias (``resolve``, ``get``, ``ids``).
    """
    items: dict[str, GpuType] = {}
    aliases: dict[str, str] = {}
    for raw in _read("gpus.json")["gpus"]:
        spec = GpuType(**{**raw, "aliases": tuple(raw.get("aliases", ()))})
        items[spec.id] = spec
        for a in (spec.id, *spec.aliases):
            aliases[normalize_name(a)] = spec.id
    return _Catalog("GPU type", items, aliases)


@cache
def model_catalog() -> _Catalog[ModelSpec]:
    """The model zoo (``instances/data/models.json``), read once.

    Returns
    -------
    _Catalog of ModelSpec
        Lookup by id or alias (``resolve``, ``get``, ``ids``).
    """
    items: dict[str, ModelSpec] = {}
    aliases: dict[str, str] = {}
    for raw in _read("models.json")["models"]:
        datasets = {k: DatasetSpec(**v) for k, v in raw["datasets"].items()}
        spec = ModelSpec(**{**raw, "aliases": tuple(raw["aliases"]), "datasets": datasets})
        items[spec.id] = spec
        for a in (spec.id, *spec.aliases):
            aliases[normalize_name(a)] = spec.id
    return _Catalog("model", items, aliases)


def gpu_spec(name: str) -> GpuType:
    """Spec of a GPU type by id or alias.

    Parameters
    ----------
    name
        An id or alias, any spelling (``V100``, ``tesla-v100``).

    Returns
    -------
    GpuType
        Its spec.

    Raises
    ------
    UnknownNameError
        When the name is unknown (the message lists close matches).
    """
    return gpu_catalog().get(name)


def model_spec(name: str) -> ModelSpec:
    """Catalog entry of a model by id or alias.

    Parameters
    ----------
    name
        An id or alias, any spelling (``ResNet-50``).

    Returns
    -------
    ModelSpec
        Its entry.

    Raises
    ------
    UnknownNameError
        When the name is unknown (the message lists close matches).
    """
    return model_catalog().get(name)

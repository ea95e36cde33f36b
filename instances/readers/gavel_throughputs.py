"""Reader for Gavel's measured throughputs (``gavel/*throughputs.json``).

Gavel keys job types as ``"ResNet-18 (batch size 16)"`` with a scale factor (#GPUs); values are
training steps per second, isolated (``"null"``) and pairwise co-located (scale 1 only, K80/P100 in
this copy). ``[0, 0]`` marks a pair that was not measured or not feasible and is dropped here.

The package carries a copy of ``simulation_throughputs.json`` (MIT, provenance in ``instances/data/gavel/``):
:func:`throughputs_file` gives the data folder's file when there is one, else that copy.
"""

from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from dltsched.engine.domain.catalog import model_catalog
from dltsched.instances.datadir import data_file, find_data_dir

#: the packaged copy of Gavel's ``simulation_throughputs.json`` (MIT; LICENSE.md and SOURCE.md beside it)
PACKAGED_THROUGHPUTS = Path(__file__).resolve().parents[1] / "data" / "gavel" / "simulation_throughputs.json"

_JOB_TYPE = re.compile(r"^(?P<name>.+?)(?: \(batch size (?P<bs>\d+)\))?$")

#: Gavel job-type name -> (model id, default batch size when the name has none, dataset)
GAVEL_MODELS: dict[str, tuple[str, int, str | None]] = {
    "ResNet-18": ("resnet18", 128, "cifar10"),
    "ResNet-50": ("resnet50", 64, "imagenet"),
    "Transformer": ("transformer", 64, "multi30k"),
    "LM": ("lstm_lm", 20, "wikitext2"),
    "Recommendation": ("recoder", 2048, "ml-20m"),
    "A3C": ("a3c", 4, "pong"),
    "CycleGAN": ("cyclegan", 1, "monet2photo"),
}


@dataclass(frozen=True, slots=True)
class GavelJobType:
    """One Gavel job type: model id, batch size, dataset, and Gavel's own label.

    Parameters
    ----------
    model
        The model-zoo id.
    batch_size
        The batch size.
    dataset
        The dataset.
    label
        Gavel's label, e.g. ``"ResNet-18 (batch size 16)"``.
    """

    model: str
    batch_size: int
    dataset: str | None
    label: str


def parse_job_type(label: str) -> GavelJobType:
    """``"ResNet-18 (batch size 16)"`` -> resnet18 / 16 / cifar10.

    Parameters
    ----------
    label
        Gavel's label.

    Returns
    -------
    GavelJobType
        The job type.

    Raises
    ------
    ValueError
        When the label is not one of Gavel's.
    """
    m = _JOB_TYPE.match(label.strip())
    if not m or m.group("name") not in GAVEL_MODELS:
        raise ValueError(f"Gavel job type '{label}' not understood; known: {', '.join(GAVEL_MODELS)}")
    model, default_bs, dataset = GAVEL_MODELS[m.group("name")]
    bs = int(m.group("bs")) if m.group("bs") else default_bs
    model_catalog().resolve(model)
    return GavelJobType(model, bs, dataset, label.strip())


@dataclass(frozen=True, slots=True)
class GavelThroughputs:
    """Isolated and pairwise throughputs (steps/s) keyed by GPU id and job types.

    Parameters
    ----------
    isolated
        (GPU, job type, GPU count, consolidated) -> steps/s.
    pairs
        (GPU, job type a, job type b) -> steps/s of each while they share the GPU.
    """

    #: (gpu, job type, scale factor, consolidated) -> steps/s
    isolated: dict[tuple[str, GavelJobType, int, bool], float]
    #: (gpu, job type a, job type b) -> (steps/s of a, steps/s of b) when co-located on one GPU
    pairs: dict[tuple[str, GavelJobType, GavelJobType], tuple[float, float]]


def _key(text: str) -> tuple[str, int]:
    label, scale = ast.literal_eval(text)
    return str(label), int(scale)


@cache
def _read(path: str) -> GavelThroughputs:
    raw = json.loads(Path(path).read_text())
    isolated: dict[tuple[str, GavelJobType, int, bool], float] = {}
    pairs: dict[tuple[str, GavelJobType, GavelJobType], tuple[float, float]] = {}
    for gpu_key, table in raw.items():
        consolidated = not gpu_key.endswith("_unconsolidated")
        gpu = gpu_key.removesuffix("_unconsolidated")
        for job_key, entry in table.items():
            label, scale = _key(job_key)
            jt = parse_job_type(label)
            if entry.get("null"):
                isolated[(gpu, jt, scale, consolidated)] = float(entry["null"])
            if not consolidated or scale != 1:
                continue
            for other_key, value in entry.items():
                if other_key == "null":
                    continue
                other_label, other_scale = _key(other_key)
                if other_scale != 1 or not value or float(value[0]) <= 0 or float(value[1]) <= 0:
                    continue
                pairs[(gpu, jt, parse_job_type(other_label))] = (float(value[0]), float(value[1]))
    return GavelThroughputs(isolated, pairs)


def throughputs_file(data_dir: str | os.PathLike[str] | None = None) -> tuple[Path, str]:
    """Gavel's ``simulation_throughputs.json``: the data folder's when it has one, else the packaged copy.

    Parameters
    ----------
    data_dir
        The data folder (default: found automatically; none found is fine).

    Returns
    -------
    (Path, str)
        The file and where it came from: ``"data folder"`` or ``"packaged"``.
    """
    base = find_data_dir(data_dir, required=False)
    if base is not None:
        candidate = base / "gavel" / "simulation_throughputs.json"
        if candidate.is_file():
            return candidate, "data folder"
    return PACKAGED_THROUGHPUTS, "packaged"


def read_gavel_throughputs(path: str | os.PathLike[str] | None = None, *,
                           data_dir: str | os.PathLike[str] | None = None) -> GavelThroughputs:
    """Read ``simulation_throughputs.json`` (default) or another Gavel throughput file.

    Parameters
    ----------
    path
        The file (default: ``gavel/simulation_throughputs.json`` of the data folder).
    data_dir
        The data folder (default: found automatically).

    Returns
    -------
    GavelThroughputs
        The throughputs.
    """
    p = Path(path) if path is not None else data_file("gavel", "simulation_throughputs.json",
                                                      data_dir=data_dir)
    return _read(str(p.resolve()))

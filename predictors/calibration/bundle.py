"""The calibration bundle: one JSON file of what profiles of some GPUs taught, with its provenance and
figures.

``dltsched calibrate DIR... --out CAL.json`` writes it (:func:`calibrate`); ``--calibration CAL.json`` (and
the API's ``predictors="default@CAL.json"``) reads it (:meth:`CalibrationBundle.load`). Layout::

    {"format": "dltsched-calibration/1", "created_utc": ..., "dltsched": {"version": ..., "commit": ...},
     "fitted": {...what each model is...}, "shippable": true,
     "data": [{path, files_sha256, date_utc, command, device_name, ...}],
     "gpus": {"h200": {"sharing_modes": ["mps", "timeslice"], "step_time": {...}, "memory": {...},
                       "utilisation": {...}, "colocation": {"timeslice": {...}, "mps": {...}},
                       "profiles": [...], "figures": {...cross-validated, per sharing mode...}}}}

Plain JSON, never pickle. A bundle's ``label`` (file name and content hash) is what results name.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dltsched.predictors.calibration.groups as grp
import dltsched.predictors.calibration.isolated as iso
import dltsched.predictors.calibration.resources as res
from dltsched.engine.domain.errors import ValidationError
from dltsched.predictors.calibration.data import ProfileData, read_datasets
from dltsched.predictors.calibration.model import GpuCalibration, fit_gpu

FORMAT = "dltsched-calibration/1"

#: what a bundle's models are, written into every bundle
FITTED = {
    "step_time": "compute-scope step = gpu + host + fixed_s, gpu = sum over op classes (conv, gemm, vector) "
                 "of scale x the kernel model's kernel seconds + optimizer scale x optimizer passes; host in"
                 " one of three forms, 'ops_and_launches' unless another's leave-one-model-out error over the"
                 " fit's own rows is lower by more than one standard error: 'overlap' "
                 "(smooth max of gpu and dispatch_us x kernel launches, overlap_power 3), 'host_ops' "
                 "(dispatch_us x the framework's ops, added: overlap_power 1, host_ops 1) or "
                 "'ops_and_launches' (host_ops plus launch_us x kernel launches); each parameter "
                 "pulled towards the uncalibrated kernel step model's value; per GPU, the isolated runs of "
                 "every sharing mode pooled",
    "memory": "NVML used memory of the GPU alone = context_mib + weights x (weights, gradients, optimizer "
              "state) + activations x (activations at the batch size)",
    "utilisation": "NVML utilisation alone = 100 min(1, k x GPU seconds / max(step, GPU seconds)) (the "
                   "'ratio' form; GPU seconds and step as the step model predicts them), one factor k "
                   "fitted on errors in percentage points; a GPU entry without utilisation_form carries "
                   "the older 'power' form, 100 min(1, ((GPU seconds + launch_busy_us x launches) / step) "
                   "^ gamma)",
    "colocation": "per sharing mode: 1 / speed_i - 1 = sum over partners j of (t_both b_i b_j + t_partner "
                  "b_j + t_any), b = GPU seconds (as the 'overlap' step form fits them: busy_step_time) / "
                  "step alone; group memory = sum alone - (k - 1) shared_memory_mib; group utilisation = 100"
                  " (1 - prod(1 - u_i) ^ util_gamma)",
    "precedence": "a job's own profile in the bundle, then the calibrated models, for a GPU type the bundle "
                  "covers; the default predictors for every other GPU type",
}


def _commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dltsched")
    except PackageNotFoundError:
        return None


def calibrate(paths: Sequence[str | os.PathLike[str]], *, figures: bool = True,
              sharing: str | None = None, gpu: str | None = None) -> dict[str, Any]:
    """The bundle (a JSON-ready dict) of every GPU measured in the datasets under ``paths`` (``sharing``: only
    the datasets of that sharing mode; ``gpu``: the GPU of datasets that do not record theirs, Lucid's);
    ``figures``: with the cross-validated figures (:func:`~.evaluate.cross_validate`). A bundle fitted on
    data whose licence forbids shipping it (Lucid's) has ``shippable: false`` and the licences it carries."""
    from dltsched.predictors.calibration.evaluate import cross_validate

    datasets = [d for d in read_datasets(paths, gpu) if sharing is None or d.sharing == sharing]
    if not datasets:
        raise ValidationError("--sharing", f"no {sharing} datasets under {', '.join(map(str, paths))}")
    by_gpu: dict[str, list[ProfileData]] = {}
    for d in datasets:
        by_gpu.setdefault(d.gpu, []).append(d)
    gpus = {}
    for gpu, data in sorted(by_gpu.items()):
        cal = fit_gpu(data)
        entry = {"sharing_modes": sorted(d.sharing for d in data),
                 "jobs_alone": sum(len(d.isolated) for d in data),
                 "groups": {d.sharing: len(d.groups) for d in data}, **cal.to_json()}
        if figures:
            entry["figures"] = cross_validate(data)
        gpus[gpu] = entry
    sources = [s for d in datasets for s in d.sources]
    restricted = sorted({str(s["license"]) for s in sources if s.get("shippable") is False})
    return {"format": FORMAT, "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "dltsched": {"version": _version(), "commit": _commit()}, "fitted": FITTED,
            "shippable": not restricted, **({"restricted_by": restricted} if restricted else {}),
            "defaults": {"step_time": iso.default_step_params(), "memory": res.default_memory_params(),
                         "colocation_speed": grp.DEFAULT_SPEED},
            "data": sources, "gpus": gpus}


@dataclass(frozen=True, slots=True)
class CalibrationBundle:
    """A loaded bundle: per GPU type its :class:`GpuCalibration`; ``label`` names it in results (and says when
    the bundle is not shippable)."""

    path: str
    label: str
    gpus: dict[str, GpuCalibration]
    raw: dict[str, Any]

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CalibrationBundle:
        """Read and check a bundle file; a bad one raises one :class:`ValidationError` naming the fix."""
        p = Path(path)
        if not p.is_file():
            raise ValidationError("calibration",
                                  f"'{p}' not found; write one with 'dltsched calibrate DIR --out {p}'")
        text = p.read_bytes()
        try:
            raw = json.loads(text)
        except ValueError as err:
            raise ValidationError("calibration", f"'{p}' is not JSON ({err}); rewrite it with 'dltsched "
                                                 "calibrate'") from None
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
            raise ValidationError("calibration", f"'{p}' has format {found!r}, not {FORMAT!r}; write it with "
                                                 "'dltsched calibrate'")
        try:
            gpus = {gpu: GpuCalibration.from_json(gpu, entry) for gpu, entry in raw.get("gpus", {}).items()}
        except (KeyError, TypeError, ValueError) as err:
            raise ValidationError("calibration", f"'{p}': GPU entry not understood ({err}); rewrite it with "
                                                 "'dltsched calibrate'") from None
        label = f"{p.name}#{hashlib.sha256(text).hexdigest()[:12]}"
        if raw.get("shippable") is False:
            label += " (not shippable: fitted on non-commercial data)"
        return cls(str(p), label, gpus, raw)

    def for_gpu(self, gpu_type: str) -> GpuCalibration | None:
        """The calibration of ``gpu_type`` (catalog id or alias), ``None`` where the bundle does not cover
        it."""
        from dltsched.engine.domain.catalog import gpu_catalog

        try:
            gpu_id = gpu_catalog().resolve(gpu_type)
        except ValueError:
            return None
        return self.gpus.get(gpu_id)

    @property
    def shippable(self) -> bool:
        """Whether the data it was fitted on allow shipping it (``False``: fitted on non-commercial data)."""
        return bool(self.raw.get("shippable", True))

    def covered(self) -> tuple[str, ...]:
        """The GPU types the bundle calibrates, sorted."""
        return tuple(sorted(self.gpus))

    def fitted_on(self, path: str | os.PathLike[str]) -> bool:
        """Whether the dataset folder of ``path`` (a folder, or a file in one) is among the bundle's data (by
        path or by content): its figures are then in-sample, not predictions."""
        from dltsched.predictors.calibration.data import files_digest

        p = Path(path)
        folder = p if p.is_dir() else p.parent
        digest = files_digest(folder) if folder.is_dir() else None
        for source in self.raw.get("data", []):
            same_path = Path(str(source.get("path", ""))).resolve() in (folder.resolve(), p.resolve())
            if same_path or (digest is not None and source.get("files_sha256") == digest):
                return True
        return False

    def describe(self) -> dict[str, Any]:
        """What a result record says of the bundle: label, GPUs covered with their sharing modes, data."""
        return {"label": self.label, "path": self.path, "shippable": self.shippable,
                "gpus": {g: self.raw["gpus"][g].get("sharing_modes", []) for g in self.covered()},
                "commit": self.raw.get("dltsched", {}).get("commit"),
                "created_utc": self.raw.get("created_utc")}

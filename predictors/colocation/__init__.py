"""Co-location prediction: the profile model the engine uses, E-GGAT, baselines, readers, splits, tables.

Importing this package never imports torch; only training (``train``, ``egat``) needs it.
:func:`default_colocation_predictor` returns the engine-facing
:class:`~dltsched.engine.domain.predictors.ColocationPredictor`: the shipped profile model of
:mod:`.profiled` (physics-shaped base from each job's isolated profile, tree corrections fitted on
Gavel's MIT-licensed pairs only, Gavel's isolated profiles), with the caller's measured job profiles added
when given; ``eggat=True`` also blends in the E-GGAT trained on the same pairs (``eggat_gavel.safetensors``),
run in numpy (:mod:`.egat_numpy`): better out of fold on Gavel, slower per group. A job with
no profile on a GPU has its step time, memory and utilisation predicted, counted in ``fallbacks`` and logged
(see :mod:`.profiled`). The older ensemble-exported table (:func:`~.table.default_table`,
``default_table.json``) stays available for comparison.
"""

from __future__ import annotations

from collections.abc import Iterable

from dltsched.predictors.colocation.profiled import ProfileColocation, shipped_profile_predictor
from dltsched.predictors.colocation.table import ColocationTable, default_table
from dltsched.predictors.profiles import JobProfile


def default_colocation_predictor(*, strict: bool = False, profiles: Iterable[JobProfile] = (),
                                 eggat: bool = False) -> ProfileColocation:
    """The shipped profile co-location model, using ``profiles`` (measured :class:`JobProfile` s; they add to
    and replace its own Gavel profiles; ``predicted`` ones are ignored). ``strict``: a job with no profile on
    the GPU raises a ValidationError instead of having its profile predicted. ``eggat=True``: with the
    E-GGAT the shipped file names blended into its speeds (see :data:`~.profiled.EGGAT_WEIGHT`)."""
    model = shipped_profile_predictor(strict=strict, eggat=eggat)
    profiles = tuple(profiles)
    return model.with_job_profiles(profiles) if profiles else model


__all__ = ["ColocationTable", "ProfileColocation", "default_colocation_predictor", "default_table"]

"""Co-location prediction: E-GGAT graph network, baselines, readers, splits, and a torch-free table.

Importing this package never imports torch; only ``train`` and ``egat`` need it.
:func:`default_colocation_predictor` returns the engine-facing
:class:`~dltsched.engine.domain.predictors.ColocationPredictor`: the shipped table exported from the
ensemble of E-GGAT and GBT trained on Gavel's pairs (MIT-licensed data only), with the fallbacks
documented in ``table``; ``eggat_gavel.safetensors`` is its E-GGAT member.
"""

from __future__ import annotations

from dltsched.predictors.colocation.table import ColocationTable, default_table


def default_colocation_predictor(*, strict: bool = False) -> ColocationTable:
    """The shipped co-location table (see :mod:`dltsched.predictors.colocation.table`)."""
    return default_table(strict=strict)


__all__ = ["ColocationTable", "default_colocation_predictor"]

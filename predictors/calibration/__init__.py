"""Calibration: what ``dltsched profile`` measured on a GPU, turned into predictions for every job on it.

``dltsched calibrate DIR... --out CAL.json`` (:func:`~.bundle.calibrate`) fits, per GPU type and sharing mode,
step-time corrections on top of the kernel model, memory, utilisation and co-location, and writes them with
their data and cross-validated figures; :func:`~.wrap.calibrated_predictors` puts a bundle on top of a
predictor bundle (``--calibration CAL.json``, ``predictors="default@CAL.json"``). No torch, no GPU.
"""

from dltsched.predictors.calibration.bundle import CalibrationBundle, calibrate
from dltsched.predictors.calibration.wrap import calibrated_predictors

__all__ = ["CalibrationBundle", "calibrate", "calibrated_predictors"]

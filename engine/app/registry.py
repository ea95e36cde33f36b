"""Named policies and predictor bundles, resolved lazily by module path.

The engine never imports ``formulations`` or ``predictors`` internals at import time: each entry
is ``"module:attribute"`` and is imported on first use, so a missing optional dependency only
fails the entry that needs it. Solver backends have their own table: ``dltsched.formulations.backends``.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.policies.options import POLICY_OPTIONS, check_options, option_names

_POLICIES: dict[str, str] = {
    "fifo": "dltsched.engine.policies.greedy:FifoPolicy",
    "sjf": "dltsched.engine.policies.greedy:SjfPolicy",
    "tiresias": "dltsched.engine.policies.tiresias.policy:TiresiasPolicy",
    "gandiva": "dltsched.engine.policies.gandiva:GandivaPolicy",
    "icefrog": "dltsched.engine.policies.icefrog:IceFrogPolicy",
    "isacpp": "dltsched.engine.policies.isacpp:IsacppPolicy",
    "lucid": "dltsched.engine.policies.lucid:LucidPolicy",
    "gavel": "dltsched.engine.policies.gavel_lp:GavelPolicy",
    "optimizing": "dltsched.engine.app.api:optimizing_policy",
    "optimizing-nocoloc": "dltsched.engine.app.api:without_colocation",
    "optimizing-nofreeze": "dltsched.engine.app.api:without_freezing",
}

#: policy name -> pydantic model of the options it takes (see :mod:`dltsched.engine.policies.options`)
_OPTIONS: dict[str, type[BaseModel] | None] = dict(POLICY_OPTIONS)

#: policies that the main comparison (``--policy all``) runs, in table order
BASELINE_POLICIES: tuple[str, ...] = ("fifo", "sjf", "tiresias", "gandiva")

#: the strongest published alternatives the optimizing policy is compared with
PAPER_POLICIES: tuple[str, ...] = ("isacpp", "icefrog", "lucid", "gavel")

_PREDICTORS: dict[str, str] = {
    "analytic": "dltsched.predictors:analytic_predictors",
    "default": "dltsched.predictors:available_predictors",
    "default+eggat": "dltsched.predictors:eggat_predictors",
    "crossfit": "dltsched.predictors.crossfit:crossfit_predictors",
}

#: bundles fitted on measurements read from the data folder (their factory takes ``data_dir``)
_DATA_BUNDLES: frozenset[str] = frozenset({"crossfit"})

#: what each bundle is, for result tables: ``default`` is fitted on the very measurements the simulator's
#: ground truth uses, so its results are in-sample; ``crossfit`` prices each job with predictors fitted
#: without its model (:mod:`dltsched.predictors.crossfit`); ``analytic`` is fitted on nothing
BUNDLE_FIT: dict[str, str] = {"default": "in-sample", "default+eggat": "in-sample",
                              "crossfit": "out-of-fold by model",
                               "analytic": "not fitted"}

def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def bundle_recipe(name: str) -> str:
    """The fitting recipe behind a bundle's predictions, for result records: ``crossfit``'s fold recipe and
    step-time recipe (``crossfit/4+steptime/2``); empty for bundles with nothing refitted."""
    if name != "crossfit":
        return ""
    return "+".join(_load(f"dltsched.predictors.crossfit:{attr}")
                    for attr in ("RECIPE_VERSION", "STEPTIME_RECIPE"))


#: joins a bundle name and a calibration file: ``default@h200.json`` is ``default`` with that calibration on
#: top
CALIBRATION_SEP = "@"


def split_bundle(name: str) -> tuple[str, str | None]:
    """``"default@cal.json"`` -> ``("default", "cal.json")``; a name without a calibration -> ``(name,
    None)``."""
    base, sep, path = name.partition(CALIBRATION_SEP)
    return base, (path or None) if sep else None


def with_calibration(name: str, calibration: str | None) -> str:
    """The bundle name of ``name`` with the calibration file ``calibration`` on top (``NAME@PATH``; ``name``
    as is without one). The file is checked here, so a bad one is one clear line before anything runs."""
    if not calibration:
        return name
    base, already = split_bundle(name)
    if already is not None and already != calibration:
        raise ValidationError("calibration",
                              f"'{name}' already names calibration '{already}'; give one of the two")
    path, mode = calibration_parts(calibration)
    cal = calibration_bundle(path)
    if mode != "timeslice" and not any(mode in g.sharing for g in cal.gpus.values()):
        raise ValidationError("calibration",
                              f"'{path}' has no {mode} groups; profile them with 'dltsched profile "
                                             f"--sharing {mode}' and calibrate again, or leave out ':{mode}'")
    return f"{base}{CALIBRATION_SEP}{calibration}"


def calibration_parts(calibration: str) -> tuple[str, str]:
    """``"h200.json:mps"`` -> ``("h200.json", "mps")``: the bundle file and the sharing mode its co-location
    is priced for (default ``timeslice``)."""
    path, sep, mode = calibration.rpartition(":")
    return (path, mode) if sep and mode in ("timeslice", "mps") else (calibration, "timeslice")


def calibration_bundle(path: str) -> Any:
    """The calibration bundle at ``path``
    (:class:`~dltsched.predictors.calibration.bundle.CalibrationBundle`), read once per file content."""
    import os

    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        stamp = -1
    key = (os.path.abspath(path), stamp)
    if key not in _CALIBRATIONS:
        _CALIBRATIONS[key] = _load("dltsched.predictors.calibration.bundle:CalibrationBundle").load(path)
    return _CALIBRATIONS[key]


_CALIBRATIONS: dict[tuple[str, int], Any] = {}


def bundle_fields(name: str) -> dict[str, str]:
    """What a result record says of the predictor bundle it used: ``predictors`` (its name),
    ``predictors_fit`` (:data:`BUNDLE_FIT`) and ``predictors_recipe`` (:func:`bundle_recipe`); with a
    calibration on top, also ``calibration`` (the bundle's file name and content hash, and the GPU types it
    prices)."""
    base, calibration = split_bundle(name)
    out = {"predictors": name, "predictors_fit": BUNDLE_FIT.get(base, ""),
           "predictors_recipe": bundle_recipe(base)}
    if calibration is not None:
        path, mode = calibration_parts(calibration)
        cal = calibration_bundle(path)
        out["predictors_fit"] += (f"; {','.join(cal.covered())} calibrated on {cal.label} "
                                  "(profiled jobs in-sample)")
        out["calibration"] = f"{cal.label} ({', '.join(cal.covered())}, {mode}; other GPU types: {base})"
    return out


def _pick(kind: str, table: dict[str, str], name: str) -> str:
    key = name.lower()
    if key not in table:
        close = difflib.get_close_matches(key, list(table), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValidationError(kind, f"'{name}' not understood{hint} (known: {', '.join(sorted(table))})")
    return table[key]


def policy_names() -> tuple[str, ...]:
    """The registered policy names, in registration order."""
    return tuple(_POLICIES)


def register_policy_options(name: str, model: type[BaseModel] | None) -> None:
    """Declare the option model of policy ``name`` (``None``: it takes no options)."""
    _OPTIONS[name.lower()] = model


def policy_option_model(name: str) -> type[BaseModel] | None:
    """The pydantic model of the options policy ``name`` takes (``None``: it takes none)."""
    _pick("policy", _POLICIES, name)
    return _OPTIONS.get(name.lower())


def policy_options(name: str) -> tuple[str, ...]:
    """The option keys policy ``name`` takes, sorted."""
    return option_names(policy_option_model(name))


def check_policy_options(name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` checked against policy ``name``'s option model (see
    :mod:`dltsched.engine.policies.options`)."""
    return check_options(name.lower(), policy_option_model(name), options)


def options_for(names: Sequence[str], options: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Options of several policies run together: each policy gets the keys it takes; a key no policy in
    ``names`` takes is a ValidationError naming the keys they do take. Values are checked per policy."""
    taken = {n: set(policy_options(n)) for n in names}
    for key in options:
        if not any(key in keys for keys in taken.values()):
            if len(names) == 1:
                check_policy_options(names[0], {key: options[key]})
            allowed = sorted(set().union(*taken.values()))
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise ValidationError(f"option {key}", f"taken by none of the policies {', '.join(names)}; {hint}"
                                  f"allowed: {', '.join(allowed) or 'none'}")
    return {n: check_policy_options(n, {k: v for k, v in options.items() if k in taken[n]}) for n in names}


def make_policy(name: str, predictors: Any = None, **options: Any) -> Any:
    """Instantiate the policy registered as ``name`` with ``predictors`` (``None``: its default) and
    keyword ``options``, checked against the policy's option model first: an unknown key, a key this
    policy does not take, or a bad value raises :class:`ValidationError` naming the key."""
    factory: Callable[..., Any] = _load(_pick("policy", _POLICIES, name))
    checked = check_policy_options(name, options)
    return factory(**checked) if predictors is None else factory(predictors=predictors, **checked)


def predictor_names() -> tuple[str, ...]:
    """The registered predictor bundle names."""
    return tuple(_PREDICTORS)


def check_predictors(name: str) -> str:
    """``name`` lower-cased when it is a registered bundle (``NAME@CAL.json``: the calibration file checked
    and kept as given); else a ValidationError with close matches."""
    base, calibration = split_bundle(name)
    _pick("predictors", _PREDICTORS, base)
    return with_calibration(base.lower(), calibration)


def predictors(name: str = "default", data_dir: str | None = None) -> Any:
    """The predictor bundle registered as ``name``; a bundle fitted on the data folder's measurements
    (``crossfit``) reads them from ``data_dir`` (default: found as the readers find it). ``NAME@CAL.json``:
    that bundle with the calibration ``CAL.json`` on top (``dltsched calibrate``; the GPU types it covers use
    it; ``CAL.json:mps``: its co-location under MPS instead of time-slicing)."""
    base, calibration = split_bundle(name)
    factory = _load(_pick("predictors", _PREDICTORS, base))
    preds = factory(data_dir) if base.lower() in _DATA_BUNDLES else factory()
    if calibration is None:
        return preds
    path, mode = calibration_parts(calibration)
    wrap = _load("dltsched.predictors.calibration.wrap:calibrated_predictors")
    return wrap(preds, calibration_bundle(path), mode)


def default_bench_predictors(data_dir: str | None = None) -> str:
    """The bundle ``bench simulate`` uses when none is named: ``crossfit`` whenever the ground truth comes
    from measurements of a data folder (one is found), else ``default`` (the cross-fitted bundle needs the
    data folder; ``default`` is fitted on the Gavel table that the packaged truth also uses, so its results
    are in-sample)."""
    from dltsched.instances.datadir import find_data_dir

    return "crossfit" if find_data_dir(data_dir, required=False) is not None else "default"


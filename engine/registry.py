"""Named policies, predictor bundles and solver backends, resolved lazily by module path.

The engine never imports ``formulations`` or ``predictors`` internals at import time: each entry
is ``"module:attribute"`` and is imported on first use, so a missing optional dependency only
fails the entry that needs it. Other packages add entries with :func:`register_policy` etc.
"""

from __future__ import annotations

import difflib
import importlib
import logging
from collections.abc import Callable
from typing import Any

from dltsched.engine.errors import ValidationError

_POLICIES: dict[str, str] = {
    "fifo": "dltsched.engine.policies.greedy:FifoPolicy",
    "sjf": "dltsched.engine.policies.greedy:SjfPolicy",
    "tiresias": "dltsched.engine.policies.tiresias:TiresiasPolicy",
    "gandiva": "dltsched.engine.policies.gandiva:GandivaPolicy",
    "icefrog": "dltsched.engine.policies.icefrog:IceFrogPolicy",
    "isacpp": "dltsched.engine.policies.isacpp:IsacppPolicy",
    "lucid": "dltsched.engine.policies.lucid:LucidPolicy",
    "gavel": "dltsched.engine.policies.gavel_lp:GavelPolicy",
    "optimizing": "dltsched.engine.policies.optimizing:optimizing_policy",
    "optimizing-nocoloc": "dltsched.engine.policies.optimizing:without_colocation",
    "optimizing-nofreeze": "dltsched.engine.policies.optimizing:without_freezing",
}

#: policies that the main comparison (``--policy all``) runs, in table order
BASELINE_POLICIES: tuple[str, ...] = ("fifo", "sjf", "tiresias", "gandiva")

#: the strongest published alternatives the optimizing policy is compared with
PAPER_POLICIES: tuple[str, ...] = ("isacpp", "icefrog", "lucid", "gavel")

_PREDICTORS: dict[str, str] = {
    "analytic": "dltsched.engine.registry:_analytic_predictors",
    "default": "dltsched.engine.registry:_default_predictors",
}

_BACKENDS: dict[str, str] = {
    "cpsat": "dltsched.formulations.cpsat.model:solve",
    "milp": "dltsched.formulations.milp.model:solve",
}


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def _pick(kind: str, table: dict[str, str], name: str) -> str:
    key = name.lower()
    if key not in table:
        close = difflib.get_close_matches(key, list(table), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValidationError(kind, f"'{name}' not understood{hint} (known: {', '.join(sorted(table))})")
    return table[key]


def register_policy(name: str, target: str) -> None:
    """Add a policy factory ``"module:attribute"`` under ``name``."""
    _POLICIES[name.lower()] = target


def register_predictors(name: str, target: str) -> None:
    """Add a zero-argument factory returning :class:`~dltsched.engine.predict.Predictors`."""
    _PREDICTORS[name.lower()] = target


def register_backend(name: str, target: str) -> None:
    """Add a solver backend factory under ``name``."""
    _BACKENDS[name.lower()] = target


def policy_names() -> tuple[str, ...]:
    return tuple(_POLICIES)


def backend_names() -> tuple[str, ...]:
    return tuple(_BACKENDS)


def make_policy(name: str, **options: Any) -> Any:
    """Instantiate the policy registered as ``name`` with keyword ``options``."""
    factory: Callable[..., Any] = _load(_pick("policy", _POLICIES, name))
    return factory(**options)


def predictors(name: str = "default") -> Any:
    """The predictor bundle registered as ``name``."""
    return _load(_pick("predictors", _PREDICTORS, name))()


def backend(name: str) -> Any:
    """The solver backend registered as ``name``."""
    return _load(_pick("backend", _BACKENDS, name))


def _analytic_predictors() -> Any:
    from dltsched.engine.analytic import AnalyticColocation, AnalyticFreezing, AnalyticStepTime
    from dltsched.engine.predict import Predictors

    step = AnalyticStepTime()
    return Predictors(step, AnalyticColocation(step), AnalyticFreezing())


def _default_predictors() -> Any:
    """The packaged predictors when they load (``dltsched.predictors.default_predictors``), else analytic."""
    try:
        return _load("dltsched.predictors:default_predictors")()
    except (ImportError, AttributeError, OSError, ValueError) as err:
        logging.getLogger(__name__).warning("packaged predictors unavailable (%s); using the analytic ones", err)
        return _analytic_predictors()

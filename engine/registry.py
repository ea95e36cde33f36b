"""Named policies and predictor bundles, resolved lazily by module path.

The engine never imports ``formulations`` or ``predictors`` internals at import time: each entry
is ``"module:attribute"`` and is imported on first use, so a missing optional dependency only
fails the entry that needs it. Solver backends have their own table: ``dltsched.formulations.backends``.
"""

from __future__ import annotations

import difflib
import importlib
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
    "optimizing": "dltsched.engine.api:optimizing_policy",
    "optimizing-nocoloc": "dltsched.engine.api:without_colocation",
    "optimizing-nofreeze": "dltsched.engine.api:without_freezing",
}

#: policies that the main comparison (``--policy all``) runs, in table order
BASELINE_POLICIES: tuple[str, ...] = ("fifo", "sjf", "tiresias", "gandiva")

#: the strongest published alternatives the optimizing policy is compared with
PAPER_POLICIES: tuple[str, ...] = ("isacpp", "icefrog", "lucid", "gavel")

_PREDICTORS: dict[str, str] = {
    "analytic": "dltsched.predictors:analytic_predictors",
    "default": "dltsched.predictors:available_predictors",
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


def policy_names() -> tuple[str, ...]:
    """The registered policy names, in registration order."""
    return tuple(_POLICIES)


def make_policy(name: str, **options: Any) -> Any:
    """Instantiate the policy registered as ``name`` with keyword ``options``."""
    factory: Callable[..., Any] = _load(_pick("policy", _POLICIES, name))
    return factory(**options)


def predictors(name: str = "default") -> Any:
    """The predictor bundle registered as ``name``."""
    return _load(_pick("predictors", _PREDICTORS, name))()


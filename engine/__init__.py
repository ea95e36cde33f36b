"""dltsched.engine: the domain model, simulator, policies, metrics, CLI and the embedding API.

Importing this package loads nothing: the embedding API's names (:class:`SolveConfig`,
:func:`solve_round`, :func:`simulate_instance`, :func:`plan_to_dict`) are resolved from
:mod:`dltsched.engine.app.api` on first access (PEP 562), so ``import dltsched.engine.domain.model`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dltsched.engine.app.api import SolveConfig, plan_to_dict, simulate_instance, solve_round

__all__ = ["SolveConfig", "plan_to_dict", "simulate_instance", "solve_round"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("dltsched.engine.app.api"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

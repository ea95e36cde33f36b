"""What a backend is, the one registry of backends, and the one mapping from a solver's stop to a termination.

A backend is a class with a ``name``, whether it is ``exact`` (proves optimality within the gap limit),
``available()`` (its solver is installed) and ``solve(model, params)``, which reads the
:class:`~dltsched.formulations.model.RoundModel` and returns a :class:`BackendOutcome`. The :func:`register`
decorator adds one instance to :data:`REGISTRY` under its name and its aliases; every list of backend
names (CLI choices, the API, the test suite's ``--backends``) comes from there.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, ClassVar, TypeVar

from dltsched.formulations.result import Termination

if TYPE_CHECKING:
    from dltsched.formulations.candidates import CandidateSet
    from dltsched.formulations.model import RoundModel


@dataclass(frozen=True, slots=True)
class BackendOutcome:
    """What a backend returns.

    Attributes
    ----------
    selected
        The chosen candidates; ``None``: no solution.
    termination
        Why the solver stopped.
    bound
        The bound in maximisation form (an upper bound on ``sum gain [- makespan]``, before the constant
        migration term); ``None``: none.
    build_time_s, solve_time_s
        Seconds spent translating the model and solving it.
    message
        What the solver said, when it matters.
    """

    selected: tuple[int, ...] | None
    termination: Termination
    bound: float | None
    build_time_s: float
    solve_time_s: float
    message: str = ""


@dataclass(frozen=True, slots=True)
class SolveParams:
    """How long a backend may take, and where it may start.

    Attributes
    ----------
    time_limit_s
        The whole round's wall-clock limit, of which ``spent_s`` seconds went before the call (building):
        a wall-clock limit is what is left; CP-SAT's deterministic budget stays whole (see its module).
    hint
        A complete feasible selection of candidates to start from (a MIP start).
    solver
        The solver a backend that drives several uses (the ``pyomo`` backend's Pyomo solver name).
    spent_s
        Seconds of ``time_limit_s`` already spent.
    """

    time_limit_s: float
    hint: tuple[int, ...] = ()
    solver: str | None = None
    spent_s: float = 0.0


class Backend(ABC):
    """A round solver over the :class:`~dltsched.formulations.model.RoundModel` (see the module docstring).

    Attributes
    ----------
    name
        The name the registry, the CLI and the API know it by.
    exact
        Whether it proves optimality within the gap limit (its plans say ``optimal`` or ``feasible``; a
        heuristic's say ``heuristic``).
    aliases
        Other names it is known by.
    work_limited
        Whether a deterministic round stops on a count of work rather than the clock, so that its solve
        is started even when building took the round's whole time limit.
    """

    name: ClassVar[str]
    exact: ClassVar[bool]
    aliases: ClassVar[tuple[str, ...]] = ()
    work_limited: ClassVar[bool] = False

    def available(self) -> bool:
        """Whether its solver is installed here."""
        return True

    @abstractmethod
    def solve(self, model: RoundModel, params: SolveParams) -> BackendOutcome:
        """Solve the round ``model`` within ``params``; the plan is made and checked by the caller."""


#: name or alias -> the backend; the one registry (built-in backends first, in registration order)
REGISTRY: dict[str, Backend] = {}

_B = TypeVar("_B", bound=type[Backend])


def register(cls: _B) -> _B:
    """Class decorator: add one instance of the backend ``cls`` to :data:`REGISTRY`, under its name and
    aliases (a name taken by another backend raises ``ValueError``)."""
    keys = (cls.name, *cls.aliases)
    for key in keys:
        held = REGISTRY.get(key)
        # the same class again (its module imported twice) registers again; another class is refused
        if held is not None and type(held).__qualname__ != cls.__qualname__:
            raise ValueError(f"backend name '{key}' is taken by {type(held).__qualname__}; choose another")
    backend = cls()
    REGISTRY.update(dict.fromkeys(keys, backend))
    return cls


def get_backend(name: str) -> Backend:
    """The backend registered as ``name`` (``ValueError`` naming the known ones otherwise)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"backend: '{name}' not understood; one of {', '.join(REGISTRY)}") from None


def backend_names(*, exact: bool | None = None, aliases: bool = True) -> tuple[str, ...]:
    """Registered names, in registration order: ``exact`` keeps the exact (``True``) or heuristic
    (``False``) backends only; ``aliases=False`` leaves the other names of a backend out."""
    return tuple(key for key, b in REGISTRY.items()
                 if (exact is None or b.exact == exact) and (aliases or key == b.name))


class Stop(Enum):
    """How a solver stopped, in the few cases that decide the termination."""

    CONVERGED = "converged"  # proved its incumbent within the gap limit
    TIME_LIMIT = "time_limit"
    INFEASIBLE = "infeasible"
    OTHER = "other"


def termination(stop: Stop, incumbent: float | None = None, bound: float | None = None, *,
                gap: float | None = None, tolerance: float = 0.0, relative: float = 1e-9) -> Termination:
    """The termination of a solver that stopped as ``stop``: a converged solve is ``optimal`` when its
    ``incumbent`` meets its ``bound`` (within ``tolerance`` plus ``relative`` of the bound's size, or a
    reported relative ``gap`` of at most ``relative``), else ``gap_limit``."""
    if stop is Stop.CONVERGED:
        closed = (gap is not None and gap <= relative) or (
            incumbent is not None and bound is not None
            and abs(bound - incumbent) <= tolerance + relative * max(1.0, abs(bound)))
        return Termination.OPTIMAL if closed else Termination.GAP_LIMIT
    return {Stop.TIME_LIMIT: Termination.TIME_LIMIT, Stop.INFEASIBLE: Termination.INFEASIBLE}.get(
        stop, Termination.ERROR)


def remaining_s(params: SolveParams, build_s: float, least_s: float = 0.01) -> float:
    """What is left of the round's wall-clock limit after ``params.spent_s`` and ``build_s`` (at least
    ``least_s``)."""
    return max(least_s, float(params.time_limit_s) - params.spent_s - build_s)


def legacy_solve(name: str) -> Callable[..., BackendOutcome]:
    """The former module-level ``solve(cset, *, time_limit_s, hint, solver=None, spent_s=0.0)`` of a backend,
    kept for a release; it warns and calls the registered backend."""

    def solve(cset: CandidateSet, *, time_limit_s: float, hint: Sequence[int] = (), solver: str | None = None,
              spent_s: float = 0.0) -> BackendOutcome:
        from dltsched.formulations.model import RoundModel

        warnings.warn(f"{name}'s module-level solve() is deprecated; use "
                      f"get_backend('{name}').solve(RoundModel(cset), SolveParams(...))",
                      DeprecationWarning, stacklevel=2)
        params = SolveParams(time_limit_s, tuple(hint), solver, spent_s)
        return get_backend(name).solve(RoundModel(cset), params)

    return solve

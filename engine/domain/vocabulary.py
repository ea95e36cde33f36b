"""The names the domain types accept: round objectives (with their sense), optimizers, the measured-only
model, and the resolution of GPU-type and model names to the catalog's canonical ids.

:mod:`dltsched.engine.domain.model` re-exports every name here; import them from there.
"""

from __future__ import annotations

from enum import StrEnum

from dltsched.engine.domain.catalog import GpuType, gpu_spec, model_catalog


class Sense(StrEnum):
    """Whether an objective is minimised or maximised."""

    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"


class Objective(StrEnum):
    """What a scheduling round optimises (see ``dltsched.formulations.RoundOptions``), with its sense.

    A ``str``, so ``objective == "jct"`` holds and JSON writes the plain name. ``effective_progress``
    (maximised: normalized throughput); ``jct`` (maximised: throughput relative to each job's remaining time,
    shortest remaining time first generalised to co-location, GPU types and freezing, for low average job
    completion time); ``weighted_completion`` and ``makespan`` (minimised, over predicted completion times).
    ``sense`` says which; ``minimize`` is ``sense is Sense.MINIMIZE`` (plain attributes: rounds read them in
    their inner loops).
    """

    sense: Sense
    minimize: bool

    def __new__(cls, value: str, sense: Sense) -> Objective:
        member = str.__new__(cls, value)
        member._value_ = value
        member.sense = sense
        member.minimize = sense is Sense.MINIMIZE
        return member

    @classmethod
    def named(cls, name: str) -> Objective:
        """The member called ``name`` (``Objective(name)``, in words type checkers follow).

        Parameters
        ----------
        name
            An objective's name, e.g. ``"jct"``.

        Returns
        -------
        Objective
            The member with that value.

        Raises
        ------
        ValueError
            When no objective has that name.
        """
        for member in cls:
            if member.value == name:
                return member
        raise ValueError(f"'{name}' is not an objective")

    EFFECTIVE_PROGRESS = "effective_progress", Sense.MAXIMIZE
    JCT = "jct", Sense.MAXIMIZE
    WEIGHTED_COMPLETION = "weighted_completion", Sense.MINIMIZE
    MAKESPAN = "makespan", Sense.MINIMIZE


#: every :class:`Objective`, in the order help texts list them
OBJECTIVES: tuple[Objective, ...] = tuple(Objective)
#: the objective every entry point uses when the caller names none (the embedding API, the service, the
#: optimizing policy): ``jct``, for low average job completion time
DEFAULT_OBJECTIVE = Objective.JCT
#: ``Job.model`` of a job described by the caller's measurements alone (no model-zoo entry): predictors
#: cannot price it, so every number it needs comes from ``dltsched.engine.app.measured``
MEASURED_ONLY = "measured-only"
#: optimizer name -> bytes of optimizer state per parameter (FP32)
OPTIMIZERS: dict[str, int] = {"sgd": 0, "momentum": 4, "nesterov": 4, "adam": 8, "adamw": 8,
                              "adagrad": 4, "adadelta": 8, "rmsprop": 4, "lamb": 8}


def resolve_gpu_type(name: str) -> GpuType:
    """The catalog's :class:`GpuType` for an id or alias.

    Parameters
    ----------
    name
        A GPU-type id or alias, any spelling (``V100``, ``tesla-v100``).

    Returns
    -------
    GpuType
        The catalog's spec of that type.

    Raises
    ------
    UnknownNameError
        (a ``ValueError``) When the catalog has no such type; the message lists close matches.
    """
    return gpu_spec(name)


def resolve_model(name: str) -> str:
    """The canonical model-zoo id for a name or alias.

    Parameters
    ----------
    name
        A model id or alias, any spelling.

    Returns
    -------
    str
        The model's canonical id.

    Raises
    ------
    UnknownNameError
        (a ``ValueError``) When the zoo has no such model; the message lists close matches.
    """
    canonical: str = model_catalog().resolve(name)
    return canonical

"""The names the domain types accept: round objectives, optimizers, the measured-only model, and the
resolution of GPU-type and model names to the catalog's canonical ids.

:mod:`dltsched.engine.domain.model` re-exports every name here; import them from there.
"""

from __future__ import annotations

from dltsched.engine.domain.catalog import GpuType, gpu_spec, model_catalog

#: what a scheduling round can optimise (see ``dltsched.formulations.RoundOptions``): ``effective_progress``
#: (max, normalized throughput), ``jct`` (max, throughput relative to each job's remaining time: SRPT
#: generalised to co-location, GPU types and freezing, for low average job completion time),
#: ``weighted_completion`` and ``makespan`` (min)
OBJECTIVES = ("effective_progress", "jct", "weighted_completion", "makespan")
#: the objective every entry point uses when the caller names none (the embedding API, the service, the
#: optimizing policy): ``jct``, for low average job completion time
DEFAULT_OBJECTIVE = "jct"
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
    name : str
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
    name : str
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
    return model_catalog().resolve(name)

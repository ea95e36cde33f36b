"""What each decision buys: the optimizing policy with one decision switched off at a time.

:data:`ABLATIONS` are the variants an experiment file's ``ablation = true`` adds beside the full policy
(``optimizing`` with the experiment's ``[options.optimizing]``):

- ``no-colocation``: co-location is off (one job per GPU)
- ``no-freezing``: layer freezing is off (freeze level 0 only)
- ``first-stage`` / ``multi-stage``: multi-stage values are off (the other setting of ``stage_horizon_s``
  than the full policy's)
- ``type-blind``: heterogeneity-aware types are off: every GPU type is predicted at the mean over the
  cluster's types
- ``no-ordering``: the ordering objective is off: ``effective_progress`` without length weights (throughput
  only)

:func:`paired_changes` turns the runs into the table: per variant, the change of average JCT and makespan
against the full policy on the same seed (same workload draw, same truth), mean and 95% t-interval over seeds.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dltsched.engine.domain.model import Job
from dltsched.engine.domain.predictors import Predictors

#: the full policy's label in an ablation
FULL = "optimizing"
#: horizon of the multi-stage variant when the full policy uses first-stage values, seconds
MULTI_STAGE_HORIZON_S = 3600.0


def ablation_variants(full_options: Mapping[str, Any]) -> dict[str, tuple[str, dict[str, Any], bool]]:
    """label -> (policy, options, type_blind) of each ablation variant of ``optimizing`` with
    ``full_options``."""
    base = dict(full_options)
    horizon = float(base.get("stage_horizon_s", 0.0))
    stage = ("first-stage", 0.0) if horizon > 0 else ("multi-stage", MULTI_STAGE_HORIZON_S)
    order = {k: v for k, v in base.items() if k != "length_weight"} | {"objective": "effective_progress"}
    return {
        "no-colocation": ("optimizing", base | {"max_jobs_per_gpu": 1}, False),
        "no-freezing": ("optimizing", base | {"freeze_levels": (0,)}, False),
        stage[0]: ("optimizing", base | {"stage_horizon_s": stage[1]}, False),
        "type-blind": ("optimizing", base, True),
        "no-ordering": ("optimizing", order, False),
    }


@dataclass(frozen=True, slots=True)
class _TypeBlindStepTime:
    """Step times that ignore the GPU type: the geometric mean of the inner predictor over ``gpu_types``."""

    inner: Any
    gpu_types: tuple[str, ...]

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None, *, freeze_level: int = 0,
                    num_nodes: int = 1) -> float:
        logs = [math.log(self.inner.step_time_s(job, t, num_gpus, freeze_level=freeze_level,
                                                num_nodes=num_nodes))
                for t in self.gpu_types]
        return math.exp(sum(logs) / len(logs))

    def memory_mib(self, job: Job, gpu_type: str, *, freeze_level: int = 0) -> float:
        return float(self.inner.memory_mib(job, gpu_type, freeze_level=freeze_level))


def type_blind(predictors: Predictors, gpu_types: Sequence[str]) -> Predictors:
    """``predictors`` with step times blind to the GPU type (memory stays per type)."""
    return replace(predictors,
                   step_time=_TypeBlindStepTime(predictors.step_time, tuple(dict.fromkeys(gpu_types))))


@dataclass(frozen=True, slots=True)
class _MixedStepTime:
    """Step times from ``times``, memory from ``memory``."""

    times: Any
    memory: Any

    def __getattr__(self, name: str) -> Any:
        return getattr(self.times, name)

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None, *, freeze_level: int = 0,
                    num_nodes: int = 1) -> float:
        return float(self.times.step_time_s(job, gpu_type, num_gpus, freeze_level=freeze_level,
                                            num_nodes=num_nodes))

    def memory_mib(self, job: Job, gpu_type: str, *, freeze_level: int = 0) -> float:
        return float(self.memory.memory_mib(job, gpu_type, freeze_level=freeze_level))


@dataclass(frozen=True, slots=True)
class _MixedColocation:
    """Co-located speeds from ``speeds``, group memory from ``memory``."""

    speeds: Any
    memory: Any

    def __getattr__(self, name: str) -> Any:
        return getattr(self.speeds, name)

    def colocated_speeds(self, jobs: Sequence[Job], gpu_type: str) -> tuple[float, ...]:
        return tuple(self.speeds.colocated_speeds(jobs, gpu_type))

    def group_memory_mib(self, jobs: Sequence[Job], gpu_type: str) -> float:
        return float(self.memory.group_memory_mib(jobs, gpu_type))


#: the parts :func:`exact_parts` can take from the truth
EXACT_PARTS = ("step", "mem", "speeds")


def exact_parts(predictors: Predictors, truth: Any, parts: Sequence[str]) -> Predictors:
    """``predictors`` with the ``parts`` named (``step``: step times alone, ``mem``: memory alone and of
    groups, ``speeds``: co-located speeds) answered by ``truth`` itself: where the gap between a bundle and
    exact predictions comes from (never a prediction result)."""
    from dltsched.engine.sim.exact import exact_predictors

    unknown = sorted(set(parts) - set(EXACT_PARTS))
    if unknown:
        raise ValueError(f"exact parts {unknown} not understood; use {', '.join(EXACT_PARTS)}")
    if not parts:
        return predictors
    ex = exact_predictors(truth)
    def pick(part: str, pred: Any, exact: Any) -> Any:
        return exact if part in parts else pred
    step = _MixedStepTime(pick("step", predictors.step_time, ex.step_time),
                          pick("mem", predictors.step_time, ex.step_time))
    coloc = _MixedColocation(pick("speeds", predictors.colocation, ex.colocation),
                             pick("mem", predictors.colocation, ex.colocation))
    return replace(predictors, step_time=step, colocation=coloc)


def option_value(text: str) -> Any:
    """A ``KEY=VALUE`` option's value as the command line gives it: JSON where it parses (numbers, booleans,
    lists), else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _ci95(values: Sequence[float]) -> float:
    if len(values) < 2:
        return math.nan
    from scipy import stats

    return float(stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values)))


def paired_changes(runs: Sequence[Mapping[str, Any]], labels: Sequence[str], reference: str = FULL,
                   metrics: Sequence[str] = ("avg_jct_s", "makespan_s")) -> list[dict[str, Any]]:
    """Per label: each metric's relative change against ``reference`` on the same seed (``+0.12``: 12%
    higher), mean and 95% t half-width over the seeds both ran."""
    by = {(r["policy"], r["seed"]): r for r in runs}
    rows = []
    for label in labels:
        row: dict[str, Any] = {"policy": label}
        seeds = [s for (p, s) in by if p == label and (reference, s) in by]
        row["seeds"] = len(seeds)
        for m in metrics:
            changes = [by[(label, s)][m] / by[(reference, s)][m] - 1.0 for s in seeds
                       if by[(reference, s)][m] and by[(label, s)][m] is not None]
            row[f"{m}_change"] = statistics.fmean(changes) if changes else math.nan
            row[f"{m}_change_ci95"] = _ci95(changes)
        rows.append(row)
    return rows


__all__ = ["ABLATION_TABLE", "EXACT_PARTS", "FULL", "ablation_variants", "exact_parts", "paired_changes",
           "type_blind"]

#: the columns :func:`paired_changes` gives
ABLATION_TABLE = ("policy", "seeds", "avg_jct_s_change", "avg_jct_s_change_ci95", "makespan_s_change",
                  "makespan_s_change_ci95")

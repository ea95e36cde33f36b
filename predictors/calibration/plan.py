"""A profiling plan for a new GPU: the jobs and groups that teach calibration most within a time budget.

No GPU is needed: each candidate job is described by the uncalibrated predictors on the target GPU's spec
sheet: its op-class mix (convolution, GEMM, vector or launch-bound: the share of its predicted step each
takes), the share of its step that GPU work takes (what co-location depends on), its memory and its step time.
Each of these is cut into bins; a job teaches what it covers that no chosen job covers yet (and its model
family), per second it costs. Jobs are chosen greedily by that ratio with about half the budget; then pairs
of chosen jobs (about two fifths), each pair covering a new combination of its members' GPU shares (low/high
with low/high) and memory bins, spread over models; then triples with what is left.

Costs: each measurement spawns and builds its model (:data:`BUILD_S`), warms up, and times a window of at
least ``steps`` steps and the profiler's utilisation window (``UTIL_WINDOW_S`` of
:mod:`dltsched.predictors.profiling.colocate`), at most ``max_window_s`` (a noisy short job may run to the
cap: the estimate assumes half of it for jobs under 10 ms).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dltsched.predictors.profiling.colocate import UTIL_WINDOW_S

#: seconds to spawn a measurement's worker task and build its model
BUILD_S = 4.0
MIN_WINDOW_S = 0.5
_BUSY_BINS = (0.25, 0.5, 0.8)
_SHARE_NAMES = ("conv", "gemm", "vector", "launch")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A job the plan may profile, as the uncalibrated predictors see it on the target GPU."""

    model: str
    batch_size: int
    family: str
    step_s: float
    busy: float
    memory_mib: float
    dominant: str

    @property
    def label(self) -> str:
        """``model:batch_size``, as the plan and the profiling command name the job."""
        return f"{self.model}:{self.batch_size}"

    def bins(self) -> set[tuple[str, Any]]:
        """The coverage bins the job falls in: family, dominant kernel class, GPU busy share, memory and
        step time."""
        return {("family", self.family), ("class", self.dominant), ("busy", _bin(self.busy, _BUSY_BINS)),
                ("memory", _bin(math.log2(max(self.memory_mib, 1.0)), (10.0, 11.5, 13.0))),
                ("step", _bin(math.log10(self.step_s), (-2.5, -1.7, -1.0)))}


def _bin(value: float, edges: Sequence[float]) -> int:
    return sum(value >= e for e in edges)


def describe(model: str, batch: int, gpu: str) -> Candidate:
    """A zoo job as :class:`Candidate` on ``gpu`` from the uncalibrated kernel step model and memory model."""
    import dltsched.predictors.calibration.isolated as iso
    import dltsched.predictors.calibration.resources as res
    from dltsched.engine.domain.catalog import model_catalog
    from dltsched.predictors.zoo.graphs import resolve

    mid, ds = resolve(model, None)
    f = iso.job_features(mid, ds, batch, False, gpu)
    params = iso.default_step_params()
    step = iso.step_seconds(params, f, batch)
    gpu_s = iso.gpu_seconds(params, f)
    shares = {g: params[f"s_{g}"] * f[f"K_{g}"] / step for g in ("conv", "gemm", "vector")}
    shares["launch"] = max(0.0, 1.0 - gpu_s / step)
    dominant = max(_SHARE_NAMES, key=lambda k: shares[k])
    memory = res.memory_mib(res.default_memory_params(), f)
    return Candidate(mid, batch, model_catalog().get(mid).family, step,
                     min(1.0, gpu_s / step), memory, dominant)


def measurement_s(step_s: Sequence[float], steps: int, max_window_s: float, warmup: int = 5) -> float:
    """Estimated seconds of one measurement of jobs with these step times side by side (slowest decides)."""
    def window(t: float) -> float:
        base = max(steps * t, MIN_WINDOW_S, UTIL_WINDOW_S)
        return min(max_window_s, max(base, max_window_s / 2.0 if t < 0.01 else base))

    return BUILD_S + max(warmup * t + window(t) for t in step_s)


def _candidates(gpu: str, models: Sequence[str], jobs: Sequence[str]) -> list[Candidate]:
    from dltsched.engine.domain.catalog import gpu_spec, model_catalog
    from dltsched.predictors.profiling.colocate import parse_group
    from dltsched.predictors.zoo import zoo_models

    pairs = [(j.model, j.batch_size) for text in jobs for j in parse_group(text)]
    if not pairs:
        catalog = model_catalog()
        pairs = [(m, catalog.get(m).default_batch_size) for m in (models or zoo_models())]
    capacity = gpu_spec(gpu).memory_mib
    out = []
    for model, batch in pairs:
        cand = describe(model, batch, gpu)
        if cand.memory_mib < 0.45 * capacity:  # room to pair it
            out.append(cand)
    return out


def plan_profile(gpu: str, budget_s: float, *, models: Sequence[str] = (), jobs: Sequence[str] = (),
                 groups: Sequence[str] = (), sharing: str = "timeslice", steps: int = 30,
                 max_window_s: float = 30.0) -> dict[str, Any]:
    """The plan (module docstring) as a JSON-ready dict with the ``dltsched profile`` command that runs it."""
    from dltsched.engine.domain.catalog import gpu_catalog, gpu_spec
    from dltsched.engine.domain.errors import ValidationError
    from dltsched.predictors.profiling.session import catalog_gpu

    try:
        gpu = gpu_catalog().resolve(catalog_gpu(gpu))  # an id, an alias or a CUDA device name
    except ValueError as err:
        raise ValidationError("--gpu", str(err)) from None
    if not budget_s > 0:
        raise ValidationError("--budget", f"{budget_s!r} not understood; seconds > 0")
    cands = _candidates(gpu, models, jobs)
    chosen: list[Candidate] = []
    covered: set[tuple[str, Any]] = set()
    spent = 0.0
    left = list(cands)
    while left:
        cost = {c.label: measurement_s([c.step_s], steps, max_window_s) for c in left}
        best = max(left, key=lambda c: (len(c.bins() - covered) / cost[c.label], -cost[c.label], c.label))
        if not best.bins() - covered and len(chosen) >= 4 or spent + cost[best.label] > 0.5 * budget_s:
            break
        chosen.append(best)
        covered |= best.bins()
        spent += cost[best.label]
        left.remove(best)
    reasons = {c.label: sorted(f"{k}={v}" for k, v in c.bins()) for c in chosen}
    picked_groups: list[tuple[Candidate, ...]] = []
    if groups:
        from dltsched.predictors.profiling.colocate import parse_group

        by_label = {c.label: c for c in cands}
        picked_groups = [tuple(by_label.get(j.label) or describe(j.model, j.batch_size, gpu)
                               for j in parse_group(t))
                         for t in groups]
    else:
        capacity = gpu_spec(gpu).memory_mib
        pair_cover: set[tuple[Any, ...]] = set()
        uses: dict[str, int] = {}
        for size, share in ((2, 0.9), (3, 1.0)):
            while True:
                options = []
                for i, a in enumerate(chosen):
                    for b in chosen[i:]:
                        for c in (chosen[chosen.index(b):] if size == 3 else [None]):
                            members = tuple(m for m in (a, b, c) if m is not None)
                            if (sum(m.memory_mib for m in members) > 0.9 * capacity
                                    or members in picked_groups):
                                continue
                            key = (size, *sorted((m.busy >= 0.5,
                                                  _bin(math.log2(max(m.memory_mib, 1)), (11.5,)))
                                                 for m in members))
                            gain = (key not in pair_cover) + 0.5 * (len({m.model for m in members}) == size)
                            gain -= 0.1 * sum(uses.get(m.label, 0) for m in members)
                            cost = measurement_s([m.step_s for m in members], steps, max_window_s)
                            options.append((gain / cost, -cost, members, key, cost))
                if not options:
                    break
                _, _, members, key, cost = max(options, key=lambda o: (o[0], o[1], [m.label for m in o[2]]))
                if spent + cost > share * budget_s or (
                        size == 3 and len([g for g in picked_groups if len(g) == 3]) >= 4):
                    break
                picked_groups.append(members)
                pair_cover.add(key)
                for m in members:
                    uses[m.label] = uses.get(m.label, 0) + 1
                spent += cost
    command = ["dltsched", "profile", *(f"--job {c.label}" for c in chosen),
               *(f"--groups {'+'.join(m.label for m in g)}" for g in picked_groups),
               f"--sharing {sharing}", f"--steps {steps}", f"--budget {budget_s:g}", "--out DIR"]
    return {"gpu": gpu, "budget_s": budget_s, "estimated_s": spent, "sharing": sharing,
            "jobs": [{"job": c.label, "family": c.family, "dominant": c.dominant, "busy": c.busy,
                      "memory_mib": c.memory_mib, "step_s": c.step_s,
                      "covers": reasons[c.label]} for c in chosen],
            "groups": ["+".join(m.label for m in g) for g in picked_groups],
            "command": " ".join(command)}


def plan_text(plan: dict[str, Any]) -> str:
    """A profiling ``plan`` as text: one line per job alone and per group, then the command to run it."""
    lines = [f"profiling plan for {plan['gpu']} ({plan['sharing']}): {len(plan['jobs'])} jobs alone, "
             f"{len(plan['groups'])} groups, about {plan['estimated_s']:.0f} s of {plan['budget_s']:.0f} s"]
    for j in plan["jobs"]:
        lines.append(f"  {j['job']:<22} {j['family']:<11} {j['dominant']:<7} GPU share {j['busy']:.2f}  "
                     f"~{j['memory_mib']:.0f} MiB  ~{j['step_s'] * 1e3:.1f} ms")
    lines += [f"  group {g}" for g in plan["groups"]]
    lines.append(plan["command"])
    return "\n".join(lines)

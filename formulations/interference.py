"""Multi-stage interference on one GPU (ISACPP): as co-located jobs finish, the survivors speed up.

Jobs ``0..n-1`` share a GPU from time 0 with ``remaining`` work (iterations) and isolated rates
(iterations/s). A stage lasts until the next completion; during it every active job runs at
``rate * speed`` with speeds from the co-location predictor for the active set. The interference
cost is the extra job-time against running alone: ``sum(completion - remaining / rate)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: speeds of the active jobs (positions, ascending) when they share the GPU; one job alone -> (1.0,)
SpeedFn = Callable[[tuple[int, ...]], Sequence[float]]


@dataclass(frozen=True, slots=True)
class Stage:
    """``active`` jobs share the GPU from ``start_s`` to ``end_s`` at ``speeds`` (same order)."""

    start_s: float
    end_s: float
    active: tuple[int, ...]
    speeds: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class StageSchedule:
    """The stages of one co-located group, each job's completion time and the interference cost."""

    stages: tuple[Stage, ...]
    completion_s: tuple[float, ...]
    isolated_s: tuple[float, ...]

    @property
    def interference_cost_s(self) -> float:
        """Extra job-time versus every job running alone: ``sum(completion - isolated)``."""
        return sum(c - i for c, i in zip(self.completion_s, self.isolated_s, strict=True))


def simulate_stages(remaining: Sequence[float], rates: Sequence[float], speeds: SpeedFn) -> StageSchedule:
    """Stages between successive completions; see the module docstring."""
    if len(remaining) != len(rates):
        raise ValueError(f"remaining: {len(remaining)} entries but rates has {len(rates)}; one per job")
    if any(r <= 0 for r in rates) or any(w < 0 for w in remaining):
        raise ValueError("rates must be > 0 and remaining work >= 0")
    left = [float(w) for w in remaining]
    completion = [0.0] * len(left)
    active = tuple(i for i, w in enumerate(left) if w > 0)
    stages: list[Stage] = []
    now = 0.0
    while active:
        speed = tuple(float(s) for s in (speeds(active) if len(active) > 1 else (1.0,)))
        if len(speed) != len(active) or min(speed) <= 0:
            raise ValueError(f"speeds{active}: {speed} must give one speed > 0 per active job")
        velocity = [rates[i] * s for i, s in zip(active, speed, strict=True)]
        duration = min(left[i] / v for i, v in zip(active, velocity, strict=True))
        stages.append(Stage(now, now + duration, active, speed))
        now += duration
        for i, v in zip(active, velocity, strict=True):
            left[i] -= v * duration
        done = {i for i, v in zip(active, velocity, strict=True) if left[i] <= 1e-9 * max(1.0, remaining[i])}
        for i in done:
            completion[i] = now
        active = tuple(i for i in active if i not in done)
    isolated = tuple(w / r for w, r in zip(remaining, rates, strict=True))
    return StageSchedule(tuple(stages), tuple(completion), isolated)


def horizon_speeds(remaining: Sequence[float], rates: Sequence[float], speeds: SpeedFn,
                   horizon_s: float) -> tuple[float, ...]:
    """Each job's mean speed from now until it completes or ``horizon_s`` passes, whichever is first: the
    multi-stage value of a co-located group. The first job to complete keeps its first-stage speed; a survivor
    is credited with the speed-up it gets, within the horizon, as its partners finish. ``horizon_s = 0`` gives
    the first-stage speeds; ``inf`` averages over each job's whole remaining run."""
    if horizon_s < 0:
        raise ValueError(f"horizon_s: {horizon_s!r} must be >= 0")
    if horizon_s == 0 or len(remaining) < 2:
        first = tuple(i for i, w in enumerate(remaining) if w > 0)
        at = dict(zip(first, speeds(first) if len(first) > 1 else (1.0,) * len(first), strict=True))
        return tuple(float(at.get(i, 1.0)) for i in range(len(remaining)))
    schedule = simulate_stages(remaining, rates, speeds)
    out = []
    for i in range(len(remaining)):
        until = min(schedule.completion_s[i], horizon_s)
        if until <= 0:
            out.append(1.0)
            continue
        done = sum((min(st.end_s, until) - st.start_s) * st.speeds[st.active.index(i)]
                   for st in schedule.stages if i in st.active and st.start_s < until)
        out.append(done / until)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Resident:
    """A job already on a GPU: remaining work (iterations) and isolated rate (iterations/s)."""

    remaining: float
    rate: float


def isacpp_greedy_place(new: Resident, gpus: Sequence[Sequence[Resident]],
                        speeds: Callable[[int, tuple[int, ...]], Sequence[float]],
                        max_jobs_per_gpu: int = 2) -> tuple[int | None, float]:
    """ISACPP's greedy rule: the GPU where adding ``new`` raises the overall interference least.

    ``speeds(gpu, active)`` gives the speeds of the active positions on ``gpu``, where the new
    job is the last position. Returns ``(gpu index, added interference in s)``, or ``(None, inf)``
    when every GPU already holds ``max_jobs_per_gpu`` jobs. Ties go to the lowest index.
    """
    best: tuple[int | None, float] = (None, float("inf"))
    for g, residents in enumerate(gpus):
        if len(residents) >= max_jobs_per_gpu:
            continue
        on_gpu = _speeds_on(speeds, g)
        before = _cost(residents, on_gpu) if residents else 0.0
        after = _cost([*residents, new], on_gpu)
        if after - before < best[1] - 1e-12:
            best = (g, after - before)
    return best


def _speeds_on(speeds: Callable[[int, tuple[int, ...]], Sequence[float]], gpu: int) -> SpeedFn:
    return lambda active: speeds(gpu, active)


def _cost(residents: Sequence[Resident], speeds: SpeedFn) -> float:
    return simulate_stages([r.remaining for r in residents], [r.rate for r in residents],
                           speeds).interference_cost_s

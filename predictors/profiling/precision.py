"""When a measured step time is known well enough: a distribution-free interval of the median.

A timed window keeps stepping until the median step time is known to within ``precision`` (relative
half-width of its 95% interval; ``0.02``: +-2%) or a time cap is reached. The interval of the median is
the order-statistic (binomial) one: with ``n`` sorted times, the ranks ``n/2 -+ 1.96 sqrt(n)/2`` bound the
median at 95% whatever the distribution of the step times, so a few slow outlier steps (a host hiccup,
another process's kernel) widen it only as much as they move the median. Short jobs (a 2 ms step) need
hundreds of steps for a window that is stable between runs; long ones (a 200 ms step) converge after the
minimum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: two-sided 95% normal quantile
Z95 = 1.959963984540054
#: fewest steps for which the order-statistic interval exists (both ranks inside the sample)
MIN_STEPS_FOR_INTERVAL = 6
#: most timed steps of one window by default
MAX_STEPS = 20_000


@dataclass(frozen=True, slots=True)
class StepInterval:
    """The median step time of a window with its 95% interval (s), the steps ``n`` it rests on."""

    median_s: float
    low_s: float
    high_s: float
    n: int

    @property
    def half_width_rel(self) -> float:
        """Relative half-width of the interval (``inf`` when there is none)."""
        if not math.isfinite(self.low_s) or not math.isfinite(self.high_s) or self.median_s <= 0:
            return math.inf
        return (self.high_s - self.low_s) / 2.0 / self.median_s


def median_interval(times_s: Sequence[float]) -> StepInterval:
    """The median of ``times_s`` and its distribution-free 95% interval (``nan`` bounds below
    :data:`MIN_STEPS_FOR_INTERVAL` steps)."""
    n = len(times_s)
    if n == 0:
        raise ValueError("no step times to summarise")
    ordered = sorted(times_s)
    mid = n // 2
    median = ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])
    if n < MIN_STEPS_FOR_INTERVAL:
        return StepInterval(median, math.nan, math.nan, n)
    spread = Z95 * math.sqrt(n) / 2.0
    lo = max(0, math.floor(n / 2.0 - spread) - 1)  # 0-based ranks
    hi = min(n - 1, math.ceil(n / 2.0 + spread))
    return StepInterval(median, ordered[lo], ordered[hi], n)


@dataclass(frozen=True, slots=True)
class StoppingRule:
    """When a timed window may stop: at least ``min_steps`` steps and ``min_window_s`` seconds, then as soon
    as the median is within ``precision`` (relative half-width at 95%; ``None``: never, so the window is
    exactly ``min_steps``), and at the latest after ``max_window_s`` seconds or ``max_steps`` steps."""

    min_steps: int = 30
    precision: float | None = 0.02
    min_window_s: float = 0.5
    max_window_s: float = 30.0
    max_steps: int = MAX_STEPS
    check_every: int = 10

    def __post_init__(self) -> None:
        if self.min_steps < 1:
            raise ValueError(f"min_steps={self.min_steps} not understood; must be >= 1")
        if self.precision is not None and not 0.0 < self.precision < 1.0:
            raise ValueError(f"precision={self.precision} not understood; a fraction in (0, 1), e.g. 0.02")
        if self.max_window_s <= 0 or self.max_steps < self.min_steps:
            raise ValueError("max_window_s must be > 0 and max_steps >= min_steps")

    def done(self, times_s: Sequence[float], elapsed_s: float) -> bool:
        """Whether the window of ``times_s`` (``elapsed_s`` seconds long so far) may stop."""
        n = len(times_s)
        if n < self.min_steps:
            return n >= self.max_steps
        if self.precision is None or self.capped(times_s, elapsed_s):
            return True
        if elapsed_s < self.min_window_s or (n - self.min_steps) % self.check_every:
            return False
        return median_interval(times_s).half_width_rel <= self.precision

    def capped(self, times_s: Sequence[float], elapsed_s: float) -> bool:
        """Whether the window has reached a cap (``max_steps`` steps or ``max_window_s`` seconds)."""
        return len(times_s) >= self.max_steps or elapsed_s >= self.max_window_s

    def stop_reason(self, times_s: Sequence[float], elapsed_s: float) -> str:
        """Why a finished window stopped: ``steps`` (fixed count), ``precision``, ``time_cap`` or
        ``step_cap``."""
        if self.precision is None:
            return "steps"
        if median_interval(times_s).half_width_rel <= self.precision and not self.capped(times_s, elapsed_s):
            return "precision"
        return "step_cap" if len(times_s) >= self.max_steps else "time_cap"


def time_window(step: Callable[[], float], rule: StoppingRule, clock: Callable[[], float] | None = None,
                keep_open: Callable[[], bool] | None = None) -> tuple[list[float], float]:
    """Call ``step()`` (returns one step's seconds) until ``rule`` says stop; the times and the window's
    wall seconds. ``keep_open()``: while it says ``True``, the window times on past the rule's stop (the
    utilisation window is not long enough yet), never past the rule's caps. ``clock``: a
    ``time.perf_counter``-like function (tests pass a fake)."""
    import time

    now = clock or time.perf_counter
    start = now()
    times: list[float] = []
    ruled = False  # the rule has said stop once: from then on only keep_open and the caps decide
    while True:
        times.append(float(step()))
        elapsed = now() - start
        ruled = ruled or rule.done(times, elapsed)
        if ruled and (keep_open is None or rule.capped(times, elapsed) or not keep_open()):
            return times, elapsed

"""What co-located groups on one GPU teach, per sharing mode: speeds, group memory, group utilisation.

Each member ``i`` of a group enters through ``b_i``, the share of its step alone that its GPU work takes: the
calibrated GPU seconds of its kernels and optimizer (:mod:`.isolated`) over its step time (measured alone
where it was, else the calibrated prediction), at most 1. NVML's utilisation is not used for speeds: for jobs
whose steps take a few milliseconds it reads anywhere from 1% to 96% for the same kind of work.

- **Speed** (normalized to alone)::

      1 / speed_i - 1 = sum over partners j of (t_both * b_i * b_j + t_partner * b_j + t_any)

  A job waits for its partners' GPU work in proportion to how busy they keep the GPU (``t_partner``), more so
  when it has GPU work of its own to queue (``t_both``), and pays a fixed cost per partner (``t_any``: context
  switches). Two jobs that keep the GPU busy run at ``1 / (1 + t_both + t_partner + t_any)`` each; the
  terms are non-negative and fitted by robust least squares on log speeds. Under MPS kernels of different
  processes can overlap, so the terms are fitted apart, pulled towards the time-slicing ones where both exist.
- **Group memory** = sum of the members' memories alone - ``(k - 1) * shared_mib`` (the driver's reservation
  that NVML counts once per GPU, not once per process); ``shared_mib`` is the median over measured groups.
- **Group utilisation** = ``100 * (1 - prod(1 - u_i) ** gamma)``: the busy time of independent members,
  ``gamma`` fitted (``u_i``: each member's utilisation alone, measured or predicted, at most 0.99).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dltsched.predictors.calibration.isolated import LOSS_SCALE

SPEED_TERMS = ("t_both", "t_partner", "t_any")
#: the terms a sharing mode with no groups measured gets (two busy jobs at about half speed each)
DEFAULT_SPEED = {"t_both": 0.5, "t_partner": 0.4, "t_any": 0.02}
SPEED_FLOOR = 0.02


@dataclass(frozen=True, slots=True)
class Member:
    """One job of a group as the group models see it: GPU share ``busy`` (0..1), memory and utilisation
    alone."""

    busy: float
    memory_mib: float
    util_pct: float


def speeds(params: dict[str, float], members: Sequence[Member]) -> tuple[float, ...]:
    """Each member's normalized speed (module docstring)."""
    out = []
    for i, m in enumerate(members):
        slow = sum(params["t_both"] * m.busy * o.busy + params["t_partner"] * o.busy + params["t_any"]
                   for j, o in enumerate(members) if j != i)
        out.append(max(SPEED_FLOOR, min(1.0, 1.0 / (1.0 + slow))))
    return tuple(out)


def fit_speed(groups: Sequence[tuple[Sequence[Member], Sequence[float]]],
              prior: dict[str, float] | None = None, prior_weight: float = 0.05) -> dict[str, float]:
    """The speed terms fitted on ``groups`` (members, measured speeds); ``prior`` (default
    :data:`DEFAULT_SPEED`) where there are none, and the value each term is pulled towards."""
    from scipy.optimize import least_squares

    base = dict(prior or DEFAULT_SPEED)
    if not groups:
        return base
    x0 = np.sqrt([base[t] for t in SPEED_TERMS])
    # per member: its busy share, the sum of its partners' and their count (speeds() in closed form)
    per_member = [(m.busy, sum(o.busy for j, o in enumerate(members) if j != i), len(members) - 1,
                   max(got, SPEED_FLOOR))
                  for members, speeds_got in groups
                  for i, (m, got) in enumerate(zip(members, speeds_got, strict=True))]
    own, partners, count, measured = (np.array(v, dtype=float) for v in zip(*per_member, strict=True))
    log_measured = np.log(measured)

    def residuals(x: np.ndarray) -> np.ndarray:
        t_both, t_partner, t_any = x**2
        slow = t_both * own * partners + t_partner * partners + t_any * count
        res = np.log(np.clip(1.0 / (1.0 + slow), SPEED_FLOOR, 1.0)) - log_measured
        return np.concatenate([res, prior_weight * (x - x0)])

    sol = least_squares(residuals, x0, loss="soft_l1", f_scale=LOSS_SCALE * 2, max_nfev=2000)
    return {t: float(v**2) for t, v in zip(SPEED_TERMS, sol.x, strict=True)}


def group_memory_mib(shared_mib: float, members: Sequence[Member]) -> float:
    """Memory of a co-located group (MiB): the members' memories alone, less ``shared_mib`` per
    member after the first."""
    return sum(m.memory_mib for m in members) - (len(members) - 1) * shared_mib


def fit_shared_memory(groups: Sequence[tuple[Sequence[Member], float]]) -> float:
    """Median over groups of ``(sum of members alone - group) / (k - 1)`` (MiB; 0 without groups)."""
    got = [(sum(m.memory_mib for m in members) - measured) / (len(members) - 1)
           for members, measured in groups]
    return float(np.median(got)) if got else 0.0


def group_util_pct(gamma: float, members: Sequence[Member]) -> float:
    """GPU utilisation of a co-located group (percent): one minus the product of the members' idle
    fractions (each capped at 99 % busy) to the power ``gamma``."""
    idle = math.prod(1.0 - min(max(m.util_pct, 0.0), 99.0) / 100.0 for m in members)
    return 100.0 * (1.0 - idle**gamma)


def fit_group_util(groups: Sequence[tuple[Sequence[Member], float]]) -> float:
    """``gamma`` fitted by robust least squares on relative errors (1 without groups)."""
    from scipy.optimize import least_squares

    if not groups:
        return 1.0

    def residuals(x: np.ndarray) -> np.ndarray:
        g = math.exp(x[0])
        rel = [group_util_pct(g, members) / max(measured, 1.0) - 1.0 for members, measured in groups]
        return np.array([*rel, 0.1 * x[0]])

    return float(math.exp(least_squares(residuals, np.zeros(1), loss="soft_l1", f_scale=LOSS_SCALE).x[0]))

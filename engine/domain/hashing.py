"""Deterministic pseudo-random numbers keyed by names, for choices that must not depend on call order.

The same key always gives the same number, in every process and every window of a trace, so seeded rules
(trace model/freezing rules, ground-truth factors, prediction error) stay stable when runs are resumed or
traces are cut differently.
"""

from __future__ import annotations

import hashlib
import math


def hash_unit(key: str) -> float:
    """A number in [0, 1) from the SHA-256 of ``key``.

    Parameters
    ----------
    key
        The key.

    Returns
    -------
    float
        The same number for the same key, in every process.
    """
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64


def hash_normal(key: str) -> float:
    """A standard normal draw (Box-Muller) from the SHA-256 of ``key``.

    Parameters
    ----------
    key
        The key.

    Returns
    -------
    float
        The same draw for the same key, in every process.
    """
    digest = hashlib.sha256(key.encode()).digest()
    u1 = (int.from_bytes(digest[:8], "big") + 1) / (2**64 + 2)
    u2 = (int.from_bytes(digest[8:16], "big") + 1) / (2**64 + 2)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)

"""Python's cyclic garbage collector paused for the length of a round.

A round allocates tens of thousands of small, acyclic objects (jobs' options, co-location groups,
candidates, rows) that reference counting frees; while they live, the allocations trigger the collector's
full passes, each of which walks every object of the process (memoised predictions and prices included).
Measured on the 1,000-job / 1,024-GPU round of ``bench solve``: about 15% of a warm round's CPU time. The
round pipeline (:func:`~dltsched.formulations.pipeline.decide_round`) and ``bench solve`` decide a round
inside :func:`gc_paused`; the collector runs again, as usual, after it.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector inside the block (nested or concurrent blocks: the outermost one
    restores it, as it found it). Reference counting still frees acyclic garbage at once; cycles made inside
    wait for the next collection after the block."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()

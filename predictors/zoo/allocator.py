"""A model of PyTorch's CUDA caching allocator, replaying a training step's allocations and frees to find the
memory it reserves from the driver (what NVML counts), not only the bytes allocated.

The rules, as in ``c10/cuda/CUDACachingAllocator.cpp`` with the default configuration (one stream, no
``max_split_size``, no expandable segments):

- a request is rounded up to a multiple of 512 bytes; up to 1 MiB it is served from the small pool, else
  from the large pool;
- it takes the smallest free block of its pool that fits; with none, the allocator reserves a new
  segment: 2 MiB for a small request, 20 MiB for a large one under 10 MiB, else the request rounded up to
  2 MiB;
- a block larger than the request is split when the remainder is at least 512 bytes (small pool) or more
  than 1 MiB (large pool); the remainder stays free in the pool;
- a freed block merges with its free neighbours of the same segment. Segments are never returned (no
  ``empty_cache`` during training), so the reserve only grows.
"""

from __future__ import annotations

import bisect
from typing import Any

_MIB = 1 << 20
_SMALL = _MIB
_SMALL_SEGMENT = 2 * _MIB
_LARGE_SEGMENT = 20 * _MIB
_MIN_LARGE_ALLOC = 10 * _MIB
_ROUND_LARGE = 2 * _MIB
BLOCK = 512


def rounded(nbytes: int) -> int:
    """Bytes the allocator hands out for a request of ``nbytes``."""
    return BLOCK if nbytes < BLOCK else -(-nbytes // BLOCK) * BLOCK


class _Block:
    __slots__ = ("next", "prev", "segment", "size", "small", "start")

    def __init__(self, segment: int, start: int, size: int, small: bool) -> None:
        self.segment, self.start, self.size, self.small = segment, start, size, small
        self.prev: _Block | None = None
        self.next: _Block | None = None

    def key(self) -> tuple[int, int, int]:
        return (self.size, self.segment, self.start)


class CachingAllocator:
    """Allocations and frees by key; ``allocated``/``reserved`` bytes now and at their peaks."""

    def __init__(self) -> None:
        self._pools: dict[bool, list[tuple[int, int, int, _Block]]] = {True: [], False: []}
        self._free: set[int] = set()
        self._live: dict[Any, _Block] = {}
        self._segments = 0
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0

    def _insert(self, b: _Block) -> None:
        bisect.insort(self._pools[b.small], (*b.key(), b))
        self._free.add(id(b))

    def _remove(self, b: _Block) -> None:
        pool = self._pools[b.small]
        pool.pop(bisect.bisect_left(pool, b.key(), key=lambda e: e[:3]))
        self._free.discard(id(b))

    def malloc(self, key: Any, nbytes: int) -> None:
        """Allocate ``nbytes`` under ``key``."""
        size = rounded(nbytes)
        small = size <= _SMALL
        pool = self._pools[small]
        i = bisect.bisect_left(pool, (size, -1, -1), key=lambda e: e[:3])
        if i < len(pool):
            block = pool.pop(i)[3]
            self._free.discard(id(block))
        else:
            segment = (_SMALL_SEGMENT if small else _LARGE_SEGMENT if size < _MIN_LARGE_ALLOC
                       else -(-size // _ROUND_LARGE) * _ROUND_LARGE)
            self._segments += 1
            block = _Block(self._segments, 0, segment, small)
            self.reserved += segment
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        rest = block.size - size
        if rest >= BLOCK if small else rest > _SMALL:
            tail = _Block(block.segment, block.start + size, rest, small)
            tail.prev, tail.next = block, block.next
            if block.next is not None:
                block.next.prev = tail
            block.next, block.size = tail, size
            self._insert(tail)
        self._live[key] = block
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, key: Any) -> None:
        """Free the allocation under ``key``."""
        block = self._live.pop(key)
        self.allocated -= block.size
        prev, nxt = block.prev, block.next
        if prev is not None and id(prev) in self._free:
            self._remove(prev)
            block.start, block.size, block.prev = prev.start, block.size + prev.size, prev.prev
            if prev.prev is not None:
                prev.prev.next = block
        if nxt is not None and id(nxt) in self._free:
            self._remove(nxt)
            block.size, block.next = block.size + nxt.size, nxt.next
            if nxt.next is not None:
                nxt.next.prev = block
        self._insert(block)

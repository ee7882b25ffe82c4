"""What a cache needs from the pools it is given: the protocols the caches are typed against.

A cache never allocates: the caller allocates KV indices and state slots, hands them to
``insert``, and the cache gives back what it lets go. So each protocol names only the
calls a cache makes. Any object with these methods will do; ``KVIndexAllocator``,
``HybridKVAllocator`` (allocator.py) and ``MambaStatePool`` (mamba_pool.py) are the
reference pools.
"""

from __future__ import annotations

from typing import Protocol

import torch


class KVAllocator(Protocol):
    """What a cache needs from a KV pool: somewhere to return the indices it lets go."""

    def free(self, indices: torch.Tensor) -> None: ...


class SwaKVAllocator(KVAllocator, Protocol):
    """A KV pool of a cache with a sliding window: ``free`` releases an index's full KV
    (and its SWA KV if still held), ``free_swa`` only its SWA KV (a tombstone keeps its
    full KV)."""

    def free_swa(self, indices: torch.Tensor) -> None: ...


class MambaPool(Protocol):
    """What the cache needs from a mamba state pool (``MambaStatePool`` is one)."""

    def alloc_track_slot(self) -> int | None: ...

    def free_track_slot(self, slot: int) -> None: ...

    def copy_states(self, src: int, dst: int) -> None: ...


def free_indices(allocator: KVAllocator | None, indices: torch.Tensor) -> None:
    """Return ``indices`` to ``allocator`` (a cache without one just drops them)."""
    if allocator is not None and indices.numel():
        allocator.free(indices)

"""Reference KV-index allocators: hand out indices of a fixed pool and refuse double frees;
``HybridKVAllocator`` adds the sliding-window KV of each index (``free_swa``).

For users, tests and benchmarks. It checks every free against its own bookkeeping (a boolean
mask on the pool's device), which costs a host synchronisation per call: a production
allocator would trust the cache instead.
"""

from __future__ import annotations

import torch

from radixkv.arguments import require_int
from radixkv.errors import UsageError


class DoubleFreeError(UsageError):
    """An index was freed that is not currently allocated."""


class KVIndexAllocator:
    """Indices ``0 .. size-1`` of a token KV pool, on any device."""

    def __init__(self, size: int, device: torch.device | str = "cpu") -> None:
        self.size = require_int("size", size, 0)
        self.device = torch.device(device)
        self._allocated = torch.zeros(size, dtype=torch.bool, device=self.device)
        self._free_list = torch.arange(size, dtype=torch.int64, device=self.device)
        self._num_free = size

    def available_size(self) -> int:
        return self._num_free

    def alloc(self, n: int) -> torch.Tensor | None:
        """``n`` free indices (int64, on the pool's device), or ``None`` if fewer are free."""
        require_int("n", n, 0)
        if n > self._num_free:
            return None
        start = self._num_free - n
        out = self._free_list[start : self._num_free].clone()
        self._num_free = start
        self._allocated[out] = True
        return out

    def free(self, indices: torch.Tensor) -> None:
        """Return ``indices`` to the pool; every one must be allocated, and none repeated."""
        indices = self._checked(indices)
        if indices.numel() == 0:
            return
        self._require_allocated(indices)
        self._release(indices)

    def _checked(self, indices: torch.Tensor) -> torch.Tensor:
        """``indices`` as int64 on the pool's device, flat: integers, in range, distinct."""
        if (
            indices.dtype.is_floating_point
            or indices.dtype.is_complex
            or indices.dtype == torch.bool
        ):
            raise UsageError(f"indices must be an integer tensor, got {indices.dtype}")
        indices = indices.to(device=self.device, dtype=torch.int64).reshape(-1)
        if indices.numel() == 0:
            return indices
        if int(indices.min()) < 0 or int(indices.max()) >= self.size:
            raise UsageError(f"indices out of range [0, {self.size})")
        if torch.unique(indices).numel() != indices.numel():
            raise DoubleFreeError("the same index appears twice in one free")
        return indices

    def _require_allocated(self, indices: torch.Tensor) -> None:
        if not bool(self._allocated[indices].all()):
            bad = indices[~self._allocated[indices]].tolist()
            raise DoubleFreeError(f"freeing indices that are not allocated: {bad[:8]}")

    def _release(self, indices: torch.Tensor) -> None:
        self._allocated[indices] = False
        end = self._num_free + indices.numel()
        self._free_list[self._num_free : end] = indices
        self._num_free = end

    def is_allocated(self, index: int) -> bool:
        return bool(self._allocated[index])

    def allocated_count(self) -> int:
        return self.size - self._num_free


class HybridKVAllocator(KVIndexAllocator):
    """A pool for a cache with a sliding window: every index has full-attention KV and
    sliding-window (SWA) KV, as in a hybrid-attention model's two pools.

    ``alloc`` hands out indices holding both. ``free`` releases an index's full KV and its
    SWA KV if still held; ``free_swa`` releases only the SWA KV, which the cache does when
    it tombstones a node and a request does for tokens that slid out of its window. Either
    refuses, before changing anything, an index that is not allocated or whose SWA KV is
    already gone (a double free). Pass it as ``RadixCache(...,
    token_to_kv_pool_allocator=pool, sliding_window_size=W)``.
    """

    def __init__(self, size: int, device: torch.device | str = "cpu") -> None:
        super().__init__(size, device)
        self._swa_held = torch.zeros(self.size, dtype=torch.bool, device=self.device)

    def alloc(self, n: int) -> torch.Tensor | None:
        out = super().alloc(n)
        if out is not None:
            self._swa_held[out] = True
        return out

    def free_swa(self, indices: torch.Tensor) -> None:
        """Release the SWA KV of ``indices``; their full KV stays allocated."""
        indices = self._checked(indices)
        if indices.numel() == 0:
            return
        self._require_allocated(indices)
        if not bool(self._swa_held[indices].all()):
            bad = indices[~self._swa_held[indices]].tolist()
            raise DoubleFreeError(f"freeing SWA KV that is not held: {bad[:8]}")
        self._swa_held[indices] = False

    def _release(self, indices: torch.Tensor) -> None:
        self._swa_held[indices] = False
        super()._release(indices)

    def is_swa_held(self, index: int) -> bool:
        return bool(self._swa_held[index])

    def swa_held_count(self) -> int:
        """Indices whose SWA KV is held (at most ``allocated_count()``)."""
        return int(self._swa_held.sum())

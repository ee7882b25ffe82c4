"""A reference KV-index allocator: hands out indices of a fixed pool and refuses double frees.

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
        if (
            indices.dtype.is_floating_point
            or indices.dtype.is_complex
            or indices.dtype == torch.bool
        ):
            raise UsageError(f"indices must be an integer tensor, got {indices.dtype}")
        if indices.numel() == 0:
            return
        indices = indices.to(device=self.device, dtype=torch.int64).reshape(-1)
        if int(indices.min()) < 0 or int(indices.max()) >= self.size:
            raise UsageError(f"indices out of range [0, {self.size})")
        if torch.unique(indices).numel() != indices.numel():
            raise DoubleFreeError("the same index appears twice in one free")
        if not bool(self._allocated[indices].all()):
            bad = indices[~self._allocated[indices]].tolist()
            raise DoubleFreeError(f"freeing indices that are not allocated: {bad[:8]}")
        self._allocated[indices] = False
        end = self._num_free + indices.numel()
        self._free_list[self._num_free : end] = indices
        self._num_free = end

    def is_allocated(self, index: int) -> bool:
        return bool(self._allocated[index])

    def allocated_count(self) -> int:
        return self.size - self._num_free

"""The reference KV pool a replay allocates from: a free stack of token indices."""

from __future__ import annotations

import torch


class ReplayPool:
    """A trusting free-stack of indices ``0 .. size-1`` (cheap: the cache calls are timed)."""

    def __init__(self, size: int, device: torch.device | str = "cpu") -> None:
        self.size = size
        self.device = torch.device(device)
        self._stack = torch.arange(size, dtype=torch.int64, device=self.device)
        self.free_count = size

    def alloc(self, n: int) -> torch.Tensor:
        if n > self.free_count:
            raise RuntimeError(f"pool short: {n} wanted, {self.free_count} free")
        self.free_count -= n
        return self._stack[self.free_count : self.free_count + n].clone()

    def free(self, indices: torch.Tensor) -> None:
        n = indices.numel()
        if self.free_count + n > self.size:
            raise AssertionError("more indices freed than the pool holds: a double free")
        self._stack[self.free_count : self.free_count + n] = indices
        self.free_count += n

    def free_segment(self, indices: torch.Tensor, start_pos: int = 0) -> None:
        self.free(indices[start_pos:])

    def check_complete(self) -> None:
        """Every index is free, exactly once."""
        if self.free_count != self.size:
            raise AssertionError(f"{self.size - self.free_count} indices never came back")
        seen = torch.sort(self._stack).values
        if not torch.equal(seen, torch.arange(self.size, device=self.device)):
            raise AssertionError("an index came back twice and another never")

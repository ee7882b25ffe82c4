"""A reference mamba state pool: fixed state slots on any device, refusing double frees.

For users, tests and benchmarks of MambaRadixCache. Slot bookkeeping is host-side Python
(slot ids are handles, not data); the states themselves are one tensor on the pool's device.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from radixkv.arguments import require_int
from radixkv.errors import TokenTypeError, UsageError
from radixkv.pools.allocator import DoubleFreeError


class MambaStatePool:
    """``size`` state slots, each a ``state_shape`` tensor of ``dtype`` on ``device``."""

    def __init__(
        self,
        size: int,
        state_shape: Sequence[int] = (1,),
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        self.size = require_int("size", size, 0)
        self.device = torch.device(device)
        self.states = torch.zeros((size, *state_shape), dtype=dtype, device=self.device)
        self._free = list(range(size - 1, -1, -1))  # pop() hands out slot 0 first
        self._allocated = [False] * size

    def available_size(self) -> int:
        return len(self._free)

    def is_allocated(self, slot: int) -> bool:
        return self._allocated[self._slot(slot)]

    def alloc_track_slot(self) -> int | None:
        """A free slot, now allocated to the caller, or ``None`` when every slot is taken."""
        if not self._free:
            return None
        slot = self._free.pop()
        self._allocated[slot] = True
        return slot

    def free_track_slot(self, slot: int | torch.Tensor) -> None:
        """Give ``slot`` back; freeing a slot that is not allocated is a DoubleFreeError."""
        index = self._slot(slot)
        if not self._allocated[index]:
            raise DoubleFreeError(f"state slot {index} is not allocated")
        self._allocated[index] = False
        self._free.append(index)

    def copy_states(self, src: int | torch.Tensor, dst: int | torch.Tensor) -> None:
        """Copy the state in slot ``src`` into slot ``dst`` (both allocated, distinct)."""
        source, target = self._slot(src), self._slot(dst)
        if not (self._allocated[source] and self._allocated[target]):
            raise UsageError(f"copy_states({source}, {target}): both slots must be allocated")
        if source == target:
            raise UsageError(f"copy_states: source and destination are the same slot {source}")
        self.states[target].copy_(self.states[source])

    def _slot(self, slot: object) -> int:
        if isinstance(slot, torch.Tensor):
            if slot.numel() != 1 or slot.dtype.is_floating_point or slot.dtype == torch.bool:
                raise TokenTypeError(f"a slot tensor must hold one integer, got {slot!r}")
            slot = int(slot.reshape(-1)[0])
        index = require_int("slot", slot, 0)
        if index >= self.size:
            raise UsageError(f"slot {index} is outside [0, {self.size})")
        return index

"""Deliberately broken adapters: the kit must find each bug, each as its own finding.

``factory``: radixkv's RadixCache, but what the cache frees never reaches the allocator (an
engine that drops ``free`` calls): every eviction leaks KV indices.

``two_bugs``: radixkv's RadixCache behind an adapter with two independent bugs, an unlock
that no lock matches is silently accepted (INV-14) and ``evict`` reports one token fewer
than it freed (INV-11). ``radixkv check radixkv_conformance.adapters.broken:two_bugs`` must
report both, separately, and ``--known`` of one must still report the other.
"""

from __future__ import annotations

from typing import Any

import radixkv
from radixkv_conformance.adapters.radixkv import RadixCacheAdapter
from radixkv_conformance.profile import RADIXKV
from radixkv_conformance.protocol import Evicted, Host, Indices

PROFILE = RADIXKV


class _DropsFrees:
    """A host whose ``free`` goes nowhere (the bug); the rest is the kit's."""

    def __init__(self, host: Host) -> None:
        self.page_size = host.page_size
        self.sliding_window = host.sliding_window
        self.host = host

    def __call__(self, indices: Indices) -> None:
        """Dropped."""

    def free(self, indices: Indices) -> None:
        """Dropped."""

    def free_swa(self, indices: Indices) -> None:
        self.host.free_swa(indices)

    def alloc_slot(self) -> int | None:
        return self.host.alloc_slot()

    def free_slot(self, slot: int) -> None:
        self.host.free_slot(slot)

    def copy_state(self, src: int, dst: int) -> None:
        self.host.copy_state(src, dst)


class ForgetsToFree(RadixCacheAdapter):
    def __init__(self, page_size: int, host: Host) -> None:
        super().__init__(page_size, _DropsFrees(host))


class TwoBugs(RadixCacheAdapter):
    """Two bugs that do not depend on each other.

    It claims no ``stale_handles``: the swallowed unlock would otherwise show a second time
    as an accepted stale unlock, and this adapter is about two findings exactly.
    """

    capabilities = RadixCacheAdapter.capabilities - {"stale_handles"}

    def unlock(self, handle: Any, token: Any) -> None:
        try:
            super().unlock(handle, token)
        except radixkv.UsageError:
            if token is not None:
                raise  # bug 1: only an unlock with no lock token is swallowed

    def evict(self, num_tokens: Any) -> Evicted:
        freed = super().evict(num_tokens).full
        return Evicted(max(freed - 1, 0))  # bug 2: one token too few reported


def factory(page_size: int, host: Host) -> ForgetsToFree:
    return ForgetsToFree(page_size, host)


def two_bugs(page_size: int, host: Host) -> TwoBugs:
    return TwoBugs(page_size, host)

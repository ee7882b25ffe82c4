"""The calls an adapter hands straight to a cache of sglang's shape, written once.

radixkv's caches, sglang's Python ``RadixCache`` and pymllm's caches answer these alike: a
lock is ``inc_lock_ref``, an unlock ``dec_lock_ref``, and three counters give the sizes.
"""

from __future__ import annotations

from typing import Any

from radixkv_conformance.protocol import Sizes


class RefCountedCalls:
    """``lock``, ``unlock``, ``reset`` and ``sizes`` of an adapter whose ``cache`` counts locks
    per node. An adapter whose cache takes the lock's receipt back overrides ``unlock``."""

    cache: Any

    def lock(self, handle: Any) -> Any:
        return self.cache.inc_lock_ref(handle)

    def unlock(self, handle: Any, token: Any) -> None:
        self.cache.dec_lock_ref(handle)

    def reset(self) -> None:
        self.cache.reset()

    def sizes(self) -> Sizes:
        c = self.cache
        return Sizes(c.evictable_size(), c.protected_size(), c.total_size())

"""radixkv's ChunkCache under the machine: it must share nothing and free nothing."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch

import radixkv
from radixkv_conformance.adapters._calls import HostFrees, RefCountedCalls
from radixkv_conformance.profile import CHUNK_CACHE
from radixkv_conformance.protocol import Host
from radixkv_conformance.protocol import TokenPlace as Slot

PROFILE = CHUNK_CACHE


class ChunkCacheAdapter(RefCountedCalls):
    usage_errors: tuple[type[BaseException], ...] = (radixkv.UsageError,)
    capabilities = frozenset({"namespaces", "reset", "bad_input"})
    cache: radixkv.ChunkCache

    def __init__(self, page_size: int, host: Host) -> None:
        assert page_size == 1, "ChunkCache has no page size"
        self.page_size = page_size
        self.cache = radixkv.ChunkCache(HostFrees(host))

    def match(self, tokens: tuple[Any, ...], namespace: Any) -> tuple[tuple[int, ...], Any]:
        result = self.cache.match_prefix(radixkv.RadixKey(list(tokens), namespace))
        return tuple(result.indices.tolist()), result.last_node

    def insert(
        self, tokens: tuple[Any, ...], namespace: Any, indices: tuple[int, ...]
    ) -> tuple[int | None, Any]:
        value = torch.tensor(indices, dtype=torch.int64)
        result = self.cache.insert(radixkv.RadixKey(list(tokens), namespace), value)
        return result.prefix_len, result.last_node

    def evict(self, num_tokens: Any) -> int:
        return self.cache.evict(num_tokens).full_evicted

    def contents(self) -> dict[Slot, int]:
        return {}

    def check(self) -> None:
        assert not hasattr(self.cache, "page_size"), "ChunkCache must not have a page_size"

    def snapshot(self) -> Hashable:
        return self.sizes()


def factory(page_size: int, host: Host) -> ChunkCacheAdapter:
    return ChunkCacheAdapter(page_size, host)

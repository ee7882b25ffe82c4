"""A MambaRadixCache on reference pools, with the engine's side of the protocol."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from radixkv import (
    InsertResult,
    KVIndexAllocator,
    MambaMatchResult,
    MambaRadixCache,
    MambaStatePool,
    MambaTreeNode,
    RadixKey,
)


@dataclass
class MambaHarness:
    cache: MambaRadixCache
    kv: KVIndexAllocator
    states: MambaStatePool
    evicted: list[int] = field(default_factory=list)

    def insert(
        self, tokens: list[int], *, state: bool = True, extra_key: str | None = None
    ) -> InsertResult:
        """Insert like an engine with fresh KV and (by default) a fresh state slot."""
        value = self.kv.alloc(len(tokens))
        assert value is not None
        slot = self.states.alloc_track_slot() if state else None
        result = self.cache.insert(RadixKey(tokens, extra_key), value, mamba_value=slot)
        aligned = len(tokens) // self.cache.page_size * self.cache.page_size
        self.kv.free(torch.cat([value[: result.prefix_len], value[aligned:]]))
        if slot is not None and result.mamba_exist:
            self.states.free_track_slot(slot)
        self.cache.check_invariants()
        return result

    def match(
        self,
        tokens: list[int],
        extra_key: str | None = None,
        *,
        keep: bool = False,
        cow: bool = True,
    ) -> MambaMatchResult:
        """Match like a request about to run: it asks for its own copy of the matched state
        (``cow``); unless ``keep``, the request ends and frees that copy. ``cow=False`` is a
        scheduler's probe (sglang's LPM policy matches every waiting request)."""
        result = self.cache.match_prefix(RadixKey(tokens, extra_key), cow=cow)
        self.cache.check_invariants()
        if result.cow_slot is not None and not keep:
            self.states.free_track_slot(result.cow_slot)
        return result

    def leaked(self) -> bool:
        held = self.cache.total_size()
        slots = len(self.cache.owned_slots())
        return (
            self.kv.allocated_count() != held
            or self.states.size - self.states.available_size() != slots
        )


def make_mamba(
    page_size: int = 1, *, slots: int = 64, device: str = "cpu", state_shape: tuple[int, ...] = (2,)
) -> MambaHarness:
    kv = KVIndexAllocator(4096, device)
    states = MambaStatePool(slots, state_shape, device=device)
    evicted: list[int] = []
    cache = MambaRadixCache(page_size, kv, states, evicted.append)
    return MambaHarness(cache, kv, states, evicted)


def node_tokens(node: MambaTreeNode) -> list[int]:
    return [int(t) for t in node.tokens]  # type: ignore[arg-type]  # int tokens in these tests

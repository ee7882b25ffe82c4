"""The seed's shared data types: the three result records and BasePrefixCache.

``RadixKey`` lives in radix_key.py (keys.py is the keys' front door) and is re-exported
here, where the seed names it; ``KVAllocator`` and ``free_indices`` live with the pools
(pools/protocols.py) and are re-exported here too.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

import torch

from radixkv.keys import RadixKey, key_limit
from radixkv.pools.protocols import KVAllocator, free_indices

__all__ = [
    "BasePrefixCache",
    "EvictResult",
    "InsertResult",
    "KVAllocator",
    "MatchResult",
    "RadixKey",
    "empty_indices",
    "free_indices",
    "key_limit",
]


def empty_indices(device: torch.device) -> torch.Tensor:
    return torch.empty(0, dtype=torch.int64, device=device)


@dataclass
class MatchResult:
    """Returned by ``match_prefix``: the cached KV indices of the longest cached prefix.

    The seed's four fields, then ``cow_slot`` (radixkv's, for every cache so that one
    scheduler reads one result): the private state slot ``match_prefix(key, cow=True)``
    copied the matched recurrent state into, owned by the caller. ``None`` unless a
    ``MambaRadixCache`` was asked for a copy and matched a state.
    """

    indices: torch.Tensor
    last_node: Any = None
    prefix_len: int = 0
    mamba_branching_seqlen: int | None = None
    cow_slot: int | None = None


@dataclass
class InsertResult:
    """Returned by ``insert``: how many leading tokens were cached already, and the end node."""

    prefix_len: int = 0
    last_node: Any = None
    mamba_exist: bool = False


@dataclass
class EvictResult:
    """Returned by ``evict``: exact counts of what was freed."""

    full_evicted: int = 0
    swa_evicted: int = 0
    mamba_evicted: int = 0


class BasePrefixCache(abc.ABC):
    """The interface every prefix cache implements (RadixCache, ChunkCache, MambaRadixCache)."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Clear all cached state."""

    @abc.abstractmethod
    def match_prefix(self, key: RadixKey, *, cow: bool = False) -> MatchResult:
        """Find the longest cached prefix of ``key``.

        ``cow=True`` (sglang's ``cow_mamba``) asks for a private copy of the matched
        recurrent state in ``MatchResult.cow_slot``; every cache takes it, and only a cache
        with states (MambaRadixCache) has anything to copy. Without it a match takes
        nothing from any pool.
        """

    @abc.abstractmethod
    def insert(
        self, key: RadixKey, value: torch.Tensor | None = None, **kwargs: Any
    ) -> InsertResult:
        """Insert ``key`` with its KV indices ``value``."""

    @abc.abstractmethod
    def evict(self, num_tokens: int, swa_num_tokens: int = 0) -> EvictResult:
        """Free at least ``num_tokens`` tokens of unlocked cache, or all that can be freed."""

    @abc.abstractmethod
    def inc_lock_ref(self, node: Any) -> Any | None:
        """Protect ``node`` and its ancestors from eviction; returns a token for unlocking."""

    @abc.abstractmethod
    def dec_lock_ref(self, node: Any, **kwargs: Any) -> None:
        """Undo one ``inc_lock_ref(node)``."""

    def evictable_size(self) -> int:
        return 0

    def swa_evictable_size(self) -> int:
        return 0

    def protected_size(self) -> int:
        return 0

    def swa_protected_size(self) -> int:
        return 0

    def total_size(self) -> int:
        return 0

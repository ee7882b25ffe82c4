"""The calls an adapter hands straight to its cache, written once for each shape of cache.

- sglang's shape: radixkv's caches, sglang's Python ``RadixCache`` and pymllm's caches. A
  lock is ``inc_lock_ref``, an unlock ``dec_lock_ref``, and three counters give the sizes
  (two more, a Mamba cache's states).
- ``HostFrees``: the KV pool a cache frees into, each free handed to the kit's host.
- MAX's shape: MAX's own ``RadixTrie`` and radixkv's. A lock marks a path in use by a
  sequence, the sizes count blocks, and an eviction is asked for in blocks.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from radixkv_conformance.protocol import Host, Indices, PagePlace, Sizes


class HostFrees:
    """The KV pool a cache frees into, on the CPU: every index it frees goes to the kit's
    host (the machine judges whether the cache should have freed it)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.device = torch.device("cpu")

    def free(self, indices: torch.Tensor) -> None:
        self.host.free(tuple(int(i) for i in indices.tolist()))

    def free_segment(self, indices: torch.Tensor, start_pos: int = 0) -> None:
        self.free(indices[start_pos:])


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


class MambaCalls:
    """``contents`` and ``mamba_sizes`` of an adapter of a Mamba cache of that shape: the
    pages of its ``mamba_contents`` without their states, and its two state counters."""

    cache: Any

    def mamba_contents(self) -> Mapping[PagePlace, tuple[Indices, int | None]]:
        raise NotImplementedError

    def contents(self) -> dict[PagePlace, Indices]:
        return {place: indices for place, (indices, _) in self.mamba_contents().items()}

    def mamba_sizes(self) -> tuple[int, int]:
        return (self.cache.mamba_evictable_size(), self.cache.mamba_protected_size())


class MaxTrieCalls:
    """What an adapter of a trie of MAX's shape (``trie``) hands straight to it. A lock is a
    new sequence marking the path in use (or, with a receipt, the sequence that holds it
    again); an eviction is asked for in whole blocks."""

    page_size: int
    host: Host
    trie: Any
    sequences: itertools.count[int]

    def _blocks(self, indices: Sequence[int], n_pages: int) -> list[Indices]:
        """The first ``n_pages`` whole pages of ``indices``, a block each."""
        p = self.page_size
        return [tuple(indices[i * p : i * p + p]) for i in range(min(n_pages, len(indices) // p))]

    def lock(self, handle: Any, receipt: Any = None) -> Any:
        seq = next(self.sequences) if receipt is None else receipt
        self.trie.mark_in_use_by(handle, seq)
        return seq

    def unlock(self, handle: Any, token: Any) -> None:
        self.trie.mark_not_in_use_by(handle, token)

    def _evict_blocks(self, num_tokens: int) -> list[Any]:
        """The blocks an eviction of ``num_tokens`` takes: enough whole blocks to cover them
        (a count of zero or less is passed on as it is, for the trie to judge)."""
        p = self.page_size
        return list(self.trie.evict_blocks(num_tokens if num_tokens <= 0 else -(-num_tokens // p)))

    def sizes(self) -> Sizes:
        p = self.page_size
        total = len(self.trie.get_all_blocks()) * p
        evictable = len(self.trie.get_evictable_blocks()) * p
        return Sizes(evictable, total - evictable, total)

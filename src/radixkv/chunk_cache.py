"""ChunkCache: the no-op prefix cache, for models or modes that cannot share prefixes.

It matches nothing, caches nothing and frees nothing: the caller keeps every KV index it
allocated and frees it itself. Calls are still validated by RadixCache's own checks
(``read_key`` for keys, ``check_value`` for values, arguments.py for the rest), so every
call RadixCache refuses this cache refuses too, with the same error type, and switching
caches never hides a caller bug. It hands out no nodes: a lock or unlock takes ``None``.
It has no ``page_size`` attribute on purpose: callers detect it with
``hasattr(cache, "page_size")``.
"""

from __future__ import annotations

from typing import Any

import torch

from radixkv.arguments import (
    check_value,
    insert_keywords,
    require_bool,
    require_int,
    require_no_boundary,
    unlock_boundary,
)
from radixkv.base import (
    BasePrefixCache,
    EvictResult,
    InsertResult,
    MatchResult,
    RadixKey,
    empty_indices,
)
from radixkv.errors import StaleNodeError, TokenTypeError
from radixkv.keys import read_key
from radixkv.pools.protocols import KVAllocator
from radixkv.tree import TreeNode


class ChunkCache(BasePrefixCache):
    """A prefix cache that never shares: every request computes its whole prompt.

    ``token_to_kv_pool_allocator`` is accepted for interface parity and never called.
    """

    def __init__(
        self, token_to_kv_pool_allocator: KVAllocator | None = None, device: str = "cpu"
    ) -> None:
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self.device = torch.device(device)

    def reset(self) -> None:
        """Nothing is cached, so there is nothing to drop."""

    def match_prefix(self, key: RadixKey, *, cow: bool = False) -> MatchResult:
        """Always a miss: empty int64 indices on the cache's device, ``last_node=None``.

        ``cow`` is checked (a bool) and means nothing: there is no state to copy.
        """
        require_bool("cow", cow)
        with read_key(key, 1, True) as found:
            found.require_valid_from(0)  # as RadixCache's match of an empty tree checks it
        return MatchResult(indices=empty_indices(self.device), last_node=None, prefix_len=0)

    def insert(
        self, key: RadixKey, value: torch.Tensor | None = None, **kwargs: Any
    ) -> InsertResult:
        """Caches nothing (``prefix_len=0``, ``last_node=None``); the caller keeps ``value``.

        ``value`` is checked as RadixCache checks it: one index per token of ``key`` (a
        shorter or longer one is a ``UsageError``), a 1-D integer tensor, or ``None``.

        Takes every keyword of the family (``prev_prefix_len``, ``swa_evicted_seqlen``,
        ``mamba_value``) and checks it, so a scheduler written for RadixCache runs unchanged.
        """
        insert_keywords(kwargs)
        with read_key(key, 1, True) as found:  # RadixCache's checks, in RadixCache's order
            check_value(found, value)
            found.require_valid_from(0)  # what RadixCache would store, checked
        return InsertResult()

    def evict(self, num_tokens: int, swa_num_tokens: int = 0) -> EvictResult:
        """Nothing is evictable: frees nothing and reports zero."""
        require_int("num_tokens", num_tokens, 0)
        require_int("swa_num_tokens", swa_num_tokens, 0)
        return EvictResult()

    def inc_lock_ref(self, node: Any) -> None:
        """There are no nodes to protect: takes ``None`` (what ``match_prefix`` and
        ``insert`` return as ``last_node``) and returns ``None``."""
        _require_no_node(node)

    def dec_lock_ref(self, node: Any, **kwargs: Any) -> None:
        """Nothing was locked; a no-op. ``node`` must be ``None`` and ``swa_boundary_id=``
        what ``inc_lock_ref`` returned: ``None``."""
        boundary = unlock_boundary(kwargs)
        _require_no_node(node)
        require_no_boundary(boundary)


def _require_no_node(node: object) -> None:
    """A ChunkCache hands out no node, so any node is another cache's: the usage errors
    RadixCache raises for a node that is not its own."""
    if node is None:
        return
    if not isinstance(node, TreeNode):
        raise TokenTypeError(f"expected a TreeNode or None, got {type(node).__name__}")
    raise StaleNodeError(f"node {node.id} does not belong to this cache (a ChunkCache has none)")

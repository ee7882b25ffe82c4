"""MambaRadixCache: the radix KV cache of hybrid attention + SSM models (SPEC.md, Mamba).

A ``RadixCache`` whose part is ``MambaStates`` (parts/mamba.py: state slots, truncating
matches, the mamba LRU list, phase 2 of eviction), with the seed's constructor and names.
Each node keeps the KV indices of its tokens (``value``) and, optionally, one state slot
holding the recurrent state after its last token (``mamba_value``); ``match_prefix`` stops
at the deepest matched node with a state and never splits. A copy of that state for the
request to write into (copy-on-write) is asked for, never implied:
``match_prefix(key, cow=True)``; a plain match takes nothing from any pool, so a scheduler
may probe every waiting request. Mamba sizes count slots, not tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Unpack, cast

import torch

from radixkv.arguments import InsertKeywords, insert_keywords, state_slot
from radixkv.base import InsertResult, MatchResult, RadixKey
from radixkv.keys import read_key
from radixkv.parts.lru_list import LRUList
from radixkv.parts.mamba import MambaStates, RecencyOrder
from radixkv.parts.mamba_node import MambaTreeNode
from radixkv.parts.part import Part
from radixkv.pools.protocols import KVAllocator, MambaPool
from radixkv.radix_cache import RadixCache, TreeOptions
from radixkv.tree import Tree, TreeNode

__all__ = ["LRUList", "MambaMatchResult", "MambaPool", "MambaRadixCache", "MambaTreeNode"]


@dataclass
class MambaMatchResult(MatchResult):
    """What ``MambaRadixCache.match_prefix`` returns: a ``MatchResult`` whose ``cow_slot``
    the Mamba cache fills when asked (``cow=True``).

    ``cow_slot`` is then a slot freshly allocated from the mamba pool holding a copy of
    ``last_node``'s state; it belongs to the caller (free it, or give it back through
    ``insert(..., mamba_value=cow_slot)``). ``None`` without ``cow=True``, when
    ``last_node`` is the root (the request starts from the initial state) or the cache has
    no mamba pool.
    """


class MambaRadixCache(RadixCache):
    """Radix tree with KV indices and one recurrent-state slot per node end.

    ``token_to_kv_pool_allocator.free`` receives every KV index the cache lets go,
    ``mamba_pool.free_track_slot`` every state slot, ``on_node_evict`` the id of every
    deleted node. ``clock`` stamps recency (default: a per-cache counter).
    ``eviction_policy`` orders the leaves ``evict`` deletes to free KV (as RadixCache's:
    ``"lru"`` by default, eviction.py); states freed to make room for states (phase 2)
    go least recently used first whatever the policy.
    """

    _match_result = MambaMatchResult

    def __init__(
        self,
        page_size: int = 1,
        token_to_kv_pool_allocator: KVAllocator | None = None,
        mamba_pool: MambaPool | None = None,
        on_node_evict: Callable[[int], None] | None = None,
        **options: Unpack[TreeOptions],
    ) -> None:
        self.sliding_window_size = None
        self.mamba_pool: MambaPool | None = mamba_pool

        def states(tree: Tree[TreeNode]) -> Part[TreeNode]:
            self._states = MambaStates(cast("Tree[MambaTreeNode]", tree), mamba_pool)
            return cast("Part[TreeNode]", self._states)

        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self.on_node_evict = on_node_evict
        self._build(page_size, MambaTreeNode, states, **options)

    @property
    def root(self) -> MambaTreeNode:
        return cast(MambaTreeNode, self.tree.root)

    @property
    def full_lru(self) -> RecencyOrder:
        """Every live node, most recently used first (a view of the tree's recency)."""
        return self._states.full_lru

    @property
    def mamba_lru(self) -> LRUList:
        """The nodes holding a state slot, most recently used first."""
        return self._states.mamba_lru

    def mamba_evictable_size(self) -> int:
        """State slots held by nodes without a lock handle of their own."""
        return self._states.mamba_evictable_size()

    def mamba_protected_size(self) -> int:
        """State slots held by nodes with a lock handle."""
        return self._states.mamba_protected_size()

    def owns_slot(self, slot: int) -> bool:
        """Whether the tree holds state slot ``slot`` (a request must never write into it)."""
        return slot in self._states.slots

    def owned_slots(self) -> set[int]:
        """Every state slot the tree holds."""
        return set(self._states.slots)

    def nodes(self) -> Iterator[MambaTreeNode]:
        """Every live node below the root, parents before children."""
        return cast("Iterator[MambaTreeNode]", self.tree.nodes())

    def match_prefix(self, key: RadixKey, *, cow: bool = False) -> MambaMatchResult:
        """The longest cached prefix of ``key`` that ends at a node holding a state.

        Never changes the tree's shape. ``mamba_branching_seqlen`` is the page-aligned
        length the KV alone matches when that is longer than ``prefix_len``, else ``None``.
        Refreshes the recency of the returned path, child before parent.

        Takes nothing from any pool unless ``cow=True`` (sglang's ``cow_mamba``): then
        ``cow_slot`` is a fresh slot holding a copy of ``last_node``'s state, the caller's
        to own (with no slot to copy into, the match is a miss). A copy that makes room
        answers for the cache it leaves: when the eviction it needed deleted nodes, the
        branching length is measured again in the tree as the call leaves it (the path to
        ``last_node`` was locked meanwhile, so the prefix and ``last_node`` stand).
        """
        cached = self.tree.evictable_size + self.tree.protected_size
        result = cast(MambaMatchResult, super().match_prefix(key, cow=cow))
        if result.mamba_branching_seqlen is not None and self.total_size() != cached:
            result.mamba_branching_seqlen = self._branching(key, result.prefix_len)
        return result

    def _branching(self, key: RadixKey, prefix_len: int) -> int | None:
        """How far the KV alone matches ``key`` now, when that is past ``prefix_len``."""
        with read_key(key, self.page_size, self.tree.packed) as found:
            kv_len = self.tree.descend(found).end
        return kv_len if kv_len > prefix_len else None

    def insert(
        self,
        key: RadixKey,
        value: torch.Tensor | None = None,
        *,
        mamba_value: int | torch.Tensor | None = None,
        **kwargs: Any,
    ) -> InsertResult:
        """Cache ``key`` -> ``value`` with the state after the key in slot ``mamba_value``.

        The tree keeps the KV indices it holds and adopts the caller's for the new suffix;
        the caller frees its duplicates ``[cache_protected_len, prefix_len)``. The node
        ending at the key adopts the slot unless it already has a state: then
        ``mamba_exist`` is True and the slot stays the caller's to free. New tokens need a
        slot (a leaf without state could never be matched). ``prev_prefix_len`` and
        ``swa_evicted_seqlen`` are checked and mean nothing here: there is no sliding window.
        """
        if kwargs:
            checked = insert_keywords({**kwargs, "mamba_value": mamba_value})
            keywords = checked._replace(prev_prefix_len=0, swa_evicted_seqlen=0)
        else:  # the common call: only the slot to check
            keywords = InsertKeywords(0, 0, state_slot(mamba_value), 0)
        return self._insert(key, value, keywords)

    def dec_lock_ref(self, node: Any, **kwargs: Any) -> None:  # type: ignore[override]  # the seed's signature
        """Undo one ``inc_lock_ref(node)``; an unlock that no lock matches is a LockError.

        ``swa_boundary_id=`` may be given, as to every cache, and must be what
        ``inc_lock_ref`` returned: ``None``. (The seed's signature: no positional
        ``swa_boundary_id``, unlike ``RadixCache.dec_lock_ref``.)
        """
        super().dec_lock_ref(node, **kwargs)

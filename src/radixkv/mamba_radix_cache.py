"""MambaRadixCache: the radix KV cache of hybrid attention + SSM models (SPEC.md, Mamba).

Each node keeps the KV indices of its tokens (``value``) and, optionally, one state slot
holding the recurrent state after its last token (``mamba_value``). A state cannot be cut,
so a split gives the new upper node none; ``match_prefix`` therefore stops at the deepest
matched node that has a state (the root's initial state counts) and reports how far the KV
alone would have matched (``mamba_branching_seqlen``). A copy of that state for the request
to write into (copy-on-write) is asked for, never implied: ``match_prefix(key, cow=True)``;
a plain match takes nothing from any pool, so a scheduler may probe every waiting request.
Two LRU lists order the nodes: ``full_lru`` every live node, ``mamba_lru`` the nodes
holding a slot. Mamba sizes count slots, not tokens.

The tree itself (ids, token sizes, lock counts, recency stamps, split / add / delete) is
the core ``Tree`` of tree.py; this cache adds the states, and keeps ``full_lru`` in step
with the tree's shape through the tree's hooks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, cast

import torch

from radixkv.arguments import (
    aligned_value,
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
    free_indices,
)
from radixkv.errors import LockError, UsageError
from radixkv.events import EventListener, PageEvents
from radixkv.eviction import EvictionPolicy, apply_priority, resolve_policy
from radixkv.invariants import check_tree
from radixkv.keys import KeyData, read_key, token_count
from radixkv.lru_list import LRUList
from radixkv.mamba_invariants import check_mamba
from radixkv.mamba_node import MambaTreeNode
from radixkv.tree import Tree

__all__ = ["LRUList", "MambaMatchResult", "MambaRadixCache", "MambaTreeNode"]


class MambaPool(Protocol):
    """What the cache needs from a mamba state pool (``MambaStatePool`` is one)."""

    def alloc_track_slot(self) -> int | None: ...

    def free_track_slot(self, slot: int) -> None: ...

    def copy_states(self, src: int, dst: int) -> None: ...


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


class MambaRadixCache(BasePrefixCache):
    """Radix tree with KV indices and one recurrent-state slot per node end.

    ``token_to_kv_pool_allocator.free`` receives every KV index the cache lets go,
    ``mamba_pool.free_track_slot`` every state slot, ``on_node_evict`` the id of every
    deleted node. ``clock`` stamps recency (default: a per-cache counter).
    ``eviction_policy`` orders the leaves ``evict`` deletes to free KV (as RadixCache's:
    ``"lru"`` by default, eviction.py); states freed to make room for states (phase 2)
    go least recently used first whatever the policy.
    """

    def __init__(
        self,
        page_size: int = 1,
        token_to_kv_pool_allocator: Any = None,
        mamba_pool: Any = None,
        on_node_evict: Callable[[int], None] | None = None,
        *,
        clock: Callable[[], float] | None = None,
        event_listener: EventListener | None = None,
        eviction_policy: str | EvictionPolicy = "lru",
    ) -> None:
        self.page_size = require_int("page_size", page_size, 1)
        policy = resolve_policy(eviction_policy)
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self.mamba_pool: MambaPool | None = mamba_pool
        self.on_node_evict = on_node_evict
        self.device = torch.device(getattr(token_to_kv_pool_allocator, "device", "cpu"))
        self.tree: Tree[MambaTreeNode] = Tree(MambaTreeNode, page_size, self.device, clock, policy)
        self.tree.on_added.append(self._added)
        self.tree.on_deleted.append(self._deleted)
        self.tree.on_split.append(self._split)
        # None unless someone listens; a dropped state changes no page (SPEC.md, KV events)
        self._events = PageEvents.on(self.tree, event_listener)
        self._start_empty()

    def _start_empty(self) -> None:
        self.root.mamba_value = torch.empty(0, dtype=torch.int64)  # the initial state
        self.full_lru = LRUList(mamba=False)
        self.mamba_lru = LRUList(mamba=True)
        self._slots: dict[int, MambaTreeNode] = {}  # every state slot the tree owns
        self._mamba_evictable_size = self._mamba_protected_size = 0

    @property
    def root(self) -> MambaTreeNode:
        return self.tree.root

    @property
    def pool(self) -> Any:
        return self.token_to_kv_pool_allocator

    # ---- sizes: tokens for the full KV, state slots for mamba ---------------------------

    def evictable_size(self) -> int:
        return self.tree.evictable_size

    def protected_size(self) -> int:
        return self.tree.protected_size

    def total_size(self) -> int:
        """Cached tokens, mamba tombstones included."""
        return self.tree.evictable_size + self.tree.protected_size

    def mamba_evictable_size(self) -> int:
        """State slots held by nodes without a lock handle of their own."""
        return self._mamba_evictable_size

    def mamba_protected_size(self) -> int:
        """State slots held by nodes with a lock handle."""
        return self._mamba_protected_size

    def owns_slot(self, slot: int) -> bool:
        """Whether the tree holds state slot ``slot`` (a request must never write into it)."""
        return slot in self._slots

    def owned_slots(self) -> set[int]:
        """Every state slot the tree holds."""
        return set(self._slots)

    # ---- reset -------------------------------------------------------------------------

    def reset(self) -> None:
        """Drop every node: free every KV index and state slot once, report every node.

        Outstanding lock handles become stale; callers quiesce (no running request) first.
        """
        doomed = self.tree.clear()
        for node in doomed:
            self._free_kv(node)
            self._free_state(node)
        self._start_empty()
        if self._events is not None:
            self._events.cleared()
        for node in doomed:
            node.value = None
            node.mamba_value = None
            self._report_evicted(node)

    # ---- match -------------------------------------------------------------------------

    def match_prefix(self, key: RadixKey, *, cow: bool = False) -> MambaMatchResult:
        """The longest cached prefix of ``key`` that ends at a node holding a state.

        Never changes the tree's shape. ``mamba_branching_seqlen`` is the page-aligned
        length the KV alone matches when that is longer than ``prefix_len``, else ``None``.
        Refreshes the recency of the returned path in both lists, child before parent.

        Takes nothing from any pool unless ``cow=True`` (sglang's ``cow_mamba``): then
        ``cow_slot`` is a fresh slot holding a copy of ``last_node``'s state, the caller's
        to own (``_copy_on_write``; with no slot to copy into, the match is a miss).
        """
        require_bool("cow", cow)  # before any change
        with read_key(key, self.page_size, self.tree.packed) as found:
            walk = self.tree.descend(found)
            found.require_valid_from(walk.end)  # the part the tree holds is valid
        kv_len = walk.end
        path = [self._mamba(n) for n in walk.path]
        while path and path[-1].mamba_value is None:
            path.pop()  # a tombstone's KV is useless without the state after it
        last = path[-1] if path else self.root
        cow_slot = self._copy_on_write(last) if cow else None
        if cow and cow_slot is None and last.slot is not None and self.mamba_pool is not None:
            path, last = [], self.root  # no slot to copy the state into: a hit is unusable
        prefix_len = sum(len(n) for n in path)
        for node in path:
            node.hit_count += 1  # before the touch, which re-queues the leaf (LFU)
        self._touch(last)
        values = [n.value for n in path if n.value is not None]
        return MambaMatchResult(
            indices=torch.cat(values) if values else empty_indices(self.device),
            last_node=last,
            prefix_len=prefix_len,
            mamba_branching_seqlen=kv_len if kv_len > prefix_len else None,
            cow_slot=cow_slot,
        )

    def _copy_on_write(self, node: MambaTreeNode) -> int | None:
        """A fresh slot holding a copy of ``node``'s state, so the request never writes into
        a slot the tree owns. With the pool full, one unlocked state elsewhere makes room."""
        source = node.slot
        if source is None or self.mamba_pool is None:
            return None
        slot = self.mamba_pool.alloc_track_slot()
        if slot is None:
            self.inc_lock_ref(node)  # the state to copy must survive making room
            self.evict(0, 1)
            self.dec_lock_ref(node)
            slot = self.mamba_pool.alloc_track_slot()
        if slot is not None:
            self.mamba_pool.copy_states(source, slot)
        return slot

    # ---- insert ------------------------------------------------------------------------

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
        keywords = insert_keywords({**kwargs, "mamba_value": mamba_value})
        slot = keywords.mamba_slot
        with read_key(key, self.page_size, self.tree.packed) as found:
            indices = aligned_value(found, value, self.device)
            walk = self.tree.descend(found)
            new = found.new_part(walk.end)  # a checked copy: the tree stores it
        self._check_insert(new, slot)
        node = self._mamba(walk.path[-1]) if walk.path else self.root
        matched = walk.matched
        if walk.partial is not None:
            node = self.tree.split(self._mamba(walk.partial), walk.partial_len)
            matched += walk.partial_len
        mamba_exist, cached_end = False, node
        if new:
            assert slot is not None
            # A private copy: callers pass views of request rows they go on overwriting.
            node = self.tree.add_leaf(node, new, found.extra_key, indices[matched:].clone())
            self._adopt_state(node, slot)
        elif node.mamba_value is not None:
            mamba_exist = True
        elif slot is not None:
            self._adopt_state(node, slot)
        apply_priority(node, cached_end, keywords.priority)  # before the touch (re-queues)
        self._touch(node)
        return InsertResult(prefix_len=matched, last_node=node, mamba_exist=mamba_exist)

    def _check_insert(self, new: KeyData, slot: int | None) -> None:
        if slot is not None and slot in self._slots:
            raise UsageError(f"mamba_value {slot} is a state slot the cache already owns")
        if slot is None and new:
            raise UsageError(
                f"inserting {token_count(new)} new tokens needs a mamba_value: "
                "a leaf without state could never be matched"
            )

    # ---- the tree's hooks: the full LRU list follows its shape -----------------------------

    def _split(self, upper: MambaTreeNode, node: MambaTreeNode) -> None:
        """The upper part of a split gets no state: the slot holds the state after the
        whole key, which is not the state after the upper part's tokens."""
        upper.mamba_value = None
        upper.mamba_lock_ref = 0  # mamba locks stay with the state, on the lower part
        self.full_lru.insert_after(node, upper)

    def _added(self, leaf: MambaTreeNode) -> None:
        self.full_lru.insert_mru(leaf)

    def _deleted(self, node: MambaTreeNode) -> None:
        self.full_lru.remove(node)

    def _adopt_state(self, node: MambaTreeNode, slot: int) -> None:
        node.mamba_value = torch.tensor([slot], dtype=torch.int64)
        self._slots[slot] = node
        self.mamba_lru.insert_mru(node)
        self._mamba_evictable_size += 1  # a node without state holds no mamba lock

    def _touch(self, node: MambaTreeNode) -> None:
        """Stamp the path root..node with the clock; in both lists, node first."""
        self.tree.touch(node)
        self.full_lru.touch_node_and_parents_mru(node, self.root)
        self.mamba_lru.touch_node_and_parents_mru(node, self.root)

    # ---- eviction ----------------------------------------------------------------------

    def evict(self, num_tokens: int, swa_num_tokens: int = 0) -> EvictResult:
        """Free at least ``num_tokens`` KV tokens, then states until ``swa_num_tokens``
        state *slots* were freed in all (the seed's name for the mamba target).

        Phase 1 deletes the policy's first unlocked leaf (LRU by default) with its state, then each
        ancestor left a childless, unlocked tombstone. Phase 2 takes the least recently
        used node whose state has no lock: an inner node loses its state (a tombstone),
        a leaf is deleted as in phase 1. Whole nodes go, so counts may overshoot.

        Phase 1 takes its leaves from the tree's evictable-leaf heap, the one structure
        every cache evicts leaves from, in the eviction policy's order: under the default
        LRU policy and the per-cache clock no two leaves share a tick, so it yields them in
        ``full_lru``'s order without scanning the list.
        """
        require_int("num_tokens", num_tokens, 0)
        require_int("swa_num_tokens", swa_num_tokens, 0)
        result = EvictResult()
        while result.full_evicted < num_tokens:
            leaf = self.tree.lru_leaf()
            if leaf is None:
                break
            self._evict_leaf(leaf, result)
        while result.mamba_evicted < swa_num_tokens:
            node = self.mamba_lru.get_lru_unlocked()
            if node is None:
                break
            if node.children:
                self._free_state(node)
                self._drop_state(node, result)
            else:
                self._evict_leaf(node, result)
        return result

    def _evict_leaf(self, leaf: MambaTreeNode, result: EvictResult) -> None:
        """Delete ``leaf``, then every ancestor it leaves a childless unlocked tombstone."""
        parent = self._mamba(leaf.parent)
        self._delete(leaf, result)
        while self.tree.is_evictable_leaf(parent) and parent.mamba_value is None:
            grandparent = self._mamba(parent.parent)
            self._delete(parent, result)
            parent = grandparent

    def _delete(self, node: MambaTreeNode, result: EvictResult) -> None:
        self.tree.delete_leaf(node)
        result.full_evicted += len(node)
        self._free_kv(node)  # KV first, then the state: the order SPEC.md promises
        if node.mamba_value is not None:
            self._free_state(node)
            self._drop_state(node, result)
        node.value = None
        self._report_evicted(node)

    def _drop_state(self, node: MambaTreeNode, result: EvictResult) -> None:
        slot = node.slot
        assert slot is not None and node.mamba_lock_ref == 0
        node.mamba_value = None
        del self._slots[slot]
        self.mamba_lru.remove(node)
        self._mamba_evictable_size -= 1
        result.mamba_evicted += 1

    def _free_kv(self, node: MambaTreeNode) -> None:
        if node.value is not None:
            free_indices(self.token_to_kv_pool_allocator, node.value)

    def _free_state(self, node: MambaTreeNode) -> None:
        slot = node.slot
        if self.mamba_pool is not None and slot is not None:
            self.mamba_pool.free_track_slot(slot)

    def _report_evicted(self, node: MambaTreeNode) -> None:
        if self.on_node_evict is not None:
            self.on_node_evict(node.id)

    # ---- locks -------------------------------------------------------------------------

    def inc_lock_ref(self, node: Any) -> None:
        """Lock the KV of ``node`` and its ancestors, and the state of ``node`` only.

        ``node`` must hold a state: a handle protects the state its request resumes from
        (``None`` and the root lock nothing). Locking a tombstone is a LockError.
        """
        if node is None or node is self.root:
            return None
        node = self.tree.require_live(node)
        if node.mamba_value is None:
            raise LockError(f"inc_lock_ref on a mamba tombstone (no state to protect): {node!r}")
        if node.mamba_lock_ref == 0:
            self._mamba_evictable_size -= 1
            self._mamba_protected_size += 1
        # The handle: held_locks (alias mamba_lock_ref) protects this node's state only,
        # lock_ref the KV of the whole path.
        self.tree.lock(node)  # the KV of the whole path
        return None

    def dec_lock_ref(self, node: Any, **kwargs: Any) -> None:
        """Undo one ``inc_lock_ref(node)``; an unlock that no lock matches is a LockError.

        ``swa_boundary_id=`` may be given, as to every cache, and must be what
        ``inc_lock_ref`` returned: ``None``.
        """
        boundary = unlock_boundary(kwargs)
        if node is None or node is self.root:
            return
        node = self.tree.require_live(node)
        if node.held_locks == 0:
            raise LockError(f"dec_lock_ref on a node that holds no lock: {node!r}")
        require_no_boundary(boundary)
        self.tree.unlock(node)
        if node.mamba_lock_ref == 0:
            self._mamba_protected_size -= 1
            self._mamba_evictable_size += 1

    @staticmethod
    def _mamba(node: object) -> MambaTreeNode:
        """The tree's nodes are all MambaTreeNodes; the core helpers type them as TreeNode."""
        return cast(MambaTreeNode, node)

    # ---- debugging ---------------------------------------------------------------------

    def nodes(self) -> Iterator[MambaTreeNode]:
        """Every live node below the root, parents before children."""
        return self.tree.nodes()

    def check_invariants(self) -> None:
        """Check the core tree invariants and INV-30..33; O(size of the tree).

        For tests and the state machines: raises InvariantViolation naming the INV id.
        """
        check_tree(self.tree)
        check_mamba(self)

    def pretty_print(self) -> None:
        """Print the tree, one node a line, and the size counters."""
        for line in self._pretty_lines():
            print(line)

    def _pretty_lines(self) -> Iterator[str]:
        yield (
            f"MambaRadixCache(page_size={self.page_size}) total={self.total_size()} "
            f"evictable={self.evictable_size()} protected={self.protected_size()} "
            f"mamba_evictable={self.mamba_evictable_size()} "
            f"mamba_protected={self.mamba_protected_size()}"
        )
        yield from self.tree.lines()

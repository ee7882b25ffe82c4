"""RadixCache: the radix-tree KV prefix cache (SPEC.md; DECISIONS.md §2).

Keys and values are page aligned, namespaces (``extra_key``) never share a node, recency is
a logical clock, eviction deletes whole unlocked leaves least recently used first, and a
lock is a handle: every ``dec_lock_ref`` must answer an ``inc_lock_ref`` on the same node.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch

from radixkv.arguments import (
    aligned_value,
    checked_descent,
    descent_and_new_part,
    reject_unknown,
    tree_key,
)
from radixkv.base import (
    BasePrefixCache,
    EvictResult,
    InsertResult,
    MatchResult,
    RadixKey,
    empty_indices,
)
from radixkv.errors import LockError, StaleNodeError, TokenTypeError
from radixkv.events import EventListener, PageEvents, node_page_hashes
from radixkv.invariants import check_tree, require
from radixkv.keys import KeyData, KeyView, release, span, token_count
from radixkv.swa import FullAttention, SlidingWindow
from radixkv.tokens import require_int
from radixkv.tree import (
    Descent,
    TreeNode,
    edge,
    iter_subtree,
    path_to_root,
    split_node,
    tree_lines,
)


class KVAllocator(Protocol):
    """What the cache needs from a KV pool: somewhere to return freed indices."""

    def free(self, indices: torch.Tensor) -> None: ...


class RadixCache(BasePrefixCache):
    """Radix tree mapping namespaced, page-aligned token prefixes to KV-pool indices.

    ``token_to_kv_pool_allocator`` receives every index the cache lets go (``free``);
    ``on_node_evict`` is called with the id of every node the cache deletes. ``clock``
    stamps recency; by default a per-cache counter that ticks once per operation.
    ``event_listener`` receives a record for every page stored or removed and for every
    reset (``radixkv.events``); without one the cache hashes nothing.
    """

    def __init__(
        self,
        page_size: int = 1,
        sliding_window_size: int | None = None,
        token_to_kv_pool_allocator: Any = None,
        on_node_evict: Callable[[int], None] | None = None,
        *,
        clock: Callable[[], float] | None = None,
        event_listener: EventListener | None = None,
    ) -> None:
        require_int("page_size", page_size, 1)
        self.page_size = page_size
        self.sliding_window_size = sliding_window_size
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self.on_node_evict = on_node_evict
        # None unless someone listens: then every new node is hashed (SPEC.md, KV events)
        self._events = None if event_listener is None else PageEvents(event_listener, page_size)
        self.device = torch.device(getattr(token_to_kv_pool_allocator, "device", "cpu"))
        self._clock = clock if clock is not None else itertools.count(1).__next__
        self._node_ids = itertools.count()
        self._evictable_size = 0
        self._protected_size = 0
        # The evictable leaves, kept up to date, and a heap of (recency, leaf) holding an
        # entry for each at its current recency (stale entries are skipped when popped).
        self._leaves: set[TreeNode] = set()
        self._heap: list[tuple[tuple[float, int], TreeNode]] = []
        self._no_indices = empty_indices(self.device)  # a match of nothing
        self._attention: FullAttention = (
            FullAttention()
            if sliding_window_size is None
            else SlidingWindow(self, require_int("sliding_window_size", sliding_window_size, 1))
        )
        self.root = self._new_root()

    @property
    def pool(self) -> Any:
        return self.token_to_kv_pool_allocator

    @property
    def supports_swa(self) -> bool:
        return self.sliding_window_size is not None

    # ---- sizes -------------------------------------------------------------------------

    def evictable_size(self) -> int:
        return self._evictable_size

    def protected_size(self) -> int:
        return self._protected_size

    def total_size(self) -> int:
        """Cached tokens, tombstones included (they still hold full-attention KV)."""
        return self._evictable_size + self._protected_size

    def swa_evictable_size(self) -> int:
        return self._attention.evictable_size()

    def swa_protected_size(self) -> int:
        return self._attention.protected_size()

    # ---- reset -------------------------------------------------------------------------

    def reset(self) -> None:
        """Drop every node: free every held index once and report every node as evicted.

        Outstanding lock handles become stale; callers quiesce (no running request) first.
        """
        doomed = list(iter_subtree(self.root))
        for node in doomed:
            self._free(node)
        self.root = self._new_root()
        self._evictable_size = 0
        self._protected_size = 0
        self._leaves.clear()
        self._heap.clear()
        self._attention.reset()
        if self._events is not None:
            self._events.cleared()
        for node in doomed:
            node.value = None
            self._report_evicted(node)

    def _new_root(self) -> TreeNode:
        root = TreeNode(next(self._node_ids), b"", empty_indices(self.device), None, 0)
        root.lock_ref = 1
        return root

    # ---- match -------------------------------------------------------------------------

    def match_prefix(self, key: RadixKey) -> MatchResult:
        """The longest cached page-aligned prefix of ``key`` in its namespace.

        Splits the last matched node when the match ends inside it, so ``last_node`` ends
        exactly at ``prefix_len``, and refreshes the recency of every node on the path.
        """
        data, extra_key = tree_key(self.root, key, self.page_size)
        try:
            path = self._walk(data, extra_key, key)
        finally:
            release(data)
        path = path[: self._attention.match_end(path)]
        node = path[-1] if path else self.root
        self._touch(node)
        for visited in path:
            visited.hit_count += 1
        values = [n.value for n in path if n.value is not None]
        indices = torch.cat(values) if values else self._no_indices
        return MatchResult(indices=indices, last_node=node, prefix_len=indices.numel())

    def _walk(self, data: KeyView, extra_key: str | None, key: RadixKey) -> list[TreeNode]:
        """The nodes along the key, splitting the last one where the match ends inside it.

        Checks the key first: the part the tree holds is valid, the rest must be.
        """
        return self._split_where_it_ends(
            checked_descent(self.root, data, extra_key, self.page_size, key)
        )

    def _split_where_it_ends(self, walk: Descent) -> list[TreeNode]:
        if walk.partial is not None:
            walk.path.append(self._split(walk.partial, walk.partial_len))
        return walk.path

    def _split(self, node: TreeNode, split_len: int) -> TreeNode:
        return split_node(node, split_len, next(self._node_ids), self.page_size)

    def _touch(self, node: TreeNode) -> None:
        """Stamp ``node`` and every ancestor with one new tick of the clock."""
        now = self._clock()
        self.root.last_access_time = now
        for n in path_to_root(node):
            n.last_access_time = now
        if node in self._leaves:  # only the deepest node can be a leaf
            self._push_leaf(node)

    # ---- insert ------------------------------------------------------------------------

    def insert(
        self,
        key: RadixKey,
        value: torch.Tensor | None = None,
        *,
        prev_prefix_len: int = 0,
        swa_evicted_seqlen: int = 0,
        **kwargs: Any,
    ) -> InsertResult:
        """Cache ``key`` -> ``value``; the tree keeps the indices it already holds.

        Returns the number of leading aligned tokens that were cached already
        (``prefix_len``) and the node ending at the aligned key. The cache frees nothing:
        the caller frees its own duplicates in ``[cache_protected_len, prefix_len)``.
        ``value=None`` uses the token ids as indices (a test convenience).
        ``prev_prefix_len`` and ``swa_evicted_seqlen`` only matter with a sliding window.
        """
        reject_unknown(kwargs)
        require_int("prev_prefix_len", prev_prefix_len, 0)
        require_int("swa_evicted_seqlen", swa_evicted_seqlen, 0)
        self._attention.check_insert(prev_prefix_len, swa_evicted_seqlen)
        data, extra_key = tree_key(self.root, key, self.page_size)
        try:
            return self._insert(key, data, extra_key, value, prev_prefix_len, swa_evicted_seqlen)
        finally:
            release(data)

    def _insert(
        self,
        key: RadixKey,
        data: KeyView,
        extra_key: str | None,
        value: torch.Tensor | None,
        prev_prefix_len: int,
        swa_evicted_seqlen: int,
    ) -> InsertResult:
        # What the tree keeps is copied: all of it here with a window (it may adopt any part),
        # else only the new suffix, in _add_leaf.
        value = aligned_value(data, value, self.device, copy=self.supports_swa)
        walk, new = descent_and_new_part(self.root, data, extra_key, self.page_size, key)
        path = self._split_where_it_ends(walk)
        matched = walk.matched + walk.partial_len
        settled = self._attention.insert_overlap(path, value, prev_prefix_len, swa_evicted_seqlen)
        node = settled or self.root
        if new:
            node = self._add_suffix(node, new, extra_key, value, matched, swa_evicted_seqlen)
        self._touch(node)
        return InsertResult(prefix_len=matched, last_node=node)

    def _add_suffix(
        self,
        parent: TreeNode,
        new: KeyData,
        extra_key: str | None,
        value: torch.Tensor,
        start: int,
        swa_evicted_seqlen: int,
    ) -> TreeNode:
        """Cache ``new``, the key's tokens from ``start`` on, below ``parent``; returns the
        node ending it."""
        end = start + token_count(new)
        live_from = self._attention.suffix_split(start, end, swa_evicted_seqlen)
        if live_from == end:  # all of it lost its SWA KV: nothing worth caching
            self._free_indices(value[start:])
            return parent
        if live_from > start:
            lost, new = span(new, 0, live_from - start), span(new, live_from - start, end - start)
            parent = self._add_leaf(parent, lost, extra_key, value[start:live_from], tombstone=True)
        return self._add_leaf(parent, new, extra_key, value[live_from:])

    def _add_leaf(
        self,
        parent: TreeNode,
        data: KeyData,
        extra_key: str | None,
        value: torch.Tensor,
        tombstone: bool = False,
    ) -> TreeNode:
        if not self.supports_swa:  # a private copy of just the part the tree keeps
            value = value.clone()
        leaf = TreeNode(
            next(self._node_ids), data, value, parent, parent.last_access_time, extra_key
        )
        leaf.swa_tombstone = tombstone
        parent.children[edge(leaf, self.page_size)] = leaf
        self._evictable_size += leaf.length
        self._leaves.discard(parent)
        self._leaves.add(leaf)
        self._push_leaf(leaf)
        self._attention.added(leaf)
        if self._events is not None:
            self._events.node_stored(leaf)
        return leaf

    # ---- eviction ----------------------------------------------------------------------

    def evict(self, num_tokens: int, swa_num_tokens: int = 0) -> EvictResult:
        """Delete unlocked leaves, least recently used first, until ``num_tokens`` are freed.

        A parent left childless becomes a candidate. Whole nodes go, so the count may
        overshoot by less than one node; it falls short only when nothing is evictable.
        """
        require_int("num_tokens", num_tokens, 0)
        require_int("swa_num_tokens", swa_num_tokens, 0)
        result = EvictResult()
        if num_tokens > 0:
            self._evict_leaves(num_tokens, result)
        self._attention.evict(swa_num_tokens, result)
        return result

    def _evict_leaves(self, num_tokens: int, result: EvictResult) -> None:
        candidates = self._heap
        while result.full_evicted < num_tokens and candidates:
            recency, leaf = heapq.heappop(candidates)
            if recency != leaf.recency() or leaf not in self._leaves:
                continue  # stale: since touched, deleted, locked or given a child
            self._delete_with_tombstones(leaf, result)  # a parent left a leaf is queued

    def _delete_with_tombstones(self, leaf: TreeNode, result: EvictResult) -> TreeNode:
        """Delete ``leaf`` and the tombstones it leaves as leaves; returns the first survivor.

        Leaves are never tombstones: a tombstone leaf could never be matched.
        """
        parent = leaf.parent
        assert parent is not None
        self._delete_leaf(leaf, result)
        while parent.swa_tombstone and self._is_evictable_leaf(parent):
            above = parent.parent
            assert above is not None
            self._delete_leaf(parent, result)
            parent = above
        return parent

    def _is_evictable_leaf(self, node: TreeNode) -> bool:
        return node is not self.root and not node.children and node.lock_ref == 0

    def _refresh_leaf(self, node: TreeNode) -> None:
        """Track whether ``node`` is an evictable leaf (O(1); called where that can change)."""
        if self._is_evictable_leaf(node):
            if node not in self._leaves:
                self._leaves.add(node)
                self._push_leaf(node)
        else:
            self._leaves.discard(node)

    def _push_leaf(self, node: TreeNode) -> None:
        heap = self._heap
        if len(heap) > 2 * len(self._leaves) + 64:  # mostly stale: rebuild
            heap[:] = [(n.recency(), n) for n in self._leaves]
            heapq.heapify(heap)
        heapq.heappush(heap, (node.recency(), node))

    def _delete_leaf(self, leaf: TreeNode, result: EvictResult) -> None:
        parent = leaf.parent
        assert parent is not None and leaf.lock_ref == 0
        del parent.children[edge(leaf, self.page_size)]
        self._leaves.discard(leaf)
        self._refresh_leaf(parent)  # the cascade: the parent may go next
        self._evictable_size -= leaf.length
        result.full_evicted += leaf.length
        result.swa_evicted += self._attention.deleted(leaf)
        if self._events is not None:
            self._events.node_removed(leaf)
        self._free(leaf)
        leaf.value = None
        self._report_evicted(leaf)

    def _free(self, node: TreeNode) -> None:
        if node.value is not None:
            self._free_indices(node.value)

    def _free_indices(self, indices: torch.Tensor) -> None:
        if self.token_to_kv_pool_allocator is not None and indices.numel():
            self.token_to_kv_pool_allocator.free(indices)

    def _report_evicted(self, node: TreeNode) -> None:
        if self.on_node_evict is not None:
            self.on_node_evict(node.id)

    # ---- locks -------------------------------------------------------------------------

    def inc_lock_ref(self, node: Any) -> int | None:
        """Protect ``node`` and its ancestors from eviction until the matching unlock.

        ``None`` and the root are accepted and lock nothing. With a sliding window it also
        SWA-locks the last W live tokens of the path and returns the ``swa_boundary_id``
        that ``dec_lock_ref`` takes back; without one it returns ``None``.
        """
        if node is None or node is self.root:
            return None
        self._require_live(node)
        self._attention.check_lock(node)
        node.held_locks += 1
        for n in path_to_root(node):
            if n.lock_ref == 0:
                self._evictable_size -= n.length
                self._protected_size += n.length
                self._leaves.discard(n)
            n.lock_ref += 1
        return self._attention.lock(node)

    def dec_lock_ref(self, node: Any, swa_boundary_id: int | None = None, **kwargs: Any) -> None:
        """Undo one ``inc_lock_ref(node)``; an unlock that no lock matches is a LockError."""
        reject_unknown(kwargs)
        if node is None or node is self.root:
            return
        self._require_live(node)
        if node.held_locks == 0:
            raise LockError(f"dec_lock_ref on a node that holds no lock: {node!r}")
        self._attention.check_unlock(node, swa_boundary_id)
        self._attention.unlock(node, swa_boundary_id)
        node.held_locks -= 1
        for n in path_to_root(node):
            n.lock_ref -= 1
            if n.lock_ref == 0:
                self._protected_size -= n.length
                self._evictable_size += n.length
                self._refresh_leaf(n)

    def _require_live(self, node: object) -> TreeNode:
        if not isinstance(node, TreeNode):
            raise TokenTypeError(f"expected a TreeNode, got {type(node).__name__}")
        if node.evicted:
            raise StaleNodeError(f"node {node.id} was evicted")
        top = node
        while top.parent is not None:
            top = top.parent
        if top is not self.root:
            raise StaleNodeError(f"node {node.id} does not belong to this cache")
        return node

    # ---- hashing -----------------------------------------------------------------------

    def compute_node_hash(self, node: TreeNode) -> list[str]:
        """The page hashes of ``node``: a pure function of its namespace and root path.

        Ancestors are hashed first, so the order of calls never matters; results are
        cached on the nodes (``hash_values``) and survive splits.
        """
        if node is self.root:
            return []
        self._require_live(node)
        return node_page_hashes(node, self.page_size)

    # ---- debugging ---------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Check every structural invariant of SPEC.md (INV-1..9); O(size of the tree).

        For tests and the state machines: raises InvariantViolation naming the INV id.
        """
        check_tree(self)
        self._attention.check()
        leaves = {n for n in iter_subtree(self.root) if self._is_evictable_leaf(n)}
        require("INV-6", self._leaves == leaves, "the evictable-leaf set is stale")
        queued = {(recency, id(n)) for recency, n in self._heap}
        fresh = all((n.recency(), id(n)) in queued for n in leaves)
        require("INV-6", fresh, "an evictable leaf is missing from the eviction heap")

    def pretty_print(self) -> None:
        """Print the tree, one node a line, and the size counters."""
        for line in self._pretty_lines():
            print(line)

    def _pretty_lines(self) -> Iterator[str]:
        yield (
            f"RadixCache(page_size={self.page_size}) total={self.total_size()} "
            f"evictable={self.evictable_size()} protected={self.protected_size()}"
        )
        yield from tree_lines(self.root)

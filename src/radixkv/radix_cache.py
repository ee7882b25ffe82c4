"""RadixCache: the radix-tree KV prefix cache (SPEC.md §2-9, and its SWA section).

Keys and values are page aligned, namespaces (``extra_key``) never share a node, recency is
a logical clock, eviction deletes whole unlocked leaves least recently used first, and a
lock is a handle: every ``dec_lock_ref`` must answer an ``inc_lock_ref`` on the same node.

Every tree cache is this class: one ``Tree`` plus one part (parts/) — full attention
(parts/part.py), a sliding window (parts/swa.py), or Mamba states (parts/mamba.py,
``MambaRadixCache`` being this class with the seed's Mamba constructor). Match, insert,
the eviction loop, reset, locks and printing are written once, here, and ask the part at
fixed points.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypedDict, Unpack, cast

import torch

from radixkv.arguments import (
    InsertKeywords,
    aligned_value,
    insert_keywords,
    reject_unknown,
    require_bool,
    require_int,
    require_no_boundary,
)
from radixkv.base import (
    BasePrefixCache,
    EvictResult,
    InsertResult,
    MatchResult,
    RadixKey,
    empty_indices,
)
from radixkv.errors import LockError
from radixkv.events import EventListener, PageEvents, node_page_hashes
from radixkv.eviction import EvictionPolicy, apply_priority, resolve_policy
from radixkv.invariants import check_tree
from radixkv.keys import KeyData, read_key, span, token_count
from radixkv.parts.part import Part
from radixkv.parts.swa import SlidingWindow, SwaTreeNode
from radixkv.pools.protocols import KVAllocator, free_indices
from radixkv.tree import Descent, Tree, TreeNode

DEFAULT_INSERT_KEYWORDS = insert_keywords({})


def _zero(value: object) -> bool:
    """``value`` is the int 0 (a keyword left at its default; a bool is not one)."""
    return type(value) is int and value == 0


def _defaults(prev_prefix_len: object, swa_evicted_seqlen: object, kwargs: dict[str, Any]) -> bool:
    """An insert's keywords are all at their defaults (``priority=0`` may be spelled out,
    as schedulers that have priorities do): nothing to check."""
    if kwargs and (len(kwargs) > 1 or not _zero(kwargs.get("priority"))):
        return False
    return _zero(prev_prefix_len) and _zero(swa_evicted_seqlen)


class TreeOptions(TypedDict, total=False):
    """The keyword-only options of every tree cache (RadixCache, MambaRadixCache).

    ``clock`` stamps recency (default: a per-cache counter); ``event_listener`` receives
    the KV events (radixkv.events); ``eviction_policy`` orders the leaves ``evict``
    deletes (``"lru"`` by default, eviction.py).
    """

    clock: Callable[[], float] | None
    event_listener: EventListener | None
    eviction_policy: str | EvictionPolicy


class RadixCache(BasePrefixCache):
    """Radix tree mapping namespaced, page-aligned token prefixes to KV-pool indices.

    ``token_to_kv_pool_allocator`` receives every index the cache lets go (``free``);
    ``on_node_evict`` is called with the id of every node the cache deletes. ``clock``
    stamps recency; by default a per-cache counter that ticks once per operation. The
    cache is one ``Tree`` (tree.py: ids, sizes, locks, recency, shape) plus an attention
    part (parts/): ``Part`` (full attention), or ``SlidingWindow`` with
    ``sliding_window_size`` (its allocator must then have ``free_swa`` too).
    ``event_listener`` receives a record for every page stored or removed and for every
    reset (``radixkv.events``); without one the cache hashes nothing.
    ``eviction_policy`` picks which unlocked leaf ``evict`` deletes first: ``"lru"``
    (default), ``"lfu"``, ``"fifo"``, ``"mru"``, ``"priority"`` (eviction.py), or a policy
    object; with a sliding window it orders the full-KV leaf eviction (SWA tombstoning
    stays least recently used first).
    """

    def __init__(
        self,
        page_size: int = 1,
        sliding_window_size: int | None = None,
        token_to_kv_pool_allocator: KVAllocator | None = None,
        on_node_evict: Callable[[int], None] | None = None,
        **options: Unpack[TreeOptions],
    ) -> None:
        self.sliding_window_size = sliding_window_size

        def attention(tree: Tree[TreeNode]) -> Part[TreeNode]:
            if sliding_window_size is None:
                return Part()
            window = require_int("sliding_window_size", sliding_window_size, 1)
            swa_tree = cast("Tree[SwaTreeNode]", tree)  # built with SwaTreeNode, below
            part = SlidingWindow(swa_tree, token_to_kv_pool_allocator, window)
            return cast("Part[TreeNode]", part)

        node_class = TreeNode if sliding_window_size is None else SwaTreeNode
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self.on_node_evict = on_node_evict
        self._build(page_size, node_class, attention, **options)

    def _build(
        self,
        page_size: int,
        node_class: type[TreeNode],
        make_part: Callable[[Tree[TreeNode]], Part[TreeNode]],
        *,
        clock: Callable[[], float] | None = None,
        event_listener: EventListener | None = None,
        eviction_policy: str | EvictionPolicy = "lru",
    ) -> None:
        """The one constructor of every tree cache: the tree, its part, events (the
        allocator and ``on_node_evict`` are set already)."""
        self.page_size = require_int("page_size", page_size, 1)
        policy = resolve_policy(eviction_policy)
        self.device = torch.device(getattr(self.token_to_kv_pool_allocator, "device", "cpu"))
        self.tree: Tree[TreeNode] = Tree(node_class, page_size, self.device, clock, policy)
        self._part = make_part(self.tree)
        # None unless someone listens: then every new node is hashed (SPEC.md, KV events)
        self._events = PageEvents.on(self.tree, event_listener)
        self._no_indices = empty_indices(self.device)  # a match of nothing

    @property
    def root(self) -> TreeNode:
        return self.tree.root

    @property
    def pool(self) -> KVAllocator | None:
        return self.token_to_kv_pool_allocator

    @property
    def supports_swa(self) -> bool:
        return self.sliding_window_size is not None

    # ---- sizes -------------------------------------------------------------------------

    def evictable_size(self) -> int:
        return self.tree.evictable_size

    def protected_size(self) -> int:
        return self.tree.protected_size

    def total_size(self) -> int:
        """Cached tokens, tombstones included (they still hold full-attention KV)."""
        return self.tree.evictable_size + self.tree.protected_size

    def swa_evictable_size(self) -> int:
        return self._part.evictable_size()

    def swa_protected_size(self) -> int:
        return self._part.protected_size()

    # ---- reset -------------------------------------------------------------------------

    def reset(self) -> None:
        """Drop every node: free every held index (and state) once and report every node
        as evicted.

        Outstanding lock handles become stale; callers quiesce (no running request) first.
        """
        doomed = self.tree.clear()
        for node in doomed:
            self._free(node)
            self._part.dropped(node)
        self._part.reset()
        if self._events is not None:
            self._events.cleared()
        for node in doomed:
            node.value = None
            self._report_evicted(node)

    # ---- match -------------------------------------------------------------------------

    def match_prefix(self, key: RadixKey, *, cow: bool = False) -> MatchResult:
        """The longest cached page-aligned prefix of ``key`` in its namespace.

        Splits the last matched node when the match ends inside it, so ``last_node`` ends
        exactly at ``prefix_len``, and refreshes the recency of every node on the path.
        ``cow`` is checked (a bool) and means nothing here: there is no state to copy
        (``cow_slot`` is ``None``).
        """
        require_bool("cow", cow)  # before any change
        with read_key(key, self.page_size, self.tree.packed) as found:
            walk = self.tree.descend(found)
            found.require_valid_from(walk.end)  # the part the tree holds is valid
        keep, split = self._part.match_end(walk)  # the part decides, before any split
        path = self._split_where_it_ends(walk) if split else walk.path
        if keep < len(path):
            del path[keep:]
        node = path[-1] if path else self.root
        cow_slot = None
        if cow:
            cow_slot, usable = self._part.copy_state(node, self._make_room)
            if not usable:  # no slot to copy the state into: a hit is unusable
                path, node = [], self.root
        for visited in path:
            visited.hit_count += 1  # LFU's key, read when an eviction next queues the leaf
        self.tree.touch(node)
        values = [n.value for n in path if n.value is not None]
        indices = torch.cat(values) if values else self._no_indices
        prefix_len = indices.numel()
        branching = walk.end if self._part.branches and walk.end > prefix_len else None
        return self._match_result(indices, node, prefix_len, branching, cow_slot)

    _match_result: type[MatchResult] = MatchResult  # MambaRadixCache: MambaMatchResult

    def _make_room(self, keep: TreeNode) -> None:
        """Free one state for a copy of ``keep``'s, which must survive (copy-on-write)."""
        self.inc_lock_ref(keep)
        self.evict(0, 1)
        self.dec_lock_ref(keep)

    def _split_where_it_ends(self, walk: Descent[TreeNode]) -> list[TreeNode]:
        """The walked path, its last node cut where the key ends inside it."""
        if walk.partial is not None:
            walk.path.append(self.tree.split(walk.partial, walk.partial_len))
        return walk.path

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
        (``prefix_len``) and the node ending at the aligned key. Without a sliding window
        the cache frees nothing: the caller frees its own duplicates in
        ``[cache_protected_len, prefix_len)``, and the indices of the key's unaligned tail,
        which the tree never takes. ``value`` holds one index per token of ``key``: fewer
        than the aligned key's tokens or more than the key's is a ``UsageError`` (an index
        for no token would leak; SPEC.md, insert). ``value=None`` uses the token ids as
        indices (a test convenience). ``prev_prefix_len`` and ``swa_evicted_seqlen`` only
        matter with a sliding window; ``mamba_value`` (the family's state slot keyword) is
        checked and stays the caller's. ``priority`` raises every node the key covers to at
        least that priority (``eviction_policy="priority"`` evicts lower ones first).
        """
        if not _defaults(prev_prefix_len, swa_evicted_seqlen, kwargs):
            keywords = insert_keywords(
                {
                    "prev_prefix_len": prev_prefix_len,
                    "swa_evicted_seqlen": swa_evicted_seqlen,
                    **kwargs,
                }
            )
        else:  # the common call, nothing to check: the defaults
            keywords = DEFAULT_INSERT_KEYWORDS
        return self._insert(key, value, keywords)

    def _insert(
        self, key: RadixKey, value: torch.Tensor | None, kw: InsertKeywords
    ) -> InsertResult:
        """Every cache's insert, its keywords checked (``insert_keywords``)."""
        prev_prefix_len, swa_evicted_seqlen = kw.prev_prefix_len, kw.swa_evicted_seqlen
        self._part.check_insert(prev_prefix_len, swa_evicted_seqlen)
        # ``stores``: a list's check packs the part the tree stores (KeyRead.settle).
        with read_key(key, self.page_size, self.tree.packed, stores=True) as found:
            indices = aligned_value(found, value, self.device)
            walk = self.tree.descend(found)
            new = found.new_part(walk.end)  # a checked copy: the tree stores it
        self._part.check_new(new, kw.mamba_slot)
        path = self._split_where_it_ends(walk)
        matched = walk.end
        settled = self._part.insert_overlap(path, indices, prev_prefix_len, swa_evicted_seqlen)
        node = cached_end = settled or self.root
        if new:
            node = self._add_suffix(
                node, new, found.extra_key, indices, matched, swa_evicted_seqlen
            )
        exist = self._part.settle_end(node, kw.mamba_slot, node is not cached_end)
        apply_priority(node, cached_end, kw.priority)  # before the touch: it re-queues the leaf
        self.tree.touch(node)
        return InsertResult(prefix_len=matched, last_node=node, mamba_exist=exist)

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
        live_from = self._part.suffix_split(start, end, swa_evicted_seqlen)
        if live_from == end:  # all of it lost its SWA KV: nothing worth caching
            free_indices(self.token_to_kv_pool_allocator, value[start:end])
            return parent
        if live_from > start:
            lost, new = span(new, 0, live_from - start), span(new, live_from - start, end - start)
            parent = self._part.add_tombstone(
                parent, lost, extra_key, value[start:live_from].clone()
            )
        # A private copy: callers pass views of request rows they go on overwriting.
        return self.tree.add_leaf(parent, new, extra_key, value[live_from:end].clone())

    # ---- eviction ----------------------------------------------------------------------

    def evict(self, num_tokens: int, swa_num_tokens: int = 0) -> EvictResult:
        """Delete unlocked leaves in the eviction policy's order (least recently used first
        by default) until ``num_tokens`` are freed, then let the part free its own until
        ``swa_num_tokens`` (SWA tokens, or Mamba state slots) are freed.

        A parent left childless becomes a candidate. Whole nodes go, so the count may
        overshoot by less than one node; it falls short only when nothing is evictable.
        """
        require_int("num_tokens", num_tokens, 0)
        require_int("swa_num_tokens", swa_num_tokens, 0)
        result = EvictResult()
        while result.full_evicted < num_tokens:
            leaf = self.tree.lru_leaf()
            if leaf is None:
                break
            self._delete_with_tombstones(leaf, result)  # a parent left a leaf is queued
        self._part.evict(swa_num_tokens, result, self._delete_with_tombstones)
        return result

    def _delete_with_tombstones(self, leaf: TreeNode, result: EvictResult) -> None:
        """Delete ``leaf`` and the tombstones it leaves as leaves.

        Leaves are never tombstones (SWA or Mamba): a tombstone leaf could never be matched.
        """
        parent = leaf.parent
        assert parent is not None
        self._delete_leaf(leaf, result)
        while self._part.tombstone(parent) and self.tree.is_evictable_leaf(parent):
            above = parent.parent
            assert above is not None
            self._delete_leaf(parent, result)
            parent = above

    def _delete_leaf(self, leaf: TreeNode, result: EvictResult) -> None:
        self.tree.delete_leaf(leaf)
        result.full_evicted += leaf.length
        self._free(leaf)  # KV first, then what the part held: the order SPEC.md promises
        self._part.evicted(leaf, result)
        leaf.value = None
        self._report_evicted(leaf)

    def _free(self, node: TreeNode) -> None:
        if node.value is not None:
            free_indices(self.token_to_kv_pool_allocator, node.value)

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
        node = self.tree.require_live(node)
        self._part.check_lock(node)
        self.tree.lock(node)
        return self._part.lock(node)

    def dec_lock_ref(self, node: Any, swa_boundary_id: int | None = None, **kwargs: Any) -> None:
        """Undo one ``inc_lock_ref(node)``; an unlock that no lock matches is a LockError."""
        reject_unknown(kwargs)
        if node is None or node is self.root:
            require_no_boundary(swa_boundary_id)  # inc_lock_ref returned None for it
            return
        node = self.tree.require_live(node)
        if node.held_locks == 0:
            raise LockError(f"dec_lock_ref on a node that holds no lock: {node!r}")
        self._part.check_unlock(node, swa_boundary_id)
        self._part.unlock(node, swa_boundary_id)
        self.tree.unlock(node)

    # ---- hashing -----------------------------------------------------------------------

    def compute_node_hash(self, node: TreeNode) -> list[str]:
        """The page hashes of ``node``: a pure function of its namespace and root path.

        Ancestors are hashed first, so the order of calls never matters; results are
        cached on the nodes (``hash_values``) and survive splits.
        """
        if node is self.root:
            return []
        self.tree.require_live(node)
        return node_page_hashes(node, self.page_size)

    # ---- debugging ---------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Check every structural invariant of SPEC.md (INV-1..9) and the part's (SWA:
        INV-20..22, Mamba: INV-30..33); O(size of the tree).

        For tests and the state machines: raises InvariantViolation naming the INV id.
        """
        check_tree(self.tree)
        self._part.check()

    def pretty_print(self) -> None:
        """Print the tree, one node a line, and the size counters."""
        for line in self._pretty_lines():
            print(line)

    def _pretty_lines(self) -> Iterator[str]:
        yield " ".join(
            (
                f"{type(self).__name__}(page_size={self.page_size}) total={self.total_size()}",
                f"evictable={self.evictable_size()} protected={self.protected_size()}",
                *self._part.sizes(),
            )
        )
        yield from self.tree.lines()

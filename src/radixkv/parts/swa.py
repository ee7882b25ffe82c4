"""``SlidingWindow``: the part of a RadixCache with sliding-window attention (SPEC.md, SWA).

A RadixCache is one ``Tree`` (tree.py) plus one part (part.py: ``Part``, full attention
only, or this one). The part decides what a match may return, who owns the indices an
insert brings, and what a second eviction phase frees. It changes the tree only through
the tree's public surface (``split``, ``add_leaf``) and follows its changes through the
tree's hooks (``on_added``, ``on_deleted``, ``on_split``); the cache hands it the one
operation it needs from the cache, deleting a leaf with its cascade, as an argument of
``evict``.

Sliding-window attention (SWA), window W. Every cached token has full-attention KV and
sliding-window KV under the same index. A *tombstone* is a node whose SWA KV was freed
(``allocator.free_swa``) while it keeps its full KV; leaves are never tombstones. A match
is usable only if its root path has no tombstone, or ends with at least W live tokens after
the last tombstone. ``allocator.free`` releases an index's full KV and its SWA KV if that
is still held.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import torch

from radixkv.base import EvictResult
from radixkv.errors import LockError, UsageError
from radixkv.invariants import require
from radixkv.keys import KeyData
from radixkv.parts.part import Delete, Part
from radixkv.pools.protocols import KVAllocator, SwaKVAllocator, free_indices
from radixkv.tree import Descent, Tree, TreeNode, path_to_root


class SwaTreeNode(TreeNode):
    """A node of a cache with a sliding window: ``swa_tombstone`` (its SWA KV was freed)
    and ``swa_lock_ref`` (the SWA lock windows covering it) are the part's, kept here
    rather than on every ``TreeNode``."""

    __slots__ = ("swa_lock_ref", "swa_tombstone")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """``TreeNode``'s arguments and defaults (``SwaTreeNode()`` is the seed's default node)."""
        super().__init__(*args, **kwargs)
        self.swa_lock_ref = 0
        self.swa_tombstone = False


@dataclass(frozen=True)
class WindowLock:
    """One ``inc_lock_ref`` in SWA mode: the handle's node and where its window starts.

    The window is the chain of nodes from ``node`` up to the node starting at token
    ``top``; splits never move token positions, so the record stays exact across them.
    """

    node: SwaTreeNode
    top: int


def _segments(walk: Descent[SwaTreeNode]) -> Iterator[tuple[bool, int]]:
    """``(tombstone, tokens)`` of each node a match may keep, the split-off part last."""
    for node in walk.path:
        yield node.swa_tombstone, node.length
    if walk.partial is not None:
        yield walk.partial.swa_tombstone, walk.partial_len


def start_of(node: TreeNode) -> int:
    """The token position where ``node``'s key starts on its root path."""
    return sum(n.length for n in path_to_root(node)) - node.length


class SlidingWindow(Part[SwaTreeNode]):
    """The SWA part: tombstones, window-constrained matches, SWA locks, SWA eviction."""

    node_class = SwaTreeNode

    def __init__(self, tree: Tree[SwaTreeNode], allocator: KVAllocator | None, window: int) -> None:
        if allocator is not None and not callable(getattr(allocator, "free_swa", None)):
            raise UsageError(
                "sliding_window_size needs an allocator with free_swa(indices): freeing "
                "only the SWA KV of a tombstone with free() would free its full KV twice"
            )
        self.tree = tree
        self.allocator = cast("SwaKVAllocator | None", allocator)  # free_swa: checked above
        self.window = window
        tree.on_added.append(self._added)
        tree.on_deleted.append(self._deleted)
        tree.on_split.append(self._split)
        self._evictable = 0
        self._protected = 0
        self._locks: dict[int, WindowLock] = {}
        self._lock_ids = itertools.count(1)

    # ---- match ---------------------------------------------------------------------------

    def match_end(self, walk: Descent[SwaTreeNode]) -> tuple[int, bool]:
        """The longest valid prefix of the walked path. The node the key ends inside is
        split whether or not the match keeps its upper part (sglang's SWA match splits
        as it walks); the upper part is as much a tombstone as the node it comes from."""
        best, live = 0, None  # live: tokens since the last tombstone (None: no tombstone)
        for depth, (tombstone, length) in enumerate(_segments(walk), 1):
            live = 0 if tombstone else (None if live is None else live + length)
            if live is None or live >= self.window:
                best = depth
        return best, walk.partial is not None

    # ---- insert --------------------------------------------------------------------------

    def insert_overlap(
        self, path: list[SwaTreeNode], value: torch.Tensor, prev_prefix_len: int, swa_evicted: int
    ) -> SwaTreeNode | None:
        """Take ownership of the caller's indices over the cached part of the key.

        Below ``prev_prefix_len`` the caller's indices are the tree's own (it matched
        them) and are left alone. Above it, each cached node either keeps its indices and
        the caller's duplicates are freed, or — a tombstone whose SWA KV the caller still
        holds, and that no running request uses — adopts the caller's indices and lives
        again. Returns the last node of the (possibly further split) path.
        """
        start, last = 0, path[-1] if path else None
        for node in path:
            end = start + node.length
            if end > prev_prefix_len:
                last = self._settle(node, start, value, prev_prefix_len, swa_evicted)
            start = end
        return last

    def _settle(
        self, node: SwaTreeNode, start: int, value: torch.Tensor, prev: int, swa_evicted: int
    ) -> SwaTreeNode:
        if start < prev:  # the upper part is the caller's protected prefix: the tree's own
            self.tree.split(node, prev - start)
            start = prev
        if node.swa_tombstone and start < swa_evicted < start + node.length:
            # The caller holds no SWA KV for the upper part: it stays a tombstone.
            upper = self.tree.split(node, swa_evicted - start)
            free_indices(self.allocator, value[start : start + upper.length])
            start = swa_evicted
        incoming = value[start : start + node.length]
        if node.swa_tombstone and swa_evicted <= start and node.lock_ref == 0:
            assert node.value is not None
            free_indices(self.allocator, node.value)  # full KV only: its SWA KV is gone
            node.value = incoming.clone()  # a private copy, as every part the tree keeps
            node.swa_tombstone = False
            self._evictable += node.length
        else:  # the tree keeps its indices (a running request may be using them)
            free_indices(self.allocator, incoming)
        return node

    def suffix_split(self, start: int, end: int, swa_evicted: int) -> int:
        """The caller already freed the SWA KV below ``swa_evicted``: that part is a tombstone."""
        return min(max(start, swa_evicted), end)

    def add_tombstone(
        self, parent: SwaTreeNode, data: KeyData, extra_key: str | None, value: torch.Tensor
    ) -> SwaTreeNode:
        """A new node for tokens whose SWA KV the caller already freed (it gets a child)."""
        node = self.tree.add_leaf(parent, data, extra_key, value)
        node.swa_tombstone = True
        self._evictable -= node.length  # counted live by the on_added hook
        return node

    # ---- locks ---------------------------------------------------------------------------

    def check_insert(self, prev_prefix_len: int, swa_evicted: int) -> None:
        p = self.tree.page_size
        for name, n in (("prev_prefix_len", prev_prefix_len), ("swa_evicted_seqlen", swa_evicted)):
            if n % p:
                raise UsageError(f"{name} must be a multiple of page_size {p}, got {n}")

    def check_lock(self, node: SwaTreeNode) -> None:
        if node.swa_tombstone:
            raise UsageError(
                f"node {node.id} is a tombstone (its sliding-window KV was freed): "
                "lock the last_node of a match instead"
            )

    def lock(self, node: SwaTreeNode) -> int:
        """SWA-lock the live nodes from ``node`` up until they hold W tokens; returns the id."""
        covered, top = 0, start_of(node) + node.length
        for n in path_to_root(node):
            if n.swa_tombstone or covered >= self.window:
                break
            if n.swa_lock_ref == 0:
                self._evictable -= n.length
                self._protected += n.length
            n.swa_lock_ref += 1
            covered += n.length
            top -= n.length
        lock_id = next(self._lock_ids)
        self._locks[lock_id] = WindowLock(node, top)
        return lock_id

    def check_unlock(self, node: SwaTreeNode, boundary: int | None) -> None:
        self._record(node, boundary)

    def unlock(self, node: SwaTreeNode, boundary: int | None) -> None:
        lock_id, record = self._record(node, boundary)
        del self._locks[lock_id]
        for n in self._window_nodes(record):
            n.swa_lock_ref -= 1
            if n.swa_lock_ref == 0:
                self._protected -= n.length
                self._evictable += n.length

    def _record(self, node: SwaTreeNode, boundary: int | None) -> tuple[int, WindowLock]:
        """The lock to undo: the one ``boundary`` (a swa_boundary_id) names, or the newest
        on ``node``."""
        if boundary is None:
            mine = [i for i, r in self._locks.items() if r.node is node]
            if not mine:
                raise LockError(f"dec_lock_ref on a node that holds no lock: {node!r}")
            boundary = max(mine)
        record = self._locks.get(boundary)
        if record is None or record.node is not node:
            raise LockError(f"swa_boundary_id {boundary!r} is not a lock held on node {node.id}")
        return boundary, record

    def _window_nodes(self, record: WindowLock) -> list[SwaTreeNode]:
        """The nodes a lock's window covers, bottom up (splits may have added some)."""
        nodes, start = [], start_of(record.node) + len(record.node)
        for n in path_to_root(record.node):
            if start <= record.top:
                break
            nodes.append(n)
            start -= n.length
        return nodes

    # ---- sizes and deletion ----------------------------------------------------------------

    def _added(self, node: SwaTreeNode) -> None:
        self._evictable += node.length  # a new leaf is live and unlocked

    def _deleted(self, node: SwaTreeNode) -> None:
        self._evictable -= self.swa_tokens(node)  # a deleted node holds no SWA lock

    def _split(self, upper: SwaTreeNode, lower: SwaTreeNode) -> None:
        upper.swa_lock_ref = lower.swa_lock_ref  # a window over the lower part covers it too
        upper.swa_tombstone = lower.swa_tombstone

    def swa_tokens(self, node: SwaTreeNode) -> int:
        """The SWA tokens deleting ``node`` frees."""
        return 0 if node.swa_tombstone else node.length

    def tombstone(self, node: SwaTreeNode) -> bool:
        return node.swa_tombstone

    def evicted(self, node: SwaTreeNode, result: EvictResult) -> None:
        result.swa_evicted += self.swa_tokens(node)

    def evictable_size(self) -> int:
        return self._evictable

    def protected_size(self) -> int:
        return self._protected

    def reset(self) -> None:
        self._evictable = self._protected = 0
        self._locks.clear()

    def sizes(self) -> Iterator[str]:
        yield f"swa_evictable={self._evictable}"
        yield f"swa_protected={self._protected}"

    # ---- eviction ------------------------------------------------------------------------

    def evict(self, swa_num_tokens: int, result: EvictResult, delete: Delete[SwaTreeNode]) -> None:
        """Phase 2: free SWA KV, least recently used first, until ``swa_num_tokens`` are freed.

        An SWA-unlocked internal node becomes a tombstone; an unlocked leaf goes whole
        (leaves are never tombstones).
        """
        if result.swa_evicted >= swa_num_tokens:
            return
        heap = [(n.recency(), n) for n in self.tree.nodes() if self._can_drop_swa(n)]
        heapq.heapify(heap)
        while result.swa_evicted < swa_num_tokens and heap:
            _, node = heapq.heappop(heap)
            if node.evicted or not self._can_drop_swa(node):
                continue
            if node.children:
                self._tombstone(node, result)
            else:
                delete(node, result)

    def _can_drop_swa(self, node: SwaTreeNode) -> bool:
        # A locked leaf is always SWA-locked too: its window starts with it.
        return not node.swa_tombstone and node.swa_lock_ref == 0

    def _tombstone(self, node: SwaTreeNode, result: EvictResult) -> None:
        if self.allocator is not None:
            assert node.value is not None  # a live node: only an evicted one has none
            self.allocator.free_swa(node.value)
        node.swa_tombstone = True
        self._evictable -= node.length
        result.swa_evicted += node.length

    # ---- invariants ----------------------------------------------------------------------

    def check(self) -> None:
        evictable = protected = 0
        windows: dict[int, int] = {}
        for record in self._locks.values():
            require("INV-21", not record.node.evicted, "an SWA lock outlived its node")
            for n in self._window_nodes(record):
                windows[id(n)] = windows.get(id(n), 0) + 1
        for node in self.tree.nodes():
            size = node.length
            require("INV-20", not (node.swa_tombstone and not node.children), "tombstone leaf")
            require("INV-21", node.swa_lock_ref == windows.get(id(node), 0), "swa_lock_ref")
            require("INV-21", node.swa_lock_ref <= node.lock_ref, "swa lock without full lock")
            if node.swa_tombstone:
                require("INV-21", node.swa_lock_ref == 0, f"node {node.id} locked tombstone")
            elif node.swa_lock_ref:
                protected += size
            else:
                evictable += size
        require("INV-22", self._evictable == evictable, "swa_evictable_size drifted")
        require("INV-22", self._protected == protected, "swa_protected_size drifted")

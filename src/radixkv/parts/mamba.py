"""``MambaStates``: the part of a cache for hybrid attention + SSM models (SPEC.md, Mamba).

Each node keeps the KV indices of its tokens (``value``, the tree's) and, optionally, one
state slot holding the recurrent state after its last token (``mamba_value``, on the
part's node class ``MambaTreeNode``). A state cannot be cut, so a split gives the new upper
node none, and a match never splits: it ends at the deepest matched node that has a state
(the root's initial state counts) and reports how far the KV alone would have matched
(``mamba_branching_seqlen``). A copy of that state for the request to write into
(copy-on-write) is asked for, never implied (``cow=True``).

The part owns the slot map, the slot sizes (slots, not tokens) and ``mamba_lru``, the nodes
holding a slot from the most to the least recently used, kept in step through the tree's
``on_touched`` hook; phase 2 of an eviction takes its victims from there. ``full_lru``, the
seed's list of every live node, is a view of the tree's own recency (``RecencyOrder``):
the tree's evictable-leaf heap is the one structure phase 1 evicts from, as in every cache.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import torch

from radixkv.base import EvictResult
from radixkv.errors import LockError, UsageError
from radixkv.invariants import require
from radixkv.keys import KeyData, token_count
from radixkv.parts.lru_list import LRUList
from radixkv.parts.mamba_node import MambaTreeNode
from radixkv.parts.part import Delete, MakeRoom, Part
from radixkv.pools.protocols import MambaPool
from radixkv.tree import Descent, Tree, TreeNode, depth_first


class RecencyOrder:
    """Every live node below the root, most recently used first: ``full_lru``.

    Recency is (last touch, depth in tokens): a touch stamps a whole root path with one
    tick and its deepest node is the most recent, so along a path a child comes before its
    parent, and a split's upper part right behind its lower part. A view of the tree's
    stamps (O(n log n) to iterate), not a second structure kept in step.
    """

    def __init__(self, tree: Tree[MambaTreeNode]) -> None:
        self._tree = tree

    def _ranked(self) -> list[tuple[float, int, MambaTreeNode]]:
        depth: dict[int, int] = {id(self._tree.root): 0}
        ranked = []
        for node, _ in depth_first(self._tree.root):
            assert node.parent is not None
            depth[id(node)] = below = depth[id(node.parent)] + node.length
            ranked.append((node.last_access_time, below, node))
        ranked.sort(key=lambda r: r[:2], reverse=True)
        return ranked

    def __iter__(self) -> Iterator[MambaTreeNode]:
        return (node for _, _, node in self._ranked())

    def __len__(self) -> int:
        return sum(1 for _ in self._tree.nodes())

    def __contains__(self, node: object) -> bool:
        return any(n is node for n in self._tree.nodes())

    def keys(self) -> list[tuple[float, int]]:
        """``(last touch, depth)`` of each member, in the order of iteration."""
        return [(t, d) for t, d, _ in self._ranked()]


class MambaStates(Part[MambaTreeNode]):
    """The Mamba part: state slots, the mamba LRU list, truncating matches, phase 2."""

    node_class = MambaTreeNode
    branches = True

    def __init__(self, tree: Tree[MambaTreeNode], pool: MambaPool | None) -> None:
        self.tree = tree
        self.pool = pool
        tree.on_split.append(self._split)
        tree.on_touched.append(self._touched)
        self.full_lru = RecencyOrder(tree)
        self._slot_ids: dict[int, torch.Tensor] = {}  # each slot's ``mamba_value``
        self.reset()

    def reset(self) -> None:
        self.tree.root.mamba_value = torch.empty(0, dtype=torch.int64)  # initial state
        self.mamba_lru = LRUList(mamba=True)
        self.slots: dict[int, MambaTreeNode] = {}  # every state slot the tree owns
        self._evictable = self._protected = 0

    # ---- match ---------------------------------------------------------------------------

    def match_end(self, walk: Descent[MambaTreeNode]) -> tuple[int, bool]:
        """The deepest matched node holding a state; never splits (a tombstone's KV is
        useless without the state after it)."""
        path = walk.path
        keep = len(path)
        while keep and path[keep - 1].mamba_value is None:
            keep -= 1
        return keep, False

    def copy_state(
        self, node: MambaTreeNode, make_room: MakeRoom[MambaTreeNode]
    ) -> tuple[int | None, bool]:
        """A fresh slot holding a copy of ``node``'s state, so the request never writes into
        a slot the tree owns. With the pool full, one unlocked state elsewhere makes room;
        with no slot to copy into, the match is a miss."""
        source = node.slot
        if source is None or self.pool is None:
            return None, True
        slot = self.pool.alloc_track_slot()
        if slot is None:
            make_room(node)  # the state to copy survives: the cache locks it meanwhile
            slot = self.pool.alloc_track_slot()
        if slot is not None:
            self.pool.copy_states(source, slot)
        return slot, slot is not None

    # ---- insert --------------------------------------------------------------------------

    def check_new(self, new: KeyData, slot: int | None) -> None:
        if slot is not None and slot in self.slots:
            raise UsageError(f"mamba_value {slot} is a state slot the cache already owns")
        if slot is None and new:
            raise UsageError(
                f"inserting {token_count(new)} new tokens needs a mamba_value: "
                "a leaf without state could never be matched"
            )

    def settle_end(self, node: MambaTreeNode, slot: int | None, added: bool) -> bool:
        """The node ending the key adopts the slot unless it already has a state: then
        ``mamba_exist`` and the slot stays the caller's to free."""
        end = node
        if not added and end.mamba_value is not None:
            return True
        if slot is not None:
            self._adopt(end, slot)
        return False

    def _adopt(self, node: MambaTreeNode, slot: int) -> None:
        node.mamba_value = self._slot_tensor(slot)
        self.slots[slot] = node
        self.mamba_lru.insert_mru(node)
        self._evictable += 1  # a node without state holds no mamba lock

    def _slot_tensor(self, slot: int) -> torch.Tensor:
        """``tensor([slot])``, made once per slot and handed to each node that holds it in
        turn (its content never changes): a new small tensor costs an allocation or two,
        which a busy serving process pays at several µs each."""
        named = self._slot_ids.get(slot)
        if named is None:
            named = self._slot_ids[slot] = torch.tensor([slot], dtype=torch.int64)
        return named

    # ---- the tree's hooks ------------------------------------------------------------------

    def _split(self, upper: MambaTreeNode, lower: MambaTreeNode) -> None:
        """The upper part of a split gets no state: the slot holds the state after the
        whole key, which is not the state after the upper part's tokens."""
        upper.mamba_value = None
        upper.mamba_lock_ref = 0  # mamba locks stay with the state, on the lower part

    def _touched(self, node: MambaTreeNode) -> None:
        """The path root..node was stamped: in the mamba list too, node first."""
        self.mamba_lru.touch_node_and_parents_mru(node, self.tree.root)

    # ---- locks ---------------------------------------------------------------------------

    def check_lock(self, node: MambaTreeNode) -> None:
        """A handle protects the state its request resumes from: a tombstone has none."""
        if node.mamba_value is None:
            raise LockError(f"inc_lock_ref on a mamba tombstone (no state to protect): {node!r}")

    def lock(self, node: MambaTreeNode) -> int | None:
        """The handle (``held_locks``, alias ``mamba_lock_ref``) protects this node's state
        only; the tree's ``lock_ref`` protects the KV of the whole path."""
        if node.held_locks == 1:
            self._evictable -= 1
            self._protected += 1
        return None

    def unlock(self, node: MambaTreeNode, boundary: int | None) -> None:
        if node.held_locks == 1:
            self._protected -= 1
            self._evictable += 1

    # ---- eviction ------------------------------------------------------------------------

    def tombstone(self, node: MambaTreeNode) -> bool:
        return node.mamba_value is None

    def evicted(self, node: MambaTreeNode, result: EvictResult) -> None:
        """A deleted node's state goes after its KV: the order SPEC.md promises."""
        if node.mamba_value is not None:
            self._drop(node, result)

    def evict(self, num_tokens: int, result: EvictResult, delete: Delete[MambaTreeNode]) -> None:
        """Phase 2: free states until ``num_tokens`` state *slots* were freed in all (the
        seed's ``swa_num_tokens``), least recently used first whatever the policy: an
        inner node loses its state (a tombstone), a leaf is deleted as in phase 1."""
        while result.mamba_evicted < num_tokens:
            node = self.mamba_lru.get_lru_unlocked()
            if node is None:
                break
            if node.children:
                self._drop(node, result)
            else:
                delete(node, result)

    def _drop(self, node: MambaTreeNode, result: EvictResult) -> None:
        slot = node.slot
        assert slot is not None and node.mamba_lock_ref == 0
        self._free_slot(slot)
        node.mamba_value = None
        del self.slots[slot]
        self.mamba_lru.remove(node)
        self._evictable -= 1
        result.mamba_evicted += 1

    def dropped(self, node: MambaTreeNode) -> None:
        """``reset``: give ``node``'s slot back to the pool; the node holds no state now."""
        self._free_slot(node.slot)
        node.mamba_value = None

    def _free_slot(self, slot: int | None) -> None:
        if self.pool is not None and slot is not None:
            self.pool.free_track_slot(slot)

    # ---- sizes -----------------------------------------------------------------------------

    def mamba_evictable_size(self) -> int:
        """State slots held by nodes without a lock handle of their own."""
        return self._evictable

    def mamba_protected_size(self) -> int:
        """State slots held by nodes with a lock handle."""
        return self._protected

    def sizes(self) -> Iterator[str]:
        yield f"mamba_evictable={self._evictable}"
        yield f"mamba_protected={self._protected}"

    # ---- invariants (INV-30..33) -------------------------------------------------------------

    def check(self) -> None:
        root_state = self.tree.root.mamba_value
        require("INV-31", root_state is not None and root_state.numel() == 0, "root state")
        nodes = list(self.tree.nodes())
        for node in nodes:
            _check_node(node)
        self._check_slots(nodes)
        keys = self.full_lru.keys()
        require("INV-32", len(keys) == len(nodes), "full list length is wrong")
        _check_order(keys, "full")
        stateful = {id(n) for n in nodes if n.mamba_value is not None}
        members = list(self.mamba_lru)
        lru_len = len(self.mamba_lru)
        require("INV-32", lru_len == len(members), f"mamba list length {lru_len} is wrong")
        require("INV-32", {id(n) for n in members} == stateful, "mamba list members differ")
        _check_order([(n.last_access_time, _depth(n)) for n in members], "mamba")

    def _check_slots(self, nodes: list[MambaTreeNode]) -> None:
        held = [n.slot for n in nodes if n.slot is not None]
        require("INV-33", len(set(held)) == len(held), "a state slot is held by two nodes")
        require("INV-33", set(held) == set(self.slots), "the slot map differs from the nodes")
        locked = sum(1 for n in nodes if n.slot is not None and n.mamba_lock_ref > 0)
        sizes = (self._evictable, self._protected)
        require(
            "INV-33",
            sizes == (len(held) - locked, locked),
            f"mamba sizes {sizes[0]}/{sizes[1]} != {len(held) - locked}/{locked} slots",
        )


def _check_node(node: MambaTreeNode) -> None:
    state = node.mamba_value
    if state is not None:
        require("INV-31", state.numel() == 1 and not state.is_cuda, f"node {node.id} state")
    require("INV-31", bool(node.children) or state is not None, f"leaf {node.id} has no state")
    # mamba_lock_ref is held_locks (the handles at this node), which INV-5 counts.
    require(
        "INV-30",
        node.full_lock_ref >= node.mamba_lock_ref,
        f"node {node.id} full_lock_ref {node.full_lock_ref} < {node.mamba_lock_ref}",
    )
    require(
        "INV-30",
        node.mamba_lock_ref == 0 or state is not None,
        f"node {node.id} is mamba-locked without a state",
    )


def _check_order(keys: list[tuple[float, int]], name: str) -> None:
    """Ordered by recency, MRU first: (last touch, depth in tokens) strictly decreasing.

    A touch stamps a whole root path with one time and puts its deepest node first, so
    along that path a child is more recent than its parent. Nodes off the path keep their
    older time, and their place behind it.
    """
    for at, (newer, older) in enumerate(itertools.pairwise(keys), 1):
        require("INV-32", newer > older, f"{name} list: member {at} is out of recency order")


def _depth(node: TreeNode) -> int:
    depth = 0
    current: TreeNode | None = node
    while current is not None:
        depth += len(current)
        current = current.parent
    return depth

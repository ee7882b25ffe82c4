"""``check_mamba``: the Mamba invariants of SPEC.md (INV-30..33) on a live MambaRadixCache.

The core tree invariants (INV-1..9) are ``check_tree``'s; this adds the state slots, the
two lock counts and the two LRU lists. An expensive no-op for tests and state machines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from radixkv.invariants import require
from radixkv.lru_list import LRUList
from radixkv.mamba_node import MambaTreeNode
from radixkv.tree import TreeNode

if TYPE_CHECKING:
    from radixkv.mamba_radix_cache import MambaRadixCache


def check_mamba(cache: MambaRadixCache) -> None:
    root = cache.root
    root_state = root.mamba_value
    require("INV-31", root_state is not None and root_state.numel() == 0, "root state")
    nodes = list(cache.nodes())
    for node in nodes:
        _check_node(node)
    _check_slots(cache, nodes)
    _check_list(cache.full_lru, set(map(id, nodes)), "full")
    stateful = {id(n) for n in nodes if n.mamba_value is not None}
    _check_list(cache.mamba_lru, stateful, "mamba")


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


def _check_slots(cache: MambaRadixCache, nodes: list[MambaTreeNode]) -> None:
    held = [n.slot for n in nodes if n.slot is not None]
    require("INV-33", len(set(held)) == len(held), "a state slot is held by two nodes")
    require("INV-33", set(held) == cache.owned_slots(), "the slot map differs from the nodes")
    locked = sum(1 for n in nodes if n.slot is not None and n.mamba_lock_ref > 0)
    sizes = (cache.mamba_evictable_size(), cache.mamba_protected_size())
    require(
        "INV-33",
        sizes == (len(held) - locked, locked),
        f"mamba sizes {cache.mamba_evictable_size()}/{cache.mamba_protected_size()} "
        f"!= {len(held) - locked}/{locked} slots",
    )


def _check_list(lru: LRUList, expected: set[int], name: str) -> None:
    """Members are exactly ``expected`` (by identity), ordered by recency, MRU first.

    Recency is (last touch, depth in tokens): a touch stamps a whole root path with one
    time and puts its deepest node first, so along that path a child is more recent than
    its parent. Nodes off the path keep their older time, and their place behind it.
    """
    members = list(lru)
    require("INV-32", len(lru) == len(members), f"{name} list length {len(lru)} is wrong")
    require("INV-32", {id(n) for n in members} == expected, f"{name} list members differ")
    keys = [(node.last_access_time, _depth(node)) for node in members]
    for newer, older, node in zip(keys, keys[1:], members[1:], strict=False):
        require("INV-32", newer > older, f"{name} list: node {node.id} is out of recency order")


def _depth(node: MambaTreeNode) -> int:
    depth = 0
    current: TreeNode | None = node
    while current is not None:
        depth += len(current)
        current = current.parent
    return depth

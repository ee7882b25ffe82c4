"""``check_tree``: every structural invariant of SPEC.md, checked on a live ``Tree``.

An expensive no-op for tests and state machines. Each failure names its ``INV-n`` id, the
same id the spec and the harness use. Every cache built on the core tree (RadixCache in
both modes, MambaRadixCache) runs it, then the checks of its own parts.
"""

from __future__ import annotations

from typing import Any

import torch

from radixkv.errors import InvariantViolation
from radixkv.hashing import chain_page_hashes, namespace_seed
from radixkv.keys import width
from radixkv.tree import Tree, TreeNode, edge


def require(inv_id: str, condition: bool, message: str) -> None:
    if not condition:
        raise InvariantViolation(inv_id, message)


def check_tree(tree: Tree[Any], *, trie: bool = False) -> None:
    """INV-1..9 on ``tree``, and its evictable-leaf set and heap (INV-6). A ``trie``'s
    nodes (RadixTrie's) hold blocks, not KV indices, and count the sequences using them,
    not held locks: INV-2's value shape, INV-5 and INV-7 are then the trie's to check."""
    _check_shape_and_sizes(tree, trie)
    leaves = {n for n in tree.nodes() if tree.is_evictable_leaf(n)}
    require("INV-6", tree.leaves == leaves, "the evictable-leaf set is stale")
    queued = tree.queued()
    fresh = all((tree.policy.key(n), id(n)) in queued for n in leaves)
    require("INV-6", fresh, "an evictable leaf is missing from the eviction heap")


def _check_shape_and_sizes(tree: Tree[Any], trie: bool) -> None:
    root = tree.root
    require("INV-1", root.parent is None and len(root) == 0, "root has a parent or a key")
    form = type(root.data) is tuple  # one form per tree: packed (bytes, Ids32) or tuples
    require("INV-1", root.value is not None and root.lock_ref >= 1, "root evicted or unlocked")
    evictable = protected = 0
    values: list[torch.Tensor] = []
    ids = {root.id}
    stack = [(child, root) for child in root.children.values()]
    while stack:
        node, parent = stack.pop()
        _check_node(tree.page_size, node, parent, trie)
        require(
            "INV-2", (type(node.data) is tuple) == form, f"node {node.id} key data in another form"
        )
        require("INV-1", node.id not in ids, f"node id {node.id} used twice")
        ids.add(node.id)
        if not trie:
            assert node.value is not None
            values.append(node.value)
        if node.lock_ref == 0:
            evictable += len(node)
        else:
            protected += len(node)
        stack.extend((child, node) for child in node.children.values())
    require(
        "INV-6",
        tree.evictable_size == evictable,
        f"evictable {tree.evictable_size} != {evictable}",
    )
    require(
        "INV-6",
        tree.protected_size == protected,
        f"protected {tree.protected_size} != {protected}",
    )
    if values:
        every = torch.cat(values)
        require("INV-7", torch.unique(every).numel() == every.numel(), "an index is in two nodes")


def _check_node(p: int, node: TreeNode, parent: TreeNode, trie: bool) -> None:
    n = len(node)
    require("INV-2", n > 0 and n % p == 0, f"node {node.id} key length {n} (page_size {p})")
    stored = len(node.data)
    require("INV-2", stored == n * width(node.data), f"node {node.id} stores {stored} for {n}")
    value = node.value
    require("INV-3", value is not None, f"evicted node {node.id} is reachable")
    assert value is not None
    require(
        "INV-2",
        trie or (value.dim() == 1 and value.dtype == torch.int64 and value.numel() == n),
        f"node {node.id} value {value.dtype}{tuple(value.shape)} for {n} tokens",
    )
    key = edge(node, p)
    require("INV-3", node.parent is parent, f"node {node.id} parent pointer")
    require("INV-3", parent.children.get(key) is node, f"node {node.id} child key {key!r}")
    if parent.parent is not None:
        require("INV-4", node.extra_key == parent.extra_key, f"node {node.id} namespace")
    if not trie:
        _check_lock_counts(node)
    require(
        "INV-8",
        parent.last_access_time >= node.last_access_time,
        f"node {node.id} is more recent than its parent",
    )
    _check_hashes(node, parent, p)


def _check_lock_counts(node: TreeNode) -> None:
    below = sum(child.lock_ref for child in node.children.values())
    require("INV-5", node.held_locks >= 0, f"node {node.id} held_locks {node.held_locks}")
    require(
        "INV-5",
        node.lock_ref == node.held_locks + below,
        f"node {node.id} lock_ref {node.lock_ref} != held {node.held_locks} + children {below}",
    )


def _check_hashes(node: TreeNode, parent: TreeNode, page_size: int) -> None:
    if node.hash_values is None:
        return
    if parent.parent is None:
        prior = namespace_seed(node.extra_key)
    else:
        require("INV-9", parent.hash_values is not None, f"node {node.id} hashed before parent")
        assert parent.hash_values is not None
        prior = parent.hash_values[-1]
    expected = chain_page_hashes(node.tokens, page_size, prior)
    require("INV-9", node.hash_values == expected, f"node {node.id} page hashes are stale")

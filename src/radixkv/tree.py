"""TreeNode and the radix-tree mechanics every cache shares: child keys, walking, splitting.

Plain typed Python over key data (keys.py: packed bytes, or token tuples); KV indices ride
along as tensors that are only sliced here, never read, so no operation synchronises with
the device.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

import torch

from radixkv.base import RadixKey
from radixkv.keys import (
    KeyData,
    KeyRead,
    Tokens,
    decode,
    encode,
    page_at,
    span,
    token_count,
)

ChildKey = tuple[str | None, KeyData]


class TreeNode:
    """A node of the radix tree: a run of tokens and the KV index of each.

    ``data`` holds the tokens in the tree's key form (keys.py) and ``length`` counts them;
    ``key`` rebuilds the seed's RadixKey from them. ``value`` is ``None`` once the node
    was evicted. ``lock_ref`` counts the lock handles
    held at this node or below it; ``held_locks`` counts those held at exactly this node,
    which is what lets the cache reject an unlock that no lock matches.
    """

    __slots__ = (
        "children",
        "data",
        "extra_key",
        "hash_values",
        "held_locks",
        "hit_count",
        "id",
        "last_access_time",
        "length",
        "lock_ref",
        "parent",
        "swa_boundary_id",
        "swa_lock_ref",
        "swa_tombstone",
        "value",
    )

    def __init__(
        self,
        node_id: int = 1,
        key: RadixKey | KeyData | None = None,
        value: torch.Tensor | None = None,
        parent: TreeNode | None = None,
        last_access_time: float = 0.0,
        extra_key: str | None = None,
    ) -> None:
        """``key`` is a RadixKey, or key data with its namespace in ``extra_key``.

        Every argument has the seed's default, so ``TreeNode()`` is a detached node with an
        empty key, no value (``evicted``) and id 1.
        """
        self.children: dict[ChildKey, TreeNode] = {}
        self.parent = parent
        if key is None:
            key = b""
        if isinstance(key, RadixKey):
            self.key = key
        else:
            self.data = key
            self.length = token_count(key)
            self.extra_key = extra_key
        self.value = value
        self.lock_ref = 0
        self.held_locks = 0
        self.swa_lock_ref = 0
        self.swa_tombstone = False
        self.swa_boundary_id: int | None = None
        self.last_access_time = last_access_time
        self.hit_count = 0
        self.hash_values: list[str] | None = None
        self.id = node_id

    @property
    def evicted(self) -> bool:
        return self.value is None

    @property
    def key(self) -> RadixKey:
        return RadixKey(self.tokens, self.extra_key)

    @key.setter
    def key(self, key: RadixKey) -> None:
        self.data = encode(key.token_ids, packed=True)
        self.length = token_count(self.data)
        self.extra_key = key.extra_key

    @property
    def tokens(self) -> Tokens:
        return decode(self.data)

    def __len__(self) -> int:
        return self.length

    def recency(self) -> tuple[float, int]:
        """The eviction order: least recently used first, older node id on a tie."""
        return (self.last_access_time, self.id)

    def __lt__(self, other: TreeNode) -> bool:
        return self.recency() < other.recency()

    def __repr__(self) -> str:
        shown = list(self.tokens[:8])
        more = "..." if len(self) > 8 else ""
        return (
            f"TreeNode(id={self.id}, key={shown}{more}, extra_key={self.extra_key!r}, "
            f"lock_ref={self.lock_ref}, t={self.last_access_time})"
        )


def edge(node: TreeNode, page_size: int) -> ChildKey:
    """The dict key under which ``node``'s parent holds it: its namespace and first page.

    ``descend`` builds the same key from the key being looked up.
    """
    return (node.extra_key, page_at(node.data, 0, page_size))


def path_to_root(node: TreeNode) -> Iterator[TreeNode]:
    """``node`` and its ancestors, excluding the root (the only node without a parent)."""
    while node.parent is not None:
        yield node
        node = node.parent


def iter_subtree(root: TreeNode) -> Iterator[TreeNode]:
    """Every node below ``root`` (excluded), parents before children."""
    stack = list(root.children.values())
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children.values())


N = TypeVar("N", bound=TreeNode)


def split_node(node: N, split_len: int, new_id: int, page_size: int) -> N:
    """Cut ``node`` after ``split_len`` tokens and return the new upper part.

    The original object stays the lower part and keeps its id, so a lock handle or an
    ``on_node_evict`` mapping that names it still ends at the same token position. Lock
    counts are copied up (every handle below the lower part is below the upper part too).
    The upper part has the node's own class, built with TreeNode's constructor arguments,
    so subclasses (MambaTreeNode) split here too and add their own fields afterwards.
    """
    assert node.parent is not None and node.value is not None
    assert 0 < split_len < node.length and split_len % page_size == 0
    data = node.data
    upper = type(node)(
        new_id,
        span(data, 0, split_len),
        node.value[:split_len],
        node.parent,
        node.last_access_time,
        node.extra_key,
    )
    upper.lock_ref = node.lock_ref
    upper.swa_lock_ref = node.swa_lock_ref  # an SWA window over the lower part covers it too
    upper.swa_tombstone = node.swa_tombstone
    upper.hit_count = node.hit_count
    if node.hash_values is not None:
        pages = split_len // page_size
        upper.hash_values = node.hash_values[:pages]
        node.hash_values = node.hash_values[pages:]
    node.parent.children[edge(upper, page_size)] = upper
    node.data = span(data, split_len, node.length)
    node.length -= split_len
    node.value = node.value[split_len:]
    node.parent = upper
    upper.children[edge(node, page_size)] = node
    return upper


class Descent:
    """Where a key leads in a tree, without changing it (see ``descend``)."""

    __slots__ = ("matched", "partial", "partial_len", "path")

    def __init__(self) -> None:
        self.path: list[TreeNode] = []  # the nodes matched whole, root excluded
        self.matched = 0  # tokens covered by ``path``
        self.partial: TreeNode | None = None  # the next node, if the key ends inside it
        self.partial_len = 0  # page-aligned tokens of ``partial`` the key shares

    @property
    def end(self) -> int:
        """Tokens of the key the tree holds: the whole nodes, then part of ``partial``."""
        return self.matched + self.partial_len


def holds_packed(root: TreeNode) -> bool:
    """Whether the tree under ``root`` holds packed key data (keys.py), not token tuples."""
    return type(root.data) is bytes


def descend(root: TreeNode, key: KeyRead, page_size: int) -> Descent:
    """Follow ``key`` down from ``root`` as far as whole pages match; never splits.

    The first key holding a bigram (tuple) token turns the tree's packed keys into tuples
    first (one form per tree, keys.py).
    """
    if not key.packed and holds_packed(root):
        recode_tree(root, page_size)
    out = Descent()
    node, path, extra_key = root, out.path, key.extra_key
    # Positions are items of the key data (bytes when packed): no conversions in the loop.
    w = key.width
    page, end = page_size * w, len(key.data)
    at = 0
    while at < end:
        child = node.children.get((extra_key, key.page(at, page)))
        if child is None:
            break
        same = key.shared(child.data, at) // page * page
        if same < child.length * w:
            out.partial, out.partial_len = child, same // w
            break
        path.append(child)
        at += same
        node = child
    out.matched = at // w
    return out


def recode_tree(root: TreeNode, page_size: int) -> None:
    """Turn every node's packed key data into token tuples (the first bigram key's cost)."""
    nodes = [root, *iter_subtree(root)]
    for node in nodes:
        node.data = decode(node.data)
    for node in nodes:
        node.children = {edge(c, page_size): c for c in node.children.values()}


def tree_lines(root: TreeNode) -> Iterator[str]:
    """One line per node below ``root``, indented by depth, children in insertion order."""
    stack = [(child, 1) for child in reversed(list(root.children.values()))]
    while stack:
        node, depth = stack.pop()
        yield "  " * depth + repr(node)
        stack.extend((c, depth + 1) for c in reversed(list(node.children.values())))

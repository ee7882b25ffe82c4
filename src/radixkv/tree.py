"""The radix tree the caches are built on: TreeNode, Tree.

RadixCache (both modes), MambaRadixCache and the RadixTrie facade (MAX's API) each hold one.

``Tree`` owns node ids, token sizes, lock counts, the evictable leaves with their recency
heap, and every change of shape (split, add a leaf, delete a leaf), announced through its
public hooks; the module functions below (``edge``, ``descend``, ``split_node``, ...) are
the mechanics it uses.

Plain typed Python over key data (key_data.py: packed bytes, or token tuples); KV indices ride
along as tensors that are only sliced here, never read, so no operation synchronises with
the device.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar, cast

import torch

from radixkv.base import RadixKey
from radixkv.errors import StaleNodeError, TokenTypeError
from radixkv.eviction import LRU, EvictionPolicy, SortKey
from radixkv.keys import (
    KeyData,
    KeyRead,
    Tokens,
    decode,
    encode,
    limit_of,
    page_at,
    span,
    token_count,
)

ChildKey = tuple[str | None, KeyData]


class TreeNode:
    """A node of the radix tree: a run of tokens and the KV index of each.

    ``data`` holds the tokens in the tree's key form (key_data.py) and ``length`` counts them;
    ``key`` rebuilds the seed's RadixKey from them, or is ``None`` for a node built without
    a key (``TreeNode()``, the seed's default: it holds no tokens). ``value`` is ``None``
    once the node was evicted. ``lock_ref`` counts the lock handles
    held at this node or below it; ``held_locks`` counts those held at exactly this node,
    which is what lets the cache reject an unlock that no lock matches. What the eviction
    policies order by (eviction.py): ``last_access_time``, ``hit_count``, ``birth`` (the
    id the node's tokens got when an insert added them; a split keeps it on both halves)
    and ``priority`` (the highest ``priority=`` of the inserts whose key covered it).
    """

    __slots__ = (
        "birth",
        "children",
        "data",
        "extra_key",
        "hash_values",
        "held_locks",
        "hit_count",
        "id",
        "keyless",
        "last_access_time",
        "length",
        "lock_ref",
        "parent",
        "priority",
        "value",
    )

    # The seed's sliding-window fields, read-only here: a part keeps what it adds to a node
    # on its own node class (parts/swa.py's SwaTreeNode), so a plain node carries none of it.
    swa_lock_ref: int = 0
    swa_tombstone: bool = False
    swa_boundary_id: int | None = None

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

        Every argument has the seed's default, so ``TreeNode()`` is a detached node with
        ``key`` None (no tokens), no value (``evicted``) and id 1. A tree's nodes are
        always built with key data (the root's is empty).
        """
        self.children: dict[ChildKey, TreeNode] = {}
        self.parent = parent
        if isinstance(key, RadixKey):
            self.key = key
        else:
            self.keyless = key is None
            self.data = b"" if key is None else key
            self.length = token_count(self.data)
            self.extra_key = extra_key
        self.value = value
        self.lock_ref = 0
        self.held_locks = 0
        self.last_access_time = last_access_time
        self.hit_count = 0
        self.birth = node_id
        self.priority = 0
        self.hash_values: list[str] | None = None
        self.id = node_id

    @property
    def evicted(self) -> bool:
        return self.value is None

    @property
    def key(self) -> RadixKey | None:
        """The node's tokens and namespace as a RadixKey (a copy); ``None`` if it has none."""
        if self.keyless:
            return None
        return RadixKey(self.tokens, self.extra_key)

    @key.setter
    def key(self, key: RadixKey | None) -> None:
        self.keyless = key is None
        self.data = b"" if key is None else encode(key.token_ids, True, limit_of(key))
        self.length = token_count(self.data)
        self.extra_key = None if key is None else key.extra_key

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

    def shown_key(self) -> str:
        """The node's first 8 tokens for a repr (``...`` if there are more), or ``None``."""
        if self.keyless:
            return "None"
        return f"{list(self.tokens[:8])}{'...' if len(self) > 8 else ''}"

    def __repr__(self) -> str:
        return (
            f"TreeNode(id={self.id}, key={self.shown_key()}, extra_key={self.extra_key!r}, "
            f"lock_ref={self.lock_ref}, t={self.last_access_time})"
        )


N = TypeVar("N", bound=TreeNode)


def edge(node: TreeNode, page_size: int) -> ChildKey:
    """The dict key under which ``node``'s parent holds it: its namespace and first page.

    ``descend`` builds the same key from the key being looked up.
    """
    return (node.extra_key, page_at(node.data, 0, page_size))


def path_to_root(node: N) -> Iterator[N]:
    """``node`` and its ancestors, excluding the root (the only node without a parent)."""
    while node.parent is not None:
        yield node
        node = cast(N, node.parent)


def iter_subtree(root: TreeNode) -> Iterator[TreeNode]:
    """Every node below ``root`` (excluded), parents before children."""
    stack = list(root.children.values())
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children.values())


def piece(value: torch.Tensor, start: int, end: int | None) -> torch.Tensor:
    """``value[start:end]``, sharing its memory, without autograd's view record.

    A plain slice is a view that remembers its base for autograd (about 400 bytes more per
    tensor, resident as long as the node is); the tree's index tensors never take part in
    autograd, so the halves of a split are detached.
    """
    return value[start:end].detach()


def split_node(node: N, split_len: int, new_id: int, page_size: int) -> N:
    """Cut ``node`` after ``split_len`` tokens and return the new upper part.

    The original object stays the lower part and keeps its id, so a lock handle or an
    ``on_node_evict`` mapping that names it still ends at the same token position. Lock
    counts are copied up (every handle below the lower part is below the upper part too).
    The upper part has the node's own class, built with TreeNode's constructor arguments;
    what a part (SWA, Mamba) keeps on a node it sets in ``Tree.on_split``.
    """
    assert node.parent is not None and node.value is not None
    assert 0 < split_len < node.length and split_len % page_size == 0
    data = node.data
    upper = type(node)(
        new_id,
        span(data, 0, split_len),
        piece(node.value, 0, split_len),
        node.parent,
        node.last_access_time,
        node.extra_key,
    )
    upper.lock_ref = node.lock_ref
    upper.hit_count = node.hit_count
    upper.birth = node.birth  # the same insert added both halves (FIFO)
    upper.priority = node.priority
    if node.hash_values is not None:
        pages = split_len // page_size
        upper.hash_values = node.hash_values[:pages]
        node.hash_values = node.hash_values[pages:]
    node.parent.children[edge(upper, page_size)] = upper
    node.data = span(data, split_len, node.length)
    node.length -= split_len
    node.value = piece(node.value, split_len, None)
    node.parent = upper
    upper.children[edge(node, page_size)] = node
    return upper


class Descent(Generic[N]):
    """Where a key leads in a tree, without changing it (see ``descend``)."""

    __slots__ = ("matched", "partial", "partial_len", "path")

    def __init__(self) -> None:
        self.path: list[N] = []  # the nodes matched whole, root excluded
        self.matched = 0  # tokens covered by ``path``
        self.partial: N | None = None  # the next node, if the key ends inside it
        self.partial_len = 0  # page-aligned tokens of ``partial`` the key shares

    @property
    def end(self) -> int:
        """Tokens of the key the tree holds: the whole nodes, then part of ``partial``."""
        return self.matched + self.partial_len


def holds_packed(root: TreeNode) -> bool:
    """Whether the tree under ``root`` holds packed key data (key_data.py), not token tuples."""
    return type(root.data) is bytes


def descend(root: N, key: KeyRead, page_size: int) -> Descent[N]:
    """Follow ``key`` down from ``root`` as far as whole pages match; never splits.

    The first key holding a bigram (tuple) token turns the tree's packed keys into tuples
    first (one form per tree, key_data.py).
    """
    if not key.packed and holds_packed(root):
        recode_tree(root, page_size)
    out: Descent[N] = Descent()
    node, path, extra_key = root, out.path, key.extra_key
    # Positions are items of the key data (bytes when packed): no conversions in the loop.
    w = key.width
    page, end = page_size * w, len(key.data)
    at = 0
    while at < end:
        first = key.page(at, page)
        if first is None:  # an unchecked id that is not plain: no child holds it
            break
        child: Any = node.children.get((extra_key, first))  # an N, as ``root``
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


def depth_first(root: N) -> Iterator[tuple[N, int]]:
    """Every node below ``root`` with its depth (1 for a child of ``root``), each node
    before its children and children in insertion order: the order of a printed tree."""
    stack = [(child, 1) for child in reversed(list(root.children.values()))]
    while stack:
        node, depth = stack.pop()
        yield cast(N, node), depth
        stack.extend((c, depth + 1) for c in reversed(list(node.children.values())))


def tree_lines(root: TreeNode) -> Iterator[str]:
    """One line per node below ``root``, indented by depth, children in insertion order."""
    for node, depth in depth_first(root):
        yield "  " * depth + repr(node)


Hook = Callable[[N], None]
SplitHook = Callable[[N, N], None]


class Tree(Generic[N]):
    """One radix tree and all its bookkeeping: node ids, sizes, locks, evictable leaves and
    recency, and the three changes of shape (``split``, ``add_leaf``, ``delete_leaf``).

    Every cache is one Tree plus what its capability adds (SWA tombstones and windows,
    Mamba states, RadixTrie's blocks and sequence sets); those parts read and change the
    tree only through this public surface and learn about changes of shape from three
    hooks, lists of callables the tree calls after each change (empty lists cost one
    truth test), and from a fourth when recency changes:

    - ``on_added(leaf)``: a leaf was added (``add_leaf``);
    - ``on_deleted(leaf)``: a leaf was unlinked (``delete_leaf``); its ``value`` is still
      set, so a listener can read what it held; the cache frees it afterwards;
    - ``on_split(upper, lower)``: ``lower`` was cut and ``upper`` took its place above it;
    - ``on_touched(node)``: ``node`` and its ancestors were stamped with a new tick.

    Sizes count tokens: ``evictable_size`` those in nodes no lock covers, ``protected_size``
    those in locked nodes. Recency is the clock's tick stamped on a touched path; the
    evictable leaves (unlocked, childless, not the root) are kept in a set, with a lazy
    heap ordered by the eviction policy's key (eviction.py; LRU: ``TreeNode.recency``)
    from which ``lru_leaf`` pops. A leaf's key changes only on a touched path, and
    ``touch`` re-queues it (into a set the heap takes in when an eviction next asks), so
    callers update hits or priority *before* touching.
    """

    def __init__(
        self,
        node_class: type[N],
        page_size: int,
        device: torch.device,
        clock: Callable[[], float] | None = None,
        policy: EvictionPolicy = LRU,
        *,
        packed: bool = True,
    ) -> None:
        """``packed=False`` starts the tree in the token-tuple form (key_data.py) for good: a
        tree whose tokens are any hashable values (RadixTrie) never holds packed ids."""
        self.node_class = node_class
        self._empty_key: KeyData = b"" if packed else ()
        self.policy = policy
        self.page_size = page_size
        self.device = device
        self.clock = clock if clock is not None else itertools.count(1).__next__
        self._ids = itertools.count()
        self.on_added: list[Hook[N]] = []
        self.on_deleted: list[Hook[N]] = []
        self.on_split: list[SplitHook[N]] = []
        self.on_touched: list[Hook[N]] = []
        self.root = self._new_root()
        self.evictable_size = 0
        self.protected_size = 0
        self.leaves: set[N] = set()
        self._heap: list[tuple[SortKey, N]] = []
        self._unqueued: set[N] = set()  # leaves added or touched since the heap last saw them

    def _new_root(self) -> N:
        root = self.node_class(
            next(self._ids), self._empty_key, torch.empty(0, dtype=torch.int64, device=self.device)
        )
        root.lock_ref = 1  # the root is never evicted
        return root

    def clear(self) -> list[N]:
        """Start over with a new, empty root; returns the nodes that were below the old one
        (parents first), still holding their values, for the cache to free and report."""
        doomed = list(self.nodes())
        self.root = self._new_root()
        self.evictable_size = self.protected_size = 0
        self.leaves.clear()
        self._heap.clear()
        self._unqueued.clear()
        return doomed

    def nodes(self) -> Iterator[N]:
        """Every node below the root, parents before children."""
        return cast("Iterator[N]", iter_subtree(self.root))

    def lines(self) -> Iterator[str]:
        """One line per node below the root, indented by depth (``pretty_print``)."""
        return tree_lines(self.root)

    # ---- keys ----------------------------------------------------------------------------

    @property
    def packed(self) -> bool:
        """Whether the tree holds packed key data (key_data.py), not token tuples."""
        return holds_packed(self.root)

    def descend(self, key: KeyRead, start: N | None = None) -> Descent[N]:
        """Where ``key`` leads from ``start`` (default: the root; ``descend``); never splits.

        A key that turns the tree's packed keys into tuples turns all of them, not only
        those below ``start``.
        """
        walk = self._descend(key, start)
        if key.unchecked and not key.settle(walk.end):  # a list read again: walk again
            walk = self._descend(key, start)
        return walk

    def _descend(self, key: KeyRead, start: N | None) -> Descent[N]:
        if start is None or start is self.root:
            return descend(self.root, key, self.page_size)
        if not key.packed and self.packed:
            recode_tree(self.root, self.page_size)
        return descend(start, key, self.page_size)

    # ---- shape ---------------------------------------------------------------------------

    def split(self, node: N, split_len: int) -> N:
        """Cut ``node`` after ``split_len`` tokens; returns the new upper part (``split_node``)."""
        upper = split_node(node, split_len, next(self._ids), self.page_size)
        for hook in self.on_split:
            hook(upper, node)
        return upper

    def add_leaf(self, parent: N, data: KeyData, extra_key: str | None, value: torch.Tensor) -> N:
        """A new unlocked leaf below ``parent`` holding ``data`` -> ``value``."""
        leaf = self.node_class(
            next(self._ids), data, value, parent, parent.last_access_time, extra_key
        )
        parent.children[edge(leaf, self.page_size)] = leaf
        self.evictable_size += leaf.length
        self.leaves.discard(parent)
        self.leaves.add(leaf)
        self._push(leaf)
        for hook in self.on_added:
            hook(leaf)
        return leaf

    def delete_leaf(self, leaf: N) -> None:
        """Unlink the unlocked leaf ``leaf``; its parent may become an evictable leaf."""
        assert leaf.parent is not None and leaf.lock_ref == 0 and not leaf.children
        parent = cast(N, leaf.parent)
        del parent.children[edge(leaf, self.page_size)]
        self.leaves.discard(leaf)
        self._unqueued.discard(leaf)
        self._refresh_leaf(parent)  # the cascade: the parent may go next
        self.evictable_size -= leaf.length
        for hook in self.on_deleted:
            hook(leaf)

    def trim_leaf(self, leaf: N, keep: int) -> None:
        """Drop the tail of the unlocked leaf ``leaf`` after its first ``keep`` tokens.

        ``keep`` is page-aligned and leaves at least the first page, so the leaf keeps its
        place under its parent, its id and its recency; what a part keeps per page it
        trims itself. (Deleting the whole leaf is ``delete_leaf``.)
        """
        assert leaf in self.leaves and leaf.value is not None
        assert 0 < keep < leaf.length and keep % self.page_size == 0
        self.evictable_size -= leaf.length - keep
        leaf.data = span(leaf.data, 0, keep)
        leaf.length = keep
        leaf.value = piece(leaf.value, 0, keep)
        if leaf.hash_values is not None:
            leaf.hash_values = leaf.hash_values[: keep // self.page_size]

    # ---- recency and evictable leaves -----------------------------------------------------

    def touch(self, node: N) -> None:
        """Stamp ``node``, every ancestor and the root with one new tick of the clock."""
        now = self.clock()
        n: TreeNode | None = node
        while n is not None:  # a loop, not path_to_root: paths are long without eviction
            n.last_access_time = now
            n = n.parent
        if node in self.leaves:  # only the deepest node can be a leaf
            self._push(node)
        if self.on_touched:
            for hook in self.on_touched:
                hook(node)

    def is_evictable_leaf(self, node: N) -> bool:
        return node is not self.root and not node.children and node.lock_ref == 0

    def lru_leaf(self) -> N | None:
        """The evictable leaf the policy evicts first (LRU unless the cache was built with
        another ``eviction_policy``), or ``None``."""
        self._queue_unqueued()
        heap, order = self._heap, self.policy.key
        while heap:
            key, leaf = heap[0]
            if key == order(leaf) and leaf in self.leaves:
                return leaf
            heapq.heappop(heap)  # stale: since touched, deleted, locked or given a child
        return None

    def _refresh_leaf(self, node: N) -> None:
        """Track whether ``node`` is an evictable leaf (O(1); called where that can change)."""
        if self.is_evictable_leaf(node):
            if node not in self.leaves:
                self.leaves.add(node)
                self._push(node)
        else:
            self.leaves.discard(node)

    def _push(self, node: N) -> None:
        """Queue ``node`` for the heap, keyed as it is when an eviction next asks: a leaf
        touched again before then costs a set insertion, not a heap push, and a cache that
        never evicts never builds the heap."""
        self._unqueued.add(node)

    def _queue_unqueued(self) -> None:
        heap, order, leaves = self._heap, self.policy.key, self.leaves
        if len(heap) + len(self._unqueued) > 2 * len(leaves) + 64:  # mostly stale: rebuild
            heap[:] = [(order(n), n) for n in leaves]
            heapq.heapify(heap)
        else:
            for node in self._unqueued:
                if node in leaves:
                    heapq.heappush(heap, (order(node), node))
        self._unqueued.clear()

    def queued(self) -> set[tuple[SortKey, int]]:
        """``(policy key, id(node))`` of every heap entry (for ``check_invariants``), the
        leaves waiting to be queued queued first."""
        self._queue_unqueued()
        return {(key, id(n)) for key, n in self._heap}

    # ---- locks -----------------------------------------------------------------------------

    def require_live(self, node: object) -> N:
        """``node`` as a live node of this tree, or the usage error saying why not."""
        if not isinstance(node, self.node_class):
            raise TokenTypeError(
                f"expected a {self.node_class.__name__}, got {type(node).__name__}"
            )
        if node.evicted:
            raise StaleNodeError(f"node {node.id} was evicted")
        top: TreeNode = node
        while top.parent is not None:
            top = top.parent
        if top is not self.root:
            raise StaleNodeError(f"node {node.id} does not belong to this cache")
        return node

    def lock(self, node: N) -> None:
        """One lock handle on ``node``: the path node..root becomes protected."""
        node.held_locks += 1
        for n in path_to_root(node):
            self.protect(n)

    def unlock(self, node: N) -> None:
        """Undo one ``lock(node)``; the caller checked that ``node`` holds one."""
        node.held_locks -= 1
        for n in path_to_root(node):
            self.unprotect(n)

    def protect(self, node: N) -> None:
        """One more count on ``node``'s own ``lock_ref`` (``lock`` counts a whole path);
        a node with a count is protected: its tokens leave the evictable size."""
        if node.lock_ref == 0:
            self.evictable_size -= node.length
            self.protected_size += node.length
            self.leaves.discard(node)
        node.lock_ref += 1

    def unprotect(self, node: N) -> None:
        """Undo one ``protect(node)``; at zero the node is evictable again."""
        node.lock_ref -= 1
        if node.lock_ref == 0:
            self.protected_size -= node.length
            self.evictable_size += node.length
            self._refresh_leaf(node)

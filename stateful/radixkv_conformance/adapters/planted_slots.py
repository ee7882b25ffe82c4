"""A planted cache of another shape: a radix tree in a slot array, with lock receipts.

``SlotRadixTree`` is written as an engine developer writes a radix tree meant to allocate
nothing per request, not around the kit's rules, and knows nothing of radixkv:

- nodes live in a slot array and are reused: an evicted node's slot goes on a free list
  (last freed, first reused) and its generation is bumped; a handle is ``(slot,
  generation)``, so a handle on a node that is gone is told apart from the node now in its
  slot;
- real radix nodes: a node holds a run of pages, children are keyed by their first page, a
  match or insert that ends or diverges inside a node splits it (the upper half is a new
  node, the lower half keeps the slot, its stamp and its place in the eviction order); one
  root per namespace;
- a lock hands out a receipt ``(slot, generation)`` in a receipt table whose slots are
  reused too, so a finished request's receipt names the request that reuses its slot
  unless the generation is checked (per-sequence locks: profile ``lock_model="sets"``); an
  unlock names the node and the receipt, and a receipt taken on another node is refused;
- the eviction order is a sorted list of ``(stamp, slot)`` of the evictable leaves (no
  children, no lock, not a root), maintained incrementally: a node is filed when it
  becomes an evictable leaf and taken out when it stops being one or its stamp changes, by
  the key its fields give; an eviction takes the first entry, never rebuilding anything;
- evictable and protected token counts are kept as counters, updated where a lock count
  crosses zero, as engines keep ``evictable_size_``.

``bugs`` plants any of ``BUGS``, several at once::

    radixkv check radixkv_conformance.adapters.planted_slots:factory --option bugs=stale_refresh

Without bugs it conforms to ``PROFILE`` (radixkv's, with per-sequence lock receipts); each
bug alone is found by the default command (``tests/kit/test_planted_slots.py``). Four bugs
share ids: ``stale_refresh``, ``orphan_parent`` and ``split_lock`` all break the eviction
order (``INV-11:evict-victim-order``), the first two both crash it
(``KeyError:insert|lock@planted_slots.remove``), ``orphan_parent`` and ``reset_children``
both crash it in a match, ``split_lock`` and ``reset_children`` both evict an inner node
(``INV-11:evict-not-leaf``). Acknowledging one bug's ids (``--known ID``) does not hide
another, except where the other shows no id of its own: every id ``stale_refresh`` shows,
``orphan_parent`` shows too, and ``reset_children`` (a corrupted tree: past each symptom
acknowledged, another shows) comes to show every id of ``split_lock``'s.

A walk stops at a child that does not start with the page it is filed under: only a
corrupted tree has one (``reset_children``), and without the check a walk through two
corrupted roots, each the other's child, never ends: the kit has no step timeout, and its
run would hang.

The snapshot shows the whole state, the engine's own bookkeeping included: every slot (live
or free, its generation, and a free slot's leftover fields), both free lists in reuse order,
the receipt table, the eviction order, the clock and the counters.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable
from typing import Any

from radixkv_conformance.adapters._planting import planted_bugs
from radixkv_conformance.profile import RADIXKV
from radixkv_conformance.protocol import Host, Indices, Inserted, Sizes

PROFILE = RADIXKV.but(
    name="planted-slots",
    lock_model="sets",
    notes=(
        "a radix tree in a slot array: handles and lock receipts are (slot, generation) "
        "pairs in reused slots, so every lock hands out a receipt of its own (per-sequence "
        "locks); the eviction order is kept sorted between evictions."
    ),
)

BUGS = {
    "receipt_gen": "an unlock checks that the receipt's slot is held, not its generation: a "
    "finished request's receipt releases the lock of the request that reuses its slot",
    "node_gen": "a lock checks that the handle's slot holds a live node, not its generation: "
    "a handle on an evicted node locks whatever node reuses its slot",
    "stale_refresh": "a match stamps the nodes it walks but does not refile them in the "
    "eviction order (an eviction takes a leaf a request has just matched; taking the leaf out "
    "later, by the key its new stamp gives, finds no entry)",
    "orphan_parent": "an eviction that leaves its victim's parent a childless unlocked leaf "
    "does not file the parent in the eviction order (it is never evicted; taking it out "
    "later finds no entry)",
    "split_lock": "a split gives the new upper node a lock count of 0 instead of the split "
    "node's (an unlock below drives it to -1; the counters and the order drift)",
    "reset_children": "reset returns every node slot to the free list without clearing its "
    "child map (an eviction only frees leaves, so allocation never clears it): a node "
    "allocated after a reset hangs the old children",
}

NodeHandle = tuple[int, int]  # (slot, generation)
Receipt = tuple[int, int]  # (receipt slot, generation)
NONE = -1  # no parent


class StaleReference(Exception):
    """A handle or receipt that names nothing this cache holds now (a usage error)."""


def _pair(value: Any) -> bool:
    """Whether ``value`` has the shape of a handle or a receipt: two ints."""
    return isinstance(value, tuple) and len(value) == 2 and all(type(v) is int for v in value)


class Node:
    """One slot of the node array; ``live`` while it holds a node of the tree."""

    __slots__ = (
        "children",
        "gen",
        "key",
        "live",
        "lock_ref",
        "ns",
        "parent",
        "stamp",
        "value",
    )

    def __init__(self) -> None:
        self.gen = 0
        self.live = False
        self.ns: str | None = None
        self.key: tuple[int, ...] = ()  # the tokens of this node's pages
        self.value: Indices = ()  # their KV indices
        self.parent = NONE
        self.children: dict[tuple[int, ...], int] = {}  # first page -> slot
        self.lock_ref = 0  # receipts held on this node or below it
        self.stamp = 0  # the clock at its last use


class ReceiptSlot:
    """One slot of the receipt table; ``held`` while a request holds the lock."""

    __slots__ = ("gen", "held", "node")

    def __init__(self) -> None:
        self.gen = 0
        self.held = False
        self.node = NONE


class EvictionOrder:
    """The evictable leaves as a sorted list of ``(stamp, slot)``, oldest first."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    def add(self, stamp: int, slot: int) -> None:
        bisect.insort(self.entries, (stamp, slot))

    def remove(self, stamp: int, slot: int) -> None:
        at = bisect.bisect_left(self.entries, (stamp, slot))
        if at == len(self.entries) or self.entries[at] != (stamp, slot):
            raise KeyError(f"no entry ({stamp}, {slot}) in the eviction order")
        del self.entries[at]

    def pop_oldest(self) -> tuple[int, int]:
        return self.entries.pop(0)

    def __len__(self) -> int:
        return len(self.entries)


class SlotRadixTree:
    """The cache; ``free`` receives the KV indices of every node it deletes."""

    def __init__(self, page_size: int, free: Callable[[Indices], None], bugs: frozenset[str]):
        self.page_size = page_size
        self.free = free
        self.bugs = bugs
        self.nodes: list[Node] = []
        self.free_nodes: list[int] = []  # reused last freed first
        self.roots: dict[str | None, int] = {}
        self.receipts: list[ReceiptSlot] = []
        self.free_receipts: list[int] = []
        self.order = EvictionOrder()
        self.clock = 0
        self.evictable_size = 0
        self.protected_size = 0

    # ---- slots ---------------------------------------------------------------------------

    def _alloc(
        self, ns: str | None, key: tuple[int, ...], value: Indices, parent: int, stamp: int
    ) -> int:
        """A node in a free slot (its child map is empty: only leaves are ever freed)."""
        if self.free_nodes:
            slot = self.free_nodes.pop()
        else:
            slot = len(self.nodes)
            self.nodes.append(Node())
        node = self.nodes[slot]
        node.live = True
        node.ns, node.key, node.value = ns, key, value
        node.parent, node.stamp, node.lock_ref = parent, stamp, 0
        return slot

    def _release(self, slot: int) -> None:
        node = self.nodes[slot]
        node.live = False
        node.gen += 1
        node.value = ()
        node.parent = NONE
        self.free_nodes.append(slot)

    def _root(self, ns: str | None) -> int:
        if ns not in self.roots:
            self.roots[ns] = self._alloc(ns, (), (), NONE, self.clock)
        return self.roots[ns]

    def handle(self, slot: int) -> NodeHandle:
        return (slot, self.nodes[slot].gen)

    def node_of(self, handle: Any) -> int:
        """The slot a handle names, while it names a live node."""
        if not _pair(handle):
            raise StaleReference(f"not a node handle: {handle!r}")
        slot: int = handle[0]
        gen: int = handle[1]
        if not 0 <= slot < len(self.nodes) or not self.nodes[slot].live:
            raise StaleReference(f"node handle {handle!r}: the slot holds no node")
        if "node_gen" not in self.bugs and self.nodes[slot].gen != gen:
            raise StaleReference(f"node handle {handle!r}: the node was deleted")
        return slot

    # ---- the eviction order ----------------------------------------------------------------

    def _evictable_leaf(self, slot: int) -> bool:
        node = self.nodes[slot]
        return node.parent != NONE and not node.children and node.lock_ref == 0

    def _file(self, slot: int) -> None:
        self.order.add(self.nodes[slot].stamp, slot)

    def _unfile(self, slot: int) -> None:
        self.order.remove(self.nodes[slot].stamp, slot)

    def _stamp(self, slot: int, stamp: int, refile: bool = True) -> None:
        if refile and self._evictable_leaf(slot):
            self._unfile(slot)
            self.nodes[slot].stamp = stamp
            self._file(slot)
        else:
            self.nodes[slot].stamp = stamp

    # ---- the tree ------------------------------------------------------------------------

    def _common(self, a: tuple[int, ...], b: tuple[int, ...]) -> int:
        """The whole pages ``a`` and ``b`` share at their start, in tokens."""
        p, n = self.page_size, 0
        while n < min(len(a), len(b)) and a[n : n + p] == b[n : n + p]:
            n += p
        return n

    def _split(self, slot: int, at: int) -> int:
        """Cut the node at ``at`` tokens: a new upper node takes the first part, the node
        keeps the rest (its slot, stamp and filing); return the upper node's slot."""
        node = self.nodes[slot]
        parent = self.nodes[node.parent]
        upper = self._alloc(node.ns, node.key[:at], node.value[:at], node.parent, node.stamp)
        up = self.nodes[upper]
        up.lock_ref = 0 if "split_lock" in self.bugs else node.lock_ref
        parent.children[node.key[: self.page_size]] = upper
        node.key, node.value, node.parent = node.key[at:], node.value[at:], upper
        up.children[node.key[: self.page_size]] = slot
        return upper

    def _walk(self, ns: str | None, key: tuple[int, ...]) -> tuple[int, list[int], int]:
        """Follow ``key`` down, splitting the node it ends or diverges in: the last node
        reached (the root if none), the nodes on the way, the tokens they hold."""
        at, path, matched = self._root(ns), [], 0
        while matched < len(key):
            child = self.nodes[at].children.get(key[matched : matched + self.page_size])
            if child is None:
                break
            common = self._common(self.nodes[child].key, key[matched:])
            if common == 0:  # a child filed under a page it does not start with
                break
            if common < len(self.nodes[child].key):
                child = self._split(child, common)
            at = child
            path.append(child)
            matched += common
        return at, path, matched

    def match(self, ns: str | None, tokens: tuple[int, ...]) -> tuple[Indices, NodeHandle]:
        key = tokens[: len(tokens) // self.page_size * self.page_size]
        end, path, _ = self._walk(ns, key)
        self.clock += 1
        for slot in path:
            self._stamp(slot, self.clock, refile="stale_refresh" not in self.bugs)
        return tuple(i for slot in path for i in self.nodes[slot].value), self.handle(end)

    def insert(
        self, ns: str | None, tokens: tuple[int, ...], value: Indices
    ) -> tuple[int, NodeHandle]:
        """Cache the whole pages of ``tokens``; keep the indices already cached; return how
        many tokens were, and the node ending at the key."""
        key = tokens[: len(tokens) // self.page_size * self.page_size]
        end, path, cached = self._walk(ns, key)
        self.clock += 1
        for slot in path:
            self._stamp(slot, self.clock)
        if cached < len(key):
            if self._evictable_leaf(end):
                self._unfile(end)  # it is about to have a child
            leaf = self._alloc(ns, key[cached:], tuple(value[cached : len(key)]), end, self.clock)
            self.nodes[end].children[key[cached : cached + self.page_size]] = leaf
            self._file(leaf)
            self.evictable_size += len(key) - cached
            end = leaf
        return cached, self.handle(end)

    def lock(self, handle: Any) -> Receipt:
        slot = self.node_of(handle)
        at = slot
        while self.nodes[at].parent != NONE:
            node = self.nodes[at]
            if node.lock_ref == 0:
                if self._evictable_leaf(at):
                    self._unfile(at)
                self.evictable_size -= len(node.key)
                self.protected_size += len(node.key)
            node.lock_ref += 1
            at = node.parent
        if self.free_receipts:
            r = self.free_receipts.pop()
        else:
            r = len(self.receipts)
            self.receipts.append(ReceiptSlot())
        entry = self.receipts[r]
        entry.held, entry.node = True, slot
        return (r, entry.gen)

    def unlock(self, handle: Any, receipt: Any) -> None:
        """Release the lock ``receipt`` names, taken on the node ``handle`` names."""
        if not _pair(receipt):
            raise StaleReference(f"not a lock receipt: {receipt!r}")
        r: int = receipt[0]
        gen: int = receipt[1]
        if not 0 <= r < len(self.receipts) or not self.receipts[r].held:
            raise StaleReference(f"receipt {receipt!r}: no lock is held in its slot")
        entry = self.receipts[r]
        if "receipt_gen" not in self.bugs and entry.gen != gen:
            raise StaleReference(f"receipt {receipt!r}: that lock was released already")
        if self.node_of(handle) != entry.node:
            raise StaleReference(f"receipt {receipt!r} holds another node than {handle!r}")
        at = entry.node
        while self.nodes[at].parent != NONE:
            node = self.nodes[at]
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self.evictable_size += len(node.key)
                self.protected_size -= len(node.key)
                if self._evictable_leaf(at):
                    self._file(at)
            at = node.parent
        entry.held, entry.node = False, NONE
        entry.gen += 1
        self.free_receipts.append(r)

    def evict(self, num_tokens: int) -> int:
        """The least recently used evictable leaves, whole, until ``num_tokens`` are freed."""
        freed = 0
        while freed < num_tokens and len(self.order):
            _, slot = self.order.pop_oldest()
            node = self.nodes[slot]
            parent = node.parent
            del self.nodes[parent].children[node.key[: self.page_size]]
            self.free(node.value)
            freed += len(node.value)
            self.evictable_size -= len(node.key)
            self._release(slot)
            if self._evictable_leaf(parent) and "orphan_parent" not in self.bugs:
                self._file(parent)
        return freed

    def reset(self) -> None:
        """Drop every node (roots included, so every handle goes stale) and every receipt."""
        for slot, node in enumerate(self.nodes):
            if not node.live:
                continue
            if node.value:
                self.free(node.value)
            if "reset_children" not in self.bugs:
                node.children.clear()
            self._release(slot)
        self.roots.clear()
        for r, entry in enumerate(self.receipts):
            if entry.held:
                entry.held, entry.node = False, NONE
                entry.gen += 1
                self.free_receipts.append(r)
        self.order = EvictionOrder()
        self.evictable_size = self.protected_size = 0

    # ---- reading it ----------------------------------------------------------------------

    def pages(self) -> dict[tuple[str | None, tuple[int, ...]], Indices]:
        """Every cached page by (namespace, page path), walking down from each root (a
        slot reached twice is not walked again)."""
        out: dict[tuple[str | None, tuple[int, ...]], Indices] = {}
        p, seen = self.page_size, set()
        for ns, root in self.roots.items():
            stack: list[tuple[int, tuple[int, ...]]] = [(root, ())]
            while stack:
                slot, above = stack.pop()
                if slot in seen:
                    continue
                seen.add(slot)
                node = self.nodes[slot]
                for start in range(0, len(node.key), p):
                    out[(ns, above + node.key[: start + p])] = node.value[start : start + p]
                stack.extend((child, above + node.key) for child in node.children.values())
        return out


class SlotRadixAdapter:
    """The kit's adapter for ``SlotRadixTree``: handles are (slot, generation) pairs, lock
    tokens the receipts."""

    capabilities = frozenset({"namespaces", "unlock_checks", "stale_handles", "reset"})
    usage_errors: tuple[type[BaseException], ...] = (StaleReference,)

    def __init__(self, page_size: int, host: Host, bugs: frozenset[str]) -> None:
        self.page_size = page_size
        self.cache = SlotRadixTree(page_size, host.free, bugs)
        self.notes = f"planted bugs: {', '.join(sorted(bugs)) or 'none'}"

    def match(self, tokens: tuple[int, ...], namespace: str | None) -> tuple[Indices, NodeHandle]:
        return self.cache.match(namespace, tokens)

    def insert(self, tokens: tuple[int, ...], namespace: str | None, indices: Indices) -> Inserted:
        prefix_len, handle = self.cache.insert(namespace, tokens, indices)
        return Inserted(prefix_len, handle)

    def lock(self, handle: Any) -> Receipt:
        return self.cache.lock(handle)

    def unlock(self, handle: Any, token: Any) -> None:
        self.cache.unlock(handle, token)

    def evict(self, num_tokens: int) -> int:
        return self.cache.evict(num_tokens)

    def reset(self) -> None:
        self.cache.reset()

    def sizes(self) -> Sizes:
        c = self.cache
        return Sizes(c.evictable_size, c.protected_size, c.evictable_size + c.protected_size)

    def contents(self) -> dict[tuple[str | None, tuple[int, ...]], Indices]:
        return self.cache.pages()

    def snapshot(self) -> Hashable:
        c = self.cache
        nodes = tuple(
            (
                n.live,
                n.gen,
                repr(n.ns),
                n.key,
                n.value,
                n.parent,
                tuple(sorted(n.children.items())),
                n.lock_ref,
                n.stamp,
            )
            for n in c.nodes
        )
        receipts = tuple((r.gen, r.held, r.node) for r in c.receipts)
        roots = tuple(sorted((repr(ns), slot) for ns, slot in c.roots.items()))
        return (
            nodes,
            tuple(c.free_nodes),
            roots,
            receipts,
            tuple(c.free_receipts),
            tuple(c.order.entries),
            c.clock,
            c.evictable_size,
            c.protected_size,
        )

    def check(self) -> None:
        """``SlotRadixTree`` has no check of its own."""


def factory(page_size: int, host: Host, bugs: str = "") -> SlotRadixAdapter:
    """The tree with the bugs named in ``bugs`` (comma-separated names of ``BUGS``)."""
    planted = planted_bugs(bugs, BUGS)
    return SlotRadixAdapter(page_size, host, planted)

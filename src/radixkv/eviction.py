"""Eviction policies: which evictable leaf a cache deletes first (SPEC.md, Eviction policies).

A policy is a small object giving the sort key of an evictable leaf; the Tree keeps its
evictable leaves in a heap ordered by that key and evicts the smallest first. Every key
ends with the node id, so two leaves never tie and the order is deterministic.

- ``lru`` (default): least recently used first, older node on a tie (``TreeNode.recency``);
- ``lfu``: fewest hits first (``hit_count``: the matches whose returned path covered the
  node), ties least recently used first;
- ``fifo``: first inserted first (``birth``: the id the node's tokens got when an insert
  added them; both halves of a split keep it);
- ``mru``: most recently used first, newer node on a tie (LRU's order reversed);
- ``priority``: lowest priority first (``priority``: the highest ``priority=`` of the
  inserts whose key covered the node), ties least recently used first.

A key may only change where the Tree re-queues the leaf (``Tree.touch``): recency, hits
and priority all change on the path a match or insert touches, and they are updated
before the touch; ``birth`` and ``id`` never change. A policy of one's own must keep to
that: depth or length, say, change when a split cuts a leaf, with no touch of that leaf.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from radixkv.errors import UsageError

SortKey = tuple[float, ...]


class Ranked(Protocol):
    """What a policy reads of a node (a ``TreeNode`` is one), and what ``apply_priority``
    writes: the policies know nodes only through this, so the tree depends on them and
    not the other way round."""

    @property
    def id(self) -> int: ...

    @property
    def last_access_time(self) -> float: ...

    @property
    def hit_count(self) -> int: ...

    @property
    def birth(self) -> int: ...

    @property
    def parent(self) -> Ranked | None: ...

    def recency(self) -> tuple[float, int]:
        """The LRU order: last access, then the older node (``TreeNode.recency``)."""
        ...

    priority: int


@runtime_checkable
class EvictionPolicy(Protocol):
    """The order in which a cache evicts its evictable leaves: smallest ``key`` first."""

    @property
    def name(self) -> str: ...

    def key(self, node: Ranked) -> SortKey: ...


@dataclass(frozen=True)
class Lru:
    """Least recently used first; the older node (smaller id) on a tie."""

    name: str = "lru"

    def key(self, node: Ranked) -> SortKey:
        return node.recency()  # one definition of the LRU order, the node's


@dataclass(frozen=True)
class Lfu:
    """Fewest hits first; ties least recently used first."""

    name: str = "lfu"

    def key(self, node: Ranked) -> SortKey:
        return (node.hit_count, node.last_access_time, node.id)


@dataclass(frozen=True)
class Fifo:
    """First inserted first (the insert that added the node's tokens; splits keep it)."""

    name: str = "fifo"

    def key(self, node: Ranked) -> SortKey:
        return (node.birth, node.id)


@dataclass(frozen=True)
class Mru:
    """Most recently used first; the newer node on a tie (exactly LRU's order reversed)."""

    name: str = "mru"

    def key(self, node: Ranked) -> SortKey:
        return (-node.last_access_time, -node.id)


@dataclass(frozen=True)
class Priority:
    """Lowest priority first; ties least recently used first."""

    name: str = "priority"

    def key(self, node: Ranked) -> SortKey:
        return (node.priority, node.last_access_time, node.id)


LRU = Lru()
LFU = Lfu()
FIFO = Fifo()
MRU = Mru()
PRIORITY = Priority()
POLICIES: dict[str, EvictionPolicy] = {p.name: p for p in (LRU, LFU, FIFO, MRU, PRIORITY)}
"""The built-in policies by name (the caches' ``eviction_policy=`` keyword)."""


def resolve_policy(value: object) -> EvictionPolicy:
    """``value`` (a built-in policy's name, or a policy object) as a policy; else a usage
    error naming the choices. Caches call it before building anything."""
    if isinstance(value, str):
        if value not in POLICIES:
            raise UsageError(f"unknown eviction_policy {value!r}; known: {sorted(POLICIES)}")
        return POLICIES[value]
    if isinstance(value, EvictionPolicy):
        return value
    raise UsageError(
        f"eviction_policy must be one of {sorted(POLICIES)} or an object with name and "
        f"key(node), got {type(value).__name__}"
    )


def apply_priority(end: Ranked, cached_end: Ranked, priority: int) -> None:
    """An insert's ``priority`` on the path it covers: the nodes it added (from ``end`` up
    to ``cached_end``, excluded) take it; ``cached_end`` and its ancestors (not the root)
    are raised to at least it, since a shared prefix is as precious as its best user."""
    node = end
    while node is not cached_end and node.parent is not None:
        node.priority = priority
        node = node.parent
    while node.parent is not None:
        node.priority = max(node.priority, priority)
        node = node.parent

"""KV-cache events for KV-aware routers (SPEC.md, "KV events").

A cache built with ``event_listener=`` reports every change to its set of cached pages as
records in the shape vLLM and sglang publish: ``BlockStored`` when pages are added,
``BlockRemoved`` when they are deleted, ``AllBlocksCleared`` on ``reset``. Block hashes are
``hash_to_int64`` of radixkv's published page hashes (SPEC.md §9), so a router recomputes
them from the tokens and the namespace alone. Without a listener nothing is hashed and no
record is built: the caches test one attribute against ``None`` where pages come and go.

``EventRecorder`` collects records and hands them out as ``KVEventBatch(ts, events)``, the
unit a publisher sends (``radixkv.events.publisher``; the wire codec is
``radixkv.events.wire``; both need the optional ``events`` extra).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from radixkv.hashing import chain_page_hashes, hash_to_int64, namespace_seed
from radixkv.keys import Token
from radixkv.tree import Tree, TreeNode, path_to_root

MEDIUM = "GPU"
"""The tier radixkv's caches describe: device KV (vLLM's and sglang's name for it)."""


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Pages that became cached: consecutive pages of one path, parent link first.

    ``block_hashes[i]`` is the int64 hash of page i; ``parent_block_hash`` that of the page
    before the first one (``None`` when the first page starts its namespace's path);
    ``token_ids`` are the pages' tokens in order (``len == block_size * len(block_hashes)``);
    ``extra_key`` is the namespace the hashes are seeded with (sglang's ``cache_salt`` slot).
    """

    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[Token]
    block_size: int
    lora_id: int | None = None
    medium: str | None = MEDIUM
    extra_key: str | None = None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Pages that are no longer cached, named by their int64 hashes."""

    block_hashes: list[int]
    medium: str | None = MEDIUM


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """Every page is gone (``reset``)."""


KVCacheEvent = BlockStored | BlockRemoved | AllBlocksCleared
EventListener = Callable[[KVCacheEvent], object]


@dataclass(frozen=True, slots=True)
class KVEventBatch:
    """Events in the order they happened, stamped with one wall-clock time (seconds)."""

    ts: float
    events: list[KVCacheEvent] = field(default_factory=list)


def to_wire(event: KVCacheEvent) -> list[object]:
    """The record's wire form: its tag, then its fields in order (vLLM's tagged,
    array-like records). ``extra_key`` is left out for the ``None`` namespace, so a
    default-namespace ``BlockStored`` has exactly vLLM's six fields."""
    if isinstance(event, BlockStored):
        fields: list[object] = [
            event.block_hashes,
            event.parent_block_hash,
            event.token_ids,
            event.block_size,
            event.lora_id,
            event.medium,
        ]
        if event.extra_key is not None:
            fields.append(event.extra_key)
        return ["BlockStored", *fields]
    if isinstance(event, BlockRemoved):
        return ["BlockRemoved", event.block_hashes, event.medium]
    return ["AllBlocksCleared"]


class EventPublisher(Protocol):
    """A listener that sends what it heard as one batch per ``publish`` (a scheduler step)."""

    def __call__(self, event: KVCacheEvent) -> object: ...

    def publish(self) -> int | None:
        """Send the pending events; the batch's sequence number, or None if none were."""


class EventRecorder:
    """A listener that keeps records until ``take`` / ``take_batch`` hands them out."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._events: list[KVCacheEvent] = []
        self._clock = clock

    def __call__(self, event: KVCacheEvent) -> None:
        self._events.append(event)

    def __len__(self) -> int:
        return len(self._events)

    def take(self) -> list[KVCacheEvent]:
        """The records since the last take, oldest first."""
        events, self._events = self._events, []
        return events

    def take_batch(self) -> KVEventBatch:
        return KVEventBatch(self._clock(), self.take())


class SequenceTracker:
    """A subscriber's view of batch sequence numbers: where it lost batches.

    The first number seen is the start (a subscriber may join late); after it every
    number must be the next one. A jump is a gap: the batches in between were lost, and the
    subscriber's page set for that worker can no longer be trusted.
    """

    def __init__(self) -> None:
        self.next: int | None = None
        self.gaps: list[range] = []

    def see(self, seq: int) -> range:
        """Record batch ``seq``; returns the numbers missed just before it (often empty)."""
        if self.next is not None and seq < self.next:
            raise ValueError(f"batch {seq} after batch {self.next - 1}: sequence went back")
        missed = range(seq if self.next is None else self.next, seq)
        if missed:
            self.gaps.append(missed)
        self.next = seq + 1
        return missed


class PageEvents:
    """Turns a cache's page changes into records for one listener.

    Caches hold one only when a listener is given, so every method here may hash.
    """

    __slots__ = ("listener", "page_size")

    @classmethod
    def on(cls, tree: Tree[Any], listener: EventListener | None) -> PageEvents | None:
        """Subscribe to ``tree``'s added and deleted nodes; ``None`` (no hook, no cost)
        without a listener. The cache reports resets itself (``cleared``)."""
        if listener is None:
            return None
        events = cls(listener, tree.page_size)
        tree.on_added.append(events.node_stored)
        tree.on_deleted.append(events.node_removed)
        return events

    def __init__(self, listener: EventListener, page_size: int) -> None:
        if not callable(listener):
            raise TypeError(f"event_listener must be callable, got {type(listener).__name__}")
        self.listener = listener
        self.page_size = page_size

    def stored(
        self,
        tokens: Sequence[Token],
        extra_key: str | None,
        hashes: Sequence[str],
        parent_hash: str | None,
    ) -> None:
        """Report consecutive new pages (``tokens``, whole pages) after ``parent_hash``."""
        self.listener(
            BlockStored(
                block_hashes=[hash_to_int64(h) for h in hashes],
                parent_block_hash=None if parent_hash is None else hash_to_int64(parent_hash),
                token_ids=list(tokens),
                block_size=self.page_size,
                extra_key=extra_key,
            )
        )

    def removed(self, hashes: Sequence[str]) -> None:
        if hashes:
            self.listener(BlockRemoved(block_hashes=[hash_to_int64(h) for h in hashes]))

    def cleared(self) -> None:
        self.listener(AllBlocksCleared())

    # ---- tree nodes (RadixCache, MambaRadixCache) -----------------------------------------

    def node_stored(self, node: TreeNode) -> None:
        """Report a node just linked into its tree: all of its pages are new."""
        parent = node.parent
        assert parent is not None
        hashes = node_page_hashes(node, self.page_size)
        parent_hash = None if parent.parent is None else _prior_hash(node)
        self.stored(node.tokens, node.extra_key, hashes, parent_hash)

    def node_removed(self, node: TreeNode) -> None:
        """Report a node about to leave its tree (hashed when it was stored)."""
        assert node.hash_values is not None, "a node stored without a listener"
        self.removed(node.hash_values)


def node_page_hashes(node: TreeNode, page_size: int) -> list[str]:
    """The page hashes of ``node``, hashing its unhashed ancestors first (SPEC.md §4).

    A pure function of the node's namespace and root path, whatever the order of calls;
    results are kept on the nodes (``hash_values``), which splits divide between the parts.
    ``page_size`` is only read for nodes not hashed yet.
    """
    pending = [n for n in path_to_root(node) if n.hash_values is None]
    for n in reversed(pending):
        n.hash_values = chain_page_hashes(n.tokens, page_size, _prior_hash(n))
    return node.hash_values or []


def _prior_hash(node: TreeNode) -> str | None:
    """The hash a node's first page chains after: its parent's last page, or the seed."""
    parent = node.parent
    assert parent is not None
    if parent.parent is None:
        return namespace_seed(node.extra_key)
    assert parent.hash_values is not None
    return parent.hash_values[-1]


__all__ = [
    "MEDIUM",
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "EventListener",
    "EventPublisher",
    "EventRecorder",
    "KVCacheEvent",
    "KVEventBatch",
    "PageEvents",
    "SequenceTracker",
    "node_page_hashes",
    "to_wire",
]

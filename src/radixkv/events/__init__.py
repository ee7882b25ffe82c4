"""KV-cache events for KV-aware routers (SPEC.md, "KV events").

A cache built with ``event_listener=`` reports every change to its set of cached pages as
records in the shape vLLM and sglang publish: ``BlockStored`` when pages are added,
``BlockRemoved`` when they are deleted, ``AllBlocksCleared`` on ``reset``. Block hashes are
unsigned 64-bit: ``hash_to_int64`` of radixkv's published page hashes (SPEC.md §9) read as
unsigned (``block_hash``), so a router recomputes them from the tokens and the namespace
alone. Without a listener nothing is hashed and no record is built: the caches test one
attribute against ``None`` where pages come and go.

``EventRecorder`` collects records and hands them out as ``KVEventBatch``, the unit a
publisher sends (``radixkv.events.publisher``; the wire codec is ``radixkv.events.wire``;
both need the optional ``events`` extra). ``to_wire`` writes a record as the tagged map
vLLM 0.33 and sglang 0.5.23 send; ``RouterFilter`` keeps out of a published stream the
pages a router cannot be told faithfully (SPEC.md, "KV events").
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

TAG = "type"
"""The key that names a record's class in its wire map (msgspec's ``tag=True``)."""

MAX_TOKEN_ID = 2**32 - 1
"""The largest token id a router is told: Dynamo reads token ids as unsigned 32-bit."""


def block_hash(page_hash: str) -> int:
    """A page's published block hash: ``hash_to_int64`` of its §9 hash, read as unsigned
    64-bit (``[0, 2**64)``), the form vLLM publishes integer hashes in."""
    return hash_to_int64(page_hash) % 2**64


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Pages that became cached: consecutive pages of one path, parent link first.

    ``block_hashes[i]`` is the unsigned 64-bit hash of page i (``block_hash``);
    ``parent_block_hash`` that of the page before the first one (``None`` when the first
    page starts its namespace's path); ``token_ids`` are the pages' tokens in order
    (``len == block_size * len(block_hashes)``); ``extra_key`` is the namespace the hashes
    are seeded with, sent as ``cache_salt`` (never as ``lora_name``).
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
    """Pages that are no longer cached, named by their unsigned 64-bit hashes."""

    block_hashes: list[int]
    medium: str | None = MEDIUM


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """Every page is gone (``reset``)."""


KVCacheEvent = BlockStored | BlockRemoved | AllBlocksCleared
EventListener = Callable[[KVCacheEvent], object]


@dataclass(frozen=True, slots=True)
class KVEventBatch:
    """Events in the order they happened, stamped with one wall-clock time (seconds), and
    the data-parallel rank of the worker that publishes them (vLLM's third batch field)."""

    ts: float
    events: list[KVCacheEvent] = field(default_factory=list)
    data_parallel_rank: int = 0


def to_wire(event: KVCacheEvent) -> dict[str, object]:
    """The record's wire form: a map tagged ``type`` with vLLM 0.33's field names.

    ``BlockStored`` carries every field vLLM's decoder requires (``lora_id``, ``medium``,
    ``lora_name``; the last two ``None`` in radixkv) and the namespace as ``cache_salt``
    (sglang's and Dynamo's field; left out for the ``None`` namespace). Tuple (bigram)
    tokens become arrays. Faithful to the record: ``RouterFilter`` decides what is sent.
    """
    if isinstance(event, BlockStored):
        record: dict[str, object] = {
            TAG: "BlockStored",
            "block_hashes": list(event.block_hashes),
            "parent_block_hash": event.parent_block_hash,
            "token_ids": [list(t) if isinstance(t, tuple) else t for t in event.token_ids],
            "block_size": event.block_size,
            "lora_id": event.lora_id,
            "medium": event.medium,
            "lora_name": None,
        }
        if event.extra_key is not None:
            record["cache_salt"] = event.extra_key
        return record
    if isinstance(event, BlockRemoved):
        return {
            TAG: "BlockRemoved",
            "block_hashes": list(event.block_hashes),
            "medium": event.medium,
        }
    return {TAG: "AllBlocksCleared"}


EXTRA_HINT = "pip install 'radixkv[events]'"
"""How to install what the publisher and the wire codec need (pyzmq, msgspec)."""


def extra_missing(module: str, package: str, missing: ImportError) -> ImportError:
    """The error for ``module`` when the events extra's ``package`` does not import: it
    says what to install (a ``ModuleNotFoundError`` still, when that is what it was)."""
    kind = ModuleNotFoundError if isinstance(missing, ModuleNotFoundError) else ImportError
    return kind(
        f"{module} needs {package}, part of the optional events extra: {EXTRA_HINT} ({missing})",
        name=missing.name,
        path=missing.path,
    )


def publishable_token(token: Token) -> bool:
    """Whether a router can be told this token: a plain int id in ``[0, 2**32)``."""
    return type(token) is int and 0 <= token <= MAX_TOKEN_ID


class RouterFilter:
    """What a published stream says: every record, less the pages a router cannot be told
    faithfully (SPEC.md, "KV events", "What a router is not told").

    A page is refused when its namespace is ``""`` (vLLM and Dynamo read an empty salt as
    no salt: its pages would collide with the ``None`` namespace's) or when a token on its
    root path is not an int id below ``2**32`` (Dynamo reads ids as u32 and drops a whole
    batch it cannot decode; vLLM's schema has no bigram tokens). Every page after a refused
    one in its path is refused too; a removal names only pages that were sent; a clear
    forgets every refusal. So the published stream is itself consistent (INV-40..42) and a
    router's view is the worker's cached pages less the refused ones: it may route a
    refused prefix elsewhere, never to a worker that lacks it.
    """

    __slots__ = ("_refused", "refused_pages")

    def __init__(self) -> None:
        self._refused: set[int] = set()
        self.refused_pages = 0
        """How many stored pages were kept out of the stream (a running count)."""

    def __call__(self, event: KVCacheEvent) -> KVCacheEvent | None:
        """The event as published, or ``None`` when nothing of it is."""
        if isinstance(event, BlockStored):
            return self._stored(event)
        if isinstance(event, BlockRemoved):
            sent = [h for h in event.block_hashes if h not in self._refused]
            self._refused.difference_update(event.block_hashes)
            if len(sent) == len(event.block_hashes):
                return event
            return BlockRemoved(sent, event.medium) if sent else None
        self._refused.clear()
        return event

    def _stored(self, event: BlockStored) -> BlockStored | None:
        p, hashes = event.block_size, event.block_hashes
        if event.extra_key == "" or event.parent_block_hash in self._refused:
            keep = 0
        else:
            bad = next((i for i, t in enumerate(event.token_ids) if not publishable_token(t)), None)
            keep = len(hashes) if bad is None else bad // p
        if keep == len(hashes):
            return event
        self._refused.update(hashes[keep:])
        self.refused_pages += len(hashes) - keep
        if keep == 0:
            return None
        return BlockStored(
            block_hashes=hashes[:keep],
            parent_block_hash=event.parent_block_hash,
            token_ids=event.token_ids[: keep * p],
            block_size=p,
            lora_id=event.lora_id,
            medium=event.medium,
            extra_key=event.extra_key,
        )


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

    def take_batch(self, data_parallel_rank: int = 0) -> KVEventBatch:
        return KVEventBatch(self._clock(), self.take(), data_parallel_rank)


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
                block_hashes=[block_hash(h) for h in hashes],
                parent_block_hash=None if parent_hash is None else block_hash(parent_hash),
                token_ids=list(tokens),
                block_size=self.page_size,
                extra_key=extra_key,
            )
        )

    def removed(self, hashes: Sequence[str]) -> None:
        if hashes:
            self.listener(BlockRemoved(block_hashes=[block_hash(h) for h in hashes]))

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
    "MAX_TOKEN_ID",
    "MEDIUM",
    "TAG",
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "EventListener",
    "EventPublisher",
    "EventRecorder",
    "KVCacheEvent",
    "KVEventBatch",
    "PageEvents",
    "RouterFilter",
    "SequenceTracker",
    "block_hash",
    "node_page_hashes",
    "publishable_token",
    "to_wire",
]

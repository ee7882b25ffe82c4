"""Plain-value views of a RadixCache and a recording allocator, shared by the example tests."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import pytest
import torch

from radixkv import InsertResult, KVIndexAllocator, MatchResult, RadixCache, RadixKey, TreeNode
from radixkv.tokens import Token

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

TokenSlot = tuple[str | None, tuple[Token, ...], int]


class NodeRecord(NamedTuple):
    """Everything observable about one node, as plain values."""

    id: int
    parent_id: int | None
    extra_key: str | None
    tokens: tuple[Token, ...]
    value: tuple[int, ...] | None
    lock_ref: int
    held_locks: int
    last_access_time: float
    hit_count: int
    hash_values: tuple[str, ...] | None


class Snapshot(NamedTuple):
    """A picture of the whole tree (root included) plus the size counters."""

    nodes: tuple[NodeRecord, ...]
    evictable: int
    protected: int
    total: int


def all_nodes(cache: RadixCache) -> Iterator[TreeNode]:
    """The root, then every node below it, parents before children."""
    stack = [cache.root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children.values())


def live_nodes(cache: RadixCache) -> list[TreeNode]:
    """Every node except the root."""
    return [node for node in all_nodes(cache) if node is not cache.root]


def record(node: TreeNode) -> NodeRecord:
    return NodeRecord(
        id=node.id,
        parent_id=None if node.parent is None else node.parent.id,
        extra_key=node.extra_key,
        tokens=tuple(node.tokens),
        value=None if node.value is None else tuple(node.value.tolist()),
        lock_ref=node.lock_ref,
        held_locks=node.held_locks,
        last_access_time=node.last_access_time,
        hit_count=node.hit_count,
        hash_values=None if node.hash_values is None else tuple(node.hash_values),
    )


def snapshot(cache: RadixCache) -> Snapshot:
    """A plain-value picture of ``cache``, for "state unchanged" assertions."""
    nodes = tuple(sorted((record(n) for n in all_nodes(cache)), key=lambda r: r.id))
    return Snapshot(nodes, cache.evictable_size(), cache.protected_size(), cache.total_size())


def path_tokens(node: TreeNode) -> tuple[Token, ...]:
    """The tokens spelled by the root path ending at ``node``."""
    parts: list[tuple[Token, ...]] = []
    while node.parent is not None:
        parts.append(tuple(node.tokens))
        node = node.parent
    return tuple(t for part in reversed(parts) for t in part)


def token_index_map(cache: RadixCache) -> dict[TokenSlot, int]:
    """Every cached token mapped to its KV index, independently of how nodes are cut.

    A token is named by its namespace, the cached path through the end of its page, and its
    offset in that page (with page_size > 1, sibling pages may share leading tokens).
    A split must leave this map unchanged.
    """
    p = cache.page_size
    mapping: dict[TokenSlot, int] = {}
    for node in live_nodes(cache):
        assert node.value is not None
        assert node.parent is not None
        base = path_tokens(node.parent)
        for i, index in enumerate(node.value.tolist()):
            page_end = (i // p + 1) * p
            mapping[(node.extra_key, base + tuple(node.tokens[:page_end]), i % p)] = index
    return mapping


def tree_indices(cache: RadixCache) -> list[int]:
    """Every KV index the tree holds (with repetitions, if the tree is broken)."""
    out: list[int] = []
    for node in live_nodes(cache):
        assert node.value is not None
        out.extend(node.value.tolist())
    return out


def node_lengths(cache: RadixCache) -> list[int]:
    return [len(node) for node in live_nodes(cache)]


def ids(tensor: torch.Tensor) -> list[int]:
    return [int(i) for i in tensor.tolist()]


class RecordingAllocator:
    """A KVIndexAllocator that also records every index the cache frees.

    The inner allocator raises DoubleFreeError on a double free, so "freed exactly once"
    is checked twice: by the allocator and by ``freed`` having no repetition.
    """

    def __init__(self, size: int, device: torch.device | str = "cpu") -> None:
        self.inner = KVIndexAllocator(size, device)
        self.device = self.inner.device
        self.freed: list[int] = []
        self.free_calls = 0

    def alloc(self, n: int) -> torch.Tensor:
        out = self.inner.alloc(n)
        assert out is not None, "test pool too small"
        return out

    def free(self, indices: torch.Tensor) -> None:
        self.inner.free(indices)
        self.freed.extend(ids(indices))
        self.free_calls += 1

    def allocated_count(self) -> int:
        return self.inner.allocated_count()


@dataclass
class CountingClock:
    """A logical clock the test owns: 1, 2, 3, ... and a count of how often it was read."""

    ticks: int = 0

    def __call__(self) -> float:
        self.ticks += 1
        return float(self.ticks)


@dataclass
class CacheHarness:
    """A RadixCache wired to a recording allocator, an ``on_node_evict`` log and a clock."""

    cache: RadixCache
    allocator: RecordingAllocator
    clock: CountingClock
    evicted_ids: list[int] = field(default_factory=list)

    def put(self, tokens: Sequence[Token], extra_key: str | None = None) -> InsertResult:
        """Insert like a serving engine: fresh indices for every token, then the caller
        frees its duplicates ``[0, prefix_len)`` and the unaligned tail the tree did not take.
        """
        p = self.cache.page_size
        value = self.allocator.alloc(len(tokens))
        result = self.cache.insert(RadixKey(list(tokens), extra_key), value)
        aligned = len(tokens) // p * p
        duplicates = torch.cat([value[: result.prefix_len], value[aligned:]])
        if duplicates.numel():
            self.allocator.inner.free(duplicates)
        return result

    def match(self, tokens: Sequence[Token], extra_key: str | None = None) -> MatchResult:
        return self.cache.match_prefix(RadixKey(list(tokens), extra_key))

    def assert_conserved(self) -> None:
        """Every allocated index is held by exactly one node, and the tree is healthy."""
        held = tree_indices(self.cache)
        assert len(held) == len(set(held))
        assert len(held) == self.cache.total_size()
        assert self.allocator.allocated_count() == len(held)
        assert all(self.allocator.inner.is_allocated(i) for i in held)
        self.cache.check_invariants()

"""Plain-value views of a RadixCache and a recording allocator, shared by the example tests."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, NamedTuple, TypeVar

import pytest
import torch
from hypothesis import Phase, settings

from radixkv import (
    InsertResult,
    KVIndexAllocator,
    MatchResult,
    RadixCache,
    RadixKey,
    TreeNode,
    native,
)
from radixkv.keys import Token

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


BUILDS = [  # parametrize over both key paths: the compiled helpers and the pure reference
    pytest.param(
        True,
        id="compiled",
        marks=pytest.mark.skipif(not native.available(), reason="the C key helpers are not built"),
    ),
    pytest.param(False, id="pure"),
]


@contextmanager
def key_build(compiled: bool) -> Iterator[None]:
    """Run the block on the compiled key helpers or on the pure reference ones."""
    previous = native.helpers is not None
    native.select(compiled=compiled)
    try:
        yield
    finally:
        native.select(compiled=previous)


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


# ---- sliding-window attention (SWA) ---------------------------------------------------------


class SwaFreeError(AssertionError):
    """A free the hybrid pool refuses: a double free, or KV that a locked node still uses."""


class HybridPool:
    """A hybrid KV pool for SWA tests: every index has full-attention KV and SWA KV.

    ``alloc`` hands out fresh indices holding both. ``free`` releases the full KV of each
    index (and its SWA KV if still held); ``free_swa`` releases only the SWA KV. Each call
    is recorded, and each raises SwaFreeError on a double free: ``free`` of an index whose
    full KV is not allocated, ``free_swa`` of an index whose SWA KV is not held. With
    ``guard`` set to a cache, it also refuses to free what a locked node holds (``free``:
    any node with ``lock_ref > 0``; ``free_swa``: a node with ``swa_lock_ref > 0``).
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.full: dict[int, bool] = {}  # every index ever allocated -> full KV held
        self.swa: dict[int, bool] = {}  # every index ever allocated -> SWA KV held
        self.free_calls: list[list[int]] = []
        self.free_swa_calls: list[list[int]] = []
        self.guard: RadixCache | None = None
        self._next = 0

    def alloc(self, n: int) -> torch.Tensor:
        out = list(range(self._next, self._next + n))
        self._next += n
        for i in out:
            self.full[i] = True
            self.swa[i] = True
        return torch.tensor(out, dtype=torch.int64, device=self.device)

    @property
    def freed(self) -> list[int]:
        """Every index passed to ``free``, in call order."""
        return [i for call in self.free_calls for i in call]

    @property
    def swa_freed(self) -> list[int]:
        """Every index passed to ``free_swa``, in call order."""
        return [i for call in self.free_swa_calls for i in call]

    def _locked(self, swa: bool) -> set[int]:
        if self.guard is None:
            return set()
        out: set[int] = set()
        for node in live_nodes(self.guard):
            if node.value is not None and (node.swa_lock_ref if swa else node.lock_ref) > 0:
                out.update(ids(node.value))
        return out

    def free(self, indices: torch.Tensor) -> None:
        batch = self._freeable("free", indices, swa=False)
        for i in batch:
            self.full[i] = False
            self.swa[i] = False
        self.free_calls.append(batch)

    def free_swa(self, indices: torch.Tensor) -> None:
        batch = self._freeable("free_swa", indices, swa=True)
        for i in batch:
            self.swa[i] = False
        self.free_swa_calls.append(batch)

    def _freeable(self, call: str, indices: torch.Tensor, *, swa: bool) -> list[int]:
        """The indices one ``call`` frees; ``SwaFreeError`` if one repeats, is not held (the
        SWA KV with ``swa``, else the full KV) or a node locked that way still uses it."""
        batch = ids(indices)
        if len(set(batch)) != len(batch):
            raise SwaFreeError(f"{call}: an index repeats in one call: {batch}")
        held = self.swa if swa else self.full
        if bad := [i for i in batch if not held.get(i, False)]:
            lacking = "SWA KV not held" if swa else "full KV not allocated"
            raise SwaFreeError(f"{call}: {lacking} (double free?): {bad}")
        if bad := sorted(set(batch) & self._locked(swa=swa)):
            locked = "an SWA-locked" if swa else "a locked"
            raise SwaFreeError(f"{call}: {locked} node still uses {bad}")
        return batch

    def caller_free(self, indices: torch.Tensor) -> None:
        """The caller (not the cache) frees indices it kept; not recorded as a cache free."""
        batch = ids(indices)
        assert all(self.full[i] for i in batch), f"caller double free: {batch}"
        for i in batch:
            self.full[i] = False
            self.swa[i] = False

    def caller_free_swa(self, indices: torch.Tensor) -> None:
        """The caller drops SWA KV that slid out of its window (before ``swa_evicted_seqlen``)."""
        batch = ids(indices)
        assert all(self.swa[i] for i in batch), f"caller SWA double free: {batch}"
        for i in batch:
            self.swa[i] = False

    def assert_no_leak(self, cache: RadixCache, caller_holds: Sequence[int] = ()) -> None:
        """Every index ever allocated is cached, held by the caller, or fully freed.

        A cached index appears in exactly one node, holds its full KV, and holds its SWA KV
        iff its node is live (not a tombstone). ``caller_holds`` lists indices the test
        still owns (full KV held). Also checks the cache's invariants and size identities.
        """
        owner: dict[int, TreeNode] = {}
        for node in live_nodes(cache):
            assert node.value is not None
            for i in ids(node.value):
                assert i not in owner, f"index {i} is held by two nodes"
                owner[i] = node
        kept = set(caller_holds)
        assert not kept & owner.keys(), "the caller holds an index the tree holds"
        for i, full in self.full.items():
            if i in owner:
                assert full, f"cached index {i} has no full KV (freed under the tree)"
                live = not owner[i].swa_tombstone
                assert self.swa[i] == live, f"index {i}: SWA held={self.swa[i]}, live={live}"
            elif i in kept:
                assert full, f"caller's index {i} was freed by the cache"
            else:
                assert not full and not self.swa[i], f"index {i} leaked (held by nobody)"
        assert_swa_sizes(cache)


def assert_swa_sizes(cache: RadixCache) -> None:
    """``check_invariants`` plus the size identities of SWA mode, recomputed from the tree."""
    cache.check_invariants()
    nodes = live_nodes(cache)
    live = sum(len(n) for n in nodes if not n.swa_tombstone)
    swa_locked = sum(len(n) for n in nodes if not n.swa_tombstone and n.swa_lock_ref > 0)
    assert cache.total_size() == sum(len(n) for n in nodes)
    assert cache.evictable_size() + cache.protected_size() == cache.total_size()
    assert cache.swa_evictable_size() + cache.swa_protected_size() == live
    assert cache.swa_protected_size() == swa_locked
    assert not any(n.swa_tombstone and not n.children for n in nodes), "a tombstone leaf"


class SwaNodeRecord(NamedTuple):
    """A node as plain values, SWA fields included."""

    base: NodeRecord
    swa_tombstone: bool
    swa_lock_ref: int


class SwaSnapshot(NamedTuple):
    """A plain-value picture of an SWA cache: nodes, all four size counters."""

    nodes: tuple[SwaNodeRecord, ...]
    sizes: tuple[int, int, int, int, int]


def swa_snapshot(cache: RadixCache) -> SwaSnapshot:
    """``snapshot`` plus tombstones, SWA lock counts and the SWA size counters."""
    nodes = sorted(all_nodes(cache), key=lambda n: n.id)
    return SwaSnapshot(
        tuple(SwaNodeRecord(record(n), n.swa_tombstone, n.swa_lock_ref) for n in nodes),
        (
            cache.evictable_size(),
            cache.protected_size(),
            cache.total_size(),
            cache.swa_evictable_size(),
            cache.swa_protected_size(),
        ),
    )


@contextmanager
def refused_unchanged(
    cache: RadixCache, error: type[BaseException], match: str | None = None
) -> Iterator[None]:
    """The block raises ``error`` (its message matching ``match``) and leaves ``cache`` as it
    was, SWA fields included: bad input loses nothing."""
    before = swa_snapshot(cache)
    with pytest.raises(error, match=match):
        yield
    assert swa_snapshot(cache) == before


SWA_PAGES = pytest.mark.parametrize("page", [1, 4])
"""A test of the SWA mode at each page size it runs at."""
SWA_SHAPES = pytest.mark.parametrize(
    ("page", "window"), [(page, window) for page in (1, 4) for window in (1, 2, 4, 8)]
)
"""A test of the SWA mode at each page size and window it runs at."""


@dataclass
class SwaHarness:
    """A RadixCache in SWA mode on a HybridPool, with an ``on_node_evict`` log.

    ``put`` plays a serving engine's caller: the first ``prev_prefix_len`` indices are the
    tree's own (from a match), the rest fresh; it drops the SWA KV of its fresh indices
    below ``swa_evicted_seqlen`` first, and frees its unaligned tail after the insert (the
    cache owns ``value[prev_prefix_len:aligned]``).
    """

    cache: RadixCache
    pool: HybridPool
    evicted_ids: list[int] = field(default_factory=list)

    @classmethod
    def make(cls, page_size: int, window: int) -> SwaHarness:
        pool = HybridPool()
        evicted: list[int] = []
        cache = RadixCache(
            page_size=page_size,
            sliding_window_size=window,
            token_to_kv_pool_allocator=pool,
            on_node_evict=evicted.append,
        )
        pool.guard = cache
        return cls(cache, pool, evicted)

    def value_for(
        self, tokens: Sequence[Token], prev_prefix_len: int = 0, swa_evicted_seqlen: int = 0
    ) -> torch.Tensor:
        """The caller's row: the tree's indices of the matched prefix, then fresh ones."""
        prefix = self.pool.alloc(0)
        if prev_prefix_len:
            prefix = self.match(tokens).indices[:prev_prefix_len]
            assert prefix.numel() == prev_prefix_len, "prev_prefix_len beyond the cached match"
        fresh = self.pool.alloc(len(tokens) - prev_prefix_len)
        dropped = max(0, swa_evicted_seqlen - prev_prefix_len)
        self.pool.caller_free_swa(fresh[:dropped])
        return torch.cat([prefix, fresh])

    def put(
        self, tokens: Sequence[Token], *, prev_prefix_len: int = 0, swa_evicted_seqlen: int = 0
    ) -> InsertResult:
        value = self.value_for(tokens, prev_prefix_len, swa_evicted_seqlen)
        result = self.cache.insert(
            RadixKey(list(tokens)),
            value,
            prev_prefix_len=prev_prefix_len,
            swa_evicted_seqlen=swa_evicted_seqlen,
        )
        aligned = len(tokens) // self.cache.page_size * self.cache.page_size
        self.pool.caller_free(value[aligned:])
        return result

    def match(self, tokens: Sequence[Token]) -> MatchResult:
        return self.cache.match_prefix(RadixKey(list(tokens)))

    def check(self) -> None:
        """No index leaked or freed twice; the invariants and SWA sizes hold."""
        self.pool.assert_no_leak(self.cache)

    def chain(
        self, lengths: Sequence[int], tombstones: Sequence[int] = (), base: int = 1000
    ) -> list[TreeNode]:
        """A chain of nodes with these lengths (tokens ``base, base+1, ...``); the nodes at
        the positions in ``tombstones`` are tombstoned through phase-2 eviction.

        Every node ends up with the same recency; ids grow with depth. Each tombstone is
        made top down: the live nodes above it are locked so that phase 2 picks it first.
        """
        tokens = list(range(base, base + sum(lengths)))
        end = 0
        for n in lengths:
            end += n
            self.put(tokens[:end])
        nodes = path_nodes(self.match(tokens).last_node)
        assert [len(n) for n in nodes[-len(lengths) :]] == list(lengths)
        nodes = nodes[-len(lengths) :]
        assert len(lengths) - 1 not in tombstones, "leaves are never tombstones"
        for i in sorted(tombstones):
            keep = [n for n in nodes[:i] if not n.swa_tombstone]
            handles = [(n, self.cache.inc_lock_ref(n)) for n in keep]
            result = self.cache.evict(0, len(nodes[i]))
            assert result.swa_evicted == len(nodes[i]) and nodes[i].swa_tombstone
            for locked, handle in handles:
                self.cache.dec_lock_ref(locked, handle)
        return nodes


def path_nodes(node: TreeNode) -> list[TreeNode]:
    """The root path ending at ``node``, top down, root excluded."""
    out: list[TreeNode] = []
    while node.parent is not None:
        out.append(node)
        node = node.parent
    return out[::-1]


def held(*nodes: TreeNode) -> list[int]:
    """The KV indices the given nodes hold, in order."""
    out: list[int] = []
    for node in nodes:
        assert node.value is not None, f"node {node.id} was evicted"
        out.extend(ids(node.value))
    return out


def tombstoned(node: TreeNode) -> bool:
    """Whether ``node`` is a tombstone now (a call, so type checkers do not narrow it)."""
    return node.swa_tombstone


Key = TypeVar("Key")


def play_five_leaves(
    keys: Sequence[Key],
    insert: Callable[[Key, int], object],
    match: Callable[[Key], object],
) -> None:
    """The eviction-policy example: five two-page leaves A..E (``keys``) inserted, matched
    and given priorities so that each policy's first victim is a different one (LRU: C,
    LFU: D, FIFO: A, MRU: B, priority: E). ``insert(key, priority)``, ``match(key)``."""
    a, b, c, d, e = keys
    for key in (a, b, c):
        insert(key, 0)
    match(c)
    match(a)
    match(a)
    insert(d, 0)
    insert(e, -1)
    match(b)


def fixed_search(max_examples: int, steps: int, *, shrink: bool = True) -> settings:
    """A kit test's search: ``max_examples`` runs of up to ``steps`` steps, the same draws
    every time, no deadline and no example database; the loaded profile's phases. Without
    ``shrink``, a finding is kept as drawn: the test asks whether a bug is found, not for its
    shortest trace."""
    drawn = settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        derandomize=True,
    )
    return drawn if shrink else settings(drawn, phases=[Phase.explicit, Phase.generate])


def peer_adapter(module: str, engine: str) -> ModuleType:
    """A kit adapter of an engine that may be absent: skipped with the loader's reason."""
    try:
        return importlib.import_module(f"radixkv_conformance.adapters.{module}")
    except ImportError as missing:
        pytest.skip(f"{engine} is not importable: {missing}")


class RecordingHost:
    """The kit's host for a peer adapter's direct tests: it records, in order, what the cache
    frees and which state slots it frees and copies (``events``). A host without ``slots``
    fails a test whose cache asks for one."""

    def __init__(
        self, page_size: int = 2, sliding_window: int | None = None, *, slots: bool = True
    ) -> None:
        self.page_size = page_size
        self.sliding_window = sliding_window
        self.slots = slots
        self.events: list[tuple[str, Any]] = []
        self.next_slot = 100

    def free(self, indices: tuple[int, ...]) -> None:
        self.events.append(("free", tuple(indices)))

    __call__ = free

    def free_swa(self, indices: tuple[int, ...]) -> None:
        self.events.append(("free_swa", tuple(indices)))

    def alloc_slot(self) -> int:
        assert self.slots, "this cache has no state slots"
        self.next_slot += 1
        return self.next_slot

    def free_slot(self, slot: int) -> None:
        self.events.append(("slot", slot))

    def copy_state(self, src: int, dst: int) -> None:
        assert self.slots, "this cache has no state slots"
        self.events.append(("copy", (src, dst)))

    @property
    def freed(self) -> list[tuple[int, ...]]:
        """The full KV each ``free`` call gave back, in order."""
        return [indices for kind, indices in self.events if kind == "free"]

    @property
    def freed_swa(self) -> list[tuple[int, ...]]:
        """The sliding-window KV each ``free_swa`` call gave back, in order."""
        return [indices for kind, indices in self.events if kind == "free_swa"]

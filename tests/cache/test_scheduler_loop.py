"""One scheduler loop, written once, over every cache of the family (SPEC.md, one calling
convention).

An engine's scheduler is written once and runs on whichever cache the server was started
with. ``serve`` below is that scheduler: probe every waiting request to order the queue
(longest prefix first, sglang's LPM policy), then for each request match asking for its
state copy (``cow=True``), lock, allocate, insert with every family keyword, free what the
caller still owns, unlock, evict. It runs unchanged over RadixCache
(page 1 and 16), RadixCache with a sliding window, MambaRadixCache and ChunkCache, and the
pools check that no index or state slot leaks and none is freed twice.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from radixkv import (
    BasePrefixCache,
    ChunkCache,
    DoubleFreeError,
    KVIndexAllocator,
    LockError,
    MambaRadixCache,
    MambaStatePool,
    MambaTreeNode,
    RadixCache,
    RadixKey,
    TokenTypeError,
    TreeNode,
    UsageError,
)

KV_POOL = 2048
STATE_POOL = 24


class HybridAllocator(KVIndexAllocator):
    """A KV pool whose indices also hold sliding-window KV (``free_swa`` drops only that).

    A second ``free_swa`` of an index, or one of an index not allocated, is a double free.
    """

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.swa_held: set[int] = set()

    def alloc(self, n: int) -> torch.Tensor | None:
        out = super().alloc(n)
        if out is not None:
            self.swa_held.update(out.tolist())
        return out

    def free(self, indices: torch.Tensor) -> None:
        super().free(indices)
        self.swa_held.difference_update(indices.tolist())

    def free_swa(self, indices: torch.Tensor) -> None:
        batch = indices.tolist()
        if not set(batch) <= self.swa_held or len(set(batch)) != len(batch):
            raise DoubleFreeError(f"free_swa of SWA KV not held: {batch}")
        self.swa_held.difference_update(batch)


@dataclass
class Running:
    """A request between its match and its insert: what the scheduler holds for it."""

    key: RadixKey
    last_node: Any
    handle: Any  # what inc_lock_ref returned (swa_boundary_id with a sliding window)
    cached_len: int  # the match's prefix_len: the tree's own indices, locked
    kv: torch.Tensor
    slot: int | None


def serve(
    cache: BasePrefixCache,
    kv_pool: KVIndexAllocator,
    state_pool: MambaStatePool | None,
    batches: Sequence[Sequence[list[int]]],
    on_step: Callable[[], None],
    trim: int = 8,
) -> int:
    """The scheduler: each batch is admitted whole, then finished whole, then ``trim``
    tokens (and a quarter as many SWA tokens or state slots) are evicted. Returns how many
    prompt tokens were served from the cache.

    Ownership after ``insert`` (SPEC.md): the tree holds ``kv[:prefix_len]`` already and
    adopts the aligned new part; the caller frees its duplicates
    ``[cached_len, prefix_len)`` (a sliding-window cache frees them itself) and the
    unaligned tail. A cache that returns no ``last_node`` (ChunkCache) took nothing. A state
    slot stays the caller's when ``mamba_exist`` says the tree had one already.
    """
    hits = 0
    for batch in batches:
        running = [
            _admit(cache, kv_pool, state_pool, tokens) for tokens in _by_prefix(cache, batch)
        ]
        for request in running:
            hits += request.cached_len
            _finish(cache, kv_pool, state_pool, request)
        cache.evict(trim, swa_num_tokens=trim // 4)
        on_step()
    return hits


def _by_prefix(cache: BasePrefixCache, waiting: Sequence[list[int]]) -> list[list[int]]:
    """The waiting queue, longest cached prefix first: a probe of every request, twice (as
    a scheduler step repeats it), that must take nothing from any pool."""
    for _ in range(2):
        lengths = [cache.match_prefix(RadixKey(tokens)).prefix_len for tokens in waiting]
    order = sorted(range(len(waiting)), key=lambda i: -lengths[i])
    return [waiting[i] for i in order]


def _admit(
    cache: BasePrefixCache,
    kv_pool: KVIndexAllocator,
    state_pool: MambaStatePool | None,
    tokens: list[int],
) -> Running:
    key = RadixKey(tokens)
    match = cache.match_prefix(key, cow=True)  # the request runs: its own state copy
    handle = cache.inc_lock_ref(match.last_node)
    fresh = _alloc(cache, kv_pool, len(tokens) - match.prefix_len)
    slot = match.cow_slot
    if slot is None and state_pool is not None:
        slot = state_pool.alloc_track_slot()
        if slot is None:
            cache.evict(0, swa_num_tokens=1)
            slot = state_pool.alloc_track_slot()
        assert slot is not None, "the state pool is exhausted"
    kv = torch.cat([match.indices, fresh])
    return Running(key, match.last_node, handle, match.prefix_len, kv, slot)


def _alloc(cache: BasePrefixCache, kv_pool: KVIndexAllocator, n: int) -> torch.Tensor:
    fresh = kv_pool.alloc(n)
    if fresh is None:
        cache.evict(n - kv_pool.available_size())
        fresh = kv_pool.alloc(n)
    assert fresh is not None, "the KV pool is exhausted"
    return fresh


def _finish(
    cache: BasePrefixCache,
    kv_pool: KVIndexAllocator,
    state_pool: MambaStatePool | None,
    request: Running,
) -> None:
    result = cache.insert(
        request.key,
        request.kv,
        prev_prefix_len=request.cached_len,
        swa_evicted_seqlen=0,
        mamba_value=request.slot,
    )
    kv = request.kv
    if result.last_node is None:  # the tree took nothing: everything new is ours
        kv_pool.free(kv[request.cached_len :])
    else:
        page_size: int = getattr(cache, "page_size", 1)
        aligned = len(kv) // page_size * page_size
        if not getattr(cache, "supports_swa", False):
            kv_pool.free(kv[request.cached_len : result.prefix_len])
        kv_pool.free(kv[aligned:])
    if request.slot is not None and state_pool is not None and result.mamba_exist:
        state_pool.free_track_slot(request.slot)
    cache.dec_lock_ref(request.last_node, swa_boundary_id=request.handle)


def _requests(page_size: int, seed: int) -> list[list[list[int]]]:
    """Batches of two or three prompts sharing a few system prompts, some unaligned."""
    rng = random.Random(seed)
    stems = [[rng.randrange(1000) for _ in range(rng.randrange(8, 48))] for _ in range(4)]
    batches = []
    for _ in range(30):
        batch = []
        for _ in range(rng.randrange(2, 4)):
            stem = rng.choice(stems)
            cut = rng.randrange(len(stem) + 1)
            tail = [rng.randrange(1000) for _ in range(rng.randrange(0, 3 * page_size))]
            batch.append(stem[:cut] + tail)
        batches.append(batch)
    return batches


CACHES: dict[str, Callable[[HybridAllocator, MambaStatePool | None], BasePrefixCache]] = {
    "radix-page-1": lambda pool, states: RadixCache(1, token_to_kv_pool_allocator=pool),
    "radix-page-16": lambda pool, states: RadixCache(16, token_to_kv_pool_allocator=pool),
    "swa-page-1": lambda pool, states: RadixCache(1, 4, token_to_kv_pool_allocator=pool),
    "swa-page-4": lambda pool, states: RadixCache(4, 8, token_to_kv_pool_allocator=pool),
    "mamba-page-1": lambda pool, states: MambaRadixCache(1, pool, states),
    "mamba-page-4": lambda pool, states: MambaRadixCache(4, pool, states),
    "chunk": lambda pool, states: ChunkCache(pool),
}


@pytest.mark.parametrize("name", sorted(CACHES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_scheduler_loop_runs_on_every_cache(name: str, seed: int) -> None:
    kv_pool = HybridAllocator(KV_POOL)
    states = MambaStatePool(STATE_POOL) if name.startswith("mamba") else None
    cache: BasePrefixCache = CACHES[name](kv_pool, states)
    page_size = getattr(cache, "page_size", 1)

    def conserved() -> None:
        # Between batches the caller holds nothing: every allocated index is the tree's.
        assert kv_pool.allocated_count() == cache.total_size()
        if getattr(cache, "supports_swa", False):
            live = cache.swa_evictable_size() + cache.swa_protected_size()
            assert len(kv_pool.swa_held) == live
        if isinstance(cache, MambaRadixCache):
            assert states is not None
            assert STATE_POOL - states.available_size() == len(cache.owned_slots())
        check = getattr(cache, "check_invariants", None)
        if check is not None:
            check()
        assert cache.protected_size() == 0, "a lock outlived its request"

    hits = serve(cache, kv_pool, states, _requests(page_size, seed), conserved)
    assert (hits > 0) == (name != "chunk")  # a radix cache shared prefixes
    cache.evict(KV_POOL, swa_num_tokens=KV_POOL)
    assert kv_pool.allocated_count() == 0 and cache.total_size() == 0
    assert not kv_pool.swa_held
    if states is not None:
        assert states.available_size() == STATE_POOL


def test_the_loop_shares_prefixes_where_the_cache_can() -> None:
    """The loop is not vacuous: a radix cache hands the second request its cached prefix."""
    kv_pool = HybridAllocator(64)
    cache = RadixCache(1, token_to_kv_pool_allocator=kv_pool)
    hits = serve(cache, kv_pool, None, [[[1, 2, 3, 4]], [[1, 2, 3, 9]]], lambda: None, trim=0)
    assert hits == 3
    assert cache.total_size() == 5 and kv_pool.allocated_count() == 5
    assert cache.match_prefix(RadixKey([1, 2, 3])).prefix_len == 3


@pytest.mark.parametrize("node_class", [TreeNode, MambaTreeNode])
def test_nodes_construct_with_the_seed_defaults(node_class: type[TreeNode]) -> None:
    node = node_class()
    assert node.key is None, "the seed's default key is None, not an empty key"
    assert node.parent is None and node.value is None and node.evicted
    assert (node.lock_ref, node.hit_count, node.id, len(node)) == (0, 0, 1, 0)
    assert node.tokens == () and node.extra_key is None
    assert node.hash_values is None and node.children == {}
    assert "key=None" in repr(node)
    if isinstance(node, MambaTreeNode):
        assert node.mamba_value is None and node.mamba_lock_ref == 0
        assert node.prev is None and node.next is None


@pytest.mark.parametrize("node_class", [TreeNode, MambaTreeNode])
def test_a_node_without_a_key_can_be_given_one_and_lose_it(node_class: type[TreeNode]) -> None:
    node = node_class()
    node.key = RadixKey([4, 5], "ns")
    assert node.key is not None
    assert (tuple(node.key.token_ids), node.key.extra_key, len(node)) == ((4, 5), "ns", 2)
    assert "key=[4, 5]" in repr(node)
    node.key = None
    assert (node.key, node.tokens, node.extra_key) == (None, (), None)


@pytest.mark.parametrize("cache_class", [RadixCache, MambaRadixCache])
def test_tree_nodes_hold_keys_and_the_root_an_empty_one(
    cache_class: type[RadixCache | MambaRadixCache], capsys: pytest.CaptureFixture[str]
) -> None:
    """Only a node built with the seed's defaults has no key: a cache's root holds an empty
    key, every node it creates (leaves, split halves) a real one, and printing still works."""
    cache = cache_class(page_size=2)
    cache.insert(RadixKey([1, 2, 3, 4], "ns"), torch.arange(4), mamba_value=0)
    cache.insert(RadixKey([1, 2, 5, 6], "ns"), torch.arange(10, 14), mamba_value=1)
    assert cache.root.key is not None and tuple(cache.root.key.token_ids) == ()
    nodes = list(cache.tree.nodes())
    assert len(nodes) == 3  # the split's upper part [1, 2] and two leaves
    for node in nodes:
        assert node.key is not None and node.key.extra_key == "ns"
        assert tuple(node.key.token_ids) == node.tokens and len(node.key) == len(node) == 2
    cache.check_invariants()
    cache.pretty_print()
    printed = capsys.readouterr().out
    assert "key=[1, 2]" in printed and "key=[5, 6]" in printed and "key=None" not in printed


def _every_cache() -> list[BasePrefixCache]:
    return [
        RadixCache(),
        RadixCache(1, 4, token_to_kv_pool_allocator=HybridAllocator(8)),
        MambaRadixCache(),
        ChunkCache(),
    ]


@pytest.mark.parametrize("cache", _every_cache(), ids=type)
def test_every_cache_takes_cow_and_only_a_state_cache_fills_cow_slot(
    cache: BasePrefixCache,
) -> None:
    slot = {"mamba_value": 0} if isinstance(cache, MambaRadixCache) else {}
    cache.insert(RadixKey([1, 2]), torch.tensor([5, 6]), **slot)
    for cow in (False, True):
        result = cache.match_prefix(RadixKey([1, 2, 3]), cow=cow)
        assert result.cow_slot is None  # no state pool here: nothing to copy into
        assert result.prefix_len == (0 if isinstance(cache, ChunkCache) else 2)
    with pytest.raises(TokenTypeError, match="cow must be a bool"):
        cache.match_prefix(RadixKey([1, 2]), cow=1)  # type: ignore[arg-type]  # bad on purpose


@pytest.mark.parametrize("cache", _every_cache(), ids=type)
def test_unknown_keywords_stay_a_usage_error(cache: BasePrefixCache) -> None:
    with pytest.raises(UsageError, match="unexpected keyword"):
        cache.insert(RadixKey([1]), torch.tensor([1]), mamba_slot=3)
    with pytest.raises(UsageError, match="unexpected keyword"):
        cache.dec_lock_ref(None, boundary=1)


@pytest.mark.parametrize("cache", _every_cache(), ids=type)
@pytest.mark.parametrize(
    "keyword", [{"prev_prefix_len": -1}, {"swa_evicted_seqlen": -1}, {"mamba_value": -1}]
)
def test_family_keywords_are_checked_on_every_cache(
    cache: BasePrefixCache, keyword: dict[str, int]
) -> None:
    with pytest.raises(UsageError, match=next(iter(keyword))):
        cache.insert(RadixKey([1]), torch.tensor([1]), **keyword)
    assert cache.total_size() == 0  # rejected before any state changed


@pytest.mark.parametrize("cache", [RadixCache(), MambaRadixCache(), ChunkCache()], ids=type)
def test_a_cache_without_a_window_takes_back_only_none(cache: BasePrefixCache) -> None:
    slot = {"mamba_value": 0} if isinstance(cache, MambaRadixCache) else {}
    node = cache.insert(RadixKey([1, 2]), torch.tensor([5, 6]), **slot).last_node
    handle = cache.inc_lock_ref(node)
    assert handle is None
    if node is not None:
        with pytest.raises(LockError, match="no sliding window"):
            cache.dec_lock_ref(node, swa_boundary_id=7)
        assert cache.protected_size() == 2  # the rejected unlock changed nothing
    cache.dec_lock_ref(node, swa_boundary_id=handle)
    assert cache.protected_size() == 0


def test_radix_cache_leaves_the_state_slot_to_the_caller() -> None:
    cache = RadixCache()
    result = cache.insert(RadixKey([1, 2]), torch.tensor([5, 6]), mamba_value=3)
    assert result.prefix_len == 0 and not result.mamba_exist
    assert cache.total_size() == 2

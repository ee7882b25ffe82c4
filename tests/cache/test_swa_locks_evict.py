"""SWA mode: window locks with exact unlock, two-phase eviction, sizes, reset.

``inc_lock_ref`` full-locks the path and SWA-locks the live nodes from the node upwards
until they hold W tokens (stopping at a tombstone); ``dec_lock_ref`` undoes exactly that
window (sglang #24153, pymllm). Phase 1 of ``evict`` deletes leaves (and the
tombstones they leave as leaves, whole chains of them), phase 2 frees SWA KV LRU-first
(kvcache-ai PR #49). SPEC.md, SWA: locks and eviction.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from radixkv import (
    EvictResult,
    LockError,
    RadixCache,
    RadixKey,
    StaleNodeError,
    TreeNode,
    UsageError,
)
from radixkv.pools import KVAllocator
from tests.helpers import (
    SWA_PAGES,
    SWA_SHAPES,
    HybridPool,
    RecordingAllocator,
    SwaHarness,
    assert_swa_sizes,
    held,
    live_nodes,
    path_nodes,
    refused_unchanged,
    swa_snapshot,
    tombstoned,
)


def tokens_of(node_lengths: list[int], base: int = 1000) -> list[int]:
    return list(range(base, base + sum(node_lengths)))


# ---- construction --------------------------------------------------------------------------


class FullOnlyAllocator:
    def free(self, indices: torch.Tensor) -> None:
        raise AssertionError("never called")


class NotCallable:
    free_swa = 3

    def free(self, indices: torch.Tensor) -> None:
        raise AssertionError("never called")


@pytest.mark.parametrize("allocator", [FullOnlyAllocator(), NotCallable(), RecordingAllocator(8)])
def test_pymllm_8_4_an_allocator_without_free_swa_is_refused(allocator: KVAllocator) -> None:
    """pymllm: without free_swa, tombstoning fell back to free() (full KV) and a later
    eviction freed the same indices again. The cache refuses such an allocator up front."""
    with pytest.raises(UsageError, match=r"free_swa"):
        RadixCache(sliding_window_size=4, token_to_kv_pool_allocator=allocator)
    RadixCache(token_to_kv_pool_allocator=allocator)  # fine without a window


def test_no_allocator_is_allowed_in_swa_mode() -> None:
    cache = RadixCache(page_size=1, sliding_window_size=2, token_to_kv_pool_allocator=None)
    cache.insert(RadixKey([1, 2, 3]))
    cache.insert(RadixKey([1, 2, 3, 4, 5]))
    assert cache.evict(0, 3).swa_evicted == 3
    assert cache.evict(10).full_evicted == 5
    assert_swa_sizes(cache)


@SWA_PAGES
def test_pymllm_8_4_tombstoning_frees_only_swa_and_eviction_frees_full_once(page: int) -> None:
    h = SwaHarness.make(page, 1)
    top, _ = h.chain([2 * page, page])
    assert h.cache.evict(0, 2 * page) == EvictResult(full_evicted=0, swa_evicted=2 * page)
    assert top.swa_tombstone
    assert h.pool.swa_freed == held(top)
    assert not set(h.pool.freed) & set(held(top))
    h.check()
    everything = held(*live_nodes(h.cache))
    h.cache.evict(10**6)
    assert sorted(h.pool.freed[-len(everything) :]) == sorted(everything)
    assert not live_nodes(h.cache)
    h.check()


# ---- lock windows --------------------------------------------------------------------------


@SWA_SHAPES
def test_a_lock_swa_locks_the_live_nodes_up_to_w_tokens(page: int, window: int) -> None:
    h = SwaHarness.make(page, window)
    nodes = h.chain([page] * 6)
    before = swa_snapshot(h.cache)
    handle = h.cache.inc_lock_ref(nodes[-1])
    assert isinstance(handle, int)
    covered = min(6, math.ceil(window / page))
    assert [n.swa_lock_ref for n in nodes] == [0] * (6 - covered) + [1] * covered
    assert [n.lock_ref for n in nodes] == [1] * 6
    assert h.cache.swa_protected_size() == covered * page
    assert h.cache.swa_evictable_size() == (6 - covered) * page
    assert h.cache.protected_size() == 6 * page
    h.check()
    h.cache.dec_lock_ref(nodes[-1], handle)
    assert swa_snapshot(h.cache) == before
    h.check()


@SWA_SHAPES
def test_a_window_stops_at_a_tombstone(page: int, window: int) -> None:
    h = SwaHarness.make(page, window)
    nodes = h.chain([page, page, page, page], tombstones=[1])
    handle = h.cache.inc_lock_ref(nodes[3])
    covered = min(2, math.ceil(window / page))  # nodes 3 and 2 at most: node 1 is a tombstone
    assert [n.swa_lock_ref for n in nodes] == [0, 0] + [0] * (2 - covered) + [1] * covered
    assert [n.lock_ref for n in nodes] == [1, 1, 1, 1]  # the full lock goes to the root
    h.check()
    h.cache.dec_lock_ref(nodes[3], handle)
    assert all(n.swa_lock_ref == 0 and n.lock_ref == 0 for n in nodes)
    h.check()


@SWA_PAGES
def test_boundary_ids_are_distinct_ints(page: int) -> None:
    h = SwaHarness.make(page, 8)
    nodes = h.chain([page, page, page], tombstones=[0])
    handles = [h.cache.inc_lock_ref(n) for n in (nodes[1], nodes[2], nodes[2], nodes[1])]
    assert all(isinstance(x, int) for x in handles)
    assert len(set(handles)) == 4
    assert h.cache.inc_lock_ref(h.cache.root) is None
    h.check()
    for node, handle in zip((nodes[1], nodes[2], nodes[2], nodes[1]), handles, strict=True):
        h.cache.dec_lock_ref(node, handle)
    assert all(n.lock_ref == 0 and n.swa_lock_ref == 0 for n in nodes)
    h.check()


@SWA_SHAPES
def test_overlapping_windows_unlock_independently(page: int, window: int) -> None:
    h = SwaHarness.make(page, window)
    nodes = h.chain([page] * 5)
    tokens = tokens_of([page] * 5)
    branch = h.put([*tokens[: 3 * page], *range(5000, 5000 + 2 * page)]).last_node
    a = h.cache.inc_lock_ref(nodes[-1])
    b = h.cache.inc_lock_ref(branch)
    c = h.cache.inc_lock_ref(nodes[2])
    h.check()
    for node, handle in ((branch, b), (nodes[-1], a), (nodes[2], c)):
        h.cache.dec_lock_ref(node, handle)
        h.check()
    assert all(n.swa_lock_ref == 0 and n.lock_ref == 0 for n in live_nodes(h.cache))


@SWA_SHAPES
def test_a_window_survives_splits(page: int, window: int) -> None:
    """The window is recorded by token position, so nodes split inside it (by a match or an
    insert) are unlocked too, and nodes split off above it were never in it."""
    h = SwaHarness.make(page, window)
    nodes = h.chain([4 * page, 4 * page])
    tokens = tokens_of([4 * page, 4 * page])
    handle = h.cache.inc_lock_ref(nodes[1])
    h.match(tokens[: 6 * page])  # split the locked leaf
    h.match(tokens[: 2 * page])  # split the top node
    h.match(tokens[: 7 * page])
    value = torch.cat(
        [torch.tensor(held(*path_nodes(nodes[1]))[: 5 * page]), h.pool.alloc(3 * page)]
    )
    h.cache.insert(RadixKey(tokens), value, prev_prefix_len=5 * page)  # a split at 5 pages
    assert len(live_nodes(h.cache)) == 6
    windows = [n.swa_lock_ref for n in path_nodes(nodes[1])]
    lengths = [len(n) for n in path_nodes(nodes[1])]
    assert lengths == [2 * page, 2 * page, page, page, page, page]
    # taken on [4 pages][4 pages]: the leaf alone if it holds W tokens, else both
    assert windows == ([0, 0, 1, 1, 1, 1] if 4 * page >= window else [1] * 6)
    h.check()
    h.cache.dec_lock_ref(nodes[1], handle)
    assert all(n.swa_lock_ref == 0 and n.lock_ref == 0 for n in live_nodes(h.cache))
    h.check()


@SWA_PAGES
def test_sglang_24153_no_tombstone_is_revived_inside_a_locked_path(page: int) -> None:
    """sglang #24153 / pymllm: inc skipped tombstones, dec did not, and a tombstone
    revived between them underflowed swa_lock_ref. Here a window never holds a tombstone,
    and a tombstone on a locked path is not revived (lock_ref > 0), so inc and dec touch
    the same nodes; once unlocked, the revived node may join a later window."""
    h = SwaHarness.make(page, 8 * page)
    top, tomb, leaf = h.chain([page, 2 * page, page], tombstones=[1])
    handle = h.cache.inc_lock_ref(leaf)
    assert (top.swa_lock_ref, tomb.swa_lock_ref, leaf.swa_lock_ref) == (0, 0, 1)
    h.put(tokens_of([page, 2 * page, page]))  # would revive the tombstone: it is locked
    assert tomb.swa_tombstone
    h.check()
    h.cache.dec_lock_ref(leaf, handle)
    assert (top.swa_lock_ref, tomb.swa_lock_ref, leaf.swa_lock_ref) == (0, 0, 0)
    h.check()
    h.put(tokens_of([page, 2 * page, page]))  # unlocked: revived
    assert not tombstoned(tomb)
    handle = h.cache.inc_lock_ref(leaf)
    assert (top.swa_lock_ref, tomb.swa_lock_ref, leaf.swa_lock_ref) == (1, 1, 1)
    h.cache.dec_lock_ref(leaf, handle)
    assert (top.swa_lock_ref, tomb.swa_lock_ref, leaf.swa_lock_ref) == (0, 0, 0)
    h.check()


@SWA_PAGES
def test_none_undoes_the_newest_lock_on_the_node(page: int) -> None:
    h = SwaHarness.make(page, 2 * page)
    nodes = h.chain([page, page, page])
    first = h.cache.inc_lock_ref(nodes[2])
    second = h.cache.inc_lock_ref(nodes[2])
    h.cache.dec_lock_ref(nodes[2])  # undoes `second`
    with pytest.raises(LockError):
        h.cache.dec_lock_ref(nodes[2], second)
    assert nodes[2].lock_ref == 1 and nodes[2].swa_lock_ref == 1
    h.cache.dec_lock_ref(nodes[2], first)
    with refused_unchanged(h.cache, LockError):
        h.cache.dec_lock_ref(nodes[2])
    h.check()


@SWA_PAGES
def test_a_wrong_boundary_id_is_a_lock_error_and_changes_nothing(page: int) -> None:
    h = SwaHarness.make(page, 2)
    nodes = h.chain([page, page, page])
    other = h.put(tokens_of([page]) + list(range(7000, 7000 + page))).last_node
    mine = h.cache.inc_lock_ref(nodes[2])
    theirs = h.cache.inc_lock_ref(other)
    assert mine is not None and theirs is not None
    before = swa_snapshot(h.cache)
    cases = [
        (nodes[2], theirs),  # another node's lock
        (nodes[2], 10**6),  # never issued
        (nodes[1], mine),  # an ancestor of the locked node
        (nodes[1], None),  # a node that holds no lock
        (nodes[0], None),
    ]
    for node, bad in cases:
        with pytest.raises(LockError):
            h.cache.dec_lock_ref(node, bad)
        assert swa_snapshot(h.cache) == before
    h.cache.dec_lock_ref(nodes[2], mine)
    with pytest.raises(LockError):
        h.cache.dec_lock_ref(nodes[2], mine)  # released already
    h.cache.dec_lock_ref(other, theirs)
    h.check()


@SWA_PAGES
def test_locking_a_tombstone_is_refused_and_changes_nothing(page: int) -> None:
    h = SwaHarness.make(page, 2)
    nodes = h.chain([page, page, page], tombstones=[1])
    with refused_unchanged(h.cache, UsageError, match=r"tombstone"):
        h.cache.inc_lock_ref(nodes[1])
    h.check()


# ---- eviction ----------------------------------------------------------------------------


@SWA_PAGES
def test_phase_1_deletes_a_leaf_and_the_chain_of_tombstones_above_it(page: int) -> None:
    """pymllm deleted only one tombstone level; a tombstone left as a leaf can never be
    matched, so every tombstone ancestor left childless goes too (full KV counted, no SWA)."""
    h = SwaHarness.make(page, 1)
    top, t1, t2, t3, leaf = h.chain([page, 2 * page, page, page, page], tombstones=[1, 2, 3])
    doomed = held(leaf, t3, t2, t1)
    mark, swa_calls = len(h.pool.freed), len(h.pool.free_swa_calls)
    result = h.cache.evict(1)
    assert result == EvictResult(full_evicted=5 * page, swa_evicted=page)
    assert h.evicted_ids == [leaf.id, t3.id, t2.id, t1.id]
    assert sorted(h.pool.freed[mark:]) == sorted(doomed)  # with free: full (+ SWA if held)
    assert len(h.pool.free_swa_calls) == swa_calls
    assert live_nodes(h.cache) == [top]
    h.check()


@SWA_PAGES
def test_phase_1_cascade_stops_at_a_live_parent_and_at_a_branching_tombstone(page: int) -> None:
    h = SwaHarness.make(page, 1)
    top, tomb, leaf = h.chain([page, page, page], tombstones=[1])
    sibling_key = [*tokens_of([page, page]), *range(9000, 9000 + page)]
    # the caller matched [top] and holds no SWA KV below 2 pages: the tombstone stays one
    sibling = h.put(sibling_key, prev_prefix_len=page, swa_evicted_seqlen=2 * page).last_node
    assert sibling.parent is tomb and tomb.swa_tombstone
    h.match(sibling_key)  # the sibling is newer
    assert h.cache.evict(1) == EvictResult(full_evicted=page, swa_evicted=page)
    assert h.evicted_ids == [leaf.id]
    assert tomb.swa_tombstone and not tomb.evicted  # still has a child
    h.check()
    assert h.cache.evict(1) == EvictResult(full_evicted=2 * page, swa_evicted=page)
    assert h.evicted_ids == [leaf.id, sibling.id, tomb.id]
    assert live_nodes(h.cache) == [top]
    h.check()


@SWA_PAGES
def test_phase_2_tombstones_internal_nodes_lru_first_and_stops_at_the_target(page: int) -> None:
    h = SwaHarness.make(page, 1)
    a, b, c, leaf = h.chain([2 * page, page, page, page])
    result = h.cache.evict(0, 3 * page)
    assert result == EvictResult(full_evicted=0, swa_evicted=3 * page)
    assert [n.swa_tombstone for n in (a, b, c, leaf)] == [True, True, False, False]
    assert h.pool.swa_freed == held(a) + held(b)
    assert not set(h.pool.freed) & set(held(a, b))
    assert h.cache.total_size() == 5 * page
    assert h.cache.swa_evictable_size() == 2 * page
    h.check()


@SWA_PAGES
def test_phase_2_deletes_a_leaf_whole_and_cascades(page: int) -> None:
    h = SwaHarness.make(page, 1)
    a, b, leaf = h.chain([2 * page, page, page])
    result = h.cache.evict(0, 10**6)
    # a, b tombstoned (3 pages SWA), then the leaf deleted (1 page full + SWA), then the
    # tombstones b, a left as leaves deleted (3 pages full, 0 SWA)
    assert result == EvictResult(full_evicted=4 * page, swa_evicted=4 * page)
    assert h.evicted_ids == [leaf.id, b.id, a.id]
    assert not live_nodes(h.cache)
    h.check()


@SWA_PAGES
def test_both_phases_in_one_call_and_phase_2_skipped_when_phase_1_freed_enough(
    page: int,
) -> None:
    h = SwaHarness.make(page, 1)
    old = h.put(list(range(100, 100 + 2 * page))).last_node
    a, _ = h.chain([page, page])
    assert h.cache.evict(page, page) == EvictResult(full_evicted=2 * page, swa_evicted=2 * page)
    assert h.evicted_ids == [old.id]  # phase 1 alone met both targets
    assert not a.swa_tombstone
    h.check()
    assert h.cache.evict(0, page) == EvictResult(full_evicted=0, swa_evicted=page)
    assert tombstoned(a)
    h.check()


@SWA_SHAPES
def test_kvcache_ai_pr_49_swa_eviction_with_a_full_locked_path(page: int, window: int) -> None:
    """kvcache-ai/sglang PR #49: SWA-only eviction crashed on nodes with full_lock > 0 and
    swa_lock == 0. Here they are tombstoned (internal), the window is untouched (the pool's
    guard refuses free_swa of SWA-locked KV), the locked leaf is never deleted."""
    h = SwaHarness.make(page, window)
    nodes = h.chain([page] * 5)
    other = h.put(list(range(8000, 8000 + 2 * page))).last_node
    handle = h.cache.inc_lock_ref(nodes[-1])
    covered = min(5, math.ceil(window / page))
    result = h.cache.evict(0, 10**6)
    outside = (5 - covered) * page
    assert result == EvictResult(full_evicted=2 * page, swa_evicted=outside + 2 * page)
    assert other.evicted
    assert [n.swa_tombstone for n in nodes] == [True] * (5 - covered) + [False] * covered
    assert not any(n.evicted for n in nodes)
    assert h.cache.swa_evictable_size() == 0
    assert h.cache.swa_protected_size() == covered * page
    h.check()
    assert h.cache.evict(10**6, 10**6) == EvictResult()  # nothing more is evictable
    h.cache.dec_lock_ref(nodes[-1], handle)
    h.check()
    result = h.cache.evict(10**6)
    assert result.full_evicted == 5 * page and result.swa_evicted == covered * page
    assert not live_nodes(h.cache)
    h.check()


@SWA_PAGES
def test_a_full_locked_internal_node_outside_every_window_is_tombstoned_not_deleted(
    page: int,
) -> None:
    h = SwaHarness.make(page, 1)
    top, leaf = h.chain([page, page])
    handle = h.cache.inc_lock_ref(leaf)
    assert h.cache.evict(0, page) == EvictResult(full_evicted=0, swa_evicted=page)
    assert top.swa_tombstone and not top.evicted
    assert h.match(tokens_of([page, page])).prefix_len == 2 * page  # W=1: the leaf suffices
    h.cache.dec_lock_ref(leaf, handle)
    h.check()


# ---- sizes through a random workload, and reset -------------------------------------------


def random_workload(h: SwaHarness, rng: random.Random, steps: int) -> None:
    """Inserts (as a caller: match, lock, recompute, insert with prev_prefix_len and a random
    swa_evicted_seqlen, unlock), matches, locks, unlocks and evictions, checking the pool and
    the sizes after every step."""
    p = h.cache.page_size
    held_locks: list[tuple[TreeNode, int | None]] = []
    for _ in range(steps):
        op = rng.random()
        key = [rng.randrange(3) for _ in range(rng.randrange(1, 7) * p + rng.randrange(p))]
        if op < 0.4:
            match = h.match(key)
            lock = h.cache.inc_lock_ref(match.last_node)
            aligned = len(key) // p * p
            swa = rng.randrange(0, aligned + p + 1, p) if rng.random() < 0.6 else 0
            value = torch.cat([match.indices, h.pool.alloc(len(key) - match.prefix_len)])
            h.pool.caller_free_swa(value[match.prefix_len : max(swa, match.prefix_len)])
            h.cache.insert(
                RadixKey(key), value, prev_prefix_len=match.prefix_len, swa_evicted_seqlen=swa
            )
            h.pool.caller_free(value[aligned:])
            h.cache.dec_lock_ref(match.last_node, lock)
        elif op < 0.55:
            h.match(key)
        elif op < 0.7:
            candidates = [n for n in live_nodes(h.cache) if not n.swa_tombstone]
            if candidates:
                node = rng.choice(candidates)
                held_locks.append((node, h.cache.inc_lock_ref(node)))
        elif op < 0.8:
            if held_locks:
                node, handle = held_locks.pop(rng.randrange(len(held_locks)))
                h.cache.dec_lock_ref(node, handle)
        else:
            h.cache.evict(rng.randrange(3 * p), rng.randrange(4 * p))
        h.check()
    for node, handle in held_locks:
        h.cache.dec_lock_ref(node, handle)
    h.check()


@pytest.mark.parametrize("seed", range(6))
@SWA_SHAPES
def test_sizes_and_conservation_hold_after_every_operation(
    seed: int, page: int, window: int
) -> None:
    h = SwaHarness.make(page, window)
    random_workload(h, random.Random(seed * 100 + page * 10 + window), 80)
    h.cache.evict(10**6, 10**6)
    assert not live_nodes(h.cache)
    assert not any(h.pool.full.values()) and not any(h.pool.swa.values())


@SWA_PAGES
def test_reset_frees_every_full_index_once_and_no_swa_twice(page: int) -> None:
    h = SwaHarness.make(page, 2)
    nodes = h.chain([page, 2 * page, page, page], tombstones=[1])
    h.put(list(range(6000, 6000 + 3 * page)))
    h.check()
    cached = held(*live_nodes(h.cache))
    count = len(live_nodes(h.cache))
    swa_calls = list(h.pool.free_swa_calls)
    h.pool.free_calls.clear()
    h.cache.reset()
    assert sorted(h.pool.freed) == sorted(cached)  # each exactly once, tombstones included
    assert h.pool.free_swa_calls == swa_calls  # no free_swa on reset (free covers it)
    assert not any(h.pool.full.values()) and not any(h.pool.swa.values())
    assert (h.cache.total_size(), h.cache.evictable_size(), h.cache.protected_size()) == (0, 0, 0)
    assert (h.cache.swa_evictable_size(), h.cache.swa_protected_size()) == (0, 0)
    assert len(h.evicted_ids) == count
    assert not live_nodes(h.cache)
    h.check()
    with pytest.raises(StaleNodeError):
        h.cache.inc_lock_ref(nodes[-1])
    h.put(tokens_of([page, page]))  # usable again
    h.check()


@SWA_PAGES
def test_reset_with_an_outstanding_lock_leaves_no_stale_window(page: int) -> None:
    h = SwaHarness.make(page, 2)
    nodes = h.chain([page, page])
    handle = h.cache.inc_lock_ref(nodes[-1])
    h.pool.guard = None  # the caller quiesces first; here it did not
    h.cache.reset()
    assert_swa_sizes(h.cache)
    with pytest.raises(StaleNodeError):
        h.cache.dec_lock_ref(nodes[-1], handle)
    leaf = h.put(tokens_of([page, page])).last_node
    lock = h.cache.inc_lock_ref(leaf)
    assert lock != handle
    h.cache.dec_lock_ref(leaf, lock)
    h.check()


def test_hybrid_pool_refuses_double_frees() -> None:
    pool = HybridPool()
    idx = pool.alloc(3)
    pool.free_swa(idx[:1])
    with pytest.raises(AssertionError, match=r"SWA KV not held"):
        pool.free_swa(idx[:1])
    pool.free(idx)
    with pytest.raises(AssertionError, match=r"full KV not allocated"):
        pool.free(idx[1:2])
    with pytest.raises(AssertionError, match=r"SWA KV not held"):
        pool.free_swa(idx[2:])
    with pytest.raises(AssertionError, match=r"repeats"):
        pool.free(torch.tensor([5, 5]))

"""evict: LRU whole-leaf deletion, cascades, exact accounting, frees and callbacks."""

from __future__ import annotations

import pytest

from radixkv import EvictResult, RadixCache, RadixKey, UsageError
from tests.conftest import CacheFactory
from tests.helpers import CacheHarness, live_nodes, refused_unchanged, snapshot, tree_indices


def test_evicts_least_recently_used_leaf_first(harness: CacheHarness) -> None:
    h = harness
    a = h.put([1, 1]).last_node  # t=1
    b = h.put([2, 2, 2]).last_node  # t=2
    c = h.put([3]).last_node  # t=3
    h.match([1, 1])  # a is now the most recent
    assert h.cache.evict(1) == EvictResult(full_evicted=3)
    assert h.evicted_ids == [b.id]
    assert h.cache.evict(1) == EvictResult(full_evicted=1)
    assert h.evicted_ids == [b.id, c.id]
    assert h.cache.evict(1) == EvictResult(full_evicted=2)
    assert h.evicted_ids == [b.id, c.id, a.id]
    assert h.cache.total_size() == 0


def test_a_leaf_touched_after_an_eviction_is_not_taken_by_its_older_heap_entry(
    harness: CacheHarness,
) -> None:
    """The first eviction queues every leaf in the heap; touching one afterwards leaves its
    old entry behind, on top. The next eviction must see that entry is stale and take the
    least recently used leaf, not the one just touched."""
    h = harness
    h.put([9])  # t=1, the first victim
    a = h.put([1]).last_node  # t=2
    b = h.put([2]).last_node  # t=3
    h.put([3])  # t=4
    assert h.cache.evict(1) == EvictResult(full_evicted=1)  # [9]; a, b, c in the heap
    h.match([1])  # a is now the most recent; its heap entry (t=2) is stale
    h.cache.evict(1)
    assert h.evicted_ids[-1] == b.id
    assert not a.evicted


def test_a_parent_left_childless_becomes_a_candidate(harness: CacheHarness) -> None:
    h = harness
    leaf = h.put([1, 2, 3, 4]).last_node  # t=1
    parent = h.put([1, 2]).last_node  # t=2: split, parent [1, 2], leaf [3, 4]
    other = h.put([9]).last_node  # t=3
    assert leaf.parent is parent
    result = h.cache.evict(3)
    assert result.full_evicted == 4
    assert h.evicted_ids == [leaf.id, parent.id]
    assert [n.id for n in live_nodes(h.cache)] == [other.id]
    h.assert_conserved()


def test_a_more_recent_childless_parent_waits_its_turn(harness: CacheHarness) -> None:
    h = harness
    old = h.put([9]).last_node  # t=1
    leaf = h.put([1, 2, 3]).last_node  # t=2
    h.match([1])  # t=3: splits, the upper part [1] is now the most recent node
    parent = leaf.parent
    assert leaf.last_access_time == 2
    assert parent.last_access_time == 3
    assert h.cache.evict(1).full_evicted == 1
    assert h.evicted_ids == [old.id]
    assert h.cache.evict(1).full_evicted == 2
    assert h.evicted_ids == [old.id, leaf.id]
    assert h.cache.evict(1).full_evicted == 1
    assert h.evicted_ids == [old.id, leaf.id, parent.id]


def test_eviction_deletes_whole_nodes_and_may_overshoot(harness: CacheHarness) -> None:
    harness.put([1, 2, 3, 4, 5])
    assert harness.cache.evict(1).full_evicted == 5
    assert harness.cache.total_size() == 0
    assert sorted(harness.allocator.freed) == sorted(set(harness.allocator.freed))
    assert len(harness.allocator.freed) == 5


def test_overshoot_is_less_than_one_node(harness: CacheHarness) -> None:
    h = harness
    h.put([1, 1, 1])  # t=1
    h.put([2, 2, 2, 2])  # t=2
    h.put([3, 3])  # t=3
    assert h.cache.evict(4).full_evicted == 7  # 3 < 4, 3 + 4 >= 4
    assert h.cache.total_size() == 2


def test_full_evicted_is_exact_and_stops_when_nothing_is_left(harness: CacheHarness) -> None:
    h = harness
    h.put([1, 2, 3])
    h.put([1, 2, 3, 4, 5])
    h.put([7, 7])
    assert h.cache.evict(10**9) == EvictResult(full_evicted=7, swa_evicted=0, mamba_evicted=0)
    assert h.cache.evict(10) == EvictResult(full_evicted=0)
    assert (h.cache.evictable_size(), h.cache.protected_size(), h.cache.total_size()) == (0, 0, 0)


def test_evictable_size_drops_by_exactly_the_evicted_count(harness: CacheHarness) -> None:
    h = harness
    for tokens in ([1, 2, 3], [1, 2, 3, 4, 5], [1, 9], [6, 6, 6, 6]):
        h.put(tokens)
    while h.cache.total_size():
        before = h.cache.evictable_size()
        freed = h.cache.evict(1).full_evicted
        assert freed > 0
        assert h.cache.evictable_size() == before - freed
        h.assert_conserved()


def test_every_freed_index_goes_through_the_allocator_exactly_once(
    make_cache: CacheFactory,
) -> None:
    h = make_cache(page_size=2)
    for tokens in ([1, 2, 3, 4], [1, 2, 3, 4, 5, 6], [1, 2, 7, 8, 9], [5, 5, 5, 5, 5]):
        h.put(tokens)
    held = sorted(tree_indices(h.cache))
    result = h.cache.evict(10**6)
    assert result.full_evicted == len(held)
    assert sorted(h.allocator.freed) == held
    assert h.allocator.allocated_count() == 0


def test_on_node_evict_fires_once_per_deleted_node_and_never_for_live_ones(
    harness: CacheHarness,
) -> None:
    h = harness
    for tokens in ([1, 2, 3], [1, 2, 3, 4], [1, 2, 5], [8, 8], [9]):
        h.put(tokens)
    h.match([1, 2])  # one more split: more nodes
    all_ids = {n.id for n in live_nodes(h.cache)}
    h.cache.evict(3)
    survivors = {n.id for n in live_nodes(h.cache)}
    assert len(h.evicted_ids) == len(set(h.evicted_ids))
    assert set(h.evicted_ids) == all_ids - survivors
    assert survivors
    h.cache.evict(10**6)
    assert len(h.evicted_ids) == len(set(h.evicted_ids))
    assert set(h.evicted_ids) == all_ids


def test_evicted_nodes_are_marked_and_no_longer_matched(harness: CacheHarness) -> None:
    h = harness
    node = h.put([1, 2, 3]).last_node
    h.put([4])
    h.match([4])
    h.cache.evict(1)
    assert node.evicted
    assert node.value is None
    assert h.match([1, 2, 3]).prefix_len == 0
    assert h.match([4]).prefix_len == 1


def test_locked_leaves_are_never_evicted(harness: CacheHarness) -> None:
    h = harness
    locked = h.put([1, 2, 3, 4]).last_node  # t=1: the oldest
    h.put([1, 2, 5])  # splits: [1, 2] -> [3, 4], [5]
    h.put([7, 7, 7])
    h.cache.inc_lock_ref(locked)
    result = h.cache.evict(10**6)
    assert result.full_evicted == 4  # [5] and [7, 7, 7]
    assert locked.value is not None
    assert h.match([1, 2, 3, 4]).prefix_len == 4
    assert h.cache.total_size() == h.cache.protected_size() == 4
    assert locked.id not in h.evicted_ids
    h.assert_conserved()


def test_a_locked_internal_node_survives_but_its_unlocked_children_go(
    harness: CacheHarness,
) -> None:
    h = harness
    inner = h.put([1, 2]).last_node
    h.put([1, 2, 3])
    h.put([1, 2, 4])
    h.cache.inc_lock_ref(inner)
    assert h.cache.evict(10**6).full_evicted == 2
    assert [n.id for n in live_nodes(h.cache)] == [inner.id]
    h.assert_conserved()


def test_evict_zero_changes_nothing(harness: CacheHarness) -> None:
    harness.put([1, 2, 3])
    before = snapshot(harness.cache)
    assert harness.cache.evict(0) == EvictResult()
    assert snapshot(harness.cache) == before
    assert harness.allocator.free_calls == 0
    assert harness.evicted_ids == []


@pytest.mark.parametrize(("num", "swa"), [(-1, 0), (1, -1), (-5, -5)])
def test_negative_counts_are_rejected(harness: CacheHarness, num: int, swa: int) -> None:
    harness.put([1, 2, 3])
    with refused_unchanged(harness.cache, UsageError, match=">= 0"):
        harness.cache.evict(num, swa)
    assert harness.evicted_ids == []


def test_ties_on_time_are_broken_by_node_id(make_cache: CacheFactory) -> None:
    h = make_cache(clock=lambda: 0.0)
    a = h.put([1]).last_node
    b = h.put([2, 2]).last_node
    c = h.put([3, 3, 3]).last_node
    assert a.id < b.id < c.id
    h.match([3])
    h.match([1])
    for expected in (a, b, c):
        h.cache.evict(1)
        assert h.evicted_ids[-1] == expected.id


def test_tie_order_prefers_the_older_lower_part_after_a_split(make_cache: CacheFactory) -> None:
    h = make_cache(clock=lambda: 0.0)
    lower = h.put([1, 2, 3, 4]).last_node
    sibling = h.put([1, 2, 9]).last_node  # the split makes an upper [1, 2] with a newer id
    upper = lower.parent
    assert lower.id < upper.id < sibling.id
    h.cache.evict(1)
    assert h.evicted_ids == [lower.id]
    h.cache.evict(1)
    assert h.evicted_ids == [lower.id, sibling.id]
    h.cache.evict(1)
    assert h.evicted_ids == [lower.id, sibling.id, upper.id]


def test_evict_without_an_allocator_just_drops_the_indices() -> None:
    cache = RadixCache()
    cache.insert(RadixKey([1, 2, 3]))
    assert cache.evict(1).full_evicted == 3
    assert cache.total_size() == 0
    cache.check_invariants()

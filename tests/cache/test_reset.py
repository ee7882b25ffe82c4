"""reset: drops every node, frees every held index once, reports every dropped node once."""

from __future__ import annotations

import pytest

from radixkv import RadixCache, RadixKey, StaleNodeError
from tests.conftest import CacheFactory
from tests.helpers import CacheHarness, live_nodes, refused_unchanged, tree_indices


@pytest.fixture
def filled(make_cache: CacheFactory) -> CacheHarness:
    h = make_cache(page_size=2)
    h.put([1, 2, 3, 4, 5, 6])
    h.put([1, 2, 7, 8])
    h.put([1, 2], "ns")
    h.put([9, 9, 9])
    h.match([1, 2, 3, 4])  # one more split
    return h


def test_reset_frees_every_held_index_exactly_once(filled: CacheHarness) -> None:
    h = filled
    locked = live_nodes(h.cache)[-1]
    h.cache.inc_lock_ref(locked)  # locked indices are freed too: reset drops everything
    held = sorted(tree_indices(h.cache))
    assert held
    h.cache.reset()
    assert sorted(h.allocator.freed) == held
    assert h.allocator.allocated_count() == 0


def test_reset_reports_every_dropped_node_once(filled: CacheHarness) -> None:
    h = filled
    dropped = {n.id for n in live_nodes(h.cache)}
    h.cache.reset()
    assert sorted(h.evicted_ids) == sorted(dropped)
    assert len(h.evicted_ids) == len(dropped)


def test_reset_empties_the_tree_and_the_counters(filled: CacheHarness) -> None:
    h = filled
    old = live_nodes(h.cache)
    h.cache.inc_lock_ref(old[0])
    h.cache.reset()
    assert (h.cache.evictable_size(), h.cache.protected_size(), h.cache.total_size()) == (0, 0, 0)
    assert live_nodes(h.cache) == []
    assert h.cache.root.children == {}
    assert all(node.evicted for node in old)
    h.cache.check_invariants()


def test_the_cache_is_usable_after_reset(filled: CacheHarness) -> None:
    h = filled
    dropped = {n.id for n in live_nodes(h.cache)}
    h.cache.reset()
    assert h.match([1, 2, 3, 4]).prefix_len == 0
    result = h.put([1, 2, 3, 4])
    assert result.prefix_len == 0
    assert h.match([1, 2, 3, 4, 5]).prefix_len == 4
    h.cache.inc_lock_ref(result.last_node)
    assert h.cache.protected_size() == 4
    h.cache.dec_lock_ref(result.last_node)
    assert h.cache.evict(1).full_evicted == 4
    h.assert_conserved()
    # Fresh nodes never reuse a dropped id: on_node_evict consumers key their state by id.
    assert result.last_node.id not in dropped


def test_stale_handles_are_rejected_after_reset(filled: CacheHarness) -> None:
    h = filled
    node = live_nodes(h.cache)[-1]
    h.cache.inc_lock_ref(node)
    h.cache.reset()
    h.put([5, 5])
    with refused_unchanged(h.cache, StaleNodeError):
        h.cache.dec_lock_ref(node)
    with refused_unchanged(h.cache, StaleNodeError):
        h.cache.inc_lock_ref(node)


def test_a_second_reset_frees_nothing_more(filled: CacheHarness) -> None:
    h = filled
    h.cache.reset()
    freed, calls, reported = list(h.allocator.freed), h.allocator.free_calls, len(h.evicted_ids)
    h.cache.reset()
    assert h.allocator.freed == freed
    assert h.allocator.free_calls == calls
    assert len(h.evicted_ids) == reported


def test_evict_after_reset_never_frees_the_old_indices_again(filled: CacheHarness) -> None:
    h = filled
    h.cache.reset()
    assert h.cache.evict(10**6).full_evicted == 0
    assert len(h.allocator.freed) == len(set(h.allocator.freed))


def test_reset_of_an_empty_cache_frees_and_reports_nothing(harness: CacheHarness) -> None:
    harness.cache.reset()
    assert harness.allocator.free_calls == 0
    assert harness.evicted_ids == []


def test_reset_without_an_allocator_or_callback() -> None:
    cache = RadixCache()
    cache.insert(RadixKey([1, 2, 3]))
    cache.reset()
    assert cache.total_size() == 0
    assert cache.match_prefix(RadixKey([1, 2, 3])).prefix_len == 0

"""inc_lock_ref / dec_lock_ref: handles, size accounting and rejected unlocks."""

from __future__ import annotations

import pytest

from radixkv import (
    LockError,
    RadixCache,
    RadixKey,
    StaleNodeError,
    TokenTypeError,
    TreeNode,
    UsageError,
)
from tests.helpers import CacheHarness, live_nodes, node_lengths, refused_unchanged, snapshot


def sizes(cache: RadixCache) -> tuple[int, int]:
    return cache.evictable_size(), cache.protected_size()


def assert_sizes_add_up(cache: RadixCache) -> None:
    assert cache.evictable_size() + cache.protected_size() == cache.total_size()
    assert cache.total_size() == sum(node_lengths(cache))
    locked = sum(len(n) for n in live_nodes(cache) if n.lock_ref > 0)
    assert cache.protected_size() == locked


def chain(h: CacheHarness) -> tuple[TreeNode, TreeNode, TreeNode]:
    """[1, 2] -> [3, 4, 5] -> [6, 7, 8, 9], plus an unrelated [50, 51] branch."""
    a = h.put([1, 2]).last_node
    b = h.put([1, 2, 3, 4, 5]).last_node
    c = h.put([1, 2, 3, 4, 5, 6, 7, 8, 9]).last_node
    h.put([50, 51])
    assert (len(a), len(b), len(c)) == (2, 3, 4)
    return a, b, c


def test_inc_moves_each_path_node_from_evictable_to_protected(harness: CacheHarness) -> None:
    cache = harness.cache
    a, b, c = chain(harness)
    assert sizes(cache) == (11, 0)
    assert cache.inc_lock_ref(b) is None
    assert sizes(cache) == (6, 5)
    assert (a.lock_ref, b.lock_ref, c.lock_ref) == (1, 1, 0)
    cache.inc_lock_ref(c)
    assert sizes(cache) == (2, 9)
    assert (a.lock_ref, b.lock_ref, c.lock_ref) == (2, 2, 1)
    cache.inc_lock_ref(c)  # already protected: only the counts grow
    assert sizes(cache) == (2, 9)
    assert (a.lock_ref, b.lock_ref, c.lock_ref) == (3, 3, 2)
    assert_sizes_add_up(cache)
    cache.check_invariants()


def test_dec_moves_back_only_when_the_last_lock_goes(harness: CacheHarness) -> None:
    cache = harness.cache
    a, b, c = chain(harness)
    cache.inc_lock_ref(c)
    cache.inc_lock_ref(b)
    cache.inc_lock_ref(c)
    cache.dec_lock_ref(c)
    assert sizes(cache) == (2, 9)
    cache.dec_lock_ref(c)
    assert sizes(cache) == (6, 5)
    assert (a.lock_ref, b.lock_ref, c.lock_ref) == (1, 1, 0)
    cache.dec_lock_ref(b)
    assert sizes(cache) == (11, 0)
    assert (a.lock_ref, b.lock_ref, c.lock_ref) == (0, 0, 0)
    cache.check_invariants()


def test_sibling_handles_share_their_ancestors(harness: CacheHarness) -> None:
    cache = harness.cache
    left = harness.put([1, 2, 3]).last_node
    right = harness.put([1, 2, 4, 4]).last_node
    shared = left.parent
    assert shared is right.parent
    cache.inc_lock_ref(left)
    cache.inc_lock_ref(right)
    assert shared.lock_ref == 2
    assert sizes(cache) == (0, 5)
    cache.dec_lock_ref(left)
    assert sizes(cache) == (1, 4)
    assert shared.lock_ref == 1
    cache.dec_lock_ref(right)
    assert sizes(cache) == (5, 0)
    cache.check_invariants()


def test_sizes_always_add_up(harness: CacheHarness) -> None:
    h = harness
    cache = h.cache
    handles: list[TreeNode] = []
    steps = [[1, 2, 3, 4], [1, 2, 9], [1, 2, 3, 4, 5, 6], [7, 7], [1, 2, 3]]
    for tokens in steps:
        handles.append(h.put(tokens).last_node)
        assert_sizes_add_up(cache)
        cache.inc_lock_ref(handles[-1])
        assert_sizes_add_up(cache)
        h.match(tokens[:1])
        assert_sizes_add_up(cache)
    for node in handles[::2]:
        cache.dec_lock_ref(node)
        assert_sizes_add_up(cache)
    cache.evict(10**6)
    assert_sizes_add_up(cache)
    for node in handles[1::2]:
        cache.dec_lock_ref(node)
        assert_sizes_add_up(cache)
    assert cache.protected_size() == 0
    h.assert_conserved()


@pytest.mark.parametrize("target", ["root", "none"])
def test_locking_the_root_or_none_is_a_no_op(harness: CacheHarness, target: str) -> None:
    cache = harness.cache
    harness.put([1, 2, 3])
    node = cache.root if target == "root" else None
    before = snapshot(cache)
    assert cache.inc_lock_ref(node) is None
    assert snapshot(cache) == before
    cache.dec_lock_ref(node)
    cache.dec_lock_ref(node)  # the root holds no handle, and none is needed
    assert snapshot(cache) == before


def test_a_lock_error_is_a_usage_error_value_error_and_runtime_error() -> None:
    assert issubclass(LockError, UsageError)
    assert issubclass(LockError, ValueError)
    assert issubclass(LockError, RuntimeError)


def test_unlocking_a_node_never_locked_is_rejected_without_change(harness: CacheHarness) -> None:
    node = harness.put([1, 2, 3]).last_node
    with refused_unchanged(harness.cache, LockError):
        harness.cache.dec_lock_ref(node)
    assert node.lock_ref == 0


def test_a_double_unlock_is_rejected_without_change(harness: CacheHarness) -> None:
    node = harness.put([1, 2, 3]).last_node
    harness.cache.inc_lock_ref(node)
    harness.cache.dec_lock_ref(node)
    with refused_unchanged(harness.cache, LockError):
        harness.cache.dec_lock_ref(node)
    assert harness.cache.evictable_size() == 3


def test_unlocking_an_ancestor_of_the_locked_node_is_rejected(harness: CacheHarness) -> None:
    cache = harness.cache
    a, b, c = chain(harness)
    cache.inc_lock_ref(c)
    before = snapshot(cache)
    for ancestor in (a, b):
        with pytest.raises(LockError):
            cache.dec_lock_ref(ancestor)
        assert snapshot(cache) == before
    cache.dec_lock_ref(c)
    assert cache.protected_size() == 0


def test_unlocking_a_descendant_of_the_locked_node_is_rejected(harness: CacheHarness) -> None:
    cache = harness.cache
    a, _, c = chain(harness)
    cache.inc_lock_ref(a)
    with refused_unchanged(cache, LockError):
        cache.dec_lock_ref(c)


def test_locking_an_evicted_node_is_rejected(harness: CacheHarness) -> None:
    gone = harness.put([1, 2]).last_node
    harness.put([3])
    harness.match([3])
    harness.cache.evict(1)
    assert gone.evicted
    with refused_unchanged(harness.cache, StaleNodeError, match="evicted"):
        harness.cache.inc_lock_ref(gone)
    with refused_unchanged(harness.cache, StaleNodeError):
        harness.cache.dec_lock_ref(gone)


def test_locking_a_node_of_another_cache_is_rejected(harness: CacheHarness) -> None:
    other = RadixCache()
    foreign = other.insert(RadixKey([1, 2, 3])).last_node
    harness.put([1, 2, 3])
    mine, theirs = snapshot(harness.cache), snapshot(other)
    with pytest.raises(StaleNodeError, match="does not belong"):
        harness.cache.inc_lock_ref(foreign)
    other.inc_lock_ref(foreign)
    theirs_locked = snapshot(other)
    with pytest.raises(StaleNodeError):
        harness.cache.dec_lock_ref(foreign)
    assert snapshot(harness.cache) == mine
    assert snapshot(other) == theirs_locked != theirs


@pytest.mark.parametrize("bad", [1, "node", RadixKey([1])])
def test_locking_something_that_is_not_a_node_is_a_type_error(
    harness: CacheHarness, bad: object
) -> None:
    harness.put([1])
    with refused_unchanged(harness.cache, TokenTypeError):
        harness.cache.inc_lock_ref(bad)
    with refused_unchanged(harness.cache, TypeError):
        harness.cache.dec_lock_ref(bad)


def test_a_split_of_a_locked_node_keeps_the_counts_consistent(harness: CacheHarness) -> None:
    cache = harness.cache
    deep = harness.put([1, 2, 3, 4, 5, 6]).last_node
    harness.put([9])
    cache.inc_lock_ref(deep)
    assert sizes(cache) == (1, 6)
    upper = harness.match([1, 2]).last_node  # splits the locked node
    assert deep.parent is upper
    assert (upper.lock_ref, deep.lock_ref) == (1, 1)
    assert sizes(cache) == (1, 6)
    cache.check_invariants()
    with pytest.raises(LockError):  # the new upper part holds no handle
        cache.dec_lock_ref(upper)
    cache.dec_lock_ref(deep)
    assert sizes(cache) == (7, 0)
    assert (upper.lock_ref, deep.lock_ref) == (0, 0)
    cache.check_invariants()
    assert cache.evict(10**6).full_evicted == 7


def test_an_insert_that_splits_a_locked_node_keeps_the_counts_consistent(
    harness: CacheHarness,
) -> None:
    cache = harness.cache
    deep = harness.put([1, 2, 3, 4]).last_node
    cache.inc_lock_ref(deep)
    branch = harness.put([1, 2, 8, 8]).last_node
    assert sizes(cache) == (2, 4)
    cache.inc_lock_ref(branch)
    assert deep.parent is branch.parent
    assert deep.parent.lock_ref == 2
    cache.dec_lock_ref(deep)
    assert sizes(cache) == (2, 4)
    cache.dec_lock_ref(branch)
    assert sizes(cache) == (6, 0)
    harness.assert_conserved()


def test_a_lock_taken_on_a_split_out_prefix_unlocks_independently(
    harness: CacheHarness,
) -> None:
    cache = harness.cache
    deep = harness.put([1, 2, 3, 4]).last_node
    cache.inc_lock_ref(deep)
    upper = harness.match([1, 2]).last_node
    cache.inc_lock_ref(upper)
    assert (upper.lock_ref, deep.lock_ref) == (2, 1)
    cache.dec_lock_ref(deep)
    assert sizes(cache) == (2, 2)
    cache.dec_lock_ref(upper)
    assert sizes(cache) == (4, 0)
    cache.check_invariants()

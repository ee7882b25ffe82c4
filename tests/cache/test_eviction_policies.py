"""Eviction policies (eviction.py, SPEC.md "Eviction policies"): each policy's victim order
on one hand-built tree where every policy picks a different first victim, FIFO across a
split, priorities over shared prefixes, the lazy heap when a key changes, bad values."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from radixkv import (
    POLICIES,
    ChunkCache,
    KVIndexAllocator,
    MambaRadixCache,
    MambaStatePool,
    RadixCache,
    RadixKey,
    TokenTypeError,
    UsageError,
)
from radixkv.eviction import LRU, Ranked, SortKey
from tests.helpers import play_five_leaves, refused_unchanged, snapshot

# Five two-token leaves under the root, built so that each policy evicts a different one:
#   A  inserted first (FIFO's), matched twice;   C  matched once, then never (LRU's)
#   D  never matched, older than E (LFU's);      B  matched last (MRU's)
#   E  inserted with priority -1, the others with 0 (priority's)
A, B, C, D, E = [1, 11], [2, 12], [3, 13], [4, 14], [5, 15]
FIRST_VICTIM = {"lru": C, "lfu": D, "fifo": A, "mru": B, "priority": E}
# The whole order, leaf by leaf (each later pick among what is left).
ORDER = {
    "lru": [C, A, D, E, B],  # recency C4 A6 D7 E8 B9
    "lfu": [D, E, C, B, A],  # hits D0 E0 C1 B1 A2, ties oldest first
    "fifo": [A, B, C, D, E],
    "mru": [B, E, D, A, C],
    "priority": [E, C, A, D, B],  # E at -1; the rest at 0 in LRU order
}


def _five_leaves(policy: str | None) -> RadixCache:
    """The example's five leaves, in a cache built with ``policy`` (None: no keyword)."""
    cache = RadixCache() if policy is None else RadixCache(eviction_policy=policy)
    play_five_leaves(
        (A, B, C, D, E),
        lambda key, priority: cache.insert(RadixKey(key), priority=priority),
        lambda key: cache.match_prefix(RadixKey(key)),
    )
    cache.check_invariants()
    return cache


def _evict_order(cache: RadixCache | MambaRadixCache) -> list[list[int]]:
    order = []
    while cache.evictable_size():
        before = _cached(cache)
        assert cache.evict(1).full_evicted == 2
        cache.check_invariants()
        (gone,) = before - _cached(cache)
        order.append(list(gone))
    return order


def _cached(cache: RadixCache | MambaRadixCache) -> set[tuple[int, ...]]:
    return {tuple(int(t) for t in child.tokens) for child in cache.root.children.values()}  # type: ignore[arg-type]  # int tokens here


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_each_policy_evicts_its_own_first_victim_and_order(policy: str) -> None:
    cache = _five_leaves(policy)
    assert _evict_order(cache) == ORDER[policy]
    assert ORDER[policy][0] == FIRST_VICTIM[policy]


def test_the_first_victims_all_differ() -> None:
    """The example separates the policies: a policy that orders like another fails above."""
    assert len({tuple(v) for v in FIRST_VICTIM.values()}) == len(POLICIES)


def test_default_is_lru_and_unchanged() -> None:
    """No keyword: the LRU order, keyed by TreeNode.recency exactly as before policies."""
    lru, default = _five_leaves("lru"), _five_leaves(None)
    assert RadixCache().tree.policy is LRU and default.tree.policy is LRU
    assert LRU.key(default.root) == default.root.recency()
    assert snapshot(default) == snapshot(lru)
    assert _evict_order(default) == ORDER["lru"]


# ---- FIFO across a split --------------------------------------------------------------------


def test_fifo_split_halves_keep_the_insert_order() -> None:
    """[1,2,3,4] is inserted before [9,19]; a match splits it. Both halves keep its birth,
    so after the lower half goes, the upper half [1,2] still goes before [9,9] (a fresh
    birth for the upper half, which gets a newer id, would evict [9,19] first)."""
    cache = RadixCache(eviction_policy="fifo")
    cache.insert(RadixKey([1, 2, 3, 4]))
    cache.insert(RadixKey([9, 19]))
    upper = cache.match_prefix(RadixKey([1, 2])).last_node
    lower = next(iter(upper.children.values()))
    assert upper.id > lower.id and upper.birth == lower.birth
    assert cache.evict(2).full_evicted == 2 and lower.evicted
    assert cache.evict(2).full_evicted == 2 and upper.evicted
    assert [list(n.tokens) for n in cache.root.children.values()] == [[9, 19]]


# ---- priority ----------------------------------------------------------------------------


def test_priority_covers_the_key_new_nodes_take_it_shared_nodes_keep_the_highest() -> None:
    cache = RadixCache(eviction_policy="priority")
    shared = cache.insert(RadixKey([1, 2]), priority=5).last_node
    tail = cache.insert(RadixKey([1, 2, 3, 4]), priority=-3).last_node
    assert (shared.priority, tail.priority) == (5, -3)  # a new node takes it, even below 0
    cache.insert(RadixKey([1, 2, 3, 4]), priority=1)  # raises every covered node to >= 1
    assert (shared.priority, tail.priority) == (5, 1)
    cache.insert(RadixKey([1, 2, 3, 4]), priority=0)  # never lowers
    assert (shared.priority, tail.priority) == (5, 1)


def test_priority_raised_by_a_reinsert_requeues_the_leaf() -> None:
    """Two leaves at priority 0; a re-insert raises the older one, so the other goes first
    (the heap entry of the old key is stale and skipped)."""
    cache = RadixCache(eviction_policy="priority")
    cache.insert(RadixKey([1, 11]))
    cache.insert(RadixKey([2, 12]))
    cache.insert(RadixKey([1, 11]), priority=2)
    cache.check_invariants()
    assert cache.evict(1).full_evicted == 2
    assert [list(n.tokens) for n in cache.root.children.values()] == [[1, 11]]


def test_a_split_keeps_the_priority_on_both_halves() -> None:
    cache = RadixCache(eviction_policy="priority")
    cache.insert(RadixKey([1, 2, 3, 4]), priority=7)
    upper = cache.match_prefix(RadixKey([1, 2])).last_node
    (lower,) = upper.children.values()
    assert upper.priority == lower.priority == 7


# ---- LFU and the lazy heap ---------------------------------------------------------------


def test_lfu_counts_matches_of_the_returned_path_and_requeues_on_a_hit() -> None:
    cache = RadixCache(eviction_policy="lfu")
    cache.insert(RadixKey([1, 11]))
    cache.insert(RadixKey([2, 12]))
    cache.insert(RadixKey([1, 11]))  # an insert is no hit
    assert [n.hit_count for n in cache.root.children.values()] == [0, 0]
    cache.match_prefix(RadixKey([1, 11, 7]))  # a hit of [1,1]: its key grows, re-queued
    cache.check_invariants()  # the heap holds the leaf's current key (INV-6)
    assert cache.evict(1).full_evicted == 2
    assert [list(n.tokens) for n in cache.root.children.values()] == [[1, 11]]


def test_every_policy_keeps_the_heap_fresh_through_a_busy_sequence() -> None:
    """Matches, inserts with priorities, splits, locks and evictions under each policy:
    check_invariants (the heap holds every evictable leaf's current key) after each step."""
    for policy in POLICIES:
        cache = RadixCache(eviction_policy=policy)
        for step in range(60):
            key = [step % 5, step % 3, step % 7, 1]
            fresh = torch.arange(100 * step, 100 * step + 4)  # indices no node holds yet
            cache.insert(RadixKey(key), fresh, priority=step % 4 - 1)
            cache.match_prefix(RadixKey(key[: 1 + step % 4]))
            if step % 6 == 0:
                node = cache.match_prefix(RadixKey(key[:2])).last_node
                cache.inc_lock_ref(node)
                cache.evict(3)
                cache.dec_lock_ref(node)
            cache.check_invariants()
        cache.evict(10**6)
        assert cache.total_size() == 0, policy


@pytest.mark.parametrize("policy", ["lru", "mru"])
def test_evictions_after_many_touches_keep_their_order_through_heap_rebuilds(policy: str) -> None:
    """Leaves touched between evictions reach the heap only when an eviction asks, and the
    entries they leave behind go stale; under MRU those sink to the bottom, never popped,
    until the heap is rebuilt from the leaf set (past twice the leaves and 64). Every
    leaf still comes out, in the policy's order."""
    keys = [[i, 1] for i in range(100)]
    evicted: list[int] = []
    cache = RadixCache(on_node_evict=evicted.append, eviction_policy=policy)
    leaf_of = {
        cache.insert(RadixKey(k), torch.tensor([2 * k[0], 2 * k[0] + 1])).last_node.id: k[0]
        for k in keys
    }
    used = list(range(100))  # least recently used first
    for round_ in range(6):  # every round touches every leaf again
        used = sorted(used, key=lambda i: (i * (round_ + 7)) % 101)
        for i in used:
            cache.match_prefix(RadixKey(keys[i]))
        for _ in range(3):
            cache.evict(1)
            assert leaf_of[evicted[-1]] == used.pop(0 if policy == "lru" else -1)
        cache.check_invariants()
    cache.evict(10**6)
    assert [leaf_of[n] for n in evicted[18:]] == (used if policy == "lru" else used[::-1])
    assert cache.total_size() == 0


# ---- the other caches --------------------------------------------------------------------


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_sliding_window_mode_evicts_full_kv_in_the_policy_order(policy: str) -> None:
    cache = RadixCache(sliding_window_size=8, eviction_policy=policy)
    for key in (A, B, C):
        cache.insert(RadixKey(key))
    cache.match_prefix(RadixKey(C))
    cache.match_prefix(RadixKey(A))
    cache.match_prefix(RadixKey(A))
    cache.insert(RadixKey(D))
    cache.insert(RadixKey(E), priority=-1)
    cache.match_prefix(RadixKey(B))
    assert _evict_order(cache) == ORDER[policy]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_mamba_phase_one_evicts_leaves_in_the_policy_order(policy: str) -> None:
    kv, states = KVIndexAllocator(64), MambaStatePool(16, (2,))
    cache = MambaRadixCache(1, kv, states, eviction_policy=policy)

    def insert(key: list[int], priority: int) -> None:
        value = kv.alloc(len(key))
        slot = states.alloc_track_slot()
        assert value is not None and slot is not None
        cache.insert(RadixKey(key), value, mamba_value=slot, priority=priority)

    def match(key: list[int]) -> None:
        cow = cache.match_prefix(RadixKey(key), cow=True).cow_slot
        if cow is not None:
            states.free_track_slot(cow)

    play_five_leaves((A, B, C, D, E), insert, match)
    assert _evict_order(cache) == ORDER[policy]


def test_every_cache_of_the_family_checks_the_priority_keyword() -> None:
    chunk = ChunkCache()
    chunk.insert(RadixKey([1, 2]), torch.tensor([5, 6]), priority=3)  # accepted, no meaning
    for bad in ("high", 1.5, True):
        with pytest.raises(TokenTypeError, match="priority"):
            chunk.insert(RadixKey([1, 2]), torch.tensor([5, 6]), priority=bad)
        cache = RadixCache(eviction_policy="priority")
        with refused_unchanged(cache, TokenTypeError, match="priority"):
            cache.insert(RadixKey([1, 2]), priority=bad)


# ---- bad policies ------------------------------------------------------------------------


class _MostHitFirst:
    """A user's own policy: most hits first (it reads only what a touch re-queues)."""

    name = "most-hit"

    def key(self, node: Ranked) -> SortKey:
        return (-node.hit_count, node.last_access_time, node.id)


@pytest.mark.parametrize("bad", ["LRU", "lfru", "", 3, None, object()])
def test_a_bad_policy_is_a_usage_error_at_construction(bad: Any) -> None:
    with pytest.raises(UsageError, match="eviction_policy"):
        RadixCache(eviction_policy=bad)
    with pytest.raises(UsageError, match="eviction_policy"):
        RadixCache(sliding_window_size=4, eviction_policy=bad)
    with pytest.raises(UsageError, match="eviction_policy"):
        MambaRadixCache(eviction_policy=bad)


def test_a_policy_object_is_accepted() -> None:
    cache = RadixCache(eviction_policy=_MostHitFirst())
    assert cache.tree.policy.name == "most-hit"
    cache.insert(RadixKey([1]))
    cache.insert(RadixKey([2]))
    cache.match_prefix(RadixKey([1]))  # LRU would now evict [2]
    cache.check_invariants()
    assert cache.evict(1).full_evicted == 1
    assert [list(n.tokens) for n in cache.root.children.values()] == [[2]]

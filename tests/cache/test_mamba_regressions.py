"""Regressions: pymllm's Mamba defects and sglang's Mamba issues (SPEC.md, Mamba)."""

from __future__ import annotations

import pytest
import torch

from radixkv import LRUList, MambaTreeNode, RadixKey, UsageError
from tests.mamba_helpers import make_mamba, node_tokens

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_split_prefix_node_never_inherits_the_whole_key_state() -> None:
    """pymllm: a split sliced the 1-slot state, so [1, 2] got the state after [1..4]."""
    h = make_mamba()
    long = h.insert([1, 2, 3, 4]).last_node
    h.insert([1, 2, 9])
    r = h.match([1, 2, 7])
    assert r.prefix_len == 0, "no state was ever taken after [1, 2]"
    assert long.slot is not None and node_tokens(long) == [3, 4]


def test_split_of_a_mamba_locked_node_leaves_no_stuck_lock() -> None:
    """pymllm: the split copied mamba_lock_ref up; after the unlock the upper node was
    left with full_lock_ref 0 and mamba_lock_ref 1, breaking full >= mamba."""
    h = make_mamba()
    leaf = h.insert([1, 2, 3, 4]).last_node
    h.cache.inc_lock_ref(leaf)
    upper = h.insert([1, 2, 9]).last_node.parent
    assert (upper.full_lock_ref, upper.mamba_lock_ref) == (1, 0)
    h.cache.dec_lock_ref(leaf)
    h.cache.check_invariants()
    assert all(n.full_lock_ref == n.mamba_lock_ref == 0 for n in h.cache.nodes())
    assert h.cache.evict(100, 100).full_evicted == 5


def test_mamba_locked_leaf_survives_both_phases() -> None:
    """pymllm: phase 1 checked only full_lock_ref and could free a locked state."""
    h = make_mamba()
    leaf = h.insert([1, 2]).last_node
    h.cache.inc_lock_ref(leaf)
    r = h.cache.evict(100, 100)
    assert (r.full_evicted, r.mamba_evicted) == (0, 0) and leaf.slot is not None


def test_mamba_sizes_count_slots_not_tokens() -> None:
    """pymllm: counters added len(key) tokens but removed len(mamba_value) slots."""
    h = make_mamba()
    leaf = h.insert(list(range(10))).last_node
    assert h.cache.mamba_evictable_size() == 1
    h.cache.inc_lock_ref(leaf)
    assert (h.cache.mamba_evictable_size(), h.cache.mamba_protected_size()) == (0, 1)
    h.cache.dec_lock_ref(leaf)
    assert h.cache.evict(0, 1).mamba_evicted == 1 and h.cache.mamba_evictable_size() == 0


def test_mamba_exist_is_false_when_only_an_ancestor_has_state() -> None:
    """pymllm: mamba_exist was true if any node on the path had a state, so the caller
    freed a slot the tree had just adopted."""
    h = make_mamba()
    h.insert([1])
    r = h.insert([1, 2])
    assert not r.mamba_exist and r.last_node.slot is not None
    assert not h.leaked()


def test_a_request_never_receives_a_tree_owned_slot() -> None:
    """pymllm: no copy-on-write; the request resumed in (and overwrote) the tree's slot."""
    h = make_mamba()
    tree_slot = h.insert([1, 2]).last_node.slot
    r = h.match([1, 2, 3], keep=True)
    assert r.cow_slot is not None and r.cow_slot != tree_slot
    assert not h.cache.owns_slot(r.cow_slot)


def test_duplicate_lru_insert_is_an_error_not_a_cycle() -> None:
    """pymllm: a second insert_mru corrupted the links (sglang asserts)."""
    lru = LRUList()
    node = MambaTreeNode(1, RadixKey([1]), None, None, 0)
    lru.insert_mru(node)
    with pytest.raises(UsageError):
        lru.insert_mru(node)
    assert list(lru) == [node]


def test_phase_two_terminates_when_every_state_is_locked() -> None:
    """pymllm: phase 2 could `continue` forever on a listed node without state."""
    h = make_mamba()
    leaves = [h.insert([t]).last_node for t in range(3)]
    for leaf in leaves:
        h.cache.inc_lock_ref(leaf)
    assert h.cache.evict(0, 5).mamba_evicted == 0


def test_revived_tombstone_between_lock_and_unlock() -> None:
    """sglang #21379 / PR #27147: a tombstone revived between inc and dec underflowed the
    mamba lock. Here a handle always protects a state at its own node, so a tombstone
    holds no mamba lock to lose, and reviving it changes no lock count."""
    h = make_mamba()
    leaf = h.insert([1, 2, 3, 4]).last_node
    upper = h.insert([1, 2, 9]).last_node.parent  # the state-less [1, 2]
    h.cache.inc_lock_ref(leaf)
    h.insert([1, 2])  # revives [1, 2] while the lock is held
    assert upper.slot is not None and upper.mamba_lock_ref == 0
    h.cache.dec_lock_ref(leaf)
    h.cache.inc_lock_ref(upper)
    h.cache.dec_lock_ref(upper)
    h.cache.check_invariants()
    assert h.cache.mamba_protected_size() == 0 and h.cache.protected_size() == 0


def test_branching_seqlen_lets_the_next_lookup_hit_mid_edge() -> None:
    """sglang #22935: after a split, an n-1 lookup ending mid-edge degraded to a 0-token hit
    for good. mamba_branching_seqlen tells the engine where to cache a state so the next
    request branching there hits."""
    h = make_mamba()
    h.insert([1, 2, 3, 4, 5])
    first = h.match([1, 2, 3, 4])
    assert first.prefix_len == 0 and first.mamba_branching_seqlen == 4
    h.insert([1, 2, 3, 4])  # the engine caches the state it computed at the branching point
    again = h.match([1, 2, 3, 4, 8])
    assert again.prefix_len == 4 and again.mamba_branching_seqlen is None


def test_lru_lists_stay_in_recency_order_across_splits() -> None:
    """sglang #12007: the Mamba LRU order check failed after splits. The upper part of a
    split sits right behind its lower part, and a touched path is ordered child first."""
    h = make_mamba()
    h.insert([1, 2, 3, 4])
    h.insert([5, 6])
    lower = h.match([1, 2, 3, 4]).last_node
    upper = h.insert([1, 2]).last_node  # splits [1, 2, 3, 4]
    other = h.match([5, 6]).last_node
    h.match([1, 2, 3, 4])
    assert list(h.cache.full_lru) == [lower, upper, other], "child before parent"
    h.insert([1, 2, 7])
    h.match([5, 6])
    h.cache.check_invariants()  # INV-32 on both lists
    assert next(iter(h.cache.mamba_lru)).id == h.match([5, 6]).last_node.id


def test_split_registers_the_upper_node_under_the_right_child_key() -> None:
    """sglang PR #36696: a split node was filed under a stale child key."""
    h = make_mamba(page_size=2)
    h.insert([1, 2, 3, 4, 5, 6])
    h.insert([1, 2, 3, 4, 7, 8])
    h.insert([1, 2, 9, 9])
    h.cache.check_invariants()  # INV-3: parent.children[child_key(child)] is child
    assert h.match([1, 2, 3, 4, 7, 8]).prefix_len == 6


@pytest.mark.cuda
@requires_cuda
def test_cuda_pools_round_trip() -> None:
    """The same protocol with KV indices and states on a CUDA device."""
    h = make_mamba(device="cuda")
    leaf = h.insert([1, 2, 3]).last_node
    h.states.states[leaf.slot] = 3.0
    r = h.match([1, 2, 3, 4], keep=True)
    assert r.indices.device.type == "cuda" and r.prefix_len == 3 and r.cow_slot is not None
    assert bool((h.states.states[r.cow_slot] == 3.0).all())
    h.states.free_track_slot(r.cow_slot)
    assert h.cache.evict(10, 10).full_evicted == 3 and not h.leaked()

"""MambaRadixCache examples: the seed methods and the semantics of SPEC.md's Mamba section."""

from __future__ import annotations

import pytest
import torch

from radixkv import (
    InsertResult,
    LockError,
    MambaRadixCache,
    MambaStatePool,
    RadixKey,
    StaleNodeError,
    TokenTypeError,
    UsageError,
)
from tests.mamba_helpers import make_mamba, node_tokens


def test_empty_cache_matches_nothing_from_the_initial_state() -> None:
    h = make_mamba()
    r = h.match([1, 2, 3])
    assert r.prefix_len == 0 and r.indices.numel() == 0 and r.last_node is h.cache.root
    assert r.mamba_branching_seqlen is None and r.cow_slot is None
    assert h.cache.total_size() == 0 and h.cache.mamba_evictable_size() == 0


def test_insert_then_match_whole_key_hits_with_a_copied_state() -> None:
    h = make_mamba()
    ins = h.insert([1, 2, 3, 4])
    tree_slot = ins.last_node.slot
    h.states.states[tree_slot] = torch.tensor([7.0, 8.0])
    r = h.match([1, 2, 3, 4, 5], keep=True)
    assert r.prefix_len == 4 and r.last_node is ins.last_node
    assert r.mamba_branching_seqlen is None
    assert r.cow_slot is not None and r.cow_slot != tree_slot
    assert not h.cache.owns_slot(r.cow_slot)
    assert torch.equal(h.states.states[r.cow_slot], torch.tensor([7.0, 8.0]))


def test_match_truncates_to_the_deepest_state_and_reports_branching() -> None:
    h = make_mamba()
    h.insert([1, 2, 3, 4, 5, 6])
    r = h.match([1, 2, 3, 9])
    assert r.prefix_len == 0 and r.last_node is h.cache.root
    assert r.mamba_branching_seqlen == 3  # the KV alone matches [1, 2, 3]
    assert len(list(h.cache.nodes())) == 1, "match never splits"


def test_a_split_gives_the_upper_node_no_state() -> None:
    h = make_mamba()
    first = h.insert([1, 2, 3, 4])
    second = h.insert([1, 2, 9])
    upper = second.last_node.parent
    assert node_tokens(upper) == [1, 2] and upper.mamba_value is None and upper.mamba_tombstone
    assert upper.mamba_lock_ref == 0
    assert first.last_node.parent is upper and first.last_node.slot is not None
    r = h.match([1, 2, 3])
    assert r.prefix_len == 0 and r.mamba_branching_seqlen == 3


def test_insert_at_a_split_point_adopts_the_state() -> None:
    h = make_mamba()
    h.insert([1, 2, 3, 4])
    r = h.insert([1, 2])
    assert r.prefix_len == 2 and not r.mamba_exist and r.last_node.slot is not None
    assert h.match([1, 2, 7]).prefix_len == 2
    assert h.cache.mamba_evictable_size() == 2


def test_mamba_exist_only_for_the_end_node() -> None:
    h = make_mamba()
    h.insert([1, 2])
    longer = h.insert([1, 2, 3])
    assert not longer.mamba_exist, "an ancestor's state is not the end node's"
    again = h.insert([1, 2, 3])
    assert again.mamba_exist and again.prefix_len == 3
    assert not h.leaked()


def test_empty_key_ends_at_the_root_whose_state_exists() -> None:
    h = make_mamba()
    r = h.insert([])
    assert r == InsertResult(prefix_len=0, last_node=h.cache.root, mamba_exist=True)


def test_new_tokens_need_a_state_but_cached_ones_do_not() -> None:
    h = make_mamba()
    with pytest.raises(UsageError, match="needs a mamba_value"):
        h.cache.insert(RadixKey([1, 2]), torch.tensor([5, 6]))
    assert h.cache.total_size() == 0
    h.insert([1, 2, 3])
    r = h.insert([1, 2], state=False)
    assert r.prefix_len == 2 and not r.mamba_exist and r.last_node.mamba_tombstone


def test_a_slot_the_tree_owns_is_refused() -> None:
    h = make_mamba()
    slot = h.insert([1, 2]).last_node.slot
    with pytest.raises(UsageError, match="already owns"):
        h.cache.insert(RadixKey([1, 2, 3]), torch.tensor([0, 1, 2]), mamba_value=slot)
    assert h.cache.total_size() == 2


@pytest.mark.parametrize("bad", [-1, 1.5, torch.tensor([1, 2]), torch.tensor([1.0])])
def test_bad_mamba_values_are_refused(bad: object) -> None:
    cache = MambaRadixCache()
    with pytest.raises(UsageError):
        cache.insert(RadixKey([1]), torch.tensor([1]), mamba_value=bad)  # type: ignore[arg-type]  # deliberately wrong
    assert cache.total_size() == 0


def test_mamba_value_as_a_tensor_is_accepted() -> None:
    cache = MambaRadixCache()
    r = cache.insert(RadixKey([1]), torch.tensor([1]), mamba_value=torch.tensor([4]))
    assert r.last_node.slot == 4 and cache.owns_slot(4)


def test_locks_full_to_root_mamba_on_the_node_only() -> None:
    h = make_mamba()
    h.insert([1, 2])
    leaf = h.insert([1, 2, 3, 4]).last_node
    parent = leaf.parent
    h.cache.inc_lock_ref(leaf)
    assert (leaf.full_lock_ref, leaf.mamba_lock_ref) == (1, 1)
    assert (parent.full_lock_ref, parent.mamba_lock_ref) == (1, 0)
    assert h.cache.protected_size() == 4 and h.cache.evictable_size() == 0
    assert (h.cache.mamba_protected_size(), h.cache.mamba_evictable_size()) == (1, 1)
    h.cache.dec_lock_ref(leaf)
    assert h.cache.protected_size() == 0 and h.cache.mamba_protected_size() == 0


def test_unmatched_unlock_and_tombstone_lock_are_refused() -> None:
    h = make_mamba()
    h.insert([1, 2, 3])
    upper = h.insert([1, 9]).last_node.parent
    leaf = h.match([1, 2, 3]).last_node
    with pytest.raises(LockError):
        h.cache.dec_lock_ref(leaf)
    with pytest.raises(LockError, match="tombstone"):
        h.cache.inc_lock_ref(upper)
    assert h.cache.protected_size() == 0 and upper.full_lock_ref == 0
    h.cache.inc_lock_ref(leaf)
    with pytest.raises(LockError, match="no sliding window"):  # only None came back
        h.cache.dec_lock_ref(leaf, swa_boundary_id=3)
    with pytest.raises(UsageError, match="unexpected keyword"):
        h.cache.dec_lock_ref(leaf, boundary=3)
    h.cache.dec_lock_ref(leaf, swa_boundary_id=None)
    assert h.cache.protected_size() == 0


def test_phase_one_evicts_lru_leaf_with_state_and_cascades_tombstones() -> None:
    h = make_mamba()
    h.insert([1, 2, 3, 4])
    h.insert([1, 2, 5])  # [1, 2] becomes a state-less inner node
    h.insert([7])
    h.match([7])
    r = h.cache.evict(1)
    assert (r.full_evicted, r.mamba_evicted) == (2, 1)  # [3, 4] went, not [5] or [7]
    r = h.cache.evict(1)
    assert (r.full_evicted, r.mamba_evicted) == (3, 1)  # [5], then the tombstone [1, 2]
    assert [node_tokens(n) for n in h.cache.nodes()] == [[7]]
    assert len(h.evicted) == 3 and not h.leaked()


def test_phase_two_tombstones_inner_nodes_and_deletes_leaves() -> None:
    h = make_mamba()
    h.insert([1, 2])
    h.insert([1, 2, 3])
    h.match([1, 2, 3])
    r = h.cache.evict(0, 1)
    assert (r.full_evicted, r.mamba_evicted) == (0, 1)
    tombstone = next(n for n in h.cache.nodes() if node_tokens(n) == [1, 2])
    assert tombstone.mamba_tombstone and h.cache.total_size() == 3
    r = h.cache.evict(0, 1)
    assert (r.full_evicted, r.mamba_evicted) == (3, 1), "the leaf goes with its tombstone parent"
    assert h.cache.total_size() == 0 and not h.leaked()


def test_phase_two_spares_mamba_locked_states() -> None:
    h = make_mamba()
    leaf = h.insert([1, 2]).last_node
    h.cache.inc_lock_ref(leaf)
    assert h.cache.evict(10, 10).mamba_evicted == 0
    h.cache.dec_lock_ref(leaf)
    assert h.cache.evict(0, 10).mamba_evicted == 1


def test_the_mamba_target_counts_slots_freed_in_both_phases() -> None:
    h = make_mamba()
    h.insert([1])
    h.insert([2])
    r = h.cache.evict(1, 1)
    assert (r.full_evicted, r.mamba_evicted) == (1, 1) and h.cache.total_size() == 1


def test_bad_evict_arguments_are_refused() -> None:
    h = make_mamba()
    h.insert([1])
    for args in ((-1, 0), (0, -1), (1.5, 0)):  # 1.5: a float count, deliberately wrong
        with pytest.raises(UsageError):
            h.cache.evict(*args)
    assert h.cache.total_size() == 1


def test_reset_frees_every_index_and_slot_and_reports_every_node() -> None:
    h = make_mamba()
    h.insert([1, 2, 3])
    h.insert([1, 2, 4])
    stale = h.match([1, 2, 3]).last_node
    h.cache.reset()
    h.cache.check_invariants()
    assert h.kv.allocated_count() == 0 and h.states.available_size() == h.states.size
    assert sorted(h.evicted) == [1, 2, 3]
    with pytest.raises(StaleNodeError):
        h.cache.inc_lock_ref(stale)


def test_page_size_aligns_keys_and_states() -> None:
    h = make_mamba(page_size=2)
    r = h.insert([1, 2, 3, 4, 5])
    assert r.prefix_len == 0 and h.cache.total_size() == 4
    m = h.match([1, 2, 3, 4, 5, 6])
    assert m.prefix_len == 4
    m = h.match([1, 2, 3])
    assert m.prefix_len == 0 and m.mamba_branching_seqlen == 2


def test_copy_on_write_makes_room_when_the_pool_is_full() -> None:
    h = make_mamba(slots=2)
    h.insert([1])
    h.insert([2])  # both slots held by the tree
    r = h.match([2], keep=True)
    assert r.prefix_len == 1 and r.cow_slot is not None
    assert [node_tokens(n) for n in h.cache.nodes()] == [[2]], "the other state made room"


def test_copy_on_write_without_any_free_slot_reports_a_miss() -> None:
    h = make_mamba(slots=1)
    leaf = h.insert([1]).last_node
    h.cache.inc_lock_ref(leaf)
    r = h.match([1])
    assert r.prefix_len == 0 and r.cow_slot is None and r.mamba_branching_seqlen == 1


def test_namespaces_do_not_share_states() -> None:
    h = make_mamba()
    h.insert([1, 2], extra_key="a")
    assert h.match([1, 2]).prefix_len == 0
    assert h.match([1, 2], extra_key="a").prefix_len == 2
    with pytest.raises(TokenTypeError):
        h.cache.match_prefix(RadixKey([1], 5))  # type: ignore[arg-type]  # deliberately wrong


def test_pretty_print_shows_slots_and_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    h = make_mamba()
    h.insert([1, 2])
    h.cache.pretty_print()
    out = capsys.readouterr().out
    assert "mamba_evictable=1" in out and "slot=" in out


def test_without_pools_the_cache_still_works() -> None:
    cache = MambaRadixCache()
    cache.insert(RadixKey([1, 2]), mamba_value=0)
    r = cache.match_prefix(RadixKey([1, 2]))
    assert r.prefix_len == 2 and r.cow_slot is None
    assert cache.evict(10).full_evicted == 2


def test_state_pool_refuses_double_frees_and_bad_copies() -> None:
    pool = MambaStatePool(2, (3,))
    a, b = pool.alloc_track_slot(), pool.alloc_track_slot()
    assert a is not None and b is not None and pool.alloc_track_slot() is None
    pool.states[a] = 1.0
    pool.copy_states(a, b)
    assert torch.equal(pool.states[b], torch.ones(3))
    with pytest.raises(UsageError):
        pool.copy_states(a, a)
    pool.free_track_slot(torch.tensor([b]))
    with pytest.raises(UsageError, match="not allocated"):
        pool.free_track_slot(b)
    with pytest.raises(UsageError):
        pool.copy_states(a, b)
    with pytest.raises(UsageError):
        pool.free_track_slot(5)

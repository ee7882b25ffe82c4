"""Mamba copy-on-write is asked for, never implied (SPEC.md, Mamba: copy-on-write).

A scheduler that orders its queue by prefix length (sglang's LPM policy) matches every
waiting request, again at every step: a plain ``match_prefix(key)`` must take nothing from
the state pool, even an exhausted one, and must not evict a state to make room. Only the
request that runs asks for its private copy (``cow=True``); with the pool exhausted, making
room then must not take the state being copied.
"""

from __future__ import annotations

import pytest

from radixkv import RadixKey, TokenTypeError
from tests.mamba_helpers import make_mamba, node_tokens

WAITING = [[1, 2, 9], [3, 4, 9], [1, 2], [5, 6], [3, 4]]


def test_a_probing_scheduler_takes_no_slot_and_evicts_no_state() -> None:
    """Two slots, both the tree's: the pool is exhausted. Probing every waiting request ten
    times over leaves the pool, the tree's states and the tree exactly as they were."""
    h = make_mamba(slots=2)
    h.insert([1, 2])
    h.insert([3, 4])
    assert h.states.available_size() == 0
    slots = h.cache.owned_slots()
    for _ in range(10):
        lengths = [h.match(tokens, cow=False).prefix_len for tokens in WAITING]
        assert lengths == [2, 2, 2, 0, 2]  # what the scheduler orders its queue by
    assert h.states.available_size() == 0, "a probe took a slot"
    assert h.cache.owned_slots() == slots, "a probe evicted a state to make room"
    assert h.evicted == [] and h.cache.total_size() == 4
    assert not h.leaked()


def test_a_probe_returns_the_state_node_and_no_slot() -> None:
    h = make_mamba(slots=4)
    ins = h.insert([1, 2, 3])
    free = h.states.available_size()
    r = h.cache.match_prefix(RadixKey([1, 2, 3, 4]))  # the default: no copy
    assert r.prefix_len == 3 and r.last_node is ins.last_node and r.cow_slot is None
    assert r.last_node.slot is not None  # the caller may still copy it itself, locked
    assert h.states.available_size() == free


def test_only_the_request_that_runs_asks_for_a_copy_and_owns_it() -> None:
    h = make_mamba(slots=3)
    leaf = h.insert([1, 2]).last_node
    for tokens in WAITING:
        h.match(tokens, cow=False)
    assert h.states.available_size() == 2
    r = h.match([1, 2, 9], keep=True)  # admitted: it asks for its copy
    assert r.cow_slot is not None and r.cow_slot != leaf.slot
    assert not h.cache.owns_slot(r.cow_slot) and h.states.available_size() == 1
    h.states.free_track_slot(r.cow_slot)  # the caller's to free
    assert h.states.available_size() == 2


def test_a_probe_sees_a_hit_that_a_copy_could_not_be_made_for() -> None:
    """With every slot held and the state locked, a copy is impossible: the request asking
    for one gets a miss (its hit would be unusable); a probe, which copies nothing, the hit."""
    h = make_mamba(slots=1)
    leaf = h.insert([1]).last_node
    h.cache.inc_lock_ref(leaf)
    probe = h.match([1], cow=False)
    assert probe.prefix_len == 1 and probe.last_node is leaf and probe.cow_slot is None
    run = h.match([1])
    assert run.prefix_len == 0 and run.cow_slot is None and run.mamba_branching_seqlen == 1


def test_cow_at_exhaustion_evicts_another_state_not_its_source() -> None:
    """Three slots: A and B own two, A's request takes the third. B's request must make
    room, and B (the least recently used state) is the state it copies: the room comes
    from A."""
    h = make_mamba(slots=3)
    h.insert([1, 2])  # A
    h.insert([3, 4])  # B
    h.match([1, 2], keep=True)  # the request keeps its copy: the pool is now empty
    assert h.states.available_size() == 0
    for tokens in WAITING:  # probes in between change nothing
        h.match(tokens, cow=False)
    assert h.states.available_size() == 0 and len(h.cache.owned_slots()) == 2
    result = h.match([3, 4], keep=True)
    assert result.prefix_len == 2 and result.cow_slot is not None
    assert not result.last_node.evicted and result.last_node.mamba_value is not None
    assert [node_tokens(n) for n in h.cache.nodes()] == [[3, 4]]  # A, a leaf, went instead
    assert len(h.cache.owned_slots()) == 1


@pytest.mark.parametrize("bad", [1, 0, None, "yes"])
def test_cow_must_be_a_bool_and_a_bad_one_changes_nothing(bad: object) -> None:
    h = make_mamba(slots=2)
    leaf = h.insert([1, 2]).last_node
    stamp = leaf.last_access_time
    with pytest.raises(TokenTypeError, match="cow must be a bool"):
        h.cache.match_prefix(RadixKey([1, 2]), cow=bad)  # type: ignore[arg-type]  # bad on purpose
    assert leaf.last_access_time == stamp and leaf.hit_count == 0
    assert h.states.available_size() == 1


def test_a_copy_that_makes_room_reports_the_tree_it_leaves() -> None:
    """Issue 30, item 4. Three slots, all the tree's: [1] holds a state, [1, 2] is a
    tombstone (phase 2 took its state), [1, 2, 3] and [9] hold the others. The copy of
    [1]'s state for [1, 2, 5] makes room by deleting [1, 2, 3], the least recently used
    state, and with it the tombstone [1, 2]: the KV the walk measured past [1] is gone, so
    the match reports no branching (it reported 2, from before the eviction)."""
    h = make_mamba(slots=3)
    h.insert([1])
    h.insert([1, 2])
    h.insert([1, 2, 3])
    h.match([1], cow=False)
    assert h.cache.evict(0, 1).mamba_evicted == 1  # [1, 2] is a tombstone now
    h.insert([9])
    assert h.states.available_size() == 0
    r = h.match([1, 2, 5], keep=True)
    assert r.prefix_len == 1 and node_tokens(r.last_node) == [1] and r.cow_slot is not None
    assert h.cache.total_size() == 2  # [1] and [9]: making room took [1, 2, 3] and [1, 2]
    assert r.mamba_branching_seqlen is None
    probe = h.match([1, 2, 5], cow=False)
    assert (probe.prefix_len, probe.mamba_branching_seqlen) == (1, None)
    assert probe.last_node is r.last_node and not r.last_node.evicted
    h.states.free_track_slot(r.cow_slot)
    assert not h.leaked()


def test_a_copy_that_makes_room_reports_a_shortened_branching_point() -> None:
    """Four slots, all the tree's: [1], [1, 2, 3, 4], [1, 2, 7], [9] ([1, 2] is a split's
    upper part, without state). The KV of [1, 2, 3, 5] reaches 3, into [1, 2, 3, 4]; making
    room for the copy of [1]'s state deletes that leaf, the least recently used state.
    [1, 2] stays (it leads to [1, 2, 7]), so the KV now reaches 2."""
    h = make_mamba(slots=4)
    h.insert([1, 2, 3, 4])
    h.insert([1])
    h.insert([1, 2, 7])
    h.insert([9])
    assert h.states.available_size() == 0
    assert h.match([1, 2, 3, 5], cow=False).mamba_branching_seqlen == 3
    r = h.match([1, 2, 3, 5])
    assert r.prefix_len == 1 and r.cow_slot is not None
    assert sorted(node_tokens(n) for n in h.cache.nodes()) == [[1], [2], [7], [9]]
    assert r.mamba_branching_seqlen == 2
    assert h.match([1, 2, 3, 5], cow=False).mamba_branching_seqlen == 2
    assert not h.leaked()


def test_a_copy_with_a_free_slot_evicts_nothing_and_keeps_the_walk() -> None:
    """The same tree with a fourth slot: the copy takes the free one, nothing is evicted,
    and the branching point is the walk's: the KV reaches [1, 2] past [1]'s state."""
    h = make_mamba(slots=4)
    h.insert([1])
    h.insert([1, 2])
    h.insert([1, 2, 3])
    h.match([1], cow=False)
    h.cache.evict(0, 1)
    h.insert([9])
    assert h.states.available_size() == 1
    r = h.match([1, 2, 5])
    assert (r.prefix_len, r.mamba_branching_seqlen) == (1, 2) and r.cow_slot is not None
    assert h.cache.total_size() == 4 and h.evicted == []
    assert not h.leaked()

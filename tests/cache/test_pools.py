"""Pools at exhaustion (issue 12, item 7): copy-on-write with a full state pool, where a
random search rarely goes, checked directly (the mutants of this family point here)."""

from __future__ import annotations

from tests.mamba_helpers import make_mamba, node_tokens


def test_copy_on_write_at_exhaustion_keeps_its_source_even_when_it_is_the_oldest() -> None:
    """The state to copy is the least recent one: making room must take the other."""
    h = make_mamba(slots=2)
    h.insert([1])  # the oldest state: the natural victim, unless it is protected
    h.insert([2])  # both slots now held by the tree
    r = h.match([1], keep=True)
    assert r.prefix_len == 1 and r.cow_slot is not None
    (kept,) = h.cache.nodes()
    assert node_tokens(kept) == [1], "the other state made room"
    assert r.cow_slot != kept.slot, "the copy is the request's own slot"
    h.cache.check_invariants()


def test_copy_on_write_at_exhaustion_counts_every_slot() -> None:
    """Every slot is the tree's, the request's, or free: none lost making room."""
    h = make_mamba(slots=2)
    h.insert([1])
    h.insert([2])
    r = h.match([2], keep=True)
    tree = {n.slot for n in h.cache.nodes() if n.slot is not None}
    assert r.cow_slot is not None and r.cow_slot not in tree
    assert h.states.size - h.states.available_size() == len(tree) + 1

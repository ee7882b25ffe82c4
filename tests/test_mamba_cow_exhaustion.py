"""Copy-on-write with the state pool exhausted: making room must not take the source."""

from __future__ import annotations

from .mamba_helpers import make_mamba


def test_cow_at_exhaustion_evicts_another_state_not_its_source() -> None:
    """Three slots: A and B own two, A's match takes the third. B's match must make room,
    and B (the least recently used state) is the state it copies: the room comes from A."""
    h = make_mamba(slots=3)
    h.insert([1, 2])  # A
    h.insert([3, 4])  # B
    h.match([1, 2], keep=True)  # the request keeps its copy: the pool is now empty
    assert h.states.available_size() == 0
    result = h.match([3, 4], keep=True)
    assert result.prefix_len == 2 and result.cow_slot is not None
    assert not result.last_node.evicted and result.last_node.mamba_value is not None
    assert len(h.cache.owned_slots()) == 1  # A's state went instead

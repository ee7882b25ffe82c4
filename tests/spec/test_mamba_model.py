"""The Mamba model's copy-on-write match at a full pool: it answers for the cache it leaves.

``MambaCacheModel.match(..., room=events)`` says the pool had no slot for the copy and the
implementation freed ``events`` making room: the model checks them as ``evict(0, 1)`` with
the copied state held, then measures the match in the cache that eviction left (SPEC.md,
Mamba: "A copy that makes room answers for the cache it leaves"; issue 30, item 4).
"""

from typing import Any

import pytest
from radixkv_spec.invariants import SpecViolation
from radixkv_spec.mamba import MambaCacheModel
from radixkv_spec.outcomes import FreeEvent


def issue_30_cache() -> MambaCacheModel:
    """[1] holds a state, [1, 2] is a tombstone, [1, 2, 3] and [9] hold the others."""
    model = MambaCacheModel(1)
    model.insert(None, [1], [10], state_slot=0)
    model.insert(None, [1, 2], [10, 11], state_slot=1)
    model.insert(None, [1, 2, 3], [10, 11, 12], state_slot=2)
    model.match(None, [1])
    model.apply_eviction(0, [("slot", (1,))], mamba_slots=1)  # [1, 2]'s state, the least recent
    model.insert(None, [9], [13], state_slot=1)
    model.check()
    return model


def snapshot(model: MambaCacheModel) -> dict[str, Any]:
    return {k: (dict(v) if isinstance(v, dict) else v) for k, v in vars(model).items()}


def test_without_room_the_walk_measures_the_cache_as_it_is() -> None:
    model = issue_30_cache()
    got = model.match(None, [1, 2, 5])
    assert (got.prefix_len, got.source_slot, got.branching_seqlen) == (1, 0, 2)


def test_room_that_deletes_the_walked_kv_leaves_no_branching() -> None:
    model = issue_30_cache()
    room: list[FreeEvent] = [
        ("free", (12,)),
        ("slot", (2,)),
        ("free", (11,)),
    ]  # [1, 2, 3], its cascade
    got = model.match(None, [1, 2, 5], room=room)
    assert got.indices == (10,) and got.prefix_len == 1 and got.source_slot == 0
    assert got.branching_seqlen is None
    assert model.total_size() == 2 and not model.handles  # the copy's hold is given back
    assert model.match(None, [1, 2, 5]).branching_seqlen is None  # a probe agrees
    model.check()


def test_room_that_keeps_part_of_the_walk_shortens_the_branching_point() -> None:
    model = MambaCacheModel(1)
    model.insert(None, [1, 2, 3, 4], [10, 11, 12, 13], state_slot=0)
    model.insert(None, [1], [10], state_slot=1)
    model.insert(None, [1, 2, 7], [10, 11, 14], state_slot=2)
    model.insert(None, [9], [15], state_slot=3)
    room: list[FreeEvent] = [("free", (12, 13)), ("slot", (0,))]  # [1, 2] leads on to [1, 2, 7]
    got = model.match(None, [1, 2, 3, 5], room=room)
    assert (got.prefix_len, got.source_slot, got.branching_seqlen) == (1, 1, 2)


def test_room_with_no_slot_freed_is_a_miss_at_the_root() -> None:
    model = MambaCacheModel(1)
    model.insert(None, [1, 2], [10, 11], state_slot=0)
    model.lock(None, [1, 2])  # the only state is held: nothing can make room
    got = model.match(None, [1, 2, 3], room=[])
    assert (got.indices, got.prefix_len, got.source_slot) == ((), 0, None)
    assert got.branching_seqlen == 2  # the KV the cache still holds


def test_room_must_not_take_the_state_being_copied() -> None:
    model = issue_30_cache()
    before = snapshot(model)
    with pytest.raises(SpecViolation, match="INV-35"):
        model.match(None, [1, 2, 5], room=[("slot", (0,))])  # [1]'s own state: it is held
    assert snapshot(model) == before


def test_room_must_take_the_least_recent_state() -> None:
    model = issue_30_cache()
    with pytest.raises(SpecViolation, match="INV-35"):
        model.match(None, [1, 2, 5], room=[("free", (13,)), ("slot", (1,))])  # [9] is more recent


def test_room_where_no_copy_is_due_is_a_violation() -> None:
    model = issue_30_cache()
    with pytest.raises(SpecViolation, match="INV-34"):
        model.match(None, [7], room=[])  # a miss copies nothing: it never asks for room

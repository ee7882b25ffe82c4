"""The Mamba model's engine habits (sglang's unified tree), each against radixkv's default.

``MambaCacheModel`` takes them as keywords (the kit's profile names them ``mamba_*``): a leaf
left without a state stays, a lock may end where no state is, a state's recency is its own,
and under a victim order whose splits refresh both halves a match widens what it walked.
"""

from __future__ import annotations

import pytest
from radixkv_spec.invariants import SpecUsageError, SpecViolation
from radixkv_spec.mamba import MambaCacheModel, StateRecency
from radixkv_spec.outcomes import FreeEvent
from radixkv_spec.policies import LRU_LEAVES, LRU_SPLIT_REFRESHES_BOTH, VictimOrder


def _violations(
    model: MambaCacheModel, num_tokens: int, slots: int, events: list[FreeEvent]
) -> list[str]:
    """The rules an ``evict(num_tokens, slots)`` that freed ``events`` breaks, each
    acknowledged so the model goes on."""
    broken: list[str] = []

    def note(violation: SpecViolation) -> bool:
        broken.append(violation.inv_id)
        return True

    try:
        model.apply_eviction(num_tokens, events, waive=note, mamba_slots=slots)
    except SpecViolation as violation:  # a rule the model cannot go on past
        broken.append(violation.inv_id)
    return broken


@pytest.mark.parametrize("kept", [False, True])
def test_a_leaf_whose_child_and_state_went_stays_only_if_kept(kept: bool) -> None:
    model = MambaCacheModel(1, tombstone_leaves=kept)
    model.insert(None, (0, 0), (0, 1), state_slot=0)  # (0,) holds no state
    broken = _violations(model, 0, 1, [("free", (1,)), ("slot", (0,))])
    assert broken == ([] if kept else ["INV-31"])
    if kept:
        assert model.contents() == {(None, (0,)): ((0,), None)}
        model.check()


@pytest.mark.parametrize("accepted", [False, True])
def test_a_lock_where_no_state_is(accepted: bool) -> None:
    model = MambaCacheModel(1, tombstone_locks=accepted)
    model.insert(None, (0, 0), (0, 1), state_slot=0)
    if not accepted:
        with pytest.raises(SpecUsageError):
            model.lock(None, (0,))
        return
    model.lock(None, (0,))
    assert model.is_locked(None, (0,)) and model.mamba_protected_size() == 0
    model.check()


@pytest.mark.parametrize(("recency", "broken"), [("path", ["INV-35"]), ("own", [])])
def test_a_state_refreshed_only_where_it_is_used(recency: StateRecency, broken: list[str]) -> None:
    """A match of (0, 0) uses the state there; the one at (0,) stays as old as its insert."""
    model = MambaCacheModel(1, state_recency=recency)
    model.insert(None, (0,), (0,), state_slot=1)
    model.insert(None, (0, 0), (0, 1), state_slot=2)
    model.insert(None, (1,), (2,), state_slot=3)
    model.match(None, (0, 0))
    assert _violations(model, 0, 1, [("slot", (1,))]) == broken


@pytest.mark.parametrize(
    ("victims", "broken"), [(LRU_LEAVES, ["INV-35"]), (LRU_SPLIT_REFRESHES_BOTH, [])]
)
def test_a_match_may_refresh_the_lower_half_of_its_split(
    victims: VictimOrder, broken: list[str]
) -> None:
    """The match of (0,) in "" ends inside the node (0, 0): a split there may stamp the
    lower half, so the older leaf in namespace None may go first."""
    model = MambaCacheModel(1, victims)
    model.insert("", (0, 0), (0, 1), state_slot=0)
    model.insert(None, (0,), (2,), state_slot=1)
    model.match("", (0,))
    assert _violations(model, 1, 0, [("free", (2,)), ("slot", (1,))]) == broken

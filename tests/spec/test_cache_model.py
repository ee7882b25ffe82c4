"""One door for every spec model (``radixkv_spec.CacheModel``): the same calls give the
same records, whatever the cache's parts."""

import pytest
from radixkv_spec import (
    CacheModel,
    EvictionOutcome,
    InsertOutcome,
    MatchOutcome,
    ResetOutcome,
    SpecUsageError,
    SpecViolation,
)
from radixkv_spec.invariants import never
from radixkv_spec.mamba import MambaCacheModel
from radixkv_spec.model import PrefixCacheModel
from radixkv_spec.swa import SlidingWindowModel


def _models() -> list[CacheModel]:
    # A window as long as the keys (nothing leaves it); each Mamba insert brings a state.
    return [PrefixCacheModel(1), SlidingWindowModel(1, 8), MambaCacheModel(1)]


def _insert(model: CacheModel, tokens: tuple[int, ...], indices: tuple[int, ...]) -> InsertOutcome:
    # Mamba's new pages need a state slot (INV-31); the other models ignore it
    return model.insert(None, tokens, indices, state_slot=100 + len(tokens))


def _slot_of(model: CacheModel, slot: int) -> list[tuple[str, tuple[int, ...]]]:
    """A Mamba cache frees a deleted node's state slot right after its KV."""
    return [("slot", (slot,))] if isinstance(model, MambaCacheModel) else []


@pytest.mark.parametrize("model", _models(), ids=lambda m: type(m).__name__)
def test_every_model_answers_through_the_same_door(model: CacheModel) -> None:
    assert isinstance(model, CacheModel)
    first = _insert(model, (1, 2), (10, 11))
    assert (first.prefix_len, first.dropped, first.end) == (0, (), 2)
    # a request that computed (1, 2) again: its 20, 21 duplicate the cached 10, 11
    second = _insert(model, (1, 2, 3), (20, 21, 12))
    assert (second.prefix_len, second.dropped, second.end) == (2, (20, 21), 3)
    matched = model.match(None, (1, 2, 9))
    assert (matched.indices, matched.prefix_len) == ((10, 11), 2)
    model.lock(None, (1, 2, 3))
    assert model.protected_size() == 3 == model.total_size()
    model.check()
    with pytest.raises(SpecViolation, match="INV-"):  # every page is held: none may go
        model.apply_eviction(1, [("free", (12,))])
    model.unlock(None, (1, 2, 3))
    assert model.protected_size() == 0
    _insert(model, (5,), (50,))
    model.match(None, (1, 2, 3))  # (5,) is now the least recent leaf
    freed = model.apply_eviction(1, [("free", (50,)), *_slot_of(model, 101)])
    assert (freed.full_evicted, freed.deleted) == (1, ((None, (5,)),))
    assert model.match(None, (5,)) == MatchOutcome((), 0)
    dropped = model.reset()
    assert isinstance(dropped, ResetOutcome)
    assert sorted(dropped.indices) == [10, 11, 12] and model.positions() == []
    model.check()


@pytest.mark.parametrize("model", _models(), ids=lambda m: type(m).__name__)
def test_every_model_takes_every_keyword_of_the_door(model: CacheModel) -> None:
    """One signature per operation: a keyword of a part the model does not have is taken,
    and at its default changes nothing."""
    inserted = model.insert(
        None,
        (1, 2),
        (10, 11),
        priority=0,
        prev_prefix_len=0,
        swa_evicted_seqlen=0,
        state_slot=100,
    )
    assert (inserted.prefix_len, inserted.dropped, inserted.end) == (0, (), 2)
    matched = model.match(None, (1, 2), room=None, waive=never)
    assert (matched.indices, matched.prefix_len) == ((10, 11), 2)
    model.lock(None, (1, 2), obtained_at=model.clock)
    model.unlock(None, (1, 2), obtained_at=model.clock)
    freed = model.apply_eviction(
        2,
        [("free", (10, 11)), *_slot_of(model, 100)],
        waive=never,
        swa_num_tokens=0,
        swa_locked=None,
        mamba_slots=0,
    )
    assert (freed.full_evicted, freed.deleted) == (2, ((None, (1,)), (None, (1, 2))))
    model.check()


@pytest.mark.parametrize(
    "model", [PrefixCacheModel(1), MambaCacheModel(1)], ids=lambda m: type(m).__name__
)
def test_a_lock_with_a_stale_receipt_is_refused_where_the_model_keeps_birth_ticks(
    model: CacheModel,
) -> None:
    """``obtained_at``: a handle taken before its node was evicted names a dead node, even
    once the same position is cached again."""
    _insert(model, (1,), (10,))
    taken = model.clock
    model.apply_eviction(1, [("free", (10,)), *_slot_of(model, 101)])
    _insert(model, (1,), (11,))
    with pytest.raises(SpecUsageError, match="stale"):
        model.lock(None, (1,), obtained_at=taken)
    model.lock(None, (1,), obtained_at=model.clock)
    with pytest.raises(SpecUsageError, match="stale"):
        model.unlock(None, (1,), obtained_at=taken)
    model.unlock(None, (1,), obtained_at=model.clock)
    model.check()


def test_each_part_fills_its_own_fields_and_leaves_the_others_at_their_defaults() -> None:
    plain, window, mamba = PrefixCacheModel(1), SlidingWindowModel(1, 8), MambaCacheModel(1)
    assert _insert(plain, (1,), (10,)).state_existed is None
    assert _insert(mamba, (1,), (10,)).state_existed is False
    again = mamba.insert(None, (1,), (10,), state_slot=7)
    assert (again.state_existed, again.dropped_slots) == (True, (7,))  # the caller frees 7
    assert mamba.reset() == ResetOutcome((10,), slots=(101,))
    window.insert(None, (1, 2), (10, 11), swa_evicted_seqlen=1)  # (1,) left the window
    assert window.reset() == ResetOutcome((10, 11), swa_live=(11,))


def test_each_eviction_counts_what_its_part_frees() -> None:
    window, mamba = SlidingWindowModel(1, 1), MambaCacheModel(1)
    window.insert(None, (1, 2), (10, 11))
    tombstoned = window.apply_eviction(0, [("free_swa", (10,))], swa_num_tokens=1)
    assert tombstoned == EvictionOutcome(0, swa_evicted=1)  # (1,) keeps its full KV
    _insert(mamba, (1,), (10,))
    _insert(mamba, (1, 2), (10, 11))
    inner = mamba.apply_eviction(0, [("slot", (101,))], mamba_slots=1)  # (1,)'s state
    assert inner == EvictionOutcome(0, mamba_evicted=1)
    whole = mamba.apply_eviction(2, [("free", (10, 11)), ("slot", (102,))])
    assert whole == EvictionOutcome(2, mamba_evicted=1, deleted=((None, (1,)), (None, (1, 2))))

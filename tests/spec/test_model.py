"""Worked examples of the model: what each operation means, and what it rejects."""

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from radixkv_spec.invariants import INVARIANTS, SpecUsageError, SpecViolation
from radixkv_spec.model import PrefixCacheModel
from radixkv_spec.outcomes import node_frees
from radixkv_spec.tokens import Token


def cache(page_size: int, *inserts: tuple[Sequence[Token], Sequence[int]]) -> PrefixCacheModel:
    """A model after inserting each (tokens, indices) in the None namespace, in order."""
    model = PrefixCacheModel(page_size)
    for tokens, indices in inserts:
        model.insert(None, tokens, indices)
    model.check()
    return model


def rejected(model: PrefixCacheModel, error: type[Exception], call: Callable[[], object]) -> None:
    """``call`` raises ``error`` and leaves ``model`` exactly as it was (INV-14)."""
    before = vars(model.copy())
    with pytest.raises(error):
        call()
    assert vars(model) == before
    model.check()


# ------------------------------------------------------------------ match / insert


def test_match_on_an_empty_cache_finds_nothing() -> None:
    model = cache(1)
    assert model.match(None, [1, 2, 3]).indices == ()
    assert model.match(None, []).indices == ()


def test_insert_then_extend_reports_the_cached_prefix() -> None:
    model = cache(1)
    assert model.insert(None, [1, 2, 3], [10, 11, 12]).prefix_len == 0
    assert model.insert(None, [1, 2, 3, 4, 5], [90, 91, 92, 13, 14]).prefix_len == 3
    # INV-12: the cache keeps its own indices for the prefix, adopts only the suffix
    assert model.match(None, [1, 2, 3, 4, 5, 6]).indices == (10, 11, 12, 13, 14)
    assert model.total_size() == 5
    model.check()


def test_match_stops_at_the_first_uncached_token() -> None:
    model = cache(1, ([1, 2, 3], [10, 11, 12]))
    assert model.match(None, [1, 2, 9]).indices == (10, 11)
    assert model.match(None, [9]).indices == ()


def test_page_alignment_on_match_and_insert() -> None:
    model = cache(4)
    # Seven tokens are one whole page and a tail: only the page is cached
    assert model.insert(None, [1, 2, 3, 4, 5, 6, 7], range(100, 107)).prefix_len == 0
    assert model.total_size() == 4
    assert model.match(None, [1, 2, 3, 4, 5, 6]).indices == (100, 101, 102, 103)
    assert model.match(None, [1, 2, 3]).indices == ()


def test_sibling_pages_sharing_a_first_token_hold_their_own_indices() -> None:
    model = cache(2, ([1, 2], [10, 11]), ([1, 3], [20, 21]))
    assert model.match(None, [1, 3]).indices == (20, 21)
    assert model.match(None, [1, 2]).indices == (10, 11)
    assert model.cached_indices() == {
        10: (None, (1,)),
        11: (None, (1, 2)),
        20: (None, (1,)),
        21: (None, (1, 3)),
    }


def test_namespaces_never_share_a_match() -> None:
    model = cache(1)
    for index, ns in enumerate((None, "", "a")):
        assert model.insert(ns, [1, 2], [10 * index, 10 * index + 1]).prefix_len == 0
    assert model.match("", [1, 2]).indices == (10, 11)
    assert model.match("b", [1, 2]).indices == ()
    assert model.total_size() == 6


def test_bigram_tokens_are_tuples() -> None:
    model = cache(1, ([(1, 2), (2, 3)], [10, 11]))
    assert model.match(None, [(1, 2), (2, 4)]).indices == (10,)
    assert model.match(None, [1, 2]).indices == ()


def test_match_and_insert_refresh_their_whole_path() -> None:
    model = cache(1, ([1, 2, 3], [10, 11, 12]), ([5], [50]))
    model.match(None, [1, 2])
    assert model.recency[(None, (1,))] == model.recency[(None, (1, 2))] == model.clock
    assert model.recency[(None, (1, 2, 3))] < model.recency[(None, (5,))] < model.clock
    model.check()


def test_insert_with_too_few_indices_is_rejected() -> None:
    model = cache(2, ([1, 2], [10, 11]))
    rejected(model, SpecUsageError, lambda: model.insert(None, [1, 2, 3, 4], [1, 2, 3]))
    # A tail shorter than a page needs no index
    assert model.insert(None, [1, 2, 3, 4, 5], [0, 0, 12, 13]).prefix_len == 2


def test_insert_of_an_index_the_cache_holds_is_rejected() -> None:
    model = cache(1, ([1, 2], [10, 11]))
    rejected(model, SpecUsageError, lambda: model.insert(None, [1, 2, 3], [0, 0, 10]))
    rejected(model, SpecUsageError, lambda: model.insert(None, [7, 8], [5, 5]))
    # The caller's duplicates of the cached prefix are ignored, whatever they are
    assert model.insert(None, [1, 2, 3], [11, 10, 12]).prefix_len == 2


@pytest.mark.parametrize(
    ("extra_key", "tokens", "error"),
    [
        (1, [1], TypeError),
        (None, [-1], ValueError),
        (None, [2**63], ValueError),
        (None, ["1"], TypeError),
        (None, [(1, "2")], TypeError),
        (None, [()], ValueError),
        (None, [1.0], TypeError),
    ],
)
def test_bad_keys_are_rejected_before_any_change(
    extra_key: Any, tokens: Any, error: type[Exception]
) -> None:
    # Any: the input is ill-typed on purpose
    model = cache(1, ([1], [10]))
    rejected(model, error, lambda: model.match(extra_key, tokens))
    rejected(model, error, lambda: model.insert(extra_key, tokens, [5]))


class NumpyLikeInt:
    """An integer of another library: it converts through ``__index__``."""

    def __index__(self) -> int:
        return 7


def test_integers_of_other_libraries_are_token_ids() -> None:
    model = cache(1)
    model.insert(None, [NumpyLikeInt()], [70])  # type: ignore[list-item]  # Token is int
    assert model.match(None, [7]).indices == (70,)


def test_bad_indices_are_rejected_before_any_change() -> None:
    model = cache(1)
    rejected(model, ValueError, lambda: model.insert(None, [1], [-1]))
    rejected(model, TypeError, lambda: model.insert(None, [1], [False]))
    rejected(model, TypeError, lambda: model.insert(None, [1], ["7"]))  # type: ignore[list-item]


# ---------------------------------------------------------------------- locks


def test_a_lock_protects_its_whole_path() -> None:
    model = cache(1, ([1, 2, 3], [10, 11, 12]), ([1, 5], [0, 21]))
    model.lock(None, [1, 2])
    assert model.protected_size() == 2
    assert model.evictable_size() == 2
    assert model.is_locked(None, [1]) and not model.is_locked(None, [1, 2, 3])
    model.lock(None, [1, 2])
    model.unlock(None, [1, 2])
    assert model.handle_count(None, [1, 2]) == 1
    model.unlock(None, [1, 2])
    assert model.protected_size() == 0
    model.check()


def test_unlock_without_a_handle_is_rejected() -> None:
    model = cache(1, ([1, 2], [10, 11]))
    rejected(model, SpecUsageError, lambda: model.unlock(None, [1, 2]))
    model.lock(None, [1, 2])
    # The lock on [1] comes from the handle at [1, 2]: no handle is held at [1] itself
    rejected(model, SpecUsageError, lambda: model.unlock(None, [1]))


def test_root_handles_are_no_ops() -> None:
    model = cache(1, ([1], [10]))
    model.lock(None, [])
    model.unlock(None, [])
    model.unlock(None, [])
    assert model.protected_size() == 0


def test_lock_of_an_uncached_position_is_rejected() -> None:
    model = cache(2, ([1, 2], [10, 11]))
    rejected(model, SpecUsageError, lambda: model.lock(None, [1, 3]))
    rejected(model, SpecUsageError, lambda: model.lock(None, [1]))
    rejected(model, SpecUsageError, lambda: model.lock("a", [1, 2]))


def test_handles_go_stale_when_their_path_is_evicted_and_reinserted() -> None:
    model = cache(1, ([1, 2], [10, 11]))
    taken = model.clock
    model.apply_eviction(2, node_frees([(10, 11)]))
    assert model.handle_is_stale(None, [1, 2], taken)
    model.insert(None, [1, 2], [30, 31])
    assert model.handle_is_stale(None, [1, 2], taken)
    assert not model.handle_is_stale(None, [1, 2], model.clock)
    assert not model.handle_is_stale(None, [], taken)
    rejected(model, SpecUsageError, lambda: model.lock(None, [1, 2], obtained_at=taken))
    model.lock(None, [1, 2], obtained_at=model.clock)


# ------------------------------------------------------------------- eviction


def two_branches() -> PrefixCacheModel:
    """[1, 2] (least recent) and [3, 4] (refreshed by a match), page size 1."""
    model = cache(1, ([1, 2], [10, 11]), ([3, 4], [20, 21]))
    model.match(None, [3, 4])
    return model


def test_evicting_the_least_recent_leaf_is_accepted() -> None:
    model = two_branches()
    model.apply_eviction(2, node_frees([(10, 11)]))
    assert model.match(None, [1, 2]).indices == ()
    assert model.total_size() == 2
    model.check()


def test_evicting_a_leaf_node_page_by_page_is_accepted() -> None:
    model = two_branches()
    # The tree may hold [1, 2] as two nodes: the lower one goes first
    model.apply_eviction(2, node_frees([(11,), (10,)]))
    assert model.total_size() == 2


def test_evicting_more_than_the_target_by_less_than_one_victim_is_accepted() -> None:
    model = two_branches()
    model.apply_eviction(1, node_frees([(10, 11)]))
    assert model.total_size() == 2


def test_evicting_everything_stops_when_nothing_is_left() -> None:
    model = two_branches()
    model.apply_eviction(100, node_frees([(10, 11), (20, 21)]))
    assert model.total_size() == 0
    model.check()


def test_equal_recency_allows_either_victim() -> None:
    for victim in ((10,), (20,)):
        model = cache(1)
        model.insert(None, [1], [10])
        model.insert(None, [2], [20])
        model.recency[(None, (1,))] = model.recency[(None, (2,))]
        model.apply_eviction(1, node_frees([victim]))


def test_a_multi_page_victim_is_whole_pages_in_path_order() -> None:
    model = cache(2, ([1, 2, 3, 4], [10, 11, 12, 13]))
    rejected(model, SpecViolation, lambda: model.apply_eviction(1, node_frees([(13,)])))
    rejected(model, SpecViolation, lambda: model.apply_eviction(1, node_frees([(12, 13, 10, 11)])))
    model.apply_eviction(1, node_frees([(10, 11, 12, 13)]))
    assert model.total_size() == 0


def violation(model: PrefixCacheModel, target: int, groups: list[tuple[int, ...]]) -> str:
    """The INV id of the violation ``apply_eviction`` reports (the model stays unchanged)."""
    before = vars(model.copy())
    with pytest.raises(SpecViolation) as caught:
        model.apply_eviction(target, node_frees(groups))
    assert vars(model) == before
    assert caught.value.inv_id in INVARIANTS
    return caught.value.inv_id


def test_evicting_a_more_recent_leaf_is_a_violation() -> None:
    assert violation(two_branches(), 2, [(20, 21)]) == "INV-11"


def test_evicting_a_locked_leaf_is_a_violation() -> None:
    model = two_branches()
    model.lock(None, [1, 2])
    assert violation(model, 2, [(10, 11)]) == "INV-11"
    model.apply_eviction(2, node_frees([(20, 21)]))


def test_evicting_past_the_target_is_a_violation() -> None:
    assert violation(two_branches(), 1, [(11,), (10,)]) == "INV-11"
    assert violation(two_branches(), 2, [(10, 11), (20, 21)]) == "INV-11"


def test_stopping_short_of_the_target_is_a_violation() -> None:
    assert violation(two_branches(), 3, [(10, 11)]) == "INV-11"
    assert violation(two_branches(), 1, []) == "INV-11"


def test_a_zero_target_evicts_nothing_and_a_negative_one_is_rejected() -> None:
    model = two_branches()
    model.apply_eviction(0, node_frees([]))
    assert violation(model, 0, [(10, 11)]) == "INV-11"
    rejected(model, SpecUsageError, lambda: model.apply_eviction(-1, node_frees([])))
    rejected(model, SpecUsageError, lambda: model.evict(-1))


def test_freeing_an_index_the_cache_does_not_hold_is_a_violation() -> None:
    assert violation(two_branches(), 1, [(99,)]) == "INV-7"
    assert violation(two_branches(), 2, [(10, 10)]) == "INV-7"


def test_a_victim_out_of_path_order_is_a_violation() -> None:
    assert violation(two_branches(), 2, [(11, 10)]) == "INV-11"


def test_a_victim_that_cuts_off_a_sibling_branch_is_a_violation() -> None:
    model = cache(1, ([1, 2], [10, 11]), ([1, 3], [0, 21]))
    model.match(None, [1, 3])
    assert violation(model, 2, [(10, 11)]) == "INV-11"
    model.apply_eviction(2, node_frees([(11,), (21,)]))
    assert model.match(None, [1, 2, 3]).indices == (10,)


def test_a_victim_must_be_a_leaf() -> None:
    model = cache(1, ([1, 2], [10, 11]))
    assert violation(model, 1, [(10,)]) == "INV-11"


def test_the_models_own_eviction_is_admissible() -> None:
    model = two_branches()
    model.lock(None, [3])
    twin = model.copy()
    groups = model.evict(3)
    twin.apply_eviction(3, node_frees(groups))
    assert vars(twin) == vars(model)
    assert groups == [(11,), (10,), (21,)]
    model.check()


# ---------------------------------------------------------------------- reset


def test_reset_frees_every_index_and_drops_every_handle() -> None:
    model = two_branches()
    model.lock(None, [1, 2])
    taken = model.clock
    assert sorted(model.reset().indices) == [10, 11, 20, 21]
    assert model.total_size() == model.protected_size() == 0
    assert model.handle_is_stale(None, [1, 2], taken)
    rejected(model, SpecUsageError, lambda: model.unlock(None, [1, 2]))
    # A reset replaces the root too: even a root handle from before it is stale
    assert model.last_reset == model.clock > taken
    assert model.handle_is_stale(None, [], taken)
    rejected(model, SpecUsageError, lambda: model.lock(None, [], obtained_at=taken))
    model.lock(None, [], obtained_at=model.clock)
    model.check()


# ------------------------------------------------------------------ self-check


def test_check_reports_a_broken_model() -> None:
    model = cache(1, ([1, 2], [10, 11]))
    model.recency[(None, (1, 2))] = model.clock + 1
    with pytest.raises(SpecViolation) as caught:
        model.check()
    assert caught.value.inv_id == "INV-8"


# -------------------------------------------------------------- allocation room


def test_room_counts_free_pages_and_unlocked_pages_off_the_keys_prefix() -> None:
    model = cache(1, ([1, 2], [10, 11]), ([3], [12]))
    assert model.room(None, [1, 2, 4, 5], 4) == (2, 2)  # free 1; [3] can go; [1], [1, 2] held
    assert model.room(None, [3, 4, 5], 4) == (2, 3)  # free 1; [1, 2] and [1] can go
    assert model.room("a", [1, 2], 4) == (2, 4)  # another namespace: no prefix of its own
    assert model.room(None, [1, 2, 9], 4)[0] == 1  # the unaligned tail needs no page


def test_room_leaves_out_locked_pages_and_keeps_the_page_size() -> None:
    model = cache(2, ([1, 2, 3, 4], [10, 11, 12, 13]), ([5, 6], [14, 15]))
    model.lock(None, [1, 2])
    # [1, 2] is locked; [1, 2, 3, 4] below it and [5, 6] can go; one page is free
    assert model.room(None, [7, 8, 9, 9], 4) == (2, 3)
    model.lock(None, [5, 6])
    assert model.room(None, [7, 8, 9, 9], 4) == (2, 2)
    assert model.room(None, [5, 6, 7, 8], 4) == (1, 2)  # its own locked prefix counts once
    assert model.total_size() == 6 and model.protected_size() == 4  # room() changed nothing

"""The spec's router model of the event stream: every rule it enforces, on hand-made streams."""

from __future__ import annotations

import pytest
from radixkv_spec import SpecViolation, hash_to_int64, page_hashes
from radixkv_spec.events import (
    Cleared,
    EventStreamModel,
    Removed,
    Stored,
    expected_page_set,
    parse_record,
)


def hashes(ns: str | None, tokens: list[int], p: int) -> tuple[int, ...]:
    return tuple(hash_to_int64(x) for x in page_hashes(ns, tokens, p))


def stored(ns: str | None, tokens: list[int], p: int, skip: int = 0) -> Stored:
    """The record a cache emits for ``tokens[skip:]`` after the pages before ``skip``."""
    all_hashes = hashes(ns, tokens, p)
    parent = all_hashes[skip // p - 1] if skip else None
    return Stored(all_hashes[skip // p :], parent, tuple(tokens[skip:]), p, ns)


def test_a_stream_rebuilds_positions_and_hashes() -> None:
    model = EventStreamModel(2)
    model.apply_all([stored(None, [1, 2, 3, 4], 2), stored("a", [1, 2], 2)])
    model.apply(stored(None, [1, 2, 5, 6], 2, skip=2))
    assert model.positions() == {
        (None, (1, 2)),
        (None, (1, 2, 3, 4)),
        (None, (1, 2, 5, 6)),
        ("a", (1, 2)),
    }
    assert model.page_set() == expected_page_set(model.positions(), 2)
    model.apply(Removed(hashes(None, [1, 2, 3, 4], 2)[1:]))
    assert (None, (1, 2, 3, 4)) not in model.positions()
    model.apply(Cleared())
    assert model.page_set() == frozenset()
    assert model.records == 5


def test_stored_twice_without_removal_is_a_violation() -> None:
    model = EventStreamModel(1)
    model.apply(stored(None, [1, 2], 1))
    with pytest.raises(SpecViolation, match=r"INV-40.*stored again"):
        model.apply(stored(None, [1, 2], 1))
    model.apply(Removed(hashes(None, [1, 2], 1)[1:]))
    model.apply(stored(None, [1, 2], 1, skip=1))  # after a removal it may come back
    assert len(model.page_set()) == 2


def test_a_record_repeating_its_own_page_is_a_violation() -> None:
    h = hashes(None, [1], 1)[0]
    with pytest.raises(SpecViolation, match="INV-4"):
        EventStreamModel(1).apply(Stored((h, h), None, (1, 1), 1))


def test_removing_what_is_not_stored_is_a_violation() -> None:
    model = EventStreamModel(1)
    with pytest.raises(SpecViolation, match="INV-41"):
        model.apply(Removed((123,)))
    model.apply(stored(None, [1], 1))
    h = hashes(None, [1], 1)[0]
    with pytest.raises(SpecViolation, match=r"INV-41.*twice"):
        model.apply(Removed((h, h)))
    assert model.page_set() == {h}  # a rejected record changes nothing


def test_clear_empties_everything_and_a_removal_after_it_is_a_violation() -> None:
    model = EventStreamModel(1)
    model.apply(stored(None, [1, 2], 1))
    model.apply(Cleared())
    with pytest.raises(SpecViolation, match="INV-41"):
        model.apply(Removed(hashes(None, [1], 1)))


def test_a_hash_the_router_cannot_recompute_is_a_violation() -> None:
    model = EventStreamModel(1)
    wrong_namespace = Stored(hashes("a", [1], 1), None, (1,), 1, None)
    with pytest.raises(SpecViolation, match="INV-42"):
        model.apply(wrong_namespace)
    unchained = Stored(hashes(None, [2], 1), None, (2,), 1)
    model.apply(stored(None, [1], 1))
    first = hashes(None, [1], 1)[0]
    with pytest.raises(SpecViolation, match="INV-42"):
        model.apply(Stored(unchained.block_hashes, first, (2,), 1))


@pytest.mark.parametrize(
    ("record", "rule"),
    [
        (Stored((1,), 999, (1,), 1), "parent 999 is not stored"),
        (Stored((1,), None, (1,), 2), "block_size 2"),
        (Stored((1,), None, (1, 2), 1), "2 tokens for 1 pages"),
        (Stored((), None, (), 1), "no pages"),
    ],
)
def test_malformed_stored_records_are_violations(record: Stored, rule: str) -> None:
    model = EventStreamModel(1)
    with pytest.raises(SpecViolation, match=rule):
        model.apply(record)
    assert model.page_set() == frozenset()


def test_a_child_in_another_namespace_is_a_violation() -> None:
    model = EventStreamModel(1)
    model.apply(stored(None, [1], 1))
    parent = hashes(None, [1], 1)[0]
    with pytest.raises(SpecViolation, match="namespace 'a' under a page of None"):
        model.apply(Stored(hashes("a", [1, 2], 1)[1:], parent, (2,), 1, "a"))


def test_wire_records_parse_with_or_without_trailing_defaults() -> None:
    h = hashes("a", [(1, 2)], 1)  # type: ignore[list-item]  # a bigram token, as a list
    full = ["BlockStored", list(h), None, [[1, 2]], 1, None, "GPU", "a"]
    assert parse_record(full) == Stored(h, None, ((1, 2),), 1, "a")
    assert parse_record(["BlockStored", [5], 4, [7], 1]) == Stored((5,), 4, (7,), 1)
    assert parse_record(["BlockRemoved", [5]]) == Removed((5,))
    assert parse_record(["AllBlocksCleared"]) == Cleared()
    model = EventStreamModel(1)
    model.apply_batch([1.5, [full, ["BlockRemoved", list(h), "GPU"]], 0])
    assert model.records == 2 and model.page_set() == frozenset()


@pytest.mark.parametrize(
    "record",
    [
        [],
        [7],
        ["BlockStored", [1], None],
        ["BlockStored", [True], None, [1], 1],
        ["BlockStored", 5, None, [1], 1],
        ["BlockStored", [1], None, [1], 1, None, "GPU", 3],
        ["BlockRemoved"],
        ["AllBlocksCleared", 1],
        ["Unknown", 1],
    ],
)
def test_malformed_wire_records_are_rejected(record: list[object]) -> None:
    with pytest.raises(ValueError):  # every form of bad record, one family
        parse_record(record)


def test_bad_page_size_and_batch() -> None:
    with pytest.raises(ValueError, match="page_size"):
        EventStreamModel(0)
    with pytest.raises(ValueError, match="not a batch"):
        EventStreamModel(1).apply_batch([1.0])


def test_opaque_hashes_are_checked_as_names_only() -> None:
    """Another engine's hashes: no INV-42, but the stream still rebuilds token paths."""
    model = EventStreamModel(2, hashes="opaque")
    model.apply(Stored((11, 12), None, (1, 2, 3, 4), 2))
    model.apply(Stored((21,), 11, (5, 6), 2))
    model.apply(Stored((31,), None, (1, 2), 2, "ns"))  # same tokens, another namespace
    assert model.path_counts() == {(1, 2): 2, (1, 2, 3, 4): 1, (1, 2, 5, 6): 1}
    with pytest.raises(SpecViolation, match="INV-40"):
        model.apply(Stored((31,), None, (1, 2), 2))  # one name for two pages
    model.apply(Removed((12, 21)))
    assert model.path_counts() == {(1, 2): 2}
    with pytest.raises(ValueError, match="hashes must be"):
        EventStreamModel(1, hashes="sha1")  # type: ignore[arg-type]  # the error under test

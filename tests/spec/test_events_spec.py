"""The spec's router model of the event stream: every rule it enforces, on hand-made streams."""

from __future__ import annotations

import pytest
from radixkv_spec import SpecViolation, page_hashes
from radixkv_spec.events import (
    Cleared,
    EventStreamModel,
    Removed,
    Stored,
    block_hash_of,
    expected_page_set,
    parse_record,
)


def hashes(ns: str | None, tokens: list[int], p: int) -> tuple[int, ...]:
    return tuple(block_hash_of(x) for x in page_hashes(ns, tokens, p))


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


# ---- decoding by field name: maps and arrays, sglang's and vLLM's layouts ------------------


def test_maps_are_read_by_field_name_in_any_order_with_unknown_fields_ignored() -> None:
    h = hashes("a", [1, 2], 1)
    record = {
        "session_id": "s",  # sglang's attribution field: not part of the page
        "cache_salt": "a",
        "token_ids": [1, 2],
        "type": "BlockStored",
        "block_size": 1,
        "parent_block_hash": None,
        "block_hashes": list(h),
        "group_idx": 0,
    }
    assert parse_record(record) == Stored(h, None, (1, 2), 1, "a")
    assert parse_record(record, "vllm") == Stored(h, None, (1, 2), 1, "a")
    assert parse_record({"type": "BlockRemoved", "block_hashes": [5]}) == Removed((5,))
    assert parse_record({"type": "AllBlocksCleared"}) == Cleared()


def test_vllm_arrays_keep_the_lora_name_in_slot_7_and_the_salt_in_extra_keys() -> None:
    h = hashes("salt", [1, 2], 1)
    array = [
        "BlockStored",
        list(h),
        None,
        [1, 2],
        1,
        None,
        "GPU",
        "my-lora",
        [["my-lora", "salt"], None],
    ]
    assert parse_record(array, "vllm") == Stored(h, None, (1, 2), 1, "salt", "my-lora")
    # the same array read in sglang's layout takes slot 7 for the namespace: the layouts differ
    assert parse_record(array[:8], "sglang") == Stored(h, None, (1, 2), 1, "my-lora")
    no_salt = ["BlockStored", [7], None, [1], 1, None, "GPU", None, None, 3, "full_attention"]
    assert parse_record(no_salt, "vllm") == Stored((7,), None, (1,), 1)  # metadata tail ignored


def test_a_vllm_record_after_a_parent_inherits_the_parents_namespace() -> None:
    """vLLM salts only a request's first block: a continuation names no salt."""
    model = EventStreamModel(1, layout="vllm")
    h = hashes("s", [1, 2, 3], 1)
    model.apply_wire(
        {"type": "BlockStored", "block_hashes": list(h[:1]), "parent_block_hash": None,
         "token_ids": [1], "block_size": 1, "lora_id": None, "medium": "GPU",
         "lora_name": None, "extra_keys": [["s"]]}
    )  # fmt: skip
    model.apply_wire(["BlockStored", list(h[1:]), h[0], [2, 3], 1, None, "GPU", None])
    assert model.positions() == {("s", (1,)), ("s", (1, 2)), ("s", (1, 2, 3))}
    # in sglang's layout a missing salt is the None namespace: a child of "s" is a violation
    strict = EventStreamModel(1)
    strict.apply(Stored(h[:1], None, (1,), 1, "s"))
    with pytest.raises(SpecViolation, match="namespace None under a page of 's'"):
        strict.apply_wire(
            {"type": "BlockStored", "block_hashes": list(h[1:2]), "parent_block_hash": h[0],
             "token_ids": [2], "block_size": 1}
        )  # fmt: skip


def test_hashes_are_64_bit_patterns_and_may_be_bytes_for_opaque_engines() -> None:
    model = EventStreamModel(1)
    signed = tuple(x - 2**64 if x >= 2**63 else x for x in hashes(None, [1, 2], 1))
    model.apply_wire(["BlockStored", list(signed), None, [1, 2], 1])  # int64 spelling
    assert model.page_set() == frozenset(hashes(None, [1, 2], 1))  # compared unsigned
    model.apply_wire({"type": "BlockRemoved", "block_hashes": list(hashes(None, [1, 2], 1))})
    assert model.page_set() == frozenset()
    opaque = EventStreamModel(1, hashes="opaque", layout="vllm")
    opaque.apply_wire(["BlockStored", [b"\x01" * 32], None, [1], 1, None, "GPU", None])
    opaque.apply_wire(["BlockStored", [b"\x02" * 32], b"\x01" * 32, [2], 1, None, "GPU", None])
    assert opaque.path_counts() == {(1,): 1, (1, 2): 1}
    with pytest.raises(SpecViolation, match="INV-42"):  # radixkv's hashes are ints
        EventStreamModel(1).apply_wire(["BlockStored", [b"\x01"], None, [1], 1])


@pytest.mark.parametrize(
    "record",
    [
        {"type": "Nope"},
        {"block_hashes": [1]},
        {"type": "BlockStored", "block_hashes": [1], "block_size": 1},
        {"type": "BlockRemoved"},
        {"type": "BlockStored", "block_hashes": [2**64], "token_ids": [1], "block_size": 1},
        {"type": "BlockStored", "block_hashes": [1], "token_ids": [1], "block_size": 1,
         "cache_salt": 5},
        "BlockStored",
    ],
)  # fmt: skip
def test_malformed_maps_are_rejected(record: object) -> None:
    with pytest.raises(ValueError):
        parse_record(record)  # type: ignore[arg-type]  # the error under test


def test_ambiguous_vllm_salts_and_unknown_layouts_are_rejected() -> None:
    two = ["BlockStored", [1], None, [1], 1, None, "GPU", None, [["a", "b"]]]
    with pytest.raises(ValueError, match="more than one salt"):
        parse_record(two, "vllm")
    with pytest.raises(ValueError, match="layout"):
        parse_record(["AllBlocksCleared"], "max")  # type: ignore[arg-type]  # under test
    with pytest.raises(ValueError, match="layout"):
        EventStreamModel(1, layout="max")  # type: ignore[arg-type]  # under test

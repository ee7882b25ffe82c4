"""RadixKey: the seed's sequence protocol, namespaces and type checks."""

from __future__ import annotations

import pytest

from radixkv import RadixKey, TokenTypeError, UsageError


def test_len_and_iter_follow_the_token_list() -> None:
    key = RadixKey([5, 6, 7], "ns")
    assert len(key) == 3
    assert list(key) == [5, 6, 7]
    assert len(RadixKey([])) == 0
    assert list(RadixKey([])) == []


def test_bigram_tokens_count_as_one_entry_each() -> None:
    key = RadixKey([(1, 2), (2, 3)])
    assert len(key) == 2
    assert list(key) == [(1, 2), (2, 3)]


def test_int_index_returns_a_one_token_key_in_the_same_namespace() -> None:
    key = RadixKey([5, 6, 7], "lora-1")
    item = key[1]
    assert isinstance(item, RadixKey)
    assert list(item.token_ids) == [6]
    assert item.extra_key == "lora-1"
    assert list(key[-1].token_ids) == [7]


def test_int_index_on_a_bigram_key_keeps_the_tuple_whole() -> None:
    assert list(RadixKey([(1, 2), (3, 4)])[1].token_ids) == [(3, 4)]


def test_int_index_out_of_range_raises_index_error() -> None:
    with pytest.raises(IndexError):
        RadixKey([1, 2])[2]


@pytest.mark.parametrize("extra_key", [None, "", "a"])
def test_slices_keep_the_namespace(extra_key: str | None) -> None:
    key = RadixKey([1, 2, 3, 4, 5], extra_key)
    assert list(key[1:3].token_ids) == [2, 3]
    assert key[1:3].extra_key == extra_key
    assert list(key[::2].token_ids) == [1, 3, 5]
    assert list(key[-2:].token_ids) == [4, 5]
    assert list(key[3:1].token_ids) == []
    assert key[3:1].extra_key == extra_key


def test_token_list_is_held_by_reference() -> None:
    tokens = [1, 2]
    assert RadixKey(tokens).token_ids is tokens


def test_repr_shows_tokens_and_namespace() -> None:
    assert repr(RadixKey([1, 2], None)) == "RadixKey(token_ids=[1, 2], extra_key=None)"
    assert repr(RadixKey([3], "")) == "RadixKey(token_ids=[3], extra_key='')"
    assert repr(RadixKey((4, 5), "a")) == "RadixKey(token_ids=[4, 5], extra_key='a')"


@pytest.mark.parametrize("bad", [1, 1.5, b"a", ("a",), ["a"]])
def test_non_str_extra_key_is_a_type_error(bad: object) -> None:
    with pytest.raises(TokenTypeError, match="extra_key"):
        RadixKey([1], bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        RadixKey([1], bad)  # type: ignore[arg-type]


def test_token_type_error_is_a_usage_error_and_a_value_error() -> None:
    with pytest.raises(UsageError):
        RadixKey([1], 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RadixKey([1], 0)  # type: ignore[arg-type]


def test_empty_string_and_none_are_distinct_namespaces() -> None:
    assert RadixKey([1], "").extra_key == ""
    assert RadixKey([1]).extra_key is None
    assert RadixKey([1], "").extra_key is not None
    assert repr(RadixKey([1], "")) != repr(RadixKey([1]))


def test_slots_are_the_seeds() -> None:
    assert RadixKey.__slots__ == ("token_ids", "extra_key")

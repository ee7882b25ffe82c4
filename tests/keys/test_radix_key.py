"""RadixKey: the seed's sequence protocol, namespaces and type checks."""

from __future__ import annotations

import importlib
from array import array
from collections.abc import Callable
from typing import Any

import pytest
import torch

from radixkv import (
    ChunkCache,
    MambaRadixCache,
    RadixCache,
    RadixKey,
    TokenTypeError,
    UsageError,
    native,
)


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


def test_repr_of_a_long_key_shows_ten_ids_then_an_ellipsis_and_the_length() -> None:
    """A 32k-token key must not flood a log: ten ids, ``...``, the namespace, the length."""
    text = repr(RadixKey(list(range(32768)), "lora-7"))
    assert text == (
        "RadixKey(token_ids=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ...], extra_key='lora-7', len=32768)"
    )
    assert "10" not in text.split("...")[0]  # the eleventh id is not shown


def test_repr_shows_every_id_of_a_key_of_ten_and_cuts_at_eleven() -> None:
    ten = list(range(100, 110))
    assert repr(RadixKey(ten)) == f"RadixKey(token_ids={ten!r}, extra_key=None)"
    eleven = repr(RadixKey([*ten, 110]))
    assert "109, ...]" in eleven and "110" not in eleven and eleven.endswith("len=11)")


@pytest.mark.parametrize(
    "ids",
    [torch.arange(40), array("q", range(40)), memoryview(array("q", range(40))), range(40)],
    ids=["tensor", "array", "memoryview", "range"],
)
def test_repr_shows_ids_of_any_container_as_ints(ids: object) -> None:
    key = RadixKey(ids, "")  # type: ignore[arg-type]  # containers beside the seed's list
    assert repr(key) == (
        "RadixKey(token_ids=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ...], extra_key='', len=40)"
    )


def test_repr_keeps_bigram_tokens_whole() -> None:
    key = RadixKey([(i, i + 1) for i in range(12)])
    assert repr(key).startswith("RadixKey(token_ids=[(0, 1), (1, 2),")
    assert "(9, 10), ...], extra_key=None, len=12)" in repr(key)


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


def test_slots_are_the_seeds_then_limit() -> None:
    assert RadixKey.__slots__ == ("token_ids", "extra_key", "limit")
    assert RadixKey([1]).limit is None


# ---- limit: the key is token_ids[:limit], read without a copy ---------------------------


def test_a_limit_makes_the_key_a_prefix_of_the_list_it_holds_by_reference() -> None:
    prompt = [5, 6, 7, 8]
    key = RadixKey(prompt, "ns", limit=len(prompt) - 1)
    assert key.token_ids is prompt and key.limit == 3
    assert len(key) == 3 and list(key) == [5, 6, 7]
    assert repr(key) == "RadixKey(token_ids=[5, 6, 7], extra_key='ns')"
    assert list(key[-1].token_ids) == [7] and key[-1].extra_key == "ns"
    assert list(key[1:].token_ids) == [6, 7] and key[1:].limit is None
    with pytest.raises(IndexError):
        key[3]
    with pytest.raises(IndexError):
        key[-4]


def test_a_limit_of_zero_is_the_empty_key() -> None:
    key = RadixKey([1, 2], limit=0)
    assert len(key) == 0 and list(key) == [] and list(key[:].token_ids) == []


def test_a_limit_above_the_length_is_clamped_like_a_slice_bound_each_time() -> None:
    prompt = [1, 2]
    key = RadixKey(prompt, limit=3)
    assert len(key) == 2 and list(key) == [1, 2]
    prompt += [3, 4]  # the list is held by reference: the limit caps it as it is now
    assert len(key) == 3 and list(key) == [1, 2, 3]
    assert len(RadixKey(list(range(40)), limit=12)) == 12
    assert repr(RadixKey(list(range(40)), limit=12)).endswith("9, ...], extra_key=None, len=12)")


def test_a_negative_limit_is_a_usage_error_not_a_count_from_the_end() -> None:
    with pytest.raises(UsageError, match="limit must be >= 0"):
        RadixKey([1, 2, 3], limit=-1)
    with pytest.raises(ValueError):
        RadixKey([1, 2, 3], limit=-1)


@pytest.mark.parametrize("bad", [True, False, 1.0, "2", [2]])
def test_a_limit_that_is_not_an_int_is_a_type_error(bad: object) -> None:
    with pytest.raises(TokenTypeError, match="limit must be an int or None"):
        RadixKey([1, 2, 3], limit=bad)  # type: ignore[arg-type]  # bad on purpose


class _Index:
    """An integer of another library (numpy's ints have ``__index__`` too)."""

    def __index__(self) -> int:
        return 2


def test_a_limit_takes_any_integer_as_a_slice_bound_does() -> None:
    key = RadixKey([1, 2, 3], limit=_Index())  # type: ignore[arg-type]  # an __index__ int
    assert key.limit == 2 and type(key.limit) is int and list(key) == [1, 2]


def test_limit_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        RadixKey([1, 2], None, 1)  # type: ignore[call-arg]  # positional on purpose


# ---- token_ids that are no sequence (issue 30) -------------------------------------------


def _every_cache_call() -> list[tuple[str, Callable[[RadixKey], object]]]:
    return [
        ("RadixCache.match_prefix", lambda k: RadixCache().match_prefix(k)),
        ("RadixCache.insert", lambda k: RadixCache().insert(k)),
        ("RadixCache(page 2).insert", lambda k: RadixCache(2).insert(k, torch.arange(2))),
        ("ChunkCache.match_prefix", lambda k: ChunkCache().match_prefix(k)),
        ("ChunkCache.insert", lambda k: ChunkCache().insert(k, torch.arange(1))),
        ("MambaRadixCache.match_prefix", lambda k: MambaRadixCache().match_prefix(k)),
        ("MambaRadixCache.insert", lambda k: MambaRadixCache().insert(k, mamba_value=0)),
    ]


SCALARS: dict[str, Callable[[], object]] = {
    "0-d tensor": lambda: torch.tensor(5),
    "0-d float tensor": lambda: torch.tensor(5.0),
    "int": lambda: 5,
    "float": lambda: 2.5,
    "None": lambda: None,
}


def _scalar_cases() -> list[tuple[str, Callable[[], object]]]:
    """Every scalar, numpy's too where numpy is installed (the tests env has it)."""
    cases = dict(SCALARS)
    try:  # by name: numpy is optional, and the types env has no numpy to type it with
        np: Any = importlib.import_module("numpy")
    except ImportError:  # its scalars are checked where it is installed
        pass
    else:
        cases["0-d numpy array"] = lambda: np.array(5)
        cases["numpy int64"] = lambda: np.int64(5)
    return sorted(cases.items())


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pure"])
@pytest.mark.parametrize("limit", [None, 1])
@pytest.mark.parametrize("scalar", _scalar_cases(), ids=lambda c: c[0])
def test_a_scalar_for_token_ids_is_a_type_error_naming_what_a_key_takes(
    compiled: bool, limit: int | None, scalar: tuple[str, Callable[[], object]]
) -> None:
    """``RadixKey(torch.tensor(5))`` raised a bare ``TypeError: 'int' object is not
    iterable``; every call of every cache now says what token_ids may be, on both key
    paths (the compiled helpers, when built, and RADIXKV_PURE=1's)."""
    if compiled and not native.available():
        pytest.skip("the C key helpers are not built")
    previous = native.helpers is not None
    native.select(compiled=compiled)
    try:
        key = RadixKey(scalar[1](), limit=limit)  # type: ignore[arg-type]  # bad on purpose
        for name, call in _every_cache_call():
            with pytest.raises(TokenTypeError, match="token_ids must be a sequence") as error:
                call(key)
            assert scalar[0].startswith("0-d") is ("got a 0-d" in str(error.value)), name
        with pytest.raises(TokenTypeError, match="token_ids must be a sequence"):
            len(key)
        assert repr(key).startswith("RadixKey(token_ids=")  # still printable, in a log
    finally:
        native.select(compiled=previous)

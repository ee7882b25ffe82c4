"""The compiled key helpers (radixkv._keys) against the pure-Python reference.

Differential: the same calls on two caches, one using the compiled helpers and one the
pure path (as under RADIXKV_PURE=1), must give the same results, the same errors (type and
message) and the same trees, on random and bad keys: negative ids, ids >= 2**63, bools,
numpy ints, int subclasses, bigram tuples, non-ints and huge keys. The helpers themselves
are checked against their Python definitions.
"""

from __future__ import annotations

import enum
import importlib
import os
import struct
from array import array
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from radixkv import RadixCache, RadixKey, native
from radixkv.keys import (
    COMPACT,
    PACKED,
    Ids32,
    ListKey,
    no_negative_ids,
    pack_ids,
    read_key,
    signs_clear,
    widen,
)
from tests.helpers import key_build as build
from tests.helpers import path_tokens, snapshot

compiled = pytest.mark.skipif(not native.available(), reason="the C key helpers are not built")

numpy: Any
try:
    numpy = importlib.import_module("numpy")
except ImportError:  # numpy is optional: its ints are drawn only where it is installed
    numpy = None


class Flavour(enum.IntEnum):
    """An int subclass: not a plain id for the helpers, a valid one for the reference."""

    SEVEN = 7


def test_the_build_ci_expects_is_the_one_in_use() -> None:
    # CI installs with a compiler and sets RADIXKV_EXPECT_COMPILED=1 (its pure env sets
    # RADIXKV_PURE=1 instead): a broken build must not pass silently as the pure path.
    if os.environ.get("RADIXKV_PURE") == "1":
        assert native.helpers is None
    elif os.environ.get("RADIXKV_EXPECT_COMPILED") == "1":  # set by .ci/run
        assert native.available() and native.helpers is not None


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """What a call did, as plain values: its result, or its error's type and message."""
    try:
        return "ok", call()
    except Exception as error:
        return type(error).__name__, str(error)


# ---- keys: plain ids most of the time, every kind of bad or odd token sometimes --------

plain = st.integers(0, 12)  # few distinct ids, so keys share prefixes
odd_items: list[st.SearchStrategy[object]] = [
    st.integers(-(2**65), -1),
    st.integers(2**63 - 2, 2**65),
    st.booleans(),
    st.just(Flavour.SEVEN),
    st.tuples(plain, plain),  # a bigram token
    st.just(()),
    st.floats(allow_nan=False),
    st.text(max_size=2),
    st.none(),
]
if numpy is not None:
    odd_items.append(st.integers(0, 12).map(numpy.int64))
    odd_items.append(st.integers(0, 12).map(numpy.int32))
tokens = st.one_of(plain, plain, plain, plain, plain, plain, *odd_items)
keys = st.lists(tokens, max_size=24) | st.lists(plain, max_size=24)
containers = st.sampled_from([list, tuple])


@compiled
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["insert", "match"]), keys, containers),
        min_size=1,
        max_size=12,
    ),
    page_size=st.sampled_from([1, 2, 4]),
)
def test_compiled_and_pure_caches_agree_call_by_call(
    ops: list[tuple[str, list[object], type]], page_size: int
) -> None:
    caches = {flag: RadixCache(page_size) for flag in (True, False)}
    next_index = 0  # every insert gets fresh KV indices, the same in both caches
    for op, ids, container in ops:
        value = torch.arange(next_index, next_index + len(ids))
        next_index += len(ids)
        seen = {}
        for flag, cache in caches.items():
            key = RadixKey(container(ids))
            with build(flag):
                if op == "insert":
                    seen[flag] = outcome(partial(_insert, cache, key, value))
                else:
                    seen[flag] = outcome(partial(_match, cache, key))
        assert seen[True] == seen[False], (op, ids)
        assert snapshot(caches[True]) == snapshot(caches[False])
    for cache in caches.values():
        cache.check_invariants()


def _match(cache: RadixCache, key: RadixKey) -> tuple[int, list[int]]:
    result = cache.match_prefix(key)
    return result.prefix_len, result.indices.tolist()


def _insert(cache: RadixCache, key: RadixKey, value: torch.Tensor) -> int:
    return cache.insert(key, value).prefix_len


@compiled
@given(ids=keys, container=containers)
def test_read_key_gives_the_same_tokens_or_the_same_error(
    ids: list[object], container: type
) -> None:
    seen = {}
    for flag in (True, False):
        with build(flag):
            seen[flag] = outcome(partial(_tokens, container(ids)))
    assert seen[True] == seen[False]


def _tokens(ids: list[object] | tuple[object, ...]) -> tuple[object, ...]:
    with read_key(RadixKey(ids), 1, packed=True) as found:  # type: ignore[arg-type]  # odd ids on purpose
        found.require_valid_from(0)
        return found.tokens()


@compiled
@pytest.mark.parametrize("where", [0, 1, 8191, 16383])
@pytest.mark.parametrize("bad", [-1, 2**63, True, 1.5])
def test_a_huge_key_with_one_odd_id_behaves_alike_in_both_builds(where: int, bad: object) -> None:
    ids: list[object] = list(range(16384))
    cache_ids = list(range(8192))
    ids[where] = bad
    key = RadixKey(ids)  # type: ignore[arg-type]  # bad on purpose
    seen = {}
    for flag in (True, False):
        cache = RadixCache()
        cache.insert(RadixKey(cache_ids), torch.arange(len(cache_ids)))
        with build(flag):
            match = outcome(partial(_match, cache, key))
            insert = outcome(partial(_insert, cache, key, torch.arange(16384)))
        seen[flag] = (match, insert, snapshot(cache))
    assert seen[True] == seen[False]


# ---- the helpers against their Python definitions -------------------------------------


def _is_plain(item: object) -> bool:
    return type(item) in (int, bool) and 0 <= int(item) < 2**63  # type: ignore[call-overload]  # checked type


@compiled
@given(ids=st.lists(tokens, max_size=40), container=containers, data=st.data())
def test_plain_ids_is_exact_ints_and_bools_in_range(
    ids: list[object], container: type, data: st.DataObject
) -> None:
    assert native._compiled is not None
    assert native._compiled.plain_ids(container(ids)) == all(_is_plain(t) for t in ids)
    end = data.draw(st.integers(0, len(ids)), label="end")  # a RadixKey limit
    assert native._compiled.plain_ids(container(ids), end) == all(_is_plain(t) for t in ids[:end])
    start = data.draw(st.integers(0, end), label="start")  # where a walk's match ended
    assert native._compiled.plain_ids(container(ids), end, start) == all(
        _is_plain(t) for t in ids[start:end]
    )


@given(ids=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20), data=st.data())
def test_pack_ids_packs_the_ids_before_end(ids: list[object], data: st.DataObject) -> None:
    end = data.draw(st.integers(0, len(ids)), label="end")
    assert pack_ids(ids, end) == struct.pack(f"={end}q", *ids[:end])
    assert pack_ids([*ids[:end], 2**64], end + 1) is None  # out of the int64 range


@compiled
@given(ids=st.lists(tokens, max_size=40), data=st.data())
def test_pack_is_native_int64_or_none(ids: list[Any], data: st.DataObject) -> None:
    assert native._compiled is not None
    start = data.draw(st.integers(0, len(ids)))
    end = data.draw(st.integers(start, len(ids)))
    part = ids[start:end]
    expect = struct.pack(f"={len(part)}q", *part) if all(map(_is_plain, part)) else None
    assert native._compiled.pack(ids, start, end) == expect


@compiled
@given(ids=st.lists(tokens | st.integers(2**31 - 2, 2**31 + 1), max_size=40), data=st.data())
def test_pack32_is_native_int32_or_none(ids: list[Any], data: st.DataObject) -> None:
    assert native._compiled is not None
    start = data.draw(st.integers(0, len(ids)))
    end = data.draw(st.integers(start, len(ids)))
    part = ids[start:end]
    fits = all(_is_plain(t) and t < 2**31 for t in part)
    expect = struct.pack(f"={len(part)}i", *part) if fits else None
    assert native._compiled.pack32(ids, start, end) == expect


@compiled
@given(
    stored=st.lists(st.integers(0, 3), max_size=20),
    ids=st.lists(st.integers(0, 3) | st.sampled_from([-1, 2**63, 1.0, True]), max_size=20),
    data=st.data(),
)
def test_shared_counts_the_leading_equal_plain_ids(
    stored: list[int], ids: list[object], data: st.DataObject
) -> None:
    assert native._compiled is not None
    start = data.draw(st.integers(0, len(ids)))
    end = data.draw(st.integers(start, len(ids)))
    expect = 0
    for want, got in zip(stored, ids[start:end], strict=False):
        if not _is_plain(got) or got != want:
            break
        expect += 1
    packed = struct.pack(f"={len(stored)}q", *stored)
    assert native._compiled.shared(packed, ids, start, end) == expect


@compiled
def test_the_helpers_refuse_what_they_were_not_made_for() -> None:
    helpers = native._compiled
    assert helpers is not None
    with pytest.raises(TypeError):
        helpers.plain_ids(iter([1]))  # type: ignore[arg-type]  # the wrong type on purpose
    with pytest.raises(IndexError):
        helpers.plain_ids([1, 2], 3)  # past the end: callers clamp the limit first
    with pytest.raises(IndexError):
        helpers.plain_ids([1, 2], -1)
    with pytest.raises(IndexError):
        helpers.pack([1, 2], 1, 3)
    assert helpers.pack([1, -2], 0, 2) is None  # never a silent wrong id
    assert helpers.pack32([1, 2**31], 0, 2) is None  # nor a narrowed one
    with pytest.raises(IndexError):
        helpers.shared(b"", [1], 2, 1)


@compiled
def test_a_list_key_is_read_in_place_and_a_tuple_tree_is_not() -> None:
    ids = [1, 2, 3]
    with build(True):
        assert type(read_key(RadixKey(ids), 1, packed=True).data) is ListKey
        assert type(read_key(RadixKey(ids), 2, packed=True).data) is ListKey  # truncated
        assert read_key(RadixKey(ids), 1, packed=False).data == (1, 2, 3)
        bigram = read_key(RadixKey([1, (2, 3)]), 1, packed=True)
        state = (type(bigram.data), bigram.unchecked)
        assert state == (ListKey, True)  # read in place: the walk checks it
        assert not bigram.settle(1)  # the tuple: read again by the reference path
        assert (bigram.data, bigram.unchecked) == ((1, (2, 3)), False)
        plain = read_key(RadixKey(ids), 1, packed=True)
        assert plain.settle(0)
        assert (type(plain.data), plain.unchecked) == (ListKey, False)
        with pytest.raises(ValueError, match="-3"):  # the dropped tail is checked here
            read_key(RadixKey([1, 2, -3]), 2, packed=True)


# ---- compact storage ------------------------------------------------------------------


@compiled
@pytest.mark.parametrize("form", ["list", "array"])
def test_nodes_store_int32_ids_when_every_id_fits_and_int64_otherwise(form: str) -> None:
    big = 2**31  # the first id that does not fit
    make = (lambda ids: ids) if form == "list" else (lambda ids: array("q", ids))
    with build(True):
        cache = RadixCache()
        small = cache.insert(RadixKey(make([1, 2, 3, 4])), torch.arange(4)).last_node
        wide = cache.insert(RadixKey(make([1, 2, big, 5])), torch.arange(4, 8)).last_node
        assert type(small.data) is Ids32 and len(small.data) == 2 * COMPACT  # split at 2
        assert type(wide.data) is bytes and len(wide.data) == 2 * PACKED
        assert type(small.parent.data) is Ids32  # the split kept the compact form
        assert cache.match_prefix(RadixKey(make([1, 2, 3, 4]))).indices.tolist() == [0, 1, 2, 3]
        assert cache.match_prefix(RadixKey(make([1, 2, big, 5]))).indices.tolist() == [0, 1, 6, 7]
        assert cache.match_prefix(RadixKey(make([1, 2, 3, 9]))).prefix_len == 3
        cache.check_invariants()
    with build(False):  # the pure path reads what the compiled one stored
        assert cache.match_prefix(RadixKey(make([1, 2, 3, 4]))).prefix_len == 4
        assert cache.match_prefix(RadixKey(make([1, 2, 3, 9]))).prefix_len == 3
        assert small.tokens == (4,) and path_tokens(small) == (1, 2, 3, 4)  # split at 3
        cache.check_invariants()


@compiled
@given(ids=st.lists(st.integers(-2, 2**31 + 2), max_size=30), data=st.data())
def test_narrow_and_shared32_agree_with_their_definitions(
    ids: list[int], data: st.DataObject
) -> None:
    helpers = native._compiled
    assert helpers is not None
    packed = struct.pack(f"={len(ids)}q", *ids)
    slim = helpers.narrow(packed)
    assert helpers.narrow(memoryview(packed)) == slim  # any buffer: a view of an array
    if all(0 <= i < 2**31 for i in ids):
        assert slim == struct.pack(f"={len(ids)}i", *ids)
    else:
        assert slim is None
        return
    probe = data.draw(st.lists(st.integers(0, 2**31 + 2), max_size=30))
    start = data.draw(st.integers(0, len(probe)))
    end = data.draw(st.integers(start, len(probe)))
    expect = 0
    for want, got in zip(ids, probe[start:end], strict=False):
        if want != got:
            break
        expect += 1
    wide = struct.pack(f"={len(probe)}q", *probe)
    assert helpers.shared32(slim, probe, start, end) == expect
    assert helpers.shared32(slim, memoryview(wide), start, end) == expect


@compiled
@given(ids=st.lists(st.integers(0, 2**31 - 1), max_size=30))
def test_widen_is_native_int64(ids: list[int]) -> None:
    helpers = native._compiled
    assert helpers is not None
    slim = struct.pack(f"={len(ids)}i", *ids)
    assert helpers.widen(slim) == struct.pack(f"={len(ids)}q", *ids)
    with build(False):
        assert widen(Ids32(slim)) == helpers.widen(slim)  # the pure definition agrees


@compiled
@given(
    ids=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=30),
    data=st.data(),
)
def test_signs_clear_agrees_with_the_reference_on_bytes_and_views(
    ids: list[int], data: st.DataObject
) -> None:
    helpers = native._compiled
    assert helpers is not None
    packed = struct.pack(f"={len(ids)}q", *ids)
    first = data.draw(st.integers(0, len(ids)), label="from id")
    assert signs_clear(packed, first * PACKED) == all(i >= 0 for i in ids[first:])
    start = data.draw(st.integers(0, len(packed)), label="from byte")  # aligned or not
    assert helpers.signs_clear(packed, start) == signs_clear(packed, start)
    cut = data.draw(st.integers(0, len(ids)), label="view from id")
    view = memoryview(packed)[cut * PACKED :]
    assert helpers.signs_clear(view, 0) == signs_clear(bytes(view))
    assert no_negative_ids(view) == all(i >= 0 for i in ids[cut:])

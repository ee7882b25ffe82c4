"""Key forms: lists, arrays, memoryviews and tensors are the same key; packed storage."""

from __future__ import annotations

from array import array
from collections.abc import Callable

import pytest
import torch

from radixkv import RadixCache, RadixKey, UsageError, native
from radixkv.keys import COMPACT, PACKED, Ids32, decode, encode
from tests.helpers import snapshot

FORMS: dict[str, Callable[[list[int]], object]] = {
    "list": list,
    "tuple": tuple,
    "array q": lambda ids: array("q", ids),
    "array Q": lambda ids: array("Q", ids),
    "array i": lambda ids: array("i", ids),
    "memoryview": lambda ids: memoryview(array("q", ids)),
    "strided memoryview": lambda ids: memoryview(array("q", [x for i in ids for x in (i, -1)]))[
        ::2
    ],
    "int64 tensor": lambda ids: torch.tensor(ids, dtype=torch.int64),
    "int32 tensor": lambda ids: torch.tensor(ids, dtype=torch.int32),
    "range": lambda ids: range(ids[0], ids[0] + len(ids)) if ids else range(0),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_key_form_matches_what_a_list_inserted(form: str) -> None:
    ids = list(range(100, 110))
    cache = RadixCache(page_size=2)
    cache.insert(RadixKey(ids), torch.arange(10))
    result = cache.match_prefix(RadixKey(FORMS[form](ids)))  # type: ignore[arg-type]
    assert result.prefix_len == 10
    assert result.indices.tolist() == list(range(10))
    cache.check_invariants()


@pytest.mark.parametrize("form", ["array q", "memoryview", "int64 tensor", "list"])
def test_a_negative_id_anywhere_is_rejected_in_every_form(form: str) -> None:
    cache = RadixCache()
    cache.insert(RadixKey([1, 2, 3]), torch.arange(3))
    for bad in ([1, 2, 3, -4], [1, -2, 3], [-1]):
        key = RadixKey(FORMS[form](bad))  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="-"):
            cache.match_prefix(key)
        with pytest.raises(UsageError, match="-"):
            cache.insert(key, torch.arange(len(bad)))
    assert cache.total_size() == 3
    cache.check_invariants()


@pytest.mark.parametrize("form", ["array q", "memoryview", "list"])
@pytest.mark.parametrize("at", [3000, 4095, 4096, 8191, 8192, 9999])
def test_a_negative_id_deep_in_a_long_key_is_rejected_before_any_change(form: str, at: int) -> None:
    # Long keys are checked in chunks (views) or on the stored copy (inserts): the id at
    # each chunk edge, past the part the tree holds, must still be seen.
    cache = RadixCache()
    held = list(range(1, 5001))
    cache.insert(RadixKey(held[:3000] + [7] * 2000), torch.arange(5000))
    cache.insert(RadixKey(held), torch.arange(5000, 10000))
    before = snapshot(cache)
    bad = list(range(1, 10001))
    bad[at] = -bad[at]
    key = RadixKey(FORMS[form](bad))  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=f"-{at + 1}"):
        cache.match_prefix(key)
    with pytest.raises(UsageError, match=f"-{at + 1}"):
        cache.insert(key, torch.arange(10000, 20000))
    assert snapshot(cache) == before
    cache.check_invariants()


def test_an_unsigned_id_above_int64_is_rejected() -> None:
    cache = RadixCache()
    with pytest.raises(UsageError, match="2\\*\\*63"):
        cache.match_prefix(RadixKey(array("Q", [1, 2**63])))


def test_the_caller_may_resize_its_array_after_any_call() -> None:
    cache = RadixCache()
    ids = array("q", [5, 6, 7])
    cache.insert(RadixKey(ids), torch.arange(3))
    cache.match_prefix(RadixKey(ids))
    ids.append(8)
    bad = array("q", [5, -6])
    with pytest.raises(UsageError):
        cache.match_prefix(RadixKey(bad))
    bad.append(9)  # no view of it outlived the rejected call
    with pytest.raises(UsageError):
        cache.insert(RadixKey(array("q", [5, 6])), torch.arange(1))


def test_nodes_store_a_private_packed_copy() -> None:
    cache = RadixCache()
    ids = array("q", [5, 6, 7])
    node = cache.insert(RadixKey(ids), torch.arange(3)).last_node
    ids[0] = 99
    # int32 ids when every one fits (compiled path: Ids32), else native int64s
    compact = native.helpers is not None
    assert type(node.data) is (Ids32 if compact else bytes)
    assert len(node.data) == 3 * (COMPACT if compact else PACKED)
    assert node.tokens == (5, 6, 7)
    assert node.key is not None and node.key.token_ids == (5, 6, 7)
    assert cache.match_prefix(RadixKey([5, 6, 7])).prefix_len == 3


def test_a_bigram_key_turns_the_tree_into_tuples_and_loses_nothing() -> None:
    cache = RadixCache(page_size=2)
    cache.insert(RadixKey([1, 2, 3, 4]), torch.arange(4))
    cache.insert(RadixKey([1, 2, 7, 8], "ns"), torch.arange(10, 14))
    cache.insert(RadixKey([(1, 2), (2, 3)]), torch.arange(20, 22))
    assert all(type(n.data) is tuple for n in [cache.root, *cache.root.children.values()])
    assert cache.match_prefix(RadixKey(array("q", [1, 2, 3, 4]))).prefix_len == 4
    assert cache.match_prefix(RadixKey([1, 2, 7, 8], "ns")).indices.tolist() == [10, 11, 12, 13]
    assert cache.match_prefix(RadixKey([(1, 2), (2, 3), (3, 4)])).prefix_len == 2
    cache.check_invariants()
    cache.reset()
    assert type(cache.root.data) is bytes  # a fresh tree packs again


def test_encode_and_decode_round_trip() -> None:
    for ids in ([], [0], [2**63 - 1, 0, 5], list(range(1000))):
        assert decode(encode(ids, packed=True)) == tuple(ids)
    assert encode([(1, 2), 3], packed=True) == ((1, 2), 3)
    assert encode([True, 2], packed=True) == encode([1, 2], packed=True)

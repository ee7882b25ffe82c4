"""``RadixKey(token_ids, limit=n)`` through every key path: the key is ``token_ids[:n]``.

Each cache call with a limited key must do exactly what the same call does with the sliced
key, results, errors and trees alike, on the compiled key helpers and on the pure path
(RADIXKV_PURE=1), for every container a key may come in. Ids after the limit are not part
of the key: they are never read, so a bad one there is no error. And the compiled path
reads a limited list in place: matching ``prompt[:-1]`` copies nothing.
"""

from __future__ import annotations

import tracemalloc
from array import array
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from radixkv import ChunkCache, MambaRadixCache, RadixCache, RadixKey, TreeNode, native
from radixkv.keys import ListKey, read_key
from tests.helpers import BUILDS, snapshot
from tests.helpers import key_build as build

CONTAINERS: dict[str, Callable[[list[int]], Any]] = {
    "list": list,
    "tuple": tuple,
    "array": lambda ids: array("q", ids),
    "memoryview": lambda ids: memoryview(array("q", ids)),
    "tensor": lambda ids: torch.tensor(ids, dtype=torch.int64),
    "range-like": lambda ids: _Sequence(ids),
}


class _Sequence:
    """A sequence that is none of the containers the key paths know: the reference path."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: Any) -> Any:
        return self.ids[i]

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids)


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """What a call did, as plain values: its result, or its error's type and message."""
    try:
        return "ok", call()
    except Exception as error:
        return type(error).__name__, str(error)


def _match(cache: RadixCache, key: RadixKey) -> tuple[int, list[int]]:
    result = cache.match_prefix(key)
    return result.prefix_len, result.indices.tolist()


def _insert(cache: RadixCache, key: RadixKey, value: torch.Tensor) -> int:
    return cache.insert(key, value).prefix_len


PROMPTS = [[1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 9, 9], [4, 4], [1, 2, 3, 4, 5, 6, 7, 8, 0]]


@pytest.mark.parametrize("compiled", BUILDS)
@pytest.mark.parametrize("container", sorted(CONTAINERS))
@pytest.mark.parametrize("page_size", [1, 2, 4])
def test_a_limited_key_is_its_slice_in_every_cache_call(
    compiled: bool, container: str, page_size: int
) -> None:
    make = CONTAINERS[container]
    limited, sliced = RadixCache(page_size), RadixCache(page_size)
    next_index = 0
    with build(compiled):
        for prompt in PROMPTS:
            for cut in range(len(prompt) + 3):  # through the whole prompt, and past its end
                n = min(cut, len(prompt))  # one index per token of the key (SPEC.md, insert)
                value = torch.arange(next_index, next_index + n)
                next_index += n
                a = RadixKey(make(prompt), "ns", limit=cut)
                b = RadixKey(make(prompt[:cut]), "ns")
                assert _match(limited, a) == _match(sliced, b)
                assert _insert(limited, a, value) == _insert(sliced, b, value)
                assert snapshot(limited) == snapshot(sliced)
        limited.check_invariants()


@pytest.mark.parametrize("compiled", BUILDS)
@pytest.mark.parametrize("container", ["list", "tuple", "array", "tensor", "range-like"])
def test_ids_after_the_limit_are_never_read(compiled: bool, container: str) -> None:
    """A bad id after the limit is not part of the key: no error, nothing stored of it."""
    make = CONTAINERS[container]
    with build(compiled):
        cache = RadixCache(page_size=2)
        key = RadixKey(make([1, 2, 3, 4, -5]), limit=4)
        assert cache.insert(key, torch.arange(4)).prefix_len == 0
        assert _match(cache, key) == (4, [0, 1, 2, 3])
        assert cache.total_size() == 4
        cache.check_invariants()


@pytest.mark.parametrize("compiled", BUILDS)
@pytest.mark.parametrize("container", ["list", "tuple", "array", "tensor", "range-like"])
@pytest.mark.parametrize("where", [0, 2, 3])
def test_a_bad_id_before_the_limit_is_the_slices_error(
    compiled: bool, container: str, where: int
) -> None:
    """Also in the dropped tail of a page (``where=2`` with pages of 2 and a limit of 3)."""
    make = CONTAINERS[container]
    ids = [1, 2, 3, 4, 5]
    ids[where] = -7
    with build(compiled):
        cache = RadixCache(page_size=2)
        cache.insert(RadixKey([1, 2]), torch.arange(2))
        before = snapshot(cache)
        for limit in (3, 4):
            a, b = RadixKey(make(ids), limit=limit), RadixKey(make(ids[:limit]))
            if where >= limit:
                continue
            got = outcome(partial(_insert, cache, a, torch.arange(10, 15)))
            assert got[0] == "UsageError"
            assert got == outcome(partial(_insert, cache, b, torch.arange(10, 15)))
            assert outcome(partial(_match, cache, a)) == outcome(partial(_match, cache, b))
            assert snapshot(cache) == before


@pytest.mark.skipif(not native.available(), reason="the C key helpers are not built")
def test_the_compiled_path_reads_a_limited_list_in_place() -> None:
    prompt = list(range(1000))
    with build(True):
        found = read_key(RadixKey(prompt, limit=999), 4, packed=True)
        assert type(found.data) is ListKey
        assert found.data.ids is prompt  # the caller's list itself, not a copy
        assert found.data.tokens == 996 and found.length == 996  # limit, then whole pages
        prompt[999] = -1  # not in the key: the helpers stop at the limit and never see it
        found = read_key(RadixKey(prompt, limit=999), 1, packed=True)
        assert type(found.data) is ListKey and found.data.ids is prompt


@pytest.mark.skipif(not native.available(), reason="the C key helpers are not built")
def test_matching_prompt_minus_one_copies_nothing() -> None:
    """``RadixKey(prompt, limit=len(prompt) - 1)`` costs an int: the match allocates a
    small fraction of what one copy of the prompt's list would (8 bytes a token)."""
    prompt = list(range(1, 100_001))
    with build(True):
        cache = RadixCache()
        cache.insert(RadixKey(prompt), torch.arange(len(prompt)))
        key = RadixKey(prompt, limit=len(prompt) - 1)
        cache.match_prefix(key)  # warm: splits the node where the key ends
        tracemalloc.start()
        try:
            result = cache.match_prefix(key)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert result.prefix_len == len(prompt) - 1
    assert peak < 8 * len(prompt) // 10, f"{peak} bytes: the key was copied"


@pytest.mark.parametrize("compiled", BUILDS)
def test_a_node_takes_a_limited_key(compiled: bool) -> None:
    with build(compiled):
        node = TreeNode()
        node.key = RadixKey([1, 2, 3, -1], "ns", limit=3)
        assert node.tokens == (1, 2, 3) and node.extra_key == "ns" and len(node) == 3


@pytest.mark.parametrize("compiled", BUILDS)
def test_the_chunk_and_mamba_caches_read_a_limited_key_too(compiled: bool) -> None:
    with build(compiled):
        chunk = ChunkCache()
        chunk.insert(RadixKey([1, 2, -3], limit=2), torch.arange(2))  # -3 is not in the key
        assert chunk.match_prefix(RadixKey([1, 2, -3], limit=2)).prefix_len == 0
        with pytest.raises(ValueError, match="indices for 2 tokens"):
            chunk.insert(RadixKey([1, 2, 3], limit=2), torch.arange(1))
        mamba = MambaRadixCache()
        mamba.insert(RadixKey([1, 2, 3, -4], limit=3), torch.arange(3), mamba_value=0)
        assert mamba.match_prefix(RadixKey([1, 2, 3, 4], limit=3)).prefix_len == 3
        assert mamba.match_prefix(RadixKey([1, 2, 3, 4], limit=2)).prefix_len == 0  # no state
        mamba.check_invariants()


# ---- random keys: limited == sliced, and compiled == pure ------------------------------

plain = st.integers(0, 6)
odd = st.one_of(
    st.integers(-(2**64), -1),
    st.integers(2**63, 2**64),
    st.booleans(),
    st.tuples(plain, plain),
    st.floats(allow_nan=False),
    st.none(),
)
tokens = st.one_of(plain, plain, plain, plain, odd)
keys = st.lists(tokens, max_size=16) | st.lists(plain, max_size=16)


@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["insert", "match"]),
            keys,
            st.sampled_from([list, tuple]),
            st.integers(0, 18),
        ),
        min_size=1,
        max_size=10,
    ),
    page_size=st.sampled_from([1, 2, 4]),
)
def test_random_limited_keys_act_as_their_slices_on_both_builds(
    ops: list[tuple[str, list[object], type, int]], page_size: int
) -> None:
    builds = [True, False] if native.available() else [False]
    caches = {(b, form): RadixCache(page_size) for b in builds for form in ("limit", "slice")}
    next_index = 0
    for op, ids, container, limit in ops:
        n = len(ids[:limit])  # one index per token of the key (SPEC.md, insert)
        value = torch.arange(next_index, next_index + n)
        next_index += n
        seen = {}
        for (compiled, form), cache in caches.items():
            key = (
                RadixKey(container(ids), limit=limit)
                if form == "limit"
                else RadixKey(container(ids[:limit]))
            )
            with build(compiled):
                if op == "insert":
                    seen[compiled, form] = outcome(partial(_insert, cache, key, value))
                else:
                    seen[compiled, form] = outcome(partial(_match, cache, key))
        first = next(iter(seen.values()))
        assert all(got == first for got in seen.values()), (op, ids, limit, seen)
        shapes = {snapshot(cache) for cache in caches.values()}
        assert len(shapes) == 1

"""KVIndexAllocator and HybridKVAllocator: the reference pools that refuse double frees."""

from __future__ import annotations

import pytest
import torch

from radixkv import (
    DoubleFreeError,
    KVIndexAllocator,
    RadixCache,
    RadixKey,
    TokenTypeError,
    UsageError,
)
from radixkv.pools import HybridKVAllocator


def state(pool: KVIndexAllocator) -> tuple[int, list[bool]]:
    return pool.available_size(), [pool.is_allocated(i) for i in range(pool.size)]


def test_alloc_hands_out_distinct_int64_indices_in_range(device: torch.device) -> None:
    pool = KVIndexAllocator(8, device)
    a = pool.alloc(3)
    b = pool.alloc(5)
    assert a is not None and b is not None
    assert a.dtype == b.dtype == torch.int64
    assert a.device.type == b.device.type == device.type
    every = a.tolist() + b.tolist()
    assert sorted(every) == list(range(8))
    assert pool.available_size() == 0
    assert pool.allocated_count() == 8
    assert all(pool.is_allocated(i) for i in range(8))


def test_alloc_zero_returns_an_empty_tensor() -> None:
    pool = KVIndexAllocator(4)
    out = pool.alloc(0)
    assert out is not None
    assert out.numel() == 0
    assert pool.available_size() == 4


def test_alloc_beyond_capacity_returns_none_and_changes_nothing() -> None:
    pool = KVIndexAllocator(4)
    pool.alloc(3)
    before = state(pool)
    assert pool.alloc(2) is None
    assert state(pool) == before
    assert pool.alloc(1) is not None


def test_free_returns_indices_to_the_pool() -> None:
    pool = KVIndexAllocator(6)
    out = pool.alloc(6)
    assert out is not None
    pool.free(out[:2])
    assert pool.available_size() == 2
    assert not pool.is_allocated(int(out[0]))
    assert not pool.is_allocated(int(out[1]))
    assert pool.is_allocated(int(out[2]))
    again = pool.alloc(2)
    assert again is not None
    assert sorted(again.tolist()) == sorted(out[:2].tolist())


def test_every_index_survives_many_cycles() -> None:
    pool = KVIndexAllocator(16)
    for _ in range(3):
        out = pool.alloc(16)
        assert out is not None
        assert sorted(out.tolist()) == list(range(16))
        pool.free(out[::2])
        pool.free(out[1::2])
    assert pool.available_size() == 16


def test_free_of_an_empty_tensor_is_a_no_op() -> None:
    pool = KVIndexAllocator(4)
    pool.alloc(2)
    before = state(pool)
    pool.free(torch.empty(0, dtype=torch.int64))
    assert state(pool) == before


def test_freeing_a_never_allocated_index_is_rejected() -> None:
    pool = KVIndexAllocator(4)
    with pytest.raises(DoubleFreeError, match="not allocated"):
        pool.free(torch.tensor([0]))
    assert pool.available_size() == 4


@pytest.mark.parametrize("again", [1, 2], ids=["the-freed-one", "with-a-live-one"])
def test_a_free_naming_a_freed_index_is_rejected_and_frees_nothing(again: int) -> None:
    """A double free, alone or mixed with a live index: the live one stays allocated."""
    pool = KVIndexAllocator(4)
    out = pool.alloc(2)
    assert out is not None
    pool.free(out[:1])
    before = state(pool)
    with pytest.raises(DoubleFreeError):
        pool.free(out[:again])
    assert state(pool) == before
    assert pool.is_allocated(int(out[1]))


def test_a_repeated_index_in_one_free_is_rejected_without_change() -> None:
    pool = KVIndexAllocator(4)
    out = pool.alloc(4)
    assert out is not None
    before = state(pool)
    with pytest.raises(DoubleFreeError, match="twice"):
        pool.free(torch.stack([out[0], out[1], out[0]]))
    assert state(pool) == before


@pytest.mark.parametrize("bad", [[-1], [4], [0, 100]])
def test_out_of_range_indices_are_rejected(bad: list[int]) -> None:
    pool = KVIndexAllocator(4)
    pool.alloc(4)
    before = state(pool)
    with pytest.raises(UsageError, match="out of range"):
        pool.free(torch.tensor(bad))
    assert state(pool) == before


def test_double_free_error_is_a_usage_error() -> None:
    assert issubclass(DoubleFreeError, UsageError)
    assert issubclass(DoubleFreeError, ValueError)


@pytest.mark.parametrize(
    ("size", "error"), [(-1, UsageError), (2.0, TokenTypeError), (True, TokenTypeError)]
)
def test_a_bad_pool_size_is_rejected(size: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        KVIndexAllocator(size)  # type: ignore[arg-type]


def test_a_negative_alloc_is_rejected() -> None:
    pool = KVIndexAllocator(4)
    with pytest.raises(UsageError):
        pool.alloc(-1)
    assert pool.available_size() == 4


# ---- HybridKVAllocator: full-attention KV and sliding-window KV per index ----------------


def swa_state(pool: HybridKVAllocator) -> tuple[int, list[bool], list[bool]]:
    indices = range(pool.size)
    return (
        pool.available_size(),
        [pool.is_allocated(i) for i in indices],
        [pool.is_swa_held(i) for i in indices],
    )


def test_a_hybrid_index_holds_both_kvs_until_free_swa_drops_one(device: torch.device) -> None:
    pool = HybridKVAllocator(6, device)
    kv = pool.alloc(4)
    assert kv is not None and pool.swa_held_count() == 4
    pool.free_swa(kv[:2])  # tombstoned: its SWA KV goes, its full KV stays
    assert pool.allocated_count() == 4 and pool.swa_held_count() == 2
    assert [pool.is_swa_held(int(i)) for i in kv] == [False, False, True, True]
    pool.free(kv)  # full KV of all four; SWA KV of the two that still held it
    assert pool.allocated_count() == 0 and pool.swa_held_count() == 0
    again = pool.alloc(6)
    assert again is not None and pool.swa_held_count() == 6, "a reused index holds SWA KV again"


@pytest.mark.parametrize("second", ["free_swa", "free"])
def test_an_swa_double_free_is_rejected_without_change(second: str) -> None:
    pool = HybridKVAllocator(4)
    kv = pool.alloc(3)
    assert kv is not None
    pool.free_swa(kv[:1])
    if second == "free":
        pool.free(kv[1:2])
    before = swa_state(pool)
    stale = kv[:1] if second == "free_swa" else kv[1:2]
    with pytest.raises(DoubleFreeError):
        pool.free_swa(torch.cat([kv[2:], stale]))  # one good index, one gone: neither freed
    assert swa_state(pool) == before


def test_free_swa_checks_its_input_like_free() -> None:
    pool = HybridKVAllocator(4)
    kv = pool.alloc(2)
    assert kv is not None
    before = swa_state(pool)
    for bad, error in (
        (torch.tensor([1.0]), UsageError),
        (torch.tensor([7]), UsageError),
        (torch.cat([kv[:1], kv[:1]]), DoubleFreeError),
        (torch.tensor([min(set(range(4)) - set(kv.tolist()))]), DoubleFreeError),  # not allocated
    ):
        with pytest.raises(error):
            pool.free_swa(bad)
        assert swa_state(pool) == before
    pool.free_swa(torch.tensor([], dtype=torch.int64))
    assert swa_state(pool) == before


def test_a_sliding_window_cache_runs_on_the_hybrid_pool() -> None:
    """The cache tombstones through free_swa and deletes through free; at the end the pool
    holds nothing, so every index came back exactly once in both kinds of KV."""
    pool = HybridKVAllocator(64)
    cache = RadixCache(page_size=2, sliding_window_size=4, token_to_kv_pool_allocator=pool)
    for prompt in ([1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 9, 9, 9, 9, 9, 9], [1, 2, 3, 4]):
        hit = cache.match_prefix(RadixKey(prompt))
        boundary = cache.inc_lock_ref(hit.last_node)
        kv = pool.alloc(len(prompt) - hit.prefix_len)
        assert kv is not None
        cache.insert(RadixKey(prompt), torch.cat([hit.indices, kv]), prev_prefix_len=hit.prefix_len)
        cache.dec_lock_ref(hit.last_node, boundary)
        assert pool.allocated_count() == cache.total_size()
    assert cache.evict(0, swa_num_tokens=4).swa_evicted >= 4
    assert pool.allocated_count() == cache.total_size()
    assert pool.swa_held_count() == cache.swa_evictable_size() + cache.swa_protected_size()
    cache.evict(cache.total_size())
    assert pool.allocated_count() == pool.swa_held_count() == 0

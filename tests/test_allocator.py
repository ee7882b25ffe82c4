"""KVIndexAllocator: the reference pool that refuses double frees."""

from __future__ import annotations

import pytest
import torch

from radixkv import DoubleFreeError, KVIndexAllocator, TokenTypeError, UsageError


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


def test_a_double_free_is_rejected_without_change() -> None:
    pool = KVIndexAllocator(4)
    out = pool.alloc(2)
    assert out is not None
    pool.free(out[:1])
    before = state(pool)
    with pytest.raises(DoubleFreeError):
        pool.free(out[:1])
    assert state(pool) == before


def test_freeing_a_never_allocated_index_is_rejected() -> None:
    pool = KVIndexAllocator(4)
    with pytest.raises(DoubleFreeError, match="not allocated"):
        pool.free(torch.tensor([0]))
    assert pool.available_size() == 4


def test_a_free_mixing_live_and_free_indices_frees_none_of_them() -> None:
    pool = KVIndexAllocator(4)
    out = pool.alloc(2)
    assert out is not None
    pool.free(out[:1])
    before = state(pool)
    with pytest.raises(DoubleFreeError):
        pool.free(out)
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

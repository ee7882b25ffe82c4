"""ChunkCache: the no-op fallback matches nothing, caches nothing, frees nothing."""

from __future__ import annotations

import pytest
import torch

from radixkv import ChunkCache, EvictResult, InsertResult, RadixKey, UsageError


class _NeverFree:
    def free(self, indices: torch.Tensor) -> None:
        raise AssertionError("ChunkCache must never free")


def test_match_is_always_an_empty_miss_on_the_cache_device() -> None:
    cache = ChunkCache(_NeverFree())
    cache.insert(RadixKey([1, 2, 3]), torch.tensor([7, 8, 9]))
    result = cache.match_prefix(RadixKey([1, 2, 3]))
    assert result.last_node is None and result.prefix_len == 0
    assert result.indices.dtype == torch.int64 and result.indices.numel() == 0
    assert result.indices.device == torch.device("cpu")


def test_insert_evict_lock_reset_do_nothing() -> None:
    cache = ChunkCache(_NeverFree())
    assert cache.insert(RadixKey([1, 2]), torch.tensor([3, 4])) == InsertResult()
    assert cache.evict(10) == EvictResult()
    cache.inc_lock_ref(None)
    cache.dec_lock_ref(None)
    cache.reset()
    assert (cache.evictable_size(), cache.protected_size(), cache.total_size()) == (0, 0, 0)


def test_has_no_page_size_so_callers_can_detect_it() -> None:
    assert not hasattr(ChunkCache(), "page_size")


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.match_prefix(RadixKey([1, -1])),
        lambda c: c.insert(RadixKey([1, 2, 3]), torch.tensor([1])),
        lambda c: c.insert(RadixKey(["x"])),  # type: ignore[list-item]  # a bad token on purpose
        lambda c: c.evict(-1),
        lambda c: c.insert(RadixKey([1]), None, bogus=1),
    ],
)
def test_invalid_calls_are_usage_errors(call: object) -> None:
    with pytest.raises(UsageError):
        call(ChunkCache())  # type: ignore[operator]  # the parametrised lambdas

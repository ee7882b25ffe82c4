"""The cache on a CUDA KV pool: indices stay on the device, and the hot path never syncs."""

from __future__ import annotations

import pytest
import torch

from radixkv import KVIndexAllocator, RadixCache, RadixKey, UsageError, hash_token_ids
from radixkv.driver.drive import no_host_sync, replay
from radixkv.driver.workload import WorkloadConfig, generate
from tests.conftest import CacheFactory
from tests.helpers import ids, live_nodes, path_tokens, requires_cuda

pytestmark = [pytest.mark.cuda, requires_cuda]


class DeviceOnlyPool:
    """A pool that keeps what it is given without reading it (so it never syncs)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.freed: list[torch.Tensor] = []

    def free(self, indices: torch.Tensor) -> None:
        self.freed.append(indices)


def test_insert_match_split_lock_evict_on_a_cuda_pool(
    make_cache: CacheFactory, cuda_device: torch.device
) -> None:
    h = make_cache(page_size=2, pool_size=256, device=cuda_device)
    assert h.cache.device.type == "cuda"
    a = h.put([1, 2, 3, 4, 5, 6])
    b = h.put([1, 2, 3, 4, 7, 8])
    assert b.prefix_len == 4
    for node in live_nodes(h.cache):
        assert node.value is not None
        assert node.value.device.type == "cuda"
    hit = h.match([1, 2, 3, 4, 5, 6, 9])
    assert hit.prefix_len == 6
    assert hit.indices.device.type == "cuda"
    assert hit.indices.dtype == torch.int64
    assert hit.last_node is a.last_node
    miss = h.match([42, 43])
    assert miss.indices.device.type == "cuda"
    assert miss.indices.numel() == 0
    upper = h.match([1, 2, 9, 9]).last_node  # splits [1, 2, 3, 4]
    assert path_tokens(upper) == (1, 2)
    assert upper.value is not None and upper.value.device.type == "cuda"
    assert ids(h.match([1, 2, 3, 4, 5, 6]).indices) == ids(hit.indices)
    h.cache.inc_lock_ref(b.last_node)
    assert h.cache.evict(10**6).full_evicted == 2  # only the unlocked [5, 6] leaf
    assert h.cache.protected_size() == 6
    h.cache.dec_lock_ref(b.last_node)
    assert h.cache.compute_node_hash(b.last_node) == [
        hash_token_ids([7, 8], hash_token_ids([3, 4], hash_token_ids([1, 2])))
    ]
    h.assert_conserved()
    assert h.cache.evict(10**6).full_evicted == 6
    assert h.allocator.allocated_count() == 0
    assert len(h.allocator.freed) == len(set(h.allocator.freed))


def test_reset_frees_cuda_indices_once(make_cache: CacheFactory, cuda_device: torch.device) -> None:
    h = make_cache(pool_size=64, device=cuda_device)
    h.put([1, 2, 3])
    h.put([1, 2, 4])
    h.cache.reset()
    assert h.allocator.allocated_count() == 0
    assert sorted(h.evicted_ids) == sorted(set(h.evicted_ids))
    assert len(h.evicted_ids) == 3


def test_allocator_on_cuda_rejects_double_frees(cuda_device: torch.device) -> None:
    pool = KVIndexAllocator(8, cuda_device)
    out = pool.alloc(4)
    assert out is not None and out.device.type == "cuda"
    pool.free(out[:2])
    with pytest.raises(UsageError):
        pool.free(out[:1])
    assert pool.available_size() == 6


def test_match_insert_evict_never_synchronise_with_the_host(cuda_device: torch.device) -> None:
    pool = DeviceOnlyPool(cuda_device)
    cache = RadixCache(page_size=2, token_to_kv_pool_allocator=pool)
    values = [torch.arange(i * 100, i * 100 + 8, device=cuda_device) for i in range(4)]
    narrow = torch.arange(500, 508, device=cuda_device, dtype=torch.int32)
    with no_host_sync(cuda_device):
        cache.insert(RadixKey([1, 2, 3, 4, 5, 6]), values[0])
        cache.insert(RadixKey([1, 2, 3, 4, 7, 8, 9]), values[1])  # splits, unaligned tail
        cache.insert(RadixKey([1, 2, 3, 4], "ns"), narrow)  # dtype conversion on device
        hit = cache.match_prefix(RadixKey([1, 2, 3, 4, 5, 6]))
        mid = cache.match_prefix(RadixKey([1, 2, 3, 9]))  # splits mid-edge
        miss = cache.match_prefix(RadixKey([77, 78]))
        node = hit.last_node
        cache.inc_lock_ref(node)
        evicted = cache.evict(2)
        cache.dec_lock_ref(node)
        evicted_rest = cache.evict(100)
        cache.insert(RadixKey([5, 5, 5, 5]), values[2])
        cache.reset()
    assert ids(hit.indices) == [0, 1, 2, 3, 4, 5]
    assert ids(mid.indices) == [0, 1]
    assert miss.indices.numel() == 0
    assert evicted.full_evicted == 2
    assert evicted_rest.full_evicted == 4 + 2 + 4
    assert all(t.device.type == "cuda" for t in pool.freed)
    assert sorted(i for t in pool.freed for i in ids(t)) == sorted(
        [0, 1, 2, 3, 4, 5, 104, 105, 500, 501, 502, 503, 200, 201, 202, 203]
    )


@pytest.mark.parametrize("page_size", [1, 16])
def test_a_replay_on_cuda_indices_never_synchronises(
    cuda_device: torch.device, page_size: int
) -> None:
    trace = WorkloadConfig(seed=3, requests=120, prompt_len=256)
    on_cpu = replay("radixkv", generate(trace), page_size=page_size, pool_size=256 * 12)
    on_cuda = replay(
        "radixkv", generate(trace), page_size=page_size, pool_size=256 * 12, device=cuda_device
    )  # under sync debug mode "error"; ends by checking every index came back once
    assert on_cuda.tokens["evict"] > 0
    assert on_cuda.prefix_digest == on_cpu.prefix_digest


def test_a_value_on_another_device_is_rejected_or_moved(cuda_device: torch.device) -> None:
    cache = RadixCache(token_to_kv_pool_allocator=DeviceOnlyPool(cuda_device))
    cache.insert(RadixKey([1, 2]), torch.tensor([10, 11], device=cuda_device))
    try:
        cache.insert(RadixKey([1, 2, 3, 4]), torch.tensor([20, 21, 22, 23]))  # a CPU value
    except UsageError:
        return  # rejected up front: fine
    result = cache.match_prefix(RadixKey([1, 2, 3, 4]))
    assert result.indices.device.type == "cuda"
    assert ids(result.indices) == [10, 11, 22, 23]

"""Fixtures of the example tests: an allocator-backed cache factory and the devices.

The plain-value helpers (``snapshot``, ``token_index_map``, ...) live in ``tests/helpers.py``
and are re-exported here. Hypothesis profiles are registered by the root conftest, not here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import pytest
import torch

from radixkv import RadixCache
from tests.helpers import (
    CacheHarness,
    CountingClock,
    RecordingAllocator,
    Snapshot,
    requires_cuda,
    snapshot,
)

__all__ = ["CacheFactory", "Snapshot", "snapshot"]


class CacheFactory(Protocol):
    def __call__(
        self,
        page_size: int = 1,
        *,
        pool_size: int = 4096,
        device: torch.device | str = "cpu",
        clock: Callable[[], float] | None = None,
    ) -> CacheHarness: ...


@pytest.fixture
def make_cache() -> CacheFactory:
    """Build a RadixCache on a recording allocator that logs ``on_node_evict`` ids.

    Without ``clock=``, the cache reads a CountingClock the harness exposes (1, 2, 3, ...).
    """

    def factory(
        page_size: int = 1,
        *,
        pool_size: int = 4096,
        device: torch.device | str = "cpu",
        clock: Callable[[], float] | None = None,
    ) -> CacheHarness:
        allocator = RecordingAllocator(pool_size, device)
        counting = CountingClock()
        evicted: list[int] = []
        cache = RadixCache(
            page_size=page_size,
            token_to_kv_pool_allocator=allocator,
            on_node_evict=evicted.append,
            clock=clock if clock is not None else counting,
        )
        return CacheHarness(cache, allocator, counting, evicted)

    return factory


@pytest.fixture
def harness(make_cache: CacheFactory) -> CacheHarness:
    """A page-size-1 cache on the CPU."""
    return make_cache()


@pytest.fixture
def cuda_device() -> torch.device:
    """The CUDA device; the test is skipped without one."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    return torch.device("cuda")


@pytest.fixture(
    params=[
        pytest.param("cpu", id="cpu"),
        pytest.param("cuda", id="cuda", marks=[pytest.mark.cuda, requires_cuda]),
    ]
)
def device(request: pytest.FixtureRequest) -> torch.device:
    """Each device the suite can reach: CPU always, CUDA when present."""
    return torch.device(str(request.param))

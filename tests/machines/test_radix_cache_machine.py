"""radixkv's RadixCache through the kit's one machine core: pages 1, 2, 4, 16."""

from __future__ import annotations

import pytest
import torch
from radixkv_conformance.adapters.radixkv import RadixCacheAdapter, radix_cache
from radixkv_conformance.protocol import Host
from radixkv_conformance.registry import machine_for

TestRadixCache = machine_for("RadixCacheMachine", radix_cache).TestCase


def _cuda_adapter(page_size: int, host: Host) -> RadixCacheAdapter:
    return RadixCacheAdapter(page_size, host, device="cuda")


# Capabilities given: building a probe adapter at import would need the device.
_CUDA = machine_for(
    "RadixCacheCudaMachine", _cuda_adapter, capabilities=RadixCacheAdapter.capabilities
)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
class TestRadixCacheOnCuda(_CUDA.TestCase):  # type: ignore[misc,name-defined]  # TestCase is built by type()
    pass

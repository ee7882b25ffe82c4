"""The RadixCache machine: radixkv's RadixCache against the spec, page sizes 1, 2, 4, 16."""

from __future__ import annotations

import pytest
import torch
from radixkv_conformance.adapter import RadixCacheAdapter
from radixkv_conformance.machines import machine_for
from radixkv_conformance.protocol import FreeSink

TestRadixCache = machine_for("RadixCacheMachine", RadixCacheAdapter).TestCase


def _cuda_adapter(page_size: int, sink: FreeSink) -> RadixCacheAdapter:
    return RadixCacheAdapter(page_size, sink, device="cuda")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
class TestRadixCacheOnCuda(machine_for("RadixCacheCudaMachine", _cuda_adapter).TestCase):  # type: ignore[misc]  # TestCase is built by type()
    pass

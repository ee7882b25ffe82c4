"""A deliberately broken adapter: radixkv's RadixCache, but evicted indices are never freed.

It forgets to forward what the cache frees to the allocator (the sink), as an engine that
drops ``free`` calls would: every eviction leaks KV indices. ``radixkv check
stateful.adapters.broken:factory`` must fail with a short, readable trace.
"""

from __future__ import annotations

from radixkv_conformance.adapter import RadixCacheAdapter
from radixkv_conformance.protocol import FreeSink
from radixkv_conformance.semantics import RADIXKV

SEMANTICS = RADIXKV


class ForgetsToFree(RadixCacheAdapter):
    def __init__(self, page_size: int, sink: FreeSink) -> None:
        super().__init__(page_size, lambda indices: None)  # the bug: frees go nowhere


def factory(page_size: int, sink: FreeSink) -> ForgetsToFree:
    return ForgetsToFree(page_size, sink)

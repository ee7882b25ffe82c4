"""sglang's Python ``RadixCache`` (sglang 0.5.23) under the conformance machine.

    pip install --no-deps sglang==0.5.23
    radixkv check radixkv_conformance.adapters.sglang:factory

sglang's package ``__init__`` pulls in its whole serving stack (triton, zmq, PIL, ...). The
radix tree needs none of it, so this adapter imports ``sglang.srt.mem_cache.radix_cache``
without running the ``__init__`` of its parent packages, and stubs the few modules the tree
imports but never calls (kernels, allocator and pool classes, metrics, runtime context).
sglang's own code is used unmodified.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable
from typing import Any

import torch

from radixkv_conformance.adapters._calls import HostFrees, RefCountedCalls
from radixkv_conformance.adapters._sglang_import import USAGE_ERRORS, import_module
from radixkv_conformance.profile import SGLANG
from radixkv_conformance.protocol import Host
from radixkv_conformance.protocol import TokenPlace as Slot

NOTES = (
    "sglang's Python RadixCache (0.5.23), built with create_simulated. Tokens go in as "
    "array('q'): a token that is no int64 is rejected by that conversion, not by sglang. "
    "Page hashes are sglang's own encoding (not claimed)."
)
PROFILE = SGLANG  # a split refreshes both halves; reset frees nothing; the caller frees

# Packages whose __init__ would import the serving stack: loaded as bare shells.
SHELLS = (
    "sglang",
    "sglang.srt",
    "sglang.srt.mem_cache",
    "sglang.kernels",
    "sglang.kernels.ops",
    "sglang.kernels.ops.kvcache",
)
# Modules the tree imports names from but never calls on the paths the machine drives.
STUBS = (
    "sglang.srt.utils",  # its __init__ star-imports the serving utilities
    "sglang.srt.utils.common",  # ceil_align: only in the Req-based checkpoint path
    "sglang.srt.mem_cache.allocator",  # type annotations only
    "sglang.srt.mem_cache.memory_pool",  # type annotations only
    "sglang.srt.observability.metrics_collector",  # metrics are off
    "sglang.srt.runtime_context",  # metrics/parallel context: off
    "sglang.srt.disaggregation.kv_events",  # KV events are off
    "sglang.kernels.ops.kvcache.mla_buffer",  # triton kernels for MLA buffers
)

radix_cache = import_module("sglang.srt.mem_cache.radix_cache", SHELLS, STUBS)
base = import_module("sglang.srt.mem_cache.base_prefix_cache", SHELLS, STUBS)


class SglangRadixCacheAdapter(RefCountedCalls):
    """Token tuples become ``array('q')`` keys, indices int64 tensors, as sglang's callers do."""

    capabilities = frozenset({"namespaces", "reset", "bad_input", "unlock_checks"})
    usage_errors = USAGE_ERRORS
    notes = NOTES

    def __init__(self, page_size: int, host: Host) -> None:
        self.page_size = page_size
        self.cache = radix_cache.RadixCache.create_simulated(
            mock_allocator=HostFrees(host), page_size=page_size
        )

    def _key(self, tokens: tuple[Any, ...], namespace: Any) -> Any:
        return radix_cache.RadixKey(array("q", tokens), namespace)

    def match(self, tokens: tuple[Any, ...], namespace: Any) -> tuple[tuple[int, ...], Any]:
        result = self.cache.match_prefix(base.MatchPrefixParams(key=self._key(tokens, namespace)))
        node = result.last_device_node
        return tuple(self.cache.path_device_indices(node).tolist()), node

    def insert(
        self, tokens: tuple[Any, ...], namespace: Any, indices: tuple[int, ...]
    ) -> tuple[int | None, Any]:
        value = torch.tensor(indices, dtype=torch.int64)
        params = base.InsertParams(key=self._key(tokens, namespace), value=value)
        result = self.cache.insert(params)
        return result.prefix_len, result.last_device_node

    def evict(self, num_tokens: Any) -> int:
        result = self.cache.evict(base.EvictParams(num_tokens=num_tokens))
        return int(result.num_tokens_evicted)

    def contents(self) -> dict[Slot, int]:
        out: dict[Slot, int] = {}
        p = self.page_size
        stack: list[tuple[Any, tuple[int, ...]]] = [(self.cache.root_node, ())]
        while stack:
            node, path = stack.pop()
            for child in node.children.values():
                child_path = path + tuple(child.key.token_ids)
                for at, index in enumerate(child.value.tolist(), len(path)):
                    out[(child.key.extra_key, child_path[: at // p * p + p], at % p)] = index
                stack.append((child, child_path))
        return out

    def check(self) -> None:
        """sglang has no cheap self-check on this class."""

    def snapshot(self) -> Hashable:
        nodes = []
        stack = [self.cache.root_node]
        while stack:
            node = stack.pop()
            value = tuple(node.value.tolist()) if isinstance(node.value, torch.Tensor) else ()
            nodes.append((node.id, tuple(node.key.token_ids), value, node.lock_ref))
            stack.extend(node.children.values())
        return (tuple(nodes), self.sizes())


def factory(page_size: int, host: Host) -> SglangRadixCacheAdapter:
    return SglangRadixCacheAdapter(page_size, host)

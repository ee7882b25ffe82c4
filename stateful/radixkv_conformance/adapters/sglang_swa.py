"""sglang 0.5.23's ``UnifiedRadixCache`` with FULL + SWA components, on the CPU.

    pip install --no-deps sglang==0.5.23 && pip install msgspec
    radixkv check radixkv_conformance.adapters.sglang_swa:factory        # Python tree core
    radixkv check radixkv_conformance.adapters.sglang_swa:factory_rust   # Rust tree core

sglang's own cache class, SWA component and tree cores, built with ``sliding_window_size =
host.sliding_window``. The SWA component asserts an ``SWATokenToKVPoolAllocator``: the
adapter's allocator subclasses sglang's class (without its ``__init__``, which builds device
pools) and forwards frees: ``free_segment`` / ``free_full_segment`` to ``host.free``,
``free_swa_segment`` (full indices whose SWA pair goes) to ``host.free_swa``. An SWA slot is
named by the full index it came with, so a cache that moves an SWA page to another full
index is seen doing it.

Real: the cache, components, both tree cores, ``allocator/swa.py``, ``page_interleave``,
``streaming_session``, ``utils/invariants``, ``rank_consensus_checker``, ``mem_cache/utils``,
``events``, ``hicache_storage``, ``environ``, ``rust_extensions``. Stubbed (``STUBS``; never
called here): triton kernels, the other allocators and pools, HiCache / storage / linker,
metrics, ``runtime_context``, ``distributed``, ``managers``; ``numpy`` while importing when
absent (``components/base.py`` imports ``float64`` for typing). Handles are node ids; ``lock``
returns sglang's ``TreeLock`` and ``unlock`` gives it back. Neither core walks by key, so
``contents`` / ``swa_pages`` read the KV-canary walk (every FULL slot; the SWA-resident ones)
and name each index by the key it was inserted under.
"""

from __future__ import annotations

import enum
import importlib
import importlib.util
import os
import sys
from array import array
from collections.abc import Hashable, Mapping
from typing import Any

import torch

from radixkv_conformance.adapters._sglang_import import Stub, sglang_root
from radixkv_conformance.profile import LRU_SPLIT_REFRESHES_BOTH, Profile
from radixkv_conformance.protocol import (
    Evicted,
    Host,
    Indices,
    Inserted,
    Namespace,
    PagePlace,
    Sizes,
    Tokens,
)
from radixkv_conformance.protocol import TokenPlace as Slot

_M = "sglang.srt.mem_cache"
# Packages whose __init__ would import the serving stack: bare shells.
SHELLS = f"""sglang sglang.srt {_M} {_M}.unified_cache {_M}.rust_tree_core sglang.kernels
    sglang.kernels.ops sglang.srt.session sglang.srt.disaggregation""".split()
STUB_PACKAGES = ("sglang.srt.utils", f"{_M}.allocator")  # stubs that hold real submodules
# Imported but never called on the paths driven here (see the module doc).
STUBS = f"""sglang.kernels.ops.memory sglang.kernels.ops.memory.allocator
    sglang.kernels.ops.kvcache sglang.kernels.ops.kvcache.mla_buffer
    {_M}.allocator.base {_M}.allocator.paged {_M}.allocator.token {_M}.allocator.hisparse
    {_M}.allocator.unified_hybrid_swa {_M}.base_swa_memory_pool {_M}.memory_pool
    {_M}.swa_memory_pool {_M}.common {_M}.hybrid_cache {_M}.hybrid_cache.hybrid_cache_controller
    {_M}.buffer_mode {_M}.buffer_mode.pipeline {_M}.buffer_mode.storage_existence_cache
    {_M}.storage_prefetch
    {_M}.unified_cache.storage_attachment {_M}.unified_cache.unified_cache_linker
    sglang.srt.utils.common sglang.srt.utils.poll_timer sglang.srt.platforms
    sglang.srt.distributed sglang.srt.distributed.communication_tags sglang.srt.managers
    sglang.srt.managers.cache_controller sglang.srt.managers.schedule_batch
    sglang.srt.observability sglang.srt.observability.metrics_collector
    sglang.srt.runtime_context sglang.srt.disaggregation.kv_events""".split()
# Real here; another adapter in the process (sglang_rust) may have stubbed them.
REAL = f"{_M}.unified_cache.components {_M}.unified_cache.unified_tree_core".split()
REAL += [f"{_M}.hicache_storage", f"{_M}.events"]


def _load() -> tuple[Any, ...]:
    root = sglang_root()
    for name in SHELLS:
        if name not in sys.modules:
            shell = type(sys)(name)
            shell.__path__ = [str(root.joinpath(*name.split(".")))]
            sys.modules[name] = shell
    for name in REAL:
        if isinstance(sys.modules.get(name), Stub):
            del sys.modules[name]
    for name in (*STUB_PACKAGES, *STUBS):
        sys.modules.setdefault(name, Stub(name))
    for name in STUB_PACKAGES:
        sys.modules[name].__path__ = [str(root.joinpath(*name.split(".")))]
    sys.modules["sglang.srt.utils"].is_npu = lambda: False  # type: ignore[attr-defined]  # a stub
    kv_events: Any = sys.modules["sglang.srt.disaggregation.kv_events"]
    if isinstance(kv_events, Stub):  # the tiers a (disabled) event names on eviction
        vars(kv_events)["StorageMedium"] = enum.Enum("StorageMedium", "GPU CPU DISK EXTERNAL")
    os.environ.setdefault("SGLANG_RUST_BUILD_MODE", "never")  # the bundled .so, never Cargo
    no_numpy = "numpy" not in sys.modules and importlib.util.find_spec("numpy") is None
    if no_numpy:  # the components use numpy's float64 as their recency clock's type
        numpy = Stub("numpy")
        vars(numpy)["float64"] = float
        sys.modules["numpy"] = numpy
    try:
        names = "unified_radix_cache allocator.swa cache_init_params base_prefix_cache radix_cache"
        names += " unified_cache.component_type"
        return tuple(importlib.import_module(f"{_M}.{n}") for n in names.split())
    finally:
        if no_numpy:
            del sys.modules["numpy"]


urc, swa_alloc, init_params, base, radix_cache, component_type = _load()
FULL, SWA = component_type.ComponentType.FULL, component_type.ComponentType.SWA

NOTES = (
    "sglang 0.5.23 UnifiedRadixCache (FULL+SWA) on the CPU with the adapter's allocator (a "
    "subclass of sglang's SWATokenToKVPoolAllocator; identity full->SWA translation). Insert "
    "frees the caller's duplicates past prev_prefix_len itself; a split refreshes both "
    "halves; reset drops the tree without freeing. Contents: the core's KV-canary walk, "
    "each index named by the key it was inserted under; a tombstone is a slot whose SWA "
    "is not resident; SWA-locked pages are the resident ones the walk skips as locked."
)
PROFILE = Profile(
    "sglang-swa",
    victims=LRU_SPLIT_REFRESHES_BOTH,
    duplicates="cache",
    reset_frees=False,
    swa_lock_tokens="exact",
    swa_dead_insert="tombstoned",
    swa_tombstone_locks="accepted",
    page_sizes=(1, 4),
    notes=NOTES,
)


class _FullOnly:
    def __init__(self, allocator: HostSwaAllocator) -> None:
        self.allocator = allocator

    def free_segment(self, indices: torch.Tensor, start_pos: int = 0) -> None:
        self.allocator.free_full_segment(indices, start_pos)


class HostSwaAllocator(swa_alloc.SWATokenToKVPoolAllocator):  # type: ignore[misc,name-defined]  # sglang's class
    """What the cache calls on its SWA allocator, forwarded to the kit's host."""

    def __init__(self, host: Host, page_size: int) -> None:  # sglang's __init__ builds pools
        self.host, self.page_size, self.device = host, page_size, "cpu"
        self.swa_of: dict[int, int] = {}  # full index -> the SWA slot it holds, if moved
        # sglang's components free a node's full half and its SWA half one right after the
        # other (either first); the kit's ``free`` is the pair. So a half is held back a
        # moment: the other half of the same indices next makes it a ``free``; anything
        # else first (or the end of the call) sends it alone.
        self.half: tuple[str, tuple[int, ...]] | None = None

    def _out(self, indices: torch.Tensor, start_pos: int) -> tuple[int, ...]:
        return tuple(int(i) for i in indices[start_pos:].tolist())

    def free_segment(self, indices: torch.Tensor, start_pos: int = 0) -> None:
        self.flush()
        self.host.free(self._out(indices, start_pos))

    def free_full_segment(self, indices: torch.Tensor, start_pos: int = 0) -> None:
        self._half("full", self._out(indices, start_pos))

    def _half(self, kind: str, indices: tuple[int, ...]) -> None:
        if self.half is not None and self.half[1] == indices and self.half[0] != kind:
            self.half = None
            self.host.free(indices)  # both halves of the same indices: the pair
            return
        self.flush()
        self.half = (kind, indices)

    def flush(self) -> None:
        """Send a held-back half alone: a full half (its SWA half went earlier) is the
        rest of the pair, ``free``; an SWA half is ``free_swa``."""
        held, self.half = self.half, None
        if held is not None and held[1]:
            (self.host.free if held[0] == "full" else self.host.free_swa)(held[1])

    @property
    def full_attn_allocator(self) -> Any:  # the FULL component frees full-only KV through it
        return _FullOnly(self)

    def free_swa_segment(self, indices: torch.Tensor, start_pos: int = 0) -> None:
        self._half("swa", tuple(self.swa_of.get(i, i) for i in self._out(indices, start_pos)))

    def translate_swa_indices_for_transfer(self, full: torch.Tensor) -> torch.Tensor:
        return torch.tensor(
            [self.swa_of.get(int(i), int(i)) for i in full.tolist()], dtype=torch.int64
        )

    def set_full_to_swa_mapping(self, full: torch.Tensor, swa: torch.Tensor) -> None:
        for f, s in zip(full.tolist(), swa.tolist(), strict=True):
            self.swa_of[int(f)] = int(s)

    def clear_full_to_swa_mapping(self, full: torch.Tensor) -> None:
        for f in full.tolist():
            self.swa_of.pop(int(f), None)

    def available_size(self) -> int:
        return 1 << 40

    full_available_size = swa_available_size = available_size

    @property
    def size_full(self) -> int:
        return 1 << 40


class SglangSwaAdapter:
    capabilities = frozenset({"namespaces", "reset", "swa"})
    usage_errors: tuple[type[BaseException], ...] = (ValueError, TypeError, OverflowError)
    notes = NOTES

    def __init__(self, page_size: int, host: Host, backend: str = "python") -> None:
        if host.sliding_window is None:
            raise ValueError("sglang_swa needs host.sliding_window (the kit's SWA rules)")
        self.page_size = page_size
        self.allocator = HostSwaAllocator(host, page_size)
        params = init_params.CacheInitParams(
            disable=False,
            req_to_token_pool=None,
            token_to_kv_pool_allocator=self.allocator,
            page_size=page_size,
            sliding_window_size=host.sliding_window,
            tree_components=(FULL, SWA),
            tree_core_backend=backend,
        )
        self.cache = urc.UnifiedRadixCache(params)
        if self.cache._tree_core_backend != backend:
            raise ImportError(f"sglang chose the {self.cache._tree_core_backend} tree core")
        self.core = self.cache.tree_core
        self.slot_of: dict[int, Slot] = {}

    def _key(self, tokens: Tokens, namespace: Namespace) -> Any:
        return radix_cache.RadixKey(array("q", tokens), namespace)

    def _path(self, node: Any) -> tuple[int, ...]:
        return tuple(self.cache.path_device_indices(node).tolist())

    def match(self, tokens: Tokens, namespace: Namespace) -> tuple[Indices, Any]:
        got = self.cache.match_prefix(base.MatchPrefixParams(key=self._key(tokens, namespace)))
        return self._path(got.last_device_node)[: got.device_prefix_len], got.last_device_node

    def insert(
        self,
        tokens: Tokens,
        namespace: Namespace,
        indices: Indices,
        *,
        prev_prefix_len: int = 0,
        swa_evicted_seqlen: int = 0,
    ) -> Inserted:
        params = base.InsertParams(
            key=self._key(tokens, namespace),
            value=torch.tensor(indices, dtype=torch.int64),
            prev_prefix_len=prev_prefix_len,
        )
        params.set_evicted_seqlen(SWA, swa_evicted_seqlen)
        result = self.cache.insert(params)
        self.allocator.flush()
        node = result.last_device_node
        p = self.page_size
        for at, index in enumerate(self._path(node)):
            self.slot_of[index] = (namespace, tuple(tokens[: at // p * p + p]), at % p)
        return Inserted(int(result.prefix_len), node)

    def lock(self, handle: Any) -> Any:
        return self.cache.lock(handle)

    def unlock(self, handle: Any, token: Any) -> None:
        self.cache.unlock(token)

    def evict(self, num_tokens: int, *, swa_num_tokens: int = 0) -> Evicted:
        params = base.EvictParams(num_tokens=num_tokens, swa_num_tokens=swa_num_tokens)
        got = self.cache.evict(params)
        self.allocator.flush()
        return Evicted(int(got.num_tokens_evicted), int(got.swa_num_tokens_evicted))

    def reset(self) -> None:
        self.cache.reset()
        self.allocator.flush()

    def sizes(self) -> Sizes:
        c = self.cache
        return Sizes(c.full_evictable_size(), c.full_protected_size(), c.total_size()[0])

    def swa_sizes(self) -> tuple[int, int]:
        return (self.cache.swa_evictable_size(), self.cache.swa_protected_size())

    def _walk(self, unlocked_only: bool, swa_resident_only: bool) -> list[int]:
        return list(
            self.core.walk_for_kv_canary(unlocked_only, swa_resident_only).slot_indices.tolist()
        )

    def _pages(self, indices: list[int]) -> dict[PagePlace, list[int]]:
        pages: dict[PagePlace, list[int]] = {}
        for index in indices:
            if index not in self.slot_of:
                raise AssertionError(f"index {index} is cached but was never inserted")
            ns, path, _ = self.slot_of[index]
            pages.setdefault((ns, path), []).append(index)
        return pages

    def swa_pages(self) -> Mapping[PagePlace, tuple[Indices, bool]]:
        live = set(self._pages(self._walk(False, True)))
        return {
            q: (tuple(ix), q not in live) for q, ix in self._pages(self._walk(False, False)).items()
        }

    def swa_locked_pages(self) -> set[PagePlace]:
        return set(self._pages(self._walk(False, True))) - set(self._pages(self._walk(True, True)))

    def contents(self) -> dict[Slot, int]:
        return {self.slot_of[i]: i for i in self._walk(False, False) if i in self.slot_of}

    def check(self) -> None:
        """sglang's own tree check (structure, LRU lists, component sizes)."""
        self.core.sanity_check([], [])

    def snapshot(self) -> Hashable:
        walks = tuple(tuple(self._walk(u, s)) for u in (False, True) for s in (False, True))
        return (walks, self.sizes(), self.swa_sizes(), tuple(sorted(self.allocator.swa_of.items())))


def factory(page_size: int, host: Host) -> SglangSwaAdapter:
    """The Python tree core (sglang's default)."""
    return SglangSwaAdapter(page_size, host, "python")


def factory_rust(page_size: int, host: Host) -> SglangSwaAdapter:
    """The Rust tree core (the ``.so`` in the wheel)."""
    return SglangSwaAdapter(page_size, host, "rust")

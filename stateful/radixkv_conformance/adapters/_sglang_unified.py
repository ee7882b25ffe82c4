"""sglang 0.5.23's ``UnifiedRadixCache`` on the CPU: the loader and stand-ins its adapters share.

``sglang_swa`` (FULL + SWA) and ``sglang_mamba`` (FULL + Mamba) drive the same cache class with
other components. Both load sglang's own modules, unmodified, under bare parent packages
(``SHELLS``), with the modules the cache imports but never calls on the paths driven here
replaced by inert stubs (``STUBS``). Real: the cache, its components, both tree cores,
``allocator/swa.py``, ``allocator/mamba.py``, ``memory_pool.py``, ``page_interleave``,
``streaming_session``, ``utils/invariants``, ``rank_consensus_checker``, ``mem_cache/utils``,
``events``, ``hicache_storage``, ``environ``, ``rust_extensions``.

Stubbed, and why:

- triton kernels, the other allocators and pools, HiCache / storage / linker, metrics,
  ``distributed``, ``managers``: imported by the cache, never called on these paths;
- the kernels, layers and model configs ``memory_pool.py`` imports at its top (``POOL_STUBS``):
  it is loaded only for its pool classes, whose ``__init__`` (device buffers) never runs here;
- ``sglang.srt.utils``: a stub holding its real submodules; its platform probes answer for
  this machine, a CPU without CUDA, ROCm, XPU or NPU (``memory_pool.py`` reads them at import);
- ``runtime_context``: the published server configuration. The Mamba component reads three
  values from it at construction (``RUNTIME_CONTEXT`` says which, and what it answers);
- ``numpy`` while importing when absent (``components/base.py`` imports ``float64`` for typing).

What both adapters use: ``HostKVAllocator`` (the KV allocator, forwarding frees to the kit's
host), ``radix_key``, ``build_cache``, ``UnifiedAdapter`` (handles, locks, sizes, check) and,
on the Python tree core, ``_sglang_picture.TreePicture`` (their ``canonical_state``).
"""

from __future__ import annotations

import enum
import importlib
import importlib.util
import math
import os
import sys
from array import array
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

from radixkv_conformance.adapters._checkouts import register_shells
from radixkv_conformance.adapters._sglang_import import Stub, sglang_root
from radixkv_conformance.protocol import Host, Namespace, Sizes, Tokens

_M = "sglang.srt.mem_cache"
# Packages whose __init__ would import the serving stack: bare shells.
SHELLS = f"""sglang sglang.srt {_M} {_M}.unified_cache {_M}.rust_tree_core sglang.kernels
    sglang.kernels.ops sglang.srt.session sglang.srt.disaggregation""".split()
STUB_PACKAGES = ("sglang.srt.utils", f"{_M}.allocator")  # stubs that hold real submodules
# Imported but never called on the paths driven here (see the module doc).
STUBS = f"""sglang.kernels.ops.memory sglang.kernels.ops.memory.allocator
    sglang.kernels.ops.kvcache sglang.kernels.ops.kvcache.mla_buffer
    {_M}.allocator.base {_M}.allocator.paged {_M}.allocator.token {_M}.allocator.hisparse
    {_M}.allocator.unified_hybrid_swa {_M}.base_swa_memory_pool
    {_M}.swa_memory_pool {_M}.common {_M}.hybrid_cache {_M}.hybrid_cache.hybrid_cache_controller
    {_M}.buffer_mode {_M}.buffer_mode.pipeline {_M}.buffer_mode.storage_existence_cache
    {_M}.storage_prefetch
    {_M}.unified_cache.storage_attachment {_M}.unified_cache.unified_cache_linker
    sglang.srt.utils.common sglang.srt.utils.poll_timer sglang.srt.platforms
    sglang.srt.distributed sglang.srt.distributed.communication_tags sglang.srt.managers
    sglang.srt.managers.cache_controller sglang.srt.managers.schedule_batch
    sglang.srt.observability sglang.srt.observability.metrics_collector
    sglang.srt.runtime_context sglang.srt.disaggregation.kv_events""".split()
# What memory_pool.py imports at its top for its kernels, layers and model configs.
POOL_STUBS = (
    "triton",
    "triton.language",
    "sglang.kernels.ops.kvcache.cache_move",
    "sglang.kernels.ops.kvcache.cache_ops",
    "sglang.kernels.ops.kvcache.kvcache",
    "sglang.kernels.ops.quantization.dsa_quant_k_cache",
    "sglang.kernels.ops.quantization.fp8_kernel",
    "sglang.srt.configs.mamba_utils",
    "sglang.srt.layers.attention.dsa.utils",
    "sglang.srt.layers.dcp.layout",
    "sglang.srt.layers.quantization.fp4_kv_cache_quant_method",
    "sglang.srt.layers.radix_attention",
    "sglang.srt.mem_cache.layout.token_major",
    "sglang.srt.mem_cache.index_key_cache",  # imports kernels another adapter may leave real
    "sglang.srt.utils.async_probe",
)
# Real here; another adapter in the process (sglang_rust) may have stubbed them.
REAL = f"{_M}.unified_cache.components {_M}.unified_cache.unified_tree_core".split()
REAL += [f"{_M}.hicache_storage", f"{_M}.events", f"{_M}.memory_pool"]
# This machine: a CPU (memory_pool.py branches on these at import, e.g. XPU kernels).
PLATFORM = {"is_cpu": True, "is_cuda": False, "is_hip": False, "is_npu": False, "is_xpu": False}
PLATFORM |= {"cpu_has_amx_support": False, "is_gfx95_supported": False}

MAMBA_CHUNK = 1
"""The model's Mamba chunk size the runtime context answers with. sglang caches states on a
grid of ``lcm(max(model chunk, page_size), page_size)`` tokens (runtime_context.py:1958-1972,
arg_groups/overrides.py:1897-1924): with a chunk of 1 the grid is the page, the kit's
(its branching point is the KV match itself, SPEC.md's Mamba rules)."""
RUNTIME_CONTEXT = SimpleNamespace(
    # exec_.py:497: -1, sglang's default, keeps every state on a path
    mamba=SimpleNamespace(mamba_max_states_per_path=-1, enable_mamba_extra_buffer_lazy=False),
)


def _answer_runtime_context(context: ModuleType) -> None:
    """Give the stub of ``sglang.srt.runtime_context`` (whichever adapter made it) the values
    the Mamba component reads at construction: ``get_exec().mamba``,
    ``mamba_cache_chunk_size()``, ``mamba_checkpoint_grid(page)``. Before the components
    import, as they bind the names."""
    if isinstance(context, Stub):
        vars(context)["get_exec"] = lambda: RUNTIME_CONTEXT
        vars(context)["mamba_cache_chunk_size"] = lambda: MAMBA_CHUNK
        vars(context)["mamba_checkpoint_grid"] = lambda page: math.lcm(MAMBA_CHUNK, page)


def _register(root: Path) -> None:
    """Shells, stubs and the stand-ins' values into ``sys.modules``; real modules freed of
    another adapter's stubs."""
    register_shells(root, SHELLS)
    for name in REAL:
        if isinstance(sys.modules.get(name), Stub):
            del sys.modules[name]
    for name in (*STUB_PACKAGES, *STUBS, *POOL_STUBS):
        sys.modules.setdefault(name, Stub(name))
    _answer_runtime_context(sys.modules["sglang.srt.runtime_context"])
    for name in STUB_PACKAGES:
        sys.modules[name].__path__ = [str(root.joinpath(*name.split(".")))]
    for probe, answer in PLATFORM.items():
        setattr(sys.modules["sglang.srt.utils"], probe, lambda answer=answer: answer)
    kv_events: Any = sys.modules["sglang.srt.disaggregation.kv_events"]
    if isinstance(kv_events, Stub):  # the tiers a (disabled) event names on eviction
        vars(kv_events)["StorageMedium"] = enum.Enum("StorageMedium", "GPU CPU DISK EXTERNAL")


def _load() -> SimpleNamespace:
    _register(sglang_root())
    os.environ.setdefault("SGLANG_RUST_BUILD_MODE", "never")  # the bundled .so, never Cargo
    no_numpy = "numpy" not in sys.modules and importlib.util.find_spec("numpy") is None
    if no_numpy:  # the components use numpy's float64 as their recency clock's type
        numpy = Stub("numpy")
        vars(numpy)["float64"] = float
        sys.modules["numpy"] = numpy
    names = """urc=unified_radix_cache swa_alloc=allocator.swa mamba_alloc=allocator.mamba
        init_params=cache_init_params base=base_prefix_cache radix_cache=radix_cache
        component_type=unified_cache.component_type memory_pool=memory_pool"""
    try:
        pairs = (pair.split("=") for pair in names.split())
        return SimpleNamespace(**{k: importlib.import_module(f"{_M}.{v}") for k, v in pairs})
    finally:
        if no_numpy:
            del sys.modules["numpy"]


sglang = _load()
FULL = sglang.component_type.ComponentType.FULL
SWA = sglang.component_type.ComponentType.SWA
MAMBA = sglang.component_type.ComponentType.MAMBA


def radix_key(tokens: Tokens, namespace: Namespace) -> Any:
    """sglang's key, on the ``array('q')`` its callers hold."""
    return sglang.radix_cache.RadixKey(array("q", tokens), namespace)


class HostKVAllocator:
    """The KV allocator's side the cache calls, forwarded to the kit's host: a node's KV
    freed is ``host.free``. Capacity is unbounded (the kit's host never runs out)."""

    def __init__(self, host: Host, page_size: int) -> None:
        self.host, self.page_size, self.device = host, page_size, "cpu"

    def _out(self, indices: torch.Tensor, start_pos: int) -> tuple[int, ...]:
        return tuple(int(i) for i in indices[start_pos:].tolist())

    def free_segment(self, indices: torch.Tensor, start_pos: int = 0) -> None:
        self.host.free(self._out(indices, start_pos))

    def available_size(self) -> int:
        return 1 << 40

    @property
    def size_full(self) -> int:
        return 1 << 40

    def mamba_full_cache_donor(self) -> None:
        """No pool shares its bytes between Mamba states and KV here (sglang's unified
        hybrid pool would): a state's eviction is asked for by slots alone."""
        return None


def build_cache(
    page_size: int, backend: str, components: tuple[Any, ...], allocator: Any, **params: Any
) -> Any:
    """sglang's ``UnifiedRadixCache`` with ``components``, on the ``backend`` tree core
    (``params``: more of sglang's ``CacheInitParams``; no request pool unless given)."""
    init = sglang.init_params.CacheInitParams(
        disable=False,
        req_to_token_pool=params.pop("req_to_token_pool", None),
        token_to_kv_pool_allocator=allocator,
        page_size=page_size,
        tree_components=components,
        tree_core_backend=backend,
        **params,
    )
    cache = sglang.urc.UnifiedRadixCache(init)
    if cache._tree_core_backend != backend:
        raise ImportError(f"sglang chose the {cache._tree_core_backend} tree core")
    return cache


class UnifiedAdapter:
    """What the unified cache's adapters do alike. Handles are node ids; ``lock`` returns
    sglang's ``TreeLock`` and ``unlock`` gives it back (its receipt says what to release)."""

    usage_errors: tuple[type[BaseException], ...] = (ValueError, TypeError, OverflowError)

    def __init__(self, page_size: int, cache: Any) -> None:
        self.page_size = page_size
        self.cache = cache
        self.core = cache.tree_core

    def _path(self, node: Any) -> tuple[int, ...]:
        """The KV indices from the root to ``node``, as sglang's scheduler reads them."""
        return tuple(self.cache.path_device_indices(node).tolist())

    def lock(self, handle: Any) -> Any:
        return self.cache.lock(handle)

    def unlock(self, handle: Any, token: Any) -> None:
        self.cache.unlock(token)

    def sizes(self) -> Sizes:
        c = self.cache
        return Sizes(c.full_evictable_size(), c.full_protected_size(), c.total_size()[0])

    def check(self) -> None:
        """sglang's own tree check (structure, LRU lists, component sizes)."""
        self.core.sanity_check([], [])

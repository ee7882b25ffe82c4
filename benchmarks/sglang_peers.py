"""sglang 0.5.23's two radix trees, loaded bare for the benchmark: its Python ``RadixCache``
and its Rust tree core (``sglang.srt.mem_cache.rust_tree_core``, the ``mem_cache`` extension
bundled in the wheel) driven through sglang's own controller, ``UnifiedRadixCache``.

    pip install --no-deps sglang==0.5.23 && pip install msgspec numpy

sglang's package ``__init__`` files import its whole serving stack (triton, zmq, transformers,
...). The trees need none of it, so their parent packages are loaded as bare shells, and the
modules dragged in for unrelated reasons (kernels, host-memory tiers, metrics, distributed
helpers, request types) are inert stubs. sglang's own code runs unmodified; nothing on the
match, insert, lock, evict path is a stub. msgspec (the controller's message structs) and
numpy (a component's time counter) are real: the Rust core's path uses them.
"""

from __future__ import annotations

import ast
import importlib
import sys
import types
from array import array
from typing import Any

from radixkv_conformance.adapters._checkouts import register_shells
from radixkv_conformance.adapters._sglang_import import Stub as KitStub
from radixkv_conformance.adapters._sglang_import import sglang_root

from radixkv.driver.caches import SGLANG_WHEEL
from radixkv.driver.drive import SglangReplay, sglang_factory

# Packages whose __init__ would import the serving stack: loaded as bare shells.
_SHELLS = (
    "sglang",
    "sglang.srt",
    "sglang.srt.utils",
    "sglang.srt.mem_cache",
    "sglang.srt.distributed",
    "sglang.kernels",
    "sglang.kernels.ops",
    "sglang.kernels.ops.kvcache",
)
# Modules the trees import names from but never call on the paths the benchmark drives.
_STUBS = (
    "sglang.srt.utils.common",  # ceil_align, is_npu: paths of checkpoints and NPUs
    "sglang.srt.mem_cache.memory_pool",  # pool classes: type annotations, isinstance
    "sglang.srt.observability.metrics_collector",  # metrics are off
    "sglang.srt.runtime_context",  # parallel/metrics context: off; Mamba settings: no Mamba
    "sglang.srt.disaggregation.kv_events",  # KV events are off
    "sglang.kernels.ops.kvcache.mla_buffer",  # triton kernels for MLA buffers
    "sglang.kernels.ops.memory.allocator",  # triton kernels of the paged allocator
    "sglang.kernels.ops.memory.common",  # triton kernels for SWA and Mamba copies
    "sglang.srt.platforms",  # device platform probing (psutil)
    "sglang.srt.managers.cache_controller",  # HiCache transfers: no host tier
    "sglang.srt.managers.schedule_batch",  # request types: the benchmark passes no Req
    "sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller",  # HiCache: no host tier
    "sglang.srt.mem_cache.host_memory",  # host-tier sizing (psutil): no host tier
    "sglang.srt.mem_cache.pool_host.mha",  # host-tier copy kernels: no host tier
    "sglang.srt.mem_cache.pool_host.unified",  # host-tier copy kernels: no host tier
    "sglang.srt.session.streaming_session",  # placeholder below
)


class _Placeholder:
    """Stands for a class of a stubbed module; accepts any arguments and does nothing."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass


class _Stub(types.ModuleType):
    """A module whose every public attribute is an inert placeholder class, except the
    functions in ``_REAL``: those are sglang's own, compiled from its source."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        real = _REAL.get((self.__name__, attr))
        if real is not None:
            return _function_from_source(*real)
        return type(attr, (_Placeholder,), {})


# Functions the hot path calls from a module that cannot be imported here (its imports
# need triton, numpy, orjson, ...): taken from sglang's source file, unmodified.
_REAL = {
    ("sglang.srt.utils", "assert_int64_array"): (
        "sglang/srt/utils/common.py",
        "assert_int64_array",
    ),
}


def _function_from_source(path: str, name: str) -> Any:
    source = sglang_root().joinpath(path).read_text()
    tree = ast.parse(source)
    (func,) = (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace: dict[str, Any] = {"array": array}
    exec(compile(ast.Module([func], []), path, "exec"), namespace)
    return namespace[name]


class _NoStreamingSessions:
    """The controller's streaming-session hook with no session open: every request takes
    the tree path (what sglang's own hook does for a request that holds no session slot)."""

    def __init__(self, cache: object) -> None:
        self.slots: dict[object, object] = {}

    def try_match_prefix(self, params: object) -> None:
        return None


def _drop_foreign_stubs() -> None:
    """The driver's own sglang cache (``radixkv drive --compare sglang``) is loaded by the
    conformance kit's loader, which stubs modules this one imports for real (the Rust
    controller's allocator package, for one). Drop those stubs from ``sys.modules`` so the
    real modules load; a module already imported keeps what it took from them."""
    for name, module in list(sys.modules.items()):
        if name.startswith("sglang.") and name not in _STUBS and isinstance(module, KitStub):
            del sys.modules[name]


def _load(*modules: str) -> list[Any]:
    _drop_foreign_stubs()
    register_shells(sglang_root(), _SHELLS, _Stub)
    for name in _STUBS:
        if name not in sys.modules:
            sys.modules[name] = _Stub(name)
    sessions = sys.modules["sglang.srt.session.streaming_session"]
    sessions.StreamingSession = _NoStreamingSessions  # type: ignore[attr-defined]
    sessions.is_virtual_node = lambda node_id: False  # type: ignore[attr-defined]
    return [importlib.import_module(m) for m in modules]


def python_tree() -> tuple[Any, Any]:
    """sglang's ``radix_cache`` and ``base_prefix_cache`` modules."""
    radix_cache, base = _load(
        "sglang.srt.mem_cache.radix_cache", "sglang.srt.mem_cache.base_prefix_cache"
    )
    return radix_cache, base


def rust_tree(pool: Any, page_size: int) -> Any:
    """A ``UnifiedRadixCache`` over the Rust tree core, freeing into ``pool``."""
    controller, params, components = _load(
        "sglang.srt.mem_cache.unified_radix_cache",
        "sglang.srt.mem_cache.cache_init_params",
        "sglang.srt.mem_cache.unified_cache.component_type",
        "sglang.srt.mem_cache.rust_tree_core.adapter",
    )[:3]
    init = params.CacheInitParams(
        disable=False,
        req_to_token_pool=None,
        token_to_kv_pool_allocator=pool,
        page_size=page_size,
        tree_components=(components.ComponentType.FULL,),
        tree_core_backend="rust",
    )
    return controller.UnifiedRadixCache(init)


class SglangRustReplay(SglangReplay):
    """sglang's Rust tree core behind its controller ``UnifiedRadixCache``, the same calls
    (keys: ``array('q')``). The controller frees evicted indices into the pool itself."""

    name = "sglang-rust"
    # what its first call imports: `radixkv drive --compare` checks them before any work
    requires = (
        ("sglang", SGLANG_WHEEL),
        ("msgspec", "pip install msgspec"),
        ("numpy", "pip install numpy"),
    )

    def __init__(self, page_size: int, pool: Any) -> None:
        self._rc, self._base = python_tree()
        self.cache = rust_tree(pool, page_size)

    def insert(self, key: Any, extra_key: str | None, value: Any, priority: int = 0) -> int:
        # ``priority`` is unused, as for the Python tree (LRU). The controller frees the
        # duplicates in [prev_prefix_len, prefix_len) itself; with prev_prefix_len at the
        # end it frees none, and the driver frees them untimed, as for the other caches.
        params = self._base.InsertParams(
            key=self._rc.RadixKey(key, extra_key), value=value, prev_prefix_len=len(value)
        )
        return int(self.cache.insert(params).prefix_len)

    def lock(self, node: Any) -> Any:
        return self.cache.lock(node)

    def unlock(self, node: Any, token: Any) -> None:
        self.cache.unlock(token)

    def total_size(self) -> int:
        return int(self.cache.full_evictable_size() + self.cache.full_protected_size())


def _python_modules() -> Any:
    radix_cache, base = python_tree()
    return types.SimpleNamespace(radix_cache=radix_cache, base=base)


# The driver's own sglang adapter, over the modules loaded here; and the Rust core.
PEERS = {"sglang": sglang_factory(_python_modules), "sglang-rust": SglangRustReplay}

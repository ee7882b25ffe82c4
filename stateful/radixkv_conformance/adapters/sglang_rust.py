"""sglang 0.5.23's Rust tree core, driven through sglang's own controller.

    pip install --no-deps sglang==0.5.23 && pip install msgspec
    radixkv check radixkv_conformance.adapters.sglang_rust:factory

The wheel ships the core as ``sglang/srt/mem_cache/rust_tree_core/mem_cache*.so`` (a
cpython-311 extension linking libtorch; it loads with torch 2.13) and the Python controller
``RustUnifiedTreeCore`` (``rust_tree_core/adapter.py``) that sglang's ``UnifiedRadixCache``
drives. This adapter plays that cache for the FULL component only: it pumps the stepped
insert and applies its ``FreeDeviceKV`` actions, runs the stepped device eviction and
drains its frees, and releases a lock with the receipt the lock returned.

Imports. The controller needs ``msgspec`` (a small package: ``pip install msgspec``).
Besides the shells and stubs of the Python tree's adapter (``sglang.py``), its import drags
in, for reasons unrelated to a FULL-only core on the CPU, and so stubbed here:

- ``sglang.srt.mem_cache.unified_cache.components``: the component drivers; the controller
  takes only ``CacheTransferPhase`` from it (HiCache transfers). Its ``__init__`` needs
  numpy.
- ``sglang.srt.mem_cache.unified_cache.unified_tree_core``: the Python tree core; the
  controller takes only ``StorageBackupSpec`` (storage backups).
- ``sglang.srt.mem_cache.hicache_storage``: host-cache pool names and transfers (HiCache).
- ``sglang.srt.mem_cache.events``: the LoRA-name table for KV events (events are off).
- ``sglang.srt.utils`` (already stubbed for the Python tree): ``assert_int64_array`` is a
  no-op here; it only checks that a key is ``array('q')``, which this adapter always builds.

The adapter sets ``SGLANG_RUST_BUILD_MODE=never`` (unless set) so that sglang's loader takes
the bundled ``.so`` and never tries to build the crate with Cargo; a core that does not
load (e.g. a libtorch it was not built against) is an ``ImportError``, so its vectors skip.
``sglang.srt.mem_cache.unified_cache`` is loaded as a bare shell (its ``__init__`` is a
docstring). Everything else the controller imports is sglang's own code, unmodified.

What the core cannot show directly. It has no walk by token keys: ``contents()`` takes the
live (index, position, previous index) triples of its KV-canary walk and names each index
by the key it was inserted under, which this adapter records at insert time from the
indices of the path the insert returned (peers.md, "what got in the way" 6). A cached index
the adapter never saw inserted is reported as a contents error by the machine.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Hashable
from typing import Any

import torch

from radixkv_conformance.adapters import sglang as python_tree
from radixkv_conformance.adapters._sglang_import import USAGE_ERRORS, import_module
from radixkv_conformance.profile import LRU_SPLIT_REFRESHES_BOTH, Profile
from radixkv_conformance.protocol import Host, Sizes
from radixkv_conformance.protocol import TokenPlace as Slot

SHELLS = (*python_tree.SHELLS, "sglang.srt.mem_cache.unified_cache")
STUBS = (
    *python_tree.STUBS,
    "sglang.srt.mem_cache.unified_cache.components",  # HiCache transfer phases; needs numpy
    "sglang.srt.mem_cache.unified_cache.unified_tree_core",  # the Python core: backup specs
    "sglang.srt.mem_cache.hicache_storage",  # host-cache pools and transfers
    "sglang.srt.mem_cache.events",  # LoRA names for KV events (off)
)

# Load the .so bundled in the wheel; never let sglang's loader fall back to building the
# crate with Cargo (the wheel has no crate; a libtorch mismatch then reads as absent).
os.environ.setdefault("SGLANG_RUST_BUILD_MODE", "never")
try:
    controller = import_module("sglang.srt.mem_cache.rust_tree_core.adapter", SHELLS, STUBS)
except (OSError, RuntimeError) as failed:
    raise ImportError(f"sglang's Rust tree core did not load: {failed}") from failed
init_params = import_module("sglang.srt.mem_cache.cache_init_params", SHELLS, STUBS)
component_type = import_module("sglang.srt.mem_cache.unified_cache.component_type", SHELLS, STUBS)
cache_action = import_module("sglang.srt.mem_cache.unified_cache.cache_action", SHELLS, STUBS)
base = python_tree.base
FULL = component_type.ComponentType.FULL

CAPABILITIES = frozenset({"namespaces", "reset", "bad_input", "unlock_checks"})
NOTES = (
    "sglang 0.5.23's Rust tree core (FULL component), through sglang's controller: it frees "
    "an insert's duplicate indices itself (FreeDeviceKV) past prev_prefix_len, which the "
    "adapter sets to the run of leading indices the caller passes that the cache holds "
    "(read from the live contents, no match). A split refreshes both halves; reset drops "
    "the tree without freeing. Contents: the core's KV walk, each index named by the key "
    "it was inserted under (the core has no walk by keys)."
)
PROFILE = Profile(
    "sglang-rust",
    victims=LRU_SPLIT_REFRESHES_BOTH,
    duplicates="cache",
    reset_frees=False,
    notes=NOTES,
)


class _Allocator:
    """What the controller reads from the KV allocator: its device."""

    device = "cpu"


class SglangRustTreeCoreAdapter:
    """Token tuples become ``array('q')`` keys, node handles are the core's integer ids."""

    usage_errors = USAGE_ERRORS
    capabilities = CAPABILITIES
    notes = NOTES

    def __init__(self, page_size: int, host: Host) -> None:
        self.page_size = page_size
        self.host = host
        self.core = controller.RustUnifiedTreeCore(self._init_params(page_size))
        self.slot_of: dict[int, Slot] = {}
        """Every index ever cached, named by the key it was inserted under."""

    def _init_params(self, page_size: int, **options: Any) -> Any:
        """The controller's ``CacheInitParams``: a FULL-only tree (``options``: more fields)."""
        return init_params.CacheInitParams(
            disable=False,
            req_to_token_pool=None,
            token_to_kv_pool_allocator=_Allocator(),
            page_size=page_size,
            tree_components=(FULL,),
            **options,
        )

    def _key(self, tokens: tuple[Any, ...], namespace: Any) -> Any:
        return python_tree.radix_cache.RadixKey(array("q", tokens), namespace)

    def _path_indices(self, node: int) -> tuple[int, ...]:
        if self.core.is_root(node):
            return ()
        root = self.core.root_node_handle(None)
        return tuple(self.core.collect_full_device_indices(node, root).tolist())

    def match(self, tokens: tuple[Any, ...], namespace: Any) -> tuple[tuple[int, ...], Any]:
        result = self.core.match_prefix(base.MatchPrefixParams(key=self._key(tokens, namespace)))
        self._apply(result.cache_actions)
        node = result.last_device_node
        return self._path_indices(node)[: result.device_prefix_len], node

    def insert(
        self, tokens: tuple[Any, ...], namespace: Any, indices: tuple[int, ...]
    ) -> tuple[int | None, Any]:
        key = self._key(tokens, namespace)
        value = torch.tensor(indices, dtype=torch.int64)
        protected = self._protected_len(tokens, namespace, indices)
        params = base.InsertParams(key=key, value=value, prev_prefix_len=protected)
        step = self.core.begin_insert(params)
        try:
            while True:
                self._apply(step.actions)
                if step.result is not None:
                    break
                step = self.core.resume_insert()
        finally:
            self._apply(self.core.end_insert())
        node = step.result.last_device_node
        self._name_path(tuple(tokens), namespace, self._path_indices(node))
        return int(step.result.prefix_len), node

    def _protected_len(
        self, tokens: tuple[Any, ...], namespace: Any, indices: tuple[int, ...]
    ) -> int:
        """How many leading indices the caller passes are the cache's own (whole pages).

        sglang's scheduler passes this as ``prev_prefix_len`` (the request's
        ``cache_protected_len``), and the core frees only the duplicates past it. The
        machine's caller has no such field: it re-passes the cached indices it matched, so
        the adapter counts them, reading the live contents without a match (which would
        split nodes and refresh recency).
        """
        cached = self.contents()
        p = self.page_size
        same = 0
        for at, index in enumerate(indices[: len(tokens)]):
            if cached.get((namespace, tuple(tokens[: at // p * p + p]), at % p)) != index:
                break
            same += 1
        return same // p * p

    def _name_path(self, tokens: tuple[int, ...], namespace: Any, path: tuple[int, ...]) -> None:
        p = self.page_size
        for at, index in enumerate(path):
            self.slot_of[index] = (namespace, tokens[: at // p * p + p], at % p)

    def _apply(self, actions: list[Any]) -> None:
        """Execute the controller's cache actions as sglang's cache does: free KV segments."""
        while actions:
            action = actions.pop()
            if isinstance(action, cache_action.FreeDeviceKV):
                for segment in action.indices:
                    self.host.free(tuple(int(i) for i in segment.tolist()))
            else:
                raise AssertionError(f"unexpected cache action {type(action).__name__}")

    def lock(self, handle: Any) -> Any:
        return self.core.inc_lock_ref(handle)

    def unlock(self, handle: Any, token: Any) -> None:
        receipt = base.DecLockRefParams(node_id=handle)
        if token is not None:
            receipt = base.DecLockRefParams(
                node_id=token.node_id,
                skipped_lock_components=token.skipped_lock_components,
                component_lock_uuids=token.component_lock_uuids,
            )
        self.core.dec_lock_ref(handle, receipt)

    def evict(self, num_tokens: Any) -> int:
        """sglang's device eviction walk for FULL: one victim at a time until the target."""
        evicted = 0
        self.core.evict_device_start(FULL, num_tokens)
        try:
            while evicted < num_tokens:
                step = self.core.evict_device_next_node(FULL, {FULL: evicted})
                evicted += self._drain(step)
                if step.node_id is None:
                    if not step.made_progress:
                        break
                    continue
                evicted += self._drain(self.core.evict_device_leaf(step.node_id, False))
        finally:
            self.core.evict_device_end(FULL)
        return evicted

    def _drain(self, result: Any) -> int:
        """Free what one eviction step released; returns the FULL tokens it evicted."""
        for segment in result.device_frees.pop(FULL, []):
            self.host.free(tuple(int(i) for i in segment.tolist()))
        if result.device_frees or result.host_frees:
            raise AssertionError(f"frees of other components: {result.device_frees}")
        self._apply(result.cache_actions)
        return int(result.tracker.get(FULL, 0))

    def reset(self) -> None:
        self.core.reset()

    def sizes(self) -> Sizes:
        c = self.core
        return Sizes(c.full_evictable_size(), c.full_protected_size(), c.total_size()[0])

    def contents(self) -> dict[Slot, int]:
        walk = self.core.walk_for_kv_canary(False, False)
        out: dict[Slot, int] = {}
        for index in walk.slot_indices.tolist():
            if index not in self.slot_of:
                raise AssertionError(f"index {index} is cached but was never inserted")
            out[self.slot_of[index]] = index
        return out

    def page_hashes(self, handle: Any) -> list[str]:
        raise NotImplementedError("the core's page hashes use sglang's own encoding")

    def check(self) -> None:
        """The core's own sanity check (tree, leaf sets, LRU, sizes)."""
        self.core.sanity_check([], [])

    def snapshot(self) -> Hashable:
        walk = self.core.walk_for_kv_canary(False, False)
        return (
            tuple(walk.slot_indices.tolist()),
            tuple(walk.positions.tolist()),
            tuple(walk.prev_slot_indices.tolist()),
            self.sizes(),
        )


def factory(page_size: int, host: Host) -> SglangRustTreeCoreAdapter:
    return SglangRustTreeCoreAdapter(page_size, host)

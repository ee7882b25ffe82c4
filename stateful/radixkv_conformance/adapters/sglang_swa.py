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

Loaded by the loader it shares with ``sglang_mamba`` (``_sglang_unified``: what is real, what
is stubbed and why). Handles are node ids; ``lock`` returns sglang's ``TreeLock`` and
``unlock`` gives it back. Neither core walks by key, so ``contents`` / ``swa_pages`` read the
KV-canary walk (every FULL slot; the SWA-resident ones) and name each index by the key it
was inserted under. On the Python core the adapter gives the explorer ``canonical_state``
(``_sglang_picture.TreePicture``); the Rust core has none (``PythonSglangSwaAdapter`` says why).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import torch

from radixkv_conformance.adapters._sglang_picture import TreePicture
from radixkv_conformance.adapters._sglang_unified import (
    FULL,
    SWA,
    HostKVAllocator,
    UnifiedAdapter,
    build_cache,
    radix_key,
    sglang,
)
from radixkv_conformance.profile import LRU_SPLIT_REFRESHES_BOTH, Profile
from radixkv_conformance.protocol import (
    Evicted,
    Host,
    Indices,
    Inserted,
    Namespace,
    PagePlace,
    Tokens,
)
from radixkv_conformance.protocol import TokenPlace as Slot

# sglang's modules, by the names the benchmarks read them (benchmarks/bench_swa.py)
urc, swa_alloc, init_params = sglang.urc, sglang.swa_alloc, sglang.init_params
base, radix_cache = sglang.base, sglang.radix_cache

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
    swa_window_tombstones="count",  # components/swa.py acquire_component_lock: by position
    page_sizes=(1, 4),
    notes=NOTES,
)


class _FullOnly:
    def __init__(self, allocator: HostSwaAllocator) -> None:
        self.allocator = allocator

    def free_segment(self, indices: torch.Tensor, start_pos: int = 0) -> None:
        self.allocator.free_full_segment(indices, start_pos)


class HostSwaAllocator(HostKVAllocator, swa_alloc.SWATokenToKVPoolAllocator):  # type: ignore[misc,name-defined]  # sglang's class
    """What the cache calls on its SWA allocator, forwarded to the kit's host (sglang's
    ``__init__``, which builds device pools, never runs: ``HostKVAllocator``'s comes first)."""

    def __init__(self, host: Host, page_size: int) -> None:
        super().__init__(host, page_size)
        self.swa_of: dict[int, int] = {}  # full index -> the SWA slot it holds, if moved
        # sglang's components free a node's full half and its SWA half one right after the
        # other (either first); the kit's ``free`` is the pair. So a half is held back a
        # moment: the other half of the same indices next makes it a ``free``; anything
        # else first (or the end of the call) sends it alone.
        self.half: tuple[str, tuple[int, ...]] | None = None

    def free_segment(self, indices: torch.Tensor, start_pos: int = 0) -> None:
        self.flush()
        super().free_segment(indices, start_pos)

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

    def full_available_size(self) -> int:
        return self.available_size()

    def swa_available_size(self) -> int:
        return self.available_size()


class SglangSwaAdapter(UnifiedAdapter):
    capabilities = frozenset({"namespaces", "reset", "swa"})
    notes = NOTES

    def __init__(self, page_size: int, host: Host, backend: str = "python") -> None:
        if host.sliding_window is None:
            raise ValueError("sglang_swa needs host.sliding_window (the kit's SWA rules)")
        self.allocator = HostSwaAllocator(host, page_size)
        window = host.sliding_window
        cache = build_cache(
            page_size, backend, (FULL, SWA), self.allocator, sliding_window_size=window
        )
        super().__init__(page_size, cache)
        self.slot_of: dict[int, Slot] = {}

    def match(self, tokens: Tokens, namespace: Namespace) -> tuple[Indices, Any]:
        got = self.cache.match_prefix(base.MatchPrefixParams(key=radix_key(tokens, namespace)))
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
            key=radix_key(tokens, namespace),
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

    def evict(self, num_tokens: int, *, swa_num_tokens: int = 0) -> Evicted:
        params = base.EvictParams(num_tokens=num_tokens, swa_num_tokens=swa_num_tokens)
        got = self.cache.evict(params)
        self.allocator.flush()
        return Evicted(int(got.num_tokens_evicted), int(got.swa_num_tokens_evicted))

    def reset(self) -> None:
        self.cache.reset()
        self.allocator.flush()

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

    def snapshot(self) -> Hashable:
        walks = tuple(tuple(self._walk(u, s)) for u in (False, True) for s in (False, True))
        return (walks, self.sizes(), self.swa_sizes(), tuple(sorted(self.allocator.swa_of.items())))


class PythonSglangSwaAdapter(SglangSwaAdapter):
    """The Python tree core, whose whole state the explorer can picture (``canonical_state``)
    and whose nodes the kit can place each SWA lock on (``node_boundaries``).

    The Rust core has no hook: its binding shows the tree (``pretty_print``: ids, FULL lock
    counts, which components hold data), the sizes and the canary walks, but neither the
    recency stamps, the LRU lists' order, the SWA lock counts nor the lock-segment uuids,
    all of which later answers read; the explorer pictures it without one (its memory and
    ``snapshot``)."""

    capabilities = SglangSwaAdapter.capabilities | {"node_boundaries"}

    def node_starts(self, tokens: Tokens, namespace: Namespace) -> list[int]:
        """Where the nodes on the walk from the root along ``tokens`` begin (read only)."""
        starts: list[int] = []
        node, at = self.core.root_node, 0
        while at < len(tokens):
            rest = tuple(tokens[at:])
            below = [
                child
                for child in node.children.values()
                if not child.evicted and child.key.extra_key == namespace and _on(child, rest)
            ]
            if not below:
                break
            node = below[0]
            starts.append(at)
            at += len(node.key)
        return starts

    def canonical_state(self, handles: Sequence[Any]) -> tuple[Hashable, tuple[Hashable, ...]]:
        """The cache's whole state (``TreePicture``: every node, every LRU list's order by
        its links, lock counts, SWA lock counts and tombstones, uuids, stamps as ranks, the
        components, the cache's own state, the allocator's SWA mapping and held-back half),
        and ``slot_of``: the key each index was inserted under, which ``contents`` and
        ``swa_pages`` read for each index the tree holds. Of ``slot_of`` only the indices
        the tree's nodes hold are kept: those are the only ones read (the canary walk yields a
        node's FULL indices), and an index comes into a node only through an insert, which
        writes ``slot_of`` afresh for every index on the path to the node it returns, the
        path every value of that insert lands on (the walk from the root along its key)."""
        picture = TreePicture(self, (self.allocator.host,), frozenset({"slot_of"}))
        held = picture.indices()
        own = tuple(sorted((i, s) for i, s in self.slot_of.items() if i in held))
        return picture.state(handles, own)


def _on(node: Any, tokens: Tokens) -> bool:
    """Whether ``tokens`` go on into ``node``: its key agrees with them as far as both go."""
    edge = tuple(node.key.token_ids)
    return edge[: len(tokens)] == tokens[: len(edge)]


def factory(page_size: int, host: Host) -> SglangSwaAdapter:
    """The Python tree core (sglang's default), with ``canonical_state``."""
    return PythonSglangSwaAdapter(page_size, host, "python")


def factory_rust(page_size: int, host: Host) -> SglangSwaAdapter:
    """The Rust tree core (the ``.so`` in the wheel)."""
    return SglangSwaAdapter(page_size, host, "rust")

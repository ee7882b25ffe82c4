"""Sliding-window attention: radixkv's RadixCache(sliding_window_size=W) against sglang's.

    python benchmarks/bench_swa.py            # every configuration, 3 repeats interleaved
    python benchmarks/bench_swa.py --quick    # a tenth of the requests

The peer is sglang 0.5.23's hybrid-SWA cache, ``UnifiedRadixCache`` with FULL + SWA tree
components (tombstones, SWA locks, the window rule on a match), on its Python tree core
(**py**) and its Rust one (**rust**), both on the CPU. It is loaded the way the conformance
kit's adapter loads it (``radixkv_conformance.adapters.sglang_swa``: sglang's own modules,
stubs only for what this path never calls); it runs in its own process, apart from
``bench.py``, whose sglang loader stubs other modules. sglang's ``PureSWARadixCache`` (every
layer SWA) is its classic ``RadixCache`` with another ``evict``: ``bench.py``'s rows are its
rows. sglang's Mamba cache needs its device state pools (``HybridReqToTokenPool``); no CPU
path drives it: ``bench_mamba.py`` times radixkv's Mamba cache against pymllm's.

One replay per cache over ``bench.py``'s seeded trace, every cache handed fresh
``array('q')`` keys built outside the timed calls. Per request, the scheduler this script
plays matches the prompt (limited to its length - 1), locks the match, evicts what the
two pools lack (``evict(num_tokens, swa_num_tokens)``: full KV and SWA KV), allocates the
new tokens (an index holds both), inserts prompt + output with ``prev_prefix_len`` = the
match (each cache frees its own duplicates, as both do in SWA mode) and unlocks. The pool
records every free in O(1) inside the timed calls and settles them after the request,
untimed; at the end everything is evicted and every index must be back. Timing: thread CPU
time of the cache calls, ``gc.collect()`` before a replay and the collector off inside it.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from radixkv import RadixCache, RadixKey

sys.path.insert(0, str(Path(__file__).parent))
import bench  # benchmarks/ is not a package: its folder is put on the path


class SwaPool:
    """KV indices with full and SWA halves: ``alloc`` hands out indices holding both (the
    SWA slot of index i is slot i until a cache maps it elsewhere).

    ``free`` releases indices' full KV and their SWA KV where still held (radixkv's
    allocator contract); ``free_full`` the full KV only and ``free_swa`` SWA slots only
    (what sglang's allocator is told). They only record the tensor (O(1) in the timed
    calls); ``settle`` applies them, untimed. An index can be handed out again once its full
    KV and its SWA slot are both free.
    """

    device = torch.device("cpu")

    def __init__(self, size: int, swa_size: int) -> None:
        self.size, self.swa_size = size, swa_size
        self._free = torch.arange(size, dtype=torch.int64)
        self._free_at = 0  # self._free[_free_at:] can be handed out
        self._held = torch.zeros(size, dtype=torch.bool)
        self._swa_held = torch.zeros(size, dtype=torch.bool)
        self.swa_used = 0
        self._freed: list[torch.Tensor] = []
        self._swa_freed: list[tuple[torch.Tensor, bool]] = []  # (slots, all must be held)

    def free(self, indices: torch.Tensor) -> None:
        self.free_full(indices)
        self.free_swa_where_held(indices)

    def free_full(self, indices: torch.Tensor) -> None:
        self._freed.append(indices)

    def free_swa(self, slots: torch.Tensor) -> None:
        self._swa_freed.append((slots, True))

    def free_swa_where_held(self, slots: torch.Tensor) -> None:
        self._swa_freed.append((slots, False))

    @property
    def available(self) -> int:
        return self._free.numel() - self._free_at

    @property
    def swa_available(self) -> int:
        return self.swa_size - self.swa_used

    def alloc(self, n: int) -> torch.Tensor:
        if n > self.available or n > self.swa_available:
            raise RuntimeError(f"pool exhausted: {n} wanted, {self.available} free")
        out = self._free[self._free_at : self._free_at + n].clone()
        self._free_at += n
        self._held[out] = True
        self._swa_held[out] = True
        self.swa_used += n
        return out

    def settle(self) -> None:
        """Apply the recorded frees; freeing what is not held is an error."""
        touched = []
        for slots, strict in sorted(self._swa_freed, key=lambda freed: not freed[1]):
            if strict and not bool(self._swa_held[slots].all()):
                raise AssertionError("SWA KV freed twice")
            slots = slots[self._swa_held[slots]]
            self._swa_held[slots] = False
            self.swa_used -= slots.numel()
            touched.append(slots)
        for indices in self._freed:
            if not bool(self._held[indices].all()) or indices.unique().numel() != len(indices):
                raise AssertionError("full KV freed twice")
            self._held[indices] = False
            touched.append(indices)
        self._freed.clear()
        self._swa_freed.clear()
        if touched:
            candidates = torch.cat(touched).unique()
            back = candidates[~self._held[candidates] & ~self._swa_held[candidates]]
            self._free = torch.cat([self._free[self._free_at :], back])
            self._free_at = 0


class SwaCache(Protocol):
    name: str

    def match(self, key: array[int], limit: int, extra_key: str | None) -> tuple[int, Any, Any]:
        """(prefix_len, indices, node) of ``key[:limit]``."""

    def insert(
        self, key: array[int], extra_key: str | None, value: torch.Tensor, prev: int
    ) -> int: ...

    def lock(self, node: Any) -> Any: ...

    def unlock(self, node: Any, token: Any) -> None: ...

    def evict(self, num_tokens: int, swa_num_tokens: int) -> None: ...


class RadixkvSwa:
    name = "radixkv"

    def __init__(self, page_size: int, pool: SwaPool, window: int) -> None:
        self.cache = RadixCache(
            page_size, sliding_window_size=window, token_to_kv_pool_allocator=pool
        )

    def match(self, key: array[int], limit: int, extra_key: str | None) -> tuple[int, Any, Any]:
        got = self.cache.match_prefix(RadixKey(key, extra_key, limit=limit))
        return got.prefix_len, got.indices, got.last_node

    def insert(self, key: array[int], extra_key: str | None, value: torch.Tensor, prev: int) -> int:
        return self.cache.insert(RadixKey(key, extra_key), value, prev_prefix_len=prev).prefix_len

    def lock(self, node: Any) -> Any:
        return self.cache.inc_lock_ref(node)

    def unlock(self, node: Any, token: Any) -> None:
        self.cache.dec_lock_ref(node, token)

    def evict(self, num_tokens: int, swa_num_tokens: int) -> None:
        self.cache.evict(num_tokens, swa_num_tokens)


def sglang_modules() -> Any:
    """sglang's hybrid-SWA modules, loaded by the conformance kit's adapter (on first use)."""
    from radixkv_conformance.adapters import sglang_swa

    return sglang_swa


def sglang_allocator(pool: SwaPool, page_size: int) -> Any:
    """sglang's ``SWATokenToKVPoolAllocator`` (its type is asserted) forwarding to ``pool``:
    its ``__init__`` builds device pools, so it is not called. SWA slots are the full
    indices they came with (sglang asks for a mapping only when it moves one)."""
    modules = sglang_modules()

    class FullOnly:  # frees the full KV of indices whose SWA slot a node took over
        def free_segment(self, indices: torch.Tensor, start_pos: int = 0) -> None:
            pool.free_full(indices[start_pos:])

    class Allocator(modules.swa_alloc.SWATokenToKVPoolAllocator):  # type: ignore[misc, name-defined]  # sglang's class
        def __init__(self) -> None:
            self.page_size, self.device = page_size, "cpu"
            self.full_attn_allocator = FullOnly()
            # full index -> its SWA slot (a lookup tensor, as sglang's own allocator keeps)
            self.swa_of = torch.arange(pool.size, dtype=torch.int64)

        def slots(self, full: torch.Tensor) -> torch.Tensor:
            return self.swa_of[full]

        def free_segment(self, indices: torch.Tensor, start_pos: int = 0) -> None:
            part = indices[start_pos:]
            pool.free_full(part)
            pool.free_swa_where_held(self.slots(part))

        free_full_segment = free_segment

        def free_swa_segment(self, indices: torch.Tensor, start_pos: int = 0) -> None:
            pool.free_swa(self.slots(indices[start_pos:]))

        def translate_swa_indices_for_transfer(self, full: torch.Tensor) -> torch.Tensor:
            return self.slots(full)

        def set_full_to_swa_mapping(self, full: torch.Tensor, swa: torch.Tensor) -> None:
            self.swa_of[full] = swa

        def clear_full_to_swa_mapping(self, full: torch.Tensor) -> None:
            self.swa_of[full] = full

        def available_size(self) -> int:
            return pool.available

        full_available_size = available_size

        def swa_available_size(self) -> int:
            return pool.swa_available

        @property
        def size_full(self) -> int:
            return pool.size

    return Allocator()


class SglangSwa:
    def __init__(self, page_size: int, pool: SwaPool, window: int, backend: str) -> None:
        m = sglang_modules()
        self.name = f"sglang-{backend}"
        self._m = m
        params = m.init_params.CacheInitParams(
            disable=False,
            req_to_token_pool=None,
            token_to_kv_pool_allocator=sglang_allocator(pool, page_size),
            page_size=page_size,
            sliding_window_size=window,
            tree_components=(m.FULL, m.SWA),
            tree_core_backend=backend,
        )
        self.cache = m.urc.UnifiedRadixCache(params)
        if self.cache._tree_core_backend != backend:
            raise ImportError(f"sglang chose the {self.cache._tree_core_backend} tree core")

    def match(self, key: array[int], limit: int, extra_key: str | None) -> tuple[int, Any, Any]:
        m = self._m
        params = m.base.MatchPrefixParams(key=m.radix_cache.RadixKey(key, extra_key, limit=limit))
        got = self.cache.match_prefix(params)
        node = got.last_device_node  # the indices: the path's, as sglang's scheduler reads them
        return got.device_prefix_len, self.cache.path_device_indices(node), node

    def insert(self, key: array[int], extra_key: str | None, value: torch.Tensor, prev: int) -> int:
        m = self._m
        params = m.base.InsertParams(
            key=m.radix_cache.RadixKey(key, extra_key), value=value, prev_prefix_len=prev
        )
        return int(self.cache.insert(params).prefix_len)

    def lock(self, node: Any) -> Any:
        return self.cache.lock(node)

    def unlock(self, node: Any, token: Any) -> None:
        self.cache.unlock(token)

    def evict(self, num_tokens: int, swa_num_tokens: int) -> None:
        m = self._m
        self.cache.evict(m.base.EvictParams(num_tokens=num_tokens, swa_num_tokens=swa_num_tokens))


CACHES = ("radixkv", "sglang-python", "sglang-rust")


def make(name: str, page_size: int, pool: SwaPool, window: int) -> SwaCache:
    if name == "radixkv":
        return RadixkvSwa(page_size, pool, window)
    return SglangSwa(page_size, pool, window, name.removeprefix("sglang-"))


@dataclass(frozen=True)
class SwaConfig:
    requests: int
    prompt_len: int
    page_size: int
    window: int

    @property
    def pool(self) -> int:
        return self.prompt_len * 48  # full KV for about 48 requests: evictions

    @property
    def swa_pool(self) -> int:
        return self.prompt_len * 12  # SWA KV for about 12: tombstones

    @property
    def label(self) -> str:
        return (
            f"{self.requests:,} x {self.prompt_len:,}, page {self.page_size}, window "
            f"{self.window:,}, pool {self.pool:,} (SWA {self.swa_pool:,})"
        )


def configs(quick: bool) -> list[SwaConfig]:
    scale = 10 if quick else 1
    out = [SwaConfig(2000 // scale, 2048, page, 512) for page in (1, 16)]
    out += [SwaConfig(2000 // scale, 16384, page, 4096) for page in (1, 16)]
    return out


@dataclass
class Result:
    seconds: dict[str, float]
    requests: int
    hit_tokens: int
    prompt_tokens: int

    @property
    def requests_per_s(self) -> float:
        return self.requests / sum(self.seconds.values())


def replay(cfg: SwaConfig, name: str, seed: int) -> Result:
    requests = bench.trace(seed, cfg.requests, cfg.prompt_len)
    pool = SwaPool(cfg.pool, cfg.swa_pool)
    cache = make(name, cfg.page_size, pool, cfg.window)
    seconds = dict.fromkeys(("match", "insert", "lock", "evict"), 0.0)
    clock = time.thread_time
    hits = prompts = 0
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for request in requests:
            tokens = request.full()
            key = array("q", tokens)  # fresh, untimed
            limit = len(request.prompt) - 1
            t = clock()
            prefix_len, indices, node = cache.match(key, limit, request.extra_key)
            t1 = clock()
            token = cache.lock(node)
            t2 = clock()
            seconds["match"] += t1 - t
            seconds["lock"] += t2 - t1
            hits += prefix_len
            prompts += len(request.prompt)
            need = len(tokens) - prefix_len
            short, swa_short = need - pool.available, need - pool.swa_available
            if short > 0 or swa_short > 0:
                t = clock()
                cache.evict(max(short, 0), max(swa_short, 0))
                seconds["evict"] += clock() - t
                pool.settle()
            value = torch.cat([indices[:prefix_len], pool.alloc(need)])
            t = clock()
            cache.insert(key, request.extra_key, value, prefix_len)
            t1 = clock()
            cache.unlock(node, token)
            seconds["insert"] += t1 - t
            seconds["lock"] += clock() - t1
            pool.free(value[len(value) // cfg.page_size * cfg.page_size :])  # the caller's tail
            pool.settle()
        t = clock()
        cache.evict(cfg.pool, cfg.swa_pool)
        seconds["evict"] += clock() - t
        pool.settle()
    finally:
        if enabled:
            gc.enable()
    if pool.available != pool.size:
        raise AssertionError(f"{name}: {pool.size - pool.available} indices never came back")
    return Result(seconds, len(requests), hits, prompts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the requests")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", type=int, nargs="*", help="configuration numbers (1-based)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    chosen = list(enumerate(configs(args.quick), 1))
    if args.only:
        chosen = [chosen[i - 1] for i in args.only]
    print(
        "SWA: fresh array('q') keys for every cache; thread CPU time of the cache calls; "
        f"medians of {args.repeats} interleaved runs; sglang {bench.sglang_version()}.",
        flush=True,
    )
    lines = [
        "| # | configuration | radixkv req/s | ÷ sglang py | ÷ sglang rust "
        "| match, insert µs/call radixkv / py / rust | hit rate radixkv / py / rust |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for number, cfg in chosen:
        print(f"\n[{number}] {cfg.label}", flush=True)
        runs: dict[str, list[Result]] = {c: [] for c in CACHES}
        for r in range(args.repeats):
            for name in CACHES if r % 2 == 0 else CACHES[::-1]:
                got = replay(cfg, name, args.seed)
                runs[name].append(got)
                print(f"  {name:14} run {r + 1}: {got.requests_per_s:9,.0f} req/s", flush=True)
        rate = {c: statistics.median(x.requests_per_s for x in runs[c]) for c in CACHES}
        per_call = {
            c: [statistics.median(x.seconds[op] / x.requests * 1e6 for x in runs[c]) for op in OPS]
            for c in CACHES
        }
        hit = {c: runs[c][0].hit_tokens / runs[c][0].prompt_tokens for c in CACHES}
        lines.append(
            f"| {number} | {cfg.label} | {rate['radixkv']:,.0f} "
            f"| {rate['radixkv'] / rate['sglang-python']:.2f} "
            f"| {rate['radixkv'] / rate['sglang-rust']:.2f} "
            f"| {' / '.join(f'{m:.1f}, {i:.1f}' for m, i in per_call.values())} "
            f"| {' / '.join(f'{h:.4f}' for h in hit.values())} |"
        )
        print(lines[-1], flush=True)
    print("\n" + "\n".join(lines))
    return 0


OPS = ("match", "insert")


if __name__ == "__main__":
    raise SystemExit(main())

"""Mamba hybrids: radixkv's MambaRadixCache against pymllm's own MambaRadixCache.

    PYMLLM_SRC=/path/to/mllm python benchmarks/bench_mamba.py            # 3 repeats interleaved
    PYMLLM_SRC=/path/to/mllm python benchmarks/bench_mamba.py --quick    # a tenth of the requests

The peer is pymllm's ``pymllm/mem_cache/mamba_radix_cache.py`` (pure Python + torch, on the
CPU), loaded by the conformance kit's loader (``radixkv_conformance.adapters._pymllm_import``:
bare parent packages, nothing stubbed, pymllm's code unmodified). pymllm is not on the
package index: ``PYMLLM_SRC`` names a checkout (the folder holding ``pymllm/``). Without it,
or if pymllm cannot be imported, the script runs radixkv alone and says why.

One replay per cache over ``bench.py``'s seeded trace. Each cache gets the key type its
callers hold, built fresh and outside the timed calls: radixkv a fresh ``array('q')`` of
prompt + output, the match limited by ``RadixKey(limit=len(prompt) - 1)``; pymllm fresh
``list``s (its ``RadixKey`` holds a list), the prompt cut to ``len(prompt) - 1`` and the
inserted key cut to whole pages by the caller, since pymllm's ``insert`` would store an
unaligned tail (radixkv's drops it). The insert's arguments are built untimed too, in each
cache's callers' form: radixkv the pool's index tensor and the slot as an int (what
``MambaStatePool`` hands out), pymllm the tensor cut to the aligned key and the slot as a
one-element tensor. Per request the scheduler matches (plain: no
copy-on-write, which pymllm lacks), locks the match, evicts what the KV pool and the state
pool lack, allocates the new tokens' KV indices and one state slot (the request's state),
inserts prompt + output with ``mamba_value=`` that slot, unlocks, and frees what stayed its
own: the duplicate KV ``[match, insert prefix_len)``, the unaligned tail, and the slot when
the tree did not adopt it.

Eviction contracts differ, so the scheduler loops until both pools have room:
``evict(num_tokens, n)`` with n the state slots lacking. radixkv counts ``n`` in slots
(phase 1 deletes leaves, phase 2 drops the least recently used states until n slots were
freed). pymllm's phase 1 counts ``mamba_evicted`` in *tokens* (a deleted leaf's length), so
a phase 1 that deleted a leaf skips phase 2 even when it freed no slot; a second call
``evict(0, n)`` then frees slots. Who owns the slot after an insert is read from the
tree (radixkv ``owns_slot``, pymllm the end node's ``mamba_value``), not from
``mamba_exist``: pymllm sets that flag when any node on the path has a state, even when its
new leaf adopted the slot. The replay counts those disagreements.

The two match rules differ, so hit rates differ: radixkv's match ends at the deepest node
holding a state (a split's upper half and a tombstone have none), pymllm's at the deepest KV
(a split moves the slot to the upper half; pymllm's phase 2 also tombstones leaves, where
radixkv deletes them). "KV hit" is how far the KV alone matched (radixkv's
``mamba_branching_seqlen`` when deeper).

KV frees are recorded in O(1) inside the timed calls and settled after, untimed (as
``bench_swa.py``); state slots go to radixkv's ``MambaStatePool`` (O(1), refuses double
frees) for both caches. At the end everything is evicted and every KV index and every
state slot must be back. Timing: thread CPU time of the cache calls only,
``gc.collect()`` before a replay and the collector off inside it, one torch thread.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import statistics
import sys
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from radixkv import MambaRadixCache, MambaStatePool, RadixKey
from radixkv.driver.workload import Request

sys.path.insert(0, str(Path(__file__).parent))
import bench  # benchmarks/ is not a package: its folder is put on the path


class KvPool:
    """KV indices ``0 .. size-1``. ``free`` only records the tensor (O(1) in the timed
    calls); ``settle`` applies the frees, untimed, and refuses an index freed twice or
    never handed out."""

    device = torch.device("cpu")

    def __init__(self, size: int) -> None:
        self.size = size
        self._free = torch.arange(size, dtype=torch.int64)
        self._free_at = 0  # self._free[_free_at:] can be handed out
        self._held = torch.zeros(size, dtype=torch.bool)
        self._freed: list[torch.Tensor] = []

    def free(self, indices: torch.Tensor) -> None:
        self._freed.append(indices)

    @property
    def available(self) -> int:
        return self._free.numel() - self._free_at

    def alloc(self, n: int) -> torch.Tensor:
        if n > self.available:
            raise RuntimeError(f"KV pool exhausted: {n} wanted, {self.available} free")
        out = self._free[self._free_at : self._free_at + n].clone()
        self._free_at += n
        self._held[out] = True
        return out

    def settle(self) -> None:
        """Apply the recorded frees; an index freed twice (or not held) is an error."""
        if not self._freed:
            return
        back = torch.cat(self._freed)
        self._freed.clear()
        ordered = back.sort().values
        if not bool(self._held[back].all()) or bool((ordered[1:] == ordered[:-1]).any()):
            raise AssertionError("a KV index freed twice, or never handed out")
        self._held[back] = False
        self._free = torch.cat([self._free[self._free_at :], back])
        self._free_at = 0


class MambaCache(Protocol):
    """What the scheduler calls; ``keys``, ``insert_args`` and ``adopted`` are untimed."""

    name: str

    def keys(self, tokens: list[int], limit: int) -> tuple[Sequence[int], Sequence[int]]:
        """(match key, insert key), fresh, in the type the cache's callers hold."""

    def match(self, key: Sequence[int], limit: int, extra_key: str | None) -> Matched: ...

    def lock(self, node: Any) -> Any: ...

    def unlock(self, node: Any, token: Any) -> None: ...

    def evict(self, num_tokens: int, slots: int) -> None: ...

    def insert_args(self, key: Sequence[int], value: torch.Tensor, slot: int) -> tuple[Any, Any]:
        """(indices, state) for ``insert``, as the cache's callers hold them."""

    def insert(
        self, key: Sequence[int], extra_key: str | None, value: Any, state: Any
    ) -> tuple[int, bool, Any]:
        """(prefix_len, mamba_exist, end node)."""

    def adopted(self, node: Any, slot: int) -> bool:
        """Whether the tree now holds ``slot`` (else it is still the caller's)."""


@dataclass(frozen=True)
class Matched:
    prefix_len: int  # what the request may resume from
    kv_len: int  # how far the KV alone matched
    indices: torch.Tensor
    node: Any


class SeedLocks:
    """lock, unlock and evict: the seed's calls, the same for both caches."""

    cache: Any

    def lock(self, node: Any) -> Any:
        return self.cache.inc_lock_ref(node)

    def unlock(self, node: Any, token: Any) -> None:
        self.cache.dec_lock_ref(node)

    def evict(self, num_tokens: int, slots: int) -> None:
        self.cache.evict(num_tokens, slots)


class RadixkvMamba(SeedLocks):
    name = "radixkv"

    def __init__(self, page_size: int, kv: KvPool, slots: MambaStatePool) -> None:
        self.cache = MambaRadixCache(page_size, token_to_kv_pool_allocator=kv, mamba_pool=slots)

    def keys(self, tokens: list[int], limit: int) -> tuple[Sequence[int], Sequence[int]]:
        key = array("q", tokens)  # one array: the match reads it up to ``limit``
        return key, key

    def match(self, key: Sequence[int], limit: int, extra_key: str | None) -> Matched:
        got = self.cache.match_prefix(RadixKey(key, extra_key, limit=limit))
        kv_len = max(got.prefix_len, got.mamba_branching_seqlen or 0)
        return Matched(got.prefix_len, kv_len, got.indices, got.last_node)

    def insert_args(self, key: Sequence[int], value: torch.Tensor, slot: int) -> tuple[Any, Any]:
        return value, slot  # radixkv takes the slot as an int and drops an unaligned tail

    def insert(
        self, key: Sequence[int], extra_key: str | None, value: Any, state: Any
    ) -> tuple[int, bool, Any]:
        got = self.cache.insert(RadixKey(key, extra_key), value, mamba_value=state)
        return got.prefix_len, got.mamba_exist, got.last_node

    def adopted(self, node: Any, slot: int) -> bool:
        return self.cache.owns_slot(slot)


def pymllm_module() -> Any:
    """pymllm's ``mamba_radix_cache`` module through the kit's loader; ImportError (with the
    reason) without ``PYMLLM_SRC`` or a checkout that does not import."""
    from radixkv_conformance.adapters._pymllm_import import import_module

    return import_module("mamba_radix_cache")


class PymllmMamba(SeedLocks):
    name = "pymllm"

    def __init__(self, page_size: int, kv: KvPool, slots: MambaStatePool) -> None:
        module = pymllm_module()
        self.page_size = page_size
        self._key = module.RadixKey  # re-exported from pymllm's base_prefix_cache
        self.cache = module.MambaRadixCache(
            page_size=page_size, token_to_kv_pool_allocator=kv, mamba_pool=slots
        )

    def keys(self, tokens: list[int], limit: int) -> tuple[Sequence[int], Sequence[int]]:
        aligned = len(tokens) // self.page_size * self.page_size
        return tokens[:limit], tokens[:aligned]

    def match(self, key: Sequence[int], limit: int, extra_key: str | None) -> Matched:
        got = self.cache.match_prefix(self._key(key, extra_key))
        prefix_len = int(got.prefix_len)
        return Matched(prefix_len, prefix_len, got.indices, got.last_node)

    def insert_args(self, key: Sequence[int], value: torch.Tensor, slot: int) -> tuple[Any, Any]:
        # pymllm's callers hold the slot as a one-element tensor and cut the value to the
        # aligned key (its insert would store an unaligned tail): built untimed, as keys are.
        return value[: len(key)], torch.tensor([slot], dtype=torch.int64)

    def insert(
        self, key: Sequence[int], extra_key: str | None, value: Any, state: Any
    ) -> tuple[int, bool, Any]:
        got = self.cache.insert(self._key(key, extra_key), value, mamba_value=state)
        return int(got.prefix_len), bool(got.mamba_exist), got.last_node

    def adopted(self, node: Any, slot: int) -> bool:
        state = node.mamba_value
        return state is not None and state.numel() == 1 and int(state[0]) == slot


CACHES = ("radixkv", "pymllm")


def make(name: str, page_size: int, kv: KvPool, slots: MambaStatePool) -> MambaCache:
    if name == "radixkv":
        return RadixkvMamba(page_size, kv, slots)
    return PymllmMamba(page_size, kv, slots)


def peer_missing() -> str | None:
    """Why pymllm cannot run here, or ``None`` when it can."""
    try:
        pymllm_module()
    except Exception as error:  # any failure to load the peer means: radixkv alone
        return f"{type(error).__name__}: {error}"
    return None


@dataclass(frozen=True)
class MambaConfig:
    requests: int
    prompt_len: int
    page_size: int
    slots: int = 24  # state slots: fewer than the KV pool's requests, so states are evicted

    @property
    def pool(self) -> int:
        return self.prompt_len * 48  # full KV for about 48 requests: evictions

    @property
    def label(self) -> str:
        return (
            f"{self.requests:,} x {self.prompt_len:,}, page {self.page_size}, "
            f"pool {self.pool:,}, {self.slots} state slots"
        )


def configs(quick: bool) -> list[MambaConfig]:
    scale = 10 if quick else 1
    out = [MambaConfig(2000 // scale, 2048, page) for page in (1, 16)]
    out += [MambaConfig(300 // scale, 16384, page) for page in (1, 16)]
    return out


OPS = ("match", "lock", "evict", "insert")


@dataclass
class Result:
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(OPS, 0.0))
    requests: int = 0
    hit_tokens: int = 0
    kv_hit_tokens: int = 0
    prompt_tokens: int = 0
    evict_calls: int = 0
    exist_disagrees: int = 0  # mamba_exist said "not adopted" wrongly, or the reverse
    prefix_lens: list[int] = field(default_factory=list)

    @property
    def requests_per_s(self) -> float:
        return self.requests / sum(self.seconds.values())

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens

    @property
    def kv_hit_rate(self) -> float:
        return self.kv_hit_tokens / self.prompt_tokens

    @property
    def digest(self) -> str:
        """A short hash of every request's matched length: equal runs, equal digests."""
        return hashlib.sha256(array("q", self.prefix_lens).tobytes()).hexdigest()[:16]


class Scheduler:
    """Plays one replay's requests against one cache, timing the cache calls only."""

    def __init__(self, cfg: MambaConfig, name: str) -> None:
        self.cfg = cfg
        self.kv = KvPool(cfg.pool)
        self.slots = MambaStatePool(cfg.slots)
        self.cache = make(name, cfg.page_size, self.kv, self.slots)
        self.result = Result()
        self.clock = time.thread_time

    def timed(self, op: str, started: float) -> float:
        now = self.clock()
        self.result.seconds[op] += now - started
        return now

    def make_room(self, need: int) -> None:
        """Evict until ``need`` KV indices and one state slot are free."""
        kv, slots = self.kv, self.slots
        while True:
            short, slot_short = need - kv.available, 1 - slots.available_size()
            if short <= 0 and slot_short <= 0:
                return
            before = (kv.available, slots.available_size())
            t = self.clock()
            self.cache.evict(max(short, 0), max(slot_short, 0))
            self.timed("evict", t)
            kv.settle()
            self.result.evict_calls += 1
            if (kv.available, slots.available_size()) == before:
                raise RuntimeError(f"{self.cache.name}: nothing left to evict")

    def serve(self, request: Request) -> None:
        cache, kv, result = self.cache, self.kv, self.result
        tokens = request.full()
        limit = len(request.prompt) - 1
        match_key, insert_key = cache.keys(tokens, limit)  # fresh, untimed
        t = self.clock()
        got = cache.match(match_key, limit, request.extra_key)
        t = self.timed("match", t)
        token = cache.lock(got.node)
        self.timed("lock", t)
        result.hit_tokens += got.prefix_len
        result.kv_hit_tokens += got.kv_len
        result.prompt_tokens += len(request.prompt)
        result.prefix_lens.append(got.prefix_len)
        need = len(tokens) - got.prefix_len
        self.make_room(need)
        value = torch.cat([got.indices[: got.prefix_len], kv.alloc(need)])
        slot = self.slots.alloc_track_slot()
        assert slot is not None  # make_room freed one
        indices, state = cache.insert_args(insert_key, value, slot)  # untimed
        t = self.clock()
        inserted, exist, node = cache.insert(insert_key, request.extra_key, indices, state)
        t = self.timed("insert", t)
        cache.unlock(got.node, token)
        self.timed("lock", t)
        self.give_back(value, got.prefix_len, inserted, node, slot, exist)

    def give_back(
        self, value: torch.Tensor, matched: int, inserted: int, node: Any, slot: int, exist: bool
    ) -> None:
        """Free what stayed the caller's (untimed): duplicate KV, the unaligned tail, and
        the state slot unless the tree adopted it."""
        page = self.cfg.page_size
        self.kv.free(value[matched:inserted])
        self.kv.free(value[len(value) // page * page :])
        adopted = self.cache.adopted(node, slot)
        if not adopted:
            self.slots.free_track_slot(slot)
        self.result.exist_disagrees += exist == adopted
        self.kv.settle()

    def finish(self) -> Result:
        """Evict everything; every KV index and every state slot must be back."""
        t = self.clock()
        self.cache.evict(self.kv.size, self.slots.size)
        self.timed("evict", t)
        self.kv.settle()
        name = self.cache.name
        if self.kv.available != self.kv.size:
            raise AssertionError(f"{name}: {self.kv.size - self.kv.available} KV never came back")
        if self.slots.available_size() != self.slots.size:
            lost = self.slots.size - self.slots.available_size()
            raise AssertionError(f"{name}: {lost} state slots never came back")
        return self.result


def replay(cfg: MambaConfig, name: str, seed: int) -> Result:
    requests = bench.trace(seed, cfg.requests, cfg.prompt_len)
    scheduler = Scheduler(cfg, name)
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for request in requests:
            scheduler.serve(request)
        result = scheduler.finish()
    finally:
        if enabled:
            gc.enable()
    result.requests = len(requests)
    return result


def row(number: int, cfg: MambaConfig, runs: dict[str, list[Result]]) -> str:
    """One table row: medians of the runs; hit rates and counts from the first run."""
    names = list(runs)
    rate = {c: statistics.median(x.requests_per_s for x in runs[c]) for c in names}
    per_call = {
        c: [statistics.median(x.seconds[op] / x.requests * 1e6 for x in runs[c]) for op in OPS]
        for c in names
    }
    first = {c: runs[c][0] for c in names}
    ratio = f"{rate['radixkv'] / rate['pymllm']:.2f}" if "pymllm" in rate else "n/a"
    return (
        f"| {number} | {cfg.label} | {' / '.join(f'{rate[c]:,.0f}' for c in names)} | {ratio} "
        f"| {' / '.join(f'{p[0]:.1f}, {p[3]:.1f}' for p in per_call.values())} "
        f"| {' / '.join(f'{p[2]:.1f}' for p in per_call.values())} "
        f"| {' / '.join(f'{first[c].hit_rate:.4f}' for c in names)} "
        f"| {' / '.join(f'{first[c].kv_hit_rate:.4f}' for c in names)} "
        f"| {' / '.join(f'{first[c].evict_calls:,}' for c in names)} "
        f"| {' / '.join(f'{first[c].exist_disagrees:,}' for c in names)} |"
    )


def measure(
    cfg: MambaConfig, caches: Sequence[str], repeats: int, seed: int
) -> dict[str, list[Result]]:
    """``repeats`` runs of each cache, interleaved (order reversed every other round)."""
    runs: dict[str, list[Result]] = {c: [] for c in caches}
    for r in range(repeats):
        for name in caches if r % 2 == 0 else caches[::-1]:
            got = replay(cfg, name, seed)
            runs[name].append(got)
            print(
                f"  {name:8} run {r + 1}: {got.requests_per_s:9,.0f} req/s, digest {got.digest}",
                flush=True,
            )
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the requests")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", type=int, nargs="*", help="configuration numbers (1-based)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    chosen = list(enumerate(configs(args.quick), 1))
    if args.only:
        chosen = [chosen[i - 1] for i in args.only]
    missing = peer_missing()
    caches: tuple[str, ...] = CACHES if missing is None else ("radixkv",)
    if missing is not None:
        print(f"pymllm is missing, radixkv runs alone: {missing}", flush=True)
    print(
        "Mamba: fresh array('q') keys for radixkv, lists for pymllm; thread CPU time of the "
        f"cache calls; medians of {args.repeats} interleaved runs.",
        flush=True,
    )
    header = " / ".join(caches)
    lines = [
        f"| # | configuration | req/s {header} | radixkv ÷ pymllm "
        f"| match, insert µs/call {header} | evict µs/request {header} "
        f"| hit rate {header} | KV hit {header} | evict calls {header} "
        f"| mamba_exist wrong {header} |",
        "|---|---|---:|---:|---|---|---|---|---|---|",
    ]
    for number, cfg in chosen:
        print(f"\n[{number}] {cfg.label}", flush=True)
        lines.append(row(number, cfg, measure(cfg, caches, args.repeats, args.seed)))
        print(lines[-1], flush=True)
    print("\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

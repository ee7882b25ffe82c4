"""Replay a request trace against a prefix cache, the way a serving scheduler drives it.

Per request, in batches (the batch's requests are in flight together):

1. match the prompt, capped at ``len(prompt) - 1`` (the last prompt token is always
   recomputed, so its logits exist), and lock the matched node;
2. allocate KV indices for the rest of the prompt and the generated tokens; when the pool is
   short, evict exactly the shortfall (finishing the batch's earlier requests first if even
   that is not enough);
3. when the request finishes, insert prompt + output with its indices, free the duplicates the
   tree already held (``[matched, prefix_len)``) and the unaligned tail, and unlock.

At the end everything is evicted and every pool index must have come back exactly once.
Only the cache calls are timed (thread CPU time, ``time.thread_time``), with the garbage
collector off inside the replay; allocation and bookkeeping are the driver's and untimed.

Caches plug in through a small ``ReplayCache`` adapter; ``CACHES`` holds radixkv's, and a
peer cache is handed in with ``register_cache`` (the CLI registers sglang's, built on the
conformance kit's adapter, with ``sglang_factory``). Keys are converted outside the timed
calls (``prepare``) to the form the caller holds them in: ``array('q')`` for sglang's
``RadixCache`` and for ``radixkv`` (the same bytes in, so the two compare like for like; the
match limit is a zero-copy ``memoryview`` slice for radixkv and sglang's ``limit`` field);
``radixkv-list`` hands radixkv a ``list[int]``, the seed API's form, which radixkv packs
(and so validates) once per call.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import os
import resource
import struct
import sys
import time
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from radixkv.base import RadixKey
from radixkv.driver.workload import KINDS, Request, WorkloadConfig, generate, trace_digest
from radixkv.events import EventListener, EventPublisher
from radixkv.eviction import POLICIES
from radixkv.radix_cache import RadixCache

if TYPE_CHECKING:  # the events extra is optional: imported where --events asks for it
    from radixkv.events.publisher import ZmqEventPublisher

# ---- the KV pool ----------------------------------------------------------------------


class ReplayPool:
    """A trusting free-stack of indices ``0 .. size-1`` (cheap: the cache calls are timed)."""

    def __init__(self, size: int, device: torch.device | str = "cpu") -> None:
        self.size = size
        self.device = torch.device(device)
        self._stack = torch.arange(size, dtype=torch.int64, device=self.device)
        self.free_count = size

    def alloc(self, n: int) -> torch.Tensor:
        if n > self.free_count:
            raise RuntimeError(f"pool short: {n} wanted, {self.free_count} free")
        self.free_count -= n
        return self._stack[self.free_count : self.free_count + n].clone()

    def free(self, indices: torch.Tensor) -> None:
        n = indices.numel()
        if self.free_count + n > self.size:
            raise AssertionError("more indices freed than the pool holds: a double free")
        self._stack[self.free_count : self.free_count + n] = indices
        self.free_count += n

    def free_segment(self, indices: torch.Tensor, start_pos: int = 0) -> None:
        self.free(indices[start_pos:])

    def check_complete(self) -> None:
        """Every index is free, exactly once."""
        if self.free_count != self.size:
            raise AssertionError(f"{self.size - self.free_count} indices never came back")
        seen = torch.sort(self._stack).values
        if not torch.equal(seen, torch.arange(self.size, device=self.device)):
            raise AssertionError("an index came back twice and another never")


# ---- adapters -------------------------------------------------------------------------


class ReplayCache(Protocol):
    name: str

    def prepare(self, tokens: list[int]) -> Any:
        """The key in the form this cache's callers hold it (untimed)."""

    def match(self, key: Any, limit: int, extra_key: str | None) -> tuple[int, Any, Any]:
        """(prefix_len, indices, node) of ``key[:limit]`` (radixkv: ``RadixKey(key,
        limit=limit)``, which reads the caller's list or array in place, as sglang's does)."""

    def insert(
        self, key: Any, extra_key: str | None, value: torch.Tensor, priority: int = 0
    ) -> int: ...

    def lock(self, node: Any) -> Any: ...

    def unlock(self, node: Any, token: Any) -> None: ...

    def evict(self, num_tokens: int) -> int: ...

    def total_size(self) -> int: ...

    def evictable_size(self) -> int: ...


class RadixkvReplay:
    name = "radixkv"

    def __init__(
        self,
        page_size: int,
        pool: ReplayPool,
        policy: str = "lru",
        event_listener: EventListener | None = None,
    ) -> None:
        self.cache = RadixCache(
            page_size,
            token_to_kv_pool_allocator=pool,
            eviction_policy=policy,
            event_listener=event_listener,
        )

    def prepare(self, tokens: list[int]) -> Any:
        return array("q", tokens)

    def match(self, key: Any, limit: int, extra_key: str | None) -> tuple[int, Any, Any]:
        result = self.cache.match_prefix(RadixKey(key, extra_key, limit=limit))  # no copy
        return result.prefix_len, result.indices, result.last_node

    def insert(
        self, key: Any, extra_key: str | None, value: torch.Tensor, priority: int = 0
    ) -> int:
        return self.cache.insert(RadixKey(key, extra_key), value, priority=priority).prefix_len

    def lock(self, node: Any) -> Any:
        return self.cache.inc_lock_ref(node)

    def unlock(self, node: Any, token: Any) -> None:
        self.cache.dec_lock_ref(node, token)

    def evict(self, num_tokens: int) -> int:
        return self.cache.evict(num_tokens).full_evicted

    def total_size(self) -> int:
        return self.cache.total_size()

    def evictable_size(self) -> int:
        return self.cache.evictable_size()


class RadixkvListReplay(RadixkvReplay):
    """radixkv handed the seed API's ``list[int]`` keys."""

    name = "radixkv-list"

    def prepare(self, tokens: list[int]) -> Any:
        return tokens


class SglangReplay:
    """sglang 0.5.23's Python ``RadixCache`` (``pip install --no-deps sglang==0.5.23``).

    ``sglang`` is a module exposing sglang's ``radix_cache`` and ``base`` modules (the
    conformance kit's sglang adapter is one: it loads the bare tree without sglang's
    server dependencies); see ``sglang_factory``.
    """

    name = "sglang"

    def __init__(self, page_size: int, pool: ReplayPool, sglang: Any) -> None:
        self._rc, self._base = sglang.radix_cache, sglang.base
        self.cache = self._rc.RadixCache.create_simulated(mock_allocator=pool, page_size=page_size)

    def prepare(self, tokens: list[int]) -> Any:
        return array("q", tokens)

    def match(self, key: Any, limit: int, extra_key: str | None) -> tuple[int, Any, Any]:
        params = self._base.MatchPrefixParams(key=self._rc.RadixKey(key, extra_key, limit=limit))
        result = self.cache.match_prefix(params)
        node = result.last_device_node
        return result.device_prefix_len, self.cache.path_device_indices(node), node

    def insert(
        self, key: Any, extra_key: str | None, value: torch.Tensor, priority: int = 0
    ) -> int:
        """``priority`` is unused: sglang is replayed under its default policy, LRU."""
        params = self._base.InsertParams(key=self._rc.RadixKey(key, extra_key), value=value)
        return int(self.cache.insert(params).prefix_len)

    def lock(self, node: Any) -> Any:
        return self.cache.inc_lock_ref(node)

    def unlock(self, node: Any, token: Any) -> None:
        self.cache.dec_lock_ref(node)

    def evict(self, num_tokens: int) -> int:
        result = self.cache.evict(self._base.EvictParams(num_tokens=num_tokens))
        return int(result.num_tokens_evicted)

    def total_size(self) -> int:
        return int(self.cache.total_size())

    def evictable_size(self) -> int:
        return int(self.cache.evictable_size())


CacheFactory = Callable[[int, ReplayPool], ReplayCache]  # (page_size, pool) -> cache

CACHES: dict[str, CacheFactory] = {
    "radixkv": RadixkvReplay,
    "radixkv-list": RadixkvListReplay,
}


POLICY_CACHES: dict[str, type[RadixkvReplay]] = {
    "radixkv": RadixkvReplay,
    "radixkv-list": RadixkvListReplay,
}
"""The caches ``--policy`` (radixkv's eviction policies, eviction.py) and ``--events`` apply to."""

PRIORITY_BY_KIND = {"chat": 2, "fewshot": 2, "tot": 1, "namespaced": 1, "unique": 0}
"""The ``priority=`` the replay gives each finished request's insert, by its kind: what a
scheduler knows will recur (system prompts, few-shot templates) ranks above a
tree-of-thought branch or a tenant's prompt, and a one-off prompt lowest. Only the
``priority`` policy reads it; under the others it changes nothing."""


def cache_factory(
    cache_name: str, policy: str | None = None, events: EventListener | None = None
) -> CacheFactory:
    """The factory of ``cache_name``, built with eviction ``policy`` (``None``: its own
    default) and an event listener; either for a cache without them is a ValueError."""
    if policy is None and events is None:
        return CACHES[cache_name]
    if cache_name not in POLICY_CACHES:
        wanted = "--policy" if policy is not None else "--events"
        raise ValueError(f"{wanted} applies to {sorted(POLICY_CACHES)}, not {cache_name!r}")
    if policy is not None and policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; known: {sorted(POLICIES)}")
    kind = POLICY_CACHES[cache_name]
    return lambda page_size, pool: kind(page_size, pool, policy or "lru", events)


def register_cache(name: str, factory: CacheFactory) -> None:
    """Make ``factory`` replayable as ``name`` (``replay(name, ...)``, ``--cache name``)."""
    CACHES[name] = factory


def sglang_factory(load: Callable[[], Any]) -> CacheFactory:
    """A factory of ``SglangReplay`` whose sglang modules ``load()`` returns, on first use."""
    return lambda page_size, pool: SglangReplay(page_size, pool, load())


# ---- the replay -----------------------------------------------------------------------


@dataclass
class ReplayReport:
    cache: str
    requests: int
    page_size: int
    pool_size: int
    policy: str = "lru"
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    tokens: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    hits: dict[str, list[int]] = field(default_factory=dict)  # kind -> [matched, asked]
    prefix_digest: str = ""
    cached_tokens_peak: int = 0
    peak_rss_growth: int = 0  # bytes: ru_maxrss after minus RSS before the replay

    @property
    def cache_seconds(self) -> float:
        return sum(self.seconds.values())

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.cache_seconds if self.cache_seconds else float("inf")

    def hit_rate(self, kind: str | None = None) -> float:
        if kind is None:
            matched = sum(h[0] for h in self.hits.values())
            asked = sum(h[1] for h in self.hits.values())
        else:
            matched, asked = self.hits.get(kind, [0, 0])
        return matched / asked if asked else 0.0

    def throughput(self, op: str) -> float:
        """Tokens per second of ``op`` (match: tokens asked; insert: tokens given; evict)."""
        s = self.seconds.get(op, 0.0)
        return self.tokens.get(op, 0) / s if s else 0.0

    def render(self) -> str:
        lines = [
            f"{self.cache}: {self.requests} requests, page size {self.page_size}, "
            f"pool {self.pool_size}, eviction policy {self.policy}",
            f"  requests/s (cache CPU time): {self.requests_per_s:,.0f}"
            f"   ({self.cache_seconds * 1e3:.1f} ms in cache calls)",
            f"  match  {self.throughput('match') / 1e6:8.1f} M tokens/s"
            f"   insert {self.throughput('insert') / 1e6:8.1f} M tokens/s"
            f"   evict {self.throughput('evict') / 1e6:8.1f} M tokens/s"
            f" ({self.tokens.get('evict', 0):,} evicted)",
            f"  hit rate {self.hit_rate():.4f}  "
            + "  ".join(f"{k} {self.hit_rate(k):.3f}" for k in KINDS if k in self.hits),
            f"  peak cached tokens {self.cached_tokens_peak:,}; "
            f"peak RSS growth {self.peak_rss_growth / 2**20:.1f} MiB (ru_maxrss delta)",
            f"  prefix-length digest {self.prefix_digest[:16]}",
        ]
        return "\n".join(lines)


def _rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: the peak is the best we have
        return _maxrss()


def _maxrss() -> int:
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


@contextlib.contextmanager
def no_host_sync(device: torch.device) -> Iterator[None]:
    """On a CUDA device, make any call that waits for the device raise (no-op elsewhere)."""
    if device.type != "cuda":
        yield
        return
    torch.cuda.synchronize(device)
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


class _Scheduler:
    """One replay's state: the pool, the cache, the report and the requests in flight."""

    def __init__(self, cache: ReplayCache, pool: ReplayPool, report: ReplayReport) -> None:
        self.cache, self.pool, self.report = cache, pool, report
        self.page_size = report.page_size
        self.digest = hashlib.sha256()
        self.clock = time.thread_time
        self.inflight: list[tuple[Request, Any, int, torch.Tensor, Any, Any]] = []
        self.progress: Callable[[int], None] | None = None
        self.events: EventPublisher | None = None

    def publish(self) -> None:
        """End of a scheduler step: send the cache's events since the last one, if asked."""
        if self.events is not None:
            self.events.publish()

    def admit(self, request: Request, batch: int) -> None:
        """Match and lock ``request``, allocate its indices; finish a full batch."""
        cache, report = self.cache, self.report
        full = request.full()
        key = cache.prepare(full)
        limit = len(request.prompt) - 1
        t = self.clock()
        matched, indices, node = cache.match(key, limit, request.extra_key)
        report.seconds["match"] += self.clock() - t
        t = self.clock()
        token = cache.lock(node)
        report.seconds["lock"] += self.clock() - t
        report.tokens["match"] += limit
        hit = report.hits.setdefault(request.kind, [0, 0])
        hit[0] += matched
        hit[1] += limit
        need = len(full) - matched
        self.make_room(need)
        if need > self.pool.free_count and self.inflight:
            self.finish()
            self.make_room(need)
        kv = torch.cat((indices, self.pool.alloc(need)))
        self.inflight.append((request, key, matched, kv, node, token))
        if len(self.inflight) >= batch:
            self.finish()

    def make_room(self, need: int) -> None:
        """Evict exactly the shortfall of ``need`` free indices, if any."""
        short = need - self.pool.free_count
        if short > 0:
            self.evict(short)

    def evict(self, num_tokens: int) -> None:
        t = self.clock()
        freed = self.cache.evict(num_tokens)
        self.report.seconds["evict"] += self.clock() - t
        self.report.tokens["evict"] += freed

    def finish(self) -> None:
        """Insert every request in flight, free what the caller still owns, unlock."""
        cache, report, pool = self.cache, self.report, self.pool
        for request, key, matched, kv, node, token in self.inflight:
            t = self.clock()
            priority = PRIORITY_BY_KIND.get(request.kind, 0)
            prefix_len = cache.insert(key, request.extra_key, kv, priority)
            report.seconds["insert"] += self.clock() - t
            report.tokens["insert"] += len(kv)
            aligned = len(kv) // self.page_size * self.page_size
            if prefix_len > matched:
                pool.free(kv[matched:prefix_len])
            if aligned < len(kv):
                pool.free(kv[aligned:])
            t = self.clock()
            cache.unlock(node, token)
            report.seconds["lock"] += self.clock() - t
            self.digest.update(struct.pack("<qq", matched, prefix_len))
            report.requests += 1
            report.cached_tokens_peak = max(report.cached_tokens_peak, cache.total_size())
            if self.progress is not None:
                self.progress(report.requests)
        self.inflight.clear()
        self.publish()


def replay(
    cache_name: str,
    requests: Iterable[Request],
    *,
    page_size: int = 1,
    pool_size: int = 1 << 22,
    batch: int = 8,
    progress: Callable[[int], None] | None = None,
    device: torch.device | str = "cpu",
    policy: str | None = None,
    events: EventPublisher | None = None,
) -> ReplayReport:
    """Drive ``cache_name`` through ``requests``; see the module docstring.

    ``policy`` is radixkv's eviction policy (``None``: the cache's default, LRU). With
    ``events`` (radixkv's caches only) the cache reports its page changes to it, and
    it publishes one batch per scheduler step: each batch of finished requests, and the
    final eviction. The listener's cost is inside the timed calls, as in a server.

    With ``device`` a CUDA device the pool's indices live there, and the replay runs under
    torch's sync debug mode set to "error": a cache call (or the driver) that waits for the
    device raises instead of stalling. Times are then the host side of each call.
    """
    pool = ReplayPool(pool_size, device)
    cache = cache_factory(cache_name, policy, events)(page_size, pool)
    report = ReplayReport(cache_name, 0, page_size, pool_size, policy or "lru")
    scheduler = _Scheduler(cache, pool, report)
    scheduler.progress = progress
    scheduler.events = events
    rss0 = _rss()
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        with no_host_sync(pool.device):
            for request in requests:
                scheduler.admit(request, batch)
            scheduler.finish()
            scheduler.evict(cache.total_size())
            scheduler.publish()
    finally:
        if enabled:
            gc.enable()
    if cache.total_size() != 0:
        raise AssertionError(f"{cache.total_size()} tokens left after evicting everything")
    pool.check_complete()
    report.prefix_digest = scheduler.digest.hexdigest()
    report.peak_rss_growth = max(0, _maxrss() - rss0)
    return report


def bytes_per_token(cache_name: str, cfg: WorkloadConfig, page_size: int = 1) -> dict[str, float]:
    """Resident memory per cached token, no eviction: RSS delta of building the cache.

    The trace is generated first as compact arrays; each key handed to the cache is built
    fresh (new int objects for a list, else a new array), so whatever the
    cache keeps of it is counted. Run it in a fresh process for a clean figure
    (``python -m radixkv.driver.replay --memory CACHE``).
    """
    trace = [(array("q", r.full()), r.extra_key) for r in generate(cfg)]
    pool = ReplayPool(sum(len(a) for a, _ in trace))
    cache = CACHES[cache_name](page_size, pool)
    gc.collect()
    _trim()
    rss0 = _rss()
    for arr, extra_key in trace:
        key = cache.prepare(arr.tolist())  # fresh: a new list of new ints, or a new array
        value = pool.alloc(len(arr))
        cache.insert(key, extra_key, value)
        del key, value
    gc.collect()
    _trim()
    grown = _rss() - rss0
    cached = cache.total_size()
    return {"bytes": grown, "cached_tokens": cached, "bytes_per_token": grown / cached}


def _trim() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


# ---- the command line (``radixkv replay``) ----------------------------------------------


def add_parser(commands: Any) -> None:
    """Register ``radixkv replay`` on the CLI's subparsers."""
    cmd = commands.add_parser(
        "replay",
        help="replay a seeded request trace against a cache and report its speed",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmd.add_argument("--cache", choices=sorted(CACHES), default="radixkv")
    cmd.add_argument("--seed", type=int, default=0)
    cmd.add_argument("--requests", type=int, default=2000)
    cmd.add_argument("--prompt-len", type=int, default=2048, help="typical prompt length")
    cmd.add_argument("--page-size", type=int, default=1)
    cmd.add_argument(
        "--pool-size", type=int, default=None, help="KV pool tokens (default: 48 prompts)"
    )
    cmd.add_argument("--batch", type=int, default=8, help="requests in flight together")
    cmd.add_argument(
        "--device", default="cpu", help="where the KV indices live (cuda: no host sync allowed)"
    )
    cmd.add_argument(
        "--policy",
        choices=sorted(POLICIES),
        default=None,
        help="radixkv's eviction policy (default lru); priority reads PRIORITY_BY_KIND",
    )
    cmd.add_argument("--no-progress", action="store_true")
    cmd.add_argument(
        "--events",
        metavar="ENDPOINT",
        help="publish the cache's KV events over ZeroMQ while replaying, e.g. "
        "tcp://127.0.0.1:5557 (needs the events extra: pyzmq, msgspec)",
    )
    cmd.add_argument(
        "--events-wait",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="with --events: wait this long for a subscriber before replaying (0: don't)",
    )
    cmd.add_argument(
        "--policy-plot",
        metavar="FILE",
        help="also replay the trace under every policy and pool size: a table, and a PNG of "
        "hit rate against pool size per policy with matplotlib (else its data as CSV)",
    )
    cmd.add_argument(
        "--plot",
        metavar="FILE",
        help="also sweep pool size and prompt length; a PNG with matplotlib, else CSV",
    )


def command(args: argparse.Namespace) -> int:
    """Run ``radixkv replay`` with parsed ``args``."""
    torch.set_num_threads(1)  # the benchmark's setting; the library never changes it
    cfg = WorkloadConfig(seed=args.seed, requests=args.requests, prompt_len=args.prompt_len)
    pool = args.pool_size or args.prompt_len * 48
    if args.policy is not None and args.cache not in POLICY_CACHES:
        print(f"radixkv replay: --policy applies to {sorted(POLICY_CACHES)}", file=sys.stderr)
        return 2
    print(f"trace: seed {cfg.seed}, {cfg.requests} requests of ~{cfg.prompt_len} tokens")
    print(f"trace sha256 {trace_digest(cfg)}")
    bar = None if args.no_progress or cfg.requests < 200 else _progress_bar(cfg.requests)
    with contextlib.ExitStack() as stack:
        events = _publisher(args, stack) if args.events else None
        report = replay(
            args.cache,
            generate(cfg),
            page_size=args.page_size,
            pool_size=pool,
            batch=args.batch,
            progress=bar,
            device=args.device,
            policy=args.policy,
            events=events,
        )
        if events is not None:
            print(f"events: {events.events_sent} in {events.next_seq} batches")
    if bar is not None:
        print(file=sys.stderr)
    print(report.render())
    print(f"prefix-length digest {report.prefix_digest}")
    if args.plot:
        _plot(args, cfg, Path(args.plot))
    if args.policy_plot:
        cache = args.cache if args.cache in POLICY_CACHES else "radixkv"
        sweep = policy_sweep(cache, cfg, page_size=args.page_size, batch=args.batch)
        print(policy_table(sweep, cfg.prompt_len))
        plot_policies(sweep, Path(args.policy_plot), f"{cache}, {trace_label(cfg)}")
    return 0


def _publisher(args: argparse.Namespace, stack: contextlib.ExitStack) -> ZmqEventPublisher:
    """The ZeroMQ publisher of ``--events``, bound, with a subscriber if one comes in time."""
    try:
        from radixkv.events.publisher import ZmqEventPublisher
    except ImportError as missing:
        raise SystemExit(
            f"--events needs pyzmq and msgspec (pip install 'radixkv[events]'): {missing}"
        ) from None
    publisher = stack.enter_context(ZmqEventPublisher(args.events))
    print(f"events: publishing on {publisher.endpoint}", flush=True)
    if args.events_wait > 0 and not publisher.wait_for_subscribers(1, args.events_wait):
        print(f"events: no subscriber after {args.events_wait:g}s; publishing anyway")
    return publisher


# ---- hit rate per eviction policy ------------------------------------------------------

SWEEP_PROMPTS = (4, 8, 16, 32, 64, 128)
"""Pool sizes of the policy sweep, in typical prompts (``prompt_len`` tokens each)."""

PolicySweep = dict[str, list[tuple[int, float]]]  # policy -> [(pool tokens, hit rate)]


def policy_sweep(
    cache_name: str,
    cfg: WorkloadConfig,
    *,
    page_size: int = 1,
    batch: int = 8,
    prompts: tuple[int, ...] = SWEEP_PROMPTS,
    policies: tuple[str, ...] = tuple(POLICIES),
) -> PolicySweep:
    """The hit rate of the same trace under each policy at each pool size."""
    sweep: PolicySweep = {}
    for policy in policies:
        for n in prompts:
            pool = n * cfg.prompt_len
            report = replay(
                cache_name,
                generate(cfg),
                page_size=page_size,
                pool_size=pool,
                batch=batch,
                policy=policy,
            )
            sweep.setdefault(policy, []).append((pool, report.hit_rate()))
            print(
                f"  {policy:>8} pool {pool:>9,}: hit rate {report.hit_rate():.4f}", file=sys.stderr
            )
    return sweep


def trace_label(cfg: WorkloadConfig) -> str:
    return f"seed {cfg.seed}, {cfg.requests} requests of ~{cfg.prompt_len} tokens"


def policy_table(sweep: PolicySweep, prompt_len: int) -> str:
    """A Markdown table: one row per pool size, one column per policy, the best in bold."""
    policies = list(sweep)
    pools = [pool for pool, _ in next(iter(sweep.values()))]
    lines = [
        "| pool (tokens) | prompts | " + " | ".join(policies) + " |",
        "|---:|---:|" + "---:|" * len(policies),
    ]
    for row, pool in enumerate(pools):
        rates = [sweep[p][row][1] for p in policies]
        cells = [f"**{r:.3f}**" if r == max(rates) else f"{r:.3f}" for r in rates]
        lines.append(f"| {pool:,} | {pool // prompt_len} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_policies(sweep: PolicySweep, path: Path, title: str) -> bool:
    """Hit rate against pool size, one line per policy, as a PNG at ``path``; without
    matplotlib, the same data as ``path`` with a .csv suffix (returns whether it plotted)."""
    plt = _pyplot()
    if plt is None:
        csv = path.with_suffix(".csv")
        rows = [f"{p},{pool},{rate:.6f}" for p, points in sweep.items() for pool, rate in points]
        csv.write_text("policy,pool_tokens,hit_rate\n" + "\n".join(rows) + "\n")
        print(f"matplotlib is not installed (pip install matplotlib): wrote {csv} instead")
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = ["-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1))]  # coinciding lines stay visible
    for (policy, points), style in zip(sweep.items(), styles * len(sweep), strict=False):
        xs, ys = [x for x, _ in points], [y for _, y in points]
        ax.plot(xs, ys, marker="o", linestyle=style, label=policy)
    ax.set(xscale="log", xlabel="KV pool (tokens)", ylabel="hit rate", title=title)
    ax.grid(True, alpha=0.3)
    ax.legend(title="eviction policy")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")
    return True


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, or ``None`` when matplotlib is absent."""
    try:
        import matplotlib  # type: ignore[import-not-found, unused-ignore]  # optional, no stubs

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]  # optional, no stubs
    except ImportError:
        return None
    return plt


def _progress_bar(total: int) -> Callable[[int], None]:
    step = max(1, total // 100)

    def show(done: int) -> None:
        if done % step and done != total:
            return
        filled = 40 * done // total
        sys.stderr.write(f"\r  [{'#' * filled}{'.' * (40 - filled)}] {done}/{total}")
        sys.stderr.flush()

    return show


def _plot(args: argparse.Namespace, cfg: WorkloadConfig, path: Path) -> None:
    """Hit rate against pool size, and requests/s against prompt length."""
    capacity: list[tuple[int, float]] = []
    for prompts in (4, 8, 16, 32, 64, 128, 256):
        pool = prompts * cfg.prompt_len
        report = replay(args.cache, generate(cfg), page_size=args.page_size, pool_size=pool)
        capacity.append((pool, report.hit_rate()))
        print(f"  pool {pool:>10,}: hit rate {report.hit_rate():.4f}", file=sys.stderr)
    speed: list[tuple[int, float]] = []
    for length in (256, 512, 1024, 2048, 4096, 8192):
        sized = WorkloadConfig(seed=cfg.seed, requests=cfg.requests, prompt_len=length)
        report = replay(
            args.cache, generate(sized), page_size=args.page_size, pool_size=48 * length
        )
        speed.append((length, report.requests_per_s))
        print(f"  prompt {length:>6}: {report.requests_per_s:,.0f} req/s", file=sys.stderr)
    plt = _pyplot()
    if plt is None:
        csv = path.with_suffix(".csv")
        lines = ["series,x,y"]
        lines += [f"hit_rate_vs_pool_tokens,{x},{y:.6f}" for x, y in capacity]
        lines += [f"requests_per_s_vs_prompt_len,{x},{y:.1f}" for x, y in speed]
        csv.write_text("\n".join(lines) + "\n")
        print(f"matplotlib is not installed: wrote the plot's data to {csv} instead")
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot([x for x, _ in capacity], [y for _, y in capacity], marker="o")
    left.set(xscale="log", xlabel="KV pool (tokens)", ylabel="hit rate", title="hit rate")
    right.plot([x for x, _ in speed], [y for _, y in speed], marker="o")
    right.set(xscale="log", xlabel="prompt length", ylabel="requests/s", title=args.cache)
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    """``python -m radixkv.driver.replay --memory CACHE [seed requests prompt_len page_size]``.

    CACHE is one of ``CACHES`` (register a peer cache first to measure it).
    """
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[0] != "--memory":
        print(main.__doc__)
        return 2
    given = [*args[2:], "0", "2000", "2048", "1"][:4]
    seed, requests, prompt_len, page_size = (int(a) for a in given)
    torch.set_num_threads(1)
    cfg = WorkloadConfig(seed=seed, requests=requests, prompt_len=prompt_len)
    print(json.dumps(bytes_per_token(args[1], cfg, page_size)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The scheduler a replay plays, and ``replay``: drive one cache through a request trace
the way a serving engine does, timing only the cache calls (see ``radixkv.driver.drive``
for the steps of a request)."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from radixkv.driver.caches import ReplayCache, cache_factory
from radixkv.driver.memory import max_rss, rss
from radixkv.driver.pool import ReplayPool
from radixkv.driver.report import ReplayReport
from radixkv.driver.workload import Request
from radixkv.events import EventPublisher

PRIORITY_BY_KIND = {"chat": 2, "fewshot": 2, "tot": 1, "namespaced": 1, "unique": 0}
"""The ``priority=`` the replay gives each finished request's insert, by its kind: what a
scheduler knows will recur (system prompts, few-shot templates) ranks above a
tree-of-thought branch or a tenant's prompt, and a one-off prompt lowest. Only the
``priority`` policy reads it; under the others it changes nothing."""


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
    """Drive ``cache_name`` through ``requests``; the steps are in ``radixkv.driver.drive``.

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
    rss0 = rss()
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
    report.peak_rss_growth = max(0, max_rss() - rss0)
    return report

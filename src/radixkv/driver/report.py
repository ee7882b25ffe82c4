"""What a replay reports: cache CPU time and tokens per call, hit rate per request kind,
peak cached tokens and RSS growth, and the digest of the prefix lengths."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from radixkv.driver.workload import KINDS


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

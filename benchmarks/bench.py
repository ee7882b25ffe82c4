"""radixkv's RadixCache against sglang 0.5.23's Python RadixCache, on the same traces.

    tox -e bench                      # the full set (installs sglang with --no-deps)
    python benchmarks/bench.py --quick

Each configuration replays one seeded trace (``radixkv.driver.workload``) through the
scheduler of ``radixkv.driver.replay`` against both caches, ``--repeats`` times, interleaved
(the order alternates each repeat). Timing is the thread CPU time of the cache calls only
(``time.thread_time``), one torch thread, a full ``gc.collect()`` before each replay and the
collector off inside it; the table shows medians. The ratio is radixkv's requests/s over
sglang's: above 1, radixkv is faster.

Hit rates and per-request prefix-length digests come from the same runs. sglang refreshes the
recency of the unmatched lower part of a node a match or insert splits; radixkv does not
(SPEC.md, match_prefix). Under eviction that can change a victim, so the digests may differ;
``same rule`` replays sglang once more, untimed, with that one refresh undone, and says
whether its digest then equals radixkv's.

Bytes per cached token: the RSS growth of building the no-eviction cache from fresh keys, in
a fresh process per cache (``bench.py --memory``), over the tokens cached.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from radixkv.driver import replay as replay_module
from radixkv.driver.replay import ReplayReport, replay
from radixkv.driver.workload import WorkloadConfig, generate, trace_digest

CACHES = ("radixkv", "radixkv-list", "sglang")
MEMORY = ("radixkv", "sglang")  # radixkv stores the same bytes whatever the key form


@dataclass(frozen=True)
class Config:
    requests: int
    prompt_len: int
    page_size: int
    evict: bool

    @property
    def pool(self) -> int:
        # Forcing eviction: room for about 48 requests' worth of tokens; otherwise room for
        # every token of the trace.
        if self.evict:
            return self.prompt_len * 48
        return self.requests * self.prompt_len * 3

    @property
    def label(self) -> str:
        pool = f"pool {self.pool:,}" if self.evict else "no eviction"
        return f"{self.requests:,} x {self.prompt_len:,}, page {self.page_size}, {pool}"


def configs(quick: bool) -> list[Config]:
    scale = 10 if quick else 1
    out = []
    for requests, length in ((2000, 2048), (20000, 2048), (2000, 16384)):
        for page in (1, 16):
            out.append(Config(requests // scale, length, page, True))
    out.append(Config(2000 // scale, 2048, 1, False))
    return out


@contextlib.contextmanager
def sglang_split_recency_as_radixkv() -> Iterator[None]:
    """sglang, except that a split's lower part keeps its recency (radixkv's rule)."""
    import radixkv_conformance.adapters.sglang as adapter

    tree_node, cache = adapter.radix_cache.TreeNode, adapter.radix_cache.RadixCache
    original_split = cache._split_node

    def get(node: Any) -> float:
        return float(node.__dict__["_t"])

    def set_(node: Any, value: float) -> None:
        node.__dict__["_prev_t"] = node.__dict__.get("_t", value)
        node.__dict__["_t"] = value

    def split(self: Any, key: Any, child: Any, split_len: int) -> Any:
        upper = original_split(self, key, child, split_len)
        child.__dict__["_t"] = child.__dict__["_prev_t"]  # undo the walk's stamp
        return upper

    tree_node.last_access_time = property(get, set_)
    cache._split_node = split
    try:
        yield
    finally:
        del tree_node.last_access_time
        cache._split_node = original_split


def run(cfg: Config, cache: str, seed: int, device: str = "cpu") -> ReplayReport:
    trace = generate(WorkloadConfig(seed=seed, requests=cfg.requests, prompt_len=cfg.prompt_len))
    return replay(cache, trace, page_size=cfg.page_size, pool_size=cfg.pool, device=device)


def bytes_per_token(cfg: Config, cache: str, seed: int) -> float:
    args = [str(a) for a in (seed, cfg.requests, cfg.prompt_len, cfg.page_size)]
    out = subprocess.run(
        [sys.executable, __file__, "--memory", cache, *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(json.loads(out.splitlines()[-1])["bytes_per_token"])


def _sglang_adapter() -> Any:
    import radixkv_conformance.adapters.sglang as adapter  # loads sglang's bare tree

    return adapter


# The driver knows only radixkv's caches; the peer comes through the kit's adapter.
replay_module.register_cache("sglang", replay_module.sglang_factory(_sglang_adapter))


def main() -> int:
    if sys.argv[1:2] == ["--memory"]:  # the fresh process of bytes_per_token
        return replay_module.main(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the requests")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", type=int, nargs="*", help="configuration numbers (1-based)")
    parser.add_argument("--no-same-rule", action="store_true", help="skip the untimed check")
    parser.add_argument(
        "--device", default="cpu", help="KV indices on this device (cuda: syncs are errors)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    chosen = configs(args.quick)
    if args.only:
        chosen = [chosen[i - 1] for i in args.only]
    rows = []
    for cfg in chosen:
        wl = WorkloadConfig(seed=args.seed, requests=cfg.requests, prompt_len=cfg.prompt_len)
        print(f"\n{cfg.label}: trace sha256 {trace_digest(wl)[:16]}", flush=True)
        runs: dict[str, list[ReplayReport]] = {c: [] for c in CACHES}
        started = time.monotonic()
        for r in range(args.repeats):
            for cache in CACHES if r % 2 == 0 else CACHES[::-1]:  # interleaved
                report = run(cfg, cache, args.seed, args.device)
                runs[cache].append(report)
                print(f"  {cache:8} run {r + 1}: {report.requests_per_s:9,.0f} req/s", flush=True)
        rate = {c: statistics.median(x.requests_per_s for x in runs[c]) for c in CACHES}
        first = {c: runs[c][0] for c in CACHES}
        for c in CACHES:
            assert len({x.prefix_digest for x in runs[c]}) == 1, f"{c} is not deterministic"
        same_rule = "-"
        if not args.no_same_rule:
            with sglang_split_recency_as_radixkv():
                twin = run(cfg, "sglang", args.seed)
            same_rule = "yes" if twin.prefix_digest == first["radixkv"].prefix_digest else "NO"
        memory = {c: "-" for c in MEMORY}
        if not cfg.evict:
            for c in MEMORY:
                memory[c] = f"{bytes_per_token(cfg, c, args.seed):.1f}"
        row = {
            "config": cfg.label,
            "radixkv": rate["radixkv"],
            "sglang": rate["sglang"],
            "ratio": rate["radixkv"] / rate["sglang"],
            "radixkv_list": rate["radixkv-list"],
            "ratio_list": rate["radixkv-list"] / rate["sglang"],
            "hit_radixkv": first["radixkv"].hit_rate(),
            "hit_sglang": first["sglang"].hit_rate(),
            "digest_equal": first["radixkv"].prefix_digest == first["sglang"].prefix_digest,
            "same_rule": same_rule,
            "bytes_radixkv": memory["radixkv"],
            "bytes_sglang": memory["sglang"],
        }
        rows.append(row)
        print(
            f"  median: radixkv {row['radixkv']:,.0f} req/s, sglang {row['sglang']:,.0f} req/s, "
            f"ratio {row['ratio']:.2f}; list keys {row['radixkv_list']:,.0f} req/s, "
            f"ratio {row['ratio_list']:.2f} ({time.monotonic() - started:.0f} s)",
            flush=True,
        )
    print("\n" + table(rows))
    return 0


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| configuration | radixkv req/s | sglang req/s | ratio | radixkv list keys req/s "
        "| ratio | hit rate radixkv / sglang | digests equal (same rule) "
        "| bytes/token radixkv / sglang |\n"
        "|---|---:|---:|---:|---:|---:|---|---|---|"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['config']} | {r['radixkv']:,.0f} | {r['sglang']:,.0f} | {r['ratio']:.2f} "
            f"| {r['radixkv_list']:,.0f} | {r['ratio_list']:.2f} "
            f"| {r['hit_radixkv']:.4f} / {r['hit_sglang']:.4f} "
            f"| {'yes' if r['digest_equal'] else 'no'} ({r['same_rule']}) "
            f"| {r['bytes_radixkv']} / {r['bytes_sglang']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())

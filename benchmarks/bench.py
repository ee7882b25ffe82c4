"""radixkv's RadixCache against sglang 0.5.23's Python RadixCache and its Rust tree core.

    tox -e bench                      # the full set (installs sglang with --no-deps)
    python benchmarks/bench.py --quick --keys list

Each configuration replays one seeded trace (``radixkv.driver.workload``) through the
scheduler of ``radixkv.driver.replay`` against every cache, ``--repeats`` times,
interleaved (the order alternates each repeat). sglang's two trees (``sglang_peers.py``)
always get ``array('q')`` keys, the form its callers hold; radixkv gets what ``--keys``
names: ``list`` (the seed API's ``list[int]``) and/or ``array``, from each build
``--builds`` names (``compiled``: the C key helpers; ``pure``: the Python reference, as
under ``RADIXKV_PURE=1``). Timing is the thread CPU time of the cache calls only
(``time.thread_time``), one torch thread, a full ``gc.collect()`` before each replay and
the collector off inside it; the table shows medians. The ratios are radixkv's requests/s
over sglang's (``/py``: its Python RadixCache; ``/rust``: its Rust tree core): above 1,
radixkv is faster.

Hit rates and per-request prefix-length digests come from the same runs. sglang refreshes the
recency of the unmatched lower part of a node a match or insert splits; radixkv does not
(SPEC.md, match_prefix). Under eviction that can change a victim, so the digests may differ;
``same rule`` replays sglang once more, untimed, with that one refresh undone, and says
whether its digest then equals radixkv's.

Bytes per cached token: the RSS growth of building the no-eviction cache from fresh keys, in
a fresh process per cache (``bench.py --memory CACHE ...``), over the tokens cached.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from radixkv import native
from radixkv.driver import replay as replay_module
from radixkv.driver.replay import (
    RadixkvListReplay,
    RadixkvReplay,
    ReplayPool,
    ReplayReport,
    register_cache,
    replay,
)
from radixkv.driver.workload import Request, WorkloadConfig, generate, trace_digest

sys.path.insert(0, str(Path(__file__).parent))
import sglang_peers  # benchmarks/ is not a package: its folder is put on the path

PEERS = ("sglang", "sglang-rust")  # always given array('q') keys
KEYS = {"array": RadixkvReplay, "list": RadixkvListReplay}


def radixkv_replay(keys: str, build: str) -> Any:
    """The replay adapter for radixkv given ``keys`` keys, with the ``build`` key helpers."""

    class Replay(KEYS[keys]):  # type: ignore[misc, valid-type]  # chosen at run time
        name = f"radixkv {keys} {build}"

        def __init__(self, page_size: int, pool: ReplayPool) -> None:
            native.select(compiled=build == "compiled")  # replays run one at a time
            super().__init__(page_size, pool)

    return Replay


def register(keys: list[str], builds: list[str]) -> list[str]:
    """Put every cache of this run into the driver's table; returns their names."""
    for peer, factory in sglang_peers.PEERS.items():
        register_cache(peer, factory)
    names = []
    for build in builds:
        for k in keys:
            name = f"radixkv {k} {build}"
            register_cache(name, radixkv_replay(k, build))
            names.append(name)
    return [*names, *PEERS]


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
    for page in (1, 16):
        out.append(Config(20000 // scale, 2048, page, False))
    return out


@contextlib.contextmanager
def sglang_split_recency_as_radixkv() -> Iterator[None]:
    """sglang, except that a split's lower part keeps its recency (radixkv's rule)."""
    radix_cache, _ = sglang_peers.python_tree()
    tree_node, cache = radix_cache.TreeNode, radix_cache.RadixCache
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


@functools.lru_cache(maxsize=1)
def trace(seed: int, requests: int, prompt_len: int) -> list[Request]:
    """The trace, generated once per configuration (the repeats replay the same objects)."""
    return list(generate(WorkloadConfig(seed=seed, requests=requests, prompt_len=prompt_len)))


def run(cfg: Config, cache: str, seed: int, device: str = "cpu") -> ReplayReport:
    requests = trace(seed, cfg.requests, cfg.prompt_len)
    return replay(cache, requests, page_size=cfg.page_size, pool_size=cfg.pool, device=device)


def bytes_per_token(cfg: Config, cache: str, seed: int) -> dict[str, float]:
    """Measured in a fresh process (``bench.py --memory``), so nothing else is resident."""
    args = [str(a) for a in (seed, cfg.requests, cfg.prompt_len, cfg.page_size)]
    out = subprocess.run(
        [sys.executable, __file__, "--memory", cache, *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.splitlines()[-1])
    return result


def memory_main(args: list[str]) -> int:
    """``bench.py --memory CACHE seed requests prompt_len page_size`` (one JSON line)."""
    cache, *numbers = args
    seed, requests, prompt_len, page_size = (int(a) for a in numbers)
    keys, build = [*cache.split()[1:], "array", "compiled"][:2]
    register([keys], [build])
    torch.set_num_threads(1)
    cfg = WorkloadConfig(seed=seed, requests=requests, prompt_len=prompt_len)
    print(json.dumps(replay_module.bytes_per_token(cache, cfg, page_size)))
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--memory"]:
        return memory_main(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the requests")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", type=int, nargs="*", help="configuration numbers (1-based)")
    parser.add_argument("--no-same-rule", action="store_true", help="skip the untimed check")
    parser.add_argument(
        "--keys",
        nargs="+",
        choices=sorted(KEYS),
        default=["list", "array"],
        help="what radixkv is handed (sglang always gets array('q'))",
    )
    parser.add_argument(
        "--builds",
        nargs="+",
        choices=("compiled", "pure"),
        default=["compiled", "pure"],
        help="radixkv's key helpers: the C ones, or the Python reference",
    )
    parser.add_argument(
        "--device", default="cpu", help="KV indices on this device (cuda: syncs are errors)"
    )
    args = parser.parse_args()
    if "compiled" in args.builds and not native.available():
        parser.error("the compiled key helpers are not built (pip install .); try --builds pure")
    torch.set_num_threads(1)
    caches = register(args.keys, args.builds)
    ours = caches[: -len(PEERS)]
    chosen = configs(args.quick)
    if args.only:
        chosen = [chosen[i - 1] for i in args.only]
    rows = []
    for cfg in chosen:
        wl = WorkloadConfig(seed=args.seed, requests=cfg.requests, prompt_len=cfg.prompt_len)
        print(f"\n{cfg.label}: trace sha256 {trace_digest(wl)[:16]}", flush=True)
        runs: dict[str, list[ReplayReport]] = {c: [] for c in caches}
        started = time.monotonic()
        for r in range(args.repeats):
            for cache in caches if r % 2 == 0 else caches[::-1]:  # interleaved
                report = run(cfg, cache, args.seed, args.device)
                runs[cache].append(report)
                print(f"  {cache:24} run {r + 1}: {report.requests_per_s:9,.0f} req/s", flush=True)
        rate = {c: statistics.median(x.requests_per_s for x in runs[c]) for c in caches}
        first = {c: runs[c][0] for c in caches}
        for c in caches:
            assert len({x.prefix_digest for x in runs[c]}) == 1, f"{c} is not deterministic"
        digests = {first[c].prefix_digest for c in ours}
        assert len(digests) == 1, "radixkv's key forms or builds disagree"
        same_rule = "-"
        if not args.no_same_rule:
            with sglang_split_recency_as_radixkv():
                twin = run(cfg, "sglang", args.seed)
            same_rule = "yes" if twin.prefix_digest in digests else "NO"
        memory = {}
        if not cfg.evict:
            for c in (ours[0], *PEERS):
                memory[c] = bytes_per_token(cfg, c, args.seed)
        row = {
            "config": cfg.label,
            "rate": rate,
            "hit_radixkv": first[ours[0]].hit_rate(),
            "hit_sglang": first["sglang"].hit_rate(),
            "digest_equal": first[ours[0]].prefix_digest == first["sglang"].prefix_digest,
            "same_rule": same_rule,
            "memory": memory,
        }
        rows.append(row)
        print(
            "  median: "
            + ", ".join(
                f"{c} {rate[c]:,.0f} (/py {rate[c] / rate['sglang']:.2f}, "
                f"/rust {rate[c] / rate['sglang-rust']:.2f})"
                for c in ours
            )
            + f"; sglang {rate['sglang']:,.0f}, rust {rate['sglang-rust']:,.0f} req/s"
            + f" ({time.monotonic() - started:.0f} s)",
            flush=True,
        )
    print("\n" + table(rows, ours))
    return 0


def table(rows: list[dict[str, Any]], ours: list[str]) -> str:
    """One row per configuration: sglang's two rates, then radixkv's ratios over each."""
    head = "| configuration | sglang py req/s | sglang rust req/s |"
    rule = "|---|---:|---:|"
    for c in ours:
        head += f" {c.removeprefix('radixkv ')}: /py, /rust |"
        rule += "---|"
    head += (
        " hit rate radixkv / sglang | digests equal (same rule) | bytes/token radixkv / py / rust |"
    )
    rule += "---|---|---|"
    lines = [head, rule]
    for r in rows:
        rate = r["rate"]
        cells = [r["config"], f"{rate['sglang']:,.0f}", f"{rate['sglang-rust']:,.0f}"]
        for c in ours:
            cells.append(f"{rate[c] / rate['sglang']:.2f}, {rate[c] / rate['sglang-rust']:.2f}")
        cells.append(f"{r['hit_radixkv']:.4f} / {r['hit_sglang']:.4f}")
        cells.append(f"{'yes' if r['digest_equal'] else 'no'} ({r['same_rule']})")
        mem = r["memory"]
        cells.append(" / ".join(f"{v['bytes_per_token']:.1f}" for v in mem.values()) or "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())

"""radixkv's RadixCache against sglang 0.5.23's Python RadixCache and its Rust tree core.

    tox -e bench                      # the full set (installs sglang with --no-deps)
    python benchmarks/bench.py --quick --only 1 5

Each configuration replays one seeded trace (``radixkv.driver.workload``) through the
scheduler of ``radixkv.driver.drive`` against every cache, ``--repeats`` times,
interleaved (the order alternates each repeat); the table shows medians. Timing is the
thread CPU time of the cache calls only (``time.thread_time``), one torch thread, a full
``gc.collect()`` before each replay and the collector off inside it.

Keys. Every cache gets, per request, a **fresh** key object built outside the timed calls,
in the form its callers hold: sglang's two trees an ``array('q')`` (a new array), radixkv
a new ``array('q')`` (``array`` rows) or a new ``list`` of new int objects (``list`` rows:
``array('q', ids).tolist()``, as a tokenizer hands a scheduler). A key is made once per
request and handed to its match and its insert, as a scheduler holds it.

Ratios (``/py``: over sglang's Python RadixCache; ``/rust``: over its Rust tree core,
driven through its controller ``UnifiedRadixCache``) compare requests/s on the **same key
type**: sglang takes only ``array('q')``, so only radixkv's array rows have ratios. List
keys are judged against the **floor**: the thread CPU time of reading each call's fresh key
once, measured on the same fresh keys in the same interleaved repeats (a list: ``sum(key)``,
a pass over its int objects; an array: ``bytes(memoryview(key))``, one memcpy pass). Each
call (match, insert) is handed the whole key, so the floor of each call is one pass over it;
``match/floor`` and ``insert/floor`` are radixkv's mean time per call over that floor.

Hit rates and per-request prefix-length digests come from the same runs. sglang refreshes the
recency of the unmatched lower part of a node a match or insert splits; radixkv does not
(SPEC.md, match_prefix). Under eviction that can change a victim, so the digests may differ;
``same rule`` replays sglang once more, untimed, with that one refresh undone, and says
whether its digest then equals radixkv's.

Bytes per cached token (no-eviction configurations): RSS growth of building the cache, in a
fresh process per cache (``bench.py --memory``) that never held the trace as Python objects:
the parent writes the trace's ids to a file, the child reads them into one int64 array
before its first RSS reading, so no freed trace memory is there for the cache to reuse
unseen. It first builds and drops a throwaway cache of the trace's first 8 requests, so
every code path has run once: otherwise the growth also counts the pages of torch's and
Python's shared libraries that the loop runs for the first time (code mapped from disk,
about 1.4 bytes a token on configuration 7; not memory the cache holds). Per request it
builds a fresh key and a fresh index tensor (the pool's), inserts, and drops its
references; after a full collection and ``malloc_trim`` the RSS growth over the cached
tokens is the figure, and its anonymous part (``RssAnon``: heap and private memory only)
is reported beside it as a check. The same child then times full ``gc.collect()`` calls
with the cache resident: the GC cost of the cache's objects, reported apart from the timed
calls.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from radixkv import native
from radixkv.driver.caches import CACHES, RadixkvListReplay, RadixkvReplay, register_cache
from radixkv.driver.pool import ReplayPool
from radixkv.driver.report import ReplayReport
from radixkv.driver.scheduler import replay
from radixkv.driver.workload import Request, WorkloadConfig, generate, trace_digest

sys.path.insert(0, str(Path(__file__).parent))
import sglang_peers  # benchmarks/ is not a package: its folder is put on the path

PEERS = ("sglang", "sglang-rust")  # always given fresh array('q') keys
KEY_FORMS = ("array", "list")


def fresh_list(tokens: list[int]) -> list[int]:
    """A new list of new int objects, equal to ``tokens`` (what a tokenizer hands over)."""
    return array("q", tokens).tolist()


def fresh_array(tokens: list[int]) -> array[int]:
    """A new ``array('q')`` of ``tokens``."""
    return array("q", tokens)


FRESH: dict[str, Callable[[list[int]], Any]] = {"array": fresh_array, "list": fresh_list}


def read_list(key: list[int]) -> None:
    """The floor of a list key: one pass over its int objects."""
    sum(key)


def read_array(key: array[int]) -> None:
    """The floor of an array key: one pass over its bytes."""
    bytes(memoryview(key))


READ: dict[str, Callable[[Any], None]] = {"array": read_array, "list": read_list}


def radixkv_replay(keys: str, build: str) -> Any:
    """The replay adapter for radixkv given fresh ``keys`` keys, with ``build``'s helpers."""
    base = {"array": RadixkvReplay, "list": RadixkvListReplay}[keys]
    fresh = FRESH[keys]

    class Replay(base):  # type: ignore[misc, valid-type]  # chosen at run time
        name = f"radixkv {keys} {build}"

        def __init__(self, page_size: int, pool: ReplayPool) -> None:
            native.select(compiled=build == "compiled")  # replays run one at a time
            super().__init__(page_size, pool)

        def prepare(self, tokens: list[int]) -> Any:
            return fresh(tokens)  # untimed: the driver calls it before the match

    return Replay


def register(keys: list[str], builds: list[str]) -> list[str]:
    """Put every cache of this run into the driver's table; returns radixkv's names."""
    for peer, factory in sglang_peers.PEERS.items():
        register_cache(peer, factory)
    names = []
    for build in builds:
        for k in keys:
            name = f"radixkv {k} {build}"
            register_cache(name, radixkv_replay(k, build))
            names.append(name)
    return names


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
    """The 8 configurations of the earlier table, then two long-context ones (9, 10)."""
    scale = 10 if quick else 1
    out = []
    for requests, length in ((2000, 2048), (20000, 2048), (2000, 16384)):
        for page in (1, 16):
            out.append(Config(requests // scale, length, page, True))
    for page in (1, 16):
        out.append(Config(20000 // scale, 2048, page, False))
    for page in (1, 16):
        out.append(Config(300 // scale, 131072, page, True))
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


def floor(cfg: Config, keys: str, seed: int) -> float:
    """Mean thread CPU seconds of reading one fresh ``keys`` key once (the whole key, as a
    match or an insert is handed it), over the trace's requests; collector off, as in a
    replay."""
    fresh, read, clock = FRESH[keys], READ[keys], time.thread_time
    requests = trace(seed, cfg.requests, cfg.prompt_len)
    total = 0.0
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for request in requests:
            key = fresh(request.full())
            t = clock()
            read(key)
            total += clock() - t
            del key
    finally:
        if enabled:
            gc.enable()
    return total / len(requests)


def per_call(report: ReplayReport, op: str) -> float:
    """Mean seconds per ``op`` call (one match and one insert per request)."""
    return report.seconds.get(op, 0.0) / report.requests


# ---- bytes per token: a fresh process per cache ---------------------------------------


def write_trace(cfg: Config, seed: int, folder: Path) -> Path:
    """The trace's ids as one int64 file, with each request's length and extra key."""
    requests = trace(seed, cfg.requests, cfg.prompt_len)
    ids = array("q")
    for r in requests:
        ids.extend(r.full())
    with open(folder / "ids.bin", "wb") as f:
        ids.tofile(f)
    meta = [[len(r.prompt) + len(r.output), r.extra_key] for r in requests]
    (folder / "meta.json").write_text(json.dumps({"page_size": cfg.page_size, "requests": meta}))
    return folder


def bytes_per_token(folder: Path, cache: str) -> dict[str, float]:
    """Measured in a fresh process (``bench.py --memory``), so nothing else is resident."""
    out = subprocess.run(
        [sys.executable, __file__, "--memory", cache, str(folder)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.splitlines()[-1])
    return result


def rss() -> int:
    """Resident set size of this process, in bytes (Linux: /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def rss_anon() -> int:
    """The anonymous part of the resident set, in bytes (Linux: ``RssAnon``): the heap and
    every other private allocation, without the pages of shared libraries' code and data
    that running a code path for the first time maps in."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def trim() -> None:
    """Give free heap memory back to the system (glibc ``malloc_trim``), where there is one."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def memory_main(args: list[str]) -> int:
    """``bench.py --memory CACHE FOLDER`` (one JSON line); FOLDER from ``write_trace``."""
    cache_name, folder = args[0], Path(args[1])
    parts = cache_name.split()
    if parts[0] == "radixkv":
        register([parts[1]], [parts[2]])
    else:
        register([], [])
    torch.set_num_threads(1)
    meta = json.loads((folder / "meta.json").read_text())
    ids = array("q")
    with open(folder / "ids.bin", "rb") as f:
        ids.frombytes(f.read())  # read as bytes: no Python int is made, none freed
    lengths_keys: list[list[Any]] = meta["requests"]
    warm = lengths_keys[:8]  # a throwaway cache first, with its own pool: code paths run once
    warm_pool = ReplayPool(sum(length for length, _ in warm))
    build_cache(CACHES[cache_name](int(meta["page_size"]), warm_pool), ids, warm, warm_pool)
    del warm_pool
    pool = ReplayPool(len(ids))
    cache = CACHES[cache_name](int(meta["page_size"]), pool)
    gc.collect()
    gc_before = gc_time()
    objects_before = len(gc.get_objects())
    trim()
    rss0, anon0 = rss(), rss_anon()
    build_cache(cache, ids, lengths_keys, pool)
    gc.collect()
    trim()
    grown, anon = rss() - rss0, rss_anon() - anon0
    cached = cache.total_size()
    result = {
        "bytes": grown,
        "cached_tokens": cached,
        "bytes_per_token": grown / cached,
        "anon_bytes_per_token": anon / cached,  # equal once the library pages are mapped
        # A full collection with the cache resident, less one before it was built.
        "gc_ms": (gc_time() - gc_before) * 1e3,
        "gc_objects": len(gc.get_objects()) - objects_before,
    }
    print(json.dumps(result))
    return 0


def build_cache(
    cache: Any, ids: array[int], lengths_keys: list[list[Any]], pool: ReplayPool
) -> None:
    """Insert each request of the trace into ``cache``: a fresh key and a fresh index tensor
    (the pool's) each, every reference dropped after its insert."""
    start = 0
    for length, extra_key in lengths_keys:
        key = cache.prepare(ids[start : start + length].tolist())
        value = pool.alloc(length)
        cache.insert(key, extra_key, value)
        start += length
        del key, value


def gc_time() -> float:
    """Median seconds of three full collections."""
    times = []
    for _ in range(3):
        t = time.perf_counter()
        gc.collect()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


# ---- the run --------------------------------------------------------------------------


def main() -> int:
    if sys.argv[1:2] == ["--memory"]:
        return memory_main(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the requests")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", type=int, nargs="*", help="configuration numbers (1-based)")
    parser.add_argument("--no-same-rule", action="store_true", help="skip the untimed check")
    parser.add_argument("--no-memory", action="store_true", help="skip bytes per token")
    parser.add_argument(
        "--keys",
        nargs="+",
        choices=KEY_FORMS,
        default=list(KEY_FORMS),
        help="what radixkv is handed, fresh per request (sglang always gets array('q'))",
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
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    if "compiled" in args.builds and not native.available():
        parser.error("the compiled key helpers are not built (pip install .); try --builds pure")
    torch.set_num_threads(1)
    ours = register(args.keys, args.builds)
    floors = [f"floor {k}" for k in args.keys]
    entries = [*ours, *PEERS, *floors]
    chosen = list(enumerate(configs(args.quick), 1))
    if args.only:
        chosen = [chosen[i - 1] for i in args.only]
    print(
        "keys: fresh per request, built outside the timed calls: sglang py and rust get a new "
        "array('q'); radixkv a new array('q') or a new list of new ints (array('q', ids)"
        ".tolist()); floors read each fresh key once (list: sum(key); array: "
        "bytes(memoryview(key))). Thread CPU time; medians of "
        f"{args.repeats} interleaved runs; torch threads {torch.get_num_threads()}; "
        f"gc collected before each run and off inside it. sglang {sglang_version()}.",
        flush=True,
    )
    rows = []
    for number, cfg in chosen:
        wl = WorkloadConfig(seed=args.seed, requests=cfg.requests, prompt_len=cfg.prompt_len)
        print(f"\n[{number}] {cfg.label}: trace sha256 {trace_digest(wl)[:16]}", flush=True)
        runs: dict[str, list[ReplayReport]] = {c: [] for c in [*ours, *PEERS]}
        floor_s: dict[str, list[float]] = {f: [] for f in floors}
        started = time.monotonic()
        for r in range(args.repeats):
            for entry in entries if r % 2 == 0 else entries[::-1]:  # interleaved
                if entry in floor_s:
                    floor_s[entry].append(floor(cfg, entry.split()[1], args.seed))
                    print(f"  {entry:24} run {r + 1}: {floor_s[entry][-1] * 1e6:9.1f} µs/call")
                    continue
                report = run(cfg, entry, args.seed, args.device)
                runs[entry].append(report)
                print(
                    f"  {entry:24} run {r + 1}: {report.requests_per_s:9,.0f} req/s "
                    f"(match {per_call(report, 'match') * 1e6:.1f}, "
                    f"insert {per_call(report, 'insert') * 1e6:.1f} µs/call)",
                    flush=True,
                )
        rate = {c: statistics.median(x.requests_per_s for x in runs[c]) for c in runs}
        calls = {
            c: {op: statistics.median(per_call(x, op) for x in runs[c]) for op in OPS} for c in runs
        }
        floor_med = {f.split()[1]: statistics.median(v) for f, v in floor_s.items()}
        first = {c: runs[c][0] for c in runs}
        for c in runs:
            assert len({x.prefix_digest for x in runs[c]}) == 1, f"{c} is not deterministic"
        digests = {first[c].prefix_digest for c in ours}
        assert len(digests) == 1, "radixkv's key forms or builds disagree"
        same_rule = "-"
        if not args.no_same_rule:
            with sglang_split_recency_as_radixkv():
                twin = run(cfg, "sglang", args.seed)
            same_rule = "yes" if twin.prefix_digest in digests else "NO"
        memory: dict[str, dict[str, float]] = {}
        if not cfg.evict and not args.no_memory:
            with tempfile.TemporaryDirectory() as tmp:
                folder = write_trace(cfg, args.seed, Path(tmp))
                for c in [x for x in ours if x.endswith("compiled")] + list(PEERS):
                    memory[c] = bytes_per_token(folder, c)
                    print(f"  memory {c}: {json.dumps(memory[c])}", flush=True)
        row = {
            "number": number,
            "config": cfg.label,
            "rate": rate,
            "calls_us": {c: {op: v * 1e6 for op, v in d.items()} for c, d in calls.items()},
            "floor_us": {k: v * 1e6 for k, v in floor_med.items()},
            "hit_radixkv": first[ours[0]].hit_rate(),
            "hit_sglang": first["sglang"].hit_rate(),
            "digest_equal": first[ours[0]].prefix_digest == first["sglang"].prefix_digest,
            "same_rule": same_rule,
            "memory": memory,
        }
        rows.append(row)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        print(f"  ({time.monotonic() - started:.0f} s)\n" + table([row], ours), flush=True)
    print("\n" + table(rows, ours))
    return 0


OPS = ("match", "insert", "lock", "evict")


def sglang_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        return "?"


def table(rows: list[dict[str, Any]], ours: list[str]) -> str:
    """Per configuration: sglang's two rates; radixkv's array ratios over each (same key
    type); per-call µs of match and insert against the floor, per key form; memory."""
    arrays = [c for c in ours if c.split()[1] == "array"]
    head = "| # | configuration | sglang py req/s | sglang rust req/s |"
    rule = "|---|---|---:|---:|"
    for c in arrays:
        head += f" {c.removeprefix('radixkv ')}: /py, /rust |"
        rule += "---|"
    for c in ours:
        head += f" {c.removeprefix('radixkv ')}: match, insert µs/call (÷ floor) |"
        rule += "---|"
    head += " floor µs/call array, list | hit rate radixkv / sglang | digests equal (same rule) |"
    rule += "---|---|---|"
    head += " bytes/token radixkv (array, list) / py / rust | gc objects of the cache (ms) |"
    rule += "---|---|"
    lines = [head, rule]
    for r in rows:
        rate, calls, floors = r["rate"], r["calls_us"], r["floor_us"]
        cells = [str(r["number"]), r["config"]]
        cells += [f"{rate['sglang']:,.0f}", f"{rate['sglang-rust']:,.0f}"]
        for c in arrays:
            cells.append(f"{rate[c] / rate['sglang']:.2f}, {rate[c] / rate['sglang-rust']:.2f}")
        for c in ours:
            f = floors.get(c.split()[1])
            m, i = calls[c]["match"], calls[c]["insert"]
            ratio = f" ({m / f:.2f}, {i / f:.2f})" if f else ""
            cells.append(f"{m:.1f}, {i:.1f}{ratio}")
        cells.append(", ".join(f"{floors[k]:.1f}" for k in KEY_FORMS if k in floors) or "-")
        cells.append(f"{r['hit_radixkv']:.4f} / {r['hit_sglang']:.4f}")
        cells.append(f"{'yes' if r['digest_equal'] else 'no'} ({r['same_rule']})")
        mem = r["memory"]
        cells.append(" / ".join(f"{v['bytes_per_token']:.1f}" for v in mem.values()) or "-")
        cells.append(
            " / ".join(f"{v['gc_objects']:,.0f} ({v['gc_ms']:.0f})" for v in mem.values()) or "-"
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())

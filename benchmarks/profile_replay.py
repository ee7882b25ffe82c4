"""Where a replay's time goes: one configuration of ``bench.py``, one cache, under cProfile.

    python benchmarks/profile_replay.py 5 "radixkv list compiled" --quick

Prints the functions with the most own time (cProfile's ``tottime``), in µs per request, for
the cache calls of the replay (the driver's own bookkeeping is in the profile too: its
functions are in ``driver/drive.py`` and ``bench.py``). cProfile adds a cost per Python
call, so read it for the shares, not the absolute times; ``bench.py`` gives those.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats

import bench
import torch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=int, help="configuration number of bench.py (1-based)")
    parser.add_argument("cache", help='e.g. "radixkv list compiled", "sglang"')
    parser.add_argument("--quick", action="store_true", help="a tenth of the requests")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    torch.set_num_threads(1)
    parts = args.cache.split()
    if parts[0] == "radixkv":
        bench.register([parts[1]], [parts[2]])
    else:
        bench.register([], [])
    cfg = bench.configs(args.quick)[args.config - 1]
    bench.run(cfg, args.cache, args.seed)  # warm: the trace is generated, modules loaded
    profile = cProfile.Profile()
    profile.enable()
    report = bench.run(cfg, args.cache, args.seed)
    profile.disable()
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("tottime").print_stats(args.top)
    n = report.requests
    print(f"{cfg.label}, {args.cache}: {n} requests")
    print(f"timed µs/request (profiled): {report.cache_seconds / n * 1e6:.1f}")
    for op in bench.OPS:
        print(f"  {op}: {bench.per_call(report, op) * 1e6:.1f} µs/call")
    print("own time per request, top functions (µs):")
    for func, (_cc, nc, tt, _ct, _callers) in sorted(
        stats.stats.items(),  # type: ignore[attr-defined]  # pstats keeps its table here
        key=lambda kv: -kv[1][2],
    )[: args.top]:
        file, line, name = func
        print(f"  {tt / n * 1e6:8.1f}  {nc / n:6.1f} calls  {name}  ({file.split('/')[-1]}:{line})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The GPU check in one command: the CUDA tests, then a short replay on the device.

    tox -e cuda                                   # or: python benchmarks/cuda_check.py
    python benchmarks/cuda_check.py --device cpu  # the same replay on the CPU (a smoke test)

On a machine with CUDA it runs the tests marked ``cuda`` (``pytest tests -m cuda``), then
replays two of ``bench.py``'s configurations at a tenth of their requests (2,048- and
16,384-token prompts, page 1, under eviction) through radixkv with the pool's KV indices on
the device, for both key forms (fresh ``array('q')`` and ``list`` keys). The driver runs
every replay under ``torch.cuda.set_sync_debug_mode("error")``: a match, insert, lock or
evict (or the driver itself) that waits for the device raises instead of stalling, so a
replay that finishes is the proof that none does. Times are the host side of each call.
It prints the figures and the wall time (it should finish in well under 5 minutes).

Without a CUDA device it says so and exits 0, having checked nothing; ``--device cpu``
runs the replay part on the CPU instead (tests/driver/test_cuda_check.py does, with few requests).
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import bench  # benchmarks/ is not a package: its folder is put on the path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = (1, 5)  # bench.py's numbering: 2,048 and 16,384 tokens, page 1, under eviction
CACHES = ("radixkv array compiled", "radixkv list compiled")


def run_cuda_tests() -> int:
    """``pytest tests -m cuda``; returns its exit status."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "tests",
        "-m",
        "cuda",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    print("$", " ".join(command[2:]), flush=True)
    return subprocess.run(command, cwd=ROOT, check=False).returncode


def run_replays(device: str, requests: int | None) -> None:
    """The short benchmark: each configuration, each key form, one replay on ``device``."""
    builds = ["compiled"] if bench.native.helpers is not None else ["pure"]  # RADIXKV_PURE
    names = bench.register(["array", "list"], builds)
    print(
        "| configuration | keys | req/s | match, insert, lock, evict µs/call | hit rate |\n"
        "|---|---|---:|---|---:|",
        flush=True,
    )
    for number in CONFIGS:
        cfg = bench.configs(quick=True)[number - 1]
        if requests is not None:
            cfg = dataclasses.replace(cfg, requests=requests)
        for name in names:
            report = bench.run(cfg, name, seed=0, device=device)
            calls = ", ".join(f"{bench.per_call(report, op) * 1e6:.1f}" for op in bench.OPS)
            print(
                f"| {cfg.label} | {name.removeprefix('radixkv ')} | "
                f"{report.requests_per_s:,.0f} | {calls} | {report.hit_rate():.4f} |",
                flush=True,
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="where the KV indices live")
    parser.add_argument("--requests", type=int, help="requests per replay (default: a tenth)")
    parser.add_argument("--no-tests", action="store_true", help="only the replays")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(
            "cuda_check: no CUDA device here (torch.cuda.is_available() is False): "
            "skipped, nothing was checked"
        )
        return 0
    torch.set_num_threads(1)
    started = time.monotonic()
    if device.type == "cuda":
        print(f"cuda_check on {torch.cuda.get_device_name(device)}, torch {torch.__version__}")
        if not args.no_tests and run_cuda_tests() != 0:
            print("cuda_check: the CUDA tests failed")
            return 1
        print('replays under torch.cuda.set_sync_debug_mode("error"): a host sync raises')
    run_replays(str(device), args.requests)
    print(f"cuda_check: done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

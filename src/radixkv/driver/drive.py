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
import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from radixkv.driver import caches
from radixkv.driver.caches import (
    CACHES,
    POLICY_CACHES,
    CacheFactory,
    RadixkvListReplay,
    RadixkvReplay,
    ReplayCache,
    SglangReplay,
    cache_factory,
    missing_requirements,
    register_cache,
    sglang_factory,
)
from radixkv.driver.memory import bytes_per_token
from radixkv.driver.memory import max_rss as _maxrss
from radixkv.driver.memory import rss as _rss
from radixkv.driver.memory import trim as _trim
from radixkv.driver.pool import ReplayPool
from radixkv.driver.report import ReplayReport
from radixkv.driver.scheduler import PRIORITY_BY_KIND, no_host_sync, replay
from radixkv.driver.sweep import (
    SWEEP_PROMPTS,
    CacheSweep,
    PolicySweep,
    cache_sweep,
    plot_policies,
    plot_sweep,
    policy_sweep,
    policy_table,
    sweep_table,
    trace_label,
)
from radixkv.driver.workload import WorkloadConfig, generate, trace_digest
from radixkv.events import EXTRA_HINT
from radixkv.eviction import POLICIES

if TYPE_CHECKING:  # the events extra is optional: imported where --events asks for it
    from radixkv.events.publisher import ZmqEventPublisher

__all__ = [  # the CLI, and the driver's names as importers have always found them here
    "CACHES",
    "POLICY_CACHES",
    "PRIORITY_BY_KIND",
    "SWEEP_PROMPTS",
    "CacheFactory",
    "CacheSweep",
    "PolicySweep",
    "RadixkvListReplay",
    "RadixkvReplay",
    "ReplayCache",
    "ReplayPool",
    "ReplayReport",
    "SglangReplay",
    "_maxrss",
    "_rss",
    "_trim",
    "add_parser",
    "bytes_per_token",
    "cache_factory",
    "cache_sweep",
    "command",
    "main",
    "no_host_sync",
    "plot_policies",
    "policy_sweep",
    "policy_table",
    "register_cache",
    "replay",
    "sglang_factory",
    "sweep_table",
    "trace_label",
]

# ---- the command line (``radixkv drive``) ----------------------------------------------


HELP = """\
Drive a prefix cache with a seeded request trace, the way a serving scheduler drives it,
and report the cache's speed (requests/s of cache CPU time), hit rate and operation
counts. Per request, in batches in flight together: match the prompt (all but its last
token) and lock the match; allocate KV indices for the rest, evicting exactly the shortfall
when the pool is short; when the request finishes, insert prompt and output, free the
duplicates, unlock. At the end everything is evicted and every pool index must have come
back exactly once. Results go to stdout; a progress bar to stderr, on a terminal only.

examples:
  radixkv drive                                  radixkv, 2000 requests of ~2048 tokens
  radixkv drive --cache sglang                   sglang's Python RadixCache, same trace
  radixkv drive --plot sweep.png --compare sglang
                                                  both on the same axes: hit rate against
                                                  pool size, requests/s against prompt length
  radixkv drive --compare benchmarks.sglang_peers:SglangRustReplay --plot sweep.png
                                                  a peer by MODULE:FACTORY (factory(page_size,
                                                  pool)), here sglang's Rust core"""


def add_parser(commands: Any) -> None:
    """Register ``radixkv drive`` on the CLI's subparsers."""
    cmd = commands.add_parser(
        "drive",
        aliases=["replay"],  # its name before `radixkv check --replay` took the word
        help="drive a cache with a seeded request trace and report its speed",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _the_trace(cmd)
    _the_cache(cmd)
    _the_events(cmd)
    _the_sweeps(cmd)


def _the_trace(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the trace")
    group.add_argument(
        "--seed", type=int, default=0, help="the trace's seed (default: %(default)s)"
    )
    group.add_argument("--requests", type=int, default=2000, help="requests (default: %(default)s)")
    group.add_argument(
        "--prompt-len", type=int, default=2048, help="typical prompt length (default: %(default)s)"
    )
    group.add_argument(
        "--batch", type=int, default=8, help="requests in flight together (default: %(default)s)"
    )
    group.add_argument(
        "--no-progress", action="store_true", help="no progress bar even on a terminal"
    )


def _the_cache(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the cache")
    group.add_argument(
        "--cache",
        choices=sorted(CACHES),
        default="radixkv",
        help="the cache to replay (default: %(default)s)",
    )
    group.add_argument("--page-size", type=int, default=1, help="page size (default: %(default)s)")
    group.add_argument(
        "--pool-size",
        type=int,
        default=None,
        help="KV pool in tokens (default: 48 typical prompts, 98,304 at the default length)",
    )
    group.add_argument(
        "--device",
        default="cpu",
        help="where the KV indices live; on cuda a host sync is an error (default: %(default)s)",
    )
    group.add_argument(
        "--policy",
        choices=sorted(POLICIES),
        default=None,
        help="radixkv's eviction policy (default: lru); priority orders by request kind",
    )


def _the_events(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("KV events")
    group.add_argument(
        "--events",
        metavar="ENDPOINT",
        help="publish the cache's KV events over ZeroMQ while replaying, e.g. "
        "tcp://127.0.0.1:5557 (needs pyzmq and msgspec: pip install 'radixkv[events]')",
    )
    group.add_argument(
        "--events-wait",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="with --events, wait this long for a subscriber before replaying; 0: do not "
        "wait (default: %(default)s)",
    )


def _the_sweeps(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sweeps and plots")
    group.add_argument(
        "--policy-plot",
        metavar="FILE",
        help="also replay the trace under every policy and pool size: a table, and a PNG of "
        "hit rate against pool size per policy with matplotlib (else its data as CSV)",
    )
    group.add_argument(
        "--plot",
        metavar="FILE",
        help="also sweep pool size and prompt length for --cache and every --compare cache "
        "and draw them on the same axes: a PNG with matplotlib, else the data as CSV",
    )
    group.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="CACHE",
        help="a cache to sweep beside --cache for --plot: a name above or MODULE:FACTORY "
        "(repeatable)",
    )
    group.add_argument(
        "--repeats",
        type=_at_least_one,
        default=3,
        metavar="N",
        help="runs of each speed point of --plot: the median is drawn, and a band from the "
        "slowest to the fastest run (default: %(default)s)",
    )


def _at_least_one(text: str) -> int:
    """argparse's type for --repeats: a whole number, 1 or more."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number, 1 or more, got {text!r}")
    return int(text)


def resolve_cache(name: str) -> str:
    """A cache name as ``replay`` knows it: one of ``CACHES``, or ``MODULE:FACTORY`` (a
    ``CacheFactory``; MODULE found from the current folder as well), registered under its
    ``name`` attribute (else FACTORY)."""
    if name in CACHES:
        return name
    module_name, sep, attr = name.partition(":")
    if not sep:
        raise LookupError(f"unknown cache {name!r}: one of {sorted(CACHES)} or MODULE:FACTORY")
    try:
        module = importlib.import_module(module_name)
    except ImportError as missing:  # a one-line message, naming what the module lacks
        raise ImportError(f"{name}: cannot import {module_name} ({missing})") from None
    factory = getattr(module, attr, None)
    if factory is None:
        raise ImportError(f"{name}: {module_name} has no {attr}")
    label = str(getattr(factory, "name", attr))
    register_cache(label, factory)
    return label


def command(args: argparse.Namespace) -> int:
    """Run ``radixkv drive`` with parsed ``args``: a usage error, a cache it would
    replay that needs a module not installed, or ``--events`` without the events extra, is
    one line on stderr and status 2, before any work."""
    try:  # every cache it will replay, resolved and found installed before any work
        peers = _checked(args)
    except _UsageError as error:
        print(f"radixkv drive: {error}", file=sys.stderr)
        return 2
    cfg = WorkloadConfig(seed=args.seed, requests=args.requests, prompt_len=args.prompt_len)
    torch.set_num_threads(1)  # the benchmark's setting; the library never changes it
    print(f"trace: seed {cfg.seed}, {cfg.requests} requests of ~{cfg.prompt_len} tokens")
    print(f"trace sha256 {trace_digest(cfg)}")
    _replay_once(args, cfg)
    if args.plot:
        caches = [args.cache, *peers]
        sweeps = [
            cache_sweep(name, cfg, page_size=args.page_size, batch=args.batch, repeats=args.repeats)
            for name in caches
        ]
        print(sweep_table(sweeps))
        plot_sweep(sweeps, Path(args.plot), cfg, args.page_size, args.batch)
    if args.policy_plot:
        cache = args.cache if args.cache in POLICY_CACHES else "radixkv"
        sweep = policy_sweep(cache, cfg, page_size=args.page_size, batch=args.batch)
        print(policy_table(sweep, cfg.prompt_len))
        plot_policies(sweep, Path(args.policy_plot), f"{cache}, {trace_label(cfg)}")
    return 0


class _UsageError(Exception):
    """What ``radixkv drive`` refuses before any work, in one line."""


def _checked(args: argparse.Namespace) -> list[str]:
    """The ``--compare`` caches, resolved; ``_UsageError`` for flags that do not go
    together, a cache no name or module gives, one that needs a module not installed, or
    ``--events`` without the events extra."""
    if args.compare and not args.plot:
        raise _UsageError("--compare applies to --plot")
    if args.policy is not None and args.cache not in POLICY_CACHES:
        raise _UsageError(f"--policy applies to {sorted(POLICY_CACHES)}")
    try:
        peers = [resolve_cache(name) for name in args.compare]
    except (ImportError, LookupError) as missing:  # not there, or a name no cache has
        raise _UsageError(f"--compare: {missing}") from None
    for flag, name in [("--cache", args.cache), *(("--compare", peer) for peer in peers)]:
        lacking = missing_requirements(name)
        if lacking:
            needs = ", ".join(module for module, _ in lacking)
            how = "; ".join(dict.fromkeys(hint for _, hint in lacking))
            raise _UsageError(f"{flag} {name} needs {needs}, not installed: {how}")
    unavailable = events_unavailable() if args.events else None
    if unavailable is not None:  # once, before the trace's header: nothing was replayed
        raise _UsageError(unavailable)
    return peers


def _replay_once(args: argparse.Namespace, cfg: WorkloadConfig) -> None:
    """Replay the trace through ``--cache`` (publishing its events with ``--events``) and
    print its report."""
    quiet = args.no_progress or cfg.requests < 200 or not sys.stderr.isatty()
    bar = None if quiet else _progress_bar(cfg.requests)  # a bar only on a terminal
    with contextlib.ExitStack() as stack:
        events = _publisher(args, stack) if args.events else None
        report = replay(
            args.cache,
            generate(cfg),
            page_size=args.page_size,
            pool_size=args.pool_size or args.prompt_len * 48,
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


EVENTS_NEEDS = (("zmq", "pyzmq"), ("msgspec", "msgspec"))
"""What ``--events`` imports (the events extra): ``(module, the package that installs it)``."""


def events_unavailable() -> str | None:
    """Why ``--events`` cannot publish here, in one line (the events extra not installed,
    or its publisher not importing), or ``None``: checked before any work, as a missing
    peer is, so the command says it once, before the trace's header, and exits 2."""
    lacking = [package for module, package in EVENTS_NEEDS if not caches.installed(module)]
    if lacking:
        return f"--events needs {', '.join(lacking)}, not installed: {EXTRA_HINT}"
    try:
        importlib.import_module("radixkv.events.publisher")
    except ImportError as broken:  # installed, yet not importable: its own one-line reason
        return f"--events: {str(broken).strip().splitlines()[0]}"
    return None


def _publisher(args: argparse.Namespace, stack: contextlib.ExitStack) -> ZmqEventPublisher:
    """The ZeroMQ publisher of ``--events`` (``events_unavailable`` said it imports),
    bound, with a subscriber if one comes in time."""
    from radixkv.events.publisher import ZmqEventPublisher

    publisher = stack.enter_context(ZmqEventPublisher(args.events))
    print(f"events: publishing on {publisher.endpoint}", flush=True)
    if args.events_wait > 0 and not publisher.wait_for_subscribers(1, args.events_wait):
        print(f"events: no subscriber after {args.events_wait:g}s; publishing anyway")
    return publisher


def _progress_bar(total: int) -> Callable[[int], None]:
    step = max(1, total // 100)

    def show(done: int) -> None:
        if done % step and done != total:
            return
        filled = 40 * done // total
        sys.stderr.write(f"\r  [{'#' * filled}{'.' * (40 - filled)}] {done}/{total}")
        sys.stderr.flush()

    return show


def main(argv: list[str] | None = None) -> int:
    """``python -m radixkv.driver.drive --memory CACHE [seed requests prompt_len page_size]``.

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

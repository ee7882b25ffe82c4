"""Sweeps of one trace and their plots: hit rate per eviction policy against pool size
(``--policy-plot``), and several caches on the same axes — hit rate against pool size,
requests/s against prompt length, the first cache's speed ratio to each other one
(``--plot``). A PNG with matplotlib, else the same data as CSV. Every measured point is
printed on stdout. Speed is measured ``repeats`` times per point: the median is drawn, and
the band around it is the slowest and fastest run, so that noise is not read as signal."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from radixkv.driver.scheduler import replay
from radixkv.driver.workload import WorkloadConfig, generate
from radixkv.eviction import POLICIES

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
            print(f"  {policy:>8} pool {pool:>9,}: hit rate {report.hit_rate():.4f}", flush=True)
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


POOL_PROMPTS = (4, 8, 16, 32, 64, 128, 256)
"""Pool sizes of ``--plot``'s hit-rate sweep, in typical prompts."""
PROMPT_LENS = (256, 512, 1024, 2048, 4096, 8192)
"""Prompt lengths of ``--plot``'s speed sweep."""
SPEED_POOL_PROMPTS = 48
"""The pool of the speed sweep, in prompts of the length swept (``replay``'s default pool)."""


@dataclass
class CacheSweep:
    """One cache over one trace: its hit rate per pool size, its speed per prompt length
    (the median of its runs, and in ``spread`` the slowest and the fastest)."""

    cache: str
    hit_rate: list[tuple[int, float]]  # (pool tokens, hit rate): the same on every run
    speed: list[tuple[int, float]]  # (prompt length, median requests/s)
    spread: list[tuple[int, float, float]] = field(default_factory=list)  # (length, min, max)


def cache_sweep(
    cache_name: str,
    cfg: WorkloadConfig,
    *,
    page_size: int = 1,
    batch: int = 8,
    pool_prompts: tuple[int, ...] = POOL_PROMPTS,
    prompt_lens: tuple[int, ...] = PROMPT_LENS,
    repeats: int = 3,
) -> CacheSweep:
    """Replay ``cfg``'s trace at every pool size, then its variants at every prompt length
    (same seed and request count) ``repeats`` times each; each point is printed as it is
    measured."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    sweep = CacheSweep(cache_name, [], [])
    for prompts in pool_prompts:
        pool = prompts * cfg.prompt_len
        report = replay(cache_name, generate(cfg), page_size=page_size, pool_size=pool, batch=batch)
        sweep.hit_rate.append((pool, report.hit_rate()))
        print(f"  {cache_name:>12} pool {pool:>10,}: hit rate {report.hit_rate():.4f}", flush=True)
    for length in prompt_lens:
        sized = WorkloadConfig(seed=cfg.seed, requests=cfg.requests, prompt_len=length)
        pool = SPEED_POOL_PROMPTS * length
        runs = [  # the same seeded trace each run (a trace is consumed as it is replayed)
            replay(cache_name, generate(sized), page_size=page_size, pool_size=pool, batch=batch)
            for _ in range(repeats)
        ]
        speeds = [run.requests_per_s for run in runs]
        median = statistics.median(speeds)
        sweep.speed.append((length, median))
        sweep.spread.append((length, min(speeds), max(speeds)))
        print(
            f"  {cache_name:>12} prompt {length:>6}: {median:,.0f} req/s "
            f"(min {min(speeds):,.0f}, max {max(speeds):,.0f} of {repeats})",
            flush=True,
        )
    return sweep


def speed_ratios(sweeps: list[CacheSweep]) -> dict[str, list[tuple[int, float]]]:
    """The first cache's requests/s over each other cache's, per prompt length."""
    first, *peers = sweeps
    return {
        peer.cache: [
            (x, mine / theirs)
            for (x, mine), (_, theirs) in zip(first.speed, peer.speed, strict=True)
        ]
        for peer in peers
    }


def ratio_ranges(sweeps: list[CacheSweep]) -> dict[str, list[tuple[int, float, float]]]:
    """How far each ratio of ``speed_ratios`` can move within the runs' spread: the first
    cache's slowest run over the peer's fastest, and its fastest over the peer's slowest."""
    first, *peers = sweeps
    return {
        peer.cache: [
            (x, low / their_high, high / their_low)
            for (x, low, high), (_, their_low, their_high) in zip(
                first.spread, peer.spread, strict=True
            )
        ]
        for peer in peers
        if first.spread and peer.spread
    }


def sweep_table(sweeps: list[CacheSweep]) -> str:
    """Markdown: median requests/s per prompt length per cache (with the slowest and fastest
    run), and the first cache's ratio to each (with the range the runs allow)."""
    ratios, ranges = speed_ratios(sweeps), ratio_ranges(sweeps)
    head = [s.cache for s in sweeps] + [f"{sweeps[0].cache} ÷ {peer}" for peer in ratios]
    lines = ["| prompt | " + " | ".join(head) + " |", "|---:|" + "---:|" * len(head)]
    for row, (length, _) in enumerate(sweeps[0].speed):
        cells = [_speed_cell(s, row) for s in sweeps]
        for peer, points in ratios.items():
            around = ranges.get(peer)
            span = f" ({around[row][1]:.2f} to {around[row][2]:.2f})" if around else ""
            cells.append(f"{points[row][1]:.2f}x{span}")
        lines.append(f"| {length:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _speed_cell(sweep: CacheSweep, row: int) -> str:
    median = f"{sweep.speed[row][1]:,.0f}"
    if not sweep.spread:
        return median
    _, low, high = sweep.spread[row]
    return f"{median} ({low:,.0f} to {high:,.0f})"


def sweep_title(cfg: WorkloadConfig, page_size: int, batch: int, caches: list[str]) -> str:
    return (
        f"{', '.join(caches)} on one trace: {trace_label(cfg)}; page size {page_size};"
        f" batch {batch}"
    )


def plot_sweep(
    sweeps: list[CacheSweep], path: Path, cfg: WorkloadConfig, page_size: int, batch: int = 8
) -> bool:
    """The caches on the same axes: hit rate against pool size, requests/s against prompt
    length, and the first cache's speed ratio to each other one; a PNG at ``path``, or
    without matplotlib the same data as ``path`` with a .csv suffix (returns whether it
    plotted)."""
    plt = _pyplot()
    if plt is None:
        csv = path.with_suffix(".csv")
        rows = ["cache,series,x,y"]
        for s in sweeps:
            rows += [f"{s.cache},hit_rate_vs_pool_tokens,{x},{y:.6f}" for x, y in s.hit_rate]
            rows += [f"{s.cache},requests_per_s_vs_prompt_len,{x},{y:.1f}" for x, y in s.speed]
            for x, low, high in s.spread:
                rows.append(f"{s.cache},requests_per_s_min_vs_prompt_len,{x},{low:.1f}")
                rows.append(f"{s.cache},requests_per_s_max_vs_prompt_len,{x},{high:.1f}")
        csv.write_text("\n".join(rows) + "\n")
        print(f"matplotlib is not installed (pip install matplotlib): wrote {csv} instead")
        return False
    figure = draw_sweep(plt, sweeps, cfg, page_size, batch)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    print(f"wrote {path}")
    return True


STYLES = (("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."))  # lines that coincide stay visible


def draw_sweep(
    plt: Any, sweeps: list[CacheSweep], cfg: WorkloadConfig, page_size: int, batch: int
) -> Any:
    """The three panels of ``plot_sweep`` as a matplotlib figure. A cache keeps its colour
    and marker in every panel; the ratio labels of alternate peers sit above and below
    their points, so two close ratios never print over each other."""
    figure, (hits, speed, ratio) = plt.subplots(1, 3, figsize=(16, 5))
    styles = {s.cache: _style(i) for i, s in enumerate(sweeps)}
    for s in sweeps:
        hits.plot(*zip(*s.hit_rate, strict=True), label=s.cache, **styles[s.cache])
        speed.plot(*zip(*s.speed, strict=True), label=s.cache, **styles[s.cache])
        if s.spread:  # the slowest and fastest run around the median
            xs, lows, highs = zip(*s.spread, strict=True)
            speed.fill_between(xs, lows, highs, color=styles[s.cache]["color"], alpha=0.2)
    pool_ticks = [x for x, _ in sweeps[0].hit_rate]
    _log2_ticks(hits, pool_ticks)
    hits.set(
        xlabel=f"KV pool (tokens; a prompt is ~{cfg.prompt_len:,})",
        ylabel="hit rate",
        title="hit rate against pool size",
    )
    length_ticks = [x for x, _ in sweeps[0].speed]
    _log2_ticks(speed, length_ticks)
    speed.set_ylim(bottom=0)
    speed.yaxis.set_major_formatter(lambda y, _: f"{y / 1000:g}k" if y else "0")
    speed.set(
        xlabel="typical prompt length (tokens)",
        ylabel="requests/s (cache CPU time; band: slowest to fastest run)",
        title=f"speed against prompt length (pool: {SPEED_POOL_PROMPTS} prompts)",
    )
    _draw_ratios(ratio, sweeps, styles, length_ticks)
    for axes in (hits, speed, ratio):
        axes.grid(True, alpha=0.3)
        axes.legend()
    figure.suptitle(sweep_title(cfg, page_size, batch, [s.cache for s in sweeps]))
    figure.tight_layout()
    return figure


def _draw_ratios(
    ratio: Any, sweeps: list[CacheSweep], styles: dict[str, dict[str, Any]], ticks: list[int]
) -> None:
    """The third panel: the first cache's speed over each peer's, a band from the slowest
    to the fastest ratio, each point labelled (alternate peers above and below)."""
    ranges = ratio_ranges(sweeps)
    for n, (peer, points) in enumerate(speed_ratios(sweeps).items()):
        ratio.plot(*zip(*points, strict=True), label=f"÷ {peer}", **styles[peer])
        if peer in ranges:
            xs, lows, highs = zip(*ranges[peer], strict=True)
            ratio.fill_between(xs, lows, highs, color=styles[peer]["color"], alpha=0.2)
        for x, y in points:
            below = n % 2 == 1
            ratio.annotate(
                f"{y:.2f}x",
                (x, y),
                textcoords="offset points",
                xytext=(0, -13 if below else 6),
                ha="center",
                fontsize=8,
                color=styles[peer]["color"],
            )
    ratio.axhline(1.0, color="grey", linewidth=0.8)
    ratio.margins(y=0.15)
    _log2_ticks(ratio, ticks)
    ratio.set(
        xlabel="typical prompt length (tokens)",
        ylabel=f"{sweeps[0].cache} requests/s ÷ peer's",
        title=f"{sweeps[0].cache}'s speed over each peer's (above 1: faster)",
    )


def _style(n: int) -> dict[str, Any]:
    marker, line = STYLES[n % len(STYLES)]
    return {"color": f"C{n}", "marker": marker, "linestyle": line}


def _log2_ticks(axes: Any, ticks: list[int]) -> None:
    """A base-2 log axis with exactly these ticks, labelled short, and no minor labels to
    crowd them."""
    axes.set_xscale("log", base=2)
    axes.set_xticks(ticks, [_compact(x) for x in ticks])
    axes.minorticks_off()


def _compact(n: int) -> str:
    """4096 -> '4k', 1048576 -> '1M': tick labels short enough not to collide."""
    for size, suffix in ((1 << 20, "M"), (1 << 10, "k")):
        if n >= size and n % (size // 4) == 0:
            return f"{n / size:g}{suffix}"
    return f"{n:,}"

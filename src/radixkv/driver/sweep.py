"""Sweeps of one trace and their plots: hit rate per eviction policy against pool size
(``--policy-plot``), and hit rate against pool size with requests/s against prompt length
(``--plot``). A PNG with matplotlib, else the same data as CSV."""

from __future__ import annotations

import sys
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


def plot_sweep(cache_name: str, cfg: WorkloadConfig, path: Path, page_size: int = 1) -> None:
    """Hit rate against pool size, and requests/s against prompt length."""
    capacity: list[tuple[int, float]] = []
    for prompts in (4, 8, 16, 32, 64, 128, 256):
        pool = prompts * cfg.prompt_len
        report = replay(cache_name, generate(cfg), page_size=page_size, pool_size=pool)
        capacity.append((pool, report.hit_rate()))
        print(f"  pool {pool:>10,}: hit rate {report.hit_rate():.4f}", file=sys.stderr)
    speed: list[tuple[int, float]] = []
    for length in (256, 512, 1024, 2048, 4096, 8192):
        sized = WorkloadConfig(seed=cfg.seed, requests=cfg.requests, prompt_len=length)
        report = replay(cache_name, generate(sized), page_size=page_size, pool_size=48 * length)
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
    right.set(xscale="log", xlabel="prompt length", ylabel="requests/s", title=cache_name)
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")

"""``radixkv drive --policy`` and the hit-rate-per-policy sweep (radixkv.driver.drive)."""

from __future__ import annotations

import builtins
import sys
from pathlib import Path
from typing import Any

import pytest

from radixkv import POLICIES
from radixkv.driver import drive as driver
from radixkv.driver.drive import cache_factory, policy_sweep, policy_table, replay
from radixkv.driver.workload import WorkloadConfig, generate

SMALL = WorkloadConfig(seed=1, requests=60, prompt_len=128)


def test_the_default_replay_is_unchanged_by_policies() -> None:
    """Digests of the default (LRU) replay, taken on main before policies existed."""
    before = {
        (SMALL.seed, 1): "b1e3865171da9bc9",
        (SMALL.seed, 4): "c6202e1e893a19f8",
    }
    for (_, page_size), digest in before.items():
        for policy in (None, "lru"):
            report = replay(
                "radixkv", generate(SMALL), page_size=page_size, pool_size=128 * 12, policy=policy
            )
            assert report.prefix_digest.startswith(digest), (page_size, policy)
    bigger = WorkloadConfig(seed=2, requests=300, prompt_len=256)
    report = replay("radixkv", generate(bigger), pool_size=256 * 6)
    assert report.prefix_digest.startswith("430d573afeca6fe1")


def test_each_policy_replays_completely_and_the_orders_differ() -> None:
    """Every index comes back (replay checks the pool) under each policy, and the policies
    are really in use: their per-request digests are not all the same."""
    cfg = WorkloadConfig(seed=2, requests=300, prompt_len=256)
    digests = {}
    for policy in POLICIES:
        report = replay("radixkv", generate(cfg), pool_size=256 * 6, policy=policy)
        assert report.policy == policy and report.tokens["evict"] > 0
        assert f"eviction policy {policy}" in report.render()
        digests[policy] = report.prefix_digest
    assert len({digests["lru"], digests["lfu"], digests["mru"], digests["priority"]}) == 4


def test_a_policy_for_a_cache_without_policies_is_refused() -> None:
    with pytest.raises(ValueError, match="--policy applies to"):
        cache_factory("sglang-like", "lfu")
    with pytest.raises(ValueError, match="unknown policy"):
        cache_factory("radixkv", "lfru")
    assert cache_factory("radixkv") is driver.CACHES["radixkv"]


def test_the_sweep_table_has_a_row_per_pool_and_a_column_per_policy() -> None:
    sweep = policy_sweep("radixkv", SMALL, prompts=(8, 16), policies=("lru", "mru"))
    assert [pool for pool, _ in sweep["lru"]] == [8 * 128, 16 * 128]
    table = policy_table(sweep, SMALL.prompt_len).splitlines()
    assert table[0] == "| pool (tokens) | prompts | lru | mru |"
    assert len(table) == 4 and table[2].startswith("| 1,024 | 8 |")
    best = max(rate for _, rate in (sweep["lru"][0], sweep["mru"][0]))
    assert f"**{best:.3f}**" in table[2]


def test_without_matplotlib_the_plot_is_a_csv_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    for name in [m for m in sys.modules if m.startswith("matplotlib")]:
        monkeypatch.delitem(sys.modules, name)
    sweep = {"lru": [(1024, 0.25), (2048, 0.5)], "lfu": [(1024, 0.3), (2048, 0.4)]}
    assert not driver.plot_policies(sweep, tmp_path / "p.png", "t")
    assert "matplotlib is not installed" in capsys.readouterr().out
    rows = (tmp_path / "p.csv").read_text().splitlines()
    assert rows == [
        "policy,pool_tokens,hit_rate",
        "lru,1024,0.250000",
        "lru,2048,0.500000",
        "lfu,1024,0.300000",
        "lfu,2048,0.400000",
    ]
    assert not (tmp_path / "p.png").exists()


def test_the_cli_takes_policy(capsys: pytest.CaptureFixture[str]) -> None:
    from radixkv_conformance.cli import main

    args = ["drive", "--requests", "40", "--prompt-len", "128", "--pool-size", "1536"]
    assert main([*args, "--policy", "mru", "--no-progress"]) == 0
    assert "eviction policy mru" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([*args, "--policy", "lfru"])

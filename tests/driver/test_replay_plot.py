"""``radixkv drive --plot``: caches swept over one trace and drawn on the same axes, the
numbers on stdout; and ``radixkv drive --help`` in plain text with its defaults."""

from __future__ import annotations

import importlib.util
import itertools
import subprocess
import sys
from pathlib import Path

import pytest
from radixkv_conformance.cli import main

from radixkv.driver import sweep as sweeps_module
from radixkv.driver.caches import CACHES, RadixkvListReplay
from radixkv.driver.drive import resolve_cache
from radixkv.driver.sweep import (
    CacheSweep,
    cache_sweep,
    draw_sweep,
    plot_sweep,
    ratio_ranges,
    speed_ratios,
    sweep_table,
    sweep_title,
)
from radixkv.driver.workload import WorkloadConfig

TINY = WorkloadConfig(seed=3, requests=24, prompt_len=64)
MADE_UP = [
    CacheSweep("radixkv", [(4096, 0.2), (8192, 0.5)], [(256, 3000.0), (512, 1500.0)]),
    CacheSweep("sglang", [(4096, 0.2), (8192, 0.5)], [(256, 2000.0), (512, 1200.0)]),
]


def test_replay_help_is_plain_text_with_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["drive", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "``" not in text, "reStructuredText markup in --help"
    for default in ("(default: radixkv)", "(default: 2000)", "(default: 2048)", "(default: 8)"):
        assert default in text


def test_sweep_numbers_go_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    sweep = cache_sweep("radixkv", TINY, pool_prompts=(4, 8), prompt_lens=(32, 64))
    out, err = capsys.readouterr()
    assert err == ""
    assert [pool for pool, _ in sweep.hit_rate] == [4 * 64, 8 * 64]
    assert [length for length, _ in sweep.speed] == [32, 64]
    assert out.count("hit rate") == 2 and out.count("req/s") == 2


def test_each_speed_point_is_the_median_of_its_runs_with_their_spread(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sweep = cache_sweep("radixkv", TINY, pool_prompts=(4,), prompt_lens=(32, 64), repeats=3)
    assert [length for length, *_ in sweep.spread] == [32, 64]
    for (_, median), (_, low, high) in zip(sweep.speed, sweep.spread, strict=True):
        assert 0 < low <= median <= high
    assert capsys.readouterr().out.count("of 3)") == 2
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        cache_sweep("radixkv", TINY, pool_prompts=(4,), prompt_lens=(32,), repeats=0)


def test_the_ratio_range_is_what_the_runs_allow() -> None:
    spread = [
        CacheSweep("radixkv", [], [(256, 3000.0)], [(256, 2400.0, 3600.0)]),
        CacheSweep("sglang", [], [(256, 2000.0)], [(256, 1600.0, 2400.0)]),
    ]
    assert ratio_ranges(spread) == {"sglang": [(256, 1.0, 2.25)]}  # 2400/2400, 3600/1600
    assert sweep_table(spread).splitlines()[2] == (
        "| 256 | 3,000 (2,400 to 3,600) | 2,000 (1,600 to 2,400) | 1.50x (1.00 to 2.25) |"
    )
    assert ratio_ranges(MADE_UP) == {}  # single runs: no range to draw


def test_replay_refuses_zero_repeats(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["drive", "--plot", "x.png", "--repeats", "0"])
    assert done.value.code == 2
    assert "expected a whole number, 1 or more" in capsys.readouterr().err


def test_the_ratio_is_the_first_caches_speed_over_each_peers() -> None:
    assert speed_ratios(MADE_UP) == {"sglang": [(256, 1.5), (512, 1.25)]}
    table = sweep_table(MADE_UP).splitlines()
    assert table[0] == "| prompt | radixkv | sglang | radixkv ÷ sglang |"
    assert table[2] == "| 256 | 3,000 | 2,000 | 1.50x |"


def test_without_matplotlib_every_cache_is_in_the_csv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweeps_module, "_pyplot", lambda: None)
    assert not plot_sweep(MADE_UP, tmp_path / "sweep.png", TINY, page_size=16)
    rows = (tmp_path / "sweep.csv").read_text().splitlines()
    assert rows[0] == "cache,series,x,y"
    assert {row.split(",")[0] for row in rows[1:]} == {"radixkv", "sglang"}
    assert "sglang,requests_per_s_vs_prompt_len,512,1200.0" in rows


def test_a_peer_by_module_and_factory_is_registered_under_its_name() -> None:
    class Renamed(RadixkvListReplay):
        name = "renamed-peer"

    globals()["Renamed"] = Renamed
    try:
        assert resolve_cache(f"{__name__}:Renamed") == "renamed-peer"
        assert CACHES["renamed-peer"] is Renamed
        assert resolve_cache("radixkv") == "radixkv"
        with pytest.raises(LookupError, match="unknown cache 'nope'"):
            resolve_cache("nope")
    finally:
        CACHES.pop("renamed-peer", None)
        globals().pop("Renamed")


BOTH_SGLANG_TREES = """
from radixkv_conformance import cli
from radixkv.driver.drive import resolve_cache
from radixkv.driver.scheduler import replay
from radixkv.driver.workload import WorkloadConfig, generate

cli._parser()  # registers "sglang" (the kit's adapter), as `radixkv drive` does
requests = list(generate(WorkloadConfig(seed=3, requests=24, prompt_len=64)))
for name in ("sglang", "benchmarks.sglang_peers:SglangRustReplay"):  # the kit's loader first
    report = replay(resolve_cache(name), requests, page_size=1, pool_size=64 * 8)
    print(report.requests)
"""


@pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("sglang", "msgspec", "numpy")),
    reason="sglang's Rust controller needs the sglang wheel, msgspec and numpy "
    "(pip install --no-deps sglang==0.5.23 msgspec numpy)",
)
def test_sglang_and_then_its_rust_core_replay_in_one_process() -> None:
    """``--compare sglang --compare benchmarks.sglang_peers:SglangRustReplay``: the kit's
    loader stubs modules the benchmark's loader needs for real (the Rust controller's
    allocator package); in that order both trees still load and replay. A fresh process:
    what an earlier test loaded must not decide it."""
    done = subprocess.run(
        [sys.executable, "-c", BOTH_SGLANG_TREES],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["24", "24"]


def test_the_plot_puts_every_cache_on_the_same_axes_with_readable_ticks() -> None:
    pytest.importorskip("matplotlib", reason="plotting is optional: no matplotlib")
    plt = sweeps_module._pyplot()  # pyplot on the Agg backend

    figure = draw_sweep(plt, MADE_UP, TINY, page_size=16, batch=8)
    try:
        figure.canvas.draw()
        hits, speed, ratio = figure.axes
        assert len(hits.get_lines()) == len(speed.get_lines()) == 2  # both caches, same axes
        title = sweep_title(TINY, 16, 8, ["radixkv", "sglang"])
        assert figure._suptitle.get_text() == title
        assert "radixkv, sglang" in title and "page size 16" in title and "24 requests" in title
        assert [line.get_color() for line in speed.get_lines()] == [
            line.get_color() for line in hits.get_lines()
        ]
        assert ratio.get_lines()[0].get_color() == speed.get_lines()[1].get_color()
        assert "pool" in speed.get_title()
        assert [t.get_text() for t in ratio.texts] == ["1.50x", "1.25x"]
        renderer = figure.canvas.get_renderer()
        for axes in figure.axes:
            labels = [t for t in axes.get_xticklabels() if t.get_text() and t.get_visible()]
            boxes = [t.get_window_extent(renderer) for t in labels]
            assert len(boxes) >= 2
            for a, b in itertools.combinations(boxes, 2):
                assert not a.overlaps(b), f"overlapping tick labels on {axes.get_title()!r}"
    finally:
        plt.close(figure)

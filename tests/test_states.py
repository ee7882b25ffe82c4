"""Breadth-first state exploration: sound merging, shortest counterexamples, fixpoints."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from radixkv_conformance.adapters import planted
from radixkv_conformance.adapters.radixkv import radix_cache
from radixkv_conformance.cli import main
from radixkv_conformance.exhaustive import explore, own_targets, target
from radixkv_conformance.profile import RADIXKV
from radixkv_conformance.replay import replay
from radixkv_conformance.states import Bounds, explore_states, parse_bounds

pytestmark = pytest.mark.search  # kit explorations: run once, not again on the pure key path

TINY = parse_bounds("tokens=1,length=1,locks=1")
LOCKED = functools.partial(planted.factory, bugs="locked")


def _machine(factory: Any, name: str = "States") -> Any:
    return target(name, factory, RADIXKV).machine()


def test_bounds_parse_and_print() -> None:
    bounds = parse_bounds("page=1+2,length=2,namespaces=2,evict=1+all,depth=5")
    assert bounds.pages == (1, 2) and bounds.length == 2 and bounds.depth == 5
    assert parse_bounds(bounds.text()) == bounds
    with pytest.raises(LookupError):
        parse_bounds("colour=3")


@pytest.mark.parametrize("factory", [radix_cache, LOCKED], ids=["radixkv", "planted-locked"])
def test_merging_is_sound(factory: Any) -> None:
    """Merged and unmerged exploration to the same depth reach the same outcomes (spec
    state, the cache's contents and sizes) and the same findings: whatever a merged-away
    state would have led to, its representative leads to as well."""
    bounds = Bounds(tokens=1, length=1, locks=1, depth=3)
    merged = explore_states(_machine(factory), bounds)
    every = explore_states(_machine(factory), bounds, merge=False)
    assert merged.outcomes == every.outcomes
    assert merged.findings.keys() == every.findings.keys()
    assert merged.states < every.states  # merging did merge something


def test_a_planted_bug_is_found_with_a_shortest_replayable_trace() -> None:
    report = explore_states(_machine(LOCKED), Bounds(tokens=1, length=1, locks=1, depth=4))
    assert not report.passed
    shortest = min(report.findings.values(), key=lambda f: len(f.steps))
    every = explore(_machine(LOCKED), TINY.alphabet(), len(shortest.steps)).findings
    assert min(len(f.steps) for f in every.values()) == len(shortest.steps)
    assert shortest.trace is not None
    assert not replay(shortest.trace, LOCKED, RADIXKV).passed
    assert replay(shortest.trace, planted.factory, RADIXKV).passed


def test_a_tiny_bound_reaches_its_fixpoint() -> None:
    chunk = next(t for t in own_targets() if t.label == "ChunkCache")
    report = explore_states(chunk.machine(), TINY)
    assert report.fixpoint and report.passed, report.render()
    assert report.states >= len(report.outcomes)


def test_the_cli_writes_a_trace_per_finding(tmp_path: Path) -> None:
    argv = ["check", "--states", "tokens=1,length=1,locks=1,depth=4"]
    target = ["radixkv_conformance.adapters.planted:factory", "--option", "bugs=locked"]
    assert main([*argv, *target, "--traces", str(tmp_path)]) == 1
    assert list(tmp_path.glob("states-*.json"))

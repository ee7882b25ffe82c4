"""Breadth-first state exploration: sound merging, shortest counterexamples, fixpoints."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, cast

import pytest
from radixkv_conformance.adapters import planted
from radixkv_conformance.adapters.radixkv import (
    PROFILES,
    RadixCacheAdapter,
    mamba,
    radix_cache,
    sliding_window,
)
from radixkv_conformance.cli import main
from radixkv_conformance.explore.bounds import TREE, Bounds, parse_bounds
from radixkv_conformance.explore.sequences import explore, own_targets, target
from radixkv_conformance.explore.states import explore_states
from radixkv_conformance.profile import RADIXKV
from radixkv_conformance.protocol import Host
from radixkv_conformance.replay import replay

from tests.helpers import RecordingHost

pytestmark = pytest.mark.search  # kit explorations: run once, not again on the pure key path

TINY = parse_bounds("tokens=1,length=1,locks=1")
LOCKED = functools.partial(planted.factory, bugs="locked")


def _machine(factory: Any, name: str = "States", profile: Any = RADIXKV) -> Any:
    return target(name, factory, profile).machine()


def _adapter() -> RadixCacheAdapter:
    """radixkv's RadixCache with a host that records what it frees (and takes no slots)."""
    return radix_cache(1, cast(Host, RecordingHost()))


def test_bounds_parse_and_print() -> None:
    bounds = parse_bounds("page=1+2,length=2,namespaces=2,evict=1+all,depth=5")
    assert bounds.pages == (1, 2) and bounds.length == 2 and bounds.depth == 5
    assert parse_bounds(bounds.text()) == bounds
    with pytest.raises(LookupError):
        parse_bounds("colour=3")


def test_a_preset_takes_changes_after_its_name() -> None:
    """``--explore tree,memory=1``, as the adapter guide writes it: the preset, changed."""
    changed = parse_bounds("tree,memory=1")
    assert changed.memory == 1 and changed == dataclasses.replace(TREE, memory=1)
    assert parse_bounds("tree") == TREE
    with pytest.raises(LookupError, match="or a preset: tiny, ci, tree, large"):
        parse_bounds("forest,memory=1")


SOUNDNESS = {  # factory, depth: each canonical form against exploring every state
    "radixkv": (radix_cache, 3),  # canonical_state: nodes by place, ids and stamps ranked
    "radixkv-swa": (sliding_window, 2),  # ... and SWA's lock records (depth 3: 70 s)
    "radixkv-mamba": (mamba, 2),  # ... and the mamba LRU list (depth 3: 70 s)
    "planted-locked": (LOCKED, 3),  # no hook: snapshot, contents and sizes, renamed
}


@pytest.mark.parametrize("name", list(SOUNDNESS))
def test_merging_is_sound(name: str) -> None:
    """Merged and unmerged exploration to the same depth reach the same outcomes (spec
    state with ticks ranked, the cache's canonical picture) and the same findings: whatever
    a merged-away state would have led to, its representative leads to as well."""
    factory, depth = SOUNDNESS[name]
    profile = PROFILES.get(getattr(factory, "__name__", ""), RADIXKV)
    bounds = Bounds(tokens=1, length=1, locks=1, depth=depth)
    merged = explore_states(_machine(factory, profile=profile), bounds)
    every = explore_states(_machine(factory, profile=profile), bounds, merge=False)
    assert merged.outcomes == every.outcomes
    assert merged.findings.keys() == every.findings.keys()
    assert merged.states < every.states / 2  # merging did merge, and much


def test_radix_cache_reaches_its_fixpoint() -> None:
    """With ``canonical_state`` the cache's own ids and stamps no longer keep equivalent
    states apart: every state the bounds admit is reached (without it, no fixpoint within
    two minutes). ``--states ci`` (tox -e stateful) shows the same for SWA and Mamba."""
    radix = next(t for t in own_targets() if t.label == "RadixCache")
    report = explore_states(radix.machine(), TINY)
    assert report.fixpoint and report.passed, report.render()
    assert report.states < 150 and report.max_depth >= 7, report.render()


def test_canonical_state_names_every_handle() -> None:
    """The hook names each handle it is given by the node it leads to, the same node by
    the same name whichever object the cache returned for it."""
    adapter = _adapter()
    first = adapter.insert((0, 1), None, (1024, 1025)).handle
    again = adapter.match((0, 1), None).handle
    upper = adapter.match((0,), None).handle  # splits: a new node above ``first``
    picture, names = adapter.canonical_state([first, again, upper, None])
    assert names[0] == names[1] != names[2]
    assert names[3] == ("value", None)
    other_order = _adapter()
    other_order.insert((0, 1), None, (1024, 1025))
    other_order.match((0,), None)
    other_order.match((0, 1), None)  # the same tree, the lower node as recent as the upper
    assert other_order.canonical_state([])[0] != picture
    later = _adapter()
    later.insert((1,), None, (2000,))
    later.evict(1 << 20)  # a node id, stamps and an index spent before the same three steps
    later.insert((0, 1), None, (1024, 1025))
    later.match((0, 1), None)
    later.match((0,), None)
    assert later.canonical_state([])[0] == picture  # other ids and stamps, the same ranks
    assert later.snapshot() != adapter.snapshot()


def test_a_planted_bug_is_found_with_a_shortest_replayable_trace() -> None:
    report = explore_states(_machine(LOCKED), Bounds(tokens=1, length=1, locks=1, depth=4))
    assert not report.passed
    shortest = min(report.findings.values(), key=lambda f: len(f.calls))
    every = explore(_machine(LOCKED), TINY.alphabet(), len(shortest.calls)).findings
    assert min(len(f.calls) for f in every.values()) == len(shortest.calls)
    assert shortest.trace
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


class _NamesTooFew(RadixCacheAdapter):
    """A ``canonical_state`` that forgets to name the handles it is given."""

    def canonical_state(self, handles: Any) -> tuple[Any, tuple[Any, ...]]:
        picture, _ = super().canonical_state(handles)
        return picture, ()


def test_a_hook_that_names_too_few_handles_is_a_clear_error() -> None:
    def too_few(page_size: int, host: Host) -> _NamesTooFew:
        return _NamesTooFew(page_size, host)

    with pytest.raises(ValueError, match="canonical_state named 0 of"):
        explore_states(_machine(too_few), Bounds(tokens=1, length=1, locks=1, depth=2))

"""An SWA lock's exact extent where the adapter shows its nodes (issue 39, deliverable 5).

Engines lock whole nodes: from the locked node up, each while fewer than W tokens are
covered, stopping at a tombstone. The spec alone knows no node boundaries, so it bounds the
SWA-locked pages by a range (``minimum_windows`` .. ``maximum_windows``), and a cache whose
lock goes on one node past a window of exactly W tokens passed the kit. An adapter that
reports where its nodes begin (capability ``node_boundaries``) is judged on each lock's
exact extent (``radixkv_spec.swa_window.exact_window``).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from radixkv_conformance import run_conformance
from radixkv_conformance.adapters.radixkv import (
    RadixCacheAdapter,
    SlidingWindowAdapter,
    sliding_window,
)
from radixkv_conformance.explore.bounds import parse_bounds
from radixkv_conformance.explore.sequences import target
from radixkv_conformance.explore.states import explore_states
from radixkv_conformance.profile import RADIXKV, RADIXKV_SWA, Profile
from radixkv_conformance.protocol import AdapterError, Host
from radixkv_conformance.registry import machine_for
from radixkv_conformance.replay import replay
from radixkv_spec.swa_window import WindowTombstones, exact_window, handle_window
from radixkv_spec.tokens import Position

from radixkv.parts.swa import SlidingWindow, SwaTreeNode, WindowLock, start_of
from radixkv.tree import path_to_root

pytestmark = pytest.mark.search  # kit searches: run once, not again on the pure key path

# ---- the spec function -------------------------------------------------------------------


def _pages(*paths: tuple[int, ...]) -> frozenset[Position]:
    return frozenset((None, path) for path in paths)


PATH = (1, 2, 3)  # page size 1: the pages (1,), (1, 2), (1, 2, 3)


@pytest.mark.parametrize(
    ("starts", "window", "locked"),
    [
        ([0, 1, 2], 1, [(1, 2, 3)]),  # the last node holds W tokens: nothing above
        ([0, 1, 2], 2, [(1, 2), (1, 2, 3)]),  # exactly W covered by two nodes: it stops
        ([0, 1], 1, [(1, 2), (1, 2, 3)]),  # a node longer than needed is taken whole
        ([0], 1, [(1,), (1, 2), (1, 2, 3)]),
        ([0, 2], 8, [(1,), (1, 2), (1, 2, 3)]),  # the whole path holds fewer than W
    ],
)
def test_whole_nodes_from_the_locked_one_up_until_w_tokens(
    starts: list[int], window: int, locked: list[tuple[int, ...]]
) -> None:
    assert exact_window(None, PATH, starts, set(), 1, window) == _pages(*locked)


@pytest.mark.parametrize(
    ("through", "window", "locked"),
    [
        ("stop", 4, [(1, 2, 3)]),  # radixkv: nothing above a tombstone
        ("count", 2, [(1, 2, 3)]),  # sglang: the tombstone's token fills the window
        ("count", 4, [(1,), (1, 2, 3)]),
        ("skip", 2, [(1,), (1, 2, 3)]),  # pymllm: uncounted, the walk goes on
    ],
)
def test_a_tombstone_node_is_never_locked_and_ends_the_window_as_the_policy_says(
    through: WindowTombstones, window: int, locked: list[tuple[int, ...]]
) -> None:
    tombstones = {(None, (1, 2))}
    assert exact_window(None, PATH, [0, 1, 2], tombstones, 1, window, through) == _pages(*locked)


def test_page_size_four_takes_whole_nodes_of_whole_pages() -> None:
    path = tuple(range(12))  # pages ending at 4, 8, 12
    pages = {n: (None, path[:n]) for n in (4, 8, 12)}
    assert exact_window(None, path, [0, 4, 8], set(), 4, 4) == {pages[12]}
    assert exact_window(None, path, [0, 8], set(), 4, 4) == {pages[12]}
    assert exact_window(None, path, [0, 4], set(), 4, 4) == {pages[8], pages[12]}
    assert exact_window(None, path, [0, 4, 8], set(), 4, 5) == {pages[8], pages[12]}
    assert exact_window(None, path, [0, 4, 8], {pages[8]}, 4, 5) == {pages[12]}


@st.composite
def _locked_paths(draw: st.DrawFn) -> tuple[Any, ...]:
    """A path, the nodes along it, whole nodes tombstoned, a page size and a window."""
    p = draw(st.sampled_from([1, 2, 4]))
    pages = draw(st.integers(1, 6))
    path = tuple(range(pages * p))
    starts = sorted({0, *draw(st.sets(st.integers(0, pages - 1), max_size=pages))})
    ends = [*starts[1:], len(path) // p]
    dead = draw(st.lists(st.booleans(), min_size=len(starts), max_size=len(starts)))
    tombstones = {
        (None, path[: q * p])
        for start, end, tomb in zip(starts, ends, dead, strict=True)
        if tomb
        for q in range(start + 1, end + 1)
    }
    through = draw(st.sampled_from(["stop", "count", "skip"]))
    return path, [s * p for s in starts], tombstones, p, draw(st.integers(1, 9)), through


@settings(max_examples=300, deadline=None, database=None)
@given(_locked_paths())
def test_the_exact_extent_lies_within_the_range(case: tuple[Any, ...]) -> None:
    """The contract CrossHair checks, by examples: at least the page-by-page window, at most
    every page the range admits."""
    path, starts, tombstones, p, window, through = case
    exact = exact_window(None, path, starts, tombstones, p, window, through)
    assert handle_window(None, path, tombstones, p, window, through) <= exact
    assert exact <= handle_window(None, path, tombstones, p, None, through)


# ---- the kit: a lock one node too long -----------------------------------------------------


class OneNodeLongWindow(SlidingWindow):
    """radixkv's SWA lock, but it goes on while ``covered <= W``: a window that already holds
    exactly W tokens takes one node more (still live, below every tombstone: in the range)."""

    def lock(self, node: SwaTreeNode) -> int:
        covered, top = 0, start_of(node) + node.length
        for n in path_to_root(node):
            if n.swa_tombstone or covered > self.window:  # the planted bug: > for >=
                break
            if n.swa_lock_ref == 0:
                self._evictable -= n.length
                self._protected += n.length
            n.swa_lock_ref += 1
            covered += n.length
            top -= n.length
        lock_id = next(self._lock_ids)
        self._locks[lock_id] = WindowLock(node, top)
        return lock_id


def one_node_long(page_size: int, host: Host) -> SlidingWindowAdapter:
    adapter = sliding_window(page_size, host)
    part: Any = adapter.cache._part  # the cache's SlidingWindow, typed as any Part
    part.__class__ = OneNodeLongWindow
    return adapter


class RangeOnlyAdapter(SlidingWindowAdapter):
    """radixkv's SWA adapter without the claim: the kit judges its locks by the range."""

    capabilities = SlidingWindowAdapter.capabilities - {"node_boundaries"}


def one_node_long_without_nodes(page_size: int, host: Host) -> SlidingWindowAdapter:
    adapter = one_node_long(page_size, host)
    adapter.__class__ = RangeOnlyAdapter
    return adapter


QUICK = settings(max_examples=40, stateful_step_count=20, deadline=None, database=None)
# insert [0 0], insert [0] (a split: [0] | [0]), lock the lower node, free SWA KV: four
# steps; the rules no such sequence needs are left to the search (a fifth of the time)
FOUR_STEPS = parse_bounds(
    "tokens=1,length=2,namespaces=1,locks=1,depth=4,"
    "skip=bad_call+refresh_often+reset+unlock_without_lock+evict+match+page_hashes"
)
BEYOND = "INV-21:lock-beyond-its-nodes"
RANGE_LINE = "SWA locks judged as a range (a lock's last W tokens up to the path's first tombstone)"


def _run(factory: Any) -> Any:
    return run_conformance(
        factory, profile=RADIXKV_SWA, settings=QUICK, name=factory.__name__, explore=FOUR_STEPS
    )


def test_a_lock_one_node_past_its_window_is_found() -> None:
    report = _run(one_node_long)
    assert [f.finding for f in report.failures] == [BEYOND], report.render()
    found = report.failures[0]
    assert "exact extent" in found.message
    assert len(found.trace["steps"]) == 3  # insert, insert (a split), lock: at the lock
    assert replay(found.trace, one_node_long, RADIXKV_SWA).finding == BEYOND
    assert replay(found.trace, sliding_window, RADIXKV_SWA).passed
    assert RANGE_LINE not in report.render()


def test_without_node_boundaries_the_range_admits_it_and_the_report_says_so() -> None:
    report = _run(one_node_long_without_nodes)
    assert report.passed, report.render()
    assert RANGE_LINE in report.render()
    assert sum(RANGE_LINE in line for line in report.render().splitlines()) == 1


class RootlessReportAdapter(SlidingWindowAdapter):
    """Reports the nodes along a path without the first one's start (no 0)."""

    def node_starts(self, tokens: tuple[int, ...], namespace: Any) -> list[int]:
        return super().node_starts(tokens, namespace)[1:]


def rootless_report(page_size: int, host: Host) -> SlidingWindowAdapter:
    adapter = sliding_window(page_size, host)
    adapter.__class__ = RootlessReportAdapter
    return adapter


def test_a_report_of_node_starts_without_zero_is_a_finding() -> None:
    report = _run(rootless_report)
    assert [f.finding for f in report.failures] == ["INV-21:lock-node-starts"], report.render()
    assert "not distinct sorted offsets from 0" in report.failures[0].message


def test_radixkv_locks_exactly_its_nodes() -> None:
    report = _run(sliding_window)
    assert report.passed, report.render()


def test_swa_states_still_reach_their_fixpoint() -> None:
    """The extents are pictured by their locks, not by the steps that took them: equivalent
    states still merge, and every state within the CI bounds is reached."""
    machine = target("swa", sliding_window, RADIXKV_SWA).machine()
    report = explore_states(machine, parse_bounds("tokens=1,length=1,locks=1"))
    assert report.fixpoint and report.passed, report.render()


# ---- the adapters' reports and the claim -----------------------------------------------------


class _Host:
    page_size = 1
    sliding_window = 2

    def __call__(self, indices: tuple[int, ...]) -> None:
        self.free(indices)

    def free(self, indices: tuple[int, ...]) -> None:
        """Nothing to record."""

    def free_swa(self, indices: tuple[int, ...]) -> None:
        """Nothing to record."""


def test_radixkv_reports_where_its_nodes_begin() -> None:
    cache = sliding_window(1, _Host())  # type: ignore[arg-type]  # frees only, no slots
    cache.insert((1, 2, 3), None, (10, 11, 12))
    cache.insert((1, 5), None, (10, 15))  # splits [1 2 3] into [1] | [2 3]
    assert cache.node_starts((1, 2, 3), None) == [0, 1]
    assert cache.node_starts((1, 5), None) == [0, 1]
    assert cache.node_starts((1, 2, 3), "a") == []  # another namespace: nothing cached


class PlainWithNodes(RadixCacheAdapter):
    """A cache without a window that claims node boundaries: nothing the kit could judge."""

    capabilities = RadixCacheAdapter.capabilities | {"node_boundaries"}

    def node_starts(self, tokens: tuple[int, ...], namespace: Any) -> list[int]:
        return [0] if tokens else []


def test_a_claim_without_a_window_is_refused() -> None:
    with pytest.raises(AdapterError, match=r"node_boundaries.*needs capability 'swa'"):
        machine_for("plain", PlainWithNodes, RADIXKV)


def test_the_tombstone_policy_is_radixkvs_unless_a_profile_says_otherwise() -> None:
    """sglang's profile says ``count``, pymllm's ``skip`` (each module needs its engine)."""
    assert RADIXKV_SWA.swa_window_tombstones == "stop"
    with pytest.raises(ValueError, match="swa_window_tombstones must be stop, count or skip"):
        Profile("walks-on", swa_window_tombstones="walk")  # type: ignore[arg-type]  # refused

"""SWA mode, match_prefix: the window constraint, recency, and splits that keep indices.

A match is usable only if its root path has no tombstone, or ends with at least W live
tokens after the last tombstone (SPEC.md, SWA: match; sglang PR #17061).
"""

from __future__ import annotations

import pytest

from tests.helpers import (
    SWA_PAGES,
    SWA_SHAPES,
    SwaHarness,
    held,
    ids,
    live_nodes,
    path_nodes,
    swa_snapshot,
    token_index_map,
)


def valid_end(lengths: list[int], tombstones: set[int], window: int, upto: int) -> int:
    """Oracle: the longest valid match (in tokens) over the first ``upto`` nodes of a chain."""
    best, live, end = 0, None, 0
    for i, n in enumerate(lengths[:upto]):
        end += n
        live = 0 if i in tombstones else (None if live is None else live + n)
        if live is None or live >= window:
            best = end
    return best


@SWA_SHAPES
def test_a_path_without_tombstones_matches_whole(page: int, window: int) -> None:
    h = SwaHarness.make(page, window)
    nodes = h.chain([page, 2 * page, page])
    tokens = list(range(1000, 1000 + 4 * page))
    for upto in range(1, 5):
        result = h.match(tokens[: upto * page])
        assert result.prefix_len == upto * page
    result = h.match(tokens)
    assert result.last_node is nodes[-1]
    assert ids(result.indices) == held(*path_nodes(nodes[-1]))
    h.check()


@SWA_SHAPES
@pytest.mark.parametrize("live_pages", [1, 2, 3])
def test_match_goes_past_a_tombstone_only_with_w_live_tokens_after_it(
    page: int, window: int, live_pages: int
) -> None:
    """[live 2 pages][tombstone 2 pages][live ``live_pages`` pages, one page a node]."""
    h = SwaHarness.make(page, window)
    lengths = [2 * page, 2 * page] + [page] * live_pages
    nodes = h.chain(lengths, tombstones=[1])
    tokens = list(range(1000, 1000 + sum(lengths)))
    for upto in range(1, len(lengths) + 1):
        end = sum(lengths[:upto])
        result = h.match(tokens[:end])
        live_after = end - 4 * page
        expected = end if upto == 1 or live_after >= window else 2 * page
        assert expected == valid_end(lengths, {1}, window, upto)
        assert result.prefix_len == expected == result.indices.numel()
        assert not result.last_node.swa_tombstone
        assert result.last_node is (nodes[upto - 1] if expected == end else nodes[0])
    h.check()


@pytest.mark.parametrize("window", [2, 3, 5])
def test_exactly_w_live_tokens_after_a_tombstone_is_enough(window: int) -> None:
    """The bound is inclusive: W live tokens qualify, W - 1 do not (off-by-one guard)."""
    h = SwaHarness.make(1, window)
    lengths = [2] + [1] * (window + 1)
    h.chain(lengths, tombstones=[0])
    tokens = list(range(1000, 1000 + sum(lengths)))
    assert h.match(tokens[: 2 + window - 1]).prefix_len == 0
    assert h.match(tokens[: 2 + window]).prefix_len == 2 + window
    assert h.match(tokens).prefix_len == 3 + window


@SWA_PAGES
def test_a_tombstone_right_under_the_root_stops_the_match_at_the_root(page: int) -> None:
    h = SwaHarness.make(page, 8)
    h.chain([2 * page, page], tombstones=[0])
    tokens = list(range(1000, 1000 + 3 * page))
    result = h.match(tokens)
    assert 3 * page < 8 or page == 4  # with page 4 the live tail (4) is still < W=8
    assert result.prefix_len == 0
    assert result.last_node is h.cache.root
    assert result.indices.numel() == 0
    h.check()


@SWA_PAGES
@pytest.mark.parametrize("window", [2, 3])
def test_sglang_pr_17061_the_live_counter_resets_at_every_tombstone(page: int, window: int) -> None:
    """sglang PR #17061: live tokens before a second tombstone must not count after it.

    [tomb 2][live 3][tomb 2][live 1] (in pages): the 3 live pages validate the prefix up to
    them; the last live page alone (1 < W) must not validate the whole path, although the
    live tokens since the *first* tombstone (4) would.
    """
    h = SwaHarness.make(page, window * page)
    lengths = [2 * page, 3 * page, 2 * page, page]
    nodes = h.chain(lengths, tombstones=[0, 2])
    tokens = list(range(1000, 1000 + sum(lengths)))
    result = h.match(tokens)
    assert result.prefix_len == 5 * page
    assert result.last_node is nodes[1]
    assert ids(result.indices) == held(nodes[0], nodes[1])
    h.check()


@SWA_SHAPES
@pytest.mark.parametrize(
    "pattern",
    [
        ([1, 1, 1, 1, 1], [1, 3]),
        ([2, 1, 2, 1, 2], [0, 2]),
        ([1, 3, 1, 1, 2, 1], [0, 2, 4]),
        ([3, 1, 1, 4], [1, 2]),
    ],
    ids=["alternate", "tomb-first", "three", "adjacent"],
)
def test_every_prefix_matches_the_longest_valid_point(
    page: int, window: int, pattern: tuple[list[int], list[int]]
) -> None:
    pages, tombs = pattern
    lengths = [n * page for n in pages]
    h = SwaHarness.make(page, window)
    nodes = h.chain(lengths, tombstones=tombs)
    tokens = list(range(1000, 1000 + sum(lengths)))
    for upto in range(len(lengths) + 1):
        result = h.match(tokens[: sum(lengths[:upto])])
        expected = valid_end(lengths, set(tombs), window, upto)
        assert result.prefix_len == expected
        assert result.last_node is h.cache.root or not result.last_node.swa_tombstone
        assert ids(result.indices) == held(*path_nodes(result.last_node))
        assert sum(len(n) for n in path_nodes(result.last_node)) == expected
    assert [n.swa_tombstone for n in nodes] == [i in tombs for i in range(len(nodes))]
    h.check()


@SWA_PAGES
def test_recency_is_refreshed_on_the_returned_path_in_swa_mode(page: int) -> None:
    """pymllm's _match_swa refreshed nothing (SPEC.md §8, recency on match); here the path
    gets the match's tick, so eviction (both phases) spares what was just matched."""
    h = SwaHarness.make(page, 1)
    a = list(range(100, 100 + 2 * page))
    b = list(range(200, 200 + 2 * page))
    leaf_a = h.put(a).last_node  # older
    leaf_b = h.put(b).last_node
    before = leaf_a.last_access_time
    result = h.match(a)
    assert result.last_node is leaf_a
    assert leaf_a.last_access_time > before
    assert leaf_a.last_access_time > leaf_b.last_access_time
    assert h.cache.evict(1).full_evicted == 2 * page
    assert h.evicted_ids == [leaf_b.id]
    h.check()


@SWA_PAGES
def test_recency_refresh_reaches_every_node_of_the_path_and_guides_phase_two(page: int) -> None:
    h = SwaHarness.make(page, 1)
    shared = list(range(10, 10 + page))
    left = h.put([*shared, *range(100, 100 + page), *range(110, 110 + page)]).last_node
    right = h.put([*shared, *range(200, 200 + page), *range(210, 210 + page)]).last_node
    # both branches: [shared] -> [x] -> [y]; split the left leaf so it has an internal node
    h.match([*shared, *range(100, 100 + page)])
    left_mid = left.parent
    assert left_mid is not None and left_mid.parent is right.parent
    h.match([*shared, *range(200, 200 + page), *range(210, 210 + page)])  # right is newest
    stamp = right.last_access_time
    assert all(n.last_access_time == stamp for n in path_nodes(right))
    assert left_mid.last_access_time < stamp
    assert left.last_access_time < left_mid.last_access_time  # the split-off leaf kept its own
    # phase 2 takes the least recently used SWA-unlocked node first: the left leaf (deleted
    # whole: leaves are never tombstones), then the left internal node, now a leaf
    assert h.cache.evict(0, page).swa_evicted == page
    assert h.evicted_ids == [left.id]
    assert h.cache.evict(0, page).swa_evicted == page
    assert h.evicted_ids == [left.id, left_mid.id]
    assert not any(n.swa_tombstone or n.evicted for n in path_nodes(right))
    h.check()


@SWA_PAGES
def test_nodes_past_the_valid_point_are_not_refreshed(page: int) -> None:
    h = SwaHarness.make(page, 8)
    nodes = h.chain([page, page, page], tombstones=[1])
    tokens = list(range(1000, 1000 + 3 * page))
    stamps = [n.last_access_time for n in nodes]
    result = h.match(tokens)
    assert result.last_node is nodes[0]
    assert nodes[0].last_access_time > stamps[0]
    assert [n.last_access_time for n in nodes[1:]] == stamps[1:]


@SWA_SHAPES
def test_a_split_during_an_swa_match_keeps_every_index(page: int, window: int) -> None:
    """The match ends inside a live node after a tombstone and inside a tombstone: each is
    split, the token -> index map and the pool's full/SWA state stay the same."""
    h = SwaHarness.make(page, window)
    lengths = [4 * page, 4 * page, 4 * page]
    nodes = h.chain(lengths, tombstones=[1])
    tokens = list(range(1000, 1000 + 12 * page))
    before_map = token_index_map(h.cache)
    before_pool = (dict(h.pool.full), dict(h.pool.swa), h.pool.freed, h.pool.swa_freed)
    count = len(live_nodes(h.cache))
    for end in (6 * page, 10 * page, 2 * page):  # inside the tombstone, the live leaf, the top
        result = h.match(tokens[:end])
        assert result.last_node is h.cache.root or not result.last_node.swa_tombstone
        assert token_index_map(h.cache) == before_map
        h.check()
    assert len(live_nodes(h.cache)) == count + 3
    tomb_parts = [n for n in live_nodes(h.cache) if n.swa_tombstone]
    assert sorted(len(n) for n in tomb_parts) == [2 * page, 2 * page]
    assert (dict(h.pool.full), dict(h.pool.swa), h.pool.freed, h.pool.swa_freed) == before_pool
    # the match ending 2 pages into the live leaf is valid iff 2 pages >= W
    result = h.match(tokens[: 10 * page])
    assert result.prefix_len == (10 * page if 2 * page >= window else 4 * page)
    assert nodes[2].parent is not None and nodes[2].parent.parent is not None


@SWA_PAGES
def test_a_match_frees_nothing_and_changes_no_swa_state(page: int) -> None:
    h = SwaHarness.make(page, 2)
    h.chain([page, page, page, page], tombstones=[1])
    before = swa_snapshot(h.cache)
    calls = (list(h.pool.free_calls), list(h.pool.free_swa_calls))
    h.match(list(range(1000, 1000 + 4 * page)))
    after = swa_snapshot(h.cache)
    assert [(r.base.id, r.swa_tombstone, r.swa_lock_ref) for r in after.nodes] == [
        (r.base.id, r.swa_tombstone, r.swa_lock_ref) for r in before.nodes
    ]
    assert after.sizes == before.sizes
    assert (h.pool.free_calls, h.pool.free_swa_calls) == calls

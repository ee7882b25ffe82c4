"""SWA mode, insert: ownership of the caller's indices, tombstones, swa_evicted_seqlen.

In SWA mode the cache takes ownership of ``value[prev_prefix_len:aligned_len]``: it adopts
or frees every one of them; ``value[:prev_prefix_len]`` are the tree's own indices and are
left alone (SPEC.md, SWA: insert and ownership; sglang PRs #29352, #30845).
Every test ends with the pool's conservation check: each index is cached (full KV held,
SWA KV held iff its node is live) or fully freed, and nothing was freed twice.
"""

from __future__ import annotations

import pytest
import torch

from radixkv import RadixKey, UsageError
from tests.helpers import (
    SWA_PAGES,
    SWA_SHAPES,
    SwaHarness,
    assert_swa_sizes,
    held,
    ids,
    live_nodes,
    path_nodes,
    swa_snapshot,
    tombstoned,
)

BASE = 1000


def keyed(page: int, pages: int, base: int = BASE) -> list[int]:
    return list(range(base, base + pages * page))


def tombstone_setup(page: int, window: int) -> tuple[SwaHarness, list[int], list[int]]:
    """[A live, 2 pages][T tombstone, 4 pages][L live, 2 pages]; returns the indices of A
    and the old indices of T."""
    h = SwaHarness.make(page, window)
    a, t, _ = h.chain([2 * page, 4 * page, 2 * page], tombstones=[1])
    return h, held(a), held(t)


def insert_over_tombstone(
    h: SwaHarness, page: int, swa_evicted: int
) -> tuple[torch.Tensor, list[int]]:
    """The caller matched A (2 pages, the tree's own), recomputed the other 6 pages, and
    inserts all 8 with prev_prefix_len = 2 pages. Returns its row and the free log delta."""
    tokens = keyed(page, 8)
    value = h.value_for(tokens, 2 * page, swa_evicted)
    mark = len(h.pool.freed)
    result = h.cache.insert(
        RadixKey(tokens), value, prev_prefix_len=2 * page, swa_evicted_seqlen=swa_evicted
    )
    assert result.prefix_len == 8 * page
    assert not result.last_node.swa_tombstone
    assert len(result.last_node) == 2 * page and not result.last_node.children
    return value, h.pool.freed[mark:]


@SWA_SHAPES
@pytest.mark.parametrize("swa_evicted_pages", [0, 2])
def test_tombstone_case_swa_evicted_before_the_node_revives_it(
    page: int, window: int, swa_evicted_pages: int
) -> None:
    """The caller still holds SWA KV for the whole tombstone: its old indices are freed (full
    only: their SWA KV is gone) and the incoming ones adopted; the node lives again."""
    h, a_old, t_old = tombstone_setup(page, window)
    value, freed = insert_over_tombstone(h, page, swa_evicted_pages * page)
    row = ids(value)
    nodes = path_nodes(h.match(keyed(page, 8)).last_node)
    assert [len(n) for n in nodes] == [2 * page, 4 * page, 2 * page]
    assert not any(n.swa_tombstone for n in nodes)
    assert held(nodes[0]) == a_old == row[: 2 * page]  # the protected prefix: untouched
    assert held(nodes[1]) == row[2 * page : 6 * page]  # adopted
    assert sorted(freed) == sorted(t_old + row[6 * page :])  # old T, duplicate of L
    assert h.pool.swa_freed == t_old  # only phase 2 ever called free_swa
    assert h.match(keyed(page, 8)).prefix_len == 8 * page
    h.check()


@SWA_SHAPES
@pytest.mark.parametrize("inside_pages", [1, 2, 3])
def test_tombstone_case_swa_evicted_inside_the_node_splits_it(
    page: int, window: int, inside_pages: int
) -> None:
    """sglang's second case: the node is split at swa_evicted_seqlen; the upper part stays a
    tombstone (the caller's indices there are freed), the lower part is revived."""
    h, _, t_old = tombstone_setup(page, window)
    cut = 2 * page + inside_pages * page
    value, freed = insert_over_tombstone(h, page, cut)
    row = ids(value)
    (upper,) = [n for n in live_nodes(h.cache) if n.swa_tombstone]
    (lower,) = upper.children.values()
    assert not lower.swa_tombstone
    assert len(upper) == cut - 2 * page and len(lower) == 6 * page - cut
    assert held(upper) == t_old[: cut - 2 * page]  # kept: full KV of the tree
    assert held(lower) == row[cut : 6 * page]  # adopted
    assert sorted(freed) == sorted(row[2 * page : cut] + t_old[cut - 2 * page :] + row[6 * page :])
    live_after = 8 * page - cut
    expected = 8 * page if live_after >= window else 2 * page
    assert h.match(keyed(page, 8)).prefix_len == expected
    h.check()


@SWA_SHAPES
@pytest.mark.parametrize("swa_evicted_pages", [6, 7, 8])
def test_tombstone_case_swa_evicted_past_the_node_keeps_it_a_tombstone(
    page: int, window: int, swa_evicted_pages: int
) -> None:
    """sglang's third case: the caller holds no SWA KV for the node either: it stays a
    tombstone with its own indices and every incoming index over the cached path is freed."""
    h, _, t_old = tombstone_setup(page, window)
    value, freed = insert_over_tombstone(h, page, swa_evicted_pages * page)
    row = ids(value)
    t = [n for n in live_nodes(h.cache) if n.swa_tombstone]
    assert len(t) == 1 and held(t[0]) == t_old
    assert sorted(freed) == sorted(row[2 * page :])
    assert h.match(keyed(page, 8)).prefix_len == (8 * page if 2 * page >= window else 2 * page)
    h.check()


@SWA_PAGES
@pytest.mark.parametrize("swa_evicted_pages", [0, 4])
def test_pr_29352_a_locked_tombstone_is_not_revived_and_its_kv_not_freed(
    page: int, swa_evicted_pages: int
) -> None:
    """sglang PR #29352 / pymllm: reviving a tombstone that a running request's path
    goes through (lock_ref > 0) must not free its full KV. It stays a tombstone, the incoming
    indices are freed; after the unlock the same insert revives it."""
    h, _, t_old = tombstone_setup(page, 8)
    t = next(n for n in live_nodes(h.cache) if n.swa_tombstone)
    running = next(iter(t.children.values()))
    lock = h.cache.inc_lock_ref(running)  # a request running on [A][T][L]
    assert t.lock_ref > 0 and t.swa_lock_ref == 0
    value, freed = insert_over_tombstone(h, page, swa_evicted_pages * page)
    row = ids(value)
    tombs = [n for n in live_nodes(h.cache) if n.swa_tombstone]
    assert held(*sorted(tombs, key=lambda n: len(path_nodes(n)))) == t_old  # nothing of T freed
    assert not set(t_old) & set(freed)
    assert sorted(freed) == sorted(row[2 * page :])
    h.check()
    h.cache.dec_lock_ref(running, lock)
    h.check()
    # unlocked, the same insert revives T (its lower part, when split at swa_evicted_seqlen)
    value, freed = insert_over_tombstone(h, page, swa_evicted_pages * page)
    revived = t_old[max(0, swa_evicted_pages - 2) * page :]
    assert set(revived) <= set(freed)
    assert sum(len(n) for n in live_nodes(h.cache) if n.swa_tombstone) == len(t_old) - len(revived)
    h.check()


@SWA_PAGES
def test_pymllm_8_3_reviving_under_a_lock_frees_nothing_the_lock_holder_reads(page: int) -> None:
    """pymllm, minimal: [T][L] with L locked, re-insert [T][L] with no SWA eviction.
    The pool's guard raises if the cache frees an index of a locked node."""
    h = SwaHarness.make(page, 4 * page)
    t, leaf = h.chain([2 * page, 2 * page], tombstones=[0])
    lock = h.cache.inc_lock_ref(leaf)
    before = held(t)
    h.put(keyed(page, 4))
    assert t.swa_tombstone and held(t) == before
    h.check()
    h.cache.dec_lock_ref(leaf, lock)
    h.put(keyed(page, 4))
    assert not tombstoned(t) and held(t) != before
    h.check()


@SWA_SHAPES
def test_prev_prefix_len_leaves_the_protected_prefix_alone(page: int, window: int) -> None:
    """pymllm: the cache never frees the tree-owned indices below prev_prefix_len, and
    the caller frees nothing: no leak and no double free.

    Request R1 inserts [A][B]; request R2 had matched A (and locked it), computed B itself
    meanwhile, and now inserts [A][B][C] with prev_prefix_len = len(A)."""
    h = SwaHarness.make(page, window)
    a_node = h.put(keyed(page, 2)).last_node
    lock = h.cache.inc_lock_ref(a_node)
    r2 = h.value_for(keyed(page, 6), 2 * page)  # R2's row: A's tree indices + its own
    h.put(keyed(page, 4))  # R1
    b_node = h.match(keyed(page, 4)).last_node
    b_tree = held(b_node)
    mark = len(h.pool.freed)
    result = h.cache.insert(RadixKey(keyed(page, 6)), r2, prev_prefix_len=2 * page)
    row = ids(r2)
    assert result.prefix_len == 4 * page
    assert held(a_node) == row[: 2 * page]
    assert held(b_node) == b_tree
    assert held(result.last_node) == row[4 * page :]
    assert sorted(h.pool.freed[mark:]) == sorted(row[2 * page : 4 * page])  # B duplicates only
    h.cache.dec_lock_ref(a_node, lock)
    h.check()


@SWA_PAGES
def test_prev_prefix_len_inside_a_cached_node_splits_it_there(page: int) -> None:
    """A protected prefix ending inside a node: the node is split at prev_prefix_len; the
    upper part (the tree's own) is left alone, the lower part's incoming indices are freed."""
    h = SwaHarness.make(page, 1)
    node = h.put(keyed(page, 4)).last_node
    tree = held(node)
    fresh = h.pool.alloc(2 * page)
    value = torch.cat([torch.tensor(tree[: 2 * page]), fresh])
    mark = len(h.pool.freed)
    result = h.cache.insert(RadixKey(keyed(page, 4)), value, prev_prefix_len=2 * page)
    assert result.prefix_len == 4 * page
    assert sorted(h.pool.freed[mark:]) == ids(fresh)
    assert held(*path_nodes(result.last_node)) == tree
    h.check()


@SWA_SHAPES
def test_pymllm_8_1_a_new_leaf_hangs_under_the_split_node(page: int, window: int) -> None:
    """pymllm: insert [1,2,3,4] then [1,2,9,9] (W=2 there): the split's upper node
    must become the new leaf's parent, so a later match of [1,2,9,9] returns 4 tokens."""
    h = SwaHarness.make(page, window)

    def pages(*tokens: int) -> list[int]:
        return [t * 100 + i for t in tokens for i in range(page)]

    first = h.put(pages(1, 2, 3, 4))
    second = h.put(pages(1, 2, 9, 9))
    assert second.prefix_len == 2 * page
    top = second.last_node.parent
    assert top is not None and top.tokens == tuple(pages(1, 2))
    assert top.parent is h.cache.root
    assert first.last_node.parent is top
    assert second.last_node.tokens == tuple(pages(9, 9))
    result = h.match(pages(1, 2, 9, 9))
    assert result.prefix_len == 4 * page
    assert result.last_node is second.last_node
    assert h.match(pages(1, 2, 3, 4, 9, 9)).prefix_len == 4 * page  # not [1,2,3,4,9,9]
    h.check()


@SWA_PAGES
@pytest.mark.parametrize("past_pages", [0, 1, 3])
def test_pymllm_8_5_an_entirely_swa_evicted_leftover_creates_no_node(
    page: int, past_pages: int
) -> None:
    """pymllm: swa_evicted_seqlen at or past the end of the key: the new suffix would be
    a tombstone leaf; nothing is created, its indices are freed, and last_node is the
    deepest cached node of the key."""
    h = SwaHarness.make(page, 2)
    a_node = h.put(keyed(page, 2)).last_node
    before = swa_snapshot(h.cache)
    tokens = keyed(page, 6)
    value = h.value_for(tokens, 2 * page, (6 + past_pages) * page)
    result = h.cache.insert(
        RadixKey(tokens),
        value,
        prev_prefix_len=2 * page,
        swa_evicted_seqlen=(6 + past_pages) * page,
    )
    assert result.prefix_len == 2 * page
    assert result.last_node is a_node
    assert [r.base.id for r in swa_snapshot(h.cache).nodes] == [r.base.id for r in before.nodes]
    assert h.cache.total_size() == 2 * page
    assert sorted(h.pool.freed) == ids(value)[2 * page :]
    assert not (len(h.pool.swa_freed))  # the caller dropped that SWA KV, not the cache
    h.check()


@SWA_PAGES
def test_an_entirely_swa_evicted_key_on_an_empty_cache_caches_nothing(page: int) -> None:
    h = SwaHarness.make(page, 2)
    result = h.put(keyed(page, 3), swa_evicted_seqlen=3 * page)
    assert result.prefix_len == 0
    assert result.last_node is h.cache.root
    assert not live_nodes(h.cache)
    assert h.cache.total_size() == 0
    h.check()


@SWA_SHAPES
@pytest.mark.parametrize("evicted_pages", [1, 2, 3])
def test_pymllm_8_5_a_partially_swa_evicted_leftover_is_tombstone_plus_live_leaf(
    page: int, window: int, evicted_pages: int
) -> None:
    """The new suffix's pages below swa_evicted_seqlen become a tombstone node (full KV
    adopted, SWA KV already dropped by the caller), the rest a live leaf under it."""
    h = SwaHarness.make(page, window)
    tokens = keyed(page, 4)
    value = h.value_for(tokens, 0, evicted_pages * page)
    result = h.cache.insert(RadixKey(tokens), value, swa_evicted_seqlen=evicted_pages * page)
    row = ids(value)
    leaf = result.last_node
    tomb = leaf.parent
    assert result.prefix_len == 0
    assert tomb is not None and tomb.parent is h.cache.root
    assert tomb.swa_tombstone and not leaf.swa_tombstone
    assert held(tomb) == row[: evicted_pages * page]
    assert held(leaf) == row[evicted_pages * page :]
    assert not h.pool.freed and not h.pool.swa_freed  # everything adopted
    assert h.cache.total_size() == 4 * page
    live = (4 - evicted_pages) * page
    assert h.match(tokens).prefix_len == (4 * page if live >= window else 0)
    h.check()


@SWA_PAGES
def test_a_suffix_tombstone_is_not_counted_as_swa_evictable(page: int) -> None:
    """Regression: _add_suffix used to mark the new tombstone after _add_leaf had counted it
    in swa_evictable_size (INV-22 drift by the tombstone's length)."""
    h = SwaHarness.make(page, 2)
    h.put(keyed(page, 4), swa_evicted_seqlen=2 * page)
    assert h.cache.swa_evictable_size() == 2 * page
    assert h.cache.swa_protected_size() == 0
    assert h.cache.total_size() == 4 * page
    assert_swa_sizes(h.cache)


@SWA_SHAPES
def test_pr_30845_an_unfinished_insert_does_not_cache_evicted_swa_as_live(
    page: int, window: int
) -> None:
    """sglang PR #30845: a chunked-prefill request whose SWA KV below 4 pages slid out of the
    window inserts its 8 computed pages; with swa_evicted_seqlen forwarded, those 4 pages are
    a tombstone (no live node claims freed SWA KV) and a match needs W live tokens after."""
    h = SwaHarness.make(page, window)
    tokens = keyed(page, 8)
    result = h.put(tokens, swa_evicted_seqlen=4 * page)
    assert result.prefix_len == 0
    for node in live_nodes(h.cache):
        assert node.swa_tombstone == (node.parent is h.cache.root)
        for i in held(node):
            assert h.pool.swa[i] == (not node.swa_tombstone)
    match = h.match(tokens)
    assert match.prefix_len == (8 * page if 4 * page >= window else 0)
    h.check()
    # the next chunk: the request now holds the tree's 8 pages (prev_prefix_len = 8 pages)
    # and has dropped SWA KV up to 8 pages; it inserts 12 pages
    row = torch.cat([torch.tensor(held(*path_nodes(result.last_node))), h.pool.alloc(4 * page)])
    second = h.cache.insert(
        RadixKey(keyed(page, 12)), row, prev_prefix_len=8 * page, swa_evicted_seqlen=4 * page
    )
    assert second.prefix_len == 8 * page
    assert held(second.last_node) == ids(row)[8 * page :]
    assert second.last_node.parent is result.last_node
    h.check()


@SWA_SHAPES
def test_over_a_live_node_the_incoming_indices_are_freed(page: int, window: int) -> None:
    h = SwaHarness.make(page, window)
    first = h.put(keyed(page, 3))
    tree = held(first.last_node)
    value = h.value_for(keyed(page, 3))
    second = h.cache.insert(RadixKey(keyed(page, 3)), value)
    assert second.prefix_len == 3 * page
    assert second.last_node is first.last_node
    assert held(first.last_node) == tree
    assert h.pool.freed == ids(value)
    h.check()


@SWA_PAGES
def test_the_caller_frees_only_its_unaligned_tail(page: int) -> None:
    h = SwaHarness.make(page, 2)
    tokens = keyed(page, 3) + [7] * (page - 1)
    value = h.value_for(tokens)
    h.cache.insert(RadixKey(tokens), value)
    assert not h.pool.freed  # the cache adopted every aligned index
    tail = value[3 * page :]
    h.pool.assert_no_leak(h.cache, caller_holds=ids(tail))
    h.pool.caller_free(tail)
    h.check()


@pytest.mark.parametrize(
    ("prev", "swa"), [(2, 0), (0, 2), (5, 4), (4, 6)], ids=["prev", "swa", "both", "swa6"]
)
def test_unaligned_prev_prefix_len_or_swa_evicted_seqlen_is_refused(prev: int, swa: int) -> None:
    h = SwaHarness.make(4, 2)
    h.put(keyed(4, 2))
    before = swa_snapshot(h.cache)
    value = h.pool.alloc(8)
    with pytest.raises(UsageError, match=r"multiple of page_size"):
        h.cache.insert(RadixKey(keyed(4, 2)), value, prev_prefix_len=prev, swa_evicted_seqlen=swa)
    assert swa_snapshot(h.cache) == before
    assert not h.pool.freed
    h.pool.caller_free(value)
    h.check()


@SWA_SHAPES
@pytest.mark.parametrize("swa_evicted_pages", [0, 1, 2, 3, 4, 5, 6])
def test_conservation_over_every_swa_evicted_seqlen(
    page: int, window: int, swa_evicted_pages: int
) -> None:
    """Re-insert [A][T tombstone][L] plus 2 new pages with every swa_evicted_seqlen (before,
    inside, at the end of T, inside L, past the key...), prev_prefix_len = 0 (nothing
    matched): each incoming index is adopted or freed exactly once, tree indices survive."""
    h = SwaHarness.make(page, window)
    h.chain([page, 2 * page, page], tombstones=[1])
    tokens = keyed(page, 6)
    value = h.value_for(tokens, 0, swa_evicted_pages * page)
    result = h.cache.insert(RadixKey(tokens), value, swa_evicted_seqlen=swa_evicted_pages * page)
    assert result.prefix_len == 4 * page
    h.check()
    assert not any(n.swa_tombstone and not n.children for n in live_nodes(h.cache))
    node = result.last_node
    assert (node is h.cache.root) or sum(len(n) for n in path_nodes(node)) in (4 * page, 6 * page)


@SWA_PAGES
def test_insert_may_return_a_tombstone_as_last_node_and_it_cannot_be_locked(page: int) -> None:
    """When the key ends at (or inside) a tombstone that stays one, or its new suffix is
    entirely SWA-evicted below one, last_node is that tombstone: the deepest cached node.
    Locking it is refused; a caller locks the last_node of a match instead."""
    h = SwaHarness.make(page, 4 * page)
    h.chain([2 * page, 2 * page, 2 * page], tombstones=[1])
    key = keyed(page, 4) + list(range(7000, 7000 + 2 * page))
    result = h.put(key, prev_prefix_len=2 * page, swa_evicted_seqlen=6 * page)
    assert result.prefix_len == 4 * page
    assert tombstoned(result.last_node) and result.last_node.children
    with pytest.raises(UsageError, match=r"tombstone"):
        h.cache.inc_lock_ref(result.last_node)
    inside = h.put(keyed(page, 3), prev_prefix_len=2 * page, swa_evicted_seqlen=3 * page)
    assert inside.prefix_len == 3 * page
    assert tombstoned(inside.last_node) and len(inside.last_node) == page
    match = h.match(key)
    assert match.prefix_len == 2 * page and not tombstoned(match.last_node)
    h.cache.dec_lock_ref(match.last_node, h.cache.inc_lock_ref(match.last_node))
    h.check()

"""MAX's RadixTrie facade: pages of blocks, kept blocks on overlap, set locks, tail eviction."""

from __future__ import annotations

import pytest

from radixkv import LockError, RadixTrie, StaleNodeError, TrieNode, UsageError


def test_insert_then_match_returns_one_block_per_page() -> None:
    trie = RadixTrie(page_size=2)
    end = trie.insert([1, 2, 3, 4], ["a", "b"])
    assert type(end) is TrieNode
    assert end.tokens == (1, 2, 3, 4) and end.blocks == ["a", "b"]
    node, blocks = trie.match_prefix([1, 2, 3, 4, 5])  # the partial last page is not matched
    assert node is end and blocks == ["a", "b"]


def test_overlap_keeps_the_tries_own_blocks() -> None:
    trie = RadixTrie()
    trie.insert([1, 2], ["a", "b"])
    end = trie.insert([1, 2, 3], ["x", "y", "c"])  # x, y are the caller's duplicates
    assert trie.match_prefix([1, 2, 3]) == (end, ["a", "b", "c"])
    assert trie.get_all_blocks() == {"a", "b", "c"}


def test_partial_match_splits_and_returns_the_upper_part() -> None:
    trie = RadixTrie()
    trie.insert([1, 2, 3], ["a", "b", "c"])
    node, blocks = trie.match_prefix([1, 2, 9])
    assert node.tokens == (1, 2) and blocks == ["a", "b"]
    assert trie.pretty_format(print_blocks=True) == ["[1, 2] : ['a', 'b']", "--[3] : ['c']"]


def test_insert_below_a_node() -> None:
    trie = RadixTrie()
    start = trie.insert([1], ["a"])
    end = trie.insert([2], ["b"], node=start)
    assert trie.match_prefix([1, 2]) == (end, ["a", "b"])
    assert trie.match_prefix([2], node=start) == (end, ["b"])


@pytest.mark.parametrize(
    ("tokens", "blocks"),
    [([1, 2, 3], ["a"]), ([1, 2], ["a", "b"]), ([1, 2], []), ([-1, 2], ["a"])],
)
def test_invalid_insert_is_a_value_error_and_changes_nothing(
    tokens: list[int], blocks: list[str]
) -> None:
    trie = RadixTrie(page_size=2)
    with pytest.raises(ValueError):
        trie.insert(tokens, blocks)
    assert trie.get_all_blocks() == set() and trie.pretty_format() == []


def test_adopting_a_block_the_trie_holds_is_rejected() -> None:
    trie = RadixTrie()
    trie.insert([1], ["a"])
    with pytest.raises(UsageError):
        trie.insert([2], ["a"])


def test_in_use_nodes_are_never_evicted_and_release_is_checked() -> None:
    trie = RadixTrie()
    held = trie.insert([1, 2], ["a", "b"])
    trie.insert([3], ["c"])
    trie.mark_in_use_by(held, seq_id=7)
    trie.mark_in_use_by(held, seq_id=7)  # idempotent per sequence
    assert trie.get_evictable_blocks() == {"c"}
    assert trie.evict_blocks(5) == ["c"]
    with pytest.raises(LockError):
        trie.mark_not_in_use_by(held, seq_id=8)
    trie.mark_not_in_use_by(held, seq_id=7)
    with pytest.raises(LockError):
        trie.mark_not_in_use_by(held, seq_id=7)
    assert trie.get_evictable_blocks() == {"a", "b"}


def test_evict_trims_leaf_tails_lru_first_and_never_overshoots() -> None:
    trie = RadixTrie(page_size=2)
    old = trie.insert([1, 2, 3, 4, 5, 6], ["a", "b", "c"])
    trie.insert([7, 8], ["d"])
    assert trie.evict_blocks(2) == ["c", "b"]  # the older leaf, from its tail
    assert old.tokens == (1, 2) and old.blocks == ["a"]
    assert trie.evict_blocks(0) == []
    assert trie.evict_blocks(9) == ["a", "d"]
    assert trie.get_all_blocks() == set() and trie.pretty_format() == []
    with pytest.raises(StaleNodeError):
        trie.mark_in_use_by(old, seq_id=1)


def test_release_refreshes_recency() -> None:
    trie = RadixTrie()
    first = trie.insert([1], ["a"])
    trie.insert([2], ["b"])
    trie.mark_in_use_by(first, "s")
    trie.mark_not_in_use_by(first, "s")
    assert trie.evict_blocks(1) == ["b"]


def test_pretty_print(capsys: pytest.CaptureFixture[str]) -> None:
    trie = RadixTrie()
    trie.insert([1, 2], ["a", "b"])
    trie.insert([1, 3], ["a2", "c"])
    trie.pretty_print()
    assert capsys.readouterr().out.splitlines() == [
        "[1] : ['a']",
        "--[2] : ['b']",
        "--[3] : ['c']",
    ]


def test_the_tree_under_the_trie_counts_its_tokens() -> None:
    """Sequence locks and tail trims keep the core Tree's sizes: one page per block."""
    trie = RadixTrie(page_size=2)
    held = trie.insert([1, 2, 3, 4], ["a", "b"])
    trie.insert([5, 6, 7, 8, 9, 10], ["c", "d", "e"])
    trie.mark_in_use_by(held, seq_id="s")
    assert (trie.tree.evictable_size, trie.tree.protected_size) == (6, 4)
    assert trie.evict_blocks(2) == ["e", "d"]  # trims the unused leaf to its first page
    assert (trie.tree.evictable_size, trie.tree.protected_size) == (2, 4)
    trie.mark_not_in_use_by(held, seq_id="s")
    assert trie.tree.evictable_size == 2 * len(trie.get_evictable_blocks()) == 6
    assert trie.tree.protected_size == 0


def test_a_trie_node_constructs_with_defaults() -> None:
    node = TrieNode()
    assert node.key is None
    assert (node.tokens, node.blocks, node.active_seqs, node.parent) == ((), [], set(), None)
    assert node.is_leaf() and len(node) == 0

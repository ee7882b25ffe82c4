"""MAX's RadixTrie facade: pages of blocks, kept blocks on overlap, set locks, tail eviction.

The trie is MAX's API, MAX's way: tokens are any hashable values (MAX's own tests spell
them as words), blocks are opaque values returned as given (one block may serve two pages),
and empty inserts and matches are legal. The word examples below follow the shape of MAX's
tests (written here from the seed's description).
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch

from radixkv import (
    InvariantViolation,
    LockError,
    RadixTrie,
    StaleNodeError,
    TokenTypeError,
    TrieNode,
    UsageError,
)
from radixkv.events import BlockRemoved, BlockStored, EventRecorder


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
    [([1, 2, 3], ["a"]), ([1, 2], ["a", "b"]), ([1, 2], []), (["w", "x", "y"], ["a"])],
)
def test_invalid_insert_is_a_value_error_and_changes_nothing(
    tokens: list[int], blocks: list[str]
) -> None:
    trie = RadixTrie(page_size=2)
    with pytest.raises(ValueError):
        trie.insert(tokens, blocks)
    assert trie.get_all_blocks() == set() and trie.pretty_format() == []


def test_blocks_are_opaque_a_block_the_trie_holds_may_serve_another_page() -> None:
    """No uniqueness check: the caller's blocks are its business, returned as given."""
    trie = RadixTrie()
    trie.insert([1], ["a"])
    end = trie.insert([2], ["a"])
    assert trie.match_prefix([2]) == (end, ["a"])
    assert trie.get_all_blocks() == {"a"}
    assert trie.evict_blocks(1) == ["a"]  # the least recent page, [1]
    assert trie.get_all_blocks() == {"a"}, "page [2] still holds it"
    assert trie.evict_blocks(1) == ["a"]
    assert trie.get_all_blocks() == set()


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


# ---- tokens as words, blocks reused (MAX's own tests are written this way) -------------


def test_words_are_tokens_and_the_shape_splits_where_sentences_part() -> None:
    trie = RadixTrie()
    trie.insert(["the", "cat", "sat", "down"], ["B0", "B1", "B2", "B3"])
    assert trie.pretty_format() == ["['the', 'cat', 'sat', 'down']"]
    trie.insert(["the", "cat", "sat", "still"], ["B0", "B1", "B2", "B4"])
    trie.insert(["the", "cat", "ran"], ["B0", "B1", "B5"])
    trie.insert(["a", "dog", "sat"], ["B6", "B7", "B8"])
    assert trie.pretty_format() == [
        "['the', 'cat']",
        "--['sat']",
        "----['down']",
        "----['still']",
        "--['ran']",
        "['a', 'dog', 'sat']",
    ]
    before = trie.pretty_format(print_blocks=True)
    trie.insert(["the", "cat", "ran"], ["X0", "X1", "X5"])  # cached already: nothing changes
    assert trie.pretty_format(print_blocks=True) == before
    assert trie.match_prefix(["the", "cat", "sat", "up"])[1] == ["B0", "B1", "B2"]
    assert trie.match_prefix(["the", "cat", "ran", "off"])[1] == ["B0", "B1", "B5"]
    assert trie.match_prefix(["a"])[1] == ["B6"]
    assert trie.match_prefix(["one", "cat"])[1] == []


def test_one_block_given_to_two_pages_comes_back_twice() -> None:
    trie = RadixTrie()
    end = trie.insert(["we", "sing", "we", "dance"], ["S", "S", "T", "U"])
    assert trie.match_prefix(["we", "sing", "we", "dance", "now"]) == (end, ["S", "S", "T", "U"])
    other = trie.insert(["we", "sing", "loud"], ["S", "S", "V"])  # keeps the trie's S, S
    assert trie.match_prefix(["we", "sing", "loud"]) == (other, ["S", "S", "V"])
    assert trie.pretty_format(print_blocks=True) == [
        "['we', 'sing'] : ['S', 'S']",
        "--['we', 'dance'] : ['T', 'U']",
        "--['loud'] : ['V']",
    ]
    assert trie.get_all_blocks() == {"S", "T", "U", "V"}
    assert trie.evict_blocks(99) == ["U", "T", "V", "S", "S"]  # every page's block, once each
    assert trie.get_all_blocks() == set() and trie.pretty_format() == []


def test_blocks_are_returned_as_the_very_objects_given() -> None:
    page_a, page_b = object(), object()
    trie = RadixTrie()
    trie.insert(["x", "y"], [page_a, page_b])
    _, blocks = trie.match_prefix(["x", "y"])
    assert blocks[0] is page_a and blocks[1] is page_b
    assert trie.evict_blocks(2) == [page_b, page_a]


def test_words_below_a_matched_node_and_at_a_split_point() -> None:
    trie = RadixTrie()
    trie.insert(["you", "read", "a", "book"], ["B0", "B1", "B2", "B3"])
    node, blocks = trie.match_prefix(["you", "read", "a", "poem"])  # splits before "book"
    assert blocks == ["B0", "B1", "B2"]
    end = trie.insert(["poem"], ["B4"], node=node)
    assert trie.match_prefix(["you", "read", "a", "poem"]) == (end, ["B0", "B1", "B2", "B4"])
    node, blocks = trie.match_prefix(["you", "read"])  # splits again
    trie.insert(["aloud"], ["B5"], node=node)
    assert trie.pretty_format() == [
        "['you', 'read']",
        "--['a']",
        "----['book']",
        "----['poem']",
        "--['aloud']",
    ]
    miss, blocks = trie.match_prefix(["they", "write"])
    assert miss is trie.root and blocks == []
    trie.insert(["they", "write"], ["B6", "B7"], node=miss)
    assert trie.match_prefix(["they", "write"])[1] == ["B6", "B7"]


def test_words_in_use_are_never_evicted_and_released_words_go_lru_first() -> None:
    trie = RadixTrie()
    held = trie.insert(["good", "morning", "sun"], ["B0", "B1", "B2"])
    first = trie.insert(["good", "morning", "rain"], ["B0", "B1", "B3"])
    second = trie.insert(["good", "night", "moon"], ["B0", "B4", "B5"])
    trie.mark_in_use_by(held, "seq-0")
    trie.mark_in_use_by(first, "seq-1")
    trie.mark_in_use_by(second, "seq-2")
    assert trie.evict_blocks(99) == []
    trie.mark_not_in_use_by(first, "seq-1")  # released first: the least recent
    trie.mark_not_in_use_by(second, "seq-2")
    assert trie.evict_blocks(1) == ["B3"]
    assert trie.evict_blocks(2) == ["B5", "B4"]  # the next leaf, from its tail
    assert trie.evict_blocks(99) == []  # the rest is held by seq-0
    assert trie.pretty_format() == ["['good']", "--['morning']", "----['sun']"]  # no merge
    trie.mark_not_in_use_by(held, "seq-0")
    assert trie.evict_blocks(99) == ["B2", "B1", "B0"]
    assert trie.pretty_format() == []


def test_words_in_pages_of_two() -> None:
    trie = RadixTrie(page_size=2)
    trie.insert(["red", "apple", "green", "pear"], ["P0", "P1"])
    assert trie.match_prefix(["red"])[1] == []  # half a page is no page
    assert trie.match_prefix(["red", "apple", "green"])[1] == ["P0"]
    assert trie.match_prefix(["red", "apple", "blue", "plum"])[1] == ["P0"]
    node = trie.insert(["red", "apple", "ripe", "fig"], ["P0", "P2"])
    assert trie.pretty_format(print_blocks=True) == [
        "['red', 'apple'] : ['P0']",
        "--['green', 'pear'] : ['P1']",
        "--['ripe', 'fig'] : ['P2']",
    ]
    trie.mark_in_use_by(node, 0)
    assert trie.evict_blocks(99) == ["P1"]
    with pytest.raises(ValueError):
        trie.insert(["red", "apple", "sour"], ["P0", "P3"])  # three words: not whole pages


def test_empty_inserts_and_matches_are_legal() -> None:
    """MAX's behaviour since 2025-02-20: no tokens insert nothing and match nothing."""
    trie = RadixTrie(page_size=2)
    assert trie.insert([], []) is trie.root
    assert trie.match_prefix([]) == (trie.root, [])
    below = trie.insert(["a", "b"], ["P0"])
    assert trie.insert([], [], node=below) is below
    assert trie.match_prefix([], node=below) == (below, [])
    assert trie.match_prefix(["a"], node=trie.root) == (trie.root, [])  # less than a page
    assert trie.get_all_blocks() == {"P0"} and trie.pretty_format() == ["['a', 'b']"]
    with pytest.raises(ValueError):
        trie.insert([], ["P9"])  # a block for no page


@pytest.mark.parametrize(
    "tokens",
    [
        [-1, -2, 2**70, 0],  # ints beyond RadixKey's token-id range
        [(1, 2), ("a", 3), (), None],  # tuples, even empty ones, and None
        [1.5, True, b"raw", frozenset({1})],
        ["i", "like", 7, ("mixed", 2)],
    ],
    ids=["big-and-negative-ints", "tuples-and-none", "floats-bools-bytes-sets", "mixed"],
)
def test_any_hashable_token_is_a_token(tokens: list[Any]) -> None:
    trie = RadixTrie()
    end = trie.insert(tokens, ["B0", "B1", "B2", "B3"])
    assert end.tokens == tuple(tokens)
    assert trie.match_prefix([*tokens[:2], "other"]) == (end.parent, ["B0", "B1"])
    assert trie.match_prefix(tokens) == (end, ["B0", "B1", "B2", "B3"])


def test_equal_tokens_of_different_types_are_one_token() -> None:
    """Tokens compare with ``==`` (and hash alike), as dict keys do: 1, 1.0 and True."""
    trie = RadixTrie()
    end = trie.insert([1, 2], ["B0", "B1"])
    assert trie.match_prefix([1.0, 2]) == (end, ["B0", "B1"])
    assert trie.match_prefix([True, 2]) == (end, ["B0", "B1"])


def test_tokens_from_a_tensor_or_a_tuple_or_a_generator() -> None:
    trie = RadixTrie()
    end = trie.insert(torch.tensor([4, 5, 6]), ["B0", "B1", "B2"])
    assert end.tokens == (4, 5, 6) and type(end.tokens[0]) is int
    assert trie.match_prefix((4, 5)) == (end.parent, ["B0", "B1"])
    assert trie.match_prefix(t for t in [4, 5, 6]) == (end, ["B0", "B1", "B2"])


def test_numpy_tokens_are_tokens() -> None:
    numpy: Any = pytest.importorskip("numpy")
    trie = RadixTrie()
    end = trie.insert(numpy.array([7, 8, 9]), ["B0", "B1", "B2"])
    assert trie.match_prefix([7, 8, 9]) == (end, ["B0", "B1", "B2"])
    assert trie.match_prefix([numpy.int64(7), numpy.int32(8)])[1] == ["B0", "B1"]
    words = trie.insert(numpy.array(["to", "be"]), ["W0", "W1"])
    assert trie.match_prefix(["to", "be"]) == (words, ["W0", "W1"])


@pytest.mark.parametrize(
    ("tokens", "blocks", "message"),
    [
        ([1, [2], 3], ["a", "b", "c"], "token 1 must be hashable, got list"),
        ([1, ({2},)], ["a", "b"], "token 1 must be hashable, got tuple"),
        (5, ["a"], "tokens must be an iterable"),
        ([1, 2], ["a", ["b"]], "blocks must be hashable, got list"),
    ],
)
def test_an_unhashable_token_or_block_is_a_type_error_and_changes_nothing(
    tokens: Any, blocks: list[Any], message: str
) -> None:
    trie = RadixTrie()
    trie.insert([1], ["z"])
    before = trie.pretty_format(print_blocks=True)
    with pytest.raises(TokenTypeError, match=message):
        trie.insert(tokens, blocks)
    if not isinstance(tokens, int):
        with pytest.raises((TokenTypeError, ValueError)):
            trie.match_prefix(tokens if isinstance(blocks[-1], str) else [[1]])
    assert trie.pretty_format(print_blocks=True) == before
    assert trie.get_all_blocks() == {"z"}


def test_with_an_event_listener_stored_tokens_must_be_token_ids() -> None:
    """Routers recompute page hashes (SPEC.md §9) from token ids: a trie that publishes
    events refuses other tokens, before it changes anything; matching takes any."""
    recorder = EventRecorder()
    trie = RadixTrie(event_listener=recorder)
    end = trie.insert([1, 2], ["B0", "B1"])
    assert [type(e) for e in recorder.take()] == [BlockStored]
    for bad in (["x"], [-1], [1, 2, "x"]):
        with pytest.raises(UsageError):
            trie.insert(bad, ["B"] * len(bad))
    assert trie.match_prefix(["x"]) == (trie.root, [])
    assert trie.insert([1, 2], ["C0", "C1"]) is end  # nothing new: nothing to refuse
    assert recorder.take() == [] and trie.pretty_format() == ["[1, 2]"]
    assert trie.evict_blocks(2) == ["B1", "B0"]
    (removed,) = recorder.take()
    assert type(removed) is BlockRemoved and len(removed.block_hashes) == 2


def test_max_trie_api_names() -> None:
    """The seed's names and keywords, as a MAX engine calls them."""
    trie = RadixTrie(page_size=1)
    node = trie.insert(tokens=["a"], blocks=[0], node=None)
    assert trie.match_prefix(tokens=["a"], node=None) == (node, [0])
    trie.mark_in_use_by(node, seq_id=3)
    trie.mark_not_in_use_by(node, seq_id=3)
    assert trie.evict_blocks(desired_num_evicted=1) == [0]
    assert importlib.import_module("radixkv").TrieNode is TrieNode


def test_check_invariants_holds_through_trims_and_names_a_stale_count() -> None:
    """The trie's own check (MAX's API shows neither its size counters nor its block
    counts): it holds after a trim, a split and a lock, and names the count gone stale."""
    trie = RadixTrie(2)
    trie.insert([1, 2, 3, 4, 5, 6], ["a", "b", "c"])
    assert trie.evict_blocks(1) == ["c"]  # a trim: the leaf keeps its first two pages
    node, _ = trie.match_prefix([1, 2])  # a split
    trie.mark_in_use_by(node, 7)
    trie.check_invariants()
    trie.tree.evictable_size += 2  # what a trim that forgot its counter leaves
    with pytest.raises(InvariantViolation, match="INV-6"):
        trie.check_invariants()
    trie.tree.evictable_size -= 2
    node.active_seqs.add(8)  # a sequence the lock count does not know
    with pytest.raises(InvariantViolation, match="INV-5"):
        trie.check_invariants()
    node.active_seqs.discard(8)
    trie._block_pages["a"] += 1
    with pytest.raises(InvariantViolation, match="INV-7"):
        trie.check_invariants()

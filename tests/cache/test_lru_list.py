"""LRUList: O(1) intrusive updates, recency order, and misuse refused without corruption."""

from __future__ import annotations

import pytest

from radixkv import LRUList, MambaTreeNode, RadixKey, UsageError


def node(node_id: int, parent: MambaTreeNode | None = None) -> MambaTreeNode:
    return MambaTreeNode(node_id, RadixKey([node_id]), None, parent, 0)


def ids(lru: LRUList) -> list[int]:
    return [n.id for n in lru]


def test_insert_mru_puts_newest_first() -> None:
    lru = LRUList()
    a, b, c = node(1), node(2), node(3)
    for n in (a, b, c):
        lru.insert_mru(n)
    assert ids(lru) == [3, 2, 1]
    assert len(lru) == 3 and a in lru and node(9) not in lru


def test_touch_remove_and_sentinels() -> None:
    lru = LRUList()
    a, b, c = node(1), node(2), node(3)
    for n in (a, b, c):
        lru.insert_mru(n)
    lru.touch_mru(a)
    assert ids(lru) == [1, 3, 2]
    lru.remove(c)
    assert ids(lru) == [1, 2] and c not in lru and len(lru) == 2
    assert lru.head.next is a and lru.tail.prev is b


def test_the_two_modes_use_separate_links() -> None:
    full, mamba = LRUList(), LRUList(mamba=True)
    a = node(1)
    full.insert_mru(a)
    assert a in full and a not in mamba
    mamba.insert_mru(a)
    full.remove(a)
    assert a not in full and a in mamba and a.mamba_next is mamba.tail


@pytest.mark.parametrize("mamba", [False, True])
def test_a_second_insert_is_refused_and_changes_nothing(mamba: bool) -> None:
    lru = LRUList(mamba)
    a, b = node(1), node(2)
    lru.insert_mru(a)
    lru.insert_mru(b)
    with pytest.raises(UsageError, match="already in the list"):
        lru.insert_mru(a)
    assert ids(lru) == [2, 1] and len(lru) == 2


@pytest.mark.parametrize("call", ["remove", "touch_mru"])
def test_non_members_are_refused(call: str) -> None:
    lru = LRUList()
    lru.insert_mru(node(1))
    with pytest.raises(UsageError, match="not in the list"):
        getattr(lru, call)(node(2))
    assert ids(lru) == [1]


@pytest.mark.parametrize("mamba", [False, True])
@pytest.mark.parametrize("call", ["remove", "touch_mru", "insert_after"])
def test_a_member_of_another_list_of_the_same_mode_is_not_a_member(mamba: bool, call: str) -> None:
    mine, other = LRUList(mamba), LRUList(mamba)
    a, b = node(1), node(2)
    mine.insert_mru(a)
    mine.insert_mru(b)
    other.insert_mru(node(3))
    assert a in mine and a not in other
    with pytest.raises(UsageError, match="not in the list"):
        if call == "insert_after":
            other.insert_after(a, node(4))
        else:
            getattr(other, call)(a)
    assert ids(mine) == [2, 1] and len(mine) == 2
    assert ids(other) == [3] and len(other) == 1
    other.insert_mru(node(5))  # both lists still link correctly
    mine.remove(a)
    assert ids(mine) == [2] and ids(other) == [5, 3]


def test_touch_node_and_parents_puts_the_child_first() -> None:
    lru = LRUList()
    root = node(0)
    a = node(1, root)
    b = node(2, a)
    other = node(3, root)
    for n in (b, a, other):
        lru.insert_mru(n)
    lru.touch_node_and_parents_mru(b, root)
    assert ids(lru) == [2, 1, 3]


def test_mamba_touch_skips_nodes_without_state() -> None:
    lru = LRUList(mamba=True)
    root = node(0)
    a = node(1, root)
    b = node(2, a)  # a is a tombstone: not in the mamba list
    other = node(3, root)
    lru.insert_mru(b)
    lru.insert_mru(other)
    lru.touch_node_and_parents_mru(b, root)
    assert ids(lru) == [2, 3]


def test_lru_queries_skip_locked_and_inner_nodes() -> None:
    lru = LRUList()
    root = node(0)
    parent = node(1, root)
    child = node(2, parent)
    parent.children[(None, (2,))] = child
    lone = node(3, root)
    for n in (parent, child, lone):
        lru.insert_mru(n)
    assert lru.get_lru_unlocked() is parent
    assert lru.get_lru_leaf_unlocked() is child
    child.lock_ref = 1
    assert lru.get_lru_leaf_unlocked() is lone
    lone.lock_ref = 1
    parent.lock_ref = 1
    assert lru.get_lru_leaf_unlocked() is None and lru.get_lru_unlocked() is None


def test_mamba_queries_use_the_mamba_lock() -> None:
    lru = LRUList(mamba=True)
    a, b = node(1), node(2)
    lru.insert_mru(a)
    lru.insert_mru(b)
    a.lock_ref = 5  # a full lock does not protect a state
    assert lru.get_lru_unlocked() is a
    a.mamba_lock_ref = 1
    assert lru.get_lru_unlocked() is b


def test_insert_after_places_just_behind_the_anchor() -> None:
    lru = LRUList()
    a, b, c = node(1), node(2), node(3)
    lru.insert_mru(a)
    lru.insert_mru(b)
    lru.insert_after(b, c)
    assert ids(lru) == [2, 3, 1]
    with pytest.raises(UsageError):
        lru.insert_after(node(9), node(10))

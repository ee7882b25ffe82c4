"""``explore.fork``: the explorers' copy means what ``copy.deepcopy`` means, faster."""

from __future__ import annotations

import copy
from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Any

import pytest
from radixkv_conformance.explore.fork import fork


class Slotted:
    __slots__ = ("__hidden", "children", "parent")

    def __init__(self) -> None:
        self.children: dict[int, Slotted] = {}
        self.parent: Slotted | None = None
        self.__hidden = [1]

    def hidden(self) -> list[int]:
        return self.__hidden


class OwnCopy:
    copies = 0

    def __init__(self, items: list[int]) -> None:
        self.items = items

    def __deepcopy__(self, memo: dict[int, Any]) -> OwnCopy:
        OwnCopy.copies += 1
        return OwnCopy(copy.deepcopy(self.items, memo))


@dataclass(frozen=True)
class Handle:
    node: Slotted
    step: int


@dataclass
class Owner:
    log: list[int] = field(default_factory=list)
    shared: list[int] = field(default_factory=list)


def test_a_copy_is_deep_and_keeps_sharing_and_cycles() -> None:
    root, child = Slotted(), Slotted()
    root.children[1] = child
    child.parent = root
    handle = Handle(child, 3)
    state = {"tree": root, "handles": [handle, handle], "pair": (child, 1), "keys": {(1, 2)}}
    new = fork(state)
    new_root = new["tree"]
    assert new_root is not root and new_root.children[1] is not child
    assert new_root.children[1].parent is new_root  # the cycle closes in the copy
    assert new["handles"][0] is new["handles"][1]  # one object stays one object
    assert new["handles"][0].node is new_root.children[1]  # a handle names the copied node
    assert new["pair"][0] is new_root.children[1]
    assert new_root.hidden() == [1] and new_root.hidden() is not root.hidden()  # mangled slot
    new_root.children.clear()
    assert root.children == {1: child}


def test_the_memo_shares_what_it_lists_and_immutable_values_are_not_copied() -> None:
    owner = Owner()
    tokens = (1, 2, 3)
    new = fork((owner, tokens), {id(owner.shared): owner.shared})
    assert new[0].shared is owner.shared  # listed in the memo: shared, as copy.deepcopy does
    assert new[0].log is not owner.log
    assert new[1] is tokens


def test_a_bound_method_follows_its_owner() -> None:
    ids: list[int] = []
    new_ids, append = fork((ids, ids.append))
    append(7)
    assert new_ids == [7] and ids == []
    owner = Owner()
    new_owner, method = fork((owner, owner.log.append))
    method(1)
    assert new_owner.log == [1] and owner.log == []


def test_a_class_that_copies_itself_is_asked_and_containers_keep_their_type() -> None:
    before = OwnCopy.copies
    made = fork(
        {
            "own": OwnCopy([1]),
            "counts": Counter(a=2),
            "ordered": OrderedDict(b=1),
            "by": defaultdict(list, c=[1]),
            "frozen": frozenset({(1, 2)}),
        }
    )
    assert OwnCopy.copies == before + 1 and made["own"].items == [1]
    assert type(made["counts"]) is Counter and made["counts"]["a"] == 2
    assert type(made["ordered"]) is OrderedDict
    assert made["by"]["new"] == [] and made["by"].default_factory is list


def test_tensor_views_keep_sharing_their_storage_in_the_copy() -> None:
    torch = pytest.importorskip("torch")
    whole = torch.arange(6)
    view = whole[2:4]
    alone = torch.arange(3)
    new_whole, new_view, new_alone, again = fork([whole, view, alone, view])
    new_whole[2] = 99
    assert new_view.tolist() == [99, 3]  # the copy's view sees the copy's write
    assert view.tolist() == [2, 3] and whole.tolist() == list(range(6))
    assert again is new_view and new_alone.tolist() == [0, 1, 2]
    view_first, whole_after = fork([view, whole])  # a view met before its whole storage
    whole_after[3] = 77
    assert view_first.tolist() == [2, 77]


class Packed(bytes):
    __slots__ = ()


class Tagged(bytes):
    """A bytes subclass that holds more than its bytes: copied, not shared."""


def test_immutable_values_are_kept_and_values_that_hold_more_are_copied() -> None:
    packed, tagged = Packed(b"\x01\x02"), Tagged(b"\x01")
    tagged.__dict__["note"] = [1]
    new_packed, new_tagged = fork((packed, tagged))
    assert new_packed is packed
    assert new_tagged == tagged and new_tagged is not tagged
    assert new_tagged.__dict__["note"] == [1]
    assert new_tagged.__dict__["note"] is not tagged.__dict__["note"]
    torch = pytest.importorskip("torch")
    device = torch.device("cpu")
    assert fork([device])[0] is device

"""The state explorer on an engine whose state cannot be copied: each state is rebuilt by
replaying its shortest path (``fork="rerun"``), and the exploration is the same."""

from __future__ import annotations

from typing import Any

import pytest
from radixkv_conformance.adapters import planted
from radixkv_conformance.explore.bounds import parse_bounds
from radixkv_conformance.explore.sequences import target
from radixkv_conformance.explore.states import explore_states
from radixkv_conformance.profile import RADIXKV
from radixkv_conformance.protocol import Host

pytestmark = pytest.mark.search  # kit explorations: run once, not again on the pure key path

BOUNDS = parse_bounds("tokens=1,length=1,locks=1,depth=4")


class NativeAdapter(planted.PageMapAdapter):
    """``PageMapCache`` as if it held a native handle: ``copy.deepcopy`` refuses it."""

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        raise TypeError("cannot copy a native cache")


def native(page_size: int, host: Host) -> NativeAdapter:
    return NativeAdapter(page_size, host, frozenset({"locked"}), planted.SHAPES[""])


def copyable(page_size: int, host: Host) -> planted.PageMapAdapter:
    return planted.factory(page_size, host, bugs="locked")


def test_an_engine_that_cannot_be_copied_is_explored_by_replaying_paths() -> None:
    copied = explore_states(target("Copied", copyable, RADIXKV).machine(), BOUNDS)
    replayed = explore_states(target("Native", native, RADIXKV).machine(), BOUNDS)
    assert (copied.fork, replayed.fork) == ("copy", "rerun")
    assert any("paths replayed" in note for note in replayed.notes), replayed.notes
    assert "fork=rerun" in replayed.render()
    same = ("states", "transitions", "max_depth", "beyond", "by_depth", "outcomes")
    assert all(getattr(copied, a) == getattr(replayed, a) for a in same), replayed.render()
    assert copied.findings.keys() == replayed.findings.keys() != set()
    for fid, finding in copied.findings.items():  # the same shortest sequence to each
        assert [s.text() for s in replayed.findings[fid].calls] == [s.text() for s in finding.calls]

"""sglang 0.5.23's UnifiedRadixCache (FULL + SWA, Python tree core): its ``canonical_state``.

Skips when the sglang wheel is absent. The breadth-first explorer merges states whose
canonical pictures are equal (SPEC.md "The canonical state"); a picture that left out
something a later answer reads would merge states with different futures. As
``tests/explore/test_states.py`` does for radixkv's caches: exploring to the same depth with
and without merging reaches the same outcomes and findings; and the picture keeps what the
future reads (recency, lock records) while forgetting the history that spent ids, stamps and
uuids.
"""

from __future__ import annotations

from typing import Any

import pytest
from radixkv_conformance.explore.bounds import Bounds
from radixkv_conformance.explore.sequences import target
from radixkv_conformance.explore.states import explore_states

from tests.helpers import RecordingHost, peer_adapter


@pytest.mark.search  # a kit exploration: run once, not again on the pure key path
def test_merging_is_sound() -> None:
    """Merged and unmerged exploration to the same depth reach the same outcomes (spec state
    with ticks ranked, the cache's canonical picture) and the same findings (keys of two
    tokens: a split, an interior node, a tombstone leaf; about 5 s)."""
    module = peer_adapter("sglang_swa", "sglang's UnifiedRadixCache")
    bounds = Bounds(tokens=1, length=2, locks=1, depth=2)

    def machine() -> Any:
        return target("sglang-swa", module.factory, module.PROFILE).machine()

    merged = explore_states(machine(), bounds)
    every = explore_states(machine(), bounds, merge=False)
    assert merged.outcomes == every.outcomes
    assert merged.findings.keys() == every.findings.keys()
    assert merged.states < every.states / 2  # merging did merge, and much


def _steps(cache: Any) -> tuple[Any, Any]:
    """Two keys sharing a page, a match (a split, the lower node refreshed), a lock."""
    cache.insert((1, 2, 3), None, (1024, 1025, 1026))
    cache.insert((1, 2, 4), None, (1024, 1025, 1027), prev_prefix_len=2)
    _, node = cache.match((1, 2), None)
    return node, cache.lock(node)


def test_the_picture_forgets_history_and_names_handles_by_place() -> None:
    module = peer_adapter("sglang_swa", "sglang's UnifiedRadixCache")
    cache = module.factory(1, RecordingHost(1, 2, slots=False))
    node, token = _steps(cache)
    picture, names = cache.canonical_state([node, token, None])
    later = module.factory(1, RecordingHost(1, 2, slots=False))
    later.insert((7, 7), "a", (2000, 2001))  # node ids, stamps and a uuid spent before
    lock = later.lock(later.match((7, 7), "a")[1])
    later.unlock(None, lock)
    later.evict(1 << 20, swa_num_tokens=1 << 20)
    later.reset()
    again, again_token = _steps(later)
    assert later.canonical_state([again, again_token, None]) == (picture, names)
    assert again != node  # sglang's node ids differ; the picture names nodes by place
    assert names[0] != names[2] and names[1][:2] == ("object", "TreeLock")


def test_the_picture_keeps_what_the_future_reads() -> None:
    module = peer_adapter("sglang_swa", "sglang's UnifiedRadixCache")
    cache = module.factory(1, RecordingHost(1, 2, slots=False))
    node, token = _steps(cache)
    picture, _ = cache.canonical_state([node, token])
    other = module.factory(1, RecordingHost(1, 2, slots=False))
    other_node, other_token = _steps(other)
    other.match((1, 2, 3), None)  # the same tree; another leaf the most recent
    assert other.canonical_state([other_node, other_token])[0] != picture
    unlocked = module.factory(1, RecordingHost(1, 2, slots=False))
    unlocked_node, unlocked_token = _steps(unlocked)
    unlocked.unlock(unlocked_node, unlocked_token)  # lock counts and the lock's uuid left
    assert unlocked.canonical_state([])[0] != cache.canonical_state([])[0]


def test_only_the_python_core_has_the_hook() -> None:
    """The Rust core's binding shows neither stamps, LRU order, SWA lock counts nor uuids:
    it is explored without a hook (its memory picture and snapshot)."""
    module = peer_adapter("sglang_swa", "sglang's UnifiedRadixCache")
    host = RecordingHost(1, 2, slots=False)
    assert callable(getattr(module.factory(1, host), "canonical_state", None))
    try:
        rust = module.factory_rust(1, RecordingHost(1, 2, slots=False))
    except ImportError as missing:  # the Rust core's .so did not load
        pytest.skip(f"factory_rust: {missing}")
    assert getattr(rust, "canonical_state", None) is None

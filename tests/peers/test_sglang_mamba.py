"""sglang 0.5.23's UnifiedRadixCache (FULL + Mamba) through the kit's Mamba adapter, on the CPU.

Skips when the sglang wheel is absent. Its bugs are vectors (``tests/vectors/sglang_mamba_*``,
replayed by ``test_vectors.py``). Here, against the real cache: the adapter's stand-ins, each
policy of its profile replayed as a trace that holds under it and fails under radixkv's
choice (so a policy is an sglang habit, not a blind spot), and a short search that finds
nothing past the known bug.
"""

from __future__ import annotations

from typing import Any

import pytest
from radixkv_conformance import run_conformance
from radixkv_conformance.profile import LRU_LEAVES, Profile
from radixkv_conformance.replay import replay

from tests.helpers import RecordingHost, fixed_search, peer_adapter

KNOWN_BUG = (  # tests/vectors/sglang_mamba_stateless_insert*.json: one cause, three symptoms
    "AssertionError:bad-new-tokens-without-a-state@mamba.commit_insert_component_data",
    "INV-7:bad-new-tokens-without-a-state-never-given",
    "INV-7:bad-new-tokens-without-a-state-twice",
)


def test_a_match_copies_the_state_and_a_state_eviction_takes_the_leaf() -> None:
    module = peer_adapter("sglang_mamba", "sglang's UnifiedRadixCache")
    host = RecordingHost(1)
    cache = module.factory(1, host)
    assert cache.insert((1, 2, 3, 4), None, (10, 11, 12, 13), state_slot=7).prefix_len == 0
    matched = cache.match((1, 2, 3, 4, 5), None)
    assert (matched.indices, matched.prefix_len, matched.cow_slot) == ((10, 11, 12, 13), 4, 101)
    assert host.events == [("copy", (7, 101))]  # the forward pass's copy, reported
    assert cache.mamba_sizes() == (1, 0)
    evicted = cache.evict(0, mamba_slots=1)
    assert (evicted.full, evicted.mamba) == (4, 1)
    assert host.events[1:] == [("free", (10, 11, 12, 13)), ("slot", 7)]
    cache.check()


def _insert(tokens: list[int], indices: list[int], slot: int | None, ns: str | None = None) -> Any:
    return {
        "op": "insert",
        "tokens": tokens,
        "namespace": ns,
        "indices": indices,
        "state_slot": slot,
    }


def _match(tokens: list[int], ns: str | None = None) -> dict[str, Any]:
    return {"op": "match", "tokens": tokens, "namespace": ns}


def _evict(num_tokens: int, mamba_slots: int) -> dict[str, Any]:
    return {"op": "evict", "num_tokens": num_tokens, "mamba_slots": mamba_slots}


HABITS = {  # policy: (radixkv's choice, a trace only sglang's choice passes, what radixkv's finds)
    "mamba_tombstone_leaves": (  # a state eviction keeps the stateless parent [0], KV alone
        "deleted",
        [_insert([0, 0], [0, 1], 0), _match([0]), _evict(0, 1)],
        "INV-31:evict-tombstone-leaf",
    ),
    "mamba_tombstone_locks": (  # [0]'s state went (the least recent); a lock there is taken
        "refused",
        [_insert([0], [0], 0), _insert([0, 0], [0, 1], 1), _evict(0, 1), {"op": "lock", "node": 0}],
        "INV-14:lock-of-a-node-without-a-state",
    ),
    "mamba_state_recency": (  # the match refreshes the state at [0, 0], not the one at [0]
        "path",
        [
            _insert([0], [0], 1),
            _insert([0, 0], [0, 1], 2),
            _insert([1], [2], 3),
            _match([0, 0]),
            _evict(0, 1),
        ],
        "INV-35:evict-victim-order",
    ),
    "victims": (  # the match that splits [0, 0] in "" refreshes its lower half
        LRU_LEAVES,
        [_insert([0, 0], [0, 1], 0, ""), _insert([0], [2], 1), _match([0], ""), _evict(4, 0)],
        "INV-35:evict-victim-order",
    ),
}


def _trace(steps: list[dict[str, Any]]) -> dict[str, Any]:
    numbered = [{"id": i, **step} for i, step in enumerate(steps)]
    return {"format": "radixkv-trace/1", "mode": "mamba", "page_size": 1, "steps": numbered}


@pytest.mark.parametrize("policy", sorted(HABITS))
def test_each_policy_is_a_habit_of_sglang(policy: str) -> None:
    module = peer_adapter("sglang_mamba", "sglang's UnifiedRadixCache")
    profile: Profile = module.PROFILE
    radixkv_choice, steps, finding = HABITS[policy]
    document = {**_trace(steps), "semantics": profile.name}
    held = replay(document, module.factory, profile)
    assert held.passed, f"{policy}: {held.finding}: {held.message}"
    failed = replay(document, module.factory, profile.but(**{policy: radixkv_choice}))
    assert (failed.passed, failed.finding) == (False, finding)


def test_an_insert_without_a_state_is_outside_its_api_even_for_a_cached_key() -> None:
    """Why the profile says ``mamba_insert_state="required"``: sglang asserts a state on
    every insert (components/mamba.py:235), so the kit asks for none."""
    module = peer_adapter("sglang_mamba", "sglang's UnifiedRadixCache")
    steps = [_insert([0], [0], 0), _insert([0], [0], None)]
    document = {**_trace(steps), "semantics": module.PROFILE.name}
    result = replay(document, module.factory, module.PROFILE)
    assert result.finding == "AssertionError:insert@mamba.commit_insert_component_data"


def test_a_copy_without_room_is_a_step_sglang_never_takes() -> None:
    """Every state locked and the kit's pool full: sglang's pool, three slots per running
    request, would have room; the adapter says so before the match changes anything."""
    module = peer_adapter("sglang_mamba", "sglang's UnifiedRadixCache")
    steps = [
        _insert([0], [0], 0),
        _insert([1], [1], 1),
        _insert([0, 0, 0], [0, 2, 3], 2),
        {"op": "lock", "node": 1},
        {"op": "lock", "node": 0},
        _insert([0, 0], [0, 4], 3),
        {"op": "lock", "node": 5},
        _match([0, 0, 0]),
        _evict(1 << 20, 4),  # never reached: the run ended at the match
    ]
    document = {**_trace(steps), "semantics": module.PROFILE.name}
    result = replay(document, module.factory, module.PROFILE)
    assert (result.passed, result.steps) == (True, 7)


def test_a_short_search_finds_nothing_past_the_known_bug() -> None:
    module = peer_adapter("sglang_mamba", "sglang's UnifiedRadixCache")
    search = fixed_search(60, 25)
    report = run_conformance(
        module.factory, profile=module.PROFILE, settings=search, known=KNOWN_BUG
    )
    assert report.passed, [(f.finding, f.message) for f in report.failures]

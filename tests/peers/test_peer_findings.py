"""The peers' findings, each replayed step by step through its adapter (peers.md).

Each test plays the shrunk steps of one finding with plain values and asserts the wrong
observable, so it fails the day the peer fixes the bug (then the finding's row in the README
goes). The same findings as JSON vectors (FORMAT.md) are in ``tests/vectors/``; these cover
the SWA and Mamba steps the trace format cannot spell yet. A test skips, saying why, when its
peer is absent: sglang is ``pip install --no-deps sglang==0.5.23`` (plus ``msgspec`` for
the Rust core), pymllm a checkout named by ``PYMLLM_SRC``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import RecordingHost, peer_adapter


def _cache(module: str) -> Any:
    """The peer ``module``'s cache, page 1, around a host that has no state slots."""
    return peer_adapter(module, module).factory(1, RecordingHost(1, slots=False))


def _swa(window: int) -> tuple[RecordingHost, Any]:
    host = RecordingHost(1, window, slots=False)
    return host, peer_adapter("pymllm_swa", "pymllm_swa").factory(1, host)


# -- pymllm SWA mode ---------------------------------------------------------------------


def test_pymllm_swa_insert_diverging_inside_a_node_attaches_under_the_wrong_half() -> None:
    _, cache = _swa(2)
    cache.insert((1, 2, 3, 4), None, (1, 2, 3, 4))
    cache.insert((1, 2, 9, 9), None, (1, 2, 7, 8))
    contents = cache.contents()
    # the suffix [9, 9] hangs below [1, 2, 3, 4] instead of below [1, 2]
    assert contents[(None, (1, 2, 3, 4, 9, 9), 0)] == 8
    assert (None, (1, 2, 9, 9), 0) not in contents
    assert cache.match((1, 2, 9, 9), None)[0] == (1, 2)


def test_pymllm_swa_match_does_not_refresh_recency() -> None:
    host, cache = _swa(2)
    cache.insert((1,), None, (1,))
    cache.insert((2,), None, (2,))
    cache.match((1,), None)  # [1] is now the most recently used leaf
    cache.evict(1)
    assert host.freed == [(1,)]  # LRU would take [2]


def test_pymllm_swa_caches_a_suffix_whose_swa_kv_the_caller_freed_as_live() -> None:
    _, cache = _swa(2)
    cache.insert((1, 2, 3), None, (1, 2, 3), swa_evicted_seqlen=3)
    pages = cache.swa_pages()
    assert not any(tombstone for _, tombstone in pages.values())
    assert cache.match((1, 2, 3), None)[0] == (1, 2, 3)  # served without its SWA KV


def test_pymllm_swa_evictable_size_drifts_on_a_partly_swa_evicted_insert() -> None:
    _, cache = _swa(2)
    cache.insert((1, 2, 3), None, (1, 2, 3), swa_evicted_seqlen=1)
    evictable, protected, total = cache.sizes()
    assert (evictable + protected, total) == (2, 3)


def test_pymllm_swa_tombstone_cascade_stops_at_a_tombstoned_parent() -> None:
    _, cache = _swa(1)
    cache.insert((1, 2), None, (1, 2))
    cache.insert((1, 2, 3), None, (1, 2, 3))
    cache.evict(0, swa_num_tokens=1)  # tombstones [1, 2] (its child keeps it internal)
    assert cache.swa_pages()[(None, (1, 2))][1]
    freed = cache.evict(1)
    assert freed.full == 3  # [3] and then its tombstoned parent, one level only
    assert cache.sizes().evictable < 0  # and the counter went negative on the way


def test_pymllm_swa_tombstone_left_as_a_leaf_is_counted_as_swa_again() -> None:
    host, cache = _swa(1)
    top = cache.insert((1,), None, (1,)).handle
    cache.insert((1, 2), None, (1, 2))
    assert cache.evict(0, swa_num_tokens=1).swa == 1  # tombstones [1]: internal
    token = cache.lock(top)
    cache.evict(1)  # deletes [1, 2]; the locked tombstone [1] is left as a leaf
    assert cache.swa_pages() == {(None, (1,)): ((1,), True)}
    cache.unlock(top, token)
    again = cache.evict(1)
    assert again.swa == 1  # its SWA KV went at the first evict: counted twice
    assert host.freed_swa == [(1,)]


# -- pymllm MambaRadixCache --------------------------------------------------------------


def test_pymllm_mamba_split_leaves_full_lock_below_mamba_lock() -> None:
    host = RecordingHost(1, slots=False)
    cache = peer_adapter("pymllm_mamba", "pymllm_mamba").factory(1, host)
    inserted = cache.insert((1, 2, 3, 4), None, (10, 11, 12, 13), state_slot=5)
    token = cache.lock(inserted.handle)
    cache.match((1, 2), None)  # splits the locked node: the upper half copies mamba_lock_ref
    cache.unlock(inserted.handle, token)
    assert (0, 1) in cache.lock_counts()  # full_lock_ref 0 < mamba_lock_ref 1 (INV-30)


def test_pymllm_mamba_split_moves_the_state_to_the_upper_half() -> None:
    cache = _cache("pymllm_mamba")
    cache.insert((1, 2, 3, 4), None, (10, 11, 12, 13), state_slot=5)
    cache.match((1, 2), None)
    slots = {path: slot for (_, path), (_, slot) in cache.mamba_contents().items()}
    # slot 5 holds the state after [1, 2, 3, 4], now claimed by the prefix [1, 2]
    assert slots[(1, 2)] == 5
    assert slots[(1, 2, 3, 4)] is None


# -- the adapters themselves -------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "profile"),
    [
        ("sglang", "sglang"),
        ("sglang_rust", "sglang-rust"),
        ("sglang_events", "sglang"),
        ("sglang_rust_events", "sglang-rust"),
        ("pymllm", "pymllm"),
        ("pymllm_swa", "pymllm-swa"),
        ("pymllm_mamba", "pymllm-mamba"),
    ],
)
def test_each_peer_adapter_backs_its_claims_and_has_its_own_profile(
    module: str, profile: str
) -> None:
    from radixkv_conformance.protocol import require_capabilities

    peer = peer_adapter(module, module)
    adapter = peer.factory(1, RecordingHost(1, 2, slots=False))
    assert require_capabilities(adapter) == adapter.capabilities
    assert peer.PROFILE.name == profile
    assert adapter.notes  # the adapter's choices are printed with every report


def test_the_rust_core_frees_only_the_callers_duplicates() -> None:
    host = RecordingHost(1, slots=False)
    cache = peer_adapter("sglang_rust", "sglang_rust").factory(1, host)
    cache.insert((1, 2, 3), None, (10, 11, 12))
    # a request that matched [1, 2] holds the cache's 10, 11, then its own 21, 22
    prefix_len, _ = cache.insert((1, 2, 3, 4), None, (10, 11, 21, 22))
    assert prefix_len == 3
    assert host.freed == [(21,)]  # its duplicate of 12; never the cache's own 10, 11
    assert sorted(cache.contents().values()) == [10, 11, 12, 22]


def test_the_rust_core_events_adapter_reports_the_binding_queue_in_wire_form() -> None:
    from radixkv_spec.events import Cleared, Removed, Stored, parse_record

    cache = _cache("sglang_rust_events")
    assert cache.take_events() == []  # its construction's records are not part of a run
    cache.insert((1, 2), None, (10, 11))
    stored = [parse_record(record) for record in cache.take_events()]
    assert len(stored) == 1 and isinstance(stored[0], Stored)
    assert stored[0].token_ids == (1, 2) and len(stored[0].block_hashes) == 2
    assert cache.evict(2) == 2
    removed = [parse_record(record) for record in cache.take_events()]
    assert removed == [Removed(stored[0].block_hashes)]
    cache.reset()  # the binding records nothing here; sglang's cache asks for the clear
    assert [parse_record(record) for record in cache.take_events()] == [Cleared()]


# -- what follows a vector's failing step (a replay ends where the engine raised) ---------


def test_sglang_rust_unlock_held_by_child_then_the_correct_unlock_poisons_the_core() -> None:
    cache = _cache("sglang_rust")
    parent = cache.insert((0,), None, (0,))[1]
    child = cache.insert((0, 1), None, (0, 1))[1]
    token = cache.lock(child)
    cache.unlock(parent, None)  # no lock names [0]: accepted (sglang_rust_unlock_held_by_child)
    assert tuple(cache.sizes()) == (1, 1, 2)  # [0] counted evictable under a locked child
    with pytest.raises(RuntimeError, match="lock_ref=0"):
        cache.unlock(child, token)  # the correct unlock panics
    with pytest.raises(RuntimeError, match="mutex poisoned"):
        cache.sizes()


def test_sglang_rust_events_negative_token_poisons_the_core() -> None:
    cache = _cache("sglang_rust_events")
    cache.insert((1, 2), None, (10, 11))
    with pytest.raises(RuntimeError, match="non-negative int64"):
        cache.insert((-1,), None, (12,))  # sglang_rust_events_negative_token_poisons.json
    for valid_call in (
        lambda: cache.match((1, 2), None),
        lambda: cache.insert((3,), None, (13,)),
        cache.take_events,
    ):
        with pytest.raises(RuntimeError, match="mutex poisoned"):
            valid_call()


@pytest.mark.parametrize(
    ("tokens", "namespace", "error"),
    [((0, -1), None, IndexError), ((0,), 5, AttributeError)],
    ids=["negative-token", "int-extra-key"],
)
def test_sglang_events_bad_insert_stores_the_node_without_block_stored(
    tokens: tuple[int, ...], namespace: Any, error: type[Exception]
) -> None:
    cache = _cache("sglang_events")
    indices = tuple(range(10, 10 + len(tokens)))
    with pytest.raises(error):  # sglang_events_{negative_token,extra_key}_insert.json
        cache.insert(tokens, namespace, indices)
    assert cache.match(tokens, namespace)[0] == indices  # cached and matchable
    assert cache.take_events() == []  # but no BlockStored: a router never learns it

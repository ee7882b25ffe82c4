"""The vLLM adapter's loader (no vLLM needed) and, with ``VLLM_SRC`` set, short searches and
the pool driven directly (``direct=1``: ``tests/vectors/vllm_direct_*.json``)."""

from __future__ import annotations

import functools

import pytest
from radixkv_conformance import run_conformance
from radixkv_conformance.targets import load

from tests.helpers import RecordingHost, fixed_search, peer_adapter


def test_reset_is_refused_while_a_request_holds_blocks_and_frees_after() -> None:
    vllm = peer_adapter("vllm", "vLLM's prefix cache")
    host = RecordingHost()
    cache = vllm.factory(2, host, blocks="4")
    got = cache.insert((1, 2, 3, 4, 5), "a", ())
    assert got.prefix_len == 0 and len(got.indices) == 4
    assert cache.match((1, 2, 3), "a")[0] == got.indices[:2]
    assert cache.match((1, 2, 3), None)[0] == ()  # the salt is in the first block's hash
    token = cache.lock(got.handle)
    with pytest.raises(vllm.ResetRefused):
        cache.reset()
    cache.unlock(got.handle, token)
    cache.reset()
    assert sorted(host.freed) == sorted([got.indices[:2], got.indices[2:]])
    assert cache.sizes().total == 0


def test_an_insert_into_a_full_pool_evicts_the_least_recent_block() -> None:
    vllm = peer_adapter("vllm", "vLLM's prefix cache")
    host = RecordingHost()
    cache = vllm.factory(2, host, blocks="2")
    first = cache.insert((1, 1), None, ())
    cache.insert((2, 2), None, ())
    cache.insert((3, 3), None, ())  # the pool holds two blocks: (1, 1)'s goes
    assert host.freed == [first.indices]
    assert cache.evict(2) == 2 and len(host.freed) == 2


@pytest.mark.search
def test_a_short_search_holds_and_evicts_by_allocating() -> None:
    vllm = peer_adapter("vllm", "vLLM's prefix cache")
    short = fixed_search(40, 20)
    small = functools.partial(vllm.factory, blocks="4")  # a small pool evicts to make room
    report = run_conformance(small, profile=vllm.PROFILE, settings=short, name="vllm")
    report.raise_for_failures()
    assert report.stats["tokens evicted to make room"] > 0
    assert report.stats["event records"] > 0


def test_the_direct_option_claims_bad_input_and_unlock_checks() -> None:
    vllm = peer_adapter("vllm", "vLLM's prefix cache")
    host = RecordingHost()
    factory, profile = load("radixkv_conformance.adapters.vllm:factory", {"direct": "1"})
    direct = factory(2, host)  # as ``radixkv check ... --option direct=1`` builds it
    assert {"bad_input", "unlock_checks"} <= direct.capabilities and profile is vllm.PROFILE
    assert vllm.factory_direct(2, host).capabilities == direct.capabilities
    plain = vllm.factory(2, host)
    assert not {"bad_input", "unlock_checks"} & plain.capabilities


def test_direct_evict_of_a_negative_count_reaches_get_new_blocks() -> None:
    """vLLM's pool takes ``get_new_blocks(-1)``: it counts a free block it does not have,
    and taking every block it counts free hands out the free queue's sentinel."""
    vllm = peer_adapter("vllm", "vLLM's prefix cache")
    plain = vllm.factory(1, RecordingHost(), blocks="3")
    assert plain.evict(-1) == 0 and plain.pool.get_num_free_blocks() == 3  # never reached it
    cache = vllm.factory_direct(1, RecordingHost(), blocks="3")
    pool = cache.pool
    before = cache.snapshot()
    assert cache.evict(-1) == 0  # accepted: no usage error
    assert cache.snapshot() != before  # the kit sees the change (the free count)
    assert len(pool.free_block_queue.get_all_free_blocks()) == 3
    assert pool.get_num_free_blocks() == 4
    handed_out = pool.get_new_blocks(pool.get_num_free_blocks())
    assert sorted(b.block_id for b in handed_out) == [-1, 1, 2, 3]


def test_direct_lock_and_unlock_are_the_pools_touch_and_free_blocks() -> None:
    vllm = peer_adapter("vllm", "vLLM's prefix cache")
    cache = vllm.factory_direct(2, RecordingHost(), blocks="4")
    got = cache.insert((1, 2, 3, 4), None, ())
    blocks = [cache.pool.blocks[i // 2] for i in got.indices[::2]]
    token = cache.lock(got.handle)
    assert token == tuple(b.block_id for b in blocks) and cache.manager.req_to_blocks == {}
    assert [b.ref_cnt for b in blocks] == [1, 1] and cache.sizes().protected == 4
    cache.unlock(got.handle, token)
    assert [b.ref_cnt for b in blocks] == [0, 0] and cache.sizes().evictable == 4
    tail = [b.block_id for b in cache.pool.free_block_queue.get_all_free_blocks()][-2:]
    assert tail == [b.block_id for b in reversed(blocks)]  # freed tail first: evicted last


def test_direct_unlock_without_a_lock_frees_a_block_nobody_holds() -> None:
    """vLLM's ``free_blocks`` of a block nobody holds: ``ref_cnt`` -1 in the free queue;
    a request that touches it then holds it at 0, and an allocation evicts it under it."""
    vllm = peer_adapter("vllm", "vLLM's prefix cache")
    host = RecordingHost()
    cache = vllm.factory_direct(1, host, blocks="3")
    got = cache.insert((7,), None, ())
    block = cache.pool.blocks[got.indices[0]]
    cache.unlock(got.handle, None)  # accepted: no usage error
    assert block.ref_cnt == -1 and block in cache.pool.free_block_queue.get_all_free_blocks()
    cache.lock(got.handle)  # a request holds it now
    assert block.ref_cnt == 0 and block in cache.pool.free_block_queue.get_all_free_blocks()
    assert cache.evict(1) == 1 and host.freed == [got.indices]  # the held block is evicted
    assert cache.match((7,), None)[0] == ()


def test_an_unheld_block_freed_directly_fails_vllms_assert_when_allocated() -> None:
    vllm = peer_adapter("vllm", "vLLM's prefix cache")
    cache = vllm.factory_direct(1, RecordingHost(), blocks="3")
    got = cache.insert((7,), None, ())
    cache.unlock(got.handle, None)
    with pytest.raises(AssertionError):  # get_new_blocks: assert block.ref_cnt == 0
        cache.evict(3)


DIRECT_FINDINGS = (  # what vLLM checks before its cache (validate_token_ids), not in it
    "INV-14:bad-insert-with-a-bad-token",
    "INV-14:bad-match-with-a-bad-token",
    "INV-14:bad-insert-with-a-non-str-extra-key",
    "INV-14:bad-match-with-a-non-str-extra-key",
    "INV-14:bad-insert-with-a-value-shorter-than-the-key",  # vLLM takes no indices at all
)


@pytest.mark.search
def test_a_direct_search_finds_both_bugs_and_holds_otherwise() -> None:
    """With ``direct=1`` the kit finds both vectors' bugs, and lock, unlock and evict by the
    pool hold every other check (the unmatched unlock acknowledged, so the search goes on)."""
    vllm = peer_adapter("vllm", "vLLM's prefix cache")
    short = fixed_search(150, 20)
    small = functools.partial(vllm.factory_direct, blocks="4")
    unmatched = "INV-14:unmatched-unlock"
    known = (*DIRECT_FINDINGS, unmatched)
    report = run_conformance(
        small, profile=vllm.PROFILE, settings=short, name="vllm-direct", known=known
    )
    assert [f.finding for f in report.failures] == ["INV-14:bad-evict-a-negative-count"]
    assert report.stats[f"acknowledged: {unmatched}"] > 0
    assert report.stats["tokens evicted to make room"] > 0 and report.stats["unlock"] > 0

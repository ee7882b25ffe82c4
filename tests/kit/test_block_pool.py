"""The planted block pool (``adapters.block_pool``): the pool itself, each planted bug found
by the kit's rules on a replayed trace, and the kit's rules for a cache that refuses an
insert for lack of room (capability ``capacity``, INV-15)."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from radixkv_conformance import AdapterError, NoRoom, require_capabilities
from radixkv_conformance.adapters import block_pool
from radixkv_conformance.profile import RADIXKV
from radixkv_conformance.protocol import AdapterFactory, Host
from radixkv_conformance.registry import machine_for
from radixkv_conformance.replay import replay

PROFILE = block_pool.PROFILE


class RecordingHost:
    """The host of a pool of pages of 2 tokens: it records what the pool frees."""

    def __init__(self) -> None:
        self.page_size = 2
        self.sliding_window: int | None = None
        self.freed: list[tuple[int, ...]] = []

    def free(self, indices: tuple[int, ...]) -> None:
        self.freed.append(indices)

    def __call__(self, indices: tuple[int, ...]) -> None:
        self.free(indices)

    def free_swa(self, indices: tuple[int, ...]) -> None:
        raise AssertionError("a block pool frees no sliding-window KV")

    def alloc_slot(self) -> int | None:
        raise AssertionError("a block pool holds no state slots")

    def free_slot(self, slot: int) -> None:
        raise AssertionError("a block pool holds no state slots")

    def copy_state(self, src: int, dst: int) -> None:
        raise AssertionError("a block pool holds no state slots")


def _pool(bugs: str = "", blocks: int = 4) -> tuple[block_pool.BlockPoolAdapter, RecordingHost]:
    host = RecordingHost()  # page_size 2: block b holds (2b, 2b + 1)
    return block_pool.factory(2, host, blocks=blocks, bugs=bugs), host


# ---- the pool -----------------------------------------------------------------------------


@pytest.mark.parametrize(("bugs", "first"), [("", (2, 3)), ("head_first", (0, 1))])
def test_a_finished_request_queues_its_last_block_first(bugs: str, first: tuple[int, ...]) -> None:
    pool, host = _pool(bugs)
    got = pool.insert((1, 1, 2, 2), None, ())
    assert got.indices == (0, 1, 2, 3) and got.prefix_len == 0
    assert pool.evict(2) == 2
    assert host.freed == [first]  # the child's block goes first; the bug takes the parent


def test_an_insert_into_a_full_pool_evicts_the_least_recently_released_block() -> None:
    pool, host = _pool()
    for token in range(4):
        pool.insert((token, token), None, ())
    pool.insert((0, 0), None, ())  # a hit: block 0 is released again, behind the others
    got = pool.insert((9, 9), None, ())
    assert host.freed == [(2, 3)]  # block 1, released before blocks 2, 3 and 0 now
    assert got.indices == (2, 3)


@pytest.mark.parametrize(("bugs", "freed"), [("", []), ("free_hit", [(0, 1)])])
def test_a_hit_takes_a_cached_block_out_of_the_free_queue(
    bugs: str, freed: list[tuple[int, ...]]
) -> None:
    pool, host = _pool(bugs)
    handle = pool.insert((1, 1), None, ()).handle
    token = pool.lock(handle)
    pool.evict(1 << 20)
    assert host.freed == freed  # held: never evicted (the bug evicts it under the request)
    if not bugs:
        assert pool.sizes() == (0, 2, 2)
        pool.unlock(handle, token)
        assert pool.evict(2) == 2 and host.freed == [(0, 1)]


@pytest.mark.parametrize("bugs", ["", "refused_ref"])
def test_an_allocation_without_room_raises_no_room(bugs: str) -> None:
    pool, host = _pool(bugs)
    handle = pool.insert((1, 1, 2, 2), None, ()).handle
    pool.lock(handle)  # two blocks held, two free
    before = pool.snapshot()
    with pytest.raises(NoRoom):
        pool.insert((1, 1, 2, 2, 3, 3, 4, 4, 5, 5), None, ())  # three more blocks
    assert (pool.snapshot() == before) == (not bugs)  # the bug keeps its hold on the prefix
    assert host.freed == []
    pool.insert((1, 1, 2, 2, 3, 3, 4, 4), None, ())  # two more fit


@pytest.mark.parametrize(("bugs", "shared"), [("", False), ("short_salt", True)])
def test_a_salt_keeps_every_prompt_in_its_namespace(bugs: str, shared: bool) -> None:
    pool, _ = _pool(bugs)
    pool.insert((1, 1), None, ())
    assert (pool.match((1, 1), "a")[0] == (0, 1)) == shared
    pool.insert((1, 1, 2, 2), "a", ())  # two blocks: salted either way
    assert pool.match((1, 1, 2, 2), None)[0] == (0, 1)


@pytest.mark.parametrize(("bugs", "hit"), [("", ()), ("stale_hash", (0, 1))])
def test_an_evicted_block_is_no_longer_found_by_its_hash(bugs: str, hit: tuple[int, ...]) -> None:
    pool, _ = _pool(bugs, blocks=1)
    pool.insert((1, 1), None, ())
    pool.insert((2, 2), None, ())  # block 0 again, for another prompt
    assert pool.match((1, 1), None)[0] == hit
    assert pool.match((2, 2), None)[0] == (0, 1)


def test_reset_is_refused_while_a_request_holds_a_block() -> None:
    pool, host = _pool()
    handle = pool.insert((1, 1), "a", ()).handle
    token = pool.lock(handle)
    with pytest.raises(ValueError, match="reset refused"):
        pool.reset()
    pool.unlock(handle, token)
    with pytest.raises(ValueError, match="no running request"):
        pool.unlock(handle, token)
    pool.reset()
    assert host.freed == [(0, 1)] and pool.sizes().total == 0


def test_the_factory_names_what_it_accepts() -> None:
    with pytest.raises(ValueError, match="known: "):
        block_pool.factory(1, RecordingHost(), bugs="no_such_bug")
    with pytest.raises(ValueError, match="at least 1"):
        block_pool.factory(1, RecordingHost(), blocks="0")


# ---- each planted bug, found by the kit's rules --------------------------------------------


def _trace(*steps: dict[str, Any]) -> dict[str, Any]:
    return {
        "format": "radixkv-trace/1",
        "semantics": PROFILE.name,
        "mode": "plain",
        "page_size": 1,
        "steps": [{"id": i, **step} for i, step in enumerate(steps)],
    }


def _insert(*tokens: int, namespace: str | None = None) -> dict[str, Any]:
    return {"op": "insert", "tokens": list(tokens), "namespace": namespace, "indices": []}


TRACES = {  # a bug -> a trace the kit fails with it, and the finding id
    "free_hit": (
        _trace(_insert(0), {"op": "lock", "node": 0}, {"op": "evict", "num_tokens": 1}),
        "INV-11:evict-locked-victim",
    ),
    "head_first": (
        _trace(_insert(0, 0), {"op": "evict", "num_tokens": 1}),
        "INV-11:evict-not-leaf",
    ),
    "stale_hash": (
        _trace(
            _insert(0),
            {"op": "evict", "num_tokens": 1},
            {"op": "match", "tokens": [0], "namespace": None},
        ),
        "INV-10:match",
    ),
    "short_salt": (
        _trace(_insert(0), {"op": "match", "tokens": [0], "namespace": "a"}),
        "INV-10:match",
    ),
    "refused_ref": (
        _trace(_insert(0, 0), _insert(0, 0, 0, 0, 0)),
        "INV-15:insert-refusal-changed",
    ),
}


@pytest.mark.parametrize("bug", sorted(block_pool.BUGS))
def test_each_planted_bug_fails_its_trace_and_the_pool_without_it_passes(bug: str) -> None:
    trace, finding = TRACES[bug]
    found = replay(trace, functools.partial(block_pool.factory, bugs=bug), PROFILE)
    assert found.finding == finding, found
    assert replay(trace, block_pool.factory, PROFILE).passed


# ---- the kit's refusal rules (INV-15) -------------------------------------------------------


def _declaring(capacity: int) -> AdapterFactory:
    """The pool of 4 blocks, its adapter declaring another ``capacity``."""

    def build(page_size: int, host: Host) -> block_pool.BlockPoolAdapter:
        adapter = block_pool.factory(page_size, host, blocks=4)
        adapter.capacity = capacity
        return adapter

    return build


FULL_AND_HELD = (_insert(0, 0, 0, 0), {"op": "lock", "node": 0})  # every block held


def test_a_refusal_with_room_to_spare_is_a_finding() -> None:
    trace = _trace(*FULL_AND_HELD, _insert(1))
    assert replay(trace, _declaring(4), PROFILE).passed  # rightly refused: nothing free
    found = replay(trace, _declaring(5), PROFILE)  # the spec counts a fifth page, free
    assert found.finding == "INV-15:insert-refusal-with-room", found


def test_an_insert_accepted_without_room_is_a_finding() -> None:
    trace = _trace(_insert(0, 0, 0, 0))
    assert replay(trace, _declaring(4), PROFILE).passed
    found = replay(trace, _declaring(3), PROFILE)  # four pages asked of three
    assert found.finding == "INV-15:insert-accepted-without-room", found


def test_a_refused_insert_is_no_handle_and_changes_no_model() -> None:
    """After a refusal the spec holds what it held: a lock and unlock of the held key,
    and an eviction of everything, find the pool as the spec does."""
    trace = _trace(
        *FULL_AND_HELD,
        _insert(1),
        {"op": "unlock", "node": 0, "lock": 1},
        {"op": "evict", "num_tokens": 1 << 20},
        _insert(1),
    )
    result = replay(trace, block_pool.factory, PROFILE)
    assert result.passed and result.steps == 6


def test_a_capacity_claim_is_checked_before_any_step() -> None:
    adapter = block_pool.factory(1, RecordingHost())
    assert require_capabilities(adapter) >= {"capacity"}
    adapter.capacity = 0
    with pytest.raises(AdapterError, match="capacity must be a positive int"):
        require_capabilities(adapter)
    del adapter.capacity
    with pytest.raises(AdapterError, match=r"claims capability 'capacity'.* has no capacity"):
        require_capabilities(adapter)
    with pytest.raises(AdapterError, match="has the caller allocate"):
        machine_for("caller_allocates", block_pool.factory, RADIXKV)

"""KV events from every cache: exact records, the SWA and Mamba rules, and the stream
rebuilt by the spec's router model after every operation (SPEC.md, "KV events")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from radixkv_spec import page_hashes
from radixkv_spec.events import EventStreamModel, expected_page_set

from radixkv import KVIndexAllocator, MambaStatePool, RadixCache, RadixKey, RadixTrie
from radixkv.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventRecorder,
    KVCacheEvent,
    block_hash,
    to_wire,
)
from radixkv.mamba_radix_cache import MambaRadixCache
from radixkv.radix_trie import TrieNode
from radixkv.tree import TreeNode
from tests.helpers import HybridPool

Position = tuple[str | None, tuple[Any, ...]]


def tree_positions(cache: RadixCache | MambaRadixCache) -> set[Position]:
    """Every cached page of a RadixCache / MambaRadixCache: (namespace, path to its end)."""
    out: set[Position] = set()
    p = cache.page_size
    stack: list[tuple[TreeNode, tuple[Any, ...]]] = [(cache.root, ())]
    while stack:
        node, path = stack.pop()
        for child in node.children.values():
            full = path + tuple(child.tokens)
            ends = range(len(path) + p, len(full) + 1, p)
            out.update((child.extra_key, full[:end]) for end in ends)
            stack.append((child, full))
    return out


def trie_positions(root: TrieNode, page_size: int) -> set[Position]:
    out: set[Position] = set()
    stack: list[tuple[TreeNode, tuple[Any, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        for child in node.children.values():
            full = path + tuple(child.tokens)
            ends = range(len(path) + page_size, len(full) + 1, page_size)
            out.update((None, full[:end]) for end in ends)
            stack.append((child, full))
    return out


def stream(recorder: EventRecorder, model: EventStreamModel) -> None:
    """What a router does: apply the wire form of every new record, in order."""
    for event in recorder.take():
        model.apply_wire(to_wire(event))


def h(ns: str | None, tokens: list[int], p: int) -> list[int]:
    return [block_hash(x) for x in page_hashes(ns, tokens, p)]


# ---- exact records -----------------------------------------------------------------------


def test_records_of_insert_split_evict_reset() -> None:
    recorder = EventRecorder()
    cache = RadixCache(2, event_listener=recorder)
    cache.insert(RadixKey([1, 2, 3, 4, 9]))  # the unaligned 9 is not cached: no page
    cache.insert(RadixKey([1, 2, 5, 6], "a"))
    assert recorder.take() == [
        BlockStored(h(None, [1, 2, 3, 4], 2), None, [1, 2, 3, 4], 2),
        BlockStored(h("a", [1, 2, 5, 6], 2), None, [1, 2, 5, 6], 2, extra_key="a"),
    ]
    cache.match_prefix(RadixKey([1, 2, 7]))  # splits [1 2 | 3 4]: the page set is unchanged
    assert recorder.take() == []
    cache.insert(RadixKey([1, 2, 7, 8]))
    page_12, page_1234 = h(None, [1, 2, 3, 4], 2)
    assert recorder.take() == [
        BlockStored(h(None, [1, 2, 7, 8], 2)[1:], page_12, [7, 8], 2),
    ]
    cache.evict(2)  # the least recently used leaf: [3 4]
    assert recorder.take() == [BlockRemoved([page_1234])]
    cache.reset()
    assert recorder.take() == [AllBlocksCleared()]


def test_wire_form_is_vllm_shaped() -> None:
    """Maps tagged ``type`` with vLLM 0.33's field names; the namespace as ``cache_salt``."""
    stored = BlockStored([7, 8], 6, [1, 2, 3, 4], 2)
    assert to_wire(stored) == {
        "type": "BlockStored",
        "block_hashes": [7, 8],
        "parent_block_hash": 6,
        "token_ids": [1, 2, 3, 4],
        "block_size": 2,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
    }
    named = to_wire(BlockStored([7], None, [1, 2], 2, extra_key="a"))
    assert named["cache_salt"] == "a" and named["lora_name"] is None
    assert to_wire(BlockStored([7], None, [(1, 2)], 1))["token_ids"] == [[1, 2]]
    assert to_wire(BlockRemoved([7])) == {
        "type": "BlockRemoved",
        "block_hashes": [7],
        "medium": "GPU",
    }
    assert to_wire(AllBlocksCleared()) == {"type": "AllBlocksCleared"}


def test_block_hashes_are_unsigned_64_bit() -> None:
    recorder = EventRecorder()
    cache = RadixCache(1, event_listener=recorder)
    cache.insert(RadixKey(list(range(64))))
    (record,) = recorder.take()
    assert isinstance(record, BlockStored)
    assert all(0 <= x < 2**64 for x in record.block_hashes)
    assert any(x >= 2**63 for x in record.block_hashes)  # 64 hashes: some have the top bit


def test_no_listener_hashes_nothing() -> None:
    cache = RadixCache(1)
    cache.insert(RadixKey([1, 2, 3]))
    cache.match_prefix(RadixKey([1, 2]))
    cache.evict(1)
    assert all(n.hash_values is None for n in _nodes(cache.root))


def test_listener_must_be_callable() -> None:
    with pytest.raises(TypeError, match="event_listener"):
        RadixCache(1, event_listener=[])  # type: ignore[arg-type]  # the error under test


def test_batch_takes_in_order_with_one_time() -> None:
    recorder = EventRecorder(clock=lambda: 12.5)
    cache = RadixCache(1, event_listener=recorder)
    cache.insert(RadixKey([1]))
    cache.reset()
    batch = recorder.take_batch()
    assert batch.ts == 12.5
    assert [type(e) for e in batch.events] == [BlockStored, AllBlocksCleared]
    assert len(recorder) == 0


# ---- SWA: a tombstone still holds full KV ------------------------------------------------


def test_swa_tombstone_keeps_its_pages_in_the_stream() -> None:
    recorder = EventRecorder()
    pool = HybridPool()
    cache = RadixCache(
        1, sliding_window_size=1, token_to_kv_pool_allocator=pool, event_listener=recorder
    )
    cache.insert(RadixKey([1, 2]), pool.alloc(2))
    cache.insert(
        RadixKey([1, 2, 3]),
        torch.cat([cache.match_prefix(RadixKey([1, 2])).indices, pool.alloc(1)]),
        prev_prefix_len=2,
    )
    model = EventStreamModel(1)
    stream(recorder, model)
    result = cache.evict(0, swa_num_tokens=2)  # tombstones [1 2], then deletes nothing more
    assert result.full_evicted == 0 and result.swa_evicted >= 2
    assert recorder.take() == []  # tombstoning changes no page: nothing is emitted
    assert model.positions() == {(None, (1,)), (None, (1, 2)), (None, (1, 2, 3))}
    cache.evict(3)  # the leaf goes, and the tombstones it leaves childless with it
    stream(recorder, model)
    assert model.positions() == set()


def test_swa_insert_below_the_window_stores_a_tombstone_and_a_live_leaf() -> None:
    recorder = EventRecorder()
    pool = HybridPool()
    cache = RadixCache(
        1, sliding_window_size=2, token_to_kv_pool_allocator=pool, event_listener=recorder
    )
    value = pool.alloc(4)
    pool.caller_free_swa(value[:2])
    cache.insert(RadixKey([1, 2, 3, 4]), value, swa_evicted_seqlen=2)
    events = recorder.take()
    assert [e.token_ids for e in events if isinstance(e, BlockStored)] == [[1, 2], [3, 4]]
    model = EventStreamModel(1)
    for e in events:
        model.apply_wire(to_wire(e))
    assert model.page_set() == expected_page_set(tree_positions(cache), 1)


# ---- Mamba: a dropped state keeps its KV pages -------------------------------------------


def test_mamba_dropped_state_emits_nothing() -> None:
    recorder = EventRecorder()
    kv, states = KVIndexAllocator(64), MambaStatePool(8, (2,))
    cache = MambaRadixCache(2, kv, states, event_listener=recorder)
    for tokens in ([1, 2, 3, 4], [1, 2, 3, 4, 5, 6]):
        value = kv.alloc(len(tokens))
        assert value is not None
        result = cache.insert(RadixKey(tokens), value, mamba_value=states.alloc_track_slot())
        kv.free(value[: result.prefix_len])
    model = EventStreamModel(2)
    stream(recorder, model)
    before = model.page_set()
    cache.evict(0, swa_num_tokens=1)  # the LRU state is [1 2 3 4]'s: an inner node, tombstoned
    assert recorder.take() == []
    assert model.page_set() == before == expected_page_set(tree_positions(cache), 2)
    cache.reset()
    stream(recorder, model)
    assert model.page_set() == frozenset()


# ---- every cache against the router model, after every operation --------------------------

OPS = st.lists(
    st.tuples(
        st.sampled_from(["insert", "match", "evict", "reset"]),
        st.lists(st.integers(0, 3), min_size=0, max_size=9),
        st.sampled_from([None, "a"]),
        st.integers(0, 6),
    ),
    max_size=25,
)


def _nodes(root: TreeNode) -> Iterator[TreeNode]:
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children.values())


def _check_stream(
    apply: Callable[[str, list[int], str | None, int], None],
    positions: Callable[[], set[Position]],
    recorder: EventRecorder,
    page_size: int,
    ops: list[tuple[str, list[int], str | None, int]],
) -> int:
    model = EventStreamModel(page_size)
    for op in ops:
        apply(*op)
        stream(recorder, model)  # INV-40..42 checked as it applies
        assert model.positions() == positions()  # INV-43
    return model.records


@settings(max_examples=60, deadline=None)
@given(page_size=st.sampled_from([1, 2, 4]), ops=OPS)
def test_radix_cache_stream_rebuilds_its_pages(
    page_size: int, ops: list[tuple[str, list[int], str | None, int]]
) -> None:
    recorder = EventRecorder()
    cache = RadixCache(page_size, event_listener=recorder)

    def apply(op: str, tokens: list[int], ns: str | None, n: int) -> None:
        if op == "insert":
            cache.insert(RadixKey(tokens, ns))
        elif op == "match":
            cache.match_prefix(RadixKey(tokens, ns))
        elif op == "evict":
            cache.evict(n)
        else:
            cache.reset()

    _check_stream(apply, lambda: tree_positions(cache), recorder, page_size, ops)


@settings(max_examples=60, deadline=None)
@given(page_size=st.sampled_from([1, 2]), window=st.sampled_from([1, 2, 4]), ops=OPS)
def test_swa_stream_rebuilds_its_pages(
    page_size: int, window: int, ops: list[tuple[str, list[int], str | None, int]]
) -> None:
    recorder = EventRecorder()
    pool = HybridPool()
    cache = RadixCache(
        page_size,
        sliding_window_size=window,
        token_to_kv_pool_allocator=pool,
        event_listener=recorder,
    )

    def apply(op: str, tokens: list[int], ns: str | None, n: int) -> None:
        aligned = len(tokens) // page_size * page_size
        if op == "insert":
            value = pool.alloc(len(tokens))
            dropped = n // page_size * page_size if n <= aligned else 0
            pool.caller_free_swa(value[:dropped])
            cache.insert(RadixKey(tokens, ns), value, swa_evicted_seqlen=dropped)
            pool.free(value[aligned:])
        elif op == "match":
            cache.match_prefix(RadixKey(tokens, ns))
        elif op == "evict":
            cache.evict(n % 3, swa_num_tokens=n)
        else:
            cache.reset()

    _check_stream(apply, lambda: tree_positions(cache), recorder, page_size, ops)


@settings(max_examples=60, deadline=None)
@given(page_size=st.sampled_from([1, 2]), ops=OPS)
def test_mamba_stream_rebuilds_its_pages(
    page_size: int, ops: list[tuple[str, list[int], str | None, int]]
) -> None:
    recorder = EventRecorder()
    kv, states = KVIndexAllocator(4096), MambaStatePool(64, (1,))
    cache = MambaRadixCache(page_size, kv, states, event_listener=recorder)

    def apply(op: str, tokens: list[int], ns: str | None, n: int) -> None:
        if op == "insert":
            value = kv.alloc(len(tokens))
            slot = states.alloc_track_slot()
            assert value is not None and slot is not None
            result = cache.insert(RadixKey(tokens, ns), value, mamba_value=slot)
            aligned = len(tokens) // page_size * page_size
            kv.free(torch.cat([value[: result.prefix_len], value[aligned:]]))
            if result.mamba_exist:
                states.free_track_slot(slot)
        elif op == "match":
            cow = cache.match_prefix(RadixKey(tokens, ns), cow=True).cow_slot
            if cow is not None:
                states.free_track_slot(cow)
        elif op == "evict":
            cache.evict(n % 3, swa_num_tokens=n % 4)
        else:
            cache.reset()

    _check_stream(apply, lambda: tree_positions(cache), recorder, page_size, ops)


@settings(max_examples=60, deadline=None)
@given(page_size=st.sampled_from([1, 2]), ops=OPS)
def test_radix_trie_stream_rebuilds_its_pages(
    page_size: int, ops: list[tuple[str, list[int], str | None, int]]
) -> None:
    recorder = EventRecorder()
    trie = RadixTrie(page_size, event_listener=recorder)
    blocks = iter(range(10**6))

    def apply(op: str, tokens: list[int], ns: str | None, n: int) -> None:
        aligned = tokens[: len(tokens) // page_size * page_size]
        if op == "insert":
            trie.insert(aligned, [next(blocks) for _ in range(len(aligned) // page_size)])
        elif op == "match":
            trie.match_prefix(tokens)
        else:  # the trie has no reset: evict instead
            trie.evict_blocks(n)

    _check_stream(apply, lambda: trie_positions(trie.root, page_size), recorder, page_size, ops)


def test_events_do_not_change_behaviour() -> None:
    """Same operations with and without a listener: same tree, same frees."""

    def run(listener: Any) -> list[Any]:
        freed: list[list[int]] = []

        class Pool:
            device = torch.device("cpu")

            def free(self, indices: torch.Tensor) -> None:
                freed.append(indices.tolist())

        cache = RadixCache(2, token_to_kv_pool_allocator=Pool(), event_listener=listener)
        cache.insert(RadixKey([1, 2, 3, 4]), torch.arange(4))
        cache.insert(RadixKey([1, 2, 5, 6]), torch.arange(10, 14))
        cache.match_prefix(RadixKey([1, 2, 3, 4]))
        cache.evict(2)
        return [freed, cache.total_size(), sorted(tree_positions(cache))]

    events: list[KVCacheEvent] = []
    assert run(None) == run(events.append)
    assert len(events) == 3

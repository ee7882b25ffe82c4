"""What a router is sent: the batch shape vLLM 0.33 and Dynamo decode, the pages kept out
of the stream (the ``""`` namespace, token ids a router cannot read), and replay
(SPEC.md, "KV events")."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from radixkv_spec.events import EventStreamModel, Stored

from radixkv import RadixCache, RadixKey
from radixkv.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventRecorder,
    KVCacheEvent,
    RouterFilter,
    block_hash,
    publishable_token,
    to_wire,
)
from radixkv.hashing import chain_page_hashes
from tests.events.test_events import Position, tree_positions

zmq = pytest.importorskip("zmq")
msgspec = pytest.importorskip("msgspec")

from radixkv.events.publisher import END_SEQ, ZmqEventPublisher, parse_seq  # noqa: E402
from radixkv.events.wire import decode_batch, encode_batch  # noqa: E402


def published(positions: set[Position]) -> set[Position]:
    """The pages a router is told of: not in ``""``, every token on the path an id < 2**32."""
    return {
        (ns, path) for ns, path in positions if ns != "" and all(publishable_token(t) for t in path)
    }


def apply(model: EventStreamModel, events: list[KVCacheEvent], gate: RouterFilter) -> None:
    for event in events:
        sent = gate(event)
        if sent is not None:
            model.apply_wire(to_wire(sent))


# ---- the filter ---------------------------------------------------------------------------


def test_the_empty_namespace_is_not_published() -> None:
    """A router reads cache_salt "" as no salt: "" pages would collide with None's."""
    recorder, gate = EventRecorder(), RouterFilter()
    cache = RadixCache(1, event_listener=recorder)
    cache.insert(RadixKey([1, 2], ""))
    cache.insert(RadixKey([1, 2, 3], ""))
    cache.insert(RadixKey([1, 2], None))
    sent = [gate(e) for e in recorder.take()]
    assert sent[:2] == [None, None] and isinstance(sent[2], BlockStored)
    assert gate.refused_pages == 3
    cache.evict(10)  # every page goes: only the None namespace's removals are sent
    removed = [gate(e) for e in recorder.take()]
    assert [r for r in removed if r is not None] == [BlockRemoved(sent[2].block_hashes)]


def test_a_page_after_a_token_over_2_32_is_not_published_nor_any_page_under_it() -> None:
    recorder, gate = EventRecorder(), RouterFilter()
    cache = RadixCache(2, event_listener=recorder)
    cache.insert(RadixKey([1, 2, 3, 2**32, 5, 6]))
    (stored,) = recorder.take()
    first = gate(stored)
    assert isinstance(first, BlockStored) and isinstance(stored, BlockStored)
    assert first.token_ids == [1, 2] and first.block_hashes == stored.block_hashes[:1]
    cache.insert(RadixKey([1, 2, 3, 2**32, 5, 6, 7, 8]))  # below a refused page: refused
    assert [gate(e) for e in recorder.take()] == [None]
    assert gate.refused_pages == 3
    cache.reset()
    assert [gate(e) for e in recorder.take()] == [AllBlocksCleared()]


def test_bigram_tokens_are_not_published() -> None:
    gate = RouterFilter()
    assert gate(BlockStored([7], None, [(1, 2)], 1)) is None
    assert not publishable_token((1, 2)) and not publishable_token(-1)
    assert publishable_token(2**32 - 1) and not publishable_token(2**32)
    assert not publishable_token(True)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["insert", "insert", "evict", "reset"]),
            st.lists(st.sampled_from([0, 1, 2, 2**32 - 1, 2**32, 2**40]), max_size=7),
            st.sampled_from([None, "", "a"]),
        ),
        max_size=25,
    ),
    st.sampled_from([1, 2]),
)
def test_the_published_stream_is_consistent_and_says_exactly_the_publishable_pages(
    ops: list[tuple[str, list[int], str | None]], page_size: int
) -> None:
    """The filtered stream breaks no rule of the spec's router model (INV-40..42), and after
    every operation rebuilds exactly the cached pages a router may be told of."""
    recorder, gate = EventRecorder(), RouterFilter()
    cache = RadixCache(page_size, event_listener=recorder)
    model = EventStreamModel(page_size)
    for op, tokens, ns in ops:
        if op == "insert":
            cache.insert(RadixKey(tokens, ns))
        elif op == "evict":
            cache.evict(len(tokens))
        else:
            cache.reset()
        apply(model, recorder.take(), gate)
        assert model.positions() == published(tree_positions(cache))


# ---- the batch on the wire -----------------------------------------------------------------


def test_a_batch_is_ts_records_rank() -> None:
    recorder = EventRecorder(clock=lambda: 3.5)
    cache = RadixCache(1, event_listener=recorder)
    cache.insert(RadixKey([1], "ns"))
    assert decode_batch(encode_batch(recorder.take_batch()))[::2] == [3.5, 0]
    cache.reset()
    ts, records, rank = decode_batch(encode_batch(recorder.take_batch(data_parallel_rank=3)))
    assert (ts, records, rank) == (3.5, [{"type": "AllBlocksCleared"}], 3)


def _subscribed(context: Any, publisher: ZmqEventPublisher, endpoint: str) -> Any:
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(endpoint)
    assert publisher.wait_for_subscribers(1, timeout=10)
    return sub


def test_the_publisher_stamps_its_rank_and_sends_nothing_refused() -> None:
    context = zmq.Context()
    with ZmqEventPublisher("inproc://ranked", context=context, data_parallel_rank=2) as pub:
        sub = _subscribed(context, pub, "inproc://ranked")
        cache = RadixCache(1, event_listener=pub)
        cache.insert(RadixKey([1, 2], ""))  # refused: nothing publishable was heard
        assert pub.publish() is None and pub.refused_pages == 2 and pub.next_seq == 0
        cache.insert(RadixKey([3]))
        assert pub.publish() == 0
        _, seq, payload = sub.recv_multipart()
        _ts, records, rank = decode_batch(payload)
        assert parse_seq(seq) == 0 and rank == 2
        assert [r["type"] for r in records] == ["BlockStored"]
        assert "cache_salt" not in records[0] and records[0]["lora_name"] is None
        sub.close()
    with pytest.raises(ValueError, match="data_parallel_rank"):
        ZmqEventPublisher("inproc://bad", context=context, data_parallel_rank=-1)
    context.term()


def _replay(context: Any, endpoint: str, start: int) -> list[tuple[int, bytes]]:
    """vLLM's replay client side: a DEALER asks from ``start``, reads until the end marker."""
    dealer = context.socket(zmq.DEALER)
    dealer.connect(endpoint)
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    got: list[tuple[int, bytes]] = []
    try:
        while True:
            assert dealer.poll(10_000), "no replay answer"
            frames = dealer.recv_multipart()
            if frames[2] == END_SEQ:
                assert frames == [b"", b"", END_SEQ, b""]
                return got
            empty, _topic, seq, payload = frames
            assert empty == b""
            got.append((parse_seq(seq), payload))
    finally:
        dealer.close()


def _serve_until_answered(pub: ZmqEventPublisher) -> None:
    assert pub.serve_replay(timeout=10) == 1


def test_replay_sends_the_buffered_batches_from_the_one_asked_for() -> None:
    context = zmq.Context()
    with ZmqEventPublisher(
        "inproc://live", context=context, replay_endpoint="inproc://replay", buffer_steps=10
    ) as pub:
        cache = RadixCache(1, event_listener=pub)
        for n in range(4):
            cache.insert(RadixKey([n, n + 1]))
            assert pub.publish() == n
        server = threading.Thread(target=_serve_until_answered, args=(pub,))
        server.start()
        got = _replay(context, "inproc://replay", 2)
        server.join()
        assert [seq for seq, _ in got] == [2, 3]
        model = EventStreamModel(1)
        server = threading.Thread(target=_serve_until_answered, args=(pub,))
        server.start()
        for _, payload in _replay(context, "inproc://replay", 0):
            model.apply_batch(decode_batch(payload))
        server.join()
        assert model.positions() == tree_positions(cache)  # replayed from 0: all of it
        server = threading.Thread(target=_serve_until_answered, args=(pub,))
        server.start()
        assert _replay(context, "inproc://replay", 9) == []  # nothing after the last: marker
        server.join()
    context.term()


def test_a_replay_older_than_the_buffer_is_answered_with_a_snapshot() -> None:
    context = zmq.Context()
    with ZmqEventPublisher(
        "inproc://live2", context=context, replay_endpoint="inproc://replay2", buffer_steps=2
    ) as pub:
        cache = RadixCache(2, event_listener=pub)
        for n in range(6):
            cache.insert(RadixKey([n, 1, 2, 3], "a" if n % 2 else None))
            cache.insert(RadixKey([n, 1, 9, 9], ""))  # never published
            if n == 3:
                cache.evict(4)
            pub.publish()
        server = threading.Thread(target=_serve_until_answered, args=(pub,))
        server.start()
        got = _replay(context, "inproc://replay2", 0)
        server.join()
        assert [seq for seq, _ in got] == [pub.next_seq - 1]  # one batch: the latest number
        model = EventStreamModel(2)
        model.apply(_stale())  # a router holding a page from before its gap
        model.apply_batch(decode_batch(got[0][1]))
        assert model.positions() == published(tree_positions(cache)) != set()
    context.term()


def _stale() -> Stored:
    """A page the router holds from before its gap (the snapshot's clear must drop it)."""
    return Stored((block_hash(chain_page_hashes([7, 7], 2, None)[0]),), None, (7, 7), 2)


def test_the_example_batch_in_spec_md_is_what_is_sent() -> None:
    import json
    from pathlib import Path

    spec = (Path(__file__).resolve().parents[2] / "SPEC.md").read_text()
    example = spec.split("[1764201600.25,", 1)[1].split("```", 1)[0]
    recorder = EventRecorder(clock=lambda: 1764201600.25)
    cache = RadixCache(2, event_listener=recorder)
    cache.insert(RadixKey([1, 2, 3, 4], "tenant"))
    cache.reset()
    sent = decode_batch(encode_batch(recorder.take_batch()))
    assert sent == json.loads("[1764201600.25," + example)

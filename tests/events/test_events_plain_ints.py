"""What a cache publishes carries plain Python ints (docs/decisions.md, 2026-11-28; issue 30).

MAX's trie takes any hashable token, numpy integers included; with an event listener its
stored tokens are token ids, and a router (``RouterFilter``, msgpack on the wire) reads
them only as plain ints: a ``numpy.int64`` page was refused by the filter and the codec
raised "Encoding objects of type numpy.int64 is unsupported".
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from radixkv import RadixCache, RadixKey, RadixTrie
from radixkv.events import BlockStored, EventRecorder, KVEventBatch, RouterFilter

np = pytest.importorskip("numpy")


def _stored(recorder: EventRecorder) -> list[BlockStored]:
    return [e for e in recorder.take() if isinstance(e, BlockStored)]


def _plain(token: object) -> bool:
    if type(token) is tuple:
        return all(type(t) is int for t in token)
    return type(token) is int


def _published_as_plain_ints(events: list[BlockStored]) -> None:
    assert events
    for event in events:
        assert all(_plain(t) for t in event.token_ids), event.token_ids
        if all(type(t) is int for t in event.token_ids):  # bigram pages are never sent
            assert RouterFilter()(event) is event  # nothing refused
    wire = pytest.importorskip("radixkv.events.wire")
    batch = wire.decode_batch(wire.encode_batch(KVEventBatch(1.0, list(events))))
    assert [r["token_ids"] for r in batch[1]] == [
        [list(t) if type(t) is tuple else t for t in e.token_ids] for e in events
    ]


@pytest.mark.parametrize("page_size", [1, 2])
def test_the_trie_publishes_numpy_token_ids_as_ints(page_size: int) -> None:
    recorder = EventRecorder()
    trie = RadixTrie(page_size, event_listener=recorder)
    tokens = [np.int64(1), np.int64(2), np.int32(3), np.uint8(4)]
    node = trie.insert(tokens, ["a", "b", "c", "d"][: 4 // page_size])
    trie.insert(np.array([1, 2, 7, 8], dtype=np.int64), ["e", "f", "g", "h"][: 4 // page_size])
    events = _stored(recorder)
    _published_as_plain_ints(events)
    assert events[0].token_ids == [1, 2, 3, 4]
    assert all(type(t) is int for t in node.tokens)  # what it stores, as it publishes it
    # numpy ids still find the pages they stored, and the blocks come back as given
    found, blocks = trie.match_prefix([np.int64(1), np.int64(2), np.int64(3), np.int64(4)])
    assert found is node and blocks == ["a", "b", "c", "d"][: 4 // page_size]


def test_the_trie_without_a_listener_keeps_its_tokens_as_given() -> None:
    """Only what is published must be plain ints: a trie takes any hashable token."""
    trie = RadixTrie()
    node = trie.insert([np.int64(1), "word"], ["a", "b"])
    assert [type(t) for t in node.tokens] == [np.int64, str]


@pytest.mark.parametrize(
    "key",
    [
        [np.int64(1), np.int64(2)],
        np.array([1, 2], dtype=np.int32),
        [(np.int64(1), np.int64(2)), (np.int32(3), 4)],  # bigram tokens
    ],
    ids=["numpy ints", "numpy array", "numpy bigrams"],
)
def test_every_cache_publishes_plain_ints(key: Any) -> None:
    recorder = EventRecorder()
    cache = RadixCache(event_listener=recorder)
    cache.insert(RadixKey(key), torch.tensor([5, 6]))
    _published_as_plain_ints(_stored(recorder))

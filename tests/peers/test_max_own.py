"""The MAX adapter's loader (no MAX needed) and, with ``MAX_SRC`` set, the adapter itself."""

from __future__ import annotations

from tests.helpers import RecordingHost, peer_adapter


def test_an_eviction_is_one_flat_free_and_matches_read_the_blocks() -> None:
    max_own = peer_adapter("max_own", "MAX's RadixTrie")
    host = RecordingHost()
    adapter = max_own.factory(2, host)
    _, node = adapter.insert((1, 2, 3, 4, 5), None, (10, 11, 12, 13, 14))
    assert adapter.match((1, 2, 3, 4), None)[0] == (10, 11, 12, 13)
    assert adapter.sizes() == (4, 0, 4)
    seq = adapter.lock(node)
    assert adapter.evict(4) == 0 and adapter.sizes() == (0, 4, 4)
    adapter.unlock(node, seq)
    assert adapter.evict(4) == 4
    assert host.freed == [(10, 11, 12, 13)]  # evict_blocks' one flat list, in one call
    adapter.check()

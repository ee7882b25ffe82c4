"""sglang 0.5.23's UnifiedRadixCache (FULL + SWA) through the kit's SWA adapter, on the CPU.

Skips when the sglang wheel (or its bundled Rust core, for the Rust cases) is absent.
"""

from __future__ import annotations

import pytest

from tests.helpers import RecordingHost, peer_adapter


@pytest.mark.parametrize("factory", ["factory", "factory_rust"])
def test_insert_match_and_sliding_window_eviction(factory: str) -> None:
    module = peer_adapter("sglang_swa", "sglang's UnifiedRadixCache")
    host = RecordingHost(1, 2, slots=False)
    try:
        cache = getattr(module, factory)(1, host)
    except ImportError as missing:  # the Rust core's .so did not load
        pytest.skip(f"{factory}: {missing}")
    inserted = cache.insert((1, 2, 3, 4), None, (10, 11, 12, 13))
    assert inserted.prefix_len == 0
    indices, _ = cache.match((1, 2, 3, 4, 5), None)
    assert indices == (10, 11, 12, 13)
    evicted = cache.evict(0, swa_num_tokens=2)
    assert (evicted.full, evicted.swa) == (0, 2)
    assert host.freed_swa == [(10, 11)] and host.freed == []
    pages = cache.swa_pages()
    assert [tomb for _, (_, tomb) in sorted(pages.items(), key=lambda kv: len(kv[0][1]))] == [
        True,
        True,
        False,
        False,
    ]
    cache.check()

"""sglang 0.5.23's UnifiedRadixCache (FULL + SWA) through the kit's SWA adapter, on the CPU.

Skips when the sglang wheel (or its bundled Rust core, for the Rust cases) is absent.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest


def _adapter_module() -> Any:
    try:
        return importlib.import_module("radixkv_conformance.adapters.sglang_swa")
    except ImportError as missing:
        pytest.skip(f"sglang's UnifiedRadixCache is not importable: {missing}")


class _Host:
    page_size = 1
    sliding_window = 2

    def __init__(self) -> None:
        self.freed: list[tuple[int, ...]] = []
        self.swa_freed: list[tuple[int, ...]] = []

    def __call__(self, indices: tuple[int, ...]) -> None:
        self.free(indices)

    def free(self, indices: tuple[int, ...]) -> None:
        self.freed.append(tuple(indices))

    def free_swa(self, indices: tuple[int, ...]) -> None:
        self.swa_freed.append(tuple(indices))

    def alloc_slot(self) -> int:
        raise AssertionError("no state slots in SWA mode")

    def free_slot(self, slot: int) -> None:
        raise AssertionError("no state slots in SWA mode")

    def copy_state(self, src: int, dst: int) -> None:
        raise AssertionError("no state slots in SWA mode")


@pytest.mark.parametrize("factory", ["factory", "factory_rust"])
def test_insert_match_and_sliding_window_eviction(factory: str) -> None:
    module = _adapter_module()
    host = _Host()
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
    assert host.swa_freed == [(10, 11)] and host.freed == []
    pages = cache.swa_pages()
    assert [tomb for _, (_, tomb) in sorted(pages.items(), key=lambda kv: len(kv[0][1]))] == [
        True,
        True,
        False,
        False,
    ]
    cache.check()

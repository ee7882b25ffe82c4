"""The MAX adapter's loader (no MAX needed) and, with ``MAX_SRC`` set, the adapter itself."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
from radixkv_conformance.adapters import _max_import


def test_without_max_src_the_error_says_how_to_get_a_checkout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MAX_SRC", raising=False)
    with pytest.raises(ImportError, match=r"set MAX_SRC to a checkout .*swi/modular"):
        _max_import.checkout()


def test_a_folder_without_the_trie_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MAX_SRC", str(tmp_path))
    with pytest.raises(ImportError, match=r"holds no max/pipelines/kv_cache/radix_trie\.py"):
        _max_import.checkout()


def _max_own() -> Any:
    try:
        return importlib.import_module("radixkv_conformance.adapters.max_own")
    except ImportError as missing:
        pytest.skip(f"MAX's RadixTrie is not importable: {missing}")


class Host:
    page_size = 2
    sliding_window = None

    def __init__(self) -> None:
        self.freed: list[tuple[int, ...]] = []

    def free(self, indices: tuple[int, ...]) -> None:
        self.freed.append(indices)

    __call__ = free


def test_an_eviction_is_one_flat_free_and_matches_read_the_blocks() -> None:
    max_own = _max_own()
    host = Host()
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

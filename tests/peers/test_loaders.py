"""The peer loaders, with no peer installed: an unset variable says how to get a checkout,
and a folder without the peer's cache is refused, each naming what it looked for."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from radixkv_conformance.adapters import _lightllm_import, _max_import, _pymllm_import, _vllm_import

# (the loader, its variable, what its "unset" error says, what its "lacks" error names)
LOADERS: dict[str, tuple[Callable[[], Path], str, str, str]] = {
    "pymllm": (
        _pymllm_import.checkout,
        "PYMLLM_SRC",
        r"set PYMLLM_SRC to a checkout of .*mllm",
        r"holds no pymllm/mem_cache/radix_cache\.py",
    ),
    "lightllm": (
        _lightllm_import.checkout,
        "LIGHTLLM_SRC",
        r"set LIGHTLLM_SRC to a clone of .*ModelTC/lightllm",
        r"holds no lightllm/server/router/dynamic_prompt/radix_cache\.py",
    ),
    "max": (
        _max_import.checkout,
        "MAX_SRC",
        r"set MAX_SRC to a checkout .*swi/modular",
        r"holds no max/pipelines/kv_cache/radix_trie\.py \(nor src/max/",
    ),
    "vllm": (
        _vllm_import.source,
        "VLLM_SRC",
        r"set VLLM_SRC to the vLLM 0\.33 wheel",
        r"no vLLM wheel or folder holding vllm/v1/core/block_pool\.py",
    ),
}


@pytest.mark.parametrize("peer", LOADERS)
def test_an_unset_variable_says_how_to_get_a_checkout(
    monkeypatch: pytest.MonkeyPatch, peer: str
) -> None:
    load, env, unset, _ = LOADERS[peer]
    monkeypatch.delenv(env, raising=False)
    with pytest.raises(ImportError, match=unset):
        load()


@pytest.mark.parametrize("peer", LOADERS)
def test_a_folder_without_the_cache_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, peer: str
) -> None:
    load, env, _, lacks = LOADERS[peer]
    monkeypatch.setenv(env, str(tmp_path))
    with pytest.raises(ImportError, match=lacks):
        load()


def test_a_checkout_is_found_in_a_subfolder_named_below(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trie = tmp_path / "src" / "max" / "pipelines" / "kv_cache" / "radix_trie.py"
    trie.parent.mkdir(parents=True)
    trie.touch()
    monkeypatch.setenv("MAX_SRC", str(tmp_path))
    assert _max_import.checkout() == tmp_path / "src"

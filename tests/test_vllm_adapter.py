"""The vLLM adapter's loader (no vLLM needed) and, with ``VLLM_SRC`` set, a short search."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hypothesis import settings
from radixkv_conformance import run_conformance
from radixkv_conformance.adapters import _vllm_import

from tests.helpers import RecordingHost, peer_adapter


def test_without_vllm_src_the_error_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_SRC", raising=False)
    with pytest.raises(ImportError, match=r"set VLLM_SRC to the vLLM 0\.33 wheel"):
        _vllm_import.source()


def test_a_folder_without_the_block_pool_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("VLLM_SRC", str(tmp_path))
    with pytest.raises(ImportError, match=r"no vLLM wheel or folder holding vllm/v1/core"):
        _vllm_import.source()


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
    short = settings(
        max_examples=40, stateful_step_count=20, deadline=None, database=None, derandomize=True
    )
    small = functools.partial(vllm.factory, blocks="4")  # a small pool evicts to make room
    report = run_conformance(small, profile=vllm.PROFILE, settings=short, name="vllm")
    report.raise_for_failures()
    assert report.stats["tokens evicted to make room"] > 0
    assert report.stats["event records"] > 0

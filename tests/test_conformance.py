"""The conformance kit as a third party uses it: run_conformance, reports, traces, the CLI."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import Phase, settings
from radixkv_conformance import (
    CHUNK_CACHE,
    MAX_RADIX_TRIE,
    ConformanceError,
    run_conformance,
)
from radixkv_conformance.adapter import RadixCacheAdapter
from radixkv_conformance.adapters import broken, chunk, max_trie
from radixkv_conformance.cli import main
from radixkv_conformance.semantics import RADIXKV, Semantics
from radixkv_conformance.trace import replay

QUICK = settings(
    max_examples=25, stateful_step_count=20, deadline=None, database=None, derandomize=True
)
NO_SHRINK = settings(QUICK, phases=[Phase.explicit, Phase.generate])  # finding, not minimising


def test_radix_trie_conforms_under_the_max_profile() -> None:
    report = run_conformance(max_trie.factory, profile=MAX_RADIX_TRIE, settings=QUICK)
    report.raise_for_failures()
    assert report.stats["evict"] and report.stats["rejected unmatched unlock"]
    assert any("'reset'" in reason for reason in report.skips)


def test_chunk_cache_conforms_under_the_chunk_profile() -> None:
    run_conformance(chunk.factory, profile=CHUNK_CACHE, settings=QUICK).raise_for_failures()


def test_the_broken_adapter_fails() -> None:
    report = run_conformance(broken.factory, profile=RADIXKV, settings=NO_SHRINK)
    assert not report.passed
    failure = report.failures[0]
    assert failure.invariant in ("INV-7", "INV-11"), failure.message
    assert failure.trace["steps"][-1]["op"] in ("evict", "reset")  # where frees go missing
    with pytest.raises(ConformanceError, match="failure 1"):
        report.raise_for_failures()
    assert not replay(failure.trace, broken.factory).passed
    assert replay(json.loads(json.dumps(failure.trace)), RadixCacheAdapter).passed


def test_a_chunk_cache_is_not_a_radix_cache() -> None:
    """Under the exact radixkv profile, a cache that shares nothing disagrees at once."""
    exact = dataclasses.replace(RADIXKV, page_sizes=(1,))
    report = run_conformance(chunk.factory, profile=exact, settings=QUICK, max_failures=1)
    assert not report.passed and report.failures[0].invariant in ("INV-6", "INV-10", "INV-12")


def test_unknown_capabilities_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown capabilities"):
        Semantics("x", capabilities=frozenset({"telepathy"}))


def test_cli_check_fails_and_writes_a_replayable_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ChunkCache claimed as an exact RadixCache: the CLI fails and keeps the trace."""
    traces, target = tmp_path / "traces", "radixkv_conformance.adapters.chunk:factory"
    args = ["check", target, "--profile", "radixkv", "--hypothesis-profile", "ci"]
    code = main([*args, "--traces", str(traces)])
    out = capsys.readouterr().out
    assert code == 1 and "FAILED" in out and "failure 1" in out
    (written,) = traces.glob("*.json")
    assert main(["check", "--replay", str(written), target, "--profile", "radixkv"]) == 1
    assert main(["check", "--replay", str(written)]) == 0  # radixkv's RadixCache holds


def test_cli_replays_a_vector_against_radixkv() -> None:
    vector = Path(__file__).parent / "vectors" / "broken_forgets_free.json"
    assert main(["check", "--replay", str(vector)]) == 0
    assert (
        main(["check", "--replay", str(vector), "radixkv_conformance.adapters.broken:factory"]) == 1
    )


def test_cli_rejects_an_unknown_profile() -> None:
    with pytest.raises(SystemExit):
        main(["check", "radixkv_conformance.adapters.chunk:factory", "--profile", "nonsense"])

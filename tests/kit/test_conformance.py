"""The conformance kit as a third party uses it: run_conformance, reports, findings, the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from radixkv_conformance import (
    CHUNK_CACHE,
    MAX_RADIX_TRIE,
    AdapterError,
    ConformanceError,
    NotAdmitted,
    require_capabilities,
    run_conformance,
)
from radixkv_conformance.adapters import broken, chunk, max_trie
from radixkv_conformance.adapters.radixkv import (
    RadixCacheAdapter,
    mamba,
    radix_cache,
    sliding_window,
)
from radixkv_conformance.cli import main
from radixkv_conformance.profile import RADIXKV, RADIXKV_MAMBA, RADIXKV_SWA
from radixkv_conformance.replay import replay
from radixkv_spec.hashing import chain_restarted, page_hashes

from tests.helpers import fixed_search

QUICK = fixed_search(25, 20)
NO_SHRINK = fixed_search(25, 20, shrink=False)  # finding, not minimising
SHRINK = settings(QUICK, max_examples=20, stateful_step_count=10)
BOTH_BUGS = ("INV-14:unmatched-unlock", "INV-11:evict-reported-counts")
PROFILE = RADIXKV.but(name="defined-in-this-module")  # not a built-in profile
module_factory = broken.two_bugs  # `radixkv check tests.kit.test_conformance:module_factory`


def test_radix_trie_conforms_under_the_max_profile() -> None:
    report = run_conformance(max_trie.factory, profile=MAX_RADIX_TRIE, settings=QUICK)
    report.raise_for_failures()
    assert report.stats["evict"] and report.stats["rejected unmatched unlock"]
    assert any("'reset'" in reason for reason in report.skips)


def test_chunk_cache_conforms_under_the_chunk_profile() -> None:
    run_conformance(chunk.factory, profile=CHUNK_CACHE, settings=QUICK).raise_for_failures()


@pytest.mark.parametrize(
    ("factory", "profile", "rule"),
    [(sliding_window, RADIXKV_SWA, "evict"), (mamba, RADIXKV_MAMBA, "request")],
)
def test_swa_and_mamba_go_through_run_conformance(factory: Any, profile: Any, rule: str) -> None:
    """The capability rule sets run for any factory that declares them, radixkv's included."""
    report = run_conformance(factory, profile=profile, settings=QUICK)
    report.raise_for_failures()
    assert report.stats[rule] > 0, report.render()


class _AdmitsShortRequests(RadixCacheAdapter):
    """radixkv's cache behind a scheduler that admits no request of more than two tokens."""

    def insert(self, tokens: tuple[Any, ...], namespace: Any, indices: tuple[int, ...]) -> Any:
        if len(tokens) > 2:
            raise NotAdmitted(f"{len(tokens)} tokens")
        return super().insert(tokens, namespace, indices)


def test_a_step_the_engine_does_not_admit_ends_the_run_and_is_no_finding() -> None:
    report = run_conformance(_AdmitsShortRequests, profile=RADIXKV, settings=QUICK)
    report.raise_for_failures()
    assert report.stats["insert"] > 0
    steps = [
        {"id": 0, "op": "insert", "tokens": [1, 2], "namespace": None, "indices": [0, 1]},
        {"id": 1, "op": "insert", "tokens": [1, 2, 3], "namespace": None, "indices": [0, 1, 2]},
        {"id": 2, "op": "evict", "num_tokens": 1},
    ]
    trace = {"format": "radixkv-trace/1", "semantics": "radixkv", "page_size": 1, "steps": steps}
    result = replay(trace, _AdmitsShortRequests)
    assert result.passed and result.steps == 1  # judged up to the step it did not admit


def test_the_broken_adapter_fails() -> None:
    report = run_conformance(broken.factory, profile=RADIXKV, settings=NO_SHRINK)
    assert not report.passed
    failure = report.failures[0]
    assert failure.invariant in ("INV-7", "INV-11"), failure.message
    assert failure.trace["steps"][-1]["op"] in ("evict", "reset")  # where frees go missing
    with pytest.raises(ConformanceError, match=r"finding 1 \[INV-"):
        report.raise_for_failures()
    assert not replay(failure.trace, broken.factory).passed
    assert replay(json.loads(json.dumps(failure.trace)), radix_cache).passed


def test_two_independent_bugs_are_two_findings_each_with_its_trace() -> None:
    # 60 examples: each finding is searched for after the first is acknowledged (20 can miss)
    two_bug_search = settings(SHRINK, max_examples=60)
    report = run_conformance(
        broken.two_bugs, profile=RADIXKV, settings=two_bug_search, max_failures=2
    )
    found = {f.finding: f for f in report.failures}
    assert set(BOTH_BUGS) <= set(found), report.render()
    for fid in BOTH_BUGS:
        trace = found[fid].trace
        assert trace["failure"]["finding"] == fid
        result = replay(trace, broken.two_bugs)
        assert not result.passed and result.finding == fid, result
        assert replay(trace, radix_cache).passed  # the steps are fine for a correct cache
    unlock_trace = found["INV-14:unmatched-unlock"].trace
    assert unlock_trace["steps"][-1]["op"] == "unlock"  # shrunk to end where it broke


def test_known_finding_is_acknowledged_and_the_other_still_reported() -> None:
    known, other = BOTH_BUGS
    report = run_conformance(
        broken.two_bugs, profile=RADIXKV, settings=settings(SHRINK, max_examples=60), known=[known]
    )
    found = {f.finding for f in report.failures}
    assert other in found and known not in found, report.render()
    assert report.acknowledged[known] > 0  # runs hit it, recorded it and went on
    assert f"acknowledged (--known): {known}" in report.render()


def test_an_acknowledged_finding_is_recorded_and_the_run_goes_on() -> None:
    """A known violation does not end the run: the steps after it are still checked."""
    unlock: dict[str, Any] = {"op": "unlock", "node": 0, "lock": None}
    steps: list[dict[str, Any]] = [
        {"op": "insert", "tokens": [1, 2], "namespace": None, "indices": [0, 1]},
        unlock,
        dict(unlock),
        {"op": "evict", "num_tokens": 2},
    ]
    trace = {
        "format": "radixkv-trace/1",
        "semantics": "radixkv",
        "page_size": 1,
        "steps": [{"id": i, **step} for i, step in enumerate(steps)],
    }
    first = replay(trace, broken.two_bugs)
    assert first.finding == BOTH_BUGS[0] and first.steps == 1, first
    went_on = replay(trace, broken.two_bugs, known=[BOTH_BUGS[0]])
    assert went_on.acknowledged == (BOTH_BUGS[0],) * 2, went_on  # both unlocks recorded
    assert went_on.finding == BOTH_BUGS[1] and went_on.steps == 3, went_on  # then the evict
    assert replay(trace, radix_cache).passed


def test_a_chunk_cache_is_not_a_radix_cache() -> None:
    """Under the exact radixkv profile, a cache that shares nothing disagrees at once."""
    exact = RADIXKV.but(page_sizes=(1,))
    report = run_conformance(chunk.factory, profile=exact, settings=QUICK, max_failures=1)
    assert not report.passed and report.failures[0].invariant in ("INV-6", "INV-10", "INV-12")


def test_cli_check_fails_and_writes_a_replayable_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ChunkCache claimed as an exact RadixCache: the CLI fails and keeps the trace."""
    traces, target = tmp_path / "traces", "radixkv_conformance.adapters.chunk:factory"
    args = ["check", target, "--profile", "radixkv", "--hypothesis-profile", "ci"]
    code = main([*args, "--traces", str(traces), "--max-failures", "1"])
    out = capsys.readouterr().out
    assert code == 1 and "FAILED" in out and "finding 1" in out
    (written,) = traces.glob("*.json")
    assert main(["check", "--replay", str(written), target, "--profile", "radixkv"]) == 1
    assert main(["check", "--replay", str(written)]) == 0  # radixkv's RadixCache holds


def test_cli_known_reports_the_other_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "mutation")  # the ci search without shrinking
    target = "radixkv_conformance.adapters.broken:two_bugs"
    args = ["check", target, "--traces", str(tmp_path)]
    assert main([*args, "--known", BOTH_BUGS[0], "--max-failures", "1"]) == 1
    out = capsys.readouterr().out
    assert f"[{BOTH_BUGS[1]}]" in out and f"[{BOTH_BUGS[0]}]:" not in out
    assert f"acknowledged (--known): {BOTH_BUGS[0]}" in out


def test_a_profile_defined_in_the_module_works_in_every_cli_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trace names a profile only this module knows: --replay reads it from here."""
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "mutation")  # the ci search without shrinking
    target = f"{__name__}:module_factory"
    args = ["check", target, "--traces", str(tmp_path), "--max-failures", "1"]
    assert main(args) == 1
    (written,) = tmp_path.glob("*.json")
    document = json.loads(written.read_text())
    assert document["format"] == "radixkv-trace/2" and document["profile"] == PROFILE.name
    assert main(["check", "--replay", str(written), target]) == 1  # the finding again
    assert main(["check", "--replay", str(written)]) == 0  # radixkv's own cache holds


def test_cli_replays_a_vector_against_radixkv() -> None:
    vector = Path(__file__).resolve().parents[1] / "vectors" / "broken_forgets_free.json"
    assert main(["check", "--replay", str(vector)]) == 0
    assert (
        main(["check", "--replay", str(vector), "radixkv_conformance.adapters.broken:factory"]) == 1
    )


def test_cli_rejects_an_unknown_profile() -> None:
    with pytest.raises(SystemExit):
        main(["check", "radixkv_conformance.adapters.chunk:factory", "--profile", "nonsense"])


class _ClaimsSwa(broken.TwoBugs):
    capabilities = broken.TwoBugs.capabilities | {"swa"}


class _ClaimsTelepathy(broken.TwoBugs):
    capabilities = broken.TwoBugs.capabilities | {"telepathy"}


@pytest.mark.parametrize(
    ("adapter", "message"),
    [
        (_ClaimsSwa, r"claims capability 'swa' .* has no swa_pages\(\), swa_sizes\(\)"),
        (_ClaimsSwa, r"keyword 'prev_prefix_len' of insert\(\)"),
        (_ClaimsTelepathy, r"claims unknown capabilities \['telepathy'\]"),
    ],
)
def test_a_claimed_capability_is_checked_before_any_step(adapter: type, message: str) -> None:
    with pytest.raises(AdapterError, match=message):
        run_conformance(lambda page_size, host: adapter(page_size, host), settings=QUICK)


def test_an_adapter_without_the_core_is_refused() -> None:
    with pytest.raises(AdapterError, match=r"has no .*evict\(\)"):
        require_capabilities(object())


class AcceptsNegativeTokens(RadixCacheAdapter):
    """Inserts a key with a negative id as if the id were 0: an accepted bad call that
    changes the cache, which no model can follow."""

    def insert(self, tokens: tuple[Any, ...], namespace: Any, indices: tuple[int, ...]) -> Any:
        clean = tuple(0 if isinstance(t, int) and t < 0 else t for t in tokens)
        return super().insert(clean, namespace, indices)


def accepts_negative_tokens(page_size: int, host: Any) -> AcceptsNegativeTokens:
    return AcceptsNegativeTokens(page_size, host)


def test_a_bad_call_the_cache_is_known_to_accept_is_not_drawn_again() -> None:
    bad = "INV-14:bad-insert-with-a-bad-token"
    found = run_conformance(accepts_negative_tokens, settings=NO_SHRINK, max_failures=1)
    assert [f.finding for f in found.failures] == [bad], found.render()
    report = run_conformance(accepts_negative_tokens, settings=QUICK, known=[bad])
    report.raise_for_failures()
    assert report.acknowledged[bad] == 0  # never tried: it would only end runs
    assert report.stats["rejected match with a bad token"] > 0  # the other bad calls stay
    assert not report.stats["runs ended: an acknowledged call changed the cache"]


def test_a_hash_chain_restarted_below_the_root_is_a_path_mistake() -> None:
    prefix = (5, 6, 7, 8)
    right = page_hashes(None, prefix, 2)
    lower_alone = [right[0], page_hashes(None, prefix[2:], 2)[0]]
    assert chain_restarted(lower_alone, None, prefix, 2)
    assert not chain_restarted(right, None, prefix, 2)  # nothing restarted
    assert not chain_restarted(lower_alone[:1], None, prefix, 2)  # a page missing
    assert not chain_restarted([right[0], "not a hash"], None, prefix, 2)
    assert not chain_restarted(lower_alone, "a", prefix, 2)  # another namespace's chain


def test_cli_minimizes_a_replayed_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A long failing trace (a user's own) is cut to what its finding needs."""
    steps: list[dict[str, Any]] = [
        {"op": "insert", "tokens": [1, 2], "namespace": None, "indices": [0, 1]},
        {"op": "match", "tokens": [1], "namespace": None},
        {"op": "insert", "tokens": [3], "namespace": "a", "indices": [2]},
        {"op": "unlock", "node": 0, "lock": None},  # the bug: nobody locked [1, 2]
        {"op": "match", "tokens": [3], "namespace": "a"},
    ]
    trace = {
        "format": "radixkv-trace/1",
        "semantics": "radixkv",
        "page_size": 1,
        "failure": {"check": "unmatched unlock", "message": "", "step": 3},
        "steps": [{"id": i, **step} for i, step in enumerate(steps)],
    }
    long, short = tmp_path / "long.json", tmp_path / "short.json"
    long.write_text(json.dumps(trace))
    target = "radixkv_conformance.adapters.broken:two_bugs"
    assert main(["check", "--replay", str(long), target, "--minimize", str(short)]) == 1
    assert "minimized: 2 of 5 steps" in capsys.readouterr().out
    small = json.loads(short.read_text())
    assert [s["op"] for s in small["steps"]] == ["insert", "unlock"]
    assert small["failure"]["finding"] == BOTH_BUGS[0]
    assert main(["check", "--replay", str(short), target]) == 1

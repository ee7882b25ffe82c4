"""The bounded exhaustive explorer: it finds planted bugs, counts exactly, and passes radixkv."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule
from radixkv_conformance.adapters import broken
from radixkv_conformance.adapters.radixkv import (
    MambaAdapter,
    RadixCacheAdapter,
    SlidingWindowAdapter,
    mamba,
    radix_cache,
    sliding_window,
)
from radixkv_conformance.cli import main
from radixkv_conformance.explore.alphabet import ALPHABET, Alphabet, Fixed
from radixkv_conformance.explore.bounds import parse_bounds
from radixkv_conformance.explore.driver import AlphabetError
from radixkv_conformance.explore.sequences import explore, own_targets, target
from radixkv_conformance.explore.states import explore_states
from radixkv_conformance.profile import RADIXKV, RADIXKV_MAMBA, RADIXKV_SWA, Profile
from radixkv_conformance.protocol import Evicted, Host, Inserted, Matched
from radixkv_conformance.registry import machine_for
from radixkv_conformance.replay import replay
from radixkv_conformance.trace import load

NARROW = parse_bounds("tokens=1,length=1,locks=1")  # SWA's and Mamba's CI state bounds
PAGE_ONE = Alphabet("page 1", {**ALPHABET.domains, "page_size": Fixed((1,)), "window": Fixed((1,))})


def _findings(factory: Any, depth: int, profile: Profile = RADIXKV) -> dict[str, Any]:
    return explore(machine_for("Planted", factory, profile), PAGE_ONE, depth).findings


class IgnoresNamespaces(RadixCacheAdapter):
    """Every key lands in the default namespace: namespaces share prefixes they must not."""

    def match(self, tokens: tuple[Any, ...], namespace: Any) -> Matched:
        return super().match(tokens, None)

    def insert(self, tokens: tuple[Any, ...], namespace: Any, indices: tuple[int, ...]) -> Inserted:
        return super().insert(tokens, None, indices)


class UnderreportsSwaEviction(SlidingWindowAdapter):
    """SWA eviction reports one SWA token fewer than it tombstoned."""

    def evict(self, num_tokens: Any, *, swa_num_tokens: Any = 0) -> Evicted:
        done = super().evict(num_tokens, swa_num_tokens=swa_num_tokens)
        return done._replace(swa=max(done.swa - 1, 0))


class LockDoesNothing(MambaAdapter):
    """A Mamba lock that locks nothing: the locked path stays evictable."""

    def lock(self, handle: Any) -> Any:
        return None

    def unlock(self, handle: Any, token: Any) -> None:
        pass


def test_finds_the_leak_of_the_adapter_that_forgets_to_free() -> None:
    findings = _findings(broken.factory, 2)
    assert set(findings) == {"INV-11:evict-short", "INV-7:reset"}
    evict = findings["INV-11:evict-short"]
    assert [step.rule for step in evict.calls] == ["extend_request", "evict"]
    assert [step.rule for step in findings["INV-7:reset"].calls] == ["extend_request", "reset"]


def test_finds_both_bugs_of_two_bugs_separately_and_known_ones_are_acknowledged() -> None:
    findings = _findings(broken.TwoBugs, 2)
    assert set(findings) == {"INV-14:unmatched-unlock", "INV-11:evict-reported-counts"}
    assert [s.rule for s in findings["INV-14:unmatched-unlock"].calls][-1] == "unlock_without_lock"
    known = frozenset({"INV-11:evict-reported-counts"})
    machine = machine_for("Known", broken.TwoBugs, RADIXKV, known=known)
    report = explore(machine, PAGE_ONE, 2)
    assert set(report.findings) == {"INV-14:unmatched-unlock"}
    assert report.acknowledged > 0


def test_a_finding_is_a_replayable_trace_that_fails_again() -> None:
    finding = _findings(broken.factory, 2)["INV-11:evict-short"]
    assert finding.trace
    result = replay(finding.trace, broken.factory, RADIXKV)
    assert not result.passed and result.invariant == "INV-11"
    assert replay(finding.trace, radix_cache, RADIXKV).passed


def test_finds_namespaces_that_share_in_two_steps() -> None:
    findings = _findings(IgnoresNamespaces, 2)
    found = [f for f in findings.values() if f.invariant == "INV-10"]
    assert found, findings
    shortest = min(found, key=lambda f: len(f.calls))
    assert len(shortest.calls) == 2
    namespaces = [dict(step.choices).get("namespace") for step in shortest.calls]
    assert namespaces == [None, "a"]  # canonical order: "a" only after None


def test_finds_a_miscounted_swa_eviction_in_two_steps() -> None:
    findings = _findings(UnderreportsSwaEviction, 2, RADIXKV_SWA)
    assert findings and all(f.invariant == "INV-11" for f in findings.values()), findings
    assert min(len(f.calls) for f in findings.values()) == 2
    assert not _findings(sliding_window, 2, RADIXKV_SWA)


def test_finds_a_mamba_lock_that_locks_nothing_in_two_steps() -> None:
    findings = _findings(LockDoesNothing, 2, RADIXKV_MAMBA)
    shortest = min(findings.values(), key=lambda f: len(f.calls))
    assert [step.rule for step in shortest.calls][-1] == "lock", shortest
    assert len(shortest.calls) == 2
    assert not _findings(mamba, 2, RADIXKV_MAMBA)


def test_copying_states_and_rerunning_prefixes_explore_the_same_sequences() -> None:
    machine = machine_for("Planted", broken.factory, RADIXKV)
    copied = explore(machine, PAGE_ONE, 2, fork="copy")
    rerun = explore(machine, PAGE_ONE, 2, fork="rerun")
    assert copied.by_length == rerun.by_length
    assert copied.findings.keys() == rerun.findings.keys()


# ---- counts, computed independently ----------------------------------------------------------


def _canonical_keys(tokens_used: int, lengths: range) -> int:
    """Token lists over {0, 1}: all of them once a token is in use (0 and 1 are then told
    apart); before that one per orbit of the swap 0 <-> 1 (Burnside: (all + lists the swap
    fixes) / 2, and the swap fixes only [])."""
    everything = sum(1 << n for n in lengths)
    return everything if tokens_used else (everything + 1) // 2


def test_counts_what_the_alphabet_implies_at_depth_two() -> None:
    """RadixCache at page size 1: keys of 0..2 tokens over {0, 1}, namespaces None and "a".

    Step 1 has no handles yet and only namespace None: insert, extend_request and match per
    canonical key, evict 1 or 2, reset, six bad calls, refresh_often of the one key inserted
    so far (the machine starts from the empty key). A step that changes nothing (evict of an
    empty cache, a rejected bad call) is not extended; a reset is (it makes every earlier
    handle stale), and so is refresh_often (the spec's clock moves). After a step that draws
    a namespace both namespaces are open; after a keyed step the key's tokens are in use and
    one handle serves lock, page_hashes and unlock_without_lock; an insert adds its key to
    the keys refresh_often picks from.
    """
    keys = range(3)
    others = 2 + 1 + 6  # evict 1 / 2, reset, bad calls
    first = 3 * _canonical_keys(0, keys) + others + 1
    second = 0
    for key in [(), (0,), (0, 0), (0, 1)]:
        in_use = len(set(key))
        for inserts in (True, True, False):  # insert, extend_request, match
            refreshes = (2 if inserts else 1) * 2  # inserted keys x namespaces
            second += 3 * 2 * _canonical_keys(in_use, keys) + 3 + others + refreshes
    second += first  # below the reset
    second += 3 * 2 * _canonical_keys(0, keys) + others + 1 * 2  # below refresh_often
    report = explore(machine_for("Counted", radix_cache, RADIXKV), PAGE_ONE, 2)
    assert report.by_length == Counter({1: first, 2: second})
    assert (first, second) == (22, 691)  # the same numbers, spelled out
    assert report.passed


class Stack(RuleBasedStateMachine):
    """A toy machine: the explorer must branch on every draw and every bundle value."""

    items = Bundle("items")

    @rule(target=items, n=st.integers(0, 2))
    def push(self, n: int) -> int:
        return n

    @rule(item=items)
    def peek(self, item: int) -> None:
        pass

    @rule(item=consumes(items))
    def pop(self, item: int) -> None:
        pass

    @rule(data=st.data())
    def pair(self, data: st.DataObject) -> None:
        data.draw(st.booleans(), label="left")
        data.draw(st.sampled_from("xyz"), label="right")


@cache
def _stack_sequences(items: int, depth: int) -> int:
    if depth == 0:
        return 0
    steps = [(3, items + 1), (items, items), (items, items - 1), (2 * 3, items)]
    return sum(n * (1 + _stack_sequences(after, depth - 1)) for n, after in steps if n)


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_counts_every_draw_and_every_handle(depth: int) -> None:
    domains = {"n": Fixed((0, 1, 2)), "left": Fixed((False, True)), "right": Fixed(tuple("xyz"))}
    alphabet = Alphabet("stack", domains)
    report = explore(Stack, alphabet, depth)
    assert report.sequences == _stack_sequences(0, depth)
    assert report.by_length[1] == 3 + 6  # push 0/1/2 and the six pairs: no item yet


# ---- radixkv's own caches ------------------------------------------------------------------


def test_radixkv_caches_hold_every_short_sequence() -> None:
    reports = [explore(t.machine(), t.alphabet, 1, name=t.label) for t in own_targets()]
    labels = [r.name for r in reports]
    assert labels == [
        "RadixCache",
        "RadixCache (SWA)",
        "MambaRadixCache",
        "ChunkCache",
        "RadixTrie",
    ]
    for report in reports:
        assert report.passed, report.render()
    starts = {r.name: r.starts for r in reports}
    # page sizes 1 and 2; SWA also windows 1 and 2 and both unlock conventions
    assert starts == {
        "RadixCache": 2,
        "RadixCache (SWA)": 8,
        "MambaRadixCache": 2,
        "ChunkCache": 1,
        "RadixTrie": 2,
    }


def test_radixkv_radix_cache_holds_every_sequence_of_two_steps() -> None:
    report = explore(machine_for("Own", radix_cache, RADIXKV), ALPHABET, 2)
    assert report.passed, report.render()
    assert report.by_length[1] == 22 + 34  # page 1, and page 2 with keys of up to 3 tokens


def test_a_factory_for_any_cache_is_explored() -> None:
    def factory(page_size: int, host: Host) -> RadixCacheAdapter:
        return RadixCacheAdapter(page_size, host)

    report = explore(target("mine", factory, RADIXKV).machine(), PAGE_ONE, 1)
    assert report.passed and report.sequences == 22


# ---- forking: copies must be independent, or prefixes are replayed -------------------------


class SharedBox:
    """A native-like object whose deepcopy returns itself: copies would share it."""

    def __init__(self) -> None:
        self.value = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> SharedBox:
        return self

    def snapshot(self) -> int:
        return self.value


class Counting(RuleBasedStateMachine):
    """The machine's own count must equal the box's; shared copies would break that."""

    def __init__(self) -> None:
        super().__init__()
        self.sut: Any = SharedBox()
        self.count = 0

    @rule(by=st.integers(1, 2))
    def bump(self, by: int) -> None:
        self.sut.value += by
        self.count += by

    @invariant()
    def agrees(self) -> None:
        assert self.sut.value == self.count, "the box and the count differ"


class Unpicklable(RuleBasedStateMachine):
    """A machine holding something deepcopy refuses (a lock)."""

    def __init__(self) -> None:
        super().__init__()
        self.guard = threading.Lock()
        self.count = 0

    @rule(by=st.integers(1, 2))
    def bump(self, by: int) -> None:
        self.count += by

    @rule()
    def touch(self) -> None:
        assert self.guard.acquire(blocking=False), "a copy shares the lock"
        self.guard.release()


def test_copies_that_share_state_are_detected_and_prefixes_replayed() -> None:
    report = explore(Counting, Alphabet("bump", {"by": Fixed((1, 2))}), 3)
    assert report.fork == "rerun" and report.notes
    assert report.passed, report.render()
    assert report.sequences == 2 + 4 + 8


def test_a_state_deepcopy_refuses_is_replayed_instead() -> None:
    report = explore(Unpicklable, Alphabet("bump", {"by": Fixed((1, 2))}), 3)
    assert report.fork == "rerun" and "copying a state failed" in report.notes[0]
    assert report.sequences == 3 + 9 + 27


# ---- the command line ------------------------------------------------------------------------


def test_the_cli_reports_each_finding_with_a_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = "radixkv_conformance.adapters.broken:two_bugs"
    status = main(["check", "--exhaustive", "2", target, "--traces", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 1
    assert "[INV-14:unmatched-unlock]" in out and "[INV-11:evict-reported-counts]" in out
    assert "exhaustive, up to 2 steps:" in out
    traces = sorted(tmp_path.glob("exhaustive-*.json"))
    assert len(traces) == 2
    assert all(not replay(load(t), broken.TwoBugs, RADIXKV).passed for t in traces)


def test_the_cli_acknowledges_known_findings(capsys: pytest.CaptureFixture[str]) -> None:
    target = "radixkv_conformance.adapters.broken:two_bugs"
    known = ["--known", "INV-14:unmatched-unlock", "--known", "INV-11:evict-reported-counts"]
    assert main(["check", "--exhaustive", "2", target, *known]) == 0
    assert "sequences hit acknowledged findings" in capsys.readouterr().out


def test_a_broken_alphabet_is_a_configuration_error_not_a_finding() -> None:
    wrong = Alphabet("wrong", {"n": Fixed(("x",)), "left": Fixed((0,)), "right": Fixed(("x",))})
    with pytest.raises(AlphabetError, match="push: the domain of 'n' failed"):
        explore(Stack, wrong, 1)


def test_two_steps_over_the_wide_alphabet_find_what_narrow_state_bounds_cannot() -> None:
    """Why ``--exhaustive 2`` stays next to ``--states``: its alphabet is wide (two
    namespaces, page sizes 1 and 2, windows 1 and 2) where the state explorer's CI bounds
    are narrow (one namespace, page size 1). Namespaces that share are two steps away, yet
    no state of one namespace shows it; the same explorer given two namespaces finds it.
    (Its other findings, extra_keys it accepts, need no second namespace.)"""

    def sharing(report: Any) -> list[Any]:
        return [f for f in report.findings.values() if f.invariant == "INV-10"]

    assert sharing(explore(machine_for("Sequences", IgnoresNamespaces, RADIXKV), ALPHABET, 2))
    narrow = explore_states(machine_for("Narrow", IgnoresNamespaces, RADIXKV), NARROW)
    assert narrow.fixpoint and not sharing(narrow), narrow.render()
    wide = replace(NARROW, namespaces=2, depth=2)
    assert sharing(explore_states(machine_for("Wide", IgnoresNamespaces, RADIXKV), wide))

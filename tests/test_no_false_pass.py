"""The kit never passes a broken cache: two bugs planted at once are two findings, each with
its own trace, and acknowledging either (``--known``) never hides the other.

The cache is ``adapters.planted.PageMapCache``, a small cache written without radixkv, as an
engine developer would; each pair below is two rules one step checks (an eviction's victim,
an eviction's amount and report, an engine's own assertion in two places).
"""

from __future__ import annotations

import functools

import pytest
from hypothesis import settings
from radixkv_conformance import AdapterError, run_conformance
from radixkv_conformance.adapters import planted
from radixkv_conformance.adapters.radixkv import RadixCacheAdapter, mamba, sliding_window
from radixkv_conformance.findings import Violation, finding_id
from radixkv_conformance.registry import machine_for
from radixkv_conformance.replay import replay

pytestmark = pytest.mark.search  # kit searches: run once, not again on the pure key path

SEARCH = settings(
    max_examples=200, stateful_step_count=25, deadline=None, database=None, derandomize=True
)
PAIRS = {  # planted bugs -> the finding id each must be reported under
    ("locked", "order"): ("INV-11:evict-locked-victim", "INV-11:evict-victim-order"),
    ("count", "short"): ("INV-11:evict-reported-counts", "INV-11:evict-short"),
    ("locked", "count"): ("INV-11:evict-locked-victim", "INV-11:evict-reported-counts"),
    ("crash_insert", "crash_evict"): (
        "AssertionError:insert@planted.insert",
        "AssertionError:evict@planted.evict",
    ),
}


def _search(bugs: tuple[str, ...], known: tuple[str, ...] = ()) -> dict[str, dict[str, object]]:
    factory = functools.partial(planted.factory, bugs=",".join(bugs))
    name = "planted_" + "_".join(bugs) + "".join(f"_k{len(k)}" for k in known)
    report = run_conformance(
        factory, profile=planted.PROFILE, settings=SEARCH, name=name, known=known
    )
    return {failure.finding: failure.trace for failure in report.failures}


def test_the_cache_without_bugs_conforms() -> None:
    assert _search(()) == {}


@pytest.mark.parametrize("bugs", list(PAIRS), ids=["+".join(pair) for pair in PAIRS])
def test_two_planted_bugs_are_two_findings_and_neither_hides_the_other(
    bugs: tuple[str, str],
) -> None:
    expected = PAIRS[bugs]
    found = _search(bugs)
    assert set(found) == set(expected)
    for fid, trace in found.items():  # each trace fails again, for its own reason only
        result = replay(trace, functools.partial(planted.factory, bugs=",".join(bugs)))
        assert result.finding == fid, result
        alone = next(b for b, e in zip(bugs, expected, strict=True) if e == fid)
        assert replay(trace, functools.partial(planted.factory, bugs=alone)).finding == fid
        assert replay(trace, planted.factory).passed  # the cache without bugs passes it
    for acknowledged in expected:
        left = _search(bugs, known=(acknowledged,))
        assert set(left) == set(expected) - {acknowledged}


def test_an_engine_assertion_is_keyed_by_where_it_was_raised() -> None:
    def engine_evict() -> None:
        assert False, "INV-11: looks like a kit message"  # noqa: B011

    with pytest.raises(AssertionError) as raised:
        engine_evict()
    fid = finding_id("evict", raised.value)
    assert fid == "AssertionError:evict@test_no_false_pass.engine_evict"
    assert finding_id("evict", Violation("INV-11: x", "locked-victim")) == (
        "INV-11:evict-locked-victim"
    )


class _ComplainsTwice(RadixCacheAdapter):
    """An adapter whose own check() fails in two different ways, on different nodes."""

    def check(self) -> None:
        sizes = self.sizes()
        if sizes.protected:
            raise AssertionError(f"node {sizes.protected} holds a lock nobody took")
        if sizes.total > 3:
            raise AssertionError(f"{sizes.total} tokens exceed a budget of 3")


def test_an_adapter_check_is_keyed_by_its_message() -> None:
    report = run_conformance(_ComplainsTwice, settings=SEARCH, name="complains_twice")
    ids = {failure.finding for failure in report.failures}
    assert ids == {
        "AssertionError:own-check-node-n-holds-a-lock-nobody-took",
        "AssertionError:own-check-n-tokens-exceed-a-budget-of-n",
    }


@pytest.mark.parametrize(
    ("factory", "mode"), [(sliding_window, "swa"), (mamba, "mamba"), (planted.factory, "swa")]
)
def test_a_capability_the_mode_has_no_rule_for_is_refused(factory: object, mode: str) -> None:
    """``priority`` has rules in the plain mode only; ``swa`` beside ``mamba`` would run the
    Mamba rules alone. Either claim is refused before any step, never listed as checked."""
    for claims in ({mode, "priority"}, {"swa", "mamba"}):
        with pytest.raises(AdapterError, match="rule set has no rules for"):
            machine_for("refused", factory, capabilities=frozenset(claims))  # type: ignore[arg-type]

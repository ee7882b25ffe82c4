"""A bug only the state explorer finds: ``planted`` ``held_after_reset``.

``PageMapCache.reset`` forgets to clear its per-page lock records, so after a lock, a reset
and the same key cached again, an unlock that no lock of this run matches is accepted
(INV-14). Five steps, one of them a reset: the random search draws a reset on one roll in
eight and seldom holds a lock across one, and ``--exhaustive 2`` stops at two steps; the
breadth-first state exploration reaches every state of the CI bounds, this one included,
and reports the shortest sequence to it as a replayable trace.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import radixkv_conformance.search_settings  # noqa: F401  # registers radixkv's "ci" profile
from hypothesis import settings
from radixkv_conformance import run_conformance
from radixkv_conformance.adapters import planted
from radixkv_conformance.explore.alphabet import ALPHABET
from radixkv_conformance.explore.bounds import parse_bounds
from radixkv_conformance.explore.sequences import explore, target
from radixkv_conformance.explore.states import explore_states
from radixkv_conformance.profile import RADIXKV
from radixkv_conformance.replay import replay

pytestmark = pytest.mark.search  # kit explorations: run once, not again on the pure key path

BUG = functools.partial(planted.factory, bugs="held_after_reset")
FINDING = "INV-14:unmatched-unlock"
BOUNDS = parse_bounds("tokens=1,length=1,locks=1")  # one page is enough for this bug


def _machine(factory: Any) -> Any:
    return target("HeldAfterReset", factory, RADIXKV).machine()


def test_the_random_search_misses_it() -> None:
    ci = settings.get_profile("ci")  # derandomized: the same runs as CI's search
    assert (ci.max_examples, ci.stateful_step_count, ci.derandomize) == (300, 50, True)
    report = run_conformance(BUG, profile=planted.PROFILE, settings=ci, name="held_after_reset")
    assert report.failures == []


def test_every_sequence_of_two_steps_misses_it() -> None:
    report = explore(_machine(BUG), ALPHABET, 2)
    assert report.passed and report.sequences > 2_000, report.render()


def test_the_state_explorer_finds_it_with_a_shortest_replayable_trace() -> None:
    report = explore_states(_machine(BUG), BOUNDS)
    assert list(report.findings) == [FINDING], report.render()
    found = report.findings[FINDING]
    assert [step.rule for step in found.calls] == [
        "extend_request",
        "lock",
        "reset",
        "extend_request",
        "unlock_without_lock",
    ]
    # shortest: no sequence of four steps over the same alphabet reaches it
    assert explore(_machine(BUG), BOUNDS.alphabet(), 4).passed
    assert found.trace
    assert replay(found.trace, BUG, RADIXKV).finding == FINDING
    assert replay(found.trace, planted.factory, RADIXKV).passed  # the cache without the bug
